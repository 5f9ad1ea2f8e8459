"""The gateway's hold queue: the requests the overflow rule holds, the tenants' fair-share counters over them
(fair_share.py), and the round that lets them leave one at a time in fair-share order.

Whenever capacity may have changed, a round starts from the first held request in that order; the request whose
turn it is wakes and looks, then the turn passes on, so only one may leave at a time and a tenant with many held
requests cannot pass one with few. The asyncio waiting stays in proxy.py; this holds the state.
"""

from __future__ import annotations

import asyncio
import itertools

from floodway.operator.gateway.fair_share import Held, joined, left, next_turn


class HoldQueue:
    def __init__(self):
        self.queue: dict[int, Held] = {}  # by seq
        self.fair: dict = {}  # the tenants' counters
        self.turn: int | None = None  # the held request whose turn it is in the current round (None: no round)
        self._done: set[int] = set()  # the seqs the round has looked at
        self._turns: dict[int, asyncio.Event] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.queue)

    def of_class(self, klass: str | None) -> int:
        return sum(h.klass == klass for h in self.queue.values())

    def new_round(self) -> None:
        """A round over the held requests starts (again, if one was under way) from the first in fair-share order.
        One that had its turn and has not looked yet wakes to find it gone, and waits."""
        self._done, self.turn = set(), None
        self.pass_turn()

    def pass_turn(self) -> None:
        """The round moves on to the next held request (fair_share.next_turn), waking it."""
        if self.turn is not None:
            self._done.add(self.turn)
        self.turn = next_turn(self.queue.values(), self.fair, self._done)
        if self.turn is not None:
            self._turns[self.turn].set()

    def join(self, tenant: str | None, klass: str | None, priority: int, tokens: int) -> int:
        """Holds a request; -> its seq."""
        entry = Held(next(self._seq), tenant or "", klass, priority, tokens)
        self.fair = joined(self.fair, self.queue.values(), entry)
        self.queue[entry.seq], self._turns[entry.seq] = entry, asyncio.Event()
        return entry.seq

    def leave(self, seq: int, released: bool) -> None:
        """The request leaves: `released` (sent on, and charged to its tenant) or not (rejected, or gone)."""
        entry = self.queue.pop(seq)
        del self._turns[seq]
        self.fair = left(self.fair, self.queue.values(), entry, released)
        if self.turn == seq:
            self.pass_turn()

    def event(self, seq: int) -> asyncio.Event:
        """Set when it is the request's turn."""
        return self._turns[seq]
