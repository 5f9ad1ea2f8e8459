"""The gateway: an OpenAI-compatible proxy in front of the engines that overflows to an external API.

Decisions (routing score, overflow rule, budget, circuit breaker) are pure functions in routing.py and
overflow.py; backends.py, proxy.py and app.py are the thin shell around them.
"""
