//! Batch sampling on a tch device: the GPU when there is one, else the CPU device.
//!
//!     . scripts/lib/torch-env.sh && cargo run --release --features tch --example gpu_sampling
//!
//! A learner loop on a `DeviceBuffer` (tree and columns on the device, no host round trip
//! per batch), then the same on a `HybridBuffer` (CPU tree, device columns).
use std::time::Instant;

use kary_replay::gpu::{DeviceBuffer, HybridBuffer, Precision};
use kary_replay::{Config, DType, SampleMode, Schema, SplitLockBuffer};
use rand::{rngs::SmallRng, SeedableRng};
use tch::{Device, Kind, Tensor};

fn main() -> Result<(), kary_replay::Error> {
    let device = Device::cuda_if_available();
    println!("device: {device:?}");
    tch::manual_seed(0);
    let capacity = 1 << 18;
    let config = || {
        Config::builder(
            capacity,
            Schema::new()
                .column("obs", DType::F32, 4)
                .column("reward", DType::F32, 1),
        )
        .fanout(16)
        .alpha(0.6)
        .build()
    };

    // Device-resident: an actor inserts 64 batches of 4096 transitions.
    let mut buffer = DeviceBuffer::new(config()?, device, Precision::F64)?;
    for _ in 0..64 {
        let obs = Tensor::randn([4096, 4], (Kind::Float, device));
        let reward = Tensor::rand([4096], (Kind::Float, device));
        buffer.insert_batch(&[obs, reward], None)?;
    }
    // A learner: sample, compute TD errors from the batch (a stand-in loss), write them back.
    let start = Instant::now();
    let steps = 200;
    let mut stale = 0;
    for _ in 0..steps {
        let batch = buffer.sample(1024, 0.4, SampleMode::Stratified)?;
        let obs = &batch.columns[0]; // [1024, 4] on the device
        let td = (obs.sum_dim_intlist(1, false, Kind::Double).abs() * &batch.weights) + 1e-3;
        stale += buffer.update_priorities(&batch.keys, &td)?.stale;
    }
    let per_step = start.elapsed() / steps;
    let c = buffer.consistency();
    println!(
        "DeviceBuffer: {} items, {steps} learner steps of 1024 in {per_step:?} each, {stale} stale, \
         tree exact within {:.1e} (relative), {} MiB on the device",
        buffer.len(),
        c.max_rel_error,
        buffer.memory_bytes() >> 20
    );
    assert!(c.extrema_exact && c.max_rel_error < 1e-9, "{c:?}");
    assert_eq!(buffer.len(), capacity);

    // Hybrid: the CPU concurrent tree picks indices, only those go to the device.
    let mut hybrid: HybridBuffer<SplitLockBuffer> = HybridBuffer::new(config()?, device)?;
    let obs = Tensor::randn([8192, 4], (Kind::Float, device));
    let reward = Tensor::rand([8192], (Kind::Float, device));
    hybrid.insert_batch(&[obs, reward], None)?;
    let mut rng = SmallRng::seed_from_u64(1);
    let batch = hybrid.sample(1024, 0.4, SampleMode::Stratified, &mut rng)?;
    let td: Vec<f64> = batch.host.weights.iter().map(|w| 0.5 * w + 1e-3).collect();
    let report = hybrid.update_priorities(&batch.host.keys, &td)?;
    println!(
        "HybridBuffer: sampled 1024 (columns on {:?}: {:?}), {} updated",
        batch.columns[0].device(),
        batch.columns[0].size(),
        report.applied
    );
    assert_eq!(report.applied, 1024);
    Ok(())
}
