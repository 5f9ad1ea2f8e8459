import pytest
from floodway.engine.prefill_budget import HEADROOM, MIN_PREFILL_TOKENS, StepTimes, prefill_budget_tokens

pytestmark = pytest.mark.unit


def test_budget_is_the_prefill_that_fits_in_the_tpot_slo_beside_the_decodes():
    # 50 ms SLO, 10 ms decode step, 20 us per prefill token: (0.9 * 50 - 10) ms / 20 us = 1750 tokens.
    assert prefill_budget_tokens(0.05, 0.010, 20e-6, 2048) == int((HEADROOM * 0.05 - 0.010) / 20e-6)
    assert prefill_budget_tokens(0.05, 0.010, 1e-6, 2048) == 2048  # capped by the step's token budget
    assert prefill_budget_tokens(0.05, 0.044, 20e-6, 2048) == MIN_PREFILL_TOKENS  # decodes nearly fill it
    assert prefill_budget_tokens(0.05, 0.060, 20e-6, 2048) == 2048  # decodes alone miss it: capping saves nothing


def test_step_times_learn_decode_and_prefill_costs_from_measured_steps():
    times = StepTimes()
    assert times.budget(0.05, 2048) == 2048  # no prefill timed yet
    times.observe(num_decodes=4, num_prefill_tokens=0, seconds=0.010)
    times.observe(num_decodes=4, num_prefill_tokens=1000, seconds=0.030)  # 20 us per prefill token
    assert times.decode_s == pytest.approx(0.010)
    assert times.s_per_prefill_token == pytest.approx(20e-6)
    assert times.budget(0.05, 2048) == prefill_budget_tokens(0.05, 0.010, 20e-6, 2048)
