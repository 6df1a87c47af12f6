"""Shards of one prioritized replay buffer as Ray actors, sampled exactly as one buffer.

``pip install "kary-replay[ray]"``. A :class:`ShardedReplay` starts S :class:`ReplayShard`
actors (one buffer each, on any nodes of the cluster) and offers the buffer's API:

- :meth:`ShardedReplay.add_batch` inserts into a chosen shard, or a shard on the caller's
  node (so actors on a node write to their node's memory);
- :meth:`ShardedReplay.sample` samples the union exactly: it reads every shard's stats,
  plans B draws over the union with a :class:`kary_replay.Coordinator`, and each shard
  descends at its fractions of its own total. ``P(j) = (T_k / T) (p_j / T_k')``: with no
  insert or update between the two steps that is ``p_j / T``, one buffer holding the union;
  with some, it is still the probability with which draw j chose its item, so the importance
  weights stay unbiased. ``one_round_trip=True`` plans from the stats the shards sent with
  their last replies (refreshed each sample) instead of asking first: one round trip per
  batch instead of two, the same unbiased weights, a plan that may lag by one batch;
- :meth:`ShardedReplay.update_priorities` routes each key to its shard by its top bits (a
  shard's keys carry its tag above their 48-bit generation: ``key_tags[k]``, one of S
  consecutive tags that start at a random place, so each sharded replay has its own and a
  key of another is refused unless its tag falls among this replay's S: a chance of at most
  S in 32767). Fire-and-forget by default; with ``wait=True`` every shard's part is checked
  before any applies, so a refused update changes nothing;
- at most ``max_in_flight`` fire-and-forget calls are in flight: the next one waits for the
  oldest, so the object store cannot fill with unread replies;
- :meth:`ShardedReplay.save` writes one checkpoint per shard, then a manifest and a
  COMMIT file; :meth:`ShardedReplay.restore` starts the shards again from it, with every
  key still valid; :meth:`ShardedReplay.restart_shard` brings back one shard.

With ``rate_limit=`` the union holds one rate limit (the ratio of sampled to inserted
items, as :class:`kary_replay.PrioritizedReplayBuffer` holds it): one
:class:`RateLimiterActor` shared by every copy of the client admits each ``add_batch``
(before its shard runs it: the shard call waits on the admission inside Ray, so the client
makes no extra round trip) and each ``sample`` (before its plan); :meth:`ShardedReplay.close`
wakes every waiter with :class:`kary_replay.errors.ClosedError`, and a sharded checkpoint
keeps the counts.

A shard whose actor died raises :class:`kary_replay.errors.ShardUnavailableError` naming
it. With ``on_failure="skip"``, sampling goes on over the other shards instead (the batch's
``skipped`` lists the shards left out, and a warning says so once per shard); inserts into
and updates for a dead shard still raise.

Checkpoints are written by the shards' actors, so ``dir`` must be a path every node can
reach (one machine, or a shared file system).
"""

import collections
import contextlib
import itertools
import json
import math
import os
import secrets
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict

import numpy as np
import numpy.typing as npt
import ray
import ray.exceptions

from . import (
    Batch,
    Coordinator,
    LaneWriter,
    Mode,
    PrioritizedReplayBuffer,
    Rng,
    SequenceReplayBuffer,
    Variant,
    load,
    verify,
)
from ._native import _read_sharded_manifest, _write_sharded_manifest
from .errors import (
    CheckpointError,
    ClosedError,
    EmptyBufferError,
    InvalidArgumentError,
    InvalidKeyError,
    RateLimitedError,
    RateLimitTimeoutError,
    SchemaError,
    ShardUnavailableError,
)
from .rate import RateLimit, RateLimiter, _from_native, _native_args
from .types import Consistency, RateStats, Stats

if TYPE_CHECKING:
    from typing_extensions import Self

#: A buffer's schema, as :class:`kary_replay.PrioritizedReplayBuffer` takes it.
Schema: TypeAlias = Mapping[str, Any]
#: Keys as the shards hand them out.
Keys: TypeAlias = npt.NDArray[np.uint64]


class Options(TypedDict):
    """The buffer options every shard is made with."""

    alpha: float
    fanout: int
    variant: Variant
    weight_norm: Literal["global", "batch"]
    default_priority: Literal["running_max", "live_max"]
    version_column: str | None


#: A submitted group: its coordinators, each shard's call, the stats it was planned from.
_Pending: TypeAlias = tuple[list[Coordinator], dict[int, Any], list[Stats]]

#: A sharded checkpoint's format: its manifest's ``format``, and the first words of its COMMIT.
FORMAT = "kary-replay sharded checkpoint v1"
_GENERATION_BITS = 48
#: Tags are 1..=_TAGS (15 bits: keys stay below 2^63, torch's int64 holds them).
_TAGS = 0x7FFF
_EMPTY = np.empty(0)
#: A shard's reply entries that are not joined into the union's batch: the union's own.
_UNION_ENTRIES = ("stats", "probabilities", "weights")


def _shard_dir(dir: str, k: int) -> str:
    return os.path.join(dir, f"shard-{k:05d}")


