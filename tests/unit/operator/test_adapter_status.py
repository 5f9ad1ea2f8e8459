"""LoRA adapters in the InferenceService status: what each ready replica's /v1/models lists (vLLM's shape: adapters
carry their base model as `parent`), the reasons our engine's /debug/engine gives for a startup adapter that did not
load, the AdaptersReady condition and its event; the base model keeps the service Ready. The HTTP side is served by
httpx's in-process transport; the engine's own answers are pinned by tests/integration/server."""

import httpx
import pytest
from floodway.operator.controller.adapters import (
    UNLISTED,
    ReplicaAdapters,
    adapter_report,
    failed_adapters,
    listed_adapters,
)
from floodway.operator.controller.conditions import transition_events
from floodway.operator.controller.scrape import scrape_adapters
from floodway.operator.controller.status import Observation, build_status
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.status import InferenceServiceStatus

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
BASE = "base"
ADAPTERS = [{"name": "fmt", "source": "adapters/fmt"}, {"name": "sql", "source": "adapters/sql"}]
NO_CONFIG = "'/models/adapters/sql' has no adapter_config.json (a PEFT adapter folder has it)"


def models_body(*adapters: str) -> dict:
    """/v1/models as vLLM and our engine answer it."""
    cards = [{"id": BASE, "object": "model", "owned_by": "vllm", "root": BASE, "parent": None}]
    return {"object": "list", "data": cards + [{"id": a, "object": "model", "owned_by": "vllm", "root": f"/p/{a}",
                                                "parent": BASE} for a in adapters]}


def spec(**kw) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": BASE, "adapters": ADAPTERS, **kw})


def conds(status: dict) -> dict:
    return {c["type"]: c for c in status["conditions"]}


def test_adapters_are_the_cards_with_a_parent_and_other_bodies_are_refused():
    assert listed_adapters(models_body("sql", "fmt")) == ("fmt", "sql")
    assert listed_adapters(models_body()) == ()
    assert failed_adapters({"stats": {}, "failed_lora_adapters": [{"name": "sql", "path": "/p", "reason": "r"}]}) \
        == (("sql", "r"),)
    assert failed_adapters({"stats": {}}) == ()  # an engine from before the field, or without LoRA
    for bad in ([], {"data": 3}, {"data": [{"parent": BASE}]}, "text"):
        with pytest.raises(ValueError):
            listed_adapters(bad)
    with pytest.raises(ValueError):
        failed_adapters({"failed_lora_adapters": [{"name": "x"}]})


def test_every_replica_serving_every_adapter_is_adapters_ready():
    r = adapter_report(["fmt", "sql"], {"b": ReplicaAdapters(("fmt", "sql")),
                                        "a": ReplicaAdapters(("extra", "fmt", "sql"))})
    assert r.replicas == [{"replica": "a", "loaded": ["extra", "fmt", "sql"]},  # by name; extra: loaded by API
                          {"replica": "b", "loaded": ["fmt", "sql"]}]
    assert r.condition == ("True", "AdaptersLoaded", "2 adapter(s) loaded on every ready replica (2)")


def test_a_failed_adapter_is_named_with_the_engines_reason_and_its_replicas():
    r = adapter_report(["fmt", "sql"], {"e-1": ReplicaAdapters(("fmt",), (("sql", NO_CONFIG),)),
                                        "e-2": ReplicaAdapters(("fmt", "sql"))})
    assert r.replicas[0] == {"replica": "e-1", "loaded": ["fmt"], "missing": [{"name": "sql", "reason": NO_CONFIG}]}
    assert r.condition == ("False", "AdapterLoadFailed",
                           f"adapter 'sql' is not loaded on 1 of 2 ready replica(s) (e-1): {NO_CONFIG}")


def test_an_adapter_absent_without_a_reason_is_not_loaded():
    # vLLM gives no reason (its /debug/engine does not exist), nor does an adapter unloaded through the API.
    r = adapter_report(["fmt"], {"e-1": ReplicaAdapters(())})
    assert r.condition == ("False", "AdapterNotLoaded", f"adapter 'fmt' is not loaded on 1 of 1 ready replica(s) "
                                                        f"(e-1): {UNLISTED}")
    assert r.replicas == [{"replica": "e-1", "loaded": [], "missing": [{"name": "fmt", "reason": UNLISTED}]}]


