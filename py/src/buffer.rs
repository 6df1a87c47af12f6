//! The native buffer: `kary_replay.PrioritizedReplayBuffer` subclasses it.

use crate::checkpoint::user_dict;
use crate::errors::py_err;
use crate::input::{batch_length, columns_from, f64_vec, priorities_from, some_columns_from, Held};
use crate::keys::Keys;
use crate::options::{buffer_config, mode_from, variant_name, BufferOptions};
use crate::output::{dest, with_new_arrays};
use crate::rate::waiting;
use crate::rng::{Rng, Xoshiro};
use crate::schema::{columns_of, dtype_name, Column, SHAPES_KEY};
use crate::writer::NativeWriter;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kary_replay::buffer::{Descent, Draw, Rows};
use kary_replay::checkpoint::{LoadOptions, Loaded, UserData, UserValue};
use kary_replay::{
    ColumnSlice, ColumnSliceMut, ConcurrentBuffer, Config, Error, GlobalLockBuffer, Load,
    LockFreeBuffer, SampleBatch, SplitLockBuffer, Stats, Writer,
};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The native buffer: `kary_replay.PrioritizedReplayBuffer` subclasses it.
#[pyclass(frozen, subclass, module = "kary_replay._native", name = "Buffer")]
pub(crate) struct Buffer {
    pub(crate) inner: Arc<dyn ConcurrentBuffer>,
    pub(crate) columns: Vec<Column>,
    pub(crate) variant: &'static str,
    pub(crate) keys: Keys,
    /// The generator of calls that pass none.
    pub(crate) rng: Mutex<Xoshiro>,
}

pub(crate) fn make(
    variant: &str,
    config: Config,
) -> kary_replay::Result<Arc<dyn ConcurrentBuffer>> {
    Ok(match variant {
        "split" => Arc::new(SplitLockBuffer::new(config)?),
        "lockfree" => Arc::new(LockFreeBuffer::new(config)?),
        _ => Arc::new(GlobalLockBuffer::new(config)?),
    })
}

pub(crate) fn load_variant(
    variant: &str,
    dir: &PathBuf,
) -> kary_replay::Result<(Arc<dyn ConcurrentBuffer>, UserData)> {
    let options = LoadOptions::default();
    Ok(match variant {
        "split" => {
            let Loaded { buffer, user } = SplitLockBuffer::load_with(dir, &options)?;
            (Arc::new(buffer), user)
        }
        "lockfree" => {
            let Loaded { buffer, user } = LockFreeBuffer::load_with(dir, &options)?;
            (Arc::new(buffer), user)
        }
        _ => {
            let Loaded { buffer, user } = GlobalLockBuffer::load_with(dir, &options)?;
            (Arc::new(buffer), user)
        }
    })
}

