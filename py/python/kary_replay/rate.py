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
``try_insert`` and ``try_sample`` never wait (:class:`~kary_replay.errors.RateLimitedError`),
nor does a ``timeout`` of 0 (the same error);
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

_NativeArgs = tuple[str, int, float, "float | tuple[float, float] | None"]


def _native_args(limit: object) -> _NativeArgs:
    """A limit as the native constructors take it: ``(kind, size, samples_per_insert,
    error_buffer)``; ``InvalidArgumentError`` for anything else (checked as any object: a
    caller may pass anything)."""
    if isinstance(limit, MinSize):
        return ("min_size", limit.min_size, 1.0, None)
    if isinstance(limit, Queue):
        return ("queue", limit.size, 1.0, None)
    if isinstance(limit, SampleToInsertRatio):
        return ("ratio", limit.min_size, limit.samples_per_insert, limit.error_buffer)
    raise InvalidArgumentError(f"a rate limit is MinSize, SampleToInsertRatio or Queue, not {limit!r}")


def _from_native(kind: str, size: int, spi: float, error_buffer: float | tuple[float, float] | None) -> RateLimit:
    """The dataclass of a native limit's arguments (the inverse of :func:`_native_args`)."""
    if kind == "min_size":
        return MinSize(size)
    if kind == "queue":
        return Queue(size)
    assert error_buffer is not None
    return SampleToInsertRatio(spi, size, error_buffer)


class RateLimiter:
    """Holds ``limit`` for calls of at most ``max_insert`` inserted and ``max_sample``
    sampled items (a writer's staged batch, a learner's batch). Safe to share between
    threads. ``counts``: ``(inserts, samples)`` to continue from (a checkpoint's
    :meth:`stats`); counts the range could not have reached are refused."""

    def __init__(
        self, limit: RateLimit, *, max_insert: int, max_sample: int, counts: tuple[int, int] | None = None
    ) -> None:
        self.limit = limit
        self.max_insert, self.max_sample = max_insert, max_sample
        kind, size, spi, error_buffer = _native_args(limit)
        self._native = _RateLimiter(kind, size, spi, error_buffer, max_insert, max_sample, counts)

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
