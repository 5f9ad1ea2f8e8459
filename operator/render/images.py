"""Container images the operator deploys, set from the chart's values (environment variables)."""

import os
from dataclasses import dataclass

from floodway.operator.spec import InferenceServiceSpec

DEFAULT_TAG = "0.1.0"


@dataclass(frozen=True)
class Images:
    engine: str = f"floodway/engine:{DEFAULT_TAG}"
    gateway: str = f"floodway/operator:{DEFAULT_TAG}"
    vllm: str = "vllm/vllm-openai:v0.10.2"
    pull_policy: str = "IfNotPresent"

    @classmethod
    def from_env(cls, env=None) -> "Images":
        env = os.environ if env is None else env
        d = cls()
        return cls(engine=env.get("FLOODWAY_ENGINE_IMAGE", d.engine),
                   gateway=env.get("FLOODWAY_GATEWAY_IMAGE", d.gateway),
                   vllm=env.get("FLOODWAY_VLLM_IMAGE", d.vllm),
                   pull_policy=env.get("FLOODWAY_IMAGE_PULL_POLICY", d.pull_policy))

    def engine_image(self, spec: InferenceServiceSpec) -> str:
        if spec.engine.image:
            return spec.engine.image
        return self.engine if spec.engine.runtime == "floodway" else self.vllm

    def gateway_image(self, spec: InferenceServiceSpec) -> str:
        return spec.gateway.image or self.gateway
