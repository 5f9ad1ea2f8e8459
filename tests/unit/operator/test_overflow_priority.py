"""autoscaling.priority: which of the overflow budget and the SLO wins where both cannot hold. The spec's choice reaches
the gateway (budget: it caps overflow at overflowShare), and the OverflowBudget condition says which the policy chose
and why (controller/budget_condition.py), from the autoscaler's decayed spend through the control loop's status."""

import pytest
from floodway.operator.autoscaler.budget import OverflowSpend
from floodway.operator.autoscaler.signals import GatewaySample, Scrape
from floodway.operator.controller.budget_condition import budget_condition
from floodway.operator.controller.loop import first_state, step, tick_status
from floodway.operator.controller.status import Observation
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.overflow_budget import ShareSpend
from floodway.operator.render.gateway import gateway_config
from floodway.operator.spec import InferenceServiceSpec
from pydantic import ValidationError

API = {"enabled": True, "baseURL": "https://api.example/v1", "apiKeySecretRef": {"name": "k", "key": "k"}}


def spec(priority: str | None = None, overflow=API) -> InferenceServiceSpec:
    autoscaling = {"overflowShare": 0.05} | ({"priority": priority} if priority else {})
    return InferenceServiceSpec.model_validate({"model": "m", "autoscaling": autoscaling, "overflow": overflow})


def test_the_slo_wins_by_default_and_budget_caps_overflow_in_the_gateway():
    assert spec().autoscaling.priority == "slo"
    assert "max_share" not in gateway_config(spec(), {"static": []}, 0)["overflow"]
    config = GatewayConfig.model_validate(gateway_config(spec("budget"), {"static": []}, 0))
    assert config.overflow_policy().budget.max_share == 0.05
    assert "max_share" not in gateway_config(spec("budget", {"enabled": False}), {"static": []}, 0)["overflow"]
    with pytest.raises(ValidationError, match="priority"):
        spec("cost")
    with pytest.raises(ValidationError, match="max_share"):
        GatewayConfig.model_validate({"backends": {"static": ["http://e"]}, "overflow": {"max_share": 1.0}})


def spent(requests: float, tokens: float, declined: float = 0.0) -> OverflowSpend:
    return OverflowSpend(ShareSpend(1000.0, 1000.0 * requests, 1e6, 1e6 * tokens, at=0.0), declined)


@pytest.mark.parametrize(("priority", "spend", "attainment", "want"), [
    ("slo", spent(0.03, 0.04), 0.995, ("True", "WithinBudget")),
    ("slo", spent(0.03, 0.18), 0.999, ("False", "BudgetExceededForSLO")),  # long prompts: the token share
    ("slo", spent(0.07, 0.05), 0.95, ("False", "BudgetExceededForSLO")),
    ("budget", spent(0.02, 0.05, declined=40.0), 0.97, ("True", "SLOMissedForBudget")),
    ("budget", spent(0.02, 0.05, declined=40.0), 0.995, ("True", "WithinBudget")),  # kept local, SLO met anyway
    ("budget", spent(0.02, 0.04), 0.97, ("True", "WithinBudget")),  # a miss the budget did not cause
    ("budget", spent(0.02, 0.09), 0.97, ("False", "BudgetExceeded")),  # e.g. spent before the priority changed
])
def test_the_condition_says_which_of_the_budget_and_the_slo_the_policy_chose(priority, spend, attainment, want):
    status, reason, message = budget_condition(0.05, priority, spend, attainment, 0.99)
    assert (status, reason) == want
    assert "of requests and" in message and "overflowShare 5.0%" in message


def test_the_control_loop_sets_the_condition_from_the_autoscaler_s_spend():
    # Two ticks 10 s apart: 100 requests of 1000 tokens arrived, 4 overflowed with 20k tokens each (80% of tokens).
    s = spec()
    gw = [GatewaySample(), GatewaySample(requests_total=100, overflow_total=4, request_tokens_total=100_000,
                                         overflow_tokens_total=80_000)]
    state, status = first_state(1, s), {}
    for t in (0, 1):
        st = step(s, state, Scrape(10.0 * t, {}, gw[t]), 10.0 * t)
        state, status = st.state, tick_status(s, st, Observation(replicas=1), status, f"T{t}", 1, "", "")
    cond = next(c for c in status["conditions"] if c["type"] == "OverflowBudget")
    assert (cond["status"], cond["reason"]) == ("False", "BudgetExceededForSLO")
    assert "4.0% of requests and 80.0% of tokens" in cond["message"]
    off = tick_status(spec(overflow={"enabled": False}), st, Observation(), status, "T2", 1, "", "")
    assert "OverflowBudget" not in {c["type"] for c in off["conditions"]}
