"""Sends a bounded burst of chat requests to a gateway and prints a JSON summary per backend (the gateway's
`x-floodway-backend` header). Standard library only, so it runs wherever the e2e scripts do.

    python3 e2e/burst.py --url http://127.0.0.1:8080 --model chat --requests 64 --concurrency 32
Exits 1 if any request failed, or if --expect-overflow is given and no response came from the overflow API."""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor


def one(url: str, model: str, max_tokens: int, i: int) -> str:
    body = {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"Request {i}: tell me a long story."}]}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            json.load(resp)
            return resp.headers.get("x-floodway-backend", "unknown")
    except (urllib.error.URLError, TimeoutError, ValueError) as e:
        return f"error: {e}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--expect-overflow", action="store_true")
    a = p.parse_args()
    if not 0 < a.requests <= 10_000 or not 0 < a.concurrency <= 512:
        p.error("--requests must be in 1..10000 and --concurrency in 1..512")
    started = time.monotonic()
    with ThreadPoolExecutor(a.concurrency) as pool:
        backends = Counter(pool.map(lambda i: one(a.url.rstrip("/"), a.model, a.max_tokens, i), range(a.requests)))
    errors = sum(n for b, n in backends.items() if b.startswith("error"))
    overflowed = backends.get("overflow", 0)
    print(json.dumps({"requests": a.requests, "seconds": round(time.monotonic() - started, 1),
                      "errors": errors, "overflow": overflowed, "by_backend": dict(backends)}))
    return 1 if errors or (a.expect_overflow and not overflowed) else 0


if __name__ == "__main__":
    sys.exit(main())
