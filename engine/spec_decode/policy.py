"""How many drafts each sequence verifies this step: the ones that raise the batch's expected tokens per second.

A step that decodes b sequences takes about decode_s (at that b); each verified draft adds s_per_token (both fitted
on the engine's own steps: step_cost.py). The j-th draft of a sequence whose
drafts are accepted at rate a (each given the previous ones) adds a^j expected tokens. Adding drafts in order of
that gain raises tokens per second while gain / s_per_token exceeds the step's current tokens per second: at
small batches, where reading the weights is most of the step, cheap verify rows pay for likely drafts; at large
batches, where the rows are most of it, a draft costs about what a sequence's decode does and only near-certain
ones pay.
"""

from dataclasses import dataclass

PRIOR_RATE = 0.5  # acceptance assumed before a sequence has verified any draft
PRIOR_WEIGHT = 2.0  # positions the prior counts for against a sequence's own record
DECAY = 0.9  # each verify keeps this share of a sequence's earlier record (recent behaviour counts most)
# One decode step in this many does what the policy has not chosen lately (verifies nothing while it drafts, every
# available draft while it does not), so that the step costs of both keep being measured.
PROBE_EVERY = 16


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


def choose_num_drafts(rates: list[float], available: list[int], decode_s: float | None,
                      s_per_token: float | None) -> list[int]:
    """Drafts to verify per sequence (at most available[i]), from acceptance rates and step costs (pure).
    Before a plain decode step has been timed: none. Before a draft has been timed: all available."""
    if decode_s is None or decode_s <= 0:
        return [0] * len(rates)
    if s_per_token is None:
        return list(available)
    gains = sorted(((rates[i] ** j, i) for i in range(len(rates)) for j in range(1, available[i] + 1)),
                   reverse=True)
    ks = [0] * len(rates)
    tokens, seconds = float(len(rates)), decode_s
    for gain, i in gains:
        if gain * seconds <= s_per_token * tokens:  # this draft would lower tokens per second; later ones gain less
            break
        ks[i] += 1
        tokens += gain
        seconds += s_per_token
    return ks
