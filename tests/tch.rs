//! The device buffers (feature `tch`) on the CPU device, always; the same checks on CUDA
//! when `tch::Cuda::is_available()` (each `cuda_*` test says when it skipped).
//!
//! Run: `. scripts/lib/torch-env.sh && cargo test --features tch --test tch`.
#![cfg(feature = "tch")]

use kary_replay::gpu::{DeviceBuffer, DeviceKeys, HybridBuffer, Precision};
use kary_replay::{
    Config, DType, Error, Fanout, Key, ReplayBuffer, SampleMode, Schema, SplitLockBuffer, SumTree,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tch::{Device, Kind, Tensor};

/// Every test holds this while it runs: the tests draw from libtorch's one global generator,
/// and tests that run at once on the harness's threads would interleave their draws, so a
/// test that seeds it (`tch::manual_seed`) would see another stream in every run (the
/// chi-square of `cpu_distribution_f32` once came out at 103, past its 0.999 bound of 101,
/// in a run that passed before and after). Held, each seeded test sees the same draws.
fn torch_rng() -> std::sync::MutexGuard<'static, ()> {
    static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner())
}

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 4)
        .column("action", DType::I64, 1)
}

fn config(capacity: usize, k: usize) -> Config {
    // One tag for every buffer made from it, so that their keys compare equal.
    Config::builder(capacity, schema())
        .key_tag(11)
        .fanout(k)
        .alpha(1.0)
        .build()
        .unwrap()
}

/// Item `id`'s columns: obs = [id, id + 0.5, -id, 1], action = 3 id.
fn items(ids: &[i64], device: Device) -> Vec<Tensor> {
    let obs: Vec<f32> = ids
        .iter()
        .flat_map(|&i| [i as f32, i as f32 + 0.5, -(i as f32), 1.0])
        .collect();
    let action: Vec<i64> = ids.iter().map(|&i| 3 * i).collect();
    vec![
        Tensor::from_slice(&obs)
            .reshape([ids.len() as i64, 4])
            .to_device(device),
        Tensor::from_slice(&action).to_device(device),
    ]
}

/// Dyadic priorities (multiples of 1/8, some 0): every sum is exact in f64, so the device
/// tree and the CPU tree must agree bit for bit.
fn dyadic(n: usize, rng: &mut SmallRng) -> Vec<f64> {
    (0..n)
        .map(|_| {
            if rng.random_bool(0.2) {
                0.0
            } else {
                rng.random_range(1..64) as f64 / 8.0
            }
        })
        .collect()
}

fn to_vec_f64(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.to_kind(Kind::Double).to_device(Device::Cpu)).unwrap()
}

fn to_vec_i64(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(&t.to_device(Device::Cpu)).unwrap()
}

fn same_indices_as_the_cpu_tree(device: Device) {
    let mut rng = SmallRng::seed_from_u64(1);
    for k in [2, 4, 8, 16, 64] {
        for n in [1, 7, 64, 1000, 4099] {
            let priorities = dyadic(n, &mut rng);
            if priorities.iter().all(|&p| p == 0.0) {
                continue;
            }
            let mut tree = SumTree::new(n, Fanout::new(k).unwrap()).unwrap();
            for (i, &p) in priorities.iter().enumerate() {
                tree.set(i, p).unwrap();
            }
            let mut buffer = DeviceBuffer::new(config(n, k), device, Precision::F64).unwrap();
            let ids: Vec<i64> = (0..n as i64).collect();
            let p = Tensor::from_slice(&priorities).to_device(device);
            buffer.insert_batch(&items(&ids, device), Some(&p)).unwrap();
            let total = tree.total();
            assert_eq!(buffer.total_priority(), total, "K{k} N{n}");
            // Random targets, every exact boundary (prefix sums), 0 and just below the total.
            let mut targets: Vec<f64> = (0..2000).map(|_| rng.random::<f64>() * total).collect();
            let mut prefix = 0.0;
            for &p in &priorities {
                targets.push(prefix);
                prefix += p;
            }
            targets.push(0.0);
            targets.push(f64::from_bits(total.to_bits() - 1));
            let got = buffer
                .find_prefix(&Tensor::from_slice(&targets).to_device(device))
                .unwrap();
            let got = to_vec_i64(&got);
            for (x, g) in targets.iter().zip(&got) {
                let want = tree.find_prefix(*x).unwrap();
                assert_eq!(*g as usize, want, "K{k} N{n} x = {x}");
                assert!(priorities[want] > 0.0);
            }
        }
    }
}

#[test]
fn cpu_same_indices_as_the_cpu_tree() {
    let _rng = torch_rng();
    same_indices_as_the_cpu_tree(Device::Cpu);
}

/// Chi-square goodness of fit of 2^18 independent draws over 64 items (fixed seed);
/// the bound is the 0.999 quantile for 63 degrees of freedom (Wilson-Hilferty: 103.5).
fn distribution(device: Device, precision: Precision) {
    tch::manual_seed(7);
    let mut rng = SmallRng::seed_from_u64(2);
    let n = 64;
    let mut priorities: Vec<f64> = (0..n).map(|_| rng.random_range(0.05..1.0)).collect();
    priorities[5] = 0.0;
    priorities[63] = 0.0;
    let mut buffer = DeviceBuffer::new(config(n, 4), device, precision).unwrap();
    let ids: Vec<i64> = (0..n as i64).collect();
    let p = Tensor::from_slice(&priorities).to_device(device);
    buffer.insert_batch(&items(&ids, device), Some(&p)).unwrap();
    let total: f64 = priorities.iter().sum();
    let mut counts = vec![0u64; n];
    let draws = 1 << 18;
    for _ in 0..draws / 4096 {
        let s = buffer.sample(4096, 0.4, SampleMode::Independent).unwrap();
        for i in to_vec_i64(&s.keys.indices) {
            counts[i as usize] += 1;
        }
    }
    assert_eq!(counts[5], 0, "a zero-priority item was sampled");
    assert_eq!(counts[63], 0, "a zero-priority item was sampled");
    let chi2: f64 = (0..n)
        .filter(|&i| priorities[i] > 0.0)
        .map(|i| {
            let expected = draws as f64 * priorities[i] / total;
            (counts[i] as f64 - expected).powi(2) / expected
        })
        .sum();
    // 62 positive items: 61 degrees of freedom; 0.999 quantile about 101.
    assert!(chi2 < 101.0, "chi-square {chi2} over 61 degrees of freedom");
}

