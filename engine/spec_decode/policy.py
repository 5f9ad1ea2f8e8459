"""How many drafts each sequence verifies this step: the ones that raise the batch's expected tokens per second.

A step that decodes b sequences takes about decode_s (at that b); verifying adds a fixed cost and one per row the
drafts add (all fitted on the engine's own steps: step_cost.py). The j-th draft of a sequence whose drafts are
accepted at rate a (each given the previous ones) adds a^j expected tokens. The step takes the likeliest drafts, as
many as give it the most expected tokens per second, or none: at small batches, where reading the weights is most
of the step, cheap verify rows pay for likely drafts; at large batches, where the rows are most of it, a draft
costs about what a sequence's decode does and only near-certain ones pay.

The drafts chosen are those whose sequences' rates are highest, and a rate is an estimate: the choice favours the
sequences it overrates, so the chosen drafts are accepted less often than their rates say (on a seeded model at
concurrency 32, 0.94 of the drafts expected were kept). `Calibration` keeps the drafts kept over those expected, over
every verify, and the gains are scaled by it.
"""

from dataclasses import dataclass

from floodway.engine.spec_decode.step_cost import padded_rows

PRIOR_RATE = 0.5  # acceptance assumed before a sequence has verified any draft
PRIOR_WEIGHT = 2.0  # positions the prior counts for against a sequence's own record
DECAY = 0.9  # each verify keeps this share of a sequence's earlier record (recent behaviour counts most)
CALIBRATION_DECAY = 0.99  # each verified sequence keeps this share of the calibration's record (about the last 100)
# One decode step in this many does what the policy has not chosen lately (verifies nothing while it drafts, every
# available draft while it does not), so that the step costs of both and the acceptance keep being measured.
PROBE_EVERY = 16
# While it does not draft, each probe that leaves it so doubles the interval up to this: a probe that verifies
# drafts nobody keeps costs most where verifying is dear (on CUDA an eager step, about 4.7x a replayed one on an
# H200), and acceptance that stays low needs no news every 16 steps. Drafting again resets it.
MAX_PROBE_EVERY = 256


@dataclass
class Acceptance:
    """A sequence's decayed record of verified draft positions: reached (verified) and accepted."""
    accepted: float = 0.0
    reached: float = 0.0

    def rate(self, prior: float = PRIOR_RATE) -> float:
        return (self.accepted + PRIOR_WEIGHT * prior) / (self.reached + PRIOR_WEIGHT)

    def update(self, num_drafts: int, num_accepted: int) -> None:
        """One verify: positions up to the first rejected one were reached."""
        self.accepted = DECAY * self.accepted + num_accepted
        self.reached = DECAY * self.reached + min(num_drafts, num_accepted + 1)


@dataclass
class Calibration:
    """Decayed drafts accepted against those the rates expected, over the verified drafts of every sequence."""
    accepted: float = 0.0
    expected: float = 0.0

    @property
    def ratio(self) -> float:
        """At most 1: it corrects the choice's optimism; a rate too low (a new sequence's prior) corrects itself
        within a verify or two, and a gain scaled past 1 would promise more than a draft can give."""
        return min(1.0, (self.accepted + PRIOR_WEIGHT) / (self.expected + PRIOR_WEIGHT))

    def update(self, expected: float, accepted: int) -> None:
        self.accepted = CALIBRATION_DECAY * self.accepted + accepted
        self.expected = CALIBRATION_DECAY * self.expected + expected


def expected_accepted(rate: float, num_drafts: int) -> float:
    """Drafts a sequence accepted at `rate` is expected to keep of num_drafts: the j-th is reached only when the
    earlier ones were accepted (pure)."""
    return sum(rate ** j for j in range(1, num_drafts + 1))


def choose_num_drafts(rates: list[float], available: list[int], decode_s: float | None,
                      verify: tuple[float, float] | None, calibration: float = 1.0, row_tile: int = 1) -> list[int]:
    """Drafts to verify per sequence (at most available[i]), from acceptance rates (their gains scaled by
    `calibration`) and step costs (pure): the likeliest drafts first, as many as give the step the most expected
    tokens per second, where verifying at all adds verify[0] seconds and each row the drafts add verify[1]
    (StepCost.verify_s; rows in the kernels' blocks of row_tile: padded_rows). Before a plain decode step has been
    timed: none. Before a draft has been timed: all available."""
    if decode_s is None or decode_s <= 0:
        return [0] * len(rates)
    if verify is None:
        return list(available)
    gains = sorted(((calibration * rates[i] ** j, i) for i in range(len(rates))
                    for j in range(1, available[i] + 1)), reverse=True)
    fixed_s, per_row_s = verify
    tokens = float(len(rates))
    best, best_rate = 0, len(rates) / decode_s
    for n, (gain, _) in enumerate(gains, 1):
        tokens += gain
        seconds = decode_s + fixed_s + per_row_s * padded_rows(len(rates), n, row_tile)
        if tokens / seconds > best_rate:
            best, best_rate = n, tokens / seconds
    ks = [0] * len(rates)
    for _, i in gains[:best]:
        ks[i] += 1
    return ks
