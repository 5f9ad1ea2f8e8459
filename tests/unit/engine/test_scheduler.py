import pytest
from floodway.engine.kv_manager import KVManager
from floodway.engine.outputs import RequestMetrics
from floodway.engine.request import Request
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.scheduler import Scheduler


def req(rid, n, priority=0, arrival=0.0):
    r = Request(rid, list(range(100, 100 + n)), SamplingParams(), RequestMetrics(arrival))
    r.priority = priority
    return r


def scheduled(out):
    return [(s.req.request_id, s.num_new_tokens) for s in out.seqs]


def advance(out):
    """What the engine does after the forward: mark computed, sample a token for finished chunks."""
    for s in out.seqs:
        samples = s.samples
        s.req.num_computed_tokens += s.num_new_tokens
        if samples:
            s.req.append_token(7)


def test_budget_chunks_long_prompt_alongside_decodes():
    sched = Scheduler(KVManager(64, 4), max_num_seqs=8, max_num_batched_tokens=10, chunked_prefill=True)
    a = req("a", 3)
    sched.add(a)
    advance(sched.schedule())  # a prefilled and sampled
    b = req("b", 25)
    sched.add(b)
    out = sched.schedule()
    assert [(s.req.request_id, s.num_new_tokens) for s in out.seqs] == [("a", 1), ("b", 9)]
    assert not out.seqs[1].samples
    advance(out)
    out = sched.schedule()
    assert [(s.req.request_id, s.num_new_tokens) for s in out.seqs] == [("a", 1), ("b", 9)]


def test_no_chunking_waits_for_budget_and_max_num_seqs_caps_running():
    sched = Scheduler(KVManager(64, 4), max_num_seqs=2, max_num_batched_tokens=10, chunked_prefill=False)
    for rid, n in [("a", 4), ("b", 4), ("c", 2)]:
        sched.add(req(rid, n))
    out = sched.schedule()
    assert [s.req.request_id for s in out.seqs] == ["a", "b"]  # c: max_num_seqs reached
    big = Scheduler(KVManager(64, 4), max_num_seqs=8, max_num_batched_tokens=10, chunked_prefill=False)
    big.add(req("x", 11))
    assert big.schedule().seqs == []


def test_preemption_takes_newest_first_and_requeues_it_at_the_front():
    kv = KVManager(num_blocks=4, block_size=4)
    sched = Scheduler(kv, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=True)
    old, new = req("old", 7), req("new", 7)  # two blocks each once they grow to 8 + 1 tokens
    sched.add(old)
    sched.add(new)
    advance(sched.schedule())  # each holds 2 blocks, 8 tokens (7 computed)
    advance(sched.schedule())  # both decode into their 2nd block's last slot
    out = sched.schedule()  # each needs a 3rd block: pool is empty, so "new" is preempted
    assert [r.request_id for r in out.preempted] == ["new"]
    assert [s.req.request_id for s in out.seqs] == ["old"]
    assert sched.waiting[0] is new and new.num_computed_tokens == 0
    assert sched.counters.num_preemptions == 1
    for r in (old, new):
        sched.finish(r)
    assert kv.pool.num_free == 4


def test_prefill_budget_caps_prefill_only_in_steps_that_decode():
    sched = Scheduler(KVManager(64, 4), max_num_seqs=8, max_num_batched_tokens=32, chunked_prefill=True)
    first = req("a", 20)
    sched.add(first)
    out = sched.schedule(prefill_budget=8)  # nothing decodes yet: the whole token budget
    assert [(s.req.request_id, s.num_new_tokens) for s in out.seqs] == [("a", 20)]
    advance(out)
    sched.add(req("b", 30))
    assert sched.num_prefill_tokens_waiting == 30
    out = sched.schedule(prefill_budget=8)  # "a" decodes: b's prefill gets 8 tokens, not 31
    assert [(s.req.request_id, s.num_new_tokens) for s in out.seqs] == [("a", 1), ("b", 8)]
    advance(out)
    assert sched.num_prefill_tokens_waiting == 22
    out = sched.schedule()  # no budget: the step's whole token budget
    assert [(s.req.request_id, s.num_new_tokens) for s in out.seqs] == [("a", 1), ("b", 22)]


@pytest.mark.parametrize("policy,admitted", [("fcfs", ["a", "b"]), ("priority", ["b", "c"])])
def test_priority_policy_admits_lower_values_first_ties_by_arrival(policy, admitted):
    sched = Scheduler(KVManager(64, 4), max_num_seqs=2, max_num_batched_tokens=64, chunked_prefill=True,
                      policy=policy)
    for rid, priority, arrival in [("a", 2, 0.0), ("b", 0, 1.0), ("d", 1, 3.0), ("c", 0, 2.0)]:
        sched.add(req(rid, 4, priority, arrival))
    assert [s.req.request_id for s in sched.schedule().seqs] == admitted


