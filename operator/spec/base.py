"""Base of the spec models: camelCase field names as in Kubernetes, unknown fields refused, and cross-field
rules written once. Each Rule carries the CEL expression the CRD hands to the API server and the Python
predicate `floodway up` checks, with the same message, so both reject the same spec in the same words."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Rule:
    cel: str  # evaluated by the API server with `self` bound to this object
    message: str  # names the fields, so an error points at what to fix
    check: Callable[[Any], bool]  # the same rule in Python, for `floodway up` and the operator


class SpecModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              use_attribute_docstrings=True, validate_default=True)

    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self):
        for rule in self.RULES:
            if not rule.check(self):
                raise ValueError(rule.message)
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema, handler):
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        if cls.RULES:
            target["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in cls.RULES]
        return schema

    def dump(self) -> dict:
        """The Kubernetes shape: camelCase keys, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
