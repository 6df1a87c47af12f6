//! Expected failures: each model must be able to fail. Every test here builds a buffer
//! with one deliberate protocol fault (`kary_replay::Faults`, compiled only under loom)
//! and expects loom to find the interleaving that breaks the model's invariant.

use kary_replay::{Faults, LockFreeBuffer, SplitLockBuffer};

use crate::scenarios;

fn lock_free(faults: Faults) -> impl scenarios::Make<LockFreeBuffer> {
    move |c| LockFreeBuffer::with_faults(c, faults).unwrap()
}

fn split_lock(faults: Faults) -> impl scenarios::Make<SplitLockBuffer> {
    move |c| SplitLockBuffer::with_faults(c, faults).unwrap()
}

/// (a) Parents stored blindly (no CAS, no verification): a stale recompute wins.
#[test]
#[should_panic(expected = "inconsistent tree")]
fn blind_parent_store_breaks_sibling_updates() {
    scenarios::sibling_updates(lock_free(Faults {
        blind_parent_store: true,
        ..Faults::default()
    }));
}

/// (b) A reader that copies without joining the slot's state word races the writer.
#[test]
#[should_panic(expected = "Causality violation")]
fn reader_ignoring_the_slot_state_breaks_insert_vs_sample() {
    scenarios::insert_vs_sample(split_lock(Faults {
        reader_ignores_state: true,
        ..Faults::default()
    }));
}

/// (b') The same fault under a descent at given fractions.
#[test]
#[should_panic(expected = "Causality violation")]
fn reader_ignoring_the_slot_state_breaks_insert_vs_sample_at() {
    scenarios::insert_vs_sample_at(split_lock(Faults {
        reader_ignores_state: true,
        ..Faults::default()
    }));
}

/// (b') And a Relaxed reader exit under it, on LockFree.
#[test]
#[should_panic(expected = "Causality violation")]
fn relaxed_reader_exit_breaks_insert_vs_sample_at() {
    scenarios::insert_vs_sample_at(lock_free(Faults {
        relaxed_reader_exit: true,
        ..Faults::default()
    }));
}

/// (l) The same fault where the leaf of the slot in flight is kept: the sampler lands on it
/// and copies while the writer writes.
#[test]
#[should_panic(expected = "Causality violation")]
fn reader_ignoring_the_slot_state_breaks_overwrite_at_its_priority() {
    scenarios::overwrite_of_the_only_item_at_its_priority(split_lock(Faults {
        reader_ignores_state: true,
        ..Faults::default()
    }));
}

/// (b) A Relaxed decrement where a reader leaves the slot: its copy is not ordered before
/// the next writer's bytes.
#[test]
#[should_panic(expected = "Causality violation")]
fn relaxed_reader_exit_breaks_insert_vs_sample() {
    scenarios::insert_vs_sample(lock_free(Faults {
        relaxed_reader_exit: true,
        ..Faults::default()
    }));
}

/// (c) Reporting a priority re-read after the copy: an update to 0 slips in.
#[test]
#[should_panic(expected = "zero-priority")]
fn rereading_the_priority_breaks_update_vs_sample() {
    scenarios::update_vs_sample(lock_free(Faults {
        sampler_rereads_priority: true,
        ..Faults::default()
    }));
}

/// (d) Writers of one slot not ordered by generation: the older item can land last.
#[test]
#[should_panic(expected = "FIFO order lost")]
fn unordered_writers_break_wrap_around() {
    scenarios::wrap_around(split_lock(Faults {
        writer_ignores_fifo: true,
        ..Faults::default()
    }));
}

/// (e) Checking the key without holding the slot: the overwrite slips in between.
#[test]
#[should_panic(expected = "the new item lost its priority")]
fn unheld_key_check_breaks_stale_update() {
    scenarios::stale_update(lock_free(Faults {
        update_skips_slot_read: true,
        ..Faults::default()
    }));
}

/// (f) A maximum raised by load-compare-store loses the larger of two racing values.
#[test]
#[should_panic(expected = "lost a maximum")]
fn maximum_without_cas_loses_a_value() {
    scenarios::concurrent_maximum(lock_free(Faults {
        max_without_cas: true,
        ..Faults::default()
    }));
}

