//! The rate limiter's protocol (`kary_replay::rate`): one compare-and-swap per admitted call,
//! waiters parked on a condition variable. Four models, each with the limiter's invariant:
//!
//! - (r1) two samplers and an inserter: the credit never leaves its range once sampling is
//!   open (no sample is admitted on room another sampler took);
//! - (r2) a blocked sampler and an inserter: the sampler is woken (no lost wake-up; loom
//!   reports a deadlock otherwise);
//! - (r3) two blocked samplers and a closer: both return `Closed`;
//! - (r4) a sampler that times out beside a sampler and an inserter: it spent nothing (the
//!   limiter's counts are those of the calls that were admitted).
//!
//! (r2)-(r4) run again on a shared buffer's limiter (r2s-r4s), whose waiters sleep on a wake
//! count (a futex across processes; under loom a mutex and condition variable stand in for
//! the kernel's queue) instead of the condition variables.
//!
//! Under loom, `broken` runs (r1) with check-then-commit, (r2) with the wake-up before the
//! credit write, and (r2s) with the wake count read after the try, and expects loom to
//! reject all three.

use std::time::Duration;

use kary_replay::rate::{Batches, ErrorBuffer, RateLimit, RateLimiter};
use kary_replay::Error;

use crate::support::{model, thread};

/// One sample per insert, at most 2 inserts ahead: the credit (inserts - samples) stays in
/// [0, 2] once the first item is in.
fn limit() -> RateLimit {
    RateLimit::SampleToInsertRatio {
        samples_per_insert: 1.0,
        min_size: 1,
        error_buffer: ErrorBuffer::Range(0.0, 2.0),
    }
}

const ONE: Batches = Batches {
    insert: 1,
    sample: 1,
};

type Make = fn() -> RateLimiter;

/// The limiter for one execution. Under loom it is leaked and shared by reference, so that
/// no handle is dropped while loom unwinds from a deadlock it found (a drop then would abort
/// the process); on plain threads (and under Miri, which checks for leaks) an `Arc`.
#[cfg(loom)]
type Handle = &'static RateLimiter;
#[cfg(not(loom))]
type Handle = std::sync::Arc<RateLimiter>;

fn shared(make: Make) -> Handle {
    #[cfg(loom)]
    return Box::leak(Box::new(make()));
    #[cfg(not(loom))]
    return std::sync::Arc::new(make());
}

fn correct() -> RateLimiter {
    RateLimiter::new(limit(), ONE).unwrap()
}

/// A shared buffer's limiter (its words in a mapping, its waiters asleep on the wake count:
/// a futex, under loom its stand-in), here on the heap.
fn shared_correct() -> RateLimiter {
    RateLimiter::new_shared_for_model(limit(), ONE).unwrap()
}

/// Another handle to the same limiter, for a thread.
#[allow(clippy::clone_on_copy)] // a reference under loom, an Arc otherwise
fn handle(h: &Handle) -> Handle {
    Handle::clone(h)
}

/// (r1) An inserter and two samplers that never wait: whatever the interleaving, the
/// samples admitted are at most the inserts, and the counts are those admitted.
pub fn two_samplers_and_an_inserter(make: Make) {
    model(move || {
        let limiter = shared(make);
        let inserter = {
            let limiter = handle(&limiter);
            thread::spawn(move || limiter.try_insert(1).is_ok() as u64)
        };
        let samplers: Vec<_> = (0..2)
            .map(|_| {
                let limiter = handle(&limiter);
                thread::spawn(move || limiter.try_sample(1).is_ok() as u64)
            })
            .collect();
        let inserts = inserter.join().unwrap();
        let samples: u64 = samplers.into_iter().map(|s| s.join().unwrap()).sum();
        let stats = limiter.stats();
        assert!(
            stats.diff >= 0.0 && stats.diff <= 2.0,
            "credit out of its range: {stats:?}"
        );
        assert_eq!((stats.inserts, stats.samples), (inserts, samples));
    });
}

