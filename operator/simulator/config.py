"""What a simulation runs with besides the trace and the scaler: the replicas' profile, cold start, SLO, the
gateway's overflow rule and its predictions, the external API's latencies, prefix caching, LoRA adapters, tenants and
SLO classes, and the prices."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from floodway.engine.config import EngineConfig
from floodway.operator.gateway import overflow as ov
from floodway.operator.gateway.config import Tenants
from floodway.operator.gateway.routing import PrefixPolicy
from floodway.operator.planner.prices import Prices
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.spec.models import SLOClassSpec


@dataclass(frozen=True)
class SimConfig:
    profile: ReplicaProfile = field(default_factory=ReplicaProfile)
    cold_start_s: float = 120.0
    ttft_slo_s: float = 0.5
    tpot_slo_s: float = 0.05
    overflow: ov.OverflowPolicy = field(default_factory=ov.OverflowPolicy)  # enabled=False: no overflow
    external_ttft_s: float = 0.4
    external_tpot_s: float = 0.03
    sample_s: float = 10.0
    # The gateway's PoolState.waiting: engines' waiting queues only (as scraped), or also the requests still in
    # prefill (the gateway knows its own requests without a first byte): those delay TTFT just as much.
    waiting_includes_prefill: bool = False
    # The gateway's predicted TTFT: from the prefill tokens ahead of the request on the replica it would pick
    # (as the gateway does: engines export floodway_num_prefill_tokens_waiting), or from waiting counts and
    # an end-to-end latency average (the former gateway's rule, for comparison).
    ttft_from_prefill_backlog: bool = True
    # With it, the rate that backlog is divided by: the one each replica exports from its step times (our engine's
    # floodway_prefill_tokens_per_second), or, as the gateway does for runtimes that export none (vLLM), the
    # prompt tokens/s earlier answers showed up to their first token (EWMA 0.2). The gateway learns the latter
    # either way: it stands in for a replica that has timed no prefill yet.
    learned_prefill_rate: bool = False
    # TPOT protection in the replicas (the engine's --tpot-slo-ms at the TPOT SLO, as the operator renders it).
    prefill_budget: bool = True
    # Prefix caching in the replicas and the gateway's router: None (not modelled), "load" or "prefix".
    prefix: str | None = None
    prefix_policy: PrefixPolicy = field(default_factory=PrefixPolicy)
    # LoRA adapters (traces.tag_adapters): each replica's resident slots (the gateway config's max_loras), and the
    # gateway's overflow.models: a request for an adapter without an entry never overflows.
    max_loras: int = EngineConfig.max_loras
    overflow_models: Mapping[str, str] = field(default_factory=dict)
    # Tenants and SLO classes (population.py), as the gateway config has them: each tenant's limits (tenants.py) and
    # the classes by name (classes.py), which set each request's overflow rule, TTFT SLO and queue limit.
    tenants: Tenants = field(default_factory=Tenants)
    classes: Mapping[str, SLOClassSpec] = field(default_factory=dict)
    # The engines schedule by priority (engine.schedulingPolicy priority): the gateway sends each classed request
    # with its class's priority, and replicas admit lower numbers first (replica.py).
    engine_priority: bool = False
    # What replica-hours and overflowed tokens cost (the simulated spec's, planner.prices.spec_prices): the $ figures.
    prices: Prices = Prices(None, None, None)

    def ttft_slo_of(self, klass: str | None) -> float:
        """The TTFT SLO a request of this class is held to: its class's (spec.classes ttftMs), else the service's,
        as the gateway counts its attainment."""
        c = self.classes.get(klass) if klass else None
        return c.ttft_ms / 1000.0 if c is not None and c.ttft_ms else self.ttft_slo_s

    def tpot_slo_of(self, klass: str | None) -> float:
        """The TPOT SLO a request of this class is held to: its class's tpotMs, else the service's."""
        c = self.classes.get(klass) if klass else None
        return c.tpot_ms / 1000.0 if c is not None and c.tpot_ms else self.tpot_slo_s
