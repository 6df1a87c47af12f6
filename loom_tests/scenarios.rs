//! The models, written once for any [`ConcurrentBuffer`]; each variant's file runs them
//! on its buffer, and `broken.rs` runs them on deliberately broken buffers.
//!
//! `make` builds the buffer from a config (inside the model: loom's primitives must be
//! made there). Models stay small: at most 3 threads, capacity <= 4, fanout 2.

use kary_replay::{ConcurrentBuffer, Config, Error, Key, SampleMode};
use rand::{rngs::SmallRng, SeedableRng};

use crate::support::{
    config, config_consumed, config_consumed_max_heap, config_live_max, config_versioned, model,
    model_with_preemptions, model_with_waits, row, thread, Arc, ROW,
};

/// A constructor usable from every model run.
pub trait Make<B>: Fn(Config) -> B + Send + Sync + Copy + 'static {}
impl<B, F: Fn(Config) -> B + Send + Sync + Copy + 'static> Make<B> for F {}

fn insert<B: ConcurrentBuffer>(buffer: &B, value: i64, priority: Option<f64>) -> Key {
    buffer
        .insert(&[(&row(value)[..]).into()], priority)
        .expect("valid insert")
}

/// Samples `batch` items, stratified (so with batch = capacity and equal priorities every
/// slot is a target). `Contention` (the sampler gave up on in-flight slots) is allowed;
/// anything else that is wrong fails the model. Returns (key, priority, value) per item.
fn sample<B: ConcurrentBuffer>(buffer: &B, batch: usize, seed: u64) -> Vec<(Key, f64, i64)> {
    sample_or_empty(buffer, batch, seed, false)
}

/// [`sample`]; `Empty` and `ZeroTotalPriority` return nothing when `may_be_empty`.
fn sample_or_empty<B: ConcurrentBuffer>(
    buffer: &B,
    batch: usize,
    seed: u64,
    may_be_empty: bool,
) -> Vec<(Key, f64, i64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    match buffer.sample(batch, 1.0, SampleMode::Stratified, &mut rng) {
        Ok(b) => {
            let values = b.columns[0].as_i64().expect("i64 column");
            assert_eq!(values.len(), batch * ROW);
            (0..batch)
                .map(|i| {
                    let item = &values[i * ROW..(i + 1) * ROW];
                    assert!(item.iter().all(|&v| v == item[0]), "torn read: {item:?}");
                    assert!(b.priorities[i] > 0.0, "sampled a zero-priority slot");
                    assert!(b.indices[i] < buffer.capacity(), "index out of range");
                    assert!(b.weights[i] > 0.0 && b.weights[i] <= 1.0);
                    (b.keys[i], b.priorities[i], item[0])
                })
                .collect()
        }
        Err(Error::Contention { .. }) => Vec::new(),
        Err(Error::Empty | Error::ZeroTotalPriority) if may_be_empty => Vec::new(),
        Err(e) => panic!("unexpected sampling error: {e}"),
    }
}

/// [`sample`], where the items may all be gone by the time the sampler looks (`Empty`,
/// `ZeroTotalPriority`: nothing is returned).
fn sample_live<B: ConcurrentBuffer>(buffer: &B, batch: usize, seed: u64) -> Vec<(Key, f64, i64)> {
    sample_or_empty(buffer, batch, seed, true)
}

/// (a) Two updates of sibling leaves race each other and a priority retrieval: both values
/// end up in the tree, and the tree is consistent (exact: the values are integers, and for
/// LockFree bit-exactness is what its protocol promises).
pub fn sibling_updates<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(4)));
        let keys: Vec<Key> = (0..4).map(|v| insert(&*buffer, v, Some(1.0))).collect();
        let b = buffer.clone();
        let k0 = keys[0];
        let t = thread::spawn(move || b.update_priorities(&[k0], &[3.0]).unwrap().applied);
        let b = buffer.clone();
        let k1 = keys[1];
        let u = thread::spawn(move || b.update_priorities(&[k1], &[5.0]).unwrap().applied);
        let seen = buffer.priority(0).unwrap();
        assert!(seen == 1.0 || seen == 3.0, "retrieval saw {seen}");
        assert_eq!(t.join().unwrap(), 1);
        assert_eq!(u.join().unwrap(), 1);
        assert_eq!(buffer.priority(0).unwrap(), 3.0);
        assert_eq!(buffer.priority(1).unwrap(), 5.0);
        assert_eq!(
            buffer.total_priority(),
            10.0,
            "inconsistent tree: lost an update"
        );
        let c = buffer.consistency();
        assert!(c.exact && c.extrema_exact, "inconsistent tree: {c:?}");
    });
}

