//! Throughput of the concurrent buffers against thread count, as in the paper's figure 10.
//!
//! Items are transitions (obs f32[S], reward f32[1], next_obs f32[S]) of two sizes:
//! CartPole-like, S = 4 (36 bytes), in a buffer of N = 2^20, and S = 128 (1028 bytes), in a
//! buffer of N = 2^17; filled before measuring; fanout 8, alpha 0.6. Lazy writing exists
//! for the second kind: copies long enough to be worth taking out of the lock.
//!
//! | group | threads | workload per thread per iteration | elements |
//! |---|---|---|---|
//! | concurrent_actors_{size}/T | T actors | insert 64 items one by one (default priority) | items inserted |
//! | concurrent_actors_given_{size}/1 | 1 actor | as actors, each item with its own priority (13 values in turn) | items inserted |
//! | concurrent_actors_staged_{size}/T | T actors | push 64 items through a staged writer of 32 | items inserted |
//! | concurrent_actors_batch32_{size}/T | T actors | two `insert_batch` of 32 items | items inserted |
//! | concurrent_learners_{size}/T | T learners | sample 64 (stratified, beta 0.4) + update those 64 | items sampled |
//! | concurrent_mixed_{size}/T | T/2 actors + T/2 learners | actors: 64 direct inserts; learners: one sample+update of 64 | inserted + sampled |
//! | concurrent_mixed_staged_{size}/T | T/2 actors + T/2 learners | as mixed, the actors through staged writers of 32 | inserted + sampled |
//! | learner_rate_{size}/solo, /beside | 1 learner, alone or beside 1 actor inserting non-stop | one sample+update of 64 | items sampled |
//! | actor_rate_{size}/solo, /beside | 1 actor, alone or beside 1 learner sampling non-stop | 64 direct inserts, each with its own priority | items inserted |
//! | staged_actor_rate_{size}/solo, /beside | as actor_rate, the actor through a staged writer of 32 | 64 pushes | items inserted |
//! | core_round_trip/start, /end | 2 threads, first and last in a run | one cache line handed there and back | round trips |
//!
//! `core_round_trip` says how far apart the two cores are during the run: on the 2-vCPU VM
//! this project was measured on, about 65-85 ns per round trip in some hours and about 370
//! in others (the host's placement of the vCPUs), and the two-thread cells follow it
//! (docs/performance.md).
//!
//! T from `KARY_BENCH_THREADS` (default 1,2,4; mixed: the even ones). Variants: `GlobalLock` (the baseline: std's mutex
//! around the sequential buffer), `GlobalSpinLock` (the same with the spinning lock that
//! `SplitLock` uses, so that lock splitting and lock type can be told apart), `SplitLock`,
//! `LockFree`, and `Unsynchronized`: the same work on Relaxed atomics with no protocol at
//! all, done as the sequential code does it (cache-line sibling groups, the batched
//! prefetching descent, leaves prefetched ahead on update), whose results are wrong under
//! concurrency: an upper bound, benchmark only.
//! Threads start together at a barrier; the time is from the barrier to the last join.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::checkpoint::SaveOptions;
use kary_replay::rate::{RateLimiter, Wait};
use kary_replay::{
    Checkpoint, CheckpointErrorKind, ColumnData, ColumnSlice, ColumnSliceMut, ConcurrentBuffer,
    Config, Consistency, DType, Descent, Draw, Error, GlobalLockBuffer, GlobalSpinLockBuffer, Key,
    LockFreeBuffer, RandomSource, Result, Rows, SampleBatch, SampleMode, Schema, SplitLockBuffer,
    Stats, UpdateReport,
};
use rand::{rngs::SmallRng, SeedableRng};

#[allow(dead_code)] // shared by the benches: each uses part of it
mod common;

const BATCH: usize = 64;
const INSERTS: usize = 64;

/// An item size and the capacity used with it.
#[derive(Clone, Copy)]
struct Size {
    name: &'static str,
    capacity: usize,
    /// Elements of obs, reward, next_obs.
    shapes: [usize; 3],
}

