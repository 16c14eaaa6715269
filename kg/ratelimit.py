"""Token buckets: how many expensive calls a caller may make, and how long it must wait.

A bucket holds up to ``burst`` tokens and gains ``per_min / 60`` tokens a second; a call
takes one token, or is refused with the time until one is there. :class:`RateLimiter` keeps
one bucket per identity (a string the caller of this module chooses: :func:`kg.context.throttle`
uses the API key's id, and one shared identity for anonymous callers). Pure: no I/O, and the
clock is a parameter (``time.monotonic`` by default, so a change of the wall clock neither
refills nor drains a bucket). Thread-safe: one lock, held for O(1) work per call.

The state lives in the process: with several server processes each has its own buckets, so
a key may make up to ``processes x burst`` calls at once (the README says so).

References
----------
Turner (1986), "New directions in communications (or which way to the information age?)",
IEEE Communications Magazine 24(10) (the token bucket).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Buckets kept before the full ones (indistinguishable from new ones) are dropped.
PRUNE_AT = 10_000


@dataclass
class TokenBucket:
    """One bucket: ``tokens`` of ``capacity`` as of ``stamp`` (seconds on the limiter's clock).

    Attributes
    ----------
    capacity : float
        Most tokens it holds (the burst).
    per_min : float
        Tokens gained per minute, > 0 (kept per minute, so that round figures stay exact:
        ``(1 - 0.35) * 60 / 3`` is 13.0, ``0.65 / 0.05`` is 12.999...).
    tokens : float
        Tokens held at ``stamp``.
    stamp : float
        When ``tokens`` was last brought up to date, in seconds.
    """

    capacity: float
    per_min: float
    tokens: float
    stamp: float

    def level(self, now: float) -> float:
        """Tokens held at ``now`` (the refill since :attr:`stamp`, capped at the capacity).

        Parameters
        ----------
        now : float
            The clock's reading, in seconds; an earlier reading than :attr:`stamp` adds nothing.

        Returns
        -------
        float
        """
        return min(self.capacity, self.tokens + max(0.0, now - self.stamp) * self.per_min / 60.0)

    def take(self, now: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens if the bucket holds them.

        Parameters
        ----------
        now : float
            The clock's reading, in seconds.
        cost : float
            Tokens the call costs, > 0 and at most :attr:`capacity`.

        Returns
        -------
        float
            0.0 when taken; else the seconds until ``cost`` tokens are there (nothing taken).
        """
        self.tokens, self.stamp = self.level(now), max(now, self.stamp)
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) * 60.0 / self.per_min


class RateLimiter:
    """One token bucket per identity, all with the same burst and refill rate.

    Parameters
    ----------
    per_min : float
        Tokens a bucket gains per minute; 0 turns the limiter off (every call admitted).
    burst : int
        Most tokens a bucket holds, >= 1: the calls an idle identity may make at once. A new
        identity starts full.
    clock : callable() -> float
        Seconds from an arbitrary origin, never going back (default ``time.monotonic``).

    Raises
    ------
    ValueError
        A negative ``per_min`` or a ``burst`` below 1.

    Notes
    -----
    :meth:`take` is O(1) (amortised: once :data:`PRUNE_AT` buckets exist, the full ones are
    dropped in one O(n) pass). Memory: one small object per identity that is not full.
    """

    def __init__(self, per_min: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_min < 0 or burst < 1:
            raise ValueError(f"a rate limit needs per_min >= 0 and burst >= 1 (got {per_min}, {burst})")
        self.per_min = per_min
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether calls are limited at all (``per_min`` > 0)."""
        return self.per_min > 0

    def take(self, identity: str, cost: float = 1.0) -> float:
        """Charge ``cost`` tokens to ``identity``'s bucket.

        Parameters
        ----------
        identity : str
            Whose bucket.
        cost : float
            Tokens the call costs (default 1).

        Returns
        -------
        float
            0.0 when admitted; else the seconds to wait before the same call is admitted
            (nothing was charged).
        """
        if not self.enabled:
            return 0.0
        with self._lock:
            now = self.clock()
            bucket = self._buckets.get(identity)
            if bucket is None:
                if len(self._buckets) >= PRUNE_AT:
                    self._prune(now)
                bucket = TokenBucket(float(self.burst), self.per_min, float(self.burst), now)
                self._buckets[identity] = bucket
            return bucket.take(now, cost)

    def remaining(self, identity: str) -> float:
        """Tokens ``identity`` holds now (``burst`` for one never seen; inf when off).

        Parameters
        ----------
        identity : str
            Whose bucket.

        Returns
        -------
        float
        """
        if not self.enabled:
            return math.inf
        with self._lock:
            bucket = self._buckets.get(identity)
            return float(self.burst) if bucket is None else bucket.level(self.clock())

    def _prune(self, now: float) -> None:
        """Drop the buckets that are full again (a new one would start the same)."""
        self._buckets = {k: b for k, b in self._buckets.items() if b.level(now) < b.capacity}
