//! # kary-replay
//!
//! Prioritized experience replay for reinforcement learning on a cache-aligned K-ary sum
//! tree, after "Parallel Actors and Learners" (Zhang, Kuppannagari, Prasanna, HiPC 2021).
//!
//! - [`SumTree`]: the K-ary sum tree (fanout 2..=64, any capacity), with a branch-free,
//!   batched, prefetching inverse-CDF descent that never returns a zero-priority leaf.
//! - [`Schema`] / [`storage`]: columnar, FIFO-ring storage of transitions.
//! - [`ReplayBuffer`]: the sequential prioritized buffer (`&mut self`), with keys that
//!   carry generations so that priority updates for overwritten slots are dropped.
//! - The concurrent buffers, one `&self` API ([`ConcurrentBuffer`], `Send + Sync`,
//!   dyn-compatible) for actor threads inserting while learner threads sample and update:
//!   [`SplitLockBuffer`] (a tree lock and a last-level lock, lazy writing, posted writes:
//!   the default choice), [`LockFreeBuffer`] (no lock on the tree: CAS-recomputed parents)
//!   and [`GlobalLockBuffer`] (one mutex around a [`ReplayBuffer`]: the baseline).
//! - [`Writer`]: an actor's staged writer (`buffer.writer(n)`): items pushed one at a time
//!   go to the buffer n at a time in one batch insert.
//! - `gpu` (feature `tch`): `DeviceBuffer` keeps the tree and the columns as tensors on a
//!   device and samples a batch there; `HybridBuffer` keeps a CPU concurrent tree and moves
//!   only the sampled indices.
//! - [`shard`]: several buffers sampled exactly as one holding their union (every buffer's
//!   [`Stats`] and `sample_at_into`, a [`shard::Coordinator`], keys that name their shard,
//!   the in-process [`shard::ShardedBuffer`]); the Python package's Ray layer is built on it.
//!
//! Choosing: one thread, [`ReplayBuffer`]; actors and learners on threads,
//! [`SplitLockBuffer`] (or [`LockFreeBuffer`] for writers that must never take a lock),
//! with actors inserting through a [`Writer`].
//!
//! Correctness: every failed call changes nothing and returns a typed [`Error`]; sums are
//! bit-exact (each parent recomputed from its children, never moved by a delta); a sample
//! never copies a slot being written; nothing inserted is lost except by FIFO eviction; a
//! priority update by a key whose slot was overwritten is dropped and counted stale. The
//! concurrent protocols are model-checked with loom (each model also against a deliberately
//! broken twin), stress-tested, and run under Miri and ThreadSanitizer. The [`design`]
//! module has the protocols and the arguments.
//!
//! ```
//! use kary_replay::{Config, DType, ReplayBuffer, SampleMode, Schema};
//! use rand::{rngs::SmallRng, SeedableRng};
//!
//! let schema = Schema::new()
//!     .column("obs", DType::F32, 4)
//!     .column("action", DType::I64, 1);
//! let mut buffer = ReplayBuffer::new(Config::builder(1000, schema).alpha(0.6).build()?)?;
//! for step in 0..100 {
//!     let obs = [step as f32; 4];
//!     buffer.insert(&[obs[..].into(), (&[step as i64][..]).into()], None)?;
//! }
//! let mut rng = SmallRng::seed_from_u64(1);
//! let batch = buffer.sample(32, 0.4, SampleMode::Stratified, &mut rng)?;
//! let td_errors: Vec<f64> = batch.weights.iter().map(|w| w * 0.5).collect();
//! let report = buffer.update_priorities(&batch.keys, &td_errors)?;
//! assert_eq!(report.applied, 32);
//! # Ok::<(), kary_replay::Error>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

pub mod buffer;
pub mod checkpoint;
mod dtype;
pub mod design {
    #![doc = include_str!("../docs/design.md")]
}
mod error;
mod faults;
#[cfg(feature = "tch")]
pub mod gpu;
mod mem;
pub mod rate;
mod region;
mod rng;
pub mod sequence;
pub mod shard;
// `pub` types in a private module: `GlobalSpinLockBuffer`'s lock, unnameable outside.
mod spin;
pub mod storage;
mod sync;
pub mod tree;

pub use buffer::{
    ConcurrentBuffer, Config, ConfigBuilder, DefaultPriority, Descent, Draw, GlobalLockBuffer,
    GlobalSpinLockBuffer, Key, LockFreeBuffer, ReplayBuffer, Rows, SampleBatch, SampleMode,
    SplitLockBuffer, Stats, UpdateReport, WeightNormalization, Writer,
};
#[cfg(all(unix, not(loom)))]
pub use buffer::{Participant, ShmBuffer};
pub use checkpoint::{Checkpoint, Load};
pub use error::{CheckpointErrorKind, Error, Result};
#[cfg(loom)]
#[doc(hidden)]
pub use faults::Faults;
/// The loom models' hooks (`faults.rs`): a modeled death, a thread's participant.
#[cfg(loom)]
#[doc(hidden)]
pub mod faults_hooks {
    pub use crate::faults::{as_participant, die_at, Died};
}
pub use rate::Wait;
pub use rng::{RandomSource, Xoshiro256};
pub use storage::{ColumnData, ColumnSlice, ColumnSliceMut, DType, IntoDims, Schema};
pub use tree::{Consistency, Fanout, SumTree, MAX_CAPACITY, MAX_PRIORITY};

/// The README's Rust example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
