"""`bench serve --target`: the model name comes from the target's /v1/models."""

import re

import pytest
from floodway.engine.bench.serve_cli import served_model


def test_the_one_listed_model_is_used():
    assert served_model({"object": "list", "data": [{"id": "org/m", "object": "model"}]}) == "org/m"


@pytest.mark.parametrize("listing,named", [({"data": []}, "0 models (none)"), ({}, "0 models"),
                                           ({"data": [{"id": "a"}, {"id": "b"}]}, "2 models (a, b)")])
def test_none_or_several_ask_for_model(listing, named):
    with pytest.raises(ValueError, match=re.escape(named) + ".*pass --model"):
        served_model(listing)
