//! Rate limiting: the ratio of sampled to inserted items held in a range, as Reverb's rate
//! limiters hold it ([`RateLimit`]), counted in items (a sample of B spends B).
//!
//! A [`RateLimiter`] admits inserts and samples before they happen: [`RateLimiter::insert`]
//! and [`RateLimiter::sample`] wait until the call fits, the `*_timeout` forms wait at most
//! a given time ([`Error::Timeout`]), the `try_*` forms never wait ([`Error::RateLimited`]),
//! and [`RateLimiter::close`] wakes every waiter with [`Error::Closed`].
//!
//! # The credit
//!
//! `samples_per_insert` is held as an exact fraction `p / q` (the nearest with `q <= 65536`:
//! 8.0 is 8/1, 0.1 is 1/10, 1/3 is 1/3), and the limiter's whole state is one signed integer,
//! the credit `c = inserts * p - samples * q`, that is `q` times Reverb's
//! `inserts * samples_per_insert - samples`, with two flag bits beside it in one atomic word:
//! whether `min_size` items have been inserted (sampling is open) and whether the limiter is
//! closed. The range `[min_diff, max_diff]` becomes integer bounds `[lo, hi]` on the credit.
//! Integers do not drift: after 10^12 operations the ratio is what the counts say.
//!
//! An admitted call is one compare-and-swap on that word, with no lock: a sample of `n` when
//! sampling is open and `c - n q >= lo`; an insert of `n` when it ends within the first
//! `min_size` items (free, as in Reverb) or `c + n p <= hi`. An insert also adds `n` to a
//! counter of its own (statistics and checkpoints; no sampler touches it). A call that is not
//! admitted registers as a waiter of its kind under a mutex, touches the state word with a
//! read-modify-write, tries again, and sleeps on a condition variable; an admitted call looks
//! for waiters of the other kind after its compare-and-swap and, if there are any, wakes them
//! under the same mutex. The two read-modify-writes of one word are ordered: either the
//! waiter's comes after the admitter's (and its second try sees the new credit) or before
//! (and the admitter, acquiring it, sees the waiter), so no wake-up is lost. A waiter that times out or is closed on
//! was never admitted: it spent nothing. `loom_tests/rate.rs` checks all of it, and rejects
//! the two broken twins (check then commit; wake before the credit is written).
//!
//! # Configurations that would deadlock are refused
//!
//! [`RateLimiter::new`] takes the largest insert and sample it will be asked to admit
//! ([`Batches`]: a writer's staged batch, a learner's batch) and refuses a range in which
//! some credit admits neither the largest insert nor the largest sample
//! (`hi - lo < n_insert p + n_sample q - 1`), in which the insert that reaches `min_size`
//! cannot be admitted, or whose lower end is above `samples_per_insert * min_size` (Reverb
//! refuses that one too); the message says what would work. A call larger than its
//! [`Batches`] is refused with [`Error::InvalidParameter`] instead of waiting.
//!
//! ```
//! use kary_replay::rate::{Batches, RateLimit, RateLimiter};
//! use kary_replay::Error;
//!
//! // 4 samples per insert after 100 items, within +-64 samples.
//! let limit = RateLimit::sample_to_insert_ratio(4.0, 100, 64.0);
//! let limiter = RateLimiter::new(limit, Batches { insert: 16, sample: 32 })?;
//! assert!(matches!(limiter.try_sample(32), Err(Error::RateLimited(_)))); // fewer than 100 items
//! for _ in 0..7 {
//!     limiter.try_insert(16)?; // 112 items
//! }
//! limiter.try_sample(32)?;
//! assert_eq!((limiter.stats().inserts, limiter.stats().samples), (112, 32));
//! # Ok::<(), Error>(())
//! ```

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::faults::Faults;
use crate::region::{Region, RegionBox};
use crate::sync::{
    lock, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering,
};

/// The largest denominator of `samples_per_insert`'s fraction.
pub const MAX_DENOMINATOR: u64 = 1 << 16;

/// The largest numerator of `samples_per_insert`'s fraction, `min_size` and batch: so that no
/// credit computation can overflow.
const MAX_COUNT: u64 = 1 << 24;

