//! The C ABI's cost over the Rust API : the same buffer, the same seeded
//! inputs, called once through `ConcurrentBuffer` and once through the `kr_*` functions.
//!
//! | group | workload (per iteration) |
//! |---|---|
//! | ffi_sample/{variant} | stratified sample of 256 with weights (beta 0.4) and the gathered columns |
//! | ffi_update/{variant} | update_priorities of 256 sampled keys |
//! | ffi_beside/{side}/{variant} | one side through the C ABI, alone (`actor_solo`, `learner_solo`) or beside one thread of the other side working non-stop (`actor_beside`, `learner_beside`): the actor 64 `kr_buffer_insert`s, each with its own priority; the learner one `kr_buffer_sample` of 256 and one `kr_buffer_update_priorities` of those 256 |
//!
//! N = 2^20 CartPole-like items (obs f32[4], reward f32[1], next_obs f32[4]), filled with
//! random priorities before measuring through the C ABI; both APIs then work on that one
//! buffer (`kr_buffer::rust`). Ids are `rust/{variant}` and `c_abi/{variant}`: the
//! Rust API samples into a reused `SampleBatch`, the C ABI into caller arrays (as a C++
//! caller samples into a tensor's memory).
//!
//! `ffi_beside` is the fairness measurement in a peer benchmark's shape (its peer benchmark:
//! through the C ABI, from two threads, a learner sampling and updating 256 and an actor
//! inserting one item at a time): each side's rate beside the other over its rate alone is
//! the share the issue bounds (at least half); `bench/ffi_table.py` prints it.
use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::{ConcurrentBuffer, Key, SampleBatch, SampleMode};
use kary_replay_ffi::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};

const N: usize = 1 << 20;
const B: usize = 256;
const SHAPES: [usize; 3] = [4, 1, 4];
const NAMES: [&std::ffi::CStr; 3] = [c"obs", c"reward", c"next_obs"];

fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_millis(2000))
        .sample_size(30)
}

fn fill_data() -> (Vec<Vec<f32>>, Vec<f64>) {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let cols = SHAPES
        .iter()
        .map(|s| (0..N * s).map(|v| v as f32).collect())
        .collect();
    let priorities = (0..N).map(|_| 1.0 - rng.random::<f64>()).collect();
    (cols, priorities)
}

/// The C buffer of one variant, filled the same way.
fn c_buffer(variant: u32, cols: &[Vec<f32>], priorities: &[f64]) -> *mut kr_buffer {
    let mut config = kr_config_default();
    config.capacity = N;
    config.fanout = 8;
    config.variant = variant;
    let columns: Vec<kr_column> = NAMES
        .iter()
        .zip(SHAPES)
        .map(|(name, shape)| kr_column {
            name: name.as_ptr(),
            dtype: KR_DTYPE_F32,
            shape,
            ndim: 0,
            dims: ptr::null(),
        })
        .collect();
    let mut buffer = ptr::null_mut();
    let pointers: Vec<*const c_void> = cols.iter().map(|c| c.as_ptr().cast()).collect();
    // SAFETY: valid config, schema and column data of N items.
    unsafe {
        assert_eq!(
            kr_buffer_new(&config, columns.as_ptr(), 3, &mut buffer),
            KR_OK
        );
        let status = kr_buffer_insert_batch(
            buffer,
            pointers.as_ptr(),
            3,
            N,
            priorities.as_ptr(),
            ptr::null_mut(),
        );
        assert_eq!(status, KR_OK);
    }
    buffer
}

/// Caller-side arrays for one C sample.
struct COut {
    keys: Vec<kr_key>,
    indices: Vec<u64>,
    weights: Vec<f64>,
    probabilities: Vec<f64>,
    priorities: Vec<f64>,
    columns: Vec<Vec<f32>>,
    /// One pointer per column (into `columns`' heap buffers, which stay put when `COut`
    /// moves), for `kr_sample_out::columns`.
    destinations: Vec<*mut c_void>,
}

impl COut {
    fn new() -> COut {
        COut {
            keys: vec![
                kr_key {
                    index: 0,
                    generation: 0
                };
                B
            ],
            indices: vec![0; B],
            weights: vec![0.0; B],
            probabilities: vec![0.0; B],
            priorities: vec![0.0; B],
            columns: SHAPES.iter().map(|s| vec![0.0; B * s]).collect(),
            destinations: Vec::new(),
        }
    }

