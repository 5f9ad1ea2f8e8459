"""Leader election on a coordination.k8s.io Lease, so that two operator replicas are safe: only the holder
reconciles; the other waits and takes over when the holder stops renewing. The decision is pure
(`lease_action`); LeaderElector is the thin shell that reads and writes the Lease."""

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from floodway.operator.controller.kube import Kube, KubeError

log = logging.getLogger("floodway.operator.lease")


@dataclass(frozen=True)
class LeaseView:
    holder: str | None
    renewed_at: float | None  # epoch seconds
    duration_s: float


def lease_action(view: LeaseView | None, me: str, now: float) -> str:
    """"create" (no Lease yet), "renew" (ours), "acquire" (free or expired) or "wait" (someone else holds it)."""
    if view is None:
        return "create"
    if view.holder == me:
        return "renew"
    if not view.holder or view.renewed_at is None or now - view.renewed_at > view.duration_s:
        return "acquire"
    return "wait"


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str | None) -> float | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def view_of(lease: dict | None) -> LeaseView | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return LeaseView(spec.get("holderIdentity"), parse_time(spec.get("renewTime")),
                     float(spec.get("leaseDurationSeconds") or 15))


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration_s: float = 15.0):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity, self.duration_s = identity, duration_s
        self.renewed_at = 0.0

    def _body(self, now: float, lease: dict | None, transitions: int) -> dict:
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration_s),
                "renewTime": micro_time(now), "leaseTransitions": transitions}
        prev = (lease or {}).get("spec") or {}
        spec["acquireTime"] = prev.get("acquireTime") if prev.get("holderIdentity") == self.identity \
            else micro_time(now)
        meta = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def try_once(self, now: float) -> bool:
        """One attempt to hold the Lease; True while we hold it. Conflicts mean another replica won."""
        try:
            lease = self.kube.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
            action = lease_action(view_of(lease), self.identity, now)
            if action == "wait":
                return False
            transitions = int(((lease or {}).get("spec") or {}).get("leaseTransitions") or 0)
            if action == "create":
                self.kube.create(self._body(now, None, 0))
            else:
                self.kube.replace(self._body(now, lease, transitions + (action == "acquire")))
        except KubeError as e:
            if e.status != 409:
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
            body = self._body(time.time(), lease, int(lease["spec"].get("leaseTransitions") or 0))
            body["spec"]["holderIdentity"] = ""
            self.kube.replace(body)
            log.info("released lease %s/%s", self.namespace, self.name)
        except KubeError as e:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, e)

    def wait_until_leader(self, stop: threading.Event) -> bool:
        period = self.duration_s / 3
        while not stop.is_set():
            if self.try_once(time.time()):
                log.info("holding lease %s/%s as %s", self.namespace, self.name, self.identity)
                return True
            stop.wait(period)
        return False

    def keep_renewing(self, stop: threading.Event, on_lost) -> None:
        """Renews until stop; calls on_lost() once the Lease could not be renewed within its duration."""
        period = self.duration_s / 3
        while not stop.wait(period):
            now = time.time()
            if not self.try_once(now) and now - self.renewed_at > self.duration_s:
                log.error("lost lease %s/%s; stopping so that the new holder reconciles alone", self.namespace,
                          self.name)
                on_lost()
                return