impl Buffer {
    /// `read` of the items ``keys`` name (decoded), as a float64 array: the body of
    /// `priorities_of` and `raw_priorities_of`.
    fn read_by_key<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'_, PyAny>,
        read: impl FnOnce(
                &dyn ConcurrentBuffer,
                &[kary_replay::Key],
                &mut Vec<f64>,
            ) -> kary_replay::Result<usize>
            + Send,
    ) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
        let keys = self.keys.decode_all(py, keys)?;
        let inner = &*self.inner;
        let mut out = Vec::new();
        py.detach(|| read(inner, &keys, &mut out))
            .map_err(|e| py_err(py, e))?;
        Ok(numpy::PyArray1::from_vec(py, out))
    }

    /// The generator a sample with `rng` uses: its own, or the buffer's. Its lock is taken
    /// and released with the GIL released, so that a thread waiting for the GIL never holds
    /// it and a thread holding the GIL never waits for it while its holder waits for the GIL
    /// (another thread sampling with the same generator, or reading its `state()`, cannot
    /// deadlock with this one).
    pub(crate) fn generator<'a>(&'a self, rng: Option<&'a Bound<'_, Rng>>) -> &'a Mutex<Xoshiro> {
        match rng {
            Some(r) => &r.get().0,
            None => &self.rng,
        }
    }

    /// Sample `draw` with its rows straight into `columns`, waiting for the rate limiter as
    /// `timeout` says (without the GIL; `rate::waiting`): every sampling method's one call.
    pub(crate) fn sample_rows(
        &self,
        py: Python<'_>,
        rng: Option<&Bound<'_, Rng>>,
        timeout: Option<f64>,
        draw: Draw<'_>,
        columns: &mut [ColumnSliceMut<'_>],
    ) -> PyResult<(SampleBatch, Descent)> {
        let mut batch = SampleBatch::default();
        let (inner, generator) = (&self.inner, self.generator(rng));
        let descent = waiting(py, timeout, |wait| {
            let mut g = generator.lock().unwrap_or_else(|e| e.into_inner());
            inner.sample_waiting(draw, Rows::Into(&mut *columns), &mut *g, &mut batch, wait)
        })?;
        Ok((batch, descent))
    }

    /// The sampled batch's metadata as a dict of new arrays.
    pub(crate) fn info<'py>(
        &self,
        py: Python<'py>,
        out: &SampleBatch,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let keys: Vec<u64> = out.keys.iter().map(|k| self.keys.encode(k)).collect();
        let indices: Vec<i64> = out.indices.iter().map(|&i| i as i64).collect();
        let weights: Vec<f32> = out.weights.iter().map(|&w| w as f32).collect();
        d.set_item("keys", PyArray1::from_vec(py, keys))?;
        d.set_item("indices", PyArray1::from_vec(py, indices))?;
        d.set_item("weights", PyArray1::from_vec(py, weights))?;
        d.set_item(
            "probabilities",
            PyArray1::from_vec(py, out.probabilities.clone()),
        )?;
        d.set_item("priorities", PyArray1::from_vec(py, out.priorities.clone()))?;
        Ok(d)
    }

    pub(crate) fn from_parts(
        inner: Arc<dyn ConcurrentBuffer>,
        columns: Vec<Column>,
        variant: &'static str,
    ) -> Buffer {
        Buffer {
            keys: Keys::of(&*inner),
            inner,
            columns,
            variant,
            rng: Mutex::new(Xoshiro::new(0x5eed)),
        }
    }
}

