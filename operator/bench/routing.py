"""`floodway bench routing`: prefix-aware against load-only routing, side by side in one run.

Two identical pools of real engine processes on 127.0.0.1 (a built-in model, a small KV cache each, so
capacity is scarce by configuration; each step at least --step-delay-ms and at most --max-num-batched-tokens
tokens, so a prefill costs engine steps in proportion to its uncached tokens), each behind its own real gateway:
one routing on load only, one prefix-aware. Both get the same open-loop schedule at the same time, so a
machine whose load changes under the run (a shared one) changes it for both alike. Two workloads, in turn:

- Mooncake-shaped: the first N conversations of the Mooncake conversation trace (a conversation: the requests
  sharing their second block id; the first is a prompt shared by nearly all), every turn in trace order, each
  prompt rendered from its `hash_ids` (one id = one block of BLOCK_WORDS words, each a single token of the
  built-in tokenizer), so requests share a text and token prefix exactly where the trace says they share
  blocks;
- without shared prefixes: the same lengths with every block id fresh.

Each workload renders its text with its own salt, so nothing it sends is cached by the one before. Printed per
router:
the cluster-wide prefix-cache hit rate from the engines' own counters (vllm:prefix_cache_hits/queries), the
single-engine unbounded bound (the same prompts' tokens fed to an unbounded cache one request at a time),
TTFT p50/p99 (time to the stream's first bytes through the gateway) and the p50 of later turns alone (first turns
can hit nothing of their own), and the per-engine spread (max/mean) of requests and of prefill tokens computed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import yaml
from floodway.operator import procs
from floodway.operator.bench.gateway import _wait_idle
from floodway.operator.bench.loadgen import send_each_at_rate
from floodway.operator.gateway.prefix_index import BLOCK_TOKENS, request_keys
from floodway.operator.simulator.traces import open_trace, resolve_trace
from floodway.operator.stats import quantile

BLOCK_WORDS = 16  # one trace block: 16 single-token words, one engine block at the default block size
ENGINE_BLOCK = BLOCK_TOKENS  # the engines' block size, as the gateway's token-id keys


def conversation(ids: list[int]) -> int | None:
    """A request's conversation: its second block id (the first is a prompt shared by nearly all)."""
    return ids[1] if len(ids) > 1 else None


def conversations(rows: list[dict], n: int, max_blocks: int) -> list[list[int]]:
    """The block ids of every turn of the first n conversations, in trace order, each cut to max_blocks."""
    first = [k for k in dict.fromkeys(conversation(r["hash_ids"]) for r in rows) if k is not None][:n]
    chosen = set(first)
    return [r["hash_ids"][:max_blocks] for r in rows if conversation(r["hash_ids"]) in chosen]


def first_turns(requests: list[list[int]]) -> list[bool]:
    """Per request (block ids, in order), whether it opens its conversation: nothing can hold its own blocks."""
    seen: set[int | None] = set()
    out = []
    for ids in requests:
        out.append(conversation(ids) not in seen)
        seen.add(conversation(ids))
    return out


def mooncake_conversations(n: int, max_blocks: int, traces: str | None = None) -> list[list[int]]:
    """`conversations` of the Mooncake conversation trace."""
    with open_trace(resolve_trace("mooncake", traces)) as f:
        return conversations([json.loads(line) for line in f if line.strip()], n, max_blocks)


def without_shared_prefixes(requests: list[list[int]]) -> list[list[int]]:
    """The same lengths, every block id used once."""
    fresh = iter(range(-1, -10**9, -1))
    return [[next(fresh) for _ in ids] for ids in requests]


def render(ids: list[int], salt: int, vocab: list[str]) -> str:
    """The text of a prompt: each block id always gives the same BLOCK_WORDS words (given the salt)."""
    return "".join(" " + w for h in ids for w in random.Random(f"{salt}:{h}").choices(vocab, k=BLOCK_WORDS))