/// (b) An insert overwrites a slot of a full buffer while a sampler copies: the sampler
/// gets a whole item (all elements equal) that matches its key, never a slot in flight.
pub fn insert_vs_sample<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        insert(&*buffer, 10, Some(1.0));
        insert(&*buffer, 11, Some(1.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 12, Some(1.0)));
        for (key, _, value) in sample(&*buffer, 2, 1) {
            // Item number g holds value 10 + g.
            assert_eq!(
                value,
                10 + key.insertion() as i64,
                "data does not match its key"
            );
        }
        let key = writer.join().unwrap();
        assert_eq!(key.insertion(), 2);
        assert_eq!(buffer.key(0).unwrap(), Some(key));
        let c = buffer.consistency();
        assert!(c.exact && c.extrema_exact, "inconsistent tree: {c:?}");
    });
}

/// (b') The coordinator's descent: an insert overwrites a slot of a full buffer while a
/// sampler descends at given fractions of the total (`sample_at_into`, a shard's part of a
/// sample of several buffers): whole items that match their keys, positive priorities, and
/// the total the descent used.
pub fn insert_vs_sample_at<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        insert(&*buffer, 10, Some(1.0));
        insert(&*buffer, 11, Some(1.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 12, Some(1.0)));
        let mut out = kary_replay::SampleBatch::default();
        let mut rng = SmallRng::seed_from_u64(4);
        match buffer.sample_at_into(&[0.25, 0.75], &mut rng, &mut out) {
            Ok(stats) => {
                assert!(
                    stats.total > 0.0 && stats.total <= 2.0,
                    "total {}",
                    stats.total
                );
                let values = out.columns[0].as_i64().expect("i64 column");
                for (i, key) in out.keys.iter().enumerate() {
                    let item = &values[i * ROW..(i + 1) * ROW];
                    assert!(item.iter().all(|&v| v == item[0]), "torn read: {item:?}");
                    assert_eq!(
                        item[0],
                        10 + key.insertion() as i64,
                        "data does not match its key"
                    );
                    assert_eq!(out.priorities[i], 1.0);
                }
            }
            Err(Error::Contention { .. }) => {}
            Err(e) => panic!("unexpected sampling error: {e}"),
        }
        writer.join().unwrap();
        let c = buffer.consistency();
        assert!(c.exact && c.extrema_exact, "inconsistent tree: {c:?}");
    });
}

/// (c) An update sets a priority to 0 while a sampler draws: the sampler never reports a
/// zero priority, and once the update is done the item is never drawn.
pub fn update_vs_sample<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        let k0 = insert(&*buffer, 10, Some(1.0));
        insert(&*buffer, 11, Some(1.0));
        let b = buffer.clone();
        let updater = thread::spawn(move || b.update_priorities(&[k0], &[0.0]).unwrap());
        for (key, priority, value) in sample(&*buffer, 2, 2) {
            assert_eq!(priority, 1.0);
            assert_eq!(value, 10 + key.insertion() as i64);
        }
        assert_eq!(updater.join().unwrap().applied, 1);
        assert_eq!(buffer.priority(0).unwrap(), 0.0);
        for (key, _, _) in sample(&*buffer, 2, 3) {
            assert_eq!(key.index, 1, "drew a slot whose priority is 0");
        }
    });
}

/// (d) Wrap-around: capacity 2, three concurrent inserts. All complete with distinct
/// generations, slot 0 ends with the newer of the two items that map to it (FIFO), and
/// every item is present or was evicted in FIFO order.
pub fn wrap_around<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        let spawn = |value: i64| {
            let b = buffer.clone();
            thread::spawn(move || insert(&*b, value, None))
        };
        let t = spawn(100);
        let u = spawn(200);
        let k = insert(&*buffer, 300, None);
        let keys = [t.join().unwrap(), u.join().unwrap(), k];
        let mut generations: Vec<u64> = keys.iter().map(|k| k.insertion()).collect();
        generations.sort_unstable();
        assert_eq!(generations, [0, 1, 2]);
        assert_eq!(buffer.len(), 2);
        assert_eq!(buffer.inserted(), 3);
        // Slot g % 2 holds the newest item mapped to it: generation 2 in slot 0, 1 in slot 1.
        assert_eq!(
            buffer.key(0).unwrap().map(|k| k.insertion()),
            Some(2),
            "FIFO order lost"
        );
        assert_eq!(buffer.key(1).unwrap().map(|k| k.insertion()), Some(1));
        // Each slot's data is its item's (a quiescent stratified sample sees both slots).
        let value_of = |generation: u64| {
            [100, 200, 300][keys
                .iter()
                .position(|k| k.insertion() == generation)
                .unwrap()]
        };
        let seen = sample(&*buffer, 2, 4);
        assert_eq!(seen.len(), 2);
        for (key, _, value) in seen {
            assert_eq!(
                value,
                value_of(key.insertion()),
                "slot holds the wrong item"
            );
        }
        // The evicted item's key is stale.
        let evicted = keys.iter().find(|k| k.insertion() == 0).unwrap();
        assert_eq!(
            buffer.update_priorities(&[*evicted], &[1.0]).unwrap().stale,
            1
        );
    });
}

