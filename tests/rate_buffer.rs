//! Rate limits held by the buffers ([`Config::rate_limit`]): every concurrent variant admits
//! inserts and samples through its limiter, a refused or failed call spends nothing, close
//! wakes blocked callers, writers count at the flush, checkpoints keep the counts, and
//! actors and learners on real threads hold the ratio.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kary_replay::checkpoint::Load;
use kary_replay::rate::{Batches, RateLimit, RateStats};
use kary_replay::{
    Checkpoint, ColumnSliceMut, ConcurrentBuffer, Config, DType, Draw, Error, GlobalLockBuffer,
    GlobalSpinLockBuffer, LockFreeBuffer, ReplayBuffer, Rows, SampleBatch, SampleMode, Schema,
    SplitLockBuffer, Wait,
};
use rand::{rngs::SmallRng, SeedableRng};

const STRATIFIED: SampleMode = SampleMode::Stratified;

fn schema() -> Schema {
    Schema::new().column("x", DType::F32, 2)
}

/// 2 samples per insert from 4 items on, within +-8 samples; inserts of up to 4, samples of
/// up to 4.
fn config(capacity: usize) -> Config {
    Config::builder(capacity, schema())
        .rate_limit(
            RateLimit::sample_to_insert_ratio(2.0, 4, 8.0),
            Batches {
                insert: 4,
                sample: 4,
            },
        )
        .build()
        .unwrap()
}

fn rows(n: usize) -> Vec<f32> {
    (0..2 * n).map(|i| i as f32).collect()
}

fn counts(stats: Option<RateStats>) -> (u64, u64) {
    let s = stats.expect("a rate limiter");
    (s.inserts, s.samples)
}

