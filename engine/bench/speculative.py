"""Speculative decoding, side by side: the same engine settings without and with `--speculative-config`, on
input-grounded requests (rewrite, correct or continue a given text or code: answers that copy the prompt, where
prompt lookup finds drafts) and on free chat (answers that rarely repeat it), at each concurrency.

Each (workload, concurrency) cell runs both engines in turn over the same requests (--rounds times), greedy,
keeping that many requests in flight (closed loop: a finished request is replaced by the next). It reports output
tokens per second and per CPU-second of each over the steps that ran with that many in flight (the drain at the
end runs as many steps as its slowest request, speculating or not, and would measure that request alone), their
ratio, whether the outputs were identical, and the speculating engine's acceptance (accepted drafts over drafts
verified) and drafts per verify.
"""

from dataclasses import dataclass

from floodway.engine.bench.systems import Clock
from floodway.engine.sampling_params import SamplingParams

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4}'  # the benches' --speculative-config

CODE = [
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n",
    "def is_even(n):\n    if n % 2 == 0:\n        return True\n    return False\n\n\ndef count_even(items):\n"
    "    return sum(1 for x in items if is_even(x))\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
    "        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n",
    "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print('FizzBuzz')\n"
    "        elif i % 3 == 0:\n            print('Fizz')\n        else:\n            print(i)\n",
]
TEXT = [
    "The river runs past the old mill and under the stone bridge. In spring the water rises and the meadow "
    "floods, so the farmers move their sheep to the hill. By summer the river is low again and children swim "
    "near the bridge.",
    "Our team meets every Monday at nine. We review last week's tickets, agree on the priorities for the week and "
    "assign each ticket to one person. Anyone who is blocked says so in the meeting, not at the end of the week.",
    "To make tea, boil fresh water and warm the pot first. Put one spoon of leaves per cup into the pot, pour the "
    "water over them and wait four minutes. Pour the tea through a strainer and serve it with milk or lemon.",
    "The library opens at eight and closes at six. Books can be borrowed for three weeks and renewed twice. Late "
    "books cost ten cents a day, and lost books must be paid for at their full price.",
]
GROUNDED = [
    "Rename the function to `{name}` and return the code, nothing else:\n\n{code}",
    "Add a docstring to this code and return the whole code:\n\n{code}",
    "Repeat this text exactly, then say how many sentences it has:\n\n{text}",
    "Fix any spelling mistakes in this text and return it in full:\n\n{text}",
]
CHAT = [
    "Write a short story about a dragon who is afraid of the dark.",
    "What are three good habits for staying healthy?",
    "Explain why the sky is blue to a ten-year-old.",
    "Give me ideas for a birthday party for my grandmother.",
    "What should I pack for a weekend of hiking?",
    "Describe your ideal city to live in.",
    "How do I start learning to play the guitar?",
    "Write a poem about the sea in autumn.",
]


