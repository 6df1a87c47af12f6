//! The sequence buffer: lanes of steps stored once, windows over them sampled by priority
//! (`kary_replay.SequenceReplayBuffer` subclasses it).

use std::sync::{Arc, Mutex};

use crate::buffer::stats_dict;
use crate::errors::{argument_error, py_err, schema_error};
use crate::input::f64_vec;
use crate::input::{batch_length, columns_from, hold, Held};
use crate::keys::Keys;
use crate::output::{dest, with_new_arrays};
use crate::rate::waiting;
use crate::rng::{Rng, Xoshiro};
use crate::schema::{dtype_name, parse_schema, Column};
use kary_replay::sequence::{
    LaneWriter, Padding, Partial, SequenceBatch, SequenceBuffer, SequenceConfig, SequenceRef,
};
use kary_replay::{ColumnSlice, ColumnSliceMut, Error, Wait};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Names a step's column cannot have: the entries a sample's dict holds beside the columns,
/// `truncated`, the keyword of `end_episode`, and `timeout`, the lane calls' keyword.
const RESERVED: [&str; 11] = [
    "keys",
    "indices",
    "weights",
    "probabilities",
    "priorities",
    "mask",
    "lengths",
    "returns",
    "discounts",
    "truncated",
    "timeout",
];
const RESERVED_WHY: &str = "a sample's dict holds keys, indices, weights, probabilities, \
     priorities, mask, lengths, returns, discounts and next_<column> for each next_of column, \
     end_episode has the keyword truncated and the lane calls the keyword timeout";

/// A lane push of at least this many bytes releases the GIL for its copy. A smaller one
/// (a few microseconds: the copy of a frame or two) keeps it: releasing it would hand it to
/// another writer thread at every step, which costs more than the copy (4 Python lane
/// threads on 2 cores wrote half of what one writes). Holding the GIL cannot deadlock: a
/// push waits only for its lane's lock (taken by a save's in-memory copy, which needs no
/// GIL) and for samplers to finish copying a window it retires (they copy without the GIL).
const PUSH_DETACH_BYTES: usize = 64 << 10;

/// The native sequence buffer.
#[pyclass(
    frozen,
    subclass,
    module = "kary_replay._native",
    name = "SequenceBuffer"
)]
pub(crate) struct NativeSequence {
    pub(crate) inner: SequenceRef,
    columns: Vec<Column>,
    /// The `next_of` columns (schema order).
    next_of: Vec<Column>,
    /// Frames stacked per column (1: none).
    frames: Vec<usize>,
    rng: Mutex<Xoshiro>,
}

