//! A shared buffer's death and recovery (`buffer/shm`, docs/design.md "One buffer across
//! processes"), on the lock-free buffer run as a mapping runs it (`share_for_model`: readers
//! hold nothing, owners in slot words, recorded reservations): a writer (participant 0) that
//! dies at each protocol point beside a sampler and an updater (participant 1), then the
//! survivor's recovery. After it: no sampled row was torn, the dead writer's slot takes its
//! next writer, no stale key's update landed, and the tree is exact. Broken twins: recovery
//! that publishes the dead write at the same epoch, and recovery that skips the records
//! (a reservation taken and not yet owned); loom must reject both (the slot's next writer
//! waits for ever).

use std::panic::AssertUnwindSafe;

use kary_replay::buffer::ShmPoint;
use kary_replay::faults_hooks::{as_participant, die_at};
use kary_replay::{ConcurrentBuffer, Error, Faults, LockFreeBuffer, SampleMode};

use crate::support::{config, model_with_waits, quiet_deaths, row, thread, Arc, ROW};

fn insert(b: &LockFreeBuffer, value: i64, priority: f64) -> kary_replay::Key {
    b.insert(&[(&row(value)[..]).into()], Some(priority))
        .expect("insert")
}

/// The model: `point` (None: the writer lives) where the writer of generation 2 dies.
fn writer_dies(point: Option<ShmPoint>, faults: Faults) {
    quiet_deaths();
    model_with_waits(move || {
        let mut buffer = LockFreeBuffer::with_faults(config(2), faults).unwrap();
        let table = buffer.share_for_model().unwrap();
        let buffer = Arc::new(buffer);
        as_participant(1);
        // Generations 0 and 1 fill the two slots.
        let old = insert(&buffer, 0, 1.0);
        insert(&buffer, 1, 2.0);
        let writer = {
            let b = buffer.clone();
            thread::spawn(move || {
                as_participant(0);
                if let Some(p) = point {
                    die_at(p, 0);
                }
                // Generation 2 evicts generation 0 from slot 0.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| insert(&b, 2, 4.0)));
            })
        };
        let sampler = {
            let b = buffer.clone();
            thread::spawn(move || {
                as_participant(1);
                let mut rng = kary_replay::Xoshiro256::new(7);
                match b.sample(1, 0.4, SampleMode::Independent, &mut rng) {
                    // The torn-row check is the sequence lock's own (its tokens, in
                    // `Slots::copy_rows` under loom: loom sees no plain byte, so the row's
                    // bytes prove nothing here); the sample is of an item that was stored.
                    Ok(s) => {
                        assert_eq!(s.columns[0].as_i64().unwrap().len(), ROW);
                        assert!(s.keys[0].generation & ((1 << 48) - 1) <= 2);
                    }
                    Err(Error::Contention { .. }) => {}
                    Err(e) => panic!("sample: {e}"),
                }
            })
        };
        let updater = {
            let b = buffer.clone();
            thread::spawn(move || {
                as_participant(1);
                // Generation 0's key: applied before the writer took its slot, or stale.
                b.update_priorities(&[old], &[3.0]).unwrap();
            })
        };
        writer.join().unwrap();
        sampler.join().unwrap();
        updater.join().unwrap();
        if point.is_some() {
            assert!(
                buffer.recover_for_model(&table, &[0]),
                "recovery incomplete"
            );
        }
        // The slots' next writers go on: generation 3 (slot 1), generation 4 (slot 0).
        insert(&buffer, 3, 5.0);
        insert(&buffer, 4, 6.0);
        assert!(
            buffer.consistency().exact,
            "inconsistent tree after recovery"
        );
        // Nothing stale landed: each slot has its newest item's priority.
        assert_eq!(buffer.priority(0).unwrap(), 6.0);
        assert_eq!(buffer.priority(1).unwrap(), 5.0);
        assert_eq!(buffer.total_priority(), 11.0);
    });
}

const POINTS: [ShmPoint; 5] = [
    ShmPoint::Reserved,
    ShmPoint::Owned,
    ShmPoint::Copying,
    ShmPoint::Installed,
    ShmPoint::Publishing,
];

#[test]
fn a_writer_that_lives_beside_a_sampler_and_an_updater() {
    writer_dies(None, Faults::default());
}

#[test]
fn a_writer_that_dies_at_each_point_is_recovered() {
    for p in POINTS {
        writer_dies(Some(p), Faults::default());
    }
}

/// Broken twin: a dead write published EMPTY at the epoch it had: the slot's next writer
/// waits for the next epoch for ever.
#[test]
#[should_panic(expected = "branches")]
fn recovery_without_the_epoch_bump_is_rejected() {
    writer_dies(
        Some(ShmPoint::Installed),
        Faults {
            recovery_keeps_epoch: true,
            ..Faults::default()
        },
    );
}

/// Broken twin: recovery that ignores the records: a reservation taken and not yet owned
/// stays unwritten, and the slot's next writer waits for ever.
#[test]
#[should_panic(expected = "branches")]
fn recovery_that_skips_a_reservation_is_rejected() {
    writer_dies(
        Some(ShmPoint::Reserved),
        Faults {
            recovery_skips_reservations: true,
            ..Faults::default()
        },
    );
}

/// (o) A deletion beside an overwrite and a sampler, under a mapping's protocol (readers
/// hold nothing and check their copies, owners in slot words).
#[test]
fn delete_beside_overwrite_in_a_mapping() {
    crate::scenarios::delete_beside_overwrite_with(
        |c| {
            let mut buffer = LockFreeBuffer::new(c).unwrap();
            buffer.share_for_model().unwrap();
            buffer
        },
        false,
    );
}

/// (o)'s broken twin under a mapping's protocol: a remover that marks the slot with a
/// plain store, without taking it.
#[test]
#[should_panic(expected = "lost")]
fn a_remover_that_does_not_own_the_slot_breaks_delete_in_a_mapping() {
    crate::scenarios::delete_beside_overwrite_with(
        |c| {
            let faults = Faults {
                remover_skips_ownership: true,
                ..Faults::default()
            };
            let mut buffer = LockFreeBuffer::with_faults(c, faults).unwrap();
            buffer.share_for_model().unwrap();
            buffer
        },
        false,
    );
}

/// (q) Two samplers race for an item consumed after one draw, under a mapping's protocol.
#[test]
fn consumed_once_in_a_mapping() {
    crate::scenarios::consumed_once(|c| {
        let mut buffer = LockFreeBuffer::new(c).unwrap();
        buffer.share_for_model().unwrap();
        buffer
    });
}

/// (q) Two samplers drain a max-heap consumed after one draw, under a mapping's protocol.
#[test]
fn heap_consumed_once_in_a_mapping() {
    crate::scenarios::heap_consumed_once(|c| {
        let mut buffer = LockFreeBuffer::new(c).unwrap();
        buffer.share_for_model().unwrap();
        buffer
    });
}

/// (s) A policy-version window beside a writer, under a mapping's protocol (a writer or the
/// scan takes a slot with its owner number in the word).
#[test]
fn retire_beside_insert_in_a_mapping() {
    crate::scenarios::retire_beside_insert(|c| {
        let mut buffer = LockFreeBuffer::new(c).unwrap();
        buffer.share_for_model().unwrap();
        buffer
    });
}
