"""`--speculative-config`: vLLM's JSON object, parsed and checked (torch-free: the CLI and the server validate it)."""

import json
from dataclasses import dataclass, fields

METHODS = ("ngram", "draft_model")
MAX_SPECULATIVE_TOKENS = 16  # a verify of more rows than this costs more than the longest accepted run saves


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int  # the most draft tokens per sequence and step; the policy may choose fewer
    # n-gram prompt lookup: the longest, then shorter suffixes (down to the minimum) are matched.
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    model: str | None = None  # draft_model: the draft's Hugging Face id, folder or built-in name


def parse(text: str | None) -> SpeculativeConfig | None:
    """The config from its JSON text (None or empty: speculation off); ValueError naming what is wrong."""
    if not text:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"speculative_config must be a JSON object: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"speculative_config must be a JSON object, got {text!r:.80}")
    known = {f.name for f in fields(SpeculativeConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"speculative_config has unknown keys {unknown}; known: {sorted(known)}")
    if raw.get("method") not in METHODS:
        raise ValueError(f"speculative_config method must be one of {', '.join(METHODS)}, got {raw.get('method')!r}")
    if "num_speculative_tokens" not in raw:
        raise ValueError("speculative_config needs num_speculative_tokens")
    cfg = SpeculativeConfig(**raw)
    for name in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"speculative_config {name} must be a positive integer, got {value!r}")
    if cfg.num_speculative_tokens > MAX_SPECULATIVE_TOKENS:
        raise ValueError(f"speculative_config num_speculative_tokens must be at most {MAX_SPECULATIVE_TOKENS}, "
                         f"got {cfg.num_speculative_tokens}")
    if cfg.prompt_lookup_min > cfg.prompt_lookup_max:
        raise ValueError(f"speculative_config prompt_lookup_min ({cfg.prompt_lookup_min}) exceeds prompt_lookup_max "
                         f"({cfg.prompt_lookup_max})")
    if cfg.method == "draft_model" and not (isinstance(cfg.model, str) and cfg.model):
        raise ValueError("speculative_config method draft_model needs model (the draft's id or folder)")
    if cfg.method == "ngram" and cfg.model is not None:
        raise ValueError("speculative_config model is for method draft_model, not ngram")
    return cfg
