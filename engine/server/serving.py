"""OpenAI request -> (prompt token ids, SamplingParams), and engine outputs -> OpenAI responses and SSE chunks.

Everything here is synchronous and side-effect free except tokenization; the routes in app.py wire it
to the engine front end.
"""

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from floodway.engine.outputs import final_choices
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.server import constraints, tools
from floodway.engine.server.errors import APIError, bad_request, param_of
from floodway.engine.server.max_tokens import requested_max_tokens
from floodway.engine.server.protocol import ChatCompletionRequest
from floodway.engine.server.responses import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatLogprobs,
    CompletionChoice,
    CompletionLogprobs,
    CompletionResponse,
    DeltaMessage,
    ErrorInfo,
    ErrorResponse,
    PromptTokensDetails,
    TokenLogprob,
    TopLogprob,
    Usage,
)


def check_model(requested: str | None, served: str) -> None:
    if requested is not None and requested != served:
        raise APIError(404, f"The model `{requested}` does not exist; this server serves `{served}`.",
                       param="model", code="model_not_found")


def completion_prompt_ids(prompt: str | list[int], tokenizer, vocab_size: int) -> list[int]:
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    else:
        ids = list(prompt)
        bad = next((t for t in ids if t >= vocab_size), None)
        if bad is not None:
            raise bad_request(f"prompt token id {bad} is outside the vocabulary (size {vocab_size})", "prompt")
    if not ids:
        raise bad_request("prompt is empty", "prompt")
    return ids


def echo_text(prompt: str | list[int], prompt_ids: list[int], tokenizer) -> str:
    """A prompt's text as echo returns it (token-id prompts decoded)."""
    return prompt if isinstance(prompt, str) else tokenizer.decode(prompt_ids)


def chat_prompt_ids(req: ChatCompletionRequest, tokenizer) -> list[int]:
    messages = [tools.template_message(m) for m in req.messages]
    extra = tools.template_kwargs(req, tokenizer)
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
    except Exception as e:  # noqa: BLE001 - a template may reject a conversation (roles, order)
        raise bad_request(f"messages could not be rendered by the chat template: {e}", "messages") from e
    return tokenizer.encode(text, add_special_tokens=False)


def sampling_params(req, max_tokens: int, logprobs: int | None, prompt_logprobs: int | None = None) -> SamplingParams:
    """logprobs: None (none), 0 (the chosen token's) or N (plus N alternatives); prompt_logprobs the same for echo."""
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else float(req.temperature),
        top_p=1.0 if req.top_p is None else float(req.top_p),
        top_k=0 if req.top_k is None else req.top_k,
        seed=req.seed, stop=req.stop_list(), stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos, logprobs=logprobs, prompt_logprobs=prompt_logprobs,
        presence_penalty=float(req.presence_penalty or 0), frequency_penalty=float(req.frequency_penalty or 0),
        repetition_penalty=1.0 if req.repetition_penalty is None else float(req.repetition_penalty),
        logit_bias={int(t): float(b) for t, b in (req.logit_bias or {}).items()}, min_tokens=req.min_tokens or 0,
        n=req.n, best_of=getattr(req, "best_of", None),
        structured=constraints.structured_spec(req))
    try:
        params.validate()
    except ValueError as e:
        raise bad_request(str(e), param_of(str(e))) from e
    return params


def chat_max_tokens(req: ChatCompletionRequest, prompt_len: int, max_model_len: int) -> int:
    """The limit the request names (requested_max_tokens), else whatever context the prompt leaves."""
    explicit = requested_max_tokens(req.max_completion_tokens, req.max_tokens)
    if explicit is not None:
        return explicit
    if prompt_len >= max_model_len:
        raise context_error(prompt_len, 1, max_model_len, "messages")
    return max_model_len - prompt_len


def context_error(prompt_len: int, max_tokens: int, max_model_len: int, prompt_param: str) -> APIError:
    return bad_request(
        f"This model's maximum context length is {max_model_len} tokens; the request has {prompt_len} prompt "
        f"tokens and asks for {max_tokens} more ({prompt_len + max_tokens} in total). Shorten the prompt or "
        "lower max_tokens.", prompt_param, code="context_length_exceeded")


