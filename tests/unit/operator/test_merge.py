"""The strategic merge of engine.podTemplate: what `kubectl patch --type strategic` does on a pod template."""

from floodway.operator.render.merge import strategic_merge

BASE = {"metadata": {"labels": {"a": "1"}},
        "spec": {"containers": [{"name": "engine", "image": "e:1", "env": [{"name": "X", "value": "1"}],
                                 "args": ["--a", "1"]}],
                 "volumes": [{"name": "cache", "emptyDir": {}}], "tolerations": [{"key": "t"}]}}


def test_maps_merge_and_null_deletes():
    out = strategic_merge(BASE, {"metadata": {"labels": {"b": "2", "a": None}}, "spec": {"hostname": "h"}})
    assert out["metadata"]["labels"] == {"b": "2"} and out["spec"]["hostname"] == "h"
    assert BASE["metadata"]["labels"] == {"a": "1"}  # inputs untouched


def test_lists_with_a_merge_key_merge_item_by_item():
    out = strategic_merge(BASE, {"spec": {"containers": [
        {"name": "engine", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "3"}]},
        {"name": "sidecar", "image": "s:1"}]}})
    engine, sidecar = out["spec"]["containers"]
    assert engine["image"] == "e:1" and engine["env"] == [{"name": "X", "value": "3"}, {"name": "Y", "value": "2"}]
    assert sidecar == {"name": "sidecar", "image": "s:1"}


def test_other_lists_are_replaced():
    out = strategic_merge(BASE, {"spec": {"containers": [{"name": "engine", "args": ["--b"]}],
                                          "tolerations": [{"key": "u"}]}})
    assert out["spec"]["containers"][0]["args"] == ["--b"] and out["spec"]["tolerations"] == [{"key": "u"}]


def test_patch_directives():
    out = strategic_merge(BASE, {"spec": {"volumes": [{"name": "cache", "$patch": "delete"}]}})
    assert out["spec"]["volumes"] == []
    out = strategic_merge(BASE, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}})
    assert out["metadata"]["labels"] == {"c": "3"}


def test_an_item_without_its_merge_key_is_added_as_written():
    # The API server then refuses the Deployment naming the missing field (an ApplyFailed event).
    out = strategic_merge(BASE, {"spec": {"containers": [{"image": "x"}]}})
    assert out["spec"]["containers"][1] == {"image": "x"} and out["spec"]["containers"][0]["name"] == "engine"