class _ShardActor:
    """What every shard's actor serves: its stats, its part of a union's sample, routed
    updates, saves and checks. Its methods may run concurrently (``max_concurrency``): the
    buffer is thread-safe and each call releases the GIL while it works."""

    rb: Any

    @staticmethod
    def _check_tag(restore: str, rb: Any, shard: int, tag: int) -> None:
        if rb.key_tag != tag:
            raise CheckpointError(
                f"{restore}: the checkpoint's keys carry tag {rb.key_tag}, not shard {shard}'s ({tag})"
            )

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def stats(self) -> Stats:
        stats: Stats = self.rb.stats()
        return stats

    def sample_at(self, fractions: npt.ArrayLike) -> dict[str, Any]:
        return dict(self.rb.sample_at(fractions))

    def sample_at_many(self, fraction_lists: list[npt.NDArray[np.float64]]) -> list[dict[str, Any] | None]:
        """One :meth:`sample_at` per list (None for an empty one), in one call."""
        return [dict(self.rb.sample_at(f)) if len(f) else None for f in fraction_lists]

    def update_priorities(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> tuple[int, int]:
        applied: tuple[int, int] = self.rb.update_priorities(keys, priorities)
        return applied

    def check_update(self, keys: npt.ArrayLike, priorities: npt.ArrayLike) -> None:
        self.rb.check_update(keys, priorities)

    def save(self, dir: str) -> Stats:
        self.rb.save(dir)
        return self.stats()

    def consistency(self) -> Consistency:
        consistency: Consistency = self.rb.consistency()
        return consistency


class ReplayShard(_ShardActor):
    """One shard: a :class:`kary_replay.PrioritizedReplayBuffer` made with
    ``key_tag=tag``, in a Ray actor (``ray.remote(ReplayShard)``; :class:`ShardedReplay`
    starts them)."""

    def __init__(
        self, shard: int, tag: int, capacity: int, schema: Schema, options: Options, restore: str | None = None
    ) -> None:
        self.shard = shard
        if restore is not None:
            self.rb = load(restore, variant=options.get("variant", "split"))
            self._check_tag(restore, self.rb, shard, tag)
        else:
            self.rb = PrioritizedReplayBuffer(capacity, schema, key_tag=tag, **options)

    def add_batch(
        self, priorities: npt.ArrayLike | None, columns: Mapping[str, npt.ArrayLike], admitted: None = None
    ) -> Keys:
        """Insert a batch; ``admitted`` is the union limiter's admission, which Ray resolved
        before this call ran (an admission that failed fails this call with its error)."""
        # Column names never collide with add_batch's keywords (the schema refuses them).
        cols: Mapping[str, Any] = columns
        keys: Keys = self.rb.add_batch(priorities, **cols)
        return keys

    def sample(self, batch_size: int, beta: float, mode: Mode) -> dict[str, Any]:
        return dict(self.rb.sample(batch_size, beta, mode=mode))

    def stored_keys(self) -> Keys:
        """The key of every item stored now (an O(capacity) walk over the slots, for checks)."""
        keys = (self.rb.key(i) for i in range(self.rb.capacity))
        return np.array([k for k in keys if k is not None], np.uint64)

    def check_keys(self, keys: npt.ArrayLike) -> None:
        """Raise what :meth:`delete` would for ``keys`` (a key this shard never handed out),
        changing nothing."""
        self.rb.priorities_of(keys)

    def delete(self, keys: npt.ArrayLike) -> tuple[int, int]:
        deleted: tuple[int, int] = self.rb.delete(keys)
        return deleted

    def check_write_back(self, keys: npt.ArrayLike, columns: Mapping[str, np.ndarray]) -> None:
        """Raise what :meth:`write_back` would for ``keys`` and ``columns`` (a key this shard
        never handed out; a column that is not in the schema, or of another dtype or row
        shape), writing nothing: the columns' checks run on none of their rows."""
        self.rb.priorities_of(keys)
        empty: Mapping[str, Any] = {name: rows[:0] for name, rows in columns.items()}
        self.rb.write_back(np.zeros(0, np.uint64), **empty)

    def write_back(self, keys: npt.ArrayLike, columns: Mapping[str, np.ndarray]) -> tuple[int, int]:
        cols: Mapping[str, Any] = columns
        written: tuple[int, int] = self.rb.write_back(keys, **cols)
        return written

    def retire_before(self, version: int) -> int:
        retired: int = self.rb.retire_before(version)
        return retired

    def set_alpha(self, alpha: float) -> None:
        self.rb.set_alpha(alpha)


class SequenceShard(_ShardActor):
    """One shard of a :class:`ShardedSequenceReplay`: a
    :class:`kary_replay.SequenceReplayBuffer` made with ``key_tag=tag``, in a Ray actor.
    Its lanes are written by :class:`RemoteLane` handles: :meth:`open_lane` hands a lane to
    one writer with a token that each of the writer's calls carries, so a handle that gave
    its lane back, or one of before a restart, is refused rather than interleaved."""

    def __init__(
        self,
        shard: int,
        tag: int,
        lanes: int,
        steps_per_lane: int,
        schema: Schema,
        options: Mapping[str, Any],
        restore: str | None = None,
    ) -> None:
        self.shard = shard
        if restore is not None:
            self.rb = SequenceReplayBuffer.load(restore)
            self._check_tag(restore, self.rb, shard, tag)
        else:
            self.rb = SequenceReplayBuffer(lanes, steps_per_lane, schema, key_tag=tag, **options)
        self._writers: dict[int, tuple[int, LaneWriter]] = {}
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)

    def open_lane(self, lane: int | None) -> tuple[int, int]:
        """Hand lane ``lane`` (None: the first one no writer holds) to a new writer: returns
        ``(lane, token)``. :class:`InvalidArgumentError` when it is held or none is free."""
        with self._lock:
            if lane is None:
                lane = next((n for n in range(self.rb.lanes) if n not in self._writers), None)
                if lane is None:
                    raise InvalidArgumentError(f"shard {self.shard}: all its {self.rb.lanes} lanes are held by writers")
            elif lane in self._writers:
                raise InvalidArgumentError(f"lane {lane} of shard {self.shard} is held by another writer")
            writer = self.rb.lane(lane)
            token = next(self._tokens)
            self._writers[lane] = (token, writer)
            return lane, token

    def _writer(self, lane: int, token: int) -> LaneWriter:
        held = self._writers.get(lane)
        if held is None or held[0] != token:
            raise InvalidArgumentError(
                f"lane {lane} of shard {self.shard}: this writer no longer holds it "
                "(it gave the lane back, or the shard was restarted)"
            )
        return held[1]

    def write(
        self,
        lane: int,
        token: int,
        steps: Mapping[str, npt.NDArray[Any]],
        end: tuple[bool, Mapping[str, npt.NDArray[Any]]] | None,
        limiter: Any = None,
        timeout: float | None = None,
    ) -> int:
        """Push the steps (each column ``(n, *shape)``) in order, then end the episode if
        ``end`` says so (``(truncated, final_obs)``); returns the lane's position. With the
        union's ``limiter`` (its actor), the windows they complete are admitted first,
        waiting at most ``timeout``: a refusal writes nothing. A bad step raises its error;
        the steps before it stay written, as separate pushes would."""
        writer = self._writer(lane, token)
        n = _rows(steps) if steps else 0
        if limiter is not None:
            windows = writer.windows_completed_by(n, end is not None)
            if windows:
                _limiter_result(limiter.insert.remote(windows, timeout))
        if n:
            cols: Mapping[str, Any] = steps
            writer.push_steps(**cols)
        if end is not None:
            truncated, final_obs = end
            obs: Mapping[str, Any] = final_obs  # next_of names are columns: never "timeout"
            writer.end_episode(truncated, **obs)
        return writer.position

    def release_lane(self, lane: int, token: int, close: bool) -> None:
        """Give the lane back (its episode under way goes on with the lane's next writer), or
        with ``close`` close it for good."""
        with self._lock:
            writer = self._writer(lane, token)
            del self._writers[lane]
        if close:
            writer.close()
        else:
            writer.flush()


class RateLimiterActor:
    """The rate limiter of a :class:`ShardedReplay`'s union, in a Ray actor
    (``ray.remote(RateLimiterActor)``; the replay starts it): one
    :class:`kary_replay.RateLimiter` that every client copy admits through. A threaded actor:
    each waiting call holds one of its ``max_concurrency`` threads, without the GIL."""

    def __init__(
        self, limit: RateLimit, max_insert: int, max_sample: int, counts: tuple[int, int] | None = None
    ) -> None:
        self.limiter = RateLimiter(limit, max_insert=max_insert, max_sample=max_sample, counts=counts)

    def insert(self, n: int, timeout: float | None) -> None:
        self.limiter.insert(n, timeout)

    def sample(self, n: int, timeout: float | None) -> None:
        self.limiter.sample(n, timeout)

    def close(self) -> None:
        self.limiter.close()

    def stats(self) -> RateStats:
        return self.limiter.stats()


