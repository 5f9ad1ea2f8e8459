"""TraceRequest traces: loaders for the real traces vendored in data/traces and synthetic burst generators.

A trace is a list of TraceRequest(arrival_s, prompt_tokens, output_tokens) sorted by arrival, starting near 0;
Mooncake's requests also carry their prompt's block ids (`blocks`, BLOCK_TOKENS tokens each), shared where
requests share a prefix. `tag_adapters` names a LoRA adapter in a share of the requests (`adapter`; None: the base
model); population.py names each request's tenant and SLO class (`tenant`, `klass`).
"""

import csv
import gzip
import json
import math
import os
import random
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

TRACES_ENV = "FLOODWAY_TRACES_DIR"
# The vendored copies are gzip-compressed; a folder given by the user may hold them as .csv/.jsonl as well.
AZURE_CONV = "azure-2023-conv/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = "mooncake-conversation/conversation_trace.jsonl"
VENDORED = Path(__file__).resolve().parents[2] / "data" / "traces"  # operator/simulator -> the repo root
# Names accepted by --trace besides file paths.
NAMED_TRACES = {"azure-conv": AZURE_CONV, "mooncake": MOONCAKE_CONV}
BLOCK_TOKENS = 512  # tokens per block id of Mooncake's hash_ids


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    blocks: tuple[int, ...] = ()  # the prompt's block ids, BLOCK_TOKENS each (empty: unknown)
    adapter: str | None = None  # the LoRA adapter the request names (None: the base model)
    tenant: str | None = None  # the tenant whose key sent it (None: no tenants)
    klass: str | None = None  # the SLO class it asks for (spec.classes; None: none)


def traces_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The traces folder: an explicit path, $FLOODWAY_TRACES_DIR, or the repository's data/traces."""
    if explicit:
        return Path(explicit)
    if os.environ.get(TRACES_ENV):
        return Path(os.environ[TRACES_ENV])
    return VENDORED


def resolve_trace(name_or_path: str, root: str | os.PathLike | None = None) -> Path:
    """Map a named trace ('azure-conv', 'mooncake') or a file path to an existing file, or raise."""
    if name_or_path in NAMED_TRACES:
        plain = traces_dir(root) / NAMED_TRACES[name_or_path]
        gz = plain.with_name(plain.name + ".gz")
        path = gz if gz.is_file() else plain
    else:
        path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path}")
    return path


def open_trace(path: str | os.PathLike):
    """A text stream of a trace file, decompressed when it ends in .gz."""
    path = Path(path)
    return gzip.open(path, "rt", newline="") if path.suffix == ".gz" else path.open(newline="")


def load_trace(path: str | os.PathLike) -> list[TraceRequest]:
    """Load a CSV (Azure columns) or JSONL (Mooncake fields) trace; arrivals are shifted to start at 0."""
    path = Path(path)
    kind = path.suffixes[-2] if path.suffix == ".gz" and len(path.suffixes) > 1 else path.suffix
    if kind == ".csv":
        reqs = _load_azure_csv(path)
    elif kind in (".jsonl", ".json"):
        reqs = _load_mooncake_jsonl(path)
    else:
        raise ValueError(f"{path}: unknown trace format {path.suffix!r} (expected .csv or .jsonl, or .gz of one)")
    if not reqs:
        raise ValueError(f"{path}: trace has no requests")
    reqs.sort(key=lambda r: r.arrival_s)
    t0 = reqs[0].arrival_s
    return [replace(r, arrival_s=r.arrival_s - t0) for r in reqs]


def _load_azure_csv(path: Path) -> list[TraceRequest]:
    out = []
    with open_trace(path) as f:
        reader = csv.DictReader(f)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing CSV columns {sorted(missing)}")
        for i, row in enumerate(reader, start=2):
            try:
                ts = row["TIMESTAMP"]
                # 100 ns ticks: Python parses at most 6 fractional digits.
                if "." in ts:
                    head, frac = ts.split(".", 1)
                    ts = f"{head}.{frac[:6]}"
                t = datetime.fromisoformat(ts).timestamp()
                out.append(TraceRequest(t, int(row["ContextTokens"]), int(row["GeneratedTokens"])))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}:{i}: bad row: {e}") from None
    return out


def _load_mooncake_jsonl(path: Path) -> list[TraceRequest]:
    out = []
    with open_trace(path) as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(TraceRequest(d["timestamp"] / 1000.0, int(d["input_length"]), int(d["output_length"]),
                                   tuple(d.get("hash_ids") or ())))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{i}: bad record: {e!r}") from None
    return out