/// The largest `min_size`.
pub const MAX_MIN_SIZE: u64 = 1 << 36;

/// The credit bound that stands for "none" (far from `i64`'s ends, so that `c +- n p` cannot
/// overflow and `c` keeps two bits of room for the flags).
const UNBOUNDED: i64 = 1 << 60;

/// The flag bits of the state word, below the credit.
const OPEN: i64 = 1;
const CLOSED: i64 = 2;
const FLAG_BITS: u32 = 2;

/// The range of `inserts * samples_per_insert - samples` outside which calls wait, as
/// Reverb's `SampleToInsertRatio` takes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ErrorBuffer {
    /// `samples_per_insert * min_size +- e`: the ratio counted from `min_size` on.
    Symmetric(f64),
    /// `[min_diff, max_diff]` as given, with no offset.
    Range(f64, f64),
}

/// What a [`RateLimiter`] holds: Reverb's three limiters, counted in items.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLimit {
    /// No sample before `n` items have been inserted; nothing else is limited.
    MinSize(u64),
    /// From `min_size` items on, `inserts * samples_per_insert - samples` stays within
    /// `error_buffer`: a sample waits when it would go below, an insert when it would go
    /// above. Before `min_size`, inserts are free and samples wait.
    SampleToInsertRatio {
        /// How many times each item is to be sampled on average (> 0).
        samples_per_insert: f64,
        /// Items inserted before the first sample (>= 1).
        min_size: u64,
        /// The range of the difference.
        error_buffer: ErrorBuffer,
    },
    /// One sample per insert, with at most `n` inserts not yet sampled: samples wait for
    /// inserts, inserts wait when `n` are ahead. (Each item is sampled once only where the
    /// sampler takes items in order and removes them; a prioritized sample does not.)
    Queue(u64),
}

impl RateLimit {
    /// [`RateLimit::SampleToInsertRatio`] with a symmetric error buffer.
    pub fn sample_to_insert_ratio(
        samples_per_insert: f64,
        min_size: u64,
        error_buffer: f64,
    ) -> RateLimit {
        RateLimit::SampleToInsertRatio {
            samples_per_insert,
            min_size,
            error_buffer: ErrorBuffer::Symmetric(error_buffer),
        }
    }

    /// `(samples_per_insert, min_size, min_diff, max_diff)` as Reverb's `RateLimiter`
    /// constructor takes them.
    pub fn reverb_parameters(&self) -> (f64, u64, f64, f64) {
        match *self {
            RateLimit::MinSize(n) => (1.0, n, f64::NEG_INFINITY, f64::INFINITY),
            RateLimit::Queue(n) => (1.0, 1, 0.0, n as f64),
            RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer,
            } => match error_buffer {
                ErrorBuffer::Symmetric(e) => {
                    let offset = samples_per_insert * min_size as f64;
                    (samples_per_insert, min_size, offset - e, offset + e)
                }
                ErrorBuffer::Range(lo, hi) => (samples_per_insert, min_size, lo, hi),
            },
        }
    }
}

/// The largest insert and the largest sample a [`RateLimiter`] admits, in items: with them it
/// can refuse a range that would deadlock. A writer's staged batch counts as one insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batches {
    /// The largest insert (>= 1).
    pub insert: u64,
    /// The largest sample (>= 1).
    pub sample: u64,
}

/// How long a call waits for its rate limiter to admit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// As long as it takes; [`Error::Closed`] if the limiter is closed meanwhile.
    #[default]
    Block,
    /// At most this long; then [`Error::Timeout`], with nothing spent.
    For(Duration),
    /// Not at all: [`Error::RateLimited`] when the call does not fit now.
    Never,
}

/// A [`RateLimiter`]'s counts and state, each read once (exact when no call is in flight).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateStats {
    /// Items admitted to be inserted.
    pub inserts: u64,
    /// Items admitted to be sampled.
    pub samples: u64,
    /// `inserts * samples_per_insert - samples`, exact (the credit over `q`).
    pub diff: f64,
    /// Whether `min_size` items have been inserted.
    pub open: bool,
    /// Whether the limiter is closed.
    pub closed: bool,
    /// Inserts waiting now.
    pub insert_waiters: usize,
    /// Samples waiting now.
    pub sample_waiters: usize,
    /// Time spent waiting by every call that waited, added when each wait ends.
    pub blocked: Duration,
}

