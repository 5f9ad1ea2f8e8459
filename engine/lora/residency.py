"""Which adapter sits in which weight slot: the assignment rule (pure) and its state."""


def assign(resident: list[int | None], last_used: list[int], needed: list[int]) -> list[tuple[int, int]]:
    """(slot, adapter id) loads that make every needed adapter resident: empty slots first (lowest index, so the
    batched matmul's slot range stays short), then the least recently used slots holding adapters not needed now.
    ValueError when the needed adapters outnumber the slots (the scheduler admits no more than there are)."""
    missing = [a for a in dict.fromkeys(needed) if a not in resident]
    keep = set(needed)
    free = sorted(range(len(resident)), key=lambda s: (resident[s] is not None, last_used[s], s))
    free = [s for s in free if resident[s] not in keep]
    if len(missing) > len(free):
        raise ValueError(f"{len(set(needed))} adapters in one step, {len(resident)} slots (--max-loras)")
    return list(zip(free[:len(missing)], missing, strict=True))


class Residency:
    def __init__(self, num_slots: int):
        self.resident: list[int | None] = [None] * num_slots  # adapter id per slot
        self.last_used = [0] * num_slots
        self._tick = 0
        self.swaps = 0  # adapters loaded into a slot

    def slots_for(self, needed: list[int], load) -> dict[int, int]:
        """{adapter id: slot} for the step's adapters, calling load(slot, adapter id) for each one not resident."""
        for slot, adapter_id in assign(self.resident, self.last_used, needed):
            load(slot, adapter_id)
            self.resident[slot] = adapter_id
            self.swaps += 1
        self._tick += 1
        where = {a: self.resident.index(a) for a in set(needed)}
        for slot in where.values():
            self.last_used[slot] = self._tick
        return where


def admits(adapter_id: int | None, running: set[int], max_loras: int | None) -> bool:
    """Whether a request for this adapter (None: the base model) may join a batch running these adapters: every
    step's adapters must fit the slots (pure)."""
    return max_loras is None or adapter_id is None or adapter_id in running or len(running) < max_loras
