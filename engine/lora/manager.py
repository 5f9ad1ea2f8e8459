"""The engine's LoRA side: attaches the slot stacks to our decoder (runner), resolves request adapters, keeps their
weights in the CPU cache and the step's adapters resident (engine thread)."""

import logging
from dataclasses import dataclass

from floodway.engine.lora import batch, config, hub, layers, peft_format
from floodway.engine.lora.registry import Adapter, CpuCache, DuplicateAdapter, Registry, UnknownAdapter
from floodway.engine.lora.residency import Residency

log = logging.getLogger("floodway.engine")


def attach(model, cfg, device, dtype) -> layers.Slots:
    """Wraps our decoder's linears with --max-loras slots of rank --max-lora-rank."""
    if not hasattr(model, "layers") or not hasattr(model.layers[0], "qkv"):
        raise ValueError(f"enable_lora serves our own decoder (Llama, Mistral, Qwen2); {type(model).__name__} runs "
                         f"in transformers' modules")
    dtype = layers.adapter_dtype(device, dtype)
    slots = layers.Slots(model, peft_format.geometry_of(model), cfg.max_loras, cfg.max_lora_rank, device, dtype)
    slots.geometry, slots.dtype = peft_format.geometry_of(model), dtype
    return slots


def step_batch(slots: layers.Slots, seqs, order: list[int], device) -> batch.DeviceBatch | None:
    """The step's adapter rows in packed order (seqs' lora_slot, each over its tokens), as tensors."""
    p = batch.plan([seqs[i].lora_slot for i in order for _ in seqs[i].token_ids], batch.run_rows(device))
    return None if p is None else batch.to_device(p, device, slots.scale)


@dataclass(frozen=True)
class FailedAdapter:
    """A --lora-modules adapter that did not load at startup, and why (the reason the load endpoint would give)."""

    name: str
    path: str
    reason: str


class LoRAManager:
    def __init__(self, cfg, slots: layers.Slots):
        self.slots, self.max_rank, self.max_loras = slots, cfg.max_lora_rank, cfg.max_loras
        self.registry = Registry()
        self.cache = CpuCache(config.cpu_capacity(cfg), self.read)
        self.residency = Residency(cfg.max_loras)
        # One bad adapter must not take the base model and the other adapters down with it: it is left out, logged,
        # and listed here (/debug/engine) until a load of that name succeeds.
        self.failed: dict[str, FailedAdapter] = {}
        for name, path in config.parse_modules(cfg.lora_modules).items():
            try:
                self.load(name, path)
            except ValueError as e:  # a LoRAError: what /v1/load_lora_adapter would refuse, in the same words
                self.failed[name] = FailedAdapter(name, path, str(e))
                log.warning("LoRA adapter %r failed to load, serving without it: %s", name, e)

    def read(self, path: str) -> peft_format.AdapterWeights:
        return peft_format.load(path, self.slots.geometry, self.max_rank, self.slots.dtype)

    def load(self, name: str, path: str) -> Adapter:
        """Reads and checks the folder, then serves it under name (any thread). Raises LoRAError."""
        config.check_name(name)
        if self.registry.get(name) is not None:
            raise DuplicateAdapter(f"The lora adapter '{name}' has already been loaded.")
        path = hub.local_folder(path)
        weights = self.read(path)
        adapter = self.registry.add(name, path)
        self.cache.put(adapter, weights)
        self.failed.pop(name, None)
        return adapter

    def unload(self, name: str) -> Adapter:
        """Stops serving name (any thread); requests already admitted finish on its weights."""
        adapter = self.registry.remove(name)
        self.cache.drop(adapter)
        return adapter

    def resolve(self, name: str) -> Adapter:
        """The adapter a request names, with its weights in the CPU cache (engine thread). Raises LoRAError."""
        adapter = self.registry.get(name)
        if adapter is None:
            raise UnknownAdapter(f"The lora adapter '{name}' cannot be found.")
        self.cache.get(adapter)
        return adapter

    def activate(self, adapters: list[Adapter | None]) -> list[int]:
        """Per scheduled row, its adapter's slot (-1: the base model), loading the ones not resident (engine
        thread)."""
        by_id = {a.id: a for a in adapters if a is not None}
        where = self.residency.slots_for(list(by_id), lambda slot, i: self.slots.load(slot, self.cache.get(by_id[i])))
        return [-1 if a is None else where[a.id] for a in adapters]
