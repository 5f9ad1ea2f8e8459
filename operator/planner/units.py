"""Byte sizes in and out: parse "80Gi" / "24GiB" / "40GB" / "1.5e9", print both GiB and GB."""

import re

GIB = 1024**3
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]i?)?b?\s*$", re.IGNORECASE)


class PlanError(ValueError):
    """A bad planning input (unknown GPU, unreadable config, out-of-range setting); the message says which."""


class ConfigNotFound(PlanError):
    """The model's config.json is nowhere local (a Hub id not in the cache): the plan cannot size it."""


def parse_bytes(value: str | int | float, what: str = "size") -> int:
    """'80Gi', '80GiB', '40GB', '24g', 1e9 -> bytes. Binary suffixes (Ki/Mi/Gi/Ti) are powers of 1024."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise PlanError(f"{what}: cannot read {value!r} as a size (examples: 80Gi, 24GiB, 40GB)")
        number, unit = float(m.group(1)), (m.group(2) or "").lower()
    result = int(number * _UNITS[unit])
    if result <= 0:
        raise PlanError(f"{what}: must be positive, got {value!r}")
    return result


def fmt_bytes(n: float) -> str:
    if abs(n) >= GIB:
        return f"{n / GIB:,.2f} GiB ({n / 1e9:,.2f} GB)"
    return f"{n / 2**20:,.2f} MiB ({n / 1e6:,.2f} MB)"
