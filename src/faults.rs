//! The one test seam: the loom models' deliberately broken twins, and the kill points
//! ([`Point`]) where a test stops a participant of a shared buffer to kill it there.
//!
//! A model that cannot fail proves nothing, so `loom_tests/broken.rs` runs each model against
//! a buffer with one protocol fault and requires loom to reject it. The faults live here and
//! only here: the protocol code asks this type what to do at each point where a fault can be
//! planted (`faults.reader_exit_order()`, `faults.writer_may_take(...)`, ...), and reads
//! straight through otherwise.
//!
//! Outside loom [`Faults`] is a zero-sized type whose every answer is the correct protocol's,
//! a constant the compiler folds away: the production path carries no test branch, no field
//! and no `cfg`. Under `cfg(loom)` it is a set of flags (public, hidden, so that the models can
//! build broken buffers through `with_faults`), and each answer consults its flag.

use crate::sync::Ordering;

/// Deliberate protocol faults, compiled only for loom models: each one breaks one invariant,
/// and `loom_tests/` checks that loom rejects the broken buffer.
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Readers copy a slot without joining its state word.
    pub reader_ignores_state: bool,
    /// Readers leave a slot with a Relaxed decrement instead of Release.
    pub relaxed_reader_exit: bool,
    /// The sampler reports a priority read again after the copy, unchecked.
    pub sampler_rereads_priority: bool,
    /// Writers of one slot take it in any order, not in generation order.
    pub writer_ignores_fifo: bool,
    /// Updates check the key's generation without holding the slot.
    pub update_skips_slot_read: bool,
    /// The running maximum priority is raised with a load and a store, not a CAS loop.
    pub max_without_cas: bool,
    /// The lock-free tree stores recomputed parents blindly instead of CAS-and-verify.
    pub blind_parent_store: bool,
    /// A sample that finds the tree at 0 reports `ZeroTotalPriority` at once, without
    /// asking whether an insert was in flight (lazy writing's transient zero).
    pub zero_total_is_final: bool,
    /// SplitLock's sampler reads its candidates' priorities without first applying the
    /// leaf writes that writers posted while it held the tree lock.
    pub sampler_skips_posted_writes: bool,
    /// A LockFree writer reads its slots' leaves, to decide which it may keep, before it
    /// owns the slots instead of after.
    pub writer_reads_leaves_unowned: bool,
    /// A SplitLock install that finds its retire still posted leaves it a retire: the
    /// install is lost.
    pub install_drops_posted_retire: bool,
    /// SplitLock's applier of the posted writes empties the list and releases it before it
    /// writes their leaves, so that a priority retrieval in between finds them nowhere.
    pub applier_empties_posted_early: bool,
    /// A save copies the buffer as soon as it has frozen the cursor, without waiting for the
    /// writes and priority updates in flight.
    pub saver_skips_wait: bool,
    /// The rate limiter checks the credit with a load and commits with a separate add, not
    /// one compare-and-swap: two callers can both pass on the same room.
    pub rate_check_then_commit: bool,
    /// The rate limiter looks for waiters (and wakes them) before it writes the credit, not
    /// after: a waiter that registers in between sleeps past the room it was waiting for.
    pub rate_notify_before_credit: bool,
    /// A shared rate limiter's waiter reads the wake count after its try, not before: a wake
    /// that comes between the two is taken for a later one, and the waiter sleeps past it.
    pub rate_reads_wakes_after_try: bool,
    /// A lane writer overwrites a step first and retires the windows that read it after.
    pub lane_retires_after_overwrite: bool,
    /// A lane writer retires a window when its last step is overwritten, not its first.
    pub lane_retires_at_last_step: bool,
    /// An optimistic sequence sampler keeps the window it copied without checking that its
    /// leaf is unchanged after the copy.
    pub sequence_sampler_skips_check: bool,
    /// A sequence buffer's save copies without pausing the priority updates in flight.
    pub sequence_save_skips_update_pause: bool,
    /// A deletion by key checks the key and marks the slot removed with a plain store,
    /// without taking the slot as a writer would.
    pub remover_skips_ownership: bool,
    /// A write back by key checks the key and copies the row without taking the slot.
    pub rewriter_skips_ownership: bool,
    /// A sampler counts a draw toward `max_times_sampled` with a load and a store.
    pub consume_count_without_cas: bool,
    /// A writer reads the policy-version floor before it takes its slots, not after.
    pub writer_reads_floor_early: bool,
    /// A lock-free update stores its raw priority and its leaf without reading the raw
    /// priority again: two updaters of one key can leave a leaf that is not the power of
    /// the raw priority kept.
    pub update_skips_raw_check: bool,
    /// Recovery publishes the slots of a dead writer (held or only reserved) EMPTY at the
    /// epoch it found, not the next: no generation bump.
    pub recovery_keeps_epoch: bool,
    /// Recovery releases the slots a dead process held but ignores its records: the
    /// generations it reserved and had not taken yet stay unwritten.
    pub recovery_skips_reservations: bool,
    /// Recovery of a dead lane writer moves the lane's cursor past the windows of the dead
    /// episode without publishing them: their leaves stay held.
    pub recovery_leaves_lane_windows_held: bool,
}

