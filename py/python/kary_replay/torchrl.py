"""TorchRL on kary-replay's tree: ``KarySampler``, a ``PrioritizedSampler`` whose sum and
minimum trees are one K-ary :class:`kary_replay.SumTree` (its batch calls run without the
GIL), and ``KaryPrioritizedReplayBuffer``, TorchRL's ``TensorDictPrioritizedReplayBuffer``
with that sampler.

>>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer      # doctest: +SKIP
>>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000),         # doctest: +SKIP
...                             sampler=KarySampler(100_000, alpha=0.6, beta=0.4),
...                             priority_key: str = "td_error", batch_size=256)

Everything else is TorchRL's: storage, writers, transforms, ``update_priority`` by storage
index (TorchRL's semantics: an update by an index whose item was overwritten since lands on
the new item; :class:`kary_replay.PrioritizedReplayBuffer` drops such updates by key).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tensordict import is_tensor_collection
from torchrl._utils import _replace_last
from torchrl.data import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import PrioritizedSampler, PrioritizedSliceSampler, RandomSampler
from torchrl.data.replay_buffers.storages import TensorStorage

from ._native import SumTree
from .errors import InvalidArgumentError


def _indices(index: Any) -> npt.NDArray[Any]:
    if isinstance(index, torch.Tensor):
        return index.detach().cpu().numpy()
    return np.asarray(index)


class _SumTreeView:
    """The interface TorchRL's sampler uses of its C++ ``SumSegmentTree``, on our tree."""

    def __init__(self, tree: SumTree, dtype: type[np.floating[Any]] = np.float32, high: list[int] | None = None):
        self.tree = tree
        # The sampler's dtype for what is read (weights come out as TorchRL's would); the
        # tree itself keeps float64.
        self.dtype = dtype
        # One past the highest leaf ever set (shared by the two views): leaves from here on
        # are 0, so a query that covers [0, high) is the tree's total, in O(1).
        self.high = high if high is not None else [0]

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        idx = _indices(index)
        if idx.size and int(idx.max()) >= len(self.tree):
            # TorchRL's own sampler ignores such writes (and never samples those items).
            raise InvalidArgumentError(
                f"storage index {int(idx.max())} is past the sampler's max_capacity {len(self.tree)}: "
                "make KarySampler's max_capacity at least the storage's max_size"
            )
        self.tree.set(idx, value)
        if idx.size:
            self.high[0] = max(self.high[0], int(idx.max()) + 1)

    def __getitem__(self, index: Any) -> Any:
        idx = _indices(index)
        values = self.tree.get(idx).astype(self.dtype, copy=False)
        return values[0] if idx.ndim == 0 else values.reshape(idx.shape)

    def __len__(self) -> int:
        return len(self.tree)

    @property
    def size(self) -> int:
        return len(self.tree)

    def query(self, left: Any, right: Any) -> float:
        left, right = int(left), int(right)
        if left <= 0 and right >= self.high[0]:
            return self.tree.total()
        return float(self.tree.get(np.arange(left, right)).sum())

    def scan_lower_bound(self, mass: Any) -> npt.NDArray[np.int64]:
        return self.tree.find_prefix(_indices(mass))


class _MinTreeView(_SumTreeView):
    """The minimum over positive leaves, from the same tree (its companion minima): a write
    to the sum view is the write, so writes here change nothing."""

    def __setitem__(self, index: Any, value: Any) -> None:
        pass

    def query(self, left: Any, right: Any) -> float:
        left, right = int(left), int(right)
        if left <= 0 and right >= self.high[0]:
            return self.tree.min_positive()
        values = self.tree.get(np.arange(left, right))
        positive = values[values > 0]
        return float(positive.min()) if positive.size else float("inf")


class _KaryTree:
    """What TorchRL's prioritized samplers keep in their two segment trees, kept in one K-ary
    sum tree of ``self._fanout`` leaves per node with its minimum companion, on the CPU."""

    _fanout: int
    _device: Any
    _max_capacity: int
    dtype: torch.dtype
    _sum_tree: Any
    _min_tree: Any
    _max_priority: Any

    def _init(self) -> None:
        if self._device is not None and self._device.type != "cpu":
            raise InvalidArgumentError(f"{type(self).__name__} keeps its tree on the CPU")
        tree = SumTree(self._max_capacity, self._fanout)
        dtype = np.float64 if self.dtype in (torch.double, torch.float64) else np.float32
        self._sum_tree = _SumTreeView(tree, dtype)
        self._min_tree = _MinTreeView(tree, dtype, self._sum_tree.high)
        self._max_priority = None

    def _maybe_init_from_storage(self, storage: Any) -> None:
        # The tree stays on the CPU whatever device the storage uses.
        return None

    def state_dict(self) -> dict[str, Any]:
        # One tree holds both views: copy it once; the minimum view is rebuilt on load.
        min_tree, self._min_tree = self._min_tree, None
        try:
            state: dict[str, Any] = super().state_dict()  # type: ignore[misc]
            return state
        finally:
            self._min_tree = min_tree

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict, _min_tree=None)
        super().load_state_dict(state_dict)  # type: ignore[misc]
        view = self._sum_tree
        self._min_tree = _MinTreeView(view.tree, view.dtype, view.high)