const SIZES: [Size; 2] = [
    Size {
        name: "36B",
        capacity: 1 << 20,
        shapes: [4, 1, 4],
    },
    Size {
        name: "1028B",
        capacity: 1 << 17,
        shapes: [128, 1, 128],
    },
];

fn config(size: Size) -> Config {
    let schema = Schema::new()
        .column("obs", DType::F32, size.shapes[0])
        .column("reward", DType::F32, size.shapes[1])
        .column("next_obs", DType::F32, size.shapes[2]);
    Config::builder(size.capacity, schema)
        .fanout(8)
        .alpha(0.6)
        .build()
        .unwrap()
}

/// One transition's columns.
struct Item([Vec<f32>; 3]);

impl Item {
    /// An item of `config`'s schema, every element `v`.
    fn new(config: &Config, v: f32) -> Item {
        let shape = |c: usize| config.schema().columns()[c].shape;
        Item([0, 1, 2].map(|c| vec![v; shape(c)]))
    }
    fn columns(&self) -> [ColumnSlice<'_>; 3] {
        [
            (&self.0[0]).into(),
            (&self.0[1]).into(),
            (&self.0[2]).into(),
        ]
    }
}

fn filled<B: ConcurrentBuffer>(size: Size) -> B {
    let buffer = B::new(config(size)).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let chunk = 4096;
    let cols: [Vec<f32>; 3] = size
        .shapes
        .map(|s| (0..chunk * s).map(|i| i as f32).collect());
    for _ in 0..size.capacity / chunk {
        let ps: Vec<f64> = (0..chunk).map(|_| 1.0 - rng.next_f64()).collect();
        buffer
            .insert_batch(
                &[(&cols[0]).into(), (&cols[1]).into(), (&cols[2]).into()],
                Some(&ps),
            )
            .unwrap();
    }
    buffer
}

/// How an actor inserts its 64 items per iteration.
#[derive(Clone, Copy, Debug)]
enum ActorMode {
    /// One `insert` per item.
    Direct,
    /// One `insert` per item, each with its own priority (cycling through 13 values, so
    /// that in a full buffer a new leaf differs from the one it evicts).
    Given,
    /// One `Writer::push` per item, through a staged writer of 32 (flushed every 32).
    Staged,
    /// Two `insert_batch` calls of 32 items.
    Batch32,
}

fn actor_work<B: ConcurrentBuffer>(buffer: &B, item: &Item, iters: u64, mode: ActorMode) {
    match mode {
        ActorMode::Direct => {
            for _ in 0..iters {
                for _ in 0..INSERTS {
                    buffer.insert(&item.columns(), None).unwrap();
                }
            }
        }
        ActorMode::Given => {
            let mut k = 0u32;
            for _ in 0..iters {
                for _ in 0..INSERTS {
                    let priority = 0.25 + f64::from(k % 13);
                    buffer.insert(&item.columns(), Some(priority)).unwrap();
                    k = k.wrapping_add(1);
                }
            }
        }
        ActorMode::Staged => {
            let mut writer = buffer.writer(32).unwrap();
            for _ in 0..iters {
                for _ in 0..INSERTS {
                    writer.push(&item.columns(), None).unwrap();
                }
            }
            writer.flush().unwrap();
        }
        ActorMode::Batch32 => {
            let rows = Item(item.0.clone().map(|c| c.repeat(32)));
            for _ in 0..iters {
                for _ in 0..INSERTS / 32 {
                    buffer.insert_batch(&rows.columns(), None).unwrap();
                }
            }
        }
    }
}

fn learner_step<B: ConcurrentBuffer>(
    buffer: &B,
    rng: &mut SmallRng,
    out: &mut SampleBatch,
    ps: &mut Vec<f64>,
) {
    buffer
        .sample_into(BATCH, 0.4, SampleMode::Stratified, rng, out)
        .unwrap();
    ps.clear();
    ps.extend(out.weights.iter().map(|w| 0.05 + w));
    std::hint::black_box(buffer.update_priorities(&out.keys, ps).unwrap());
}

