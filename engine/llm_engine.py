"""The step-level engine: add, abort, step, stats. Exactly one thread owns an instance."""

import dataclasses
import time

import torch
from floodway.engine.config import EngineConfig
from floodway.engine.detokenizer import Detokenizer
from floodway.engine.kv_manager import KVManager
from floodway.engine.model_runner import ModelRunner, SeqInput
from floodway.engine.outputs import EngineStats, RequestMetrics, RequestOutput
from floodway.engine.prefill_budget import StepTimes
from floodway.engine.request import Request
from floodway.engine.sampler import sample, token_logprobs
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.scheduler import Scheduler
from floodway.engine.structured_grammar import Grammars, advance


class LLMEngine:
    def __init__(self, config: EngineConfig):
        config.validate()
        self.config = config
        self.runner = ModelRunner(config)
        self.tokenizer = self.runner.tokenizer
        self.max_model_len = self.runner.max_model_len
        self.model_name = config.served_model_name or config.model
        self.kv = KVManager(self.runner.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.enable_chunked_prefill)
        if not config.enable_chunked_prefill and config.max_num_batched_tokens < self.max_model_len:
            raise ValueError(f"max_num_batched_tokens ({config.max_num_batched_tokens}) must be >= max_model_len "
                             f"({self.max_model_len}) when enable_chunked_prefill is off")
        self.requests: dict[str, list[Request]] = {}  # request id -> its unfinished sequences (n > 1: several)
        self.generator = torch.Generator(device=self.runner.device).manual_seed(config.seed)
        self._pending: list[RequestOutput] = []  # final outputs of aborted requests, returned by the next step
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.step_times = StepTimes()
        self.grammars = Grammars(self.tokenizer, self.runner.vocab_size, list(self.runner.eos_token_ids))

    # --- admission -------------------------------------------------------------------------------------------
    def validate_request(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Raises ValueError for a request that could never run; reads only config numbers (thread-safe)."""
        params.validate()
        n = len(prompt_token_ids)
        if n == 0:
            raise ValueError("prompt is empty")
        if any(not isinstance(t, int) or not 0 <= t < self.runner.vocab_size for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must be integers in [0, {self.runner.vocab_size})")
        if n + params.max_tokens > self.max_model_len:
            raise ValueError(f"prompt ({n} tokens) + max_tokens ({params.max_tokens}) exceeds max_model_len "
                             f"({self.max_model_len})")
        need = self.kv.blocks_needed(n + params.max_tokens)
        if need > self.kv.pool.num_total:
            raise ValueError(f"prompt + max_tokens needs {need} KV blocks, more than the whole pool "
                             f"({self.kv.pool.num_total})")
        if params.num_seqs > self.config.max_num_seqs:
            raise ValueError(f"{'best_of' if params.best_of else 'n'} ({params.num_seqs}) exceeds the sequences this "
                             f"engine runs at once (max_num_seqs {self.config.max_num_seqs})")
        if any(t >= self.runner.vocab_size for t in params.stop_token_ids):
            raise ValueError(f"stop_token_ids must be below the vocabulary size {self.runner.vocab_size}")
        if params.structured is not None:
            self.grammars.compile(params.structured)  # a bad schema fails here (compiled once, then cached)
        if any(t >= self.runner.vocab_size for t in params.logit_bias):
            raise ValueError(f"logit_bias token ids must be below the vocabulary size {self.runner.vocab_size}")

    def add_request(self, request_id: str, prompt: str | list[int], params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        if request_id in self.requests:
            raise ValueError(f"duplicate request_id {request_id!r}")
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt).input_ids
        elif isinstance(prompt, list):
            ids = list(prompt)
        else:
            raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        self.validate_request(ids, params)
        metrics = RequestMetrics(arrival_time or time.time())
        seqs = [self._sequence(request_id, ids, params, metrics, i) for i in range(params.num_seqs)]
        seqs[0].forks = seqs[1:]  # prefilled once, by the first
        if params.prompt_logprobs is not None:  # filled by whichever sequence computes the prompt, read by all
            lps, tops = [None], [None]
            for seq in seqs:
                seq.prompt_logprobs, seq.prompt_top_logprobs = lps, tops
        self.requests[request_id] = seqs
        self.scheduler.add(seqs[0])
        self.prompt_tokens_total += len(ids)

    def _sequence(self, request_id: str, ids: list[int], params: SamplingParams, metrics: RequestMetrics,
                  index: int) -> Request:
        if params.num_seqs > params.n and params.logprobs is None:
            params = dataclasses.replace(params, logprobs=0)  # best_of ranks by the chosen tokens' logprobs
        req = Request(request_id, ids, params, metrics, index=index)
        if params.seed is not None:  # choice i draws from seed + i: reproducible, and unlike the others
            req.generator = torch.Generator(device=self.runner.device).manual_seed(params.seed + index)
        req.detok = Detokenizer(self.tokenizer, params.stop)
        req.grammar = self.grammars.matcher(params.structured) if params.structured is not None else None
        return req

    def abort_request(self, request_id: str) -> None:
        seqs = self.requests.pop(request_id, None)
        for i, req in enumerate(seqs or []):
            self.scheduler.finish(req)
            req.finish_reason = "abort"
            req.metrics.finished_time = time.time()
            self._pending.append(self._output(req, [], None, finished=i == len(seqs) - 1))

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    # --- one iteration ---------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        outputs, self._pending = self._pending, []
        slo_s = self.config.tpot_slo_ms / 1000.0
        sched = self.scheduler.schedule(self.step_times.budget(slo_s, self.config.max_num_batched_tokens)
                                        if slo_s else None)
        if not sched.seqs:
            return outputs
        seqs = sched.seqs
        started = time.perf_counter()
        inputs = [SeqInput(s.req.all_token_ids[s.req.num_computed_tokens:s.req.num_computed_tokens + s.num_new_tokens],
                           s.req.num_computed_tokens, self.kv.block_table(s.req), s.samples,
                           _num_prompt_logits(s.req, s.num_new_tokens)) for s in seqs]
        sampled = [s.req for s in seqs if s.samples]
        # Before the tokens are counted as computed: `samples` reads how many were.
        decodes = sum(1 for s in seqs if s.req.output_token_ids and s.num_new_tokens == 1 and s.samples)
        logits = self.runner.execute(inputs, self.kv.take_copies())
        logits, prompt_logits = logits[:len(sampled)], logits[len(sampled):]
        if len(prompt_logits):
            _collect_prompt_logprobs([s.req for s in seqs], inputs, prompt_logits)
        for s in seqs:
            s.req.num_computed_tokens += s.num_new_tokens
            self.kv.cache_filled_blocks(s.req)
        # Once a request's prompt is computed its other sequences fork off it and sample from the same logits.
        rows = [i for i, req in enumerate(sampled) for _ in range(1 + len(req.forks))]
        sampling = [seq for req in sampled for seq in (req, *self.scheduler.fork(req))]
        if len(rows) > len(sampled):
            logits = logits[rows]
        if sampling:
            self.grammars.mask(logits, [r.grammar for r in sampling])  # before sampling, so only allowed tokens
            out = sample(logits, [r.params for r in sampling], [r.generator for r in sampling], self.generator,
                         [r.prompt_token_ids for r in sampling], [r.output_token_ids for r in sampling],
                         self.runner.eos_token_ids)
        # The serving loop sleeps --step-delay-ms after each step: part of the step's time as clients see it.
        seconds = time.perf_counter() - started + self.config.step_delay_ms / 1000
        self.step_times.observe(decodes, sched.num_tokens - decodes, seconds)
        now = time.time()
        for i, req in enumerate(sampling):
            outputs.append(self._append(req, out.tokens[i], out.logprobs[i] if out.logprobs else None,
                                        out.top_logprobs[i] if out.top_logprobs else None, now))
        return outputs

    def _append(self, req: Request, token: int, logprob: float | None, top: dict[int, float] | None,
                now: float) -> RequestOutput:
        p = req.params
        new = [token] if p.max_tokens else []  # max_tokens 0: prefill only (prompt logprobs), nothing generated
        if new:
            self._add_token(req, token, logprob, now)
        else:
            req.finish_reason = "length"
        finished = False
        if req.finish_reason is not None:
            req.metrics.finished_time = now
            self.scheduler.finish(req)
            seqs = self.requests[req.request_id]
            seqs.remove(req)
            if not seqs:
                del self.requests[req.request_id]
                finished = True
        new_logprobs = [logprob] if new and p.logprobs is not None else None
        return self._output(req, new, new_logprobs, finished, [top] if new and top is not None else None)

    def _add_token(self, req: Request, token: int, logprob: float | None, now: float) -> None:
        """Appends a sampled token and sets finish_reason if it ends the sequence."""
        req.append_token(token)
        grammar_done = req.grammar is not None and advance(req.grammar, token)
        if logprob is not None:
            req.cumulative_logprob += logprob
        self.generation_tokens_total += 1
        if req.metrics.first_token_time is None:
            req.metrics.first_token_time = now
        p = req.params
        if token in p.stop_token_ids:
            req.finish_reason, req.stop_reason = "stop", token
        elif grammar_done:  # the output is complete; only a stop token was allowed
            req.finish_reason = "stop"
        elif not p.ignore_eos and token in self.runner.eos_token_ids:
            req.finish_reason = "stop"
        else:
            stop = req.detok.add(token, check_stop=len(req.output_token_ids) >= p.min_tokens)
            if stop is not None:
                req.finish_reason, req.stop_reason = "stop", stop
            elif len(req.output_token_ids) >= p.max_tokens or req.num_tokens >= self.max_model_len:
                req.finish_reason = "length"

    def _output(self, req: Request, new_ids: list[int], new_logprobs: list[float] | None,
                finished: bool, new_top_logprobs: list[dict[int, float]] | None = None) -> RequestOutput:
        return RequestOutput(
            request_id=req.request_id, prompt_token_ids=req.prompt_token_ids, new_token_ids=new_ids,
            output_token_ids=list(req.output_token_ids), new_text=req.detok.take_new(req.finish_reason is not None),
            text=req.detok.text, finished=finished, finish_reason=req.finish_reason, stop_reason=req.stop_reason,
            new_logprobs=new_logprobs, num_cached_tokens=max(req.num_cached_tokens, 0), metrics=req.metrics,
            index=req.index, cumulative_logprob=req.cumulative_logprob if req.params.logprobs is not None else None,
            new_top_logprobs=new_top_logprobs, prompt_logprobs=req.prompt_logprobs,
            prompt_top_logprobs=req.prompt_top_logprobs)

    # --- observability ---------------------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        pool, c = self.kv.pool, self.scheduler.counters
        used = pool.num_total - pool.num_free
        running = self.scheduler.running
        held = sum(len(self.kv.block_table(r)) for r in running) * self.kv.block_size
        live = sum(min(r.num_computed_tokens, r.num_tokens) for r in running)
        return EngineStats(
            num_running=len(running), num_waiting=len(self.scheduler.waiting), num_free_blocks=pool.num_free,
            num_total_blocks=pool.num_total, kv_cache_usage=used / pool.num_total,
            prompt_tokens_total=self.prompt_tokens_total, generation_tokens_total=self.generation_tokens_total,
            num_preemptions_total=c.num_preemptions, prefix_cache_queries_total=c.prefix_queries,
            prefix_cache_hits_total=c.prefix_hits, kv_utilization=live / held if held else 0.0,
            block_size=self.kv.block_size, max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
            num_prefill_tokens_waiting=self.scheduler.num_prefill_tokens_waiting,
            prefill_tokens_per_s=self.step_times.prefill_rate(self.config.tpot_slo_ms / 1000.0,
                                                              self.config.max_num_batched_tokens) or 0.0)


def _num_prompt_logits(req: Request, num_new_tokens: int) -> int:
    """Leading positions of this chunk whose logits give prompt logprobs: position p scores prompt token p+1."""
    if req.prompt_logprobs is None:
        return 0
    start = req.num_computed_tokens
    return max(0, min(start + num_new_tokens, req.num_prompt_tokens - 1) - start)


def _collect_prompt_logprobs(reqs: list[Request], inputs: list[SeqInput], logits: torch.Tensor) -> None:
    """Appends the prompt logprobs these rows (each seq's num_prompt_logits, in order) give, skipping positions
    already collected (a prompt recomputed after preemption)."""
    row = 0
    for req, inp in zip(reqs, inputs, strict=True):
        k, start = inp.num_prompt_logits, inp.start_pos
        if not k:
            continue
        targets = torch.tensor(req.prompt_token_ids[start + 1:start + k + 1])
        chosen, top = token_logprobs(logits[row:row + k], targets, [req.params.prompt_logprobs] * k)
        row += k
        for j in range(len(req.prompt_logprobs) - 1 - start, k):
            req.prompt_logprobs.append(chosen[j])
            req.prompt_top_logprobs.append(top[j] if top else None)
