//! `kary_replay._native`: the Python extension behind the `kary_replay` package (py/python).
//!
//! One frozen class over `Arc<dyn ConcurrentBuffer>`: every method takes `&self`, so Python
//! threads never meet a borrow error, and every call that does work runs with the GIL
//! released (`Python::detach`). Columns arrive as numpy arrays (checked against the schema
//! column by column; read-only and non-contiguous arrays are accepted, the latter copied
//! once) and leave as new, owned arrays, or go straight into the caller's arrays
//! (`sample_into`). Errors are the Python classes of `kary_replay.errors`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kary_replay::checkpoint::{self, LoadOptions, Loaded, SaveOptions, UserData, UserValue};
use kary_replay::{
    ColumnSlice, ColumnSliceMut, ConcurrentBuffer, Config, DType, DefaultPriority, Error,
    GlobalLockBuffer, Key, Load, LockFreeBuffer, RandomSource, SampleBatch, SampleMode, Schema,
    SplitLockBuffer, Stats, WeightNormalization, Writer,
};
use numpy::{
    dtype, Element, PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyReadwriteArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The user-map key under which a save keeps the Python shapes of the columns (the
/// checkpoint's schema has elements per item only).
const SHAPES_KEY: &str = "kary_replay.python.shapes";

// ---------------------------------------------------------------------------------------
// Errors

/// The `kary_replay.errors` class for `e`, with `retryable` set.
fn py_err(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::InvalidPriority { .. } => "InvalidPriorityError",
        Error::InvalidKey { .. } | Error::OutOfRange { .. } | Error::UnknownShard { .. } => {
            "InvalidKeyError"
        }
        Error::ColumnCount { .. }
        | Error::ColumnType { .. }
        | Error::ColumnLength { .. }
        | Error::InvalidSchema(_) => "SchemaError",
        Error::Empty | Error::ZeroTotalPriority => "EmptyBufferError",
        Error::Contention { .. } => "ContentionError",
        Error::Checkpoint { .. } => "CheckpointError",
        Error::Allocation { .. } | Error::SizeOverflow { .. } => "AllocationError",
        Error::GenerationsExhausted { .. } => "KaryReplayError",
        _ => "InvalidArgumentError",
    };
    raise(
        py,
        class,
        e.to_string(),
        e.is_retryable(),
        checkpoint_kind(&e),
    )
}

fn checkpoint_kind(e: &Error) -> Option<String> {
    match e {
        Error::Checkpoint { kind, .. } => Some(format!("{kind:?}").to_lowercase()),
        _ => None,
    }
}

/// An instance of `kary_replay.errors.<class>(message)` as a `PyErr`.
fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    retryable: bool,
    kind: Option<String>,
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let module = py.import("kary_replay.errors")?;
        let value = module.getattr(class)?.call1((message.clone(),))?;
        value.setattr("retryable", retryable)?;
        if let Some(kind) = kind {
            value.setattr("kind", kind)?;
        }
        Ok(PyErr::from_value(value))
    })();
    made.unwrap_or_else(|e| e)
}

fn schema_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, "SchemaError", message, false, None)
}

fn argument_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidArgumentError", message, false, None)
}

// ---------------------------------------------------------------------------------------
// Columns

/// One schema column as Python sees it.
#[derive(Clone, Debug)]
struct Column {
    name: String,
    dtype: DType,
    /// The per-item shape (`()` for a scalar).
    shape: Vec<usize>,
    /// Elements per item (the product of `shape`).
    elements: usize,
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "uint8",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::Bool => "bool",
    }
}

fn dtype_from(name: &str) -> Option<DType> {
    Some(match name {
        "uint8" => DType::U8,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float32" => DType::F32,
        "float64" => DType::F64,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// A column's array, borrowed for the length of a call.
enum Held<'py> {
    U8(PyReadonlyArrayDyn<'py, u8>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    Bool(PyReadonlyArrayDyn<'py, bool>),
}

impl Held<'_> {
    fn slice(&self) -> ColumnSlice<'_> {
        // Every held array is C-contiguous (`hold` made sure), so `as_slice` succeeds.
        const CONTIGUOUS: &str = "a C-contiguous array";
        match self {
            Held::U8(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::I32(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::I64(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::F32(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::F64(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::Bool(a) => a.as_slice().expect(CONTIGUOUS).into(),
        }
    }
}

fn readonly<'py, T: Element>(a: &Bound<'py, PyUntypedArray>) -> PyReadonlyArrayDyn<'py, T> {
    a.cast::<PyArrayDyn<T>>()
        .expect("the dtype was checked")
        .readonly()
}

/// `value` as a C-contiguous array of the column's dtype and `lead` + the column's shape.
/// numpy arrays and objects with `__array__` (torch CPU tensors) keep their dtype, which
/// must be the column's; Python scalars and lists are converted to it.
fn hold<'py>(
    py: Python<'py>,
    column: &Column,
    value: &Bound<'py, PyAny>,
    lead: Option<usize>,
) -> PyResult<Held<'py>> {
    let array = match value.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) if value.hasattr("__array__")? => py
            .import("numpy")?
            .call_method1("asarray", (value,))?
            .cast_into::<PyUntypedArray>()?,
        Err(_) => py
            .import("numpy")?
            .call_method1("asarray", (value, dtype_name(column.dtype)))
            .map_err(|e| {
                schema_error(
                    py,
                    format!(
                        "column '{}': cannot convert to {}: {e}",
                        column.name,
                        dtype_name(column.dtype)
                    ),
                )
            })?
            .cast_into::<PyUntypedArray>()?,
    };
    let expected = |lead: Option<usize>| -> String {
        let mut dims: Vec<String> = lead.iter().map(|m| m.to_string()).collect();
        if lead.is_none() && column.shape.is_empty() {
            return "()".into();
        }
        dims.extend(column.shape.iter().map(|d| d.to_string()));
        format!(
            "({}{})",
            dims.join(", "),
            if dims.len() == 1 { "," } else { "" }
        )
    };
    let ok_dtype = match column.dtype {
        DType::U8 => array.dtype().is_equiv_to(&dtype::<u8>(py)),
        DType::I32 => array.dtype().is_equiv_to(&dtype::<i32>(py)),
        DType::I64 => array.dtype().is_equiv_to(&dtype::<i64>(py)),
        DType::F32 => array.dtype().is_equiv_to(&dtype::<f32>(py)),
        DType::F64 => array.dtype().is_equiv_to(&dtype::<f64>(py)),
        DType::Bool => array.dtype().is_equiv_to(&dtype::<bool>(py)),
    };
    if !ok_dtype {
        return Err(schema_error(
            py,
            format!(
                "column '{}': dtype {}, expected {} with shape {}",
                column.name,
                array.dtype(),
                dtype_name(column.dtype),
                expected(lead)
            ),
        ));
    }
    let shape = array.shape();
    let shape_ok = match lead {
        None => shape == column.shape.as_slice(),
        Some(m) => shape.first() == Some(&m) && &shape[1..] == column.shape.as_slice(),
    };
    if !shape_ok {
        return Err(schema_error(
            py,
            format!(
                "column '{}': shape {:?}, expected {}",
                column.name,
                shape,
                expected(lead)
            ),
        ));
    }
    let array = if array.is_c_contiguous() {
        array
    } else {
        py.import("numpy")?
            .call_method1("ascontiguousarray", (array,))?
            .cast_into::<PyUntypedArray>()?
    };
    Ok(match column.dtype {
        DType::U8 => Held::U8(readonly(&array)),
        DType::I32 => Held::I32(readonly(&array)),
        DType::I64 => Held::I64(readonly(&array)),
        DType::F32 => Held::F32(readonly(&array)),
        DType::F64 => Held::F64(readonly(&array)),
        DType::Bool => Held::Bool(readonly(&array)),
    })
}