/// (r2) A sampler that waits for an insert is woken by it.
pub fn blocked_sampler_is_woken(make: Make) {
    model(move || {
        let limiter = shared(make);
        let sampler = {
            let limiter = handle(&limiter);
            thread::spawn(move || limiter.sample(1))
        };
        limiter.insert(1).unwrap();
        sampler.join().unwrap().unwrap();
        let stats = limiter.stats();
        assert_eq!(
            (stats.inserts, stats.samples, stats.sample_waiters),
            (1, 1, 0)
        );
    });
}

/// (r3) `close` wakes every waiter, each with `Closed`.
pub fn close_wakes_every_waiter(make: Make) {
    model(move || {
        let limiter = shared(make);
        let samplers: Vec<_> = (0..2)
            .map(|_| {
                let limiter = handle(&limiter);
                thread::spawn(move || limiter.sample(1))
            })
            .collect();
        limiter.close();
        for s in samplers {
            assert!(matches!(s.join().unwrap(), Err(Error::Closed)));
        }
        assert_eq!(limiter.stats().samples, 0);
    });
}

/// (r4) A sampler that times out (at once: its timeout is 0) beside an inserter and another
/// sampler leaves the credit as it was: the counts are those of the admitted calls.
pub fn timed_out_waiter_spends_nothing(make: Make) {
    model(move || {
        let limiter = shared(make);
        let timed = {
            let limiter = handle(&limiter);
            thread::spawn(move || limiter.sample_timeout(1, Duration::ZERO))
        };
        let other = {
            let limiter = handle(&limiter);
            thread::spawn(move || limiter.try_sample(1))
        };
        limiter.insert(1).unwrap();
        let timed = timed.join().unwrap();
        let other = other.join().unwrap();
        assert!(matches!(timed, Ok(()) | Err(Error::Timeout { .. })));
        let admitted = timed.is_ok() as u64 + other.is_ok() as u64;
        let stats = limiter.stats();
        assert_eq!((stats.inserts, stats.samples), (1, admitted));
        assert!(admitted <= 1, "two samples admitted on one insert");
    });
}

#[test]
fn r1_two_samplers_and_an_inserter() {
    two_samplers_and_an_inserter(correct);
}

#[test]
fn r2_blocked_sampler_is_woken() {
    blocked_sampler_is_woken(correct);
}

#[test]
fn r3_close_wakes_every_waiter() {
    close_wakes_every_waiter(correct);
}

#[test]
fn r4_timed_out_waiter_spends_nothing() {
    timed_out_waiter_spends_nothing(correct);
}

#[test]
fn r2s_shared_blocked_sampler_is_woken() {
    blocked_sampler_is_woken(shared_correct);
}

#[test]
fn r3s_shared_close_wakes_every_waiter() {
    close_wakes_every_waiter(shared_correct);
}

#[test]
fn r4s_shared_timed_out_waiter_spends_nothing() {
    timed_out_waiter_spends_nothing(shared_correct);
}

#[cfg(loom)]
mod broken {
    use kary_replay::Faults;

    use super::*;

    /// Check, then commit with a separate add: both samplers pass on one item's room.
    #[test]
    #[should_panic(expected = "credit out of its range")]
    fn check_then_commit_lets_two_samplers_take_one_room() {
        two_samplers_and_an_inserter(|| {
            let faults = Faults {
                rate_check_then_commit: true,
                ..Faults::default()
            };
            RateLimiter::new_with_faults(limit(), ONE, faults).unwrap()
        });
    }

    /// Wake before the credit is written: a sampler that registers in between sleeps on.
    #[test]
    #[should_panic(expected = "deadlock")]
    fn waking_before_the_credit_write_loses_a_wake_up() {
        blocked_sampler_is_woken(|| {
            let faults = Faults {
                rate_notify_before_credit: true,
                ..Faults::default()
            };
            RateLimiter::new_with_faults(limit(), ONE, faults).unwrap()
        });
    }

    /// A shared limiter's waiter that reads the wake count after its try: the inserter's
    /// wake in between is taken for a count it already saw, and the sampler sleeps on.
    #[test]
    #[should_panic(expected = "deadlock")]
    fn reading_the_wake_count_after_the_try_loses_a_wake_up() {
        blocked_sampler_is_woken(|| {
            let faults = Faults {
                rate_reads_wakes_after_try: true,
                ..Faults::default()
            };
            RateLimiter::new_shared_with_faults(limit(), ONE, faults).unwrap()
        });
    }
}
