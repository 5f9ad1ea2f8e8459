"""The proxy: asks the overflow rule where each request goes, sends it there and streams the answer back.

A request is retried (on another local backend, or on the overflow API per the rule) only while no byte
has reached the client: a non-streaming answer is read whole before it is returned, a streaming one
only after its first chunk arrived. After that, a failing backend ends the stream with an error event.
Chunks are forwarded as they arrive (no buffering). The response header `x-floodway-backend` names the
backend that served (a local backend id or `overflow`), `x-floodway-gateway` the gateway that routed it (its
host name: the pod's name in a cluster, where each gateway replica keeps its own prefix index).

Requests to local engines go through the lean keep-alive client in upstream.py (the hot path); requests
to the overflow API through an aiohttp session (any server on the internet).

Requests the overflow rule holds wait in the gateway's hold queue (hold_queue.py), leaving in their turn only;
their timeouts still notice a passed deadline, and start a round when none is under way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from dataclasses import replace

import aiohttp
from floodway.operator.gateway.adapters import adapter_of, never_overflows, overflow_model
from floodway.operator.gateway.attainment import Slos, attained
from floodway.operator.gateway.backends import BackendChoice, BackendTable
from floodway.operator.gateway.breaker import BreakerState, breaker_on_result, breaker_on_send
from floodway.operator.gateway.classes import classed, request_class
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.hold_queue import HoldQueue
from floodway.operator.gateway.metrics import WATCHED_SHARE, GatewayMetrics
from floodway.operator.gateway.overflow import (
    SHARE_SPENT,
    OverflowDecision,
    PoolState,
    RequestInfo,
    overflow_deadline_s,
    overflow_decision,
    replicas_needed,
)
from floodway.operator.gateway.overflow_budget import BudgetState, budget_arrive, budget_refill, budget_take
from floodway.operator.gateway.payload import (
    completion_limit,
    error_body,
    estimate_prompt_tokens,
    estimate_tokens,
    is_error_body,
    overflow_body,
    sse_error_event,
)
from floodway.operator.gateway.prefix_index import request_keys
from floodway.operator.gateway.secrets import ApiKey
from floodway.operator.gateway.tenant_gate import TenantGate, WithRelease
from floodway.operator.gateway.tenant_gate import refusal as tenant_refusal
from floodway.operator.gateway.ttft import learned_prefill_rate, predict_ttft_from_backlog, prefill_rate_sample
from floodway.operator.gateway.upstream import RemoteResponse, UpstreamClient, UpstreamError, UpstreamTimeout
from floodway.operator.gateway.upstream import Response as EngineResponse
from floodway.operator.gateway.validate import refusal
from floodway.operator.spec.models import SLOClassSpec
from starlette.responses import JSONResponse, Response, StreamingResponse

log = logging.getLogger("floodway.gateway")

BACKEND_HEADER = "x-floodway-backend"
GATEWAY_HEADER = "x-floodway-gateway"
_GATEWAY = socket.gethostname()
# A local backend answering these is failing or full: the request is retried elsewhere. Any other answer
# (a 4xx, a 500 that carries an error body) is the request's own error, relayed as is.
_RETRYABLE = {429, 502, 503, 504}
_API_FAILURE = {401, 403, 408, 429} | set(range(500, 600))  # overflow answers that count against the breaker
_JSON = {"content-type": "application/json"}
_UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, UpstreamError)


class Reply:
    """A whole answer as two ASGI messages: on the hot path starlette's Response costs more than it gives."""

    __slots__ = ("body", "status_code", "raw_headers")

    def __init__(self, body: bytes, status: int, backend_id: str, content_type: str):
        self.body, self.status_code = body, status
        self.raw_headers = [(b"content-type", content_type.encode("latin-1")),
                            (b"content-length", str(len(body)).encode()),
                            (BACKEND_HEADER.encode(), backend_id.encode("latin-1")),
                            (GATEWAY_HEADER.encode(), _GATEWAY.encode("latin-1"))]

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body})


Answer = Response | Reply  # what the proxy hands the server: an ASGI application for one request


class _Failed(Exception):
    """An attempt failed before any byte reached the client (status: the backend's answer, if any)."""

    def __init__(self, status: int | None = None):
        super().__init__(f"status {status}" if status else "")
        self.status = status