/// The correct protocol (outside loom there is nothing else).
#[cfg(not(loom))]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults;

#[cfg(not(loom))]
impl Faults {
    /// No fault: the correct protocol.
    #[inline(always)]
    pub(crate) fn none() -> Faults {
        Faults
    }

    /// Whether a reader joins the slot's state word before it copies.
    #[inline(always)]
    pub(crate) fn reader_joins(self) -> bool {
        true
    }

    /// The ordering of a reader's exit from a slot.
    #[inline(always)]
    pub(crate) fn reader_exit_order(self) -> Ordering {
        Ordering::Release
    }

    /// Whether a writer may take a slot whose word is `word`, given whether its turn came
    /// (`in_order`: the slot shows its epoch and no writer).
    #[inline(always)]
    pub(crate) fn writer_may_take(self, in_order: bool, _word_has_writer: bool) -> bool {
        in_order
    }

    /// Whether an update of a current key holds the slot while it writes the leaf.
    #[inline(always)]
    pub(crate) fn update_holds_slot(self) -> bool {
        true
    }

    /// Whether a deletion by key takes the slot as a writer would before it marks it.
    #[inline(always)]
    pub(crate) fn remover_owns_slot(self) -> bool {
        true
    }

    /// Whether a write back by key takes the slot as a writer would before it copies.
    #[inline(always)]
    pub(crate) fn rewriter_owns_slot(self) -> bool {
        true
    }

    /// Whether a draw is counted toward `max_times_sampled` with a CAS.
    #[inline(always)]
    pub(crate) fn consume_counts_by_cas(self) -> bool {
        true
    }

    /// Whether a writer reads the policy-version floor with its slots owned.
    #[inline(always)]
    pub(crate) fn writer_reads_floor_owned(self) -> bool {
        true
    }

    /// Whether the running maximum is raised with a CAS loop.
    #[inline(always)]
    pub(crate) fn max_by_cas(self) -> bool {
        true
    }

    /// Whether an update reads its slot's raw priority again after storing its leaf.
    #[inline(always)]
    pub(crate) fn update_rereads_raw(self) -> bool {
        true
    }

    /// Whether a zero total means no write was in flight only when the counters agree.
    #[inline(always)]
    pub(crate) fn zero_total_checks_writers(self) -> bool {
        true
    }

    /// The priority a sample reports: the one read with the slot's state (`checked`), not a
    /// later re-read.
    #[inline(always)]
    pub(crate) fn reported_priority(self, checked: f64, _reread: impl FnOnce() -> f64) -> f64 {
        checked
    }

    /// Whether the atomic tree installs parents by CAS-and-verify.
    #[inline(always)]
    pub(crate) fn verified_parent_stores(self) -> bool {
        true
    }

