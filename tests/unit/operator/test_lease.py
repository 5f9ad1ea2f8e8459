"""Leader election without a cluster: the pure decisions, and two electors against a stand-in Lease store that
keeps the API server's optimistic concurrency (a write with a stale resourceVersion gets 409)."""

import copy

import pytest
from floodway.operator.controller.kube import KubeError
from floodway.operator.controller.lease import (
    RENEW_DEADLINE,
    LeaderElector,
    LeaseView,
    Seen,
    lease_action,
    lost,
    observe,
    view_of,
)


@pytest.mark.parametrize("view, seen, action", [
    (None, None, "create"),
    (LeaseView("me", "t1", 15), Seen(("me", "t1"), 0.0), "renew"),
    (LeaseView("other", "t1", 15), Seen(("other", "t1"), 90.0), "wait"),
    (LeaseView("other", "t1", 15), Seen(("other", "t1"), 80.0), "acquire"),  # unchanged for 20 s > 15 s
    (LeaseView("", "t1", 15), Seen(("", "t1"), 100.0), "acquire"),  # released
    (LeaseView(None, None, 15), Seen((None, None), 100.0), "acquire"),
])
def test_lease_action(view, seen, action):
    assert lease_action(view, seen, "me", 100.0) == action


def test_expiry_follows_our_clock_not_the_holders_renew_time():
    """A renewTime far in the past (a skewed clock) does not let a standby take over: the record must stay
    unchanged for a whole duration from when this replica first saw it."""
    view = LeaseView("other", "1970-01-01T00:00:00.000000Z", 15)
    seen = observe(None, view, 1000.0)
    assert lease_action(view, seen, "me", 1000.0) == "wait"
    assert observe(seen, view, 1010.0) is seen  # same record: the clock keeps running
    assert lease_action(view, seen, "me", 1015.1) == "acquire"
    renewed = LeaseView("other", "1970-01-01T00:00:05.000000Z", 15)
    assert observe(seen, renewed, 1015.0) == Seen(("other", renewed.renew_time), 1015.0)  # a renewal restarts it


def test_a_leader_stops_before_a_standby_may_take_over():
    mine = Seen(("me", "t"), 0.0)
    assert not lost(mine, "me", renewed_at=100.0, now=100.0 + RENEW_DEADLINE * 15 - 0.1, duration_s=15)
    assert lost(mine, "me", renewed_at=100.0, now=100.0 + RENEW_DEADLINE * 15 + 0.1, duration_s=15)
    assert RENEW_DEADLINE < 1
    assert lost(Seen(("other", "t"), 0.0), "me", renewed_at=100.0, now=100.0, duration_s=15)  # taken: stop now


class LeaseStore:
    """Stand-in for the API server's Lease endpoint (get, create, replace) with resourceVersion checks."""

    def __init__(self):
        self.obj, self.version, self.down = None, 0, False

    def _check(self):
        if self.down:
            raise KubeError(503, "unavailable")

    def get(self, api_version, kind, namespace, name):
        self._check()
        return copy.deepcopy(self.obj)

    def create(self, obj):
        self._check()
        if self.obj is not None:
            raise KubeError(409, "exists")
        return self._store(obj)

    def replace(self, obj):
        self._check()
        if obj["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise KubeError(409, "conflict")
        return self._store(obj)

    def _store(self, obj):
        self.version += 1
        self.obj = copy.deepcopy(obj)
        self.obj["metadata"]["resourceVersion"] = str(self.version)
        return self.obj


def test_two_electors_one_leads_the_other_takes_over_after_the_duration():
    store = LeaseStore()
    a, b = (LeaderElector(store, "ns", "lease", who, duration_s=10) for who in ("a", "b"))
    assert a.try_once(0.0) and not b.try_once(0.0)
    for t in (2.0, 4.0, 6.0, 8.0, 10.0, 12.0):  # a renews; b keeps seeing new records and waits
        assert a.try_once(t) and not b.try_once(t + 0.5)
    # a dies (no more renewals): b waits one whole duration from the last record it saw, then acquires
    assert not b.try_once(22.0)
    assert b.try_once(22.6)
    spec = store.obj["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    # a comes back (a paused process): it sees b holding the Lease and must stop at once
    assert not a.try_once(23.0) and lost(a.seen, "a", a.renewed_at, 23.0, 10)


def test_a_stale_write_loses():
    """Two standbys acquire from the same record: the API server accepts one write, the other gets 409."""
    store = LeaseStore()
    LeaderElector(store, "ns", "lease", "dead", 10).try_once(0.0)
    b, c = (LeaderElector(store, "ns", "lease", who, 10) for who in ("b", "c"))
    b.try_once(1.0), c.try_once(1.0)
    stale = store.get("", "", "", "")
    assert b.try_once(12.0)
    with pytest.raises(KubeError) as err:
        store.replace(c._body(stale, 1, "c"))
    assert err.value.status == 409
    assert not c.try_once(12.0) and view_of(store.obj).holder == "b"


def test_release_hands_the_lease_back_and_a_standby_takes_it_at_once():
    store = LeaseStore()
    a, b = (LeaderElector(store, "ns", "lease", who, duration_s=10) for who in ("a", "b"))
    assert a.try_once(0.0) and not b.try_once(0.0)
    a.release()
    assert view_of(store.obj).holder == ""
    assert b.try_once(0.1)


def test_an_unreachable_api_server_makes_the_leader_give_up_within_the_deadline():
    store = LeaseStore()
    a = LeaderElector(store, "ns", "lease", "a", duration_s=10)
    assert a.try_once(0.0)
    store.down = True
    assert not a.try_once(2.0) and not lost(a.seen, "a", a.renewed_at, 2.0, 10)
    assert not a.try_once(6.1) and lost(a.seen, "a", a.renewed_at, 6.1, 10)