class Gateway:
    def __init__(self, config: GatewayConfig, table: BackendTable, metrics: GatewayMetrics,
                 local: UpstreamClient, remote: aiohttp.ClientSession, clock=time.monotonic):
        self.config, self.table, self.metrics, self.clock = config, table, metrics, clock
        self.local, self.remote = local, remote
        self.policy = config.overflow_policy()
        self.slos = Slos.of(config.slo)  # the service's, which a request's class may replace
        self.api_key = ApiKey(config.overflow.api_key_env, config.overflow.api_key_file)
        self.budget, self.breaker = BudgetState(), BreakerState()
        self.hold = HoldQueue()
        self.tenants = TenantGate(config.tenants, metrics, clock) if config.tenants.enabled() else None
        self.prefill_rate: float | None = None  # prompt tokens/s local answers showed (EWMA): engines that export none
        self._counters: dict[tuple[str, str], object] = {}  # prometheus children by labels (labels() is slow)
        self._opt_out_header = config.opt_out_header.lower()
        self._class_header = config.class_header.lower()
        self.classes = {c.name: c for c in config.classes}

    # -- state the overflow rule reads ---------------------------------------------------------------
    @property
    def held(self) -> int:
        return len(self.hold)

    def notify(self) -> None:
        """Capacity may have changed (a request finished, a scrape landed): the held requests look again, in a
        round (hold_queue.py)."""
        self.hold.new_round()

    def _join(self, tenant: str | None, klass: str | None, tokens: int) -> int:
        seq = self.hold.join(tenant, klass, self.classes[klass].priority if klass else 0, tokens)
        self.metrics.held.set(self.held)
        return seq

    def _leave(self, seq: int, released: bool) -> None:
        self.hold.leave(seq, released)
        self.metrics.held.set(self.held)

    def pool_state(self, exclude: frozenset[str], held_self: bool, choice: BackendChoice | None,
                   klass: str | None = None) -> PoolState:
        """What the overflow rule reads; the predicted TTFT is the request's on the backend routing chose for it
        (the least backlog among them would be optimistic wherever the router's pick has more ahead)."""
        t = self.table.totals(exclude)
        predicted = None if choice is None or not t.ready else \
            predict_ttft_from_backlog(choice.backend.backlog, choice.uncached, choice.backend.prefill_rate,
                                      self.prefill_rate, choice.backend.admission_wait_s(choice.uncached))
        of_class = self.hold.of_class(klass) if klass else 0
        return PoolState(t.ready, t.waiting, predicted, self.held - held_self, self.budget, self.breaker,
                         of_class - (held_self and klass is not None))

    def update_gauges(self) -> None:
        b = budget_refill(self.budget, self.policy.budget, self.clock())
        self.metrics.budget_requests.set(-1 if b.requests is None else b.requests)
        self.metrics.budget_tokens.set(-1 if b.tokens is None else b.tokens)
        self.metrics.breaker_open.set(0 if self.breaker.opened_at is None else 1)
        self.metrics.held.set(self.held)
        self.metrics.ready_backends.set(self.table.totals().ready)

    def _count(self, backend_id: str, outcome: str) -> None:
        child = self._counters.get((backend_id, outcome))
        if child is None:
            child = self._counters[backend_id, outcome] = self.metrics.requests.labels(backend_id, outcome)
        child.inc()

    # -- one request ---------------------------------------------------------------------------------
    async def handle(self, path: str, body: bytes, headers: dict[str, str], tenant: str | None = None) -> Answer:
        """One client request; `headers` maps lower-case names to values; `tenant`: the client's (tenants.py)."""
        t0 = time.perf_counter()
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as e:  # syntax, bad UTF-8, an integer too long, nesting too deep
            return JSONResponse(error_body(f"request body is not valid JSON: {e}", "invalid_request_error",
                                           "invalid_json"), 400)
        if not isinstance(payload, dict):
            return JSONResponse(error_body("request body must be a JSON object", "invalid_request_error"), 400)
        refused = refusal(path, payload)
        if refused is not None:
            return refused
        served, model = self.config.served_models, payload.get("model")
        if served and model is not None and model not in served:  # none named: the served one, as engines do
            return JSONResponse(error_body(f"model {model!r} does not exist; served: {served}",
                                           "invalid_request_error", "model_not_found"), 404)
        opt_out = headers.get(self._opt_out_header, "").lower() not in ("", "0", "false", "no")
        # served_models[0] is the base model; an adapter without an overflow.models entry never leaves.
        base = served[0] if served else None
        adapter, o = adapter_of(model, base, self.table.adapters.names()), self.config.overflow
        remote_model = overflow_model(model or base, adapter, o.models, o.model)
        info = RequestInfo(estimate_tokens(payload), self.clock(), opt_out,
                           unmapped_model=never_overflows(adapter, o.models))
        klass = None
        if self.classes:
            pick = request_class(self.classes, self.tenants.limits_of(tenant).default_class if self.tenants and tenant
                                 else None, headers.get(self._class_header, ""))
            if pick.error is not None:
                kind = "invalid_request_error" if pick.status == 400 else "permission_error"
                return JSONResponse(error_body(pick.error, kind, "class_not_allowed"), pick.status)
            if pick.chosen is not None:
                klass, info, body = self._classed(pick.chosen, info, payload, body)
        if self.tenants is None:
            tenant = None
        releases, headers = [], ()  # what is given back once the answer is over
        if tenant is not None:
            admission = self.tenants.admit(tenant, info.tokens)
            if admission.refused is not None:
                return tenant_refusal(tenant, admission)
            releases.append(lambda: self.tenants.release(tenant))
            headers = admission.headers
            if o.enabled and not self.tenants.may_overflow(tenant, info.tokens):
                info = replace(info, tenant_capped=True)
        if klass is not None:
            in_flight = self.metrics.class_in_flight.labels(klass)
            in_flight.inc()
            releases.append(in_flight.dec)

        def release() -> None:
            for r in releases:
                r()

        try:
            answer = await self._dispatch(path, body, payload, info, adapter, remote_model, t0, tenant, klass)
        except BaseException:  # cancelled while held (the client went away), or a bug: the slot is free again
            release()
            raise
        return WithRelease(answer, headers, release) if releases else answer

    def _classed(self, c: SLOClassSpec, info: RequestInfo, payload: dict, body: bytes
                 ) -> tuple[str, RequestInfo, bytes]:
        """(its name, the request's info with the class's overflow rule and SLO, the body the engines get)."""
        self.metrics.class_requests.labels(c.name).inc()
        info = classed(info, c)
        if self.config.engine_scheduling_policy == "priority":  # the class decides, not the client
            body = json.dumps({**payload, "priority": c.priority}).encode()
        return c.name, info, body

    async def _dispatch(self, path: str, body: bytes, payload: dict, info: RequestInfo, adapter: str | None,
                        remote_model: str | None, t0: float | None, tenant: str | None, klass: str | None) -> Answer:
        """Sends the request where the overflow rule says, until an attempt answers (or the rule rejects it)."""
        self.budget = budget_arrive(self.budget, self.policy.budget, info.tokens, info.arrived_at)
        self.metrics.request_tokens.inc(info.tokens)
        prompt = estimate_prompt_tokens(payload)
        stream = bool(payload.get("stream"))
        keys = request_keys(payload, adapter) if self.table.prefix is not None else []
        tried: frozenset[str] = frozenset()
        held_since = seq = None  # seq: its place in the hold queue while held
        try:
            while True:
                now = self.clock()
                choice = self.table.choose(tried, keys, prompt, adapter)
                pool = self.pool_state(tried, info.held, choice, klass)
                if not tried and not info.held:  # once per request, as it arrives
                    need = replicas_needed(pool, self.policy)
                    if need is not None:
                        self.metrics.replicas_needed.observe(need)
                decision = overflow_decision(pool, self.policy, info, now)
                if decision.reason == SHARE_SPENT and not tried and not info.held:  # once per request
                    self.metrics.overflow_declined.inc()
                in_turn = seq is not None and self.hold.turn == seq
                if decision.target in ("local", "overflow") and not in_turn and (
                        seq is not None or self.hold.of_class(klass)):
                    # Fair share (fair_share.py): a held request leaves in its turn only, and an arrival joins the
                    # queue behind its class's held requests; a round looks at each in order.
                    decision = OverflowDecision("hold", "fair_share")
                if decision.target != "hold" and seq is not None:  # leaves the queue
                    self.metrics.hold_seconds.observe(now - held_since)
                    self._leave(seq, decision.target != "reject")
                    held_since = seq = None
                    info = replace(info, held=False)
                elif in_turn:
                    self.hold.pass_turn()
                if decision.target == "local":
                    self.table.take(choice, keys, adapter)
                    try:
                        answer = await self._local(choice, path, body, stream, t0, pool.predicted_ttft_s)
                        return attained(answer, stream, info, tenant, klass, self.metrics, self.clock, self.slos)
                    except _Failed:
                        tried, info, t0 = tried | {choice.backend.id}, replace(info, local_failed=True), None
                elif decision.target == "overflow":
                    self.metrics.overflow.labels(decision.reason).inc()
                    if tenant is not None:
                        self.tenants.overflowed(tenant, info.tokens)
                    if klass is not None:
                        self.metrics.class_overflow.labels(klass).inc()
                    try:
                        answer = await self._overflow(path, payload, stream, info.tokens, t0, remote_model)
                        return attained(answer, stream, info, tenant, klass, self.metrics, self.clock, self.slos)
                    except _Failed:
                        info, t0 = replace(info, overflow_failed=True), None
                elif decision.target == "hold":
                    t0 = None  # added latency is measured on requests sent at once
                    if seq is None:
                        seq, held_since, info = self._join(tenant, klass, info.tokens), now, replace(info, held=True)
                    if decision.reason == "fair_share" and self.hold.turn is None:
                        self.notify()  # it, or one before it, may leave now: a round looks
                    remaining = info.arrived_at + self.policy.hold_timeout_s - now
                    turn = self.hold.event(seq)
                    try:  # woken in its turn; the timeout also notices budget refills and deadlines
                        async with asyncio.timeout(max(0.0, min(remaining, 0.25))):  # (wait_for may swallow a cancel)
                            await turn.wait()
                    except TimeoutError:
                        pass
                    turn.clear()
                else:
                    self._count("none", "rejected")
                    retry = str(int(decision.retry_after_s or 1))
                    return JSONResponse(error_body(f"local capacity short and overflow unavailable ({decision.reason})"
                                                   "; retry later", "rate_limit_exceeded", "capacity_exceeded"),
                                        429, headers={"retry-after": retry})
        finally:
            if seq is not None:  # held until the caller went away
                self.metrics.hold_seconds.observe(self.clock() - held_since)
                self._leave(seq, False)

    # -- attempts ------------------------------------------------------------------------------------
    async def _local(self, choice: BackendChoice, path: str, body: bytes, stream: bool, t0: float | None,
                     predicted: float | None) -> Answer:
        """predicted: the TTFT the overflow rule predicted for it there, whose error matters near its threshold."""
        backend, prompt = choice.backend, choice.uncached  # prompt: the tokens it likely has to prefill there
        backlog = backend.backlog  # prompt tokens ahead of this one there
        slo = self.policy.ttft_slo_s
        watched = None if predicted and slo is not None and \
            predicted < WATCHED_SHARE * self.policy.predicted_ttft_factor * slo else predicted
        backend.in_flight += 1
        backend.pending_tokens += prompt
        pending = [prompt]  # released at the first byte, or when the attempt ends without one
        sent = time.perf_counter()
        if t0 is not None:
            self.metrics.added_latency.observe(sent - t0)

        def release() -> None:
            backend.pending_tokens -= pending.pop() if pending else 0

        def done(ok: bool) -> None:
            backend.in_flight -= 1
            release()
            self.notify()

        def first_byte(status: int) -> None:
            release()
            if not stream or status >= 400:  # a whole answer's first byte comes after its last token
                return
            ttft = time.perf_counter() - sent
            if watched:
                self.metrics.ttft_over_predicted.observe(ttft / watched)
            self.prefill_rate = learned_prefill_rate(self.prefill_rate, prefill_rate_sample(backlog, prompt, ttft))

        try:
            return await self._send(self.local.post(backend.url, path, body), stream, backend.id, done, first_byte)
        except _Failed as e:
            if e.status != self.table.runtime.full_status:  # a full queue is load, not ill health: the scrape shows it
                self.table.mark_unready(backend.id)
            raise

    async def _overflow(self, path: str, payload: dict, stream: bool, tokens: int, t0: float | None,
                        model: str | None) -> Answer:
        o = self.config.overflow
        now = self.clock()
        self.budget = budget_take(self.budget, self.policy.budget, tokens, now)
        self.metrics.overflow_tokens.inc(tokens)
        self.breaker = breaker_on_send(self.breaker, self.policy.breaker, now)
        self.update_gauges()
        headers = dict(_JSON)
        try:
            key = self.api_key.get()
        except ValueError as e:
            log.error("overflow unavailable: %s", e)
            self._breaker_result(False)
            raise _Failed from None
        if key:
            headers["authorization"] = f"Bearer {key}"
        if t0 is not None:
            self.metrics.added_latency.observe(time.perf_counter() - t0)
        url = o.base_url.rstrip("/") + path.removeprefix("/v1")
        body = overflow_body(path, payload, model)
        deadline = overflow_deadline_s(o.first_byte_timeout_s, self.config.request_timeout_s, stream,
                                       completion_limit(payload), o.slowest_tokens_per_s)
        timeout = aiohttp.ClientTimeout(sock_connect=o.connect_timeout_s, sock_read=deadline)
        return await self._send(self._post_remote(url, body, headers, timeout), stream, "overflow",
                                lambda ok: self.notify(), lambda status: self._breaker_result(True))

    async def _post_remote(self, url: str, body: bytes, headers: dict, timeout: aiohttp.ClientTimeout
                           ) -> RemoteResponse:
        return RemoteResponse(await self.remote.post(url, data=body, headers=headers, timeout=timeout))

    def _breaker_result(self, ok: bool) -> None:
        self.breaker = breaker_on_result(self.breaker, self.policy.breaker, ok, self.clock())
        self.update_gauges()

    async def _send(self, request, stream: bool, backend_id: str, done, first_byte) -> Answer:
        """Awaits one attempt (`request` sends it and returns its response once the head arrived). Raises
        _Failed while nothing went to the client; `done(ok)` runs once when the attempt is over,
        `first_byte(status)` when the backend's answer is known good."""
        overflow = backend_id == "overflow"
        retryable = _API_FAILURE if overflow else _RETRYABLE
        response: EngineResponse | RemoteResponse | None = None
        try:
            response = await request
            if response.status in retryable:
                raise _Failed(response.status)
            if not stream or response.status >= 400:
                content = await response.read()
                if response.status >= 500 and not overflow and not is_error_body(content):
                    raise _Failed(response.status)  # a crash, not an answer: the backend failed
            else:
                content = await response.readany()
                if not content:  # the stream ended before its first chunk
                    raise _Failed(response.status)
        except UpstreamTimeout as e:  # a local engine silent for request_timeout_s
            # Slow, not failed: a retry would start the work over elsewhere as late as this, and one request is
            # no verdict on the backend's health (its probe gives that), so it stays in rotation.
            log.warning("%s timed out: %s", backend_id, e)
            if response is not None:
                response.close()
            self._count(backend_id, "timed_out")
            done(False)
            return Reply(json.dumps(error_body(f"the engine sent nothing for {self.config.request_timeout_s:g} s "
                                               "(request_timeout_s)", "server_error", "backend_timeout")).encode(),
                         504, backend_id, "application/json")
        except (*_UPSTREAM_ERRORS, _Failed) as e:
            reason = str(e) or type(e).__name__
            log.warning("%s failed before the first byte: %s", backend_id, self.api_key.scrub(reason))
            if response is not None:
                response.close()
            self._count(backend_id, "retried")
            if overflow:
                self._breaker_result(False)
            done(False)
            raise _Failed(response.status if response is not None else None) from None
        except asyncio.CancelledError:  # shutdown or a cancelled caller: leave no count or probe behind
            if response is not None:
                response.close()
            if overflow and self.breaker.probing:
                self._breaker_result(False)
            done(False)
            raise
        first_byte(response.status)
        if not stream or response.status >= 400:
            response.close()
            ok = response.status < 400
            self._count(backend_id, "ok" if ok else "client_error")
            done(ok)
            if overflow:
                content = self.api_key.scrub(content.decode(errors="replace")).encode()
            return Reply(content, response.status, backend_id, response.content_type)
        return StreamingResponse(self._relay(content, response, backend_id, done), response.status,
                                 headers={BACKEND_HEADER: backend_id, GATEWAY_HEADER: _GATEWAY,
                                          "content-type": response.content_type})

    async def _relay(self, first: bytes, response: EngineResponse | RemoteResponse, backend_id: str, done):
        outcome = "stream_error"
        try:
            yield first
            while chunk := await response.readany():
                yield chunk
            outcome = "ok"
        except _UPSTREAM_ERRORS as e:
            log.warning("%s failed mid-stream: %s", backend_id, type(e).__name__)
            yield sse_error_event(f"backend {backend_id} failed mid-stream", "backend_failed")
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "client_disconnected"  # closing the upstream response aborts the request there
            raise
        finally:
            response.close()  # a no-op once the body was read whole; else it aborts the upstream request
            self._count(backend_id, outcome)
            done(outcome == "ok")
