//! Actor-side staging: a per-thread [`Writer`] that collects single inserts and hands them
//! to the buffer's batch-aware `insert_batch` `n` at a time.
//!
//! An actor inserts one transition per environment step. Through `insert` each one pays the
//! concurrent protocol alone (a cursor increment, two tree operations, a slot handshake);
//! through a writer those costs are paid once per `n` items: the cursor is incremented once,
//! SplitLock's locks are taken twice per batch instead of twice per item, and the lock-free
//! tree climbs once per batch, refreshing each shared ancestor once.
//!
//! Visibility: a pushed item is only staged, in the writer's own memory; it becomes part of
//! the buffer (sampleable, counted by `len`, with a key) when the writer flushes: when `n`
//! items are staged, on [`Writer::flush`], when a push switches between explicit and default
//! priorities (one `insert_batch` takes one kind), and when the writer is dropped. Call
//! `flush` before an actor waits (at the end of an episode, say) when staleness matters.
//!
//! Under a rate limit ([`Config::rate_limit`](crate::Config::rate_limit)) the limiter counts
//! at the flush: each flush is one insert of the staged items, admitted whole and waiting as
//! long as it takes, and a push stages without asking it. After
//! [`close`](ConcurrentBuffer::close) a flush returns [`Error::Closed`] at once and keeps its
//! items staged, so a writer dropped after a close does not wait (its items are dropped with
//! it, never inserted).
//!
//! Nothing staged is lost: a flush that fails (a buffer whose generations are exhausted)
//! keeps its items staged and returns the error; only a flush from `Drop` cannot report its
//! error, so call `flush` explicitly before dropping a writer if you need to see it.

use std::ops::Deref;

use super::{ConcurrentBuffer, Key};
use crate::error::{Error, Result};
use crate::rate::Wait;
use crate::storage::{ColumnData, ColumnSlice, ColumnViews};

/// Stages single inserts and writes them to a [`ConcurrentBuffer`] in batches (see the
/// module doc for when staged items become visible). Made with
/// [`ConcurrentBuffer::writer`], or [`Writer::new`] over any pointer to a buffer (`&B`,
/// `&dyn ConcurrentBuffer`, `Arc<B>`, `Arc<dyn ConcurrentBuffer>`). One writer per thread:
/// it takes `&mut self`; the buffer behind it is shared as usual.
///
/// ```
/// use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, Schema};
/// let schema = Schema::new().column("obs", DType::F32, 2);
/// let buffer = LockFreeBuffer::new(Config::builder(1024, schema).build()?)?;
/// let mut writer = buffer.writer(32)?;
/// for step in 0..100 {
///     let obs = [step as f32, 0.5];
///     writer.push(&[(&obs[..]).into()], None)?; // flushes every 32 items
/// }
/// assert_eq!(writer.staged(), 4);
/// assert_eq!(buffer.len(), 96);
/// assert_eq!(writer.flush()?.len(), 4);
/// assert_eq!(buffer.len(), 100);
/// # Ok::<(), kary_replay::Error>(())
/// ```
pub struct Writer<B>
where
    B: Deref,
    B::Target: ConcurrentBuffer,
{
    buffer: B,
    /// Staged items, `batch` rows per column (written up to `staged`).
    columns: Vec<ColumnData>,
    /// Elements per item, per column.
    shapes: Vec<usize>,
    /// Raw priorities of the staged items, when they were given.
    priorities: Vec<f64>,
    /// Whether the staged items carry explicit priorities.
    explicit: bool,
    staged: usize,
    batch: usize,
    /// Keys of the items the last `push` or `flush` wrote.
    keys: Vec<Key>,
    /// How a flush waits for the buffer's rate limiter.
    wait: Wait,
}

impl<B> std::fmt::Debug for Writer<B>
where
    B: Deref,
    B::Target: ConcurrentBuffer,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("batch", &self.batch)
            .field("staged", &self.staged)
            .field("explicit", &self.explicit)
            .finish_non_exhaustive()
    }
}

