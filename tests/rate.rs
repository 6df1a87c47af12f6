//! The rate limiter (`kary_replay::rate`): its admission decisions against Reverb's formulas
//! on random sequences, the configurations it refuses, timeouts and close on real threads,
//! counts restored from a checkpoint's numbers, and 8 threads that hold the ratio exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kary_replay::rate::{Batches, ErrorBuffer, RateLimit, RateLimiter};
use kary_replay::Error;
use proptest::prelude::*;

/// Reverb's `RateLimiter` (reverb/cc/rate_limiter.cc), as its formulas read, with no
/// deletes (our buffers evict only past `min_size <= capacity`).
struct Reverb {
    spi: f64,
    min_size: u64,
    min_diff: f64,
    max_diff: f64,
    inserts: u64,
    samples: u64,
}

impl Reverb {
    fn new(limit: RateLimit) -> Reverb {
        let (spi, min_size, min_diff, max_diff) = limit.reverb_parameters();
        Reverb {
            spi,
            min_size,
            min_diff,
            max_diff,
            inserts: 0,
            samples: 0,
        }
    }

    fn can_insert(&self, n: u64) -> bool {
        if self.inserts + n <= self.min_size {
            return true;
        }
        (self.inserts + n) as f64 * self.spi - self.samples as f64 <= self.max_diff
    }

    fn can_sample(&self, n: u64) -> bool {
        if self.inserts < self.min_size {
            return false;
        }
        self.inserts as f64 * self.spi - self.samples as f64 - n as f64 >= self.min_diff
    }
}

const BATCHES: Batches = Batches {
    insert: 4,
    sample: 8,
};

/// Limits whose parameters are exact in binary, so that Reverb's floating point and our
/// integers must agree on every decision.
fn limits() -> impl Strategy<Value = RateLimit> {
    let spi = prop::sample::select(vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0]);
    prop_oneof![
        (1u64..20).prop_map(RateLimit::MinSize),
        (11u64..40).prop_map(RateLimit::Queue),
        (spi.clone(), 1u64..20, 0u32..64).prop_map(|(s, m, e)| RateLimit::SampleToInsertRatio {
            samples_per_insert: s,
            min_size: m,
            error_buffer: ErrorBuffer::Symmetric(40.0 + e as f64 / 2.0),
        }),
        (spi, 1u64..20, -40i32..0, 0i32..60).prop_map(|(s, m, lo, extra)| {
            let offset = s * m as f64;
            RateLimit::SampleToInsertRatio {
                samples_per_insert: s,
                min_size: m,
                error_buffer: ErrorBuffer::Range(offset + lo as f64, offset + 36.0 + extra as f64),
            }
        }),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Insert(u64),
    Sample(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            (1u64..=BATCHES.insert).prop_map(Op::Insert),
            (1u64..=BATCHES.sample).prop_map(Op::Sample),
        ],
        1..300,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Every try_insert / try_sample is admitted exactly when Reverb's CanInsert /
    /// CanSample says so, and the counts follow.
    #[test]
    fn admission_equals_reverbs_formulas(limit in limits(), ops in ops()) {
        let limiter = match RateLimiter::new(limit, BATCHES) {
            Ok(l) => l,
            // A range this limiter refuses as a deadlock is not compared.
            Err(Error::InvalidParameter { .. }) => return Ok(()),
            Err(e) => panic!("{e}"),
        };
        let mut reverb = Reverb::new(limit);
        for op in ops {
            match op {
                Op::Insert(n) => {
                    let expected = reverb.can_insert(n);
                    let got = limiter.try_insert(n);
                    prop_assert_eq!(got.is_ok(), expected, "insert {} at {:?}", n, limiter.stats());
                    if expected {
                        reverb.inserts += n;
                    } else {
                        prop_assert!(matches!(got, Err(Error::RateLimited(_))));
                    }
                }
                Op::Sample(n) => {
                    let expected = reverb.can_sample(n);
                    let got = limiter.try_sample(n);
                    prop_assert_eq!(got.is_ok(), expected, "sample {} at {:?}", n, limiter.stats());
                    if expected {
                        reverb.samples += n;
                    }
                }
            }
            let stats = limiter.stats();
            prop_assert_eq!((stats.inserts, stats.samples), (reverb.inserts, reverb.samples));
        }
    }
}

#[test]
fn reverbs_constructors_map_to_its_parameters() {
    assert_eq!(
        RateLimit::MinSize(5).reverb_parameters(),
        (1.0, 5, f64::NEG_INFINITY, f64::INFINITY)
    );
    assert_eq!(
        RateLimit::Queue(10).reverb_parameters(),
        (1.0, 1, 0.0, 10.0)
    );
    assert_eq!(
        RateLimit::sample_to_insert_ratio(8.0, 1000, 200.0).reverb_parameters(),
        (8.0, 1000, 7800.0, 8200.0)
    );
}

