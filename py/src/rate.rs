//! The rate limiter (`kary_replay.RateLimiter`; `kary_replay::rate` underneath). Waits run
//! without the GIL, in slices, so that a signal (Ctrl-C) interrupts them; an interrupted or
//! timed-out wait spends nothing.

use std::time::{Duration, Instant};

use kary_replay::rate::{Batches, ErrorBuffer, RateLimit};
use kary_replay::Error;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{argument_error, py_err};

/// The longest a wait runs without the GIL before it looks for signals.
const SLICE: Duration = Duration::from_millis(50);

/// Holds the ratio of sampled to inserted items (Reverb's rate limiters, counted in items).
#[pyclass(frozen, module = "kary_replay._native")]
pub(crate) struct RateLimiter(kary_replay::rate::RateLimiter);

/// Which side a call is on.
#[derive(Clone, Copy)]
enum Side {
    Insert,
    Sample,
}

impl RateLimiter {
    fn try_side(&self, side: Side, n: u64) -> kary_replay::Result<()> {
        match side {
            Side::Insert => self.0.try_insert(n),
            Side::Sample => self.0.try_sample(n),
        }
    }

    fn wait_side(&self, side: Side, n: u64, timeout: Duration) -> kary_replay::Result<()> {
        match side {
            Side::Insert => self.0.insert_timeout(n, timeout),
            Side::Sample => self.0.sample_timeout(n, timeout),
        }
    }

    /// Waits at most `timeout` (None: as long as it takes) in slices without the GIL,
    /// looking for signals between them.
    fn wait(&self, py: Python<'_>, side: Side, n: u64, timeout: Option<f64>) -> PyResult<()> {
        let limit = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => return Err(argument_error(format!("timeout must be >= 0, got {t}"))),
        };
        // The first try holds the GIL: an admitted call (the common case) costs no hand-over.
        match self.try_side(side, n) {
            Err(Error::RateLimited(_)) => {}
            other => return other.map_err(|e| py_err(py, e)),
        }
        let start = Instant::now();
        loop {
            let left = limit.map(|l| l.saturating_sub(start.elapsed()));
            let slice = left.map_or(SLICE, |l| l.min(SLICE));
            match py.detach(|| self.wait_side(side, n, slice)) {
                Err(Error::Timeout { what, .. }) => {
                    if left.is_some_and(|l| l <= slice) {
                        let seconds = limit.unwrap_or_default().as_secs_f64();
                        return Err(py_err(py, Error::Timeout { what, seconds }));
                    }
                    py.check_signals()?;
                }
                other => return other.map_err(|e| py_err(py, e)),
            }
        }
    }
}

#[pymethods]
impl RateLimiter {
    /// `kind` is "min_size" (`size`: no sample before that many inserts), "ratio"
    /// (`samples_per_insert`, `size` = min_size, `error_buffer` a float or a (min_diff,
    /// max_diff) pair) or "queue" (`size`); `max_insert` and `max_sample` are the largest
    /// calls it admits.
    #[new]
    #[pyo3(signature = (kind, size, samples_per_insert, error_buffer, max_insert, max_sample))]
    pub(crate) fn new(
        py: Python<'_>,
        kind: &str,
        size: u64,
        samples_per_insert: f64,
        error_buffer: Option<Bound<'_, PyAny>>,
        max_insert: u64,
        max_sample: u64,
    ) -> PyResult<RateLimiter> {
        let limit = match kind {
            "min_size" => RateLimit::MinSize(size),
            "queue" => RateLimit::Queue(size),
            "ratio" => {
                let error_buffer = match error_buffer {
                    None => return Err(argument_error("a ratio needs an error_buffer".into())),
                    Some(e) => match e.extract::<f64>() {
                        Ok(e) => ErrorBuffer::Symmetric(e),
                        Err(_) => {
                            let (lo, hi) = e.extract::<(f64, f64)>().map_err(|_| {
                                argument_error(
                                    "error_buffer is a number or a (min_diff, max_diff) pair"
                                        .into(),
                                )
                            })?;
                            ErrorBuffer::Range(lo, hi)
                        }
                    },
                };
                RateLimit::SampleToInsertRatio {
                    samples_per_insert,
                    min_size: size,
                    error_buffer,
                }
            }
            other => {
                return Err(argument_error(format!(
                    "unknown rate limit kind {other:?}: min_size, ratio or queue"
                )))
            }
        };
        let batches = Batches {
            insert: max_insert,
            sample: max_sample,
        };
        kary_replay::rate::RateLimiter::new(limit, batches)
            .map(RateLimiter)
            .map_err(|e| py_err(py, e))
    }

    /// Admit an insert of `n` items, waiting at most `timeout` seconds (None: as long as it
    /// takes); the GIL is released while it waits.
    #[pyo3(signature = (n, timeout=None))]
    pub(crate) fn insert(&self, py: Python<'_>, n: u64, timeout: Option<f64>) -> PyResult<()> {
        self.wait(py, Side::Insert, n, timeout)
    }

    /// Admit a sample of `n` items (as `insert`).
    #[pyo3(signature = (n, timeout=None))]
    pub(crate) fn sample(&self, py: Python<'_>, n: u64, timeout: Option<f64>) -> PyResult<()> {
        self.wait(py, Side::Sample, n, timeout)
    }

    /// Admit an insert of `n` items now, or raise `RateLimitedError`.
    pub(crate) fn try_insert(&self, py: Python<'_>, n: u64) -> PyResult<()> {
        self.try_side(Side::Insert, n).map_err(|e| py_err(py, e))
    }

    /// Admit a sample of `n` items now, or raise `RateLimitedError`.
    pub(crate) fn try_sample(&self, py: Python<'_>, n: u64) -> PyResult<()> {
        self.try_side(Side::Sample, n).map_err(|e| py_err(py, e))
    }

    /// Wake every waiter with `ClosedError`; every later call raises it too.
    pub(crate) fn close(&self, py: Python<'_>) {
        py.detach(|| self.0.close())
    }

    /// Whether `close` was called.
    #[getter]
    pub(crate) fn closed(&self) -> bool {
        self.0.is_closed()
    }

    /// `samples_per_insert` as the exact fraction (p, q) it holds.
    pub(crate) fn samples_per_insert(&self) -> (u64, u64) {
        self.0.samples_per_insert()
    }

    /// inserts, samples, diff (inserts x samples_per_insert - samples), open, closed,
    /// insert_waiters, sample_waiters, blocked_s.
    pub(crate) fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.0.stats();
        let d = PyDict::new(py);
        d.set_item("inserts", s.inserts)?;
        d.set_item("samples", s.samples)?;
        d.set_item("diff", s.diff)?;
        d.set_item("open", s.open)?;
        d.set_item("closed", s.closed)?;
        d.set_item("insert_waiters", s.insert_waiters)?;
        d.set_item("sample_waiters", s.sample_waiters)?;
        d.set_item("blocked_s", s.blocked.as_secs_f64())?;
        Ok(d)
    }
}
