"""A replica slot of the simulated pool: the replica once ready, its exported metrics and the gateway's view of it."""

import math
from dataclasses import dataclass, field

from floodway.engine.server.metrics import ITL_BUCKETS, TTFT_BUCKETS
from floodway.operator.autoscaler.signals import EngineSample, observe
from floodway.operator.gateway import ttft as tt
from floodway.operator.simulator.replica import Replica, SimRequest


@dataclass
class ReplicaSlot:
    """One replica of the simulated pool from its start to the end of its drain, with what its engine exports
    and what the gateway keeps of it."""

    started_s: float
    name: str = ""  # its backend id at the gateway
    replica: Replica | None = None  # set when ready
    ended_s: float | None = None
    draining: bool = False
    last_busy_s: float = 0.0  # replica busy time and clock at the last tick, for utilisation
    util_since: float = 0.0
    # What its engine exports: cumulative histograms {upper bound: count}, finished requests, prompt tokens.
    ttft: dict = field(default_factory=lambda: dict.fromkeys((*TTFT_BUCKETS, math.inf), 0))
    tpot: dict = field(default_factory=lambda: dict.fromkeys((*ITL_BUCKETS, math.inf), 0))
    finished: int = 0
    prompt_tokens: int = 0
    # What the gateway keeps of it as a backend.
    recent_work: float = 0.0  # the work sent here (routing.sent_work), decayed to recent_at
    recent_at: float = 0.0
    hold: tt.SlotHold = tt.SlotHold()  # the gateway's estimate of how long requests hold a batch slot here
    hold_at: float = 0.0

    def observe(self, r: SimRequest) -> None:
        observe(self.ttft, r.ttft_s)
        if r.tpot_s is not None:
            observe(self.tpot, r.tpot_s)
        self.finished += 1

    def sample(self) -> EngineSample:
        rep = self.replica
        return EngineSample(rep.running, rep.waiting, rep.kv_usage, dict(self.ttft), dict(self.tpot), True,
                            self.finished, self.prompt_tokens)
