"""The overflow API key: read from an env var or a mounted Secret file (re-read when the file changes,
so a rotated Secret is picked up), and scrubbed from any text that leaves the gateway."""

from __future__ import annotations

import os


class ApiKey:
    def __init__(self, env: str | None, file: str | None):
        self.env, self.file = env, file
        self._cached: tuple[float, str] | None = None

    def get(self) -> str | None:
        """The key, or None when none is configured. Raises ValueError (never showing the key) when the
        configured source is missing."""
        if self.env:
            value = os.environ.get(self.env)
            if not value:
                raise ValueError(f"overflow API key env var {self.env} is not set")
            return value.strip()
        if self.file:
            try:
                mtime = os.stat(self.file).st_mtime
                if self._cached is None or self._cached[0] != mtime:
                    with open(self.file) as f:
                        self._cached = (mtime, f.read().strip())
            except OSError as e:
                raise ValueError(f"overflow API key file {self.file} unreadable: {e.strerror}") from None
            return self._cached[1]
        return None

    def scrub(self, text: str) -> str:
        """`text` with the key (if it is known and appears) replaced by ***."""
        try:
            key = self.get()
        except ValueError:
            return text
        return text.replace(key, "***") if key else text
