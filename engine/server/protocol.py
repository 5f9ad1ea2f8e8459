"""OpenAI API request models (pydantic, torch-free: the gateway imports this module too; responses are in
responses.py).

Requests accept the fields clients commonly send; unknown fields are ignored as the OpenAI API does, except
those that would change the answer if honoured (`functions`, completions' `tools`): they are refused, so that
a request means the same here, behind the gateway and on its overflow API. Range checks live here (so
errors name the field before anything is queued; the gateway runs the same models); cross-field checks
that need the model (context length) happen in the server.
"""

from typing import Annotated, Any, Literal

from floodway.engine.server.max_tokens import DEFAULT_MAX_TOKENS
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

MAX_CHOICES = 128  # n and best_of, as the OpenAI API caps n (with several prompts: prompts times n)
MAX_PROMPTS = 32  # prompts in one completions request, each its own engine request


def _valid_unicode(text: str) -> str:
    """JSON may escape a lone surrogate ("\\udcff"); it is no Unicode text, and no tokenizer takes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"invalid Unicode: lone surrogate U+{ord(text[e.start]):04X} at character {e.start}") from None
    return text


Text = Annotated[StrictStr, AfterValidator(_valid_unicode)]


def _absent(value):
    if value not in (None, [], {}):
        raise ValueError("not supported by this server; omit it")
    return value


# Fields that would change the answer if honoured: refused (unless null or empty), never silently dropped.
Unsupported = Annotated[Any, AfterValidator(_absent), Field(description="Not supported: absent, null or empty.")]
Penalty = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-2, le=2)]
TokenIdKey = Annotated[str, Field(pattern=r"^[0-9]{1,9}$", description="A token id, in decimal.")]
MAX_LOGIT_BIAS = 1024  # entries: bounds the per-step work one request adds


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: StrictBool = False


# ---- structured output: OpenAI's response_format and vLLM's structured_outputs ---------------------------

class JsonSchemaFormat(_Request):
    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: Text | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="Absent: any JSON object.")
    strict: StrictBool | None = Field(None, description="Outputs always follow the schema, strict or not.")


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs json_schema: {name, schema}")
        return self


class StructuredOutputs(_Request):
    """vLLM's structured_outputs: one of these."""

    json_: dict[str, Any] | Text | None = Field(None, alias="json")
    regex: Text | None = None
    choice: Annotated[list[Annotated[Text, Field(min_length=1)]], Field(min_length=1)] | None = None
    grammar: Text | None = None
    json_object: StrictBool | None = None


class _SamplingFields(_Request):
    """Fields shared by both endpoints. `None` means the default."""

    model: Text | None = Field(None, description="Served model name; defaults to the only model served.")
    temperature: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1)] | None = None
    top_k: Annotated[StrictInt, Field(ge=-1)] | None = Field(None, description="0 or -1 disables top-k.")
    n: Annotated[StrictInt, Field(ge=1, le=MAX_CHOICES)] = Field(
        1, description="Choices to return; the prompt is computed once and its KV blocks shared by them.")
    seed: Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    stop: Text | Annotated[list[Annotated[Text, Field(min_length=1)]], Field(max_length=16)] | None = None
    stop_token_ids: list[Annotated[StrictInt, Field(ge=0)]] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    ignore_eos: StrictBool = False
    presence_penalty: Penalty | None = Field(None, description="Subtracted from the logit of every token already "
                                             "in the output (OpenAI's formula).")
    frequency_penalty: Penalty | None = Field(None, description="Times its count in the output, subtracted from "
                                              "each token's logit (OpenAI's formula).")
    repetition_penalty: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)] | None = Field(
        None, description="vLLM extra: logits of tokens in the prompt or output divided by it (multiplied if <= 0).")
    logit_bias: Annotated[dict[TokenIdKey, Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-100, le=100)]],
                          Field(max_length=MAX_LOGIT_BIAS)] | None = Field(
        None, description="Token id (a string) -> bias in [-100, 100] added to its logit before sampling.")
    min_tokens: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="vLLM extra: EOS, stop token ids and stop strings are ignored until this many tokens.")
    user: Text | None = None
    priority: StrictInt = Field(0, description="vLLM extra: lower is served first by an engine started with "
                                "--scheduling-policy priority (ties by arrival); any other engine refuses all but 0.")
    tools: Unsupported = None
    functions: Unsupported = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | Text | None = Field(None, description="vLLM: a JSON schema the output follows.")
    guided_regex: Text | None = Field(None, description="vLLM: a regular expression the output matches.")
    guided_choice: Annotated[list[Annotated[Text, Field(min_length=1)]], Field(min_length=1)] | None = Field(
        None, description="vLLM: the output is one of these strings.")
    guided_grammar: Text | None = Field(None, description="vLLM: an EBNF grammar (xgrammar's) the output follows.")

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


