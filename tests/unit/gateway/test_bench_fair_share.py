"""`floodway bench fair-share` (operator/bench/fair_share.py): the hold queue's release order under overload, VTC
(what the gateway runs) against FIFO, in its deterministic model."""

from floodway.operator.bench.fair_share import SCENARIOS, Tenant, run_bench, simulate


def shares(tenants, fair, ticks=100):
    out = simulate(tenants, 1000, ticks, fair)
    total = sum(tokens for tokens, _ in out.values())
    return {name: round(tokens / total, 2) for name, (tokens, _) in out.items()}


def test_fifo_serves_in_proportion_to_demand_and_vtc_gives_each_its_demand_up_to_an_equal_share():
    light_under, two_over = SCENARIOS
    assert shares(light_under, fair=False) == {"heavy": 0.8, "light-a": 0.08, "light-b": 0.12}
    assert shares(light_under, fair=True) == {"heavy": 0.5, "light-a": 0.2, "light-b": 0.3}
    assert shares(two_over, fair=True) == {"heavy": 0.4, "medium": 0.4, "light": 0.2}
    waits = simulate(light_under, 1000, 100, True)["light-a"][1]
    assert max(waits) == 0  # under its share, a light tenant never waits behind the heavy one's backlog


def test_under_capacity_the_order_changes_nothing():
    calm = (Tenant("a", 2, 100), Tenant("b", 1, 300))
    assert simulate(calm, 1000, 20, True) == simulate(calm, 1000, 20, False)


def test_the_report_prints_both_policies_side_by_side():
    text = run_bench(ticks=20)
    assert text.count("| FIFO share | VTC share |") == 2 and "| light |" in text
