//! Property test: the buffer against a plain reference model (a Vec of priorities with a
//! linear prefix scan), over random operation sequences, every K, capacities 1..=3K+1 and
//! a few large ones, alpha in {0, 0.6, 1, 2}.
//!
//! Priorities are small integers, so with alpha in {0, 1, 2} every stored value and every
//! sum is an exact integer: totals and prefix indices must agree exactly. With alpha 0.6
//! totals agree within a relative 1e-12 and the returned index must be consistent with
//! the reference prefix sums within that tolerance.

use kary_replay::{
    Config, DType, Fanout, Key, ReplayBuffer, SampleMode, Schema, WeightNormalization,
};
use proptest::prelude::*;
use rand::{rngs::SmallRng, SeedableRng};

const REL_TOL: f64 = 1e-12;

#[derive(Debug, Clone)]
enum Op {
    Insert(Option<u8>),
    InsertBatch(Vec<Option<u8>>),
    /// (key choice, priority): key choice indexes the list of every key ever issued.
    Update(Vec<(usize, u8)>),
    /// Key choices, as for `Update`: the keys to delete.
    Delete(Vec<usize>),
    /// A uniform batch of this size, from this seed.
    Uniform(usize, u64),
    Sample {
        batch: usize,
        seed: u64,
        beta_tenths: u8,
        stratified: bool,
        batch_norm: bool,
    },
    Prefix(Vec<u16>),
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::weighted(0.8, 0u8..=20).prop_map(Op::Insert),
        2 => proptest::collection::vec(proptest::option::weighted(0.8, 0u8..=20), 0..12)
            .prop_map(Op::InsertBatch),
        3 => proptest::collection::vec((any::<usize>(), 0u8..=20), 1..10).prop_map(Op::Update),
        2 => proptest::collection::vec(any::<usize>(), 1..6).prop_map(Op::Delete),
        1 => (1usize..20, any::<u64>()).prop_map(|(b, s)| Op::Uniform(b, s)),
        2 => (1usize..20, any::<u64>(), 0u8..=10, any::<bool>(), any::<bool>()).prop_map(
            |(batch, seed, beta_tenths, stratified, batch_norm)| Op::Sample {
                batch, seed, beta_tenths, stratified, batch_norm
            }
        ),
        2 => proptest::collection::vec(any::<u16>(), 1..10).prop_map(Op::Prefix),
        1 => Just(Op::Clear),
    ]
}

/// The reference: per slot (generation, stored priority), FIFO by insertion number.
/// The buffers' key tag, so that the model's keys are theirs.
const MODEL_TAG: u16 = 0x2a;

struct Model {
    capacity: usize,
    alpha: f64,
    slots: Vec<Option<(u64, f64)>>,
    inserted: u64,
    running_max: f64,
    issued: Vec<Key>,
}

