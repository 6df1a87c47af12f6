//! Rate control: holds the replay ratio between actor and learner threads.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

// Rate control: holds the replay ratio R (gradient samples per inserted transition), as
// `trainer::RateControl` in framework.hpp.
//
// Actors count env steps, learners reserve samples B at a time. After the warm-up W, a
// learner may take a batch only while granted + B <= R (steps - W), and an actor may step
// only while R (steps - W) <= granted + slack: neither side runs ahead of the other by more
// than the slack. The slack is at least one round of every learner (L B samples), so both
// sides never wait at once (no deadlock).
//
// A checkpoint holds the actors (`hold`): an actor asking for a step is told to park
// instead (`Step::Hold`); it flushes its staged transitions, parks (`park`, counted) and
// goes on when the monitor calls `release`. Every step counted before the hold is then in
// the buffer.
//
// ORDERING: `steps` and `granted` are counters each side moves by CAS (AcqRel) and the other
// reads (Acquire); no data is published through them, so any order would keep the counts
// right, and Acquire/AcqRel only make a waiter's re-check after a notify see the move that
// caused it. `stopped` and `holding` are Release/Acquire; `waiting` is a hint (a missed
// notify costs at most the 5 ms wait timeout); `parked` is counted under the mutex.
pub struct RateControl {
    ratio: f64,
    warmup: i64,
    total: i64,
    slack: i64,
    steps: AtomicI64,
    granted: AtomicI64,
    stopped: AtomicBool,
    holding: AtomicBool,
    waiting: AtomicUsize,
    mutex: Mutex<usize>, // actors parked by a hold
    cv: Condvar,
}

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
    pub fn new(ratio: f64, warmup: i64, total: i64, slack: i64) -> RateControl {
        RateControl {
            ratio,
            warmup,
            total,
            slack,
            steps: AtomicI64::new(0),
            granted: AtomicI64::new(0),
            stopped: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            mutex: Mutex::new(0),
            cv: Condvar::new(),
        }
    }

    /// The samples the ratio allows after `steps` env steps.
    pub fn allowed(&self, steps: i64) -> i64 {
        if steps <= self.warmup {
            0
        } else {
            (self.ratio * (steps - self.warmup) as f64).floor() as i64
        }
    }

    fn actor_must_wait(&self, s: i64) -> bool {
        self.allowed(s) > self.granted.load(Ordering::Acquire) + self.slack
    }

    fn notify(&self) {
        let _g = self.mutex.lock().unwrap();
        self.cv.notify_all();
    }

    fn wait_a_little(&self, ready: impl Fn() -> bool) {
        let g = self.mutex.lock().unwrap();
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let _ = self
            .cv
            .wait_timeout_while(g, Duration::from_millis(5), |_| !ready())
            .unwrap();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// The counters a checkpoint saved (a resumed run starts from them).
    pub fn restore(&self, steps: i64, granted: i64) {
        self.steps.store(steps, Ordering::Release);
        self.granted.store(granted, Ordering::Release);
    }

    /// An actor calls this before each env step: `End` when the run is over (the budget is
    /// spent or `stop` was called), `Hold` while a checkpoint holds the actors; on `Go` the
    /// step is counted as taken.
    pub fn actor_step(&self) -> Step {
        loop {
            let s = self.steps.load(Ordering::Acquire);
            if self.stopped() || s >= self.total {
                return Step::End;
            }
            if self.holding.load(Ordering::Acquire) {
                return Step::Hold;
            }
            if !self.actor_must_wait(s) {
                if self
                    .steps
                    .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    if self.waiting.load(Ordering::Acquire) > 0 {
                        self.notify();
                    }
                    return Step::Go;
                }
                continue;
            }
            self.wait_a_little(|| {
                let s = self.steps.load(Ordering::Acquire);
                self.stopped()
                    || s >= self.total
                    || self.holding.load(Ordering::Acquire)
                    || !self.actor_must_wait(s)
            });
        }
    }

    /// A learner calls this before sampling a batch of `batch`: false when the run is over
    /// (stopped, or the actors are done and the ratio is met).
    pub fn learner_take(&self, batch: i64) -> bool {
        loop {
            let g = self.granted.load(Ordering::Acquire);
            if self.stopped() {
                return false;
            }
            let s = self.steps.load(Ordering::Acquire);
            if g + batch <= self.allowed(s) {
                if self
                    .granted
                    .compare_exchange_weak(g, g + batch, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    if self.waiting.load(Ordering::Acquire) > 0 {
                        self.notify();
                    }
                    return true;
                }
                continue;
            }
            if s >= self.total {
                return false; // no more data will come
            }
            self.wait_a_little(|| {
                let s = self.steps.load(Ordering::Acquire);
                self.stopped()
                    || self.granted.load(Ordering::Acquire) + batch <= self.allowed(s)
                    || s >= self.total
            });
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

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.notify();
    }
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
    pub fn steps(&self) -> i64 {
        self.steps.load(Ordering::Acquire)
    }
    pub fn granted(&self) -> i64 {
        self.granted.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_control_holds_the_ratio_between_threads() {
        // 2 actors, 2 learners taking batches of 8 at ratio 4 with slack 32: at every moment
        // granted <= allowed(steps) and allowed(steps) <= granted + slack + one step's worth.
        let rate = RateControl::new(4.0, 10, 2000, 32);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| while rate.actor_step() == Step::Go {});
            }
            for _ in 0..2 {
                s.spawn(|| {
                    while rate.learner_take(8) {
                        let g = rate.granted();
                        let a = rate.allowed(rate.steps());
                        assert!(g <= a, "granted {g} > allowed {a}");
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..2000 {
                    let s = rate.steps();
                    let g = rate.granted();
                    // An actor may have stepped between the two loads: one step of slack.
                    assert!(
                        rate.allowed(s) <= g + 32 + 4 + 8,
                        "actors ran ahead: {s} steps, {g} granted"
                    );
                    std::thread::yield_now();
                }
            });
        });
        assert_eq!(rate.steps(), 2000);
        // Every sample the ratio allows was taken, in whole batches.
        assert!(rate.allowed(2000) - rate.granted() < 8);
    }

    #[test]
    fn stop_releases_waiting_threads() {
        let rate = RateControl::new(1.0, 0, 1 << 40, 0);
        std::thread::scope(|s| {
            let l = s.spawn(|| rate.learner_take(1000)); // never allowed: waits
            std::thread::sleep(Duration::from_millis(30));
            rate.stop();
            assert!(!l.join().unwrap());
        });
        assert_eq!(rate.actor_step(), Step::End);
    }

    #[test]
    fn a_hold_parks_every_actor_until_release() {
        let rate = RateControl::new(1.0, 0, 1 << 40, 1 << 40);
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