/// The leading length of a batch: that of the first column given.
fn batch_length(columns: &[Column], given: &Bound<'_, PyDict>) -> PyResult<usize> {
    let first = given.get_item(&columns[0].name)?;
    Ok(match first {
        Some(v) => v.len().or_else(|_| {
            v.getattr("shape")
                .and_then(|s| s.get_item(0))
                .and_then(|d| d.extract::<usize>())
        })?,
        None => 0,
    })
}

/// Every schema column from `given` (no more, no fewer), held.
fn columns_from<'py>(
    py: Python<'py>,
    columns: &[Column],
    given: Option<&Bound<'py, PyDict>>,
    lead: Option<usize>,
) -> PyResult<Vec<Held<'py>>> {
    let mut slots: Vec<Option<Bound<'py, PyAny>>> = vec![None; columns.len()];
    if let Some(given) = given {
        // One pass over the caller's names: each must be a column.
        for (key, value) in given.iter() {
            let key = key.cast::<pyo3::types::PyString>()?;
            let name = key.to_str()?;
            match columns.iter().position(|c| c.name == name) {
                Some(i) => slots[i] = Some(value),
                None => {
                    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                    return Err(schema_error(
                        py,
                        format!("no column '{name}' in the schema (columns: {names:?})"),
                    ));
                }
            }
        }
    }
    columns
        .iter()
        .zip(slots)
        .map(|(c, v)| match v {
            Some(v) => hold(py, c, &v, lead),
            None => Err(schema_error(py, format!("column '{}' is missing", c.name))),
        })
        .collect()
}

/// Priorities as f64: None, or a 1-D array-like of `n` finite non-negative numbers (checked
/// by the buffer).
fn priorities_from(
    py: Python<'_>,
    value: Option<&Bound<'_, PyAny>>,
    n: usize,
) -> PyResult<Option<Vec<f64>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let np = py.import("numpy")?;
    let array = np
        .call_method1("asarray", (value, "float64"))
        .map_err(|e| argument_error(py, format!("priorities: not numbers: {e}")))?;
    let array = array
        .cast::<PyArrayDyn<f64>>()
        .map_err(|_| argument_error(py, "priorities: not an array of numbers".into()))?;
    if array.shape() != [n] {
        return Err(argument_error(
            py,
            format!("priorities: shape {:?}, expected ({n},)", array.shape()),
        ));
    }
    Ok(Some(array.readonly().as_array().iter().copied().collect()))
}

// ---------------------------------------------------------------------------------------
// The random source

/// xoshiro256** seeded by splitmix64: a generator whose state can be pickled.
#[derive(Clone, Debug)]
struct Xoshiro([u64; 4]);

impl Xoshiro {
    fn new(mut seed: u64) -> Xoshiro {
        let mut s = [0u64; 4];
        for x in &mut s {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *x = z ^ (z >> 31);
        }
        Xoshiro(s)
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
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

impl RandomSource for Xoshiro {
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A random generator for sampling: seed it once and pass it to every call of one thread
/// (it is never reseeded). Picklable; safe to share, though a generator per thread avoids
/// waiting on its lock.
#[pyclass(frozen, module = "kary_replay._native")]
struct Rng(Mutex<Xoshiro>);

#[pymethods]
impl Rng {
    #[new]
    #[pyo3(signature = (seed=None))]
    fn new(seed: Option<u64>) -> Rng {
        let seed = seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            t ^ (std::process::id() as u64).rotate_left(32)
        });
        Rng(Mutex::new(Xoshiro::new(seed)))
    }

    /// A uniform float in [0, 1) (for tests and for callers' own draws).
    fn random(&self) -> f64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).next_f64()
    }

    /// The four state words.
    fn state(&self) -> (u64, u64, u64, u64) {
        let s = self.0.lock().unwrap_or_else(|e| e.into_inner()).0;
        (s[0], s[1], s[2], s[3])
    }

    /// A generator in a given state (all zero is refused: xoshiro never reaches it).
    #[staticmethod]
    fn from_state(py: Python<'_>, state: (u64, u64, u64, u64)) -> PyResult<Rng> {
        let s = [state.0, state.1, state.2, state.3];
        if s == [0; 4] {
            return Err(argument_error(py, "an all-zero generator state".into()));
        }
        Ok(Rng(Mutex::new(Xoshiro(s))))
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let from_state = py.get_type::<Rng>().getattr("from_state")?;
        let args = PyTuple::new(py, [slf.get().state().into_pyobject(py)?])?;
        Ok((from_state, args))
    }
}

// ---------------------------------------------------------------------------------------
// The buffer

/// The native buffer: `kary_replay.PrioritizedReplayBuffer` subclasses it.
#[pyclass(frozen, subclass, module = "kary_replay._native", name = "Buffer")]
struct Buffer {
    inner: Arc<dyn ConcurrentBuffer>,
    columns: Vec<Column>,
    variant: &'static str,
    keys: Keys,
    /// The generator of calls that pass none.
    rng: Mutex<Xoshiro>,
}