def bound_blocks(prompts: list[list[int]]) -> list[int]:
    """Per prompt (token ids), the leading full blocks of ENGINE_BLOCK tokens an unbounded prefix cache fed the
    prompts one at a time holds when it comes, never the block of its last token (as the engine): the
    single-engine bound."""
    seen: set[int] = set()
    out = []
    for ids in prompts:
        keys = request_keys({"prompt": ids})  # token-id prompts: blocks of ENGINE_BLOCK ids
        n = 0
        while n < min(len(keys), (len(ids) - 1) // ENGINE_BLOCK) and keys[n] in seen:
            n += 1
        out.append(n)
        seen.update(keys)
    return out


def single_engine_bound(prompts: list[list[int]]) -> tuple[int, int]:
    """(hit tokens, prompt tokens) of the single-engine bound (bound_blocks)."""
    return ENGINE_BLOCK * sum(bound_blocks(prompts)), sum(len(ids) for ids in prompts)


def spread(values: list[float]) -> float:
    """max / mean (1.0: perfectly even)."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean else float("nan")


def words() -> list[str]:
    """Short words that the built-in tokenizer keeps as one token each (after a space): about 4 characters per
    token, as the gateway's CHARS_PER_TOKEN assumes."""
    from floodway.engine.models.builtin import TOKENIZER_FILE

    vocab = json.loads(TOKENIZER_FILE.read_text())["model"]["vocab"]
    return sorted(w[1:] for w in vocab if w.startswith("\u0120") and w[1:].isalpha() and w[1:].islower()
                  and 2 <= len(w) - 1 <= 3)


def token_ids(texts: list[str]) -> list[list[int]]:
    from floodway.engine.models.builtin import TOKENIZER_FILE
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_FILE))
    return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def key_costs(texts: list[str]) -> tuple[float, float]:
    """CPU seconds per request of the gateway's text-block keys and of the alternative, the engine's own keys
    (tokenize with the model's tokenizer, then chain-hash blocks of 16 token ids), over the same prompts."""
    from floodway.engine.models.builtin import TOKENIZER_FILE
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_FILE))
    t0 = time.process_time()
    for text in texts:
        request_keys({"prompt": text})
    t1 = time.process_time()
    for text in texts:
        request_keys({"prompt": tokenizer.encode(text, add_special_tokens=False).ids})
    t2 = time.process_time()
    return (t1 - t0) / len(texts), (t2 - t1) / len(texts)


def _counters(url: str) -> tuple[float, float]:
    """(prefix-cache hit tokens, looked-up tokens) an engine counted so far."""
    values = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0]
        if name in values:
            values[name] += float(line.rsplit(" ", 1)[1])
    return values["vllm:prefix_cache_hits_total"], values["vllm:prefix_cache_queries_total"]


def _arms(arms: list[tuple[list[procs.Proc], procs.Proc]], bodies: list[dict], rate: float,
          first: list[bool]) -> list[dict]:
    """Sends `bodies` through each (engines, gateway) arm at the same time on the same schedule."""
    for engines, _ in arms:
        for e in engines:
            _wait_idle(e.url)
    before = [[_counters(e.url) for e in engines] for engines, _ in arms]

    async def send_all():
        return await asyncio.gather(*(send_each_at_rate(gw.url + "/v1/completions", bodies, rate, timeout_s=600)
                                      for _, gw in arms))

    results = asyncio.run(send_all())
    return [_summary(engines, b, r, first) for (engines, _), b, r in zip(arms, before, results, strict=True)]


def _summary(engines: list[procs.Proc], before: list[tuple[float, float]], results: list, first: list[bool]) -> dict:
    """One arm's raw figures: per engine, hit and looked-up tokens and requests served; TTFTs of all and of later
    turns."""
    for e in engines:
        _wait_idle(e.url)
    after = [_counters(e.url) for e in engines]
    ok = [r for r in results if r.status == 200]
    served = Counter(r.backend for r in ok)
    return {"sent": len(results), "ok": len(ok),
            "hits": [a[0] - b[0] for a, b in zip(after, before, strict=True)],
            "queries": [a[1] - b[1] for a, b in zip(after, before, strict=True)],
            "served": [served.get(e.url, 0) for e in engines],
            "ttft": [r.first_byte_at - r.sent_at for r in ok],
            "later": [r.first_byte_at - r.sent_at for r in ok if not first[r.index]]}


