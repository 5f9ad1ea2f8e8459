"""The step-level engine: add, abort, step, stats. Exactly one thread owns an instance."""

import dataclasses
import time

import torch
from floodway.engine.config import EngineConfig
from floodway.engine.detokenizer import Detokenizer
from floodway.engine.kv_manager import KVManager
from floodway.engine.lora.manager import LoRAManager
from floodway.engine.model_runner import ModelRunner, SeqInput
from floodway.engine.outputs import EngineStats, RequestMetrics, RequestOutput
from floodway.engine.prefill_budget import StepTimes
from floodway.engine.request import Request
from floodway.engine.sampler import processed_logits, sample, token_logprobs
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.scheduler import ScheduledSeq, Scheduler
from floodway.engine.scheduling_policy import check_priority
from floodway.engine.spec_decode import config as spec_config
from floodway.engine.spec_decode.draft import DraftModel
from floodway.engine.spec_decode.speculator import SpecCounters, Speculator
from floodway.engine.spec_decode.verify import verify
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
        spec = spec_config.parse(config.speculative_config)
        self.speculator = None
        if spec is not None:
            draft = DraftModel(config, spec.model, self.runner.num_blocks, self.max_model_len,
                               self.runner.vocab_size) if spec.method == "draft_model" else None
            self.speculator = Speculator(spec, self.kv, draft, cpu_time=self.runner.device.type == "cpu",
                                          row_tile=self.runner.row_tile)
        self.lora = LoRAManager(config, self.runner.lora) if config.enable_lora else None
        self.scheduler = Scheduler(self.kv, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.enable_chunked_prefill, self.speculator,
                                   config.max_loras if config.enable_lora else None, config.scheduling_policy)
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
    def validate_request(self, prompt_token_ids: list[int], params: SamplingParams, priority: int = 0) -> None:
        """Raises ValueError for a request that could never run; reads only config numbers (thread-safe)."""
        params.validate()
        check_priority(self.config.scheduling_policy, priority)
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
                    arrival_time: float | None = None, lora: str | None = None, priority: int = 0) -> None:
        """lora: the name of a LoRA adapter to run with (None: the base model); priority: lower is served first
        under the priority scheduling policy (vLLM's), 0 only under fcfs."""
        if request_id in self.requests:
            raise ValueError(f"duplicate request_id {request_id!r}")
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt).input_ids
        elif isinstance(prompt, list):
            ids = list(prompt)
        else:
            raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        self.validate_request(ids, params, priority)
        if lora is not None and self.lora is None:
            raise ValueError(f"LoRA adapter {lora!r} asked of an engine started without enable_lora")
        adapter = self.lora.resolve(lora) if lora is not None else None
        metrics = RequestMetrics(arrival_time or time.time())
        seqs = [self._sequence(request_id, ids, params, metrics, i) for i in range(params.num_seqs)]
        for seq in seqs:
            seq.lora, seq.priority = adapter, priority
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
        slots = self.lora.activate([s.req.lora for s in seqs]) if self.lora is not None else [-1] * len(seqs)
        inputs = [SeqInput(_step_tokens(s), s.req.num_computed_tokens, self.kv.block_table(s.req), s.samples,
                           _num_prompt_logits(s.req, s.num_new_tokens - s.num_spec), s.num_spec, slot)
                  for s, slot in zip(seqs, slots, strict=True)]
        sampled = [s for s in seqs if s.samples]
        # Before the tokens are counted as computed: `samples` reads how many were.
        decodes = sum(1 for s in seqs if s.req.output_token_ids and s.num_new_tokens - s.num_spec == 1 and s.samples)
        num_drafts = sum(s.num_spec for s in seqs)
        logits = self.runner.execute(inputs, self.kv.take_copies())
        num_rows = len(sampled) + num_drafts
        logits, prompt_logits = logits[:num_rows], logits[num_rows:]
        if len(prompt_logits):
            _collect_prompt_logprobs([s.req for s in seqs], inputs, prompt_logits)
        for s in seqs:
            s.req.num_computed_tokens += s.num_new_tokens - s.num_spec  # drafts count once accepted
            self.kv.cache_filled_blocks(s.req)
        # Once a request's prompt is computed its other sequences fork off it and sample from the same logits.
        rows, sampling, drafts, row = [], [], [], 0
        for s in sampled:
            for seq in (s.req, *self.scheduler.fork(s.req)):
                drafts.append(s.req.spec_token_ids[:s.num_spec] if seq is s.req else [])
                rows += range(row, row + len(drafts[-1]) + 1)
                sampling.append(seq)
            row += s.num_spec + 1
        if len(rows) > num_rows:
            logits = logits[rows]
        if num_drafts:
            tokens, lps, tops = self._verify(logits, sampling, drafts)
        elif sampling:
            self.grammars.mask(logits, [r.grammar for r in sampling])  # before sampling, so only allowed tokens
            out = sample(logits, [r.params for r in sampling], [r.generator for r in sampling], self.generator,
                         [r.prompt_token_ids for r in sampling], [r.output_token_ids for r in sampling],
                         self.runner.eos_token_ids)
            tokens = [[t] for t in out.tokens]
            lps = [[lp] for lp in out.logprobs] if out.logprobs else None
            tops = [[top] for top in out.top_logprobs] if out.top_logprobs else None
        # The serving loop sleeps --step-delay-ms after each step: part of the step's time as clients see it.
        seconds = time.perf_counter() - started + self.config.step_delay_ms / 1000
        prefill_tokens = sched.num_tokens - decodes - num_drafts
        self.step_times.observe(decodes, prefill_tokens, seconds)
        if self.speculator is not None:
            self.speculator.observe_step(decodes, num_drafts, prefill_tokens)
        now = time.time()
        for i, req in enumerate(sampling):
            outputs.append(self._append(req, tokens[i], lps[i] if lps else None, tops[i] if tops else None, now))
            if drafts[i]:
                self._settle_drafts(req, len(drafts[i]), len(tokens[i]) - 1)
        return outputs

    def _verify(self, logits: torch.Tensor, seqs: list[Request], drafts: list[list[int]]):
        """A step's tokens when some sequences verify drafts (rows as `step_inputs.build` keeps them): per sequence
        its accepted drafts and the target's next token, and their logprobs and top logprobs as `sample` gives."""
        self.grammars.mask_drafts(logits, [r.grammar for r in seqs], drafts)
        per_row = [(r, d[:j]) for r, d in zip(seqs, drafts, strict=True) for j in range(len(d) + 1)]
        params = [r.params for r, _ in per_row]
        penalized = any(p.penalized for p in params)  # only then the per-row token lists are read
        x = processed_logits(logits, params, [r.prompt_token_ids for r, _ in per_row] if penalized else None,
                             [r.output_token_ids + d for r, d in per_row] if penalized else None,
                             self.runner.eos_token_ids)
        tokens = verify(x, drafts, [r.params.greedy for r in seqs], [r.generator for r in seqs], self.generator)
        if all(p.logprobs is None for p in params):
            return tokens, None, None
        emitted = [t[j] if j < len(t) else 0 for t, d in zip(tokens, drafts, strict=True) for j in range(len(d) + 1)]
        chosen, top = token_logprobs(logits, torch.tensor(emitted), [p.logprobs or 0 for p in params])
        lps, tops, row = [], [], 0
        for t, d in zip(tokens, drafts, strict=True):
            lps.append(chosen[row:row + len(t)])
            tops.append(top[row:row + len(t)] if top else None)
            row += len(d) + 1
        return tokens, lps, tops

    def _settle_drafts(self, req: Request, num_drafts: int, num_accepted: int) -> None:
        """After a verify: the accepted drafts' KV counts as computed, the rejected ones' blocks are freed."""
        req.spec_token_ids = []
        if req.finish_reason is None:
            req.num_computed_tokens += num_accepted
            self.kv.trim(req, req.num_tokens)
            self.kv.cache_filled_blocks(req)
        self.speculator.record(req, num_drafts, num_accepted)

    def _append(self, req: Request, tokens: list[int], logprobs: list[float] | None,
                tops: list[dict[int, float] | None] | None, now: float) -> RequestOutput:
        p = req.params
        new = tokens if p.max_tokens else []  # max_tokens 0: prefill only (prompt logprobs), nothing generated
        for i, token in enumerate(new):
            self._add_token(req, token, logprobs[i] if logprobs else None, now)
            if req.finish_reason is not None:  # the rest were drafts past the end
                new = new[:i + 1]
                break
        if not new:
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
        new_logprobs = logprobs[:len(new)] if new and p.logprobs is not None else None
        return self._output(req, new, new_logprobs, finished, tops[:len(new)] if new and p.logprobs else None)

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
        spec = self.speculator.counters if self.speculator is not None else SpecCounters()
        return EngineStats(
            spec_num_drafts=spec.num_drafts, spec_num_draft_tokens=spec.num_draft_tokens,
            spec_num_accepted_tokens=spec.num_accepted_tokens, spec_accepted_per_pos=list(spec.accepted_per_pos),
            num_running=len(running), num_waiting=len(self.scheduler.waiting), num_free_blocks=pool.num_free,
            num_total_blocks=pool.num_total, kv_cache_usage=used / pool.num_total,
            prompt_tokens_total=self.prompt_tokens_total, generation_tokens_total=self.generation_tokens_total,
            num_preemptions_total=c.num_preemptions, prefix_cache_queries_total=c.prefix_queries,
            prefix_cache_hits_total=c.prefix_hits, kv_utilization=live / held if held else 0.0,
            block_size=self.kv.block_size, max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
            running_lora_adapters=_adapter_names(running), waiting_lora_adapters=_adapter_names(self.scheduler.waiting),
            max_lora=self.config.max_loras if self.lora is not None else 0,
            num_prefill_tokens_waiting=self.scheduler.num_prefill_tokens_waiting,
            prefill_tokens_per_s=self.step_times.prefill_rate(self.config.tpot_slo_ms / 1000.0,
                                                              self.config.max_num_batched_tokens) or 0.0)


def _adapter_names(reqs) -> list[str]:
    return sorted({r.lora.name for r in reqs if r.lora is not None})


def _step_tokens(s: ScheduledSeq) -> list[int]:
    """The tokens a scheduled sequence computes this step: its next chunk, then its drafts."""
    start = s.req.num_computed_tokens
    return s.req.all_token_ids[start:start + s.num_new_tokens - s.num_spec] + s.req.spec_token_ids[:s.num_spec]


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
