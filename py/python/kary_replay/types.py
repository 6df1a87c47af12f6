"""The dicts that kary_replay's calls return, typed (``TypedDict``)."""

from typing import TypedDict

#: A value of a checkpoint's user map.
UserValue = int | float | bool | str | bytes


class Stats(TypedDict):
    """:meth:`kary_replay.PrioritizedReplayBuffer.stats`: read in O(K)."""

    len: int
    capacity: int
    inserted: int
    total_priority: float
    #: The smallest positive stored priority; None when there is none.
    min_positive: float | None
    #: The stored priority an item added without one gets now.
    running_max: float
    memory_bytes: int


class RateStats(TypedDict):
    """:meth:`kary_replay.RateLimiter.stats`: exact when no call is in flight."""

    inserts: int
    samples: int
    #: ``inserts * samples_per_insert - samples``.
    diff: float
    #: Whether ``min_size`` items have been inserted.
    open: bool
    closed: bool
    insert_waiters: int
    sample_waiters: int
    #: Seconds spent waiting by every call that waited.
    blocked_s: float


class Consistency(TypedDict):
    """:meth:`kary_replay.PrioritizedReplayBuffer.consistency`: O(N)."""

    exact: bool
    max_relative_error: float


class CheckpointReport(TypedDict):
    """:func:`kary_replay.verify`: what a checkpoint holds, every file's CRC checked."""

    capacity: int
    len: int
    inserted: int
    cursor: int
    running_max: float
    total_priority: float
    #: Items with a positive priority.
    positive: int
    min_positive: float
    max_priority: float
    crate_version: str
    #: Each column's dtype name and per-item shape (``()`` for a scalar).
    columns: dict[str, tuple[str, tuple[int, ...]]]
    user: dict[str, UserValue]


__all__ = ["CheckpointReport", "Consistency", "RateStats", "Stats", "UserValue"]
