"""The LoRA settings' rules (torch-free): `--lora-modules name=path` parsing and the checks across fields."""

import re

# Served in the API's `model` field and in Prometheus labels: no separators those use.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$")


def parse_modules(modules: list[str] | None) -> dict[str, str]:
    """name=path items -> {name: path} in order; ValueError naming the bad item (pure)."""
    out: dict[str, str] = {}
    for item in modules or []:
        name, sep, path = item.partition("=") if isinstance(item, str) else ("", "", "")
        if not sep or not path:
            raise ValueError(f"lora_modules items are name=path, got {item!r}")
        check_name(name)
        if name in out:
            raise ValueError(f"lora_modules names {name!r} twice")
        out[name] = path
    return out


def check_name(name) -> None:
    if not isinstance(name, str) or not NAME.match(name) or len(name) > 200:
        raise ValueError(f"lora_name must be 1-200 characters of letters, digits and . _ / : - (starting with a "
                         f"letter or digit), got {name!r:.80}")


def check(cfg) -> None:
    """Raises ValueError naming the offending field of an EngineConfig (pure)."""
    for name in ("max_loras", "max_lora_rank"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    cpu = cfg.max_cpu_loras
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < cfg.max_loras):
        raise ValueError(f"max_cpu_loras must be an integer >= max_loras ({cfg.max_loras}), got {cpu!r}")
    modules = parse_modules(cfg.lora_modules)
    if modules and not cfg.enable_lora:
        raise ValueError("lora_modules needs enable_lora (--enable-lora)")
    if cfg.enable_lora and cfg.compile_decode:
        raise ValueError("compile_decode does not combine with enable_lora: the adapter rows of a step are Python "
                         "data the compiled graph cannot take")
    if cfg.enable_lora and cfg.model_impl != "auto":
        raise ValueError("enable_lora serves our own decoder (Llama, Mistral, Qwen2): it needs model_impl auto")
    served = cfg.served_model_name or cfg.model
    if served in modules:
        raise ValueError(f"lora_modules name {served!r} is the base model's served name")


def cpu_capacity(cfg) -> int:
    return cfg.max_cpu_loras if cfg.max_cpu_loras is not None else cfg.max_loras
