//! "No allocation once warm" : a counting global allocator watches a warm
//! `sample_into` and `update_priorities` on every buffer (the sequence buffer's windows, with
//! a stack, next observations and n-step returns, included), and a warm staged writer's
//! pushes and flushes on every concurrent buffer. One test in this file, so that no other test
//! thread allocates while it counts.

use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig};
use kary_replay::{
    ColumnSlice, ConcurrentBuffer, Config, DType, GlobalLockBuffer, LockFreeBuffer, ReplayBuffer,
    SampleBatch, SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, SeedableRng};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocations;

fn config() -> Config {
    Config::builder(
        4096,
        Schema::new()
            .column("obs", DType::F32, 4)
            .column("done", DType::Bool, 1),
    )
    .build()
    .unwrap()
}

fn learner_steps(
    sample: &mut dyn FnMut(&mut SampleBatch),
    update: &mut dyn FnMut(&SampleBatch, &[f64]),
) -> usize {
    let mut out = SampleBatch::default();
    let priorities = vec![0.5; 256];
    // Warm: both halves of the batch (it swaps with its spare) and every buffer inside.
    for _ in 0..3 {
        sample(&mut out);
        update(&out, &priorities);
    }
    allocations(|| {
        for _ in 0..100 {
            sample(&mut out);
            update(&out, &priorities);
        }
    })
}

fn fill<B: ConcurrentBuffer>(b: &B) {
    let obs = vec![1.0f32; 4 * 4096];
    let done = vec![false; 4096];
    b.insert_batch(
        &[ColumnSlice::from(&obs[..]), ColumnSlice::from(&done[..])],
        None,
    )
    .unwrap();
}

fn concurrent<B: ConcurrentBuffer>(mode: SampleMode) -> usize {
    let b = B::new(config()).unwrap();
    fill(&b);
    let mut rng = SmallRng::seed_from_u64(5);
    learner_steps(
        &mut |out| b.sample_into(256, 0.4, mode, &mut rng, out).unwrap(),
        &mut |out, p| {
            b.update_priorities(&out.keys, p).unwrap();
        },
    )
}

/// The learner that samples into its own memory (`sample_columns_into`).
fn concurrent_into_caller_memory<B: ConcurrentBuffer>() -> usize {
    let b = B::new(config()).unwrap();
    fill(&b);
    let mut rng = SmallRng::seed_from_u64(5);
    let (mut obs, mut done) = (vec![0f32; 256 * 4], vec![false; 256]);
    learner_steps(
        &mut |out| {
            let mut columns = [(&mut obs[..]).into(), (&mut done[..]).into()];
            b.sample_columns_into(
                256,
                0.4,
                SampleMode::Stratified,
                &mut rng,
                out,
                &mut columns,
            )
            .unwrap()
        },
        &mut |out, p| {
            b.update_priorities(&out.keys, p).unwrap();
        },
    )
}

/// A sequence buffer's learner step: 64 windows of 8 steps, 4 stacked frames, next
/// observations and 3-step returns, into its own batch and into the caller's memory.
fn sequence_windows(into_caller_memory: bool, mode: SampleMode) -> usize {
    let schema = Schema::new()
        .column("obs", DType::F32, 4)
        .column("reward", DType::F32, 1);
    let config = SequenceConfig::builder(2, 512, schema)
        .window(8)
        .stack("obs", 4)
        .next_of("obs")
        .nstep(3, 0.99, "reward")
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    for l in 0..2 {
        let mut lane = buffer.lane(l).unwrap();
        for step in 0..400 {
            let obs = [step as f32; 4];
            lane.push(&[(&obs[..]).into(), (&[1.0f32][..]).into()])
                .unwrap();
            if step % 100 == 99 {
                lane.end_episode(&[(&obs[..]).into()], false).unwrap();
            }
        }
    }
    let mut rng = SmallRng::seed_from_u64(5);
    let mut out = SequenceBatch::default();
    let (mut obs, mut reward) = (vec![0f32; 64 * 8 * 4 * 4], vec![0f32; 64 * 8]);
    let mut next = vec![0f32; 64 * 4 * 4];
    let priorities = vec![0.5; 64];
    let mut step = |out: &mut SequenceBatch| {
        if into_caller_memory {
            let mut columns = [(&mut obs[..]).into(), (&mut reward[..]).into()];
            let mut next = [(&mut next[..]).into()];
            buffer
                .sample_columns_into(64, 0.4, mode, &mut rng, out, &mut columns, &mut next)
                .unwrap();
        } else {
            buffer.sample_into(64, 0.4, mode, &mut rng, out).unwrap();
        }
        buffer.update_priorities(&out.keys, &priorities).unwrap();
    };
    for _ in 0..3 {
        step(&mut out);
    }
    allocations(|| {
        for _ in 0..100 {
            step(&mut out);
        }
    })
}

