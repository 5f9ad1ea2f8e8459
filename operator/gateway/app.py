"""The gateway's HTTP server: a thin shell around the proxy, the backend table and the metrics.

The two proxied endpoints are served by a bare ASGI function in front of FastAPI: on the hot path
FastAPI's routing, dependency solving and middleware stack cost more than the proxy's own work.
Everything else (probes, metrics, model list, debug state) goes through FastAPI."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
from dataclasses import asdict
from urllib.parse import quote

import aiohttp
from fastapi import FastAPI, Request
from floodway.engine.server.body_limit import BodyTooLarge, TooLarge, read_body
from floodway.operator.gateway.backends import BackendTable, get_text
from floodway.operator.gateway.breaker import breaker_allows
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.k8s import follow_endpoint_slices
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.payload import error_body
from floodway.operator.gateway.proxy import Gateway
from floodway.operator.gateway.tenants import ANONYMOUS, parse_tenants, tenant_of
from floodway.operator.gateway.upstream import UpstreamClient
from floodway.operator.runtimes import RUNTIMES
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

log = logging.getLogger("floodway.gateway")

_OPEN_PATHS = ("/health", "/ready", "/metrics")  # probes and scrapes need no client token
_PROXIED = frozenset({"/v1/completions", "/v1/chat/completions"})


def _read(path: str | None, setting: str, parse) -> dict | set | None:
    if not path:
        return None
    try:
        with open(path) as f:
            found = parse(f.read())
    except OSError as e:
        raise ValueError(f"{setting} {path} unreadable: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"{setting} {path}: {e}") from None
    if not found:
        raise ValueError(f"{setting} {path} holds no token")
    return found


class Clients:
    """Who a request's bearer token names: the tenants file's keys name their tenant, auth.tokens_file's are
    ANONYMOUS; with either file, any other token gets 401. Without both, every client is ANONYMOUS."""

    def __init__(self, config: GatewayConfig):
        self.tokens = _read(config.auth.tokens_file, "auth.tokens_file",
                            lambda text: {line.strip() for line in text.splitlines() if line.strip()}) or set()
        self.tenants = _read(config.tenants.keys_file, "tenants.keys_file", parse_tenants) or {}
        self.required = bool(self.tokens or self.tenants)

    def tenant(self, authorization: str) -> str | None:
        """The client's tenant; None: refused (401)."""
        if not self.required:
            return ANONYMOUS
        return tenant_of(authorization.removeprefix("Bearer ").strip(), self.tenants, self.tokens)


def _unauthorized() -> JSONResponse:
    return JSONResponse(error_body("missing or unknown bearer token", "authentication_error", "invalid_api_key"), 401)


def _remote_session() -> aiohttp.ClientSession:
    # Pool sized for bursts of thousands of concurrent requests; no total deadline (streams last long).
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2048, limit_per_host=0),
                                 timeout=aiohttp.ClientTimeout(total=None))


