//! Reverb's selector tests (`reverb/cc/selectors/{fifo,lifo,uniform,prioritized,heap}_test.cc`)
//! ported one for one, each named after its original, on the buffers that hold the
//! selector: a Reverb selector is a sample mode of ours (`Fifo`, `Lifo`, `Uniform`,
//! `MaxHeap`, `MinHeap`, and the prioritized descent), and its `Insert`, `Update`,
//! `Delete`, `Sample` and `Clear` are the buffer's insert, `update_priorities`, `delete`, a
//! sample of one and `clear`.
//!
//! Where ours differ, the port checks ours and says so:
//! - Reverb's keys are the caller's, so "a key inserted twice" cannot happen here (the
//!   insert hands the key out); "a key the selector never held" is a key of a generation
//!   this buffer never handed out (refused, as Reverb's `kInvalidArgument`), and a second
//!   delete of one key is counted stale rather than refused.
//! - `*DeathTest.ClearThenSample`: Reverb aborts; ours returns `Error::Empty`.
//! - `PrioritizedSelectorTest.AllZeroPrioritiesResultsInUniformSampling`: Reverb samples
//!   uniformly when every priority is 0; ours refuses (`Error::ZeroTotalPriority`: a
//!   priority of 0 means "never by priority"), and `SampleMode::Uniform` is the uniform draw.
//! - `*.Options` and the RNG accessors (`GetRng`, `SetRng`) test Reverb's selector objects:
//!   ours take the caller's generator, so `ControlledRNGs` checks that equal generators give
//!   equal samples and a restored one repeats them; the options protos have no counterpart.
//! - The sample counts are 200,000 where Reverb's are 1,000,000 (the tolerances are Reverb's,
//!   0.05 on each frequency, far wider than the difference).
//! - `HeapSelectorTest.BreakTiesByUpdateOrder`: Reverb's heap breaks ties by the order of
//!   the last insert or update; ours by slot (the tree keeps extrema, not recency), so an
//!   update that keeps a priority does not move its item among its ties. The port checks
//!   ours. `HeapSelectorTest.BreakTiesByInsertionOrder` holds as Reverb's: until the ring
//!   wraps, slot order is insertion order.
//! - Reverb's heap draws items of priority 0; ours never draws them (`ZeroTotalPriority`
//!   when every stored priority is 0), as by priority.

use std::collections::HashMap;

use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, Key, LockFreeBuffer, SampleBatch, SampleMode, Schema,
    SplitLockBuffer, Xoshiro256,
};

fn config(capacity: usize) -> Config {
    Config::builder(capacity, Schema::new().column("key", DType::I64, []))
        .alpha(1.0)
        .max_heap(true)
        .build()
        .unwrap()
}

/// Reverb's `Insert(key, priority)`: an item whose one column holds `key`.
fn insert<B: ConcurrentBuffer>(buffer: &B, key: i64, priority: f64) -> Key {
    buffer
        .insert(&[(&[key][..]).into()], Some(priority))
        .unwrap()
}

/// Reverb's `Sample()`: one draw; its item's column (Reverb's key), its probability and
/// our key.
fn sample_one<B: ConcurrentBuffer>(
    buffer: &B,
    mode: SampleMode,
    rng: &mut Xoshiro256,
    out: &mut SampleBatch,
) -> Result<(i64, f64, Key), Error> {
    buffer.sample_into(1, 0.4, mode, rng, out)?;
    Ok((
        out.columns[0].as_i64().unwrap()[0],
        out.probabilities[0],
        out.keys[0],
    ))
}

