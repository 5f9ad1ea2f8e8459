"""OpenAI API response models (pydantic, torch-free): what the engine sends and the gateway relays; field
order and omitted nulls as the OpenAI spec has them (the tests validate every body and chunk against it)."""

import time
import uuid
from typing import Literal

from pydantic import (
    BaseModel,
    Field,
)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # prompt tokens served from the prefix cache


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


# The spec's values only: a request the server interrupts ends with an error (status or stream event), not a
# finish_reason strict clients cannot parse.
FinishReason = Literal["stop", "length", "tool_calls"] | None


def _is_none(value) -> bool:
    return value is None


class _CompletionObject(BaseModel):
    """The head every completion object carries; subclasses pin `object` (field order stays as on the wire)."""

    id: str
    object: str
    created: int
    model: str


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]  # with echo, the prompt's first token has none (null, as OpenAI sends)
    top_logprobs: list[dict[str, float] | None] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason = None


class CompletionResponse(_CompletionObject):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage | None = Field(None, exclude_if=_is_none)  # omitted from stream chunks: the spec has no null


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = []


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None  # required by the spec, null allowed: this server never refuses


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text, as the model wrote it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class DeltaFunctionCall(BaseModel):
    name: str | None = Field(None, exclude_if=_is_none)  # in a call's first delta only
    arguments: str | None = Field(None, exclude_if=_is_none)


class DeltaToolCall(BaseModel):
    index: int
    id: str | None = Field(None, exclude_if=_is_none)
    type: Literal["function"] | None = Field(None, exclude_if=_is_none)
    function: DeltaFunctionCall | None = Field(None, exclude_if=_is_none)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None  # null when the answer is tool calls only
    tool_calls: list[ToolCall] | None = Field(None, exclude_if=_is_none)
    refusal: str | None = None  # required by the spec, null allowed


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason = None


class ChatCompletionResponse(_CompletionObject):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: Usage


class DeltaMessage(BaseModel):
    # Omitted, not null, after a choice's first chunk, as OpenAI streams it (the spec's enum has no null).
    role: Literal["assistant"] | None = Field(None, exclude_if=_is_none)
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = Field(None, exclude_if=_is_none)


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason = None


class ChatCompletionChunk(_CompletionObject):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "floodway"
    root: str | None = None  # a LoRA adapter's folder
    parent: str | None = None  # a LoRA adapter's base model
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | int | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo
