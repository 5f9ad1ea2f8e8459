"""The OverflowBudget condition: whether the overflow budget (autoscaling.overflowShare, of the requests and of their
tokens over the budget's window) holds, and where it and the SLO could not both hold, which one autoscaling.priority
chose. Pure: the autoscaler's decayed spend (autoscaler/budget.OverflowSpend, from the gateway's counters) and this
tick's attainment in, (status, reason, message) out.

- False, BudgetExceededForSLO: priority slo, and overflow took more than the share in requests or in tokens: the
  gateway sent the API what local capacity could not serve within the SLO (the autoscaler adds replicas to pay it
  back where capacity can come in time).
- False, BudgetExceeded: priority budget, and the window still holds more than the share (spent before the priority
  changed, or by a gateway that has not counted this window from its start).
- True, SLOMissedForBudget: priority budget, the gateway kept requests local that a trigger would have overflowed
  (its share spent), and attainment is below slo.attainment: the budget held at the SLO's expense.
- True, WithinBudget: otherwise.
"""

from floodway.operator.autoscaler.budget import OverflowSpend
from floodway.operator.gateway.overflow_budget import SHARE_WINDOW_S, spent_shares

CONDITION = "OverflowBudget"


def budget_condition(overflow_share: float, priority: str, spend: OverflowSpend, attainment: float | None,
                     slo_attainment: float) -> tuple[str, str, str]:
    requests, tokens = spent_shares(spend.share)
    spent = (f"overflow took {requests:.1%} of requests and {tokens:.1%} of tokens over the last "
             f"{SHARE_WINDOW_S / 60:g} min (overflowShare {overflow_share:.1%})")
    if max(requests, tokens) > overflow_share:
        if priority == "slo":
            return "False", "BudgetExceededForSLO", (f"{spent}: priority slo sends the overflow API what local "
                                                     "capacity cannot serve within the SLO")
        return "False", "BudgetExceeded", f"{spent}: spent before the gateway capped it (priority budget)"
    if spend.declined >= 1.0 and attainment is not None and attainment < slo_attainment:
        return "True", "SLOMissedForBudget", (f"{spent}; priority budget kept {spend.declined:.0f} requests local "
                                              f"that would have overflowed, and SLO attainment is {attainment:.3f} "
                                              f"< {slo_attainment:g}")
    return "True", "WithinBudget", spent
