"""TPOT protection: how many prefill tokens a step may carry so the decodes in it keep their per-token latency.

A step that decodes b sequences and prefills c tokens takes about decode_s(b) + c x s_per_prefill_token, and
each decoding sequence gets one token per step: the step time is their TPOT. So while sequences decode, a
step's prefill is capped at what fits in the TPOT SLO (with headroom for noise), never below a floor that
keeps prefills moving when the decodes nearly fill the SLO. Steps without decodes are not capped, nor are
steps whose decodes alone miss the SLO: there capping prefill saves no TPOT and only adds per-step overhead
to TTFT (measured: `floodway bench engine --tpot-slo-ms` on a CPU whose decode step exceeded the SLO).
The engine feeds the cap its own measured step times (StepTimes); the simulator its replica profile.
The same step times give the prefill rate the engine exports (`StepTimes.prefill_rate`), from which the gateway
predicts TTFT.
"""

import math
from dataclasses import dataclass

HEADROOM = 0.9  # share of the TPOT SLO a step may fill
MIN_PREFILL_TOKENS = 64  # per step, so long prompts finish even when decodes alone fill the SLO
EWMA = 0.2


def prefill_budget_tokens(tpot_slo_s: float, decode_s: float, s_per_prefill_token: float, cap: int) -> int:
    """Prefill tokens a step with decodes may carry, between MIN_PREFILL_TOKENS and cap."""
    if s_per_prefill_token <= 0:
        return cap
    room = HEADROOM * tpot_slo_s - decode_s
    if room <= 0:
        return cap
    return int(min(cap, max(MIN_PREFILL_TOKENS, math.floor(room / s_per_prefill_token))))


@dataclass
class StepTimes:
    """Moving averages of measured steps. A step takes a fixed part, measured as the time of a decode-only step
    (`decode_s`: reading the weights, the decodes, the loop's overhead), plus its prefill tokens at
    `s_per_prefill_token`: moving averages of the time beyond the fixed part and of the prefill tokens, divided,
    so that a step of a few tokens, whose time is nearly all the fixed part, moves it little. Steps with prefill
    are timed only once a decode-only step has given the fixed part. None until observed."""

    decode_s: float | None = None
    _prefill_s: float = 0.0
    _prefill_tokens: float = 0.0

    def observe(self, num_decodes: int, num_prefill_tokens: int, seconds: float) -> None:
        if num_prefill_tokens == 0:
            if num_decodes:
                self.decode_s = _ewma(self.decode_s, seconds)
            return
        if self.decode_s is None:
            return
        # Both averages start at 0, so their ratio is the first step's from the first step on. A step faster
        # than the fixed part counts as it is: clipping noise at 0 would bias the average up.
        self._prefill_s = _ewma(self._prefill_s, seconds - self.decode_s)
        self._prefill_tokens = _ewma(self._prefill_tokens, float(num_prefill_tokens))

    @property
    def s_per_prefill_token(self) -> float | None:
        return max(self._prefill_s / self._prefill_tokens, 0.0) if self._prefill_tokens else None

    def budget(self, tpot_slo_s: float, cap: int) -> int:
        """The cap for the next step; the whole token budget until a prefill has been timed."""
        if self.s_per_prefill_token is None:
            return cap
        return prefill_budget_tokens(tpot_slo_s, self.decode_s or 0.0, self.s_per_prefill_token, cap)

    def prefill_rate(self, tpot_slo_s: float, cap: int) -> float | None:
        """Prompt tokens per second while sequences decode: the prefill a step carries beside them (the TPOT
        budget) over that step's time; None until a prefill has been timed. Under load, the only time a TTFT
        prediction nears the SLO, steps decode: a step without decodes may carry more."""
        if self.s_per_prefill_token is None:
            return None
        tokens = self.budget(tpot_slo_s, cap) if tpot_slo_s else cap
        seconds = (self.decode_s or 0.0) + tokens * self.s_per_prefill_token
        return tokens / seconds if seconds > 0 else None


def _ewma(old: float | None, sample: float) -> float:
    return sample if old is None else (1 - EWMA) * old + EWMA * sample
