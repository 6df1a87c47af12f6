"""kary_replay: prioritized experience replay on a K-ary sum tree, from Python.

A :class:`PrioritizedReplayBuffer` is safe to use from many Python threads at once: every
call that does work (``add_batch``, a writer's flush, ``sample``, ``sample_into``,
``update_priorities``, ``save``, ``load``) releases the GIL, so actor and learner threads
overlap. Batches are new arrays that no later call reuses; ``sample_into`` writes into
arrays the caller owns (numpy arrays or torch CPU tensors, pinned ones included).

While a call runs without the GIL, another Python thread must not write the arrays it was
given (the rows being inserted, or the ``out`` arrays of ``sample_into``): the call reads or
writes them in place.

>>> import numpy as np, kary_replay as kr
>>> rb = kr.PrioritizedReplayBuffer(1024, {"obs": ("float32", (4,)), "action": ("int64", ())})
>>> keys = rb.add_batch(obs=np.zeros((8, 4), np.float32), action=np.arange(8))
>>> batch = rb.sample(4, beta=0.4, rng=kr.Rng(1))
>>> batch["obs"].shape, batch.weights.dtype
((4, 4), dtype('float32'))
>>> rb.update_priorities(batch["keys"], np.full(4, 2.0))
(4, 0)
"""

import contextlib
import os
import pickle
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import numpy as np
import numpy.typing as npt

from . import errors
from ._native import (
    Buffer as _Buffer,
    Coordinator,
    NativeLane as _NativeLane,
    NativeWriter as _NativeWriter,
    Rng,
    SequenceBuffer as _SequenceBuffer,
    SumTree,
    latest,
    numbered,
    sequence_priorities,
    verify,
)
from .errors import (
    AllocationError,
    CheckpointError,
    ClosedError,
    ContentionError,
    EmptyBufferError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidPriorityError,
    KaryReplayError,
    RateLimitedError,
    RateLimitTimeoutError,
    SchemaError,
    ShardUnavailableError,
    SharedBufferError,
)
from .rate import MinSize, Queue, RateLimit, RateLimiter, SampleToInsertRatio, _from_native as _rate_from_native
from .types import CheckpointReport, Consistency, RateStats, Stats, UserValue

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self

__version__ = "0.1.0"

#: The concurrent buffer behind a :class:`PrioritizedReplayBuffer`.
Variant = Literal["split", "lockfree", "global"]
#: How a sample draws its targets.
Mode = Literal["stratified", "independent"]


_T = TypeVar("_T")


class SampleInfo(dict[str, Any]):
    """What a sample returns besides the columns: ``keys`` (uint64, for
    :meth:`PrioritizedReplayBuffer.update_priorities`), ``indices`` (int64 slots),
    ``weights`` (float32 importance weights in (0, 1]), ``probabilities`` and ``priorities``
    (float64, the stored alpha-exponentiated priorities). A dict: entries are also
    attributes where no dict method has the name (``info.weights``; but ``info["keys"]``,
    as ``info.keys`` is the dict's method)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Batch(SampleInfo):
    """A sampled batch: one new array ``(B, *shape)`` per column plus the entries of
    :class:`SampleInfo`. Nothing in it is reused by a later call."""

    def to_torch(
        self, device: "torch.device | str | None" = None, non_blocking: bool = False
    ) -> "dict[str, torch.Tensor]":
        """The batch as torch tensors (shared with the arrays on the CPU; copied to
        ``device`` otherwise). Keys become int64 (they are below 2^63)."""
        import torch

        out = {}
        for name, value in self.items():
            if name == "keys":
                value = value.astype(np.int64)
            t = torch.from_numpy(value)
            if device is not None:
                t = t.to(device, non_blocking=non_blocking)
            out[name] = t
        return out


def _as_out(name: str, value: Any) -> npt.NDArray[Any]:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") and hasattr(value, "device"):  # a torch tensor
        if value.device.type != "cpu":
            raise SchemaError(f"out['{name}']: a tensor on {value.device}: sample_into fills CPU memory")
        array: npt.NDArray[Any] = value.detach().numpy()
        return array
    raise SchemaError(f"out['{name}']: a numpy array or a torch CPU tensor, got {type(value).__name__}")


class Writer:
    """A staged writer: :meth:`push` stages one item and inserts every ``batch`` items in
    one call (items become sampleable when flushed). As a context manager it flushes on exit.
    One thread at a time."""

    def __init__(self, native: _NativeWriter) -> None:
        self._w = native

    def push(self, priority: float | None = None, **row: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Stage one item; returns the keys (uint64) of the items this push inserted."""
        return self._w.push(priority, **row)

    def flush(self) -> npt.NDArray[np.uint64]:
        """Insert the staged items now; returns their keys."""
        return self._w.flush()

    @property
    def staged(self) -> int:
        """Items staged and not yet inserted."""
        return self._w.staged()

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        # After a close (shutdown) the staged items are dropped with the writer.
        with contextlib.suppress(ClosedError):
            self._w.flush()
        return False


