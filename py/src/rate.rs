//! The rate limiter (`kary_replay.RateLimiter`; `kary_replay::rate` underneath). Waits run
//! without the GIL, in slices, so that a signal (Ctrl-C) interrupts them; an interrupted or
//! timed-out wait spends nothing.

use std::time::{Duration, Instant};

use kary_replay::rate::{Batches, ErrorBuffer, RateLimit, RateStats};
use kary_replay::{Error, Wait};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{argument_error, py_err};

/// The longest a wait runs without the GIL before it looks for signals.
const SLICE: Duration = Duration::from_millis(50);

/// Holds the ratio of sampled to inserted items (Reverb's rate limiters, counted in items).
#[pyclass(frozen, module = "kary_replay._native")]
pub(crate) struct RateLimiter(kary_replay::rate::RateLimiter);

/// Run `call` under the rate limiter's wait of `timeout` seconds (None: as long as it takes,
/// 0: not at all): first without waiting (an admitted call costs no GIL hand-over beyond
/// the one `call` makes), then in slices of at most `SLICE` without the GIL, looking for
/// signals (Ctrl-C) between them, so that a wait can be interrupted; a refused or
/// interrupted wait spends nothing. Every waiting call of the package goes through here.
pub(crate) fn waiting<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    mut call: impl FnMut(Wait) -> kary_replay::Result<T> + Send,
) -> PyResult<T> {
    let limit = match timeout {
        None => None,
        Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
        Some(t) => return Err(argument_error(format!("timeout must be >= 0, got {t}"))),
    };
    match py.detach(|| call(Wait::Never)) {
        Err(Error::RateLimited(_)) if limit != Some(Duration::ZERO) => {}
        other => return other.map_err(|e| py_err(py, e)),
    }
    let start = Instant::now();
    loop {
        let left = limit.map(|l| l.saturating_sub(start.elapsed()));
        let slice = left.map_or(SLICE, |l| l.min(SLICE));
        match py.detach(|| call(Wait::For(slice))) {
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

/// The rate limit of the native constructors' arguments: `kind` is "min_size" (`size`: no
/// sample before that many inserts), "ratio" (`samples_per_insert`, `size` = min_size,
/// `error_buffer` a float or a (min_diff, max_diff) pair) or "queue" (`size`).
pub(crate) fn limit_from(
    kind: &str,
    size: u64,
    samples_per_insert: f64,
    error_buffer: Option<&Bound<'_, PyAny>>,
) -> PyResult<RateLimit> {
    Ok(match kind {
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
                                "error_buffer is a number or a (min_diff, max_diff) pair".into(),
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
    })
}

/// The rate limit a `rate_limit=` argument names (a `kary_replay.rate` dataclass, which
/// `kary_replay.rate._native_args` checks), or None for None.
pub(crate) fn rate_limit_arg(
    py: Python<'_>,
    limit: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<RateLimit>> {
    let Some(limit) = limit.filter(|l| !l.is_none()) else {
        return Ok(None);
    };
    let args = py
        .import("kary_replay.rate")?
        .call_method1("_native_args", (limit,))?;
    let (kind, size, spi, error_buffer): (String, u64, f64, Option<Bound<'_, PyAny>>) =
        args.extract()?;
    limit_from(&kind, size, spi, error_buffer.as_ref()).map(Some)
}

/// A limit as the native constructors take it: (kind, size, samples_per_insert,
/// error_buffer, max_insert, max_sample).
pub(crate) fn limit_args<'py>(
    py: Python<'py>,
    (limit, batches): (RateLimit, Batches),
) -> PyResult<Bound<'py, PyTuple>> {
    let (kind, size, spi, error_buffer): (&str, u64, f64, Option<Bound<'py, PyAny>>) = match limit {
        RateLimit::MinSize(n) => ("min_size", n, 1.0, None),
        RateLimit::Queue(n) => ("queue", n, 1.0, None),
        RateLimit::SampleToInsertRatio {
            samples_per_insert,
            min_size,
            error_buffer,
        } => {
            let e = match error_buffer {
                ErrorBuffer::Symmetric(e) => e.into_pyobject(py)?.into_any(),
                ErrorBuffer::Range(lo, hi) => (lo, hi).into_pyobject(py)?.into_any(),
            };
            ("ratio", min_size, samples_per_insert, Some(e))
        }
    };
    (
        kind,
        size,
        spi,
        error_buffer,
        batches.insert,
        batches.sample,
    )
        .into_pyobject(py)
}

/// A rate limiter's stats as the dict of `RateStats`.
pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &RateStats) -> PyResult<Bound<'py, PyDict>> {
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

#[pymethods]
impl RateLimiter {
    /// The limit of `limit_from`'s arguments; `max_insert` and `max_sample` are the largest
    /// calls it admits; `counts` (inserts, samples) continues from a checkpoint's counts.
    #[new]
    #[pyo3(signature = (kind, size, samples_per_insert, error_buffer, max_insert, max_sample,
        counts=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        py: Python<'_>,
        kind: &str,
        size: u64,
        samples_per_insert: f64,
        error_buffer: Option<Bound<'_, PyAny>>,
        max_insert: u64,
        max_sample: u64,
        counts: Option<(u64, u64)>,
    ) -> PyResult<RateLimiter> {
        let limit = limit_from(kind, size, samples_per_insert, error_buffer.as_ref())?;
        let batches = Batches {
            insert: max_insert,
            sample: max_sample,
        };
        match counts {
            None => kary_replay::rate::RateLimiter::new(limit, batches),
            Some((inserts, samples)) => {
                kary_replay::rate::RateLimiter::with_counts(limit, batches, inserts, samples)
            }
        }
        .map(RateLimiter)
        .map_err(|e| py_err(py, e))
    }

    /// Admit an insert of `n` items, waiting at most `timeout` seconds (None: as long as it
    /// takes); the GIL is released while it waits.
    #[pyo3(signature = (n, timeout=None))]
    pub(crate) fn insert(&self, py: Python<'_>, n: u64, timeout: Option<f64>) -> PyResult<()> {
        waiting(py, timeout, |wait| self.0.admit_insert(n, wait))
    }

    /// Admit a sample of `n` items (as `insert`).
    #[pyo3(signature = (n, timeout=None))]
    pub(crate) fn sample(&self, py: Python<'_>, n: u64, timeout: Option<f64>) -> PyResult<()> {
        waiting(py, timeout, |wait| self.0.admit_sample(n, wait))
    }

    /// Admit an insert of `n` items now, or raise `RateLimitedError`.
    pub(crate) fn try_insert(&self, py: Python<'_>, n: u64) -> PyResult<()> {
        self.0.try_insert(n).map_err(|e| py_err(py, e))
    }

    /// Admit a sample of `n` items now, or raise `RateLimitedError`.
    pub(crate) fn try_sample(&self, py: Python<'_>, n: u64) -> PyResult<()> {
        self.0.try_sample(n).map_err(|e| py_err(py, e))
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
        stats_dict(py, &self.0.stats())
    }
}