@pytest.mark.parametrize("policy,victim", [("fcfs", "new"), ("priority", "old")])
def test_under_kv_pressure_the_lowest_priority_running_request_is_preempted_first(policy, victim):
    """"old" arrived first but has the lower priority (the higher value): the priority policy preempts it."""
    kv = KVManager(num_blocks=4, block_size=4)
    sched = Scheduler(kv, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=True, policy=policy)
    old, new = req("old", 7, priority=1, arrival=0.0), req("new", 7, priority=0, arrival=1.0)
    later = req("later", 3, priority=1, arrival=2.0)
    for r in (old, new):
        sched.add(r)
    advance(sched.schedule())
    sched.add(later)  # max_num_seqs leaves room, the pool does not
    advance(sched.schedule())  # both decode into their 2nd block's last slot
    out = sched.schedule()  # each needs a 3rd block: one is preempted
    assert [r.request_id for r in out.preempted] == [victim]
    assert [s.req.request_id for s in out.seqs] == [{"old": "new", "new": "old"}[victim]]
    assert sched.waiting[0].request_id == victim  # first in line again, ahead of "later"
    for r in (old, new, later):
        sched.finish(r)
    assert kv.pool.num_free == 4


def first_token_step(policy):
    """Steps from a high-priority arrival to its first token while a long low-priority prompt is being prefilled
    (8 tokens a step) and another low-priority request decodes; the scheduled chunks of the arrival's step."""
    sched = Scheduler(KVManager(64, 4), max_num_seqs=8, max_num_batched_tokens=8, chunked_prefill=True,
                      policy=policy)
    decoding, long = req("decoding", 2, priority=5, arrival=0.0), req("long", 60, priority=5, arrival=1.0)
    sched.add(decoding)
    advance(sched.schedule())
    sched.add(long)
    advance(sched.schedule())
    assert 0 < long.num_computed_tokens < long.num_prompt_tokens  # its prefill is under way
    urgent, batch = req("urgent", 3, priority=0, arrival=2.0), req("batch", 6, priority=9, arrival=3.0)
    sched.add(urgent)
    sched.add(batch)
    for step in range(1, 20):
        out = sched.schedule()
        if step == 1:
            first = scheduled(out)
        advance(out)
        if urgent.output_token_ids:
            return step, first
    raise AssertionError("no first token")


def test_a_prompt_being_prefilled_yields_the_step_to_a_higher_priority_arrival():
    """A long low-priority prompt delays a high-priority request's first token by no more than the step in flight
    (here none: the arrival's first step serves it); fcfs makes it wait for the whole prompt. The decode still goes
    first, the yielding prompt gets what is left, and a request ranked below it takes none of that."""
    step, first = first_token_step("priority")
    assert step == 1
    assert first == [("decoding", 1), ("urgent", 3), ("long", 4)]
    step, first = first_token_step("fcfs")
    assert step > 2 and first == [("decoding", 1), ("long", 7)]



def batch_full_then_urgent(policy, *, seats, blocks, priority=0, arrival=2.0):
    """Two priority-9 requests decoding, then a waiting one of `priority`, with `seats` seats and `blocks` blocks
    of 4 tokens in all: the next step's output (not yet advanced) and the scheduler."""
    kv = KVManager(num_blocks=blocks, block_size=4)
    sched = Scheduler(kv, max_num_seqs=seats, max_num_batched_tokens=64, chunked_prefill=True, policy=policy)
    for rid, t in [("b1", 0.0), ("b2", 1.0)]:
        sched.add(req(rid, 5, priority=9, arrival=t))
    advance(sched.schedule())
    sched.add(req("urgent", 6, priority=priority, arrival=arrival))
    return sched.schedule(), sched


@pytest.mark.parametrize("seats,blocks", [(2, 64), (8, 5)])
def test_a_waiting_request_preempts_a_lower_priority_one_for_its_seat_or_its_blocks(seats, blocks):
    """Seats: max_num_seqs is full. Blocks: b1 and b2 hold 2 blocks each and "urgent" needs 2, with 1 free. The
    priority policy preempts the newest of the lower priority (b2) and serves "urgent" in the same step; b2 waits
    behind it, to be recomputed. fcfs serves the batch."""
    out, sched = batch_full_then_urgent("priority", seats=seats, blocks=blocks)
    assert [r.request_id for r in out.preempted] == ["b2"]
    assert scheduled(out) == [("b1", 1), ("urgent", 6)]
    assert [r.request_id for r in sched.waiting] == ["b2"] and sched.waiting[0].num_computed_tokens == 0
    out, sched = batch_full_then_urgent("fcfs", seats=seats, blocks=blocks)
    assert out.preempted == [] and scheduled(out) == [("b1", 1), ("b2", 1)]


def test_only_a_strictly_higher_priority_preempts_so_the_preempted_never_preempt_back():
    # Of the same priority, even ranked above both by its arrival, a waiting request waits for a seat.
    out, _ = batch_full_then_urgent("priority", seats=2, blocks=64, priority=9, arrival=-1.0)
    assert out.preempted == [] and scheduled(out) == [("b1", 1), ("b2", 1)]
    out, sched = batch_full_then_urgent("priority", seats=2, blocks=64)
    for _ in range(3):  # b2 waits behind b1 and "urgent" without taking a seat back
        advance(out)
        out = sched.schedule()
        assert out.preempted == [] and scheduled(out) == [("urgent", 1), ("b1", 1)]
