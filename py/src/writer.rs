//! The staged writer.

use crate::errors::py_err;
use crate::input::{columns_from, Held};
use crate::keys::Keys;
use crate::schema::Column;
use std::sync::{Arc, Mutex};

use kary_replay::{ColumnSlice, ConcurrentBuffer, Writer};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A staged writer (`kary_replay.Writer` wraps it).
#[pyclass(frozen, module = "kary_replay._native")]
pub(crate) struct NativeWriter {
    pub(crate) writer: Mutex<Writer<Arc<dyn ConcurrentBuffer>>>,
    pub(crate) columns: Vec<Column>,
    pub(crate) keys: Keys,
}

#[pymethods]
impl NativeWriter {
    /// Stage one item; returns the keys of the items this push flushed (maybe none).
    #[pyo3(signature = (priority=None, **row))]
    pub(crate) fn push<'py>(
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
    pub(crate) fn flush<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
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
    pub(crate) fn staged(&self) -> usize {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .staged()
    }
}