fn variant_name(v: &str, py: Python<'_>) -> PyResult<&'static str> {
    match v {
        "split" => Ok("split"),
        "lockfree" => Ok("lockfree"),
        "global" => Ok("global"),
        other => Err(argument_error(
            py,
            format!("variant is 'split', 'lockfree' or 'global', got {other:?}"),
        )),
    }
}

fn make(variant: &str, config: Config) -> kary_replay::Result<Arc<dyn ConcurrentBuffer>> {
    Ok(match variant {
        "split" => Arc::new(SplitLockBuffer::new(config)?),
        "lockfree" => Arc::new(LockFreeBuffer::new(config)?),
        _ => Arc::new(GlobalLockBuffer::new(config)?),
    })
}

fn load_variant(
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

fn weight_norm_from(py: Python<'_>, weight_norm: &str) -> PyResult<WeightNormalization> {
    match weight_norm {
        "global" => Ok(WeightNormalization::Global),
        "batch" => Ok(WeightNormalization::Batch),
        other => Err(argument_error(
            py,
            format!("weight_norm is 'global' or 'batch', got {other:?}"),
        )),
    }
}

fn mode_from(py: Python<'_>, mode: &str) -> PyResult<SampleMode> {
    match mode {
        "stratified" => Ok(SampleMode::Stratified),
        "independent" => Ok(SampleMode::Independent),
        other => Err(argument_error(
            py,
            format!("mode is 'stratified' or 'independent', got {other:?}"),
        )),
    }
}

/// Bits of a Python key that hold the item's generation (its insertion number; its slot is
/// that modulo the capacity); the 15 bits above hold the buffer's tag, so that a key of
/// another buffer is recognised.
/// (The layout of `kary_replay::shard`'s keys: a shard's tag is its number plus one.)
const GENERATION_BITS: u32 = kary_replay::shard::GENERATION_BITS;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
/// The user-map key under which a save keeps the buffer's key tag.
const TAG_KEY: &str = "kary_replay.python.key_tag";

/// A buffer's keys: its tag and its generations.
#[derive(Clone, Copy, Debug)]
struct Keys {
    tag: u64,
}

impl Keys {
    /// A fresh random tag in 1..=0x7fff (keys stay below 2^63: torch's int64 holds them).
    fn fresh() -> Keys {
        let mut r = Xoshiro::new(Rng::new(None).state().0);
        Keys {
            tag: 1 + r.next_u64() % 0x7fff,
        }
    }

    fn encode(self, k: &Key) -> u64 {
        (self.tag << GENERATION_BITS) | (k.generation & GENERATION_MASK)
    }

    /// The buffer's key for a Python key; an error for another buffer's key.
    fn decode(self, py: Python<'_>, key: u64, capacity: usize) -> PyResult<Key> {
        if key >> GENERATION_BITS != self.tag {
            return Err(raise(
                py,
                "InvalidKeyError",
                format!("key {key:#x} was not handed out by this buffer (its tag is {:#x}, this buffer's {:#x})", key >> GENERATION_BITS, self.tag),
                false,
                None,
            ));
        }
        let generation = key & GENERATION_MASK;
        Ok(Key {
            index: (generation % capacity as u64) as usize,
            generation,
        })
    }
}

impl Buffer {
    /// Run `f` with the generator (`rng`'s, or the buffer's own) without the GIL. The
    /// generator's lock is taken and released with the GIL released, so that a thread
    /// waiting for the GIL never holds it and a thread holding the GIL never waits for it
    /// while its holder waits for the GIL (another thread sampling with the same generator,
    /// or reading its `state()`, cannot deadlock with this one).
    fn with_rng<T: Send>(
        &self,
        py: Python<'_>,
        rng: Option<&Bound<'_, Rng>>,
        f: impl FnOnce(&mut Xoshiro) -> T + Send,
    ) -> T {
        let generator: &Mutex<Xoshiro> = match rng {
            Some(r) => &r.get().0,
            None => &self.rng,
        };
        py.detach(|| f(&mut generator.lock().unwrap_or_else(|e| e.into_inner())))
    }

    /// The sampled batch's metadata as a dict of new arrays.
    fn info<'py>(&self, py: Python<'py>, out: &SampleBatch) -> PyResult<Bound<'py, PyDict>> {
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

    fn from_parts(
        inner: Arc<dyn ConcurrentBuffer>,
        columns: Vec<Column>,
        variant: &'static str,
        keys: Keys,
    ) -> Buffer {
        Buffer {
            inner,
            columns,
            variant,
            keys,
            rng: Mutex::new(Xoshiro::new(0x5eed)),
        }
    }
}

/// Arrays up to this size are made by numpy's C API directly, whose failure (a null
/// pointer) PyO3 turns into a panic; larger ones through `numpy.empty`, whose failure is a
/// Python exception, answered with `AllocationError`.
const DIRECT_OUTPUT_BYTES: usize = 64 << 20;

/// A new, uninitialized output array `(batch, *shape)` of `T`.
fn new_output<'py, T: Element>(
    py: Python<'py>,
    batch: usize,
    column: &Column,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let mut dims = vec![batch];
    dims.extend(&column.shape);
    let bytes = batch
        .checked_mul(column.elements)
        .and_then(|n| n.checked_mul(column.dtype.size()));
    match bytes {
        // SAFETY: `new` leaves the elements uninitialized; every one of them is written by
        // the sample before the array is handed to Python (on an error it is dropped unread).
        Some(b) if b <= DIRECT_OUTPUT_BYTES => Ok(unsafe { PyArrayDyn::<T>::new(py, dims, false) }),
        _ => {
            let shape = PyTuple::new(py, &dims)?;
            let made = py
                .import("numpy")?
                .call_method1("empty", (shape, dtype_name(column.dtype)))
                .map_err(|e| {
                    raise(
                        py,
                        "AllocationError",
                        format!("a batch of {batch} rows of column '{}': {e}", column.name),
                        false,
                        None,
                    )
                })?;
            Ok(made.cast_into::<PyArrayDyn<T>>()?)
        }
    }
}