    /// The `kr_sample_out` that writes into these arrays (valid while `self` is neither
    /// dropped nor resized).
    fn sample_out(&mut self) -> kr_sample_out {
        self.destinations = self
            .columns
            .iter_mut()
            .map(|c| c.as_mut_ptr().cast())
            .collect();
        kr_sample_out {
            keys: self.keys.as_mut_ptr(),
            indices: self.indices.as_mut_ptr(),
            weights: self.weights.as_mut_ptr(),
            probabilities: self.probabilities.as_mut_ptr(),
            priorities: self.priorities.as_mut_ptr(),
            columns: self.destinations.as_ptr(),
            ..Default::default()
        }
    }
}

fn bench_variant(c: &mut Criterion, name: &str, cbuf: *mut kr_buffer, rust: &dyn ConcurrentBuffer) {
    let mut crng = ptr::null_mut();
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { kr_rng_new(7, &mut crng) }, KR_OK);
    let mut rng = SmallRng::seed_from_u64(7);

    let mut group = c.benchmark_group("ffi_sample");
    group.throughput(Throughput::Elements(B as u64));
    let mut batch = SampleBatch::default();
    group.bench_function(BenchmarkId::new("rust", name), |b| {
        b.iter(|| {
            rust.sample_into(B, 0.4, SampleMode::Stratified, &mut rng, &mut batch)
                .unwrap();
            black_box(&batch);
        })
    });
    let mut out = COut::new();
    let sample_out = out.sample_out();
    group.bench_function(BenchmarkId::new("c_abi", name), |b| {
        b.iter(|| {
            // SAFETY: every destination has room for B items.
            let status =
                unsafe { kr_buffer_sample(cbuf, crng, B, 0.4, KR_SAMPLE_STRATIFIED, &sample_out) };
            assert_eq!(status, KR_OK);
            black_box(&sample_out);
        })
    });
    group.finish();

    // The same 256 keys and new priorities for both.
    let keys: Vec<Key> = batch.keys.clone();
    let c_keys: Vec<kr_key> = keys
        .iter()
        .map(|k| kr_key {
            index: k.index as u64,
            generation: k.generation,
        })
        .collect();
    let new_priorities: Vec<f64> = (0..B).map(|_| 1.0 - rng.random::<f64>()).collect();
    let mut group = c.benchmark_group("ffi_update");
    group.throughput(Throughput::Elements(B as u64));
    group.bench_function(BenchmarkId::new("rust", name), |b| {
        b.iter(|| black_box(rust.update_priorities(&keys, &new_priorities).unwrap()))
    });
    group.bench_function(BenchmarkId::new("c_abi", name), |b| {
        let mut report = kr_update_report::default();
        b.iter(|| {
            // SAFETY: B keys and priorities, a valid report.
            let status = unsafe {
                kr_buffer_update_priorities(
                    cbuf,
                    c_keys.as_ptr(),
                    new_priorities.as_ptr(),
                    B,
                    &mut report,
                )
            };
            assert_eq!(status, KR_OK);
            black_box(report);
        })
    });
    group.finish();
    // SAFETY: a handle from kr_rng_new, freed once.
    unsafe { kr_rng_free(crng) };
}

/// A buffer handle that threads share (the C ABI's buffer calls are thread-safe).
#[derive(Clone, Copy)]
struct Shared(*mut kr_buffer);
// SAFETY: every `kr_buffer_*` call this bench makes is documented as safe from any number
// of threads at once; the handle outlives the scoped threads that use it.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`.
unsafe impl Sync for Shared {}

/// Items an actor iteration inserts.
const INSERTS: usize = 64;