def compress(trace: list[TraceRequest], factor: float) -> list[TraceRequest]:
    """Replay `factor` times faster (same requests, arrival times divided by factor)."""
    if factor <= 0:
        raise ValueError(f"compression factor must be > 0, got {factor}")
    return [replace(r, arrival_s=r.arrival_s / factor) for r in trace]


def spread_ticks(trace: list[TraceRequest], tick_s: float, seed: int = 0) -> list[TraceRequest]:
    """Spread requests that share a quantized timestamp uniformly over the tick (Mooncake's 3 s ticks)."""
    rng = random.Random(seed)
    out = [replace(r, arrival_s=r.arrival_s + rng.uniform(0, tick_s)) for r in trace]
    out.sort(key=lambda r: r.arrival_s)
    return out


def _poisson(rate_fn, duration_s: float, seed: int, prompt_tokens, output_tokens, max_rate: float, sizes=None):
    """Non-homogeneous Poisson arrivals by thinning; token counts drawn log-normally around the given means, or
    by `sizes(rng) -> (prompt, output)`."""
    if duration_s <= 0 or max_rate <= 0:
        raise ValueError("duration and rate must be > 0")
    rng = random.Random(seed)
    sizes = sizes or (lambda rng: (_draw(rng, prompt_tokens), _draw(rng, output_tokens)))
    out, t = [], 0.0
    while True:
        t += rng.expovariate(max_rate)
        if t >= duration_s:
            return out
        if rng.random() * max_rate <= rate_fn(t):
            out.append(TraceRequest(t, *sizes(rng)))


def _draw(rng: random.Random, mean: int) -> int:
    # Log-normal with sigma 0.6: a long tail like real chat prompts, the given mean.
    sigma = 0.6
    return max(1, int(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))


def idle_then_burst(base_rate: float = 0.5, burst_rate: float = 20.0, duration_s: float = 1800.0,
                    burst_at_s: float = 600.0, burst_len_s: float = 120.0, bursts: int = 2, gap_s: float = 600.0,
                    prompt_tokens: int = 1000, output_tokens: int = 200, seed: int = 0) -> list[TraceRequest]:
    """Low background traffic with `bursts` bursts of `burst_rate` req/s lasting `burst_len_s`, `gap_s` apart."""
    def rate(t):
        for k in range(bursts):
            start = burst_at_s + k * (burst_len_s + gap_s)
            if start <= t < start + burst_len_s:
                return burst_rate
        return base_rate
    return _poisson(rate, duration_s, seed, prompt_tokens, output_tokens, max(base_rate, burst_rate))