def messages(workload: str, i: int) -> list[dict]:
    """Request i of the workload (grounded or chat) as chat messages, cycling through its templates."""
    if workload == "grounded":
        template = GROUNDED[i % len(GROUNDED)]
        text = template.format(name=f"compute_{i}", code=CODE[(i // len(GROUNDED)) % len(CODE)],
                               text=TEXT[(i // len(GROUNDED)) % len(TEXT)])
    else:
        text = CHAT[i % len(CHAT)] + ("" if i < len(CHAT) else f" (version {i // len(CHAT) + 1})")
    return [{"role": "user", "content": text}]


def prompts(tokenizer, workload: str, n: int) -> list[list[int]]:
    """The workload's first n requests, chat-templated."""
    return [list(tokenizer.apply_chat_template(messages(workload, i), add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]) for i in range(n)]


@dataclass
class Run:
    tokens: int  # output tokens of the steps run with `concurrency` requests in flight, and their seconds
    seconds: float
    cpu: float
    outputs: dict
    drafts: int = 0  # verifies with drafts
    draft_tokens: int = 0
    accepted: int = 0


def run_once(engine, reqs: list[list[int]], concurrency: int, max_tokens: int, tag: str) -> Run:
    before = engine.stats()
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    pending, inflight, outputs, full = list(enumerate(reqs)), 0, {}, min(concurrency, len(reqs))
    tokens, seconds, cpu = 0, 0.0, 0.0
    while pending or engine.has_unfinished_requests():
        while pending and inflight < concurrency:
            i, p = pending.pop(0)
            engine.add_request(f"{tag}-{i}", p, params)
            inflight += 1
        held, clock = inflight == full, Clock()
        for out in engine.step():
            tokens += len(out.new_token_ids) * held
            if out.finished:
                inflight -= 1
                outputs[out.request_id.split("-", 1)[1]] = out.output_token_ids
        if held:
            wall, used = clock.stop()
            seconds, cpu = seconds + wall, cpu + used
    after = engine.stats()
    return Run(tokens, seconds, cpu, outputs, after.spec_num_drafts - before.spec_num_drafts,
               after.spec_num_draft_tokens - before.spec_num_draft_tokens,
               after.spec_num_accepted_tokens - before.spec_num_accepted_tokens)


def compare(plain, spec, tokenizer, concurrency: list[int], max_tokens: int, num_requests: int | None, echo,
            rounds: int) -> None:
    """Echoes a table, row by row as measured: each workload at each concurrency, without and with speculation,
    ratios and acceptance. Each cell runs `rounds` times, the two engines alternating which goes first, and its
    ratios are of the rounds' sums: the same engine's tokens per CPU-second drift by 10-20% from run to run on a
    shared machine, which one pair of runs cannot tell from a 5% difference. The per-round CPU ratios' range is
    printed beside them."""
    warm = prompts(tokenizer, "grounded", 2)
    for engine in (plain, spec):  # shapes and the policy's step times measured, unreported
        run_once(engine, warm, 2, 16, "warm")
    echo(f"greedy, {max_tokens} new tokens per request; requests per cell: "
         f"{num_requests or 'max(4, 2 x concurrency)'}; rounds per cell: {rounds}, alternating which engine goes "
         f"first; speculative config {spec.config.speculative_config}")
    echo("| workload | concurrency | plain tok/s | spec tok/s | spec / plain | spec / plain (CPU) | per-round (CPU) "
         "| acceptance | drafts per verify | identical |\n|---|---|---|---|---|---|---|---|---|---|")
    for workload in ("grounded", "chat"):
        for c in concurrency:
            reqs = prompts(tokenizer, workload, num_requests or max(4, 2 * c))
            pairs = []
            for r in range(rounds):
                order = [(0, plain), (1, spec)][::1 if r % 2 == 0 else -1]
                runs = {i: run_once(e, reqs, c, max_tokens, f"{workload}{c}r{r}{'ps'[i]}") for i, e in order}
                pairs.append((runs[0], runs[1]))
            a, b = (_total([p[i] for p in pairs]) for i in (0, 1))
            per_round = sorted((y.tokens / y.cpu) / (x.tokens / x.cpu) for x, y in pairs)
            identical = all(x.outputs == y.outputs == pairs[0][0].outputs for x, y in pairs)
            echo(f"| {workload} | {c} | {a.tokens / a.seconds:,.1f} | {b.tokens / b.seconds:,.1f} | "
                 f"{(b.tokens / b.seconds) / (a.tokens / a.seconds):.2f}x | "
                 f"{(b.tokens / b.cpu) / (a.tokens / a.cpu):.2f}x | "
                 f"{per_round[0]:.2f}-{per_round[-1]:.2f}x | "
                 f"{b.accepted / b.draft_tokens if b.draft_tokens else 0:.0%} | "
                 f"{b.draft_tokens / b.drafts if b.drafts else 0:.1f} | "
                 f"{'yes' if identical else 'no'} |")


def _total(runs: list[Run]) -> Run:
    """The rounds' sums (the outputs of the first)."""
    return Run(sum(r.tokens for r in runs), sum(r.seconds for r in runs), sum(r.cpu for r in runs),
               runs[0].outputs, sum(r.drafts for r in runs), sum(r.draft_tokens for r in runs),
               sum(r.accepted for r in runs))


def run(model: str, speculative_config: str, concurrency: list[int], threads: int, dtype: str, max_model_len: int,
        max_tokens: int, num_requests: int | None, rounds: int) -> None:
    import torch
    import typer
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    if threads:
        torch.set_num_threads(threads)
    settings = dict(model=model, served_model_name=model, max_model_len=max_model_len, dtype=dtype,
                    max_num_seqs=max(concurrency))
    try:
        configs = [EngineConfig(**settings), EngineConfig(**settings, speculative_config=speculative_config)]
        for cfg in configs:
            cfg.validate()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    plain, spec = (LLMEngine(cfg) for cfg in configs)
    typer.echo(f"model {model}; {torch.get_num_threads()} threads, {plain.runner.device}, {plain.runner.dtype}")
    compare(plain, spec, plain.tokenizer, concurrency, max_tokens, num_requests, typer.echo, rounds)
