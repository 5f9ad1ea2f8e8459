"""What the gateway believes each engine holds in its prefix cache, learned from what it routed there.

Keys are chained hashes of fixed-size blocks of the request's prompt as the client sent it (`request_keys`):
the text of a completion prompt, or the role and text of each chat message in order, in blocks of
BLOCK_CHARS characters (about one engine block of 16 tokens at CHARS_PER_TOKEN); a prompt of token ids in
blocks of BLOCK_TOKENS ids. Key i depends on blocks 0..i, as the engine's chained block hashes do, so two
requests share leading keys exactly while they share a leading run of text. The gateway needs no tokenizer
and no chat template for this (the template only adds the same text around every message), and it costs
one hash per block on the request path. A request for a LoRA adapter roots its chain at the adapter's name, as
the engine puts the adapter in its block hashes: the same prompt for two adapters, or for an adapter and the base
model, shares no key (their KV differs).

Per backend an LRU of keys, capped at the engine's KV capacity in blocks (vllm:cache_config_info), mirrors
the engine's own LRU eviction; a backend starts empty and its entries go when it leaves or turns unready (a
drained or restarted engine has lost its cache).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from floodway.operator.gateway.payload import CHARS_PER_TOKEN
from floodway.operator.spec.models import EngineSpec

BLOCK_TOKENS = EngineSpec().block_size  # the engines' default block size
BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN
DEFAULT_CAPACITY_BLOCKS = 65536  # until a scrape tells the engine's capacity (1M tokens of prompts)
MAX_KEYS = 8192  # 128k tokens: a longer prompt's tail is not keyed, so a multi-MB body costs a bounded work


def _message_text(message) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return f"\x1e{message.get('role')}\x1f{content if isinstance(content, str) else ''}"


def _chain(blocks: Iterable, root: str | None) -> list[int]:
    keys, parent = [], root
    for block in blocks:
        parent = hash((parent, block))
        keys.append(parent)
    return keys


def request_keys(payload: dict, adapter: str | None = None) -> list[int]:
    """The chained block keys of a request's prompt (full blocks only, as the engine caches) for `adapter` (None:
    the base model)."""
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt[:MAX_KEYS * BLOCK_TOKENS]):
        ids = tuple(prompt[:MAX_KEYS * BLOCK_TOKENS])
        return _chain((ids[i:i + BLOCK_TOKENS] for i in range(0, len(ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS)),
                      adapter)
    if isinstance(prompt, str):
        text = prompt[:MAX_KEYS * BLOCK_CHARS]
    elif isinstance(payload.get("messages"), list):
        text, size = [], 0
        for message in payload["messages"]:
            if size >= MAX_KEYS * BLOCK_CHARS:
                break
            text.append(_message_text(message))
            size += len(text[-1])
        text = "".join(text)[:MAX_KEYS * BLOCK_CHARS]
    else:
        return []  # a batch of prompts goes wherever load says
    return _chain((text[i:i + BLOCK_CHARS] for i in range(0, len(text) - BLOCK_CHARS + 1, BLOCK_CHARS)), adapter)


class PrefixIndex:
    def __init__(self):
        self._held: dict[str, OrderedDict[int, None]] = {}  # backend id -> keys, least recently used first
        self._capacity: dict[str, int] = {}

    def set_capacity(self, backend_id: str, blocks: int) -> None:
        """The engine's KV capacity in blocks; entries beyond it are evicted (least recently used first)."""
        self._capacity[backend_id] = max(0, blocks)
        self._evict(backend_id)

    def matched(self, backend_id: str, keys: list[int]) -> int:
        """How many leading keys the backend holds (the engine's cache hit stops at the first miss too)."""
        held = self._held.get(backend_id)
        if not held:
            return 0
        n = 0
        for key in keys:
            if key not in held:
                break
            n += 1
        return n

    def record(self, backend_id: str, keys: list[int]) -> None:
        """The backend will cache these blocks. The leading ones are touched last: they are the most shared,
        and the engine frees a request's tail blocks first, so they are evicted first there too."""
        held = self._held.setdefault(backend_id, OrderedDict())
        for key in reversed(keys):
            held[key] = None
            held.move_to_end(key)
        self._evict(backend_id)

    def _evict(self, backend_id: str) -> None:
        held = self._held.get(backend_id)
        if held is None:
            return
        cap = self._capacity.get(backend_id, DEFAULT_CAPACITY_BLOCKS)
        while len(held) > cap:
            held.popitem(last=False)

    def size(self, backend_id: str) -> int:
        return len(self._held.get(backend_id, ()))

    def drop(self, backend_id: str) -> None:
        """The backend's cache is gone (it left, drained or restarted)."""
        self._held.pop(backend_id, None)

    def retain(self, backend_ids: Iterable[str]) -> None:
        """Forgets every backend not in `backend_ids`."""
        keep = set(backend_ids)
        for bid in [b for b in self._held if b not in keep]:
            del self._held[bid]
        for bid in [b for b in self._capacity if b not in keep]:
            del self._capacity[bid]
