//! The crate's one error type.
//!
//! Every fallible operation validates all of its input before it changes anything, so an
//! `Err` always means "nothing happened".

use crate::dtype::DType;

/// Everything that can go wrong in a call into this crate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A priority was NaN, infinite, negative, or too large once raised to alpha.
    #[error("invalid priority {value} at position {position}: priorities must be finite, >= 0 and <= {max:e} after the alpha exponent")]
    InvalidPriority {
        /// Position of the offending value in the caller's input.
        position: usize,
        /// The value as given.
        value: f64,
        /// The largest stored priority accepted ([`crate::MAX_PRIORITY`]).
        max: f64,
    },
    /// A shared buffer could not be created, attached or used: its name is taken or
    /// unknown, its mapping is of another layout, version or configuration, the handle was
    /// inherited across `fork` (attach again in the child), or the system refused a call.
    #[error("shared buffer {name:?}: {detail}")]
    Shared {
        /// The buffer's name ("memfd" for an anonymous one).
        name: String,
        /// What went wrong.
        detail: String,
    },
    /// A capacity of zero, or one too large to address.
    #[error("invalid capacity {0}: must be between 1 and {max}", max = crate::MAX_CAPACITY)]
    InvalidCapacity(usize),
    /// The fanout is not one of 2, 4, 8, 16, 32, 64.
    #[error("unsupported fanout {0}: must be one of 2, 4, 8, 16, 32, 64")]
    UnsupportedFanout(usize),
    /// A parameter (alpha, beta, initial priority) is out of its range.
    #[error("invalid parameter {name} = {value}: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        name: &'static str,
        /// The value as given.
        value: f64,
        /// What the range is.
        reason: &'static str,
    },
    /// An insert held an item whose policy version is below the buffer's floor
    /// ([`ConcurrentBuffer::retire_before`](crate::ConcurrentBuffer::retire_before)):
    /// nothing was inserted.
    #[error(
        "policy version {version} is retired: the buffer keeps versions >= {floor} (retire_before)"
    )]
    RetiredVersion {
        /// The first retired version in the call's items.
        version: i64,
        /// The buffer's floor.
        floor: i64,
    },
    /// The schema is unusable (no columns, duplicate or empty names, zero shapes).
    #[error("invalid schema: {0}")]
    InvalidSchema(String),
    /// A rate limiter did not admit the call now (`try_*`): the ratio of samples to inserts
    /// would leave its range. Retryable: another thread's insert or sample may make room.
    #[error("rate limited: {0} would take the ratio of samples to inserts out of its range")]
    RateLimited(&'static str),
    /// A rate limiter did not admit the call before its timeout (`*_timeout`); nothing was
    /// spent. Retryable.
    #[error("timed out after {seconds} s waiting for the rate limiter to admit {what}")]
    Timeout {
        /// What waited: "an insert" or "a sample".
        what: &'static str,
        /// The timeout.
        seconds: f64,
    },
    /// The rate limiter was closed: every waiter is woken with this, and no call is
    /// admitted afterwards.
    #[error("the rate limiter is closed")]
    Closed,
    /// A sequence buffer's configuration or a lane call is unusable: a period of 0, a
    /// window longer than a lane's ring, a stack on a column the schema does not have, an
    /// episode ended before any step, a lane that already has a writer.
    #[error("invalid sequence use: {0}")]
    InvalidSequence(String),
    /// A step was pushed to a lane after its writer closed it.
    #[error("lane {lane} is closed")]
    LaneClosed {
        /// The lane.
        lane: usize,
    },
    /// A sample of zero items was asked for.
    #[error("batch size must be at least 1")]
    ZeroBatch,
    /// The buffer holds nothing.
    #[error("the buffer is empty")]
    Empty,
    /// Every stored item has priority 0, so nothing can be sampled.
    #[error("every stored priority is 0: nothing can be sampled")]
    ZeroTotalPriority,
    /// The number of column slices differs from the schema's.
    #[error("expected {expected} columns, got {got}")]
    ColumnCount {
        /// Columns in the schema.
        expected: usize,
        /// Columns given.
        got: usize,
    },
    /// A column slice has another element type than the schema says.
    #[error("column {column:?}: expected dtype {expected:?}, got {got:?}")]
    ColumnType {
        /// Column name.
        column: String,
        /// dtype in the schema.
        expected: DType,
        /// dtype given.
        got: DType,
    },
    /// A column slice holds the wrong number of elements.
    #[error("column {column:?}: expected {expected} elements, got {got}")]
    ColumnLength {
        /// Column name.
        column: String,
        /// Elements expected (items x shape).
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// Two inputs that must have the same length do not.
    #[error("length mismatch: {what} has {got} entries, expected {expected}")]
    LengthMismatch {
        /// Which input.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// An index or key names a slot outside the buffer, or a key that this buffer never made.
    #[error("index {index} is out of range for capacity {capacity}")]
    OutOfRange {
        /// The index given.
        index: usize,
        /// The buffer's capacity.
        capacity: usize,
    },
    /// A key this buffer never handed out: another buffer's (its tag is not this buffer's),
    /// or a generation that does not belong to its slot.
    #[error("key (slot {index}, generation {generation:#x}) was not handed out by this buffer (key tag {}, the buffer's {tag})", generation >> 48)]
    InvalidKey {
        /// Slot index in the key.
        index: usize,
        /// Generation word in the key (its tag and insertion number, [`crate::Key`]).
        generation: u64,
        /// The buffer's key tag.
        tag: u16,
    },
    /// A key given to a [`ShardedBuffer`](crate::shard::ShardedBuffer) carries the tag of
    /// none of its shards.
    #[error("key {key:#x} carries key tag {}, which no shard of this buffer has ({shards} shards)", key >> 48)]
    UnknownShard {
        /// The key's generation word as given (tag and insertion number).
        key: u64,
        /// Shards in the buffer.
        shards: usize,
    },
    /// A concurrent sample kept landing on slots that writers were overwriting, and gave up
    /// after a bounded number of attempts rather than wait: retry the call.
    #[error("sampling gave up after {attempts} attempts on slots being written; retry")]
    Contention {
        /// Attempts made for the item that failed.
        attempts: u32,
    },
    /// A concurrent buffer's slot has been written 2^46 - 1 times, the most its state word
    /// can count; no more items can be inserted.
    #[error("slot {index} has been overwritten the maximum number of times")]
    GenerationsExhausted {
        /// The slot.
        index: usize,
    },
    /// A size derived from the caller's input (items x shape, rows x bytes) does not fit in
    /// the address space: nothing was allocated or copied.
    #[error("size overflow: {what} does not fit in usize")]
    SizeOverflow {
        /// Which size.
        what: &'static str,
    },
    /// Memory for the buffer could not be reserved.
    #[error("could not allocate {bytes} bytes")]
    Allocation {
        /// Bytes requested.
        bytes: usize,
    },

    /// A checkpoint could not be written, read or trusted (see [`crate::checkpoint`]). Nothing
    /// changed: a failed save leaves no checkpoint behind, a failed load returns no buffer.
    #[error("checkpoint {path}: {kind}: {detail}")]
    Checkpoint {
        /// What went wrong.
        kind: CheckpointErrorKind,
        /// The directory or file concerned.
        path: String,
        /// The detail.
        detail: String,
    },

    /// A tensor given to the device buffers (feature `tch`) is on another device, of another
    /// element type or of another shape than the buffer expects.
    #[error("tensor mismatch: {0}")]
    TensorMismatch(String),
}

impl Error {
    /// Whether the same call may succeed when simply made again: the condition was transient
    /// ([`Error::Contention`]: writers were busy on the slots drawn, or the whole tree was for
    /// a moment at 0 while an insert was in flight; [`Error::RateLimited`] and
    /// [`Error::Timeout`]: a rate limiter did not admit the call yet). Every other error is
    /// final for the same arguments.
    ///
    /// ```
    /// use kary_replay::Error;
    /// assert!(Error::Contention { attempts: 4096 }.is_retryable());
    /// assert!(!Error::ZeroTotalPriority.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contention { .. } | Error::RateLimited(_) | Error::Timeout { .. }
        )
    }
}