/// One lane's writer (`kary_replay.LaneWriter` wraps it).
#[pyclass(frozen, module = "kary_replay._native")]
pub(crate) struct NativeLane {
    writer: Mutex<LaneWriter<SequenceRef>>,
    columns: Vec<Column>,
    next_of: Vec<Column>,
    /// The buffer has a rate limit: the calls wait for it (`rate::waiting`).
    limited: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NativeSequence {
    /// The Python view of `inner`: its columns with their shapes, its `next_of` columns
    /// and its stacks, from its configuration.
    pub(crate) fn from_buffer(inner: SequenceRef) -> NativeSequence {
        let config = inner.config();
        let columns = crate::schema::columns_of(config.schema(), None);
        let next_names = config.next_of_columns();
        let stacks = config.stacks();
        let next_of = (columns.iter())
            .filter(|c| next_names.contains(&c.name.as_str()))
            .cloned()
            .collect();
        let frames = (columns.iter())
            .map(|c| {
                (stacks.iter())
                    .find(|(name, _)| *name == c.name)
                    .map_or(1, |&(_, k)| k)
            })
            .collect();
        NativeSequence {
            inner,
            columns,
            next_of,
            frames,
            rng: Mutex::new(Xoshiro::new(0x5eed)),
        }
    }

    /// The buffer's keys: its tag and its leaves.
    fn keys(&self) -> Keys {
        let c = self.inner.config();
        Keys::new(c.tree().key_tag(), c.capacity())
    }

    /// Column `c` as a sample hands it out per window: `lead` + its shape.
    fn item(py: Python<'_>, c: &Column, lead: &[usize]) -> PyResult<Column> {
        let mut shape = lead.to_vec();
        shape.extend(&c.shape);
        let elements = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                py_err(
                    py,
                    Error::SizeOverflow {
                        what: "a sampled column",
                    },
                )
            })?;
        Ok(Column {
            name: c.name.clone(),
            dtype: c.dtype,
            shape,
            elements,
        })
    }

    /// What a sample hands out: each column per window (`(W, [k,] *shape)`), then each
    /// next observation (`([k,] *shape)`, named `next_<column>`).
    fn items(&self, py: Python<'_>) -> PyResult<(Vec<Column>, Vec<Column>)> {
        let w = self.inner.config().window();
        let frames = |c: &Column| {
            let i = self
                .columns
                .iter()
                .position(|d| d.name == c.name)
                .unwrap_or(0);
            self.frames[i]
        };
        let columns = (self.columns.iter())
            .map(|c| match frames(c) {
                1 => Self::item(py, c, &[w]),
                k => Self::item(py, c, &[w, k]),
            })
            .collect::<PyResult<_>>()?;
        let next = (self.next_of.iter())
            .map(|c| {
                let mut item = match frames(c) {
                    1 => Self::item(py, c, &[])?,
                    k => Self::item(py, c, &[k])?,
                };
                item.name = format!("next_{}", c.name);
                Ok(item)
            })
            .collect::<PyResult<_>>()?;
        Ok((columns, next))
    }

    /// `Error::Empty` when no window can be sampled and there is no rate limit (with one,
    /// an empty buffer is a wait, within the call's timeout).
    fn check_nonempty(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.rate_limiter().is_none() && self.inner.is_empty() {
            return Err(py_err(py, Error::Empty));
        }
        Ok(())
    }

    /// Draw `batch_size` windows into `slices` and `next_slices`, waiting for the rate
    /// limiter as `timeout` says (`rate::waiting`); the rest as a dict.
    #[allow(clippy::too_many_arguments)]
    fn draw<'py>(
        &self,
        py: Python<'py>,
        draw: kary_replay::Draw<'_>,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
        slices: &mut [ColumnSliceMut<'_>],
        next_slices: &mut [ColumnSliceMut<'_>],
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut batch = SequenceBatch::default();
        let generator = match rng {
            Some(r) => &r.get().0,
            None => &self.rng,
        };
        let inner = &self.inner;
        waiting(py, timeout, |wait| {
            let mut g = lock(generator);
            inner.sample_columns_into_waiting(
                draw,
                &mut *g,
                &mut batch,
                &mut *slices,
                &mut *next_slices,
                wait,
            )
        })?;
        let (w, batch_size) = (self.inner.config().window(), draw.len());
        let d = PyDict::new(py);
        let keys: Vec<u64> = batch.keys.iter().map(|k| self.keys().encode(k)).collect();
        d.set_item("keys", PyArray1::from_vec(py, keys))?;
        d.set_item(
            "indices",
            PyArray1::from_vec(py, batch.indices.iter().map(|&i| i as i64).collect()),
        )?;
        d.set_item(
            "weights",
            PyArray1::from_vec(py, batch.weights.iter().map(|&x| x as f32).collect()),
        )?;
        d.set_item("probabilities", PyArray1::from_vec(py, batch.probabilities))?;
        d.set_item("priorities", PyArray1::from_vec(py, batch.priorities))?;
        d.set_item(
            "lengths",
            PyArray1::from_vec(py, batch.lengths.iter().map(|&l| l as i64).collect()),
        )?;
        let mask: Bound<'py, PyArray2<bool>> =
            PyArray1::from_vec(py, batch.mask).reshape([batch_size, w])?;
        d.set_item("mask", mask)?;
        let stats = kary_replay::Stats {
            total: batch.total,
            min_positive: Some(batch.min_positive),
            ..self.inner.stats()
        };
        d.set_item("stats", stats_dict(py, &stats, self.inner.memory_bytes())?)?;
        if !batch.returns.is_empty() {
            d.set_item(
                "returns",
                PyArray1::from_vec(py, batch.returns.iter().map(|&x| x as f32).collect()),
            )?;
            d.set_item(
                "discounts",
                PyArray1::from_vec(py, batch.discounts.iter().map(|&x| x as f32).collect()),
            )?;
        }
        Ok(d)
    }
}

