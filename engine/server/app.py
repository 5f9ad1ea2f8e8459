"""The FastAPI app: OpenAI routes, probes and metrics. Thin: parsing and shaping live in protocol.py, responses.py and
serving.py, the engine behind frontend.py and engine_loop.py, the state in state.py."""

import asyncio
import contextlib
import dataclasses
import functools
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from floodway.engine.server import constraints, errors, lora_api, serving, tools
from floodway.engine.server.batch import MergedOutputs
from floodway.engine.server.body_limit import BodyLimit
from floodway.engine.server.errors import APIError
from floodway.engine.server.frontend import Rejected
from floodway.engine.server.max_tokens import DEFAULT_MAX_TOKENS
from floodway.engine.server.protocol import ChatCompletionRequest, CompletionRequest
from floodway.engine.server.responses import (
    ChatCompletionResponse,
    CompletionResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
    new_id,
    now_s,
)
from floodway.engine.server.state import ServerOptions, ServerState
from floodway.operator.version import __version__

ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 413, 429, 503)}
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _ClosingStream(StreamingResponse):
    """Closes the request's output stream however the response ends, so a client that disconnects
    mid-stream aborts its request in the engine at once (not when the generator is garbage-collected)."""

    def __init__(self, content, outputs, **kwargs):
        super().__init__(content, **kwargs)
        self._outputs = outputs

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._outputs.close()
            await self.body_iterator.aclose()


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _collect(outputs, n: int) -> serving.Gathered:
    c = serving.Gathered(n)
    async for out in outputs:
        c.add(out)
    return c


async def _collect_unless_disconnected(request: Request, outputs, n: int) -> serving.Gathered:
    """A non-streaming request ends early (and is aborted) when its client disconnects."""
    work = asyncio.ensure_future(_collect(outputs, n))
    watch = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise APIError(499, "Client disconnected.", code="client_disconnected")
        return work.result()
    finally:
        watch.cancel()
        outputs.close()


def engine_ids(rid: str, prompts: int) -> list[str]:
    """The engine request ids of a response's prompts: its own id for one, suffixed by position for several."""
    return [rid] if prompts == 1 else [f"{rid}-{i}" for i in range(prompts)]


