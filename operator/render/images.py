"""Container images the operator deploys, set from the chart's values (environment variables)."""

import os
from dataclasses import dataclass

from floodway.operator.runtimes import RUNTIMES, runtime
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.version import __version__

# Images are tagged with the project version (e2e/images/build.sh, the chart's appVersion).
DEFAULT_TAG = __version__


@dataclass(frozen=True)
class Images:
    engine: str = f"floodway/engine:{DEFAULT_TAG}"
    gateway: str = f"floodway/operator:{DEFAULT_TAG}"
    vllm: str = RUNTIMES["vllm"].image
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
        if spec.engine.runtime == "vllm":
            return self.vllm
        return runtime(spec.engine.runtime).image or self.engine

    def gateway_image(self, spec: InferenceServiceSpec) -> str:
        return spec.gateway.image or self.gateway
