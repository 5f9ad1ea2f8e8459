"""What the engine hands back: per-request outputs and engine-wide stats (torch-free)."""

import dataclasses
from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    """Wall-clock `time.time()` seconds; None until the event happens."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    new_token_ids: list[int]
    output_token_ids: list[int]
    new_text: str
    text: str
    finished: bool  # the request's last output: every choice has finished
    finish_reason: str | None  # this choice's: None | "stop" | "length" | "abort"
    stop_reason: str | int | None
    new_logprobs: list[float] | None
    num_cached_tokens: int
    metrics: RequestMetrics
    # Per new token, its N most likely alternatives (token id -> logprob) when logprobs N > 0 was asked.
    new_top_logprobs: list[dict[int, float] | None] | None = None
    # Per prompt token when prompt_logprobs was asked (the first token has none): its logprob, its alternatives.
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[dict[int, float] | None] | None = None
    index: int = 0  # choice index within the request (n > 1)
    cumulative_logprob: float | None = None  # of the choice's tokens, where logprobs were computed


def final_choices(finals: list[RequestOutput], n: int) -> list[RequestOutput]:
    """A request's n choices from its sequences' final outputs, by index; with more sequences than n (best_of),
    the n with the highest cumulative logprob, best first, indexed 0..n-1."""
    if len(finals) <= n:
        return sorted(finals, key=lambda o: o.index)
    ranked = sorted(finals, key=lambda o: float("-inf") if o.cumulative_logprob is None else o.cumulative_logprob,
                    reverse=True)[:n]
    return [dataclasses.replace(o, index=i) for i, o in enumerate(ranked)]


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_total_blocks: int
    kv_cache_usage: float
    prompt_tokens_total: int
    generation_tokens_total: int
    num_preemptions_total: int
    prefix_cache_queries_total: int
    prefix_cache_hits_total: int
    # Live tokens over tokens in allocated blocks right now (how full the blocks in use are).
    kv_utilization: float = 0.0
    # Prompt tokens admitted or queued whose prefill has not run yet (the gateway predicts TTFT from it).
    num_prefill_tokens_waiting: int = 0
    # Prompt tokens per second while sequences decode, from measured step times (0: none timed yet).
    prefill_tokens_per_s: float = 0.0
    # Speculative decoding, as vLLM's spec_decode counters (none when it is off): verifies with drafts, drafts,
    # accepted drafts, and accepted drafts by position within a verify.
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    # Capacity, exported as vllm:cache_config_info so the gateway knows it before it has seen any load.
    block_size: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    # LoRA, as vLLM's vllm:lora_requests_info labels: adapters of running and of waiting requests, the slots.
    running_lora_adapters: list[str] = field(default_factory=list)
    waiting_lora_adapters: list[str] = field(default_factory=list)
    max_lora: int = 0
