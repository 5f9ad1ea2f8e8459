"""The gateway: an OpenAI-compatible proxy in front of the engines that overflows to an external API.

Decisions are pure functions, one file each: the routing score and pick (routing.py), the overflow rule
(overflow.py), its budget (overflow_budget.py), the circuit breaker (breaker.py) and the TTFT prediction (ttft.py);
backends.py, proxy.py and app.py are the thin shell around them.
"""
