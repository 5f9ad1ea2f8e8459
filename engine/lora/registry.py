"""Which adapters this engine serves (name -> folder, shared by the server's event loop and the engine thread),
and the CPU cache of their weights (least recently used evicted first). Both lock their own state."""

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from floodway.engine.lora.config import check_name
from floodway.engine.lora.peft_format import LoRAError


@dataclass(frozen=True, eq=False)
class Adapter:
    name: str
    path: str
    # Unique per load, never reused: the prefix-cache key and the CPU cache's, so an adapter unloaded and loaded
    # again under its name (new weights) shares no KV block or cached weights with the old one.
    id: int


class UnknownAdapter(LoRAError):
    pass


class DuplicateAdapter(LoRAError):
    pass


class Registry:
    def __init__(self):
        self._by_name: dict[str, Adapter] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, name: str, path: str) -> Adapter:
        check_name(name)
        with self._lock:
            if name in self._by_name:
                raise DuplicateAdapter(f"The lora adapter '{name}' has already been loaded.")
            adapter = self._by_name[name] = Adapter(name, path, next(self._ids))
        return adapter

    def remove(self, name: str) -> Adapter:
        with self._lock:
            if name not in self._by_name:
                raise UnknownAdapter(f"The lora adapter '{name}' cannot be found.")
            return self._by_name.pop(name)

    def get(self, name: str) -> Adapter | None:
        with self._lock:
            return self._by_name.get(name)

    def all(self) -> list[Adapter]:
        with self._lock:
            return list(self._by_name.values())


class CpuCache:
    """Adapter id -> its weights, at most `capacity`; a miss reads the folder (outside the lock)."""

    def __init__(self, capacity: int, read: Callable[[str], object]):
        self.capacity, self._read = capacity, read
        self._weights: OrderedDict[int, object] = OrderedDict()
        self._lock = threading.Lock()
        self.loads = 0  # folder reads (misses)

    def get(self, adapter: Adapter):
        with self._lock:
            if adapter.id in self._weights:
                self._weights.move_to_end(adapter.id)
                return self._weights[adapter.id]
        return self.put(adapter, self._read(adapter.path))

    def put(self, adapter: Adapter, weights):
        """Caches weights read for adapter (a miss), evicting the least recently used beyond capacity."""
        with self._lock:
            self.loads += 1
            self._weights[adapter.id] = weights
            self._weights.move_to_end(adapter.id)
            while len(self._weights) > self.capacity:
                self._weights.popitem(last=False)
        return weights

    def drop(self, adapter: Adapter) -> None:
        with self._lock:
            self._weights.pop(adapter.id, None)
