//! Unit tests of the slot buffer that need its internals.

use super::super::slots::MAX_EPOCH;
use super::insert::RetiredLeaves;
use super::SlotBuffer;
use crate::sync::Ordering;

/// Test hook: the generations' end of life without 2^46 writes per slot.
impl<T: SharedTree> SlotBuffer<T> {
    /// Make a quiescent buffer that holds `capacity` items look as if every slot had had
    /// all its writes but the last ([`MAX_EPOCH`]): each state word at `MAX_EPOCH`, the
    /// cursor and the completed count at `MAX_EPOCH * capacity`, which this returns (the
    /// next generation; the `capacity` after it are the last). The items, their rows and
    /// leaves stay (their keys' generations change with the epochs).
    pub(crate) fn age_to_last_epoch_for_test(&self) -> u64 {
        let capacity = self.slots.capacity();
        assert_eq!(self.len(), capacity, "fill the buffer first");
        for slot in 0..capacity {
            self.slots.set_epoch_for_test(slot, MAX_EPOCH);
        }
        let handed_out = MAX_EPOCH * capacity as u64;
        // ORDERING: SeqCst, as in `Slots::set_epoch_for_test`: a quiescent buffer, one thread.
        self.counters.cursor.store(handed_out, Ordering::SeqCst);
        self.counters.completed.store(handed_out, Ordering::SeqCst);
        self.counters
            .completed_before_clear
            .store(0, Ordering::SeqCst);
        handed_out
    }
}

use super::SharedTree;
use crate::rng::RandomSource;
use crate::{
    ConcurrentBuffer, Config, DType, LockFreeBuffer, SampleBatch, SampleMode, Schema,
    SplitLockBuffer,
};

