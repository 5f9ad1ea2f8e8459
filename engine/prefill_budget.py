"""TPOT protection: how many prefill tokens a step may carry so the decodes in it keep their per-token latency.

A step that decodes b sequences and prefills c tokens takes about decode_s(b) + c x s_per_prefill_token, and
each decoding sequence gets one token per step: the step time is their TPOT. So while sequences decode, a
step's prefill is capped at what fits in the TPOT SLO (with headroom for noise), never below a floor that
keeps prefills moving when the decodes nearly fill the SLO. Steps without decodes are not capped, nor are
steps whose decodes alone miss the SLO: there capping prefill saves no TPOT and only adds per-step overhead
to TTFT (measured: `floodway bench engine --tpot-slo-ms` on a CPU whose decode step exceeded the SLO).
The engine feeds the cap its own measured step times (StepTimes); the simulator its replica profile.
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
    """Moving averages of measured steps: the time of a decode-only step, and the time per prefill token
    (a step's time beyond the decode part, over its prefill tokens). None until observed."""

    decode_s: float | None = None
    s_per_prefill_token: float | None = None

    def observe(self, num_decodes: int, num_prefill_tokens: int, seconds: float) -> None:
        if num_prefill_tokens == 0:
            if num_decodes:
                self.decode_s = _ewma(self.decode_s, seconds)
            return
        decode = (self.decode_s or 0.0) if num_decodes else 0.0
        self.s_per_prefill_token = _ewma(self.s_per_prefill_token, max(seconds - decode, 0.0) / num_prefill_tokens)

    def budget(self, tpot_slo_s: float, cap: int) -> int:
        """The cap for the next step; the whole token budget until a prefill has been timed."""
        if self.s_per_prefill_token is None:
            return cap
        return prefill_budget_tokens(tpot_slo_s, self.decode_s or 0.0, self.s_per_prefill_token, cap)


def _ewma(old: float | None, sample: float) -> float:
    return sample if old is None else (1 - EWMA) * old + EWMA * sample