/// A sequence buffer's options from Python, beside its lanes, steps and schema (the
/// constructor's keywords; the shared class takes the same).
pub(crate) struct SequenceOptions<'a, 'py> {
    pub(crate) window: Option<usize>,
    pub(crate) period: usize,
    pub(crate) partial: &'a str,
    pub(crate) nstep: Option<(usize, f64, String)>,
    pub(crate) stack: Option<&'a Bound<'py, PyDict>>,
    pub(crate) padding: &'a str,
    pub(crate) next_of: Option<Vec<String>>,
    pub(crate) alpha: f64,
    pub(crate) fanout: usize,
    pub(crate) weight_norm: &'a str,
    pub(crate) key_tag: Option<u16>,
    pub(crate) rate_limit: Option<&'a Bound<'py, PyAny>>,
    pub(crate) max_insert: Option<u64>,
    pub(crate) max_sample: u64,
}

/// The configuration `options` describe, every rule checked.
pub(crate) fn sequence_config(
    py: Python<'_>,
    lanes: usize,
    steps_per_lane: usize,
    schema: &Bound<'_, PyDict>,
    options: &SequenceOptions<'_, '_>,
) -> PyResult<SequenceConfig> {
    let SequenceOptions {
        window,
        period,
        partial,
        ref nstep,
        stack,
        padding,
        ref next_of,
        alpha,
        fanout,
        weight_norm,
        key_tag,
        rate_limit,
        max_insert,
        max_sample,
    } = *options;
    let (columns, core) = parse_schema(py, schema, &RESERVED, RESERVED_WHY)?;
    let next_names = next_of.clone().unwrap_or_default();
    for n in &next_names {
        let taken = format!("next_{n}");
        if columns.iter().any(|c| c.name == taken) {
            return Err(schema_error(format!(
                "next_of=('{n}',) hands out 'next_{n}', which is a column's name"
            )));
        }
    }
    let mut b = SequenceConfig::builder(lanes, steps_per_lane, core)
        .period(period)
        .alpha(alpha)
        .fanout(fanout)
        .weight_normalization(crate::options::weight_norm_from(weight_norm)?)
        .partial(match partial {
            "keep" => Partial::Keep,
            "drop" => Partial::Drop,
            other => {
                return Err(argument_error(format!(
                    "partial is 'keep' or 'drop', got {other:?}"
                )))
            }
        })
        .padding(match padding {
            "repeat" => Padding::Repeat,
            "zeros" => Padding::Zeros,
            other => {
                return Err(argument_error(format!(
                    "padding is 'repeat' or 'zeros', got {other:?}"
                )))
            }
        });
    if let Some(w) = window {
        b = b.window(w);
    }
    if let Some((n, gamma, reward)) = &nstep {
        b = b.nstep(*n, *gamma, reward);
    }
    if let Some(stack) = stack {
        for (name, frames) in stack.iter() {
            let name: String = name.extract()?;
            let frames: usize = frames.extract()?;
            b = b.stack(&name, frames);
        }
    }
    for n in &next_names {
        b = b.next_of(n);
    }
    if let Some(tag) = key_tag {
        if tag == 0 || tag > kary_replay::Key::MAX_TAG {
            return Err(argument_error(format!(
                "key_tag is a number in 1..={}, got {tag}",
                kary_replay::Key::MAX_TAG
            )));
        }
        b = b.key_tag(tag);
    }
    if let Some(limit) = crate::rate::rate_limit_arg(py, rate_limit)? {
        let insert = match max_insert {
            Some(n) => n,
            None => b
                .clone()
                .build()
                .map_err(|e| py_err(py, e))?
                .max_windows_per_call(),
        };
        let batches = kary_replay::rate::Batches {
            insert,
            sample: max_sample,
        };
        b = b.rate_limit(limit, batches);
    }
    b.build().map_err(|e| py_err(py, e))
}