/// The message of a refused configuration.
fn refused(limit: RateLimit, batches: Batches) -> String {
    match RateLimiter::new(limit, batches) {
        Err(e @ Error::InvalidParameter { .. }) => e.to_string(),
        other => panic!("{limit:?} with {batches:?} was not refused: {other:?}"),
    }
}

#[test]
fn configurations_that_would_deadlock_are_refused_with_a_reason() {
    // A band narrower than one insert of 16 and one sample of 256 at 4 samples per insert.
    let narrow = RateLimit::sample_to_insert_ratio(4.0, 1000, 100.0);
    let batches = Batches {
        insert: 16,
        sample: 256,
    };
    assert!(refused(narrow, batches).contains("too narrow"));
    // The same band with smaller batches works.
    RateLimiter::new(
        narrow,
        Batches {
            insert: 16,
            sample: 64,
        },
    )
    .unwrap();
    // A queue shorter than a staged insert and a sample can never take both.
    assert!(refused(
        RateLimit::Queue(8),
        Batches {
            insert: 16,
            sample: 1
        }
    )
    .contains("too narrow"));
    // A range wide enough whose top is below the insert that reaches min_size.
    let low_top = RateLimit::SampleToInsertRatio {
        samples_per_insert: 1.0,
        min_size: 10,
        error_buffer: ErrorBuffer::Range(-100.0, 5.0),
    };
    assert!(refused(
        low_top,
        Batches {
            insert: 4,
            sample: 1
        }
    )
    .contains("min_size"));
    // Reverb's own refusal: the lower end above samples_per_insert * min_size.
    let above = RateLimit::SampleToInsertRatio {
        samples_per_insert: 1.0,
        min_size: 10,
        error_buffer: ErrorBuffer::Range(20.0, 100.0),
    };
    assert!(refused(
        above,
        Batches {
            insert: 1,
            sample: 1
        }
    )
    .contains("min_diff"));
    // Parameters out of range.
    for bad in [
        RateLimit::MinSize(0),
        RateLimit::sample_to_insert_ratio(0.0, 10, 10.0),
        RateLimit::sample_to_insert_ratio(f64::NAN, 10, 10.0),
        RateLimit::sample_to_insert_ratio(1.0, 10, -5.0),
        RateLimit::SampleToInsertRatio {
            samples_per_insert: 1.0,
            min_size: 10,
            error_buffer: ErrorBuffer::Range(5.0, f64::NAN),
        },
    ] {
        refused(
            bad,
            Batches {
                insert: 1,
                sample: 1,
            },
        );
    }
    refused(
        RateLimit::MinSize(1),
        Batches {
            insert: 0,
            sample: 1,
        },
    );
}

#[test]
fn a_call_past_its_batches_is_refused_not_left_waiting() {
    let limiter = RateLimiter::new(
        RateLimit::MinSize(1),
        Batches {
            insert: 4,
            sample: 8,
        },
    )
    .unwrap();
    assert!(matches!(
        limiter.insert(5),
        Err(Error::InvalidParameter { .. })
    ));
    assert!(matches!(
        limiter.sample(9),
        Err(Error::InvalidParameter { .. })
    ));
    assert_eq!(limiter.stats().inserts, 0);
}

#[test]
fn samples_per_insert_is_held_as_an_exact_fraction() {
    let make = |spi| {
        RateLimiter::new(
            RateLimit::sample_to_insert_ratio(spi, 10, 100.0),
            Batches {
                insert: 1,
                sample: 1,
            },
        )
        .unwrap()
        .samples_per_insert()
    };
    assert_eq!(make(8.0), (8, 1));
    assert_eq!(make(0.1), (1, 10));
    assert_eq!(make(1.0 / 3.0), (1, 3));
}

#[test]
fn a_timed_out_call_waits_its_time_and_spends_nothing() {
    let limiter = RateLimiter::new(
        RateLimit::MinSize(10),
        Batches {
            insert: 1,
            sample: 1,
        },
    )
    .unwrap();
    let start = Instant::now();
    let e = limiter
        .sample_timeout(1, Duration::from_millis(50))
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert!(matches!(e, Error::Timeout { .. }) && e.is_retryable());
    let stats = limiter.stats();
    assert_eq!((stats.samples, stats.sample_waiters), (0, 0));
    assert!(stats.blocked >= Duration::from_millis(50));
    assert!(matches!(limiter.try_sample(1), Err(Error::RateLimited(_))));
}