struct Lcg(u64);
impl RandomSource for Lcg {
    fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Four items of equal priority, so stratum b of a stratified batch of 4
/// covers exactly slot b, and slot 0 held by a writer that has not zeroed its leaf. Every
/// draw in stratum 0 lands on the held slot; before the fallback the sample failed with
/// `Contention` after 4096 redraws, now its redraws leave the stratum and the sample
/// succeeds without slot 0.
fn a_blocked_stratum_falls_back_to_the_whole_range<B>(buffer: &super::SlotBuffer<B>)
where
    B: super::SharedTree,
{
    for v in 0..4u8 {
        buffer.insert(&[(&[v][..]).into()], Some(1.0)).unwrap();
    }
    // The next write of slot 0 is generation 4: epoch 4 / capacity 4 = 1.
    let held = buffer.slots.begin_write(0, 1);
    let mut out = SampleBatch::default();
    let mut rng = Lcg(7);
    for _ in 0..20 {
        buffer
            .sample_into(4, 0.4, SampleMode::Stratified, &mut rng, &mut out)
            .expect("a blocked stratum must not make the sample fail");
        assert!(!out.indices.contains(&0), "slot 0 is being written");
        assert_eq!(&out.indices[1..], &[1, 2, 3]);
    }
    drop(held);
}

/// A buffer whose slots have had every epoch but the last: the next `capacity` writes
/// fit, the one after is `GenerationsExhausted` and changes nothing (a batch that would
/// cross the end is refused whole), and a staged writer keeps what it could not flush.
fn generations_run_out_cleanly<B: super::SharedTree>(buffer: super::SlotBuffer<B>) {
    use crate::{Error, Key, Writer};
    for v in 0..4u8 {
        buffer.insert(&[(&[v][..]).into()], Some(1.0)).unwrap();
    }
    let base = buffer.age_to_last_epoch_for_test();
    // The items kept their leaves; their keys now carry the aged generations (modulo 2^48,
    // as every key does: 4 slots of 2^46 - 1 epochs end just short of it).
    assert_eq!(base, 4 * MAX_EPOCH);
    let insertion = |g: u64| g % (1 << 48);
    assert_eq!(buffer.total_priority(), 4.0);
    let key = buffer.key(1).unwrap().unwrap();
    assert_eq!(key, Key::new(buffer.config().key_tag(), 1, base - 4 + 1));
    assert_eq!(key.insertion(), insertion(base - 3));
    let keys = buffer
        .insert_batch(&[(&[10u8, 11, 12][..]).into()], Some(&[2.0, 2.0, 2.0]))
        .unwrap();
    let generations: Vec<u64> = keys.iter().map(|k| k.insertion()).collect();
    assert_eq!(generations, [base, base + 1, base + 2].map(insertion));
    let snapshot = |b: &super::SlotBuffer<B>| {
        (
            b.len(),
            b.inserted(),
            b.total_priority(),
            (0..4).map(|i| b.key(i).unwrap()).collect::<Vec<_>>(),
            (0..4).map(|i| b.priority(i).unwrap()).collect::<Vec<_>>(),
        )
    };
    let before = snapshot(&buffer);
    // Two more would need generation base + 4, of epoch MAX_EPOCH + 1: refused whole.
    assert!(matches!(
        buffer.insert_batch(&[(&[13u8, 14][..]).into()], None),
        Err(Error::GenerationsExhausted { .. })
    ));
    assert_eq!(snapshot(&buffer), before, "a refused batch changes nothing");
    // The last generation fits; after it, every write is refused.
    let last = buffer.insert(&[(&[13u8][..]).into()], Some(3.0)).unwrap();
    assert_eq!(last.insertion(), insertion(base + 3));
    let full = snapshot(&buffer);
    assert!(matches!(
        buffer.insert(&[(&[14u8][..]).into()], None),
        Err(Error::GenerationsExhausted { index: 0 })
    ));
    assert_eq!(snapshot(&buffer), full);
    // A staged writer: its flush fails and keeps the item.
    let mut writer = Writer::new(&buffer, 4).unwrap();
    writer.push(&[(&[15u8][..]).into()], None).unwrap();
    assert!(matches!(
        writer.flush(),
        Err(Error::GenerationsExhausted { .. })
    ));
    assert_eq!(writer.staged(), 1, "nothing staged is lost");
    drop(writer);
    assert_eq!(snapshot(&buffer), full);
    // What is stored can still be sampled and updated.
    let mut out = SampleBatch::default();
    buffer
        .sample_into(8, 0.4, SampleMode::Stratified, &mut Lcg(3), &mut out)
        .unwrap();
    assert!(out.keys.iter().all(|k| k.insertion() >= insertion(base)));
    let report = buffer.update_priorities(&[last], &[5.0]).unwrap();
    assert_eq!(report.applied, 1);
    assert_eq!(
        buffer.priority(3).unwrap(),
        buffer.config().stored_priority(5.0)
    );
}

#[test]
fn generations_run_out_cleanly_on_split_lock() {
    generations_run_out_cleanly(buffer::<SplitLockBuffer>().0);
}

#[test]
fn generations_run_out_cleanly_on_lock_free() {
    generations_run_out_cleanly(buffer::<LockFreeBuffer>().0);
}

fn buffer<B: ConcurrentBuffer>() -> B {
    B::new(
        Config::builder(4, Schema::new().column("x", DType::U8, 1))
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// A LockFree buffer of capacity 4 holding priorities 1, 2, 3, 4 (before the exponent).
fn lock_free_with_four_items() -> LockFreeBuffer {
    let buffer = buffer::<LockFreeBuffer>();
    for v in 0..4u8 {
        buffer
            .insert(&[(&[v][..]).into()], Some(1.0 + f64::from(v)))
            .unwrap();
    }
    buffer
}

/// A LockFree retire stores the leaf alone (the ancestors keep the evicted priority until
/// the install's climb), and a write that unwinds before its install leaves the tree
/// exact again: `RetiredLeaves` climbs from the zeroed leaf while the slot is owned.
#[test]
fn a_lock_free_write_that_unwinds_before_its_install_leaves_the_tree_exact() {
    let buffer = lock_free_with_four_items();
    let total = buffer.total_priority();
    // The next write of slot 0 is generation 4: epoch 1.
    let write = buffer.0.slots.begin_write(0, 1);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _retired = RetiredLeaves::<_, 1> {
            tree: &buffer.0.tree,
            slots: [0],
            n: 1,
        };
        buffer.0.tree.retire_owned(&[(0, 0.0)]);
        assert_eq!(buffer.priority(0).unwrap(), 0.0);
        assert_eq!(buffer.total_priority(), total, "the retire did not climb");
        assert!(!buffer.consistency().exact);
        panic!("a copy that fails");
    }));
    assert!(unwound.is_err());
    drop(write);
    assert!(buffer.consistency().exact);
    assert_eq!(buffer.priority(0).unwrap(), 0.0);
    let rest: f64 = (1..4).map(|i| buffer.priority(i).unwrap()).sum();
    assert!((buffer.total_priority() - rest).abs() < 1e-12);
    assert!(buffer.total_priority() < total);
}

