//! The shared buffer: `kary_replay.SharedReplayBuffer` subclasses it (beside the Python
//! `PrioritizedReplayBuffer`). It is the native [`Buffer`] over a `ShmBuffer`, whose every
//! call it inherits, plus the shared buffer's own: its name, unlink, participants and
//! recovery.

use std::sync::Arc;

use kary_replay::{ConcurrentBuffer, ShmBuffer};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::Buffer;
use crate::errors::py_err;
use crate::options::{buffer_config, BufferOptions};
use crate::schema::columns_of;

/// The native shared buffer (`kary_replay._native.SharedBuffer`).
#[pyclass(frozen, subclass, extends = Buffer, module = "kary_replay._native", name = "SharedBuffer")]
pub(crate) struct SharedBuffer {
    shm: Arc<ShmBuffer>,
}

impl SharedBuffer {
    /// The native buffer over `shm`, with this class's part.
    fn over(shm: ShmBuffer, columns: Vec<crate::schema::Column>) -> PyClassInitializer<Self> {
        let shm = Arc::new(shm);
        PyClassInitializer::from(Buffer::from_parts(shm.clone(), columns, "shared"))
            .add_subclass(SharedBuffer { shm })
    }
}

#[pymethods]
impl SharedBuffer {
    /// Create a shared buffer named `name` (None: an anonymous one), with the options of a
    /// flat buffer but `variant` and `shard`; or wrap `_from` (an attached one).
    #[new]
    #[pyo3(signature = (capacity, schema, name=None, *, alpha=0.6, fanout=8,
        weight_norm="global", default_priority="running_max", key_tag=None, rate_limit=None,
        max_insert=16, max_sample=256, _from=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        capacity: usize,
        schema: &Bound<'_, PyDict>,
        name: Option<String>,
        alpha: f64,
        fanout: usize,
        weight_norm: &str,
        default_priority: &str,
        key_tag: Option<u64>,
        rate_limit: Option<&Bound<'_, PyAny>>,
        max_insert: u64,
        max_sample: u64,
        _from: Option<&Bound<'_, SharedBuffer>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        if let Some(from) = _from {
            let base = from.as_super().get();
            let shm = Arc::clone(&from.get().shm);
            return Ok(PyClassInitializer::from(Buffer::from_parts(
                base.inner.clone(),
                base.columns.clone(),
                "shared",
            ))
            .add_subclass(SharedBuffer { shm }));
        }
        let (columns, config) = buffer_config(
            py,
            capacity,
            schema,
            &BufferOptions {
                alpha,
                fanout,
                weight_norm,
                default_priority,
                shard: None,
                key_tag,
                rate_limit,
                max_insert,
                max_sample,
            },
        )?;
        let shm = py
            .detach(|| match &name {
                Some(name) => ShmBuffer::create(name, config),
                None => ShmBuffer::create_anonymous(config),
            })
            .map_err(|e| py_err(py, e))?;
        Ok(SharedBuffer::over(shm, columns))
    }

    /// Attach to the shared buffer named `name` (`SharedReplayBuffer.attach`).
    #[staticmethod]
    fn _attach(py: Python<'_>, name: String) -> PyResult<Py<SharedBuffer>> {
        let shm = py
            .detach(|| ShmBuffer::attach(&name))
            .map_err(|e| py_err(py, e))?;
        let columns = columns_of(shm.config().schema(), None);
        Py::new(py, SharedBuffer::over(shm, columns))
    }

    /// The mapping's name (under /dev/shm).
    #[getter]
    fn name(&self) -> String {
        self.shm.name().to_string()
    }

    /// Remove the shared buffer's name.
    fn _unlink(&self, py: Python<'_>) -> PyResult<()> {
        self.shm.unlink().map_err(|e| py_err(py, e))
    }

    /// Recover dead participants now; returns how many.
    fn recover(&self, py: Python<'_>) -> PyResult<usize> {
        let shm = &self.shm;
        py.detach(|| shm.recover()).map_err(|e| py_err(py, e))
    }

    /// Participants recovered over the buffer's life.
    #[getter]
    fn recovered(&self) -> u64 {
        self.shm.recovered()
    }

    /// The live participants: (entry, pid, this handle) each.
    fn _participants(&self, py: Python<'_>) -> PyResult<Vec<(usize, u32, bool)>> {
        let parts = self.shm.participants().map_err(|e| py_err(py, e))?;
        Ok(parts
            .into_iter()
            .map(|p| (p.index, p.pid, p.this_handle))
            .collect())
    }
}