#[pymethods]
impl NativeSequence {
    #[new]
    #[pyo3(signature = (lanes, steps_per_lane, schema, *, window=None, period=1,
        partial="keep", nstep=None, stack=None, padding="repeat", next_of=None, alpha=0.6,
        fanout=8, weight_norm="global", key_tag=None, rate_limit=None, max_insert=None,
        max_sample=256, _from=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        lanes: usize,
        steps_per_lane: usize,
        schema: &Bound<'_, PyDict>,
        window: Option<usize>,
        period: usize,
        partial: &str,
        nstep: Option<(usize, f64, String)>,
        stack: Option<&Bound<'_, PyDict>>,
        padding: &str,
        next_of: Option<Vec<String>>,
        alpha: f64,
        fanout: usize,
        weight_norm: &str,
        key_tag: Option<u16>,
        rate_limit: Option<&Bound<'_, PyAny>>,
        max_insert: Option<u64>,
        max_sample: u64,
        _from: Option<&Bound<'_, NativeSequence>>,
    ) -> PyResult<NativeSequence> {
        if let Some(from) = _from {
            // A loaded buffer, wrapped by the Python class (`SequenceReplayBuffer.load`).
            return Ok(NativeSequence::from_buffer(from.get().inner.clone()));
        }
        let config = sequence_config(
            py,
            lanes,
            steps_per_lane,
            schema,
            &SequenceOptions {
                window,
                period,
                partial,
                nstep,
                stack,
                padding,
                next_of,
                alpha,
                fanout,
                weight_norm,
                key_tag,
                rate_limit,
                max_insert,
                max_sample,
            },
        )?;
        let inner = py
            .detach(|| SequenceBuffer::new(config))
            .map_err(|e| py_err(py, e))?;
        Ok(NativeSequence::from_buffer(SequenceRef::Owned(Arc::new(
            inner,
        ))))
    }

    /// Save a sequence checkpoint into the new directory `dir` (lane writers and priority
    /// updates pause for the in-memory copy; samplers go on).
    #[pyo3(signature = (dir, *, user=None, keep_last=0))]
    fn _save(
        &self,
        py: Python<'_>,
        dir: std::path::PathBuf,
        user: Option<&Bound<'_, PyDict>>,
        keep_last: usize,
    ) -> PyResult<()> {
        let options = crate::checkpoint::save_options(user, keep_last)?;
        let inner = &self.inner;
        py.detach(|| kary_replay::Checkpoint::save_with(&**inner, &dir, &options))
            .map_err(|e| py_err(py, e))
    }

    /// Load the sequence checkpoint at `dir`: (the native buffer, the user dict).
    #[staticmethod]
    fn _load<'py>(
        py: Python<'py>,
        dir: std::path::PathBuf,
    ) -> PyResult<(NativeSequence, Bound<'py, PyDict>)> {
        let loaded = py
            .detach(|| <SequenceBuffer as kary_replay::Load>::load_with(&dir, &Default::default()))
            .map_err(|e| py_err(py, e))?;
        Ok((
            NativeSequence::from_buffer(SequenceRef::Owned(Arc::new(loaded.buffer))),
            crate::checkpoint::user_dict(py, &loaded.user)?,
        ))
    }

    /// Check the sequence checkpoint at `dir` whole (every file's CRC, every field) without
    /// building a buffer; its shape as a dict.
    #[staticmethod]
    fn _verify<'py>(py: Python<'py>, dir: std::path::PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let config = py
            .detach(|| kary_replay::checkpoint::verify_sequence(&dir))
            .map_err(|e| py_err(py, e))?;
        let d = PyDict::new(py);
        d.set_item("lanes", config.lanes())?;
        d.set_item("steps_per_lane", config.steps_per_lane())?;
        d.set_item("window", config.window())?;
        d.set_item("capacity", config.capacity())?;
        Ok(d)
    }

    /// The writer of lane `lane` (one at a time per lane).
    fn _lane(&self, py: Python<'_>, lane: usize) -> PyResult<NativeLane> {
        let writer =
            SequenceBuffer::lane_shared(self.inner.clone(), lane).map_err(|e| py_err(py, e))?;
        Ok(NativeLane {
            writer: Mutex::new(writer),
            columns: self.columns.clone(),
            next_of: self.next_of.clone(),
            limited: self.inner.rate_limiter().is_some(),
        })
    }

    /// Sample `batch_size` windows: a dict of new arrays.
    #[pyo3(signature = (batch_size, beta, *, mode="stratified", rng=None, timeout=None))]
    fn _sample<'py>(
        &self,
        py: Python<'py>,
        batch_size: usize,
        beta: f64,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mode = crate::options::mode_from(mode)?;
        if batch_size == 0 {
            return Err(py_err(py, Error::ZeroBatch));
        }
        self.check_nonempty(py)?;
        let draw = kary_replay::Draw::Batch {
            batch: batch_size,
            beta,
            mode,
        };
        let (columns, next) = self.items(py)?;
        with_new_arrays(py, batch_size, &columns, &next, |slices, next_slices| {
            self.draw(py, draw, rng, timeout, slices, next_slices)
        })
    }

    /// Sample `batch_size` windows into the caller's arrays: `out` holds one C-contiguous
    /// writable array per column (`(>= B, W, [k,] *shape)`) and per next observation
    /// (`next_<column>`: `(>= B, [k,] *shape)`); returns the rest as a dict.
    #[pyo3(signature = (out, batch_size, beta, *, mode="stratified", rng=None, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn _sample_into<'py>(
        &self,
        py: Python<'py>,
        out: &Bound<'py, PyDict>,
        batch_size: usize,
        beta: f64,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mode = crate::options::mode_from(mode)?;
        if batch_size == 0 {
            return Err(py_err(py, Error::ZeroBatch));
        }
        let (columns, next) = self.items(py)?;
        let mut dests = (columns.iter())
            .map(|c| dest(py, out, &c.name, c, batch_size))
            .collect::<PyResult<Vec<_>>>()?;
        let mut next_dests = (next.iter())
            .map(|c| dest(py, out, &c.name, c, batch_size))
            .collect::<PyResult<Vec<_>>>()?;
        self.check_nonempty(py)?;
        let mut slices: Vec<ColumnSliceMut<'_>> = (dests.iter_mut().zip(&columns))
            .map(|(d, c)| {
                d.slice(batch_size * c.elements)
                    .expect("checked contiguous")
            })
            .collect();
        let mut next_slices: Vec<ColumnSliceMut<'_>> = (next_dests.iter_mut().zip(&next))
            .map(|(d, c)| {
                d.slice(batch_size * c.elements)
                    .expect("checked contiguous")
            })
            .collect();
        let draw = kary_replay::Draw::Batch {
            batch: batch_size,
            beta,
            mode,
        };
        self.draw(py, draw, rng, timeout, &mut slices, &mut next_slices)
    }

    /// The windows at `fractions` of this buffer's total (each in [0, 1)): what a shard of a
    /// union serves for its coordinator. A dict as `_sample` returns it, with weights of 1
    /// and probabilities this buffer's own, plus `stats`: this buffer's stats with the total
    /// its descent used.
    #[pyo3(signature = (fractions, *, rng=None, timeout=None))]
    fn _sample_at<'py>(
        &self,
        py: Python<'py>,
        fractions: &Bound<'py, PyAny>,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fractions = f64_vec(py, "fractions", fractions)?;
        kary_replay::buffer::check_fractions(&fractions).map_err(|e| py_err(py, e))?;
        self.check_nonempty(py)?;
        let (columns, next) = self.items(py)?;
        with_new_arrays(
            py,
            fractions.len(),
            &columns,
            &next,
            |slices, next_slices| {
                let draw = kary_replay::Draw::At(&fractions);
                self.draw(py, draw, rng, timeout, slices, next_slices)
            },
        )
    }

    /// The buffer's counts in windows (a `Stats` dict: len, capacity, inserted,
    /// total_priority, min_positive, running_max, memory_bytes).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.inner.stats(), self.inner.memory_bytes())
    }

    /// Raise what `update_priorities(keys, priorities)` would raise now, changing nothing.
    fn check_update(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        priorities: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (keys, priorities) = self.keys().update_arguments(py, keys, priorities)?;
        let inner = &self.inner;
        py.detach(|| inner.check_update(&keys, &priorities))
            .map_err(|e| py_err(py, e))
    }

    /// Close the rate limiter: every lane call and sample waiting for it raises
    /// `ClosedError`, and so does every later one. Without a rate limit nothing happens.
    fn close(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.detach(|| inner.close())
    }

    /// The rate limiter's counts (in windows) and state (a `RateStats` dict), or None.
    fn rate_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        (self.inner.rate_stats())
            .map(|s| crate::rate::stats_dict(py, &s))
            .transpose()
    }

    /// The rate limit as the native constructors' arguments, or None.
    fn _rate_limit<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        (self.inner.config().rate_limit())
            .map(|l| crate::rate::limit_args(py, l))
            .transpose()
    }

    /// Set the raw priorities of the windows named by `keys`; returns `(applied, stale)`.
    fn update_priorities(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        priorities: &Bound<'_, PyAny>,
    ) -> PyResult<(usize, usize)> {
        let (keys, priorities) = self.keys().update_arguments(py, keys, priorities)?;
        let inner = &self.inner;
        let report = py
            .detach(|| inner.update_priorities(&keys, &priorities))
            .map_err(|e| py_err(py, e))?;
        Ok((report.applied, report.stale))
    }

    /// The stored priorities of the windows `keys` name (float64; NaN for a window retired
    /// since).
    fn priorities_of<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
        let keys = self.keys().decode_all(py, keys)?;
        let inner = &self.inner;
        let mut out = Vec::new();
        py.detach(|| inner.priorities_of(&keys, &mut out))
            .map_err(|e| py_err(py, e))?;
        Ok(numpy::PyArray1::from_vec(py, out))
    }

    /// The lane and first step of the window a key names.
    fn window_of(&self, py: Python<'_>, key: u64) -> PyResult<(usize, u64)> {
        self.inner
            .window_of(self.keys().decode(key))
            .map_err(|e| py_err(py, e))
    }

    /// Windows that can be sampled now.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Possible window starts (the tree's leaves).
    #[getter]
    fn capacity(&self) -> usize {
        self.inner.config().capacity()
    }

    /// Steps per window.
    #[getter]
    fn window(&self) -> usize {
        self.inner.config().window()
    }

    /// Lanes.
    #[getter]
    fn lanes(&self) -> usize {
        self.inner.config().lanes()
    }

    /// Steps written over all lanes (final-observation rows included).
    #[getter]
    fn steps_written(&self) -> u64 {
        self.inner.steps_written()
    }

    /// The sum of the stored priorities.
    #[getter]
    fn total_priority(&self) -> f64 {
        self.inner.total()
    }

    /// Bytes held by the steps, the tree and the state words.
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// The tag in the top bits of the keys.
    #[getter]
    fn key_tag(&self) -> u16 {
        self.inner.config().tree().key_tag()
    }

    /// The schema: column name -> (dtype name, shape tuple).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for c in &self.columns {
            d.set_item(&c.name, (dtype_name(c.dtype), PyTuple::new(py, &c.shape)?))?;
        }
        Ok(d)
    }

    /// Whether the tree's sums equal their children's (true at rest).
    fn consistent(&self, py: Python<'_>) -> bool {
        let inner = &self.inner;
        py.detach(|| inner.consistency().exact)
    }

    /// How far the tree's sums are from their children's (a `Consistency` dict: exact,
    /// max_relative_error), as `PrioritizedReplayBuffer.consistency` reports it.
    fn consistency<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let c = py.detach(|| inner.consistency());
        let d = PyDict::new(py);
        d.set_item("exact", c.exact)?;
        d.set_item("max_relative_error", c.max_rel_error)?;
        Ok(d)
    }
}

