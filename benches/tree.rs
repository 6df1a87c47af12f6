//! Tree operations alone (no storage), K-ary tree for every K against the binary baseline.
//!
//! | group | workload (per iteration) |
//! |---|---|
//! | tree_sample/N | draw B stratified targets (RNG included) and find their leaves |
//! | tree_update/N | set B random leaves to random priorities |
//! | tree_learner_step/N | sample 256 + set those 256 leaves |
//!
//! N in {2^17, 2^20, 2^22}; B in {32, 256, 4096}; ids are `K{k}/B{b}` and `binary/B{b}`.
//! Filter with e.g. `cargo bench --bench tree -- 'tree_sample/1048576/.*/B256'`.

#[allow(dead_code)] // shared by the benches: each uses part of it
mod common;

use common::{priorities, quick_criterion, rng, BinarySumTree};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::{Fanout, SumTree};
use rand::Rng;
use std::hint::black_box;

const SIZES: [usize; 3] = [1 << 17, 1 << 20, 1 << 22];
const BATCHES: [usize; 3] = [32, 256, 4096];

fn kary(n: usize, k: Fanout, p: &[f64]) -> SumTree {
    let mut t = SumTree::new(n, k).unwrap();
    for (i, &v) in p.iter().enumerate() {
        t.set(i, v).unwrap();
    }
    t
}

fn binary(n: usize, p: &[f64]) -> BinarySumTree {
    let mut t = BinarySumTree::new(n);
    for (i, &v) in p.iter().enumerate() {
        t.set(i, v);
    }
    t
}

fn stratified(total: f64, xs: &mut [f64], r: &mut impl Rng) {
    let seg = total / xs.len() as f64;
    for (b, x) in xs.iter_mut().enumerate() {
        *x = (b as f64 + r.random::<f64>()) * seg;
    }
}

fn sample(c: &mut Criterion) {
    for n in SIZES {
        let mut r = rng();
        let p = priorities(n, &mut r);
        let mut g = c.benchmark_group(format!("tree_sample/{n}"));
        let base = binary(n, &p);
        for b in BATCHES {
            g.throughput(Throughput::Elements(b as u64));
            let mut xs = vec![0.0; b];
            g.bench_function(BenchmarkId::new("binary", format!("B{b}")), |bench| {
                bench.iter(|| {
                    stratified(base.total(), &mut xs, &mut r);
                    for &x in &xs {
                        black_box(base.find_prefix(x));
                    }
                })
            });
        }
        drop(base);
        for k in Fanout::ALL {
            let t = kary(n, k, &p);
            for b in BATCHES {
                g.throughput(Throughput::Elements(b as u64));
                let mut xs = vec![0.0; b];
                let mut out = vec![0; b];
                g.bench_function(
                    BenchmarkId::new(format!("K{}", k.get()), format!("B{b}")),
                    |bench| {
                        bench.iter(|| {
                            stratified(t.total(), &mut xs, &mut r);
                            t.find_prefix_batch(&xs, &mut out).unwrap();
                            black_box(&out);
                        })
                    },
                );
            }
        }
        g.finish();
    }
}

fn update(c: &mut Criterion) {
    for n in SIZES {
        let mut r = rng();
        let p = priorities(n, &mut r);
        let mut g = c.benchmark_group(format!("tree_update/{n}"));
        let mut base = binary(n, &p);
        for b in BATCHES {
            g.throughput(Throughput::Elements(b as u64));
            let idx: Vec<usize> = (0..b).map(|_| r.random_range(0..n)).collect();
            let vals = priorities(b, &mut r);
            let mut vals = vals;
            let mut flip = false;
            g.bench_function(BenchmarkId::new("binary", format!("B{b}")), |bench| {
                bench.iter(|| {
                    flip = !flip;
                    let f = if flip { 0.5 } else { 2.0 };
                    for (&i, v) in idx.iter().zip(vals.iter_mut()) {
                        *v *= f;
                        base.set(i, *v);
                    }
                })
            });
        }
        drop(base);
        for k in Fanout::ALL {
            let mut t = kary(n, k, &p);
            for b in BATCHES {
                g.throughput(Throughput::Elements(b as u64));
                let idx: Vec<usize> = (0..b).map(|_| r.random_range(0..n)).collect();
                let mut vals = priorities(b, &mut r);
                let mut flip = false;
                g.bench_function(
                    BenchmarkId::new(format!("K{}", k.get()), format!("B{b}")),
                    |bench| {
                        bench.iter(|| {
                            // Alternate two value sets so that no set is a no-op.
                            flip = !flip;
                            let f = if flip { 0.5 } else { 2.0 };
                            vals.iter_mut().for_each(|v| *v *= f);
                            t.set_batch(&idx, &vals).unwrap();
                        })
                    },
                );
            }
        }
        g.finish();
    }
}

fn learner_step(c: &mut Criterion) {
    const B: usize = 256;
    for n in SIZES {
        let mut r = rng();
        let p = priorities(n, &mut r);
        let mut g = c.benchmark_group(format!("tree_learner_step/{n}"));
        g.throughput(Throughput::Elements(B as u64));
        let mut xs = vec![0.0; B];
        let mut base = binary(n, &p);
        let mut idx = vec![0; B];
        g.bench_function(BenchmarkId::new("binary", format!("B{B}")), |bench| {
            bench.iter(|| {
                stratified(base.total(), &mut xs, &mut r);
                for (i, &x) in idx.iter_mut().zip(&xs) {
                    *i = base.find_prefix(x);
                }
                for &i in &idx {
                    base.set(i, 1.0 - r.random::<f64>());
                }
            })
        });
        drop(base);
        for k in Fanout::ALL {
            let mut t = kary(n, k, &p);
            let mut vals = vec![0.0; B];
            g.bench_function(
                BenchmarkId::new(format!("K{}", k.get()), format!("B{B}")),
                |bench| {
                    bench.iter(|| {
                        stratified(t.total(), &mut xs, &mut r);
                        t.find_prefix_batch(&xs, &mut idx).unwrap();
                        vals.iter_mut().for_each(|v| *v = 1.0 - r.random::<f64>());
                        t.set_batch(&idx, &vals).unwrap();
                    })
                },
            );
        }
        g.finish();
    }
}

criterion_group! { name = benches; config = quick_criterion(); targets = sample, update, learner_step }
criterion_main!(benches);