#[test]
fn cpu_distribution_f64() {
    let _rng = torch_rng();
    distribution(Device::Cpu, Precision::F64);
}

#[test]
fn cpu_distribution_f32() {
    let _rng = torch_rng();
    distribution(Device::Cpu, Precision::F32);
}

/// The same inserts and updates (duplicates, stale keys, zeros) on the device buffer and on
/// the CPU `ReplayBuffer`: same reports, same leaves, exact tree.
fn updates_match_the_cpu_buffer(device: Device) {
    let mut rng = SmallRng::seed_from_u64(3);
    for k in [2, 8, 64] {
        let n = 300;
        let mut cpu = ReplayBuffer::new(config(n, k)).unwrap();
        let mut dev = DeviceBuffer::new(config(n, k), device, Precision::F64).unwrap();
        let mut next_id = 0i64;
        let mut keys: Vec<Key> = Vec::new();
        for round in 0..12 {
            // Insert a batch (sometimes with priorities), wrapping around capacity.
            let m = rng.random_range(1..200);
            let ids: Vec<i64> = (next_id..next_id + m).collect();
            next_id += m;
            let cols = items(&ids, device);
            let obs: Vec<f32> = ids
                .iter()
                .flat_map(|&i| [i as f32, i as f32 + 0.5, -(i as f32), 1.0])
                .collect();
            let action: Vec<i64> = ids.iter().map(|&i| 3 * i).collect();
            let given = round % 2 == 0;
            let ps = dyadic(m as usize, &mut rng);
            let cpu_keys = cpu
                .insert_batch(
                    &[(&obs[..]).into(), (&action[..]).into()],
                    given.then_some(&ps[..]),
                )
                .unwrap();
            let p = Tensor::from_slice(&ps).to_device(device);
            let dev_keys = dev.insert_batch(&cols, given.then_some(&p)).unwrap();
            assert_eq!(dev_keys.to_host(), cpu_keys);
            keys.extend(cpu_keys);
            // Update a random mix of old (maybe stale) and new keys, with duplicates.
            let b = rng.random_range(1..100);
            let chosen: Vec<Key> = (0..b)
                .map(|_| keys[keys.len() - 1 - rng.random_range(0..keys.len().min(500))])
                .collect();
            let new_p = dyadic(b, &mut rng);
            let cpu_report = cpu.update_priorities(&chosen, &new_p).unwrap();
            let dev_report = dev
                .update_priorities(
                    &DeviceKeys::from_host(&chosen, device),
                    &Tensor::from_slice(&new_p).to_device(device),
                )
                .unwrap();
            assert_eq!(dev_report, cpu_report, "K{k} round {round}");
            let leaves = to_vec_f64(&dev.leaf_priorities());
            for (i, leaf) in leaves.iter().enumerate() {
                assert_eq!(
                    *leaf,
                    cpu.priority(i).unwrap(),
                    "K{k} round {round} slot {i}"
                );
                assert_eq!(dev.key(i).unwrap(), cpu.key(i).unwrap());
            }
            assert_eq!(dev.total_priority(), cpu.total_priority());
            assert_eq!(dev.stats(), cpu.stats(), "K{k} round {round}");
            let c = dev.consistency();
            assert!(c.exact && c.extrema_exact, "{c:?}");
        }
        // A full rebuild finds nothing to change.
        let total = dev.total_priority();
        dev.rebuild();
        assert_eq!(dev.total_priority(), total);
        assert!(dev.consistency().exact);
    }
}

#[test]
fn cpu_updates_match_the_cpu_buffer() {
    let _rng = torch_rng();
    updates_match_the_cpu_buffer(Device::Cpu);
}