/// Which side a call is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Insert,
    Sample,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::Insert => "an insert",
            Kind::Sample => "a sample",
        }
    }
}

/// The words every caller of one limiter changes: on the heap, or in a mapping that several
/// processes share (a shared buffer's limiter, `buffer/shm`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct RateWords {
    /// `credit << FLAG_BITS | CLOSED? | OPEN?`.
    state: AtomicI64,
    /// Items admitted to be inserted (statistics and checkpoints only).
    inserts: AtomicU64,
    insert_waiters: AtomicUsize,
    sample_waiters: AtomicUsize,
    /// Nanoseconds waited, summed when each wait ends.
    blocked_nanos: AtomicU64,
    /// A shared limiter's wake-up count: bumped by every wake, the word its waiters sleep on
    /// (a futex, which the kernel wakes across processes).
    wakes: AtomicU32,
}

// SAFETY: atomics only, no pointer, nothing to drop; any bits are a valid (if meaningless)
// state, and this build writes only its own.
unsafe impl crate::region::Shareable for RateWords {}

/// How long a waiter of a shared limiter sleeps at most before it looks again: a process
/// killed between its admission and its wake-up owes its waiters one, which this bounds.
#[cfg(not(loom))]
const SHARED_NAP: Duration = Duration::from_millis(20);

/// Holds the ratio of samples to inserts in a range (module doc): one compare-and-swap per
/// admitted call, waiters parked on a condition variable. Share it by reference or `Arc`.
#[derive(Debug)]
pub struct RateLimiter {
    words: RegionBox<RateWords>,
    /// Whether the words are in a mapping that other processes share: then waiters sleep on
    /// `words.wakes` (a futex), not on the condition variables.
    shared: bool,
    /// The slow path's mutex (it guards nothing but the sleep).
    sleep: Mutex<()>,
    can_insert: Condvar,
    can_sample: Condvar,
    limit: RateLimit,
    batches: Batches,
    /// `samples_per_insert = p / q`.
    p: i64,
    q: i64,
    /// The credit's bounds once sampling is open.
    lo: i64,
    hi: i64,
    /// `min_size * p`: the credit at which sampling opens.
    open_at: i64,
    faults: Faults,
}

impl RateLimiter {
    /// A limiter of `limit` admitting inserts and samples of up to `batches` items, with no
    /// item counted yet. Errors: [`Error::InvalidParameter`] for a parameter out of its range
    /// or a range that would deadlock (module doc), saying what would work.
    pub fn new(limit: RateLimit, batches: Batches) -> Result<RateLimiter> {
        RateLimiter::with_faults(limit, batches, Faults::none())
    }

    /// A limiter that continues from `inserts` inserted and `samples` sampled items (a
    /// checkpoint's counts, [`RateStats`]). Errors: as [`Self::new`], and
    /// [`Error::InvalidParameter`] when the counts are past what the limiter could have
    /// admitted (more samples than its range allows, or any before `min_size` inserts).
    pub fn with_counts(
        limit: RateLimit,
        batches: Batches,
        inserts: u64,
        samples: u64,
    ) -> Result<RateLimiter> {
        let limiter = RateLimiter::new(limit, batches)?;
        limiter.set_counts(inserts, samples)?;
        Ok(limiter)
    }

