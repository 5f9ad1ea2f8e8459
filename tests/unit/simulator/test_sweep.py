import pytest
from floodway.operator.simulator.report import Summary
from floodway.operator.simulator.sweep import Row, render

pytestmark = pytest.mark.unit


def summary(name, attainment, hours, overflow=0.0):
    return Summary(name, 100, attainment, 1.0, 0.1, 0.4, hours, overflow, 0, 0)


def test_a_row_names_each_target_it_misses():
    keda = summary("keda", 0.90, 3.0)
    ok = Row("spiky", 0, 100, summary("ours", 0.995, 2.0, 0.04), 1.8, {"keda": keda})
    assert ok.misses() == [] and render(ok).endswith("| yes |")
    bad = Row("spiky", 1, 100, summary("ours", 0.98, 2.5, 0.08), 2.0, {"keda": keda, "hpa": summary("hpa", 0.7, 1.0)})
    assert bad.misses() == ["attainment 98.00%", "overflow 8.0%", "replica-hours vs bound", "vs hpa"]
    assert Row("x", 0, 1, summary("ours", 1.0, 1.0), None, {}).misses() == ["replica-hours vs bound"]  # no bound