/// (g') A zero total taken as final although an insert is in flight: the sample reports
/// `ZeroTotalPriority` while the buffer holds an item. (On LockFree only (g') has a zero
/// total: (g)'s writer retires its leaf without a climb, so its root never reads 0.)
#[test]
#[should_panic(expected = "every stored priority is 0")]
fn a_final_zero_total_breaks_overwrite_of_the_only_item() {
    scenarios::overwrite_of_the_only_item_live_max(lock_free(Faults {
        zero_total_is_final: true,
        ..Faults::default()
    }));
}

/// (r) The same zero taken as final by a min-heap walk, on the lock-free buffer (whose
/// writer zeroes the only leaf before its install).
#[test]
#[should_panic(expected = "every stored priority is 0")]
fn a_final_zero_total_breaks_heap_overwrite_of_the_only_item() {
    scenarios::heap_overwrite_of_the_only_item(lock_free(Faults {
        zero_total_is_final: true,
        ..Faults::default()
    }));
}

/// (g) The same on the split-lock buffer.
#[test]
#[should_panic(expected = "every stored priority is 0")]
fn a_final_zero_total_breaks_overwrite_of_the_only_item_split_lock() {
    scenarios::overwrite_of_the_only_item(split_lock(Faults {
        zero_total_is_final: true,
        ..Faults::default()
    }));
}

/// (h) Parents stored blindly: the batch writer's one climb and the sibling update race,
/// and one of them is lost.
#[test]
#[should_panic(expected = "inconsistent tree")]
fn blind_parent_store_breaks_batch_insert() {
    scenarios::batch_insert(lock_free(Faults {
        blind_parent_store: true,
        ..Faults::default()
    }));
}

/// (i) Writers that own slots out of generation order: the staged writer's batch and the
/// single insert land in the wrong order on the slot they share.
#[test]
#[should_panic(expected = "FIFO order lost")]
fn unordered_writers_break_staged_writer() {
    scenarios::staged_writer(lock_free(Faults {
        writer_ignores_fifo: true,
        ..Faults::default()
    }));
}

/// (j) SplitLock's sampler reading its candidates' priorities before it applies the writes
/// posted during its section: a whole insert runs inside it, and the evicted item's
/// priority is reported beside the new item's key.
#[test]
#[should_panic(expected = "sampled priority is not its key's")]
fn reading_priorities_before_posted_writes_breaks_sampled_priority_matches_key() {
    scenarios::sampled_priority_matches_key(split_lock(Faults {
        sampler_skips_posted_writes: true,
        ..Faults::default()
    }));
}

/// (k) A LockFree writer that reads the leaves it may keep before it owns their slots: an
/// update stores the old key's priority in between, and the kept leaf carries it over to
/// the new item.
#[test]
#[should_panic(expected = "the new item lost its priority")]
fn reading_the_leaf_before_owning_breaks_stale_update_of_a_kept_leaf() {
    scenarios::stale_update_of_a_kept_leaf(lock_free(Faults {
        writer_reads_leaves_unowned: true,
        ..Faults::default()
    }));
}

/// (e) A SplitLock install that finds its retire still posted (the update held the tree
/// lock through the whole write) and leaves it a retire: the new item's install is lost,
/// and the retire zeroes its leaf.
#[test]
#[should_panic(expected = "the new item lost its priority")]
fn dropping_the_install_of_a_posted_retire_breaks_stale_update() {
    scenarios::stale_update(split_lock(Faults {
        install_drops_posted_retire: true,
        ..Faults::default()
    }));
}

/// (m) SplitLock's applier emptying and releasing the posted list before it writes the
/// posted writes' leaves: a priority retrieval in between finds the completed insert's
/// priority in neither place.
#[test]
#[should_panic(expected = "a completed insert's priority was not retrieved")]
fn emptying_the_posted_list_early_breaks_retrieval_vs_posted_apply() {
    scenarios::retrieval_vs_posted_apply(split_lock(Faults {
        applier_empties_posted_early: true,
        ..Faults::default()
    }));
}

