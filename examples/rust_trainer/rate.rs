//! Rate control: the run's step budget and checkpoint holds, with the replay ratio held by
//! the crate's rate limiter (`kary_replay::rate::RateLimiter`).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use kary_replay::rate::{Batches, ErrorBuffer, RateLimit, RateLimiter};
use kary_replay::Error;

// The replay ratio R (gradient samples per inserted transition) is the crate's
// `SampleToInsertRatio`: after the warm-up W, `R x steps - granted` stays within
// `[R W, R W + slack]`, so a learner takes a batch of B only while `granted + B <= R (steps -
// W)` and an actor steps only while it stays at most `slack` ahead. Each env step is an
// insert of 1 admitted by the limiter (one compare-and-swap), each batch a sample of B. The
// slack is at least one round of every learner (L B samples): the limiter refuses a range in
// which both sides could wait at once.
//
// This file keeps what is the trainer's own: the step budget (`total`: an actor reserves its
// step before it asks the limiter, so at most `total` steps are taken), `stop`, and the
// checkpoint hold: an actor asking for a step while a checkpoint holds the actors is told to
// park instead (`Step::Hold`); it flushes its staged transitions, parks (`park`, counted) and
// goes on when the monitor calls `release`. Every step taken before the hold is then in the
// buffer. Waits on the limiter run in slices of `SLICE`, so that a hold or a stop is seen.
//
// ORDERING: `steps` is a counter moved by read-modify-writes (AcqRel) and read with Acquire;
// no data is published through it. `stopped` and `holding` are Release/Acquire; `parked` is
// counted under the mutex.
pub struct RateControl {
    total: i64,
    steps: AtomicI64,
    /// None: unthrottled (the thread-count profiles).
    limiter: Option<RateLimiter>,
    stopped: AtomicBool,
    holding: AtomicBool,
    mutex: Mutex<usize>, // actors parked by a hold
    cv: Condvar,
}

/// The longest an actor or learner waits on the limiter before it looks at the hold and
/// stop flags again.
const SLICE: Duration = Duration::from_millis(5);

/// What an actor may do next ([`RateControl::actor_step`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Take one env step (counted).
    Go,
    /// A checkpoint holds the actors: flush, then [`RateControl::park`].
    Hold,
    /// The run is over.
    End,
}

impl RateControl {
    /// Replay ratio `ratio` after `warmup` steps within `slack` samples, for `total` env
    /// steps and learner batches of `batch`; `counts` (steps, granted samples) continue a
    /// checkpoint's run. Errors: the limiter's refusal of the range (its message says what
    /// would work), or counts it could not have reached.
    pub fn new(
        ratio: f64,
        warmup: i64,
        total: i64,
        slack: i64,
        batch: usize,
        counts: Option<(i64, i64)>,
    ) -> Result<RateControl, String> {
        let min_size = warmup.max(1) as u64;
        let lo = ratio * min_size as f64;
        let limit = RateLimit::SampleToInsertRatio {
            samples_per_insert: ratio,
            min_size,
            error_buffer: ErrorBuffer::Range(lo, lo + slack as f64),
        };
        let batches = Batches {
            insert: 1,
            sample: batch as u64,
        };
        let (steps, granted) = counts.unwrap_or((0, 0));
        let limiter = RateLimiter::with_counts(limit, batches, steps as u64, granted as u64)
            .map_err(|e| format!("rate control: {e}"))?;
        Ok(RateControl::with(total, steps, Some(limiter)))
    }

    /// No replay ratio: actors step until `total`, learners take every batch they ask for
    /// (the thread-count profiles).
    pub fn unthrottled(total: i64) -> RateControl {
        RateControl::with(total, 0, None)
    }

    fn with(total: i64, steps: i64, limiter: Option<RateLimiter>) -> RateControl {
        RateControl {
            total,
            steps: AtomicI64::new(steps),
            limiter,
            stopped: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            mutex: Mutex::new(0),
            cv: Condvar::new(),
        }
    }

    fn notify(&self) {
        let _g = self.mutex.lock().unwrap();
        self.cv.notify_all();
    }

    /// An actor calls this before each env step: `End` when the run is over (the budget is
    /// spent or `stop` was called), `Hold` while a checkpoint holds the actors; on `Go` the
    /// step is counted as taken.
    pub fn actor_step(&self) -> Step {
        loop {
            if self.stopped() {
                return Step::End;
            }
            if self.holding.load(Ordering::Acquire) {
                return Step::Hold;
            }
            // Reserve the step within the budget, then have the limiter admit it.
            if self.steps.fetch_add(1, Ordering::AcqRel) >= self.total {
                self.steps.fetch_sub(1, Ordering::AcqRel);
                return Step::End;
            }
            let Some(limiter) = &self.limiter else {
                return Step::Go;
            };
            match limiter.insert_timeout(1, SLICE) {
                Ok(()) => return Step::Go,
                Err(Error::Timeout { .. }) => {
                    // Not admitted yet: give the step back and look at hold and stop again.
                    self.steps.fetch_sub(1, Ordering::AcqRel);
                }
                Err(_) => {
                    // Closed: the run stopped.
                    self.steps.fetch_sub(1, Ordering::AcqRel);
                    return Step::End;
                }
            }
        }
    }

