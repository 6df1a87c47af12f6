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

/// xoshiro256** seeded by splitmix64: the generator of the Python package's `Rng`, of both
/// reference trainers and of any caller who wants a small, fast, seedable source whose whole
/// state is four words (a checkpoint keeps them).
///
/// ```
/// use kary_replay::{RandomSource, Xoshiro256};
/// let mut a = Xoshiro256::new(7);
/// let state = a.state();
/// let x = a.next_f64();
/// assert!((0.0..1.0).contains(&x));
/// // The same state draws the same numbers.
/// let mut b = Xoshiro256::from_state(state).unwrap();
/// assert_eq!(b.next_f64(), x);
/// assert!(Xoshiro256::from_state([0; 4]).is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// A generator seeded from `seed` by splitmix64 (so any seed, 0 included, is good).
    pub fn new(mut seed: u64) -> Xoshiro256 {
        let mut s = [0u64; 4];
        for x in &mut s {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *x = z ^ (z >> 31);
        }
        Xoshiro256 { s }
    }

    /// A generator seeded from the process's random hash keys (which the standard library
    /// takes from the operating system) and a process-wide counter: two calls never share a
    /// seed. (No clock: it also runs under Miri's isolation.)
    pub fn from_entropy() -> Xoshiro256 {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
        Xoshiro256::new(h.finish())
    }

    /// A generator in a saved state; `None` for the all-zero state, which xoshiro never
    /// reaches (and never leaves).
    pub fn from_state(s: [u64; 4]) -> Option<Xoshiro256> {
        (s != [0; 4]).then_some(Xoshiro256 { s })
    }

    /// The four state words.
    pub fn state(&self) -> [u64; 4] {
        self.s
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}

/// The top 53 bits of [`Xoshiro256::next_u64`], scaled into `[0, 1)`.
impl RandomSource for Xoshiro256 {
    #[inline]
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
