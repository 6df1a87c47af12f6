//! Banks: S shards sampled as one (`ShardedBuffer`, each actor inserting into its own shard,
//! learners sampling the union through a coordinator) against one buffer of the same total
//! capacity, with the same threads.
//!
//! Items are CartPole-like transitions (obs f32[4], reward f32[1], next_obs f32[4]); total
//! capacity N = 2^20, filled before measuring; fanout 8, alpha 0.6.
//!
//! | group | threads | work per thread per iteration | elements |
//! |---|---|---|---|
//! | sharded_mixed/{buffer} | T actors + T learners | actors: 64 inserts, each with its own priority; learners: sample 64 (stratified, beta 0.4) + update them | inserted + sampled |
//! | sharded_actors/{buffer} | T actors | as above | items inserted |
//! | sharded_learners/{buffer} | T learners | as above | items sampled |
//!
//! Buffers: `one_splitlock` (one `SplitLockBuffer` of N), `{T}_shards_splitlock` and
//! `{T}_shards_lockfree` (T shards of N / T; actor a inserts into shard a). T from
//! `KARY_BENCH_SHARD_THREADS` (default 2). Threads start together at a barrier; the time is
//! from the barrier to the last join.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::shard::{Coordinator, ShardedBuffer};
use kary_replay::{
    ColumnSlice, ConcurrentBuffer, Config, DType, Key, LockFreeBuffer, RandomSource, SampleBatch,
    SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, SeedableRng};

const N: usize = 1 << 20;
const BATCH: usize = 64;
const INSERTS: usize = 64;
const SHAPES: [usize; 3] = [4, 1, 4];

fn config(capacity: usize) -> Config {
    let schema = Schema::new()
        .column("obs", DType::F32, SHAPES[0])
        .column("reward", DType::F32, SHAPES[1])
        .column("next_obs", DType::F32, SHAPES[2]);
    Config::builder(capacity, schema)
        .fanout(8)
        .alpha(0.6)
        .build()
        .unwrap()
}

/// What the threads work on: one buffer, or shards sampled as one.
trait Bank: Sync {
    fn insert(&self, actor: usize, columns: &[ColumnSlice<'_>], priority: f64);
    fn sample_update(
        &self,
        c: &mut Coordinator,
        rng: &mut SmallRng,
        out: &mut SampleBatch,
        ps: &mut Vec<f64>,
    );
    fn fill(&self);
}

fn fill_with(insert: impl Fn(&[ColumnSlice<'_>], &[f64]), items: usize) {
    let mut rng = SmallRng::seed_from_u64(1);
    let chunk = 4096;
    let cols: [Vec<f32>; 3] = SHAPES.map(|s| (0..chunk * s).map(|i| i as f32).collect());
    for _ in 0..items / chunk {
        let ps: Vec<f64> = (0..chunk).map(|_| 1.0 - rng.next_f64()).collect();
        insert(
            &[(&cols[0]).into(), (&cols[1]).into(), (&cols[2]).into()],
            &ps,
        );
    }
}

fn update(keys: &[Key], weights: &[f64], ps: &mut Vec<f64>, apply: impl FnOnce(&[Key], &[f64])) {
    ps.clear();
    ps.extend(weights.iter().map(|w| 0.05 + w));
    apply(keys, ps);
}

struct One(SplitLockBuffer);

impl Bank for One {
    fn insert(&self, _: usize, columns: &[ColumnSlice<'_>], priority: f64) {
        self.0.insert(columns, Some(priority)).unwrap();
    }
    fn sample_update(
        &self,
        _: &mut Coordinator,
        rng: &mut SmallRng,
        out: &mut SampleBatch,
        ps: &mut Vec<f64>,
    ) {
        self.0
            .sample_into(BATCH, 0.4, SampleMode::Stratified, rng, out)
            .unwrap();
        update(&out.keys, &out.weights, ps, |k, p| {
            std::hint::black_box(self.0.update_priorities(k, p).unwrap());
        });
    }
    fn fill(&self) {
        fill_with(|c, p| drop(self.0.insert_batch(c, Some(p)).unwrap()), N);
    }
}

impl<B: ConcurrentBuffer> Bank for ShardedBuffer<B> {
    fn insert(&self, actor: usize, columns: &[ColumnSlice<'_>], priority: f64) {
        let shard = actor % self.shards().len();
        ShardedBuffer::insert(self, shard, columns, Some(priority)).unwrap();
    }
    fn sample_update(
        &self,
        c: &mut Coordinator,
        rng: &mut SmallRng,
        out: &mut SampleBatch,
        ps: &mut Vec<f64>,
    ) {
        self.sample_into(c, BATCH, 0.4, SampleMode::Stratified, rng, out)
            .unwrap();
        update(&out.keys, &out.weights, ps, |k, p| {
            std::hint::black_box(self.update_priorities(k, p).unwrap());
        });
    }
    fn fill(&self) {
        let shards = self.shards().len();
        for k in 0..shards {
            fill_with(
                |c, p| drop(self.insert_batch(k, c, Some(p)).unwrap()),
                N / shards,
            );
        }
    }
}

/// `actors` + `learners` threads, `iters` iterations each; wall time from the barrier.
fn run(bank: &dyn Bank, actors: usize, learners: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(actors + learners + 1);
    std::thread::scope(|s| {
        for a in 0..actors {
            let barrier = &barrier;
            s.spawn(move || {
                let item: [Vec<f32>; 3] = SHAPES.map(|n| vec![a as f32; n]);
                let columns: [ColumnSlice<'_>; 3] =
                    [(&item[0]).into(), (&item[1]).into(), (&item[2]).into()];
                barrier.wait();
                let mut k = 0u32;
                for _ in 0..iters {
                    for _ in 0..INSERTS {
                        bank.insert(a, &columns, 0.25 + f64::from(k % 13));
                        k = k.wrapping_add(1);
                    }
                }
            });
        }
        for l in 0..learners {
            let barrier = &barrier;
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + l as u64);
                let (mut c, mut out, mut ps) = (Coordinator::new(), SampleBatch::default(), vec![]);
                barrier.wait();
                for _ in 0..iters {
                    bank.sample_update(&mut c, &mut rng, &mut out, &mut ps);
                }
            });
        }
        barrier.wait();
        Instant::now()
    })
    .elapsed()
}

fn threads() -> usize {
    std::env::var("KARY_BENCH_SHARD_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

fn bench(c: &mut Criterion) {
    let t = threads();
    let banks: Vec<(String, Box<dyn Bank>)> = vec![
        (
            "one_splitlock".into(),
            Box::new(One(SplitLockBuffer::new(config(N)).unwrap())),
        ),
        (
            format!("{t}_shards_splitlock"),
            Box::new(ShardedBuffer::<SplitLockBuffer>::new(t, config(N / t)).unwrap()),
        ),
        (
            format!("{t}_shards_lockfree"),
            Box::new(ShardedBuffer::<LockFreeBuffer>::new(t, config(N / t)).unwrap()),
        ),
    ];
    for (name, bank) in &banks {
        bank.fill();
        for (group, actors, learners) in [("mixed", t, t), ("actors", t, 0), ("learners", 0, t)] {
            let mut g = c.benchmark_group(format!("sharded_{group}"));
            g.sample_size(10)
                .warm_up_time(Duration::from_millis(300))
                .measurement_time(Duration::from_secs(2));
            g.throughput(Throughput::Elements(
                ((actors * INSERTS + learners * BATCH) as u64).max(1),
            ));
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| run(bank.as_ref(), actors, learners, iters))
            });
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
