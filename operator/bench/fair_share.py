"""`floodway bench fair-share`: the share of tokens each tenant gets from the gateway's hold queue under overload,
released in virtual-token-counter order (fair_share.py, what the gateway runs) against FIFO, side by side.

A deterministic model of one class's queue, no clock and no randomness: each tick, the tenants' requests arrive
(each tenant a fixed number of requests of fixed size per tick, or one every few ticks), then the local pool frees
`capacity` tokens' worth of places and the queue releases requests while the freed tokens cover the next one (what
is left carries to the next tick). Demand exceeds capacity, so the queue only grows and the release order decides
who is served: FIFO serves each tenant in proportion to what it sends; VTC gives every tenant its demand up to an
equal share (max-min fairness), and the heavy tenant the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from floodway.operator.gateway.fair_share import Held, joined, left, next_turn
from floodway.operator.stats import quantile


@dataclass(frozen=True)
class Tenant:
    name: str
    requests: int  # requests per arrival
    tokens: int  # estimated tokens each
    every: int = 1  # ticks between arrivals


# Two light tenants under their equal share; then two tenants over it, whom VTC splits what the light one leaves.
SCENARIOS = ((Tenant("heavy", 10, 200), Tenant("light-a", 1, 200), Tenant("light-b", 1, 600, every=2)),
             (Tenant("heavy", 10, 200), Tenant("medium", 4, 200), Tenant("light", 1, 200)))


def simulate(tenants: tuple[Tenant, ...], capacity: int, ticks: int, fair: bool) -> dict[str, tuple[int, list[int]]]:
    """tenant -> (tokens released, each released request's wait in ticks)."""
    held: list[Held] = []
    arrived: dict[int, int] = {}
    counters: dict = {}
    out: dict[str, tuple[int, list[int]]] = {t.name: (0, []) for t in tenants}
    seq, credit = 0, 0
    for tick in range(ticks):
        for t in tenants:
            for _ in range(t.requests if tick % t.every == 0 else 0):
                entry = Held(seq, t.name, "standard", 0, t.tokens)
                counters = joined(counters, held, entry) if fair else counters
                held.append(entry)
                arrived[seq], seq = tick, seq + 1
        credit += capacity
        while held:
            turn = next_turn(held, counters, ()) if fair else held[0].seq
            pick = next(h for h in held if h.seq == turn)
            if pick.tokens > credit:
                break
            credit -= pick.tokens
            held.remove(pick)
            counters = left(counters, held, pick, released=True) if fair else counters
            tokens, waits = out[pick.tenant]
            out[pick.tenant] = (tokens + pick.tokens, [*waits, tick - arrived[pick.seq]])
    return out


def table(tenants: tuple[Tenant, ...], capacity: int, ticks: int) -> str:
    runs = {name: simulate(tenants, capacity, ticks, fair) for name, fair in (("FIFO", False), ("VTC", True))}
    lines = [f"demand {sum(t.requests * t.tokens / t.every for t in tenants):g} tokens per tick, {capacity} released "
             f"per tick, {ticks} ticks", "",
             "| tenant | demand tokens/tick | FIFO share | VTC share | FIFO wait p50/p99 (ticks) | "
             "VTC wait p50/p99 (ticks) |", "|---|---|---|---|---|---|"]
    totals = {name: sum(tokens for tokens, _ in r.values()) for name, r in runs.items()}
    for t in tenants:
        cells = [f"{runs[n][t.name][0] / totals[n]:.1%}" for n in runs]
        waits = [f"{quantile(w, 0.5):g} / {quantile(w, 0.99):g}" if (w := runs[n][t.name][1]) else "-"
                 for n in runs]
        lines.append(f"| {t.name} | {t.requests * t.tokens / t.every:g} | {' | '.join(cells)} | {' | '.join(waits)} |")
    return "\n".join(lines)


def run_bench(capacity: int = 1000, ticks: int = 600) -> str:
    return "\n\n".join(table(tenants, capacity, ticks) for tenants in SCENARIOS)


if __name__ == "__main__":
    print(run_bench())