def test_no_ready_replica_leaves_the_condition_alone():
    r = adapter_report(["fmt"], {})
    assert (r.replicas, r.condition) == ([], None)


def test_the_message_names_a_bounded_number_of_adapters_and_replicas():
    wanted = [f"a{i}" for i in range(5)]
    replicas = {f"e-{i}": ReplicaAdapters(()) for i in range(5)}
    _, _, message = adapter_report(wanted, replicas).condition
    assert message.count("adapter '") == 3 and "; and 2 more adapter(s)" in message
    assert "(e-0, e-1, e-2 and 2 more)" in message


def test_status_with_a_failed_adapter_stays_ready_and_warns_once_by_event():
    obs = Observation(replicas=1, ready_replicas=1, desired_replicas=1, gateway_ready=True,
                      adapters={"e-1": ReplicaAdapters(("fmt",), (("sql", NO_CONFIG),))})
    st = build_status(spec(), {}, obs, T0, 3, "", "")
    c = conds(st)
    assert c["Ready"]["status"] == "True"  # the base model and fmt serve on
    assert (c["AdaptersReady"]["status"], c["AdaptersReady"]["reason"]) == ("False", "AdapterLoadFailed")
    assert st["adapters"] == [{"replica": "e-1", "loaded": ["fmt"], "missing": [{"name": "sql", "reason": NO_CONFIG}]}]
    InferenceServiceStatus.model_validate(st)  # the status fits the CRD's status schema (generated from this model)
    events = [e for e in transition_events([], st["conditions"]) if e.reason == "AdapterLoadFailed"]
    assert [e.type for e in events] == ["Warning"] and "'sql'" in events[0].message and NO_CONFIG in events[0].message
    again = build_status(spec(), st, obs, T1, 3, "", "")
    assert transition_events(st["conditions"], again["conditions"]) == []  # unchanged: no event spam
    fixed = build_status(spec(), again, Observation(adapters={"e-1": ReplicaAdapters(("fmt", "sql"))}), T1, 3, "", "")
    assert [(e.type, e.reason) for e in transition_events(again["conditions"], fixed["conditions"])] == \
        [("Normal", "AdaptersLoaded")]


def test_status_keeps_what_it_did_not_look_at_and_drops_it_with_the_adapters():
    seen = build_status(spec(), {}, Observation(adapters={"e-1": ReplicaAdapters(("fmt", "sql"))}), T0, 1, "", "")
    kept = build_status(spec(), seen, Observation(), T1, 1, "", "")  # e.g. the reconcile handler: no scrape
    assert kept["adapters"] == seen["adapters"] and conds(kept)["AdaptersReady"] == conds(seen)["AdaptersReady"]
    none_ready = build_status(spec(), seen, Observation(adapters={}), T1, 1, "", "")
    assert none_ready["adapters"] == [] and conds(none_ready)["AdaptersReady"]["status"] == "True"
    gone = build_status(spec(adapters=[]), seen, Observation(adapters={}), T1, 1, "", "")
    assert gone["adapters"] is None and "AdaptersReady" not in conds(gone)  # null: removed by the merge patch
    assert "adapters" not in build_status(spec(adapters=[]), {}, Observation(), T1, 1, "", "")


def client(pages: dict[str, object], asked: list[str]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        asked.append(url)
        body = pages.get(url)
        return httpx.Response(404) if body is None else httpx.Response(200, json=body)
    return httpx.Client(transport=httpx.MockTransport(answer))


def test_scrape_reads_models_and_asks_why_only_where_an_adapter_is_missing():
    pages = {"http://ok/v1/models": models_body("fmt", "sql"),
             "http://bad/v1/models": models_body("fmt"),
             "http://bad/debug/engine": {"failed_lora_adapters": [{"name": "sql", "path": "/p", "reason": "gone"}]},
             "http://vllm/v1/models": models_body("fmt")}  # vLLM: no /debug/engine, so no reason
    asked: list[str] = []
    got = scrape_adapters({"ok": "http://ok", "bad": "http://bad", "vllm": "http://vllm", "down": "http://down"},
                          ["fmt", "sql"], client(pages, asked))
    assert got == {"ok": ReplicaAdapters(("fmt", "sql")), "bad": ReplicaAdapters(("fmt",), (("sql", "gone"),)),
                   "vllm": ReplicaAdapters(("fmt",))}  # down: its /v1/models unread, left out this tick
    assert "http://ok/debug/engine" not in asked and "http://down/debug/engine" not in asked
