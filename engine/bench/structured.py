"""Structured-output overhead per token, side by side on one engine: the same chat prompts decoded
unconstrained and under a JSON schema, in one batch each, one torch thread.

Prints for each run output tokens, CPU milliseconds per output token and wall tokens/s; for the constrained run
also the CPU time inside the grammar (filling and applying the next-token masks, advancing each sequence's state)
per output token, measured around those calls. CPU time is the comparable figure on a shared machine. The
constrained run goes first; each unconstrained request then generates (ignoring EOS) as many tokens as its
constrained twin did, so both runs step the same batch sizes for the same number of steps. The pair runs
`--rounds` times, alternating; each system's round with the least CPU time is printed.

    python -P -m floodway.engine.bench.structured [--model floodway/smollm2-135m-instruct] [--requests 8]
"""

import argparse
import time

import torch
from floodway.engine import llm_engine
from floodway.engine.config import EngineConfig
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.structured import StructuredSpec

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 4},
    "city": {"type": "string", "maxLength": 30}}, "required": ["name", "age", "hobbies", "city"],
    "additionalProperties": False}
TOPICS = ["a teacher", "a sailor", "a chef", "a painter", "a pilot", "a farmer", "a doctor", "a poet",
          "a baker", "a runner", "a singer", "a judge", "a miner", "a nurse", "a clown", "a monk"]


class Timed:
    """Wraps a callable and adds up the CPU seconds spent in it (one torch thread: the process's CPU time)."""

    def __init__(self, fn):
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args):
        t = time.process_time()
        try:
            return self.fn(*args)
        finally:
            self.seconds += time.process_time() - t


def run(engine, prompts: list[list[int]], spec: StructuredSpec | None, max_tokens: list[int]) -> dict:
    mask, advance = Timed(engine.grammars.mask), Timed(llm_engine.advance)
    engine.grammars.mask, llm_engine.advance = mask, advance
    try:
        for i, (ids, n) in enumerate(zip(prompts, max_tokens, strict=True)):
            engine.add_request(str(i), ids, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=spec is None,
                                                           structured=spec))
        wall, cpu, lengths, finished = time.perf_counter(), time.process_time(), [0] * len(prompts), 0
        while engine.has_unfinished_requests():
            for out in engine.step():
                lengths[int(out.request_id)] += len(out.new_token_ids)
                finished += out.finish_reason == "stop"
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        del engine.grammars.mask
        llm_engine.advance = advance.fn
    return {"tokens": sum(lengths), "lengths": lengths, "cpu": cpu, "wall": wall,
            "grammar": mask.seconds + advance.seconds, "finished": finished}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="floodway/smollm2-135m-instruct")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    engine = llm_engine.LLMEngine(EngineConfig(model=args.model, max_model_len=512, max_num_seqs=args.requests,
                                               enable_prefix_caching=False))
    tok = engine.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"Describe {TOPICS[i % len(TOPICS)]} as JSON."}],
                                       add_generation_prompt=True, tokenize=False) for i in range(args.requests)]
    prompts = [tok.encode(p, add_special_tokens=False) for p in prompts]
    spec = StructuredSpec("json_schema", SCHEMA)
    run(engine, prompts[:1], spec, [8])  # warm up; compiles the schema once
    json_ = free = None
    for _ in range(args.rounds):
        j = run(engine, prompts, spec, [args.max_tokens] * len(prompts))
        f = run(engine, prompts, None, j["lengths"])
        json_ = j if json_ is None or j["cpu"] < json_["cpu"] else json_
        free = f if free is None or f["cpu"] < free["cpu"] else free
    print(f"{args.model}: {args.requests} chat requests in one batch, greedy, up to {args.max_tokens} tokens, "
          f"1 thread, prefix caching off, best of {args.rounds} rounds")
    for name, r in (("unconstrained", free), ("json_schema", json_)):
        print(f"{name:14s} {r['tokens']:5d} tokens  {r['cpu'] / r['tokens'] * 1e3:7.2f} ms CPU/token  "
              f"{r['tokens'] / r['wall']:6.1f} tok/s wall  grammar {r['grammar'] / r['tokens'] * 1e6:7.1f} us CPU/tok  "
              f"({r['finished']} finished by the grammar)")
    ratio = (json_["cpu"] / json_["tokens"]) / (free["cpu"] / free["tokens"])
    print(f"CPU per token, json_schema over unconstrained: {ratio:.3f}x; "
          f"grammar share of the constrained run's CPU time: {json_['grammar'] / json_['cpu']:.1%}")


if __name__ == "__main__":
    main()
