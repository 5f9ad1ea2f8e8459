"""Grammar-constrained decoding: compiles a StructuredSpec for the model's tokenizer and, each step, masks the
logits rows of the sequences that have one to the tokens their grammar allows next.

The library is xgrammar, picked by per-token cost on the batched CPU path: filling the next-token masks and
advancing the states of a batch costs it the least of xgrammar, llguidance and outlines-core
(`python -P -m floodway.engine.bench.grammar_libs`; figures in docs/benchmarks/engine-code-notes.md).
llguidance builds a new schema's grammar faster (lazily), a once-per-schema cost that the compile cache here
pays once, while the mask is paid on every token. xgrammar needs no triton at run time (the CPU image drops it).
It is imported on the first constrained request: an engine that never gets one runs without it (e2e/gpu/check.sh
runs the engine where only torch and transformers are installed) and skips indexing the vocabulary for it.
"""

from __future__ import annotations

import json
import re
import threading
from typing import TYPE_CHECKING

import torch
from floodway.engine.structured import StructuredSpec

if TYPE_CHECKING:
    import xgrammar as xgr

_CPP_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")  # "[23:02:10] /project/cpp/x.cc:94: " before each message


class Grammars:
    """One tokenizer's grammar compiler (thread-safe, cached per spec) and the batch's token bitmask."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: list[int]):
        self._tokenizer, self._stop_token_ids = tokenizer, sorted(stop_token_ids)
        self._lock = threading.Lock()  # admission compiles in several threads; one builds the compiler
        self._compiler: xgr.GrammarCompiler | None = None
        self.vocab_size = vocab_size
        self._bitmask: torch.Tensor | None = None

    def _get_compiler(self) -> xgr.GrammarCompiler:
        with self._lock:
            if self._compiler is None:
                xgr = _xgr()
                info = xgr.TokenizerInfo.from_huggingface(self._tokenizer, vocab_size=self.vocab_size,
                                                          stop_token_ids=self._stop_token_ids)
                self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_limit_bytes=256 << 20)
        return self._compiler

    def compile(self, spec: StructuredSpec) -> xgr.CompiledGrammar:
        """Raises ValueError with the compiler's message for a schema, pattern or grammar it cannot take, and for
        one that allows no first token (`root ::= root`, `{"anyOf": []}`): nothing could be sampled."""
        compiled = self._compile(spec)
        xgr = _xgr()
        first = xgr.allocate_token_bitmask(1, self.vocab_size)
        xgr.GrammarMatcher(compiled).fill_next_token_bitmask(first, 0)
        if not bool(first.any()):
            raise ValueError(f"invalid {spec.kind}: it matches no output at all")
        return compiled

    def _compile(self, spec: StructuredSpec) -> xgr.CompiledGrammar:
        spec.validate()
        c, text = self._get_compiler(), spec.payload_text()
        try:
            if spec.kind in ("json_object", "json_schema"):
                # Compact separators: free whitespace lets a small model loop on newlines and indents.
                return c.compile_json_schema(text if spec.kind == "json_schema" else '{"type": "object"}',
                                             any_whitespace=False, strict_mode=True)
            if spec.kind == "regex":
                return c.compile_regex(text)
            if spec.kind == "choice":
                return c.compile_grammar("root ::= " + " | ".join(_ebnf_string(s) for s in spec.payload))
            return c.compile_grammar(text)
        except (RuntimeError, ValueError, TypeError) as e:
            raise ValueError(f"invalid {spec.kind}: {_CPP_PREFIX.sub('', str(e)).strip()}") from None

    def matcher(self, spec: StructuredSpec) -> xgr.GrammarMatcher:
        """Fresh state for one sequence (it consumes each token the sequence samples); the spec passed compile()."""
        return _xgr().GrammarMatcher(self._compile(spec))

    def mask(self, logits: torch.Tensor, matchers: list) -> None:
        """Sets to -inf, in place, each row's logits of tokens its matcher (None: unconstrained) forbids."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return
        xgr = _xgr()
        if self._bitmask is None or self._bitmask.shape[0] < len(matchers):
            self._bitmask = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)
        for i in rows:
            matchers[i].fill_next_token_bitmask(self._bitmask, i)
        xgr.apply_token_bitmask_inplace(logits, self._bitmask[:len(matchers)].to(logits.device),
                                        vocab_size=self.vocab_size, indices=rows)


    def mask_drafts(self, logits: torch.Tensor, matchers: list, drafts: list[list[int]]) -> None:
        """`mask` for a verify step: sequence s has len(drafts[s]) + 1 rows, row j masked by its matcher's state
        after drafts[s][:j] (fed, then rolled back). The drafts are a valid_prefix of what the grammar allows."""
        num_rows = sum(len(d) + 1 for d in drafts)
        rows, row = [], 0
        for m, d in zip(matchers, drafts, strict=True):
            if m is not None:
                rows += range(row, row + len(d) + 1)
            row += len(d) + 1
        if not rows:
            return
        xgr = _xgr()
        if self._bitmask is None or self._bitmask.shape[0] < num_rows:
            self._bitmask = xgr.allocate_token_bitmask(num_rows, self.vocab_size)
        row = 0
        for m, d in zip(matchers, drafts, strict=True):
            if m is not None:
                for j, token in enumerate((*d, None)):
                    m.fill_next_token_bitmask(self._bitmask, row + j)
                    if token is not None:
                        m.accept_token(token)
                if d:
                    m.rollback(len(d))
            row += len(d) + 1
        xgr.apply_token_bitmask_inplace(logits, self._bitmask[:num_rows].to(logits.device),
                                        vocab_size=self.vocab_size, indices=rows)


def valid_prefix(matcher: xgr.GrammarMatcher, tokens: list[int]) -> int:
    """How many leading tokens the grammar allows in a row (none after the one that completes it); the matcher's
    state is left as it was."""
    n = 0
    for token in tokens:
        if not matcher.accept_token(token):
            break
        n += 1
        if matcher.is_terminated():
            break
    if n:
        matcher.rollback(n)
    return n


def advance(matcher: xgr.GrammarMatcher, token: int) -> bool:
    """Feeds a sampled token to the sequence's matcher; True once the output must end: the grammar is complete (a
    stop token taken), or it had allowed nothing (a dead end no check at admission finds) and the token is refused."""
    return not matcher.accept_token(token) or matcher.is_terminated()


def _xgr():
    import xgrammar

    return xgrammar


def _ebnf_string(s: str) -> str:
    """An EBNF string literal for s (JSON escapes are the ones xgrammar's EBNF reads)."""
    return json.dumps(s, ensure_ascii=False)
