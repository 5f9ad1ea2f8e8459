"""Which request the scheduler serves first: vLLM's --scheduling-policy and per-request `priority` (torch-free).

fcfs: by arrival. priority: by rank, the request's priority (lower first, as vLLM) then its arrival; the
lowest-ranked running request is the first preempted. Under fcfs a request's priority must be 0, as vLLM
refuses others: a priority silently ignored would mislead whoever set it.
"""

FCFS, PRIORITY = "fcfs", "priority"
POLICIES = (FCFS, PRIORITY)


def rank(req) -> tuple[int, float]:
    """A request's place in the priority policy's order: lower goes first."""
    return req.priority, req.metrics.arrival_time


def check_priority(policy: str, priority) -> None:
    """Raises ValueError (naming the field) for a priority this policy cannot honour."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an integer, got {priority!r}")
    if priority and policy != PRIORITY:
        raise ValueError(f"priority {priority} needs --scheduling-policy {PRIORITY}; this engine schedules {policy} "
                         "(first come, first served), where every request has priority 0")