def steps(rates: list[float], step_s: float = 300.0, prompt_tokens: int = 1000, output_tokens: int = 200,
          seed: int = 0) -> list[TraceRequest]:
    """Piecewise-constant rate: rates[i] req/s during [i*step_s, (i+1)*step_s)."""
    if not rates or min(rates) < 0:
        raise ValueError("rates must be a non-empty list of non-negative numbers")
    return _poisson(lambda t: rates[min(int(t // step_s), len(rates) - 1)], len(rates) * step_s, seed,
                    prompt_tokens, output_tokens, max(rates))


def on_off(on_rate: float = 10.0, on_s: float = 60.0, off_s: float = 240.0, duration_s: float = 1800.0,
           prompt_tokens: int = 1000, output_tokens: int = 200, seed: int = 0) -> list[TraceRequest]:
    """Alternating on (on_rate req/s) and off (no traffic) periods."""
    return _poisson(lambda t: on_rate if (t % (on_s + off_s)) < on_s else 0.0, duration_s, seed,
                    prompt_tokens, output_tokens, on_rate)


def _lognormal(rng: random.Random, median: float, sigma: float) -> int:
    return max(1, int(rng.lognormvariate(math.log(median), sigma)))


def spiky(duration_s: float = 3420.0, quiet_rate: float = 0.05, busy_rate: float = 2.2, burst_rate: float = 24.0,
          quiet_s: float = 150.0, busy_s: float = 300.0, burst_s: float = 20.0, clump: float = 4.0,
          prompt_median: int = 1469, prompt_sigma: float = 0.82, output_median: int = 13, output_sigma: float = 1.24,
          seed: int = 0) -> list[TraceRequest]:
    """Prefill-heavy spiky traffic shaped like the held-out trace of issue 15: near-silent spells, busy spells
    and short bursts (exponential durations with the given means; a spell of silence is followed by a burst),
    arrivals in clumps of `clump` requests on average within 0.2 s (users' retries and fan-out: what makes the
    1-second burstiness 20-30x); prompts log-normal with median 1469 (mean ~2k, p90 ~4.2k), outputs log-normal
    with median 13 (mean ~28)."""
    rng = random.Random(seed)
    rates = {"quiet": quiet_rate, "busy": busy_rate, "burst": burst_rate}
    means = {"quiet": quiet_s, "busy": busy_s, "burst": burst_s}
    nxt = {"quiet": ("burst",), "burst": ("busy",), "busy": ("quiet", "burst")}
    out, t, state = [], 0.0, "busy"
    while t < duration_s:
        end = min(duration_s, t + rng.expovariate(1 / means[state]))
        while rates[state] > 0:
            t += rng.expovariate(rates[state] / clump)
            if t >= end:
                break
            for _ in range(1 + int(rng.expovariate(1 / (clump - 1))) if clump > 1 else 1):
                out.append(TraceRequest(t + rng.uniform(0, 0.2), _lognormal(rng, prompt_median, prompt_sigma),
                                   _lognormal(rng, output_median, output_sigma)))
        t, state = end, rng.choice(nxt[state])
    out.sort(key=lambda r: r.arrival_s)
    return out


def diurnal(low_rate: float = 0.5, high_rate: float = 6.0, period_s: float = 3600.0, duration_s: float = 3600.0,
            prompt_tokens: int = 1000, output_tokens: int = 200, seed: int = 0) -> list[TraceRequest]:
    """A day compressed into `period_s`: the rate ramps between low and high along a cosine (trough at 0)."""
    def rate(t):
        return low_rate + (high_rate - low_rate) * (1 - math.cos(2 * math.pi * t / period_s)) / 2
    return _poisson(rate, duration_s, seed, prompt_tokens, output_tokens, max(low_rate, high_rate))


def long_context(duration_s: float = 1800.0, low_rate: float = 1.0, high_rate: float = 4.0, period_s: float = 900.0,
                 prompt_median: int = 12_000, prompt_sigma: float = 0.9, max_prompt: int = 200_000,
                 output_median: int = 200, output_sigma: float = 0.7, seed: int = 0) -> list[TraceRequest]:
    """Long-context traffic (documents, code, RAG): prompts log-normal with median 12k tokens and sigma 0.9
    (mean ~18k, p90 ~38k, about 1% past 100k), capped at a 200k context window; answers of a few hundred tokens
    (median 200, mean ~255); the rate swings between low and high along a cosine of period `period_s`."""
    def rate(t):
        return low_rate + (high_rate - low_rate) * (1 - math.cos(2 * math.pi * t / period_s)) / 2

    def sizes(rng):
        return (min(max_prompt, _lognormal(rng, prompt_median, prompt_sigma)),
                _lognormal(rng, output_median, output_sigma))
    return _poisson(rate, duration_s, seed, 0, 0, max(low_rate, high_rate), sizes)


def weekly(days: int = 14, day_s: float = 86_400.0, peak_rate: float = 6.0, night_rate: float = 0.6,
           weekend_share: float = 0.4, bursts_per_day: float = 2.0, burst_factor: float = 2.0,
           burst_min: float = 20.0, prompt_tokens: int = 1000, output_tokens: int = 200,
           seed: int = 0) -> list[TraceRequest]:
    """Days of office-hours traffic with a weekly pattern and random bursts, over `days` days of `day_s` seconds
    each (compressed days scale every time of day with them; day 0 is a Monday): `night_rate` req/s at night, a ramp
    along a cosine from 7:00 to 9:00 up to `peak_rate` (x `weekend_share` on Saturdays and Sundays), down from 17:00
    to 21:00; and on average `bursts_per_day` bursts a day at random times, `burst_factor` x the rate for
    `burst_min` minutes, which do not recur."""
    hour = day_s / 24

    def business(h: float) -> float:
        if 7 <= h < 9:
            return (1 - math.cos(math.pi * (h - 7) / 2)) / 2
        if 17 <= h < 21:
            return (1 + math.cos(math.pi * (h - 17) / 4)) / 2
        return 1.0 if 9 <= h < 17 else 0.0

    rng = random.Random(seed + 1)  # the bursts' own draws, apart from the arrivals'
    bursts = sorted(rng.uniform(0, days * day_s) for _ in range(round(bursts_per_day * days)))
    burst_s = burst_min / 60 * hour

    def rate(t):
        day, h = divmod(t, day_s)
        peak = peak_rate * (weekend_share if day % 7 >= 5 else 1.0)
        r = night_rate + (peak - night_rate) * business(h / hour)
        return r * burst_factor if any(b <= t < b + burst_s for b in bursts) else r
    return _poisson(rate, days * day_s, seed, prompt_tokens, output_tokens, peak_rate * burst_factor)


def parse_pairs(text: str, what: str) -> dict[str, str]:
    """'a=x,b=y' -> {a: x, b: y}; ValueError naming `what` and the bad item."""
    out = {}
    for item in filter(None, text.split(",")):
        name, eq, value = item.partition("=")
        if not eq or not name or not value or name in out:
            raise ValueError(f"{what}: expected distinct name=value items, got {item!r}")
        out[name] = value
    return out


def shares(text: str, what: str) -> dict[str, float]:
    """'a=0.3,b=0.1' -> each name's share of the requests (together at most 1); ValueError naming `what`."""
    try:
        out = {name: float(v) for name, v in parse_pairs(text, what).items()}
    except ValueError as e:
        raise ValueError(f"{what} {text!r}: name=share items with shares in (0, 1] ({e})") from None
    if not out or min(out.values()) <= 0 or sum(out.values()) > 1 + 1e-9:
        raise ValueError(f"{what} {text!r}: shares must be > 0 and add up to at most 1")
    return out


def adapter_shares(text: str) -> dict[str, float]:
    """'support=0.3,legal=0.1' -> each adapter's share of the requests (together at most 1; the rest: the base)."""
    return shares(text, "adapters")


def drawn(u: float, shares: dict[str, float]) -> str | None:
    """The name a uniform draw `u` in [0, 1) falls on, each name taking its share of [0, 1) in order; None: past
    them all."""
    for name, share in shares.items():
        if u < share:
            return name
        u -= share
    return None


def tag_adapters(trace: list[TraceRequest], shares: dict[str, float], seed: int = 0) -> list[TraceRequest]:
    """Each request names adapter a with probability shares[a] (else the base model). An adapter's prompt blocks
    are its own: the engine never shares prefix-cache blocks across adapters."""
    rng = random.Random(seed)
    out = []
    for r in trace:
        adapter = drawn(rng.random(), shares)
        blocks = r.blocks if adapter is None else tuple(hash((adapter, b)) for b in r.blocks)
        out.append(replace(r, adapter=adapter, blocks=blocks))
    return out


def burstiness(trace: list[TraceRequest], window_s: float = 1.0) -> float:
    """The busiest `window_s` window's rate over the trace's mean rate."""
    mean, peak = rate_stats(trace, window_s)
    return peak / mean if mean else 0.0


def per_span(trace: list[TraceRequest], span_s: float, size=lambda r: 1) -> list[float]:
    """The trace's requests (or `size` of each) summed per `span_s` span from 0 to its last arrival."""
    out = [0.0] * (int(trace[-1].arrival_s // span_s) + 1)
    for r in trace:
        out[int(r.arrival_s // span_s)] += size(r)
    return out


def rate_stats(trace: list[TraceRequest], window_s: float = 60.0) -> tuple[float, float]:
    """(mean, peak) arrival rate over windows of window_s seconds."""
    if not trace:
        return 0.0, 0.0
    counts = per_span(trace, window_s)
    return len(trace) / (len(counts) * window_s), max(counts) / window_s


GENERATORS = {"idle-burst": idle_then_burst, "steps": steps, "on-off": on_off, "spiky": spiky, "diurnal": diurnal,
              "long-context": long_context, "weekly": weekly}


def _param(key: str, value: str):
    if key == "rates":
        return [float(v) for v in value.split("/")]
    ints = ("bursts", "seed", "prompt_tokens", "output_tokens", "prompt_median", "output_median", "max_prompt", "days")
    return int(value) if key in ints else float(value)


def trace_from_spec(spec: str, root: str | os.PathLike | None = None, seed: int = 0) -> list[TraceRequest]:
    """'azure-conv', 'mooncake', a .csv/.jsonl path, or a generator with parameters such as
    'idle-burst:burst_rate=30,burst_len_s=600' or 'steps:rates=2/10/4,step_s=300'."""
    name, _, args = spec.partition(":")
    if name not in GENERATORS:
        return load_trace(resolve_trace(spec, root))
    gen = GENERATORS[name]
    kwargs = {"seed": seed}
    for item in filter(None, args.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in gen.__code__.co_varnames[:gen.__code__.co_argcount]:
            raise ValueError(f"trace {spec!r}: bad parameter {item!r} for {name}")
        try:
            kwargs[key] = _param(key, value)
        except ValueError:
            raise ValueError(f"trace {spec!r}: {key} needs a number, got {value!r}") from None
    return gen(**kwargs)
