//! `kary_replay._native`: the Python extension behind the `kary_replay` package (py/python).
//!
//! One frozen class over `Arc<dyn ConcurrentBuffer>`: every method takes `&self`, so Python
//! threads never meet a borrow error, and every call that does work runs with the GIL
//! released (`Python::detach`). Columns arrive as numpy arrays (checked against the schema
//! column by column; read-only and non-contiguous arrays are accepted, the latter copied
//! once) and leave as new, owned arrays, or go straight into the caller's arrays
//! (`sample_into`). Errors are the Python classes of `kary_replay.errors`.

mod buffer;
mod checkpoint;
mod coordinator;
mod errors;
mod input;
mod keys;
mod options;
mod output;
mod rate;
mod rng;
mod schema;
mod sequence;
mod shared;
mod sum_tree;
mod writer;

use pyo3::prelude::*;

use buffer::Buffer;
use checkpoint::{_read_sharded_manifest, _write_sharded_manifest, latest, numbered, verify};
use coordinator::Coordinator;
use rate::RateLimiter;
use rng::Rng;
use sequence::{sequence_priorities, NativeLane, NativeSequence};
use shared::{SharedBuffer, SharedSequence};
use sum_tree::{_sum_tree_from, SumTree};
use writer::NativeWriter;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Buffer>()?;
    m.add_class::<SharedBuffer>()?;
    m.add_class::<SharedSequence>()?;
    m.add_class::<Rng>()?;
    m.add_class::<NativeWriter>()?;
    m.add_class::<SumTree>()?;
    m.add_class::<Coordinator>()?;
    m.add_class::<RateLimiter>()?;
    m.add_class::<NativeSequence>()?;
    m.add_class::<NativeLane>()?;
    m.add_function(wrap_pyfunction!(sequence_priorities, m)?)?;
    m.add_function(wrap_pyfunction!(_sum_tree_from, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(latest, m)?)?;
    m.add_function(wrap_pyfunction!(numbered, m)?)?;
    m.add_function(wrap_pyfunction!(_write_sharded_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(_read_sharded_manifest, m)?)?;
    Ok(())
}
