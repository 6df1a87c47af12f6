//! The size of the long tests: `KARY_STRESS_SCALE` (a factor, default 1) scales the rounds of
//! the soak, stress, kill and crash tests, so that the fast tier runs them small and the full
//! run at full size (`scripts/test.sh`), and Miri and ThreadSanitizer at what they can afford.

// Each test binary includes this file and uses one of the two.
#![allow(dead_code)]

/// `KARY_STRESS_SCALE`, or 1 when it is not set or not a number.
pub fn factor() -> f64 {
    std::env::var("KARY_STRESS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// `full` scaled by [`factor`], and never below `least`.
pub fn scaled(full: usize, least: usize) -> usize {
    ((full as f64 * factor()) as usize).max(least)
}
