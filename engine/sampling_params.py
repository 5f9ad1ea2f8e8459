"""Per-request sampling settings (torch-free, so the server can validate without loading torch)."""

from dataclasses import dataclass, field

from floodway.engine.structured import StructuredSpec

MAX_LOGPROBS = 20  # alternatives per token (OpenAI's chat maximum; completions allow 5)
MAX_LOGIT_BIAS = 100.0  # OpenAI's range for each bias


@dataclass
class SamplingParams:
    max_tokens: int = 16  # 0: prefill only (prompt logprobs), finishes with "length"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # OpenAI: logits[t] -= frequency * count(t in output) + presence * (t in output)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # transformers/vLLM: logits of tokens in prompt + output are divided by it if > 0, multiplied otherwise
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit
    min_tokens: int = 0  # EOS, stop token ids and stop strings are ignored until this many tokens
    # Logprobs of the model's raw distribution (before temperature, penalties, bias, top-k/p), as vLLM's
    # default: None: none; 0: the chosen token's; N: plus the N most likely tokens.
    logprobs: int | None = None
    prompt_logprobs: int | None = None  # the same for each prompt token (the first has none)
    structured: StructuredSpec | None = None  # what every output must match (engine/structured.py)
    n: int = 1  # choices returned
    best_of: int | None = None  # sequences generated (>= n); the n with the highest cumulative logprob are returned

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def penalized(self) -> bool:
        """Whether any logits processing beyond temperature/top-k/top-p applies (the sampler's slow path)."""
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0
                    or self.logit_bias or self.min_tokens)

    def validate(self) -> None:
        """Raises ValueError naming the offending field."""
        if not _is_int(self.max_tokens) or self.max_tokens < 0:
            raise ValueError(f"max_tokens must be an integer >= 0, got {self.max_tokens!r}")
        if not _is_number(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or self.top_k < -1:
            raise ValueError(f"top_k must be an integer >= -1 (0 or -1 disables it), got {self.top_k!r}")
        if self.seed is not None and not _is_int(self.seed):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if not isinstance(self.stop_token_ids, list) or not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be a list of non-negative integers, got {self.stop_token_ids!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not -2 <= value <= 2:
                raise ValueError(f"{name} must be a number in [-2, 2], got {value!r}")
        if not _is_number(self.repetition_penalty) or not 0 < self.repetition_penalty < float("inf"):
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty!r}")
        if not isinstance(self.logit_bias, dict) or not all(
                _is_int(t) and t >= 0 and _is_number(b) and abs(b) <= MAX_LOGIT_BIAS
                for t, b in self.logit_bias.items()):
            raise ValueError(f"logit_bias must map token ids >= 0 to numbers in [-{MAX_LOGIT_BIAS:g}, "
                             f"{MAX_LOGIT_BIAS:g}], got {self.logit_bias!r}")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be an integer in [0, max_tokens={self.max_tokens}], "
                             f"got {self.min_tokens!r}")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not 0 <= value <= MAX_LOGPROBS):
                raise ValueError(f"{name} must be None or an integer in [0, {MAX_LOGPROBS}], got {value!r}")
        if self.structured is not None:
            if not isinstance(self.structured, StructuredSpec):
                raise ValueError(f"structured must be a StructuredSpec or None, got {self.structured!r:.80}")
            self.structured.validate()
        if not _is_int(self.n) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if self.best_of is not None and (not _is_int(self.best_of) or self.best_of < self.n):
            raise ValueError(f"best_of must be None or an integer >= n ({self.n}), got {self.best_of!r}")

    @property
    def num_seqs(self) -> int:
        """Sequences generated for the request: best_of when set, else n."""
        return self.best_of or self.n


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x  # x == x rejects NaN