#[pymethods]
impl NativeLane {
    /// Append one step (every column, one item each). A step of fewer than
    /// `PUSH_DETACH_BYTES` is written with the GIL held (see there).
    /// With a rate limit, the step waits (without the GIL) for the limiter to admit the
    /// window it completes, at most `timeout` seconds.
    #[pyo3(signature = (*, timeout=None, **step))]
    fn push(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        step: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let held = columns_from(py, &self.columns, step, None)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let writer = &self.writer;
        let bytes: usize = held.iter().map(Held::bytes).sum();
        if self.limited {
            // A small step tries its admission with the GIL held first (see
            // `PUSH_DETACH_BYTES`); it lets the GIL go only to wait.
            let valid = timeout.is_none_or(|t| t.is_finite() && t >= 0.0);
            if valid && bytes < PUSH_DETACH_BYTES {
                match lock(writer).push_waiting(&slices, Wait::Never) {
                    Err(Error::RateLimited(_)) if timeout != Some(0.0) => {}
                    other => return other.map_err(|e| py_err(py, e)),
                }
            }
            return waiting(py, timeout, |wait| lock(writer).push_waiting(&slices, wait));
        }
        let result = match bytes >= PUSH_DETACH_BYTES {
            true => py.detach(|| lock(writer).push(&slices)),
            false => lock(writer).push(&slices),
        };
        result.map_err(|e| py_err(py, e))
    }