/// What kind of checkpoint failure an [`Error::Checkpoint`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckpointErrorKind {
    /// The file system refused an operation (permissions, a full disk, a path that is a
    /// file).
    Io,
    /// The target of a save exists already.
    Exists,
    /// No checkpoint there: a missing directory, manifest or data file.
    NotFound,
    /// The directory has no valid `COMMIT`: a save that did not finish.
    Uncommitted,
    /// A file's length or CRC-32 differs from the manifest's, or the manifest's from `COMMIT`:
    /// the bytes were damaged or truncated.
    Corrupt,
    /// A file is not in the format: the manifest is not valid JSON of version 1, a data
    /// file's NPY header is not the one its column needs.
    Format,
    /// The contents contradict themselves or the buffer's rules: a NaN or negative priority,
    /// a generation that does not belong to its slot, a length past the capacity.
    Invalid,
    /// The checkpoint differs from what the caller asked for (schema, capacity).
    Mismatch,
}

impl std::fmt::Display for CheckpointErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CheckpointErrorKind::Io => "I/O error",
            CheckpointErrorKind::Exists => "already exists",
            CheckpointErrorKind::NotFound => "not found",
            CheckpointErrorKind::Uncommitted => "not committed",
            CheckpointErrorKind::Corrupt => "corrupt",
            CheckpointErrorKind::Format => "not in the checkpoint format",
            CheckpointErrorKind::Invalid => "invalid contents",
            CheckpointErrorKind::Mismatch => "does not match",
        })
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