def create_app(engine_config, options: ServerOptions | None = None) -> FastAPI:
    options = options or ServerOptions()
    options.validate()
    engine_config.validate()
    state = ServerState(engine_config, options)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        threading.Thread(target=state.load, name="engine-load", daemon=True).start()
        yield
        state.shutdown()

    app = FastAPI(title="Floodway engine", version=__version__, lifespan=lifespan,
                  description="OpenAI-compatible API of one Floodway engine.")
    app.state.server = state
    errors.install(app)

    def submit(rid: str, prompt_ids: list[int], params, lora: str | None, priority: int):
        # Checked again at admission, with no await before it: a drain that began while the prompt was being
        # encoded saw nothing in flight and lets the server stop, which would cut this request's stream short.
        state.require_serving()
        try:
            return state.frontend.submit(rid, prompt_ids, params, lora, priority)
        except Rejected as r:
            state.metrics.reject()
            a = r.admission
            raise APIError(429, f"Server busy: {a.reason}. Retry after {a.retry_after_s}s.",
                           type="rate_limit_error", code="rate_limit_exceeded",
                           headers={"Retry-After": str(a.retry_after_s)}) from None

    def submit_all(rid: str, prompts_ids: list[list[int]], params, lora: str | None, priority: int):
        """One engine request per prompt (ids from engine_ids), merged into one output stream; all or none."""
        streams = []
        try:
            for engine_rid, ids in zip(engine_ids(rid, len(prompts_ids)), prompts_ids, strict=True):
                streams.append(submit(engine_rid, ids, params, lora, priority))
        except APIError:
            for stream in streams:
                stream.close()
            raise
        return streams[0] if len(streams) == 1 else MergedOutputs(streams, params.best_of or params.n)

    async def respond(body, request: Request, rid: str, prompts_ids: list[list[int]], params, what: str,
                      stream_fn, response_fn, lora: str | None = None):
        """The tail both generation routes share: admit, then stream or collect (lora: the adapter named)."""
        model = lora or state.served_model
        if params.structured is not None:  # compiled off the event loop (a large schema takes a while), then cached
            await asyncio.to_thread(constraints.check_compiles, state.engine.grammars, body, params.structured)
        for prompt_ids in prompts_ids:
            serving.check_request(state.engine, prompt_ids, params, what, body.priority)
        outputs = submit_all(rid, prompts_ids, params, lora, body.priority)
        created, logprobs = now_s(), params.logprobs is not None
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            stream = stream_fn(outputs, rid, model, created, state.tokenizer, logprobs, usage)
            return _ClosingStream(stream, outputs, media_type="text/event-stream", headers=SSE_HEADERS)
        c = await _collect_unless_disconnected(request, outputs, params.n * len(prompts_ids))
        return response_fn(rid, model, created, c, state.tokenizer, logprobs)

    @app.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
    async def completions(body: CompletionRequest, request: Request):
        state.require_serving()
        lora = lora_api.adapter_for(state, body.model)
        prompts_ids = await state.encoder.completion_ids(body)
        max_tokens = DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens
        params = serving.sampling_params(body, max_tokens, body.logprobs, body.logprobs if body.echo else None)
        rid = new_id("cmpl")
        echo = None  # with echo: each engine request's prompt text
        if body.echo:
            texts = [serving.echo_text(p, ids, state.tokenizer) for p, ids in zip(body.prompts(), prompts_ids,
                                                                                  strict=True)]
            echo = dict(zip(engine_ids(rid, len(texts)), texts, strict=True))
        return await respond(body, request, rid, prompts_ids, params, "prompt",
                             functools.partial(serving.completion_stream, echo=echo),
                             functools.partial(serving.completion_response, echo=echo), lora)

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERRORS)
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        state.require_serving()
        lora = lora_api.adapter_for(state, body.model)
        prompt_ids = await state.encoder.chat_ids(body)
        max_tokens = serving.chat_max_tokens(body, len(prompt_ids), state.engine.max_model_len)
        params = serving.sampling_params(body, max_tokens, (body.top_logprobs or 0) if body.logprobs else None)
        mode = tools.mode_of(body)
        return await respond(body, request, new_id("chatcmpl"), [prompt_ids], params, "messages",
                             functools.partial(serving.chat_stream, tool_mode=mode),
                             functools.partial(serving.chat_response, tool_mode=mode), lora)

    def model_card() -> ModelCard:
        max_len = state.engine.max_model_len if state.engine else None
        return ModelCard(id=state.served_model, created=now_s(), max_model_len=max_len)

    @app.get("/v1/models", response_model=ModelList)
    async def models():
        return ModelList(data=[model_card(), *lora_api.cards(state)])

    # `:path`: served names such as floodway/tiny-llama contain slashes.
    @app.get("/v1/models/{model:path}", response_model=ModelCard, responses={404: {"model": ErrorResponse}})
    async def retrieve_model(model: str):
        lora = lora_api.adapter_for(state, model)
        return model_card() if lora is None else lora_api.card(state, lora)

    @app.get("/health")
    async def health():
        """Liveness: the process serves HTTP and its engine loop runs (or is still loading)."""
        if state.load_error or (state.loop is not None and not state.loop.alive() and not state.draining):
            return JSONResponse({"status": "unhealthy", "error": state.load_error or "engine loop stopped"}, 503)
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        """Readiness: the model is loaded and the server is not draining."""
        if state.ready:
            return {"status": "ready"}
        why = "draining" if state.draining else ("load_failed" if state.load_error else "loading")
        return JSONResponse({"status": why}, 503)

    @app.get("/metrics")
    async def metrics():
        body = state.metrics.render() if state.metrics else b""
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/debug/engine")
    async def debug_engine():
        """The engine's latest stats snapshot and the server's queue (for tests and operators)."""
        if state.loop is None:
            return JSONResponse({"status": "loading"}, 503)
        q = state.frontend.queue_state()
        return {"stats": dataclasses.asdict(state.loop.stats), "steps": state.loop.steps,
                "inflight": state.frontend.inflight, "waiting_requests": q.waiting_requests,
                "waiting_tokens": q.waiting_tokens, "draining": state.draining,
                "weights": state.engine.runner.weights.method, "linear_kernels": state.engine.runner.linear_kernels,
                "failed_lora_adapters": lora_api.failed(state)}

    lora_api.register(app, state)
    app.add_middleware(BodyLimit, max_bytes=options.max_body_bytes)
    return app
