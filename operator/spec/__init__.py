"""The InferenceService resource: spec, status and loading, one source for the CRD and `floodway up`."""

from floodway.operator.spec.models import InferenceServiceSpec
from floodway.operator.spec.resource import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    InferenceService,
    SpecError,
    load,
    parse,
    parse_spec,
)
from floodway.operator.spec.status import InferenceServiceStatus

__all__ = ["API_VERSION", "GROUP", "KIND", "PLURAL", "VERSION", "InferenceService", "InferenceServiceSpec",
           "InferenceServiceStatus", "SpecError", "load", "parse", "parse_spec"]
