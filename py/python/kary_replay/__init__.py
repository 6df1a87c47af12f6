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

from . import errors
from ._batch import Batch, Mode, SampleInfo, Variant
from ._flat import PrioritizedReplayBuffer, SharedReplayBuffer, Writer, _unpickle, load
from ._native import Coordinator, Rng, SumTree, latest, numbered, sequence_priorities, verify
from ._sequence import LaneWriter, SequenceReplayBuffer, SharedSequenceReplayBuffer, _unpickle_sequence
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
from .rate import MinSize, Queue, RateLimit, RateLimiter, SampleToInsertRatio
from .types import CheckpointReport, Consistency, RateStats, Stats, UserValue

__version__ = "0.1.0"

# The public names are this package's (their reprs, their docs, and pickles, which name
# `kary_replay._unpickle` and `kary_replay._unpickle_sequence`, whatever module defines them).
for _public in (
    Batch,
    SampleInfo,
    PrioritizedReplayBuffer,
    SharedReplayBuffer,
    Writer,
    LaneWriter,
    SequenceReplayBuffer,
    SharedSequenceReplayBuffer,
    load,
    _unpickle,
    _unpickle_sequence,
):
    _public.__module__ = __name__
del _public

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
    "SharedSequenceReplayBuffer",
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
