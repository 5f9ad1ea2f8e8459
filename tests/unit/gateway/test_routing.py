import random
from collections import Counter

from floodway.operator.gateway.routing import BackendLoad, RoutingWeights, estimate_waiting, load_score, pick

W = RoutingWeights(waiting_weight=1.0, kv_weight=4.0)


def test_score_counts_fresher_view_queue_and_kv():
    assert load_score(BackendLoad("a", True, in_flight=3), W) == 3
    assert load_score(BackendLoad("a", True, in_flight=1, running=2, waiting=2), W) == 4 + 2
    assert load_score(BackendLoad("a", True, kv_usage=0.5), W) == 2


def test_pick_prefers_lower_score_and_skips_unready_and_excluded():
    busy, idle = BackendLoad("busy", True, in_flight=10), BackendLoad("idle", True)
    rng = random.Random(0)
    assert {pick([busy, idle], rng, W).id for _ in range(20)} == {"idle"}
    down = BackendLoad("down", False)
    assert pick([down, busy], rng, W).id == "busy"
    assert pick([down, busy], rng, W, exclude=frozenset({"busy"})) is None
    assert pick([], rng, W) is None


def test_pick_spreads_equal_load_and_is_seeded():
    pool = [BackendLoad(str(i), True) for i in range(4)]
    first = [pick(pool, random.Random(7), W).id for _ in range(5)]
    assert first == [pick(pool, random.Random(7), W).id for _ in range(5)]
    counts = Counter(pick(pool, random.Random(i), W).id for i in range(400))
    assert set(counts) == {"0", "1", "2", "3"}


def test_pick_never_takes_the_worst_of_three():
    pool = [BackendLoad("a", True, in_flight=1), BackendLoad("b", True, in_flight=2),
            BackendLoad("c", True, in_flight=9)]
    rng = random.Random(1)
    assert "c" not in {pick(pool, rng, W).id for _ in range(100)}


def test_estimate_waiting():
    assert estimate_waiting(0, 10, 2) == 0  # no queue at the scrape: headroom unknown
    assert estimate_waiting(3, 10, 6) == 7  # four more sent since the scrape while it queued
    assert estimate_waiting(3, 1, 6) == 0  # drained
    # Beyond the most ever seen running, the gateway's own requests queue even if no scrape shows it yet.
    assert estimate_waiting(0, 10, 0, capacity=2) == 8
    assert estimate_waiting(5, 6, 6, capacity=2) == 5
    assert estimate_waiting(0, 1, 0, capacity=2) == 0
