"""Where a service's model comes from: the claim holding its files, the claim shared as the download cache, and
its shape for the FitsGPU check when the operator cannot read config.json."""

import re
from typing import ClassVar

from floodway.operator.spec.base import Rule, SpecModel
from pydantic import Field

MODELS_DIR = "/models"


class ModelClaim(SpecModel):
    """A PersistentVolumeClaim holding the model's files (config.json, weights, tokenizer)."""

    RULES: ClassVar = (Rule("!self.path.startsWith('/') && !self.path.matches('(^|/)[.][.](/|$)')",
                            "storage.modelClaim.path must be relative to the claim, without '..'",
                            lambda c: not c.path.startswith("/") and not re.search(r"(^|/)[.][.](/|$)", c.path)),)

    name: str = Field(min_length=1)
    """Name of the PersistentVolumeClaim, in the service's namespace; mounted read-only at /models."""
    path: str = Field("", max_length=1024)
    """Folder inside the claim that holds config.json; the engine loads /models/<path>. Empty: the claim's root."""


class CacheClaim(SpecModel):
    """A PersistentVolumeClaim shared by the replicas as their download and compile cache."""

    name: str = Field(min_length=1)
    """Name of the PersistentVolumeClaim (ReadWriteMany to share it across nodes), mounted at /cache."""


class ModelShapeSpec(SpecModel):
    """The model's shape from its config.json, for the FitsGPU check when the operator cannot read the file
    (a Hub model not in its cache, or a model on a claim)."""

    hidden_size: int = Field(ge=1)
    """config.json hidden_size."""
    num_layers: int = Field(ge=1)
    """config.json num_hidden_layers."""
    num_heads: int = Field(ge=1)
    """config.json num_attention_heads."""
    num_kv_heads: int | None = Field(None, ge=1)
    """config.json num_key_value_heads (unset: num_heads, no GQA)."""
    vocab_size: int = Field(ge=1)
    """config.json vocab_size."""
    intermediate_size: int | None = Field(None, ge=1)
    """config.json intermediate_size (unset: 4 x hidden_size), for the parameter estimate."""
    head_dim: int | None = Field(None, ge=1)
    """config.json head_dim (unset: hidden_size / num_heads)."""
    max_position_embeddings: int | None = Field(None, ge=1)
    """config.json max_position_embeddings."""
    params: float | None = Field(None, gt=0)
    """Total parameters, e.g. 7.6e9 (unset: estimated from the shape, Llama style)."""

    def config(self) -> dict:
        """The shape as the config.json fields the planner reads."""
        cfg = {"hidden_size": self.hidden_size, "num_hidden_layers": self.num_layers,
               "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
               "vocab_size": self.vocab_size, "intermediate_size": self.intermediate_size,
               "head_dim": self.head_dim, "max_position_embeddings": self.max_position_embeddings}
        return {k: v for k, v in cfg.items() if v is not None}