impl Model {
    fn stored(&self, raw: f64) -> f64 {
        if raw == 0.0 {
            0.0
        } else {
            raw.powf(self.alpha)
        }
    }
    fn insert(&mut self, raw: Option<f64>) -> Key {
        let generation = self.inserted;
        let index = (generation % self.capacity as u64) as usize;
        let p = match raw {
            Some(r) => {
                let s = self.stored(r);
                self.running_max = self.running_max.max(s);
                s
            }
            None => self.running_max,
        };
        self.slots[index] = Some((generation, p));
        self.inserted += 1;
        let key = Key::new(MODEL_TAG, index, generation);
        self.issued.push(key);
        key
    }
    fn priorities(&self) -> Vec<f64> {
        self.slots
            .iter()
            .map(|s| s.map_or(0.0, |(_, p)| p))
            .collect()
    }
    fn total(&self) -> f64 {
        self.priorities().iter().sum()
    }
    fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
    fn min_positive(&self) -> Option<f64> {
        self.priorities()
            .into_iter()
            .filter(|&p| p > 0.0)
            .reduce(f64::min)
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= REL_TOL * a.abs().max(b.abs()).max(1e-300)
}

fn run(k: usize, capacity: usize, alpha: f64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let schema = Schema::new().column("v", DType::I64, 2);
    let config = Config::builder(capacity, schema)
        .fanout(k)
        .alpha(alpha)
        .key_tag(MODEL_TAG)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::new(config).unwrap();
    let mut model = Model {
        capacity,
        alpha,
        slots: vec![None; capacity],
        inserted: 0,
        running_max: 1.0,
        issued: Vec::new(),
    };
    let exact = alpha != 0.6;
    for op in ops {
        match op {
            Op::Insert(p) => {
                let g = model.inserted as i64;
                let key = buf.insert(&[(&[g, -g]).into()], p.map(f64::from)).unwrap();
                prop_assert_eq!(key, model.insert(p.map(f64::from)));
            }
            Op::InsertBatch(ps) => {
                let n = ps.len();
                let g = model.inserted as i64;
                let data: Vec<i64> = (0..n as i64).flat_map(|i| [g + i, -(g + i)]).collect();
                // One priority list for the whole batch: all given, or none.
                let given = ps.iter().all(Option::is_some);
                let raw: Vec<f64> = ps.iter().map(|p| p.map_or(0.0, f64::from)).collect();
                let keys = buf
                    .insert_batch(&[(&data).into()], given.then_some(&raw[..]))
                    .unwrap();
                let expected: Vec<Key> = raw
                    .iter()
                    .map(|&r| model.insert(given.then_some(r)))
                    .collect();
                prop_assert_eq!(keys, expected);
            }
            Op::Update(picks) => {
                if model.issued.is_empty() {
                    continue;
                }
                let keys: Vec<Key> = picks
                    .iter()
                    .map(|(c, _)| model.issued[c % model.issued.len()])
                    .collect();
                let raw: Vec<f64> = picks.iter().map(|&(_, p)| f64::from(p)).collect();
                let report = buf.update_priorities(&keys, &raw).unwrap();
                let (mut applied, mut stale) = (0, 0);
                for (key, &r) in keys.iter().zip(&raw) {
                    match model.slots[key.index] {
                        Some((g, _)) if g == key.insertion() => {
                            let s = model.stored(r);
                            model.running_max = model.running_max.max(s);
                            model.slots[key.index] = Some((g, s));
                            applied += 1;
                        }
                        _ => stale += 1,
                    }
                }
                prop_assert_eq!((report.applied, report.stale), (applied, stale));
            }
            Op::Delete(picks) => {
                if model.issued.is_empty() {
                    continue;
                }
                let keys: Vec<Key> = picks
                    .iter()
                    .map(|c| model.issued[c % model.issued.len()])
                    .collect();
                let report = buf.delete(&keys).unwrap();
                let (mut applied, mut stale) = (0, 0);
                for key in &keys {
                    match model.slots[key.index] {
                        Some((g, _)) if g == key.insertion() => {
                            model.slots[key.index] = None;
                            applied += 1;
                        }
                        _ => stale += 1,
                    }
                }
                prop_assert_eq!((report.applied, report.stale), (applied, stale));
                for key in &keys {
                    prop_assert_eq!(
                        buf.key(key.index).unwrap().is_some(),
                        model.slots[key.index].is_some()
                    );
                }
            }
            Op::Uniform(batch, seed) => {
                let mut rng = SmallRng::seed_from_u64(seed);
                let result = buf.sample(batch, 0.0, SampleMode::Uniform, &mut rng);
                if model.len() == 0 {
                    prop_assert_eq!(result, Err(kary_replay::Error::Empty));
                    continue;
                }
                let s = result.unwrap();
                for (j, &i) in s.indices.iter().enumerate() {
                    let Some((g, _)) = model.slots[i] else {
                        return Err(TestCaseError::fail(format!("uniform drew empty slot {i}")));
                    };
                    prop_assert_eq!(s.keys[j], Key::new(MODEL_TAG, i, g));
                    prop_assert_eq!(s.probabilities[j], 1.0 / model.len() as f64);
                }
            }
            Op::Sample {
                batch,
                seed,
                beta_tenths,
                stratified,
                batch_norm,
            } => {
                let beta = f64::from(beta_tenths) / 10.0;
                let mode = if stratified {
                    SampleMode::Stratified
                } else {
                    SampleMode::Independent
                };
                let mut rng = SmallRng::seed_from_u64(seed);
                let result = buf.sample(batch, beta, mode, &mut rng);
                if model.len() == 0 {
                    prop_assert_eq!(result, Err(kary_replay::Error::Empty));
                    continue;
                }
                let Some(pmin) = model.min_positive() else {
                    prop_assert_eq!(result, Err(kary_replay::Error::ZeroTotalPriority));
                    continue;
                };
                let s = result.unwrap();
                let ps = model.priorities();
                let total = model.total();
                let batch_min = s
                    .indices
                    .iter()
                    .map(|&i| ps[i])
                    .fold(f64::INFINITY, f64::min);
                let reference = if batch_norm { batch_min } else { pmin };
                for (j, &i) in s.indices.iter().enumerate() {
                    prop_assert!(
                        i < capacity && ps[i] > 0.0,
                        "sampled {} with p={}",
                        i,
                        ps[i]
                    );
                    let (g, _) = model.slots[i].unwrap();
                    prop_assert_eq!(s.keys[j], Key::new(MODEL_TAG, i, g));
                    prop_assert_eq!(s.priorities[j], ps[i]);
                    prop_assert!(close(s.probabilities[j], ps[i] / total));
                    if !batch_norm {
                        let w = (ps[i] / reference).powf(-beta);
                        prop_assert!(close(s.weights[j], w), "{} vs {}", s.weights[j], w);
                        prop_assert!(s.weights[j] <= 1.0 && s.weights[j] > 0.0);
                    }
                }
                prop_assert_eq!(
                    &s.columns[0],
                    &kary_replay::ColumnData::I64(
                        s.keys
                            .iter()
                            .flat_map(|k| [k.insertion() as i64, -(k.insertion() as i64)])
                            .collect()
                    )
                );
            }
            Op::Prefix(fracs) => {
                let ps = model.priorities();
                let total = model.total();
                if exact {
                    prop_assert_eq!(buf.total_priority(), total);
                } else {
                    prop_assert!(close(buf.total_priority(), total));
                }
                if model.min_positive().is_none() {
                    prop_assert_eq!(buf.tree().find_prefix(0.0), None);
                    continue;
                }
                for f in fracs {
                    let x = total * f64::from(f) / f64::from(u16::MAX);
                    let got = buf.tree().find_prefix(x).unwrap();
                    prop_assert!(got < capacity && ps[got] > 0.0);
                    let before: f64 = ps[..got].iter().sum();
                    let through = before + ps[got];
                    if exact {
                        // The smallest i with prefix(i) > x, or the last positive leaf.
                        let expected = (0..capacity)
                            .find(|&i| ps[i] > 0.0 && ps[..=i].iter().sum::<f64>() > x)
                            .unwrap_or_else(|| ps.iter().rposition(|&p| p > 0.0).unwrap());
                        prop_assert_eq!(got, expected, "x={} ps={:?}", x, ps);
                    } else {
                        let tol = REL_TOL * total;
                        prop_assert!(before <= x + tol && (through > x - tol || x >= total - tol));
                    }
                }
            }
            Op::Clear => {
                buf.clear();
                for s in model.slots.iter_mut() {
                    *s = None;
                }
                model.running_max = 1.0;
            }
        }
        prop_assert_eq!(buf.len(), model.len());
        for i in 0..capacity {
            prop_assert_eq!(
                buf.priority(i).unwrap(),
                model.slots[i].map_or(0.0, |(_, p)| p)
            );
        }
    }
    let c = buf.tree().check();
    prop_assert!(c.extrema_exact);
    if exact {
        prop_assert!(c.exact, "{:?}", c);
    }
    Ok(())
}

fn capacity_for(k: usize) -> impl Strategy<Value = usize> {
    prop_oneof![4 => 1..=3 * k + 1, 1 => prop::sample::select(vec![1000usize, 4097])]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn buffer_matches_reference(
        (k, capacity) in prop::sample::select(Fanout::ALL.to_vec())
            .prop_flat_map(|f| (Just(f.get()), capacity_for(f.get()))),
        alpha in prop::sample::select(vec![0.0, 0.6, 1.0, 2.0]),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run(k, capacity, alpha, ops)?;
    }
}

/// Batch weight normalization against the model, separately (needs its own config).
#[test]
fn batch_normalized_weights() {
    let schema = Schema::new().column("v", DType::U8, 1);
    let config = Config::builder(64, schema)
        .alpha(1.0)
        .weight_normalization(WeightNormalization::Batch)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::new(config).unwrap();
    let ps: Vec<f64> = (0..64).map(|i| 1.0 + i as f64).collect();
    buf.insert_batch(&[(&[0u8; 64]).into()], Some(&ps)).unwrap();
    let mut rng = SmallRng::seed_from_u64(9);
    for beta in [0.0, 0.4, 1.0] {
        let s = buf
            .sample(16, beta, SampleMode::Independent, &mut rng)
            .unwrap();
        let bmin = s.priorities.iter().copied().fold(f64::INFINITY, f64::min);
        let mut max_w: f64 = 0.0;
        for (w, p) in s.weights.iter().zip(&s.priorities) {
            let expected = (p / bmin).powf(-beta);
            assert!(close(*w, expected), "{w} vs {expected}");
            max_w = max_w.max(*w);
        }
        assert_eq!(max_w, 1.0);
    }
}