def figures(rounds: list[dict]) -> dict:
    """What the bench prints for one router, over one or more rounds (`_summary`s) pooled: hit rate of all tokens
    looked up, TTFT quantiles of all requests, and the spreads (max/mean over engines) of requests served and of
    prompt tokens computed, averaged over the rounds (each round's own engines and placement)."""
    hits, queries = sum(sum(r["hits"]) for r in rounds), sum(sum(r["queries"]) for r in rounds)
    ttft, later = [x for r in rounds for x in r["ttft"]], [x for r in rounds for x in r["later"]]
    return {"sent": sum(r["sent"] for r in rounds), "ok": sum(r["ok"] for r in rounds),
            "hit": hits / queries if queries else 0.0, "queries": queries,
            "p50": quantile(ttft, 0.5), "p99": quantile(ttft, 0.99), "later_p50": quantile(later, 0.5),
            "req_spread": sum(spread(r["served"]) for r in rounds) / len(rounds),
            "prefill_spread": sum(spread([q - h for q, h in zip(r["queries"], r["hits"], strict=True)])
                                  for r in rounds) / len(rounds)}


def _start_engines(n: int, model: str, args: list[str], tmp: str) -> list[procs.Proc]:
    def start(i: int) -> procs.Proc:
        port = procs.free_port()
        proc = procs.start(procs.FLOODWAY_ARGV + ["engine", "--model", model, "--host", "127.0.0.1", "--port",
                                                  str(port), "--log-level", "warning", *args],
                           port, timeout_s=300, log_path=os.path.join(tmp, f"engine-{i}.log"))
        return proc

    with ThreadPoolExecutor(4) as pool:
        started = list(pool.map(start, range(n)))
    return started


def _start_gateway(engines: list[procs.Proc], prefix_aware: bool, seed: int, tmp: str, **config) -> procs.Proc:
    """A gateway over `engines`; `config`: more of its config's top-level keys."""
    port = procs.free_port()
    path = os.path.join(tmp, f"gateway-{prefix_aware}-{seed}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"host": "127.0.0.1", "port": port, "scrape_interval_s": 0.2,
                        "backends": {"static": [e.url for e in engines]},
                        "routing": {"seed": seed, "prefix_aware": prefix_aware}, **config}, f)
    return procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", path, "--log-level", "warning"], port,
                       timeout_s=60, log_path=os.path.join(tmp, f"gateway-{prefix_aware}-{seed}.log"))


def _rows(workload: str, results: dict[str, dict], bound: float, bound_total: int) -> list[str]:
    out = [f"{workload:<20} {router:<13} {r['ok']:>3}/{r['sent']:<3} {r['hit']:>8.1%} "
           f"{(r['hit'] / bound if bound else float('nan')):>8.1%} {r['p50'] * 1000:>7.0f}ms "
           f"{r['p99'] * 1000:>7.0f}ms {r['later_p50'] * 1000:>7.0f}ms {r['req_spread']:>12.2f} "
           f"{r['prefill_spread']:>16.2f}   (bound {bound:.1%}; tokens looked up {r['queries']:.0f}, "
           f"prompts {bound_total})"
           for router, r in results.items()]
    load, prefix = results["load-only"], results["prefix-aware"]
    return out + [f"{workload:<20} prefix-aware / load-only: TTFT p50 x{prefix['p50'] / load['p50']:.2f}, p99 x"
                  f"{prefix['p99'] / load['p99']:.2f}, later turns' p50 x{prefix['later_p50'] / load['later_p50']:.2f},"
                  f" hit rate x{(prefix['hit'] / load['hit']) if load['hit'] else float('nan'):.2f}"]


