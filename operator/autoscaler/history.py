"""A service's traffic history: the requests and prompt tokens that arrived per bucket (a minute of the day) over the
last KEEP_DAYS days, as the forecast (forecast.py) reads it and the operator persists it (a ConfigMap per service, so
an operator restart keeps it: controller/history_store.py).

A bucket the operator observed holds what arrived in it, zero included; a bucket it did not observe (the operator was
down) is absent, and the forecast treats it as unknown, not as quiet. Times are the shell's clock in seconds (the
operator's wall clock; the simulator's trace time), buckets indexed from its epoch. `day_s` is a day's length: 86,400 s
in production; the simulator replays days compressed and passes its own, and every span here scales with it.
"""

import base64
import gzip
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

DAY_S = 86_400.0
BUCKETS_PER_DAY = 1440  # a minute each
KEEP_DAYS = 15  # two weeks back from a cold start ahead, and a day to spare
log = logging.getLogger("floodway.autoscaler")


@dataclass
class History:
    day_s: float = DAY_S
    # bucket index -> (requests, prompt tokens) that arrived in it
    buckets: dict[int, tuple[float, float]] = field(default_factory=dict)

    @property
    def bucket_s(self) -> float:
        return self.day_s / BUCKETS_PER_DAY

    def add(self, now: float, requests: float, prompt_tokens: float) -> None:
        """Count what arrived in the window ending at `now` into now's bucket (a window is a decision interval,
        much shorter than a bucket), and forget buckets older than KEEP_DAYS."""
        i = math.floor(now / self.bucket_s)
        if self.buckets:  # a clock stepped back counts into the latest bucket: the buckets stay in time order
            i = max(i, next(reversed(self.buckets)))
        oldest = i - KEEP_DAYS * BUCKETS_PER_DAY
        while self.buckets and next(iter(self.buckets)) <= oldest:  # kept in time order: the oldest come first
            del self.buckets[next(iter(self.buckets))]
        r, t = self.buckets.get(i, (0.0, 0.0))
        self.buckets[i] = (r + requests, t + prompt_tokens)

    def since(self) -> float | None:
        """The start of the oldest bucket kept (None: empty)."""
        return next(iter(self.buckets)) * self.bucket_s if self.buckets else None

    def between(self, start_s: float, end_s: float) -> Iterator[tuple[float, float] | None]:
        """Each bucket from the one holding `start_s` to the one before `end_s`: its counts, or None when unobserved."""
        for i in range(math.floor(start_s / self.bucket_s), math.ceil(end_s / self.bucket_s)):
            yield self.buckets.get(i)

    def dumps(self) -> str:
        """The buckets as text (one 'index requests prompt-tokens' line each, a leading 'day_s' line), gzipped and in
        base64: two weeks of minutes fit a ConfigMap's binaryData (about 100 kB for a busy service)."""
        lines = [f"{self.day_s:g}"] + [f"{i} {r:.3f} {t:.0f}" for i, (r, t) in sorted(self.buckets.items())]
        return base64.b64encode(gzip.compress("\n".join(lines).encode(), mtime=0)).decode()

    @classmethod
    def loads(cls, text: str) -> "History":
        """What dumps() wrote; ValueError when it is not that (a damaged ConfigMap starts a new history)."""
        try:
            head, *rows = gzip.decompress(base64.b64decode(text, validate=True)).decode().split("\n")
            buckets = {}
            for row in rows:
                i, r, t = row.split()
                buckets[int(i)] = (float(r), float(t))
            return cls(float(head), buckets)
        except (ValueError, OSError, EOFError, UnicodeDecodeError) as e:
            raise ValueError(f"not a saved history: {e}") from None


def restore(text: str | None, where: str) -> History:
    """The history saved as `text` (dumps()); none, or a damaged one (logged, naming `where`): a new history, since
    the forecast treats the minutes it lacks as unknown rather than failing."""
    if text is None:
        return History()
    try:
        return History.loads(text)
    except ValueError as e:
        log.warning("%s: the saved traffic history is unreadable, starting a new one: %s", where, e)
        return History()
