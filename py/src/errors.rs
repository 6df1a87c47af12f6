//! Errors: the classes of `kary_replay.errors` (imported once, through PyO3's
//! `import_exception!`), with `retryable` and a checkpoint's `kind` set on the instance.

use kary_replay::Error;
use pyo3::prelude::*;

pyo3::import_exception!(kary_replay.errors, KaryReplayError);
pyo3::import_exception!(kary_replay.errors, InvalidArgumentError);
pyo3::import_exception!(kary_replay.errors, SchemaError);
pyo3::import_exception!(kary_replay.errors, InvalidPriorityError);
pyo3::import_exception!(kary_replay.errors, InvalidKeyError);
pyo3::import_exception!(kary_replay.errors, EmptyBufferError);
pyo3::import_exception!(kary_replay.errors, ContentionError);
pyo3::import_exception!(kary_replay.errors, CheckpointError);
pyo3::import_exception!(kary_replay.errors, AllocationError);
pyo3::import_exception!(kary_replay.errors, RateLimitedError);
pyo3::import_exception!(kary_replay.errors, RateLimitTimeoutError);
pyo3::import_exception!(kary_replay.errors, ClosedError);
pyo3::import_exception!(kary_replay.errors, SharedBufferError);

/// The `kary_replay.errors` class for `e`, with `retryable` set (and `kind` for a
/// checkpoint's).
pub(crate) fn py_err(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    let err = match &e {
        Error::InvalidPriority { .. } => InvalidPriorityError::new_err(message),
        Error::InvalidKey { .. } | Error::OutOfRange { .. } | Error::UnknownShard { .. } => {
            InvalidKeyError::new_err(message)
        }
        Error::ColumnCount { .. }
        | Error::ColumnType { .. }
        | Error::ColumnLength { .. }
        | Error::InvalidSchema(_) => SchemaError::new_err(message),
        Error::Empty | Error::ZeroTotalPriority => EmptyBufferError::new_err(message),
        Error::Contention { .. } => ContentionError::new_err(message),
        Error::Checkpoint { .. } => CheckpointError::new_err(message),
        Error::Shared { .. } => SharedBufferError::new_err(message),
        Error::Allocation { .. } | Error::SizeOverflow { .. } => AllocationError::new_err(message),
        Error::GenerationsExhausted { .. } => KaryReplayError::new_err(message),
        Error::RateLimited(_) => RateLimitedError::new_err(message),
        Error::Timeout { .. } => RateLimitTimeoutError::new_err(message),
        Error::Closed | Error::LaneClosed { .. } => ClosedError::new_err(message),
        _ => InvalidArgumentError::new_err(message),
    };
    let kind = match &e {
        Error::Checkpoint { kind, .. } => Some(format!("{kind:?}").to_lowercase()),
        _ => None,
    };
    with_attributes(py, err, e.is_retryable(), kind)
}

/// `err` with `retryable` (and `kind`, if given) set on its instance. Should the module not
/// import (a broken install), the import's own error is what the caller gets.
fn with_attributes(py: Python<'_>, err: PyErr, retryable: bool, kind: Option<String>) -> PyErr {
    let value = err.value(py);
    let set = value
        .setattr("retryable", retryable)
        .and_then(|()| match kind {
            Some(kind) => value.setattr("kind", kind),
            None => Ok(()),
        });
    match set {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// A `SchemaError`: a column missing, unknown, or of the wrong dtype or shape.
pub(crate) fn schema_error(message: String) -> PyErr {
    SchemaError::new_err(message)
}

/// An `InvalidArgumentError`: a parameter out of its range.
pub(crate) fn argument_error(message: String) -> PyErr {
    InvalidArgumentError::new_err(message)
}