fn samples_are_whole_and_valid(device: Device) {
    tch::manual_seed(11);
    let n = 100;
    let mut buffer = DeviceBuffer::new(config(n, 8), device, Precision::F64).unwrap();
    // 250 items into 100 slots: 150 evicted; every third priority 0.
    let ids: Vec<i64> = (0..250).collect();
    let ps: Vec<f64> = ids
        .iter()
        .map(|&i| {
            if i % 3 == 0 {
                0.0
            } else {
                1.0 + (i % 5) as f64
            }
        })
        .collect();
    buffer
        .insert_batch(
            &items(&ids, device),
            Some(&Tensor::from_slice(&ps).to_device(device)),
        )
        .unwrap();
    // The live items' total and smallest positive priority (alpha 1: stored as given).
    let live = &ps[150..];
    let total: f64 = live.iter().sum();
    let min = live
        .iter()
        .copied()
        .filter(|&p| p > 0.0)
        .fold(f64::INFINITY, f64::min);
    for mode in [SampleMode::Independent, SampleMode::Stratified] {
        let s = buffer.sample(4096, 0.5, mode).unwrap();
        let idx = to_vec_i64(&s.keys.indices);
        let generations = to_vec_i64(&s.keys.generations);
        let pr = to_vec_f64(&s.priorities);
        let w = to_vec_f64(&s.weights);
        let prob = to_vec_f64(&s.probabilities);
        for r in 0..4096 {
            // Global normalization (the default): (p / min)^-beta; probability p / total.
            let want = (pr[r] / min).powf(-0.5);
            assert!(
                (w[r] - want).abs() <= 1e-12 * want,
                "weight {} != {want}",
                w[r]
            );
            assert!(
                (prob[r] - pr[r] / total).abs() <= 1e-15,
                "probability of row {r}"
            );
        }
        let obs = Vec::<f32>::try_from(&s.columns[0].reshape([-1]).to_device(Device::Cpu)).unwrap();
        let action = to_vec_i64(&s.columns[1].reshape([-1]));
        for r in 0..4096 {
            let key = Key {
                index: idx[r] as usize,
                generation: generations[r] as u64,
            };
            assert_eq!(key.tag(), u64::from(buffer.config().key_tag()));
            let g = key.insertion() as i64;
            assert!(idx[r] >= 0 && (idx[r] as usize) < n);
            assert_eq!(g as usize % n, idx[r] as usize);
            assert!(g >= 150, "an evicted generation was sampled");
            assert!(
                pr[r] > 0.0 && pr[r] == ps[g as usize],
                "priority of the row"
            );
            assert!(w[r] > 0.0 && w[r] <= 1.0);
            assert_eq!(
                &obs[4 * r..4 * r + 4],
                &[g as f32, g as f32 + 0.5, -(g as f32), 1.0]
            );
            assert_eq!(action[r], 3 * g);
        }
    }
    // Zeroing every priority: nothing to sample, an error rather than a zero-priority item.
    let all: Vec<Key> = (0..n).map(|i| buffer.key(i).unwrap().unwrap()).collect();
    buffer
        .update_priorities(
            &DeviceKeys::from_host(&all, device),
            &Tensor::zeros([n as i64], (Kind::Double, device)),
        )
        .unwrap();
    assert!(matches!(
        buffer.sample(8, 0.4, SampleMode::Stratified),
        Err(Error::ZeroTotalPriority)
    ));
    let empty = DeviceBuffer::new(config(n, 8), device, Precision::F64).unwrap();
    assert!(matches!(
        empty.sample(8, 0.4, SampleMode::Stratified),
        Err(Error::Empty)
    ));
    assert!(matches!(
        buffer.sample(0, 0.4, SampleMode::Stratified),
        Err(Error::ZeroBatch)
    ));
}

/// A tree whose parents no longer match their children (leaves rescaled behind the tree's
/// back, zeros kept): the descent must still return only positive leaves in range.
fn drifted_tree_still_gives_positive_leaves(device: Device) {
    let mut rng = SmallRng::seed_from_u64(9);
    for k in [2, 4, 16, 64] {
        let n = 3000;
        let priorities = dyadic(n, &mut rng);
        let mut buffer = DeviceBuffer::new(config(n, k), device, Precision::F64).unwrap();
        let ids: Vec<i64> = (0..n as i64).collect();
        let p = Tensor::from_slice(&priorities).to_device(device);
        buffer.insert_batch(&items(&ids, device), Some(&p)).unwrap();
        let factors: Vec<f64> = (0..n).map(|_| rng.random_range(0.25..4.0)).collect();
        let mut leaves = buffer.leaf_priorities();
        let rescaled = &leaves * Tensor::from_slice(&factors).to_device(device);
        leaves.copy_(&rescaled);
        assert!(!buffer.consistency().exact, "the drift did not happen");
        let stored = to_vec_f64(&buffer.leaf_priorities());
        let total = buffer.total_priority();
        let mut targets: Vec<f64> = (0..5000).map(|_| rng.random::<f64>() * total).collect();
        targets.extend([
            0.0,
            total,
            f64::from_bits(total.to_bits() - 1),
            2.0 * total,
            -1.0,
        ]);
        let got = to_vec_i64(
            &buffer
                .find_prefix(&Tensor::from_slice(&targets).to_device(device))
                .unwrap(),
        );
        for (x, i) in targets.iter().zip(got) {
            assert!(i >= 0 && (i as usize) < n, "K{k}: index {i} for x = {x}");
            assert!(
                stored[i as usize] > 0.0,
                "K{k}: zero-priority leaf {i} for x = {x}"
            );
        }
        for mode in [SampleMode::Independent, SampleMode::Stratified] {
            let s = buffer.sample(4096, 0.4, mode).unwrap();
            assert!(to_vec_f64(&s.priorities).iter().all(|&p| p > 0.0), "K{k}");
        }
    }
}

#[test]
fn cpu_drifted_tree_still_gives_positive_leaves() {
    let _rng = torch_rng();
    drifted_tree_still_gives_positive_leaves(Device::Cpu);
}

#[test]
fn cuda_drifted_tree_still_gives_positive_leaves() {
    let _rng = torch_rng();
    on_cuda(drifted_tree_still_gives_positive_leaves);
}

#[test]
fn cpu_samples_are_whole_and_valid() {
    let _rng = torch_rng();
    samples_are_whole_and_valid(Device::Cpu);
}

