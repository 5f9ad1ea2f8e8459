"""One request's state inside the engine."""

import enum
from dataclasses import dataclass, field
from typing import Any

from floodway.engine.outputs import RequestMetrics
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.spec_decode.policy import Acceptance


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    metrics: RequestMetrics
    output_token_ids: list[int] = field(default_factory=list)
    all_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1  # prefix-cache hit tokens at first scheduling; -1 until then
    status: Status = Status.WAITING
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    generator: Any = None  # torch.Generator for seeded sampling
    detok: Any = None  # Detokenizer
    grammar: Any = None  # grammar state (structured_grammar) when the output must match a StructuredSpec
    # Prompt logprobs collected so far, position by position (the first token has none), when asked.
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[dict[int, float] | None] | None = None
    index: int = 0  # choice index within its request (n > 1)
    # Sequences of the same request that start once this one's prompt is prefilled: they share its blocks.
    forks: list["Request"] = field(default_factory=list)
    cumulative_logprob: float = 0.0  # sum of the chosen tokens' logprobs, where computed (best_of ranks by it)
    # Speculation: the draft tokens the coming step verifies after the last token, and the sequence's record.
    spec_token_ids: list[int] = field(default_factory=list)
    spec_acceptance: Acceptance = field(default_factory=Acceptance)
    spec_expected: float = 0.0  # drafts of spec_token_ids its acceptance rate expected to be kept
    draft_computed: int = 0  # leading tokens whose KV the draft model (if any) holds
    lora: Any = None  # the LoRA adapter it runs with (lora.registry.Adapter), None for the base model
    priority: int = 0  # lower is served first under the priority scheduling policy (engine/scheduling_policy.py)

    def __post_init__(self):
        self.all_token_ids = list(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)