/// (e) An update through a key races the overwrite of its slot: either it lands before
/// the overwrite (and is replaced) or it is dropped as stale; the new item keeps its own
/// priority, and afterwards the key is stale.
pub fn stale_update<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    update_beside_overwrite(make, 1.0);
}

/// (k) As (e), with the new item at the old one's priority: on LockFree the writer keeps
/// the slot's leaf (no retire, no install, `SharedTree::keeps_leaves`), so nothing of its
/// own undoes an update that reached the leaf after the writer read it; the writer must
/// read the leaf only once it owns the slot and the update's read reference is gone. On
/// SplitLock the retire keeps the leaf if it decides, under the tree lock, that the leaf
/// holds 5, and the install writes it again.
pub fn stale_update_of_a_kept_leaf<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    update_beside_overwrite(make, 5.0);
}

/// Models (e) and (k): the old item at `old_priority` is updated to 9 while a writer
/// overwrites its slot with a new item at priority 5.
fn update_beside_overwrite<B: ConcurrentBuffer + 'static>(make: impl Make<B>, old_priority: f64) {
    model(move || {
        let buffer = Arc::new(make(config(1)));
        let old = insert(&*buffer, 10, Some(old_priority));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 11, Some(5.0)));
        let report = buffer.update_priorities(&[old], &[9.0]).unwrap();
        assert_eq!(report.applied + report.stale, 1);
        let new = writer.join().unwrap();
        assert_eq!(
            buffer.priority(0).unwrap(),
            5.0,
            "the new item lost its priority (a stale update reached it, or its install was lost)"
        );
        assert_eq!(buffer.key(0).unwrap(), Some(new));
        let mut raw = Vec::new();
        buffer.raw_priorities_of(&[new], &mut raw).unwrap();
        assert_eq!(
            raw,
            [5.0],
            "the new item lost its priority (a stale update reached its raw priority)"
        );
        assert!(buffer.consistency().exact, "inconsistent tree");
        let again = buffer.update_priorities(&[old], &[9.0]).unwrap();
        assert_eq!((again.applied, again.stale), (0, 1));
    });
}

/// (f) Two updates raise the maximum priority at once: the default priority of the next
/// insert is the largest value written.
pub fn concurrent_maximum<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(4)));
        let k0 = insert(&*buffer, 0, Some(1.0));
        let k1 = insert(&*buffer, 1, Some(1.0));
        let b = buffer.clone();
        let t = thread::spawn(move || b.update_priorities(&[k0], &[3.0]).unwrap());
        buffer.update_priorities(&[k1], &[5.0]).unwrap();
        t.join().unwrap();
        let k = insert(&*buffer, 2, None);
        assert_eq!(buffer.priority(k.index).unwrap(), 5.0, "lost a maximum");
    });
}

/// (g) Capacity 1: a writer overwrites the one item while two threads sample. Lazy writing
/// zeroes the slot's leaf before the new item is published, so for a moment the whole tree
/// is 0 although an item is stored (on LockFree only its leaf: its ancestors keep the
/// evicted priority until the install, and the next model has the whole tree at 0): a
/// sample may retry or give up with `Contention`, never report `ZeroTotalPriority` (the
/// `sample` helper fails the model on it).
pub fn overwrite_of_the_only_item<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    // At another priority than the evicted item's 1: a leaf that holds its new priority
    // already is kept, not zeroed (model (l)).
    overwrite_the_only_item(make, config(1), Some(2.0));
}

