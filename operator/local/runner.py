"""`floodway up`'s shell around the control loop (controller/loop.py, the operator's too), acting on processes."""

import json
import os
import time
from pathlib import Path

import yaml
from floodway.operator import procs
from floodway.operator.autoscaler.history import restore
from floodway.operator.controller.history_store import due
from floodway.operator.controller.loop import first_state, step, tick_status
from floodway.operator.controller.scrape import scrape, scrape_adapters
from floodway.operator.controller.status import Observation, now_rfc3339
from floodway.operator.local.cluster_only import engine_env
from floodway.operator.local.pool import EnginePool
from floodway.operator.render.engine import engine_args, ready_path
from floodway.operator.render.gateway import API_KEY_ENV, gateway_config
from floodway.operator.spec import InferenceService

HISTORY_FILE = "history"  # in the workdir: History.dumps(), as the operator's ConfigMap holds it


def status_line(name: str, status: dict) -> str:
    o = status.get("observed", {})
    conds = {c["type"]: c["status"] for c in status.get("conditions", [])}

    def num(key, fmt="{:.2f}"):
        return "-" if o.get(key) is None else fmt.format(o[key])

    return (f"{name}: replicas {status.get('readyReplicas', 0)}/{status.get('desiredReplicas', 0)} ready  "
            f"waiting {num('waiting', '{:g}')}  running {num('running', '{:g}')}  kv {num('kvCacheUsage')}  "
            f"slo {num('sloAttainment')}  arrivals/s {num('arrivalRate')}  overflow {num('overflowRate')}  "
            f"{'OVERFLOWING  ' if conds.get('Overflowing') == 'True' else ''}"
            + (f"| last scale: {status['lastScaleReason']}" if status.get("lastScaleReason") else "")).rstrip()


class LocalRunner:
    def __init__(self, obj: InferenceService, workdir: str, port: int, api_key: str | None,
                 host: str = "127.0.0.1", status_file: str | None = None):
        self.obj, self.spec = obj, obj.spec
        self.workdir, self.host, self.port, self.api_key = Path(workdir), host, port, api_key
        self.status_file = status_file
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports = [procs.free_port() for _ in range(self.spec.replicas.max)]
        e = self.spec.engine  # as in a pod: the startup probe's budget, then the termination grace period
        self.pool = EnginePool(ports, self._engine_argv, engine_env(self.spec), str(self.workdir),
                               ready_path(self.spec), e.startup_timeout_seconds, e.termination_grace_period_seconds)
        self.gateway: procs.Proc | None = None
        # The traffic history lives in the workdir, so `floodway up --workdir DIR` run again goes on with it.
        self.history_file, self.history_saved = self.workdir / HISTORY_FILE, None
        saved = self.history_file.read_text() if self.history_file.is_file() else None
        self.loop = first_state(None, self.spec, restore(saved, str(self.history_file)))
        self.status: dict = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _engine_argv(self, port: int) -> list[str]:
        return [*procs.FLOODWAY_ARGV, "engine", *engine_args(self.spec, "127.0.0.1", port)]

    def start(self) -> None:
        backends = {"static": [s.url for s in self.pool.slots]}
        config = gateway_config(self.spec, backends, self.port, self.host)
        if not self.spec.overflow.enabled:
            config["overflow"].pop("api_key_env", None)
        path = self.workdir / "gateway.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        env = {API_KEY_ENV: self.api_key} if self.api_key else {}
        self.pool.scale_to(self.loop.scaler.replicas)
        self.gateway = procs.start([*procs.FLOODWAY_ARGV, "gateway", "--config", str(path)], self.port, "/health",
                                   60.0, env=env, log_path=str(self.workdir / "gateway.log"))

    def step(self) -> dict:
        """One tick: scrape, the loop's step, act on processes, and the status the operator would write."""
        _, _, starting = self.pool.counts()
        wall, engines = time.time(), self.pool.ready()
        s = step(self.spec, self.loop, scrape(engines, self.gateway.url if self.gateway else None,
                                              starting, wall, runtime=self.spec.engine.runtime), wall)
        self.loop = s.state
        if self.spec.autoscaling.forecast_lead_seconds and due(self.history_saved, wall, s.state.history.bucket_s):
            self.history_saved = wall
            tmp = self.history_file.with_suffix(".tmp")
            tmp.write_text(s.state.history.dumps())
            os.replace(tmp, self.history_file)
        self.pool.scale_to(s.decision.replicas)
        replicas, ready, _ = self.pool.counts()
        names = [a.name for a in self.spec.adapters]
        seen = Observation(replicas=replicas, ready_replicas=ready,
                           gateway_ready=self.gateway is not None and self.gateway.alive(),
                           adapters=scrape_adapters(engines, names) if names else None)
        self.status = tick_status(self.spec, s, seen, self.status, now_rfc3339(), None, "", self.url)
        self._write_status()
        return self.status

    def _write_status(self) -> None:
        if not self.status_file:
            return
        tmp = f"{self.status_file}.tmp"
        with open(tmp, "w") as f:
            json.dump({"time": time.time(), "status": self.status,
                       "engines": {s.index: s.state for s in self.pool.slots}}, f)
        os.replace(tmp, self.status_file)

    def close(self) -> None:
        self.pool.stop_all()
        if self.gateway is not None:
            self.gateway.stop()
