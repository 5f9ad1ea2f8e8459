"""`floodway bench classes`: issue 40's targets for tenants and SLO classes (class_targets.py) over scenarios and
seeds of the simulator's family, one row each. A row runs what

    floodway simulate --scenario S --seed N --policy floodway+overflow \\
        --classes interactive=0.3,standard=0.5,batch=0.2 --tenants 5 --abuse 10

runs (the same functions: run.prepare, compare.size and compare.run, report.population), then the same with
--abuse 1 for the fair tenants' change."""

import sys
import time

from floodway.operator.bench.class_targets import Verdict, judge
from floodway.operator.simulator import compare
from floodway.operator.simulator.population import tenant_names
from floodway.operator.simulator.report import GroupSummary, population
from floodway.operator.simulator.run import Options, prepare

POLICY = "floodway+overflow"
CLASSES = "interactive=0.3,standard=0.5,batch=0.2"
TENANTS = 5
ABUSE = 10.0


def options(scenario: str, seed: int, abuse: float) -> Options:
    return Options(scenario=scenario, seed=seed, policies=[POLICY], classes=CLASSES, tenants=TENANTS, abuse=abuse)


def run_population(scenario: str, seed: int, abuse: float) -> tuple[int, list[GroupSummary]]:
    """(the tenants' maxRequestsPerMinute, the summaries per class and tenant) of one simulate run."""
    trace, cfg, ours, specs, _ = prepare(options(scenario, seed, abuse))
    sizing = compare.size(trace, cfg, ours.slo_attainment)
    _, results = compare.run(trace, specs, cfg, ours, sizing)
    return cfg.tenants.default.max_requests_per_minute, population(results[0])


def _run(args) -> tuple[int, list[GroupSummary]]:
    return run_population(*args)


def _results(todo: list, jobs: int):
    if jobs <= 1:
        yield from map(_run, todo)
        return
    from multiprocessing import Pool

    with Pool(jobs) as pool:
        yield from pool.imap(_run, todo)


def verdicts(scenarios: list[str], seeds: list[int], jobs: int = 1):
    """Each (scenario, seed)'s Verdict in order; `jobs` > 1 runs that many simulations at once in worker processes."""
    pairs = [(sc, seed) for sc in scenarios for seed in seeds]
    done = _results([(sc, seed, abuse) for sc, seed in pairs for abuse in (ABUSE, 1.0)], jobs)
    for sc, seed in pairs:
        (limit, abusive), (_, fair) = next(done), next(done)
        yield judge(f"{sc}, seed {seed}", abusive, fair, limit, tenant_names(TENANTS)[-1])


def run_bench(scenarios: list[str], seeds: list[int], jobs: int = 1) -> list[Verdict]:
    """The verdicts, each also written to stderr as it comes (a row takes a minute or more)."""
    out, start = [], time.monotonic()
    for v in verdicts(scenarios, seeds, jobs):
        out.append(v)
        print(f"{time.monotonic() - start:.0f} s: | {v.label} | {v.limit} | {' | '.join(v.cells)} |", file=sys.stderr,
              flush=True)
    return out

