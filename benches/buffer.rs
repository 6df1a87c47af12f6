//! Whole-buffer operations (tree + storage + keys + weights) for every K against the
//! textbook baseline buffer (binary tree, branchy descent, f32 columns).
//!
//! Items are CartPole-like transitions: obs f32[4], reward f32[1], next_obs f32[4].
//!
//! | group | workload (per iteration) |
//! |---|---|
//! | buffer_insert/N | insert_batch of 1 or 64 items, default (max) priority |
//! | buffer_sample/N | stratified sample of B with weights (beta 0.4) and the gathered columns |
//! | buffer_update/N | update_priorities of B sampled keys |
//! | buffer_learner_step/N | sample 256 + update those 256 |
//! | sample_modes/N | a sample of B with replacement (independent), without, uniform (no tree walk), shuffled (a pass's next B) and max- and min-heap (the walk ranks B + 8 leaves; every draw is the top item), B in {64, 256}, N in {2^10, 2^20}, `{Sequential,SplitLock,LockFree}/B{b}_{with,without,uniform,shuffled,max_heap,min_heap}`, and the two with replacement without the rows (`_{with,uniform}_indices`), K = 8; at 2^20 also `{SplitLock,LockFree}/B{b}_with_consumed` (`max_times_sampled` = 511: each draw reserved and committed) |
//! | queue | an IMPALA-style queue (FIFO draws, `max_times_sampled` = 1, a ring of 2^16): one producer thread inserting batches of B, one consumer thread drawing batches of B with the rows, `{SplitLock,LockFree}/B{64,256}`, items through the queue per second; `{SplitLock,LockFree}+max_heap/B{64,256}` a priority queue (max-heap draws over random priorities) |
//! | set_alpha/2^20 | `set_alpha` over a full ring of 2^20 items (the pause, every leaf raised again from its raw priority, the sums made again), `{SplitLock,LockFree}/pass`, beside `{SplitLock,LockFree}/sample_256` |
//! | retire/2^20 | `retire_before` over a full ring of 2^20 items with a version column, the floor raised below every stored version (the pass over the slots, nothing retired), `{SplitLock,LockFree}/pass`, beside `{SplitLock,LockFree}/sample_256` (a sample of 256 with the rows, the learner's usual call) |
//! | leaf_write/2^20 | `{Sequential,SplitLock,LockFree}/update_B256` (update 256 sampled keys) and `.../insert_1` (one insert at the default priority) and `.../insert_1_given` (one insert with its own priority), one thread, K = 8; `{SplitLock,LockFree}+max_heap/...` the same on trees that keep their maxima (`max_heap(true)`) |
//!
//! N in {2^17, 2^20, 2^22} (filled before measuring); ids are `K{k}/...` and `baseline/...`.

#[allow(dead_code)] // shared by the benches: each uses part of it
mod common;

use common::{priorities, quick_criterion, rng, BaselineBuffer};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::{
    ConcurrentBuffer, Config, DType, Fanout, LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode,
    Schema, SplitLockBuffer,
};
use rand::Rng;
use std::hint::black_box;

const SIZES: [usize; 3] = [1 << 17, 1 << 20, 1 << 22];
const BATCHES: [usize; 3] = [32, 256, 4096];
const SHAPES: [usize; 3] = [4, 1, 4];

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 4)
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, 4)
}

struct Items {
    cols: Vec<Vec<f32>>,
}

impl Items {
    fn new(n: usize) -> Items {
        Items {
            cols: SHAPES
                .iter()
                .map(|s| (0..n * s).map(|v| v as f32).collect())
                .collect(),
        }
    }
    fn slices(&self) -> [kary_replay::ColumnSlice<'_>; 3] {
        [
            (&self.cols[0]).into(),
            (&self.cols[1]).into(),
            (&self.cols[2]).into(),
        ]
    }
    fn raw(&self) -> Vec<&[f32]> {
        self.cols.iter().map(|c| &c[..]).collect()
    }
}

/// A full buffer with random priorities.
fn filled(n: usize, k: Fanout) -> ReplayBuffer {
    filled_with(n, k, false)
}