/// `*SelectorTest.ReturnValueSantiyChecks`, for any mode: a key never handed out cannot be
/// deleted or updated; an existing key can be updated and sampled; a second delete is stale.
fn return_value_sanity_checks<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(4)).unwrap();
    let never = Key {
        index: 0,
        generation: 123,
    };
    assert!(buffer.delete(&[never]).is_err(), "{mode:?}");
    assert!(
        buffer.update_priorities(&[never], &[4.0]).is_err(),
        "{mode:?}"
    );
    let key = insert(&buffer, 123, 4.0);
    assert_eq!(buffer.update_priorities(&[key], &[5.0]).unwrap().applied, 1);
    let mut rng = Xoshiro256::new(1);
    let mut out = SampleBatch::default();
    let (got, _, got_key) = sample_one(&buffer, mode, &mut rng, &mut out).unwrap();
    assert_eq!((got, got_key), (123, key), "{mode:?}");
    assert_eq!(buffer.delete(&[key]).unwrap().applied, 1, "{mode:?}");
    assert_eq!(buffer.delete(&[key]).unwrap().stale, 1, "{mode:?}");
}

/// `FifoSelectorTest.MatchesFifoOrdering` and `LifoSelectorTest.MatchesLifoOrdering`: 100
/// items, every 10th deleted, then each draw is the oldest (newest) left, probability 1,
/// and is deleted.
fn matches_ordering<B: ConcurrentBuffer>(mode: SampleMode) {
    const ITEMS: i64 = 100;
    let buffer = B::new(config(ITEMS as usize)).unwrap();
    let keys: Vec<Key> = (0..ITEMS).map(|i| insert(&buffer, i, 0.0)).collect();
    let tenths: Vec<Key> = keys.iter().step_by(10).copied().collect();
    assert_eq!(buffer.delete(&tenths).unwrap().applied, 10);
    let mut want: Vec<i64> = (0..ITEMS).filter(|i| i % 10 != 0).collect();
    if mode == SampleMode::Lifo {
        want.reverse();
    }
    let mut rng = Xoshiro256::new(2);
    let mut out = SampleBatch::default();
    for i in want {
        let (got, probability, key) = sample_one(&buffer, mode, &mut rng, &mut out).unwrap();
        assert_eq!((got, probability), (i, 1.0), "{mode:?}");
        assert_eq!(buffer.delete(&[key]).unwrap().applied, 1, "{mode:?}");
    }
    assert!(buffer.is_empty());
}

/// `*DeathTest.ClearThenSample`: 100 items, a sample, a clear; the next sample is `Empty`.
fn clear_then_sample<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(128)).unwrap();
    for i in 0..100 {
        insert(&buffer, i, i as f64);
    }
    let mut rng = Xoshiro256::new(3);
    let mut out = SampleBatch::default();
    sample_one(&buffer, mode, &mut rng, &mut out).unwrap();
    buffer.clear();
    assert_eq!(
        sample_one(&buffer, mode, &mut rng, &mut out).unwrap_err(),
        Error::Empty,
        "{mode:?}"
    );
}

fn on_both(test: fn(SampleMode), modes: &[SampleMode]) {
    for &mode in modes {
        test(mode);
    }
}

macro_rules! on_every_buffer {
    ($f:ident, $modes:expr) => {
        on_both($f::<SplitLockBuffer>, $modes);
        on_both($f::<LockFreeBuffer>, $modes);
    };
}

#[test]
fn fifo_selector_test_return_value_santiy_checks() {
    on_every_buffer!(return_value_sanity_checks, &[SampleMode::Fifo]);
}

#[test]
fn fifo_selector_test_matches_fifo_ordering() {
    on_every_buffer!(matches_ordering, &[SampleMode::Fifo]);
}

#[test]
fn fifo_death_test_clear_then_sample() {
    on_every_buffer!(clear_then_sample, &[SampleMode::Fifo]);
}

#[test]
fn lifo_selector_test_return_value_santiy_checks() {
    on_every_buffer!(return_value_sanity_checks, &[SampleMode::Lifo]);
}

#[test]
fn lifo_selector_test_matches_lifo_ordering() {
    on_every_buffer!(matches_ordering, &[SampleMode::Lifo]);
}

#[test]
fn lifo_selector_death_test_clear_then_sample() {
    on_every_buffer!(clear_then_sample, &[SampleMode::Lifo]);
}

