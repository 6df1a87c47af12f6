//! The slot protocol's pieces that every family copying rows builds on (docs/design.md,
//! "Layers"): the shared tree a family's leaves live in ([`SharedTree`], its
//! [`Candidate`]s), the one redraw loop ([`redraw`]), the update/save gate ([`UpdateGate`])
//! and the chunked priority update ([`update_in_chunks`]). The state words and rows are
//! `buffer/slots/`; the flat family is `buffer/slot_buffer/`, the window family
//! `sequence/`, and neither reaches into the other.

mod consume;
mod distinct;
mod gate;
mod raw;
mod redraw;
mod shared_tree;
mod shuffled;

pub use consume::MAX_TIMES_SAMPLED;
pub(crate) use consume::{Counted, DrawCounts};
pub use distinct::Distinct;
pub(crate) use distinct::{batch_weights, drawn_batch, too_few, DrawnBatch};
pub(crate) use gate::UpdateGate;
pub(crate) use raw::{RawPriorities, RawUpdate};
pub(crate) use redraw::{redraw, Pick};
pub(crate) use shared_tree::Uniform;
pub use shared_tree::{Candidate, Drawn, Fill, SharedTree};
pub(crate) use shuffled::{too_few_to_shuffle, Passes};

use super::slots::Slots;
use super::{Key, UpdateReport};

/// Draws for one sampled item before the sample gives up with `Error::Contention`.
#[cfg(not(loom))]
pub(crate) const MAX_ATTEMPTS: u32 = 4096;
/// Loom explores every retry: keep the loop short.
#[cfg(loom)]
pub(crate) const MAX_ATTEMPTS: u32 = 3;

/// Redraws inside a stratified item's own stratum before its redraws span the whole range:
/// a stratum covered by one slot in flight (a write, or a clear, that
/// has not zeroed its leaf yet) would otherwise fail every redraw until `Contention`.
#[cfg(not(loom))]
pub(crate) const STRATUM_ATTEMPTS: u32 = 8;
#[cfg(loom)]
pub(crate) const STRATUM_ATTEMPTS: u32 = 1;

/// Entries of an update applied together: their exponents are paid outside any lock, and
/// [`SharedTree::update`] gets at most this many at a time (so it can stage them on the stack).
pub(crate) const UPDATE_CHUNK: usize = 64;

/// A value per slot (`read`: the stored priority, or the raw one) of checked `keys` into
/// `out` (room made fallibly), each read as a sampler reads an item: joined in the state that
/// shows the key current (counted mode: no writer can start meanwhile), or, in optimistic
/// mode, kept only if the slot still shows it after the read: NaN for a stale key. Returns
/// how many were stale. Every slot-protocol buffer's `priorities_of` and `raw_priorities_of`,
/// the sequence buffer's windows included.
pub(crate) fn read_priorities(
    read: impl Fn(usize) -> f64,
    slots: &Slots,
    keys: &[Key],
    out: &mut Vec<f64>,
) -> crate::error::Result<usize> {
    crate::mem::reserve(out, keys.len())?;
    let mut stale = 0;
    for &key in keys {
        let state = slots.state(key.index);
        let value = slots
            .holds(key, state)
            .then(|| slots.try_read(key.index, state))
            .flatten()
            .and_then(|guard| {
                let p = read(key.index);
                guard.still_current().then_some(p)
            });
        stale += usize::from(value.is_none());
        out.push(value.unwrap_or(f64::NAN));
    }
    Ok(stale)
}

/// Apply checked raw `priorities` to `keys` through `tree` in chunks of [`UPDATE_CHUNK`]
/// (each raised to `alpha` outside any lock), keeping them in `raw` where the buffer keeps
/// raw priorities; returns the report and the largest raw priority applied (0 when none). Every slot-protocol buffer's update, the sequence buffer's windows included.
pub(crate) fn update_in_chunks<T: SharedTree>(
    alpha: f64,
    raw: Option<&RawPriorities>,
    tree: &T,
    slots: &Slots,
    keys: &[Key],
    priorities: &[f64],
) -> (UpdateReport, f64) {
    let mut report = UpdateReport::default();
    let mut max_applied = 0.0f64;
    for (keys, priorities) in keys
        .chunks(UPDATE_CHUNK)
        .zip(priorities.chunks(UPDATE_CHUNK))
    {
        let mut stored = [0.0f64; UPDATE_CHUNK];
        for (s, &p) in stored.iter_mut().zip(priorities) {
            *s = super::stored_at(alpha, p);
        }
        let raw = RawUpdate {
            store: raw,
            raw: priorities,
            alpha,
        };
        let (chunk, max) = tree.update(slots, keys, &stored[..keys.len()], raw);
        report.applied += chunk.applied;
        report.stale += chunk.stale;
        max_applied = max_applied.max(max);
    }
    (report, max_applied)
}
