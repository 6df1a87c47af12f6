//! Unit tests of the slot protocol's state words and row copies.

use super::*;
use crate::storage::{ColumnData, DType};

#[test]
fn a_prefetch_of_any_index_is_a_hint_not_a_panic() {
    let slots = Slots::new(Schema::new().column("x", DType::F32, 1), 40).unwrap();
    // The lock-free descent's NOT_FOUND marker reaches `prefetch` (it panicked once the
    // state words were interleaved).
    for slot in [0, 39, 40, usize::MAX] {
        slots.prefetch(slot);
    }
}

#[test]
fn copy_rows_puts_each_held_slot_in_its_row_for_any_run_length() {
    // Rows of several lines that do not start on line boundaries (520 bytes), and a
    // one-byte column; runs shorter and longer than the prefetch distance, repeats.
    let capacity = 12;
    let slots = Slots::new(
        Schema::new()
            .column("obs", DType::F32, 130)
            .column("r", DType::U8, 1),
        capacity,
    )
    .unwrap();
    for i in 0..capacity {
        let mut guard = slots.begin_write(i, 0);
        let obs = vec![i as f32 + 0.5; 130];
        // SAFETY: one item of the slots' one column type.
        unsafe { guard.write(&[(&obs[..]).into(), (&[i as u8][..]).into()], 0) };
        guard.publish();
    }
    for run in [0, 1, 5, 8, 9, 20, 64] {
        let first = 2;
        let picks: Vec<usize> = (0..run).map(|r| (r * 7 + 3) % capacity).collect();
        let held: Vec<Option<ReadGuard<'_>>> = picks
            .iter()
            .map(|&i| {
                Some(
                    slots
                        .try_read_key(Key {
                            index: i,
                            generation: i as u64,
                        })
                        .unwrap(),
                )
            })
            .collect();
        let rows = first + run;
        let mut out = [
            ColumnData::zeros(DType::F32, rows * 130).unwrap(),
            ColumnData::zeros(DType::U8, rows).unwrap(),
        ];
        // SAFETY: `out` was shaped for every row; the guards are `slots`'.
        unsafe { slots.copy_rows(&held, &mut out[..], first) };
        let (ColumnData::F32(obs), ColumnData::U8(r)) = (&out[0], &out[1]) else {
            unreachable!()
        };
        for row in 0..rows {
            let (want_obs, want_r) = match row.checked_sub(first) {
                None => (0.0, 0),
                Some(j) => (picks[j] as f32 + 0.5, picks[j] as u8),
            };
            assert!(
                obs[row * 130..][..130].iter().all(|&v| v == want_obs),
                "run {run}, row {row}"
            );
            assert_eq!(r[row], want_r, "run {run}, row {row}");
        }
    }
    // Every reference was dropped: each slot can be written again.
    for i in 0..capacity {
        slots.begin_write(i, 1).publish();
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "32767 read guards take minutes interpreted; the native run checks the logic"
)]
fn a_current_key_is_readable_even_when_the_readers_field_is_saturated() {
    let slots = Slots::new(Schema::new().column("x", DType::F32, 1), 1).unwrap();
    let mut guard = slots.begin_write(0, 0);
    // SAFETY: one item of the slots' one column type.
    unsafe { guard.write(&[(&[1.0f32][..]).into()], 0) };
    guard.publish();
    let key = Key {
        index: 0,
        generation: 0,
    };
    let full = (READERS >> READER_SHIFT) as usize;
    let mut readers: Vec<ReadGuard<'_>> = (0..full)
        .map(|_| slots.try_read_key(key).unwrap())
        .collect();
    assert_eq!(slots.state(0).0 & READERS, READERS);
    // The reader asks while the field is full and a reader leaves while it asks (or just
    // before: the key must be readable in every interleaving). Before the fix it
    // returned None at once: the key looked stale.
    let asking = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            asking.store(true, std::sync::atomic::Ordering::SeqCst);
            slots.try_read_key(key).is_some()
        });
        while !asking.load(std::sync::atomic::Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        readers.pop();
        assert!(reader.join().unwrap(), "a fresh key was refused");
    });
    drop(readers);
    assert_eq!(slots.state(0).0 & READERS, 0);
}

#[test]
fn a_write_that_unwinds_publishes_no_item_and_lets_the_next_writer_go() {
    let slots = Slots::new(Schema::new().column("x", DType::F32, 2), 2).unwrap();
    let row = [1.0f32, 2.0];
    // Epoch 0 -> 1: a complete write of generation 0 in slot 0.
    let mut guard = slots.begin_write(0, 0);
    // SAFETY: one item of the slots' one column type.
    unsafe { guard.write(&[(&row[..]).into()], 0) };
    guard.publish();
    let key = Key {
        index: 0,
        generation: 0,
    };
    assert!(slots.holds(key, slots.state(0)));
    // Epoch 1 -> 2 (generation 2) panics halfway: the guard is dropped while unwinding.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = slots.begin_write(0, 1);
        panic!("the copy failed halfway");
    }));
    assert!(unwound.is_err());
    let state = slots.state(0);
    assert!(!state.writing());
    assert_eq!(slots.generation(0, state), None, "a torn row got a key");
    assert!(!slots.holds(key, state));
    assert!(!slots.holds(
        Key {
            index: 0,
            generation: 2
        },
        state
    ));
    assert!(
        slots.try_read(0, state).is_none(),
        "a reader joined a torn row"
    );
    // The next writer (generation 4) is not blocked, and its item is whole again.
    let mut guard = slots.begin_write(0, 2);
    // SAFETY: one item of the slots' one column type.
    unsafe { guard.write(&[(&row[..]).into()], 0) };
    guard.publish();
    let state = slots.state(0);
    assert_eq!(slots.generation(0, state), Some(4));
    assert!(slots.try_read(0, state).is_some());
}
