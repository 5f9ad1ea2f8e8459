"""Leader election on a coordination.k8s.io Lease, so that two operator replicas are safe: only the holder
reconciles; the other waits and takes over when the holder stops renewing. The decisions are pure
(`lease_action`, `observe`, `lost`); LeaderElector is the thin shell that reads and writes the Lease.

A standby judges expiry by its own clock, from when it first saw the current record (as client-go does), so
clock skew between nodes cannot make it take over early. A leader that cannot renew gives up at
RENEW_DEADLINE of the duration, before any standby may take over."""

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from floodway.operator.controller.kube import Kube, KubeError

log = logging.getLogger("floodway.operator.lease")
RETRY = 0.2  # of the duration: how often to try to renew or acquire
RENEW_DEADLINE = 0.6  # of the duration: a leader that could not renew for this long stops leading


@dataclass(frozen=True)
class LeaseView:
    holder: str | None
    renew_time: str | None  # as written: with the holder, identifies one renewal
    duration_s: float


@dataclass(frozen=True)
class Seen:
    """The record this replica last saw, and when (its own monotonic clock) that record first appeared."""
    record: tuple[str | None, str | None]
    at: float


def observe(seen: Seen | None, view: LeaseView | None, now: float) -> Seen | None:
    """Updates what this replica saw: a new record (holder, renewTime) restarts its clock."""
    if view is None:
        return None
    record = (view.holder, view.renew_time)
    return seen if seen is not None and seen.record == record else Seen(record, now)


def lease_action(view: LeaseView | None, seen: Seen | None, me: str, now: float) -> str:
    """"create" (no Lease yet), "renew" (ours), "acquire" (released, or unchanged for longer than its duration by
    our clock) or "wait" (someone else holds it)."""
    if view is None:
        return "create"
    if view.holder == me:
        return "renew"
    if not view.holder or seen is None or now - seen.at > view.duration_s:
        return "acquire"
    return "wait"


def lost(seen: Seen | None, me: str, renewed_at: float, now: float, duration_s: float) -> bool:
    """A leader must stop acting once another replica holds the Lease, or it could not renew within the renew
    deadline (the API server unreachable: by then a standby may be about to take over)."""
    if seen is not None and seen.record[0] != me:
        return True
    return now - renewed_at > RENEW_DEADLINE * duration_s


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def view_of(lease: dict | None) -> LeaseView | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return LeaseView(spec.get("holderIdentity"), spec.get("renewTime"), float(spec.get("leaseDurationSeconds") or 15))


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration_s: float = 15.0):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity, self.duration_s = identity, duration_s
        self.renewed_at = 0.0  # monotonic
        self.seen: Seen | None = None

    def _body(self, lease: dict | None, transitions: int, holder: str) -> dict:
        stamp = micro_time(time.time())
        spec = {"holderIdentity": holder, "leaseDurationSeconds": int(self.duration_s), "renewTime": stamp,
                "leaseTransitions": transitions}
        prev = (lease or {}).get("spec") or {}
        spec["acquireTime"] = prev.get("acquireTime") if prev.get("holderIdentity") == holder else stamp
        meta = {"name": self.name, "namespace": self.namespace}
        if lease is not None:  # optimistic concurrency: of two replicas writing the same version, one gets 409
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def try_once(self, now: float) -> bool:
        """One attempt to hold the Lease (now: monotonic); True while we hold it."""
        try:
            lease = self.kube.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
            view = view_of(lease)
            self.seen = observe(self.seen, view, now)
            action = lease_action(view, self.seen, self.identity, now)
            if action == "wait":
                return False
            transitions = int(((lease or {}).get("spec") or {}).get("leaseTransitions") or 0)
            if action == "create":
                self.kube.create(self._body(None, 0, self.identity))
            else:
                self.kube.replace(self._body(lease, transitions + (action == "acquire"), self.identity))
            if action != "renew":
                log.info("%s lease %s/%s as %s", action, self.namespace, self.name, self.identity)
        except KubeError as e:
            if e.status != 409:  # a conflict means another replica wrote first
                log.warning("lease %s/%s: %s", self.namespace, self.name, e)
            return False
        self.renewed_at = now
        return True

    def release(self) -> None:
        """Hands the Lease back on a clean exit, so a standby takes over at once rather than after expiry."""
        try:
            lease = self.kube.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
            if view_of(lease) is None or view_of(lease).holder != self.identity:
                return
            self.kube.replace(self._body(lease, int(lease["spec"].get("leaseTransitions") or 0), ""))
            log.info("released lease %s/%s", self.namespace, self.name)
        except KubeError as e:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, e)

    def wait_until_leader(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self.try_once(time.monotonic()):
                log.info("holding lease %s/%s as %s", self.namespace, self.name, self.identity)
                return True
            stop.wait(RETRY * self.duration_s)
        return False

    def keep_renewing(self, stop: threading.Event, on_lost) -> None:
        """Renews until stop; calls on_lost() once the Lease could not be renewed within the renew deadline."""
        while not stop.wait(RETRY * self.duration_s):
            now = time.monotonic()
            if not self.try_once(now) and lost(self.seen, self.identity, self.renewed_at, now, self.duration_s):
                log.error("lost lease %s/%s; stopping so that the new holder reconciles alone", self.namespace,
                          self.name)
                on_lost()
                return
