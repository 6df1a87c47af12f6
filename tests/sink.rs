//! Sampling straight into caller memory : `sample_columns_into` on every
//! buffer writes each sampled row into the caller's columns, the same rows `sample_into`
//! gathers; bad destinations are refused with nothing written anywhere; the index-only
//! sample copies no column.

use kary_replay::{
    ColumnData, ColumnSliceMut, ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer,
    LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, SeedableRng};

const B: usize = 32;

fn config() -> Config {
    Config::builder(
        64,
        Schema::new()
            .column("obs", DType::F32, 3)
            .column("action", DType::I64, 1)
            .column("done", DType::Bool, 1),
    )
    .alpha(1.0)
    .build()
    .unwrap()
}

fn variants() -> Vec<(&'static str, Box<dyn ConcurrentBuffer>)> {
    vec![
        (
            "GlobalLock",
            Box::new(GlobalLockBuffer::new(config()).unwrap()),
        ),
        (
            "SplitLock",
            Box::new(SplitLockBuffer::new(config()).unwrap()),
        ),
        ("LockFree", Box::new(LockFreeBuffer::new(config()).unwrap())),
    ]
}

/// Item `i`: obs (i, i+0.5, -i), action 3i, done i odd.
fn item(i: usize) -> ([f32; 3], i64, bool) {
    let x = i as f32;
    ([x, x + 0.5, -x], 3 * i as i64, i % 2 == 1)
}

fn fill(buffer: &dyn ConcurrentBuffer, n: usize) {
    for i in 0..n {
        let (obs, action, done) = item(i);
        buffer
            .insert(
                &[(&obs).into(), (&[action]).into(), (&[done]).into()],
                Some(1.0 + i as f64),
            )
            .unwrap();
    }
}

struct Memory {
    obs: Vec<f32>,
    action: Vec<i64>,
    done: Vec<bool>,
}

impl Memory {
    fn new() -> Memory {
        Memory {
            obs: vec![f32::NAN; B * 3],
            action: vec![-1; B],
            done: vec![true; B],
        }
    }
    fn columns(&mut self) -> [ColumnSliceMut<'_>; 3] {
        [
            (&mut self.obs[..]).into(),
            (&mut self.action[..]).into(),
            (&mut self.done[..]).into(),
        ]
    }
}

#[test]
fn rows_land_in_caller_memory_as_sample_into_gathers_them() {
    for (name, buffer) in variants() {
        fill(&*buffer, 40);
        let mut memory = Memory::new();
        let mut out = SampleBatch::default();
        let (mut rng_a, mut rng_b) = (SmallRng::seed_from_u64(9), SmallRng::seed_from_u64(9));
        buffer
            .sample_columns_into(
                B,
                0.4,
                SampleMode::Stratified,
                &mut rng_a,
                &mut out,
                &mut memory.columns(),
            )
            .unwrap();
        assert!(out.columns.is_empty(), "{name}: out's columns are not used");
        for (row, &index) in out.indices.iter().enumerate() {
            let (obs, action, done) = item(index);
            assert_eq!(&memory.obs[row * 3..row * 3 + 3], &obs, "{name}");
            assert_eq!(memory.action[row], action, "{name}");
            assert_eq!(memory.done[row], done, "{name}");
            assert_eq!(out.keys[row].index, index, "{name}");
        }
        // The same seed through sample_into: the same items, rows and weights.
        let gathered = buffer
            .sample(B, 0.4, SampleMode::Stratified, &mut rng_b)
            .unwrap();
        assert_eq!(gathered.keys, out.keys, "{name}");
        assert_eq!(gathered.weights, out.weights, "{name}");
        assert_eq!(
            gathered.columns[0],
            ColumnData::F32(memory.obs.clone()),
            "{name}"
        );
        assert_eq!(
            gathered.columns[1],
            ColumnData::I64(memory.action.clone()),
            "{name}"
        );
        assert_eq!(
            gathered.columns[2],
            ColumnData::Bool(memory.done.clone()),
            "{name}"
        );
    }
}

