//! A sequence buffer shared by processes: lanes written by actor processes, windows sampled
//! by learner processes, over one mapping (`buffer/shm`'s handle, this family's layout).
//!
//! What changes from one process (docs/design.md, "Sequences across processes"):
//!
//! - **Samplers hold nothing**: they copy a window with atomic loads and keep it only if
//!   its leaf is unchanged after the copy (optimistic mode, the module doc of `sequence`);
//!   lane writers store rows atomically and write their participant number into the state
//!   words they take.
//! - **A lane's state lives in the mapping**, in its [`LaneWords`]: its writer's
//!   participant (`holder`, taken by [`SequenceBuffer::lane`] with a compare-and-swap), the
//!   lock of a call in flight (`lock`: the participant in the call, or the saver), and the
//!   cursor, loaded when a call takes the lock and stored before it lets go. A call works
//!   on its own copy, so the words always hold the cursor as it stood after the last call
//!   that completed. Windows are installed one at a time (no batches).
//! - **A dead lane writer is recovered** by a survivor (the watchdog of any handle), which
//!   takes the lane's lock and repairs it from the words and the leaves' state words:
//!   1. the retirements the dead call made (leaves held, past the cursor's `retired_to`)
//!      are kept, and the ones it had still to make before the row it was writing are
//!      made, so that no window reading that row stays sampleable;
//!   2. the windows it finished (published, past `finished_to`) are kept; the one it was
//!      installing, if any, is published empty, its leaf zeroed;
//!   3. the episode under way is ended where it stood: every window not finished, which
//!      needed steps the writer will never push, is published empty, the row it was
//!      writing (if it died in a call) is skipped, and the lane goes on from the next
//!      window start, no writer holding it.
//!
//!   So a writer killed at any instruction costs the step it was writing and the windows
//!   of its episode that still waited for later steps; no window that reads a half-written
//!   row is ever handed out; the lane takes a new writer after recovery. Priority updates a
//!   dead process held are released (an update is a record of its participant, marked
//!   UPDATING, which the recovery clears with the entry), its save flag cleared, and the
//!   tree climbed again.

use super::{LaneCursor, SequenceBuffer};
use crate::buffer::protocol::SharedTree;
use crate::sync::{spin_wait, AtomicU64, Ordering};

/// `episode` when no episode is under way.
const NO_EPISODE: u64 = u64::MAX;

/// One lane's words in the buffer's region (module doc). `repr(C)`: the same offsets in
/// every process of one build.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct LaneWords {
    /// 0, or the owner number of the participant in a call on the lane (or saving it, or
    /// recovering it).
    lock: AtomicU64,
    /// 0, or the owner number of the participant whose writer holds the lane.
    holder: AtomicU64,
    next: AtomicU64,
    episode: AtomicU64,
    finished_to: AtomicU64,
    retired_to: AtomicU64,
    closed: AtomicU64,
    /// Windows of the lane installed holding a priority, not retired.
    live: AtomicU64,
}

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for LaneWords {}

impl LaneWords {
    pub(super) fn new() -> LaneWords {
        LaneWords {
            lock: AtomicU64::new(0),
            holder: AtomicU64::new(0),
            next: AtomicU64::new(0),
            episode: AtomicU64::new(NO_EPISODE),
            finished_to: AtomicU64::new(0),
            retired_to: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            live: AtomicU64::new(0),
        }
    }