class _ShardSet:
    """What every sharded replay shares: its shards' actors, the calls in flight and
    their failures, the exact sample of the union, routed updates, checkpoints and the
    union's rate limit. :class:`ShardedReplay` (flat items) and
    :class:`ShardedSequenceReplay` (windows over lanes) are its two families."""

    #: The shards' class (run as Ray actors).
    _shard_class: type
    #: The manifest's ``kind``: which family a sharded checkpoint holds.
    _kind: str
    num_shards: int
    capacity: int
    schema: dict[str, tuple[str, tuple[int, ...]]]
    options: Mapping[str, Any]
    rate_limit: RateLimit | None = None
    max_insert: int = 16
    max_sample: int = 256
    _limiter: Any = None

    @staticmethod
    def _check(num_shards: Any, on_failure: Any, max_in_flight: Any, nodes: Sequence[str] | None) -> None:
        """The arguments every family takes, checked before any actor starts."""
        if not isinstance(num_shards, int) or not 1 <= num_shards <= 0x7FFF:
            raise InvalidArgumentError(f"num_shards is a number in 1..32767, got {num_shards!r}")
        if on_failure not in ("raise", "skip"):
            raise InvalidArgumentError(f"on_failure is 'raise' or 'skip', got {on_failure!r}")
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise InvalidArgumentError(f"max_in_flight is a number >= 1, got {max_in_flight!r}")
        if nodes is not None and len(nodes) != num_shards:
            raise InvalidArgumentError(f"nodes: one node id per shard ({num_shards}), got {len(nodes)}")

    def _setup(
        self,
        *,
        nodes: Sequence[str] | None,
        max_in_flight: int,
        on_failure: Literal["raise", "skip"],
        max_concurrency: int,
        actor_options: Mapping[str, Any] | None,
        restore: str | None,
        key_base: int | None,
    ) -> None:
        """Start the shards (``num_shards``, ``capacity``, ``schema`` and ``options`` are set);
        if one fails to start, the ones started are killed and its error is raised."""
        self.max_in_flight = max_in_flight
        self.on_failure = on_failure
        self._actor_options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": max_concurrency}
        self._actor_options.update(actor_options or {})
        self._nodes = list(nodes) if nodes is not None else None
        # Where this replay's tags start: shard k's keys carry 1 + (base + k) % _TAGS.
        self._key_base = secrets.randbelow(_TAGS) if key_base is None else int(key_base)
        self.key_tags = [1 + (self._key_base + k) % _TAGS for k in range(self.num_shards)]
        self._dead: set[int] = set()
        self._actors: list[Any] = []
        try:
            for k in range(self.num_shards):
                self._actors.append(self._start(k, restore and _shard_dir(restore, k)))
            self.node_ids = [self._get(a.node_id.remote(), k) for k, a in enumerate(self._actors)]
        except BaseException:
            for a in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(a)
            if self._limiter is not None:
                with contextlib.suppress(Exception):
                    ray.kill(self._limiter)
            raise
        self._local_state()

    def _start_limiter(
        self,
        rate_limit: RateLimit | None,
        max_insert: int,
        max_sample: int,
        max_waiters: int,
        counts: tuple[int, int] | None,
    ) -> None:
        """The union's limiter's actor, when there is a limit (checked here first: a refused
        limit says why before any actor starts)."""
        self.rate_limit = rate_limit
        self.max_insert, self.max_sample = max_insert, max_sample
        if rate_limit is not None:
            RateLimiter(rate_limit, max_insert=max_insert, max_sample=max_sample, counts=counts)
            cls = ray.remote(RateLimiterActor).options(num_cpus=0, max_concurrency=max_waiters)
            self._limiter = cls.remote(rate_limit, max_insert, max_sample, counts)

    def _shard_args(self) -> tuple[Any, ...]:
        """What a shard's constructor takes after its number and tag, before ``restore``."""
        raise NotImplementedError

    def _manifest_fields(self) -> dict[str, Any]:
        """The fields a sharded manifest keeps to start this family's shards again."""
        raise NotImplementedError

    @staticmethod
    def _verify_shard(dir: str) -> None:
        """Check a shard's checkpoint whole before an actor loads it."""
        raise NotImplementedError

    def _local_state(self) -> None:
        self._coordinator = Coordinator()
        self._in_flight: collections.deque[tuple[Any, int]] = collections.deque()
        self._cached: list[Stats] | None = None
        self._dead = set()
        self._warned: set[int] = set()
        self._round_robin = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_coordinator", "_in_flight", "_cached", "_dead", "_warned", "_round_robin"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local_state()

    def _start(self, k: int, restore: str | None = None) -> Any:
        options = dict(self._actor_options)
        if self._nodes is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self._nodes[k], soft=False)
        cls: Any = ray.remote(self._shard_class).options(**options)
        return cls.remote(k, self.key_tags[k], *self._shard_args(), restore)

    @property
    def shards(self) -> list[Any]:
        """The shards' actor handles, in shard order."""
        return list(self._actors)

    # -- calls and failures --------------------------------------------------------------

    def _get(self, ref: Any, k: int) -> Any:
        try:
            return _result(ref, k)
        except ShardUnavailableError:
            self._dead.add(k)
            raise

    def _track(self, ref: Any, k: int) -> None:
        self._in_flight.append((ref, k))
        while len(self._in_flight) > self.max_in_flight:
            self._get(*self._in_flight.popleft())

    def flush(self) -> None:
        """Wait for every fire-and-forget call of this client; raises the first error."""
        while self._in_flight:
            self._get(*self._in_flight.popleft())

    def _shard_for(self, shard: int | np.integer[Any] | None) -> int:
        if shard is None:
            here = ray.get_runtime_context().get_node_id()
            local = [k for k, n in enumerate(self.node_ids) if n == here] or list(range(self.num_shards))
            return local[next(self._round_robin) % len(local)]
        if not isinstance(shard, (int, np.integer)) or not 0 <= shard < self.num_shards:
            raise InvalidArgumentError(f"shard is a number in 0..{self.num_shards - 1}, got {shard!r}")
        return int(shard)

    # -- the buffer's API ---------------------------------------------------------------

    def stats(self) -> list[Stats]:
        """Every shard's stats (the dicts of :meth:`kary_replay.PrioritizedReplayBuffer.stats`),
        in shard order, read in parallel."""
        refs = [a.stats.remote() for a in self._actors]
        return [self._get(r, k) for k, r in enumerate(refs)]

    def __len__(self) -> int:
        return sum(s["len"] for s in self.stats())

    def _live_stats(self) -> list[Stats]:
        """Every shard's stats; with ``on_failure="skip"`` a dead shard's are empty."""
        out: list[Stats] = []
        refs = [None if k in self._dead else a.stats.remote() for k, a in enumerate(self._actors)]
        for k, r in enumerate(refs):
            try:
                if r is None:
                    raise _unavailable(k, RuntimeError("marked dead earlier"))
                out.append(self._get(r, k))
            except ShardUnavailableError:
                if self.on_failure != "skip":
                    raise
                out.append(self._skip(k))
        return out

    def _skip(self, k: int) -> Stats:
        self._dead.add(k)
        if k not in self._warned:
            self._warned.add(k)
            warnings.warn(
                f"kary_replay.ray: shard {k} is unavailable; sampling goes on from the others",
                RuntimeWarning,
                stacklevel=3,
            )
        return {
            "len": 0,
            "capacity": self.capacity,
            "inserted": 0,
            "total_priority": 0.0,
            "min_positive": None,
            "running_max": 0.0,
            "memory_bytes": 0,
        }

    def sample(
        self,
        batch_size: int,
        beta: float = 0.4,
        *,
        mode: Mode = "stratified",
        rng: Rng | None = None,
        one_round_trip: bool = False,
        timeout: float | None = None,
    ) -> Batch:
        """Sample ``batch_size`` items of the union with probability proportional to their
        priorities, exactly (module doc). Returns a :class:`kary_replay.Batch`: the columns
        (shard 0's rows first, then shard 1's...; draw order for a stratified sample),
        ``keys`` (which name their shard), ``indices`` (``shard * capacity + slot``),
        ``weights``, ``probabilities``, ``priorities``, ``shards`` (each row's shard) and
        ``skipped`` (shards left out with ``on_failure="skip"``). Under a rate limit the
        union's limiter admits the batch first, waiting at most ``timeout`` seconds."""
        self._admit_samples([batch_size], timeout)
        for attempt in range(4):
            if not (one_round_trip and self._cached is not None and attempt == 0):
                self._cached = self._live_stats()
            try:
                return self._finish(self._submit([self._coordinator], batch_size, mode, rng), beta)[0]
            except _Replan:
                # A shard was empty where the plan thought it was not (stale stats, or a
                # shard lost with on_failure="skip"): plan again from fresh stats.
                continue
        raise ShardUnavailableError("no plan could be served: the shards keep changing under it")

    def batches(
        self,
        batch_size: int,
        beta: float = 0.4,
        *,
        depth: int = 2,
        per_call: int = 4,
        mode: Mode = "stratified",
        rng: Rng | None = None,
    ) -> Iterator[Batch]:
        """An endless iterator of batches, each as :meth:`sample` with
        ``one_round_trip=True`` returns it, requested ahead: ``per_call`` batches are planned
        together and each shard serves its part of all of them in one call, and ``depth``
        such groups are in flight (a learner trains on one batch while the next ones
        travel). Fewer calls per batch is what makes this fast: a Ray call costs about as
        much as sampling 256 items. Each batch is planned from the stats of the latest
        replies when its group is requested, so a plan may lag by up to ``depth x
        per_call`` batches; every batch's weights still use the actual probability of each
        draw (unbiased). Priorities updated after a group was requested reach the groups
        requested after the update, as with any sampler ahead of its learner. Under a rate
        limit each group is admitted (``per_call`` batches) before it is requested: the
        limiter counts the batches requested ahead."""
        for name, value in (("depth", depth), ("per_call", per_call)):
            if not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} is a number >= 1, got {value!r}")
        groups = [[Coordinator() for _ in range(per_call)] for _ in range(depth)]
        pending: collections.deque[_Pending] = collections.deque()
        if self._cached is None:
            self._cached = self._live_stats()
        for i in itertools.count():
            while len(pending) < depth:
                self._admit_samples([batch_size] * per_call, None)
                pending.append(self._submit(groups[(i + len(pending)) % depth], batch_size, mode, rng))
            try:
                batches = self._finish(pending.popleft(), beta)
            except _Replan:
                pending.clear()  # planned from the same stale stats: their replies are dropped
                self._cached = self._live_stats()
                continue
            yield from batches

    def _admit_samples(self, batches: list[int], timeout: float | None) -> None:
        """Have the union's limiter (if any) admit samples of these sizes, in parallel."""
        if self._limiter is None:
            return
        refs = [self._limiter.sample.remote(n, timeout) for n in batches]
        for ref in refs:
            self._limited(ref)

    def _limited(self, ref: Any) -> Any:
        return _limiter_result(ref)

    def close(self) -> None:
        """Close the union's rate limiter: every ``add_batch`` and ``sample`` waiting for
        it, in any client copy, raises :class:`kary_replay.errors.ClosedError`, and so does
        every later one (updates and saves go on). Without a rate limit nothing happens."""
        if self._limiter is not None:
            self._limited(self._limiter.close.remote())

    def rate_stats(self) -> RateStats | None:
        """The union's rate limiter's counts and state, or None without a rate limit."""
        if self._limiter is None:
            return None
        stats: RateStats = self._limited(self._limiter.stats.remote())
        return stats

    def _submit(self, coordinators: list[Coordinator], batch_size: int, mode: Mode, rng: Rng | None) -> _Pending:
        """Plan one batch per coordinator from the cached stats and send each shard its part
        of all of them in one call."""
        stats = self._cached
        assert stats is not None, "stats are read before a plan"
        plans = [c.plan(stats, batch_size, mode=mode, rng=rng) for c in coordinators]
        refs: dict[int, Any] = {}
        for k, actor in enumerate(self._actors):
            parts = [plan[k] for plan in plans]
            if any(len(f) for f in parts):
                refs[k] = actor.sample_at.remote(parts[0]) if len(parts) == 1 else actor.sample_at_many.remote(parts)
        return coordinators, refs, stats

    def _finish(self, pending: _Pending, beta: float) -> list[Batch]:
        """The batches of a submitted group, once its replies are in."""
        coordinators, refs, stats = pending
        replies: dict[int, list[dict[str, Any] | None]] = {}
        replan = False
        for k, r in refs.items():
            try:
                reply = self._get(r, k)
                replies[k] = [reply] if len(coordinators) == 1 else reply
            except ShardUnavailableError:
                if self.on_failure != "skip":
                    raise
                self._skip(k)
                replan = True
            except EmptyBufferError:
                replan = True
        fresh = list(self._cached if self._cached is not None else stats)
        for k, parts in replies.items():
            latest = [p for p in parts if p is not None]
            if latest:
                fresh[k] = latest[-1]["stats"]
        self._cached = fresh
        if replan:
            raise _Replan()
        return [self._assemble(c, _part(replies, j), beta) for j, c in enumerate(coordinators)]

    def _assemble(self, coordinator: Coordinator, replies: dict[int, dict[str, Any]], beta: float) -> Batch:
        """One batch from its shards' replies (shard -> reply): the union's probabilities
        and weights from the coordinator that planned it, the rows in shard order."""
        shards = sorted(replies)
        prios = [replies[k]["priorities"] if k in replies else _EMPTY for k in range(self.num_shards)]
        totals = [replies[k]["stats"]["total_priority"] if k in replies else 0.0 for k in range(self.num_shards)]
        probabilities, weights = coordinator.finish(prios, totals, beta, weight_norm=self.options["weight_norm"])
        parts = [replies[k] for k in shards]

        def joined(name: str) -> npt.NDArray[Any]:
            return parts[0][name] if len(parts) == 1 else np.concatenate([p[name] for p in parts])

        # Every array of the replies (columns, keys, indices, priorities; a sequence shard's
        # mask, lengths, returns, next observations...) joined in shard order.
        out: dict[str, Any] = {name: joined(name) for name in parts[0] if name not in _UNION_ENTRIES}
        out["shards"] = np.concatenate([np.full(len(replies[k]["keys"]), k, np.int64) for k in shards])
        out["indices"] = out["shards"] * self.capacity + out["indices"]
        out["probabilities"] = probabilities
        out["weights"] = weights
        out["skipped"] = sorted(self._dead)
        return Batch(out)

    def _shards_of(self, keys: Keys) -> npt.NDArray[np.int64]:
        """The shard each key names; :class:`InvalidKeyError` for a key of none of them."""
        tags = (keys >> np.uint64(_GENERATION_BITS)).astype(np.int64)
        shard = (tags - 1 - self._key_base) % _TAGS
        bad = (tags < 1) | (tags > _TAGS) | (shard >= self.num_shards)
        if bad.any():
            key = int(keys[np.argmax(bad)])
            raise InvalidKeyError(
                f"key {key:#x} carries tag {key >> _GENERATION_BITS}: not one of this buffer's "
                f"shards (their tags: {self.key_tags[0]}..., {self.num_shards} of them, key_tags)"
            )
        return shard

    def update_priorities(
        self, keys: npt.ArrayLike, priorities: npt.ArrayLike, *, wait: bool = False
    ) -> tuple[int, int] | None:
        """Set the raw priorities of the items ``keys`` name, each sent to the shard its key
        names (keys of no shard of this buffer raise :class:`InvalidKeyError` and nothing is
        sent).

        ``wait=True`` checks every shard's part first (its keys and priorities, as
        :meth:`kary_replay.PrioritizedReplayBuffer.check_update` does) and applies the parts
        only when all pass, so a refused update (an :class:`InvalidKeyError`,
        :class:`InvalidPriorityError`, or a shard already dead:
        :class:`ShardUnavailableError`) changes nothing on any shard. It returns
        ``(applied, stale)`` summed over shards. The one partial outcome: a shard that dies
        between the check and its apply raises :class:`ShardUnavailableError`, whose
        ``applied`` lists the shards whose parts did apply.

        Fire-and-forget by default (returns None): each shard applies or refuses its own part,
        so a refused part (surfacing later, see :meth:`add_batch`, with ``shard`` set on
        :class:`ShardUnavailableError`) leaves the other shards' parts applied."""
        keys = np.asarray(keys)
        if keys.dtype.kind not in "iu":
            raise InvalidKeyError(f"keys: dtype {keys.dtype}, expected integers")
        keys = keys.reshape(-1).astype(np.uint64)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if len(priorities) != len(keys):
            raise InvalidArgumentError(f"{len(keys)} keys but {len(priorities)} priorities")
        shard = self._shards_of(keys)
        parts = [(int(k), keys[shard == k], priorities[shard == k]) for k in np.unique(shard)]
        if not wait:
            for k, part_keys, part_priorities in parts:
                self._track(self._actors[k].update_priorities.remote(part_keys, part_priorities), k)
            return None
        return self._check_then_apply(
            [(self._actors[k].check_update.remote(pk, pp), k) for k, pk, pp in parts],
            lambda: [(self._actors[k].update_priorities.remote(pk, pp), k) for k, pk, pp in parts],
        )

    def _check_then_apply(
        self, checks: list[tuple[Any, int]], apply: Callable[[], list[tuple[Any, int]]]
    ) -> tuple[int, int]:
        """Wait for every shard's check (``checks``: (call, shard) pairs; a refusal raises with
        nothing applied), then make the calls ``apply`` starts and sum their ``(applied,
        stale)`` replies. A shard that dies between its check and its apply raises
        :class:`ShardUnavailableError`, whose ``applied`` lists the shards whose parts did
        apply."""
        try:
            for ref, k in checks:
                self._get(ref, k)
        except ShardUnavailableError as e:
            e.applied = []
            raise
        done, failed = [], None
        for ref, k in apply():
            try:
                done.append((k, self._get(ref, k)))
            except ShardUnavailableError as e:
                failed = failed or e
        if failed is not None:
            failed.applied = [k for k, _ in done]
            raise failed
        return sum(a for _, (a, _) in done), sum(s for _, (_, s) in done)

    # -- checkpoints --------------------------------------------------------------------

    def save(self, dir: str | os.PathLike[str]) -> dict[str, Any]:
        """Save every shard into ``dir/shard-NNNNN`` (in parallel; each shard pauses its
        inserts and updates only for its in-memory copy), then ``dir/manifest.json`` and
        ``dir/COMMIT``, each fsynced: a directory without COMMIT is an unfinished save that
        :meth:`restore` refuses. ``dir`` must not exist. Waits for this client's calls in
        flight first, so that they are in the checkpoint."""
        dir = os.fspath(dir)
        self.flush()
        os.makedirs(dir)
        refs = [a.save.remote(_shard_dir(dir, k)) for k, a in enumerate(self._actors)]
        stats = [self._get(r, k) for k, r in enumerate(refs)]
        manifest = {
            "format": FORMAT,
            "num_shards": self.num_shards,
            "capacity": self.capacity,
            "kind": self._kind,
            "schema": {name: [d, list(s)] for name, (d, s) in self.schema.items()},
            **self._manifest_fields(),
            "key_base": self._key_base,
            "rate_limit": self._rate_manifest(),
            "shards": [
                {"dir": os.path.basename(_shard_dir(dir, k)), "inserted": s["inserted"], "len": s["len"]}
                for k, s in enumerate(stats)
            ],
        }
        # The crate writes the manifest and COMMIT (docs/checkpoint.md, "Sharded checkpoints").
        _write_sharded_manifest(dir, json.dumps(manifest))
        return manifest

    def _rate_manifest(self) -> dict[str, Any] | None:
        """The rate limit and its counts as a sharded manifest keeps them (the crate's
        ``ShardedBuffer`` reads and writes the same field)."""
        if self.rate_limit is None:
            return None
        stats = self.rate_stats()
        assert stats is not None
        kind, size, spi, error_buffer = _native_args(self.rate_limit)

        def bound(x: float | None) -> float | None:  # JSON holds no infinity: null
            return x if x is not None and np.isfinite(x) else None

        return {
            "kind": kind,
            "size": size,
            "samples_per_insert": spi,
            "error_buffer": [bound(x) for x in error_buffer]
            if isinstance(error_buffer, tuple)
            else bound(error_buffer),
            "max_insert": self.max_insert,
            "max_sample": self.max_sample,
            "inserts": stats["inserts"],
            "samples": stats["samples"],
        }

    def restart_shard(self, shard: int, dir: str | os.PathLike[str]) -> None:
        """Start shard ``shard`` again from the sharded checkpoint ``dir`` (killing its old
        actor if it still runs): it serves again with what it held at the save, and keys
        it handed out before are still valid (those of items evicted since are stale)."""
        read_manifest(dir, kind=self._kind)
        if shard is None:
            raise InvalidArgumentError("restart_shard: which shard?")
        k = self._shard_for(shard)
        self._verify_shard(_shard_dir(os.fspath(dir), k))
        with contextlib.suppress(Exception):  # already gone: nothing to kill
            ray.kill(self._actors[k])
        self._actors[k] = self._start(k, _shard_dir(os.fspath(dir), k))
        self.node_ids[k] = self._get(self._actors[k].node_id.remote(), k)
        self._dead.discard(k)
        self._warned.discard(k)
        self._cached = None

    def consistency(self) -> list[Consistency]:
        """Every shard's :meth:`kary_replay.PrioritizedReplayBuffer.consistency`."""
        refs = [a.consistency.remote() for a in self._actors]
        return [self._get(r, k) for k, r in enumerate(refs)]

    def shutdown(self) -> None:
        """Kill the shards' actors (their items are lost unless saved) and the rate
        limiter's."""
        for a in self._actors:
            ray.kill(a)
        if self._limiter is not None:
            ray.kill(self._limiter)