TokenIds = Annotated[list[Annotated[StrictInt, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(_SamplingFields):
    prompt: Text | TokenIds | Annotated[list[Text], Field(min_length=1, max_length=MAX_PROMPTS)] \
        | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)] = Field(
            ..., description="Text or token ids, or a list of either: one choice per prompt (times n), in order.")
    max_tokens: Annotated[StrictInt, Field(ge=0)] | None = Field(
        DEFAULT_MAX_TOKENS, description="0 only with echo: the prompt (and its logprobs) without a completion.")
    logprobs: Annotated[StrictInt, Field(ge=0, le=5)] | None = Field(
        None, description="The sampled token's logprob and the N most likely alternatives (of the model's raw "
        "distribution, before temperature, penalties and bias).")
    best_of: Annotated[StrictInt, Field(ge=1, le=MAX_CHOICES)] | None = Field(
        None, description="Completions generated (>= n); the n with the highest cumulative logprob are returned. "
        "Not with stream unless equal to n.")
    echo: StrictBool = Field(False, description="The prompt is returned before the completion (with its logprobs "
                             "when logprobs is set; the first token has none).")
    suffix: None = Field(None, description="Not supported; must be absent or null.")

    @model_validator(mode="after")
    def _best_of_fits(self):
        if self.best_of is not None and self.best_of < self.n:
            raise ValueError(f"best_of ({self.best_of}) must be >= n ({self.n})")
        if self.stream and self.best_of is not None and self.best_of > self.n:
            raise ValueError("best_of > n cannot be streamed: the best are known only at the end")
        return self

    @model_validator(mode="after")
    def _prompts_fit(self):
        if self.max_tokens == 0 and not self.echo:
            raise ValueError("max_tokens 0 generates nothing: it is accepted with echo (the prompt's logprobs)")
        prompts, width = len(self.prompts()), self.best_of or self.n
        if prompts > 1 and width > self.n:
            raise ValueError("best_of > n is supported with one prompt only")
        if prompts * width > MAX_CHOICES:
            raise ValueError(f"{prompts} prompts times n={width} is over {MAX_CHOICES} choices")
        return self

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        return list(p) if isinstance(p, list) and isinstance(p[0], (str, list)) else [p]


class TextPart(_Request):
    type: Literal["text"]
    text: Text


# ---- tools ---------------------------------------------------------------------------------------------

FunctionName = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class FunctionDefinition(_Request):
    name: FunctionName
    description: Text | None = None
    parameters: dict[str, Any] | None = Field(None, description="JSON schema of the arguments; absent: none.")
    strict: StrictBool | None = None


class ToolDefinition(_Request):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Request):
    name: FunctionName


class NamedToolChoice(_Request):
    type: Literal["function"]
    function: NamedFunction


class FunctionCallIn(_Request):
    name: Text
    arguments: Text


class ToolCallIn(_Request):
    id: Text
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None
    name: Text | None = None
    tool_calls: list[ToolCallIn] | None = None  # an assistant's earlier calls
    tool_call_id: Text | None = None  # a tool message answers this call

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(_SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    tools: Annotated[list[ToolDefinition], Field(max_length=128)] | None = Field(
        None, description="Needs a model whose chat template supports tools.")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None

    @model_validator(mode="after")
    def _tool_choice_fits_tools(self):
        names = {t.function.name for t in self.tools or []}
        if len(names) < len(self.tools or []):
            raise ValueError("tools: function names must be unique")
        if self.tool_choice not in (None, "none") and not names:
            raise ValueError("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tool_choice.function.name not in names:
            raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not among the tools")
        return self
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    logprobs: StrictBool = False
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = Field(
        None, description="The N most likely alternatives per token (needs logprobs: true).")

    @field_validator("top_logprobs")
    @classmethod
    def _needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return value
