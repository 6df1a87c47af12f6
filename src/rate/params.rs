//! A limit's integer form, and the checks of a limit.

use super::*;

/// A limit's integer form: `samples_per_insert = p / q`, the credit's bounds once sampling
/// is open, and the credit at which it opens. Computing it checks the limit (no atomics:
/// a [`crate::Config`] checks its limit with it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub(super) p: i64,
    pub(super) q: i64,
    pub(super) lo: i64,
    pub(super) hi: i64,
    pub(super) open_at: i64,
}

impl Params {
    /// The checks of [`RateLimiter::new`] and the integer form.
    pub(crate) fn new(limit: RateLimit, batches: Batches) -> Result<Params> {
        let (spi, min_size, min_diff, max_diff) = limit.reverb_parameters();
        let invalid = |name, value: f64, reason| Error::InvalidParameter {
            name,
            value,
            reason,
        };
        if !(spi.is_finite() && spi > 0.0 && spi <= MAX_COUNT as f64) {
            return Err(invalid(
                "samples_per_insert",
                spi,
                "must be finite, > 0 and <= 2^24",
            ));
        }
        if min_size == 0 || min_size > MAX_MIN_SIZE {
            return Err(invalid("min_size", min_size as f64, "must be in 1..=2^36"));
        }
        if min_diff.is_nan() || max_diff.is_nan() || min_diff > max_diff {
            return Err(invalid(
                "error_buffer",
                max_diff - min_diff,
                "must be a range [min_diff, max_diff] with min_diff <= max_diff (a symmetric buffer >= 0)",
            ));
        }
        for (name, n) in [
            ("Batches::insert", batches.insert),
            ("Batches::sample", batches.sample),
        ] {
            if n == 0 || n > MAX_COUNT {
                return Err(invalid(name, n as f64, "must be in 1..=2^24"));
            }
        }
        let (p, q) = fraction(spi);
        let bound = |x: f64, round: fn(f64) -> f64| -> i64 {
            let scaled = round(x * q as f64);
            if scaled >= UNBOUNDED as f64 {
                UNBOUNDED
            } else if scaled <= -(UNBOUNDED as f64) {
                -UNBOUNDED
            } else {
                scaled as i64
            }
        };
        let open_at = min_size as i64 * p;
        let (lo, hi) = match limit {
            // The symmetric buffer's offset is exact in credit units.
            RateLimit::SampleToInsertRatio {
                error_buffer: ErrorBuffer::Symmetric(e),
                ..
            } => {
                let e = bound(e, f64::floor);
                (
                    open_at.saturating_sub(e).max(-UNBOUNDED),
                    (open_at + e).min(UNBOUNDED),
                )
            }
            _ => (bound(min_diff, f64::ceil), bound(max_diff, f64::floor)),
        };
        let (n_in, n_out) = (batches.insert as i64 * p, batches.sample as i64 * q);
        // Some credit in the band must admit the largest insert or the largest sample.
        if hi - lo < n_in + n_out - 1 {
            return Err(invalid(
                "error_buffer",
                (hi - lo) as f64 / q as f64,
                "too narrow: a credit would admit neither the largest insert nor the largest sample \
                 (deadlock); the range must span at least Batches::insert * samples_per_insert + \
                 Batches::sample - 1/q samples (or make the batches smaller)",
            ));
        }
        // The insert that reaches min_size must be admissible.
        if hi < open_at + (batches.insert as i64 - 1) * p {
            return Err(invalid(
                "max_diff",
                hi as f64 / q as f64,
                "below samples_per_insert * (min_size + Batches::insert - 1): the insert that \
                 reaches min_size could never be admitted and sampling would never start",
            ));
        }
        if lo > open_at {
            return Err(invalid(
                "min_diff",
                lo as f64 / q as f64,
                "above samples_per_insert * min_size: the first sample would wait for more \
                 inserts than min_size (Reverb refuses this too)",
            ));
        }
        Ok(Params {
            p,
            q,
            lo,
            hi,
            open_at,
        })
    }
}

/// The fraction `p / q` nearest `x` with `q <= MAX_DENOMINATOR` and `p <= MAX_COUNT`
/// (continued fractions; exact for every `x` that is such a fraction).
fn fraction(x: f64) -> (i64, i64) {
    // Convergents h/k of x's continued fraction, stopping before the bounds are passed.
    let (mut h0, mut h1, mut k0, mut k1) = (0i64, 1i64, 1i64, 0i64);
    let mut r = x;
    let mut best = (x.round().max(1.0) as i64, 1i64);
    for _ in 0..64 {
        let a = r.floor();
        if a > MAX_COUNT as f64 {
            break;
        }
        let a = a as i64;
        let (h2, k2) = (a * h1 + h0, a * k1 + k0);
        if k2 > MAX_DENOMINATOR as i64 || h2 > MAX_COUNT as i64 {
            break;
        }
        best = (h2, k2);
        (h0, h1, k0, k1) = (h1, h2, k1, k2);
        let frac = r - r.floor();
        if frac.abs() < 1e-12 || (h2 as f64 / k2 as f64 - x).abs() <= x * 1e-15 {
            break;
        }
        r = 1.0 / frac;
    }
    (best.0.max(1), best.1)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::rate::MAX_DENOMINATOR;

    #[test]
    fn fractions_are_exact_for_simple_ratios() {
        assert_eq!(fraction(8.0), (8, 1));
        assert_eq!(fraction(0.25), (1, 4));
        assert_eq!(fraction(0.1), (1, 10));
        assert_eq!(fraction(1.0 / 3.0), (1, 3));
        assert_eq!(fraction(2.5), (5, 2));
        assert_eq!(fraction(1.0), (1, 1));
        let (p, q) = fraction(std::f64::consts::PI);
        assert!(
            q <= MAX_DENOMINATOR as i64
                && (p as f64 / q as f64 - std::f64::consts::PI).abs() < 1e-9
        );
    }
}