    /// Whether SplitLock's sampler applies the posted leaf writes after it reads its
    /// candidates' states and before it reads their priorities.
    #[inline(always)]
    pub(crate) fn sampler_applies_posted_writes(self) -> bool {
        true
    }

    /// Whether a writer reads the leaves it may keep only once it owns their slots.
    #[inline(always)]
    pub(crate) fn writer_reads_leaves_owned(self) -> bool {
        true
    }

    /// Whether a SplitLock install that finds its retire still posted turns it into the
    /// install.
    #[inline(always)]
    pub(crate) fn install_replaces_posted_retire(self) -> bool {
        true
    }

    /// Whether SplitLock's applier keeps the posted list until it has written the posted
    /// writes' leaves.
    #[inline(always)]
    pub(crate) fn posted_kept_until_leaves_written(self) -> bool {
        true
    }

    /// Whether a save waits for the writes and updates in flight before it copies.
    #[inline(always)]
    pub(crate) fn saver_waits(self) -> bool {
        true
    }

    /// Whether the rate limiter admits with one compare-and-swap (check and commit as one).
    #[inline(always)]
    pub(crate) fn rate_commits_with_cas(self) -> bool {
        true
    }

    /// Whether the rate limiter looks for waiters after it writes the credit.
    #[inline(always)]
    pub(crate) fn rate_notifies_after_credit(self) -> bool {
        true
    }

    /// Whether a shared rate limiter's waiter reads the wake count before its try.
    #[inline(always)]
    pub(crate) fn rate_reads_wakes_before_try(self) -> bool {
        true
    }

    /// Whether a lane writer retires the windows that read a step before it overwrites it.
    #[inline(always)]
    pub(crate) fn lane_retires_before_overwrite(self) -> bool {
        true
    }

    /// Whether an optimistic sequence sampler checks, after its copy, that the window's
    /// leaf is unchanged (a sequence lock's re-check).
    #[inline(always)]
    pub(crate) fn sequence_sampler_checks_copy(self) -> bool {
        true
    }

    /// Whether a lane writer retires a window when its first step (counting the stack's
    /// look-back) is overwritten, rather than its last.
    #[inline(always)]
    pub(crate) fn lane_retires_at_first_step(self) -> bool {
        true
    }

    /// Whether a sequence buffer's save pauses priority updates for its copy.
    #[inline(always)]
    pub(crate) fn sequence_save_pauses_updates(self) -> bool {
        true
    }

    /// Whether recovery publishes a dead writer's slot at the next epoch.
    #[inline(always)]
    pub(crate) fn recovery_bumps_epoch(self) -> bool {
        true
    }

    /// Whether recovery writes the generations of a dead process's records.
    #[inline(always)]
    pub(crate) fn recovery_reads_records(self) -> bool {
        true
    }

    /// Whether recovery of a dead lane writer publishes the dead episode's windows empty.
    #[inline(always)]
    pub(crate) fn recovery_finishes_lane_windows(self) -> bool {
        true
    }
}

/// Whether this thread is a participant that a model made die (`die_at`): its guards'
/// drops do nothing, as a killed process's would not run. Always false outside loom.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn dying() -> bool {
    false
}

#[cfg(loom)]
loom::thread_local! {
    static DIE_AT: std::cell::Cell<Option<(u32, u32)>> = std::cell::Cell::new(None);
    static DYING: std::cell::Cell<bool> = std::cell::Cell::new(false);
    static PARTICIPANT: std::cell::Cell<Option<u64>> = std::cell::Cell::new(None);
}

/// See the non-loom `dying`.
#[cfg(loom)]
pub(crate) fn dying() -> bool {
    DYING.with(|d| d.get())
}

/// Model hook: this loom thread dies the `after`-th time (from 0) it reaches protocol point
/// `point` of a shared buffer (`buffer::ShmPoint`): it panics there with its guards' drops
/// disabled, so that it stops at that instruction as a killed process would. The model
/// catches the panic.
#[cfg(loom)]
#[doc(hidden)]
pub fn die_at(point: Point, after: u32) {
    DIE_AT.with(|d| d.set(Some((point as u32, after))));
}

