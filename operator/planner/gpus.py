"""The GPU table (gpus.yaml) and the GPU a plan runs on: a named row, or a custom memory size."""

import functools
import pathlib
import re
from dataclasses import dataclass

import yaml
from floodway.operator.planner.units import PlanError, parse_bytes

TABLE = pathlib.Path(__file__).with_name("gpus.yaml")
# The node label NVIDIA GPU feature discovery (part of the GPU operator) sets to the GPU's product name.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float | None  # None for a custom GPU given only by its memory
    bf16_flops: float | None
    gfd_products: tuple[str, ...] = ()  # GPU_PRODUCT_LABEL values of nodes with this GPU
    price_per_hour: float | None = None  # dollars per GPU-hour, the table's indicative price (None: none known)


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@functools.cache
def gpu_table() -> dict[str, GpuSpec]:
    """Every name and alias (normalised) -> its row."""
    rows = yaml.safe_load(TABLE.read_text())["gpus"]
    table = {}
    for name, row in rows.items():
        products = tuple(row.get("gfd_products", ()))
        spec = GpuSpec(name, int(row["memory_gib"] * 2**30), row["bandwidth_gbs"] * 1e9, row["bf16_tflops"] * 1e12,
                       products, row.get("price_per_hour"))
        for alias in [name, *row.get("aliases", []), *products]:
            table[_key(alias)] = spec
    return table


def known_gpus() -> list[str]:
    return sorted({spec.name for spec in gpu_table().values()})


def find_gpu(name: str) -> GpuSpec | None:
    return gpu_table().get(_key(name))


def node_products(gpu_type: str | None) -> tuple[str, ...]:
    """The GPU_PRODUCT_LABEL values of nodes with this GPU; none for a GPU not in the table or not labelled."""
    found = find_gpu(gpu_type) if gpu_type else None
    return found.gfd_products if found else ()


def resolve_gpu(gpu: str | None = None, gpu_memory: str | int | None = None,
                bandwidth_gbs: float | None = None, tflops: float | None = None) -> GpuSpec | None:
    """A table row by name, optionally with its memory/bandwidth/FLOP/s overridden; or a custom GPU from
    gpu_memory alone. None when neither is given (the plan then reports per-sequence figures only)."""
    if gpu is None and gpu_memory is None:
        return None
    base = None
    if gpu is not None:
        base = find_gpu(gpu)
        if base is None:
            raise PlanError(f"unknown GPU {gpu!r}; known: {', '.join(known_gpus())} "
                            "(or give its memory with --gpu-memory, e.g. 48Gi)")
    for value, what in ((bandwidth_gbs, "GPU bandwidth"), (tflops, "GPU TFLOP/s")):
        if value is not None and value <= 0:
            raise PlanError(f"{what} must be positive, got {value}")
    return GpuSpec(
        name=base.name if base else "custom",
        memory_bytes=parse_bytes(gpu_memory, "GPU memory") if gpu_memory is not None else base.memory_bytes,
        bandwidth_bytes_per_s=bandwidth_gbs * 1e9 if bandwidth_gbs else (base.bandwidth_bytes_per_s if base else None),
        bf16_flops=tflops * 1e12 if tflops else (base.bf16_flops if base else None),
        price_per_hour=base.price_per_hour if base else None,
    )