/// Pushes through a staged writer of 32 (default and explicit priorities, so that a kind
/// change flushes early too) once the writer has flushed a few times.
fn staged_writer<B: ConcurrentBuffer>() -> usize {
    let b = B::new(config()).unwrap();
    let mut writer = b.writer(32).unwrap();
    let (obs, done) = ([1.0f32; 4], [false]);
    let mut push = |i: usize| {
        let priority = (i % 50 >= 40).then_some(0.5);
        writer
            .push(
                &[ColumnSlice::from(&obs[..]), ColumnSlice::from(&done[..])],
                priority,
            )
            .unwrap();
    };
    for i in 0..200 {
        push(i);
    }
    allocations(|| {
        for i in 0..5000 {
            push(i);
        }
    })
}

#[test]
fn a_warm_learner_step_allocates_nothing_on_any_buffer() {
    // The counter sees an allocation (so a count of 0 below means something).
    assert_eq!(allocations(|| drop(std::hint::black_box(vec![1u8; 16]))), 1);
    let mut seq = ReplayBuffer::new(config()).unwrap();
    let obs = vec![1.0f32; 4 * 4096];
    let done = vec![false; 4096];
    seq.insert_batch(
        &[ColumnSlice::from(&obs[..]), ColumnSlice::from(&done[..])],
        None,
    )
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    let seq = std::cell::RefCell::new(seq);
    let mut sequential = |mode| {
        learner_steps(
            &mut |out| {
                seq.borrow()
                    .sample_into(256, 0.4, mode, &mut rng, out)
                    .unwrap()
            },
            &mut |out, p| {
                seq.borrow_mut().update_priorities(&out.keys, p).unwrap();
            },
        )
    };
    // Without replacement: 256 of 4096 items of equal priority repeat about 8 times a
    // batch, so the redraws' working space is warmed and used.
    let (stratified, without) = (SampleMode::Stratified, SampleMode::WithoutReplacement);
    let counts = [
        ("ReplayBuffer", sequential(stratified)),
        ("ReplayBuffer without replacement", sequential(without)),
        ("ReplayBuffer uniform", sequential(SampleMode::Uniform)),
        (
            "LockFree uniform",
            concurrent::<LockFreeBuffer>(SampleMode::Uniform),
        ),
        ("GlobalLock", concurrent::<GlobalLockBuffer>(stratified)),
        ("SplitLock", concurrent::<SplitLockBuffer>(stratified)),
        ("LockFree", concurrent::<LockFreeBuffer>(stratified)),
        (
            "SplitLock without replacement",
            concurrent::<SplitLockBuffer>(without),
        ),
        (
            "LockFree without replacement",
            concurrent::<LockFreeBuffer>(without),
        ),
        (
            "GlobalLock into caller memory",
            concurrent_into_caller_memory::<GlobalLockBuffer>(),
        ),
        (
            "SplitLock into caller memory",
            concurrent_into_caller_memory::<SplitLockBuffer>(),
        ),
        (
            "LockFree into caller memory",
            concurrent_into_caller_memory::<LockFreeBuffer>(),
        ),
        ("SequenceBuffer", sequence_windows(false, stratified)),
        (
            "SequenceBuffer into caller memory",
            sequence_windows(true, stratified),
        ),
        (
            "SequenceBuffer without replacement",
            sequence_windows(false, without),
        ),
    ];
    for (name, n) in counts {
        assert_eq!(n, 0, "{name}: {n} allocations in 100 warm learner steps");
    }
    let writers = [
        ("GlobalLock", staged_writer::<GlobalLockBuffer>()),
        ("SplitLock", staged_writer::<SplitLockBuffer>()),
        ("LockFree", staged_writer::<LockFreeBuffer>()),
    ];
    for (name, n) in writers {
        assert_eq!(n, 0, "{name}: {n} allocations in 5000 warm staged pushes");
    }
}
