//! `LockFreeBuffer`: CAS-recomputed atomic tree, lazy writing, slot protocol.

use kary_replay::{ConcurrentBuffer, LockFreeBuffer};

crate::scenarios::models!(|c| LockFreeBuffer::new(c).unwrap());

/// (n) A save while an insert runs (loom only: the copy is read through a loom-only hook).
#[cfg(loom)]
#[test]
fn save_vs_insert() {
    crate::scenarios::save_vs_writer(
        |c| LockFreeBuffer::new(c).unwrap(),
        LockFreeBuffer::snapshot_for_model,
        false,
    );
}

/// (n) A save while a priority update runs.
#[cfg(loom)]
#[test]
fn save_vs_update() {
    crate::scenarios::save_vs_writer(
        |c| LockFreeBuffer::new(c).unwrap(),
        LockFreeBuffer::snapshot_for_model,
        true,
    );
}

/// (q) Two samplers race for an item consumed after one draw.
#[test]
fn consumed_once() {
    crate::scenarios::consumed_once(|c| LockFreeBuffer::new(c).unwrap());
}

/// (q) Two samplers drain a max-heap consumed after one draw.
#[test]
fn heap_consumed_once() {
    crate::scenarios::heap_consumed_once(|c| LockFreeBuffer::new(c).unwrap());
}