/// An actor through the C ABI: `iters` x 64 single inserts, each with its own priority
/// drawn from [0.1, 2) (as the concurrent bench's rate rows', so that it does the same tree work alone
/// and beside a learner), or until `stop` when `iters` is `None`.
fn c_actor(buffer: Shared, iters: Option<u64>, stop: &AtomicBool, seed: u64) {
    let obs = [0.25f32; 4];
    let reward = [1.0f32];
    let columns: [*const c_void; 3] = [
        obs.as_ptr().cast(),
        reward.as_ptr().cast(),
        obs.as_ptr().cast(),
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut done = 0;
    // ORDERING: Relaxed: `stop` only ends the loop; no data is handed over with it.
    while iters.map_or(!stop.load(Relaxed), |n| done < n) {
        for _ in 0..INSERTS {
            let priority = rng.random_range(0.1..2.0);
            // SAFETY: a live handle, one item's elements per column, a valid priority.
            let status = unsafe {
                kr_buffer_insert(buffer.0, columns.as_ptr(), 3, &priority, ptr::null_mut())
            };
            assert_eq!(status, KR_OK);
        }
        done += 1;
    }
}

/// A learner through the C ABI: `iters` x (sample 256 into caller arrays, update those 256
/// with |weight| + 0.05), or until `stop` when `iters` is `None`.
fn c_learner(buffer: Shared, iters: Option<u64>, stop: &AtomicBool, seed: u64) {
    let mut rng = ptr::null_mut();
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { kr_rng_new(seed, &mut rng) }, KR_OK);
    let mut out = COut::new();
    let sample_out = out.sample_out();
    let mut priorities = vec![0.0f64; B];
    let mut report = kr_update_report::default();
    let mut done = 0;
    // ORDERING: Relaxed: `stop` only ends the loop; no data is handed over with it.
    while iters.map_or(!stop.load(Relaxed), |n| done < n) {
        // SAFETY: every destination has room for B items; `rng` is this thread's.
        let status =
            unsafe { kr_buffer_sample(buffer.0, rng, B, 0.4, KR_SAMPLE_STRATIFIED, &sample_out) };
        // Contention is retryable (every draw of a stratum met a slot being written).
        if status == KR_OK {
            // SAFETY: the sample wrote B weights.
            let weights = unsafe { std::slice::from_raw_parts(sample_out.weights, B) };
            for (p, w) in priorities.iter_mut().zip(weights) {
                *p = w.abs() + 0.05;
            }
            // SAFETY: B keys (written by the sample) and priorities, a valid report.
            let status = unsafe {
                kr_buffer_update_priorities(
                    buffer.0,
                    sample_out.keys,
                    priorities.as_ptr(),
                    B,
                    &mut report,
                )
            };
            assert_eq!(status, KR_OK);
        } else {
            assert!(kr_status_is_retryable(status), "sample failed: {status}");
        }
        done += 1;
    }
    // SAFETY: a handle from kr_rng_new, freed once.
    unsafe { kr_rng_free(rng) };
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Actor,
    Learner,
}

/// The measured side's time for `iters` iterations, alone or beside one thread of the
/// other side working until the measured side is done.
fn side_time(buffer: Shared, side: Side, beside: bool, iters: u64) -> Duration {
    let barrier = Barrier::new(if beside { 2 } else { 1 });
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if beside {
            let (barrier, stop) = (&barrier, &stop);
            s.spawn(move || {
                barrier.wait();
                match side {
                    Side::Actor => c_learner(buffer, None, stop, 11),
                    Side::Learner => c_actor(buffer, None, stop, 12),
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        match side {
            Side::Actor => c_actor(buffer, Some(iters), &stop, 13),
            Side::Learner => c_learner(buffer, Some(iters), &stop, 14),
        }
        let time = start.elapsed();
        // ORDERING: Relaxed, as for the loads.
        stop.store(true, Relaxed);
        time
    })
}

fn bench_beside(c: &mut Criterion, name: &str, cbuf: *mut kr_buffer) {
    let mut group = c.benchmark_group("ffi_beside");
    for (id, side, beside) in [
        ("actor_solo", Side::Actor, false),
        ("actor_beside", Side::Actor, true),
        ("learner_solo", Side::Learner, false),
        ("learner_beside", Side::Learner, true),
    ] {
        let items = if side == Side::Actor { INSERTS } else { B };
        group.throughput(Throughput::Elements(items as u64));
        group.bench_function(BenchmarkId::new(id, name), |b| {
            b.iter_custom(|iters| side_time(Shared(cbuf), side, beside, iters))
        });
    }
    group.finish();
}

fn ffi(c: &mut Criterion) {
    let (cols, priorities) = fill_data();
    for (name, variant) in [
        ("GlobalLock", KR_VARIANT_GLOBAL_LOCK),
        ("SplitLock", KR_VARIANT_SPLIT_LOCK),
        ("LockFree", KR_VARIANT_LOCK_FREE),
    ] {
        let cbuf = c_buffer(variant, &cols, &priorities);
        // SAFETY: a live handle; freed below, after its last use.
        bench_variant(c, name, cbuf, unsafe { &*cbuf }.rust());
        bench_beside(c, name, cbuf);
        // SAFETY: a handle from kr_buffer_new, freed once.
        unsafe { kr_buffer_free(cbuf) };
    }
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = ffi
}
criterion_main!(benches);