/// Model hook: this loom thread acts as participant `index` of a shared buffer (its owner
/// number `index + 1` in slot words, its entry's records), as a process would.
#[cfg(loom)]
#[doc(hidden)]
pub fn as_participant(index: usize) {
    PARTICIPANT.with(|p| p.set(Some(index as u64)));
}

/// The participant this loom thread acts as, if a model said (`as_participant`).
#[cfg(loom)]
pub(crate) fn participant() -> Option<u64> {
    PARTICIPANT.with(|p| p.get())
}

/// Called at each protocol point under loom: die there if `die_at` asked.
#[cfg(loom)]
pub(crate) fn maybe_die(point: u32) {
    let hit = DIE_AT.with(|d| match d.get() {
        Some((p, 0)) if p == point => true,
        Some((p, n)) if p == point => {
            d.set(Some((p, n - 1)));
            false
        }
        _ => false,
    });
    if hit {
        DYING.with(|d| d.set(true));
        std::panic::panic_any(Died);
    }
}

/// The panic payload of a modeled death.
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct Died;

#[cfg(loom)]
impl Faults {
    pub(crate) fn none() -> Faults {
        Faults::default()
    }

    pub(crate) fn reader_joins(self) -> bool {
        !self.reader_ignores_state
    }

    pub(crate) fn reader_exit_order(self) -> Ordering {
        if self.relaxed_reader_exit {
            Ordering::Relaxed
        } else {
            Ordering::Release
        }
    }

    pub(crate) fn writer_may_take(self, in_order: bool, word_has_writer: bool) -> bool {
        in_order || (self.writer_ignores_fifo && !word_has_writer)
    }

    pub(crate) fn update_holds_slot(self) -> bool {
        !self.update_skips_slot_read
    }

    pub(crate) fn remover_owns_slot(self) -> bool {
        !self.remover_skips_ownership
    }

    pub(crate) fn rewriter_owns_slot(self) -> bool {
        !self.rewriter_skips_ownership
    }

    pub(crate) fn consume_counts_by_cas(self) -> bool {
        !self.consume_count_without_cas
    }

    pub(crate) fn writer_reads_floor_owned(self) -> bool {
        !self.writer_reads_floor_early
    }

    pub(crate) fn max_by_cas(self) -> bool {
        !self.max_without_cas
    }

    pub(crate) fn update_rereads_raw(self) -> bool {
        !self.update_skips_raw_check
    }

    pub(crate) fn zero_total_checks_writers(self) -> bool {
        !self.zero_total_is_final
    }

    pub(crate) fn reported_priority(self, checked: f64, reread: impl FnOnce() -> f64) -> f64 {
        if self.sampler_rereads_priority {
            reread()
        } else {
            checked
        }
    }

    pub(crate) fn verified_parent_stores(self) -> bool {
        !self.blind_parent_store
    }

    pub(crate) fn sampler_applies_posted_writes(self) -> bool {
        !self.sampler_skips_posted_writes
    }

    pub(crate) fn writer_reads_leaves_owned(self) -> bool {
        !self.writer_reads_leaves_unowned
    }

    pub(crate) fn install_replaces_posted_retire(self) -> bool {
        !self.install_drops_posted_retire
    }

    pub(crate) fn posted_kept_until_leaves_written(self) -> bool {
        !self.applier_empties_posted_early
    }

    pub(crate) fn saver_waits(self) -> bool {
        !self.saver_skips_wait
    }

    pub(crate) fn rate_commits_with_cas(self) -> bool {
        !self.rate_check_then_commit
    }

    pub(crate) fn rate_notifies_after_credit(self) -> bool {
        !self.rate_notify_before_credit
    }

    pub(crate) fn rate_reads_wakes_before_try(self) -> bool {
        !self.rate_reads_wakes_after_try
    }

    pub(crate) fn lane_retires_before_overwrite(self) -> bool {
        !self.lane_retires_after_overwrite
    }

