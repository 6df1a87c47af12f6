//! The random source: xoshiro256** seeded by splitmix64, whose state can be pickled.

use std::sync::Mutex;

use crate::errors::argument_error;
use kary_replay::RandomSource;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The generator behind [`Rng`]: the crate's xoshiro256**.
pub(crate) type Xoshiro = kary_replay::Xoshiro256;

/// A random generator for sampling: seed it once and pass it to every call of one thread
/// (it is never reseeded). Picklable; safe to share, though a generator per thread avoids
/// waiting on its lock.
#[pyclass(frozen, module = "kary_replay._native")]
pub(crate) struct Rng(pub(crate) Mutex<Xoshiro>);

/// A seed from the clock and the process id, for generators the caller did not seed.
pub(crate) fn entropy_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (std::process::id() as u64).rotate_left(32)
}

#[pymethods]
impl Rng {
    #[new]
    #[pyo3(signature = (seed=None))]
    pub(crate) fn new(seed: Option<u64>) -> Rng {
        Rng(Mutex::new(Xoshiro::new(seed.unwrap_or_else(entropy_seed))))
    }

    /// A uniform float in [0, 1) (for tests and for callers' own draws). Waits for the
    /// generator's lock without the GIL.
    pub(crate) fn random(&self, py: Python<'_>) -> f64 {
        py.detach(|| self.0.lock().unwrap_or_else(|e| e.into_inner()).next_f64())
    }

    /// The four state words. Waits for the generator's lock without the GIL.
    pub(crate) fn state(&self, py: Python<'_>) -> (u64, u64, u64, u64) {
        let s = py.detach(|| self.0.lock().unwrap_or_else(|e| e.into_inner()).state());
        (s[0], s[1], s[2], s[3])
    }

    /// A generator in a given state (all zero is refused: xoshiro never reaches it).
    #[staticmethod]
    pub(crate) fn from_state(state: (u64, u64, u64, u64)) -> PyResult<Rng> {
        let s = [state.0, state.1, state.2, state.3];
        let generator = Xoshiro::from_state(s)
            .ok_or_else(|| argument_error("an all-zero generator state".into()))?;
        Ok(Rng(Mutex::new(generator)))
    }

    pub(crate) fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let from_state = py.get_type::<Rng>().getattr("from_state")?;
        let args = PyTuple::new(py, [slf.get().state(py).into_pyobject(py)?])?;
        Ok((from_state, args))
    }
}