/// (n) A save that copies without waiting for the writes in flight copies a half-written
/// slot, or a state that never existed.
#[test]
#[should_panic]
fn a_save_that_does_not_wait_breaks_save_vs_insert() {
    let faults = Faults {
        saver_skips_wait: true,
        ..Faults::default()
    };
    scenarios::save_vs_writer(
        split_lock(faults),
        SplitLockBuffer::snapshot_for_model,
        false,
    );
}

/// (n) The same fault on LockFree, against a priority update in flight.
#[test]
#[should_panic]
fn a_lock_free_save_that_does_not_wait_breaks_save_vs_update() {
    let faults = Faults {
        saver_skips_wait: true,
        ..Faults::default()
    };
    scenarios::save_vs_writer(lock_free(faults), LockFreeBuffer::snapshot_for_model, true);
}

/// (o) A deletion that marks the slot with a plain store, without taking it: it lands on
/// the writer's new item (or its leaf zero on the new priority), and the item, its priority
/// or len's count is lost.
#[test]
#[should_panic(expected = "lost")]
fn a_remover_that_does_not_own_the_slot_breaks_delete_beside_overwrite() {
    scenarios::delete_beside_overwrite(split_lock(Faults {
        remover_skips_ownership: true,
        ..Faults::default()
    }));
}

/// (o) The same fault on LockFree.
#[test]
#[should_panic(expected = "lost")]
fn a_lock_free_remover_that_does_not_own_the_slot_breaks_delete_beside_overwrite() {
    scenarios::delete_beside_overwrite(lock_free(Faults {
        remover_skips_ownership: true,
        ..Faults::default()
    }));
}

/// (p) A write back that copies the row without taking the slot races the sampler's copy.
#[test]
#[should_panic(expected = "Causality violation")]
fn a_rewriter_that_does_not_own_the_slot_breaks_write_back_vs_sample() {
    scenarios::write_back_vs_sample(split_lock(Faults {
        rewriter_skips_ownership: true,
        ..Faults::default()
    }));
}

/// (q) Draws counted with a load and a store: both samplers count the item's first draw,
/// and both keep it.
#[test]
#[should_panic(expected = "past max_times_sampled")]
fn counting_draws_without_a_cas_breaks_consumed_once() {
    scenarios::consumed_once(lock_free(Faults {
        consume_count_without_cas: true,
        ..Faults::default()
    }));
}

/// (q) Draws counted with a load and a store under a max-heap: both samplers count the top
/// item's one draw, and both keep it.
#[test]
#[should_panic(expected = "past max_times_sampled")]
fn counting_draws_without_a_cas_breaks_heap_consumed_once() {
    scenarios::heap_consumed_once(lock_free(Faults {
        consume_count_without_cas: true,
        ..Faults::default()
    }));
}

/// (s) A writer that reads the policy-version floor before it takes its slots: it reads the
/// old floor, the learner raises it and scans the still empty slot, and the writer then
/// publishes an item below the floor, which survives the call.
#[test]
#[should_panic(expected = "survived")]
fn a_writer_that_reads_the_floor_early_breaks_retire_beside_insert() {
    scenarios::retire_beside_insert(lock_free(Faults {
        writer_reads_floor_early: true,
        ..Faults::default()
    }));
}

/// (s) An update that stores its raw priority and its leaf without reading the raw priority
/// again: two updaters of one key leave the leaf of one and the raw priority of the other.
#[test]
#[should_panic(expected = "the leaf is not its raw priority's power")]
fn an_update_that_does_not_reread_the_raw_priority_breaks_updates_of_one_key() {
    scenarios::updates_of_one_key(lock_free(Faults {
        update_skips_raw_check: true,
        ..Faults::default()
    }));
}

/// (t) A `set_alpha` that does not wait for the writes and updates in flight (the save's
/// pause broken as in `a_lock_free_save_that_does_not_wait_breaks_save_vs_update`): one of
/// them lands under the old alpha after the leaves were raised again.
#[test]
#[should_panic(expected = "a priority under the old alpha survived")]
fn a_set_alpha_that_does_not_wait_breaks_alpha_beside_insert() {
    scenarios::alpha_beside_writes(
        lock_free(Faults {
            saver_skips_wait: true,
            ..Faults::default()
        }),
        false,
    );
}
