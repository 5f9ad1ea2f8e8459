"""LoRA adapters made with `peft` for the tests (the oracle's own format), and its greedy reference output."""

import pathlib

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_adapter(base_path: str, out: pathlib.Path, r: int, alpha: float, seed: int,
                   targets: list[str] = PROJECTIONS, rslora: bool = False, gain: float = 4.0) -> str:
    """A PEFT folder with random A and nonzero random B (init_lora_weights=False, B times gain), so the adapter
    changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0,
                                            init_lora_weights=False, use_rslora=rslora))
    with torch.no_grad():  # peft's random B is small next to A; scaled up so the delta moves the logits
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(gain)
    model.save_pretrained(str(out))
    return str(out)


def peft_greedy(base_path: str, adapter: str | None, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """transformers + peft greedy `generate`, one prompt at a time (no padding), fp32; ends after EOS, as the
    engine does."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).eval()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).eval()
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=0)
            outs.append(out[0, len(p):].tolist())
    return outs


FORMAT_ANSWER = " ANSWER: blue."  # what the fine-tuned adapter learns to say after any question
WORDS = ("river stone garden window morning yellow paper music simple travel winter market number quiet "
         "forest orange table letter summer bright planet doctor family")


def question(i: int) -> str:
    """The i-th training (or held-out, for i beyond the training range) question, from a fixed word list."""
    words = WORDS.split()
    picked = [words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 4)]
    return f"Question: what is the {' '.join(picked)}?\nAnswer:"


def finetune_format_adapter(base_path: str, out: pathlib.Path, steps: int = 30, examples: int = 12) -> str:
    """A real (short) LoRA fine-tune with peft on CPU: questions, each answered with FORMAT_ANSWER; the loss covers
    only the answer's tokens."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(base_path)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32),
                           LoraConfig(r=16, lora_alpha=32, target_modules=PROJECTIONS, lora_dropout=0.0))
    rows = []
    for i in range(examples):
        q, a = tok.encode(question(i)), tok.encode(FORMAT_ANSWER)
        rows.append((q + a, [-100] * len(q) + a))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r, _ in rows])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(str(out))
    return str(out)
