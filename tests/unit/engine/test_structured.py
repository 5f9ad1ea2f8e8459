"""Grammar-constrained decoding in the engine, on the built-in tiny model (random weights: whatever it would
say, the mask leaves it only what the grammar allows). The real model's outputs are checked against their schemas
in tests/integration/server/test_openai_structured.py."""

import json
import re

import pytest
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.structured import StructuredSpec

# Bounded grammars: every path ends within max_tokens, so "stop" is the only right finish.
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "size": {"enum": ["S", "M", "L"]},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["ok", "size", "n"], "additionalProperties": False}
CASES = [
    (StructuredSpec("regex", r"[0-9]{3}-[a-z]{2}"), lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t)),
    (StructuredSpec("choice", ["alpha", "beta gamma", "δ"]), lambda t: t in ("alpha", "beta gamma", "δ")),
    (StructuredSpec("grammar", 'root ::= "yes" | "no" | "maybe"'), lambda t: t in ("yes", "no", "maybe")),
    (StructuredSpec("json_schema", SCHEMA), lambda t: _valid(json.loads(t))),
]


def _valid(obj) -> bool:
    return (set(obj) == {"ok", "size", "n"} and isinstance(obj["ok"], bool) and obj["size"] in "SML"
            and isinstance(obj["n"], int) and 0 <= obj["n"] <= 9)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_output_matches_its_grammar_in_one_batch(run_to_end, clean_engine, temperature):
    """All kinds in one batch next to an unconstrained request (whose logits the masks must leave alone)."""
    for i, (spec, _) in enumerate(CASES):
        clean_engine.add_request(f"s{i}", [5 + i, 6, 7], SamplingParams(max_tokens=40, temperature=temperature,
                                                                      seed=i, structured=spec))
    clean_engine.add_request("free", [5, 6, 7], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    seen = run_to_end(clean_engine)
    for i, (spec, ok) in enumerate(CASES):
        last = seen[f"s{i}"][-1]
        assert last.finish_reason == "stop", (spec, last.text)
        assert ok(last.text), (spec, last.text)
    assert len(seen["free"][-1].output_token_ids) == 8


def test_unconstrained_rows_are_untouched(run_to_end, clean_engine):
    """The same greedy request gives the same tokens alone and beside a constrained one."""
    free = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    clean_engine.add_request("alone", [9, 10, 11], free)
    alone = run_to_end(clean_engine)["alone"][-1].output_token_ids
    clean_engine.add_request("beside", [9, 10, 11], free)
    clean_engine.add_request("json", [9, 10, 11], SamplingParams(max_tokens=40, temperature=0.0,
                                                                 structured=CASES[3][0]))
    assert run_to_end(clean_engine)["beside"][-1].output_token_ids == alone


def test_grammar_state_survives_preemption(run_to_end, tiny_model_path):
    """A pool too small for the batch forces preemption by recompute; the outputs still match, and equal the
    outputs of a pool that never preempts (the grammar state follows the tokens already sampled)."""
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    def run(num_blocks: int):
        eng = LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=num_blocks,
                                     max_num_batched_tokens=64, max_num_seqs=8))
        for i in range(4):
            eng.add_request(f"r{i}", list(range(10 + i, 50 + i)), SamplingParams(
                max_tokens=40, temperature=0.0, structured=CASES[3][0]))
        seen = run_to_end(eng)
        return eng.stats().num_preemptions_total, {k: v[-1].text for k, v in seen.items()}

    preempted, small = run(num_blocks=14)
    never, big = run(num_blocks=64)
    assert preempted > 0 and never == 0
    assert small == big
    assert all(_valid(json.loads(t)) for t in small.values())


@pytest.mark.parametrize("spec, match", [
    (StructuredSpec("json_schema", {"type": "frobnicate"}), "invalid json_schema: Unsupported type"),
    (StructuredSpec("json_schema", {"$ref": "#/nowhere"}), "invalid json_schema"),
    (StructuredSpec("regex", "(ab"), "invalid regex: .*parenthesis"),
    (StructuredSpec("grammar", "root ::= "), "invalid grammar"),
    (StructuredSpec("grammar", "root ::= a\na ::= root"), "matches no output at all"),
    (StructuredSpec("choice", []), "choice needs a non-empty list"),
    (StructuredSpec("json_schema", "not a dict"), "json_schema needs a JSON schema object"),
    (StructuredSpec("yaml", "a: b"), "kind must be one of"),
])
def test_bad_specs_are_refused_at_admission(clean_engine, spec, match):
    before = clean_engine.stats()
    with pytest.raises(ValueError, match=match):
        clean_engine.add_request("bad", [5, 6], SamplingParams(structured=spec))
    assert clean_engine.stats() == before and not clean_engine.has_unfinished_requests()