#[test]
fn the_sequential_buffer_samples_into_caller_memory_too() {
    let mut buffer = ReplayBuffer::new(config()).unwrap();
    for i in 0..40 {
        let (obs, action, done) = item(i);
        buffer
            .insert(&[(&obs).into(), (&[action]).into(), (&[done]).into()], None)
            .unwrap();
    }
    let mut memory = Memory::new();
    let mut out = SampleBatch::default();
    let mut rng = SmallRng::seed_from_u64(2);
    buffer
        .sample_columns_into(
            B,
            1.0,
            SampleMode::Independent,
            &mut rng,
            &mut out,
            &mut memory.columns(),
        )
        .unwrap();
    for (row, &index) in out.indices.iter().enumerate() {
        let (obs, action, done) = item(index);
        assert_eq!(&memory.obs[row * 3..row * 3 + 3], &obs);
        assert_eq!((memory.action[row], memory.done[row]), (action, done));
    }
}

#[test]
fn bad_destinations_are_refused_and_nothing_is_written() {
    for (name, buffer) in variants() {
        fill(&*buffer, 10);
        let mut rng = SmallRng::seed_from_u64(1);
        // A warm batch whose content must survive every refused call.
        let mut out = buffer
            .sample(4, 0.4, SampleMode::Stratified, &mut rng)
            .unwrap();
        let before = out.clone();
        let mut obs = vec![7f32; B * 3];
        let mut short_obs = vec![7f32; B * 3 - 1];
        let mut action = vec![7i64; B];
        let mut action_i32 = [7i32; B];
        let mut done = [false; B];
        let mut refuse = |columns: &mut [ColumnSliceMut<'_>], expected: fn(&Error) -> bool| {
            let e = buffer
                .sample_columns_into(B, 0.4, SampleMode::Stratified, &mut rng, &mut out, columns)
                .unwrap_err();
            assert!(expected(&e), "{name}: {e}");
        };
        refuse(
            &mut [(&mut obs[..]).into(), (&mut action[..]).into()],
            |e| matches!(e, Error::ColumnCount { .. }),
        );
        refuse(
            &mut [
                (&mut short_obs[..]).into(),
                (&mut action[..]).into(),
                (&mut done[..]).into(),
            ],
            |e| matches!(e, Error::ColumnLength { .. }),
        );
        refuse(
            &mut [
                (&mut obs[..]).into(),
                (&mut action_i32[..]).into(),
                (&mut done[..]).into(),
            ],
            |e| matches!(e, Error::ColumnType { .. }),
        );
        // Bad values come first, whatever the destinations.
        let e = buffer
            .sample_columns_into(0, 0.4, SampleMode::Stratified, &mut rng, &mut out, &mut [])
            .unwrap_err();
        assert_eq!(e, Error::ZeroBatch, "{name}");
        assert_eq!(out, before, "{name}: out changed");
        assert!(obs.iter().chain(&short_obs).all(|&x| x == 7.0), "{name}");
        assert!(action.iter().all(|&x| x == 7) && action_i32.iter().all(|&x| x == 7));
        assert!(done.iter().all(|&x| !x), "{name}");
        // An empty buffer: refused before sampling, memory untouched.
        buffer.clear();
        let mut memory = Memory::new();
        let e = buffer
            .sample_columns_into(
                B,
                0.4,
                SampleMode::Stratified,
                &mut rng,
                &mut out,
                &mut memory.columns(),
            )
            .unwrap_err();
        assert_eq!(e, Error::Empty, "{name}");
        assert_eq!(out, before, "{name}");
        assert!(memory.action.iter().all(|&a| a == -1), "{name}");
    }
}

#[test]
fn index_only_samples_leave_the_columns_alone() {
    for (name, buffer) in variants() {
        fill(&*buffer, 20);
        let mut rng = SmallRng::seed_from_u64(4);
        let mut out = buffer
            .sample(2, 0.4, SampleMode::Stratified, &mut rng)
            .unwrap();
        let columns = out.columns.clone();
        buffer
            .sample_indices_into(B, 0.4, SampleMode::Independent, &mut rng, &mut out)
            .unwrap();
        assert_eq!(out.len(), B, "{name}");
        assert_eq!(out.columns, columns, "{name}: the columns were touched");
        assert!(out.priorities.iter().all(|&p| p > 0.0), "{name}");
    }
}