    /// Push `n` steps (each column `(n, *shape)`) in order, with the GIL released; returns
    /// `n`. Bad columns change nothing.
    #[pyo3(signature = (**steps))]
    fn push_steps(&self, py: Python<'_>, steps: Option<&Bound<'_, PyDict>>) -> PyResult<usize> {
        let empty = PyDict::new(py);
        let n = batch_length(&self.columns, steps.unwrap_or(&empty))?;
        let held = columns_from(py, &self.columns, steps, Some(n))?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let writer = &self.writer;
        py.detach(|| lock(writer).push_steps(&slices))
            .map_err(|e| py_err(py, e))
    }

    /// End the episode with its final observation (one array per next_of column).
    /// With a rate limit, waits as `push` does for the windows it completes.
    #[pyo3(signature = (truncated=false, *, timeout=None, **final_obs))]
    fn end_episode(
        &self,
        py: Python<'_>,
        truncated: bool,
        timeout: Option<f64>,
        final_obs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let mut given: Vec<Option<Bound<'_, PyAny>>> = vec![None; self.next_of.len()];
        if let Some(d) = final_obs {
            for (name, value) in d.iter() {
                let name: String = name.extract()?;
                match self.next_of.iter().position(|c| c.name == name) {
                    Some(i) => given[i] = Some(value),
                    None => {
                        let names: Vec<&str> =
                            self.next_of.iter().map(|c| c.name.as_str()).collect();
                        return Err(schema_error(format!(
                            "end_episode takes the final observation of the next_of columns {names:?}, not '{name}'"
                        )));
                    }
                }
            }
        }
        let held = (self.next_of.iter().zip(given))
            .map(|(c, v)| match v {
                Some(v) => hold(py, c, &v, None),
                None => Err(schema_error(format!(
                    "end_episode: the final observation of '{}' is missing",
                    c.name
                ))),
            })
            .collect::<PyResult<Vec<_>>>()?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let writer = &self.writer;
        if self.limited {
            return waiting(py, timeout, |wait| {
                lock(writer).end_episode_waiting(&slices, truncated, wait)
            });
        }
        py.detach(|| lock(writer).end_episode(&slices, truncated))
            .map_err(|e| py_err(py, e))
    }