/// As [`filled`], its tree keeping its maxima when `max_heap` (`ConfigBuilder::max_heap`).
fn filled_with(n: usize, k: Fanout, max_heap: bool) -> ReplayBuffer {
    let mut b = ReplayBuffer::new(
        Config::builder(n, schema())
            .fanout(k.get())
            .alpha(1.0)
            .max_heap(max_heap)
            .build()
            .unwrap(),
    )
    .unwrap();
    fill(n, |items, p| {
        b.insert_batch(items, Some(p)).unwrap();
    });
    b
}

/// Insert `n` items with random priorities through `insert`, 4096 at a time.
fn fill(n: usize, mut insert: impl FnMut(&[kary_replay::ColumnSlice<'_>], &[f64])) {
    let mut r = rng();
    let chunk = 4096.min(n);
    let items = Items::new(chunk);
    for _ in 0..n / chunk {
        insert(&items.slices(), &priorities(chunk, &mut r));
    }
}

fn filled_baseline(n: usize) -> BaselineBuffer {
    let mut b = BaselineBuffer::new(n, &SHAPES);
    let chunk = 4096.min(n);
    let items = Items::new(chunk);
    for _ in 0..n / chunk {
        b.insert_batch(&items.raw(), chunk);
    }
    let mut r = rng();
    let p = priorities(n, &mut r);
    let idx: Vec<usize> = (0..n).collect();
    b.update(&idx, &p);
    b
}

fn ids(k: Option<Fanout>, what: String) -> BenchmarkId {
    match k {
        Some(k) => BenchmarkId::new(format!("K{}", k.get()), what),
        None => BenchmarkId::new("baseline", what),
    }
}

fn all_variants() -> impl Iterator<Item = Option<Fanout>> {
    std::iter::once(None).chain(Fanout::ALL.into_iter().map(Some))
}

fn insert(c: &mut Criterion) {
    for n in SIZES {
        let mut g = c.benchmark_group(format!("buffer_insert/{n}"));
        for k in all_variants() {
            let mut base = k.is_none().then(|| filled_baseline(n));
            let mut buf = k.map(|k| filled(n, k));
            for items in [1, 64] {
                g.throughput(Throughput::Elements(items as u64));
                let data = Items::new(items);
                g.bench_function(ids(k, format!("batch{items}")), |bench| {
                    bench.iter(|| match (&mut base, &mut buf) {
                        (Some(b), _) => b.insert_batch(&data.raw(), items),
                        (_, Some(b)) => {
                            black_box(b.insert_batch(&data.slices(), None).unwrap());
                        }
                        _ => unreachable!(),
                    })
                });
            }
        }
        g.finish();
    }
}

fn sample(c: &mut Criterion) {
    for n in SIZES {
        let mut g = c.benchmark_group(format!("buffer_sample/{n}"));
        let mut r = rng();
        for k in all_variants() {
            let base = k.is_none().then(|| filled_baseline(n));
            let buf = k.map(|k| filled(n, k));
            for b in BATCHES {
                g.throughput(Throughput::Elements(b as u64));
                let mut out = SampleBatch::default();
                let mut idx = Vec::new();
                let mut cols = vec![Vec::new(); 3];
                g.bench_function(ids(k, format!("B{b}")), |bench| {
                    bench.iter(|| match (&base, &buf) {
                        (Some(bb), _) => bb.sample(b, &mut r, &mut idx, &mut cols),
                        (_, Some(bb)) => bb
                            .sample_into(b, 0.4, SampleMode::Stratified, &mut r, &mut out)
                            .unwrap(),
                        _ => unreachable!(),
                    })
                });
            }
        }
        g.finish();
    }
}

fn update(c: &mut Criterion) {
    for n in SIZES {
        let mut g = c.benchmark_group(format!("buffer_update/{n}"));
        let mut r = rng();
        for k in all_variants() {
            let mut base = k.is_none().then(|| filled_baseline(n));
            let mut buf = k.map(|k| filled(n, k));
            for b in BATCHES {
                g.throughput(Throughput::Elements(b as u64));
                let mut out = SampleBatch::default();
                let mut idx = Vec::new();
                let mut cols = vec![Vec::new(); 3];
                match (&base, &buf) {
                    (Some(bb), _) => bb.sample(b, &mut r, &mut idx, &mut cols),
                    (_, Some(bb)) => bb
                        .sample_into(b, 0.4, SampleMode::Stratified, &mut r, &mut out)
                        .unwrap(),
                    _ => unreachable!(),
                }
                let mut vals = priorities(b, &mut r);
                let mut flip = false;
                g.bench_function(ids(k, format!("B{b}")), |bench| {
                    bench.iter(|| {
                        flip = !flip;
                        let f = if flip { 0.5 } else { 2.0 };
                        vals.iter_mut().for_each(|v| *v *= f);
                        match (&mut base, &mut buf) {
                            (Some(bb), _) => bb.update(&idx, &vals),
                            (_, Some(bb)) => {
                                black_box(bb.update_priorities(&out.keys, &vals).unwrap());
                            }
                            _ => unreachable!(),
                        }
                    })
                });
            }
        }
        g.finish();
    }
}

fn learner_step(c: &mut Criterion) {
    const B: usize = 256;
    for n in SIZES {
        let mut g = c.benchmark_group(format!("buffer_learner_step/{n}"));
        g.throughput(Throughput::Elements(B as u64));
        let mut r = rng();
        for k in all_variants() {
            let mut base = k.is_none().then(|| filled_baseline(n));
            let mut buf = k.map(|k| filled(n, k));
            let mut out = SampleBatch::default();
            let mut idx = Vec::new();
            let mut cols = vec![Vec::new(); 3];
            let mut vals = vec![0.0; B];
            g.bench_function(ids(k, format!("B{B}")), |bench| {
                bench.iter(|| {
                    vals.iter_mut().for_each(|v| *v = 1.0 - r.random::<f64>());
                    match (&mut base, &mut buf) {
                        (Some(bb), _) => {
                            bb.sample(B, &mut r, &mut idx, &mut cols);
                            bb.update(&idx, &vals);
                        }
                        (_, Some(bb)) => {
                            bb.sample_into(B, 0.4, SampleMode::Stratified, &mut r, &mut out)
                                .unwrap();
                            bb.update_priorities(&out.keys, &vals).unwrap();
                        }
                        _ => unreachable!(),
                    }
                })
            });
        }
        g.finish();
    }
}

/// A full concurrent buffer with random priorities (as [`filled`]).
fn filled_concurrent<B: ConcurrentBuffer>(
    n: usize,
    new: impl FnOnce(Config) -> kary_replay::Result<B>,
) -> B {
    filled_consumed(n, 0, false, new)
}

/// As `filled_concurrent`, each item retired after `k` draws (0: never), the tree keeping
/// its maxima when `max_heap`; `n = 0`: an empty buffer of 2^16 slots.
fn filled_consumed<B: ConcurrentBuffer>(
    n: usize,
    k: u32,
    max_heap: bool,
    new: impl FnOnce(Config) -> kary_replay::Result<B>,
) -> B {
    let capacity = if n == 0 { 1 << 16 } else { n };
    let config = Config::builder(capacity, schema())
        .alpha(1.0)
        .max_times_sampled(k)
        .max_heap(max_heap);
    let b = new(config.build().unwrap()).unwrap();
    if n > 0 {
        fill(n, |items, p| {
            b.insert_batch(items, Some(p)).unwrap();
        });
    }
    b
}

/// A leaf write of the concurrent trees against the sequential buffer's,
/// one thread, N = 2^20, K = 8 (every buffer's default): 256 sampled keys updated, one
/// insert at the default priority, and one insert with its own priority (13 values in
/// turn: in a full buffer the default priority replaces a leaf by the same value, and a
/// climb that changes nothing stops at once). The concurrent buffers' lazy writing makes an
/// insert two leaf writes (retire, then publish); LockFree's retire stores its leaf alone
/// and the publish climbs once. The `+max_heap` buffers keep their trees' maxima as well
/// (`ConfigBuilder::max_heap`): what that costs a write.
fn leaf_write(c: &mut Criterion) {
    const N: usize = 1 << 20;
    const B: usize = 256;
    let mut g = c.benchmark_group(format!("leaf_write/{N}"));
    let seq = filled(N, Fanout::new(8).unwrap());
    let split = filled_concurrent(N, SplitLockBuffer::new);
    let lock_free = filled_concurrent(N, LockFreeBuffer::new);
    let split_max = filled_consumed(N, 0, true, SplitLockBuffer::new);
    let lock_free_max = filled_consumed(N, 0, true, LockFreeBuffer::new);
    let mut seq = Some(seq);
    let buffers: [(&str, Option<&dyn ConcurrentBuffer>); 5] = [
        ("Sequential", None),
        ("SplitLock", Some(&split)),
        ("LockFree", Some(&lock_free)),
        ("SplitLock+max_heap", Some(&split_max)),
        ("LockFree+max_heap", Some(&lock_free_max)),
    ];
    let one = Items::new(1);
    for (name, concurrent) in buffers {
        let mut r = rng();
        let mut out = SampleBatch::default();
        match concurrent {
            Some(b) => b.sample_into(B, 0.4, SampleMode::Stratified, &mut r, &mut out),
            None => {
                seq.as_ref()
                    .unwrap()
                    .sample_into(B, 0.4, SampleMode::Stratified, &mut r, &mut out)
            }
        }
        .unwrap();
        let mut vals = priorities(B, &mut r);
        let mut flip = false;
        g.throughput(Throughput::Elements(B as u64));
        g.bench_function(BenchmarkId::new(name, "update_B256"), |bench| {
            bench.iter(|| {
                flip = !flip;
                let f = if flip { 0.5 } else { 2.0 };
                vals.iter_mut().for_each(|v| *v *= f);
                match concurrent {
                    Some(b) => black_box(b.update_priorities(&out.keys, &vals).unwrap()),
                    None => black_box(
                        seq.as_mut()
                            .unwrap()
                            .update_priorities(&out.keys, &vals)
                            .unwrap(),
                    ),
                };
            })
        });
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new(name, "insert_1"), |bench| {
            bench.iter(|| match concurrent {
                Some(b) => black_box(b.insert(&one.slices(), None).unwrap()),
                None => black_box(seq.as_mut().unwrap().insert(&one.slices(), None).unwrap()),
            })
        });
        let mut k = 0u32;
        g.bench_function(BenchmarkId::new(name, "insert_1_given"), |bench| {
            bench.iter(|| {
                k = k.wrapping_add(1);
                let p = Some(0.25 + f64::from(k % 13));
                match concurrent {
                    Some(b) => black_box(b.insert(&one.slices(), p).unwrap()),
                    None => black_box(seq.as_mut().unwrap().insert(&one.slices(), p).unwrap()),
                }
            })
        });
    }
    g.finish();
}

/// A batch without replacement, a uniform one and a shuffled one beside one with replacement
/// (independent: the draws a batch without replacement starts from), B in {64, 256}, K = 8,
/// on the sequential buffer and both concurrent ones, at N = 2^10 (about 2 and 30 repeats a
/// batch to draw again) and at N = 2^20 (almost none).
fn sample_modes(c: &mut Criterion) {
    for n in [1 << 10, 1 << 20] {
        let mut g = c.benchmark_group(format!("sample_modes/{n}"));
        // Built to keep their maxima, for the max-heap batches.
        let seq = filled_with(n, Fanout::new(8).unwrap(), true);
        let split = filled_consumed(n, 0, true, SplitLockBuffer::new);
        let lock_free = filled_consumed(n, 0, true, LockFreeBuffer::new);
        let buffers: [(&str, Option<&dyn ConcurrentBuffer>); 3] = [
            ("Sequential", None),
            ("SplitLock", Some(&split)),
            ("LockFree", Some(&lock_free)),
        ];
        for (name, concurrent) in buffers {
            for b in [64, 256] {
                g.throughput(Throughput::Elements(b as u64));
                for (mode, label, rows) in [
                    (SampleMode::Independent, "with", true),
                    (SampleMode::WithoutReplacement, "without", true),
                    (SampleMode::Uniform, "uniform", true),
                    (SampleMode::Shuffled, "shuffled", true),
                    (SampleMode::MaxHeap, "max_heap", true),
                    (SampleMode::MinHeap, "min_heap", true),
                    (SampleMode::Independent, "with_indices", false),
                    (SampleMode::Uniform, "uniform_indices", false),
                ] {
                    let mut r = rng();
                    let mut out = SampleBatch::default();
                    g.bench_function(BenchmarkId::new(name, format!("B{b}_{label}")), |bench| {
                        bench.iter(|| {
                            match (concurrent, rows) {
                                (Some(buf), true) => {
                                    buf.sample_into(b, 0.4, mode, &mut r, &mut out)
                                }
                                (Some(buf), false) => {
                                    buf.sample_indices_into(b, 0.4, mode, &mut r, &mut out)
                                }
                                (None, true) => seq.sample_into(b, 0.4, mode, &mut r, &mut out),
                                (None, false) => {
                                    seq.sample_indices_into(b, 0.4, mode, &mut r, &mut out)
                                }
                            }
                            .unwrap()
                        })
                    });
                }
            }
        }
        if n == 1 << 20 {
            // Consume after k draws: every draw reserved and committed (k = 511, so that
            // the measurement never empties the buffer).
            let split = filled_consumed(n, 511, false, SplitLockBuffer::new);
            let lock_free = filled_consumed(n, 511, false, LockFreeBuffer::new);
            let consumed: [(&str, &dyn ConcurrentBuffer); 2] =
                [("SplitLock", &split), ("LockFree", &lock_free)];
            for (name, buf) in consumed {
                for b in [64, 256] {
                    g.throughput(Throughput::Elements(b as u64));
                    let mut r = rng();
                    let mut out = SampleBatch::default();
                    let id = BenchmarkId::new(name, format!("B{b}_with_consumed"));
                    g.bench_function(id, |bench| {
                        bench.iter(|| {
                            buf.sample_into(b, 0.4, SampleMode::Independent, &mut r, &mut out)
                                .unwrap()
                        })
                    });
                }
            }
        }
        g.finish();
    }
}

/// An IMPALA-style queue: FIFO draws with `max_times_sampled = 1` in a ring of 2^16, one
/// producer thread inserting batches of B and one consumer thread drawing batches of B (rows
/// gathered), for `iters x B` items; throughput is items through the queue. The producer
/// waits while the slot its batch would end on holds an item (so nothing is evicted).
/// `{SplitLock,LockFree}+max_heap/B{b}`: a priority queue, the same with max-heap draws
/// (largest priority first) over items inserted with random priorities, on trees that keep
/// their maxima; its producer waits while any slot of its batch holds an item (the draws
/// take slots out of ring order).
fn queue(c: &mut Criterion) {
    const N: usize = 1 << 16;
    let mut g = c.benchmark_group("queue");
    for b in [64usize, 256] {
        g.throughput(Throughput::Elements(b as u64));
        let split = filled_consumed(0, 1, false, SplitLockBuffer::new);
        let lock_free = filled_consumed(0, 1, false, LockFreeBuffer::new);
        let split_heap = filled_consumed(0, 1, true, SplitLockBuffer::new);
        let lock_free_heap = filled_consumed(0, 1, true, LockFreeBuffer::new);
        let queues: [(&str, &dyn ConcurrentBuffer, SampleMode); 4] = [
            ("SplitLock", &split, SampleMode::Fifo),
            ("LockFree", &lock_free, SampleMode::Fifo),
            ("SplitLock+max_heap", &split_heap, SampleMode::MaxHeap),
            ("LockFree+max_heap", &lock_free_heap, SampleMode::MaxHeap),
        ];
        let ps = priorities(b, &mut rng());
        for (name, buf, mode) in queues {
            let items = Items::new(b);
            let given = (mode == SampleMode::MaxHeap).then_some(&ps[..]);
            g.bench_function(BenchmarkId::new(name, format!("B{b}")), |bench| {
                bench.iter_custom(|iters| {
                    let total = iters as usize * b;
                    let start = std::time::Instant::now();
                    std::thread::scope(|s| {
                        s.spawn(|| {
                            for _ in 0..iters {
                                // FIFO draws empty the ring in order: the batch's last slot
                                // empty means all are. Max-heap draws take any slot: each.
                                let first = buf.inserted() as usize;
                                let held = |j: usize| buf.key((first + j) % N).unwrap().is_some();
                                while match mode {
                                    SampleMode::Fifo => held(b - 1),
                                    _ => (0..b).any(held),
                                } {
                                    std::thread::yield_now();
                                }
                                buf.insert_batch(&items.slices(), given).unwrap();
                            }
                        });
                        let mut r = rng();
                        let mut out = SampleBatch::default();
                        let mut got = 0;
                        while got < total {
                            let want = buf.len().min(b).min(total - got);
                            if want == 0 {
                                std::thread::yield_now();
                                continue;
                            }
                            if buf.sample_into(want, 0.4, mode, &mut r, &mut out).is_ok() {
                                got += out.keys.len();
                            }
                        }
                    });
                    start.elapsed()
                })
            });
        }
    }
    g.finish();
}

/// A sample of 256 with the rows on `buf`, as `{name}/sample_256` in `g`: the learner's usual
/// call, beside a whole-buffer operation.
fn sample_256(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    buf: &dyn ConcurrentBuffer,
) {
    let mut r = rng();
    let mut out = SampleBatch::default();
    g.bench_function(BenchmarkId::new(name, "sample_256"), |bench| {
        bench.iter(|| {
            buf.sample_into(256, 0.4, SampleMode::Stratified, &mut r, &mut out)
                .unwrap();
            black_box(out.keys.len())
        })
    });
}

/// The policy-version window's pass: `retire_before` on a full ring of 2^20 items whose
/// versions all lie above the floor (so every call takes and releases each slot and retires
/// nothing), beside a sample of 256 with the rows.
fn retire(c: &mut Criterion) {
    const N: usize = 1 << 20;
    let mut g = c.benchmark_group("retire");
    let schema = || {
        Schema::new()
            .column("obs", DType::F32, 4)
            .column("version", DType::I64, [])
    };
    let config = || {
        Config::builder(N, schema())
            .alpha(1.0)
            .version_column("version")
            .build()
            .unwrap()
    };
    let split = SplitLockBuffer::new(config()).unwrap();
    let lock_free = LockFreeBuffer::new(config()).unwrap();
    let buffers: [(&str, &dyn ConcurrentBuffer); 2] =
        [("SplitLock", &split), ("LockFree", &lock_free)];
    let obs = vec![0.5f32; 4 * 4096];
    let versions = vec![i64::MAX; 4096];
    for (name, buf) in buffers {
        for _ in 0..N / 4096 {
            buf.insert_batch(&[(&obs[..]).into(), (&versions[..]).into()], None)
                .unwrap();
        }
        let mut floor = 0i64;
        g.bench_function(BenchmarkId::new(name, "pass"), |bench| {
            bench.iter(|| {
                floor += 1;
                black_box(buf.retire_before(floor).unwrap())
            })
        });
        sample_256(&mut g, name, buf);
    }
    g.finish();
}

/// Alpha at run time: `set_alpha` on a full ring of 2^20 items (the pause, every leaf raised
/// again from its raw priority, the sums made again), alternating two alphas, beside a
/// sample of 256 with the rows.
fn set_alpha(c: &mut Criterion) {
    const N: usize = 1 << 20;
    let mut g = c.benchmark_group("set_alpha");
    let split = filled_concurrent(N, SplitLockBuffer::new);
    let lock_free = filled_concurrent(N, LockFreeBuffer::new);
    let buffers: [(&str, &dyn ConcurrentBuffer); 2] =
        [("SplitLock", &split), ("LockFree", &lock_free)];
    for (name, buf) in buffers {
        let mut round = 0u32;
        g.bench_function(BenchmarkId::new(name, "pass"), |bench| {
            bench.iter(|| {
                round += 1;
                buf.set_alpha(if round % 2 == 0 { 0.6 } else { 0.7 })
                    .unwrap()
            })
        });
        sample_256(&mut g, name, buf);
    }
    g.finish();
}

criterion_group! { name = benches; config = quick_criterion(); targets = insert, sample, update, learner_step, leaf_write, sample_modes, queue, retire, set_alpha }
criterion_main!(benches);