/// Every check of one variant that needs no second thread.
fn admits_and_spends_nothing_on_failure<B: ConcurrentBuffer>() {
    let buffer = B::new(config(64)).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    assert!(buffer.rate_limiter().is_some());
    // Before min_size: samples are refused.
    assert!(matches!(
        buffer.try_sample(1, 0.4, STRATIFIED, &mut rng),
        Err(Error::Empty | Error::RateLimited(_))
    ));
    buffer.insert(&[rows(1)[..].into()], None).unwrap();
    assert!(matches!(
        buffer.try_sample(1, 0.4, STRATIFIED, &mut rng),
        Err(Error::RateLimited(_))
    ));
    buffer
        .insert_batch(&[rows(3)[..].into()], Some(&[1.0, 2.0, 3.0]))
        .unwrap();
    assert_eq!(counts(buffer.rate_stats()), (4, 0));

    // Bad input spends nothing and changes nothing.
    let before = buffer.rate_stats();
    assert!(buffer
        .insert_batch(&[rows(2)[..].into()], Some(&[1.0, f64::NAN]))
        .is_err());
    assert!(buffer.insert(&[rows(2)[..].into()], None).is_err());
    assert!(buffer
        .try_insert_batch(&[rows(5)[..].into()], None)
        .is_err()); // past Batches
    assert!(buffer.sample(0, 0.4, STRATIFIED, &mut rng).is_err());
    assert!(buffer.sample(2, f64::NAN, STRATIFIED, &mut rng).is_err());
    assert!(buffer.sample(5, 0.4, STRATIFIED, &mut rng).is_err()); // past Batches
    let mut wrong = [0f32; 3];
    let mut out = SampleBatch::default();
    assert!(buffer
        .sample_columns_into(
            2,
            0.4,
            STRATIFIED,
            &mut rng,
            &mut out,
            &mut [ColumnSliceMut::from(&mut wrong[..])]
        )
        .is_err());
    assert_eq!(buffer.rate_stats(), before);
    assert_eq!(buffer.len(), 4);

    // The range is 2 * 4 +- 8 = [0, 16]; 4 inserts put the difference at 8: 8 samples.
    for _ in 0..2 {
        buffer.try_sample(4, 0.4, STRATIFIED, &mut rng).unwrap();
    }
    assert!(matches!(
        buffer.try_sample(1, 0.4, STRATIFIED, &mut rng),
        Err(Error::RateLimited(_))
    ));
    let waited = Instant::now();
    assert!(matches!(
        buffer.sample_timeout(1, 0.4, STRATIFIED, &mut rng, Duration::from_millis(30)),
        Err(Error::Timeout { .. })
    ));
    assert!(waited.elapsed() >= Duration::from_millis(30));
    assert_eq!(counts(buffer.rate_stats()), (4, 8));
    // Up to 16: 8 more items, then inserts wait.
    buffer.insert_batch(&[rows(4)[..].into()], None).unwrap();
    buffer.insert_batch(&[rows(4)[..].into()], None).unwrap();
    assert!(matches!(
        buffer.try_insert(&[rows(1)[..].into()], None),
        Err(Error::RateLimited(_))
    ));
    assert!(matches!(
        buffer.insert_timeout(&[rows(1)[..].into()], None, Duration::from_millis(10)),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(buffer.len(), 12);
    assert_eq!(counts(buffer.rate_stats()), (12, 8));

    // A sample admitted and then failing (every priority 0) gives its admission back.
    let all: Vec<_> = (0..12).filter_map(|i| buffer.key(i).unwrap()).collect();
    buffer.update_priorities(&all, &[0.0; 12]).unwrap();
    assert_eq!(
        buffer.sample(4, 0.4, STRATIFIED, &mut rng).unwrap_err(),
        Error::ZeroTotalPriority
    );
    assert_eq!(counts(buffer.rate_stats()), (12, 8));
    buffer.update_priorities(&all, &[1.0; 12]).unwrap();

    // Every sampling form admits through the same path.
    let mut out = SampleBatch::default();
    let draw = Draw::Batch {
        batch: 2,
        beta: 0.4,
        mode: STRATIFIED,
    };
    buffer
        .sample_waiting(draw, Rows::Skip, &mut rng, &mut out, Wait::Never)
        .unwrap();
    buffer
        .sample_at_into(&[0.5, 0.1], &mut rng, &mut out)
        .unwrap();
    assert_eq!(counts(buffer.rate_stats()), (12, 12));

    // Close: later calls of both kinds are refused, reads and updates go on.
    buffer.close();
    assert_eq!(
        buffer.insert(&[rows(1)[..].into()], None).unwrap_err(),
        Error::Closed
    );
    assert_eq!(
        buffer.sample(1, 0.4, STRATIFIED, &mut rng).unwrap_err(),
        Error::Closed
    );
    assert!(buffer.update_priorities(&all, &[2.0; 12]).is_ok());
    assert!(buffer.rate_stats().unwrap().closed);
}

#[test]
fn every_variant_admits_through_its_limiter_and_spends_nothing_on_failure() {
    admits_and_spends_nothing_on_failure::<GlobalLockBuffer>();
    admits_and_spends_nothing_on_failure::<GlobalSpinLockBuffer>();
    admits_and_spends_nothing_on_failure::<SplitLockBuffer>();
    admits_and_spends_nothing_on_failure::<LockFreeBuffer>();
}

#[test]
fn the_sequential_buffer_refuses_a_limit_and_an_unlimited_buffer_has_none() {
    let err = ReplayBuffer::new(config(8)).unwrap_err();
    assert!(err.to_string().contains("rate_limit"), "{err}");
    let plain = SplitLockBuffer::new(Config::builder(8, schema()).build().unwrap()).unwrap();
    assert!(plain.rate_limiter().is_none() && plain.rate_stats().is_none());
    plain.close(); // nothing to close: inserts go on
    plain.try_insert(&[rows(1)[..].into()], None).unwrap();
}

#[test]
fn a_limit_that_would_deadlock_is_refused_by_the_config() {
    let err = Config::builder(64, schema())
        .rate_limit(
            RateLimit::sample_to_insert_ratio(2.0, 4, 1.0),
            Batches {
                insert: 4,
                sample: 4,
            },
        )
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("deadlock"), "{err}");
}

fn close_wakes_blocked_callers<B: ConcurrentBuffer>() {
    let buffer = B::new(config(64)).unwrap();
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(2);
            buffer.sample(1, 0.4, STRATIFIED, &mut rng).map(drop)
        });
        let filler = s.spawn(|| {
            // 4 free inserts (difference 8) and 4 more reach the top of the range, 16 (15
            // after the sampler's one item); the 9th waits.
            for _ in 0..8 {
                buffer.insert(&[rows(1)[..].into()], None)?;
            }
            buffer.insert(&[rows(1)[..].into()], None).map(drop)
        });
        // The sampler may have been admitted once the 4th item arrived; wait for the
        // inserter to block.
        let deadline = Instant::now() + Duration::from_secs(10);
        while buffer.rate_stats().unwrap().insert_waiters == 0 {
            assert!(Instant::now() < deadline, "the inserter never blocked");
            std::thread::sleep(Duration::from_millis(1));
        }
        buffer.close();
        assert_eq!(filler.join().unwrap(), Err(Error::Closed));
        assert!(matches!(
            sampler.join().unwrap(),
            Ok(()) | Err(Error::Closed)
        ));
    });
    assert_eq!(buffer.len(), 8);
}

