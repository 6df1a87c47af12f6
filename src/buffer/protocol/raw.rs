//! Raw priorities: each slot's priority as it was given, before the exponent, so that
//! `set_alpha` can recompute every stored priority exactly (docs/design.md, "Alpha at run
//! time"). A writer, owning its slot, stores the raw priority beside the leaf; an update
//! stores it under the same hold of the slot as the leaf ([`RawPriorities::apply`]).

use crate::error::Result;
use crate::region::{Region, RegionBuf};
use crate::sync::{AtomicF64, Ordering};

/// One raw priority per slot, in the buffer's region (a shared mapping's too).
pub(crate) struct RawPriorities {
    words: RegionBuf<AtomicF64>,
    /// The loom twin whose update stores the raw priority and the leaf without checking
    /// that the raw one is still its own.
    faults: crate::faults::Faults,
}

impl std::fmt::Debug for RawPriorities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPriorities").finish_non_exhaustive()
    }
}

/// What an update applies beside the stored priorities (`SharedTree::update`): the raw
/// priorities, where they are kept (if the buffer keeps them), and the alpha the stored ones
/// were computed with.
#[derive(Clone, Copy)]
pub(crate) struct RawUpdate<'a> {
    pub(crate) store: Option<&'a RawPriorities>,
    pub(crate) raw: &'a [f64],
    pub(crate) alpha: f64,
}

impl RawPriorities {
    /// Raw priorities for `capacity` slots from `region`, each 0.
    pub(crate) fn in_region(capacity: usize, region: &mut Region) -> Result<RawPriorities> {
        let words = region.alloc(capacity, 128, || AtomicF64::new(0.0))?;
        Ok(RawPriorities {
            words,
            faults: crate::faults::Faults::none(),
        })
    }

    /// Plant the loom twin's fault.
    #[cfg(loom)]
    pub(crate) fn inject_faults(&mut self, faults: &crate::faults::Faults) {
        self.faults = *faults;
    }

    /// The raw priority of slot `slot`'s item (meaningful while the slot holds one).
    #[inline]
    pub(crate) fn get(&self, slot: usize) -> f64 {
        // ORDERING: SeqCst, for `apply`'s argument (with its stores and the leaf's).
        self.words[slot].load(Ordering::SeqCst)
    }

    /// Set slot `slot`'s raw priority: by its writer, owning it, or by a save's restore.
    #[inline]
    pub(crate) fn set(&self, slot: usize, raw: f64) {
        // ORDERING: SeqCst, as in `get`.
        self.words[slot].store(raw, Ordering::SeqCst);
    }

    /// An update of a current key's slot, held by the caller as the tree's update holds it
    /// (several updaters may hold one slot at once): swap in `raw`, then store the leaf
    /// `store_leaf(stored)`, then read the raw priority again with a read-modify-write and,
    /// while another updater's raw priority replaced ours, store the leaf of that one.
    ///
    /// Why the leaf ends equal to the last raw priority's power, from modification orders
    /// alone: take the last leaf store L, by updater X, of `f(r)` (`f` the exponent), after
    /// which X's read-modify-write V saw the raw priority `r`. A raw swap W after V in the
    /// raw word's modification order reads from V's release sequence (every access to the
    /// word after the writer's is a read-modify-write), so V synchronizes with W (AcqRel):
    /// L happens before W, and so before W's updater's own leaf store, which then follows L
    /// in the leaf's modification order. L was the last: there is no such W, and V read
    /// the last raw priority, `r`. `loom_tests/` checks two updaters of one key, and that
    /// the twin without the second read fails.
    #[inline]
    pub(crate) fn apply(
        &self,
        slot: usize,
        raw: f64,
        stored: f64,
        alpha: f64,
        store_leaf: impl Fn(f64),
    ) {
        // ORDERING: AcqRel read-modify-writes (see above).
        self.words[slot].swap(raw, Ordering::AcqRel);
        store_leaf(stored);
        let mut used = raw;
        while self.faults.update_rereads_raw() {
            // ORDERING: AcqRel, see above.
            let now = self.words[slot].read_modify(Ordering::AcqRel);
            if now.to_bits() == used.to_bits() {
                break;
            }
            used = now;
            store_leaf(super::super::stored_at(alpha, now));
        }
    }
}
