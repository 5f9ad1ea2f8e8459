"""`floodway up` with real processes: a burst through the gateway scales the engines up, engages overflow
to the local stand-in engine, and once the burst ends the autoscaler scales back down. Short autoscaler
windows in the spec keep it to a minute or two. Capacity is scarce by configuration, not by the CPU's speed: two
sequences per engine and steps of at least 50 ms (--step-delay-ms), so one engine finishes under
2 / (0.05 s x 24 tokens) = 1.7 requests/s and eight clients always queue on it, however fast the machine."""

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
import yaml
from floodway.operator import procs

pytestmark = pytest.mark.slow

SPEC = {
    "apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": "burst"},
    "spec": {
        "model": "floodway/tiny-llama",
        "engine": {"maxModelLen": 256, "maxNumSeqs": 2, "extraArgs": ["--step-delay-ms", "50"]},
        "resources": {"gpus": 0},
        "replicas": {"min": 1, "max": 2},
        "slo": {"ttftMs": 5000, "tpotMs": 1000},
        "autoscaling": {"intervalSeconds": 1, "targetConcurrency": 2, "scaleUpWindowSeconds": 2,
                        "panicHoldSeconds": 2, "scaleDownStabilizationSeconds": 4, "scaleDownIntervalSeconds": 2},
        "overflow": {"maxWaitingPerReplica": 1},
    },
}
MAX_REQUESTS = 600  # bound on the burst, whatever the machine's speed
WORKERS = 8


def read_status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what: str, check, proc: subprocess.Popen, log: Path, timeout_s: float):
    def alive_and_checked():
        assert proc.poll() is None, f"floodway up exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        return check()

    try:
        return procs.wait_until(alive_and_checked, timeout_s, what, interval_s=0.2)
    except TimeoutError as e:
        raise AssertionError(f"{e}:\n{log.read_text()[-3000:]}") from None


def test_burst_scales_up_overflows_and_scales_down(tmp_path, floodway_cmd, validate_reply):
    spec_file, status_file, log = tmp_path / "isvc.yaml", tmp_path / "status.json", tmp_path / "up.log"
    spec_file.write_text(yaml.safe_dump(SPEC))
    port = procs.free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([*floodway_cmd, "up", str(spec_file), "--local-overflow", "--port", str(port),
                                 "--workdir", str(tmp_path / "work"), "--status-file", str(status_file)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def status() -> dict:
            return read_status(status_file).get("status", {})

        wait_for("the first engine", lambda: status().get("readyReplicas", 0) >= 1, proc, log, 300)

        backends: dict[str, int] = {}
        codes: dict[int, int] = {}
        answers: list[tuple[int, str]] = []  # checked against the OpenAI spec after the burst
        sent = [0]
        stop = threading.Event()
        lock = threading.Lock()

        def worker():
            with httpx.Client(timeout=120) as client:
                while not stop.is_set():
                    with lock:
                        if sent[0] >= MAX_REQUESTS:
                            return
                        sent[0] += 1
                    r = client.post(f"http://127.0.0.1:{port}/v1/completions", json={
                        "model": "floodway/tiny-llama", "prompt": "Once upon a time", "max_tokens": 24,
                        "temperature": 0})
                    with lock:
                        codes[r.status_code] = codes.get(r.status_code, 0) + 1
                        answers.append((r.status_code, r.text))
                        b = r.headers.get("x-floodway-backend", "?")
                        backends[b] = backends.get(b, 0) + 1

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
        for t in threads:
            t.start()
        try:
            seen_overflowing = []

            def scaled_and_overflowed() -> bool:
                st = status()
                if any(c["type"] == "Overflowing" and c["status"] == "True" for c in st.get("conditions", [])):
                    seen_overflowing.append(st["observed"]["overflowRate"])
                return st.get("readyReplicas", 0) >= 2 and backends.get("overflow", 0) > 0 and seen_overflowing

            wait_for("scale-up to 2 ready replicas and overflow", scaled_and_overflowed, proc, log, 240)
            peak = status()
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=150)
        assert peak["desiredReplicas"] == 2
        assert peak["lastScaleReason"].startswith(("panic", "scale up")), peak["lastScaleReason"]
        assert max(seen_overflowing) > 0  # the status saw the gateway's overflow, as `kubectl get` shows it
        assert backends["overflow"] > 0 and sum(v for k, v in backends.items() if k != "overflow") > 0, backends
        assert not any(code >= 500 for code in codes), codes
        for status, text in answers:
            validate_reply(f"http://127.0.0.1:{port}/v1/completions", status, text)

        down = wait_for("scale-down to 1 replica",
                        lambda: (s := read_status(status_file)) and s["status"].get("desiredReplicas") == 1
                        and s["engines"].get("1") == "stopped" and s, proc, log, 120)
        assert "scale down" in down["status"]["lastScaleReason"]
        assert down["status"]["readyReplicas"] == 1
        assert any(c["type"] == "Overflowing" for c in down["status"]["conditions"])
        text = log.read_text()
        assert f"send OpenAI requests to http://127.0.0.1:{port}/v1" in text and "burst: replicas" in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # Ctrl-C equivalent: `floodway up` stops what it started
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "stopping engines and gateway" in log.read_text()
    backends_started = yaml.safe_load((tmp_path / "work" / "gateway.yaml").read_text())["backends"]["static"]
    for url in [f"http://127.0.0.1:{port}", *backends_started]:
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/health", timeout=2)