#[test]
fn uniform_selector_test_return_value_santiy_checks() {
    on_every_buffer!(return_value_sanity_checks, &[SampleMode::Uniform]);
}

/// `UniformSelectorTest.MatchesUniformSelector`: 100 items of priority 0, each drawn with
/// probability 1/100 (reported exactly), each frequency within 0.05 of it.
fn matches_uniform<B: ConcurrentBuffer>(_: SampleMode) {
    const ITEMS: usize = 100;
    const SAMPLES: usize = 200_000;
    let buffer = B::new(config(ITEMS)).unwrap();
    for i in 0..ITEMS as i64 {
        insert(&buffer, i, 0.0);
    }
    let mut rng = Xoshiro256::new(4);
    let mut out = SampleBatch::default();
    let mut counts = [0usize; ITEMS];
    for _ in 0..SAMPLES / 100 {
        buffer
            .sample_into(100, 0.4, SampleMode::Uniform, &mut rng, &mut out)
            .unwrap();
        assert!(out.probabilities.iter().all(|&p| p == 1.0 / ITEMS as f64));
        for &k in out.columns[0].as_i64().unwrap() {
            counts[k as usize] += 1;
        }
    }
    for count in counts {
        assert!((count as f64 / SAMPLES as f64 - 0.01).abs() < 0.05);
    }
}

#[test]
fn uniform_selector_test_matches_uniform_selector() {
    on_every_buffer!(matches_uniform, &[SampleMode::Uniform]);
}

#[test]
fn uniform_death_test_clear_then_sample() {
    on_every_buffer!(clear_then_sample, &[SampleMode::Uniform]);
}

/// `PrioritizedSelectorTest.ReturnValueSantiyChecks`, with its priority checks: negative
/// and NaN priorities are refused on update and on insert.
fn prioritized_sanity<B: ConcurrentBuffer>(mode: SampleMode) {
    return_value_sanity_checks::<B>(mode);
    let buffer = B::new(config(4)).unwrap();
    let key = insert(&buffer, 123, 4.0);
    for bad in [-1.0, f64::NAN] {
        assert!(matches!(
            buffer.update_priorities(&[key], &[bad]),
            Err(Error::InvalidPriority { .. })
        ));
        assert!(matches!(
            buffer.insert(&[(&[456i64][..]).into()], Some(bad)),
            Err(Error::InvalidPriority { .. })
        ));
    }
    assert_eq!(buffer.len(), 1);
}

#[test]
fn prioritized_selector_test_return_value_santiy_checks() {
    on_every_buffer!(prioritized_sanity, &[SampleMode::Independent]);
}

/// `PrioritizedSelectorTest.AllZeroPrioritiesResultsInUniformSampling`, as ours differ:
/// every priority 0 is `ZeroTotalPriority` by priority; the uniform mode draws them all.
fn all_zero<B: ConcurrentBuffer>(_: SampleMode) {
    let buffer = B::new(config(100)).unwrap();
    for i in 0..100 {
        insert(&buffer, i, 0.0);
    }
    let mut rng = Xoshiro256::new(5);
    let mut out = SampleBatch::default();
    assert_eq!(
        sample_one(&buffer, SampleMode::Independent, &mut rng, &mut out).unwrap_err(),
        Error::ZeroTotalPriority
    );
    let (_, p, _) = sample_one(&buffer, SampleMode::Uniform, &mut rng, &mut out).unwrap();
    assert_eq!(p, 0.01);
}

#[test]
fn prioritized_selector_test_all_zero_priorities_results_in_uniform_sampling() {
    on_every_buffer!(all_zero, &[SampleMode::Independent]);
}

