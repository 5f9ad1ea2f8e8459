"""Speculative decoding's pure parts: the speculative config, n-gram proposals, the policy's draft counts, and
rejection sampling's output distribution (chi-square, shown first to catch a verifier that accepts every draft)."""

import math

import pytest
import torch
from floodway.engine.spec_decode import config as spec_config
from floodway.engine.spec_decode.ngram import propose
from floodway.engine.spec_decode.policy import Acceptance, Calibration, choose_num_drafts, expected_accepted
from floodway.engine.spec_decode.step_cost import StepCost, padded_rows
from floodway.engine.spec_decode.verify import verify


def chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper 0.1% point of the chi-square distribution (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("text, error", [
    ("[1]", "JSON object"), ("{", "JSON object"), ('{"method": "eagle", "num_speculative_tokens": 2}', "method"),
    ('{"method": "ngram"}', "num_speculative_tokens"), ('{"method": "ngram", "num_speculative_tokens": 0}', "positive"),
    ('{"method": "ngram", "num_speculative_tokens": 99}', "at most"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "k": 1}', "unknown keys"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 3}', "exceeds"),
    ('{"method": "draft_model", "num_speculative_tokens": 2}', "needs model"),
])
def test_bad_speculative_config_is_refused_by_name(text, error):
    from floodway.engine.config import EngineConfig

    with pytest.raises(ValueError, match=error):
        EngineConfig(speculative_config=text).validate()


def test_speculative_config_parses_vllm_json():
    cfg = spec_config.parse('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 6}')
    assert (cfg.method, cfg.num_speculative_tokens, cfg.prompt_lookup_min, cfg.prompt_lookup_max) == ("ngram", 3, 2, 6)
    assert spec_config.parse(None) is None and spec_config.parse("") is None


def test_ngram_proposes_what_followed_the_latest_longest_match():
    #          0  1  2  3  4  5  6  7  8  9 10 11
    tokens = [5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 5, 6, 7]
    assert propose(tokens, 3, 2, 3) == [8, 9, 1]  # "5 6 7" matches at 0 (longest first), not "6 7" at 6
    assert propose(tokens, 3, 2, 2) == [2, 3, 5]  # "6 7": the latest earlier occurrence
    assert propose(tokens, 7, 1, 1) == [2, 3, 5, 6, 7, 2, 3]  # at the end, the recurrence repeats with its period
    assert propose([1, 2, 3, 4], 3, 1, 3) == []  # no suffix recurs
    assert propose(tokens, 0, 1, 3) == [] and propose([7], 3, 1, 3) == []
    assert propose([1, 1, 1, 1], 3, 2, 2) == [1, 1, 1]  # an occurrence overlapping the suffix counts
    # Token ids whose bytes straddle token boundaries must not match (256 = 00 01 00 00 little-endian).
    assert propose([1, 256, 9, 0, 1], 2, 1, 1) == [256, 9]
    assert propose([65536, 1, 0, 256, 7, 1], 1, 1, 1) == [0]


def test_policy_drafts_where_they_pay_and_none_at_large_batch():
    # Unmeasured: a plain decode step first, then every draft to time one.
    assert choose_num_drafts([0.9], [4], None, None) == [0]
    assert choose_num_drafts([0.9, 0.1], [4, 2], 0.02, None) == [4, 2]
    # One sequence, cheap verify rows: likely drafts pay, unlikely ones do not.
    assert choose_num_drafts([0.9], [4], 0.020, (0.0, 0.002)) == [4]
    assert choose_num_drafts([0.05], [4], 0.020, (0.0, 0.002)) == [0]
    # Likelier drafts first: the good sequence gets more of them than the poor one.
    ks = choose_num_drafts([0.9, 0.5], [4, 4], 0.020, (0.0, 0.002))
    assert ks[0] == 4 and 0 < ks[1] < 4
    # 32 sequences share the step's fixed part: verifying costs more than even likely drafts bring.
    assert choose_num_drafts([0.8] * 32, [4] * 32, 0.100, (0.0, 0.004)) == [0] * 32
    assert choose_num_drafts([0.9], [0], 0.02, (0.0, 0.002)) == [0]


def test_a_fixed_verify_cost_is_paid_for_by_enough_drafts_or_none():
    # Verifying at all costs as much as the plain step: one likely draft does not pay for it, four do.
    assert choose_num_drafts([0.9], [1], 0.020, (0.020, 0.002)) == [0]
    assert choose_num_drafts([0.9], [4], 0.020, (0.020, 0.002)) == [4]


def test_calibration_scales_the_gains_by_the_drafts_kept_over_those_expected():
    assert choose_num_drafts([0.9], [1], 0.020, (0.0, 0.015)) == [1]  # 1.9 tokens in 35 ms beat 1 in 20
    assert choose_num_drafts([0.9], [1], 0.020, (0.0, 0.015), calibration=0.5) == [0]  # 1.45 do not
    c = Calibration()
    assert c.ratio == 1.0
    for _ in range(500):
        c.update(expected=2.0, accepted=1)
    assert c.ratio == pytest.approx(0.5, abs=0.01)
    for _ in range(500):
        c.update(expected=1.0, accepted=3)
    assert c.ratio == 1.0  # never above: a draft gives at most one token
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)