    pub(crate) fn sequence_sampler_checks_copy(self) -> bool {
        !self.sequence_sampler_skips_check
    }

    pub(crate) fn lane_retires_at_first_step(self) -> bool {
        !self.lane_retires_at_last_step
    }

    pub(crate) fn sequence_save_pauses_updates(self) -> bool {
        !self.sequence_save_skips_update_pause
    }

    pub(crate) fn recovery_bumps_epoch(self) -> bool {
        !self.recovery_keeps_epoch
    }

    pub(crate) fn recovery_reads_records(self) -> bool {
        !self.recovery_skips_reservations
    }

    pub(crate) fn recovery_finishes_lane_windows(self) -> bool {
        !self.recovery_leaves_lane_windows_held
    }
}

// --- Kill points: where a test stops a participant of a shared buffer, to kill it there ---

/// Points in the protocol where a test can make a participant stop for good (so that it can
/// be killed exactly there): see `pause_at` (feature `kill-points`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Point {
    /// A writer has its generations (the cursor's CAS confirmed), owns no slot yet.
    Reserved = 1,
    /// A writer owns its chunk's slots, has changed nothing yet.
    Owned = 2,
    /// A writer has copied its chunk's first item.
    Copying = 3,
    /// A writer has installed its chunk's priorities, published nothing.
    Installed = 4,
    /// A writer has published its chunk's first slot.
    Publishing = 5,
    /// An updater holds a slot and has stored its leaf.
    Updating = 6,
    /// An updater has stored and released its leaves, not climbed yet.
    Climbing = 7,
    /// A sampler has copied and checked a run of rows, not recorded them yet.
    Sampling = 8,
    /// A save has frozen the cursor (SAVING set), copied nothing yet.
    Saving = 9,
    /// A lane writer has retired a window (its leaf held), in a call that writes a step.
    LaneRetired = 10,
    /// A lane writer has written the first column of a step's row, not the others.
    LaneRow = 11,
    /// A lane writer has set a window's leaf in the tree, not published it.
    LaneInstalled = 12,
}

#[cfg(feature = "kill-points")]
static PAUSE_AT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
#[cfg(feature = "kill-points")]
static PAUSE_AFTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
#[cfg(feature = "kill-points")]
static PAUSE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Test hook (feature `kill-points`): the `after`-th time (from 0) any shared buffer of
/// this process reaches `point`, the thread writes the point's number as one byte to
/// descriptor `notify` (if it is not negative) and then stops for good (it sleeps until
/// the process is killed). For tests that kill a participant at a chosen instruction.
#[cfg(feature = "kill-points")]
pub fn pause_at(point: Point, after: u64, notify: i32) {
    use std::sync::atomic::Ordering::SeqCst;
    PAUSE_AFTER.store(after, SeqCst);
    PAUSE_FD.store(notify, SeqCst);
    PAUSE_AT.store(point as u32, SeqCst);
}

/// Test hook: stop here if `pause_at` asked for `point` (a relaxed load; nothing at all
/// without the `kill-points` feature); under loom, a modelled death.
#[inline]
pub(crate) fn point(point: Point) {
    #[cfg(loom)]
    maybe_die(point as u32);
    #[cfg(all(not(loom), feature = "kill-points"))]
    pause_point(point);
    #[cfg(all(not(loom), not(feature = "kill-points")))]
    let _ = point;
}

#[cfg(all(not(loom), feature = "kill-points"))]
fn pause_point(point: Point) {
    use std::sync::atomic::Ordering::{Relaxed, SeqCst};
    if PAUSE_AT.load(Relaxed) != point as u32 {
        return;
    }
    if PAUSE_AFTER
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return;
    }
    #[cfg(unix)]
    {
        let fd = PAUSE_FD.load(SeqCst);
        if fd >= 0 {
            let byte = [point as u8];
            // SAFETY: a one-byte buffer of ours; the descriptor is the test's.
            unsafe { libc::write(fd, byte.as_ptr().cast(), 1) };
        }
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
