//! The C ABI's cost over the Rust API (issue 4, item 6): the same buffer, the same seeded
//! inputs, called once through `ConcurrentBuffer` and once through the `kr_*` functions.
//!
//! | group | workload (per iteration) |
//! |---|---|
//! | ffi_sample/{variant} | stratified sample of 256 with weights (beta 0.4) and the gathered columns |
//! | ffi_update/{variant} | update_priorities of 256 sampled keys |
//!
//! N = 2^20 CartPole-like items (obs f32[4], reward f32[1], next_obs f32[4]), filled with
//! random priorities before measuring through the C ABI; both APIs then work on that one
//! buffer (`kr_buffer::rust`). Ids are `rust/{variant}` and `c_abi/{variant}`: the
//! Rust API samples into a reused `SampleBatch`, the C ABI into caller arrays (as a C++
//! caller samples into a tensor's memory).
use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;

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
    let destinations: Vec<*mut c_void> = out
        .columns
        .iter_mut()
        .map(|c| c.as_mut_ptr().cast())
        .collect();
    let sample_out = kr_sample_out {
        keys: out.keys.as_mut_ptr(),
        indices: out.indices.as_mut_ptr(),
        weights: out.weights.as_mut_ptr(),
        probabilities: out.probabilities.as_mut_ptr(),
        priorities: out.priorities.as_mut_ptr(),
        columns: destinations.as_ptr(),
        ..Default::default()
    };
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