/// `PrioritizedSelectorTest.SampledDistributionMatchesProbabilities`: items 0..100 of
/// priority `i` (half inserted with it, half inserted at 123 and updated to it), the first
/// 10 deleted; each draw reports probability `key / sum` (within 0.001), the deleted are
/// never drawn, and each frequency is within 0.05 of its probability.
fn distribution<B: ConcurrentBuffer>(_: SampleMode) {
    const START: i64 = 10;
    const END: i64 = 100;
    const SAMPLES: usize = 200_000;
    let buffer = B::new(config(END as usize)).unwrap();
    let mut rng = Xoshiro256::new(6);
    let mut keys = Vec::new();
    let mut sum = 0.0;
    for i in 0..END {
        if i % 2 == 0 {
            keys.push(insert(&buffer, i, i as f64));
        } else {
            let key = insert(&buffer, i, 123.0);
            buffer.update_priorities(&[key], &[i as f64]).unwrap();
            keys.push(key);
        }
        sum += i as f64;
    }
    buffer.delete(&keys[..START as usize]).unwrap();
    sum -= (0..START).sum::<i64>() as f64;
    let mut counts = vec![0usize; END as usize];
    let mut out = SampleBatch::default();
    for _ in 0..SAMPLES / 100 {
        buffer
            .sample_into(100, 0.4, SampleMode::Independent, &mut rng, &mut out)
            .unwrap();
        let got = out.columns[0].as_i64().unwrap();
        for (&k, &p) in got.iter().zip(&out.probabilities) {
            assert!((p - k as f64 / sum).abs() < 0.001);
            counts[k as usize] += 1;
        }
    }
    assert!(counts[..START as usize].iter().all(|&c| c == 0));
    for k in START..END {
        let freq = counts[k as usize] as f64 / SAMPLES as f64;
        assert!((freq - k as f64 / sum).abs() < 0.05, "item {k}: {freq}");
    }
}

#[test]
fn prioritized_selector_test_sampled_distribution_matches_probabilities() {
    on_every_buffer!(distribution, &[SampleMode::Independent]);
}

/// `PrioritizedSelector.RoundingErrors`: 1e-15 and 10000 items of 0.3, the 10000 deleted;
/// the total is the one left, never negative (ours: exact, `consistency().exact`).
fn rounding<B: ConcurrentBuffer>(_: SampleMode) {
    let buffer = B::new(config(10_001)).unwrap();
    insert(&buffer, 0, 1e-15);
    let keys: Vec<Key> = (1..=10_000).map(|i| insert(&buffer, i, 0.3)).collect();
    buffer.delete(&keys).unwrap();
    assert!(buffer.total_priority() >= 0.0);
    assert_eq!(buffer.total_priority(), 1e-15);
    assert!(buffer.consistency().exact);
}

#[test]
fn prioritized_selector_rounding_errors() {
    on_every_buffer!(rounding, &[SampleMode::Independent]);
}

#[test]
fn prioritized_death_test_clear_then_sample() {
    on_every_buffer!(clear_then_sample, &[SampleMode::Independent]);
}

/// `PrioritizedSelectorTest.ControlledRNGs` (and `InstancesSeeded*`): two buffers with the
/// same items sampled with equal generators give equal draws; a generator restored to an
/// earlier state repeats them.
fn controlled_rngs<B: ConcurrentBuffer>(_: SampleMode) {
    let (a, b) = (B::new(config(100)).unwrap(), B::new(config(100)).unwrap());
    for i in 0..100 {
        insert(&a, i, i as f64);
        insert(&b, i, i as f64);
    }
    let initial = Xoshiro256::new(1);
    let (mut ra, mut rb) = (initial.clone(), initial.clone());
    let (mut oa, mut ob) = (SampleBatch::default(), SampleBatch::default());
    let mut seen = Vec::new();
    for _ in 0..100 {
        let (ka, pa, _) = sample_one(&a, SampleMode::Independent, &mut ra, &mut oa).unwrap();
        let (kb, pb, _) = sample_one(&b, SampleMode::Independent, &mut rb, &mut ob).unwrap();
        assert_eq!((ka, pa), (kb, pb));
        seen.push((ka, pa));
    }
    let mut again = initial;
    for want in seen {
        let (k, p, _) = sample_one(&a, SampleMode::Independent, &mut again, &mut oa).unwrap();
        assert_eq!((k, p), want);
    }
}

