//! No starvation (issue 11, item 7): one actor inserting one item at a time and one
//! learner sampling and updating 256 (the peer benchmark's shape), each measured alone and
//! beside the other. The actor gives each item its own priority, drawn as the learner's
//! are, so that it does the same tree work alone and beside the learner: with the default
//! priority, alone it replaces each evicted leaf by the same running maximum, and
//! LockFree's install climb (which has no retire climb before it since lazy writing
//! without one, `buffer/lock_free.rs`) then stops at the first level, while beside the
//! learner the evicted leaves hold the learner's values and every climb goes to the root:
//! LockFree's actor measured 17 M items/s alone and 8 M beside, a share of 0.48 that is
//! a difference of work, not of contention. SplitLock and LockFree must let each side keep a fair share of its solo
//! rate; GlobalLock does not yet (see `global_lock_starvation_is_known`).
//!
//! The stated bound is the issue's: each side keeps at least half of its solo rate beside
//! the other (median of 3 windows of 150 ms, the best of up to 5 such measurements, the
//! tests of this file one at a time). Measured on this machine (2 cores, `cargo test --release`,
//! 16 processes, 2026-11-24, the actor at the default priority then): SplitLock's actor
//! 1.11-1.26 (posted writes: it never waits for the tree lock; before them 0.09-0.43) and
//! learner 0.74-0.78; LockFree's actor 0.81-0.88 and learner 0.87-0.90. With each item's
//! own priority (2026-11-24): SplitLock's actor 1.15-1.28, learner 0.91-0.99 (3
//! processes); LockFree's actor 0.54-1.42, 0.82-0.89 in 14 processes of 20 (5.3-7.7 M
//! items/s alone, 3.9-6.8 beside; before lazy writing without a retire climb 0.89-0.90 of
//! 4.7-4.8 M, 4.2-4.3 beside, 2 processes), learner 0.75-1.45. After SplitLock's
//! coalesced posted writes (2026-11-24, 5 processes): SplitLock's actor 1.12-1.50 (it
//! posts, and the learner propagates for it), learner 0.77-0.93; LockFree's actor
//! 0.54-1.39 in 13 processes (one more failed at 0.47-0.50, far placement, before this
//! test took 5 measurements), learner 0.80-1.24. After SplitLock's single inserts began to
//! post their retires (2026-11-25, 3 processes): SplitLock's actor 0.77-0.78 (14.3-15.8 M
//! items/s alone, twice its rate before, 11.0-12.4 beside), learner 0.86-1.15; LockFree's
//! actor 0.69-0.98, learner 0.81-0.96. The low shares come in runs
//! of processes, as the far placement of the VM's two vCPUs does (README, "What the slow
//! phases are"). Starvation, what the issue reported, is a share
//! of 0.001 to 0.01. A share that is low in every measurement of one process and fine in
//! the next is a layout effect, not noise: LockFree's actor kept 0.45-0.47 in 5 processes
//! of 8 until the atomic tree's root fields got a cache line of their own.
//!
//! GlobalLock cannot meet half by construction: both sides time-share one lock that each
//! holds for nearly all of its work, so even a perfectly fair lock leaves each about half of
//! its solo rate minus the handoff; see `global_lock_starvation_is_known`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, LockFreeBuffer, SampleBatch,
    SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const WINDOW: Duration = Duration::from_millis(150);
const BOUND: f64 = 0.5;
const BATCH: usize = 256;

fn buffer<B: ConcurrentBuffer>() -> B {
    let schema = Schema::new()
        .column("obs", DType::F32, 4)
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, 4);
    let b = B::new(Config::builder(1 << 16, schema).fanout(8).build().unwrap()).unwrap();
    let n = 1 << 16;
    let obs = vec![0.5f32; n * 4];
    let reward = vec![1.0f32; n];
    b.insert_batch(&[(&obs).into(), (&reward).into(), (&obs).into()], None)
        .unwrap();
    b
}

fn actor<B: ConcurrentBuffer>(b: &B, stop: &AtomicBool, count: &AtomicU64) {
    let obs = [0.25f32; 4];
    let mut rng = SmallRng::seed_from_u64(3);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        // Each item its own priority, drawn as the learner's are: solo and beside the
        // learner the actor then does the same tree work (module doc).
        let priority = rng.random_range(0.1..2.0);
        b.insert(
            &[(&obs).into(), (&[1.0f32]).into(), (&obs).into()],
            Some(priority),
        )
        .unwrap();
        n += 1;
        if n % 64 == 0 {
            count.fetch_add(64, Ordering::Relaxed);
        }
    }
}

