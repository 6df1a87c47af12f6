//! The bare tree.

use crate::errors::py_err;
use crate::input::{floats_from, indices_from};
use crate::rng::{entropy_seed, Rng, Xoshiro};
use std::sync::Mutex;

use kary_replay::{Error, RandomSource};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Sampled leaves: (indices, values).
pub(crate) type Drawn<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f64>>);

/// A K-ary sum tree over `capacity` leaves (the crate's `SumTree`): set leaves by index,
/// find the leaf where a prefix sum lands, sample proportionally. No exponent is applied:
/// the leaves are what you set. Safe to share between threads (one lock); batch calls run
/// without the GIL. The drop-ins for TorchRL and tianshou put it in place of their trees.
#[pyclass(frozen, module = "kary_replay._native")]
pub(crate) struct SumTree {
    pub(crate) tree: Mutex<kary_replay::SumTree>,
}

impl SumTree {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, kary_replay::SumTree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `f` on the tree under its lock, the GIL released while it waits and works.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut kary_replay::SumTree) -> T + Send,
    ) -> T {
        py.detach(|| f(&mut self.lock()))
    }
}

#[pymethods]
impl SumTree {
    #[new]
    #[pyo3(signature = (capacity, fanout=8))]
    pub(crate) fn new(py: Python<'_>, capacity: usize, fanout: usize) -> PyResult<SumTree> {
        let fanout = kary_replay::Fanout::new(fanout).map_err(|e| py_err(py, e))?;
        let tree = kary_replay::SumTree::with_max(capacity, fanout).map_err(|e| py_err(py, e))?;
        Ok(SumTree {
            tree: Mutex::new(tree),
        })
    }

    pub(crate) fn __len__(&self, py: Python<'_>) -> usize {
        self.with(py, |t| t.len())
    }

    /// Set leaves `indices` to `values` (finite, >= 0; a repeated index: the last wins). On
    /// a bad index or value nothing changes.
    pub(crate) fn set(
        &self,
        py: Python<'_>,
        indices: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let len = self.__len__(py);
        let indices = indices_from(py, indices, len)?;
        let mut values = floats_from(py, values)?;
        if values.len() == 1 && indices.len() != 1 {
            values = vec![values[0]; indices.len()];
        }
        py.detach(|| self.lock().set_batch(&indices, &values))
            .map_err(|e| py_err(py, e))
    }

    /// The leaves at `indices` (float64).
    pub(crate) fn get<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let len = self.__len__(py);
        let indices = indices_from(py, indices, len)?;
        let values: Vec<f64> = py.detach(|| {
            let t = self.lock();
            indices
                .iter()
                .map(|&i| t.get(i).expect("checked"))
                .collect()
        });
        Ok(PyArray1::from_vec(py, values))
    }

    /// The sum of every leaf.
    pub(crate) fn total(&self, py: Python<'_>) -> f64 {
        self.with(py, |t| t.total())
    }

    /// The smallest positive leaf (0 when none is).
    pub(crate) fn min_positive(&self, py: Python<'_>) -> f64 {
        self.with(py, |t| t.min_positive().unwrap_or(0.0))
    }

    /// The largest leaf (0 when all are).
    pub(crate) fn max(&self, py: Python<'_>) -> f64 {
        self.with(py, |t| t.max_leaf().unwrap_or(0.0))
    }

    /// For each mass in `targets` (clamped into [0, total]), the positive leaf where the
    /// prefix sum passes it (int64). Empty trees are an `EmptyBufferError`.
    pub(crate) fn find_prefix<'py>(
        &self,
        py: Python<'py>,
        targets: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let targets = floats_from(py, targets)?;
        let mut out = vec![0usize; targets.len()];
        py.detach(|| self.lock().find_prefix_batch(&targets, &mut out))
            .map_err(|e| py_err(py, e))?;
        Ok(PyArray1::from_vec(
            py,
            out.into_iter().map(|i| i as i64).collect(),
        ))
    }

    /// Draw `batch` leaves proportionally to their values (stratified: one draw in each of
    /// `batch` equal slices of the total; else independent): (indices int64, values f64).
    #[pyo3(signature = (batch, rng=None, *, stratified=true))]
    pub(crate) fn sample<'py>(
        &self,
        py: Python<'py>,
        batch: usize,
        rng: Option<&Bound<'py, Rng>>,
        stratified: bool,
    ) -> PyResult<Drawn<'py>> {
        let own = Mutex::new(Xoshiro::new(entropy_seed()));
        // Locked without the GIL, as `Buffer::generator` says why.
        let generator: &Mutex<Xoshiro> = rng.map_or(&own, |r| &r.get().0);
        let (indices, values) = py
            .detach(|| {
                let mut rng_lock = generator.lock().unwrap_or_else(|e| e.into_inner());
                let t = self.lock();
                let total = t.total();
                if !t.has_positive() {
                    return Err(Error::ZeroTotalPriority);
                }
                // Fallible: a batch the host cannot hold is an AllocationError, not an abort
                // (the results' vectors, as large again, are reserved the same way below).
                let mut targets: Vec<f64> = Vec::new();
                targets
                    .try_reserve_exact(batch)
                    .map_err(|_| Error::Allocation {
                        bytes: batch.saturating_mul(8),
                    })?;
                targets.extend((0..batch).map(|j| {
                    let u = rng_lock.next_f64();
                    if stratified {
                        (j as f64 + u) * total / batch as f64
                    } else {
                        u * total
                    }
                }));
                let mut out: Vec<usize> = Vec::new();
                let mut values: Vec<f64> = Vec::new();
                let fail = |_| Error::Allocation {
                    bytes: batch.saturating_mul(16),
                };
                out.try_reserve_exact(batch).map_err(fail)?;
                values.try_reserve_exact(batch).map_err(fail)?;
                out.resize(batch, 0);
                t.find_prefix_batch(&targets, &mut out)?;
                values.extend(out.iter().map(|&i| t.get(i).expect("in range")));
                Ok((out, values))
            })
            .map_err(|e| py_err(py, e))?;
        Ok((
            PyArray1::from_vec(py, indices.into_iter().map(|i| i as i64).collect()),
            PyArray1::from_vec(py, values),
        ))
    }

    /// Every leaf to 0.
    pub(crate) fn clear(&self, py: Python<'_>) {
        self.with(py, |t| t.clear());
    }

    /// Every leaf (float64), for pickling and inspection.
    pub(crate) fn leaves<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        let values: Vec<f64> = self.with(py, |t| {
            (0..t.len()).map(|i| t.get(i).expect("in range")).collect()
        });
        PyArray1::from_vec(py, values)
    }

    /// The fanout K.
    #[getter]
    pub(crate) fn fanout(&self, py: Python<'_>) -> usize {
        self.with(py, |t| t.fanout().get())
    }

    pub(crate) fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let module = py.import("kary_replay._native")?;
        let t = slf.get();
        let args = (t.__len__(py), t.fanout(py), t.leaves(py)).into_pyobject(py)?;
        Ok((module.getattr("_sum_tree_from")?, args))
    }
}

/// Rebuilds a pickled `SumTree`.
#[pyfunction]
pub(crate) fn _sum_tree_from(
    py: Python<'_>,
    capacity: usize,
    fanout: usize,
    leaves: &Bound<'_, PyAny>,
) -> PyResult<SumTree> {
    let tree = SumTree::new(py, capacity, fanout)?;
    let values = floats_from(py, leaves)?;
    let indices: Vec<usize> = (0..values.len()).collect();
    tree.lock()
        .set_batch(&indices, &values)
        .map_err(|e| py_err(py, e))?;
    Ok(tree)
}