    /// Take the lane's lock as `owner` (spinning while another holds it).
    pub(super) fn lock(&self, owner: u64) {
        let mut attempt = 0;
        // ORDERING: Acquire pairs with the previous holder's Release in `unlock`: its
        // cursor stores and everything its call wrote happen before our loads.
        while self
            .lock
            .compare_exchange_weak(0, owner, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Take the lock from dead participant `dead` (or from nobody); `false` if a live
    /// participant holds it.
    fn take_from(&self, dead: u64, owner: u64) -> bool {
        // ORDERING: Acquire, as in `lock` (a dead holder released nothing).
        [dead, 0].into_iter().any(|from| {
            self.lock
                .compare_exchange(from, owner, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
    }

    pub(super) fn unlock(&self) {
        // ORDERING: Release pairs with the next holder's Acquire CAS.
        self.lock.store(0, Ordering::Release);
    }

    /// The cursor as the last completed call left it (the lock held).
    pub(super) fn load(&self) -> LaneCursor {
        // ORDERING: Relaxed: ordered by the lock's Acquire.
        let episode = self.episode.load(Ordering::Relaxed);
        LaneCursor {
            next: self.next.load(Ordering::Relaxed),
            episode: (episode != NO_EPISODE).then_some(episode),
            finished_to: self.finished_to.load(Ordering::Relaxed),
            retired_to: self.retired_to.load(Ordering::Relaxed),
            staged: Vec::new(),
            closed: self.closed.load(Ordering::Relaxed) != 0,
            live: self.live.load(Ordering::Relaxed),
        }
    }

    /// Store `cursor` (the lock held; nothing staged).
    pub(super) fn store(&self, cursor: &LaneCursor) {
        debug_assert!(cursor.staged.is_empty());
        // ORDERING: Relaxed: published by the lock's Release.
        self.next.store(cursor.next, Ordering::Relaxed);
        (self.episode).store(cursor.episode.unwrap_or(NO_EPISODE), Ordering::Relaxed);
        (self.finished_to).store(cursor.finished_to, Ordering::Relaxed);
        (self.retired_to).store(cursor.retired_to, Ordering::Relaxed);
        (self.closed).store(u64::from(cursor.closed), Ordering::Relaxed);
        self.live.store(cursor.live, Ordering::Relaxed);
    }

    /// Take the lane for a writer of `owner`: `Err(holder)` while another holds it.
    pub(super) fn take(&self, owner: u64) -> Result<(), u64> {
        // ORDERING: Acquire/Release: a lane handed over between processes; the cursor
        // itself is ordered by the lock.
        self.holder
            .compare_exchange(0, owner, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
    }

    /// Give the lane back.
    pub(super) fn give_back(&self) {
        // ORDERING: Release, as in `take`.
        self.holder.store(0, Ordering::Release);
    }

    pub(super) fn live(&self) -> u64 {
        // ORDERING: Relaxed: a count.
        self.live.load(Ordering::Relaxed)
    }
}

impl SequenceBuffer {
    /// Run as participant `owner` of a buffer shared by processes (module doc): optimistic
    /// samplers, lanes taken and kept in their words.
    pub(crate) fn share(&mut self, owner: u64) {
        self.slots
            .set_mode(crate::buffer::slots::ReadMode::Optimistic { owner });
        self.shared = true;
    }

    /// This thread's owner number in a shared buffer.
    pub(super) fn owner(&self) -> u64 {
        self.slots
            .owner()
            .expect("a shared sequence buffer has optimistic slots")
    }

    /// Model hook: run this (heap) buffer as a shared mapping's participants run it
    /// (optimistic samplers, lanes in their words); each model thread says which
    /// participant it is (`faults::as_participant`).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn share_for_model(&mut self) {
        self.share(1);
    }

    /// Model hook: recover dead participants `dead` as a survivor's watchdog does; returns
    /// whether everything was recovered.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn recover_for_model(&self, dead: &[usize]) -> bool {
        let owners: Vec<u64> = dead.iter().map(|&j| j as u64 + 1).collect();
        self.recover_owners(&owners)
    }

    /// Windows that can be sampled, summed over the lanes' words (a shared buffer).
    pub(super) fn shared_len(&self) -> usize {
        self.lane_words.iter().map(|w| w.live()).sum::<u64>() as usize
    }

    /// Recover what the participants with owner numbers `dead` held (module doc), as a
    /// survivor: `false` when a lane is locked by a live participant still (a save), to be
    /// tried again.
    pub(crate) fn recover_owners(&self, dead: &[u64]) -> bool {
        let me = self.owner();
        // Updates in flight: released.
        for leaf in 0..self.config.capacity() {
            let seen = self.slots.state(leaf);
            if !seen.writing() && seen.updating() && dead.contains(&seen.owner()) {
                self.slots.release_dead(leaf, seen, false, || {});
            }
        }
        // A save a dead participant was making: its flag, cleared.
        for &d in dead {
            // ORDERING: SeqCst, as the flag's setting and clearing (`save.rs`).
            let _ = self
                .counters
                .saving
                .compare_exchange(d, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
        let mut complete = true;
        for (lane, words) in self.lane_words.iter().enumerate() {
            // ORDERING: Acquire: the holder's and the lock's last stores (Release).
            let holder = words.holder.load(Ordering::Acquire);
            let locker = words.lock.load(Ordering::Acquire);
            let Some(&d) = dead.iter().find(|&&d| d == holder || d == locker) else {
                continue;
            };
            if !words.take_from(d, me) {
                complete = false;
                continue;
            }
            let torn = locker == d;
            let mut cursor = words.load();
            if torn || holder == d {
                self.repair_lane(lane, &mut cursor, torn);
            }
            words.store(&cursor);
            if holder == d {
                words.give_back();
            }
            words.unlock();
        }
        // Leaves a dead participant stored and did not climb: every sum again.
        self.tree.rebuild();
        complete
    }

    /// Repair lane `lane`, whose writer died (`torn`: inside a call; the lane's lock is
    /// ours): steps 1-3 of the module doc, `cursor` the words' copy, updated.
    fn repair_lane(&self, lane: usize, cursor: &mut LaneCursor, torn: bool) {
        let steps = self.config.steps as u64;
        let period = self.config.period as u64;
        let p = cursor.next;
        // 1. Retirements up to those the row at `p` needed (the dead call's, held already,
        // are kept; its leaf zeroed again in case it died before that).
        let bound = match torn {
            true => (p + self.config.look_back() as u64 - 1).checked_sub(steps),
            false => None,
        };
        if let Some(bound) = bound {
            while cursor.retired_to <= bound && cursor.retired_to < cursor.finished_to {
                let start = cursor.retired_to;
                let (leaf, lap) = self.leaf_of(lane, start);
                let seen = self.slots.state(leaf);
                if seen.writing() && seen.epoch() == lap + 1 {
                    self.tree.set_owned(&[(leaf, 0.0)]);
                } else {
                    self.slots
                        .retire_held(leaf, || self.tree.set_owned(&[(leaf, 0.0)]));
                }
                cursor.retired_to += period;
            }
        }
        // 2. Windows the dead call published are kept.
        while cursor.finished_to < p + u64::from(torn) {
            let (leaf, lap) = self.leaf_of(lane, cursor.finished_to);
            let seen = self.slots.state(leaf);
            if seen.writing() || seen.epoch() <= lap {
                break;
            }
            cursor.finished_to += period;
        }
        // 3. The rest of the episode, the window in flight included, published empty up to
        // the next window start past the row it was writing.
        let next = (p + u64::from(torn)).div_ceil(period) * period;
        while cursor.finished_to < next {
            if !self.faults.recovery_finishes_lane_windows() {
                cursor.finished_to += period;
                continue;
            }
            let (leaf, lap) = self.leaf_of(lane, cursor.finished_to);
            let seen = self.slots.state(leaf);
            if lap == 0 && !seen.writing() {
                let guard = self.slots.begin_write(leaf, 0);
                self.tree.set_owned(&[(leaf, 0.0)]);
                drop(guard);
            } else {
                debug_assert!(seen.writing() && seen.epoch() == lap);
                self.tree.set_owned(&[(leaf, 0.0)]);
                self.slots.finish_held(leaf, lap, false);
            }
            cursor.finished_to += period;
        }
        cursor.next = next;
        cursor.episode = None;
        cursor.live = self.count_live(lane);
    }

    /// Windows of lane `lane` holding an item now (its writer gone).
    fn count_live(&self, lane: usize) -> u64 {
        let per_lane = self.config.starts_per_lane();
        (lane * per_lane..(lane + 1) * per_lane)
            .filter(|&leaf| {
                let seen = self.slots.state(leaf);
                !seen.writing() && self.slots.generation(leaf, seen).is_some()
            })
            .count() as u64
    }
}

#[cfg(all(unix, not(loom)))]
pub use handle::ShmSequenceBuffer;

/// A shared pointer to a sequence buffer wherever it lives: its own memory, or a mapping
/// shared by processes. What a binding holds (and what a [`LaneWriter`](super::LaneWriter)
/// can hold): every call of the buffer goes through it alike.
#[derive(Debug, Clone)]
pub enum SequenceRef {
    /// A buffer of this process ([`SequenceBuffer::new`], a checkpoint's load).
    Owned(std::sync::Arc<SequenceBuffer>),
    /// A buffer in a mapping shared by processes.
    #[cfg(all(unix, not(loom)))]
    Shared(std::sync::Arc<ShmSequenceBuffer>),
}

impl SequenceRef {
    /// The mapping's handle, for a buffer shared by processes.
    #[cfg(all(unix, not(loom)))]
    pub fn shared(&self) -> Option<&ShmSequenceBuffer> {
        match self {
            SequenceRef::Shared(s) => Some(s),
            SequenceRef::Owned(_) => None,
        }
    }
}

impl std::ops::Deref for SequenceRef {
    type Target = SequenceBuffer;
    fn deref(&self) -> &SequenceBuffer {
        match self {
            SequenceRef::Owned(b) => b,
            #[cfg(all(unix, not(loom)))]
            SequenceRef::Shared(b) => b,
        }
    }
}

#[cfg(all(unix, not(loom)))]
mod handle {
    use std::sync::Arc;

    use super::super::config_json::{sequence_config_from_json, sequence_config_json};
    use super::super::{SequenceBuffer, SequenceConfig};
    use crate::buffer::reservations::Entry;
    use crate::buffer::shm::{shared_handle_api, Family, Handle};
    use crate::error::Result;
    use crate::region::{Region, RegionBuf};

    impl Family for SequenceBuffer {
        type Config = SequenceConfig;
        const MAGIC: [u8; 8] = *b"KRSHMSEQ";
        const WHAT: &'static str = "shared sequence buffer";

        fn prepare(mut config: SequenceConfig) -> SequenceConfig {
            config.tree = config.tree.clone().tagged();
            config
        }
        fn config_json(config: &SequenceConfig) -> String {
            sequence_config_json(config)
        }
        fn config_from_json(json: &[u8], label: &str) -> Result<SequenceConfig> {
            sequence_config_from_json(json, std::path::Path::new(label))
        }
        fn build(config: &SequenceConfig, region: &mut Region) -> Result<Self> {
            SequenceBuffer::in_region(config.clone(), None, region)
        }
        fn layout_sizes() -> Vec<usize> {
            vec![
                std::mem::size_of::<super::super::Counters>(),
                std::mem::size_of::<super::LaneWords>(),
                std::mem::size_of::<crate::rate::RateWords>(),
            ]
        }
        fn join(&mut self, me: usize, table: &Arc<RegionBuf<Entry>>) {
            self.share(me as u64 + 1);
            self.journal = Some(crate::buffer::reservations::Journal::new(
                Arc::clone(table),
                me,
            ));
        }
        fn recover(&self, _table: &[Entry], dead: &[usize]) -> bool {
            let owners: Vec<u64> = dead.iter().map(|&j| j as u64 + 1).collect();
            self.recover_owners(&owners)
        }
    }

    /// A [`SequenceBuffer`] in a mapping shared by processes: lanes written by actor
    /// processes, windows sampled and updated by learner processes (the module doc of
    /// `sequence::shared`, docs/design.md "Sequences across processes").
    ///
    /// Each process holds a handle: the creator's ([`ShmSequenceBuffer::create`]) and one per
    /// attach. A handle dereferences to the [`SequenceBuffer`]: take a lane with
    /// [`SequenceBuffer::lane`] (one writer per lane across every process), sample with
    /// [`SequenceBuffer::sample_into`], update with [`SequenceBuffer::update_priorities`].
    /// A process that dies at any instruction costs the step it was writing and the windows
    /// of its episode that waited for later steps: a survivor's watchdog recovers its lane
    /// (and whatever else it held) within the watchdog's interval, and the lane takes a new
    /// writer. A handle survives `fork` as [`crate::ShmBuffer`]'s does.
    ///
    /// ```
    /// # #[cfg(target_os = "linux")] {
    /// use kary_replay::sequence::{SequenceBatch, SequenceConfig, ShmSequenceBuffer};
    /// use kary_replay::{DType, SampleMode, Schema, Xoshiro256};
    /// let name = format!("kr-doc-seq-{}", std::process::id());
    /// let schema = Schema::new().column("obs", DType::F32, 2).column("reward", DType::F32, []);
    /// let config = SequenceConfig::builder(2, 64, schema).nstep(3, 0.9, "reward").build()?;
    /// let learner = ShmSequenceBuffer::create(&name, config)?;
    /// let actor = ShmSequenceBuffer::attach(&name)?; // in an actor process, usually
    /// let mut lane = actor.lane(0)?;
    /// for t in 0..5 {
    ///     lane.push(&[(&[t as f32, 0.0][..]).into(), (&[1.0f32][..]).into()])?;
    /// }
    /// drop(lane);
    /// assert_eq!(learner.len(), 2); // windows whose 3 steps and next step exist
    /// let mut out = SequenceBatch::default();
    /// learner.sample_into(4, 0.4, SampleMode::Stratified, &mut Xoshiro256::new(1), &mut out)?;
    /// assert_eq!(out.returns[0], 1.0 + 0.9 + 0.81);
    /// learner.unlink()?;
    /// # }
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    #[derive(Debug)]
    pub struct ShmSequenceBuffer(Handle<SequenceBuffer>);

    shared_handle_api!(ShmSequenceBuffer, SequenceConfig);

    impl std::ops::Deref for ShmSequenceBuffer {
        type Target = SequenceBuffer;
        fn deref(&self) -> &SequenceBuffer {
            &self.0.state().buffer
        }
    }

    impl ShmSequenceBuffer {
        /// The buffer, attached again first in a child after `fork` (`Err` only when that
        /// fails); dereferencing does the same and falls back to the parent's copy.
        pub fn buffer(&self) -> Result<&SequenceBuffer> {
            Ok(&self.0.live()?.buffer)
        }
    }
}
