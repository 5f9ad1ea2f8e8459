"""Named scenarios: the trace, its SLO and the engine settings of each run quoted in the README.

Every field can be overridden on the command line; a scenario only fixes the defaults so a figure can be
reproduced with one command.
"""

from dataclasses import dataclass

from floodway.operator.autoscaler.history import DAY_S

# Multi-day traces replay each day in 2 hours (12x), so two weeks run in minutes.
WEEK_DAY_S = 7200.0


@dataclass(frozen=True)
class Scenario:
    trace: str
    description: str
    compress: float = 1.0
    spread_tick_s: float = 0.0  # spread quantized timestamps over their tick (Mooncake: 3 s)
    ttft_slo_s: float = 0.5
    tpot_slo_s: float = 0.05
    max_num_seqs: int = 64
    adapters: str | None = None  # LoRA adapters' shares of the requests, 'support=0.3,legal=0.1' (traces.tag_adapters)
    day_s: float = DAY_S  # a day of the trace (multi-day traces replay days compressed; the forecast reads them so)


SCENARIOS = {
    "azure-4x": Scenario("azure-conv", "Azure 2023 conversation trace replayed 4x faster (58 min -> 15 min)",
                         compress=4.0),
    # 2x: a compression at which foresight (bound.py) saves replica-hours over static peak.
    "azure-2x": Scenario("azure-conv", "Azure 2023 conversation trace replayed 2x faster (58 min -> 29 min)",
                         compress=2.0),
    "mooncake": Scenario("mooncake", "Mooncake conversation trace (long prompts), 3 s ticks spread",
                         spread_tick_s=3.0, ttft_slo_s=5.0, tpot_slo_s=0.1),
    "idle-burst": Scenario("idle-burst:base_rate=0.2,burst_rate=25,burst_at_s=1800,burst_len_s=2400,bursts=1,"
                           "duration_s=28800",
                           "8 h mostly idle (0.2 req/s) with one 40 min burst of 25 req/s (11x the mean)"),
    # Bursts shorter than the cold start: no policy can add capacity in time; overflow carries them.
    # The trace family of issue 15 (with azure-2x, azure-4x and mooncake above), 30 min each.
    "spiky": Scenario("spiky:duration_s=1800",
                      "prefill-heavy spiky traffic: log-normal prompts (median 1469), 13-token answers, near-silent "
                      "spells then 20 s bursts (1-second burstiness 20-30x)"),
    "long-output": Scenario("steps:rates=5,step_s=1800,prompt_tokens=400,output_tokens=800",
                            "steady long-output traffic: 5 req/s, prompts ~400 tokens, answers ~800"),
    "diurnal": Scenario("diurnal:low_rate=0.5,high_rate=8,period_s=1800,duration_s=1800",
                        "a day compressed into 30 min: 0.5 -> 8 -> 0.5 req/s along a cosine"),
    # Long prompts: the most expensive requests to overflow (APIs bill per token); Mooncake's SLO and engine.
    "long-context": Scenario("long-context:duration_s=1800",
                             "long-context traffic: log-normal prompts (median 12k, ~1% past 100k, cap 200k), "
                             "~250-token answers, 1 -> 4 -> 1 req/s twice in 30 min",
                             ttft_slo_s=5.0, tpot_slo_s=0.1),
    "mooncake-2x": Scenario("mooncake", "Mooncake conversation trace replayed 2x faster", compress=2.0,
                            spread_tick_s=3.0, ttft_slo_s=5.0, tpot_slo_s=0.1),
    "short-bursts": Scenario("idle-burst:base_rate=0.3,burst_rate=20,burst_at_s=600,burst_len_s=90,bursts=3,"
                             "gap_s=1020,duration_s=3600",
                             "1 h at 0.3 req/s with three 90 s bursts of 20 req/s (11x the mean), shorter than "
                             "the cold start"),
    # Foresight from history (forecast.py): two weeks, so every stage of the forecast runs (the last two days, then
    # yesterday and a week ago, then one and two weeks ago).
    "weeks": Scenario(f"weekly:day_s={WEEK_DAY_S:g},output_tokens=800",
                      "two weeks of office hours (0.6 -> 6 req/s from 7:00 to 9:00, down from 17:00; weekends 0.4x) "
                      "with two non-recurring 2x bursts a day, each day replayed in 2 h", day_s=WEEK_DAY_S),
    "weeks-flat": Scenario(f"weekly:day_s={WEEK_DAY_S:g},output_tokens=800,night_rate=3,peak_rate=3,bursts_per_day=4",
                           "two weeks with no pattern: 3 req/s and four non-recurring 2x bursts a day, each day "
                           "replayed in 2 h", day_s=WEEK_DAY_S),
}

# `floodway simulate --sweep`: every scenario at seeds 0..4 (the real traces' only randomness is Mooncake's
# tick spreading, so Azure runs once).
FAMILY = ("spiky", "long-output", "diurnal", "azure-2x", "azure-4x", "mooncake", "mooncake-2x", "long-context")
SEEDED = ("spiky", "long-output", "diurnal", "mooncake", "mooncake-2x", "long-context")