#[test]
fn prioritized_selector_test_controlled_rngs() {
    on_every_buffer!(controlled_rngs, &[SampleMode::Independent]);
}

/// Inserts `(key, priority)` pairs, then checks that drawing from the heap and deleting
/// what is drawn gives `want`, probability 1 each.
fn drain_heap<B: ConcurrentBuffer>(
    buffer: &B,
    mode: SampleMode,
    keys: &HashMap<i64, Key>,
    want: &[i64],
) {
    let mut rng = Xoshiro256::new(5);
    let mut out = SampleBatch::default();
    for &i in want {
        let (got, probability, _) = sample_one(buffer, mode, &mut rng, &mut out).unwrap();
        assert_eq!((got, probability), (i, 1.0), "{mode:?}");
        assert_eq!(buffer.delete(&[keys[&i]]).unwrap().applied, 1);
    }
}

fn heap_sanity<B: ConcurrentBuffer>(mode: SampleMode) {
    return_value_sanity_checks::<B>(mode);
}

#[test]
fn heap_selector_test_return_value_santiy_checks() {
    on_every_buffer!(heap_sanity, &[SampleMode::MinHeap, SampleMode::MaxHeap]);
}

/// `HeapSelectorTest.SampleMinPriorityFirstByDefault` (a min-heap; `MinHeap` here) and
/// `HeapSelectorTest.SampleMaxPriorityWhenMinHeapFalse` (`MaxHeap`): priorities 2, 1, 3;
/// the top, then, once it is deleted, the next.
fn min_or_max_first<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(8)).unwrap();
    let keys: HashMap<i64, Key> = [(123, 2.0), (124, 1.0), (125, 3.0)]
        .into_iter()
        .map(|(k, p)| (k, insert(&buffer, k, p)))
        .collect();
    let want = match mode {
        SampleMode::MinHeap => [124, 123],
        _ => [125, 123],
    };
    drain_heap(&buffer, mode, &keys, &want);
}

#[test]
fn heap_selector_test_sample_min_priority_first_by_default() {
    on_every_buffer!(min_or_max_first, &[SampleMode::MinHeap]);
}

#[test]
fn heap_selector_test_sample_max_priority_when_min_heap_false() {
    on_every_buffer!(min_or_max_first, &[SampleMode::MaxHeap]);
}

/// `HeapSelectorTest.BreakTiesByInsertionOrder`: keys inserted so that a min-heap hands them
/// out as 0, 1, ..., 5, with a three-way and a two-way tie.
fn ties_by_insertion<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(8)).unwrap();
    let keys: HashMap<i64, Key> = [
        (5, 300.0),
        (0, 1.0),
        (3, 20.0),
        (1, 1.0),
        (4, 20.0),
        (2, 1.0),
    ]
    .into_iter()
    .map(|(k, p)| (k, insert(&buffer, k, p)))
    .collect();
    drain_heap(&buffer, mode, &keys, &[0, 1, 2, 3, 4, 5]);
}

#[test]
fn heap_selector_test_break_ties_by_insertion_order() {
    on_every_buffer!(ties_by_insertion, &[SampleMode::MinHeap]);
}

/// `HeapSelectorTest.BreakTiesByUpdateOrder`, ours (see the module doc): keys 2, 0, 1 of
/// equal priority; Reverb's update of key 2 to the same priority sends it behind the others,
/// ours leaves the slot order, 2, 0, 1.
fn ties_after_update<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(8)).unwrap();
    let keys: HashMap<i64, Key> = [(2, 1.0), (0, 1.0), (1, 1.0)]
        .into_iter()
        .map(|(k, p)| (k, insert(&buffer, k, p)))
        .collect();
    assert_eq!(
        buffer
            .update_priorities(&[keys[&2]], &[1.0])
            .unwrap()
            .applied,
        1
    );
    drain_heap(&buffer, mode, &keys, &[2, 0, 1]);
}