fn learner_work<B: ConcurrentBuffer>(buffer: &B, seed: u64, iters: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = SampleBatch::default();
    let mut ps = Vec::with_capacity(BATCH);
    for _ in 0..iters {
        learner_step(buffer, &mut rng, &mut out, &mut ps);
    }
}

/// Run `actors` + `learners` threads, each doing `iters` iterations; wall time from the
/// barrier to the last join.
fn run<B: ConcurrentBuffer>(
    buffer: &B,
    actors: usize,
    learners: usize,
    iters: u64,
    mode: ActorMode,
) -> Duration {
    let barrier = Barrier::new(actors + learners + 1);
    std::thread::scope(|s| {
        for a in 0..actors {
            let (buffer, barrier) = (buffer, &barrier);
            s.spawn(move || {
                let item = Item::new(buffer.config(), a as f32);
                barrier.wait();
                actor_work(buffer, &item, iters, mode);
            });
        }
        for l in 0..learners {
            let (buffer, barrier) = (buffer, &barrier);
            s.spawn(move || {
                barrier.wait();
                learner_work(buffer, 100 + l as u64, iters);
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every thread before returning.
        start
    })
    .elapsed()
}

/// One side's time for `iters` iterations (`Side::Learner`: sample+update steps;
/// `Side::Actor`: 64 direct inserts each, each with its own priority, as the other side's
/// actor beside a learner (so that alone and beside the actor does the same tree work:
/// as in the fairness rows); `Side::StagedActor`: 64 pushes through a staged
/// writer of 32), alone or beside one thread of the other side
/// working non-stop (neither side may starve the other).
fn side_time<B: ConcurrentBuffer>(buffer: &B, side: Side, beside: bool, iters: u64) -> Duration {
    let barrier = Barrier::new(if beside { 3 } else { 2 });
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if beside {
            let (buffer, barrier, stop) = (buffer, &barrier, &stop);
            s.spawn(move || {
                let item = Item::new(buffer.config(), 7.0);
                barrier.wait();
                let mut rng = SmallRng::seed_from_u64(9);
                let mut out = SampleBatch::default();
                let mut ps = Vec::with_capacity(BATCH);
                while !stop.load(Relaxed) {
                    match side {
                        Side::Learner => actor_work(buffer, &item, 1, ActorMode::Given),
                        Side::Actor | Side::StagedActor => {
                            learner_step(buffer, &mut rng, &mut out, &mut ps)
                        }
                    }
                }
            });
        }
        let measured = {
            let (buffer, barrier) = (buffer, &barrier);
            s.spawn(move || {
                let item = Item::new(buffer.config(), 3.0);
                barrier.wait();
                let start = Instant::now();
                match side {
                    Side::Learner => learner_work(buffer, 7, iters),
                    Side::Actor => actor_work(buffer, &item, iters, ActorMode::Given),
                    Side::StagedActor => actor_work(buffer, &item, iters, ActorMode::Staged),
                }
                start.elapsed()
            })
        };
        barrier.wait();
        let time = measured.join().unwrap();
        stop.store(true, Relaxed);
        time
    })
}

#[derive(Clone, Copy)]
enum Side {
    Actor,
    /// An actor inserting through a staged writer of 32 (one lock acquisition per 32 items
    /// on the global locks).
    StagedActor,
    Learner,
}

/// Object-safe view of a buffer for the bench loops.
trait Dispatch: Sync {
    fn run(&self, actors: usize, learners: usize, iters: u64, mode: ActorMode) -> Duration;
    fn side_time(&self, side: Side, beside: bool, iters: u64) -> Duration;
}

impl<B: ConcurrentBuffer> Dispatch for B {
    fn run(&self, actors: usize, learners: usize, iters: u64, mode: ActorMode) -> Duration {
        run(self, actors, learners, iters, mode)
    }
    fn side_time(&self, side: Side, beside: bool, iters: u64) -> Duration {
        side_time(self, side, beside, iters)
    }
}

fn buffers(size: Size) -> Vec<(&'static str, Box<dyn Dispatch>)> {
    vec![
        ("GlobalLock", Box::new(filled::<GlobalLockBuffer>(size))),
        (
            "GlobalSpinLock",
            Box::new(filled::<GlobalSpinLockBuffer>(size)),
        ),
        ("SplitLock", Box::new(filled::<SplitLockBuffer>(size))),
        ("LockFree", Box::new(filled::<LockFreeBuffer>(size))),
        ("Unsynchronized", Box::new(filled::<Unsynchronized>(size))),
    ]
}

type Split = fn(usize) -> (usize, usize);

/// Thread counts: `KARY_BENCH_THREADS` (comma-separated, say `1,2,4,8,16` on a 16-core
/// machine), default 1,2,4. The mixed workloads use the even ones (T/2 + T/2).
fn thread_counts() -> Vec<usize> {
    std::env::var("KARY_BENCH_THREADS")
        .ok()
        .map(|s| {
            s.split(',')
                .map(|t| {
                    t.trim()
                        .parse()
                        .expect("KARY_BENCH_THREADS: comma-separated counts")
                })
                .collect()
        })
        .unwrap_or_else(|| vec![1, 2, 4])
}

/// The round trip between two cores, at `when` (start or end) of a run.
fn round_trip(c: &mut Criterion, when: &str) {
    let mut g = c.benchmark_group("core_round_trip");
    g.throughput(Throughput::Elements(1));
    g.bench_function(when, |b| b.iter_custom(common::round_trip::round_trips));
    g.finish();
}

fn bench(c: &mut Criterion) {
    round_trip(c, "start");
    bench_buffers(c);
    round_trip(c, "end");
}

fn bench_buffers(c: &mut Criterion) {
    let threads = thread_counts();
    let even: Vec<usize> = threads.iter().copied().filter(|t| t % 2 == 0).collect();
    let one: Vec<usize> = threads.iter().copied().filter(|&t| t == 1).collect();
    for size in SIZES {
        let buffers = buffers(size);
        let workloads: [(&str, &[usize], Split, ActorMode); 7] = [
            ("actors", &threads, |t| (t, 0), ActorMode::Direct),
            ("actors_given", &one, |t| (t, 0), ActorMode::Given),
            ("actors_staged", &threads, |t| (t, 0), ActorMode::Staged),
            ("actors_batch32", &threads, |t| (t, 0), ActorMode::Batch32),
            ("learners", &threads, |t| (0, t), ActorMode::Direct),
            ("mixed", &even, |t| (t / 2, t / 2), ActorMode::Direct),
            ("mixed_staged", &even, |t| (t / 2, t / 2), ActorMode::Staged),
        ];
        for (workload, threads, split, mode) in workloads {
            let mut g = c.benchmark_group(format!("concurrent_{workload}_{}", size.name));
            for &t in threads {
                let (actors, learners) = split(t);
                g.throughput(Throughput::Elements(
                    ((actors * INSERTS) + learners * BATCH) as u64,
                ));
                for (name, buffer) in &buffers {
                    g.bench_with_input(BenchmarkId::new(*name, t), &t, |b, _| {
                        b.iter_custom(|iters| buffer.run(actors, learners, iters, mode))
                    });
                }
            }
            g.finish();
        }
        for (group, side, elements) in [
            ("learner_rate", Side::Learner, BATCH),
            ("actor_rate", Side::Actor, INSERTS),
            ("staged_actor_rate", Side::StagedActor, INSERTS),
        ] {
            let mut g = c.benchmark_group(format!("{group}_{}", size.name));
            g.throughput(Throughput::Elements(elements as u64));
            for (name, buffer) in &buffers {
                for (label, beside) in [("solo", false), ("beside", true)] {
                    g.bench_function(BenchmarkId::new(*name, label), |b| {
                        b.iter_custom(|iters| buffer.side_time(side, beside, iters))
                    });
                }
            }
            g.finish();
        }
    }
}

/// The same work as the buffers with no synchronization at all, done the way the
/// sequential buffer does it: a K = 8 sum tree of Relaxed atomics, each sibling group in one
/// cache line, updated by load-then-store deltas (concurrent updates are lost) with the
/// leaves of a batch prefetched ahead; sampling descends the whole batch level by level,
/// prefetching each item's next group before any item takes the next step (the sequential
/// tree's batched descent); a Relaxed cursor; columns of Relaxed `AtomicU32`s copied
/// without any slot protocol (reads may be torn). Results are wrong under concurrency; it
/// bounds the attainable throughput from above. Benchmark only.
struct Unsynchronized {
    config: Config,
    /// (offset, len) of each level, leaves first, root last; offsets are multiples of K
    /// from `base`, so that every sibling group fills one 64-byte line.
    levels: Vec<(usize, usize)>,
    /// Index of the first node: `nodes[base]` is 64-byte aligned.
    base: usize,
    nodes: Vec<AtomicU64>,
    columns: Vec<Vec<AtomicU32>>,
    cursor: AtomicU64,
    max: AtomicU64,
}

const K: usize = 8;

/// Ask for the cache line holding `ptr` (a hint; the sequential tree's `prefetch_line`).
#[inline(always)]
fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults and reads nothing into the program,
        // whatever the address; the pointer is not dereferenced.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

impl Unsynchronized {
    fn shapes(&self) -> [usize; 3] {
        [0, 1, 2].map(|c| self.config.schema().columns()[c].shape)
    }
    fn node(&self, level: usize, i: usize) -> &AtomicU64 {
        &self.nodes[self.base + self.levels[level].0 + i]
    }
    fn load(&self, level: usize, i: usize) -> f64 {
        f64::from_bits(self.node(level, i).load(Relaxed))
    }
    fn set(&self, i: usize, p: f64) {
        let delta = p - self.load(0, i);
        self.node(0, i).store(p.to_bits(), Relaxed);
        let mut i = i;
        for level in 1..self.levels.len() {
            i /= K;
            let v = self.load(level, i) + delta;
            self.node(level, i).store(v.to_bits(), Relaxed);
        }
    }
    /// The leaf whose prefix range holds each target, for up to 64 targets at once, level
    /// by level with the next group prefetched (the sequential `find_prefix_batch`).
    fn find_batch(&self, xs: &mut [f64], out: &mut [usize]) {
        out.fill(0);
        for level in (0..self.levels.len() - 1).rev() {
            let (offset, len) = self.levels[level];
            let nodes = &self.nodes[self.base + offset..self.base + offset + len];
            let below = (level > 0).then(|| self.base + self.levels[level - 1].0);
            for (node, x) in out.iter_mut().zip(xs.iter_mut()) {
                let first = *node * K;
                let group = &nodes[first..(first + K).min(len)];
                let mut chosen = first + group.len() - 1;
                for (j, s) in group.iter().enumerate() {
                    let s = f64::from_bits(s.load(Relaxed));
                    if *x < s || j + 1 == group.len() {
                        chosen = first + j;
                        break;
                    }
                    *x -= s;
                }
                *node = chosen;
                if let Some(below) = below {
                    prefetch(self.nodes.as_ptr().wrapping_add(below + chosen * K));
                }
            }
        }
    }
}

/// No checkpoints: its state is not consistent at any instant (no protocol at all).
impl Checkpoint for Unsynchronized {
    fn save_with(&self, dir: &std::path::Path, _: &SaveOptions) -> Result<()> {
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Io,
            path: dir.display().to_string(),
            detail: "the benchmark's Unsynchronized buffer cannot be saved".into(),
        })
    }
}