enum Out<'py> {
    U8(Bound<'py, PyArrayDyn<u8>>),
    I32(Bound<'py, PyArrayDyn<i32>>),
    I64(Bound<'py, PyArrayDyn<i64>>),
    F32(Bound<'py, PyArrayDyn<f32>>),
    F64(Bound<'py, PyArrayDyn<f64>>),
    Bool(Bound<'py, PyArrayDyn<bool>>),
}

impl<'py> Out<'py> {
    fn new(py: Python<'py>, batch: usize, c: &Column) -> PyResult<Out<'py>> {
        Ok(match c.dtype {
            DType::U8 => Out::U8(new_output(py, batch, c)?),
            DType::I32 => Out::I32(new_output(py, batch, c)?),
            DType::I64 => Out::I64(new_output(py, batch, c)?),
            DType::F32 => Out::F32(new_output(py, batch, c)?),
            DType::F64 => Out::F64(new_output(py, batch, c)?),
            DType::Bool => Out::Bool(new_output(py, batch, c)?),
        })
    }

    fn any(&self) -> &Bound<'py, PyAny> {
        match self {
            Out::U8(a) => a.as_any(),
            Out::I32(a) => a.as_any(),
            Out::I64(a) => a.as_any(),
            Out::F32(a) => a.as_any(),
            Out::F64(a) => a.as_any(),
            Out::Bool(a) => a.as_any(),
        }
    }

    /// The array's memory.
    ///
    /// # Safety
    /// The array was made by `Out::new` (contiguous, not yet seen by Python) and no other
    /// slice of it is alive.
    unsafe fn slice(&self) -> ColumnSliceMut<'_> {
        const FRESH: &str = "a fresh contiguous array";
        // SAFETY: the caller's contract: a fresh, contiguous array that nothing else
        // references.
        unsafe {
            match self {
                Out::U8(a) => a.as_slice_mut().expect(FRESH).into(),
                Out::I32(a) => a.as_slice_mut().expect(FRESH).into(),
                Out::I64(a) => a.as_slice_mut().expect(FRESH).into(),
                Out::F32(a) => a.as_slice_mut().expect(FRESH).into(),
                Out::F64(a) => a.as_slice_mut().expect(FRESH).into(),
                Out::Bool(a) => a.as_slice_mut().expect(FRESH).into(),
            }
        }
    }
}

/// A caller's output array, borrowed writable for the length of a call.
enum Dest<'py> {
    U8(PyReadwriteArrayDyn<'py, u8>),
    I32(PyReadwriteArrayDyn<'py, i32>),
    I64(PyReadwriteArrayDyn<'py, i64>),
    F32(PyReadwriteArrayDyn<'py, f32>),
    F64(PyReadwriteArrayDyn<'py, f64>),
    Bool(PyReadwriteArrayDyn<'py, bool>),
}

impl Dest<'_> {
    /// The first `n` elements, or None when the array is not contiguous.
    fn slice(&mut self, n: usize) -> Option<ColumnSliceMut<'_>> {
        Some(match self {
            Dest::U8(a) => a.as_slice_mut().ok()?.get_mut(..n)?.into(),
            Dest::I32(a) => a.as_slice_mut().ok()?.get_mut(..n)?.into(),
            Dest::I64(a) => a.as_slice_mut().ok()?.get_mut(..n)?.into(),
            Dest::F32(a) => a.as_slice_mut().ok()?.get_mut(..n)?.into(),
            Dest::F64(a) => a.as_slice_mut().ok()?.get_mut(..n)?.into(),
            Dest::Bool(a) => a.as_slice_mut().ok()?.get_mut(..n)?.into(),
        })
    }
}

fn readwrite<'py, T: Element>(
    py: Python<'py>,
    name: &str,
    a: &Bound<'py, PyUntypedArray>,
) -> PyResult<PyReadwriteArrayDyn<'py, T>> {
    a.cast::<PyArrayDyn<T>>()
        .expect("the dtype was checked")
        .try_readwrite()
        .map_err(|e| {
            argument_error(
                py,
                format!("out['{name}']: not writable ({e}): pass a writable array"),
            )
        })
}

#[pymethods]
impl Buffer {
    #[new]
    #[pyo3(signature = (capacity, schema, *, alpha=0.6, fanout=8, variant="split",
        weight_norm="global", default_priority="running_max", shard=None, _from=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        capacity: usize,
        schema: &Bound<'_, PyDict>,
        alpha: f64,
        fanout: usize,
        variant: &str,
        weight_norm: &str,
        default_priority: &str,
        shard: Option<usize>,
        _from: Option<&Bound<'_, Buffer>>,
    ) -> PyResult<Buffer> {
        if let Some(from) = _from {
            // A loaded buffer, wrapped by the Python class (`kary_replay.load`).
            let b = from.get();
            return Ok(Buffer::from_parts(
                b.inner.clone(),
                b.columns.clone(),
                b.variant,
                b.keys,
            ));
        }
        let variant = variant_name(variant, py)?;
        let keys = match shard {
            None => Keys::fresh(),
            Some(k) if k < kary_replay::shard::MAX_SHARDS => Keys { tag: k as u64 + 1 },
            Some(k) => {
                return Err(argument_error(
                    py,
                    format!(
                        "shard is a number in 0..{}, got {k}",
                        kary_replay::shard::MAX_SHARDS
                    ),
                ))
            }
        };
        let mut columns = Vec::new();
        let mut core = Schema::new();
        if schema.is_empty() {
            return Err(schema_error(py, "the schema has no column".into()));
        }
        for (name, spec) in schema.iter() {
            let name: String = name
                .extract()
                .map_err(|_| schema_error(py, "column names are strings".into()))?;
            let (dtype, shape): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                spec.extract().map_err(|_| {
                    schema_error(
                        py,
                        format!("column '{name}': expected (dtype, shape), got {spec}"),
                    )
                })?;
            let np = py.import("numpy")?;
            let dtype_text: String = np
                .call_method1("dtype", (dtype,))
                .and_then(|d| d.getattr("name"))
                .and_then(|n| n.extract())
                .map_err(|e| schema_error(py, format!("column '{name}': dtype: {e}")))?;
            let dtype = dtype_from(&dtype_text).ok_or_else(|| {
                schema_error(
                    py,
                    format!(
                        "column '{name}': dtype {dtype_text} is not one of uint8, int32, int64, float32, float64, bool"
                    ),
                )
            })?;
            let shape: Vec<usize> = if let Ok(n) = shape.extract::<usize>() {
                vec![n]
            } else {
                shape.extract().map_err(|_| {
                    schema_error(
                        py,
                        format!("column '{name}': shape is a tuple of sizes, got {shape}"),
                    )
                })?
            };
            let elements = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .filter(|&e| e > 0)
                .ok_or_else(|| {
                    schema_error(
                        py,
                        format!("column '{name}': shape {shape:?} holds no element, or too many"),
                    )
                })?;
            core = core.column(&name, dtype, elements);
            columns.push(Column {
                name,
                dtype,
                shape,
                elements,
            });
        }
        let weight_norm = weight_norm_from(py, weight_norm)?;
        let default_priority = match default_priority {
            "running_max" => DefaultPriority::RunningMax,
            "live_max" => DefaultPriority::LiveMax,
            other => {
                return Err(argument_error(
                    py,
                    format!("default_priority is 'running_max' or 'live_max', got {other:?}"),
                ))
            }
        };
        let config = Config::builder(capacity, core)
            .alpha(alpha)
            .fanout(fanout)
            .weight_normalization(weight_norm)
            .default_priority(default_priority)
            .build()
            .map_err(|e| py_err(py, e))?;
        let inner = py
            .detach(|| make(variant, config))
            .map_err(|e| py_err(py, e))?;
        Ok(Buffer::from_parts(inner, columns, variant, keys))
    }

    /// The tag in the top bits of this buffer's keys: a shard's number plus one for a
    /// buffer made with `shard=`, else a random one (`key >> 48`).
    #[getter]
    fn key_tag(&self) -> u64 {
        self.keys.tag
    }

    /// Insert one item (each column one value of its shape) with a raw priority, or the
    /// buffer's default when `priority` is None; returns its key.
    #[pyo3(signature = (priority=None, **row))]
    fn add(
        &self,
        py: Python<'_>,
        priority: Option<f64>,
        row: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let held = columns_from(py, &self.columns, row, None)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let inner = &self.inner;
        let keys = self.keys;
        py.detach(|| inner.insert(&slices, priority))
            .map(|k| keys.encode(&k))
            .map_err(|e| py_err(py, e))
    }

    /// Insert M items (each column `(M, *shape)`) with M raw priorities, or the default;
    /// returns their keys (uint64). A failed call inserts nothing.
    #[pyo3(signature = (priorities=None, **columns))]
    fn add_batch<'py>(
        &self,
        py: Python<'py>,
        priorities: Option<&Bound<'py, PyAny>>,
        columns: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let empty = PyDict::new(py);
        let m = batch_length(&self.columns, columns.unwrap_or(&empty))?;
        let held = columns_from(py, &self.columns, columns, Some(m))?;
        let priorities = priorities_from(py, priorities, m)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let inner = &self.inner;
        let keys = py
            .detach(|| inner.insert_batch(&slices, priorities.as_deref()))
            .map_err(|e| py_err(py, e))?;
        Ok(PyArray1::from_vec(
            py,
            keys.iter().map(|k| self.keys.encode(k)).collect(),
        ))
    }

    /// A staged writer that inserts every `batch` items in one call (`kary_replay.Writer`).
    fn _writer(&self, py: Python<'_>, batch: usize) -> PyResult<NativeWriter> {
        let writer = Writer::new(self.inner.clone(), batch).map_err(|e| py_err(py, e))?;
        Ok(NativeWriter {
            writer: Mutex::new(writer),
            columns: self.columns.clone(),
            keys: self.keys,
        })
    }

    /// Sample `batch_size` items: a dict of new arrays, one per column (`(B, *shape)`),
    /// plus keys, indices, weights, probabilities and priorities.
    #[pyo3(signature = (batch_size, beta, *, mode="stratified", rng=None))]
    fn _sample<'py>(
        &self,
        py: Python<'py>,
        batch_size: usize,
        beta: f64,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mode = mode_from(py, mode)?;
        if batch_size == 0 {
            return Err(py_err(py, Error::ZeroBatch));
        }
        if self.inner.is_empty() {
            return Err(py_err(py, Error::Empty));
        }
        let outs: Vec<Out<'py>> = self
            .columns
            .iter()
            .map(|c| Out::new(py, batch_size, c))
            .collect::<PyResult<_>>()?;
        // SAFETY: the arrays were just made by `Out::new` and nothing else refers to them.
        let mut slices: Vec<ColumnSliceMut<'_>> =
            outs.iter().map(|o| unsafe { o.slice() }).collect();
        let mut batch = SampleBatch::default();
        let inner = &self.inner;
        self.with_rng(py, rng, |r| {
            inner.sample_columns_into(batch_size, beta, mode, r, &mut batch, &mut slices)
        })
        .map_err(|e| py_err(py, e))?;
        drop(slices);
        let d = self.info(py, &batch)?;
        for (c, o) in self.columns.iter().zip(&outs) {
            d.set_item(&c.name, o.any())?;
        }
        Ok(d)
    }

    /// One item at each of `fractions` (floats in [0, 1)) of this buffer's own total, for a
    /// coordinator sampling the union of several buffers: the dict of `_sample` (its
    /// probabilities this buffer's own, its weights all 1) plus `stats`, this buffer's stats
    /// with the total its descent used.
    #[pyo3(signature = (fractions, *, rng=None))]
    fn _sample_at<'py>(
        &self,
        py: Python<'py>,
        fractions: &Bound<'py, PyAny>,
        rng: Option<&Bound<'py, Rng>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fractions = f64_vec(py, "fractions", fractions)?;
        kary_replay::buffer::check_fractions(&fractions).map_err(|e| py_err(py, e))?;
        if self.inner.is_empty() {
            return Err(py_err(py, Error::Empty));
        }
        let outs: Vec<Out<'py>> = self
            .columns
            .iter()
            .map(|c| Out::new(py, fractions.len(), c))
            .collect::<PyResult<_>>()?;
        // SAFETY: the arrays were just made by `Out::new` and nothing else refers to them.
        let mut slices: Vec<ColumnSliceMut<'_>> =
            outs.iter().map(|o| unsafe { o.slice() }).collect();
        let mut batch = SampleBatch::default();
        let inner = &self.inner;
        let stats = self
            .with_rng(py, rng, |r| {
                inner.sample_at_columns_into(&fractions, r, &mut batch, &mut slices)
            })
            .map_err(|e| py_err(py, e))?;
        drop(slices);
        let d = self.info(py, &batch)?;
        for (c, o) in self.columns.iter().zip(&outs) {
            d.set_item(&c.name, o.any())?;
        }
        d.set_item("stats", stats_dict(py, &stats, inner.memory_bytes())?)?;
        Ok(d)
    }

    /// Sample `batch_size` items into the caller's arrays (`out`: a dict with one C-contiguous,
    /// writable array per column, of the column's dtype and at least `batch_size` rows of its
    /// shape); returns the keys, indices, weights, probabilities and priorities as a dict.
    #[pyo3(signature = (out, batch_size, beta, *, mode="stratified", rng=None))]
    fn _sample_into<'py>(
        &self,
        py: Python<'py>,
        out: &Bound<'py, PyDict>,
        batch_size: usize,
        beta: f64,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mode = mode_from(py, mode)?;
        let mut dests = Vec::new();
        for c in &self.columns {
            let Some(v) = out.get_item(&c.name)? else {
                return Err(schema_error(
                    py,
                    format!("out: no array for column '{}'", c.name),
                ));
            };
            let a = v
                .cast::<PyUntypedArray>()
                .map_err(|_| schema_error(py, format!("out['{}']: not a numpy array", c.name)))?;
            let ok_dtype = match c.dtype {
                DType::U8 => a.dtype().is_equiv_to(&dtype::<u8>(py)),
                DType::I32 => a.dtype().is_equiv_to(&dtype::<i32>(py)),
                DType::I64 => a.dtype().is_equiv_to(&dtype::<i64>(py)),
                DType::F32 => a.dtype().is_equiv_to(&dtype::<f32>(py)),
                DType::F64 => a.dtype().is_equiv_to(&dtype::<f64>(py)),
                DType::Bool => a.dtype().is_equiv_to(&dtype::<bool>(py)),
            };
            let shape = a.shape();
            let rows_ok =
                shape.first().is_some_and(|&r| r >= batch_size) && shape[1..] == c.shape[..];
            if !ok_dtype || !rows_ok || !a.is_c_contiguous() {
                let mut want = vec![format!(">= {batch_size}")];
                want.extend(c.shape.iter().map(|d| d.to_string()));
                return Err(schema_error(
                    py,
                    format!(
                        "out['{}']: {} {:?}{}, expected a C-contiguous {} array of shape ({})",
                        c.name,
                        a.dtype(),
                        shape,
                        if a.is_c_contiguous() {
                            ""
                        } else {
                            " (not contiguous)"
                        },
                        dtype_name(c.dtype),
                        want.join(", ")
                    ),
                ));
            }
            dests.push(match c.dtype {
                DType::U8 => Dest::U8(readwrite(py, &c.name, a)?),
                DType::I32 => Dest::I32(readwrite(py, &c.name, a)?),
                DType::I64 => Dest::I64(readwrite(py, &c.name, a)?),
                DType::F32 => Dest::F32(readwrite(py, &c.name, a)?),
                DType::F64 => Dest::F64(readwrite(py, &c.name, a)?),
                DType::Bool => Dest::Bool(readwrite(py, &c.name, a)?),
            });
        }
        let mut slices: Vec<ColumnSliceMut<'_>> = dests
            .iter_mut()
            .zip(&self.columns)
            .map(|(d, c)| {
                d.slice(batch_size * c.elements)
                    .expect("checked contiguous")
            })
            .collect();
        let mut batch = SampleBatch::default();
        let inner = &self.inner;
        self.with_rng(py, rng, |r| {
            inner.sample_columns_into(batch_size, beta, mode, r, &mut batch, &mut slices)
        })
        .map_err(|e| py_err(py, e))?;
        self.info(py, &batch)
    }

    /// Set the raw priorities of the items named by `keys` (uint64); returns (applied,
    /// stale): keys whose item was overwritten are dropped and counted, a key the buffer
    /// never made is an error, and on any error nothing changes.
    fn _update_priorities(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyArrayDyn<u64>>,
        priorities: &Bound<'_, PyArrayDyn<f64>>,
    ) -> PyResult<(usize, usize)> {
        let keys = keys.readonly();
        let priorities = priorities.readonly();
        let capacity = self.inner.capacity();
        let keys: Vec<Key> = keys
            .as_array()
            .iter()
            .map(|&k| self.keys.decode(py, k, capacity))
            .collect::<PyResult<_>>()?;
        let priorities: Vec<f64> = priorities.as_array().iter().copied().collect();
        let inner = &self.inner;
        let report = py
            .detach(|| inner.update_priorities(&keys, &priorities))
            .map_err(|e| py_err(py, e))?;
        Ok((report.applied, report.stale))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Slots (items held before FIFO eviction).
    #[getter]
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// The sum of the stored (alpha-exponentiated) priorities.
    #[getter]
    fn total_priority(&self) -> f64 {
        self.inner.total_priority()
    }

    /// The variant: 'split', 'lockfree' or 'global'.
    #[getter]
    fn variant(&self) -> &'static str {
        self.variant
    }

    /// The schema: column name -> (dtype name, shape tuple).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for c in &self.columns {
            let shape = PyTuple::new(py, &c.shape)?;
            d.set_item(&c.name, (dtype_name(c.dtype), shape))?;
        }
        Ok(d)
    }

    /// The stored priority of slot `index` (for tests and inspection).
    fn priority(&self, py: Python<'_>, index: usize) -> PyResult<f64> {
        self.inner.priority(index).map_err(|e| py_err(py, e))
    }

    /// The key of the item in slot `index`, or None.
    fn key(&self, py: Python<'_>, index: usize) -> PyResult<Option<u64>> {
        self.inner
            .key(index)
            .map(|k| k.map(|k| self.keys.encode(&k)))
            .map_err(|e| py_err(py, e))
    }

    /// Counts and sums, each read once in O(K): len, capacity, inserted, total_priority,
    /// min_positive (the smallest positive stored priority, None when none), running_max
    /// (the stored priority an item added without one gets now), memory_bytes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.inner.stats(), self.inner.memory_bytes())
    }

    /// How far the tree's sums are from their children's, over the whole tree (O(N)):
    /// `exact` (always true at rest) and `max_relative_error`.
    fn consistency<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let c = py.detach(|| inner.consistency());
        let d = PyDict::new(py);
        d.set_item("exact", c.exact)?;
        d.set_item("max_relative_error", c.max_rel_error)?;
        Ok(d)
    }

    /// Remove every item (keys made before stay stale).
    fn clear(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.detach(|| inner.clear());
    }

    /// Recompute the tree's sums from the priorities.
    fn rebuild(&self, py: Python<'_>) {
        let inner = &self.inner;
        py.detach(|| inner.rebuild());
    }

    /// Save a checkpoint into the new directory `dir` (docs/checkpoint.md); `user` is a dict
    /// of small values (int, float, bool, str, bytes) kept with it; `keep_last` > 0 keeps only
    /// that many numbered checkpoints beside it.
    #[pyo3(signature = (dir, *, user=None, keep_last=0))]
    fn _save(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        user: Option<&Bound<'_, PyDict>>,
        keep_last: usize,
    ) -> PyResult<()> {
        let mut data = UserData::new();
        if let Some(user) = user {
            for (k, v) in user.iter() {
                let k: String = k
                    .extract()
                    .map_err(|_| argument_error(py, "user keys are strings".into()))?;
                data.insert(k, user_value(py, &v)?);
            }
        }
        let shapes: Vec<Vec<usize>> = self.columns.iter().map(|c| c.shape.clone()).collect();
        data.insert(TAG_KEY.into(), UserValue::U64(self.keys.tag));
        data.insert(
            SHAPES_KEY.into(),
            UserValue::Str(
                shapes
                    .iter()
                    .map(|s| {
                        s.iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join("x")
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        );
        let mut options = SaveOptions::new().with_user_data(data);
        if keep_last > 0 {
            options = options.keep_last(keep_last);
        }
        let inner = &self.inner;
        py.detach(|| inner.save_with(&dir, &options))
            .map_err(|e| py_err(py, e))
    }

    /// Load the checkpoint at `dir` into a new buffer of `variant`; returns (the native
    /// buffer, the user dict).
    #[staticmethod]
    #[pyo3(signature = (dir, *, variant="split"))]
    fn _load<'py>(
        py: Python<'py>,
        dir: PathBuf,
        variant: &str,
    ) -> PyResult<(Buffer, Bound<'py, PyDict>)> {
        let variant = variant_name(variant, py)?;
        let (inner, mut user) = py
            .detach(|| load_variant(variant, &dir))
            .map_err(|e| py_err(py, e))?;
        let shapes = match user.remove(SHAPES_KEY) {
            Some(UserValue::Str(s)) => Some(s),
            _ => None,
        };
        let keys = match user.remove(TAG_KEY) {
            Some(UserValue::U64(tag)) if (1..=0x7fff).contains(&tag) => Keys { tag },
            _ => Keys::fresh(),
        };
        let columns = columns_of(inner.config().schema(), shapes.as_deref());
        Ok((
            Buffer::from_parts(inner, columns, variant, keys),
            user_dict(py, &user)?,
        ))
    }
}

/// The Python columns of a loaded schema: the saved shapes where they fit, else `(n,)`.
fn columns_of(schema: &Schema, shapes: Option<&str>) -> Vec<Column> {
    let saved: Vec<Option<Vec<usize>>> = shapes
        .map(|s| {
            s.split(',')
                .map(|one| {
                    if one.is_empty() {
                        Some(vec![])
                    } else {
                        one.split('x').map(|d| d.parse().ok()).collect()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    schema
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let shape = saved
                .get(i)
                .cloned()
                .flatten()
                .filter(|s| s.iter().product::<usize>() == c.shape)
                .unwrap_or_else(|| vec![c.shape]);
            Column {
                name: c.name.clone(),
                dtype: c.dtype,
                shape,
                elements: c.shape,
            }
        })
        .collect()
}

fn user_value(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<UserValue> {
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(UserValue::Bool(b.is_true()));
    }
    if let Ok(i) = v.extract::<u64>() {
        return Ok(UserValue::U64(i));
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(UserValue::I64(i));
    }
    if let Ok(f) = v.cast::<pyo3::types::PyFloat>() {
        return Ok(UserValue::F64(f.value()));
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(UserValue::Str(s));
    }
    if let Ok(b) = v.cast::<pyo3::types::PyBytes>() {
        return Ok(UserValue::Bytes(b.as_bytes().to_vec()));
    }
    Err(argument_error(
        py,
        format!(
            "user values are int, float, bool, str or bytes, got {}",
            v.get_type()
        ),
    ))
}

fn user_dict<'py>(py: Python<'py>, user: &UserData) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in user {
        match v {
            UserValue::U64(x) => d.set_item(k, x)?,
            UserValue::I64(x) => d.set_item(k, x)?,
            UserValue::F64(x) => d.set_item(k, x)?,
            UserValue::Bool(x) => d.set_item(k, x)?,
            UserValue::Str(x) => d.set_item(k, x)?,
            UserValue::Bytes(x) => d.set_item(k, pyo3::types::PyBytes::new(py, x))?,
        }
    }
    Ok(d)
}

/// Read and check the checkpoint at `dir` whole, as a load does: a dict of what it holds.
#[pyfunction]
fn verify<'py>(py: Python<'py>, dir: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let r = py
        .detach(|| checkpoint::verify(&dir))
        .map_err(|e| py_err(py, e))?;
    let d = PyDict::new(py);
    d.set_item("capacity", r.config.capacity())?;
    d.set_item("len", r.len)?;
    d.set_item("inserted", r.inserted)?;
    d.set_item("cursor", r.cursor)?;
    d.set_item("running_max", r.running_max)?;
    d.set_item("total_priority", r.total)?;
    d.set_item("positive", r.positive)?;
    d.set_item("min_positive", r.min_positive)?;
    d.set_item("max_priority", r.max)?;
    d.set_item("crate_version", r.crate_version)?;
    let columns = PyDict::new(py);
    for c in r.config.schema().columns() {
        columns.set_item(&c.name, (dtype_name(c.dtype), c.shape))?;
    }
    d.set_item("columns", columns)?;
    let mut user = r.user;
    user.remove(SHAPES_KEY);
    user.remove(TAG_KEY);
    d.set_item("user", user_dict(py, &user)?)?;
    Ok(d)
}

/// The newest committed numbered checkpoint (`ckpt-<step>`) in `parent`, or None.
#[pyfunction]
fn latest(py: Python<'_>, parent: PathBuf) -> PyResult<Option<PathBuf>> {
    checkpoint::latest(&parent).map_err(|e| py_err(py, e))
}

/// `parent/ckpt-<step>` (the step zero-padded so that names sort by step).
#[pyfunction]
fn numbered(parent: PathBuf, step: u64) -> PathBuf {
    checkpoint::numbered(parent, step)
}

// ---------------------------------------------------------------------------------------
// The staged writer

/// A staged writer (`kary_replay.Writer` wraps it).
#[pyclass(frozen, module = "kary_replay._native")]
struct NativeWriter {
    writer: Mutex<Writer<Arc<dyn ConcurrentBuffer>>>,
    columns: Vec<Column>,
    keys: Keys,
}

#[pymethods]
impl NativeWriter {
    /// Stage one item; returns the keys of the items this push flushed (maybe none).
    #[pyo3(signature = (priority=None, **row))]
    fn push<'py>(
        &self,
        py: Python<'py>,
        priority: Option<f64>,
        row: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let held = columns_from(py, &self.columns, row, None)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let (writer, keys) = (&self.writer, self.keys);
        let keys = py
            .detach(|| {
                let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
                w.push(&slices, priority)
                    .map(|k| k.iter().map(|k| keys.encode(k)).collect::<Vec<u64>>())
            })
            .map_err(|e| py_err(py, e))?;
        Ok(PyArray1::from_vec(py, keys))
    }

    /// Insert the staged items now; returns their keys.
    fn flush<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let (writer, keys) = (&self.writer, self.keys);
        let keys = py
            .detach(|| {
                let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
                w.flush()
                    .map(|k| k.iter().map(|k| keys.encode(k)).collect::<Vec<u64>>())
            })
            .map_err(|e| py_err(py, e))?;
        Ok(PyArray1::from_vec(py, keys))
    }

    /// Items staged and not yet inserted.
    fn staged(&self) -> usize {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .staged()
    }
}