    /// A learner calls this before sampling a batch of `batch`: false when the run is over
    /// (stopped, or the actors are done and the ratio is met).
    pub fn learner_take(&self, batch: i64) -> bool {
        let Some(limiter) = &self.limiter else {
            return !self.stopped();
        };
        loop {
            if self.stopped() {
                return false;
            }
            match limiter.sample_timeout(batch as u64, SLICE) {
                Ok(()) => return true,
                Err(Error::Timeout { .. }) if self.steps() >= self.total => {
                    // No more data will come: take what the ratio still allows.
                    return limiter.try_sample(batch as u64).is_ok();
                }
                Err(Error::Timeout { .. }) => {}
                Err(_) => return false, // closed: the run stopped
            }
        }
    }

    /// Hold the actors: each parks at its next step ([`Step::Hold`]).
    pub fn hold(&self) {
        self.holding.store(true, Ordering::Release);
        self.notify();
    }

    /// An actor told to hold waits here until `release` (or `stop`).
    pub fn park(&self) {
        let mut parked = self.mutex.lock().unwrap();
        *parked += 1;
        self.cv.notify_all();
        while self.holding.load(Ordering::Acquire) && !self.stopped() {
            parked = self.cv.wait(parked).unwrap();
        }
        *parked -= 1;
    }

    /// Actors parked now.
    pub fn parked(&self) -> usize {
        *self.mutex.lock().unwrap()
    }

    /// Let parked actors go on.
    pub fn release(&self) {
        self.holding.store(false, Ordering::Release);
        self.notify();
    }

    /// End the run: every actor and learner waiting on the limiter returns at once.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(limiter) = &self.limiter {
            limiter.close();
        }
        self.notify();
    }
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
    pub fn steps(&self) -> i64 {
        self.steps.load(Ordering::Acquire)
    }
    /// Samples granted to the learners (the limiter's count).
    pub fn granted(&self) -> i64 {
        self.limiter
            .as_ref()
            .map_or(0, |l| l.stats().samples as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_control_holds_the_ratio_between_threads() {
        // 2 actors, 2 learners taking batches of 8 at ratio 4 with slack 32: at every moment
        // granted <= allowed(steps) and allowed(steps) <= granted + slack + a step's worth.
        let allowed = |steps: i64| (4 * (steps - 10)).max(0);
        let rate = RateControl::new(4.0, 10, 2000, 32, 8, None).unwrap();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| while rate.actor_step() == Step::Go {});
            }
            for _ in 0..2 {
                s.spawn(|| {
                    while rate.learner_take(8) {
                        // Read granted first: a step taken between the loads only helps.
                        let g = rate.granted();
                        let a = allowed(rate.steps());
                        assert!(g <= a + 8, "granted {g} > allowed {a}");
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..2000 {
                    let g = rate.granted();
                    let s = rate.steps();
                    // Actors may have stepped between the two loads: a step each of slack.
                    assert!(
                        allowed(s) <= g + 32 + 2 * 4 + 8,
                        "actors ran ahead: {s} steps, {g} granted"
                    );
                    std::thread::yield_now();
                }
            });
        });
        assert_eq!(rate.steps(), 2000);
        // Every sample the ratio allows was taken, in whole batches.
        assert!(allowed(2000) - rate.granted() < 8);
    }

    #[test]
    fn stop_releases_waiting_threads() {
        let rate = RateControl::new(1.0, 0, 1 << 40, 1000, 1000, None).unwrap();
        std::thread::scope(|s| {
            let l = s.spawn(|| rate.learner_take(1000)); // no data: waits
            std::thread::sleep(Duration::from_millis(30));
            rate.stop();
            assert!(!l.join().unwrap());
        });
        assert_eq!(rate.actor_step(), Step::End);
    }

    #[test]
    fn a_range_that_could_deadlock_is_refused_and_counts_resume() {
        let err = RateControl::new(4.0, 100, 1000, 8, 64, None).err().unwrap();
        assert!(err.contains("deadlock"), "{err}");
        let rate = RateControl::new(4.0, 10, 1000, 64, 8, Some((500, 1900))).unwrap();
        assert_eq!((rate.steps(), rate.granted()), (500, 1900));
        assert!(rate.learner_take(8)); // 4 x (500 - 10) = 1960 >= 1908
    }

    #[test]
    fn a_hold_parks_every_actor_until_release() {
        let rate = RateControl::unthrottled(1 << 40);
        let taken = AtomicI64::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| loop {
                    match rate.actor_step() {
                        Step::Go => {
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                        Step::Hold => rate.park(),
                        Step::End => break,
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(10));
            rate.hold();
            while rate.parked() < 3 {
                std::thread::yield_now();
            }
            // Every step counted was taken by an actor that is now parked: none moves.
            let steps = rate.steps();
            assert_eq!(steps, taken.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(rate.steps(), steps, "a parked actor stepped");
            rate.release();
            while rate.steps() < steps + 100 {
                std::thread::yield_now();
            }
            rate.stop();
        });
        assert_eq!(rate.parked(), 0);
    }
}
