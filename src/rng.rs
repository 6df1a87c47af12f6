//! The random numbers a sample draws, behind the crate's own small trait.
//!
//! Sampling takes `&mut dyn RandomSource`, so every buffer (the concurrent ones through
//! `dyn ConcurrentBuffer` included) takes any generator without a type parameter, and the
//! public API does not name a version of `rand`. With the `rand` feature (on by default)
//! every `rand::RngCore` is a `RandomSource`, drawing exactly what `rand::Rng::random::<f64>`
//! draws, so seeded results are those of `rand`.

/// A source of uniform draws in `[0, 1)` for sampling.
///
/// ```
/// use kary_replay::RandomSource;
/// // A caller's own generator (here a counter, for illustration only).
/// struct Steps(u32);
/// impl RandomSource for Steps {
///     fn next_f64(&mut self) -> f64 {
///         self.0 = (self.0 + 1) % 10;
///         f64::from(self.0) / 10.0
///     }
/// }
/// let mut steps = Steps(0);
/// let source: &mut dyn RandomSource = &mut steps;
/// let mut draws = [0.0; 3];
/// source.fill_f64(&mut draws);
/// assert_eq!(draws, [0.1, 0.2, 0.3]);
/// ```
pub trait RandomSource {
    /// One uniform draw in `[0, 1)`.
    fn next_f64(&mut self) -> f64;

    /// Fill `out` with uniform draws in `[0, 1)` (one dynamic call per batch).
    fn fill_f64(&mut self, out: &mut [f64]) {
        for x in out {
            *x = self.next_f64();
        }
    }
}

#[cfg(feature = "rand")]
impl<R: rand::RngCore + ?Sized> RandomSource for R {
    #[inline]
    fn next_f64(&mut self) -> f64 {
        rand::Rng::random::<f64>(self)
    }

    #[inline]
    fn fill_f64(&mut self, out: &mut [f64]) {
        for x in out {
            *x = rand::Rng::random::<f64>(self);
        }
    }
}