/// (l) As (g), the new item at the evicted one's priority: the slot's leaf is kept (on
/// LockFree the writer leaves it alone, on SplitLock the retire does, under the tree lock),
/// so samplers keep landing on the slot while it is in flight; each must be refused by the
/// slot's state word and draw again (or give up with `Contention`), so that every sampled
/// item is whole, matches its key and has its own priority, and the write ends with the
/// new item in a tree that is exact.
pub fn overwrite_of_the_only_item_at_its_priority<B: ConcurrentBuffer + 'static>(
    make: impl Make<B>,
) {
    model(move || {
        let buffer = Arc::new(make(config(1)));
        insert(&*buffer, 1, Some(1.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 2, Some(1.0)));
        let b = buffer.clone();
        let sampler = thread::spawn(move || sample(&*b, 1, 1));
        let mut sampled = sample(&*buffer, 1, 2);
        let new = writer.join().unwrap();
        sampled.extend(sampler.join().unwrap());
        for (key, priority, value) in sampled {
            assert_eq!(
                value,
                1 + key.insertion() as i64,
                "data does not match its key"
            );
            assert_eq!(priority, 1.0, "sampled priority is not its key's");
        }
        assert_eq!(buffer.key(0).unwrap(), Some(new));
        assert_eq!(buffer.priority(0).unwrap(), 1.0);
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// (g') As (g), under LiveMax with the default priority: the writer retires its slot with a
/// climb before it reads the largest live priority (which must not count the evicted
/// item), so on every variant the whole tree is 0 for a moment.
pub fn overwrite_of_the_only_item_live_max<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    overwrite_the_only_item(make, config_live_max(1), None);
}

fn overwrite_the_only_item<B: ConcurrentBuffer + 'static>(
    make: impl Make<B>,
    config: Config,
    priority: Option<f64>,
) {
    model(move || {
        let buffer = Arc::new(make(config.clone()));
        insert(&*buffer, 1, Some(1.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || {
            insert(&*b, 2, priority);
        });
        let b = buffer.clone();
        let sampler = thread::spawn(move || {
            sample(&*b, 1, 1);
        });
        sample(&*buffer, 1, 2);
        writer.join().unwrap();
        sampler.join().unwrap();
    });
}

/// (h) The batch writer: one `insert_batch` overwrites two slots in different
/// sibling groups (one chunk: both slots owned, both leaves retired in one tree operation,
/// both rows copied, both priorities installed in one operation) while an update of a
/// sibling of one of them races it and a sampler copies. The sampler gets whole rows that
/// match their keys; afterwards both new items, the update and the untouched item are all
/// in the tree, which is exact.
pub fn batch_insert<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(4)));
        let keys: Vec<Key> = (0..3)
            .map(|v| insert(&*buffer, 10 + v, Some(1.0)))
            .collect();
        let b = buffer.clone();
        let writer = thread::spawn(move || {
            let data: Vec<i64> = [13i64, 14].iter().flat_map(|&v| row(v)).collect();
            b.insert_batch(&[(&data[..]).into()], Some(&[2.0, 3.0]))
                .expect("valid batch")
        });
        let b = buffer.clone();
        let k1 = keys[1];
        let updater = thread::spawn(move || b.update_priorities(&[k1], &[5.0]).unwrap());
        for (key, _, value) in sample(&*buffer, 2, 5) {
            assert_eq!(
                value,
                10 + key.insertion() as i64,
                "data does not match its key"
            );
        }
        let new = writer.join().unwrap();
        assert_eq!(updater.join().unwrap().applied, 1);
        assert_eq!(
            new.iter()
                .map(|k| (k.index, k.insertion()))
                .collect::<Vec<_>>(),
            [(3, 3), (0, 4)]
        );
        assert_eq!(buffer.key(0).unwrap(), Some(new[1]));
        let priorities: Vec<f64> = (0..4).map(|i| buffer.priority(i).unwrap()).collect();
        assert_eq!(priorities, [3.0, 5.0, 1.0, 2.0]);
        assert_eq!(
            buffer.total_priority(),
            11.0,
            "inconsistent tree: lost a write"
        );
        let c = buffer.consistency();
        assert!(c.exact && c.extrema_exact, "inconsistent tree: {c:?}");
    });
}

/// (i) A staged writer (batch 2) flushes two pushed items in one batch while a
/// direct insert races it on a buffer of capacity 2, so one slot is written by both: the
/// generations are handed out once each, the slot ends with the newer item (FIFO across
/// the batch and the single insert), every row matches its key, and the dropped writer
/// has flushed everything.
pub fn staged_writer<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        let b = buffer.clone();
        let actor = thread::spawn(move || {
            let mut writer = kary_replay::Writer::new(&*b, 2).expect("valid writer");
            assert!(writer
                .push(&[(&row(100)[..]).into()], None)
                .unwrap()
                .is_empty());
            let keys = writer
                .push(&[(&row(101)[..]).into()], None)
                .unwrap()
                .to_vec();
            assert_eq!(keys.len(), 2, "a full batch flushes");
            keys
        });
        let single = insert(&*buffer, 300, None);
        let staged = actor.join().unwrap();
        let mut generations: Vec<u64> = staged
            .iter()
            .chain([&single])
            .map(|k| k.insertion())
            .collect();
        generations.sort_unstable();
        assert_eq!(generations, [0, 1, 2]);
        assert_eq!(staged[1].insertion(), staged[0].insertion() + 1);
        assert_eq!(buffer.inserted(), 3);
        assert_eq!(buffer.len(), 2);
        assert_eq!(
            buffer.key(0).unwrap().map(|k| k.insertion()),
            Some(2),
            "FIFO order lost"
        );
        let value_of = |generation: u64| {
            if generation == single.insertion() {
                300
            } else if generation == staged[0].insertion() {
                100
            } else {
                101
            }
        };
        let seen = sample(&*buffer, 2, 6);
        assert_eq!(seen.len(), 2);
        for (key, _, value) in seen {
            assert_eq!(
                value,
                value_of(key.insertion()),
                "slot holds the wrong item"
            );
        }
    });
}

