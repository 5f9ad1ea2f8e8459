"""What a decode step costs, as the speculation policy prices it: seconds = fixed + per_seq x b + per_row x r +
verify x (d > 0) for a step that decodes b sequences and verifies d drafts in all, which add r rows to the kernels'
work (`padded_rows`), fitted by exponentially weighted least squares over the engine's own decode-only steps.

One fit across batch sizes, because a draft's worth depends on the step it joins: at one sequence the step is
nearly all reading the weights and a verify row is cheap beside it; at large batches (on CPU above all) the rows
dominate, a draft costs about what a whole sequence's decode does, and only near-certain drafts pay. A single
average of the plain step, taken at whatever batch the engine last ran, priced drafts at a small batch's rates.

`verify` is what a step pays for verifying at all, whatever the drafts: the verify path's own work, and on CUDA the
eager forward in place of a replayed graph (a step with several query tokens per sequence has none). Without it the
fit spread that cost over the drafts and underpriced the steps that verify few (on a seeded model on CPU, verify
steps took 3-10% longer than it predicted in two runs).

Rows are counted in the linear kernels' row blocks (`linear.row_tile`): where a kernel multiplies rows four at a
time, drafts that fill the step's last block cost little and the one that starts a new block costs the whole block.
Priced per draft, the fit averaged the two, and at one sequence took a fourth draft, whose fifth row cost about
1.55x the first four in each matmul (Q4_1 SmolLM2 on CPU: 1.56x plain with four drafts, 1.65x with three).
"""

from dataclasses import dataclass, field

import numpy as np

FORGET = 0.98  # each step keeps this share of the earlier evidence: about the last 50 steps count
MIN_WEIGHT = 0.5  # decayed steps of each kind (plain, verifying) the fit needs before it prices drafts


def padded_rows(num_decodes: int, num_drafts: int, tile: int) -> int:
    """Rows num_drafts add to a step of num_decodes sequences once rows are rounded up to the kernels' blocks of
    `tile` (pure)."""
    def up(rows: int) -> int:
        return -(-rows // tile) * tile
    return up(num_decodes + num_drafts) - up(num_decodes)


@dataclass
class StepCost:
    row_tile: int = 1  # the linear kernels' row block (linear.row_tile)
    _xtx: np.ndarray = field(default_factory=lambda: np.zeros((4, 4)))
    _xty: np.ndarray = field(default_factory=lambda: np.zeros(4))
    _plain: float = 0.0  # decayed count of steps without drafts
    _verifying: float = 0.0  # and with
    _coef: np.ndarray | None = None  # the fit of the steps so far (None: not solved since the last)

    def observe(self, num_decodes: int, num_drafts: int, seconds: float) -> None:
        x = np.array([1.0, num_decodes, padded_rows(num_decodes, num_drafts, self.row_tile), num_drafts > 0])
        self._xtx = FORGET * self._xtx + np.outer(x, x)
        self._xty = FORGET * self._xty + seconds * x
        self._plain = FORGET * self._plain + (num_drafts == 0)
        self._verifying = FORGET * self._verifying + (num_drafts > 0)
        self._coef = None

    def _fit(self) -> np.ndarray:
        # Least norm where a column never varied (one batch size so far): the prediction at what was seen holds.
        if self._coef is None:
            self._coef = np.linalg.lstsq(self._xtx, self._xty, rcond=None)[0]
        return self._coef

    def decode_s(self, num_decodes: int) -> float | None:
        """A plain step's predicted seconds at this batch; None before a plain step was timed."""
        if self._plain < MIN_WEIGHT:
            return None
        fixed, per_seq, _, _ = self._fit()
        return max(float(fixed + per_seq * num_decodes), 0.0)

    def verify_s(self) -> tuple[float, float] | None:
        """(seconds a step adds by verifying at all, and per row its drafts add: padded_rows); None until steps with
        and without drafts were timed."""
        if self._plain < MIN_WEIGHT or self._verifying < MIN_WEIGHT:
            return None
        _, _, per_row, verify = self._fit()
        return max(float(verify), 0.0), max(float(per_row), 0.0)