// ---------------------------------------------------------------------------------------
// The bare tree

/// The elements of `obj`, mapped by `f`, if it is a numpy array of `T` (any shape, read in
/// order); None for anything else.
fn array_of<T: Element + Copy, U>(obj: &Bound<'_, PyAny>, f: impl FnMut(T) -> U) -> Option<Vec<U>> {
    let a = obj.cast::<PyArrayDyn<T>>().ok()?;
    Some(a.readonly().as_array().iter().copied().map(f).collect())
}

/// Indices as `usize` from any integer array (numpy int64, int32, uint64 arrays read
/// directly; anything else through `numpy.asarray`), checked against `len`.
fn indices_from(py: Python<'_>, indices: &Bound<'_, PyAny>, len: usize) -> PyResult<Vec<usize>> {
    let check = |i: i128| -> PyResult<usize> {
        usize::try_from(i).ok().filter(|&i| i < len).ok_or_else(|| {
            py_err(
                py,
                Error::OutOfRange {
                    index: i.clamp(0, usize::MAX as i128) as usize,
                    capacity: len,
                },
            )
        })
    };
    let direct = array_of::<i64, _>(indices, |i| check(i.into()))
        .or_else(|| array_of::<i32, _>(indices, |i| check(i.into())))
        .or_else(|| array_of::<u64, _>(indices, |i| check(i.into())));
    if let Some(read) = direct {
        return read.into_iter().collect();
    }
    let np = py.import("numpy")?;
    let a = np
        .call_method1("asarray", (indices,))?
        .call_method1("reshape", (-1,))?;
    let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    if kind != "i" && kind != "u" {
        return Err(argument_error(
            py,
            format!("indices: integers expected, got dtype kind {kind:?}"),
        ));
    }
    let a = a.call_method1("astype", ("int64",))?;
    let a = a.cast::<PyArrayDyn<i64>>()?.readonly();
    a.as_array().iter().map(|&i| check(i.into())).collect()
}