/// (j) Capacity 1: a writer overwrites the one item with another priority while a sampler
/// draws. The priority a sample reports is its key's item's: never the evicted item's
/// priority beside the new item's key. (SplitLock's writers post their leaf writes when the
/// sampler holds the tree lock, so a whole insert can run inside the sampler's section;
/// the interleaving that breaks the broken twin needs 3 preemptions.)
pub fn sampled_priority_matches_key<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model_with_preemptions(3, move || {
        let buffer = Arc::new(make(config(1)));
        insert(&*buffer, 10, Some(1.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 11, Some(4.0)));
        for (key, priority, value) in sample(&*buffer, 1, 7) {
            assert_eq!(
                value,
                10 + key.insertion() as i64,
                "data does not match its key"
            );
            let expected = if key.insertion() == 0 { 1.0 } else { 4.0 };
            assert_eq!(priority, expected, "sampled priority is not its key's");
        }
        let key = writer.join().unwrap();
        assert_eq!(buffer.priority(key.index).unwrap(), 4.0);
        assert_eq!(buffer.total_priority(), 4.0);
        let c = buffer.consistency();
        assert!(c.exact && c.extrema_exact, "inconsistent tree: {c:?}");
    });
}

/// (m) A priority retrieval races whoever applies the writes that inserts left posted
/// (SplitLock: a single insert's install can wait in the posted list after the insert
/// returns, for the next holder of the tree lock; here a thread that reads the total): it
/// reads the completed insert's priority, whether that write was applied yet or not.
pub fn retrieval_vs_posted_apply<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        let key = insert(&*buffer, 1, Some(4.0));
        let b = buffer.clone();
        let reader = thread::spawn(move || b.total_priority());
        assert_eq!(
            buffer.priority(key.index).unwrap(),
            4.0,
            "a completed insert's priority was not retrieved"
        );
        assert_eq!(reader.join().unwrap(), 4.0);
    });
}

/// What a save copies, for model (n): (inserted, len, running maximum, priorities,
/// generations, columns).
#[allow(dead_code)] // used by the loom-only tests
pub type Snap = (u64, usize, f64, Vec<f64>, Vec<u64>, Vec<Vec<u8>>);

/// (n) A save races an insert that overwrites slot 0, or (`update`) a priority update of
/// slot 1: the copy is a state that existed (the insert whole or not at all, the update
/// applied or not, every row whole), whatever the interleaving.
#[allow(dead_code)] // used by the loom-only tests
pub fn save_vs_writer<B: ConcurrentBuffer + 'static>(
    make: impl Make<B>,
    snapshot: fn(&B) -> Snap,
    update: bool,
) {
    model_with_waits(move || {
        let buffer = Arc::new(make(config(2)));
        insert(&*buffer, 10, Some(1.0));
        let k1 = insert(&*buffer, 11, Some(1.0));
        let b = buffer.clone();
        let other = thread::spawn(move || {
            if update {
                b.update_priorities(&[k1], &[7.0]).unwrap();
            } else {
                insert(&*b, 12, Some(5.0));
            }
        });
        let (inserted, len, running_max, priorities, generations, columns) = snapshot(&buffer);
        let value = |slot: usize| {
            let bytes = &columns[0][slot * ROW * 8..(slot + 1) * ROW * 8];
            let v: Vec<i64> = bytes
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert!(
                v.iter().all(|&x| x == v[0]),
                "not a state that existed: torn row {v:?}"
            );
            v[0]
        };
        assert_eq!(len, 2, "not a state that existed: len {len}");
        // Every applied priority raised the running maximum with it.
        assert!(
            priorities.iter().all(|&p| p <= running_max),
            "not a state that existed: priorities {priorities:?} above the running maximum {running_max}"
        );
        match inserted {
            2 => assert_eq!(
                (generations[0], priorities[0], value(0)),
                (0, 1.0, 10),
                "not a state that existed: slot 0 before the insert"
            ),
            3 => assert_eq!(
                (generations[0], priorities[0], value(0)),
                (2, 5.0, 12),
                "not a state that existed: slot 0 after the insert"
            ),
            other => panic!("not a state that existed: {other} inserted"),
        }
        assert_eq!(
            (generations[1], value(1)),
            (1, 11),
            "not a state that existed: slot 1"
        );
        assert!(
            priorities[1] == 1.0 || (update && priorities[1] == 7.0),
            "not a state that existed: slot 1's priority {}",
            priorities[1]
        );
        other.join().unwrap();
    });
}

