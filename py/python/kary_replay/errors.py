"""The exceptions of kary_replay: one hierarchy under :class:`KaryReplayError`.

Every error leaves the buffer as it was. ``retryable`` says whether the same call may
succeed if simply tried again (a sample that met writers on every draw: ``ContentionError``).
"""


class KaryReplayError(Exception):
    """Base class of every kary_replay error."""

    #: Whether trying the same call again may succeed.
    retryable = False


class InvalidArgumentError(KaryReplayError, ValueError):
    """A parameter out of its range (capacity, alpha, beta, batch size, mode, variant...)."""


class SchemaError(KaryReplayError, TypeError):
    """A column missing, unknown, or of the wrong dtype or shape; the message names the
    column and what was expected."""


class InvalidPriorityError(KaryReplayError, ValueError):
    """A priority that is NaN, infinite, negative or too large."""


class InvalidKeyError(KaryReplayError, KeyError):
    """A key the buffer never handed out (stale keys are not errors: they are counted)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EmptyBufferError(KaryReplayError):
    """Sampling from a buffer with no item, or whose priorities are all zero."""


class ContentionError(KaryReplayError):
    """Writers held every slot a sample drew, draw after draw; retryable."""

    retryable = True


class CheckpointError(KaryReplayError, OSError):
    """A checkpoint that cannot be written or read; ``kind`` says why: ``io`` (the file
    system refused), ``exists`` (the target exists), ``notfound``, ``uncommitted`` (no
    COMMIT: a save that did not finish), ``corrupt`` (a CRC or length mismatch), ``format``
    (not this format or version), ``invalid`` (fields that contradict each other) or
    ``mismatch`` (not the schema or capacity asked for)."""

    kind: str | None = None

    def __str__(self) -> str:  # OSError would format errno fields
        return str(self.args[0]) if self.args else ""


class AllocationError(KaryReplayError, MemoryError):
    """The memory a call asked for is not available (nothing was changed)."""


class RateLimitedError(KaryReplayError):
    """A rate limiter's ``try_*`` call that it did not admit now: the ratio of samples to
    inserts would leave its range; retryable (another thread's call may make room)."""

    retryable = True


class RateLimitTimeoutError(KaryReplayError, TimeoutError):
    """A rate limiter did not admit the call within its timeout; nothing was spent;
    retryable."""

    retryable = True


class SharedBufferError(KaryReplayError, OSError):
    """A :class:`kary_replay.SharedReplayBuffer` could not be created or attached: its name
    is taken (create) or unknown (attach), the file is not a shared buffer of this version's
    layout, or the system refused a call (nothing was changed)."""


class ClosedError(KaryReplayError):
    """The rate limiter was closed: its waiters are woken with this, and later calls get it."""


class ShardUnavailableError(KaryReplayError):
    """A shard of a :class:`kary_replay.ray.ShardedReplay` did not answer: its Ray actor
    died (killed, or its node lost). ``shard`` is its number. Restart it from a checkpoint
    with :meth:`~kary_replay.ray.ShardedReplay.restart_shard`.

    What the failed call changed on the other shards: an insert, a sample and a save touch
    one shard or only read; an ``update_priorities(..., wait=True)`` whose check found the
    shard dead changed nothing (``applied`` is empty); one whose shard died after the check
    passed lists in ``applied`` the shards whose parts did apply. ``applied`` is None for
    the other calls, and for a fire-and-forget update, whose parts each shard applies on its
    own."""

    shard: int | None = None
    #: The shards whose part of a waited-for update applied (see the class doc).
    applied: list[int] | None = None

    def __init__(self, message: str, shard: int | None = None) -> None:
        super().__init__(message)
        self.shard = shard


__all__ = [
    "AllocationError",
    "CheckpointError",
    "ClosedError",
    "ContentionError",
    "EmptyBufferError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidPriorityError",
    "KaryReplayError",
    "RateLimitTimeoutError",
    "RateLimitedError",
    "SchemaError",
    "ShardUnavailableError",
    "SharedBufferError",
]