fn stale_and_bad_input_change_nothing(device: Device) {
    let n = 16;
    let mut buffer = DeviceBuffer::new(config(n, 4), device, Precision::F64).unwrap();
    let ids: Vec<i64> = (0..20).collect();
    let keys = buffer
        .insert_batch(&items(&ids, device), None)
        .unwrap()
        .to_host();
    let before = to_vec_f64(&buffer.leaf_priorities());
    let snapshot = |b: &DeviceBuffer| {
        (
            to_vec_f64(&b.leaf_priorities()),
            b.inserted(),
            b.total_priority(),
        )
    };
    let start = snapshot(&buffer);
    // Stale: generation 0..3 were overwritten by 16..19.
    let stale = DeviceKeys::from_host(&keys[..4], device);
    let report = buffer
        .update_priorities(&stale, &Tensor::full([4], 9.0, (Kind::Double, device)))
        .unwrap();
    assert_eq!((report.applied, report.stale), (0, 4));
    assert_eq!(to_vec_f64(&buffer.leaf_priorities()), before);
    let p1 = Tensor::ones([1], (Kind::Double, device));
    let tag = buffer.config().key_tag();
    let bad_keys = [
        (Key::new(tag, n, n as u64), "out of range"),
        (Key::new(tag, 1, 2), "wrong slot"),
        (Key::new(tag, 1, 1 + 16 * 5), "future"),
        (Key::new(tag % Key::MAX_TAG + 1, 1, 17), "another buffer's"),
        (Key::new(0, 1, 17), "untagged"),
    ];
    for (key, what) in bad_keys {
        let r = buffer.update_priorities(&DeviceKeys::from_host(&[key], device), &p1);
        assert!(
            matches!(r, Err(Error::OutOfRange { .. } | Error::InvalidKey { .. })),
            "{what}: {r:?}"
        );
    }
    let good = DeviceKeys::from_host(&keys[19..], device);
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let r = buffer.update_priorities(&good, &Tensor::from_slice(&[bad]).to_device(device));
        assert!(
            matches!(r, Err(Error::InvalidPriority { .. })),
            "{bad}: {r:?}"
        );
        let p = Tensor::from_slice(&[1.0, bad]).to_device(device);
        let r = buffer.insert_batch(&items(&[100, 101], device), Some(&p));
        assert!(
            matches!(r, Err(Error::InvalidPriority { position: 1, .. })),
            "{bad}: {r:?}"
        );
    }
    // Type, shape, count and device mismatches: errors, not crashes.
    let cols = items(&[7], device);
    let wrong_kind = vec![cols[0].to_kind(Kind::Double), cols[1].shallow_clone()];
    assert!(matches!(
        buffer.insert_batch(&wrong_kind, None),
        Err(Error::TensorMismatch(_))
    ));
    let wrong_shape = vec![cols[0].reshape([2, 2]), cols[1].shallow_clone()];
    assert!(matches!(
        buffer.insert_batch(&wrong_shape, None),
        Err(Error::TensorMismatch(_))
    ));
    assert!(matches!(
        buffer.insert_batch(&cols[..1], None),
        Err(Error::ColumnCount { .. })
    ));
    let int_p = Tensor::from_slice(&[1i64]).to_device(device);
    assert!(matches!(
        buffer.insert_batch(&cols, Some(&int_p)),
        Err(Error::TensorMismatch(_))
    ));
    let two_p = Tensor::ones([2], (Kind::Double, device));
    assert!(matches!(
        buffer.update_priorities(&good, &two_p),
        Err(Error::LengthMismatch { .. })
    ));
    let f32_keys = DeviceKeys {
        indices: good.indices.to_kind(Kind::Int),
        generations: good.generations.shallow_clone(),
    };
    assert!(matches!(
        buffer.update_priorities(&f32_keys, &p1),
        Err(Error::TensorMismatch(_))
    ));
    assert!(matches!(
        buffer.find_prefix(&Tensor::zeros([3], (Kind::Float, device))),
        Err(Error::TensorMismatch(_))
    ));
    if device == Device::Cpu && tch::Cuda::is_available() {
        let on_gpu = items(&[7], Device::Cuda(0));
        assert!(matches!(
            buffer.insert_batch(&on_gpu, None),
            Err(Error::TensorMismatch(_))
        ));
    }
    assert_eq!(snapshot(&buffer), start);
}

#[test]
fn cpu_stale_and_bad_input_change_nothing() {
    let _rng = torch_rng();
    stale_and_bad_input_change_nothing(Device::Cpu);
}

/// A buffer too large for the device is an `Error::Allocation` from the constructor, not a
/// panic from inside tch (its plain constructors panic on libtorch's allocation failure):
/// 4 PiB of columns, past any machine's memory and the 47-bit address space.
fn too_large_is_an_allocation_error(device: Device) {
    let huge = Config::builder(1 << 20, Schema::new().column("obs", DType::F32, 1 << 30))
        .build()
        .unwrap();
    let bytes = (1usize << 20) * (1 << 30) * 4;
    for precision in [Precision::F64, Precision::F32] {
        match DeviceBuffer::new(huge.clone(), device, precision) {
            Err(Error::Allocation { bytes: b }) => assert_eq!(b, bytes),
            other => panic!("expected Error::Allocation, got {other:?}"),
        }
    }
    match HybridBuffer::<SplitLockBuffer>::new(huge, device) {
        Err(Error::Allocation { bytes: b }) => assert_eq!(b, bytes),
        Err(e) => panic!("expected Error::Allocation, got {e:?}"),
        Ok(_) => panic!("expected Error::Allocation, got a buffer"),
    }
    // The same calls with a size that fits still build.
    assert!(DeviceBuffer::new(config(64, 8), device, Precision::F64).is_ok());
    assert!(HybridBuffer::<SplitLockBuffer>::new(config(64, 8), device).is_ok());
}

#[test]
fn cpu_too_large_is_an_allocation_error() {
    too_large_is_an_allocation_error(Device::Cpu);
}

