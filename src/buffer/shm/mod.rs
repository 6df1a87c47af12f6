//! One buffer shared by several processes: [`ShmBuffer`], the lock-free buffer with its
//! state in one shared mapping.
//!
//! The mapping (a name under /dev/shm, or an anonymous memfd passed by descriptor):
//!
//! ```text
//!   0        header: magic, version, layout hash, size, configuration length, ready flag
//!   4 KiB    the configuration, as JSON (schema, capacity, fanout, alpha, key tag, ...)
//!   64 KiB   the region: the participants table, then the lock-free buffer's slot words,
//!            columns, tree nodes and counters (`region.rs`), at offsets that follow from
//!            the configuration alone
//! ```
//!
//! Every byte is reserved when the buffer is created (`posix_fallocate`): a /dev/shm too
//! small is an `Error::Allocation` then, never a SIGBUS later. The creator writes the
//! header's ready flag last (Release); an attacher checks magic, version, size and the
//! layout hash (of the configuration and of this build's layout) before it uses anything.
//!
//! The protocol is the lock-free buffer's (`lock_free.rs`, `slots/`), the same code over
//! the mapping, with two changes that make a process's death survivable (docs/design.md,
//! "One buffer across processes"):
//!
//! - Readers hold nothing (`ReadMode::Optimistic`): a sampler copies a row with atomic
//!   loads and keeps it only if the slot's word did not change meanwhile, so a sampler that
//!   dies leaves nothing behind, and a writer never waits for readers. Writers and updaters
//!   write their participant number into the slot's word when they take it.
//! - Reservations are recorded (`buffer/reservations.rs`): a writer records the generations it is about
//!   to take from the cursor before its CAS, and confirms them after.
//!
//! Participants. Each handle takes an entry of the participants table and a lease on it: an
//! open-file-description lock on one byte of the file, which the kernel drops when the
//! process dies. A survivor that finds an entry whose lease nobody holds and whose process
//! number is still set recovers it (`recover.rs`): every slot word that names it is
//! published empty at its next epoch (or, held by an update, released), every generation it
//! reserved and did not write is published empty, and the tree is climbed again from its
//! leaves. A watchdog thread per handle looks every [`WATCH_INTERVAL`]; `recover` does it
//! at once.

#[cfg(all(unix, not(loom)))]
mod flat;
#[cfg(all(unix, not(loom)))]
mod handle;
#[cfg(all(unix, not(loom)))]
pub(crate) mod os;
mod recover;
#[cfg(all(unix, not(loom), test))]
mod tests;

#[cfg(feature = "kill-points")]
pub use crate::faults::{pause_at, Point};
#[cfg(loom)]
pub(crate) use recover::Recoverer;

#[cfg(all(unix, not(loom)))]
pub use flat::ShmBuffer;
#[cfg(all(unix, not(loom)))]
pub(crate) use handle::{shared_handle_api, Family, Handle};
#[cfg(all(unix, not(loom)))]
pub use handle::{Participant, WATCH_INTERVAL};
