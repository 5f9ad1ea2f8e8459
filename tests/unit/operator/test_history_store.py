"""A service's traffic history across an operator restart: the ConfigMap it is saved in (name, owner reference,
binaryData as the API server returns it), a damaged or foreign one, the once-a-minute save rule, and status.history
(the schema the CRD is generated from accepts it)."""

import json
import logging
import time

from floodway.operator.autoscaler.history import History
from floodway.operator.autoscaler.signals import Signals
from floodway.operator.controller.history_store import (
    KEY,
    due,
    history_configmap,
    history_conflict,
    history_name,
    saved_history,
)
from floodway.operator.controller.status import Observation, build_status
from floodway.operator.render import Owner
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.status import InferenceServiceStatus

OWNER = Owner("chat", "serving", "uid-1")
T = 1_796_080_200.0  # 2026-11-30T23:10:00Z, a minute's start


def history() -> History:
    h = History()
    for minute, requests in ((0, 12.0), (1, 0.0), (3, 40.5)):
        h.add(T + 60 * minute + 5, requests, 100 * requests)
    return h


def as_stored(obj: dict) -> dict:
    """What a GET returns: the object through JSON, with the fields the API server adds."""
    live = json.loads(json.dumps(obj))
    live["metadata"] |= {"uid": "cm-uid", "resourceVersion": "7"}
    return live


def test_the_configmap_round_trips_the_history():
    h = history()
    obj = history_configmap(OWNER, h)
    back = saved_history(as_stored(obj))
    assert back.buckets == h.buckets and back.day_s == h.day_s and back.since() == T


def test_the_configmap_is_named_for_the_service_and_collected_with_it():
    meta = history_configmap(OWNER, History())["metadata"]
    assert meta["name"] == history_name(OWNER) == "chat-history" and meta["namespace"] == "serving"
    assert meta["ownerReferences"] == [{"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
                                        "name": "chat", "uid": "uid-1", "controller": True,
                                        "blockOwnerDeletion": True}]
    assert meta["labels"]["app.kubernetes.io/instance"] == "chat"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "floodway-operator"


def test_none_or_a_damaged_configmap_starts_a_new_history(caplog):
    assert saved_history(None).buckets == {}
    good = as_stored(history_configmap(OWNER, history()))
    damaged = [{**good, "binaryData": {KEY: good["binaryData"][KEY][:40]}},  # truncated
               {**good, "binaryData": {KEY: "bm90IGd6aXA="}},  # base64 of something else
               {**good, "binaryData": None}]  # emptied by hand
    with caplog.at_level(logging.WARNING, "floodway.operator"):
        for live in damaged:
            assert saved_history(live).buckets == {}
    assert len(caplog.records) == 3 and all("serving/chat-history" in r.getMessage() for r in caplog.records)


def test_a_configmap_the_service_does_not_own_is_left_alone():
    live = as_stored(history_configmap(OWNER, history()))
    assert history_conflict(None, OWNER) is None and history_conflict(live, OWNER) is None
    users = {**live, "metadata": {k: v for k, v in live["metadata"].items() if k != "ownerReferences"}}
    assert "ConfigMap serving/chat-history already exists" in history_conflict(users, OWNER)
    assert history_conflict(live, Owner("chat", "serving", "uid-of-a-new-chat"))  # a deleted namesake's


def test_it_saves_at_once_then_once_a_minute():
    assert due(None, T + 59, 60.0)  # nothing saved yet: the ConfigMap appears on the first tick
    assert not due(T + 1, T + 59.9, 60.0)  # the same minute
    assert due(T + 59.9, T + 60.0, 60.0)  # a new minute began, however soon after
    assert due(T + 1, T + 600, 60.0)


def spec(lead: float | None = None) -> InferenceServiceSpec:
    autoscaling = {} if lead is None else {"forecastLeadSeconds": lead}
    return InferenceServiceSpec.model_validate({"model": "m", "autoscaling": autoscaling})


def test_the_status_reports_the_history_the_forecast_reads():
    st = build_status(spec(), {}, Observation(history=history(), signals=Signals(expected_arrival_rate=0.25)),
                      "2026-11-30T23:14:00Z", 1, "", "")
    assert st["history"] == {"since": "2026-11-30T23:10:00Z", "minutes": 3, "expectedRequestsPerSecond": 0.25}
    InferenceServiceStatus.model_validate(st)  # the status fits the CRD's status schema (generated from the model)
    quiet = build_status(spec(), {}, Observation(history=history(), signals=Signals()), "T", 1, "", "")
    assert "expectedRequestsPerSecond" not in quiet["history"]
    # a reconcile does not look at the history: the field stays; an empty one (no tick yet) shows nothing
    assert build_status(spec(), st, Observation(), "T", 1, "", "")["history"] == st["history"]
    assert "history" not in build_status(spec(), {}, Observation(history=History()), "T", 1, "", "")


def test_without_a_forecast_the_status_has_no_history():
    assert "history" not in build_status(spec(0), {}, Observation(history=history()), "T", 1, "", "")
    before = {"history": {"since": "2026-11-30T23:10:00Z", "minutes": 3}}
    assert build_status(spec(0), before, Observation(), "T", 1, "", "")["history"] is None  # removed (merge patch)


def test_floodway_up_keeps_the_history_in_its_workdir(tmp_path):
    """`floodway up --workdir DIR` saves the history there on its first tick (then once a minute) and a second run in
    the same folder starts from it; a damaged file starts a new one. The pool is not started: no engine runs."""
    from floodway.operator.local.runner import HISTORY_FILE, LocalRunner
    from floodway.operator.spec import InferenceService

    def runner():
        r = LocalRunner(InferenceService(metadata={"name": "chat"}, spec={"model": "floodway/tiny-llama"}),
                        str(tmp_path), 1, None)
        r.pool.scale_to = lambda n: None
        return r
    first = runner()
    earlier = time.time() - 120  # two minutes ago: the tick adds to its own minute
    first.loop.history.add(earlier, 7.0, 700.0)
    first.step()
    minute = int(earlier // 60)
    assert History.loads((tmp_path / HISTORY_FILE).read_text()).buckets[minute] == (7.0, 700.0)
    assert runner().loop.history.buckets[minute] == (7.0, 700.0)
    (tmp_path / HISTORY_FILE).write_text("damaged")
    assert runner().loop.history.buckets == {}
