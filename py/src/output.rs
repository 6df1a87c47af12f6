//! Output arrays: new numpy arrays made fallibly, and the caller's arrays written in place.

use crate::errors::{argument_error, schema_error, AllocationError};
use crate::schema::{dtype_name, Column};
use kary_replay::{ColumnSliceMut, DType};
use numpy::{
    dtype, Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadwriteArrayDyn,
    PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Arrays up to this size are made by numpy's C API directly, whose failure (a null
/// pointer) PyO3 turns into a panic; larger ones through `numpy.empty`, whose failure is a
/// Python exception, answered with `AllocationError`.
pub(crate) const DIRECT_OUTPUT_BYTES: usize = 64 << 20;

/// A new, uninitialized output array `(batch, *shape)` of `T`.
pub(crate) fn new_output<'py, T: Element>(
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
                    AllocationError::new_err(format!(
                        "a batch of {batch} rows of column '{}': {e}",
                        column.name
                    ))
                })?;
            Ok(made.cast_into::<PyArrayDyn<T>>()?)
        }
    }
}

/// The prelude and the end of every sample into new arrays: `batch` rows of each of
/// `columns` and `next` (a sequence's next observations; none for a flat buffer) made here,
/// handed to `fill` as destinations (which draws into them and returns the sample's dict),
/// then set into that dict under their names.
pub(crate) fn with_new_arrays<'py>(
    py: Python<'py>,
    batch: usize,
    columns: &[Column],
    next: &[Column],
    fill: impl FnOnce(
        &mut [ColumnSliceMut<'_>],
        &mut [ColumnSliceMut<'_>],
    ) -> PyResult<Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let made = |cols: &[Column]| -> PyResult<Vec<Out<'py>>> {
        cols.iter().map(|c| Out::new(py, batch, c)).collect()
    };
    let (outs, nexts) = (made(columns)?, made(next)?);
    let d = {
        // SAFETY: the arrays were just made by `Out::new` and nothing else refers to them.
        let mut slices: Vec<ColumnSliceMut<'_>> =
            outs.iter().map(|o| unsafe { o.slice() }).collect();
        // SAFETY: as above.
        let mut next_slices: Vec<ColumnSliceMut<'_>> =
            nexts.iter().map(|o| unsafe { o.slice() }).collect();
        fill(&mut slices, &mut next_slices)?
    };
    for (c, o) in columns.iter().chain(next).zip(outs.iter().chain(&nexts)) {
        d.set_item(&c.name, o.any())?;
    }
    Ok(d)
}

pub(crate) enum Out<'py> {
    U8(Bound<'py, PyArrayDyn<u8>>),
    I32(Bound<'py, PyArrayDyn<i32>>),
    I64(Bound<'py, PyArrayDyn<i64>>),
    F32(Bound<'py, PyArrayDyn<f32>>),
    F64(Bound<'py, PyArrayDyn<f64>>),
    Bool(Bound<'py, PyArrayDyn<bool>>),
}

impl<'py> Out<'py> {
    pub(crate) fn new(py: Python<'py>, batch: usize, c: &Column) -> PyResult<Out<'py>> {
        Ok(match c.dtype {
            DType::U8 => Out::U8(new_output(py, batch, c)?),
            DType::I32 => Out::I32(new_output(py, batch, c)?),
            DType::I64 => Out::I64(new_output(py, batch, c)?),
            DType::F32 => Out::F32(new_output(py, batch, c)?),
            DType::F64 => Out::F64(new_output(py, batch, c)?),
            DType::Bool => Out::Bool(new_output(py, batch, c)?),
        })
    }

    pub(crate) fn any(&self) -> &Bound<'py, PyAny> {
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
    pub(crate) unsafe fn slice(&self) -> ColumnSliceMut<'_> {
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
pub(crate) enum Dest<'py> {
    U8(PyReadwriteArrayDyn<'py, u8>),
    I32(PyReadwriteArrayDyn<'py, i32>),
    I64(PyReadwriteArrayDyn<'py, i64>),
    F32(PyReadwriteArrayDyn<'py, f32>),
    F64(PyReadwriteArrayDyn<'py, f64>),
    Bool(PyReadwriteArrayDyn<'py, bool>),
}

impl Dest<'_> {
    /// The first `n` elements, or None when the array is not contiguous.
    pub(crate) fn slice(&mut self, n: usize) -> Option<ColumnSliceMut<'_>> {
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

pub(crate) fn readwrite<'py, T: Element>(
    name: &str,
    a: &Bound<'py, PyUntypedArray>,
) -> PyResult<PyReadwriteArrayDyn<'py, T>> {
    a.cast::<PyArrayDyn<T>>()
        .expect("the dtype was checked")
        .try_readwrite()
        .map_err(|e| {
            argument_error(format!(
                "out['{name}']: not writable ({e}): pass a writable array"
            ))
        })
}

/// The caller's array `out[key]` for `batch` items of `column`: C-contiguous, writable, of
/// the column's dtype and shape `(>= batch, *column.shape)`, else a `SchemaError` that says
/// what is expected.
pub(crate) fn dest<'py>(
    py: Python<'py>,
    out: &Bound<'py, PyDict>,
    key: &str,
    column: &Column,
    batch: usize,
) -> PyResult<Dest<'py>> {
    let Some(v) = out.get_item(key)? else {
        return Err(schema_error(format!("out: no array for '{key}'")));
    };
    let a = v
        .cast::<PyUntypedArray>()
        .map_err(|_| schema_error(format!("out['{key}']: not a numpy array")))?;
    let ok_dtype = match column.dtype {
        DType::U8 => a.dtype().is_equiv_to(&dtype::<u8>(py)),
        DType::I32 => a.dtype().is_equiv_to(&dtype::<i32>(py)),
        DType::I64 => a.dtype().is_equiv_to(&dtype::<i64>(py)),
        DType::F32 => a.dtype().is_equiv_to(&dtype::<f32>(py)),
        DType::F64 => a.dtype().is_equiv_to(&dtype::<f64>(py)),
        DType::Bool => a.dtype().is_equiv_to(&dtype::<bool>(py)),
    };
    let shape = a.shape();
    let rows_ok = shape.first().is_some_and(|&r| r >= batch) && shape[1..] == column.shape[..];
    if !ok_dtype || !rows_ok || !a.is_c_contiguous() {
        let mut want = vec![format!(">= {batch}")];
        want.extend(column.shape.iter().map(|d| d.to_string()));
        return Err(schema_error(format!(
            "out['{key}']: {} {:?}{}, expected a C-contiguous {} array of shape ({})",
            a.dtype(),
            shape,
            if a.is_c_contiguous() {
                ""
            } else {
                " (not contiguous)"
            },
            dtype_name(column.dtype),
            want.join(", ")
        )));
    }
    Ok(match column.dtype {
        DType::U8 => Dest::U8(readwrite(key, a)?),
        DType::I32 => Dest::I32(readwrite(key, a)?),
        DType::I64 => Dest::I64(readwrite(key, a)?),
        DType::F32 => Dest::F32(readwrite(key, a)?),
        DType::F64 => Dest::F64(readwrite(key, a)?),
        DType::Bool => Dest::Bool(readwrite(key, a)?),
    })
}