def run_bench(engines: int, conversations_n: int, rate: float, kv_blocks: int, max_tokens: int, step_delay_ms: int,
              max_num_batched_tokens: int, max_num_seqs: int, max_blocks: int, model: str,
              traces: str | None = None, seeds: int = 1) -> str:
    """`seeds` rounds, each with gateways drawing from seed 0, 1, ... and prompt texts of their own; with more
    than one, the rounds' figures pooled follow (`figures`)."""
    if min(engines, conversations_n, kv_blocks, max_tokens, max_num_batched_tokens, max_num_seqs, max_blocks,
           seeds) < 1 or rate <= 0 or step_delay_ms < 0:
        raise ValueError("counts and sizes must be >= 1, rate > 0, step delay >= 0")
    shared = mooncake_conversations(conversations_n, max_blocks, traces)
    workloads = [("Mooncake-shaped", shared), ("no shared prefix", without_shared_prefixes(shared))]
    first = first_turns(shared)  # "later turns" of the unshared twin: the same positions, with nothing to hit
    vocab = words()
    engine_args = ["--num-kv-blocks", str(kv_blocks), "--step-delay-ms", str(step_delay_ms),
                   "--max-num-batched-tokens", str(max_num_batched_tokens), "--max-num-seqs", str(max_num_seqs),
                   "--max-waiting-requests", "0"]
    rows_out = [f"routing bench: two pools of {engines} engines ({model}, {' '.join(engine_args)}), "
                f"{len(shared)} requests ({conversations_n} Mooncake conversations, blocks of {BLOCK_WORDS} tokens, "
                f"at most {max_blocks} blocks), {rate:g} req/s open loop, max_tokens {max_tokens}, streamed, "
                f"{seeds} round(s)",
                f"{'workload':<20} {'router':<13} {'ok':>7} {'hit rate':>8} {'of bound':>8} {'TTFT p50':>9} "
                f"{'TTFT p99':>9} {'later p50':>9} {'req max/mean':>12} {'prefill max/mean':>16}"]
    text_s, token_s = key_costs([render(ids, 0, vocab) for ids in shared])
    rows_out.insert(0, f"prefix keys on the request path, CPU per request over these prompts: text blocks (ours) "
                       f"{text_s * 1e6:.0f} us, tokenizer + token blocks {token_s * 1e6:.0f} us "
                       f"({token_s / text_s:.1f}x)")
    routers = ("load-only", "prefix-aware")
    pooled: dict[str, dict[str, list[dict]]] = {w: {r: [] for r in routers} for w, _ in workloads}
    bounds: dict[str, list[tuple[int, int]]] = {w: [] for w, _ in workloads}
    with tempfile.TemporaryDirectory(prefix="floodway-bench-routing-") as tmp:
        started: list[procs.Proc] = []
        try:
            everything = _start_engines(2 * engines, model, engine_args, tmp)
            started += everything
            served = httpx.get(everything[0].url + "/v1/models").json()["data"][0]["id"]
            for e in everything:  # the first forward pass is slow (lazy initialisation): not inside a measured arm
                httpx.post(e.url + "/v1/completions", timeout=300,
                           json={"model": served, "prompt": "warm up", "max_tokens": 2})
            pools = [everything[i * engines:(i + 1) * engines] for i in range(len(routers))]
            for seed in range(seeds):
                gateways = [_start_gateway(pool, router == "prefix-aware", seed, tmp)
                            for pool, router in zip(pools, routers, strict=True)]
                started += gateways
                for w, (workload, requests) in enumerate(workloads):
                    texts = [render(ids, seed * len(workloads) + w, vocab) for ids in requests]
                    bound_hits, bound_total = single_engine_bound(token_ids(texts))
                    bounds[workload].append((bound_hits, bound_total))
                    bodies = [{"model": served, "prompt": t, "max_tokens": max_tokens, "temperature": 0,
                               "stream": True} for t in texts]
                    raw = _arms(list(zip(pools, gateways, strict=True)), bodies, rate, first)
                    for router, r in zip(routers, raw, strict=True):
                        pooled[workload][router].append(r)
                    label = workload if seeds == 1 else f"{workload} {seed}"
                    rows_out += _rows(label, {rt: figures([r]) for rt, r in zip(routers, raw, strict=True)},
                                      bound_hits / bound_total, bound_total)
                for gw in gateways:
                    gw.stop(grace_s=5)
                    started.remove(gw)
        finally:
            for proc in reversed(started):
                proc.stop(grace_s=5)
    if seeds > 1:
        for workload, by_router in pooled.items():
            hits, total = map(sum, zip(*bounds[workload], strict=True))
            rows_out += _rows(f"{workload} all", {rt: figures(rs) for rt, rs in by_router.items()},
                              hits / total, total)
    return "\n".join(rows_out)
