"""Child processes that serve HTTP: start, wait until ready (poll with a deadline), stop by PID.

The local runner (`floodway up`) and the integration tests both start engines and gateways this way.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx

FLOODWAY_ARGV = [sys.executable, "-P", "-m", "floodway.operator.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    popen: subprocess.Popen
    port: int
    log_path: str | None = None
    host: str = "127.0.0.1"  # where the process listens

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the process has used (Linux /proc; NaN elsewhere): benchmarks report it
        beside wall time, which a shared machine's load moves."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def log_tail(self, chars: int = 4000) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, errors="replace") as f:
            return f.read()[-chars:]

    def stop(self, grace_s: float = 15.0) -> int:
        """SIGTERM (the process drains), then SIGKILL after the grace period. Returns the exit code."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait()

    def kill(self) -> None:
        if self.alive():
            self.popen.kill()
        self.popen.wait()


def wait_until(check, timeout_s: float, what: str, interval_s: float = 0.05):
    """Polls check() until it returns something truthy, and returns that; TimeoutError naming `what` and the
    last value at the deadline. check() may raise to stop early (say, when the process it waits on died)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)  # poll interval, not synchronisation: the deadline bounds the wait
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def start(argv: list[str], port: int, ready_path: str = "/ready", timeout_s: float = 180.0,
          env: dict | None = None, log_path: str | None = None, host: str = "127.0.0.1") -> Proc:
    """Starts argv and returns once GET ready_path answers 200; raises with the log tail otherwise."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                             start_new_session=True)
    if log_path:
        log.close()
    proc = Proc(popen, port, log_path, host)

    def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"{argv} exited with {popen.returncode}\n{proc.log_tail()}")
        try:
            return httpx.get(proc.url + ready_path, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout_s, f"{proc.url}{ready_path}", interval_s=0.1)
    except TimeoutError:
        proc.kill()
        raise RuntimeError(f"{argv} not ready on {proc.url}{ready_path} within {timeout_s}s\n{proc.log_tail()}") \
            from None
    return proc