impl ConcurrentBuffer for Unsynchronized {
    fn new(config: Config) -> Result<Self> {
        let mut levels = vec![];
        let mut offset = 0;
        let mut len = config.capacity();
        loop {
            levels.push((offset, len));
            offset += len.next_multiple_of(K);
            if len == 1 {
                break;
            }
            len = len.div_ceil(K);
        }
        let nodes: Vec<AtomicU64> = (0..offset + K).map(|_| AtomicU64::new(0)).collect();
        let base = nodes.as_ptr().align_offset(64);
        Ok(Unsynchronized {
            levels,
            base,
            nodes,
            columns: config
                .schema()
                .columns()
                .iter()
                .map(|c| {
                    (0..c.shape * config.capacity())
                        .map(|_| AtomicU32::new(0))
                        .collect()
                })
                .collect(),
            cursor: AtomicU64::new(0),
            max: AtomicU64::new(1f64.to_bits()),
            config,
        })
    }
    fn config(&self) -> &Config {
        &self.config
    }
    fn rate_limiter(&self) -> Option<&RateLimiter> {
        None
    }
    fn insert_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priority: Option<f64>,
        _: Wait,
    ) -> Result<Key> {
        let generation = self.cursor.fetch_add(1, Relaxed);
        let slot = (generation % self.config.capacity() as u64) as usize;
        for (dst, src) in self.columns.iter().zip(columns) {
            let ColumnSlice::F32(src) = src else {
                unreachable!()
            };
            for (d, s) in dst[slot * src.len()..].iter().zip(*src) {
                d.store(s.to_bits(), Relaxed);
            }
        }
        let p = priority.map_or(f64::from_bits(self.max.load(Relaxed)), |p| p.powf(0.6));
        self.set(slot, p);
        Ok(Key {
            index: slot,
            generation,
        })
    }
    fn insert_batch_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
        _: Wait,
    ) -> Result<()> {
        let shapes = self.shapes();
        let items = columns[0].len() / shapes[0];
        keys.reserve(items);
        for i in 0..items {
            let ColumnSlice::F32(a) = columns[0] else {
                unreachable!()
            };
            let ColumnSlice::F32(b) = columns[1] else {
                unreachable!()
            };
            let ColumnSlice::F32(c) = columns[2] else {
                unreachable!()
            };
            let row = [
                (&a[i * shapes[0]..(i + 1) * shapes[0]]).into(),
                (&b[i * shapes[1]..(i + 1) * shapes[1]]).into(),
                (&c[i * shapes[2]..(i + 1) * shapes[2]]).into(),
            ];
            keys.push(self.insert(&row, priorities.map(|p| p[i]))?);
        }
        Ok(())
    }
    fn sample_waiting(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        _: Wait,
    ) -> Result<Descent> {
        let batch = draw.len();
        let top = self.levels.len() - 1;
        let total = self.load(top, 0);
        let segment = total / batch as f64;
        out.indices.clear();
        out.priorities.clear();
        out.keys.clear();
        let (mut xs, mut found) = ([0.0; 64], [0usize; 64]);
        for chunk in (0..batch).step_by(64) {
            let n = (batch - chunk).min(64);
            for (b, x) in xs[..n].iter_mut().enumerate() {
                *x = match draw {
                    // Stratified only: the benches draw no other way.
                    Draw::Batch { .. } => ((chunk + b) as f64 + rng.next_f64()) * segment,
                    Draw::At(fractions) => fractions[chunk + b] * total,
                };
            }
            self.find_batch(&mut xs[..n], &mut found[..n]);
            for &i in &found[..n] {
                out.indices.push(i);
                out.priorities.push(self.load(0, i));
                out.keys.push(Key {
                    index: i,
                    generation: i as u64,
                });
            }
        }
        out.probabilities.clear();
        out.probabilities
            .extend(out.priorities.iter().map(|p| p / total));
        let min = out.priorities.iter().copied().fold(f64::INFINITY, f64::min);
        out.weights.clear();
        let beta = draw.beta();
        out.weights
            .extend(out.priorities.iter().map(|p| (p / min).powf(-beta)));
        let mut owned = std::mem::take(&mut out.columns);
        let destinations: Vec<&mut [f32]> = match rows {
            Rows::Owned => {
                owned.resize(self.columns.len(), ColumnData::F32(Vec::new()));
                owned
                    .iter_mut()
                    .zip(self.shapes())
                    .map(|(dst, shape)| {
                        let ColumnData::F32(dst) = dst else {
                            unreachable!()
                        };
                        dst.resize(batch * shape, 0.0);
                        &mut dst[..]
                    })
                    .collect()
            }
            Rows::Into(columns) => columns
                .iter_mut()
                .map(|dst| match dst {
                    ColumnSliceMut::F32(dst) => &mut dst[..],
                    _ => unreachable!(),
                })
                .collect(),
            Rows::Skip => Vec::new(),
        };
        for ((col, shape), dst) in self.columns.iter().zip(self.shapes()).zip(destinations) {
            for (row, &i) in dst.chunks_exact_mut(shape).zip(&out.indices) {
                for (d, v) in row.iter_mut().zip(&col[i * shape..(i + 1) * shape]) {
                    *d = f32::from_bits(v.load(Relaxed));
                }
            }
        }
        out.columns = owned;
        Ok(Descent {
            total,
            min_positive: min,
        })
    }
    fn stats(&self) -> Stats {
        Stats {
            total: self.load(self.levels.len() - 1, 0),
            len: self.len(),
            capacity: self.config.capacity(),
            inserted: self.inserted(),
            min_positive: None,
            running_max: f64::from_bits(self.max.load(Relaxed)),
        }
    }
    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        let leaves = self.base + self.levels[0].0;
        for (n, (k, p)) in keys.iter().zip(priorities).enumerate() {
            // As the sequential buffer: the leaf 8 items ahead is prefetched.
            if let Some(ahead) = keys.get(n + 8) {
                prefetch(self.nodes.as_ptr().wrapping_add(leaves + ahead.index));
            }
            let p = p.powf(0.6);
            if p > f64::from_bits(self.max.load(Relaxed)) {
                self.max.store(p.to_bits(), Relaxed);
            }
            self.set(k.index, p);
        }
        Ok(UpdateReport {
            applied: keys.len(),
            stale: 0,
        })
    }
    fn delete(&self, _keys: &[Key]) -> Result<UpdateReport> {
        // The bound measures sampling and updates only: nothing here deletes.
        unimplemented!("delete on the unsynchronized bound")
    }
    fn write_back(
        &self,
        _keys: &[Key],
        _columns: &[(usize, kary_replay::ColumnSlice<'_>)],
    ) -> Result<UpdateReport> {
        unimplemented!("write_back on the unsynchronized bound")
    }
    fn retire_before(&self, _version: i64) -> Result<u64> {
        unimplemented!("retire_before on the unsynchronized bound")
    }
    fn version_floor(&self) -> Option<i64> {
        None
    }
    fn alpha(&self) -> f64 {
        self.config().alpha()
    }
    fn set_alpha(&self, _alpha: f64) -> Result<()> {
        unimplemented!("set_alpha on the unsynchronized bound")
    }
    fn raw_priorities_of(&self, _keys: &[Key], _out: &mut Vec<f64>) -> Result<usize> {
        unimplemented!("raw_priorities_of on the unsynchronized bound")
    }
    fn priority(&self, index: usize) -> Result<f64> {
        Ok(self.load(0, index))
    }
    fn key(&self, index: usize) -> Result<Option<Key>> {
        Ok(Some(Key {
            index,
            generation: index as u64,
        }))
    }
    fn len(&self) -> usize {
        (self.cursor.load(Relaxed) as usize).min(self.config.capacity())
    }
    fn inserted(&self) -> u64 {
        self.cursor.load(Relaxed)
    }
    fn total_priority(&self) -> f64 {
        self.load(self.levels.len() - 1, 0)
    }
    fn consistency(&self) -> Consistency {
        Consistency::default()
    }
    fn memory_bytes(&self) -> usize {
        self.nodes.len() * 8 + self.columns.iter().map(|c| c.len() * 4).sum::<usize>()
    }
    fn clear(&self) {
        for node in self.nodes.iter() {
            node.store(0, Relaxed);
        }
    }
    fn rebuild(&self) {
        for level in 1..self.levels.len() {
            for i in 0..self.levels[level].1 {
                let end = ((i + 1) * K).min(self.levels[level - 1].1);
                let sum: f64 = (i * K..end).map(|j| self.load(level - 1, j)).sum();
                self.node(level, i).store(sum.to_bits(), Relaxed);
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = common::quick_criterion();
    targets = bench
}
criterion_main!(benches);
