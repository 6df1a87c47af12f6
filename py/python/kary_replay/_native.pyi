# The extension module behind kary_replay (private: use the package's names). Checked
# against the compiled module by mypy.stubtest in the test command.

import os
import pathlib
from collections.abc import Mapping
from typing import Any, Literal, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Self, disjoint_base

from .types import CheckpointReport, Consistency, RateStats, Stats, UserValue

__all__ = [
    "Buffer",
    "Coordinator",
    "NativeLane",
    "NativeWriter",
    "RateLimiter",
    "Rng",
    "SequenceBuffer",
    "SharedBuffer",
    "SharedSequenceBuffer",
    "SumTree",
    "_read_sharded_manifest",
    "_sum_tree_from",
    "_write_sharded_manifest",
    "latest",
    "numbered",
    "sequence_priorities",
    "verify",
]

@final
class Rng:
    def __new__(cls, seed: int | None = None) -> Rng: ...
    def random(self) -> float: ...
    def state(self) -> tuple[int, int, int, int]: ...
    @staticmethod
    def from_state(state: tuple[int, int, int, int]) -> Rng: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

@final
class RateLimiter:
    def __new__(
        cls,
        kind: str,
        size: int,
        samples_per_insert: float,
        error_buffer: float | tuple[float, float] | None,
        max_insert: int,
        max_sample: int,
        counts: tuple[int, int] | None = None,
    ) -> RateLimiter: ...
    def insert(self, n: int, timeout: float | None = None) -> None: ...
    def sample(self, n: int, timeout: float | None = None) -> None: ...
    def try_insert(self, n: int) -> None: ...
    def try_sample(self, n: int) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def samples_per_insert(self) -> tuple[int, int]: ...
    def stats(self) -> RateStats: ...

