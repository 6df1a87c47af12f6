//! Errors: the classes of `kary_replay.errors`, with `retryable` and a checkpoint's `kind`.

use kary_replay::Error;
use pyo3::prelude::*;

/// The `kary_replay.errors` class for `e`, with `retryable` set.
pub(crate) fn py_err(py: Python<'_>, e: Error) -> PyErr {
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

pub(crate) fn checkpoint_kind(e: &Error) -> Option<String> {
    match e {
        Error::Checkpoint { kind, .. } => Some(format!("{kind:?}").to_lowercase()),
        _ => None,
    }
}

/// An instance of `kary_replay.errors.<class>(message)` as a `PyErr`.
pub(crate) fn raise(
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

pub(crate) fn schema_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, "SchemaError", message, false, None)
}

pub(crate) fn argument_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidArgumentError", message, false, None)
}