class PrioritizedReplayBuffer(_Buffer):
    """A prioritized replay buffer of ``capacity`` items (FIFO eviction when full).

    ``schema`` maps each column name to ``(dtype, shape)``: a numpy dtype (or its name:
    uint8, int32, int64, float32, float64, bool) and the per-item shape (``()`` for a
    scalar), e.g. ``{"obs": ("float32", (4,)), "action": ("int64", ())}``. The names
    priority, priorities, timeout, keys, indices, weights, probabilities and stats are taken
    (keywords of :meth:`add` and the entries of a sample's dict).

    Keyword options: ``alpha`` (priority exponent, default 0.6), ``fanout`` (tree arity: 2,
    4, 8, 16, 32 or 64; default 8), ``variant`` ("split": split locks, the default;
    "lockfree"; "global": one mutex), ``weight_norm`` ("global": importance weights divided
    by the largest possible one; "batch": by the batch's largest) and ``default_priority``
    ("running_max": the largest priority ever stored; "live_max": the largest stored now)
    for items added without a priority, and ``shard`` (a number in 0..32766) for a buffer
    that is one shard of several sampled as one (:mod:`kary_replay.ray`): its keys then
    carry ``shard + 1`` in their top bits (``key >> 48``, :attr:`key_tag`), so updates route
    by key alone. ``key_tag`` (a number in 1..32767) sets those bits directly instead (a
    :class:`kary_replay.ray.ShardedReplay` gives its shards tags of their own, so that a key
    of another sharded replay is refused). Without either, the tag is drawn at random: a key
    of another buffer is refused unless the two drew the same tag (1 in 32767). The layout
    is the Rust and C keys' generation word, and a checkpoint keeps the tag.

    ``rate_limit`` (a :class:`MinSize`, :class:`SampleToInsertRatio` or :class:`Queue`)
    makes the buffer hold the ratio of sampled to inserted items, as Reverb's tables do:
    ``add``, ``add_batch``, a writer's flush, ``sample`` and ``sample_into`` wait (without
    the GIL; Ctrl-C interrupts them) until they fit, at most ``timeout`` seconds when given
    (then :class:`RateLimitTimeoutError`; ``timeout=0`` never waits:
    :class:`RateLimitedError`), and :meth:`close` wakes every waiter with
    :class:`ClosedError`. ``max_insert`` (default 16: a writer's batch, an ``add_batch``)
    and ``max_sample`` (default 256) are the largest calls it will be asked for: a limit
    under which such calls could wait forever is refused here, saying what would work. A
    refused, timed-out or failed call spends nothing. Checkpoints and pickles keep the
    limit and its counts.

    >>> import kary_replay as kr, numpy as np
    >>> rb = kr.PrioritizedReplayBuffer(
    ...     4096, {"obs": ("float32", (4,))}, rate_limit=kr.SampleToInsertRatio(8.0, min_size=100, error_buffer=200)
    ... )
    >>> rb.sample(32, timeout=0)
    Traceback (most recent call last):
    ...
    kary_replay.errors.RateLimitedError: rate limited: a sample would take the ratio of samples to inserts out of its range
    >>> for _ in range(7):
    ...     _ = rb.add_batch(obs=np.zeros((16, 4), np.float32))
    >>> _ = rb.sample(32)
    >>> rb.rate_stats()["samples"]
    32
    """

    @property
    def rate_limit(self) -> RateLimit | None:
        """The rate limit the buffer holds (a loaded buffer: its checkpoint's), or None."""
        args = self._rate_limit()
        return None if args is None else _rate_from_native(*args[:4])

    def writer(self, batch: int | None = None) -> Writer:
        """A :class:`Writer` that inserts every ``batch`` items (default 64, or the rate
        limit's ``max_insert`` when smaller)."""
        if batch is None:
            limit = self._rate_limit()
            batch = 64 if limit is None else min(64, limit[4])
        return Writer(self._writer(batch))

    def sample(
        self,
        batch_size: int,
        beta: float = 0.4,
        *,
        mode: Mode = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Draw ``batch_size`` items with probability proportional to their priorities
        (``mode`` "stratified": one draw per equal slice of the total; "independent"), with
        importance weights ``(N P(i))^-beta``. Pass one :class:`Rng` per thread. Under a rate
        limit it waits at most ``timeout`` seconds (None: as long as it takes). Returns a
        :class:`Batch`."""
        return Batch(self._sample(batch_size, beta, mode=mode, rng=rng, timeout=timeout))

    def sample_at(self, fractions: npt.ArrayLike, *, rng: Rng | None = None, timeout: float | None = None) -> Batch:
        """One item at each of ``fractions`` (floats in [0, 1)) of this buffer's total: the
        part of a sample of several buffers' union that a :class:`Coordinator` assigned to
        this one. Returns a :class:`Batch` whose ``probabilities`` are this buffer's own,
        whose ``weights`` are all 1 (the coordinator computes the union's), and whose
        ``stats`` are :meth:`stats` with the total the descent used."""
        return Batch(self._sample_at(fractions, rng=rng, timeout=timeout))

    def sample_into(
        self,
        out: Mapping[str, Any],
        batch_size: int,
        beta: float = 0.4,
        *,
        mode: Mode = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> SampleInfo:
        """As :meth:`sample`, but the columns are written into ``out`` (a dict with one
        C-contiguous writable array per column, numpy or torch CPU, of the column's dtype
        and ``(>= batch_size, *shape)``): the rows are copied once, straight from the buffer
        into that memory. Returns a :class:`SampleInfo`."""
        arrays = {name: _as_out(name, v) for name, v in out.items()}
        return SampleInfo(self._sample_into(arrays, batch_size, beta, mode=mode, rng=rng, timeout=timeout))

    def save(
        self, dir: str | os.PathLike[str], *, user: Mapping[str, UserValue] | None = None, keep_last: int = 0
    ) -> None:
        """Save a checkpoint into the new directory ``dir`` (any thread may keep working:
        inserts and priority updates pause for an in-memory copy). ``user``: a dict of small
        values (int, float, bool, str, bytes) kept with it; ``keep_last`` > 0: keep only that
        many numbered checkpoints (:func:`numbered`) beside it."""
        self._save(os.fspath(dir), user=user, keep_last=keep_last)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # The checkpoint's own arrays, out of band with protocol 5.
        return (_unpickle, (self.variant, _checkpoint_files(self._save, protocol)))

    def __repr__(self) -> str:
        limit = "" if self.rate_limit is None else f", rate_limit={self.rate_limit!r}"
        return (
            f"PrioritizedReplayBuffer(len={len(self)}, capacity={self.capacity}, "
            f"variant={self.variant!r}, schema={self.schema!r}{limit})"
        )


class SharedReplayBuffer(PrioritizedReplayBuffer):
    """A :class:`PrioritizedReplayBuffer` that several processes share: its items,
    priorities and tree live in one shared mapping (a file under /dev/shm), so actor
    processes insert into it and learner processes sample it and update its priorities, each
    at the speed of its own process (no GIL between them, no copies through a queue). Every
    byte is reserved at creation: a /dev/shm too small is an :class:`AllocationError` now,
    never a crash later.

    ``name`` names the mapping (letters, digits, ``.``, ``_``, ``-``); without one a unique
    name is made, and the creating object removes it when it is collected or its ``with``
    block ends. A named buffer stays until :meth:`unlink`. The options are those of
    :class:`PrioritizedReplayBuffer` (but ``variant`` and ``shard``: the protocol is the
    lock-free one). A ``rate_limit`` is the buffer's, so one for every process: its counts
    live in the mapping, a call in any process waits for the calls of all of them, and
    :meth:`close` in one process ends the waits of every other.

    Other processes attach to it by name (:meth:`attach`), or get it by pickling: a pickle
    carries the name only, so :mod:`multiprocessing` (fork, spawn, forkserver), a
    ``concurrent.futures.ProcessPoolExecutor`` or a Ray actor on the same node receive the
    same buffer, not a copy. A process that inherits the object by ``fork`` attaches again on
    its first call. A process killed at any point costs at most the items it was inserting:
    the others recover what it held within about 10 ms (:meth:`participants`,
    :meth:`recover`).

    >>> import kary_replay as kr, numpy as np, pickle
    >>> with kr.SharedReplayBuffer(1024, {"obs": ("float32", (4,))}) as rb:
    ...     _ = rb.add_batch(obs=np.ones((8, 4), np.float32))
    ...     other = pickle.loads(pickle.dumps(rb))  # what another process would get
    ...     len(other), other.name == rb.name
    (8, True)
    """

    _owns_name: bool

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
        rate_limit: RateLimit | None = None,
        max_insert: int = 16,
        max_sample: int = 256,
        _from: _Buffer | None = None,
    ) -> "Self":
        if _from is not None:
            self = super().__new__(cls, 0, {}, _from=_from)
            self._owns_name = False
            return self
        made = name is None
        if name is None:
            name = f"kary-replay-{os.getpid()}-{os.urandom(6).hex()}"
        self = super().__new__(
            cls,
            capacity,
            schema,
            alpha=alpha,
            fanout=fanout,
            weight_norm=weight_norm,
            default_priority=default_priority,
            key_tag=key_tag,
            rate_limit=rate_limit,
            max_insert=max_insert,
            max_sample=max_sample,
            variant="shared",
            _shm_name=name,
        )
        self._owns_name = made
        if made:
            weakref.finalize(self, _unlink_quietly, name)
        return self

    @classmethod
    def attach(cls, name: str) -> "SharedReplayBuffer":
        """Attach to the shared buffer named ``name`` (made by this package, any
        language, in this version's layout)."""
        return cls(0, {}, _from=_Buffer._shm_attach(name))

    @property
    def name(self) -> str:
        """The mapping's name (under /dev/shm)."""
        return self._shm_name()

    def unlink(self) -> None:
        """Remove the name: processes that hold the buffer keep using it, no new one can
        attach, and the memory goes when the last holder does."""
        self._shm_unlink()

    def participants(self) -> list[dict[str, Any]]:
        """The processes attached now: ``{"index", "pid", "this_handle"}`` each."""
        return [{"index": i, "pid": pid, "this_handle": me} for i, pid, me in self._shm_participants()]

    def recover(self) -> int:
        """Recover what dead processes held now (each holder's watchdog does it every
        10 ms); returns how many this call recovered."""
        return self._shm_recover()

    @property
    def recovered(self) -> int:
        """Processes recovered over the buffer's life, by any holder."""
        return self._shm_recovered()

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        # The creator of an unnamed buffer removes the name it made; holders keep the buffer.
        if self._owns_name:
            _unlink_quietly(self.name)
        return False

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # The name only: whoever unpickles attaches to the same memory.
        return (SharedReplayBuffer.attach, (self.name,))

    def __repr__(self) -> str:
        return (
            f"SharedReplayBuffer(name={self.name!r}, len={len(self)}, capacity={self.capacity}, schema={self.schema!r})"
        )


def _unlink_quietly(name: str) -> None:
    """Remove a shared buffer's name if it is still there."""
    with contextlib.suppress(OSError):
        os.unlink(os.path.join("/dev/shm", name))


class LaneWriter:
    """The writer of one lane of a :class:`SequenceReplayBuffer` (one per actor or
    vectorized environment; one writer per lane at a time). :meth:`push` appends a step;
    :meth:`end_episode` ends the episode with its final observation. A window becomes
    sampleable as soon as the step after it is written or its episode ends. As a context
    manager it installs what a batch staged and gives the lane back on exit (the episode
    under way goes on with the lane's next writer). The calls release the GIL, but a push of
    a step under 64 KiB (its copy is shorter than a hand-over of the GIL to another thread)."""

    def __init__(self, native: _NativeLane) -> None:
        self._w = native

    def push(self, *, timeout: float | None = None, **step: npt.ArrayLike) -> None:
        """Append one step: every schema column, one item each (``obs=..., action=...,
        reward=...``). The first step after an episode's end starts a new episode. With a
        rate limit, a step that completes a window waits (without the GIL) until the limiter
        admits it, at most ``timeout`` seconds (None: as long as it takes; 0: not at all)."""
        self._w.push(timeout=timeout, **step)

    def end_episode(self, truncated: bool = False, *, timeout: float | None = None, **final_obs: npt.ArrayLike) -> None:
        """End the episode: ``final_obs`` is the true next observation after its last step,
        one array per ``next_of`` column (stored once, where no window starts).
        ``truncated``: cut by a time limit (its windows bootstrap); otherwise it terminated
        (the discount after its last step is 0). With a rate limit, waits as :meth:`push`
        does for the windows it completes."""
        self._w.end_episode(truncated, timeout=timeout, **final_obs)

    def flush(self) -> None:
        """Install the windows a batch staged (see :meth:`set_batch`)."""
        self._w.flush()

    def set_batch(self, windows: int) -> None:
        """Install complete windows in batches of ``windows`` (one tree climb each) instead
        of one by one; :meth:`flush` installs what is staged. Default 1."""
        self._w.set_batch(windows)

    def close(self) -> None:
        """Close the lane: a later push raises :class:`ClosedError`. The windows of an
        episode still under way, which need its next step, never become sampleable."""
        self._w.close()

    @property
    def position(self) -> int:
        """The lane's position in its own timeline (rows skipped to start an episode on a
        window start count)."""
        return self._w.position

    @property
    def lane(self) -> int:
        """The lane's number."""
        return self._w.lane

    @property
    def in_episode(self) -> bool:
        """Whether an episode is under way."""
        return self._w.in_episode

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._w.flush()
        del self._w
        return False


class SequenceReplayBuffer(_SequenceBuffer):
    """Prioritized windows over lanes of steps stored once: n-step returns, sequences (R2D2)
    and stacked frames that never cross an episode.

    ``lanes`` lanes (one per actor or vectorized environment) of ``steps_per_lane`` steps of
    ``schema`` (as :class:`PrioritizedReplayBuffer`'s). An item is a window of ``window``
    steps of one episode starting every ``period`` steps, sampled by priority. Options:

    - ``nstep=(n, gamma, "reward")``: each sample holds ``returns`` (the discounted sum of
      the ``m = min(n, steps left in the episode)`` rewards from each window's start, which
      may reach past the window) and ``discounts`` (``gamma**m``, 0 after a terminal, not
      after a truncation); ``window`` defaults to 1, one transition per item, as DQN uses;
    - ``stack={"obs": 4}``: the column comes out ``(B, W, 4, *shape)``, the 4 frames ending
      at each step, from one stored frame per step; ``padding`` ("repeat": the episode's
      first frame; "zeros") fills the frames before an episode's start;
    - ``next_of=("obs",)``: each sample holds ``next_obs``, the observation ``m`` steps after
      each window's start with ``nstep`` (else right after the window; the episode's final
      observation at its end), with no next-observation column stored;
    - ``partial`` ("keep" or "drop"): what becomes of windows cut short by an episode's end;
    - ``rate_limit=`` (a :mod:`kary_replay.rate` limit), counted in windows: a lane call
      waits for the limiter to admit the windows it completes, a sample for its batch, each
      at most its ``timeout`` (:class:`RateLimitTimeoutError`; ``timeout=0`` never waits:
      :class:`RateLimitedError`); :meth:`close` wakes every waiter with :class:`ClosedError`.
      ``max_sample`` is the largest batch (256); ``max_insert`` defaults to the most windows
      one lane call can complete.

    A sample is a :class:`Batch`: each column ``(B, W, *shape)``, ``mask`` ``(B, W)``,
    ``lengths``, ``keys``, ``weights``, ``probabilities``, ``priorities``, plus the entries
    above. Windows are retired before any step they read is overwritten, so a window never
    holds a step of another episode or an overwritten one.

    >>> import numpy as np, kary_replay as kr
    >>> rb = kr.SequenceReplayBuffer(
    ...     2, 1024, {"obs": ("float32", (4,)), "action": ("int64", ()), "reward": ("float32", ())},
    ...     nstep=(3, 0.99, "reward"), next_of=("obs",))
    >>> lane = rb.lane(0)
    >>> for t in range(5):
    ...     lane.push(obs=np.full(4, t, np.float32), action=t, reward=1.0)
    >>> lane.end_episode(obs=np.full(4, 5, np.float32))
    >>> b = rb.sample(8, rng=kr.Rng(1))
    >>> b["obs"].shape, b["next_obs"].shape, b["mask"].shape, b.returns.dtype
    ((8, 1, 4), (8, 4), (8, 1), dtype('float32'))
    >>> rb.update_priorities(b["keys"], np.abs(b.returns) + 0.1)
    (8, 0)
    """

    def lane(self, lane: int) -> LaneWriter:
        """The writer of lane ``lane``; :class:`InvalidArgumentError` while another writer
        holds it."""
        return LaneWriter(self._lane(lane))

    @property
    def rate_limit(self) -> RateLimit | None:
        """The rate limit the buffer holds, in windows (a loaded buffer: its checkpoint's),
        or None."""
        args = self._rate_limit()
        return None if args is None else _rate_from_native(*args[:4])

    def sample(
        self,
        batch_size: int,
        beta: float = 0.4,
        *,
        mode: Mode = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Draw ``batch_size`` windows with probability proportional to their priorities;
        returns a :class:`Batch` (new arrays). :class:`EmptyBufferError` when no window is
        sampleable yet, unless there is a rate limit: then it waits at most ``timeout``
        seconds for the limiter and the first window."""
        return Batch(self._sample(batch_size, beta, mode=mode, rng=rng, timeout=timeout))

    def sample_at(self, fractions: npt.ArrayLike, *, rng: Rng | None = None, timeout: float | None = None) -> Batch:
        """One window at each of ``fractions`` (floats in [0, 1)) of this buffer's total: the
        part of a sample of several buffers' union that a :class:`Coordinator` assigned to
        this one (:class:`kary_replay.ray.ShardedSequenceReplay` samples its shards so). A
        :class:`Batch` as :meth:`sample` returns it, whose ``probabilities`` are this
        buffer's own, whose ``weights`` are all 1 (the coordinator computes the union's),
        and whose ``stats`` are :meth:`stats` with the total the descent used."""
        return Batch(self._sample_at(fractions, rng=rng, timeout=timeout))

    def sample_into(
        self,
        out: Mapping[str, Any],
        batch_size: int,
        beta: float = 0.4,
        *,
        mode: Mode = "stratified",
        rng: Rng | None = None,
        timeout: float | None = None,
    ) -> SampleInfo:
        """As :meth:`sample`, but the columns and next observations are written into
        ``out``: one C-contiguous writable array (numpy or torch CPU) per column, of shape
        ``(>= batch_size, W, [k,] *shape)``, and per ``next_of`` column under
        ``next_<column>``, ``(>= batch_size, [k,] *shape)``. A learner that reuses its arrays
        allocates nothing per batch but the small metadata arrays. Returns a
        :class:`SampleInfo` (keys, weights, mask, lengths, returns, ...)."""
        arrays = {name: _as_out(name, v) for name, v in out.items()}
        return SampleInfo(self._sample_into(arrays, batch_size, beta, mode=mode, rng=rng, timeout=timeout))

    def save(
        self, dir: str | os.PathLike[str], *, user: Mapping[str, UserValue] | None = None, keep_last: int = 0
    ) -> None:
        """Save a sequence checkpoint into the new directory ``dir`` while lane writers,
        samplers and updaters run (each lane's writer and the priority updates pause for an
        in-memory copy; windows a writer staged are installed first). ``user``: a dict of
        small values kept with it; ``keep_last`` > 0: keep only that many numbered
        checkpoints (:func:`numbered`) beside it. The steps are numpy files of shape
        ``(lanes, steps_per_lane, *shape)`` (``docs/checkpoint.md``)."""
        self._save(os.fspath(dir), user=user, keep_last=keep_last)

    @overload
    @classmethod
    def load(cls, dir: str | os.PathLike[str], *, with_user: Literal[False] = False) -> "SequenceReplayBuffer": ...
    @overload
    @classmethod
    def load(
        cls, dir: str | os.PathLike[str], *, with_user: Literal[True]
    ) -> "tuple[SequenceReplayBuffer, dict[str, UserValue]]": ...
    @classmethod
    def load(
        cls, dir: str | os.PathLike[str], *, with_user: bool = False
    ) -> "SequenceReplayBuffer | tuple[SequenceReplayBuffer, dict[str, UserValue]]":
        """Load the sequence checkpoint at ``dir``: every lane where it stood (an episode
        under way goes on with the lane's next writer; a closed lane stays closed), every
        window, priority and key as saved. With ``with_user=True`` returns
        ``(buffer, user_dict)``."""
        native, user = _SequenceBuffer._load(os.fspath(dir))
        buffer = cls(0, 0, {}, _from=native)
        return (buffer, user) if with_user else buffer

    @staticmethod
    def verify(dir: str | os.PathLike[str]) -> dict[str, int]:
        """Check the sequence checkpoint at ``dir`` whole (every file's CRC, every field), as
        :meth:`load` does, without building a buffer (one column in memory at a time).
        Returns its ``lanes``, ``steps_per_lane``, ``window`` and ``capacity``; a
        :class:`CheckpointError` says what is wrong."""
        return _SequenceBuffer._verify(os.fspath(dir))

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (_unpickle_sequence, (_checkpoint_files(self._save, protocol),))

    def __repr__(self) -> str:
        return (
            f"SequenceReplayBuffer(lanes={self.lanes}, windows={len(self)}/{self.capacity}, "
            f"window={self.window}, steps_written={self.steps_written})"
        )


def _scratch() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _checkpoint_files(save: Callable[[str], None], protocol: Any) -> dict[str, pickle.PickleBuffer | bytes]:
    """The files of a checkpoint that ``save(path)`` writes, as a pickle carries them (out of
    band with protocol 5)."""
    tmp = tempfile.mkdtemp(prefix="kary-replay-pickle-", dir=_scratch())
    try:
        path = os.path.join(tmp, "ckpt")
        save(path)
        files: dict[str, pickle.PickleBuffer | bytes] = {}
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
            files[name] = pickle.PickleBuffer(data) if protocol >= 5 else data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files


def _from_files(files: Mapping[str, Any], load: Callable[[str], _T]) -> _T:
    """``load(path)`` of the checkpoint whose files a pickle carried."""
    tmp = tempfile.mkdtemp(prefix="kary-replay-pickle-", dir=_scratch())
    try:
        path = os.path.join(tmp, "ckpt")
        os.mkdir(path)
        for name, data in files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(memoryview(data))
        return load(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpickle(variant: Variant, files: Mapping[str, Any]) -> PrioritizedReplayBuffer:
    return _from_files(files, lambda path: load(path, variant=variant))


def _unpickle_sequence(files: Mapping[str, Any]) -> SequenceReplayBuffer:
    return _from_files(files, SequenceReplayBuffer.load)


@overload
def load(
    dir: str | os.PathLike[str], *, variant: Variant = "split", with_user: Literal[False] = False
) -> PrioritizedReplayBuffer: ...
@overload
def load(
    dir: str | os.PathLike[str], *, variant: Variant = "split", with_user: Literal[True]
) -> tuple[PrioritizedReplayBuffer, dict[str, UserValue]]: ...
def load(
    dir: str | os.PathLike[str], *, variant: Variant = "split", with_user: bool = False
) -> PrioritizedReplayBuffer | tuple[PrioritizedReplayBuffer, dict[str, UserValue]]:
    """Load the checkpoint at ``dir`` (saved by any variant, from any language) into a new
    :class:`PrioritizedReplayBuffer` of ``variant``: items, priorities (bit for bit), keys,
    the FIFO cursor and the running maximum as saved. With ``with_user=True`` returns
    ``(buffer, user_dict)``."""
    native, user = _Buffer._load(os.fspath(dir), variant=variant)
    buffer = PrioritizedReplayBuffer(0, {}, _from=native)
    return (buffer, user) if with_user else buffer


__all__ = [
    "AllocationError",
    "Batch",
    "CheckpointError",
    "CheckpointReport",
    "ClosedError",
    "Consistency",
    "ContentionError",
    "Coordinator",
    "EmptyBufferError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidPriorityError",
    "KaryReplayError",
    "LaneWriter",
    "MinSize",
    "Mode",
    "PrioritizedReplayBuffer",
    "Queue",
    "RateLimit",
    "RateLimitTimeoutError",
    "RateLimitedError",
    "RateLimiter",
    "RateStats",
    "Rng",
    "SampleInfo",
    "SampleToInsertRatio",
    "SchemaError",
    "SequenceReplayBuffer",
    "ShardUnavailableError",
    "SharedBufferError",
    "SharedReplayBuffer",
    "Stats",
    "SumTree",
    "UserValue",
    "Variant",
    "Writer",
    "errors",
    "latest",
    "load",
    "numbered",
    "sequence_priorities",
    "verify",
]
