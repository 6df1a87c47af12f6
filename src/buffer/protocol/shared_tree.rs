//! What a variant supplies: the tree shared by writers and samplers, and the candidates it
//! hands a sampler.

use super::super::slots::{SlotState, Slots};
use super::super::{Config, Key, UpdateReport};
use crate::error::Result;
use crate::tree::Consistency;

/// A sampling candidate: what the tree said about one slot at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub(crate) index: usize,
    pub(crate) priority: f64,
    pub(crate) state: SlotState,
}

/// A uniform draw over a FIFO ring's items: the `n` items of generations `first..first + n`
/// (slot `g % capacity`), each equally likely ([`SampleMode::Uniform`](crate::SampleMode)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Uniform {
    pub(crate) first: u64,
    pub(crate) n: u64,
    pub(crate) capacity: u64,
}

impl Uniform {
    /// The ring's `n` newest items of the `handed_out` generations (a sampler redraws any
    /// that is still being written).
    pub(crate) fn newest(handed_out: u64, n: usize, capacity: usize) -> Uniform {
        let n = n as u64;
        Uniform {
            first: handed_out.saturating_sub(n),
            n,
            capacity: capacity as u64,
        }
    }

    /// The slot of the item a uniform `u` in `[0, 1)` picks.
    #[inline]
    pub(crate) fn slot(&self, u: f64) -> usize {
        let offset = ((u * self.n as f64) as u64).min(self.n.saturating_sub(1));
        ((self.first + offset) % self.capacity) as usize
    }

    /// The candidate of slot `index` (its state first, then its leaf, as the trees do).
    #[inline]
    pub(crate) fn candidate<T: SharedTree>(&self, tree: &T, slots: &Slots, u: f64) -> Candidate {
        let index = self.slot(u);
        let state = slots.state(index);
        Candidate {
            index,
            priority: tree.get(index),
            state,
        }
    }
}

/// What fills a descent's targets given the tree's total: a [`Draw`](crate::Draw)'s.
pub type Fill<'a> = dyn FnMut(f64, &mut [f64]) + 'a;

/// The working space of one descent, kept from sample to sample (no allocation once
/// warm): the targets a draw fills, the leaf each lands on, one candidate per target.
#[derive(Debug, Default)]
pub struct Drawn {
    pub(crate) targets: Vec<f64>,
    pub(crate) indices: Vec<usize>,
    pub(crate) candidates: Vec<Candidate>,
    /// What a batch without replacement has taken.
    pub(crate) distinct: super::Distinct,
    /// With `max_times_sampled`: the draws this call reserved.
    pub(crate) counted: Vec<Candidate>,
    /// A shuffled draw's generations: those the batch holds, and those taken from the pass
    /// and not yet tried.
    pub(crate) held: Vec<u64>,
    pub(crate) pending: Vec<u64>,
}

impl Drawn {
    /// The candidates drawn and the record of what a batch without replacement took, borrowed
    /// apart.
    pub(crate) fn parts(&mut self) -> (&[Candidate], &mut super::Distinct, &mut Vec<Candidate>) {
        (&self.candidates, &mut self.distinct, &mut self.counted)
    }

    /// Ready for a descent of `batch` targets: room for each vector (fallibly), `batch`
    /// targets and indices of 0, no candidate. (A draw without replacement readies
    /// `distinct` itself: other draws never touch it.)
    pub(crate) fn start(&mut self, batch: usize) -> Result<()> {
        crate::mem::reserve(&mut self.targets, batch)?;
        crate::mem::reserve(&mut self.indices, batch)?;
        crate::mem::reserve(&mut self.candidates, batch)?;
        crate::mem::reserve(&mut self.counted, batch)?;
        self.counted.clear();
        self.targets.clear();
        self.targets.resize(batch, 0.0);
        self.indices.clear();
        self.indices.resize(batch, 0);
        self.candidates.clear();
        Ok(())
    }

