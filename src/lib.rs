//! # kary-replay
//!
//! Prioritized experience replay for reinforcement learning on a cache-aligned K-ary sum
//! tree, after "Parallel Actors and Learners" (Zhang, Kuppannagari, Prasanna, HiPC 2021).
//!
//! What to choose: one thread, [`ReplayBuffer`] (`&mut self`); actors and learners on
//! threads, [`SplitLockBuffer`] (or [`LockFreeBuffer`] for writers that must never take a
//! lock), with actors inserting through a [`Writer`]; every concurrent buffer offers one
//! `&self` API, [`ConcurrentBuffer`]. Beside them: [`sequence`] (lanes of steps, windows
//! over them: n-step returns, sequences, stacked frames), `ShmBuffer` (one buffer shared by
//! processes, on Unix), [`shard`] (several buffers sampled exactly as their union),
//! [`rate`] (Reverb's rate limits), [`checkpoint`], and `gpu` (feature `tch`: buffers whose
//! columns live on a device). The repository's `docs/layout.md` maps every file; the
//! README compares the choices.
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
    SplitLockBuffer, Stats, UpdateReport, WeightNormalization, Writer, MAX_TIMES_SAMPLED,
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
