import pytest
from floodway.operator.bench.gateway import bucket_quantile, histogram_buckets
from floodway.operator.bench.prediction import RATIO, prompts
from floodway.operator.gateway.metrics import MARGIN_BOUND, GatewayMetrics
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.gateway.payload import estimate_prompt_tokens


def test_prompts_span_40_to_400_tokens_and_share_no_first_block():
    texts = prompts(200, seed=3)
    sizes = [estimate_prompt_tokens({"prompt": t}) for t in texts]
    assert 35 <= min(sizes) and max(sizes) <= 400 and max(sizes) - min(sizes) > 250
    assert len({t[:16] for t in texts}) == len(texts)  # the prefix index would count a shared first block a hit
    assert prompts(5, seed=3) == texts[:5] and prompts(5, seed=4) != texts[:5]


def test_the_ratio_histogram_has_a_bound_where_the_shipped_margin_ends():
    assert MARGIN_BOUND == pytest.approx(1 / OverflowPolicy.predicted_ttft_factor, abs=1e-3)
    m = GatewayMetrics()
    before = histogram_buckets(m.render().decode(), RATIO)
    for ratio in (0.7, 0.9, 0.95, 1.05, 1.2, 2.5):
        m.ttft_over_predicted.observe(ratio)
    after = dict(histogram_buckets(m.render().decode(), RATIO))
    assert MARGIN_BOUND in after and after[MARGIN_BOUND] == 4 and after[float("inf")] == 6
    assert bucket_quantile(before, sorted(after.items()), 0.5) == 1.0  # 3 of 6 at or under 1