class ShardedReplay(_ShardSet):
    """A prioritized replay buffer of ``num_shards`` shards of ``capacity`` items each (FIFO
    eviction per shard), each a :class:`ReplayShard` actor; see the module doc.

    ``schema`` and the keyword options ``alpha``, ``fanout``, ``variant``, ``weight_norm``,
    ``default_priority`` and ``version_column`` are those of
    :class:`kary_replay.PrioritizedReplayBuffer` (with ``version_column``,
    :meth:`retire_before` retires old policy versions in every shard).
    ``nodes``: one Ray node id per shard to pin it there (default: Ray places them).
    ``max_in_flight``: fire-and-forget calls allowed in flight (default 16).
    ``on_failure``: "raise" (default) or "skip" (sample from the live shards).
    ``max_concurrency``: concurrent calls per shard actor (default 4).
    ``actor_options``: more ``.options()`` for the actors (``num_cpus`` defaults to 0).
    ``rate_limit``, ``max_insert`` and ``max_sample``: one rate limit for the union, as
    :class:`kary_replay.PrioritizedReplayBuffer` takes them (``max_insert`` bounds each
    ``add_batch``, ``max_sample`` each batch); its actor waits with up to
    ``max_waiters`` calls at once (default 64).

    The object is picklable: pass it to Ray tasks and actors, which then insert, sample and
    update through the same shards (each copy bounds its own calls in flight). One object
    is for one thread: its calls in flight and its cached stats are not shared (the shards
    are; give each thread its own copy, ``copy.copy`` or a pickle round trip).
    """

    def __init__(
        self,
        num_shards: int,
        capacity: int,
        schema: Schema,
        *,
        alpha: float = 0.6,
        fanout: int = 8,
        variant: Variant = "split",
        weight_norm: Literal["global", "batch"] = "global",
        default_priority: Literal["running_max", "live_max"] = "running_max",
        version_column: str | None = None,
        nodes: Sequence[str] | None = None,
        max_in_flight: int = 16,
        on_failure: Literal["raise", "skip"] = "raise",
        max_concurrency: int = 4,
        actor_options: Mapping[str, Any] | None = None,
        rate_limit: RateLimit | None = None,
        max_insert: int = 16,
        max_sample: int = 256,
        max_waiters: int = 64,
        _restore: str | None = None,
        _key_base: int | None = None,
        _rate_counts: tuple[int, int] | None = None,
    ) -> None:
        self._check(num_shards, on_failure, max_in_flight, nodes)
        if not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgumentError(f"capacity (items per shard) is a number >= 1, got {capacity!r}")
        self.num_shards = num_shards
        self.capacity = capacity
        # The schema as the buffer normalizes it (checked here, before any actor starts).
        self.schema = PrioritizedReplayBuffer(1, schema).schema
        self.options: Options = {
            "alpha": alpha,
            "fanout": fanout,
            "variant": variant,
            "weight_norm": weight_norm,
            "default_priority": default_priority,
            "version_column": version_column,
        }
        PrioritizedReplayBuffer(1, self.schema, **self.options)
        self._start_limiter(rate_limit, max_insert, max_sample, max_waiters, _rate_counts)
        self._setup(
            nodes=nodes,
            max_in_flight=max_in_flight,
            on_failure=on_failure,
            max_concurrency=max_concurrency,
            actor_options=actor_options,
            restore=_restore,
            key_base=_key_base,
        )

    _shard_class = ReplayShard
    _kind = "flat"

    def _shard_args(self) -> tuple[Any, ...]:
        return (self.capacity, self.schema, self.options)

    def _manifest_fields(self) -> dict[str, Any]:
        return {"options": self.options}

    @staticmethod
    def _verify_shard(dir: str) -> None:
        verify(dir)

    def add_batch(
        self,
        priorities: npt.ArrayLike | None = None,
        *,
        shard: int | None = None,
        wait: bool = True,
        timeout: float | None = None,
        **columns: npt.ArrayLike,
    ) -> Keys | None:
        """Insert a batch (one array per column, as
        :meth:`kary_replay.PrioritizedReplayBuffer.add_batch`) into ``shard``, or into a
        shard on the caller's node (round robin among them; among all shards when none is
        there). Returns the keys (uint64); with ``wait=False`` returns at once and the call
        counts against ``max_in_flight`` (errors surface later, at :meth:`flush` or when
        the bound waits for it). Under a rate limit the shard runs the batch once the union's
        limiter admits it, after at most ``timeout`` seconds (None: as long as it takes; a
        timeout raises :class:`kary_replay.errors.RateLimitTimeoutError`)."""
        k = self._shard_for(shard)
        admitted = None
        if self._limiter is not None:
            admitted = self._limiter.insert.remote(_rows(columns), timeout)
        ref = self._actors[k].add_batch.remote(priorities, columns, admitted)
        if wait:
            keys: Keys = self._get(ref, k)
            return keys
        self._track(ref, k)
        return None

    @classmethod
    def restore(cls, dir: str | os.PathLike[str], **options: Any) -> "ShardedReplay":
        """A new :class:`ShardedReplay` whose shards load the checkpoint ``dir`` wrote by
        :meth:`save` (every item, priority and key as saved: keys handed out before stay
        valid). Every shard's files are verified first (their CRCs: a corrupt or truncated
        one is a :class:`CheckpointError` before any actor starts). ``options``: those of the constructor that are not the buffer's (``nodes``,
        ``max_in_flight``, ``on_failure``, ``max_concurrency``, ``actor_options``)."""
        manifest = read_manifest(dir, kind="flat")
        for k in range(manifest["num_shards"]):
            verify(_shard_dir(os.fspath(dir), k))
        fixed = set(manifest["options"]) | {
            "num_shards",
            "capacity",
            "schema",
            "_restore",
            "_key_base",
            "_rate_counts",
            "rate_limit",
            "max_insert",
            "max_sample",
        }
        if fixed & set(options):
            raise InvalidArgumentError(
                f"restore: {sorted(fixed & set(options))} come from the checkpoint and cannot be given"
            )
        schema = {name: (d, tuple(s)) for name, (d, s) in manifest["schema"].items()}
        rate = _rate_options(manifest)
        # A manifest without "key_base" is of the first layout, whose tags were shard + 1.
        return cls(
            manifest["num_shards"],
            manifest["capacity"],
            schema,
            **manifest["options"],
            **options,
            **rate,
            _restore=os.fspath(dir),
            _key_base=manifest.get("key_base", 0),
        )

    def delete(self, keys: npt.ArrayLike) -> tuple[int, int]:
        """Delete the items ``keys`` name, each in the shard its key names
        (:meth:`kary_replay.PrioritizedReplayBuffer.delete`); returns ``(deleted, stale)``
        summed over shards. Every shard's part is checked first (a key of no shard of this
        replay, or one its shard never handed out: :class:`InvalidKeyError`), so a refused
        call deletes nothing; a shard that dies between the check and its part raises
        :class:`ShardUnavailableError`, whose ``applied`` lists the shards whose parts did
        apply. Waits for this client's calls in flight first, so that an item inserted
        before the call can be deleted by it."""
        keys = np.asarray(keys)
        if keys.dtype.kind not in "iu":
            raise InvalidKeyError(f"keys: dtype {keys.dtype}, expected integers")
        keys = keys.reshape(-1).astype(np.uint64)
        self.flush()
        shard = self._shards_of(keys)
        parts = [(int(k), keys[shard == k]) for k in np.unique(shard)]
        return self._check_then_apply(
            [(self._actors[k].check_keys.remote(pk), k) for k, pk in parts],
            lambda: [(self._actors[k].delete.remote(pk), k) for k, pk in parts],
        )

    def write_back(self, keys: npt.ArrayLike, **columns: npt.ArrayLike) -> tuple[int, int]:
        """Overwrite the named columns of the items ``keys`` name, each in the shard its key
        names (:meth:`kary_replay.PrioritizedReplayBuffer.write_back`): each column holds one
        row per key, in the keys' order; returns ``(written, stale)`` summed over shards. Every
        shard's part is checked first (a key of no shard of this replay, or one its shard
        never handed out: :class:`InvalidKeyError`; a column that is not in the schema, of
        another dtype or row shape, or with another count of rows than keys:
        :class:`SchemaError`), so a refused call writes nothing; a shard that dies between
        the check and its part raises :class:`ShardUnavailableError`, whose ``applied`` lists
        the shards whose parts did apply. Waits for this client's calls in flight first, so
        that an item inserted before the call can be written back by it."""
        keys = np.asarray(keys)
        if keys.dtype.kind not in "iu":
            raise InvalidKeyError(f"keys: dtype {keys.dtype}, expected integers")
        keys = keys.reshape(-1).astype(np.uint64)
        rows = {name: np.asarray(values) for name, values in columns.items()}
        for name, values in rows.items():
            if values.ndim == 0 or len(values) != len(keys):
                raise SchemaError(
                    f"column {name!r}: {values.shape[0] if values.ndim else 'no'} rows for {len(keys)} keys"
                )
        self.flush()
        shard = self._shards_of(keys)
        parts = [
            (int(k), keys[shard == k], {name: values[shard == k] for name, values in rows.items()})
            for k in np.unique(shard)
        ]
        return self._check_then_apply(
            [(self._actors[k].check_write_back.remote(pk, pc), k) for k, pk, pc in parts],
            lambda: [(self._actors[k].write_back.remote(pk, pc), k) for k, pk, pc in parts],
        )

    def retire_before(self, version: int) -> int:
        """Retire every item below policy ``version`` in every shard and raise each shard's
        floor to it (:meth:`kary_replay.PrioritizedReplayBuffer.retire_before`); returns the
        items retired over all shards. Waits for this client's calls in flight first, so that
        an item inserted before the call is retired by it. A replay made without
        ``version_column`` raises :class:`InvalidArgumentError` (from its first shard, before
        any other retires)."""
        if self.options.get("version_column") is None:
            raise InvalidArgumentError("retire_before: the replay was made without version_column")
        self.flush()
        refs = [(a.retire_before.remote(int(version)), k) for k, a in enumerate(self._actors)]
        return sum(self._get(ref, k) for ref, k in refs)

    def set_alpha(self, alpha: float) -> None:
        """Change the priority exponent of every shard
        (:meth:`kary_replay.PrioritizedReplayBuffer.set_alpha`): each shard's priorities
        become its raw priorities raised to ``alpha``, exactly. Waits for this client's calls
        in flight first. The shards change one after another: a sample made meanwhile may
        draw some under the old alpha. A NaN, infinite or negative ``alpha`` raises
        :class:`InvalidArgumentError` before any shard changes."""
        if not (math.isfinite(alpha) and alpha >= 0):
            raise InvalidArgumentError(f"alpha must be finite and >= 0, got {alpha}")
        self.flush()
        refs = [(a.set_alpha.remote(float(alpha)), k) for k, a in enumerate(self._actors)]
        for ref, k in refs:
            self._get(ref, k)

    def stored_keys(self) -> list[Keys]:
        """Every shard's :meth:`ReplayShard.stored_keys` (O(capacity) each: for checks)."""
        refs = [a.stored_keys.remote() for a in self._actors]
        return [self._get(r, k) for k, r in enumerate(refs)]