@final
class SumTree:
    def __new__(cls, capacity: int, fanout: int = 8) -> SumTree: ...
    def __len__(self) -> int: ...
    def set(self, indices: npt.ArrayLike, values: npt.ArrayLike) -> None: ...
    def get(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]: ...
    def total(self) -> float: ...
    def min_positive(self) -> float: ...
    def max(self) -> float: ...
    def find_prefix(self, targets: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def sample(
        self, batch: int, rng: Rng | None = None, *, stratified: bool = True
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...
    def clear(self) -> None: ...
    def leaves(self) -> npt.NDArray[np.float64]: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    @property
    def fanout(self) -> int: ...

@final
class Coordinator:
    def __new__(cls) -> Coordinator: ...
    def plan(
        self,
        stats: list[Stats],
        batch_size: int,
        *,
        mode: Literal[
            "stratified",
            "independent",
            "without_replacement",
            "uniform",
            "fifo",
            "lifo",
            "shuffled",
            "max_heap",
            "min_heap",
        ] = "stratified",
        rng: Rng | None = None,
    ) -> list[npt.NDArray[np.float64]]: ...
    def finish(
        self,
        priorities: list[npt.ArrayLike],
        totals: list[float],
        beta: float,
        *,
        weight_norm: Literal["global", "batch"] = "global",
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32]]: ...

@final
class NativeWriter:
    def push(self, priority: float | None = None, **row: npt.ArrayLike) -> npt.NDArray[np.uint64]: ...
    def flush(self) -> npt.NDArray[np.uint64]: ...
    def staged(self) -> int: ...

@disjoint_base
class Buffer:
    def __new__(
        cls,
        capacity: int,
        schema: Mapping[str, Any],
        *,
        alpha: float = 0.6,
        fanout: int = 8,
        variant: Literal["split", "lockfree", "global"] = "split",
        weight_norm: Literal["global", "batch"] = "global",
        default_priority: Literal["running_max", "live_max"] = "running_max",
        shard: int | None = None,
        key_tag: int | None = None,
        rate_limit: object | None = None,
        max_insert: int = 16,
        max_sample: int = 256,
        max_times_sampled: int = 0,
        version_column: str | None = None,
        max_heap: bool = False,
        _from: Buffer | None = None,
    ) -> Self: ...
    def __len__(self) -> int: ...
    def add(self, priority: float | None = None, timeout: float | None = None, **row: npt.ArrayLike) -> int: ...
    def add_batch(
        self, priorities: npt.ArrayLike | None = None, timeout: float | None = None, **columns: npt.ArrayLike
    ) -> npt.NDArray[np.uint64]: ...
    def _writer(self, batch: int) -> NativeWriter: ...
    def _sample(
        self,
        batch_size: int,
        beta: float,
        *,
        mode: Literal[
            "stratified",
            "independent",
            "without_replacement",
            "uniform",
            "fifo",
            "lifo",
            "shuffled",
            "max_heap",
            "min_heap",
        ] = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]: ...
    def _sample_at(
        self, fractions: npt.ArrayLike, *, rng: Rng | None = None, timeout: float | None = None
    ) -> dict[str, Any]: ...
    def _sample_into(
        self,
        out: Mapping[str, Any],
        batch_size: int,
        beta: float,
        *,
        mode: Literal[
            "stratified",
            "independent",
            "without_replacement",
            "uniform",
            "fifo",
            "lifo",
            "shuffled",
            "max_heap",
            "min_heap",
        ] = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def rate_stats(self) -> RateStats | None: ...
    def _rate_limit(self) -> tuple[str, int, float, float | tuple[float, float] | None, int, int] | None: ...
    def update_priorities(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> tuple[int, int]: ...
    def delete(self, keys: npt.ArrayLike) -> tuple[int, int]: ...
    def retire_before(self, version: int) -> int: ...
    @property
    def version_floor(self) -> int | None: ...
    @property
    def version_column(self) -> str | None: ...
    def write_back(self, keys: npt.ArrayLike, **columns: npt.ArrayLike) -> tuple[int, int]: ...
    def priorities_of(self, keys: npt.ArrayLike) -> npt.NDArray[np.float64]: ...
    def raw_priorities_of(self, keys: npt.ArrayLike) -> npt.NDArray[np.float64]: ...
    def set_alpha(self, alpha: float) -> None: ...
    @property
    def alpha(self) -> float: ...
    def check_update(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> None: ...
    def priority(self, index: int) -> float: ...
    def key(self, index: int) -> int | None: ...
    def stats(self) -> Stats: ...
    def consistency(self) -> Consistency: ...
    def clear(self) -> None: ...
    def rebuild(self) -> None: ...
    def _save(self, dir: str, *, user: Mapping[str, UserValue] | None = None, keep_last: int = 0) -> None: ...
    @staticmethod
    def _load(
        dir: str, *, variant: Literal["split", "lockfree", "global"] = "split"
    ) -> tuple[Buffer, dict[str, UserValue]]: ...
    @property
    def capacity(self) -> int: ...
    @property
    def variant(self) -> Literal["split", "lockfree", "global"]: ...
    @property
    def schema(self) -> dict[str, tuple[str, tuple[int, ...]]]: ...
    @property
    def key_tag(self) -> int: ...
    @property
    def total_priority(self) -> float: ...

def _write_sharded_manifest(dir: str | os.PathLike[str], manifest: str) -> None: ...
def _read_sharded_manifest(dir: str | os.PathLike[str]) -> str: ...
def _sum_tree_from(capacity: int, fanout: int, leaves: npt.ArrayLike) -> SumTree: ...
def verify(dir: str | os.PathLike[str]) -> CheckpointReport: ...
def latest(parent: str | os.PathLike[str]) -> pathlib.Path | None: ...
def numbered(parent: str | os.PathLike[str], step: int) -> pathlib.Path: ...

@final
class NativeLane:
    def push(self, *, timeout: float | None = None, **step: npt.ArrayLike) -> None: ...
    def push_steps(self, **steps: npt.ArrayLike) -> int: ...
    def end_episode(
        self, truncated: bool = False, *, timeout: float | None = None, **final_obs: npt.ArrayLike
    ) -> None: ...
    def flush(self) -> None: ...
    def windows_completed_by(self, steps: int, end: bool = False) -> int: ...
    def set_batch(self, windows: int) -> None: ...
    def close(self) -> None: ...
    @property
    def position(self) -> int: ...
    @property
    def lane(self) -> int: ...
    @property
    def in_episode(self) -> bool: ...

@disjoint_base
class SharedBuffer(Buffer):
    def __new__(
        cls,
        capacity: int,
        schema: Mapping[str, Any],
        name: str | None = None,
        *,
        alpha: float = 0.6,
        fanout: int = 8,
        weight_norm: Literal["global", "batch"] = "global",
        default_priority: Literal["running_max", "live_max"] = "running_max",
        key_tag: int | None = None,
        rate_limit: object | None = None,
        max_insert: int = 16,
        max_sample: int = 256,
        max_times_sampled: int = 0,
        version_column: str | None = None,
        max_heap: bool = False,
        _from: SharedBuffer | None = None,
    ) -> Self: ...
    @staticmethod
    def _attach(name: str) -> SharedBuffer: ...
    @property
    def name(self) -> str: ...
    def _unlink(self) -> None: ...
    def recover(self) -> int: ...
    @property
    def recovered(self) -> int: ...
    def _participants(self) -> list[tuple[int, int, bool]]: ...

@disjoint_base
class SequenceBuffer:
    def __new__(
        cls,
        lanes: int,
        steps_per_lane: int,
        schema: Mapping[str, Any],
        *,
        window: int | None = None,
        period: int = 1,
        partial: Literal["keep", "drop"] = "keep",
        nstep: tuple[int, float, str] | None = None,
        stack: Mapping[str, int] | None = None,
        padding: Literal["repeat", "zeros"] = "repeat",
        next_of: list[str] | tuple[str, ...] | None = None,
        alpha: float = 0.6,
        fanout: int = 8,
        weight_norm: Literal["global", "batch"] = "global",
        key_tag: int | None = None,
        rate_limit: object | None = None,
        max_insert: int | None = None,
        max_sample: int = 256,
        _from: SequenceBuffer | None = None,
    ) -> Self: ...
    def _save(self, dir: str, *, user: Mapping[str, UserValue] | None = None, keep_last: int = 0) -> None: ...
    @staticmethod
    def _load(dir: str) -> tuple[SequenceBuffer, dict[str, UserValue]]: ...
    @staticmethod
    def _verify(dir: str) -> dict[str, int]: ...
    def _lane(self, lane: int) -> NativeLane: ...
    def _sample(
        self,
        batch_size: int,
        beta: float,
        *,
        mode: Literal[
            "stratified",
            "independent",
            "without_replacement",
            "uniform",
            "fifo",
            "lifo",
            "shuffled",
            "max_heap",
            "min_heap",
        ] = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]: ...
    def _sample_into(
        self,
        out: Mapping[str, Any],
        batch_size: int,
        beta: float,
        *,
        mode: Literal[
            "stratified",
            "independent",
            "without_replacement",
            "uniform",
            "fifo",
            "lifo",
            "shuffled",
            "max_heap",
            "min_heap",
        ] = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]: ...
    def _sample_at(
        self, fractions: npt.ArrayLike, *, rng: Rng | None = None, timeout: float | None = None
    ) -> dict[str, Any]: ...
    def stats(self) -> Stats: ...
    def check_update(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> None: ...
    def close(self) -> None: ...
    def rate_stats(self) -> RateStats | None: ...
    def _rate_limit(self) -> tuple[str, int, float, float | tuple[float, float] | None, int, int] | None: ...
    def update_priorities(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> tuple[int, int]: ...
    def priorities_of(self, keys: npt.ArrayLike) -> npt.NDArray[np.float64]: ...
    def window_of(self, key: int) -> tuple[int, int]: ...
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def lanes(self) -> int: ...
    @property
    def steps_written(self) -> int: ...
    @property
    def total_priority(self) -> float: ...
    @property
    def memory_bytes(self) -> int: ...
    @property
    def key_tag(self) -> int: ...
    @property
    def schema(self) -> dict[str, tuple[str, tuple[int, ...]]]: ...
    def consistent(self) -> bool: ...
    def consistency(self) -> Consistency: ...

def sequence_priorities(td: npt.ArrayLike, mask: npt.ArrayLike, eta: float = 0.9) -> npt.NDArray[np.float64]: ...

@disjoint_base
class SharedSequenceBuffer(SequenceBuffer):
    def __new__(
        cls,
        lanes: int,
        steps_per_lane: int,
        schema: Mapping[str, Any],
        name: str | None = None,
        *,
        window: int | None = None,
        period: int = 1,
        partial: Literal["keep", "drop"] = "keep",
        nstep: tuple[int, float, str] | None = None,
        stack: Mapping[str, int] | None = None,
        padding: Literal["repeat", "zeros"] = "repeat",
        next_of: list[str] | tuple[str, ...] | None = None,
        alpha: float = 0.6,
        fanout: int = 8,
        weight_norm: Literal["global", "batch"] = "global",
        key_tag: int | None = None,
        rate_limit: object | None = None,
        max_insert: int | None = None,
        max_sample: int = 256,
        _from: SharedSequenceBuffer | None = None,
    ) -> Self: ...
    @staticmethod
    def _attach(name: str) -> SharedSequenceBuffer: ...
    @property
    def name(self) -> str: ...
    def _unlink(self) -> None: ...
    def recover(self) -> int: ...
    @property
    def recovered(self) -> int: ...
    def _participants(self) -> list[tuple[int, int, bool]]: ...
