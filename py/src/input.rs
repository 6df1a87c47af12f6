//! Input conversion: numpy arrays borrowed for a call and checked against the schema, and
//! the numbers (priorities, indices, floats) that callers hand in.

use crate::errors::{argument_error, py_err, schema_error, InvalidKeyError};
use crate::schema::{dtype_name, Column};
use kary_replay::{ColumnSlice, DType, Error};
use numpy::{
    dtype, Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A column's array, borrowed for the length of a call, or a Python number converted for a
/// scalar column.
pub(crate) enum Held<'py> {
    U8(PyReadonlyArrayDyn<'py, u8>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    Bool(PyReadonlyArrayDyn<'py, bool>),
    /// A Python `int`, `float` or `bool` given for a scalar column, converted as
    /// `numpy.asarray(value, dtype)` converts it (no array is made).
    Scalar(Scalar),
}

/// One value of a scalar column (see [`Held::Scalar`]).
pub(crate) enum Scalar {
    U8([u8; 1]),
    I32([i32; 1]),
    I64([i64; 1]),
    F32([f32; 1]),
    F64([f64; 1]),
    Bool([bool; 1]),
}

impl Held<'_> {
    pub(crate) fn slice(&self) -> ColumnSlice<'_> {
        // Every held array is C-contiguous (`hold` made sure), so `as_slice` succeeds.
        const CONTIGUOUS: &str = "a C-contiguous array";
        match self {
            Held::U8(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::I32(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::I64(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::F32(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::F64(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::Bool(a) => a.as_slice().expect(CONTIGUOUS).into(),
            Held::Scalar(Scalar::U8(v)) => (&v[..]).into(),
            Held::Scalar(Scalar::I32(v)) => (&v[..]).into(),
            Held::Scalar(Scalar::I64(v)) => (&v[..]).into(),
            Held::Scalar(Scalar::F32(v)) => (&v[..]).into(),
            Held::Scalar(Scalar::F64(v)) => (&v[..]).into(),
            Held::Scalar(Scalar::Bool(v)) => (&v[..]).into(),
        }
    }

    /// Bytes the value holds.
    pub(crate) fn bytes(&self) -> usize {
        self.slice().as_bytes().len()
    }
}

/// `value` converted for a scalar column of `dtype` without numpy, when it is a Python
/// `bool`, `int` or `float` that `numpy.asarray(value, dtype)` takes exactly: a bool for a
/// bool column; a bool or an int in range for an integer column (an int out of range is
/// left to numpy, which refuses it); a bool, an int or a float for a float column (rounded to
/// nearest, as numpy casts). `None` for anything else, which takes numpy's path.
fn python_scalar(dtype: DType, value: &Bound<'_, PyAny>) -> Option<Scalar> {
    use pyo3::types::{PyBool, PyFloat, PyInt};
    if let Ok(b) = value.cast_exact::<PyBool>() {
        let b = b.is_true();
        return Some(match dtype {
            DType::Bool => Scalar::Bool([b]),
            DType::U8 => Scalar::U8([u8::from(b)]),
            DType::I32 => Scalar::I32([i32::from(b)]),
            DType::I64 => Scalar::I64([i64::from(b)]),
            DType::F32 => Scalar::F32([f32::from(u8::from(b))]),
            DType::F64 => Scalar::F64([f64::from(u8::from(b))]),
        });
    }
    if value.is_exact_instance_of::<PyInt>() {
        let v: i64 = value.extract().ok()?;
        return match dtype {
            DType::U8 => u8::try_from(v).ok().map(|v| Scalar::U8([v])),
            DType::I32 => i32::try_from(v).ok().map(|v| Scalar::I32([v])),
            DType::I64 => Some(Scalar::I64([v])),
            // Round to nearest, as numpy's cast of a Python int does (to a double first).
            DType::F64 => Some(Scalar::F64([v as f64])),
            DType::F32 => Some(Scalar::F32([(v as f64) as f32])),
            DType::Bool => None,
        };
    }
    if let Ok(f) = value.cast_exact::<PyFloat>() {
        let v = f.value();
        return match dtype {
            DType::F64 => Some(Scalar::F64([v])),
            DType::F32 => Some(Scalar::F32([v as f32])),
            _ => None,
        };
    }
    None
}

pub(crate) fn readonly<'py, T: Element>(
    a: &Bound<'py, PyUntypedArray>,
) -> PyReadonlyArrayDyn<'py, T> {
    a.cast::<PyArrayDyn<T>>()
        .expect("the dtype was checked")
        .readonly()
}

/// `value` as a C-contiguous array of the column's dtype and `lead` + the column's shape.
/// numpy arrays and objects with `__array__` (torch CPU tensors) keep their dtype, which
/// must be the column's; Python scalars and lists are converted to it.
pub(crate) fn hold<'py>(
    py: Python<'py>,
    column: &Column,
    value: &Bound<'py, PyAny>,
    lead: Option<usize>,
) -> PyResult<Held<'py>> {
    if lead.is_none() && column.shape.is_empty() {
        if let Some(v) = python_scalar(column.dtype, value) {
            return Ok(Held::Scalar(v));
        }
    }
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
                schema_error(format!(
                    "column '{}': cannot convert to {}: {e}",
                    column.name,
                    dtype_name(column.dtype)
                ))
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
        return Err(schema_error(format!(
            "column '{}': dtype {}, expected {} with shape {}",
            column.name,
            array.dtype(),
            dtype_name(column.dtype),
            expected(lead)
        )));
    }
    let shape = array.shape();
    let shape_ok = match lead {
        None => shape == column.shape.as_slice(),
        Some(m) => shape.first() == Some(&m) && &shape[1..] == column.shape.as_slice(),
    };
    if !shape_ok {
        return Err(schema_error(format!(
            "column '{}': shape {:?}, expected {}",
            column.name,
            shape,
            expected(lead)
        )));
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
pub(crate) fn batch_length(columns: &[Column], given: &Bound<'_, PyDict>) -> PyResult<usize> {
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

/// The columns `given` names, by schema position: each name must be a column.
fn named<'py>(
    columns: &[Column],
    given: Option<&Bound<'py, PyDict>>,
) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
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
                    return Err(schema_error(format!(
                        "no column '{name}' in the schema (columns: {names:?})"
                    )));
                }
            }
        }
    }
    Ok(slots)
}