#[test]
fn close_wakes_a_blocked_inserter_on_every_variant() {
    close_wakes_blocked_callers::<GlobalLockBuffer>();
    close_wakes_blocked_callers::<SplitLockBuffer>();
    close_wakes_blocked_callers::<LockFreeBuffer>();
}

#[test]
fn a_blocked_sample_does_not_hold_the_global_lock() {
    // If a waiting sampler held the lock, the insert it waits for could never run.
    let buffer = GlobalLockBuffer::new(config(64)).unwrap();
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(3);
            buffer.sample(4, 0.4, STRATIFIED, &mut rng).map(|b| b.len())
        });
        std::thread::sleep(Duration::from_millis(20));
        buffer.insert_batch(&[rows(4)[..].into()], None).unwrap();
        assert_eq!(sampler.join().unwrap(), Ok(4));
    });
}

#[test]
fn a_writer_counts_at_the_flush_and_its_batch_must_fit() {
    let buffer = LockFreeBuffer::new(config(64)).unwrap();
    let err = buffer.writer(5).unwrap_err();
    assert!(err.to_string().contains("Batches::insert"), "{err}");
    let mut writer = buffer.writer(4).unwrap();
    for _ in 0..3 {
        writer.push(&[rows(1)[..].into()], None).unwrap();
    }
    assert_eq!(counts(buffer.rate_stats()), (0, 0));
    writer.push(&[rows(1)[..].into()], None).unwrap();
    assert_eq!(counts(buffer.rate_stats()), (4, 0));
    writer.push(&[rows(1)[..].into()], None).unwrap();
    buffer.close();
    // A flush after close is refused and keeps its item staged; dropping does not wait.
    assert_eq!(writer.flush().unwrap_err(), Error::Closed);
    assert_eq!(writer.staged(), 1);
    drop(writer);
    assert_eq!(buffer.len(), 4);
}

fn checkpoint_keeps_the_counts<B: ConcurrentBuffer + Load>(dir: &std::path::Path) {
    let loaded = B::load(dir).unwrap();
    assert_eq!(counts(loaded.rate_stats()), (8, 12));
    assert_eq!(loaded.config().rate_limit(), config(64).rate_limit());
    let mut rng = SmallRng::seed_from_u64(4);
    // The difference is 8 * 2 - 12 = 4; the range's lower end is 0: 4 more.
    loaded.try_sample(4, 0.4, STRATIFIED, &mut rng).unwrap();
    assert!(matches!(
        loaded.try_sample(1, 0.4, STRATIFIED, &mut rng),
        Err(Error::RateLimited(_))
    ));
}

