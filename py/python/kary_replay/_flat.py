"""The flat buffer: :class:`PrioritizedReplayBuffer`, its staged :class:`Writer`,
:func:`load`, and :class:`SharedReplayBuffer`, the one several processes share."""

import contextlib
import os
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import numpy.typing as npt

from ._batch import Batch, Mode, SampleInfo, Variant, _as_out
from ._native import Buffer as _Buffer, NativeWriter as _NativeWriter, Rng, SharedBuffer as _SharedBuffer
from ._pickle import _checkpoint_files, _from_files
from .errors import ClosedError
from .rate import RateLimit, _from_native as _rate_from_native
from .types import UserValue

if TYPE_CHECKING:
    from typing_extensions import Self


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

    ``max_times_sampled=k`` (Reverb's setting; 0, the default, is no limit; at most 511)
    deletes each item once ``k`` of its draws reached callers, however many threads or
    processes sample at once; a draw past the ``k``-th is drawn again elsewhere, and a call
    that fails consumes nothing. A batch needs as many draws as its size: when the items
    left cannot give them, ``sample`` raises :class:`ContentionError`. ``variant="global"``
    refuses it. Checkpoints and pickles keep the setting and each item's draws delivered so
    far. With ``rate_limit=Queue(size)`` (an IMPALA-style queue), ``size +
    max_sample`` must not exceed ``capacity`` (one more ``max_sample`` for each further
    sampler thread), so that inserts admitted while a sample runs never evict items not
    handed out yet.

    ``version_column="name"`` names an int64 scalar column holding the version of the policy
    that produced each item (an async-RL staleness window): :meth:`retire_before` then
    retires every item older than a version, exactly, while actors insert and learners
    sample; an insert of an older item raises :class:`InvalidArgumentError` and inserts
    nothing. ``version_floor`` is the floor reached. Checkpoints and pickles keep the column
    and the floor; ``clear`` keeps the floor.

    ``max_heap=True`` keeps, in each tree node, the largest priority below it, so that
    ``sample(mode="max_heap")`` finds the largest priorities in O(K log n); without it (the
    default) that mode raises :class:`InvalidArgumentError`, unless
    ``default_priority="live_max"``, which keeps them anyway. Every priority write pays for
    it (about 1.4x an update on the lock-free variant); ``mode="min_heap"``
    needs nothing. Checkpoints and pickles keep the setting.

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

    A policy-version window:

    >>> rb = kr.PrioritizedReplayBuffer(64, {"obs": ("float32", ()), "v": ("int64", ())}, version_column="v")
    >>> _ = rb.add_batch(obs=np.zeros(4, np.float32), v=np.array([1, 2, 3, 4]))
    >>> rb.retire_before(3), len(rb), rb.version_floor
    (2, 2, 3)
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
        (``mode`` "stratified": one draw per equal slice of the total; "independent";
        "without_replacement": no item twice in the batch, each draw proportional among the
        items not drawn yet, its ``probabilities`` the conditional ones; "uniform": every
        item equally likely whatever its priority, weights 1), with importance weights
        ``(N P(i))^-beta``. Pass one :class:`Rng` per thread. Under a rate
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


class SharedReplayBuffer(_SharedBuffer, PrioritizedReplayBuffer):
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
        max_times_sampled: int = 0,
        version_column: str | None = None,
        max_heap: bool = False,
        _from: _SharedBuffer | None = None,
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
            name,
            alpha=alpha,
            fanout=fanout,
            weight_norm=weight_norm,
            default_priority=default_priority,
            key_tag=key_tag,
            rate_limit=rate_limit,
            max_insert=max_insert,
            max_sample=max_sample,
            max_times_sampled=max_times_sampled,
            version_column=version_column,
            max_heap=max_heap,
        )
        self._owns_name = made
        if made:
            weakref.finalize(self, _unlink_quietly, name)
        return self

    @classmethod
    def attach(cls, name: str) -> "SharedReplayBuffer":
        """Attach to the shared buffer named ``name`` (made by this package, any
        language, in this version's layout)."""
        return cls(0, {}, _from=_SharedBuffer._attach(name))

    def unlink(self) -> None:
        """Remove the name: processes that hold the buffer keep using it, no new one can
        attach, and the memory goes when the last holder does."""
        self._unlink()

    def participants(self) -> list[dict[str, Any]]:
        """The processes attached now: ``{"index", "pid", "this_handle"}`` each."""
        return [{"index": i, "pid": pid, "this_handle": me} for i, pid, me in self._participants()]

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


def _unpickle(variant: Variant, files: Mapping[str, Any]) -> PrioritizedReplayBuffer:
    return _from_files(files, lambda path: load(path, variant=variant))


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
