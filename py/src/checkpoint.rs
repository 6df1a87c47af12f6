//! Checkpoints: the user map as Python values, `verify`, `latest` and `numbered`, and the
//! manifest of a sharded checkpoint (written and read by the crate, for `kary_replay.ray`).

use crate::errors::{argument_error, py_err};
use crate::schema::{columns_of, dtype_name, SHAPES_KEY};
use std::path::PathBuf;

use kary_replay::checkpoint::{self, UserData, UserValue};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

pub(crate) fn user_value(v: &Bound<'_, PyAny>) -> PyResult<UserValue> {
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(UserValue::Bool(b.is_true()));
    }
    if let Ok(i) = v.extract::<u64>() {
        return Ok(UserValue::U64(i));
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(UserValue::I64(i));
    }
    if let Ok(f) = v.cast::<pyo3::types::PyFloat>() {
        return Ok(UserValue::F64(f.value()));
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(UserValue::Str(s));
    }
    if let Ok(b) = v.cast::<pyo3::types::PyBytes>() {
        return Ok(UserValue::Bytes(b.as_bytes().to_vec()));
    }
    Err(argument_error(format!(
        "user values are int, float, bool, str or bytes, got {}",
        v.get_type()
    )))
}

/// The user map a `user=` dict gives (string keys; int, float, bool, str or bytes values).
pub(crate) fn user_data(user: Option<&Bound<'_, PyDict>>) -> PyResult<UserData> {
    let mut data = UserData::new();
    if let Some(user) = user {
        for (k, v) in user.iter() {
            let k: String = k
                .extract()
                .map_err(|_| argument_error("user keys are strings".into()))?;
            data.insert(k, user_value(&v)?);
        }
    }
    Ok(data)
}

/// Save options: the user map and, when `keep_last > 0`, the rotation.
pub(crate) fn save_options(
    user: Option<&Bound<'_, PyDict>>,
    keep_last: usize,
) -> PyResult<checkpoint::SaveOptions> {
    let mut options = checkpoint::SaveOptions::new().with_user_data(user_data(user)?);
    if keep_last > 0 {
        options = options.keep_last(keep_last);
    }
    Ok(options)
}

pub(crate) fn user_dict<'py>(py: Python<'py>, user: &UserData) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in user {
        match v {
            UserValue::U64(x) => d.set_item(k, x)?,
            UserValue::I64(x) => d.set_item(k, x)?,
            UserValue::F64(x) => d.set_item(k, x)?,
            UserValue::Bool(x) => d.set_item(k, x)?,
            UserValue::Str(x) => d.set_item(k, x)?,
            UserValue::Bytes(x) => d.set_item(k, pyo3::types::PyBytes::new(py, x))?,
        }
    }
    Ok(d)
}

/// Read and check the checkpoint at `dir` whole, as a load does: a dict of what it holds.
#[pyfunction]
pub(crate) fn verify<'py>(py: Python<'py>, dir: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let r = py
        .detach(|| checkpoint::verify(&dir))
        .map_err(|e| py_err(py, e))?;
    let d = PyDict::new(py);
    d.set_item("capacity", r.config.capacity())?;
    d.set_item("len", r.len)?;
    d.set_item("inserted", r.inserted)?;
    d.set_item("cursor", r.cursor)?;
    d.set_item("running_max", r.running_max)?;
    d.set_item("total_priority", r.total)?;
    d.set_item("positive", r.positive)?;
    d.set_item("min_positive", r.min_positive)?;
    d.set_item("max_priority", r.max)?;
    d.set_item("crate_version", r.crate_version)?;
    let mut user = r.user;
    let shapes = match user.remove(SHAPES_KEY) {
        Some(UserValue::Str(s)) => Some(s),
        _ => None,
    };
    let columns = PyDict::new(py);
    for c in columns_of(r.config.schema(), shapes.as_deref()) {
        columns.set_item(&c.name, (dtype_name(c.dtype), PyTuple::new(py, &c.shape)?))?;
    }
    d.set_item("columns", columns)?;
    d.set_item("user", user_dict(py, &user)?)?;
    Ok(d)
}

/// The newest committed numbered checkpoint (`ckpt-<step>`) in `parent`, or None.
#[pyfunction]
pub(crate) fn latest(py: Python<'_>, parent: PathBuf) -> PyResult<Option<PathBuf>> {
    checkpoint::latest(&parent).map_err(|e| py_err(py, e))
}

/// `parent/ckpt-<step>` (the step zero-padded so that names sort by step).
#[pyfunction]
pub(crate) fn numbered(parent: PathBuf, step: u64) -> PathBuf {
    checkpoint::numbered(parent, step)
}

/// Write a sharded checkpoint's `manifest.json` (the JSON text `manifest`) and then its
/// `COMMIT` into `dir`, whose shards are saved already; each fsynced, then the directory.
#[pyfunction]
pub(crate) fn _write_sharded_manifest(
    py: Python<'_>,
    dir: PathBuf,
    manifest: &str,
) -> PyResult<()> {
    let manifest: checkpoint::ShardedManifest = serde_json::from_str(manifest)
        .map_err(|e| argument_error(format!("a sharded manifest: {e}")))?;
    py.detach(|| checkpoint::write_sharded_manifest(&dir, &manifest))
        .map_err(|e| py_err(py, e))
}

/// The JSON text of the committed sharded checkpoint `dir`'s manifest (its `COMMIT` and
/// rules checked).
#[pyfunction]
pub(crate) fn _read_sharded_manifest(py: Python<'_>, dir: PathBuf) -> PyResult<String> {
    let manifest = py
        .detach(|| checkpoint::read_sharded_manifest(&dir))
        .map_err(|e| py_err(py, e))?;
    serde_json::to_string(&manifest).map_err(|e| argument_error(e.to_string()))
}
