"""Rate limiting: the ratio of sampled to inserted items held in a range, as Reverb's rate
limiters hold it, counted in items (a sample of B spends B).

>>> import kary_replay as kr
>>> limiter = kr.RateLimiter(kr.SampleToInsertRatio(4.0, min_size=100, error_buffer=64.0),
...                          max_insert=16, max_sample=32)
>>> for _ in range(7):
...     limiter.insert(16)  # actors: 112 items
>>> limiter.sample(32)  # learners: waits while the ratio would leave its range
>>> limiter.stats()["samples"]
32

``insert`` and ``sample`` wait (without the GIL; Ctrl-C interrupts them) at most
``timeout`` seconds, then raise :class:`~kary_replay.errors.RateLimitTimeoutError`;
``try_insert`` and ``try_sample`` never wait (:class:`~kary_replay.errors.RateLimitedError`);
``close`` wakes every waiter with :class:`~kary_replay.errors.ClosedError`. A call that is
not admitted spends nothing. Each admitted call is one compare-and-swap on an exact integer
credit; a configuration that would deadlock with calls of up to ``max_insert`` and
``max_sample`` items is refused (``InvalidArgumentError``, saying what would work).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._native import RateLimiter as _RateLimiter
from .errors import InvalidArgumentError
from .types import RateStats


@dataclass(frozen=True)
class MinSize:
    """No sample before ``min_size`` items have been inserted; nothing else is limited."""

    min_size: int


@dataclass(frozen=True)
class SampleToInsertRatio:
    """From ``min_size`` items on, ``inserts * samples_per_insert - samples`` stays within
    ``error_buffer``: ``samples_per_insert * min_size +- error_buffer`` for a number, the
    range as given for a ``(min_diff, max_diff)`` pair. Samples wait below it, inserts above
    it; before ``min_size``, inserts are free and samples wait."""

    samples_per_insert: float
    min_size: int
    error_buffer: float | tuple[float, float]


@dataclass(frozen=True)
class Queue:
    """One sample per insert, with at most ``size`` inserts not yet sampled."""

    size: int


#: What a :class:`RateLimiter` holds.
RateLimit = MinSize | SampleToInsertRatio | Queue


class RateLimiter:
    """Holds ``limit`` for calls of at most ``max_insert`` inserted and ``max_sample``
    sampled items (a writer's staged batch, a learner's batch). Safe to share between
    threads."""

    def __init__(self, limit: RateLimit, *, max_insert: int, max_sample: int) -> None:
        given: object = limit  # checked as any object: a caller may pass anything
        args: tuple[str, int, float, float | tuple[float, float] | None]
        if isinstance(given, MinSize):
            args = ("min_size", given.min_size, 1.0, None)
        elif isinstance(given, Queue):
            args = ("queue", given.size, 1.0, None)
        elif isinstance(given, SampleToInsertRatio):
            args = ("ratio", given.min_size, given.samples_per_insert, given.error_buffer)
        else:
            raise InvalidArgumentError(f"a rate limit is MinSize, SampleToInsertRatio or Queue, not {given!r}")
        self.limit = limit
        kind, size, spi, error_buffer = args
        self._native = _RateLimiter(kind, size, spi, error_buffer, max_insert, max_sample)

    def insert(self, n: int, timeout: float | None = None) -> None:
        """Admit an insert of ``n`` items, waiting at most ``timeout`` seconds (None: as long
        as it takes)."""
        self._native.insert(n, timeout)

    def sample(self, n: int, timeout: float | None = None) -> None:
        """Admit a sample of ``n`` items, waiting at most ``timeout`` seconds."""
        self._native.sample(n, timeout)

    def try_insert(self, n: int) -> None:
        """Admit an insert of ``n`` items now, or raise ``RateLimitedError``."""
        self._native.try_insert(n)

    def try_sample(self, n: int) -> None:
        """Admit a sample of ``n`` items now, or raise ``RateLimitedError``."""
        self._native.try_sample(n)

    def close(self) -> None:
        """Wake every waiter with ``ClosedError``; later calls raise it too."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._native.closed

    def samples_per_insert(self) -> tuple[int, int]:
        """``samples_per_insert`` as the exact fraction ``(p, q)`` it holds."""
        return self._native.samples_per_insert()

    def stats(self) -> RateStats:
        """The counts and state now (exact when no call is in flight)."""
        return self._native.stats()


__all__ = ["MinSize", "Queue", "RateLimit", "RateLimiter", "SampleToInsertRatio"]