    /// Set the counts of a limiter that no other thread sees yet (see [`Self::with_counts`]).
    fn set_counts(&self, inserts: u64, samples: u64) -> Result<()> {
        let (limit, limiter) = (self.limit, self);
        let bad = |value: u64, reason| Error::InvalidParameter {
            name: "rate limiter counts",
            value: value as f64,
            reason,
        };
        let open = inserts >= limit.reverb_parameters().1;
        if !open && samples > 0 {
            return Err(bad(samples, "samples before min_size inserts"));
        }
        let credit = i128::from(inserts) * i128::from(limiter.p)
            - i128::from(samples) * i128::from(limiter.q);
        let floor = if open { limiter.lo } else { 0 };
        if credit < i128::from(floor) || credit > i128::from(UNBOUNDED) {
            return Err(bad(
                samples,
                "more samples than the range allows for these inserts, or counts past 2^60",
            ));
        }
        // ORDERING: SeqCst, as every access to the state word (module doc); a limiter no
        // other thread sees yet, so any order would do here, and for the counter beside it.
        limiter.words.state.store(
            (credit as i64) << FLAG_BITS | if open { OPEN } else { 0 },
            Ordering::SeqCst,
        );
        limiter.words.inserts.store(inserts, Ordering::SeqCst);
        Ok(())
    }