/// Numbers as f64 (numpy float64 and float32 arrays read directly; anything else through
/// `numpy.asarray`).
fn floats_from(py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let direct =
        array_of::<f64, _>(values, |x| x).or_else(|| array_of::<f32, _>(values, f64::from));
    if let Some(read) = direct {
        return Ok(read);
    }
    let np = py.import("numpy")?;
    let a = np
        .call_method1("asarray", (values, "float64"))
        .map_err(|e| argument_error(py, format!("values: not numbers: {e}")))?
        .call_method1("reshape", (-1,))?;
    let a = a.cast::<PyArrayDyn<f64>>()?.readonly();
    Ok(a.as_array().iter().copied().collect())
}

/// Sampled leaves: (indices, values).
type Drawn<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f64>>);

/// A K-ary sum tree over `capacity` leaves (the crate's `SumTree`): set leaves by index,
/// find the leaf where a prefix sum lands, sample proportionally. No exponent is applied:
/// the leaves are what you set. Safe to share between threads (one lock); batch calls run
/// without the GIL. The drop-ins for TorchRL and tianshou put it in place of their trees.
#[pyclass(frozen, module = "kary_replay._native")]
struct SumTree {
    tree: Mutex<kary_replay::SumTree>,
}

impl SumTree {
    fn lock(&self) -> std::sync::MutexGuard<'_, kary_replay::SumTree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl SumTree {
    #[new]
    #[pyo3(signature = (capacity, fanout=8))]
    fn new(py: Python<'_>, capacity: usize, fanout: usize) -> PyResult<SumTree> {
        let fanout = kary_replay::Fanout::new(fanout).map_err(|e| py_err(py, e))?;
        let tree = kary_replay::SumTree::with_max(capacity, fanout).map_err(|e| py_err(py, e))?;
        Ok(SumTree {
            tree: Mutex::new(tree),
        })
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }

    /// Set leaves `indices` to `values` (finite, >= 0; a repeated index: the last wins). On
    /// a bad index or value nothing changes.
    fn set(
        &self,
        py: Python<'_>,
        indices: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let len = self.lock().len();
        let indices = indices_from(py, indices, len)?;
        let mut values = floats_from(py, values)?;
        if values.len() == 1 && indices.len() != 1 {
            values = vec![values[0]; indices.len()];
        }
        py.detach(|| self.lock().set_batch(&indices, &values))
            .map_err(|e| py_err(py, e))
    }

    /// The leaves at `indices` (float64).
    fn get<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let len = self.lock().len();
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
    fn total(&self) -> f64 {
        self.lock().total()
    }

    /// The smallest positive leaf (0 when none is).
    fn min_positive(&self) -> f64 {
        self.lock().min_positive().unwrap_or(0.0)
    }

    /// The largest leaf (0 when all are).
    fn max(&self) -> f64 {
        self.lock().max_leaf().unwrap_or(0.0)
    }

    /// For each mass in `targets` (clamped into [0, total]), the positive leaf where the
    /// prefix sum passes it (int64). Empty trees are an `EmptyBufferError`.
    fn find_prefix<'py>(
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
    fn sample<'py>(
        &self,
        py: Python<'py>,
        batch: usize,
        rng: Option<&Bound<'py, Rng>>,
        stratified: bool,
    ) -> PyResult<Drawn<'py>> {
        let own = Mutex::new(Xoshiro::new(Rng::new(None).state().0));
        // Locked without the GIL, as `Buffer::with_rng` says why.
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
    fn clear(&self) {
        self.lock().clear();
    }

    /// Every leaf (float64), for pickling and inspection.
    fn leaves<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        let t = self.lock();
        let values: Vec<f64> = (0..t.len()).map(|i| t.get(i).expect("in range")).collect();
        PyArray1::from_vec(py, values)
    }

    /// The fanout K.
    #[getter]
    fn fanout(&self) -> usize {
        self.lock().fanout().get()
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let module = py.import("kary_replay._native")?;
        let t = slf.get();
        let args = (t.__len__(), t.fanout(), t.leaves(py)).into_pyobject(py)?;
        Ok((module.getattr("_sum_tree_from")?, args))
    }
}