#[pymethods]
impl Buffer {
    #[new]
    #[pyo3(signature = (capacity, schema, *, alpha=0.6, fanout=8, variant="split",
        weight_norm="global", default_priority="running_max", shard=None, key_tag=None,
        rate_limit=None, max_insert=16, max_sample=256, max_times_sampled=0, version_column=None, max_heap=false, _from=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        py: Python<'_>,
        capacity: usize,
        schema: &Bound<'_, PyDict>,
        alpha: f64,
        fanout: usize,
        variant: &str,
        weight_norm: &str,
        default_priority: &str,
        shard: Option<usize>,
        key_tag: Option<u64>,
        rate_limit: Option<&Bound<'_, PyAny>>,
        max_insert: u64,
        max_sample: u64,
        max_times_sampled: u32,
        version_column: Option<&str>,
        max_heap: bool,
        _from: Option<&Bound<'_, Buffer>>,
    ) -> PyResult<Buffer> {
        if let Some(from) = _from {
            // A loaded buffer, wrapped by the Python class (`kary_replay.load`).
            let b = from.get();
            return Ok(Buffer::from_parts(
                b.inner.clone(),
                b.columns.clone(),
                b.variant,
            ));
        }
        let variant = variant_name(variant)?;
        let (columns, config) = buffer_config(
            py,
            capacity,
            schema,
            &BufferOptions {
                alpha,
                fanout,
                weight_norm,
                default_priority,
                shard,
                key_tag,
                rate_limit,
                max_insert,
                max_sample,
                max_times_sampled,
                version_column,
                max_heap,
            },
        )?;
        let inner = py
            .detach(|| make(variant, config))
            .map_err(|e| py_err(py, e))?;
        Ok(Buffer::from_parts(inner, columns, variant))
    }

    /// The tag in the top bits of this buffer's keys (`key >> 48`): the `key_tag=` given, a
    /// shard's number plus one for a buffer made with `shard=`, else one drawn at random; a
    /// loaded buffer keeps its checkpoint's.
    #[getter]
    pub(crate) fn key_tag(&self) -> u64 {
        self.keys.tag
    }

    /// Insert one item (each column one value of its shape) with a raw priority, or the
    /// buffer's default when `priority` is None; returns its key.
    #[pyo3(signature = (priority=None, timeout=None, **row))]
    pub(crate) fn add(
        &self,
        py: Python<'_>,
        priority: Option<f64>,
        timeout: Option<f64>,
        row: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let held = columns_from(py, &self.columns, row, None)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let inner = &self.inner;
        waiting(py, timeout, |wait| {
            inner.insert_waiting(&slices, priority, wait)
        })
        .map(|k| self.keys.encode(&k))
    }

    /// Insert M items (each column `(M, *shape)`) with M raw priorities, or the default;
    /// returns their keys (uint64). A failed call inserts nothing.
    #[pyo3(signature = (priorities=None, timeout=None, **columns))]
    pub(crate) fn add_batch<'py>(
        &self,
        py: Python<'py>,
        priorities: Option<&Bound<'py, PyAny>>,
        timeout: Option<f64>,
        columns: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let empty = PyDict::new(py);
        let m = batch_length(&self.columns, columns.unwrap_or(&empty))?;
        let held = columns_from(py, &self.columns, columns, Some(m))?;
        let priorities = priorities_from(py, priorities, m)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let inner = &self.inner;
        let keys = waiting(py, timeout, |wait| {
            let mut keys = Vec::new();
            (inner.insert_batch_waiting(&slices, priorities.as_deref(), &mut keys, wait))
                .map(|()| keys)
        })?;
        Ok(PyArray1::from_vec(
            py,
            keys.iter().map(|k| self.keys.encode(k)).collect(),
        ))
    }

    /// Close the rate limiter: every insert and sample waiting for it raises `ClosedError`
    /// now, and so does every later one (updates, reads and saves go on). Without a rate
    /// limit there is no wait to end: nothing happens.
    pub(crate) fn close(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.detach(|| inner.close())
    }

    /// The rate limiter's counts and state (a `RateStats` dict), or None without a limit.
    pub(crate) fn rate_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        (self.inner.rate_stats())
            .map(|s| crate::rate::stats_dict(py, &s))
            .transpose()
    }

    /// The rate limit as the native constructors' arguments (kind, size, samples_per_insert,
    /// error_buffer, max_insert, max_sample), or None.
    pub(crate) fn _rate_limit<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        (self.inner.config().rate_limit())
            .map(|l| crate::rate::limit_args(py, l))
            .transpose()
    }

    /// A staged writer that inserts every `batch` items in one call (`kary_replay.Writer`).
    pub(crate) fn _writer(&self, py: Python<'_>, batch: usize) -> PyResult<NativeWriter> {
        let writer = Writer::new(self.inner.clone(), batch).map_err(|e| py_err(py, e))?;
        Ok(NativeWriter {
            writer: Mutex::new(writer),
            columns: self.columns.clone(),
            keys: self.keys,
        })
    }

    /// Sample `batch_size` items: a dict of new arrays, one per column (`(B, *shape)`),
    /// plus keys, indices, weights, probabilities and priorities.
    #[pyo3(signature = (batch_size, beta, *, mode="stratified", rng=None, timeout=None))]
    pub(crate) fn _sample<'py>(
        &self,
        py: Python<'py>,
        batch_size: usize,
        beta: f64,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mode = mode_from(mode)?;
        if batch_size == 0 {
            return Err(py_err(py, Error::ZeroBatch));
        }
        // Before the outputs are made; a buffer with a rate limit waits for items instead.
        if self.inner.is_empty() && self.inner.rate_limiter().is_none() {
            return Err(py_err(py, Error::Empty));
        }
        let draw = Draw::Batch {
            batch: batch_size,
            beta,
            mode,
        };
        with_new_arrays(py, batch_size, &self.columns, &[], |slices, _| {
            let (batch, _) = self.sample_rows(py, rng, timeout, draw, slices)?;
            self.info(py, &batch)
        })
    }

    /// One item at each of `fractions` (floats in [0, 1)) of this buffer's own total, for a
    /// coordinator sampling the union of several buffers: the dict of `_sample` (its
    /// probabilities this buffer's own, its weights all 1) plus `stats`, this buffer's stats
    /// with the total its descent used.
    #[pyo3(signature = (fractions, *, rng=None, timeout=None))]
    pub(crate) fn _sample_at<'py>(
        &self,
        py: Python<'py>,
        fractions: &Bound<'py, PyAny>,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fractions = f64_vec(py, "fractions", fractions)?;
        kary_replay::buffer::check_fractions(&fractions).map_err(|e| py_err(py, e))?;
        if self.inner.is_empty() && self.inner.rate_limiter().is_none() {
            return Err(py_err(py, Error::Empty));
        }
        with_new_arrays(py, fractions.len(), &self.columns, &[], |slices, _| {
            let draw = Draw::At(&fractions);
            let (batch, descent) = self.sample_rows(py, rng, timeout, draw, slices)?;
            let inner = &self.inner;
            let stats = Stats {
                total: descent.total,
                min_positive: Some(descent.min_positive),
                ..inner.stats()
            };
            let d = self.info(py, &batch)?;
            d.set_item("stats", stats_dict(py, &stats, inner.memory_bytes())?)?;
            Ok(d)
        })
    }

    /// Sample `batch_size` items into the caller's arrays (`out`: a dict with one C-contiguous,
    /// writable array per column, of the column's dtype and at least `batch_size` rows of its
    /// shape); returns the keys, indices, weights, probabilities and priorities as a dict.
    #[pyo3(signature = (out, batch_size, beta, *, mode="stratified", rng=None, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn _sample_into<'py>(
        &self,
        py: Python<'py>,
        out: &Bound<'py, PyDict>,
        batch_size: usize,
        beta: f64,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mode = mode_from(mode)?;
        let mut dests = self
            .columns
            .iter()
            .map(|c| dest(py, out, &c.name, c, batch_size))
            .collect::<PyResult<Vec<_>>>()?;
        let mut slices: Vec<ColumnSliceMut<'_>> = dests
            .iter_mut()
            .zip(&self.columns)
            .map(|(d, c)| {
                d.slice(batch_size * c.elements)
                    .expect("checked contiguous")
            })
            .collect();
        let draw = Draw::Batch {
            batch: batch_size,
            beta,
            mode,
        };
        let (batch, _) = self.sample_rows(py, rng, timeout, draw, &mut slices)?;
        self.info(py, &batch)
    }

    /// Set the raw priorities of the items named by ``keys`` (from a sample; any integer
    /// array-like, torch CPU tensors included). Returns ``(applied, stale)``: keys whose
    /// item was overwritten since are dropped and counted. NaN, infinite or negative
    /// priorities, keys the buffer never handed out and lengths that differ are errors, and
    /// then nothing changes.
    pub(crate) fn update_priorities(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        priorities: &Bound<'_, PyAny>,
    ) -> PyResult<(usize, usize)> {
        let (keys, priorities) = self.keys.update_arguments(py, keys, priorities)?;
        let inner = &self.inner;
        let report = py
            .detach(|| inner.update_priorities(&keys, &priorities))
            .map_err(|e| py_err(py, e))?;
        Ok((report.applied, report.stale))
    }

    /// Delete the items ``keys`` name (from a sample, an insert or :meth:`key`; any integer
    /// array-like): their keys go stale for good, no sample returns them once the call
    /// returns, and ``len`` stops counting them; each slot stays in the FIFO ring, and the
    /// insert that reaches it fills it without evicting anything. Returns ``(deleted,
    /// stale)``: keys whose item was overwritten or deleted already are counted, not
    /// refused. A key the buffer never handed out is an error, and then nothing is deleted.
    pub(crate) fn delete(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<(usize, usize)> {
        let keys = self.keys.decode_all(py, keys)?;
        let inner = &self.inner;
        let report = py
            .detach(|| inner.delete(&keys))
            .map_err(|e| py_err(py, e))?;
        Ok((report.applied, report.stale))
    }

    /// Retire every item whose policy version (the ``version_column``) is below ``version``
    /// and raise the buffer's floor to it (it never goes down): once the call returns, no
    /// item below the floor is stored, counted by ``len`` or sampled, and an insert holding
    /// one raises ``InvalidArgumentError`` (nothing inserted). Returns the items this call
    /// retired. A buffer made without ``version_column`` raises ``InvalidArgumentError``.
    pub(crate) fn retire_before(&self, py: Python<'_>, version: i64) -> PyResult<u64> {
        let inner = &self.inner;
        py.detach(|| inner.retire_before(version))
            .map_err(|e| py_err(py, e))
    }

    /// The policy-version floor (:meth:`retire_before`): the smallest int64 until the first
    /// call; ``None`` when the items carry no version.
    #[getter]
    pub(crate) fn version_floor(&self) -> Option<i64> {
        self.inner.version_floor()
    }

    /// The name of the column that holds each item's policy version, or ``None``.
    #[getter]
    pub(crate) fn version_column(&self) -> Option<String> {
        let config = self.inner.config();
        config
            .version_column()
            .map(|c| config.schema().columns()[c].name.clone())
    }

    /// Overwrite some columns of the items ``keys`` name, in place (a relabelled goal, a
    /// recomputed return): each keyword is a column, one row per key. Keys and priorities
    /// stay; no sample sees half a row. Returns ``(written, stale)``: keys whose item was
    /// overwritten or deleted are counted and their rows skipped. A key the buffer never
    /// handed out, an unknown column or rows of the wrong shape or dtype are errors, and
    /// then nothing is written. A :class:`SharedReplayBuffer` refuses the call
    /// (``InvalidArgumentError``): its readers check a copy by the slot's epoch, which a
    /// write back keeps.
    #[pyo3(signature = (keys, **columns))]
    pub(crate) fn write_back<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        columns: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<(usize, usize)> {
        let keys = self.keys.decode_all(py, keys)?;
        let held = some_columns_from(py, &self.columns, columns, Some(keys.len()))?;
        let slices: Vec<(usize, ColumnSlice<'_>)> =
            held.iter().map(|(c, h)| (*c, h.slice())).collect();
        let inner = &self.inner;
        let report = py
            .detach(|| inner.write_back(&keys, &slices))
            .map_err(|e| py_err(py, e))?;
        Ok((report.applied, report.stale))
    }

    /// The stored (alpha-exponentiated) priorities of the items ``keys`` name, as a float64
    /// array: NaN where the key's item was overwritten since. A key the buffer never handed
    /// out is an error.
    pub(crate) fn priorities_of<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
        self.read_by_key(py, keys, |b, k, out| b.priorities_of(k, out))
    }

    /// The raw priorities (before the exponent: as given, or for a default priority the raw
    /// maximum it stood for) of the items ``keys`` name, as a float64 array: NaN where the
    /// key's item was overwritten since. A key the buffer never handed out is an error.
    pub(crate) fn raw_priorities_of<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
        self.read_by_key(py, keys, |b, k, out| b.raw_priorities_of(k, out))
    }

    /// Change the priority exponent at run time, exactly: every stored priority becomes its
    /// raw priority (:meth:`raw_priorities_of`) raised to ``alpha``, and the tree is summed
    /// again, equal bit for bit to a buffer built with ``alpha`` over the same raw
    /// priorities; new default priorities follow. Inserts, updates and deletions pause
    /// meanwhile (as for a save); samplers go on. Priorities stay checked against the bound
    /// of the ``alpha`` the buffer was made with; under a larger alpha a power past 1e250 is
    /// stored as 1e250. A NaN, infinite or negative ``alpha`` raises ``ValueError`` and
    /// changes nothing. Checkpoints and pickles keep the alpha and the raw priorities.
    pub(crate) fn set_alpha(&self, py: Python<'_>, alpha: f64) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.set_alpha(alpha))
            .map_err(|e| py_err(py, e))
    }

    /// The priority exponent now: the constructor's ``alpha`` until a :meth:`set_alpha`.
    #[getter]
    pub(crate) fn alpha(&self) -> f64 {
        self.inner.alpha()
    }

    /// The checks of :meth:`update_priorities`, changing nothing: returns ``None`` when that
    /// call would succeed, else raises its error. A check that passed stays passed (keys
    /// only become valid, never invalid: stale ones are counted, not refused), so an update
    /// split over shards can check every part before any applies.
    pub(crate) fn check_update(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        priorities: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (keys, priorities) = self.keys.update_arguments(py, keys, priorities)?;
        (self.inner.config())
            .check_update(&keys, &priorities, self.inner.inserted())
            .map_err(|e| py_err(py, e))
    }

    pub(crate) fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Slots (items held before FIFO eviction).
    #[getter]
    pub(crate) fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// The sum of the stored (alpha-exponentiated) priorities.
    #[getter]
    pub(crate) fn total_priority(&self) -> f64 {
        self.inner.total_priority()
    }

    /// The variant: 'split', 'lockfree' or 'global'.
    #[getter]
    pub(crate) fn variant(&self) -> &'static str {
        self.variant
    }

    /// The schema: column name -> (dtype name, shape tuple).
    #[getter]
    pub(crate) fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for c in &self.columns {
            let shape = PyTuple::new(py, &c.shape)?;
            d.set_item(&c.name, (dtype_name(c.dtype), shape))?;
        }
        Ok(d)
    }

    /// The stored priority of slot `index` (for tests and inspection).
    pub(crate) fn priority(&self, py: Python<'_>, index: usize) -> PyResult<f64> {
        self.inner.priority(index).map_err(|e| py_err(py, e))
    }

    /// The key of the item in slot `index`, or None.
    pub(crate) fn key(&self, py: Python<'_>, index: usize) -> PyResult<Option<u64>> {
        self.inner
            .key(index)
            .map(|k| k.map(|k| self.keys.encode(&k)))
            .map_err(|e| py_err(py, e))
    }

    /// Counts and sums, each read once in O(K): len, capacity, inserted, total_priority,
    /// min_positive (the smallest positive stored priority, None when none), running_max
    /// (the stored priority an item added without one gets now), memory_bytes.
    pub(crate) fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.inner.stats(), self.inner.memory_bytes())
    }

    /// How far the tree's sums are from their children's, over the whole tree (O(N)):
    /// `exact` (always true at rest) and `max_relative_error`.
    pub(crate) fn consistency<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let c = py.detach(|| inner.consistency());
        let d = PyDict::new(py);
        d.set_item("exact", c.exact)?;
        d.set_item("max_relative_error", c.max_rel_error)?;
        Ok(d)
    }

    /// Remove every item (keys made before stay stale).
    pub(crate) fn clear(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.detach(|| inner.clear());
    }

    /// Recompute the tree's sums from the priorities.
    pub(crate) fn rebuild(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.detach(|| inner.rebuild());
    }

    /// Save a checkpoint into the new directory `dir` (docs/checkpoint.md); `user` is a dict
    /// of small values (int, float, bool, str, bytes) kept with it; `keep_last` > 0 keeps only
    /// that many numbered checkpoints beside it.
    #[pyo3(signature = (dir, *, user=None, keep_last=0))]
    pub(crate) fn _save(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        user: Option<&Bound<'_, PyDict>>,
        keep_last: usize,
    ) -> PyResult<()> {
        let options = crate::checkpoint::save_options(user, keep_last)?;
        let inner = &self.inner;
        py.detach(|| inner.save_with(&dir, &options))
            .map_err(|e| py_err(py, e))
    }

    /// Load the checkpoint at `dir` into a new buffer of `variant`; returns (the native
    /// buffer, the user dict).
    #[staticmethod]
    #[pyo3(signature = (dir, *, variant="split"))]
    pub(crate) fn _load<'py>(
        py: Python<'py>,
        dir: PathBuf,
        variant: &str,
    ) -> PyResult<(Buffer, Bound<'py, PyDict>)> {
        let variant = variant_name(variant)?;
        let (inner, mut user) = py
            .detach(|| load_variant(variant, &dir))
            .map_err(|e| py_err(py, e))?;
        let shapes = match user.remove(SHAPES_KEY) {
            Some(UserValue::Str(s)) => Some(s),
            _ => None,
        };
        let columns = columns_of(inner.config().schema(), shapes.as_deref());
        Ok((
            Buffer::from_parts(inner, columns, variant),
            user_dict(py, &user)?,
        ))
    }
}

/// A buffer's stats as the dict `Buffer.stats()` returns.
pub(crate) fn stats_dict<'py>(
    py: Python<'py>,
    s: &Stats,
    memory: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("len", s.len)?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("inserted", s.inserted)?;
    d.set_item("total_priority", s.total)?;
    d.set_item("min_positive", s.min_positive)?;
    d.set_item("running_max", s.running_max)?;
    d.set_item("memory_bytes", memory)?;
    Ok(d)
}