def check_request(engine, prompt_ids: list[int], params: SamplingParams, prompt_param: str, priority: int) -> None:
    """Early 400s, before anything is queued: context length here, the engine's own checks after."""
    if len(prompt_ids) + params.max_tokens > engine.max_model_len:
        raise context_error(len(prompt_ids), params.max_tokens, engine.max_model_len, prompt_param)
    try:
        engine.validate_request(prompt_ids, params, priority)
    except ValueError as e:
        raise bad_request(str(e), param_of(str(e)) or prompt_param) from e


def interrupted() -> APIError:
    """An aborted output (the drain timeout cut it) ends as the spec allows: an error, never finish_reason "abort".
    503: a gateway retries it elsewhere when no byte reached its client."""
    return APIError(503, "The request was interrupted before it finished: the server is shutting down. Retry it.",
                    type="server_error", code="request_interrupted")


def hidden_stop_token(out) -> bool:
    """Whether the output's last token is a stop token (EOS, a stop_token_ids id) that its text leaves out."""
    return out.finish_reason == "stop" and not isinstance(out.stop_reason, str)


@dataclass
class Collected:
    """Everything a non-streaming response needs from one choice's outputs."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float] | None] = field(default_factory=list)  # per token, when N > 0 was asked
    prompt_token_ids: list[int] = field(default_factory=list)
    prompt_logprobs: list[float | None] | None = None  # per prompt token (echo with logprobs)
    prompt_top_logprobs: list[dict[int, float] | None] | None = None
    finish_reason: str | None = None
    hidden_tail: int = 0  # trailing tokens not in `text` (the end-of-turn token), left out of chat logprobs
    index: int = 0
    cumulative_logprob: float | None = None
    request_id: str = ""  # the engine request (one per prompt)

    def add(self, out) -> None:
        if out.finish_reason == "abort":
            raise interrupted()
        self.prompt_tokens, self.cached_tokens = len(out.prompt_token_ids), out.num_cached_tokens
        self.text, self.token_ids = out.text, list(out.output_token_ids)
        self.logprobs.extend(out.new_logprobs or [])
        self.top_logprobs.extend(out.new_top_logprobs or [None] * len(out.new_logprobs or []))
        self.prompt_token_ids = out.prompt_token_ids
        self.prompt_logprobs, self.prompt_top_logprobs = out.prompt_logprobs, out.prompt_top_logprobs
        self.finish_reason = out.finish_reason
        self.hidden_tail = int(hidden_stop_token(out))
        self.index, self.cumulative_logprob = out.index, out.cumulative_logprob
        self.request_id = out.request_id


@dataclass
class Gathered:
    """A request's choices, each Collected from the outputs with its index (n > 1: several)."""

    n: int = 1  # choices returned; fewer than were generated with best_of
    by_index: dict[int, Collected] = field(default_factory=dict)

    def add(self, out) -> None:
        self.by_index.setdefault(out.index, Collected()).add(out)

    def choices(self) -> list[Collected]:
        return final_choices(list(self.by_index.values()), self.n)

    def usage(self) -> Usage:
        """Each prompt once (an engine request per prompt); every generated token, of best_of's unreturned
        sequences too (they were computed)."""
        prompts = {c.request_id: c for c in self.by_index.values()}.values()
        p, cached = sum(c.prompt_tokens for c in prompts), sum(c.cached_tokens for c in prompts)
        n = sum(len(c.token_ids) for c in self.by_index.values())
        return Usage(prompt_tokens=p, completion_tokens=n, total_tokens=p + n,
                     prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


def token_strings(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([t]) for t in ids]


def completion_logprobs(tokenizer, ids: list[int], logprobs: list[float | None],
                        tops: list[dict[int, float] | None], start: int = 0) -> CompletionLogprobs:
    """Each token's top_logprobs: its alternatives and itself, by text (as vLLM); null where its logprob is
    (the echoed prompt's first token)."""
    tokens = token_strings(tokenizer, ids)
    offsets, pos = [], start
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    top = [None if lp is None else {**{tokenizer.decode([a]): v for a, v in (alt or {}).items()}, t: lp}
           for t, lp, alt in zip(tokens, logprobs, tops, strict=False)]
    return CompletionLogprobs(tokens=tokens, token_logprobs=list(logprobs), top_logprobs=top, text_offset=offsets)


def echo_logprobs(src, ids: list[int], logprobs: list[float], tops: list) -> tuple[list, list, list]:
    """The prompt's tokens, logprobs and alternatives (of src, a RequestOutput or Collected) before these (echo)."""
    return src.prompt_token_ids + ids, src.prompt_logprobs + logprobs, src.prompt_top_logprobs + tops


def _top(tokenizer, alternatives: dict[int, float] | None) -> list[TopLogprob]:
    named = ((tokenizer.decode([a]), v) for a, v in (alternatives or {}).items())
    return [TopLogprob(token=t, logprob=v, bytes=list(t.encode())) for t, v in named]


def chat_logprobs(tokenizer, ids: list[int], logprobs: list[float],
                  tops: list[dict[int, float] | None]) -> ChatLogprobs:
    return ChatLogprobs(content=[
        TokenLogprob(token=t, logprob=lp, bytes=list(t.encode()), top_logprobs=_top(tokenizer, alt))
        for t, lp, alt in zip(token_strings(tokenizer, ids), logprobs, tops, strict=False)])


def completion_response(rid: str, model: str, created: int, g: Gathered, tokenizer, logprobs: bool,
                        echo: dict[str, str] | None = None):
    """echo: each engine request's prompt text, returned before its choices' (with its logprobs when logprobs)."""
    def choice(c: Collected) -> CompletionChoice:
        lp = None
        if logprobs:
            picked = (c.token_ids, c.logprobs, c.top_logprobs)
            lp = completion_logprobs(tokenizer, *(echo_logprobs(c, *picked) if echo is not None else picked))
        text = c.text if echo is None else echo[c.request_id] + c.text
        return CompletionChoice(index=c.index, text=text, logprobs=lp, finish_reason=c.finish_reason)

    return CompletionResponse(id=rid, created=created, model=model, choices=[choice(c) for c in g.choices()],
                              usage=g.usage())


def chat_response(rid: str, model: str, created: int, g: Gathered, tokenizer, logprobs: bool,
                  tool_mode: tools.ToolMode | None = None):
    def choice(c: Collected) -> ChatChoice:
        shown = len(c.token_ids) - c.hidden_tail
        lp = chat_logprobs(tokenizer, c.token_ids[:shown], c.logprobs[:shown],
                           c.top_logprobs[:shown]) if logprobs else None
        content, calls = (c.text, []) if tool_mode is None else tools.parse(tool_mode, c.text)
        message = AssistantMessage(content=content, tool_calls=calls or None)
        return ChatChoice(index=c.index, message=message, logprobs=lp,
                          finish_reason="tool_calls" if calls and c.finish_reason == "stop" else c.finish_reason)

    return ChatCompletionResponse(id=rid, created=created, model=model, choices=[choice(c) for c in g.choices()],
                                  usage=g.usage())


def sse(obj) -> str:
    return f"data: {obj.model_dump_json()}\n\n"


DONE = "data: [DONE]\n\n"


def error_event(exc: Exception) -> str:
    if isinstance(exc, APIError):
        return sse(ErrorResponse(error=ErrorInfo(message=exc.message, type=exc.type, code=exc.code)))
    return sse(ErrorResponse(error=ErrorInfo(message=str(exc), type="internal_error")))


def _tops(out) -> list[dict[int, float] | None]:
    """Per new token, its alternatives (None where not asked)."""
    return out.new_top_logprobs or [None] * len(out.new_token_ids)


def _after(earlier, out):
    """out, carrying the new tokens and logprobs of an earlier output of its choice that sent no text."""
    if earlier is None:
        return out
    return dataclasses.replace(
        out, new_token_ids=earlier.new_token_ids + out.new_token_ids,
        new_logprobs=None if out.new_logprobs is None else (earlier.new_logprobs or []) + out.new_logprobs,
        new_top_logprobs=None if out.new_top_logprobs is None else _tops(earlier) + out.new_top_logprobs)


async def _events(outputs: AsyncIterator, event, usage_event, include_usage: bool,
                  opening=None) -> AsyncIterator[str]:
    """Both streams' skeleton: an event per output that carries text or finishes its choice (each event one
    choice, by index, as OpenAI streams n > 1), a failure reported in-band, the usage event once when asked,
    then [DONE]. The `opening(index)` event (chat's role chunk) goes out with a choice's first token, not before:
    until a byte is sent, a gateway may still retry a request queued on an engine that dies."""
    g, opened, held = Gathered(), set(), {}

    def pending(index: int) -> str:
        if opening is None or index in opened:
            return ""
        opened.add(index)
        return opening(index)

    try:
        async for out in outputs:
            g.add(out)
            out = _after(held.pop(out.index, None), out)
            if not out.new_text and out.finish_reason is None:
                held[out.index] = out  # its tokens (and logprobs) go out with the choice's next text
                continue
            yield pending(out.index) + event(out)
    except Exception as e:  # noqa: BLE001 - headers are sent: report in-band, then end the stream
        yield ("" if opened else pending(0)) + error_event(e)
    else:
        if include_usage:
            yield usage_event(g.usage())
    yield DONE


def completion_stream(outputs: AsyncIterator, rid: str, model: str, created: int, tokenizer,
                      logprobs: bool, include_usage: bool, echo: dict[str, str] | None = None) -> AsyncIterator[str]:
    """echo: each engine request's prompt text, sent in each of its choices' first event (with its logprobs when
    logprobs)."""
    offsets: dict[int, int] = {}  # per choice, text offset of its next piece, for logprobs' text_offset

    def event(out) -> str:
        lp, text = None, out.new_text
        picked = (out.new_token_ids, out.new_logprobs or [], _tops(out))
        echoes = echo is not None and out.index not in offsets
        if echoes:
            text = echo[out.request_id] + text
        offset = offsets.get(out.index, 0)
        if logprobs:
            lp = completion_logprobs(tokenizer, *(echo_logprobs(out, *picked) if echoes else picked), offset)
        offsets[out.index] = offset + len(text)
        choice = CompletionChoice(index=out.index, text=text, logprobs=lp, finish_reason=out.finish_reason)
        return sse(CompletionResponse(id=rid, created=created, model=model, choices=[choice]))

    def usage_event(usage: Usage) -> str:
        return sse(CompletionResponse(id=rid, created=created, model=model, choices=[], usage=usage))

    return _events(outputs, event, usage_event, include_usage)


def chat_stream(outputs: AsyncIterator, rid: str, model: str, created: int, tokenizer,
                logprobs: bool, include_usage: bool, tool_mode: tools.ToolMode | None = None) -> AsyncIterator[str]:
    tool_streams: dict[int, tools.ToolStream] = {}  # per choice, when the output is read for tool calls

    def chunk(choices, usage=None) -> str:
        return sse(ChatCompletionChunk(id=rid, created=created, model=model, choices=choices, usage=usage))

    def event(out) -> str:
        shown = len(out.new_token_ids) - hidden_stop_token(out)
        lp = chat_logprobs(tokenizer, out.new_token_ids[:shown], (out.new_logprobs or [])[:shown],
                           _tops(out)[:shown]) if logprobs else None
        delta, finish = DeltaMessage(content=out.new_text), out.finish_reason
        if tool_mode is not None:
            ts = tool_streams.setdefault(out.index, tools.ToolStream(tool_mode))
            content, calls = ts.feed(out.new_text, finish is not None)
            if not content and not calls and finish is None:
                return ""  # held back: it may be the start of a tool call
            delta = DeltaMessage(content=content or None, tool_calls=calls or None)
            finish = "tool_calls" if ts.calls and finish == "stop" else finish
        return chunk([ChatChunkChoice(index=out.index, delta=delta, logprobs=lp, finish_reason=finish)])

    def opening(index: int) -> str:
        return chunk([ChatChunkChoice(index=index, delta=DeltaMessage(role="assistant", content=""))])

    return _events(outputs, event, lambda usage: chunk([], usage), include_usage, opening)
