"""Local engine replicas: one process per slot on a port fixed up front (the gateway's static backend list
names every slot; a slot without a ready engine is simply unready there). Starting and stopping run in
background threads so that the control loop never blocks on a model load or a drain."""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from floodway.operator import procs

log = logging.getLogger("floodway.up")


@dataclass
class EngineSlot:
    index: int
    port: int
    state: str = "stopped"  # stopped | starting | ready | stopping
    proc: procs.Proc | None = None
    error: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class EnginePool:
    def __init__(self, ports: list[int], argv: Callable[[int], list[str]], env: dict[str, str], log_dir: str,
                 ready_path: str, start_timeout_s: float, stop_grace_s: float):
        self.slots = [EngineSlot(i, p) for i, p in enumerate(ports)]
        self.argv, self.env, self.log_dir, self.ready_path = argv, env, log_dir, ready_path
        self.timeout, self.grace = start_timeout_s, stop_grace_s
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.closing = False

    def _start(self, slot: EngineSlot) -> None:
        try:
            proc = procs.start(self.argv(slot.port), slot.port, self.ready_path, self.timeout, env=self.env,
                               log_path=f"{self.log_dir}/engine-{slot.index}.log")
        except RuntimeError as e:
            with self.lock:
                slot.state, slot.error = "stopped", str(e)[-2000:]
            log.error("engine %d failed to start: %s", slot.index, slot.error)
            return
        with self.lock:
            slot.state, slot.proc, slot.error = "ready", proc, None
            closing = self.closing
        if closing:  # stop_all ran while this engine was loading
            self._stop(slot)

    def _stop(self, slot: EngineSlot) -> None:
        slot.proc.stop(self.grace)
        with self.lock:
            slot.state, slot.proc = "stopped", None

    def _spawn(self, target, slot: EngineSlot) -> None:
        t = threading.Thread(target=target, args=(slot,), daemon=True, name=f"engine-{slot.index}")
        self.threads.append(t)
        t.start()

    def scale_to(self, n: int) -> None:
        """Lower slots run, higher ones stop. A slot still loading finishes loading first (it cannot be
        interrupted cleanly); the next call stops it if it is still not wanted."""
        with self.lock:
            if self.closing:
                return
            for slot in self.slots:
                if slot.index < n and slot.state == "stopped":
                    slot.state = "starting"
                    self._spawn(self._start, slot)
                elif slot.index >= n and slot.state == "ready":
                    if slot.proc is not None and not slot.proc.alive():
                        slot.state, slot.proc = "stopped", None
                        continue
                    slot.state = "stopping"
                    self._spawn(self._stop, slot)

    def ready(self) -> dict[str, str]:
        with self.lock:
            return {f"engine-{s.index}": s.url for s in self.slots
                    if s.state == "ready" and s.proc is not None and s.proc.alive()}

    def counts(self) -> tuple[int, int, int]:
        """(replicas that exist or start, ready, starting)."""
        with self.lock:
            starting = sum(s.state == "starting" for s in self.slots)
            ready = sum(s.state == "ready" for s in self.slots)
        return ready + starting, ready, starting

    def stop_all(self) -> None:
        with self.lock:
            self.closing = True
            running = [s for s in self.slots if s.state == "ready" and s.proc is not None]
            for s in running:
                s.state = "stopping"
        for s in running:
            self._spawn(self._stop, s)
        for t in list(self.threads):
            t.join(timeout=self.grace + 5)