fn learner<B: ConcurrentBuffer>(b: &B, stop: &AtomicBool, count: &AtomicU64) {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut out = SampleBatch::default();
    let mut td = vec![0.0; BATCH];
    while !stop.load(Ordering::Relaxed) {
        match b.sample_into(BATCH, 0.4, SampleMode::Stratified, &mut rng, &mut out) {
            Ok(()) => {}
            Err(Error::Contention { .. }) => continue,
            Err(e) => panic!("{e}"),
        }
        for t in td.iter_mut() {
            *t = rng.random_range(0.1..2.0);
        }
        b.update_priorities(&out.keys, &td).unwrap();
        count.fetch_add(BATCH as u64, Ordering::Relaxed);
    }
}

/// Items per second of (actor, learner) in one window; a side not run reports 0.
fn window<B: ConcurrentBuffer>(b: &B, run_actor: bool, run_learner: bool) -> (f64, f64) {
    let stop = AtomicBool::new(false);
    let (inserted, sampled) = (AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    std::thread::scope(|s| {
        if run_actor {
            s.spawn(|| actor(b, &stop, &inserted));
        }
        if run_learner {
            s.spawn(|| learner(b, &stop, &sampled));
        }
        std::thread::sleep(WINDOW);
        stop.store(true, Ordering::Relaxed);
    });
    let t = start.elapsed().as_secs_f64();
    (
        inserted.load(Ordering::Relaxed) as f64 / t,
        sampled.load(Ordering::Relaxed) as f64 / t,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The tests of this file measure one at a time (two at once would share the cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn shares<B: ConcurrentBuffer>() -> (f64, f64) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let b = buffer::<B>();
    let actor_solo = median((0..3).map(|_| window(&b, true, false).0).collect());
    let learner_solo = median((0..3).map(|_| window(&b, false, true).1).collect());
    let both: Vec<(f64, f64)> = (0..3).map(|_| window(&b, true, true)).collect();
    let actor_beside = median(both.iter().map(|x| x.0).collect());
    let learner_beside = median(both.iter().map(|x| x.1).collect());
    let shares = (actor_beside / actor_solo, learner_beside / learner_solo);
    eprintln!(
        "{}: actor {:.0} k/s solo, {:.0} k/s beside ({:.2}); learner {:.0} k/s solo, {:.0} k/s beside ({:.2})",
        std::any::type_name::<B>(),
        actor_solo / 1e3,
        actor_beside / 1e3,
        shares.0,
        learner_solo / 1e3,
        learner_beside / 1e3,
        shares.1
    );
    shares
}

#[test]
fn neither_side_starves_the_other_on_the_slot_buffers() {
    // Up to 5 measurements each: a side that starves does so in every one (a share of
    // 0.001 to 0.01), while a noisy host (another tenant taking a core for a window, the
    // VM's two vCPUs placed far apart or as siblings of one core) spoils one now and then:
    // LockFree's actor kept 0.47-0.50 in all 3 measurements of one process of about 20 on
    // 2026-11-24 (far placement) and 0.86-0.89 in the next two.
    fn best<B: ConcurrentBuffer>() -> (f64, f64) {
        let mut best = (0.0f64, 0.0f64);
        for _ in 0..5 {
            let (actor, learner) = shares::<B>();
            if actor.min(learner) > best.0.min(best.1) {
                best = (actor, learner);
            }
            if best.0 >= BOUND && best.1 >= BOUND {
                break;
            }
        }
        best
    }
    let results = [
        ("SplitLock", best::<SplitLockBuffer>()),
        ("LockFree", best::<LockFreeBuffer>()),
    ];
    for (name, (actor, learner)) in results {
        assert!(
            actor >= BOUND && learner >= BOUND,
            "{name}: actor kept {actor:.2}, learner {learner:.2} of its solo rate (bound {BOUND:.2})"
        );
    }
}

/// GlobalLock still starves its actor (std's mutex hands itself back to the learner that
/// just released it: measured 27 k/s beside the learner against 19.7 M/s solo, a share of
/// 0.001, on a quiet run of this machine; 0.29 on a loaded one). Issue 11, item 7 is open
/// for it: this only prints the figures (a timing that depends on the host's load cannot be
/// asserted either way); move GlobalLock into the test above once its lock is fair.
#[test]
fn global_lock_starvation_is_known() {
    let (actor, learner) = shares::<GlobalLockBuffer>();
    eprintln!("GlobalLock: actor kept {actor:.3}, learner {learner:.3} of its solo rate");
}
