"""Why xgrammar (engine/structured_grammar.py): the per-token cost of grammar libraries on the batched CPU path,
side by side, with SmolLM2's tokenizer (vocabulary 49152), one thread.

A batch of sequences each follows the same JSON schema along a valid document; per token each library fills
its next-token bitmask for every row and advances every row's state; the same torch code applies all the
masks (so only the libraries' own work differs). Best of 5 rounds. Needs the candidates installed next to the
engine extra (they are not dependencies):

    pip install llguidance==1.9.1 outlines-core==0.2.14
    python -P -m floodway.engine.bench.grammar_libs [--batch 8]
"""

import argparse
import json
import time

import torch

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
          "tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"}},
          "required": ["name", "age", "tags", "ok"], "additionalProperties": False}
SHIFTS = torch.arange(32, dtype=torch.int32)


def apply(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    allowed = ((bitmask[:, :, None] >> SHIFTS) & 1).bool().view(bitmask.shape[0], -1)[:, :logits.shape[1]]
    logits.masked_fill_(~allowed, float("-inf"))


def measure(name: str, make, fill, advance, docs: list[list[int]], vocab: int) -> None:
    """make() -> one sequence's state; fill(states) -> int32 bitmask [B, words]; advance(state, token)."""
    t = time.perf_counter()
    make()
    compile_ms = (time.perf_counter() - t) * 1e3
    steps, logits, best = min(map(len, docs)), torch.randn(len(docs), vocab), None
    for _ in range(5):
        states, fill_s, adv_s = [make() for _ in docs], 0.0, 0.0
        for k in range(steps):
            x = logits.clone()
            t = time.perf_counter()
            mask = fill(states)
            fill_s += time.perf_counter() - t
            apply(x, mask)
            assert all(x[i, d[k]] > float("-inf") for i, d in enumerate(docs)), f"{name} masked a valid token"
            t = time.perf_counter()
            for state, d in zip(states, docs, strict=True):
                advance(state, d[k])
            adv_s += time.perf_counter() - t
        if best is None or fill_s + adv_s < sum(best):
            best = (fill_s, adv_s)
    n = steps * len(docs)
    print(f"{name:16s} first matcher {compile_ms:8.1f} ms | per token: mask {best[0] / n * 1e6:6.1f} us, "
          f"advance {best[1] / n * 1e6:6.1f} us, together {sum(best) / n * 1e6:6.1f} us")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from floodway.engine.models.builtin import resolve_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("floodway/smollm2-135m-instruct"))
    vocab, schema, b = 49152, json.dumps(SCHEMA), args.batch
    docs = [tok.encode(json.dumps({"name": f"Alice number {i}", "age": 30 + i, "tags": ["a", "bb", f"t{i}"],
                                   "ok": i % 2 == 0}), add_special_tokens=False) for i in range(b)]
    print(f"batch {b}, {min(map(len, docs))} tokens per sequence, vocabulary {vocab}, 1 thread")

    import xgrammar as xgr
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab), max_threads=1,
                                   cache_enabled=False)
    xmask = xgr.allocate_token_bitmask(b, vocab)

    def xfill(states):
        for i, m in enumerate(states):
            m.fill_next_token_bitmask(xmask, i)
        return xmask

    measure("xgrammar", lambda: xgr.GrammarMatcher(compiler.compile_json_schema(schema)), xfill,
            lambda m, t: m.accept_token(t), docs, vocab)

    import llguidance
    import llguidance.hf
    import llguidance.torch as lt
    ltok = llguidance.hf.from_tokenizer(tok, n_vocab=vocab)
    grammar, lmask = llguidance.LLMatcher.grammar_from_json_schema(schema), lt.allocate_token_bitmask(b, vocab)

    def lfill(states):
        for i, m in enumerate(states):
            lt.fill_next_token_bitmask(m, lmask, i)
        return lmask

    measure("llguidance", lambda: llguidance.LLMatcher(ltok, grammar), lfill, lambda m, t: m.consume_token(t),
            docs, vocab)

    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema
    byte_of = _byte_level_decoder()
    tokens: dict[bytes, list[int]] = {}
    for s, i in tok.get_vocab().items():
        if i != tok.eos_token_id:
            raw = bytes(byte_of[c] for c in s) if all(c in byte_of for c in s) else s.encode()
            tokens.setdefault(raw, []).append(i)
    t = time.perf_counter()
    index = Index(build_regex_from_schema(schema), Vocabulary(tok.eos_token_id, tokens))
    print(f"outlines-core builds its index for the schema once: {(time.perf_counter() - t) * 1e3:.0f} ms")
    omask = torch.zeros(b, (vocab + 31) // 32, dtype=torch.int32)

    def ofill(states):
        for i, g in enumerate(states):
            g.write_mask_into(omask[i].data_ptr(), omask[i].numel(), 4)
        return omask

    measure("outlines-core", lambda: Guide(index), ofill, lambda g, t: g.advance(t), docs, vocab)


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the character each byte is written as -> the byte."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: chr(b) for b in shown}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return {c: b for b, c in chars.items()}


if __name__ == "__main__":
    main()
