import pytest
from floodway.engine.prefill_budget import HEADROOM, MIN_PREFILL_TOKENS, StepTimes, prefill_budget_tokens


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


def test_the_prefill_rate_is_a_decoding_steps_prefill_over_that_steps_time():
    times = StepTimes()
    assert times.prefill_rate(0.05, 2048) is None  # nothing timed: the gateway falls back to its learned rate
    times.observe(num_decodes=4, num_prefill_tokens=0, seconds=0.010)
    times.observe(num_decodes=4, num_prefill_tokens=1000, seconds=0.030)
    budget = prefill_budget_tokens(0.05, 0.010, 20e-6, 2048)  # 1750 tokens beside the decodes in a 45 ms step
    assert times.prefill_rate(0.05, 2048) == pytest.approx(budget / (0.010 + budget * 20e-6))
    assert times.prefill_rate(0.0, 2048) == pytest.approx(2048 / (0.010 + 2048 * 20e-6))  # no TPOT budget


def test_a_steps_fixed_part_is_not_charged_to_its_prefill_tokens():
    times = StepTimes()
    times.observe(num_decodes=0, num_prefill_tokens=3, seconds=0.060)  # the fixed part is not known yet
    assert times.s_per_prefill_token is None
    times.observe(num_decodes=1, num_prefill_tokens=0, seconds=0.050)  # e.g. a test engine's 50 ms step delay
    times.observe(num_decodes=0, num_prefill_tokens=400, seconds=0.070)  # 400 tokens in 20 ms beyond it
    assert times.s_per_prefill_token == pytest.approx(50e-6)
    # A step of 3 tokens, 100 us each beyond the fixed part, moves the estimate by its tokens' weight only.
    times.observe(num_decodes=0, num_prefill_tokens=3, seconds=0.0503)
    # (Both averages start at 0: the first step counts 0.2 into each, then 0.8 of that stays.)
    assert times.s_per_prefill_token == pytest.approx((0.16 * 0.020 + 0.2 * 0.0003) / (0.16 * 400 + 0.2 * 3))
    assert times.s_per_prefill_token < 51e-6
