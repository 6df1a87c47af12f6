//! The coordinator of shards.

use crate::errors::{argument_error, py_err};
use crate::input::f64_vec;
use crate::options::{mode_from, weight_norm_from};
use crate::rng::{entropy_seed, Rng, Xoshiro};
use std::sync::Mutex;

use kary_replay::{Error, Stats};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `Coordinator.finish`'s result: the probabilities and the weights.
pub(crate) type Finished<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f32>>);

/// Plans and finishes samples of the union of several buffers (`kary_replay.Coordinator`;
/// `kary_replay::shard::Coordinator` underneath: see its doc for the arithmetic).
#[pyclass(module = "kary_replay._native", frozen)]
pub(crate) struct Coordinator(pub(crate) Mutex<kary_replay::shard::Coordinator>);

#[pymethods]
impl Coordinator {
    #[new]
    pub(crate) fn new() -> Coordinator {
        Coordinator(Mutex::new(kary_replay::shard::Coordinator::new()))
    }

    /// Plan `batch_size` draws over shards whose stats are `stats` (one dict per shard, as
    /// `Buffer.stats()` returns: total_priority, len, min_positive); returns one float64
    /// array of fractions per shard (empty for a shard that got no draw).
    #[pyo3(signature = (stats, batch_size, *, mode="stratified", rng=None))]
    pub(crate) fn plan<'py>(
        &self,
        py: Python<'py>,
        stats: Vec<Bound<'py, PyDict>>,
        batch_size: usize,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
    ) -> PyResult<Vec<Bound<'py, PyArray1<f64>>>> {
        let mode = mode_from(mode)?;
        let mut all = Vec::with_capacity(stats.len());
        for (k, d) in stats.iter().enumerate() {
            let get = |name: &str| -> PyResult<Bound<'py, PyAny>> {
                d.get_item(name)?
                    .ok_or_else(|| argument_error(format!("stats[{k}]: no {name:?} entry")))
            };
            all.push(Stats {
                total: get("total_priority")?.extract()?,
                len: get("len")?.extract()?,
                min_positive: get("min_positive")?.extract()?,
                ..Stats::default()
            });
        }
        // The coordinator's and the generator's locks are waited for without the GIL.
        let rng: Option<&Rng> = rng.map(|r| r.get());
        let fractions: Vec<Vec<f64>> = py
            .detach(|| {
                let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
                match rng {
                    Some(r) => c.plan(
                        &all,
                        batch_size,
                        mode,
                        &mut *r.0.lock().unwrap_or_else(|e| e.into_inner()),
                    ),
                    None => c.plan(&all, batch_size, mode, &mut Xoshiro::new(entropy_seed())),
                }
                .map(|()| (0..all.len()).map(|k| c.fractions(k).to_vec()).collect())
            })
            .map_err(|e| py_err(py, e))?;
        Ok(fractions
            .into_iter()
            .map(|f| PyArray1::from_vec(py, f))
            .collect())
    }

    /// The probabilities (float64) and importance weights (float32) of the batch made of the
    /// shards' replies to the last plan, concatenated in shard order: `priorities[k]` and
    /// `totals[k]` are shard k's stored priorities and the total its descent used (its
    /// `_sample_at` reply's `priorities` and `stats["total_priority"]`).
    #[pyo3(signature = (priorities, totals, beta, *, weight_norm="global"))]
    pub(crate) fn finish<'py>(
        &self,
        py: Python<'py>,
        priorities: Vec<Bound<'py, PyAny>>,
        totals: Vec<f64>,
        beta: f64,
        weight_norm: &str,
    ) -> PyResult<Finished<'py>> {
        let norm = weight_norm_from(weight_norm)?;
        let priorities: Vec<Vec<f64>> = priorities
            .iter()
            .map(|p| f64_vec(py, "priorities", p))
            .collect::<PyResult<_>>()?;
        if totals.len() != priorities.len() {
            return Err(py_err(
                py,
                Error::LengthMismatch {
                    what: "totals",
                    expected: priorities.len(),
                    got: totals.len(),
                },
            ));
        }
        let replies: Vec<kary_replay::shard::Reply<'_>> = priorities
            .iter()
            .zip(&totals)
            .map(|(p, &total)| kary_replay::shard::Reply {
                priorities: p,
                total,
            })
            .collect();
        let (mut probabilities, mut weights) = (Vec::new(), Vec::new());
        py.detach(|| {
            (self.0.lock().unwrap_or_else(|e| e.into_inner())).finish(
                &replies,
                beta,
                norm,
                &mut probabilities,
                &mut weights,
            )
        })
        .map_err(|e| py_err(py, e))?;
        let weights: Vec<f32> = weights.iter().map(|&w| w as f32).collect();
        Ok((
            PyArray1::from_vec(py, probabilities),
            PyArray1::from_vec(py, weights),
        ))
    }
}