class KarySampler(_KaryTree, PrioritizedSampler):
    """TorchRL's ``PrioritizedSampler`` (the same arguments in the same order, weights,
    maximum-priority rule, ``state_dict`` and ``dumps``), its two segment trees replaced by one
    K-ary sum tree of ``fanout`` (default 8) with a minimum companion. Its tree lives on the
    CPU: ``device`` None or "cpu" (another device is refused). A write at a storage index past
    ``max_capacity`` is refused (TorchRL's sampler ignores it and never samples that item)."""

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        device: torch.device | str | None = None,
        *,
        fanout: int = 8,
    ) -> None:
        self._fanout = fanout
        super().__init__(max_capacity, alpha, beta, eps, dtype, reduction, max_priority_within_buffer, device)

    def __repr__(self) -> str:
        return f"KarySampler(max_capacity={self._max_capacity}, alpha={self._alpha}, beta={self._beta}, fanout={self._fanout})"


def _last_of_each(lengths: torch.Tensor, keep: int, drop_first: bool) -> torch.Tensor:
    """The positions, counted from the first trajectory's first step, that TorchRL's
    ``PrioritizedSliceSampler._preceding_stop_idx`` lists for trajectories of ``lengths``:
    each trajectory's elements (its steps, less its first when ``drop_first``) laid right-aligned
    in rows as long as the longest, then the columns from ``keep`` (a slice start, as Python
    reads it) on. Computed without a loop over trajectories."""
    lengths = lengths.reshape(-1).to(torch.long).cpu()
    total = int(lengths.sum())
    first = torch.cumsum(lengths, 0) - lengths
    shapes = lengths - 1 if drop_first else lengths
    if shapes.numel() == 0 or total == 0:
        return torch.empty(0, dtype=torch.long)
    widest = int(shapes.max())
    column = keep if keep >= 0 else max(0, widest + keep)
    column = min(column, widest)
    # Element j of a trajectory of `shape` elements sits in column widest - shape + j.
    skip = torch.clamp(column - (widest - shapes), min=0)
    count = torch.clamp(shapes - skip, min=0)
    owner = torch.repeat_interleave(torch.arange(lengths.numel()), count)
    within = torch.arange(int(count.sum())) - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
    offset = first + skip + (1 if drop_first else 0)
    return offset[owner] + within