/// (o) A deletion by key races the overwrite of its slot and a sampler: the deletion
/// either takes the old item (and the writer then fills the empty slot) or finds its key
/// stale; either way the new item ends stored with its own priority, `len` counts it, the
/// tree is exact, the old key is stale, and the sampler sees whole rows of live items.
pub fn delete_beside_overwrite<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    delete_beside_overwrite_with(make, true);
}

/// (o) with `rows_modeled` false for a mapping's protocol: under loom its readers copy the
/// bytes plainly (loom does not model them) and its tokens stand for the rows, which the
/// buffer checks itself (`copy_tokens_optimistic`), so a kept row's value is not compared.
pub fn delete_beside_overwrite_with<B: ConcurrentBuffer + 'static>(
    make: impl Make<B>,
    rows_modeled: bool,
) {
    model(move || {
        let buffer = Arc::new(make(config(1)));
        let old = insert(&*buffer, 10, Some(3.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 11, Some(5.0)));
        let b = buffer.clone();
        // Between the deletion and the write the buffer is empty (or its one leaf 0).
        let sampler = thread::spawn(move || sample_live(&*b, 1, 1));
        let report = buffer.delete(&[old]).unwrap();
        assert_eq!(report.applied + report.stale, 1);
        let new = writer.join().unwrap();
        for (key, priority, value) in sampler.join().unwrap() {
            match key == old {
                true => assert_eq!(priority, 3.0),
                false => assert_eq!((key, priority), (new, 5.0)),
            }
            if rows_modeled {
                assert_eq!(
                    value,
                    [10, 11][usize::from(key == new)],
                    "a row of another item"
                );
            }
        }
        assert_eq!(buffer.key(0).unwrap(), Some(new), "the new item was lost");
        assert_eq!(
            buffer.priority(0).unwrap(),
            5.0,
            "the new item lost its priority"
        );
        assert_eq!(buffer.len(), 1, "len lost count of the deletion");
        assert!(buffer.consistency().exact, "inconsistent tree");
        assert_eq!(buffer.delete(&[old]).unwrap().stale, 1);
        assert_eq!(buffer.delete(&[new]).unwrap().applied, 1);
        assert_eq!(buffer.len(), 0);
    });
}

/// (p) A write back by key races a sampler: the sampler copies the row before or after it,
/// never half of it; the key stays current with its priority, and the rows end rewritten.
pub fn write_back_vs_sample<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(1)));
        let key = insert(&*buffer, 10, Some(3.0));
        let b = buffer.clone();
        let sampler = thread::spawn(move || sample(&*b, 1, 1));
        let row = row(20);
        let report = buffer
            .write_back(&[key], &[(0, (&row[..]).into())])
            .unwrap();
        assert_eq!((report.applied, report.stale), (1, 0));
        for (k, priority, value) in sampler.join().unwrap() {
            assert_eq!((k, priority), (key, 3.0));
            assert!(value == 10 || value == 20, "a row of another item");
        }
        assert_eq!(buffer.key(0).unwrap(), Some(key));
        assert_eq!(sample(&*buffer, 1, 2)[0].2, 20, "the write back was lost");
    });
}

