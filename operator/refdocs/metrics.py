"""docs/reference/metrics.md: every Prometheus metric the engine and the gateway export, read from their
definitions (both modules are torch-free)."""

from types import SimpleNamespace

from floodway.operator.refdocs.table import cell, table


class _AnyStats(SimpleNamespace):
    """A stats snapshot where every field reads 0: enough for the engine's collector to describe its metrics."""

    def __getattr__(self, name):
        return 0


def _engine_rows() -> list[tuple[str, ...]]:
    from floodway.engine.server.metrics import ServerMetrics  # noqa: PLC0415 (engine code only when rendering)

    metrics = ServerMetrics("MODEL", lambda: _AnyStats(spec_accepted_per_pos=[0]))
    rows = []
    for family in metrics.registry.collect():
        labels = sorted({k for s in family.samples for k in s.labels if k not in ("le", "quantile")})
        name = family.name + ("_total" if family.type == "counter" else "")
        rows.append((f"`{name}`", family.type, ", ".join(f"`{lb}`" for lb in labels), cell(family.documentation)))
    return rows


def _gateway_rows() -> list[tuple[str, ...]]:
    from floodway.operator.gateway.metrics import GatewayMetrics

    metrics = GatewayMetrics()
    rows = []
    for family in metrics.registry.collect():
        wrapper = next(m for m in vars(metrics).values() if getattr(m, "_name", None) == family.name)
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = ", ".join(f"`{lb}`" for lb in wrapper._labelnames)
        rows.append((f"`{name}`", family.type, labels, cell(family.documentation)))
    return rows


def render() -> str:
    header = ("metric", "type", "labels", "description")
    return "\n".join([
        "# Metrics reference\n",
        "Generated from the metric definitions. Histograms also export `_bucket`, `_sum` and `_count` series.\n",
        "## Engine (`/metrics` of each engine pod)\n",
        "vLLM's names, labels and buckets where vLLM has the metric; `floodway_` for ours. `vllm:cache_config_info` "
        "is a gauge at 1 whose labels carry the engine's capacity.\n",
        table(header, sorted(_engine_rows())),
        "## Gateway (`/metrics` of each gateway pod)\n",
        table(header, sorted(_gateway_rows())),
    ])