def test_acceptance_rate_starts_at_the_prior_and_follows_the_record():
    a = Acceptance()
    assert a.rate(0.5) == 0.5
    for _ in range(20):
        a.update(4, 4)
    assert a.rate(0.5) > 0.9
    for _ in range(40):
        a.update(4, 0)  # only the first position is reached, and refused
    assert a.rate(0.5) < 0.2


def _sample_pairs(verifier, x, drafts, n: int) -> torch.Tensor:
    """n runs of the verifier on one two-row sequence: the first token each run emits."""
    g = torch.Generator().manual_seed(0)
    return torch.tensor([verifier(x, drafts, [False], [None], g)[0][0] for _ in range(n)])


def test_rejection_sampling_emits_the_targets_distribution_and_an_accept_all_verifier_does_not():
    p = torch.tensor([0.05, 0.15, 0.5, 0.3])  # the target's distribution at the first draft's position
    x = torch.log(torch.stack([p, torch.full((4,), 0.25)]))
    n = 2000

    def accept_all(x, drafts, greedy, generators, default_generator):  # a broken verifier: keeps every draft
        tail = verify(x[len(drafts[0]):], [[]], greedy, generators, default_generator)
        return [drafts[0] + tail[0]]

    crit = chi2_critical(len(p) - 1)
    for draft in (0, 2, 3):  # an unlikely, the likeliest and a middling draft
        for verifier, ok in ((verify, True), (accept_all, False)):
            counts = torch.bincount(_sample_pairs(verifier, x, [[draft]], n), minlength=4).float()
            stat = float(((counts - n * p) ** 2 / (n * p)).sum())
            assert (stat < crit) == ok, (draft, verifier.__name__, counts.tolist(), stat)


def test_greedy_verify_keeps_the_agreeing_prefix_then_the_targets_token():
    x = torch.full((4, 5), -1.0)
    x[0, 1] = x[1, 2] = x[2, 4] = x[3, 0] = 1.0  # argmax per row: 1, 2, 4, 0
    assert verify(x, [[1, 2, 3]], [True], [None]) == [[1, 2, 4]]
    assert verify(x, [[1, 2, 4]], [True], [None]) == [[1, 2, 4, 0]]
    assert verify(x, [[3, 2, 4]], [True], [None]) == [[1]]
    assert verify(x[:3], [[1], []], [True, True], [None, None]) == [[1, 2], [4]]


def test_step_cost_fit_prices_drafts_per_batch_and_turns_speculation_off_where_rows_dominate():
    # A CPU-like step: 20 ms of weights, 6 ms per row (decode or draft), 10 ms for verifying at all: rows dominate
    # past a few sequences.
    cost = StepCost()
    assert cost.decode_s(1) is None and cost.verify_s() is None
    for step in range(200):
        b, d = 1 + step % 32, (step % 3) * (step % 5)
        cost.observe(b, d, 0.020 + 0.006 * b + 0.006 * d + 0.010 * (d > 0))
    assert cost.decode_s(1) == pytest.approx(0.026) and cost.decode_s(32) == pytest.approx(0.212)
    assert cost.verify_s() == pytest.approx((0.010, 0.006))
    rates = 0.9
    assert choose_num_drafts([rates], [4], cost.decode_s(1), cost.verify_s())[0] >= 2
    assert choose_num_drafts([rates] * 32, [4] * 32, cost.decode_s(32), cost.verify_s()) == [0] * 32


def test_padded_rows_count_the_kernel_blocks_drafts_start():
    assert [padded_rows(1, d, 4) for d in range(9)] == [0, 0, 0, 0, 4, 4, 4, 4, 8]
    assert [padded_rows(8, d, 4) for d in (0, 1, 4, 5)] == [0, 4, 4, 8]
    assert [padded_rows(3, d, 1) for d in range(4)] == [0, 1, 2, 3]  # rows one by one: the drafts themselves


def test_drafts_that_start_a_row_block_are_priced_by_the_block():
    """A kernel taking rows 4 at a time (aten's int4 one on CPU): at one sequence three drafts fill the block the
    decode row started, and a fourth starts a block costing half the plain step, which its 0.33 expected tokens do
    not pay for; priced per row one by one, the fourth looks cheap and is taken."""
    cost = StepCost(row_tile=4)
    for step in range(200):
        d = (0, 3, 4)[step % 3]
        cost.observe(1, d, 0.020 + 0.003 * (d > 0) + 0.0025 * padded_rows(1, d, 4))
    assert cost.decode_s(1) == pytest.approx(0.020) and cost.verify_s() == pytest.approx((0.003, 0.0025))
    assert choose_num_drafts([0.76], [4], cost.decode_s(1), cost.verify_s(), row_tile=4) == [3]
    assert choose_num_drafts([0.76], [4], 0.020, (0.003, 0.0025)) == [4]
    # At 8 sequences (two full blocks) one draft costs a block as four do: the likely sequence's four fill it.
    assert choose_num_drafts([0.95] + [0.1] * 7, [4] * 8, 0.040, (0.001, 0.0012), row_tile=4) == [4] + [0] * 7


def test_step_cost_needs_steps_with_and_without_drafts():
    cost = StepCost()
    for _ in range(10):
        cost.observe(4, 0, 0.05)
    assert cost.decode_s(4) == pytest.approx(0.05) and cost.verify_s() is None
    cost.observe(4, 8, 0.09)
    fixed, per_draft = cost.verify_s()
    assert cost.decode_s(4) + fixed + 8 * per_draft == pytest.approx(0.09)