def create_app(config: GatewayConfig):
    """The ASGI application: proxied POSTs straight to the Gateway, the rest to a FastAPI app."""
    clients = Clients(config)
    table = BackendTable(config.routing.weights(), random.Random(config.routing.seed), RUNTIMES[config.engine_runtime],
                         config.routing.prefix_policy(), max_loras=config.max_loras)
    table.set_endpoints([(url, url) for url in config.backends.static])
    metrics = GatewayMetrics()

    async def scrape_forever(gateway: Gateway, probes: aiohttp.ClientSession) -> None:
        while True:
            await asyncio.sleep(config.scrape_interval_s)  # scrape period, not synchronisation
            await table.refresh(probes, config.scrape_interval_s * 2 + 0.5)
            gateway.update_gauges()
            gateway.notify()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        local = UpstreamClient(config.connect_timeout_s, config.request_timeout_s)
        async with _remote_session() as remote, aiohttp.ClientSession() as probes:
            gateway = app.state.gateway = Gateway(config, table, metrics, local, remote)
            app.state.probes = probes
            await table.refresh(probes, config.scrape_interval_s * 2 + 0.5)  # ready reflects real backends
            gateway.update_gauges()
            # Startup objects (FastAPI, pydantic, clients: ~60k) never die; left in the collector's reach, each
            # full collection walks them all (20-50 ms here), a pause every request in flight would wait out.
            gc.collect()
            gc.freeze()
            tasks = [asyncio.create_task(scrape_forever(gateway, probes))]
            if config.backends.kubernetes:
                tasks.append(asyncio.create_task(follow_endpoint_slices(config.backends.kubernetes, table)))
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                local.close()

    app = FastAPI(title="floodway gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        """Unknown paths and methods in the OpenAI error shape, as the engines answer them."""
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), exc.status_code, headers=exc.headers)

    if clients.required:
        @app.middleware("http")
        async def require_token(request: Request, call_next):
            if request.url.path not in _OPEN_PATHS and clients.tenant(request.headers.get("authorization", "")) is None:
                return _unauthorized()
            return await call_next(request)

    def card(model: str) -> dict:
        return {"id": model, "object": "model", "created": 0, "owned_by": "floodway"}

    async def from_backend(path: str) -> Response:
        backend = table.pick(frozenset())
        if backend is None:
            return JSONResponse(error_body("no ready backend to list models", "server_error"), 503)
        status, text = await get_text(app.state.probes, backend.url + path,
                                      aiohttp.ClientTimeout(total=config.connect_timeout_s + 5))
        return Response(text, status, media_type="application/json")

    @app.get("/v1/models")
    async def models() -> Response:
        if config.served_models:
            return JSONResponse({"object": "list", "data": [card(m) for m in config.served_models]})
        return await from_backend("/v1/models")

    @app.get("/v1/models/{model:path}")  # served names such as floodway/tiny-llama contain slashes
    async def retrieve_model(model: str) -> Response:
        if not config.served_models:
            return await from_backend("/v1/models/" + quote(model, safe="/"))
        if model in config.served_models:
            return JSONResponse(card(model))
        body = error_body(f"The model `{model}` does not exist; this gateway serves {config.served_models}.",
                          "invalid_request_error", "model_not_found")
        return JSONResponse({"error": {**body["error"], "param": "model"}}, 404)

    @app.get("/health")
    async def health() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready() -> Response:
        gateway: Gateway = app.state.gateway
        local = table.totals().ready
        remote = config.overflow.enabled and breaker_allows(gateway.breaker, gateway.policy.breaker, gateway.clock())
        return JSONResponse({"ready": bool(local or remote), "ready_backends": local, "overflow": remote},
                            200 if local or remote else 503)

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        app.state.gateway.update_gauges()
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/debug/state")
    async def debug_state() -> Response:
        """Backends and overflow state; holds no secret (the key is never part of the state)."""
        if not config.debug_state:  # off unless configured: it maps the backends for whoever asks
            return JSONResponse(error_body("not found (debug_state is off)", "not_found_error"), 404)
        g: Gateway = app.state.gateway
        return JSONResponse({"backends": table.snapshot(), "held": g.held, "breaker": vars(g.breaker),
                             "budget": asdict(g.budget), "learned_prefill_tokens_per_s": g.prefill_rate,
                             "overflow": config.overflow.model_dump(exclude={"api_key_env", "api_key_file"})})

    read_headers = {b"authorization", *(h.lower().encode("latin-1") for h in (config.opt_out_header,
                                                                               config.class_header))}  # all it reads

    async def asgi(scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] not in _PROXIED:
            return await app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in read_headers}
        tenant = clients.tenant(headers.get("authorization", ""))
        response = _unauthorized() if tenant is None else None
        if response is None and scope["method"] != "POST":
            response = JSONResponse(error_body(f"{scope['method']} not allowed; use POST", "invalid_request_error",
                                               "method_not_allowed"), 405, headers={"allow": "POST"})
        if response is None:
            try:
                body = await read_body(scope, receive, config.max_body_bytes)
            except BodyTooLarge:
                body, response = b"", TooLarge(config.max_body_bytes)
            if body is None:
                return  # the client went away before sending its body
            if response is None:
                response = await app.state.gateway.handle(scope["path"], body, headers, tenant)
        await response(scope, receive, send)

    return asgi
