//! The schema as Python sees it: each column's dtype name and numpy shape.

use crate::errors::schema_error;
use kary_replay::{DType, Schema};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The user-map key under which saves before per-item dimensions were in the schema kept
/// the Python shapes of the columns; a load still reads it (and hides it).
pub(crate) const SHAPES_KEY: &str = "kary_replay.python.shapes";

/// One schema column as Python sees it.
#[derive(Clone, Debug)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    /// The per-item shape (`()` for a scalar).
    pub(crate) shape: Vec<usize>,
    /// Elements per item (the product of `shape`).
    pub(crate) elements: usize,
}

pub(crate) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "uint8",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::Bool => "bool",
    }
}

pub(crate) fn dtype_from(name: &str) -> Option<DType> {
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

/// The Python columns of a schema: each column's dimensions, or for a flat column of a
/// checkpoint written before the schema had them, the shape its user map kept.
pub(crate) fn columns_of(schema: &Schema, shapes: Option<&str>) -> Vec<Column> {
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
                .filter(|s| c.dims == [c.shape] && s.iter().product::<usize>() == c.shape)
                .unwrap_or_else(|| c.dims.clone());
            Column {
                name: c.name.clone(),
                dtype: c.dtype,
                shape,
                elements: c.shape,
            }
        })
        .collect()
}

/// A Python schema (`{name: (dtype, shape)}`) as the Python columns and the core schema.
/// `reserved` are names a column may not have, `why` says what takes them.
pub(crate) fn parse_schema(
    py: Python<'_>,
    schema: &Bound<'_, PyDict>,
    reserved: &[&str],
    why: &str,
) -> PyResult<(Vec<Column>, Schema)> {
    let mut columns = Vec::new();
    let mut core = Schema::new();
    if schema.is_empty() {
        return Err(schema_error("the schema has no column".into()));
    }
    for (name, spec) in schema.iter() {
        let name: String = name
            .extract()
            .map_err(|_| schema_error("column names are strings".into()))?;
        if reserved.contains(&name.as_str()) {
            return Err(schema_error(format!(
                "column name '{name}' is taken: {why}"
            )));
        }
        let (dtype, shape): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            spec.extract().map_err(|_| {
                schema_error(format!(
                    "column '{name}': expected (dtype, shape), got {spec}"
                ))
            })?;
        let np = py.import("numpy")?;
        let dtype_text: String = np
            .call_method1("dtype", (dtype,))
            .and_then(|d| d.getattr("name"))
            .and_then(|n| n.extract())
            .map_err(|e| schema_error(format!("column '{name}': dtype: {e}")))?;
        let dtype = dtype_from(&dtype_text).ok_or_else(|| {
            schema_error(format!(
                "column '{name}': dtype {dtype_text} is not one of uint8, int32, int64, float32, float64, bool"
            ))
        })?;
        let shape: Vec<usize> = if let Ok(n) = shape.extract::<usize>() {
            vec![n]
        } else {
            shape.extract().map_err(|_| {
                schema_error(format!(
                    "column '{name}': shape is a tuple of sizes, got {shape}"
                ))
            })?
        };
        let elements = Schema::elements(&shape).filter(|&e| e > 0).ok_or_else(|| {
            schema_error(format!(
                "column '{name}': shape {shape:?} holds no element, or too many"
            ))
        })?;
        core = core.column(&name, dtype, shape.clone());
        columns.push(Column {
            name,
            dtype,
            shape,
            elements,
        });
    }
    Ok((columns, core))
}
