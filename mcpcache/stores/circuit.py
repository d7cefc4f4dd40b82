"""A circuit for a store that stops answering: after a timeout it is not asked again for a while.

A frozen server (or a lock held elsewhere) then costs one deadline, not one per call. One implementation
for the two places that keep one: the store fence around any store (`mcpcache.stores.fence`: the tool cache,
the gateway's delta history, references), and `RedisStore` for callers that use it directly (the MCP SDK's
own response cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Circuit"]


class Circuit:
    """Open for `cooldown_s` after `trip()`; closed again on its own once that has passed."""

    def __init__(self, cooldown_s: float, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        if not cooldown_s >= 0:
            raise ValueError(f"cooldown must be >= 0 seconds, got {cooldown_s!r}")
        self.cooldown_s = cooldown_s
        self._monotonic = monotonic
        self._open_until = 0.0

    @property
    def is_open(self) -> bool:
        return self._monotonic() < self._open_until

    def left_s(self) -> float:
        """How long it stays open (0 when closed)."""
        return max(0.0, self._open_until - self._monotonic())

    def trip(self) -> None:
        self._open_until = self._monotonic() + self.cooldown_s
