"""The whole InferenceService object, and loading it from YAML with errors that name the field."""

from pathlib import Path

import yaml
from floodway.operator.spec.base import Rule
from floodway.operator.spec.models import InferenceServiceSpec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

GROUP = "serving.floodway.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceService"
PLURAL = "inferenceservices"

# Child names append "-gateway" (8 characters) and must stay valid 63-character DNS labels.
MAX_NAME_LENGTH = 55
NAME_RULE = Rule(f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
                 f"metadata.name must be at most {MAX_NAME_LENGTH} characters",
                 lambda obj: len(obj.metadata.name) <= MAX_NAME_LENGTH)


class SpecError(ValueError):
    """An InferenceService that the API server would refuse too; the message names each bad field."""


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = "default"


class InferenceService(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = KIND
    metadata: Metadata
    spec: InferenceServiceSpec


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "spec"
        lines.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def parse(doc: dict) -> InferenceService:
    """Validates a manifest dict with the same rules as the CRD; raises SpecError."""
    if not isinstance(doc, dict):
        raise SpecError("an InferenceService manifest must be a mapping")
    if doc.get("apiVersion", API_VERSION) != API_VERSION or doc.get("kind", KIND) != KIND:
        raise SpecError(f"expected apiVersion {API_VERSION} and kind {KIND}, got "
                        f"{doc.get('apiVersion')} {doc.get('kind')}")
    try:
        obj = InferenceService.model_validate(doc)
    except ValidationError as e:
        raise SpecError(_describe(e)) from None
    if not NAME_RULE.check(obj):
        raise SpecError(NAME_RULE.message)
    return obj


def parse_spec(spec: dict) -> InferenceServiceSpec:
    """Validates only the spec part (as the operator receives it); raises SpecError naming spec.<field>."""
    try:
        return InferenceServiceSpec.model_validate(spec or {})
    except ValidationError as e:
        raise SpecError("\n".join("spec." + line for line in _describe(e).splitlines())) from None


def load(path: str | Path) -> InferenceService:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read {path}: {e}") from None
    return parse(doc)