    /// [`Self::new`] with deliberate protocol faults (the loom models' broken twins).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn new_with_faults(
        limit: RateLimit,
        batches: Batches,
        faults: Faults,
    ) -> Result<RateLimiter> {
        RateLimiter::with_faults(limit, batches, faults)
    }

    fn with_faults(limit: RateLimit, batches: Batches, faults: Faults) -> Result<RateLimiter> {
        RateLimiter::in_region(limit, batches, faults, &mut Region::Heap)
    }

    /// A limiter that runs a shared (cross-process) limiter's protocol on the heap: its
    /// waiters sleep on the wake count (a futex; under loom, its stand-in), not on the
    /// condition variables. For the loom models and the real-thread runs of them.
    #[doc(hidden)]
    pub fn new_shared_for_model(limit: RateLimit, batches: Batches) -> Result<RateLimiter> {
        let mut limiter = RateLimiter::new(limit, batches)?;
        limiter.shared = true;
        Ok(limiter)
    }

    /// [`Self::new_shared_for_model`] with deliberate protocol faults.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn new_shared_with_faults(
        limit: RateLimit,
        batches: Batches,
        faults: Faults,
    ) -> Result<RateLimiter> {
        let mut limiter = RateLimiter::with_faults(limit, batches, faults)?;
        limiter.shared = true;
        Ok(limiter)
    }

    /// A limiter whose words come from `region`: in a mapping another process made, the
    /// words (and so the counts) are the ones found there.
    pub(crate) fn in_region(
        limit: RateLimit,
        batches: Batches,
        faults: Faults,
        region: &mut Region,
    ) -> Result<RateLimiter> {
        let Params {
            p,
            q,
            lo,
            hi,
            open_at,
        } = Params::new(limit, batches)?;
        let words = region.alloc_one(
            128,
            RateWords {
                state: AtomicI64::new(0),
                inserts: AtomicU64::new(0),
                insert_waiters: AtomicUsize::new(0),
                sample_waiters: AtomicUsize::new(0),
                blocked_nanos: AtomicU64::new(0),
                wakes: AtomicU32::new(0),
            },
        )?;
        Ok(RateLimiter {
            words,
            shared: region.is_shared(),
            sleep: Mutex::new(()),
            can_insert: Condvar::new(),
            can_sample: Condvar::new(),
            limit,
            batches,
            p,
            q,
            lo,
            hi,
            open_at,
            faults,
        })
    }

    /// What it holds.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// The largest calls it admits.
    pub fn batches(&self) -> Batches {
        self.batches
    }

    /// `samples_per_insert` as the fraction `(p, q)` it holds exactly.
    pub fn samples_per_insert(&self) -> (u64, u64) {
        (self.p as u64, self.q as u64)
    }

    /// Admit an insert of `n` items now, or [`Error::RateLimited`]; [`Error::Closed`] after
    /// [`Self::close`], [`Error::InvalidParameter`] past [`Batches::insert`]. `n = 0` is
    /// admitted at once.
    pub fn try_insert(&self, n: u64) -> Result<()> {
        self.try_admit(Kind::Insert, n)
    }

    /// Admit a sample of `n` items now, or [`Error::RateLimited`] (as [`Self::try_insert`]).
    pub fn try_sample(&self, n: u64) -> Result<()> {
        self.try_admit(Kind::Sample, n)
    }

    /// Admit an insert of `n` items, waiting as long as it takes; [`Error::Closed`] when the
    /// limiter is closed before or while it waits.
    pub fn insert(&self, n: u64) -> Result<()> {
        self.wait(Kind::Insert, n, None)
    }

    /// Admit a sample of `n` items, waiting as long as it takes (as [`Self::insert`]).
    pub fn sample(&self, n: u64) -> Result<()> {
        self.wait(Kind::Sample, n, None)
    }

    /// Admit an insert of `n` items, waiting at most `timeout`: [`Error::Timeout`] then, with
    /// nothing spent.
    pub fn insert_timeout(&self, n: u64, timeout: Duration) -> Result<()> {
        self.wait(Kind::Insert, n, Some(timeout))
    }

    /// Admit a sample of `n` items, waiting at most `timeout` (as [`Self::insert_timeout`]).
    pub fn sample_timeout(&self, n: u64, timeout: Duration) -> Result<()> {
        self.wait(Kind::Sample, n, Some(timeout))
    }

    /// Admit an insert of `n` items, waiting as `wait` says: what [`Self::insert`],
    /// [`Self::insert_timeout`] and [`Self::try_insert`] do.
    pub fn admit_insert(&self, n: u64, wait: Wait) -> Result<()> {
        self.admit_waiting(Kind::Insert, n, wait)
    }

    /// Admit a sample of `n` items, waiting as `wait` says (as [`Self::admit_insert`]).
    pub fn admit_sample(&self, n: u64, wait: Wait) -> Result<()> {
        self.admit_waiting(Kind::Sample, n, wait)
    }

    fn admit_waiting(&self, kind: Kind, n: u64, wait: Wait) -> Result<()> {
        match wait {
            Wait::Block => self.wait(kind, n, None),
            Wait::For(timeout) => self.wait(kind, n, Some(timeout)),
            Wait::Never => self.try_admit(kind, n),
        }
    }

    /// Give back an admission whose call then failed (a buffer found nothing to sample, say),
    /// so that the counts stay those of the calls that happened: the credit moves back by
    /// what the call spent, even past the range's end (by at most that call's items, until
    /// later calls bring it back in), and the waiters it may have made room for are woken.
    /// Sampling stays open once it was.
    fn give_back(&self, kind: Kind, n: u64) {
        let n = n as i64;
        let delta = match kind {
            Kind::Insert => -n * self.p,
            Kind::Sample => n * self.q,
        };
        // ORDERING: SeqCst, as every access to the state word: a waiter's `fetch_add(0)` and
        // this read-modify-write are ordered in the word's modification order, so the wake
        // below reaches every waiter this makes room for (as in `admit`).
        self.words
            .state
            .fetch_add(delta << FLAG_BITS, Ordering::SeqCst);
        if kind == Kind::Insert {
            // ORDERING: Relaxed: a count for statistics and checkpoints; no decision reads it.
            self.words.inserts.fetch_sub(n as u64, Ordering::Relaxed);
        }
        // Room for more of the same kind: wake that kind's waiters.
        self.wake(match kind {
            Kind::Insert => Kind::Sample,
            Kind::Sample => Kind::Insert,
        });
    }

    /// Close the limiter: every waiter returns [`Error::Closed`], and so does every later call.
    pub fn close(&self) {
        // ORDERING: SeqCst, as every access to the state word: a waiter's try after its
        // registration sees the flag, or the notify below (under the mutex) wakes it.
        self.words.state.fetch_or(CLOSED, Ordering::SeqCst);
        if self.shared {
            self.wake_shared();
            return;
        }
        // Under the sleep mutex, so that a waiter between its check and its sleep is woken.
        let _sleep = lock(&self.sleep);
        self.can_insert.notify_all();
        self.can_sample.notify_all();
    }

    /// Whether [`Self::close`] was called.
    pub fn is_closed(&self) -> bool {
        // ORDERING: SeqCst, as every access to the state word (a report; nothing hangs on it).
        self.words.state.load(Ordering::SeqCst) & CLOSED != 0
    }

    /// The counts and the state now ([`RateStats`]).
    pub fn stats(&self) -> RateStats {
        // ORDERING: SeqCst reads of words that move apart: the figures are exact only when no
        // call is in flight, as the doc says; the order adds nothing to that.
        let word = self.words.state.load(Ordering::SeqCst);
        let inserts = self.words.inserts.load(Ordering::SeqCst);
        let credit = word >> FLAG_BITS;
        let samples = (i128::from(inserts) * i128::from(self.p) - i128::from(credit))
            .max(0)
            .checked_div(i128::from(self.q))
            .unwrap_or(0);
        RateStats {
            inserts,
            samples: samples as u64,
            diff: credit as f64 / self.q as f64,
            open: word & OPEN != 0,
            closed: word & CLOSED != 0,
            insert_waiters: self.words.insert_waiters.load(Ordering::SeqCst),
            sample_waiters: self.words.sample_waiters.load(Ordering::SeqCst),
            // ORDERING: Relaxed: a sum for statistics.
            blocked: Duration::from_nanos(self.words.blocked_nanos.load(Ordering::Relaxed)),
        }
    }

    /// The checks of a call before any admission: its size against the batches.
    fn check(&self, kind: Kind, n: u64) -> Result<()> {
        let (largest, name) = match kind {
            Kind::Insert => (self.batches.insert, "an insert's items"),
            Kind::Sample => (self.batches.sample, "a sample's items"),
        };
        if n > largest {
            return Err(Error::InvalidParameter {
                name,
                value: n as f64,
                reason: "more than the rate limiter's Batches allow (a call this large could \
                         wait forever): raise Batches or split the call",
            });
        }
        Ok(())
    }

    fn try_admit(&self, kind: Kind, n: u64) -> Result<()> {
        self.check(kind, n)?;
        match self.admit(kind, n) {
            Some(true) => {
                self.admitted(kind, n);
                Ok(())
            }
            Some(false) => Err(Error::RateLimited(kind.what())),
            None => Err(Error::Closed),
        }
    }

    /// One attempt: `Some(true)` admitted (the credit written), `Some(false)` not now,
    /// `None` closed.
    #[inline]
    fn admit(&self, kind: Kind, n: u64) -> Option<bool> {
        let n = n as i64;
        // ORDERING: SeqCst, as every access to the state word; the compare-and-swap below
        // checks it again.
        let mut word = self.words.state.load(Ordering::SeqCst);
        loop {
            if word & CLOSED != 0 {
                return None;
            }
            let (credit, open) = (word >> FLAG_BITS, word & OPEN != 0);
            let next = match kind {
                Kind::Insert => {
                    let c = credit + n * self.p;
                    // Free while the insert ends within the first min_size items (before
                    // sampling opens, the credit counts the inserts exactly).
                    let free = !open && c <= self.open_at;
                    if !(free || c <= self.hi) {
                        return Some(false);
                    }
                    let open = open || c >= self.open_at;
                    c << FLAG_BITS | if open { OPEN } else { 0 }
                }
                Kind::Sample => {
                    let c = credit - n * self.q;
                    if !open || c < self.lo {
                        return Some(false);
                    }
                    c << FLAG_BITS | OPEN
                }
            };
            if !self.faults.rate_notifies_after_credit() {
                self.wake(kind);
            }
            if !self.faults.rate_commits_with_cas() {
                // The broken twin: the check above and this commit are two steps.
                // ORDERING: SeqCst, as the real commit's.
                self.words.state.fetch_add(next - word, Ordering::SeqCst);
                return Some(true);
            }
            // ORDERING: SeqCst: the admission's one read-modify-write, which a registered
            // waiter's `fetch_add(0)` is ordered against in the word's modification order
            // (module doc); a failure reloads the word for the next try.
            match self.words.state.compare_exchange_weak(
                word,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(true),
                Err(now) => word = now,
            }
        }
    }

    /// After an admission: the insert counter, and the other side's waiters woken.
    #[inline]
    fn admitted(&self, kind: Kind, n: u64) {
        if kind == Kind::Insert {
            // ORDERING: Relaxed: a count for statistics and checkpoints; no decision reads it.
            self.words.inserts.fetch_add(n, Ordering::Relaxed);
        }
        if self.faults.rate_notifies_after_credit() {
            self.wake(kind);
        }
    }

    /// Wakes the waiters that a call of `kind` may have made room for (an insert's:
    /// samplers; a sample's: inserters), if there are any.
    #[inline]
    fn wake(&self, kind: Kind) {
        let (waiters, cond) = match kind {
            Kind::Insert => (&self.words.sample_waiters, &self.can_sample),
            Kind::Sample => (&self.words.insert_waiters, &self.can_insert),
        };
        // ORDERING: SeqCst, read after the caller's read-modify-write of the state word: a
        // waiter registers (SeqCst) before its own `fetch_add(0)` on that word, so either its
        // second try sees this call's credit or this read sees the waiter.
        if waiters.load(Ordering::SeqCst) > 0 {
            if self.shared {
                self.wake_shared();
                return;
            }
            let _sleep = lock(&self.sleep);
            cond.notify_all();
        }
    }

    /// Wake every waiter of a shared limiter, in any process: the wake count moves on (a
    /// waiter that read the old count before its last try does not sleep), then the kernel
    /// wakes those asleep on it.
    fn wake_shared(&self) {
        // ORDERING: SeqCst, after the caller's read-modify-write of the state word and its
        // read of the waiter count: a waiter reads this count (SeqCst) before its try, so
        // either its try saw the new credit or the count it sleeps on is already stale.
        self.words.wakes.fetch_add(1, Ordering::SeqCst);
        #[cfg(loom)]
        {
            // The stand-in for the futex (see `sleep`): both kinds' queues.
            let _sleep = lock(&self.sleep);
            self.can_insert.notify_all();
            self.can_sample.notify_all();
        }
        #[cfg(not(loom))]
        futex::wake_all(&self.words.wakes);
    }

    /// Sleep until woken, `nap` passes (None: no limit) or, for a shared limiter, the wake
    /// count moves from `seen`: on the condition variable under `guard`, or on the futex.
    fn sleep<'a>(
        &'a self,
        cond: &'a Condvar,
        guard: Option<MutexGuard<'a, ()>>,
        seen: u32,
        nap: Option<Duration>,
    ) -> Option<MutexGuard<'a, ()>> {
        let Some(guard) = guard else {
            #[cfg(loom)]
            {
                // Loom has no futex: a mutex and condition variable stand in for the kernel's
                // queue. The check of the word and the sleep are one step under the mutex, as
                // the kernel's are; a wake bumps the word before it takes the mutex to notify.
                // No timeout: a lost wake-up is a deadlock that loom reports.
                let _ = nap;
                let sleep = lock(&self.sleep);
                // ORDERING: SeqCst, as the kernel's read of the word.
                if self.words.wakes.load(Ordering::SeqCst) == seen {
                    drop(cond.wait(sleep).unwrap_or_else(|e| e.into_inner()));
                }
            }
            #[cfg(not(loom))]
            futex::wait(&self.words.wakes, seen, nap);
            return None;
        };
        Some(match nap {
            None => cond.wait(guard).unwrap_or_else(|e| e.into_inner()),
            Some(nap) => match cond.wait_timeout(guard, nap) {
                Ok((guard, _)) => guard,
                Err(e) => e.into_inner().0,
            },
        })
    }

    fn wait(&self, kind: Kind, n: u64, timeout: Option<Duration>) -> Result<()> {
        self.check(kind, n)?;
        match self.admit(kind, n) {
            Some(true) => {
                self.admitted(kind, n);
                return Ok(());
            }
            None => return Err(Error::Closed),
            Some(false) => {}
        }
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let (waiters, cond) = match kind {
            Kind::Insert => (&self.words.insert_waiters, &self.can_insert),
            Kind::Sample => (&self.words.sample_waiters, &self.can_sample),
        };
        // A shared limiter's waiters sleep on the futex, with no mutex.
        let mut sleep = (!self.shared).then(|| lock(&self.sleep));
        // ORDERING: SeqCst: the registration, before the `fetch_add(0)` below (see `wake`).
        waiters.fetch_add(1, Ordering::SeqCst);
        // ORDERING: SeqCst, a read-modify-write of the state, not a load, after registering:
        // either it comes after an admitter's compare-and-swap in the word's order (and the
        // try below sees its credit), or before it, and then the admitter's compare-and-swap
        // acquires it and its look for waiters finds this one. Two plain SeqCst accesses to two words would
        // do in the C++ model, but this holds with acquire/release alone (as loom checks).
        self.words.state.fetch_add(0, Ordering::SeqCst);
        let result = loop {
            // ORDERING: SeqCst, read before the try (see `wake_shared`); unused but by a
            // shared limiter.
            let mut seen = self.words.wakes.load(Ordering::SeqCst);
            match self.admit(kind, n) {
                Some(true) => break Ok(()),
                None => break Err(Error::Closed),
                Some(false) => {}
            }
            if !self.faults.rate_reads_wakes_before_try() {
                // The broken twin: the count read after the try.
                // ORDERING: SeqCst, as the real read.
                seen = self.words.wakes.load(Ordering::SeqCst);
            }
            let nap = match deadline {
                None => None,
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break Err(Error::Timeout {
                            what: kind.what(),
                            seconds: timeout.unwrap_or_default().as_secs_f64(),
                        });
                    }
                    Some(deadline - now)
                }
            };
            sleep = self.sleep(cond, sleep, seen, nap);
        };
        // ORDERING: SeqCst, as the registration.
        waiters.fetch_sub(1, Ordering::SeqCst);
        drop(sleep);
        let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // ORDERING: Relaxed: a sum for statistics.
        self.words
            .blocked_nanos
            .fetch_add(waited, Ordering::Relaxed);
        if result.is_ok() {
            self.admitted(kind, n);
        }
        result
    }
}