    /// One uniform candidate per target (each target a uniform in `[0, 1)`, drawn by `fill`
    /// over a total of 1): no tree walk.
    pub(crate) fn uniform<T: SharedTree>(
        &mut self,
        tree: &T,
        slots: &Slots,
        uniform: Uniform,
        fill: &mut Fill<'_>,
    ) {
        fill(1.0, &mut self.targets);
        for (i, &u) in self.indices.iter_mut().zip(&self.targets) {
            *i = uniform.slot(u);
        }
        // States first, then the priorities (as the trees' candidates).
        self.collect(slots, |index| Candidate {
            index,
            priority: 0.0,
            state: slots.state(index),
        });
        tree.get_candidates(&mut self.candidates);
    }

    /// The candidates of the descent's `indices`, one `candidate(index)` each, in order,
    /// each slot's state word asked for `PREFETCH_AHEAD` indices ahead.
    #[inline]
    pub(crate) fn collect(&mut self, slots: &Slots, mut candidate: impl FnMut(usize) -> Candidate) {
        self.candidates.clear();
        for (j, &index) in self.indices.iter().enumerate() {
            if let Some(&ahead) = self.indices.get(j + crate::mem::PREFETCH_AHEAD) {
                slots.prefetch(ahead);
            }
            self.candidates.push(candidate(index));
        }
    }
}

