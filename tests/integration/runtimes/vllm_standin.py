"""A stand-in for a vLLM server (vllm serve / the vllm/vllm-openai image), for tests on machines where vLLM
cannot run: it serves exactly the endpoints and metric names vLLM documents that the gateway and the
autoscaler touch, and nothing else. GET /health (200 once loaded; vLLM has no /ready), GET /v1/models,
POST /v1/chat/completions and /v1/completions (a fixed answer, streamed or whole), GET /metrics with
vllm:num_requests_running / vllm:num_requests_waiting / vllm:kv_cache_usage_perc gauges,
vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds histograms and the
vllm:request_success_total counter, labelled by model_name as vLLM labels them.

Run: python -P vllm_standin.py --port N --served-model-name NAME
"""

import argparse
import json
import time
import uuid

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

ANSWER = ["stand-in ", "for ", "vLLM"]


def create_app(served: str) -> Starlette:
    registry = CollectorRegistry()
    labels = {"model_name": served}
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    ["model_name"], registry=registry).labels(**labels)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", ["model_name"],
          registry=registry).labels(**labels).set(0)
    Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", ["model_name"],
          registry=registry).labels(**labels).set(0.0)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     ["model_name"], buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0],
                     registry=registry).labels(**labels)
    itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                    ["model_name"], buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5],
                    registry=registry).labels(**labels)
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      ["model_name", "finished_reason"], registry=registry)

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": served, "object": "model", "created": 0,
                                                          "owned_by": "vllm", "root": served, "max_model_len": 2048}]})

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    async def generate(request: Request) -> Response:
        body = await request.json()
        if body.get("model") != served:
            return JSONResponse({"object": "error", "message": f"The model `{body.get('model')}` does not exist.",
                                 "type": "NotFoundError", "code": 404}, status_code=404)
        chat = request.url.path.endswith("/chat/completions")
        rid, created = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def choice(text: str, finish: str | None) -> dict:
            if chat:
                return {"index": 0, "delta" if body.get("stream") else "message":
                        {"role": "assistant", "content": text}, "finish_reason": finish}
            return {"index": 0, "text": text, "finish_reason": finish}

        def done() -> None:
            ttft.observe(0.003)
            for _ in ANSWER[1:]:
                itl.observe(0.02)
            success.labels(served, "stop").inc()

        usage = {"prompt_tokens": 3, "completion_tokens": len(ANSWER), "total_tokens": 3 + len(ANSWER)}
        if not body.get("stream"):
            done()
            return JSONResponse({"id": rid, "object": obj, "created": created, "model": served,
                                 "choices": [choice("".join(ANSWER), "stop")], "usage": usage})

        async def events():
            running.inc()
            try:
                for i, piece in enumerate(ANSWER):
                    chunk = {"id": rid, "object": f"{obj}.chunk" if chat else obj, "created": created,
                             "model": served, "choices": [choice(piece, "stop" if i == len(ANSWER) - 1 else None)]}
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"
                done()
            finally:
                running.dec()

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics),
                             Route("/v1/chat/completions", generate, methods=["POST"]),
                             Route("/v1/completions", generate, methods=["POST"])])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(args.served_model_name), host="127.0.0.1", port=args.port, log_level="warning")