/// A batch no device can hold is an error that changes nothing, as on the CPU buffers
/// (`tests/hardening.rs`, 1.a), not a panic inside tch: sizes no allocator can give, one
/// whose byte count overflows, and one that is not an i64.
fn huge_batches_are_errors(device: Device) {
    let mut dev = DeviceBuffer::new(config(16, 4), device, Precision::F64).unwrap();
    let mut hybrid = HybridBuffer::<SplitLockBuffer>::new(config(16, 4), device).unwrap();
    let ids: Vec<i64> = (0..10).collect();
    dev.insert_batch(&items(&ids, device), None).unwrap();
    hybrid.insert_batch(&items(&ids, device), None).unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    for batch in [1usize << 40, usize::MAX / 4, usize::MAX] {
        for (name, err) in [
            (
                "DeviceBuffer",
                dev.sample(batch, 0.4, SampleMode::Stratified).unwrap_err(),
            ),
            (
                "HybridBuffer",
                hybrid
                    .sample(batch, 0.4, SampleMode::Stratified, &mut rng)
                    .unwrap_err(),
            ),
        ] {
            assert!(
                matches!(err, Error::Allocation { .. } | Error::SizeOverflow { .. }),
                "{name} batch {batch}: {err:?}"
            );
        }
    }
    // Draws that fit (2 GiB) but a descent that does not (fanout 64: [B, 64] tensors of
    // 128 GiB each): refused before the descent starts.
    let mut wide = DeviceBuffer::new(config(16, 64), device, Precision::F64).unwrap();
    wide.insert_batch(&items(&ids, device), None).unwrap();
    match wide.sample(1 << 28, 0.4, SampleMode::Stratified) {
        Err(Error::Allocation { bytes }) => assert!(bytes >= (1 << 28) * 64 * 8, "{bytes}"),
        other => panic!("fanout 64: {:?}", other.map(|s| s.weights.size())),
    }
    // The same descent on the caller's targets (512 MiB of them, 32 GiB per [B, 64]).
    let targets = Tensor::zeros([1 << 26], (Kind::Double, device));
    match wide.find_prefix(&targets) {
        Err(Error::Allocation { bytes }) => assert!(bytes >= (1 << 26) * 64 * 8, "{bytes}"),
        other => panic!("find_prefix, fanout 64: {:?}", other.map(|t| t.size())),
    }
    drop(targets);
    assert_eq!(
        wide.sample(8, 0.4, SampleMode::Stratified)
            .unwrap()
            .weights
            .size(),
        [8]
    );
    // Both still sample.
    assert_eq!(
        dev.sample(8, 0.4, SampleMode::Stratified)
            .unwrap()
            .weights
            .size(),
        [8]
    );
    let s = hybrid
        .sample(8, 0.4, SampleMode::Stratified, &mut rng)
        .unwrap();
    assert_eq!(s.host.len(), 8);
}

#[test]
fn cpu_huge_batches_are_errors() {
    let _rng = torch_rng();
    huge_batches_are_errors(Device::Cpu);
}

/// A batch whose draws fit but whose gathered rows do not (16 MiB rows, a million draws:
/// 16 TiB of columns) is an `Error::Allocation` from both buffers, not a panic inside tch,
/// and changes nothing: both still sample, the same items as before.
fn batches_of_wide_rows_are_allocation_errors(device: Device) {
    const WIDE: usize = 1 << 22;
    let wide = || {
        Config::builder(2, Schema::new().column("obs", DType::F32, WIDE))
            .alpha(1.0)
            .build()
            .unwrap()
    };
    let rows = Tensor::ones([2, WIDE as i64], (Kind::Float, device));
    let mut dev = DeviceBuffer::new(wide(), device, Precision::F64).unwrap();
    let mut hybrid = HybridBuffer::<SplitLockBuffer>::new(wide(), device).unwrap();
    let ps = Tensor::from_slice(&[1.0f64, 3.0]).to_device(device);
    dev.insert_batch(std::slice::from_ref(&rows), Some(&ps))
        .unwrap();
    hybrid
        .insert_batch(std::slice::from_ref(&rows), Some(&[1.0, 3.0]))
        .unwrap();
    let batch = 1 << 20;
    let bytes = batch * WIDE * 4;
    match dev.sample(batch, 0.4, SampleMode::Stratified) {
        Err(Error::Allocation { bytes: b }) => assert!(b >= bytes, "{b} < {bytes}"),
        other => panic!("DeviceBuffer: {:?}", other.map(|s| s.weights.size())),
    }
    let mut rng = SmallRng::seed_from_u64(5);
    match hybrid.sample(batch, 0.4, SampleMode::Stratified, &mut rng) {
        Err(Error::Allocation { bytes: b }) => assert!(b >= bytes, "{b} < {bytes}"),
        other => panic!("HybridBuffer: {:?}", other.map(|s| s.host.len())),
    }
    assert_eq!((dev.len(), hybrid.len()), (2, 2));
    assert_eq!(dev.total_priority(), 4.0);
    assert_eq!(hybrid.total_priority(), 4.0);
    let s = dev.sample(4, 0.4, SampleMode::Stratified).unwrap();
    assert_eq!(s.columns[0].size(), [4, WIDE as i64]);
    let s = hybrid
        .sample(4, 0.4, SampleMode::Stratified, &mut rng)
        .unwrap();
    assert_eq!(s.columns[0].size(), [4, WIDE as i64]);
}

#[test]
fn cpu_batches_of_wide_rows_are_allocation_errors() {
    let _rng = torch_rng();
    batches_of_wide_rows_are_allocation_errors(Device::Cpu);
}

