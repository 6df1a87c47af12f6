//! Sample and update latency of the device buffer (feature `tch`) against the CPU tree.
//!
//! | group | workload (per iteration) |
//! |---|---|
//! | tch_sample/N | sample B (stratified, beta 0.4) with weights and the gathered obs f32[4] |
//! | tch_update/N | update_priorities of B sampled keys (new random priorities) |
//!
//! N in {2^17, 2^20, 2^22}, B in {32, 256, 4096, 65536}, K = 16. Ids are
//! `{backend}/B{b}`: `cpu_tree` (the CPU `ReplayBuffer`, same work on the host),
//! `tch_cpu` (`DeviceBuffer` on the CPU device), `tch_cuda` (on the GPU, when
//! `tch::Cuda::is_available()`; every iteration ends with a device synchronize), and for
//! updates `tch_*_rebuild_all` (TorchRL's approach: write the leaves, recompute every level).
//!
//! `KARY_TCH_BENCH=quick` measures only B in {256, 4096} and N in {2^17, 2^20} (for CI-sized runs).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kary_replay::gpu::{DeviceBuffer, DeviceKeys, Precision};
use kary_replay::{Config, DType, ReplayBuffer, SampleBatch, SampleMode, Schema};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::hint::black_box;
use tch::{Device, Kind, Tensor};

const K: usize = 16;

fn config(n: usize) -> Config {
    Config::builder(n, Schema::new().column("obs", DType::F32, 4))
        .fanout(K)
        .build()
        .unwrap()
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

fn filled_device(n: usize, device: Device, rng: &mut SmallRng) -> DeviceBuffer {
    let mut b = DeviceBuffer::new(config(n), device, Precision::F64).unwrap();
    let obs = Tensor::rand([n as i64, 4], (Kind::Float, device));
    let p: Vec<f64> = (0..n).map(|_| 1.0 - rng.random::<f64>()).collect();
    b.insert_batch(&[obs], Some(&Tensor::from_slice(&p).to_device(device)))
        .unwrap();
    b
}

fn filled_cpu(n: usize, rng: &mut SmallRng) -> ReplayBuffer {
    let mut b = ReplayBuffer::new(config(n)).unwrap();
    let obs: Vec<f32> = (0..4 * n).map(|i| i as f32).collect();
    let p: Vec<f64> = (0..n).map(|_| 1.0 - rng.random::<f64>()).collect();
    b.insert_batch(&[(&obs[..]).into()], Some(&p)).unwrap();
    b
}

fn bench(c: &mut Criterion) {
    let quick = std::env::var("KARY_TCH_BENCH").as_deref() == Ok("quick");
    let sizes: &[usize] = if quick {
        &[1 << 17, 1 << 20]
    } else {
        &[1 << 17, 1 << 20, 1 << 22]
    };
    let batches: &[usize] = if quick {
        &[256, 4096]
    } else {
        &[32, 256, 4096, 65536]
    };
    let mut devices = vec![("tch_cpu", Device::Cpu)];
    if tch::Cuda::is_available() {
        devices.push(("tch_cuda", Device::Cuda(0)));
    }
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    tch::manual_seed(0x5eed);
    for &n in sizes {
        let mut cpu = filled_cpu(n, &mut rng);
        let mut device_buffers: Vec<(&str, Device, DeviceBuffer)> = devices
            .iter()
            .map(|&(name, d)| (name, d, filled_device(n, d, &mut rng)))
            .collect();

        let mut group = c.benchmark_group(format!("tch_sample/{n}"));
        for &b in batches {
            group.throughput(Throughput::Elements(b as u64));
            let mut out = SampleBatch::default();
            group.bench_function(BenchmarkId::new("cpu_tree", format!("B{b}")), |bench| {
                bench.iter(|| {
                    cpu.sample_into(b, 0.4, SampleMode::Stratified, &mut rng, &mut out)
                        .unwrap();
                    black_box(&out);
                })
            });
            for (name, device, buffer) in &device_buffers {
                group.bench_function(BenchmarkId::new(*name, format!("B{b}")), |bench| {
                    bench.iter(|| {
                        let s = buffer.sample(b, 0.4, SampleMode::Stratified).unwrap();
                        sync(*device);
                        black_box(s);
                    })
                });
            }
        }
        group.finish();

        let mut group = c.benchmark_group(format!("tch_update/{n}"));
        for &b in batches {
            group.throughput(Throughput::Elements(b as u64));
            let mut out = SampleBatch::default();
            cpu.sample_into(b, 0.4, SampleMode::Stratified, &mut rng, &mut out)
                .unwrap();
            let keys = out.keys.clone();
            let new_p: Vec<f64> = (0..b).map(|_| 1.0 - rng.random::<f64>()).collect();
            group.bench_function(BenchmarkId::new("cpu_tree", format!("B{b}")), |bench| {
                bench.iter(|| black_box(cpu.update_priorities(&keys, &new_p).unwrap()))
            });
            for (name, device, buffer) in &mut device_buffers {
                let s = buffer.sample(b, 0.4, SampleMode::Stratified).unwrap();
                let keys = DeviceKeys {
                    indices: s.keys.indices.shallow_clone(),
                    generations: s.keys.generations.shallow_clone(),
                };
                let p = Tensor::rand([b as i64], (Kind::Double, *device)) + 0.01;
                group.bench_function(BenchmarkId::new(*name, format!("B{b}")), |bench| {
                    bench.iter(|| {
                        let r = buffer.update_priorities(&keys, &p).unwrap();
                        sync(*device);
                        black_box(r);
                    })
                });
                // The baseline needs distinct indices.
                let distinct =
                    Tensor::randperm(n as i64, (Kind::Int64, *device)).narrow(0, 0, b as i64);
                group.bench_function(
                    BenchmarkId::new(format!("{name}_rebuild_all"), format!("B{b}")),
                    |bench| {
                        bench.iter(|| {
                            buffer.write_leaves_and_rebuild_all(&distinct, &p);
                            sync(*device);
                        })
                    },
                );
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(1000))
        .sample_size(20);
    targets = bench
}
criterion_main!(benches);
