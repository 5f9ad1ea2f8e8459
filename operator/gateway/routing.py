"""Pure routing: a load score per backend and a power-of-two-choices pick.

Score (lower is better), from what the gateway knows of one backend:

    score = max(in_flight, running + waiting) + waiting_weight * waiting + kv_weight * kv_usage

- `in_flight` is the gateway's own count of requests it sent there and that have not finished: always
  fresh. `running + waiting` is the engine's scraped view of the same work plus other clients': fresher
  or staler depending on the scrape, so the larger of the two counts.
- Queued requests add `waiting_weight` each on top: a backend that queues has a full batch, and a new
  request waits behind all of them instead of joining the batch.
- `kv_usage` (0..1) adds up to `kv_weight`: a nearly full KV cache means preemptions soon.

Power of two choices: sample two distinct ready backends and take the lower score (ties: the first
sampled). It spreads load nearly as well as least-loaded but does not herd every request onto the same
backend between two scrapes. The RNG is passed in, so tests and the simulator are deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BackendLoad:
    id: str
    ready: bool
    in_flight: int = 0
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0


@dataclass(frozen=True)
class RoutingWeights:
    waiting_weight: float = 1.0
    kv_weight: float = 4.0


def load_score(b: BackendLoad, w: RoutingWeights) -> float:
    return max(float(b.in_flight), b.running + b.waiting) + w.waiting_weight * b.waiting + w.kv_weight * b.kv_usage


def pick(backends: Sequence[BackendLoad], rng: random.Random, weights: RoutingWeights,
         exclude: frozenset[str] = frozenset()) -> BackendLoad | None:
    """The chosen ready backend not in `exclude`, or None when there is none."""
    candidates = [b for b in backends if b.ready and b.id not in exclude]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    a, b = rng.sample(candidates, 2)
    return b if load_score(b, weights) < load_score(a, weights) else a


def estimate_waiting(scraped_waiting: float, in_flight_now: int, in_flight_at_scrape: int,
                     capacity: float = 0.0) -> float:
    """Queue length now, from the last scrape and the gateway's own counts, whichever shows more.
    - While an engine queued at the scrape, each request the gateway sends since joins the queue and each
      one that finishes lets one queued request start: the queue moved by the change of in-flight.
    - `capacity` is the requests the engine runs at once: the max_num_seqs it exports, else the most it
      was ever seen running (0: unknown). Requests the gateway has in flight beyond it are queued there,
      even before a scrape shows it: a busy engine can answer its scrapes late, and a burst would
      otherwise go unseen for that long."""
    by_scrape = max(0.0, scraped_waiting + in_flight_now - in_flight_at_scrape) if scraped_waiting > 0 else 0.0
    return max(by_scrape, in_flight_now - capacity) if capacity > 0 else by_scrape