#[test]
fn cpu_hybrid_gathers_the_rows_the_tree_chose() {
    let _rng = torch_rng();
    let device = Device::Cpu;
    let mut buffer: HybridBuffer<SplitLockBuffer> =
        HybridBuffer::new(config(50, 8), device).unwrap();
    let ids: Vec<i64> = (0..80).collect();
    let ps: Vec<f64> = ids.iter().map(|&i| 1.0 + (i % 4) as f64).collect();
    let keys = buffer
        .insert_batch(&items(&ids, device), Some(&ps))
        .unwrap();
    assert_eq!(keys.len(), 80);
    assert_eq!(keys[79], Key::new(buffer.config().key_tag(), 29, 79));
    let stats = buffer.stats();
    assert_eq!((stats.len, stats.capacity, stats.inserted), (50, 50, 80));
    assert_eq!(stats.total, buffer.total_priority());
    assert_eq!((stats.min_positive, stats.running_max), (Some(1.0), 4.0));
    let mut rng = SmallRng::seed_from_u64(5);
    let s = buffer
        .sample(256, 0.4, SampleMode::Stratified, &mut rng)
        .unwrap();
    let action = to_vec_i64(&s.columns[1].reshape([-1]));
    assert_eq!(
        to_vec_i64(&s.indices),
        s.host.indices.iter().map(|&i| i as i64).collect::<Vec<_>>()
    );
    for (r, key) in s.host.keys.iter().enumerate() {
        assert_eq!(
            action[r],
            3 * key.insertion() as i64,
            "row {r} is its key's item"
        );
        assert_eq!(s.host.priorities[r], ps[key.insertion() as usize]);
    }
    let report = buffer
        .update_priorities(&s.host.keys, &vec![0.5; 256])
        .unwrap();
    assert_eq!(report.applied, 256);
    let wrong = vec![
        items(&[1], device)[0].to_kind(Kind::Double),
        items(&[1], device)[1].shallow_clone(),
    ];
    assert!(matches!(
        buffer.insert_batch(&wrong, None),
        Err(Error::TensorMismatch(_))
    ));
    assert!(matches!(
        buffer.insert_batch(&items(&[1, 2], device), Some(&[1.0, f64::NAN])),
        Err(Error::InvalidPriority { .. })
    ));
    assert_eq!(buffer.inserted(), 80);
}

/// Learners share one `HybridBuffer` by reference (it is `Sync`): four threads sample and
/// update at once, and every gathered row is its key's item.
#[test]
fn cpu_hybrid_is_sampled_and_updated_from_many_threads() {
    let _rng = torch_rng();
    let device = Device::Cpu;
    let mut buffer: HybridBuffer<SplitLockBuffer> =
        HybridBuffer::new(config(64, 8), device).unwrap();
    let ids: Vec<i64> = (0..64).collect();
    buffer.insert_batch(&items(&ids, device), None).unwrap();
    let shared = &buffer;
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            scope.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                for round in 0..50 {
                    let s = shared
                        .sample(32, 0.4, SampleMode::Stratified, &mut rng)
                        .unwrap();
                    let action = to_vec_i64(&s.columns[1].reshape([-1]));
                    for (r, key) in s.host.keys.iter().enumerate() {
                        assert_eq!(action[r], 3 * key.insertion() as i64);
                    }
                    let ps = vec![1.0 + (round % 3) as f64; 32];
                    let report = shared.update_priorities(&s.host.keys, &ps).unwrap();
                    assert_eq!(report.applied + report.stale, 32);
                }
            });
        }
    });
    assert!(buffer.consistency().exact);
}

/// CUDA: the same checks on the GPU when one is present. With `KARY_REQUIRE_CUDA=1`
/// (scripts/test-gpu.sh) a missing GPU is a failure, not a skip.
fn on_cuda(test: fn(Device)) {
    if tch::Cuda::is_available() {
        test(Device::Cuda(0));
    } else if std::env::var("KARY_REQUIRE_CUDA").as_deref() == Ok("1") {
        panic!("KARY_REQUIRE_CUDA=1 but tch::Cuda::is_available() is false");
    } else {
        eprintln!("skipped: tch::Cuda::is_available() is false");
    }
}

#[test]
fn cuda_same_indices_as_the_cpu_tree() {
    let _rng = torch_rng();
    on_cuda(same_indices_as_the_cpu_tree);
}

#[test]
fn cuda_distribution() {
    let _rng = torch_rng();
    on_cuda(|d| distribution(d, Precision::F64));
    on_cuda(|d| distribution(d, Precision::F32));
}

#[test]
fn cuda_updates_match_the_cpu_buffer() {
    let _rng = torch_rng();
    on_cuda(updates_match_the_cpu_buffer);
}

#[test]
fn cuda_samples_are_whole_and_valid() {
    let _rng = torch_rng();
    on_cuda(samples_are_whole_and_valid);
}

#[test]
fn cuda_stale_and_bad_input_change_nothing() {
    let _rng = torch_rng();
    on_cuda(stale_and_bad_input_change_nothing);
}

#[test]
fn cuda_huge_batches_are_errors() {
    let _rng = torch_rng();
    on_cuda(huge_batches_are_errors);
}

#[test]
fn cuda_batches_of_wide_rows_are_allocation_errors() {
    let _rng = torch_rng();
    on_cuda(batches_of_wide_rows_are_allocation_errors);
}

#[test]
fn cuda_too_large_is_an_allocation_error() {
    on_cuda(too_large_is_an_allocation_error);
}

/// What a device or hybrid buffer shows of its state: per slot (priority bits, key), len,
/// inserted, total bits.
type Seen = (Vec<(u64, Option<Key>)>, usize, u64, u64);