/// Rebuilds a pickled `SumTree`.
#[pyfunction]
fn _sum_tree_from(
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

/// The extension module.
/// A buffer's stats as the dict `Buffer.stats()` returns.
fn stats_dict<'py>(py: Python<'py>, s: &Stats, memory: usize) -> PyResult<Bound<'py, PyDict>> {
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

/// A float64 vector from any sequence or array of numbers.
fn f64_vec(py: Python<'_>, what: &str, values: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let np = py.import("numpy")?;
    let a = np
        .call_method1("ascontiguousarray", (values, "float64"))
        .map_err(|e| argument_error(py, format!("{what}: expected numbers ({e})")))?;
    let a = a
        .cast::<PyArray1<f64>>()
        .map_err(|_| argument_error(py, format!("{what}: expected a 1-d sequence of numbers")))?;
    Ok(a.readonly().as_slice()?.to_vec())
}

// ---------------------------------------------------------------------------------------
// The coordinator of shards

/// `Coordinator.finish`'s result: the probabilities and the weights.
type Finished<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f32>>);

/// Plans and finishes samples of the union of several buffers (`kary_replay.Coordinator`;
/// `kary_replay::shard::Coordinator` underneath: see its doc for the arithmetic).
#[pyclass(module = "kary_replay._native", frozen)]
struct Coordinator(Mutex<kary_replay::shard::Coordinator>);

#[pymethods]
impl Coordinator {
    #[new]
    fn new() -> Coordinator {
        Coordinator(Mutex::new(kary_replay::shard::Coordinator::new()))
    }

    /// Plan `batch_size` draws over shards whose stats are `stats` (one dict per shard, as
    /// `Buffer.stats()` returns: total_priority, len, min_positive); returns one float64
    /// array of fractions per shard (empty for a shard that got no draw).
    #[pyo3(signature = (stats, batch_size, *, mode="stratified", rng=None))]
    fn plan<'py>(
        &self,
        py: Python<'py>,
        stats: Vec<Bound<'py, PyDict>>,
        batch_size: usize,
        mode: &str,
        rng: Option<&Bound<'py, Rng>>,
    ) -> PyResult<Vec<Bound<'py, PyArray1<f64>>>> {
        let mode = mode_from(py, mode)?;
        let mut all = Vec::with_capacity(stats.len());
        for (k, d) in stats.iter().enumerate() {
            let get = |name: &str| -> PyResult<Bound<'py, PyAny>> {
                d.get_item(name)?
                    .ok_or_else(|| argument_error(py, format!("stats[{k}]: no {name:?} entry")))
            };
            all.push(Stats {
                total: get("total_priority")?.extract()?,
                len: get("len")?.extract()?,
                min_positive: get("min_positive")?.extract()?,
                ..Stats::default()
            });
        }
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let planned = match rng {
            Some(r) => c.plan(
                &all,
                batch_size,
                mode,
                &mut *r.get().0.lock().unwrap_or_else(|e| e.into_inner()),
            ),
            None => c.plan(
                &all,
                batch_size,
                mode,
                &mut Xoshiro::new(Rng::new(None).state().0),
            ),
        };
        planned.map_err(|e| py_err(py, e))?;
        Ok((0..all.len())
            .map(|k| PyArray1::from_slice(py, c.fractions(k)))
            .collect())
    }

    /// The probabilities (float64) and importance weights (float32) of the batch made of the
    /// shards' replies to the last plan, concatenated in shard order: `priorities[k]` and
    /// `totals[k]` are shard k's stored priorities and the total its descent used (its
    /// `_sample_at` reply's `priorities` and `stats["total_priority"]`).
    #[pyo3(signature = (priorities, totals, beta, *, weight_norm="global"))]
    fn finish<'py>(
        &self,
        py: Python<'py>,
        priorities: Vec<Bound<'py, PyAny>>,
        totals: Vec<f64>,
        beta: f64,
        weight_norm: &str,
    ) -> PyResult<Finished<'py>> {
        let norm = weight_norm_from(py, weight_norm)?;
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
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish(&replies, beta, norm, &mut probabilities, &mut weights)
            .map_err(|e| py_err(py, e))?;
        let weights: Vec<f32> = weights.iter().map(|&w| w as f32).collect();
        Ok((
            PyArray1::from_vec(py, probabilities),
            PyArray1::from_vec(py, weights),
        ))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Buffer>()?;
    m.add_class::<Rng>()?;
    m.add_class::<NativeWriter>()?;
    m.add_class::<SumTree>()?;
    m.add_class::<Coordinator>()?;
    m.add_function(wrap_pyfunction!(_sum_tree_from, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(latest, m)?)?;
    m.add_function(wrap_pyfunction!(numbered, m)?)?;
    Ok(())
}
