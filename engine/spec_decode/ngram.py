"""Prompt-lookup proposals: the tokens that followed the latest earlier occurrence of the sequence's suffix."""

import numpy as np


def propose(token_ids: list[int], k: int, n_min: int, n_max: int) -> list[int]:
    """Up to k tokens: for n from n_max down to n_min, find the latest earlier occurrence of the last n tokens
    in token_ids (prompt + output so far) and return what followed it; [] when no suffix recurs (pure).
    A continuation that reaches the end of the sequence goes on with its own proposals, as a copy would: the
    suffix recurring d tokens back predicts a repeat with period d."""
    if k <= 0 or len(token_ids) <= n_min:
        return []
    arr = np.asarray(token_ids, dtype=np.int32)
    raw = arr.tobytes()
    for n in range(min(n_max, len(arr) - 1), n_min - 1, -1):
        suffix = raw[-4 * n:]
        end = len(raw) - 4  # a match must end before the last token, so at least one token follows it
        while True:
            at = raw.rfind(suffix, 0, end)
            if at < 0:
                break
            if at % 4 == 0:  # on a token boundary (bytes could match across tokens)
                return _continue(token_ids, at // 4 + n, k)
            end = at + 4 * n - 1
    return []


def _continue(token_ids: list[int], start: int, k: int) -> list[int]:
    out: list[int] = []
    for i in range(start, start + k):
        out.append(token_ids[i] if i < len(token_ids) else out[i - len(token_ids)])
    return out