fn seen(
    capacity: usize,
    priority: impl Fn(usize) -> f64,
    key: impl Fn(usize) -> Option<Key>,
    len: usize,
    inserted: u64,
    total: f64,
) -> Seen {
    let slots = (0..capacity)
        .map(|i| (priority(i).to_bits(), key(i)))
        .collect();
    (slots, len, inserted, total.to_bits())
}

fn hybrid_seen<T: kary_replay::ConcurrentBuffer>(b: &HybridBuffer<T>) -> Seen {
    seen(
        b.capacity(),
        |i| b.priority(i).unwrap(),
        |i| b.key(i).unwrap(),
        b.len(),
        b.inserted(),
        b.total_priority(),
    )
}

fn device_seen(b: &DeviceBuffer) -> Seen {
    seen(
        b.capacity(),
        |i| b.priority(i).unwrap(),
        |i| b.key(i).unwrap(),
        b.len(),
        b.inserted(),
        b.total_priority(),
    )
}

/// Every sampled row is the item its key names (`items`: the id is the generation).
fn rows_match_keys(columns: &[Tensor], generations: &[i64]) {
    let insertions: Vec<i64> = generations.iter().map(|g| g & ((1 << 48) - 1)).collect();
    let expected = items(&insertions, Device::Cpu);
    for (got, want) in columns.iter().zip(&expected) {
        let got = got.to_device(Device::Cpu).reshape(want.size());
        assert!(got.equal(want), "a sampled row is not its key's item");
    }
}

