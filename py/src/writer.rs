//! The staged writer.

use crate::input::{columns_from, Held};
use crate::keys::Keys;
use crate::schema::Column;
use std::sync::{Arc, Mutex};

use crate::rate::waiting;
use kary_replay::{ColumnSlice, ConcurrentBuffer, Key, Wait, Writer};
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

impl NativeWriter {
    /// One attempt of a push (or, after a push that staged its item and then could not
    /// flush, of its flush) under `wait`; `pending` remembers that case between attempts.
    fn push_attempt(
        w: &mut Writer<Arc<dyn ConcurrentBuffer>>,
        slices: &[ColumnSlice<'_>],
        priority: Option<f64>,
        pending: &mut bool,
        wait: Wait,
    ) -> kary_replay::Result<Vec<Key>> {
        w.set_wait(wait);
        if *pending {
            return w.flush().map(<[Key]>::to_vec);
        }
        let before = w.staged();
        match w.push(slices, priority) {
            Ok(keys) => Ok(keys.to_vec()),
            Err(e) => {
                // Staged, then the flush was refused: only the flush is left to do.
                *pending = w.staged() > before;
                Err(e)
            }
        }
    }
}

#[pymethods]
impl NativeWriter {
    /// Stage one item; returns the keys of the items this push flushed (maybe none). Under
    /// a rate limit a flush waits (without the GIL, interruptible) as long as it takes.
    #[pyo3(signature = (priority=None, **row))]
    pub(crate) fn push<'py>(
        &self,
        py: Python<'py>,
        priority: Option<f64>,
        row: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let held = columns_from(py, &self.columns, row, None)?;
        let slices: Vec<ColumnSlice<'_>> = held.iter().map(Held::slice).collect();
        let mut pending = false;
        let keys = waiting(py, None, |wait| {
            let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            Self::push_attempt(&mut w, &slices, priority, &mut pending, wait)
        })?;
        Ok(PyArray1::from_vec(
            py,
            keys.iter().map(|k| self.keys.encode(k)).collect(),
        ))
    }

    /// Insert the staged items now; returns their keys (waiting as `push` does).
    pub(crate) fn flush<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let keys = waiting(py, None, |wait| {
            let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            w.set_wait(wait);
            w.flush().map(<[Key]>::to_vec)
        })?;
        Ok(PyArray1::from_vec(
            py,
            keys.iter().map(|k| self.keys.encode(k)).collect(),
        ))
    }

    /// Items staged and not yet inserted.
    pub(crate) fn staged(&self) -> usize {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .staged()
    }
}
