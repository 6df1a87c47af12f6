//! The shared buffers: `kary_replay.SharedReplayBuffer` subclasses [`SharedBuffer`] (beside
//! the Python `PrioritizedReplayBuffer`), the native [`Buffer`] over a `ShmBuffer`; and
//! `kary_replay.SharedSequenceReplayBuffer` subclasses [`SharedSequence`] (beside the Python
//! `SequenceReplayBuffer`), the native sequence buffer over a `ShmSequenceBuffer`. Each
//! inherits every call of its family and adds the mapping's own: its name, unlink,
//! participants and recovery (`mapping_methods!`, one text for both).

use std::sync::Arc;

use kary_replay::sequence::{SequenceRef, ShmSequenceBuffer};
use kary_replay::{ConcurrentBuffer, ShmBuffer};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::Buffer;
use crate::errors::py_err;
use crate::options::{buffer_config, BufferOptions};
use crate::schema::columns_of;
use crate::sequence::{sequence_config, NativeSequence, SequenceOptions};

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

/// The Python methods of a shared class whose `shm` field is its handle: its own
/// (`$own`, its constructor and attach) and the mapping's.
macro_rules! mapping_methods {
    ($ty:ident, { $($own:tt)* }) => {
        #[pymethods]
        impl $ty {
            $($own)*

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
    };
}

/// The native shared sequence buffer (`kary_replay._native.SharedSequenceBuffer`).
#[pyclass(
    frozen,
    subclass,
    extends = NativeSequence,
    module = "kary_replay._native",
    name = "SharedSequenceBuffer"
)]
pub(crate) struct SharedSequence {
    shm: Arc<ShmSequenceBuffer>,
}

impl SharedSequence {
    fn over(shm: Arc<ShmSequenceBuffer>) -> PyClassInitializer<Self> {
        PyClassInitializer::from(NativeSequence::from_buffer(SequenceRef::Shared(
            shm.clone(),
        )))
        .add_subclass(SharedSequence { shm })
    }
}

mapping_methods!(SharedBuffer, {
    /// Create a shared buffer named `name` (None: an anonymous one), with the options of a
    /// flat buffer but `variant` and `shard`; or wrap `_from` (an attached one).
    #[new]
    #[pyo3(signature = (capacity, schema, name=None, *, alpha=0.6, fanout=8,
        weight_norm="global", default_priority="running_max", key_tag=None, rate_limit=None,
        max_insert=16, max_sample=256, max_times_sampled=0, version_column=None, max_heap=false, _from=None))]
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
        max_times_sampled: u32,
        version_column: Option<&str>,
        max_heap: bool,
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
                max_times_sampled,
                version_column,
                max_heap,
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
});

mapping_methods!(SharedSequence, {
    /// Create a shared sequence buffer named `name` (None: an anonymous one), with the
    /// options of a sequence buffer; or wrap `_from` (an attached one).
    #[new]
    #[pyo3(signature = (lanes, steps_per_lane, schema, name=None, *, window=None, period=1,
        partial="keep", nstep=None, stack=None, padding="repeat", next_of=None, alpha=0.6,
        fanout=8, weight_norm="global", key_tag=None, rate_limit=None, max_insert=None,
        max_sample=256, _from=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        lanes: usize,
        steps_per_lane: usize,
        schema: &Bound<'_, PyDict>,
        name: Option<String>,
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
        _from: Option<&Bound<'_, SharedSequence>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        if let Some(from) = _from {
            return Ok(SharedSequence::over(Arc::clone(&from.get().shm)));
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
        let shm = py
            .detach(|| match &name {
                Some(name) => ShmSequenceBuffer::create(name, config),
                None => ShmSequenceBuffer::create_anonymous(config),
            })
            .map_err(|e| py_err(py, e))?;
        Ok(SharedSequence::over(Arc::new(shm)))
    }

    /// Attach to the shared sequence buffer named `name`
    /// (`SharedSequenceReplayBuffer.attach`).
    #[staticmethod]
    fn _attach(py: Python<'_>, name: String) -> PyResult<Py<SharedSequence>> {
        let shm = py
            .detach(|| ShmSequenceBuffer::attach(&name))
            .map_err(|e| py_err(py, e))?;
        Py::new(py, SharedSequence::over(Arc::new(shm)))
    }
});