#[test]
fn heap_selector_test_break_ties_by_update_order() {
    on_every_buffer!(ties_after_update, &[SampleMode::MinHeap]);
}

/// `HeapSelectorTest.UpdateChangesOrder`: 2, 1, 3; the top (1) raised to 5 gives 2; 3
/// lowered to 0.5 comes to the top.
fn update_changes_order<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(8)).unwrap();
    let keys: HashMap<i64, Key> = [(123, 2.0), (124, 1.0), (125, 3.0)]
        .into_iter()
        .map(|(k, p)| (k, insert(&buffer, k, p)))
        .collect();
    let mut rng = Xoshiro256::new(6);
    let mut out = SampleBatch::default();
    let mut top = || sample_one(&buffer, mode, &mut rng, &mut out).unwrap().0;
    assert_eq!(top(), 124);
    buffer.update_priorities(&[keys[&124]], &[5.0]).unwrap();
    assert_eq!(top(), 123);
    buffer.update_priorities(&[keys[&125]], &[0.5]).unwrap();
    assert_eq!(top(), 125);
}

#[test]
fn heap_selector_test_update_changes_order() {
    on_every_buffer!(update_changes_order, &[SampleMode::MinHeap]);
}

/// `HeapSelectorTest.Clear`: 2, 1; the top is 1; after a clear, an item of priority 10 is
/// the top.
fn heap_clear<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(8)).unwrap();
    insert(&buffer, 123, 2.0);
    insert(&buffer, 124, 1.0);
    let mut rng = Xoshiro256::new(7);
    let mut out = SampleBatch::default();
    assert_eq!(
        sample_one(&buffer, mode, &mut rng, &mut out).unwrap().0,
        124
    );
    buffer.clear();
    insert(&buffer, 125, 10.0);
    assert_eq!(
        sample_one(&buffer, mode, &mut rng, &mut out).unwrap().0,
        125
    );
}

#[test]
fn heap_selector_test_clear() {
    on_every_buffer!(heap_clear, &[SampleMode::MinHeap]);
}

/// `HeapSelectorTest.ProbabilityIsAlwaysOne`: 50 items of priorities 100..150; 50 draws,
/// each deleted, each of probability 1 (and, ours, in priority order).
fn probability_one<B: ConcurrentBuffer>(mode: SampleMode) {
    let buffer = B::new(config(64)).unwrap();
    let keys: HashMap<i64, Key> = (100..150)
        .map(|i| (i, insert(&buffer, i, i as f64)))
        .collect();
    let want: Vec<i64> = (100..150).collect();
    drain_heap(&buffer, mode, &keys, &want);
    assert!(buffer.is_empty());
}

#[test]
fn heap_selector_test_probability_is_always_one() {
    on_every_buffer!(probability_one, &[SampleMode::MinHeap]);
}

#[test]
fn heap_selector_death_test_sample_from_empty_selector() {
    fn empty<B: ConcurrentBuffer>(mode: SampleMode) {
        let buffer = B::new(config(8)).unwrap();
        let mut rng = Xoshiro256::new(8);
        let mut out = SampleBatch::default();
        let err = sample_one(&buffer, mode, &mut rng, &mut out).unwrap_err();
        assert_eq!(err, Error::Empty, "{mode:?}");
        let key = insert(&buffer, 123, 2.0);
        sample_one(&buffer, mode, &mut rng, &mut out).unwrap();
        buffer.delete(&[key]).unwrap();
        let err = sample_one(&buffer, mode, &mut rng, &mut out).unwrap_err();
        assert_eq!(err, Error::Empty, "{mode:?}");
    }
    on_every_buffer!(empty, &[SampleMode::MinHeap, SampleMode::MaxHeap]);
}