/// The schema columns `given` names (at least one), each held with its position.
pub(crate) fn some_columns_from<'py>(
    py: Python<'py>,
    columns: &[Column],
    given: Option<&Bound<'py, PyDict>>,
    lead: Option<usize>,
) -> PyResult<Vec<(usize, Held<'py>)>> {
    let held: Vec<(usize, Held<'py>)> = named(columns, given)?
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| hold(py, &columns[i], &v, lead).map(|h| (i, h))))
        .collect::<PyResult<_>>()?;
    if held.is_empty() {
        return Err(schema_error(
            "name at least one column to write".to_string(),
        ));
    }
    Ok(held)
}

/// Every schema column from `given` (no more, no fewer), held.
pub(crate) fn columns_from<'py>(
    py: Python<'py>,
    columns: &[Column],
    given: Option<&Bound<'py, PyDict>>,
    lead: Option<usize>,
) -> PyResult<Vec<Held<'py>>> {
    let slots = named(columns, given)?;
    columns
        .iter()
        .zip(slots)
        .map(|(c, v)| match v {
            Some(v) => hold(py, c, &v, lead),
            None => Err(schema_error(format!("column '{}' is missing", c.name))),
        })
        .collect()
}

/// What a numeric argument may hold: the numpy dtype kinds accepted, and what they are
/// called in an error.
#[derive(Clone, Copy)]
pub(crate) enum Numbers {
    /// Signed or unsigned integers.
    Integers,
    /// Floats, or integers or booleans taken as floats.
    Floats,
}

impl Numbers {
    fn accepts(self, kind: &str) -> bool {
        match self {
            Numbers::Integers => matches!(kind, "i" | "u"),
            Numbers::Floats => matches!(kind, "f" | "i" | "u" | "b"),
        }
    }
}