    /// Install the windows staged by a batch.
    fn flush(&self, py: Python<'_>) {
        let writer = &self.writer;
        py.detach(|| lock(writer).flush());
    }

    /// The windows `steps` more pushes and then, with `end`, an episode's end would
    /// complete (what a rate limit counts for them), computed without writing.
    #[pyo3(signature = (steps, end=false))]
    fn windows_completed_by(&self, py: Python<'_>, steps: u64, end: bool) -> u64 {
        let writer = &self.writer;
        py.detach(|| lock(writer).windows_completed_by(steps, end))
    }

    /// Install complete windows in batches of `windows`.
    fn set_batch(&self, py: Python<'_>, windows: usize) -> PyResult<()> {
        let writer = &self.writer;
        py.detach(|| lock(writer).set_batch(windows))
            .map_err(|e| py_err(py, e))
    }

    /// Close the lane: no step after this.
    fn close(&self, py: Python<'_>) {
        let writer = &self.writer;
        py.detach(|| lock(writer).close());
    }

    /// The lane's position in its timeline.
    #[getter]
    fn position(&self) -> u64 {
        lock(&self.writer).position()
    }

    /// The lane's number.
    #[getter]
    fn lane(&self) -> usize {
        lock(&self.writer).lane()
    }

    /// Whether an episode is under way.
    #[getter]
    fn in_episode(&self) -> bool {
        lock(&self.writer).in_episode()
    }
}

/// R2D2's sequence priorities: `eta * max + (1 - eta) * mean` of `|td|` over the mask.
#[pyfunction]
#[pyo3(signature = (td, mask, eta=0.9))]
pub(crate) fn sequence_priorities<'py>(
    py: Python<'py>,
    td: &Bound<'py, PyAny>,
    mask: &Bound<'py, PyAny>,
    eta: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let np = py.import("numpy")?;
    let td = np.call_method1("asarray", (td, "float64"))?;
    let mask = np.call_method1("asarray", (mask, "bool"))?;
    let shape: Vec<usize> = td.getattr("shape")?.extract()?;
    let mask_shape: Vec<usize> = mask.getattr("shape")?.extract()?;
    if shape.len() != 2 || shape != mask_shape {
        return Err(argument_error(format!(
            "td and mask are (B, W) arrays of one shape, got {shape:?} and {mask_shape:?}"
        )));
    }
    let td: Vec<f64> = np
        .call_method1("ravel", (td,))?
        .call_method0("tolist")?
        .extract()?;
    let mask: Vec<bool> = np
        .call_method1("ravel", (mask,))?
        .call_method0("tolist")?
        .extract()?;
    let p = kary_replay::sequence::sequence_priorities(&td, &mask, shape[1].max(1), eta)
        .map_err(|e| py_err(py, e))?;
    Ok(PyArray1::from_vec(py, p))
}
