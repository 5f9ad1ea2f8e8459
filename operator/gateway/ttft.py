"""The gateway's TTFT prediction for a request sent now: the prefill backlog ahead of it over the engine's prefill
rate (exported or learned from answers), plus its wait to be admitted into the batch (a slot or KV cache)."""

from __future__ import annotations

from dataclasses import dataclass, replace


def predict_ttft_from_backlog(backlog_tokens: float, prompt_tokens: int, engine_rate: float | None,
                              learned_rate: float | None, admission_wait: float = 0.0) -> float | None:
    """TTFT of a request sent now: the prompt tokens ahead of it on the engine (floodway_num_prefill_tokens_waiting,
    or the gateway's own requests without a first byte, whichever is more) and its own, at the prefill rate the
    engine exports (floodway_prefill_tokens_per_second: measured step times, while sequences decode), plus its wait
    for a batch slot or KV cache (`admission_wait_s`). A runtime that exports no rate (vLLM) is predicted at the
    rate earlier answers showed (`learned_prefill_rate`), and then only with something ahead: a pool that a stale
    low rate had emptied gets traffic again (the samples that correct a learned rate come only from answers it
    serves). None: no prediction (no rate yet, no admission wait). The default prediction of the gateway."""
    if engine_rate:
        return (backlog_tokens + prompt_tokens) / engine_rate + admission_wait
    if not learned_rate or backlog_tokens <= 0:
        return admission_wait or None
    return (backlog_tokens + prompt_tokens) / learned_rate + admission_wait


@dataclass(frozen=True)
class SlotHold:
    """An engine's slot-seconds (requests running x time) and finished requests, each a sum decaying with
    SLOT_HOLD_HALF_LIFE_S: their ratio is the mean time a request holds a batch slot (Little's law), recent
    traffic weighing most. Idle spans add nothing and decay nothing, so a burst after quiet minutes meets the
    hold time of the last busy span."""

    slot_s: float = 0.0
    finished: float = 0.0
    counter: float | None = None  # the engine's finished-requests counter at the last update
    running: float = 0.0  # requests running at the last update

    @property
    def mean_s(self) -> float | None:
        return self.slot_s / self.finished if self.finished > 0 else None


SLOT_HOLD_HALF_LIFE_S = 60.0


def slot_hold_update(h: SlotHold, running: float, finished_counter: float, dt_s: float) -> SlotHold:
    """After a scrape `dt_s` after the previous one: requests running now, the finished counter now."""
    if h.counter is None or finished_counter < h.counter:  # the first scrape, or the engine restarted
        return replace(h, counter=finished_counter, running=running)
    finished = finished_counter - h.counter
    if finished == 0 and running == 0 and h.running == 0:
        return h
    k = 0.5 ** (max(dt_s, 0.0) / SLOT_HOLD_HALF_LIFE_S)
    return SlotHold(h.slot_s * k + (h.running + running) / 2 * max(dt_s, 0.0), h.finished * k + finished,
                    finished_counter, running)


def slot_wait_s(requests_ahead: float, max_num_seqs: float, mean_hold_s: float | None) -> float:
    """How long a request sent now waits for a batch slot: the engine runs `max_num_seqs` at once (0: unknown) and
    has `requests_ahead` running or queued; when they fill the batch, slots free at max_num_seqs / mean hold time
    per second, and this request needs the (requests_ahead + 1 - max_num_seqs)-th. The prefill backlog alone
    missed it: behind a full batch of long answers a short prompt waits for one of them to finish."""
    need = requests_ahead + 1 - max_num_seqs
    if max_num_seqs <= 0 or need <= 0 or not mean_hold_s:
        return 0.0
    return need * mean_hold_s / max_num_seqs


def kv_wait_s(tokens_ahead: float, prompt_tokens: int, kv_usage: float, kv_tokens: float,
              mean_hold_s: float | None) -> float:
    """How long a request sent now waits for KV cache: the prompt tokens ahead of it and its own need more than the
    free share of the cache's `kv_tokens` (0: unknown), and the running requests release what they hold as they
    finish, kv_usage x kv_tokens per mean hold time. The slot wait's twin where the cache, not `max_num_seqs`, caps
    the batch (long prompts queue with slots free), which the prefill rate does not show: the queued prompts do not
    prefill until blocks free up."""
    short = tokens_ahead + prompt_tokens - (1.0 - kv_usage) * kv_tokens
    if kv_tokens <= 0 or kv_usage <= 0 or short <= 0 or not mean_hold_s:
        return 0.0
    return short * mean_hold_s / (kv_usage * kv_tokens)


def admission_wait_s(mean_hold_s: float | None, requests_ahead: float, max_num_seqs: float, tokens_ahead: float,
                     prompt_tokens: int, kv_usage: float, kv_tokens: float) -> float:
    """A request's wait to be admitted into the engine's batch: for a slot or for KV cache, whichever is longer (a
    finishing request frees both)."""
    return max(slot_wait_s(requests_ahead, max_num_seqs, mean_hold_s),
               kv_wait_s(tokens_ahead, prompt_tokens, kv_usage, kv_tokens, mean_hold_s))


def prefill_rate_sample(backlog_tokens: float, prompt_tokens: int, ttft_s: float) -> float | None:
    """The prefill rate one streamed answer shows: the tokens that were ahead of it and its own, over the time to
    its first byte. (A whole answer's first byte comes after its last token: the gateway samples streams only.)"""
    return (backlog_tokens + prompt_tokens) / ttft_s if ttft_s > 0 and prompt_tokens > 0 else None


PREFILL_RATE_EWMA = 0.2  # weight of each new sample in the learned prefill rate


def learned_prefill_rate(rate: float | None, sample: float | None) -> float | None:
    """The gateway's prefill rate after one more answer's sample (prefill_rate_sample; None: no sample)."""
    if sample is None:
        return rate
    return sample if rate is None else (1 - PREFILL_RATE_EWMA) * rate + PREFILL_RATE_EWMA * sample


def predict_ttft_s(waiting_per_ready: float, running_per_ready: float, mean_e2e_s: float | None,
                   base_ttft_s: float) -> float | None:
    """The former prediction, kept for the simulator's comparison (`--no-prefill-backlog-ttft`): its own prefill
    time plus the wait for the queue ahead of it to start. Queued requests start as running ones finish, so a
    replica drains `running / mean e2e latency` requests per second (Little's law); None until a latency
    has been observed. It misses bursts of long prompts, which add no requests but many prefill tokens."""
    if mean_e2e_s is None or mean_e2e_s <= 0:
        return None
    return base_ttft_s + waiting_per_ready * mean_e2e_s / max(running_per_ready, 1.0)
