"""Pure routing: a load score per backend and a power-of-two-choices pick.

Score (lower is better), from what the gateway knows of one backend:

    score = max(in_flight, running + waiting) + waiting_weight * waiting + kv_weight * kv_usage
            + prefill_tokens / prefill_unit_tokens

- `in_flight` is the gateway's own count of requests it sent there and that have not finished: always
  fresh. `running + waiting` is the engine's scraped view of the same work plus other clients': fresher
  or staler depending on the scrape, so the larger of the two counts.
- Queued requests add `waiting_weight` each on top: a backend that queues has a full batch, and a new
  request waits behind all of them instead of joining the batch.
- `kv_usage` (0..1) adds up to `kv_weight`: a nearly full KV cache means preemptions soon.
- `prefill_tokens` counts work, not requests: the prompt tokens there not prefilled yet, less what the engine
  likely holds in its prefix cache (the gateway's own count, which moves at once, or the engine's scraped
  floodway_num_prefill_tokens_waiting, whichever is more). Every `prefill_unit_tokens` weigh one request: a new
  request waits behind that prefill.

Equal scores (idle engines, mostly) go to the backend with the least `recent_work`, the work sent there lately
in the score's own units (each request 1 plus its uncached prompt tokens / prefill_unit_tokens, decayed with a
half-life), which spreads prefill work more evenly than a random draw.

Power of two choices: sample two distinct ready backends and take the lower score (ties: the fewer
recent_work, then the first sampled). It spreads load nearly as well as least-loaded but does not herd every
request onto the same backend between two scrapes. The RNG is passed in, so tests and the simulator are
deterministic.

Prefix-aware pick (`pick_prefix`): `hits` says, per backend, the share (0..1) of this request's prompt blocks it
likely holds in its prefix cache (the gateway's prefix index, or the simulator's replicas). What every ready
backend holds (a system prompt they all cached) tells nothing about where to send it, so only each one's gain over
the least any holds counts, and only from `prefix_min_gain` of the prompt up: with a smaller one, idle engines tie
and the holders of a short shared prefix would win every tie, piling all traffic onto one engine at low load.
When no backend gains, the pick is the load-only one above, so traffic without shared prefixes is routed exactly
as before. Otherwise the lowest `load_score - (prefix_weight + prompt_tokens / prefill_unit_tokens) * gain` wins
(the prefill a hit saves counts in the units of the prefill the load score counts, so a long prompt's holder keeps
it against a longer backlog than a short one's; ties: the least recent_work, then a random one) among the backends
within the load cap: those whose recent work after taking this one stays within `prefix_load_cap` x the pool's mean
(after it) plus `prefix_load_slack` requests, and always the one with the least. The cap is what keeps a hot
prefix, or a long conversation, from piling onto its holder: past it, the request goes where load says and that
backend learns the prefix. It reads work sent lately rather than requests in flight because a conversation's turns
come one at a time: in flight, a holder never looks busy however many turns it takes. How the defaults were
chosen: README, "Prefix-aware routing", and docs/benchmarks/autoscaler-code-notes.md.

A request for a LoRA adapter also has `resident`: per backend 1.0 where it likely holds the adapter in a slot
(adapters.adapter_hits). Holding it beyond what every candidate holds is worth `prefix_weight`, as a whole-prompt
prefix hit less the prefill it saves (it saves loading the adapter, not the prefill), under the same load cap: past
it, the request goes where load says, and that engine loads the adapter from its --lora-modules.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from floodway.operator.spec.models import RoutingSpec


@dataclass(frozen=True)
class BackendLoad:
    id: str
    ready: bool
    in_flight: int = 0
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    prefill_tokens: float = 0.0  # prompt tokens there not prefilled yet, less what its cache likely holds
    recent_work: float = 0.0  # work sent there lately (sent_work, decayed): the cap's measure and the tie-break


# Fields named as the spec's gateway.routing settings (operator/spec/models.py RoutingSpec) take its defaults.
_SPEC = RoutingSpec()


@dataclass(frozen=True)
class RoutingWeights:
    waiting_weight: float = 1.0
    kv_weight: float = 4.0
    prefill_unit_tokens: float = _SPEC.prefill_unit_tokens  # prefill tokens that weigh one request (0: not counted)
    recent_half_life_s: float = 30.0  # of recent_work


@dataclass(frozen=True)
class PrefixPolicy:
    prefix_weight: float = _SPEC.prefix_weight  # score a whole-prompt hit is worth, in queued requests
    prefix_load_cap: float = _SPEC.prefix_load_cap  # x the pool's mean recent work...
    prefix_load_slack: float = _SPEC.prefix_load_slack  # ... plus this many requests: what a holder may take
    prefix_min_gain: float = _SPEC.prefix_min_gain  # a smaller share of the prompt is no reason to prefer its holder


def requests_at(b: BackendLoad) -> float:
    """Requests there (in flight through the gateway or as scraped, whichever shows more)."""
    return max(float(b.in_flight), b.running + b.waiting)


def load_score(b: BackendLoad, w: RoutingWeights) -> float:
    work = b.prefill_tokens / w.prefill_unit_tokens if w.prefill_unit_tokens else 0.0
    return requests_at(b) + w.waiting_weight * b.waiting + w.kv_weight * b.kv_usage + work


def decayed(value: float, elapsed_s: float, half_life_s: float) -> float:
    """`value` after `elapsed_s` of exponential decay."""
    return value * 0.5 ** (max(0.0, elapsed_s) / half_life_s)


def sent_work(uncached: int, w: RoutingWeights) -> float:
    """What a request adds to its backend's recent work: one request plus its uncached prompt tokens in
    requests' worth, as the load score counts them."""
    return 1.0 + (uncached / w.prefill_unit_tokens if w.prefill_unit_tokens else 0.0)