impl<B> Writer<B>
where
    B: Deref,
    B::Target: ConcurrentBuffer,
{
    /// A writer that flushes every `batch` items (`batch >= 1`; 32 to 256 is typical).
    /// Under a rate limit each flush is one insert of the staged items, admitted whole
    /// (waiting as long as it takes), so `batch` must be at most the limit's
    /// [`Batches::insert`](crate::rate::Batches).
    pub fn new(buffer: B, batch: usize) -> Result<Writer<B>> {
        if batch == 0 {
            return Err(Error::InvalidParameter {
                name: "batch",
                value: 0.0,
                reason: "a writer flushes every `batch` items: at least 1",
            });
        }
        if let Some((_, batches)) = buffer.config().rate_limit() {
            if batch as u64 > batches.insert {
                return Err(Error::InvalidParameter {
                    name: "batch",
                    value: batch as f64,
                    reason: "more than the rate limit's Batches::insert: a flush is one insert, \
                             and a larger one could wait forever (raise Batches::insert)",
                });
            }
        }
        let schema = buffer.config().schema();
        let shapes: Vec<usize> = schema.columns().iter().map(|c| c.shape).collect();
        let columns = schema
            .columns()
            .iter()
            .map(|c| {
                let elements = c.shape.checked_mul(batch).ok_or(Error::SizeOverflow {
                    what: "writer batch x column shape",
                })?;
                ColumnData::zeros(c.dtype, elements)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut priorities = Vec::new();
        priorities
            .try_reserve_exact(batch)
            .map_err(|_| Error::Allocation {
                bytes: batch.saturating_mul(8),
            })?;
        Ok(Writer {
            buffer,
            columns,
            shapes,
            priorities,
            explicit: false,
            staged: 0,
            batch,
            keys: Vec::new(),
            wait: Wait::Block,
        })
    }

    /// Stage one item (one element row per schema column, as for `insert`), with a raw
    /// priority or the buffer's default, and return the keys of the items this push
    /// flushed, in push order (empty when it only staged). Checked now: a bad item or
    /// priority is an error and stages nothing. Flushes when `batch` items are staged (and
    /// first, when this item's kind of priority differs from the staged items'); an error
    /// from a flush leaves its items staged, this one included once it was staged.
    pub fn push(&mut self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<&[Key]> {
        let config = self.buffer.config();
        config.check_insert(config.schema().count_items(columns)?, priority)?;
        self.keys.clear();
        if self.staged > 0 && self.explicit != priority.is_some() {
            self.write_staged()?;
        }
        if self.staged == self.batch {
            // A previous flush failed: try again before staging more.
            self.write_staged()?;
        }
        let row = self.staged;
        for ((dst, src), &shape) in self.columns.iter_mut().zip(columns).zip(&self.shapes) {
            let bytes = shape * src.dtype().size();
            let dst = dst.as_mut_bytes_ptr();
            // SAFETY: `count_items` checked that `src` holds exactly one item (`shape`
            // elements, `bytes` bytes) of the column's dtype, the dtype `dst` was made
            // with; `dst` has room for `batch` rows and `row < batch`; the two are
            // different allocations. Bytes copied from a value of the dtype are a valid
            // value of it (for bool too).
            unsafe {
                crate::mem::copy_row_bytes(src.as_bytes().as_ptr(), dst.add(row * bytes), bytes)
            };
        }
        self.explicit = priority.is_some();
        if let Some(p) = priority {
            self.priorities.push(p);
        }
        self.staged += 1;
        if self.staged == self.batch {
            self.write_staged()?;
        }
        Ok(&self.keys)
    }

    /// Insert the staged items (one `insert_batch`) and return their keys, in push order
    /// (empty when nothing was staged). On error the items stay staged.
    pub fn flush(&mut self) -> Result<&[Key]> {
        self.keys.clear();
        self.write_staged()?;
        Ok(&self.keys)
    }

    /// Insert the staged items, appending their keys to `self.keys`.
    fn write_staged(&mut self) -> Result<()> {
        if self.staged == 0 {
            return Ok(());
        }
        let rows = self.staged;
        // On the stack for the usual few columns: a warm writer's flush allocates nothing
        // (the keys go straight into `self.keys`).
        let views: ColumnViews<'_> = self
            .columns
            .iter()
            .zip(&self.shapes)
            .map(|(c, &shape)| c.as_slice().head(rows * shape))
            .collect();
        let priorities = self.explicit.then_some(&self.priorities[..]);
        (self.buffer).insert_batch_waiting(&views, priorities, &mut self.keys, self.wait)?;
        self.staged = 0;
        self.priorities.clear();
        Ok(())
    }

    /// The keys of the items that the last `push` or `flush` wrote, in push order.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Items staged and not yet in the buffer.
    pub fn staged(&self) -> usize {
        self.staged
    }

    /// Items per flush.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// How each flush waits for the buffer's rate limiter from now on ([`Wait::Block`] when
    /// the writer is made). A flush that is not admitted in time returns
    /// [`Error::RateLimited`] or [`Error::Timeout`] and keeps its items staged: call
    /// [`Self::flush`] again (a push that staged its item before the failed flush staged it
    /// once; one that failed before staging it, because the staged items were of the other
    /// kind of priority or a full batch was left from a failed flush, did not).
    pub fn set_wait(&mut self, wait: Wait) {
        self.wait = wait;
    }

    /// How each flush waits ([`Self::set_wait`]).
    pub fn wait(&self) -> Wait {
        self.wait
    }

    /// The buffer written to.
    pub fn buffer(&self) -> &B::Target {
        &self.buffer
    }
}

impl<B> Drop for Writer<B>
where
    B: Deref,
    B::Target: ConcurrentBuffer,
{
    /// Flushes the staged items; an error cannot be reported here (call
    /// [`Writer::flush`] first to see it).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}
