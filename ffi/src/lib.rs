//! The C ABI of kary-replay (ffi/README.md): the concurrent buffers, with the variant
//! and fanout chosen at creation, for C and C++ callers.
//!
//! Rules (repeated in the header's banner):
//! - Every fallible function returns a `kr_status`: `KR_OK` (0) or a negative error code.
//!   Out-parameters come last and are written only on success; a failed call changes
//!   nothing. `kr_status_str` describes a code; `kr_last_error_message` gives the detail of
//!   the calling thread's last failure.
//! - No panic crosses the boundary: one helper (`boundary`) checks, runs the call inside
//!   `catch_unwind`, and turns a panic into `KR_E_PANIC`.
//! - Values that select behaviour (variant, dtype, mode, ...) are integers checked on entry.
//! - Ownership: `kr_buffer_new` / `kr_buffer_free`, `kr_rng_new` / `kr_rng_free`,
//!   `kr_writer_new` / `kr_writer_free`, `kr_coordinator_new` / `kr_coordinator_free`,
//!   `kr_seq_new` / `kr_seq_free`, `kr_seq_lane` / `kr_lane_free` and
//!   `kr_rate_limiter_new` / `kr_rate_limiter_free` are the only allocations handed to C (a writer holds a reference to its buffer, which
//!   lives until its last writer is freed); everything else is written into the caller's
//!   memory.
//! - Threads: a `kr_buffer` may be used by any number of threads at once (except
//!   `kr_buffer_free`); a `kr_rng`, a `kr_writer` and a `kr_coordinator` by one thread at
//!   a time.
//! - Rate limits: `kr_config.rate_limit` makes the buffer hold the ratio of samples to
//!   inserts (`rate.rs`); `kr_buffer_insert_batch_wait` and `kr_buffer_sample_wait` take a
//!   timeout, `kr_buffer_close` ends every wait; a `kr_rate_limiter` holds a limit apart
//!   from any buffer (any number of threads at once).
//! - Shards: `kr_buffer_stats`, `kr_buffer_sample_at` and a `kr_coordinator` sample the
//!   union of several buffers exactly, wherever each lives (`shard.rs`).
//! - Sequences: a `kr_seq` holds lanes of steps and samples windows over them (n-step
//!   returns, sequences, stacked frames); one `kr_lane` writer per lane (`sequence.rs`).
#![allow(non_camel_case_types)]

mod buffer;
mod checkpoint;
mod config;
mod rate;
mod sample;
mod sequence;
mod shard;
mod shm;
mod status;
mod writer;

pub use buffer::*;
pub use checkpoint::*;
pub use config::*;
pub use rate::*;
pub use sample::*;
pub use sequence::*;
pub use shard::*;
pub use shm::*;
pub use status::*;
pub use writer::*;
