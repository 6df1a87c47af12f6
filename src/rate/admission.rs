//! A buffer's admission of one call by its limiter, given back unless the call succeeds.

use super::*;

/// An admission by a buffer's limiter (or none, for a buffer without one), given back when
/// dropped unless [`Admission::settle`] finds its call succeeded.
#[must_use = "an admission is given back when dropped"]
pub(crate) struct Admission<'a> {
    limiter: Option<&'a RateLimiter>,
    kind: Kind,
    n: u64,
}

impl<'a> Admission<'a> {
    /// Admit an insert of `items` through `limiter`, if there is one.
    #[inline]
    pub(crate) fn insert(
        limiter: Option<&'a RateLimiter>,
        items: usize,
        wait: Wait,
    ) -> Result<Admission<'a>> {
        Admission::new(limiter, Kind::Insert, items, wait)
    }

    /// Admit a sample of `items` through `limiter`, if there is one.
    #[inline]
    pub(crate) fn sample(
        limiter: Option<&'a RateLimiter>,
        items: usize,
        wait: Wait,
    ) -> Result<Admission<'a>> {
        Admission::new(limiter, Kind::Sample, items, wait)
    }

    #[inline]
    fn new(
        limiter: Option<&'a RateLimiter>,
        kind: Kind,
        items: usize,
        wait: Wait,
    ) -> Result<Admission<'a>> {
        let n = items as u64;
        match limiter {
            // A call of nothing (a lane step that completes no window) spends nothing and
            // never waits; it is refused once the limiter is closed, as every call is.
            Some(limiter) if n == 0 && limiter.is_closed() => return Err(Error::Closed),
            Some(limiter) if n > 0 => limiter.admit_waiting(kind, n, wait)?,
            _ => {}
        }
        Ok(Admission { limiter, kind, n })
    }

    /// Whether there is a limiter (a buffer with a limit makes its `Empty` check after the
    /// admission, [`Self::until_filled`]).
    #[inline]
    pub(crate) fn limited(limiter: Option<&RateLimiter>) -> bool {
        limiter.is_some()
    }

    /// After a sample's admission on a buffer with a limit: wait until the buffer holds an
    /// item (`filled`). Inserts are admitted before they write, so the sample that the
    /// first inserts admit may find them still writing; it waits for them as `wait` says
    /// (from `started`, the call's start, taken when there is a limiter), polling with a backoff (this wait lasts one
    /// write, or until someone inserts into a buffer that was cleared). An error gives the
    /// admission back when the caller drops it.
    pub(crate) fn until_filled(
        &self,
        wait: Wait,
        started: Option<Instant>,
        filled: impl Fn() -> bool,
    ) -> Result<()> {
        let (Some(limiter), Some(started)) = (self.limiter, started) else {
            return Ok(());
        };
        let mut round = 0u32;
        while !filled() {
            if limiter.is_closed() {
                return Err(Error::Closed);
            }
            match wait {
                Wait::Never => return Err(Error::RateLimited(Kind::Sample.what())),
                Wait::For(timeout) if started.elapsed() >= timeout => {
                    return Err(Error::Timeout {
                        what: Kind::Sample.what(),
                        seconds: timeout.as_secs_f64(),
                    })
                }
                _ => {}
            }
            match round {
                0..=63 => std::hint::spin_loop(),
                64..=127 => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_micros(u64::from(round.min(1000)))),
            }
            round = round.saturating_add(1);
        }
        Ok(())
    }

    /// The admitted call's result: kept when it succeeded, given back when it failed.
    #[inline]
    pub(crate) fn settle<T>(self, result: Result<T>) -> Result<T> {
        if result.is_ok() {
            std::mem::forget(self);
        }
        result
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if let (Some(limiter), true) = (self.limiter, self.n > 0) {
            limiter.give_back(self.kind, self.n);
        }
    }
}
