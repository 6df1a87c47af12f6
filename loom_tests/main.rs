//! loom models of every concurrent buffer (CONTRIBUTING.md, "Concurrency checks").
//!
//! Run them with `loom_tests/run.sh` (`RUSTFLAGS="--cfg loom"`, release, bounded by
//! `LOOM_MAX_PREEMPTIONS`). Without `--cfg loom` the same models run once on plain threads
//! as part of `cargo test`, so they always compile.
//!
//! One file per variant runs the thirteen models (a-m, in `scenarios.rs`); `broken.rs` (loom only) runs
//! them on buffers with a deliberate fault each and expects loom to reject every one. `rate.rs`
//! models the rate limiter (r1-r4) and rejects its two broken twins; `sequence.rs` models a
//! lane writer wrapping its ring beside a sampler and an updater (q1-q2) and a save beside a
//! lane writer and beside an updater (q3), and rejects their three. `shm.rs` (loom only)
//! models a shared buffer's writer dying at each protocol point beside a sampler and an
//! updater, then the survivor's recovery, and rejects its two broken recoveries.
//! `sequence_shm.rs` (loom only) models a shared sequence buffer's lane writer dying at each
//! point of a call beside an optimistic sampler, the lane's recovery and its next writer,
//! and rejects a recovery that leaves the dead episode's windows held.

mod support;
#[macro_use]
mod scenarios;

#[cfg(loom)]
mod broken;
mod global_lock;
mod lock_free;
mod rate;
mod sequence;
#[cfg(loom)]
mod sequence_shm;
#[cfg(loom)]
mod shm;
mod split_lock;