class ShardedSequenceReplay(_ShardSet):
    """Prioritized windows over lanes (:class:`kary_replay.SequenceReplayBuffer`) in
    ``num_shards`` :class:`SequenceShard` actors of ``lanes_per_shard`` lanes of
    ``steps_per_lane`` steps each: lane ``g`` is lane ``g % lanes_per_shard`` of shard
    ``g // lanes_per_shard``, so each actor process writes to one shard's memory, and a
    window never spans shards.

    ``schema`` and the keyword options ``window``, ``period``, ``partial``, ``nstep``,
    ``stack``, ``padding``, ``next_of``, ``alpha``, ``fanout`` and ``weight_norm`` are those
    of :class:`kary_replay.SequenceReplayBuffer`; ``nodes``, ``max_in_flight``,
    ``on_failure``, ``max_concurrency`` and ``actor_options`` those of
    :class:`ShardedReplay`. ``capacity`` is each shard's leaves (window starts).

    - :meth:`lane` hands a lane to one writer as a :class:`RemoteLane` (picklable: give it
      to the Ray actor that runs the environment);
    - :meth:`sample` samples the union's windows exactly as :class:`ShardedReplay` samples
      items (the module doc's arithmetic, in windows): a :class:`kary_replay.Batch` with
      each column ``(B, W, *shape)``, ``mask``, ``lengths``, the n-step ``returns`` and
      ``discounts``, the ``next_<column>`` observations, ``keys``, ``weights``,
      ``probabilities``, ``priorities``, ``shards`` and ``skipped``;
    - :meth:`update_priorities` routes each key to its shard; :meth:`save`,
      :meth:`restore` and :meth:`restart_shard` as for :class:`ShardedReplay` (lanes are
      not held after a restore: writers open them again, and an episode under way goes on
      with the lane's next writer);
    - a dead shard: :class:`kary_replay.errors.ShardUnavailableError` naming it, or with
      ``on_failure="skip"`` samples from the others; its lanes' writes raise.

    With ``rate_limit=`` the union holds one rate limit counted in windows, as
    :class:`ShardedReplay`'s (one :class:`RateLimiterActor`; ``max_sample`` bounds each
    batch, ``max_waiters`` the calls waiting at once): a lane's chunk of steps is admitted
    for the windows it completes before its shard writes it (``max_insert``, default 4096,
    bounds the windows of one chunk), and a :class:`RemoteLane` then waits for each chunk it
    sends, so that a refusal reaches the call that sent it and its steps stay with the lane.
    """

    _shard_class = SequenceShard
    _kind = "sequence"

    def __init__(
        self,
        num_shards: int,
        lanes_per_shard: int,
        steps_per_lane: int,
        schema: Schema,
        *,
        window: int | None = None,
        period: int = 1,
        partial: Literal["keep", "drop"] = "keep",
        nstep: tuple[int, float, str] | None = None,
        stack: Mapping[str, int] | None = None,
        padding: Literal["repeat", "zeros"] = "repeat",
        next_of: Sequence[str] | None = None,
        alpha: float = 0.6,
        fanout: int = 8,
        weight_norm: Literal["global", "batch"] = "global",
        nodes: Sequence[str] | None = None,
        max_in_flight: int = 16,
        on_failure: Literal["raise", "skip"] = "raise",
        max_concurrency: int = 4,
        actor_options: Mapping[str, Any] | None = None,
        rate_limit: RateLimit | None = None,
        max_insert: int = 4096,
        max_sample: int = 256,
        max_waiters: int = 64,
        _restore: str | None = None,
        _key_base: int | None = None,
        _rate_counts: tuple[int, int] | None = None,
    ) -> None:
        self._check(num_shards, on_failure, max_in_flight, nodes)
        if not isinstance(lanes_per_shard, int) or lanes_per_shard < 1:
            raise InvalidArgumentError(f"lanes_per_shard is a number >= 1, got {lanes_per_shard!r}")
        self.num_shards = num_shards
        self.lanes_per_shard = lanes_per_shard
        self.steps_per_lane = steps_per_lane
        self.options = {
            "window": window,
            "period": period,
            "partial": partial,
            "nstep": None if nstep is None else tuple(nstep),
            "stack": None if stack is None else dict(stack),
            "padding": padding,
            "next_of": None if next_of is None else tuple(next_of),
            "alpha": alpha,
            "fanout": fanout,
            "weight_norm": weight_norm,
        }
        # One lane checks the configuration (a refused one says why) before any actor
        # starts, and gives the schema as the buffer normalizes it.
        probe = SequenceReplayBuffer(1, steps_per_lane, schema, **self.options)
        self.schema = probe.schema
        self.window = probe.window
        self.capacity = probe.capacity * lanes_per_shard
        del probe
        self._start_limiter(rate_limit, max_insert, max_sample, max_waiters, _rate_counts)
        self._setup(
            nodes=nodes,
            max_in_flight=max_in_flight,
            on_failure=on_failure,
            max_concurrency=max_concurrency,
            actor_options=actor_options,
            restore=_restore,
            key_base=_key_base,
        )

    @property
    def lanes(self) -> int:
        """Lanes over every shard."""
        return self.num_shards * self.lanes_per_shard

    def _shard_args(self) -> tuple[Any, ...]:
        return (self.lanes_per_shard, self.steps_per_lane, self.schema, self.options)

    def _manifest_fields(self) -> dict[str, Any]:
        return {"lanes_per_shard": self.lanes_per_shard, "steps_per_lane": self.steps_per_lane, "options": self.options}

    @staticmethod
    def _verify_shard(dir: str) -> None:
        SequenceReplayBuffer.verify(dir)

    def lane(self, lane: int | None = None, *, chunk: int = 64) -> "RemoteLane":
        """The writer of lane ``lane`` (0..``lanes``-1), or with None of a lane no writer
        holds on a shard of the caller's node (of any shard when those are all held), as a
        :class:`RemoteLane` that sends its steps in chunks of ``chunk``.
        :class:`InvalidArgumentError` while another writer holds the lane."""
        if not isinstance(chunk, int) or chunk < 1:
            raise InvalidArgumentError(f"chunk is a number >= 1, got {chunk!r}")
        if lane is not None:
            if not isinstance(lane, (int, np.integer)) or not 0 <= lane < self.lanes:
                raise InvalidArgumentError(f"lane is a number in 0..{self.lanes - 1}, got {lane!r}")
            k = int(lane) // self.lanes_per_shard
            local, token = self._get(self._actors[k].open_lane.remote(int(lane) % self.lanes_per_shard), k)
            return RemoteLane(self, k, local, token, chunk)
        here = ray.get_runtime_context().get_node_id()
        first = [k for k, n in enumerate(self.node_ids) if n == here]
        for k in first + [k for k in range(self.num_shards) if k not in first]:
            try:
                local, token = self._get(self._actors[k].open_lane.remote(None), k)
            except InvalidArgumentError:
                continue  # every lane of this shard is held
            return RemoteLane(self, k, local, token, chunk)
        raise InvalidArgumentError(f"all {self.lanes} lanes are held by writers")

    @classmethod
    def restore(cls, dir: str | os.PathLike[str], **options: Any) -> "ShardedSequenceReplay":
        """A new :class:`ShardedSequenceReplay` whose shards load the checkpoint ``dir`` wrote
        by :meth:`save`: every lane where it stood, every window, priority and key as saved
        (keys handed out before stay valid). Every shard's files are verified first (a
        corrupt or truncated one is a :class:`CheckpointError` before any actor starts).
        ``options``: those of the constructor that are not the buffer's."""
        manifest = read_manifest(dir, kind="sequence")
        for k in range(manifest["num_shards"]):
            SequenceReplayBuffer.verify(_shard_dir(os.fspath(dir), k))
        fixed = set(manifest["options"]) | {
            "num_shards",
            "lanes_per_shard",
            "steps_per_lane",
            "schema",
            "_restore",
            "_key_base",
            "_rate_counts",
            "rate_limit",
            "max_insert",
            "max_sample",
        }
        if fixed & set(options):
            raise InvalidArgumentError(
                f"restore: {sorted(fixed & set(options))} come from the checkpoint and cannot be given"
            )
        schema = {name: (d, tuple(s)) for name, (d, s) in manifest["schema"].items()}
        return cls(
            manifest["num_shards"],
            manifest["lanes_per_shard"],
            manifest["steps_per_lane"],
            schema,
            **manifest["options"],
            **options,
            **_rate_options(manifest),
            _restore=os.fspath(dir),
            _key_base=manifest["key_base"],
        )