class KaryPrioritizedSliceSampler(_KaryTree, PrioritizedSliceSampler):
    """TorchRL's ``PrioritizedSliceSampler`` (the same arguments in the same order, the same
    slices, weights, truncation flags, ``state_dict`` and ``dumps``) on one K-ary sum tree of
    ``fanout`` (keyword, default 8) with its minimum companion, on the CPU. The positions no
    slice may start at are found with whole-tensor operations instead of TorchRL's loop over
    trajectories, and the truncation flags read two entries of the storage instead of its
    whole rows (see :meth:`sample`); the trajectories themselves still come from the storage
    at each sample, as TorchRL's do. A write at a storage index past ``max_capacity`` is refused, as in
    :class:`KarySampler`."""

    truncated_key: Any

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: Any = None,
        end_keys: Any = None,
        traj_key: Any = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: Any = ("next", "truncated"),
        init_key: Any = "is_init",
        strict_length: bool = True,
        compile: bool | dict[str, Any] = False,
        span: bool | int | tuple[bool | int, bool | int] = False,
        max_priority_within_buffer: bool = False,
        fanout: int = 8,
    ) -> None:
        self._fanout = fanout
        super().__init__(
            max_capacity,
            alpha,
            beta,
            eps,
            dtype,
            reduction,
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=cache_values,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            compile=compile,
            span=span,
            max_priority_within_buffer=max_priority_within_buffer,
        )

    def _preceding_stop_idx(self, storage: Any, lengths: Any, seq_length: Any, start_idx: Any) -> torch.Tensor:
        # TorchRL's method (PrioritizedSliceSampler, TorchRL 0.14), its padded rows replaced
        # by _last_of_each.
        cached: torch.Tensor | None = self._cache.get("preceding_stop_idx")
        if cached is not None:
            return cached
        numel = storage.shape.numel()
        if int(lengths.sum()) != numel:
            raise RuntimeError("Wrong shapes / arange configuration")
        span_right = self.span[1]
        # span[1] True: only each trajectory's last step; else its last seq_length - 1 - span.
        keep = -1 if span_right and isinstance(span_right, bool) else -int(seq_length) + 1 + int(span_right)
        preceding = _last_of_each(lengths, keep, drop_first=not self.strict_length)
        if storage._is_full:
            preceding = (
                preceding + int(np.ravel_multi_index(tuple(start_idx[0].tolist()), storage._total_shape))
            ) % storage._total_shape.numel()
        if self.cache_values:
            self._cache["preceding_stop_idx"] = preceding
        return preceding

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict[str, Any]]:
        """TorchRL's slices, weights and truncation flags. Where every slice has the full
        length (``strict_length`` and no right span) and the storage holds a tensordict, the
        flags read the storage's done and terminated entries at the sampled steps alone:
        TorchRL's sampler gathers whole rows there (every observation of the batch, a second
        time before the buffer gathers them for the caller) and keeps two entries."""
        truncated_key: Any = self.truncated_key
        fixed_length = self.strict_length and not self.span[1]
        if (
            truncated_key is None
            or not fixed_length
            or not isinstance(storage, TensorStorage)
            or not storage.initialized
            or not is_tensor_collection(storage._storage)
        ):
            return super().sample(storage, batch_size)  # type: ignore[no-any-return]
        _, num_slices = self._adjusted_batch_size(batch_size)
        self.truncated_key = None
        try:
            index, info = super().sample(storage, batch_size)
        finally:
            self.truncated_key = truncated_key
        # TorchRL's flags (PrioritizedSliceSampler.sample, TorchRL 0.14): each slice's last
        # step truncated, done = the stored done or truncated, terminated as stored.
        done_key = _replace_last(truncated_key, "done")
        terminated_key = _replace_last(truncated_key, "terminated")
        steps = index[0].shape[0]
        truncated = torch.zeros((steps, 1), dtype=torch.bool, device=index[0].device)
        truncated.view(num_slices, -1)[:, -1] = 1
        stored = storage[:].select(done_key, terminated_key, strict=False)[index]
        try:
            done = stored[done_key] | truncated
        except KeyError:
            done = truncated.clone()
        try:
            terminated = stored[terminated_key]
        except KeyError:
            terminated = torch.zeros_like(truncated)
        info.update({truncated_key: truncated, done_key: done, terminated_key: terminated})
        return index, info

    def __repr__(self) -> str:
        # TorchRL's text (which leaves its parenthesis open) under our name, then the fanout.
        theirs: str = super().__repr__()
        return (
            theirs.replace("PrioritizedSliceSampler(", "KaryPrioritizedSliceSampler(", 1) + f", fanout={self._fanout})"
        )


class KaryPrioritizedReplayBuffer(TensorDictPrioritizedReplayBuffer):
    """TorchRL's ``TensorDictPrioritizedReplayBuffer`` (the same keyword arguments; priorities
    read from ``priority_key`` on ``extend`` and ``update_tensordict_priority``; ``sync=False``
    samples uniformly while the prioritized sampler catches up, as TorchRL's does) with a
    :class:`KarySampler` of ``fanout`` (default 8). An instance of
    ``TensorDictPrioritizedReplayBuffer``."""

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: Any = "td_error",
        eps: float = 1e-8,
        storage: Any = None,
        sampler_device: Any = None,
        sync: bool = True,
        reduction: str = "max",
        fanout: int = 8,
        **kwargs: Any,
    ) -> None:
        # TensorDictPrioritizedReplayBuffer.__init__ (TorchRL 0.14) with our sampler in place of
        # its PrioritizedSampler; the rest is its parent's.
        storage = self._maybe_make_storage(storage, compilable=kwargs.get("compilable", False))
        self._sync = sync
        self._prioritized_sampler = None
        self._prioritized_sampler_write_count = 0
        prioritized = KarySampler(
            storage.max_size, alpha, beta, eps, reduction=reduction, device=sampler_device, fanout=fanout
        )
        sampler: Any = prioritized
        if not sync:
            if storage.ndim != 1:
                raise ValueError(
                    f"{type(self).__name__} only supports 1-D storages when sync=False, got storage.ndim={storage.ndim}."
                )
            self._prioritized_sampler = prioritized
            sampler = RandomSampler()
        TensorDictReplayBuffer.__init__(self, priority_key=priority_key, storage=storage, sampler=sampler, **kwargs)


__all__ = ["KaryPrioritizedReplayBuffer", "KaryPrioritizedSliceSampler", "KarySampler"]
