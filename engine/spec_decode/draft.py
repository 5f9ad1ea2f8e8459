"""Draft-model proposals: a second, smaller model sharing the target's tokenizer proposes its greedy
continuation. Its KV lives in caches of its own indexed by the target's block ids, so the one block manager
allocates, shares, preempts and frees both. A greedy draft is a deterministic proposer (its proposal is a point
mass), so the target verifies it exactly as prompt-lookup drafts.

Each sequence's draft KV is computed from its first token on (`Request.draft_computed`): a prefix-cache hit or a
fork brings the target's KV, not the draft's, and the draft's catch-up writes the same values into shared blocks.
"""

from floodway.engine.config import EngineConfig
from floodway.engine.kv_manager import KVManager
from floodway.engine.request import Request
from floodway.engine.step_inputs import SeqInput


class DraftModel:
    def __init__(self, target: EngineConfig, model: str, num_blocks: int, max_model_len: int, vocab_size: int):
        from floodway.engine.model_runner import ModelRunner

        cfg = EngineConfig(model=model, dtype=target.dtype, device=target.device, max_model_len=max_model_len,
                           block_size=target.block_size, num_kv_blocks=num_blocks, max_num_seqs=target.max_num_seqs,
                           enforce_eager=True, model_impl=target.model_impl)
        self.runner = ModelRunner(cfg)
        if self.runner.vocab_size != vocab_size:
            raise ValueError(f"the draft model's vocabulary ({self.runner.vocab_size}) differs from the target's "
                             f"({vocab_size}): a draft must share the target's tokenizer")

    def propose(self, reqs: list[Request], ks: list[int], kv: KVManager) -> list[list[int]]:
        """Up to ks[i] greedy draft tokens per sequence, in k steps of the draft (the first also computes each
        sequence's tokens the draft has not seen). A sequence whose draft slots cannot be allocated gets none."""
        # Slots for a sequence's drafts only while every decoding sequence keeps a free block for its own token.
        active = [i for i, k in enumerate(ks) if k and kv.pool.num_free > len(reqs) and kv.allocate(reqs[i], 1 + k)]
        drafts: list[list[int]] = [[] for _ in reqs]
        for step in range(max((ks[i] for i in active), default=0)):
            rows = [i for i in active if ks[i] > step]
            inputs = []
            for i in rows:
                r = reqs[i]
                start = r.draft_computed if step == 0 else r.num_tokens + step - 1
                tokens = r.all_token_ids[start:] if step == 0 else [drafts[i][-1]]
                inputs.append(SeqInput(tokens, start, kv.block_table(r), True))
            logits = self.runner.execute(inputs)
            for i, token in zip(rows, logits.argmax(dim=-1).tolist(), strict=True):
                drafts[i].append(token)
                reqs[i].draft_computed = reqs[i].num_tokens + step  # KV of the tokens before this draft
        return drafts

    @staticmethod
    def settle(req: Request) -> None:
        """After a verify: the draft's KV holds only up to what the target accepted."""
        req.draft_computed = min(req.draft_computed, req.num_computed_tokens)