/// Checkpoints of the device buffers: a HybridBuffer saves and loads into every variant's
/// HybridBuffer, a DeviceBuffer and the CPU buffers, and back, with every priority bit,
/// key, count and total as saved, sums rebuilt exact, rows that match their keys, and
/// keys from before the save still valid (an evicted one stale).
#[test]
fn checkpoints_move_between_device_host_and_hybrid_buffers() {
    use kary_replay::checkpoint::{LoadOptions, SaveOptions, UserValue};
    use kary_replay::{
        Checkpoint, CheckpointErrorKind, ConcurrentBuffer, GlobalLockBuffer, Load, LockFreeBuffer,
    };
    let _rng = torch_rng();
    let dir = std::env::temp_dir().join(format!("kr-tch-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = Config::builder(64, schema())
        .fanout(4)
        .alpha(0.6)
        .build()
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut hybrid: HybridBuffer<SplitLockBuffer> =
        HybridBuffer::new(cfg.clone(), Device::Cpu).unwrap();
    let mut keys = Vec::new();
    for chunk in (0..100i64).collect::<Vec<_>>().chunks(13) {
        let p: Vec<f64> = chunk.iter().map(|_| rng.random_range(0.01..5.0)).collect();
        keys.extend(
            hybrid
                .insert_batch(&items(chunk, Device::Cpu), Some(&p))
                .unwrap(),
        );
    }
    let live: Vec<Key> = keys[60..80].to_vec();
    let p: Vec<f64> = live.iter().map(|_| rng.random_range(0.01..9.0)).collect();
    assert_eq!(hybrid.update_priorities(&live, &p).unwrap().applied, 20);
    let before = hybrid_seen(&hybrid);

    let first = dir.join("hybrid");
    let options = SaveOptions::new().user("step", UserValue::U64(100));
    hybrid.save_with(&first, &options).unwrap();

    // Into every hybrid variant: the same state, and the same draws for the same RNG.
    type Draw<'a> = &'a dyn Fn(&mut SmallRng) -> (Vec<Key>, Vec<Tensor>);
    let check_hybrid = |b: Draw<'_>| {
        let (a, b_) = (b(&mut SmallRng::seed_from_u64(3)), {
            let s = hybrid
                .sample(
                    16,
                    0.4,
                    SampleMode::Stratified,
                    &mut SmallRng::seed_from_u64(3),
                )
                .unwrap();
            (s.host.keys, s.columns)
        });
        assert_eq!(a.0, b_.0, "the same RNG drew other keys");
        let gens: Vec<i64> = a.0.iter().map(|k| k.generation as i64).collect();
        rows_match_keys(&a.1, &gens);
    };
    let l = HybridBuffer::<LockFreeBuffer>::load_with(&first, &LoadOptions::default(), Device::Cpu)
        .unwrap();
    assert_eq!(l.user.get("step"), Some(&UserValue::U64(100)));
    assert_eq!(hybrid_seen(&l.buffer), before);
    assert!(l.buffer.consistency().exact);
    check_hybrid(&|r| {
        let s = l.buffer.sample(16, 0.4, SampleMode::Stratified, r).unwrap();
        (s.host.keys, s.columns)
    });
    let g = HybridBuffer::<GlobalLockBuffer>::load(&first, Device::Cpu).unwrap();
    assert_eq!(hybrid_seen(&g), before);
    check_hybrid(&|r| {
        let s = g.sample(16, 0.4, SampleMode::Stratified, r).unwrap();
        (s.host.keys, s.columns)
    });

    // Into the CPU buffers: the same state and rows.
    let cpu = SplitLockBuffer::load(&first).unwrap();
    assert_eq!(
        seen(
            64,
            |i| cpu.priority(i).unwrap(),
            |i| cpu.key(i).unwrap(),
            cpu.len(),
            cpu.inserted(),
            cpu.total_priority()
        ),
        before
    );
    let s = cpu
        .sample(
            32,
            0.4,
            SampleMode::Independent,
            &mut SmallRng::seed_from_u64(5),
        )
        .unwrap();
    let gens: Vec<i64> = s.keys.iter().map(|k| k.generation as i64).collect();
    let host_rows: Vec<Tensor> = vec![
        Tensor::from_slice(s.columns[0].as_f32().unwrap()),
        Tensor::from_slice(s.columns[1].as_i64().unwrap()),
    ];
    rows_match_keys(&host_rows, &gens);

    // Into a DeviceBuffer (f64 and f32 nodes), its update by an old key, and back.
    let mut dev = DeviceBuffer::load(&first, Device::Cpu, Precision::F64).unwrap();
    assert_eq!(device_seen(&dev), before);
    assert!(dev.consistency().exact);
    let f32_dev = DeviceBuffer::load(&first, Device::Cpu, Precision::F32).unwrap();
    assert_eq!(f32_dev.len(), 64);
    let s = dev.sample(32, 0.4, SampleMode::Stratified).unwrap();
    rows_match_keys(&s.columns, &to_vec_i64(&s.keys.generations));
    let old = DeviceKeys::from_host(&[keys[99], keys[0]], Device::Cpu);
    let r = dev
        .update_priorities(&old, &Tensor::from_slice(&[2.0f64, 2.0]))
        .unwrap();
    assert_eq!(
        (r.applied, r.stale),
        (1, 1),
        "a live key applies, an evicted one is stale"
    );
    let second = dir.join("device");
    dev.save(&second).unwrap();
    let back = HybridBuffer::<SplitLockBuffer>::load(&second, Device::Cpu).unwrap();
    assert_eq!(hybrid_seen(&back), device_seen(&dev));
    assert!(back.consistency().exact);

    // A cleared buffer's checkpoint cannot become a DeviceBuffer; nothing else is lost.
    let cleared = ReplayBuffer::new(cfg.clone()).unwrap();
    let cleared = {
        let mut c = cleared;
        c.insert(&[(&[1f32, 2., 3., 4.]).into(), (&[5i64]).into()], Some(1.0))
            .unwrap();
        c.clear();
        c
    };
    cleared.save(dir.join("cleared")).unwrap();
    match DeviceBuffer::load(dir.join("cleared"), Device::Cpu, Precision::F64) {
        Err(Error::Checkpoint { kind, .. }) => assert_eq!(kind, CheckpointErrorKind::Mismatch),
        other => panic!("loaded a cleared buffer into a DeviceBuffer: {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Columns of several dimensions: stored `[capacity, *dims]`, sampled `[B, *dims]`, taken
/// as `[M, *dims]` or flat `[M, shape]`, refused in any other shape, and kept by a
/// checkpoint whose column file is `(capacity, *dims)`, on both device buffers.
#[test]
fn cpu_columns_of_dimensions_keep_their_shape() {
    use kary_replay::Checkpoint;
    let _rng = torch_rng();
    let device = Device::Cpu;
    let schema = Schema::new()
        .column("frame", DType::U8, [2, 3])
        .column("r", DType::F32, []);
    let config = Config::builder(8, schema).alpha(1.0).build().unwrap();
    let frames = |ids: &[i64]| {
        Tensor::from_slice(ids)
            .to_kind(Kind::Uint8)
            .view([-1, 1, 1])
            .expand([ids.len() as i64, 2, 3], false)
            .contiguous()
    };
    let rewards = |ids: &[i64]| Tensor::from_slice(ids).to_kind(Kind::Float);
    let dir = std::env::temp_dir().join(format!("kr-tch-dims-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let mut d = DeviceBuffer::new(config.clone(), device, Precision::F64).unwrap();
    d.insert_batch(&[frames(&[1, 2, 3]), rewards(&[1, 2, 3])], None)
        .unwrap();
    // Flat rows are the same items.
    d.insert_batch(&[frames(&[4]).view([1, 6]), rewards(&[4])], None)
        .unwrap();
    assert!(d
        .insert_batch(&[frames(&[5]).view([1, 3, 2]), rewards(&[5])], None)
        .is_err());
    assert_eq!(d.len(), 4);
    let s = d.sample(16, 0.4, SampleMode::Independent).unwrap();
    assert_eq!(s.columns[0].size(), [16, 2, 3]);
    assert_eq!(s.columns[1].size(), [16]);
    // Every frame is filled with its reward.
    let by_reward = s.columns[1].to_kind(Kind::Uint8).view([16, 1, 1]);
    assert!(s.columns[0].eq_tensor(&by_reward).all().int64_value(&[]) == 1);
    d.save(dir.join("device")).unwrap();
    let loaded = DeviceBuffer::load(dir.join("device"), device, Precision::F64).unwrap();
    assert_eq!(loaded.config().schema().columns()[0].dims, [2, 3]);
    let s = loaded.sample(4, 0.4, SampleMode::Independent).unwrap();
    assert_eq!(s.columns[0].size(), [4, 2, 3]);

    let mut h = HybridBuffer::<SplitLockBuffer>::new(config, device).unwrap();
    h.insert_batch(&[frames(&[7, 8]), rewards(&[7, 8])], None)
        .unwrap();
    let s = h
        .sample(
            4,
            0.4,
            SampleMode::Independent,
            &mut kary_replay::Xoshiro256::new(1),
        )
        .unwrap();
    assert_eq!(s.columns[0].size(), [4, 2, 3]);
    h.save(dir.join("hybrid")).unwrap();
    let header = std::fs::read(dir.join("hybrid/col.frame.npy")).unwrap();
    assert!(String::from_utf8_lossy(&header[..128]).contains("'shape': (8, 2, 3)"));
    let loaded = HybridBuffer::<SplitLockBuffer>::load(dir.join("hybrid"), device).unwrap();
    assert_eq!(loaded.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