/// (s) A policy-version window beside a writer: an item of version 0 is stored in slot 0;
/// a writer inserts another of version 0 into slot 1 while the learner retires everything
/// below version 1. Whatever the interleaving (the writer's up-front check before or after
/// the raise, its slot taken before or after the scan passed it), no item below the floor
/// survives the call: `len` 0, both slots without a key, the tree at 0 and exact; the
/// writer's insert was refused or its item retired as it was published.
pub fn retire_beside_insert<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config_versioned(2)));
        let item = |b: &B| b.insert(&[(&row(10)[..]).into(), (&[0i64][..]).into()], Some(2.0));
        item(&buffer).expect("valid insert");
        let b = buffer.clone();
        let writer = thread::spawn(move || item(&b));
        let retired = buffer.retire_before(1).unwrap();
        assert!(retired >= 1, "the stored item was not retired");
        match writer.join().unwrap() {
            Ok(key) => {
                let stale = buffer.priorities_of(&[key], &mut Vec::new()).unwrap();
                assert_eq!(
                    stale, 1,
                    "an item below the floor survived (its key is current)"
                );
            }
            Err(e) => assert_eq!(
                e,
                Error::RetiredVersion {
                    version: 0,
                    floor: 1
                }
            ),
        }
        assert_eq!(buffer.len(), 0, "an item below the floor survived");
        assert_eq!(
            buffer.key(1).unwrap(),
            None,
            "an item below the floor survived"
        );
        assert_eq!(buffer.total_priority(), 0.0, "a retired item kept its mass");
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// (s) Two updates of one key race: the leaf ends as the power of the raw priority kept
/// (`raw_priorities_of`), whichever update wins, and the tree is exact.
pub fn updates_of_one_key<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(2)));
        let key = insert(&*buffer, 10, Some(1.0));
        let spawn = |p: f64| {
            let b = buffer.clone();
            thread::spawn(move || b.update_priorities(&[key], &[p]).unwrap().applied)
        };
        let (s, t) = (spawn(3.0), spawn(5.0));
        assert_eq!(s.join().unwrap() + t.join().unwrap(), 2);
        let mut raw = Vec::new();
        buffer.raw_priorities_of(&[key], &mut raw).unwrap();
        let stored = buffer.priority(key.index).unwrap();
        assert!(raw[0] == 3.0 || raw[0] == 5.0, "raw priority {}", raw[0]);
        assert_eq!(
            stored, raw[0],
            "the leaf is not its raw priority's power (alpha 1)"
        );
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// (t) `set_alpha` beside an insert that overwrites (or an update): whatever the order, at
/// the end every item's stored priority is its raw priority's power under the new alpha,
/// and the tree is exact.
pub fn alpha_beside_writes<B: ConcurrentBuffer + 'static>(make: impl Make<B>, update: bool) {
    model_with_waits(move || {
        let buffer = Arc::new(make(config(2)));
        let first = insert(&*buffer, 10, Some(4.0));
        insert(&*buffer, 11, Some(9.0));
        let b = buffer.clone();
        let other = thread::spawn(move || match update {
            true => drop(b.update_priorities(&[first], &[25.0]).unwrap()),
            false => drop(insert(&*b, 12, Some(16.0))),
        });
        buffer.set_alpha(0.5).unwrap();
        other.join().unwrap();
        for slot in 0..2 {
            let key = buffer.key(slot).unwrap().expect("a stored item");
            let mut raw = Vec::new();
            buffer.raw_priorities_of(&[key], &mut raw).unwrap();
            // Within rounding: Miri perturbs `powf` (the raw priorities are squares, and
            // the old alpha's priority is their square, far away).
            let (stored, expected) = (buffer.priority(slot).unwrap(), raw[0].sqrt());
            assert!(
                (stored - expected).abs() <= 1e-9 * expected,
                "a priority under the old alpha survived: {stored} for raw {}",
                raw[0]
            );
        }
        assert_eq!(buffer.alpha(), 0.5);
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// (q) Consume after one draw (`max_times_sampled = 1`): two samplers race for the one
/// item. At most one of them gets it, and the item is retired exactly when one did: its
/// key stale, `len` 0, the tree at 0 and exact. (A draw past the `k`-th, or a retirement
/// lost or made without its draw, fails the model.)
pub fn consumed_once<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config_consumed(1, 1)));
        let key = insert(&*buffer, 10, Some(2.0));
        let spawn = |seed: u64| {
            let b = buffer.clone();
            thread::spawn(move || sample_live(&*b, 1, seed).len())
        };
        let (s, t) = (spawn(1), spawn(2));
        let drawn = s.join().unwrap() + t.join().unwrap();
        assert!(drawn <= 1, "an item drawn past max_times_sampled");
        let retired = buffer.key(0).unwrap().is_none();
        assert_eq!(
            retired,
            drawn == 1,
            "retired without its last draw, or not at all"
        );
        assert_eq!(buffer.len(), usize::from(!retired));
        if retired {
            assert_eq!(buffer.total_priority(), 0.0);
            assert_eq!(buffer.update_priorities(&[key], &[1.0]).unwrap().stale, 1);
        }
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// (q) Two samplers drain a max-heap of two items consumed after one draw each: each takes
/// one item, the largest it can still draw, and no item is drawn twice (the draw counts
/// are the ordered draws', reached through the tree's maxima instead of the ring).
pub fn heap_consumed_once<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config_consumed_max_heap(2, 1)));
        insert(&*buffer, 10, Some(2.0));
        insert(&*buffer, 20, Some(1.0));
        let spawn = |seed: u64| {
            let b = buffer.clone();
            thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed);
                match b.sample(1, 1.0, SampleMode::MaxHeap, &mut rng) {
                    Ok(batch) => batch.columns[0].as_i64().expect("i64 column")[0],
                    Err(Error::Contention { .. }) => 0,
                    Err(e) => panic!("unexpected sampling error: {e}"),
                }
            })
        };
        let (s, t) = (spawn(1), spawn(2));
        let (a, b) = (s.join().unwrap(), t.join().unwrap());
        assert!(a != b || a == 0, "an item drawn past max_times_sampled");
        // The top item was drawn (a sampler passes it only once it is spent).
        assert!(
            a == 10 || b == 10,
            "the max-heap passed its top item: {a}, {b}"
        );
        let drawn = usize::from(a != 0) + usize::from(b != 0);
        assert_eq!(buffer.len(), 2 - drawn);
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// (r) As (g), the samplers drawing from the min-heap: lazy writing zeroes the only leaf
/// while the new item is in flight, so a walk may find no positive priority although an
/// item is stored; the draw must search again or give up with `Contention`, never report
/// `ZeroTotalPriority`. Each item drawn is whole and is the one its key names.
pub fn heap_overwrite_of_the_only_item<B: ConcurrentBuffer + 'static>(make: impl Make<B>) {
    model(move || {
        let buffer = Arc::new(make(config(1)));
        insert(&*buffer, 1, Some(1.0));
        let b = buffer.clone();
        let writer = thread::spawn(move || insert(&*b, 2, Some(2.0)));
        let draw = |b: &B, seed: u64| {
            let mut rng = SmallRng::seed_from_u64(seed);
            match b.sample(1, 1.0, SampleMode::MinHeap, &mut rng) {
                Ok(batch) => {
                    let values = batch.columns[0].as_i64().expect("i64 column");
                    assert!(values.iter().all(|&v| v == values[0]), "torn read");
                    assert_eq!(values[0], 1 + batch.keys[0].insertion() as i64);
                }
                Err(Error::Contention { .. }) => {}
                Err(e) => panic!("unexpected sampling error: {e}"),
            }
        };
        let b = buffer.clone();
        let sampler = thread::spawn(move || draw(&b, 1));
        draw(&buffer, 2);
        writer.join().unwrap();
        sampler.join().unwrap();
        assert!(buffer.consistency().exact, "inconsistent tree");
    });
}

