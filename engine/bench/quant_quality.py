"""Each weight format's quality against float32 on the built-in SmolLM2: greedy agreement over fixed chat prompts,
mean KL divergence of the next-token distributions over a fixed held text, and that text's perplexity.

`python -P -m floodway.engine.bench.quant_quality` prints one row per format. The float32 reference is the model the
engine serves with `--quantization none` (the shipped Q4_1 weights dequantized exactly into float32), so Q4_1 differs
from it only by bf16 compute, and every other format re-rounds those weights: Q8_0 and int8 to 8 bits, Q4_0 and
int4 to another 4-bit grid, llama-quantize's K-quant files (llamacpp.K_QUANTS) to its per-tensor mix of types.
The bf16 row (float weights, bf16 compute) separates compute rounding from weight loss.
"""

import argparse
import math
import sys

# Held text: plain prose the model was not prompted with (written for this measurement).
HELD_TEXT = (
    "The river town woke slowly on market days. Before dawn the bakers lit their ovens, and by the time the first "
    "boats tied up at the quay the smell of bread had reached the bridge. Farmers carried baskets of apples, onions "
    "and cheese up the narrow streets, while children ran between the stalls counting the coins they had saved. "
    "At noon the bells of the old church rang twelve times, and the square filled with people eating, arguing about "
    "prices and the weather, and listening to a fiddler who played the same three songs every week. In the "
    "afternoon the wind turned cold, clouds came in from the west, and the traders packed their carts before the "
    "rain. By evening the streets were quiet again, and only the lamps along the river showed where the town began."
)
CHATS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the ocean.",
    "What is 12 plus 7?",
    "Give me a short tip for learning to cook.",
    "Which planet is closest to the sun?",
    "Translate 'good morning' into Spanish.",
    "Why do leaves change color in autumn?",
]
MAX_TOKENS = 32


def formats() -> dict[str, dict]:
    """Format -> engine settings on the built-in SmolLM2."""
    from floodway.engine.bench import llamacpp
    from floodway.engine.models.smollm2 import NAME

    return {
        "fp32 (reference)": dict(model=NAME, quantization="none", dtype="float32"),
        "bf16": dict(model=NAME, quantization="none", dtype="bfloat16"),
        "Q8_0": dict(model=llamacpp.smollm2_gguf("Q8_0"), tokenizer=NAME),
        "int8": dict(model=NAME, quantization="int8"),
        "Q4_1 (shipped)": dict(model=NAME, quantization="gguf"),
        "Q4_0": dict(model=llamacpp.smollm2_gguf("Q4_0"), tokenizer=NAME),
        "int4": dict(model=NAME, quantization="int4"),
        **{kind: dict(model=llamacpp.smollm2_gguf(kind), tokenizer=NAME) for kind in llamacpp.K_QUANTS},
    }


def held_logprobs(runner, ids: list[int]):
    """log-softmax of the next-token logits at every position but the last, float32 [len(ids) - 1, V]. Runs the
    text as one prefill in blocks 0.. of a fresh engine's cache (before any request used them)."""
    import torch
    from floodway.engine.step_inputs import SeqInput

    table = list(range(math.ceil(len(ids) / runner.shape.block_size)))
    out = runner.execute([SeqInput(ids, 0, table, True, num_prompt_logits=len(ids) - 1)])
    return torch.log_softmax(out[1:].float(), -1)  # row 0 is the last position's


def mean_kl(ref_logp, logp) -> float:
    """Mean over positions of KL(reference || format), in nats."""
    return float((ref_logp.exp() * (ref_logp - logp)).sum(-1).mean())


def perplexity(logp, ids: list[int]) -> float:
    import torch

    return math.exp(-float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].mean()))


def agreement(reference: list[list[int]], outputs: list[list[int]]) -> float:
    """Mean share of each reference answer that the format reproduces token for token before diverging."""
    shares = []
    for ref, out in zip(reference, outputs, strict=True):
        same = next((i for i, (a, b) in enumerate(zip(ref, out, strict=False)) if a != b), min(len(ref), len(out)))
        shares.append(1.0 if len(ref) == len(out) == same else same / max(len(ref), 1))
    return sum(shares) / len(shares)


def measure(settings: dict, chats: list[str] = CHATS, max_tokens: int = MAX_TOKENS) -> dict:
    """{"logp": held-text log-probs, "ids": the held text's tokens, "answers": greedy token ids per chat,
    "kernels": the linears' kernels} for one engine configuration."""
    from floodway.engine.llm import LLM
    from floodway.engine.sampling_params import SamplingParams

    llm = LLM(**settings, max_model_len=512, max_num_seqs=max(1, len(chats)))
    ids = llm.tokenizer(HELD_TEXT)["input_ids"]
    logp = held_logprobs(llm.engine.runner, ids)
    prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": c}], tokenize=False,
                                                 add_generation_prompt=True) for c in chats]
    outs = llm.generate(prompts, SamplingParams(max_tokens=max_tokens, temperature=0)) if chats else []
    return {"logp": logp, "ids": ids, "answers": [o.output_token_ids for o in outs],
            "texts": [o.text for o in outs], "kernels": llm.engine.runner.linear_kernels}


def compare(ref: dict, got: dict) -> dict:
    return {"agreement": agreement(ref["answers"], got["answers"]), "kl": mean_kl(ref["logp"], got["logp"]),
            "ppl": perplexity(got["logp"], got["ids"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -P -m floodway.engine.bench.quant_quality", description=__doc__)
    ap.add_argument("--formats", default="", help="comma-separated subset of the rows (default: all)")
    args = ap.parse_args(argv)
    rows = formats()
    wanted = [f for f in args.formats.split(",") if f] or list(rows)
    ref = measure(rows["fp32 (reference)"])
    print(f"held text: {len(ref['ids'])} tokens; chats: {len(CHATS)} x {MAX_TOKENS} greedy tokens")
    print("| format | greedy agreement | mean KL (nats) | perplexity | ppl / fp32 | qkv kernel |")
    print("|---|---|---|---|---|---|")
    ref_ppl = perplexity(ref["logp"], ref["ids"])
    for name in wanted:
        got = ref if name == "fp32 (reference)" else measure(rows[name])
        c = compare(ref, got)
        kernel = got["kernels"].get("qkv", "").replace("|", "\\|")  # layers' kernels joined by " | ": one cell
        print(f"| {name} | {c['agreement']:.3f} | {c['kl']:.5f} | {c['ppl']:.3f} | {c['ppl'] / ref_ppl:.4f} | "
              f"{kernel} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
