"""`floodway bench serve` helpers: guidellm's command line (pure) and its own virtual environment.

guidellm pins libraries that conflict with ours (click ~= 8.4 today), so it lives in a venv of its own
(floodway.operator.toolvenv), which shares torch and transformers with the calling environment.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from floodway.operator.toolvenv import CACHE, ensure_tool

GUIDELLM_VERSION = "0.8.1"
DEFAULT_VENV = CACHE / "venv-guidellm"


@dataclass(frozen=True)
class SweepSpec:
    target: str  # server base URL, without /v1
    model: str  # served model name
    tokenizer: str  # folder or id guidellm loads to count tokens of its synthetic prompts
    endpoint: str = "/v1/completions"
    prompt_tokens: int = 32
    output_tokens: int = 16
    sweep_size: int = 3
    seconds: float = 15.0
    max_concurrency: int = 16
    slo_ttft_ms: float = 1000.0
    slo_tpot_ms: float = 200.0
    json_path: str | None = None

    def validate(self) -> None:
        if self.endpoint not in ("/v1/completions", "/v1/chat/completions"):
            raise ValueError(f"endpoint must be /v1/completions or /v1/chat/completions, got {self.endpoint!r}")
        for name in ("prompt_tokens", "output_tokens", "max_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.sweep_size < 2:
            raise ValueError(f"sweep_size must be >= 2 (synchronous and throughput first), got {self.sweep_size}")
        for name in ("seconds", "slo_ttft_ms", "slo_tpot_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def guidellm_argv(guidellm: str, s: SweepSpec) -> list[str]:
    """guidellm's `run` command for a bounded sweep with goodput against the SLO (pure)."""
    argv = [
        guidellm, "run",
        "--backend", f"kind=openai_http,target={s.target},model={s.model},request_format={s.endpoint}",
        "--tokenizer", f"kind=huggingface_auto,model={s.tokenizer}",
        "--profile", f"kind=sweep,sweep_size={s.sweep_size},max_concurrency={s.max_concurrency}",
        "--constraint", f"kind=max_duration,seconds={s.seconds:g}",
        "--data", f"kind=synthetic_text,prompt_tokens={s.prompt_tokens},output_tokens={s.output_tokens}",
        "--metrics", f"kind=generative,slo.ttft_ms={s.slo_ttft_ms:g},slo.tpot_ms={s.slo_tpot_ms:g}",
        "--output", "kind=console",
        "--disable-progress",
    ]
    if s.json_path:
        argv += ["--output", f"kind=json,path={s.json_path}"]
    return argv


def guidellm_env() -> dict[str, str]:
    # PYTHONSAFEPATH: guidellm's worker processes must not put the working directory on sys.path (a repo
    # checkout's operator/ folder would shadow the standard library). Offline: tokenizers are local.
    return {**os.environ, "PYTHONSAFEPATH": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def ensure_guidellm(venv: Path, version: str = GUIDELLM_VERSION, log=print) -> str:
    """Returns the guidellm executable, creating its venv (overlaying this environment) if needed."""
    return ensure_tool(venv, f"guidellm=={version}", "guidellm", log)