def uncached_tokens(prompt_tokens: int, held: float) -> int:
    """The prompt tokens an engine likely has to prefill for a request, given the share (0..1) of its prompt
    blocks the engine likely holds."""
    return round(prompt_tokens * (1.0 - held))


def pick(backends: Sequence[BackendLoad], rng: random.Random, weights: RoutingWeights,
         exclude: frozenset[str] = frozenset()) -> BackendLoad | None:
    """The chosen ready backend not in `exclude`, or None when there is none."""
    candidates = [b for b in backends if b.ready and b.id not in exclude]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    a, b = rng.sample(candidates, 2)
    return b if (load_score(b, weights), b.recent_work) < (load_score(a, weights), a.recent_work) else a


def within_cap(b: BackendLoad, pool: Sequence[BackendLoad], p: PrefixPolicy, work: float = 1.0) -> bool:
    """Whether `b` may take a request of `work` (sent_work) for its cache: its recent work after stays within
    the cap of the pool's mean after, or it has the least."""
    loads = [x.recent_work for x in pool]
    return (b.recent_work + work <= p.prefix_load_cap * (sum(loads) + work) / len(loads) + p.prefix_load_slack
            or b.recent_work <= min(loads))


def prefix_score(b: BackendLoad, gain: float, w: RoutingWeights, p: PrefixPolicy, prompt_tokens: int = 0) -> float:
    """The load score less what holding `gain` of a `prompt_tokens`-token prompt is worth there: `p.prefix_weight`
    requests for a whole prompt, plus the prefill it saves in the load score's own units."""
    saved = prompt_tokens / w.prefill_unit_tokens if w.prefill_unit_tokens else 0.0
    return load_score(b, w) - (p.prefix_weight + saved) * gain


def prefix_gains(candidates: Sequence[BackendLoad], hits: Mapping[str, float], p: PrefixPolicy) -> dict[str, float]:
    """Each candidate's hit beyond the least any of them holds (what they all hold says nothing), 0 below
    `p.prefix_min_gain`."""
    common = min((hits.get(b.id, 0.0) for b in candidates), default=0.0)
    gains = {b.id: hits.get(b.id, 0.0) - common for b in candidates}
    return {bid: g if g >= p.prefix_min_gain else 0.0 for bid, g in gains.items()}


def pick_prefix(backends: Sequence[BackendLoad], hits: Mapping[str, float], rng: random.Random,
                weights: RoutingWeights, policy: PrefixPolicy,
                exclude: frozenset[str] = frozenset(), prompt_tokens: int = 0,
                resident: Mapping[str, float] | None = None) -> BackendLoad | None:
    """The chosen ready backend not in `exclude` given each one's prefix `hits` (0..1) of a request of about
    `prompt_tokens` tokens and, for an adapter's request, where the adapter is `resident` (0..1), or None."""
    candidates = [b for b in backends if b.ready and b.id not in exclude]
    gains = prefix_gains(candidates, hits, policy)
    held = prefix_gains(candidates, resident or {}, policy)
    if not any(gains.values()) and not any(held.values()):
        return pick(candidates, rng, weights)
    work = {b.id: sent_work(uncached_tokens(prompt_tokens, hits.get(b.id, 0.0)), weights) for b in candidates}
    allowed = [b for b in candidates if within_cap(b, candidates, policy, work[b.id])]
    return min(rng.sample(allowed, len(allowed)),
               key=lambda b: (prefix_score(b, gains[b.id], weights, policy, prompt_tokens)
                              - policy.prefix_weight * held[b.id], b.recent_work))


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
