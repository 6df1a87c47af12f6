"""Windows over lanes of steps: :class:`SequenceReplayBuffer` and its :class:`LaneWriter`,
and :class:`SharedSequenceReplayBuffer`, the one several processes share."""

import os
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy.typing as npt

from ._batch import Batch, Mode, SampleInfo, _as_out
from ._flat import _unlink_quietly
from ._native import (
    NativeLane as _NativeLane,
    Rng,
    SequenceBuffer as _SequenceBuffer,
    SharedSequenceBuffer as _SharedSequenceBuffer,
)
from ._pickle import _checkpoint_files, _from_files
from .rate import RateLimit, _from_native as _rate_from_native
from .types import UserValue

if TYPE_CHECKING:
    from typing_extensions import Self


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

    def push_steps(self, **steps: npt.ArrayLike) -> int:
        """Append ``n`` steps in order, one call: every schema column ``(n, *shape)`` (a
        chunk of an actor's steps, with the GIL released for all of them); returns ``n``.
        Bad columns change nothing; with a rate limit each step waits as :meth:`push` does
        (as long as it takes)."""
        return self._w.push_steps(**steps)

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

    def windows_completed_by(self, steps: int, end: bool = False) -> int:
        """The windows that ``steps`` more pushes, then an :meth:`end_episode` if ``end``,
        would complete (those a rate limit counts for them), computed without writing: what
        a writer that admits a chunk of steps at once asks a limiter for."""
        return self._w.windows_completed_by(steps, end)

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
        """Draw ``batch_size`` windows with probability proportional to their priorities
        (``mode`` as for the flat buffer's: "without_replacement" draws no window twice);
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


def _unpickle_sequence(files: Mapping[str, Any]) -> SequenceReplayBuffer:
    return _from_files(files, SequenceReplayBuffer.load)


class SharedSequenceReplayBuffer(_SharedSequenceBuffer, SequenceReplayBuffer):
    """A :class:`SequenceReplayBuffer` that several processes share: its lanes, windows and
    tree live in one shared mapping (a file under /dev/shm), so actor processes write lanes
    (one writer per lane across every process) and learner processes sample windows and
    update their priorities, each at the speed of its own process. Every byte is reserved
    at creation: a /dev/shm too small is an :class:`AllocationError` now, never a crash
    later.

    ``name`` names the mapping as for :class:`SharedReplayBuffer` (without one a unique name
    is made and removed with the creating object); the options are those of
    :class:`SequenceReplayBuffer`. Each window is installed as soon as it completes
    (:meth:`LaneWriter.set_batch` above 1 is refused). Other processes attach by name
    (:meth:`attach`) or by pickling (a pickle carries the name only). An actor process
    killed at any point costs the step it was writing and the windows of its episode that
    still waited for later steps: the others recover its lane within about 10 ms
    (:meth:`recover` does it at once), no window that reads a half-written step is ever
    handed out, and the lane takes a new writer.

    >>> import kary_replay as kr, numpy as np, pickle
    >>> schema = {"obs": ("float32", (4,)), "reward": ("float32", ())}
    >>> with kr.SharedSequenceReplayBuffer(2, 256, schema, nstep=(3, 0.9, "reward")) as rb:
    ...     actor_view = pickle.loads(pickle.dumps(rb))  # what an actor process would get
    ...     with actor_view.lane(0) as lane:
    ...         for t in range(5):
    ...             lane.push(obs=np.full(4, t, np.float32), reward=1.0)
    ...     len(rb), rb.sample(4, rng=kr.Rng(1))["obs"].shape
    (2, (4, 1, 4))
    """

    _owns_name: bool

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
        rate_limit: RateLimit | None = None,
        max_insert: int | None = None,
        max_sample: int = 256,
        _from: _SharedSequenceBuffer | None = None,
    ) -> "Self":
        if _from is not None:
            self = super().__new__(cls, 0, 0, {}, _from=_from)
            self._owns_name = False
            return self
        made = name is None
        if name is None:
            name = f"kary-replay-seq-{os.getpid()}-{os.urandom(6).hex()}"
        self = super().__new__(
            cls,
            lanes,
            steps_per_lane,
            schema,
            name,
            window=window,
            period=period,
            partial=partial,
            nstep=nstep,
            stack=stack,
            padding=padding,
            next_of=next_of,
            alpha=alpha,
            fanout=fanout,
            weight_norm=weight_norm,
            key_tag=key_tag,
            rate_limit=rate_limit,
            max_insert=max_insert,
            max_sample=max_sample,
        )
        self._owns_name = made
        if made:
            weakref.finalize(self, _unlink_quietly, name)
        return self

    @classmethod
    def attach(cls, name: str) -> "SharedSequenceReplayBuffer":
        """Attach to the shared sequence buffer named ``name`` (made by this package, any
        language, in this version's layout)."""
        return cls(0, 0, {}, _from=_SharedSequenceBuffer._attach(name))

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
        return (SharedSequenceReplayBuffer.attach, (self.name,))

    def __repr__(self) -> str:
        return (
            f"SharedSequenceReplayBuffer(name={self.name!r}, lanes={self.lanes}, "
            f"windows={len(self)}/{self.capacity}, window={self.window})"
        )