#[test]
fn a_checkpoint_keeps_the_limit_and_its_counts_in_every_variant() {
    let root = std::env::temp_dir().join(format!("kr-rate-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (i, save) in [
        Box::new(|d: &std::path::Path| save_from::<SplitLockBuffer>(d))
            as Box<dyn Fn(&std::path::Path)>,
        Box::new(|d: &std::path::Path| save_from::<GlobalLockBuffer>(d)),
    ]
    .iter()
    .enumerate()
    {
        let dir = root.join(format!("ckpt-{i}"));
        save(&dir);
        checkpoint_keeps_the_counts::<GlobalLockBuffer>(&dir);
        checkpoint_keeps_the_counts::<GlobalSpinLockBuffer>(&dir);
        checkpoint_keeps_the_counts::<SplitLockBuffer>(&dir);
        checkpoint_keeps_the_counts::<LockFreeBuffer>(&dir);
        // The sequential buffer loads the items without the limit.
        let sequential = ReplayBuffer::load(&dir).unwrap();
        assert_eq!(
            (sequential.len(), sequential.config().rate_limit()),
            (8, None)
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

fn save_from<B: ConcurrentBuffer + Checkpoint>(dir: &std::path::Path) {
    let buffer = B::new(config(64)).unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    buffer.insert_batch(&[rows(4)[..].into()], None).unwrap();
    buffer.insert_batch(&[rows(4)[..].into()], None).unwrap();
    for _ in 0..3 {
        buffer.sample(4, 0.4, STRATIFIED, &mut rng).unwrap();
    }
    assert_eq!(counts(buffer.rate_stats()), (8, 12));
    buffer.save(dir).unwrap();
}

fn actors_and_learners_hold_the_ratio<B: ConcurrentBuffer>() {
    // 4 samples per insert within +-64 samples, after 256 items.
    let limit = RateLimit::sample_to_insert_ratio(4.0, 256, 64.0);
    let batches = Batches {
        insert: 16,
        sample: 32,
    };
    let config = Config::builder(4096, schema())
        .rate_limit(limit, batches)
        .build()
        .unwrap();
    let buffer = B::new(config).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for actor in 0..2 {
            let (buffer, stop) = (&buffer, &stop);
            s.spawn(move || {
                let mut writer = buffer.writer(16).unwrap();
                let row = [actor as f32, 0.0];
                while !stop.load(Ordering::Relaxed) {
                    match writer.push(&[row[..].into()], None) {
                        Ok(_) => {}
                        Err(Error::Closed) => return,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        for learner in 0..2 {
            let buffer = &buffer;
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(learner);
                loop {
                    match buffer.sample(32, 0.4, STRATIFIED, &mut rng) {
                        Ok(batch) => {
                            let report = buffer.update_priorities(&batch.keys, &vec![1.5; 32]);
                            report.unwrap();
                        }
                        Err(Error::Closed) => return,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        // Until the learners have sampled 20,000 items, then stop everyone.
        let deadline = Instant::now() + Duration::from_secs(60);
        while buffer.rate_stats().unwrap().samples < 20_000 {
            assert!(Instant::now() < deadline, "{:?}", buffer.rate_stats());
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, Ordering::Relaxed);
        buffer.close();
    });
    let s = buffer.rate_stats().unwrap();
    assert_eq!(s.diff, s.inserts as f64 * 4.0 - s.samples as f64);
    // Within the range around 4 * 256 = 1024: [960, 1088].
    assert!((960.0..=1088.0).contains(&s.diff), "{s:?}");
    // Every admitted insert is in the buffer (flushes after close were refused whole).
    assert_eq!(buffer.inserted(), s.inserts);
    assert_eq!((s.insert_waiters, s.sample_waiters), (0, 0));
}

#[test]
fn actors_and_learners_on_threads_hold_the_ratio() {
    actors_and_learners_hold_the_ratio::<GlobalLockBuffer>();
    actors_and_learners_hold_the_ratio::<SplitLockBuffer>();
    actors_and_learners_hold_the_ratio::<LockFreeBuffer>();
}

#[test]
fn a_sharded_buffer_holds_one_limit_for_the_union_and_its_checkpoint_keeps_it() {
    use kary_replay::shard::{Coordinator, ShardedBuffer};
    let sharded = ShardedBuffer::<SplitLockBuffer>::new(2, config(32)).unwrap();
    assert!(sharded.shards().iter().all(|s| s.rate_limiter().is_none()));
    let (mut coordinator, mut out) = (Coordinator::new(), SampleBatch::default());
    let mut rng = SmallRng::seed_from_u64(9);
    // Inserts into both shards count against one limiter: 2 + 2 items reach min_size 4.
    sharded
        .insert_batch(0, &[rows(2)[..].into()], None)
        .unwrap();
    assert!(matches!(
        sharded.sample_waiting(
            &mut coordinator,
            1,
            0.4,
            STRATIFIED,
            &mut rng,
            &mut out,
            Wait::Never
        ),
        Err(Error::RateLimited(_))
    ));
    sharded
        .insert_batch(1, &[rows(2)[..].into()], None)
        .unwrap();
    sharded
        .sample_into(&mut coordinator, 4, 0.4, STRATIFIED, &mut rng, &mut out)
        .unwrap();
    sharded
        .sample_into(&mut coordinator, 4, 0.4, STRATIFIED, &mut rng, &mut out)
        .unwrap();
    assert!(matches!(
        sharded.sample_waiting(
            &mut coordinator,
            1,
            0.4,
            STRATIFIED,
            &mut rng,
            &mut out,
            Wait::Never
        ),
        Err(Error::RateLimited(_))
    ));
    // Bad input spends nothing: a wrong shard, a NaN priority.
    assert!(sharded
        .insert_batch(2, &[rows(1)[..].into()], None)
        .is_err());
    assert!(sharded
        .insert(0, &[rows(1)[..].into()], Some(f64::NAN))
        .is_err());
    assert!(sharded.insert(0, &[rows(2)[..].into()], None).is_err());
    assert_eq!(counts(sharded.rate_stats()), (4, 8));
    sharded.insert(0, &[rows(1)[..].into()], None).unwrap();
    assert_eq!(counts(sharded.rate_stats()), (5, 8));

    let dir = std::env::temp_dir().join(format!("kr-rate-sharded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    sharded.save(&dir).unwrap();
    let back = ShardedBuffer::<LockFreeBuffer>::load(&dir).unwrap();
    assert_eq!(counts(back.rate_stats()), (5, 8));
    assert_eq!(
        back.rate_limiter().map(|r| (r.limit(), r.batches())),
        config(32).rate_limit()
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // Close wakes a sampler blocked on the union.
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let (mut coordinator, mut out) = (Coordinator::new(), SampleBatch::default());
            let mut rng = SmallRng::seed_from_u64(10);
            sharded.sample_waiting(
                &mut coordinator,
                4,
                0.4,
                STRATIFIED,
                &mut rng,
                &mut out,
                Wait::Block,
            )
        });
        while sharded.rate_stats().unwrap().sample_waiters == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        sharded.close();
        assert_eq!(waiter.join().unwrap(), Err(Error::Closed));
    });

    // Shards that hold limits of their own are refused: the union holds one.
    let limited = vec![
        SplitLockBuffer::new(config(8).clone()).unwrap(),
        SplitLockBuffer::new(config(8)).unwrap(),
    ];
    let err = ShardedBuffer::from_shards(limited).unwrap_err();
    assert!(err.to_string().contains("rate limit of its own"), "{err}");
}
