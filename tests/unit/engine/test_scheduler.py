from floodway.engine.kv_manager import KVManager
from floodway.engine.outputs import RequestMetrics
from floodway.engine.request import Request
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.scheduler import Scheduler


def req(rid, n):
    return Request(rid, list(range(100, 100 + n)), SamplingParams(), RequestMetrics(0.0))


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