/// How a variant shares its tree. `pub` only so that the public aliases
/// ([`SplitLockBuffer`](super::SplitLockBuffer), [`LockFreeBuffer`](super::LockFreeBuffer))
/// can name `SlotBuffer<T>`; it lives in a private module, so no other crate can name or
/// implement it (a sealed trait).
pub trait SharedTree: Send + Sync + std::fmt::Debug + Sized {
    /// A tree for `config`, its nodes from `region` (the heap for every tree but the atomic
    /// one, which may live in a shared mapping: `region.rs`).
    fn new(config: &Config, region: &mut crate::region::Region) -> Result<Self>;
    /// Priority retrieval.
    fn get(&self, slot: usize) -> f64;
    /// [`Self::get`] of every candidate's slot into its `priority` (a tree with locks takes
    /// them once).
    fn get_candidates(&self, candidates: &mut [Candidate]) {
        for c in candidates {
            c.priority = self.get(c.index);
        }
    }
    fn total(&self) -> f64;
    /// The total and the smallest positive leaf (`None` when none is positive), read
    /// together (under one lock where the tree has one).
    fn total_and_min(&self) -> (f64, Option<f64>);
    /// The largest stored priority.
    fn max_leaf(&self) -> Option<f64>;
    /// The slots of the `m` largest (smallest) positive leaves, best first, ties by the
    /// lower slot, into `out` (cleared first): a heap selector's order (`tree::rank`), read
    /// under one lock where the tree has one.
    fn rank(&self, extreme: crate::tree::Extreme, m: usize, out: &mut Vec<usize>);
    /// Set the leaves of slots whose WRITER flags the caller holds (distinct slots, at most
    /// [`WRITE_CHUNK`] of them), in one tree operation.
    fn set_owned(&self, entries: &[(usize, f64)]);
    /// Lazy writing's first step for slots whose WRITER flags the caller holds (`entries`
    /// as for [`Self::set_owned`], each slot with the priority its install will set): set
    /// their leaves to 0, so that samplers stop choosing them. The writer then makes the
    /// install, [`Self::install_owned`] of the same entries (or, if it unwinds, a
    /// `set_owned` of zeros: [`RetiredLeaves`]). Two freedoms a tree may take:
    /// - a tree whose descents tolerate a parent ahead of its children (the atomic tree: a
    ///   target in a parent's stale mass finds nothing and is drawn again) may store the
    ///   leaves alone and leave the ancestors to the install;
    /// - a tree that makes this write atomically with every other leaf write (SplitLock,
    ///   under its tree lock) may leave alone a leaf that holds its new priority bit for
    ///   bit already: the install then finds it unchanged and propagates nothing. Samplers
    ///   that land on the slot meanwhile are refused by its state word and draw again, as
    ///   for any slot in flight.
    fn retire_owned(&self, entries: &[(usize, f64)]) -> Self::Retired;
    /// What a retire leaves for the install of the same slots (SplitLock: where its writes
    /// wait among the writes posted for the tree lock's next holder).
    type Retired: Copy;
    /// Lazy writing's last tree step: [`Self::set_owned`] of the entries, `retired` being
    /// what [`Self::retire_owned`] returned for them (or for all of them but the first:
    /// LiveMax's first slot was zeroed with its own `set_owned`). A tree may merge the two
    /// (SplitLock turns a retire still posted into the install).
    fn install_owned(&self, entries: &[(usize, f64)], retired: Self::Retired);
    /// Whether a writer that owns a slot may skip both steps of lazy writing for it when
    /// the slot's leaf ([`Self::get`], read once the slot is owned) holds the new priority
    /// already, bit for bit: no retire, no install, nothing above the leaf touched.
    /// Samplers that land on the slot while it is owned are refused by its state word and
    /// draw again, as for any slot in flight. Sound only
    /// if nothing but the owner can write the leaf once the owner's WRITER flag is set and
    /// its readers are gone, and every earlier leaf write is followed by its writer's own
    /// refresh of the ancestors (then leaving the leaf alone leaves the tree as exact as it
    /// was). The default is `false`: on SplitLock an update checks the slot's state under
    /// the tree lock without a read reference, so it may write the leaf after a check made
    /// outside that lock; SplitLock decides under the lock, in its retire, and the install
    /// that it always gets, ordered after any such update by the tree lock, sets the new
    /// priority whatever the retire decided.
    fn keeps_leaves(&self) -> bool {
        false
    }
    /// Apply `stored[j]` to `keys[j]` in order (at most [`UPDATE_CHUNK`] entries), each only
    /// if its key is current, checked atomically with the write against the slot's writers;
    /// where `raw.store` keeps raw priorities, `raw.raw[j]` is kept beside it under the same
    /// hold of the slot (so that the leaf ends as the power of the raw priority kept,
    /// whatever updaters of one key race: [`RawPriorities::apply`](super::RawPriorities::apply)).
    /// Also returns the largest raw priority applied (0 when none).
    fn update(
        &self,
        slots: &Slots,
        keys: &[Key],
        stored: &[f64],
        raw: super::RawUpdate<'_>,
    ) -> (UpdateReport, f64);
    /// `(total, min_positive)`, the targets filled by `fill(total, targets)` and one
    /// candidate per target, all in `drawn` (readied by [`Drawn::start`]);
    /// `Error::ZeroTotalPriority` when the tree holds no positive leaf.
    fn candidates(
        &self,
        slots: &Slots,
        fill: &mut Fill<'_>,
        drawn: &mut Drawn,
    ) -> Result<(f64, f64)>;
    /// The sum of the leaves before leaf `slot`, as the descent's nodes hold it (a draw
    /// without replacement steps over the items it took: `Distinct`).
    fn prefix_before(&self, slot: usize) -> f64;
    /// One candidate for target `x`, or `None` (nothing positive found on the way).
    fn candidate(&self, slots: &Slots, x: f64) -> Option<Candidate>;
    fn consistency(&self) -> Consistency;
    fn memory_bytes(&self) -> usize;
    /// Recompute every internal node from the leaves (exact at quiescence).
    fn rebuild(&self);
    /// Set every leaf to `leaves` and recompute every internal node from them, with no
    /// writer or updater running (a pause: `set_alpha`); samplers may run meanwhile.
    fn reset_leaves(&self, leaves: &[f64]);
    /// Every leaf, as `get` reads them one by one (a save's copy, with no writer running).
    fn copy_leaves(&self, out: &mut Vec<f64>, capacity: usize) {
        out.extend((0..capacity).map(|slot| self.get(slot)));
    }
    /// Set every leaf of a fresh, unshared tree to `leaves` and make the sums exact (a
    /// checkpoint's restore).
    fn restore_leaves(&mut self, leaves: &[f64]);
    /// Take the tree-level faults of a loom model's broken twin (most trees have none).
    #[cfg(loom)]
    fn inject_faults(&mut self, _faults: &crate::faults::Faults) {}
}
