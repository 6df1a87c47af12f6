//! The rate limiter's cost: an admitted call alone, and a learner step with and without one.
//!
//! | group | what | elements |
//! |---|---|---|
//! | rate_admit/{try_sample,try_insert} | one admitted call of B = 256 items on one thread (`MinSize(1)`, so that every call is admitted: the same compare-and-swap as any limit's) | 1 call |
//! | rate_learner_step/{plain,rate_limited} | a learner step on a full `SplitLockBuffer` of N = 2^20 36-byte items (sample 256, stratified, beta 0.4, into the batch's columns; update their 256 priorities), and the same step on the same buffer made with a rate limit (`MinSize(1)`: every sample admitted, through the same admission as any limit's) | 1 step |
//!
//! The figure is the ratio of the two learner steps, measured in one group.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::rate::{Batches, RateLimit, RateLimiter};
use kary_replay::{
    ConcurrentBuffer, Config, DType, SampleBatch, SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const N: usize = 1 << 20;
const B: usize = 256;

fn limiter() -> RateLimiter {
    let limiter = RateLimiter::new(
        RateLimit::MinSize(1),
        Batches {
            insert: B as u64,
            sample: B as u64,
        },
    )
    .unwrap();
    limiter.try_insert(1).unwrap();
    limiter
}

fn admit(c: &mut Criterion) {
    let mut g = c.benchmark_group("rate_admit");
    g.throughput(Throughput::Elements(1));
    let l = limiter();
    g.bench_function("try_sample", |b| b.iter(|| l.try_sample(B as u64).unwrap()));
    g.bench_function("try_insert", |b| b.iter(|| l.try_insert(B as u64).unwrap()));
    g.finish();
}

/// A full `SplitLockBuffer` of N 36-byte items, with `limit` if given.
fn filled(limit: Option<RateLimit>, rng: &mut SmallRng) -> SplitLockBuffer {
    let schema = Schema::new()
        .column("obs", DType::F32, 4)
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, 4);
    let chunk = 1 << 14;
    let mut config = Config::builder(N, schema);
    if let Some(limit) = limit {
        let batches = Batches {
            insert: chunk as u64,
            sample: B as u64,
        };
        config = config.rate_limit(limit, batches);
    }
    let buffer = SplitLockBuffer::new(config.build().unwrap()).unwrap();
    let (obs, one): (Vec<f32>, Vec<f32>) =
        ((0..chunk * 4).map(|i| i as f32).collect(), vec![1.0; chunk]);
    for _ in 0..N / chunk {
        let p: Vec<f64> = (0..chunk).map(|_| rng.random::<f64>() + 0.01).collect();
        buffer
            .insert_batch(
                &[(&obs[..]).into(), (&one[..]).into(), (&obs[..]).into()],
                Some(&p),
            )
            .unwrap();
    }
    buffer
}

fn learner_step(c: &mut Criterion) {
    let mut rng = SmallRng::seed_from_u64(1);
    let plain = filled(None, &mut rng);
    let limited = filled(Some(RateLimit::MinSize(1)), &mut rng);
    let mut g = c.benchmark_group("rate_learner_step");
    g.throughput(Throughput::Elements(1));
    let mut out = SampleBatch::default();
    let priorities = vec![0.5; B];
    for (name, buffer) in [("plain", &plain), ("rate_limited", &limited)] {
        g.bench_with_input(BenchmarkId::from_parameter(name), buffer, |b, buffer| {
            b.iter(|| {
                buffer
                    .sample_into(B, 0.4, SampleMode::Stratified, &mut rng, &mut out)
                    .unwrap();
                buffer.update_priorities(&out.keys, &priorities).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, admit, learner_step);
criterion_main!(benches);