/// The limiter of a rate limit and the largest calls it admits (a configuration's
/// [`rate_limit`](crate::Config::rate_limit)), if there is one: continuing from `counts`
/// (inserts, samples: a checkpoint's) when given, else with nothing counted.
pub(crate) fn rate_limiter_from(
    limit: Option<(RateLimit, Batches)>,
    counts: Option<(u64, u64)>,
) -> Result<Option<RateLimiter>> {
    rate_limiter_in(limit, counts, &mut Region::Heap)
}

/// [`rate_limiter_from`], its words from `region` (in a mapping another process made: the
/// words found there, `counts` ignored).
pub(crate) fn rate_limiter_in(
    limit: Option<(RateLimit, Batches)>,
    counts: Option<(u64, u64)>,
    region: &mut Region,
) -> Result<Option<RateLimiter>> {
    let Some((limit, batches)) = limit else {
        return Ok(None);
    };
    let fresh = region.is_fresh();
    let limiter = RateLimiter::in_region(limit, batches, Faults::none(), region)?;
    if let (Some((inserts, samples)), true) = (counts, fresh) {
        limiter.set_counts(inserts, samples)?;
    }
    Ok(Some(limiter))
}

/// The two methods every family has over its `rate_limiter()`, written once: the provided
/// methods of [`ConcurrentBuffer`](crate::ConcurrentBuffer) (`$vis` empty) and the inherent
/// ones of the sequence and sharded buffers (`$vis` is `pub`).
macro_rules! rate_limit_methods {
    ($($vis:tt)*) => {
        /// The rate limiter's counts and state ([`RateLimiter::stats`]), when there is one.
        $($vis)* fn rate_stats(&self) -> Option<$crate::rate::RateStats> {
            self.rate_limiter().map($crate::rate::RateLimiter::stats)
        }

        /// Close the rate limiter: every call waiting for it (an insert, a lane's step, a
        /// sample) returns [`Error::Closed`](crate::Error::Closed) now, and so does every
        /// later one (priority updates and reads go on). How a trainer stops its actors and
        /// learners. A buffer without a rate limit has no waits to end: it does nothing.
        $($vis)* fn close(&self) {
            if let Some(limiter) = self.rate_limiter() {
                limiter.close();
            }
        }
    };
}
pub(crate) use rate_limit_methods;

mod admission;
#[cfg(not(loom))]
mod futex;
mod params;
pub(crate) use admission::Admission;
pub(crate) use params::Params;