/// One `#[test]` per model, on the buffers `$make` builds.
macro_rules! models {
    ($make:expr) => {
        #[test]
        fn overwrite_of_the_only_item() {
            $crate::scenarios::overwrite_of_the_only_item($make);
        }
        #[test]
        fn heap_overwrite_of_the_only_item() {
            $crate::scenarios::heap_overwrite_of_the_only_item($make);
        }
        #[test]
        fn overwrite_of_the_only_item_at_its_priority() {
            $crate::scenarios::overwrite_of_the_only_item_at_its_priority($make);
        }
        #[test]
        fn overwrite_of_the_only_item_live_max() {
            $crate::scenarios::overwrite_of_the_only_item_live_max($make);
        }
        #[test]
        fn sibling_updates() {
            $crate::scenarios::sibling_updates($make);
        }
        #[test]
        fn insert_vs_sample() {
            $crate::scenarios::insert_vs_sample($make);
        }
        #[test]
        fn insert_vs_sample_at() {
            $crate::scenarios::insert_vs_sample_at($make);
        }
        #[test]
        fn update_vs_sample() {
            $crate::scenarios::update_vs_sample($make);
        }
        #[test]
        fn wrap_around() {
            $crate::scenarios::wrap_around($make);
        }
        #[test]
        fn stale_update() {
            $crate::scenarios::stale_update($make);
        }
        #[test]
        fn stale_update_of_a_kept_leaf() {
            $crate::scenarios::stale_update_of_a_kept_leaf($make);
        }
        #[test]
        fn concurrent_maximum() {
            $crate::scenarios::concurrent_maximum($make);
        }
        #[test]
        fn batch_insert() {
            $crate::scenarios::batch_insert($make);
        }
        #[test]
        fn staged_writer() {
            $crate::scenarios::staged_writer($make);
        }
        #[test]
        fn sampled_priority_matches_key() {
            $crate::scenarios::sampled_priority_matches_key($make);
        }
        #[test]
        fn delete_beside_overwrite() {
            $crate::scenarios::delete_beside_overwrite($make);
        }
        #[test]
        fn retire_beside_insert() {
            $crate::scenarios::retire_beside_insert($make);
        }
        #[test]
        fn write_back_vs_sample() {
            $crate::scenarios::write_back_vs_sample($make);
        }
        #[test]
        fn retrieval_vs_posted_apply() {
            $crate::scenarios::retrieval_vs_posted_apply($make);
        }
        #[test]
        fn updates_of_one_key() {
            $crate::scenarios::updates_of_one_key($make);
        }
        #[test]
        fn alpha_beside_insert() {
            $crate::scenarios::alpha_beside_writes($make, false);
        }
        #[test]
        fn alpha_beside_update() {
            $crate::scenarios::alpha_beside_writes($make, true);
        }
    };
}
pub(crate) use models;