/// A kept leaf (`SharedTree::keeps_leaves`) whose write unwinds is zeroed with its
/// ancestors: the slot ends with no item, so it must not keep the evicted priority.
#[test]
fn a_lock_free_write_that_kept_its_leaf_and_unwinds_zeroes_it() {
    let buffer = lock_free_with_four_items();
    let write = buffer.0.slots.begin_write(0, 1);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // As `write_chunk` arms it: every owned slot, kept or retired.
        let _owned = RetiredLeaves::<_, 1> {
            tree: &buffer.0.tree,
            slots: [0],
            n: 1,
        };
        panic!("a copy that fails");
    }));
    assert!(unwound.is_err());
    drop(write);
    assert!(buffer.consistency().exact);
    assert_eq!(buffer.priority(0).unwrap(), 0.0);
    assert_eq!(buffer.key(0).unwrap(), None);
    let rest: f64 = (1..4).map(|i| buffer.priority(i).unwrap()).sum();
    assert!((buffer.total_priority() - rest).abs() < 1e-12);
}

/// Batches in which some slots keep their leaves (the new priority is the evicted one)
/// and others change: every variant ends with the same priorities, exact sums and the
/// new keys, whichever slots the lock-free writer left alone.
fn kept_and_changed_leaves<B: ConcurrentBuffer>() {
    let schema = Schema::new().column("x", DType::U8, 1);
    let buffer = B::new(Config::builder(4, schema).alpha(1.0).build().unwrap()).unwrap();
    let rows: Vec<u8> = (0..4).collect();
    buffer
        .insert_batch(&[(&rows[..]).into()], Some(&[2.0, 3.0, 2.0, 5.0]))
        .unwrap();
    let keys = buffer
        .insert_batch(&[(&rows[..]).into()], Some(&[2.0, 7.0, 2.0, 1.0]))
        .unwrap();
    assert_eq!(
        (0..4)
            .map(|i| buffer.priority(i).unwrap())
            .collect::<Vec<_>>(),
        [2.0, 7.0, 2.0, 1.0]
    );
    assert_eq!(buffer.total_priority(), 12.0);
    assert!(buffer.consistency().exact);
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(buffer.key(i).unwrap(), Some(*key));
        assert_eq!(key.insertion(), 4 + i as u64);
    }
    // Single inserts at the default priority (the running maximum, 7): slot 1 keeps
    // its leaf, the others change.
    for _ in 0..4 {
        buffer.insert(&[(&[9u8][..]).into()], None).unwrap();
    }
    assert_eq!(buffer.total_priority(), 28.0);
    assert!(buffer.consistency().exact);
    let report = buffer.update_priorities(&keys, &[1.0; 4]).unwrap();
    assert_eq!((report.applied, report.stale), (0, 4));
}

#[test]
fn kept_and_changed_leaves_on_split_lock() {
    kept_and_changed_leaves::<SplitLockBuffer>();
}

#[test]
fn kept_and_changed_leaves_on_lock_free() {
    kept_and_changed_leaves::<LockFreeBuffer>();
}

#[test]
fn a_blocked_stratum_falls_back_on_split_lock() {
    a_blocked_stratum_falls_back_to_the_whole_range(&buffer::<SplitLockBuffer>().0);
}

#[test]
fn a_blocked_stratum_falls_back_on_lock_free() {
    a_blocked_stratum_falls_back_to_the_whole_range(&buffer::<LockFreeBuffer>().0);
}

/// Keys carry an item's insertion number modulo 2^48 (the generation word's low bits): a
/// buffer of 8 slots aged to its last epochs hands out generations past 2^48, and its keys,
/// sampled keys and updates by key all agree on the wrapped numbers.
#[test]
fn keys_wrap_the_insertion_number_at_2_48() {
    let buffer: SplitLockBuffer = SplitLockBuffer::new(
        Config::builder(8, Schema::new().column("x", DType::U8, 1))
            .build()
            .unwrap(),
    )
    .unwrap();
    for v in 0..8u8 {
        buffer.insert(&[(&[v][..]).into()], Some(1.0)).unwrap();
    }
    let base = buffer.0.age_to_last_epoch_for_test();
    assert!(base > 1 << 48, "8 slots x (2^46 - 2) epochs pass 2^48");
    let key = buffer.insert(&[(&[9u8][..]).into()], Some(2.0)).unwrap();
    assert_eq!(key.insertion(), base % (1 << 48));
    assert_eq!(buffer.key(key.index).unwrap(), Some(key));
    let mut out = SampleBatch::default();
    buffer
        .sample_into(8, 0.4, SampleMode::Stratified, &mut Lcg(1), &mut out)
        .unwrap();
    assert!(out
        .keys
        .iter()
        .all(|k| buffer.key(k.index).unwrap() == Some(*k)));
    assert_eq!(buffer.update_priorities(&[key], &[3.0]).unwrap().applied, 1);
    assert_eq!(buffer.delete(&[key]).unwrap().applied, 1);
}