#[test]
fn close_wakes_every_waiter_and_refuses_later_calls() {
    let limiter = Arc::new(
        RateLimiter::new(
            RateLimit::MinSize(10),
            Batches {
                insert: 1,
                sample: 1,
            },
        )
        .unwrap(),
    );
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let limiter = limiter.clone();
            std::thread::spawn(move || limiter.sample(1))
        })
        .collect();
    while limiter.stats().sample_waiters < 3 {
        std::thread::yield_now();
    }
    limiter.close();
    for w in waiters {
        assert!(matches!(w.join().unwrap(), Err(Error::Closed)));
    }
    assert!(limiter.is_closed());
    assert!(matches!(limiter.try_insert(1), Err(Error::Closed)));
    assert!(matches!(limiter.insert(1), Err(Error::Closed)));
}

#[test]
fn a_blocked_sampler_is_woken_by_the_insert_it_waits_for() {
    let limiter = Arc::new(
        RateLimiter::new(
            RateLimit::Queue(4),
            Batches {
                insert: 1,
                sample: 1,
            },
        )
        .unwrap(),
    );
    let sampler = {
        let limiter = limiter.clone();
        std::thread::spawn(move || limiter.sample(1))
    };
    while limiter.stats().sample_waiters < 1 {
        std::thread::yield_now();
    }
    limiter.insert(1).unwrap();
    sampler.join().unwrap().unwrap();
    // And a queue of 4 blocks the fifth insert ahead until a sample.
    for _ in 0..4 {
        limiter.try_insert(1).unwrap();
    }
    assert!(matches!(limiter.try_insert(1), Err(Error::RateLimited(_))));
    limiter.try_sample(1).unwrap();
    limiter.try_insert(1).unwrap();
}

#[test]
fn counts_restore_and_do_not_drift_past_ten_to_the_twelve() {
    let limit = RateLimit::sample_to_insert_ratio(0.1, 1000, 50.0);
    let batches = Batches {
        insert: 64,
        sample: 8,
    };
    let inserts = 1_000_000_000_000u64;
    let samples = inserts / 10 - 140; // inserts x 0.1 - samples = 140, in 100 +- 50
    let limiter = RateLimiter::with_counts(limit, batches, inserts, samples).unwrap();
    let stats = limiter.stats();
    assert_eq!(
        (stats.inserts, stats.samples, stats.diff),
        (inserts, samples, 140.0)
    );
    // 10 more inserts make room for exactly one more sample, and no more.
    for _ in 0..10 {
        limiter.try_insert(1).unwrap();
    }
    assert_eq!(limiter.stats().diff, 141.0);
    for _ in 0..91 {
        limiter.try_sample(1).unwrap();
    }
    assert!(matches!(limiter.try_sample(1), Err(Error::RateLimited(_))));
    assert_eq!(limiter.stats().diff, 50.0);
    // Counts that the range could not have admitted are refused.
    assert!(RateLimiter::with_counts(limit, batches, inserts, samples + 1000).is_err());
    assert!(RateLimiter::with_counts(limit, batches, 10, 1).is_err());
}

/// 4 inserters and 4 samplers, 10^6 admitted calls in all, blocking: the final counts
/// satisfy the ratio exactly and equal what the threads were admitted.
#[test]
fn eight_threads_hold_the_ratio_exactly() {
    let limit = RateLimit::sample_to_insert_ratio(2.0, 64, 64.0);
    let batches = Batches {
        insert: 4,
        sample: 16,
    };
    let limiter = Arc::new(RateLimiter::new(limit, batches).unwrap());
    let (inserted, sampled) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let finished = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let calls_each = 1_000_000 / 8;
    let mut threads = Vec::new();
    for t in 0..8u64 {
        let (limiter, inserted, sampled, finished) = (
            limiter.clone(),
            inserted.clone(),
            sampled.clone(),
            finished.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let inserter = t < 4;
            for i in 0..calls_each {
                let (n, result) = if inserter {
                    let n = 1 + (t + i) % 4;
                    (n, limiter.insert(n))
                } else {
                    let n = 1 + (t * 7 + i) % 16;
                    (n, limiter.sample(n))
                };
                match result {
                    Ok(()) if inserter => inserted.fetch_add(n, Ordering::Relaxed),
                    Ok(()) => sampled.fetch_add(n, Ordering::Relaxed),
                    Err(Error::Closed) => break,
                    Err(e) => panic!("{e}"),
                };
            }
            finished[!inserter as usize].fetch_add(1, Ordering::SeqCst);
        }));
    }
    // When one side is done the other waits for it forever: close releases it.
    while finished.iter().all(|f| f.load(Ordering::SeqCst) < 4) {
        std::thread::sleep(Duration::from_millis(1));
    }
    limiter.close();
    for t in threads {
        t.join().unwrap();
    }
    let stats = limiter.stats();
    let (i, s) = (
        inserted.load(Ordering::Relaxed),
        sampled.load(Ordering::Relaxed),
    );
    assert_eq!((stats.inserts, stats.samples), (i, s));
    let diff = 2.0 * i as f64 - s as f64;
    assert_eq!(stats.diff, diff);
    assert!((64.0..=192.0).contains(&diff), "diff {diff} left [64, 192]");
}