class RemoteLane:
    """The writer of one lane of a :class:`ShardedSequenceReplay`, from any process.
    :meth:`push` and :meth:`end_episode` take what :class:`kary_replay.LaneWriter`'s take;
    the steps go to the lane's shard in chunks (``chunk`` steps, or fewer at an episode's
    end or a :meth:`flush`), with one chunk in flight at a time: they arrive in order while
    the caller goes on. Each step is checked here against the schema (a bad one raises and
    is not kept); an error the shard raises for a chunk (a closed lane, a dead shard:
    :class:`kary_replay.errors.ShardUnavailableError`) surfaces at the next send,
    :meth:`flush` or :meth:`close`. Under the union's rate limit each chunk is waited for
    instead: a refusal (``timeout=`` on the call that sends it) reaches that call, nothing
    of the chunk is written, and its steps stay pending for the next call. As a context
    manager it gives the lane back on exit. Picklable (pending steps are sent first): hand
    it to the one process that writes the lane. A handle is bound to the actor its lane was opened on: after
    :meth:`ShardedSequenceReplay.restart_shard` its calls raise
    :class:`kary_replay.errors.ShardUnavailableError`, and the writer opens the lane again
    (it stands where the checkpoint left it)."""

    def __init__(self, replay: ShardedSequenceReplay, shard: int, local: int, token: int, chunk: int) -> None:
        self.shard = shard
        self.lane = shard * replay.lanes_per_shard + local
        self.chunk = chunk
        self._actor = replay.shards[shard]
        self._local, self._token = local, token
        self._schema = {name: (np.dtype(d), tuple(shape)) for name, (d, shape) in replay.schema.items()}
        self._next_of = set(replay.options["next_of"] or ())
        self._limiter = replay._limiter
        self._local_state()

    def _local_state(self) -> None:
        self._steps: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in self._schema}
        self._n = 0
        self._ref: Any = None
        self._position: int | None = None

    def _checked(self, what: str, names: Any, given: Mapping[str, npt.ArrayLike]) -> dict[str, npt.NDArray[Any]]:
        if set(given) != set(names):
            raise InvalidArgumentError(f"{what}: columns {sorted(given)}, expected {sorted(names)}")
        out = {}
        for name, value in given.items():
            dtype, shape = self._schema[name]
            if isinstance(value, (np.ndarray, np.generic)) and value.dtype != dtype:
                raise InvalidArgumentError(f"{what}: column {name!r} has dtype {value.dtype}, expected {dtype}")
            # A copy: the steps wait here for their chunk, and the caller may reuse its array
            # (an environment's observation buffer) before the chunk leaves.
            a = np.array(value, dtype=dtype)
            if a.shape != shape:
                raise InvalidArgumentError(f"{what}: column {name!r} has shape {a.shape}, expected {shape}")
            out[name] = a
        return out

    def push(self, *, timeout: float | None = None, **step: npt.ArrayLike) -> None:
        """Append one step: every schema column, one item each. Under the union's rate
        limit, a push that sends a chunk waits at most ``timeout`` seconds for its
        admission."""
        checked = self._checked("push", self._schema, step)
        for name, a in checked.items():
            self._steps[name].append(a)
        self._n += 1
        if self._n >= self.chunk:
            self._send(None, timeout)

    def end_episode(self, truncated: bool = False, *, timeout: float | None = None, **final_obs: npt.ArrayLike) -> None:
        """End the episode (``final_obs``: one array per ``next_of`` column); sends what is
        pending with it (admitted as :meth:`push`'s chunks are)."""
        self._send((bool(truncated), self._checked("end_episode", self._next_of, final_obs)), timeout)

    def _send(self, end: tuple[bool, dict[str, npt.NDArray[Any]]] | None, timeout: float | None) -> None:
        steps = {name: np.stack(a) for name, a in self._steps.items()} if self._n else {}
        n = self._n
        self._wait()
        for a in self._steps.values():
            a.clear()
        self._n = 0
        if self._limiter is None:
            self._ref = self._actor.write.remote(self._local, self._token, steps, end)
            return
        # Under a rate limit each chunk is waited for: a refusal (nothing written) reaches
        # this call, and the chunk's steps stay pending for the next one.
        self._ref = self._actor.write.remote(self._local, self._token, steps, end, self._limiter, timeout)
        try:
            self._wait()
        except (RateLimitTimeoutError, RateLimitedError, ClosedError):
            for name, stacked in steps.items():
                self._steps[name].extend(stacked)
            self._n = n
            raise

    def _wait(self) -> None:
        if self._ref is not None:
            ref, self._ref = self._ref, None
            self._position = _result(ref, self.shard)

    def flush(self, *, timeout: float | None = None) -> None:
        """Send the pending steps and wait until the shard has written every step sent
        (under a rate limit, at most ``timeout`` seconds for their admission)."""
        if self._n:
            self._send(None, timeout)
        self._wait()

    @property
    def position(self) -> int:
        """The lane's position (as :attr:`kary_replay.LaneWriter.position`), after a
        :meth:`flush`."""
        self.flush()
        if self._position is None:
            self._send(None, None)
            self._wait()
        assert self._position is not None
        return self._position

    def close(self, *, close_lane: bool = False) -> None:
        """Flush, then give the lane back (its episode under way goes on with its next
        writer); with ``close_lane`` close the lane for good."""
        try:
            self.flush()
        finally:
            _result(self._actor.release_lane.remote(self._local, self._token, close_lane), self.shard)

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __getstate__(self) -> dict[str, Any]:
        self.flush()
        state = self.__dict__.copy()
        for name in ("_steps", "_n", "_ref", "_position"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local_state()


def _rate_options(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor's rate-limit arguments a sharded manifest keeps (none without a
    limit): the limit, ``max_insert``, ``max_sample`` and the counts to go on from."""
    r = manifest.get("rate_limit")
    if r is None:
        return {}
    e = r["error_buffer"]
    inf = float("inf")
    error_buffer = (
        (-inf if e[0] is None else e[0], inf if e[1] is None else e[1])
        if isinstance(e, list)
        else (inf if e is None else e)
    )
    return {
        "rate_limit": _from_native(r["kind"], r["size"], r["samples_per_insert"], error_buffer),
        "max_insert": r["max_insert"],
        "max_sample": r["max_sample"],
        "_rate_counts": (r["inserts"], r["samples"]),
    }


def _limiter_result(ref: Any) -> Any:
    """The result of a call of a union's limiter's actor: its own error raised as itself; a
    dead actor is a closed limiter."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as e:
        raise ClosedError(f"the rate limiter's actor died ({type(e).__name__}: {e})") from None
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def _unavailable(k: int, e: BaseException) -> ShardUnavailableError:
    return ShardUnavailableError(f"shard {k} is unavailable: its actor died ({type(e).__name__}: {e})", shard=k)


def _result(ref: Any, k: int) -> Any:
    """The result of shard ``k``'s call: a dead actor is a :class:`ShardUnavailableError`
    naming it; an error the shard raised (a kary_replay error, say) is raised as itself."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as e:
        raise _unavailable(k, e) from None
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def _rows(columns: Mapping[str, npt.ArrayLike]) -> int:
    """The items of a batch's columns (their common first dimension), checked before the
    limiter counts them: columns of different lengths are refused here."""
    lengths = {np.shape(c)[0] if np.ndim(c) else 1 for c in columns.values()}
    if len(lengths) != 1:
        raise InvalidArgumentError(f"add_batch: columns of different lengths {sorted(lengths)}")
    return int(lengths.pop())


def _part(replies: dict[int, list[dict[str, Any] | None]], j: int) -> dict[int, dict[str, Any]]:
    """Batch ``j``'s replies of a group: shard -> its reply, for the shards that served it."""
    out = {}
    for k, parts in replies.items():
        reply = parts[j]
        if reply is not None:
            out[k] = reply
    return out


class _Replan(Exception):
    """A plan met a shard that could not serve its part: plan again."""


def read_manifest(dir: str | os.PathLike[str], *, kind: str | None = None) -> dict[str, Any]:
    """The manifest of the committed sharded checkpoint ``dir`` (checked by the crate: its
    COMMIT, its CRC, its rules); a :class:`CheckpointError` whose ``kind`` says why not:
    ``notfound``, ``uncommitted`` (no COMMIT: an unfinished save), ``format`` or
    ``corrupt``. With ``kind`` ("flat" or "sequence"), a checkpoint of the other family is
    refused (``mismatch``)."""
    manifest: dict[str, Any] = json.loads(_read_sharded_manifest(os.fspath(dir)))
    # A manifest without "kind" is of the first layout, which held flat shards only.
    found = manifest.setdefault("kind", "flat")
    if kind is not None and found != kind:
        other = {"flat": "ShardedReplay", "sequence": "ShardedSequenceReplay"}.get(found, found)
        error = CheckpointError(
            f"{os.fspath(dir)}: a sharded checkpoint of {found} shards (restore it with {other}), not of {kind} ones"
        )
        error.kind = "mismatch"
        raise error
    return manifest


__all__ = [
    "FORMAT",
    "RemoteLane",
    "ReplayShard",
    "SequenceShard",
    "ShardedReplay",
    "ShardedSequenceReplay",
    "read_manifest",
]