/// The one numeric reader: `obj` (a numpy array, a torch CPU tensor, a list: anything
/// `numpy.asarray` takes) as the flat elements of type `T` and its shape. An array of `T`
/// is read in place; others are converted by numpy once. Something that is not numbers is an
/// `InvalidArgumentError`; numbers of a kind `numbers` does not accept (floats for keys)
/// are `wrong_kind`'s error. `what` names the argument in the message.
pub(crate) fn numbers<T: Element + Copy>(
    py: Python<'_>,
    what: &str,
    obj: &Bound<'_, PyAny>,
    numbers: Numbers,
    wrong_kind: fn(String) -> PyErr,
) -> PyResult<(Vec<T>, Vec<usize>)> {
    if let Ok(a) = obj.cast::<PyArrayDyn<T>>() {
        let a = a.readonly();
        return Ok((a.as_array().iter().copied().collect(), a.shape().to_vec()));
    }
    let a = py
        .import("numpy")?
        .call_method1("asarray", (obj,))
        .map_err(|e| argument_error(format!("{what}: not numbers: {e}")))?;
    let descr = a.getattr("dtype")?;
    let kind: String = descr.getattr("kind")?.extract()?;
    if !numbers.accepts(&kind) {
        let message = format!(
            "{what}: dtype {}, expected {}",
            descr.str()?,
            match numbers {
                Numbers::Integers => "integers",
                Numbers::Floats => "numbers",
            }
        );
        return Err(match kind.as_str() {
            "f" | "i" | "u" | "b" | "c" => wrong_kind(message),
            _ => argument_error(format!("{what}: not numbers ({message})")),
        });
    }
    let a = a.call_method1("astype", (dtype::<T>(py),))?;
    let a = a.cast::<PyArrayDyn<T>>()?.readonly();
    Ok((a.as_array().iter().copied().collect(), a.shape().to_vec()))
}

/// Raw priorities for `n` items (shape `(n,)`), or `None` when not given.
pub(crate) fn priorities_from(
    py: Python<'_>,
    value: Option<&Bound<'_, PyAny>>,
    n: usize,
) -> PyResult<Option<Vec<f64>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let (values, shape) = numbers(py, "priorities", value, Numbers::Floats, argument_error)?;
    if shape != [n] {
        return Err(argument_error(format!(
            "priorities: shape {shape:?}, expected ({n},)"
        )));
    }
    Ok(Some(values))
}

/// Indices in `0..len` from any integer array-like (any shape, read in order).
pub(crate) fn indices_from(
    py: Python<'_>,
    indices: &Bound<'_, PyAny>,
    len: usize,
) -> PyResult<Vec<usize>> {
    let (values, _) = numbers::<i64>(py, "indices", indices, Numbers::Integers, argument_error)?;
    values
        .into_iter()
        .map(|i| {
            usize::try_from(i).ok().filter(|&i| i < len).ok_or_else(|| {
                py_err(
                    py,
                    Error::OutOfRange {
                        index: i.max(0) as usize,
                        capacity: len,
                    },
                )
            })
        })
        .collect()
}

/// Numbers as f64 from any array-like (any shape, read in order).
pub(crate) fn floats_from(py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    numbers(py, "values", values, Numbers::Floats, argument_error).map(|(values, _)| values)
}

/// A one-dimensional float64 vector from any sequence or array of numbers.
pub(crate) fn f64_vec(py: Python<'_>, what: &str, values: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let (values, shape) = numbers(py, what, values, Numbers::Floats, argument_error)?;
    if shape.len() != 1 {
        return Err(argument_error(format!(
            "{what}: expected a 1-d sequence of numbers, got shape {shape:?}"
        )));
    }
    Ok(values)
}

/// Python keys (non-negative integers, any shape, read in order) as `u64`: an integer array
/// of another dtype is converted once; a negative key is an `InvalidKeyError`, floats a
/// `SchemaError`.
pub(crate) fn keys_from(py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Ok(a) = keys.cast::<PyArrayDyn<u64>>() {
        return Ok(a.readonly().as_array().iter().copied().collect());
    }
    let keys = py
        .import("numpy")?
        .call_method1("asarray", (keys,))
        .map_err(|e| argument_error(format!("keys: not numbers: {e}")))?;
    let kind: String = keys.getattr("dtype")?.getattr("kind")?.extract()?;
    if kind == "u" {
        let (values, _) = numbers::<u64>(py, "keys", &keys, Numbers::Integers, schema_error)?;
        return Ok(values);
    }
    let (values, _) = numbers::<i64>(py, "keys", &keys, Numbers::Integers, schema_error)?;
    values
        .into_iter()
        .map(|k| {
            u64::try_from(k)
                .map_err(|_| InvalidKeyError::new_err(format!("keys: a negative key ({k})")))
        })
        .collect()
}
