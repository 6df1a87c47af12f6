//! The schema as Python sees it: each column's dtype name and numpy shape.

use kary_replay::{DType, Schema};

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
