"""tianshou on kary-replay's tree: ``PrioritizedReplayBuffer`` and
``PrioritizedVectorReplayBuffer`` (what tianshou's vectorized collectors use), subclasses of
tianshou's own whose ``SegmentTree`` of weights is a K-ary :class:`kary_replay.SumTree` (the
tree's batch calls run without the GIL). Everything else is tianshou's (storage, episodes, ``add``,
``sample``, ``get_weight``, ``update_weight``, ``set_beta``), so it is a drop-in:

>>> from kary_replay.tianshou import PrioritizedReplayBuffer                # doctest: +SKIP
>>> buf = PrioritizedReplayBuffer(size=100_000, alpha=0.6, beta=0.4)        # doctest: +SKIP
>>> batch, indices = buf.sample(64)                                          # doctest: +SKIP
>>> buf.update_weight(indices, td_error)                                     # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from tianshou.data import (
    PrioritizedReplayBuffer as _TianshouPrioritizedReplayBuffer,
    PrioritizedVectorReplayBuffer as _TianshouPrioritizedVectorReplayBuffer,
)

from ._native import SumTree


class _WeightTree:
    """The interface tianshou's prioritized buffer uses of its ``SegmentTree``."""

    def __init__(self, size: int, fanout: int = 8):
        self._tree = SumTree(size, fanout)

    def __len__(self) -> int:
        return len(self._tree)

    def __setitem__(self, index: Any, value: Any) -> None:
        idx = np.asarray(index)
        self._tree.set(idx, np.broadcast_to(np.asarray(value, dtype=np.float64), idx.shape))

    def __getitem__(self, index: Any) -> float | npt.NDArray[np.float64]:
        idx = np.asarray(index)
        values = self._tree.get(idx)
        return float(values[0]) if idx.ndim == 0 else values.reshape(idx.shape)

    def reduce(self, start: int = 0, end: int | None = None) -> float:
        if start == 0 and (end is None or end >= len(self._tree)):
            return self._tree.total()
        return float(self._tree.get(np.arange(start, len(self._tree) if end is None else end)).sum())

    def get_prefix_sum_idx(self, value: Any) -> int | npt.NDArray[np.int64]:
        v = np.asarray(value, dtype=np.float64)
        out = self._tree.find_prefix(v.reshape(-1))
        return int(out[0]) if v.ndim == 0 else out.reshape(v.shape)


class PrioritizedReplayBuffer(_TianshouPrioritizedReplayBuffer):
    """tianshou's ``PrioritizedReplayBuffer`` (same arguments and behaviour) on a K-ary sum
    tree of ``fanout`` (keyword, default 8)."""

    def __init__(
        self, size: int, alpha: float, beta: float, weight_norm: bool = True, *, fanout: int = 8, **kwargs: Any
    ) -> None:
        super().__init__(size, alpha, beta, weight_norm, **kwargs)
        # Duck-typed: tianshou calls only what _WeightTree has of its SegmentTree.
        self.weight = _WeightTree(size, fanout)  # type: ignore[assignment]


class PrioritizedVectorReplayBuffer(_TianshouPrioritizedVectorReplayBuffer):
    """tianshou's ``PrioritizedVectorReplayBuffer`` (same arguments and behaviour: ``buffer_num``
    sub-buffers of ``ceil(total_size / buffer_num)`` items, one weight tree over all of them,
    what tianshou's vectorized collectors write into) on a K-ary sum tree of ``fanout``
    (keyword, default 8)."""

    def __init__(self, total_size: int, buffer_num: int, *, fanout: int = 8, **kwargs: Any) -> None:
        super().__init__(total_size, buffer_num, **kwargs)
        # The manager's one tree over every sub-buffer (tianshou deletes the sub-buffers'),
        # still empty here. Duck-typed as in PrioritizedReplayBuffer.
        self.weight = _WeightTree(self.maxsize, fanout)  # type: ignore[assignment]


__all__ = ["PrioritizedReplayBuffer", "PrioritizedVectorReplayBuffer"]
