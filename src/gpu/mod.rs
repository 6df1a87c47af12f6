//! Batch sampling on a tch device (cargo feature `tch`, docs/gpu.md): for learners
//! whose networks live on a GPU and who want a sampled batch without a host round trip.
//!
//! Two buffers:
//! - [`DeviceBuffer`]: everything on the device. The K-ary sum tree is one tensor per level
//!   (`sums[0]` is the root, `sums[depth]` the leaves), with a companion tree of positive
//!   minima (`mins`, `+inf` where a subtree holds no positive priority) for the global
//!   importance-weight normalization; the columns are `[capacity, *dims]` tensors; a
//!   generation per slot makes keys. Sampling descends the tree level-synchronously for the
//!   whole batch: gather the K children of the B current nodes (`[B, K]`), take their
//!   cumulative sums, count the positive children whose prefix is passed, step down. There is
//!   no per-item host loop and no host round trip except one 8-byte read of the total (to
//!   refuse an empty tree, as the CPU buffers do). Updates write the leaves and recompute only
//!   the touched parents, level by level (`B x K` work per level, not the whole tree); a level
//!   with no more nodes than B (the top of the tree) is recomputed whole, which is cheaper
//!   than gathering B rows of it.
//! - [`HybridBuffer`]: the CPU concurrent buffer's tree chooses the indices; the columns live
//!   on the device; per batch only the B indices travel to the device. It is `Sync`: learner
//!   threads sample and update through shared references while inserts take `&mut self`
//!   (`examples/rust_trainer` puts it behind an `RwLock`).
//!
//! Precision ([`Precision`]): nodes are f64 by default, as in the CPU tree, so the sampling
//! distribution matches it to f64 rounding. With f32 nodes each level's prefix sums carry a
//! relative error of about `K * 2^-24`: an item's probability is off by that much relative
//! to the total (for N = 2^22 a priority below about 1e-7 of the total may be under- or
//! over-sampled by a visible factor), and a priority below f32's range becomes 0 (never
//! sampled). Stored priorities are exponentiated (`^alpha`) in f64 before the cast.
//!
//! Robustness (as the CPU tree): the descent clamps each target into `[0, total)` and, at
//! every level, picks the child among the *positive* ones only (the `(c+1)`-th positive child
//! after `c` passed prefixes), so a zero-priority item or an index past the end is never
//! returned, whatever the rounding of the cumulative sums (a GPU scan does not add in a fixed
//! order). A child is positive when its exact minimum companion is finite (its subtree holds
//! a positive leaf), not when its sum is: a stale or drifted sum over an all-zero group
//! would otherwise be chosen and the descent end on padding.
//!
//! Errors: bad input is an [`Error`] that changes nothing, as on the CPU buffers: tensors
//! on another device or of another type or shape ([`Error::TensorMismatch`]), invalid
//! priorities, keys out of range or never made by the buffer (stale keys are dropped and
//! counted, not errors), and sizes the device cannot hold ([`Error::Allocation`]: a buffer
//! in `new`; in `sample`, a batch whose draws, descent or gathered rows do not fit, the
//! descent's working set being allocated once, fallibly, before it starts, as it is in
//! `find_prefix`). A failure of the device itself past those checks (a CUDA error inside
//! the descent, an out-of-memory in `insert_batch`'s or `update_priorities`' in-place
//! writes, which could not promise that nothing changed) still panics inside tch, whose
//! plain calls these are.
//!
//! Semantics follow [`crate::ReplayBuffer`] (keys with generations, stale updates dropped,
//! duplicate keys: last wins, alpha on the way in, beta on the weights, running-max or
//! live-max default priority), with two differences, both documented on the methods: keys
//! are tensors ([`DeviceKeys`]), and a batch insert's evicted items do not count for
//! [`DefaultPriority::LiveMax`](crate::DefaultPriority::LiveMax).
//!
//! ```no_run
//! use kary_replay::gpu::{DeviceBuffer, Precision};
//! use kary_replay::{Config, DType, SampleMode, Schema};
//! use tch::{Device, Kind, Tensor};
//!
//! let device = Device::cuda_if_available();
//! let schema = Schema::new().column("obs", DType::F32, 4);
//! let mut buffer = DeviceBuffer::new(Config::builder(1 << 20, schema).build()?, device, Precision::F64)?;
//! let obs = Tensor::rand([256, 4], (Kind::Float, device));
//! buffer.insert_batch(&[obs], None)?;
//! let batch = buffer.sample(64, 0.4, SampleMode::Stratified)?;
//! let td = batch.weights.abs() + 0.01; // |delta| + eps from your loss
//! let report = buffer.update_priorities(&batch.keys, &td)?;
//! assert_eq!(report.applied, 64);
//! # Ok::<(), kary_replay::Error>(())
//! ```

use tch::{Device, Kind, Tensor};

use crate::{Config, DType, Error, Key, Result, Schema};

mod device;
mod hybrid;
mod level_tree;

pub use device::DeviceBuffer;
pub use hybrid::{HybridBuffer, HybridSample};

/// The floating-point type of the device tree's nodes (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f64 nodes: the CPU tree's precision.
    #[default]
    F64,
    /// f32 nodes: half the memory and faster on consumer GPUs; see the module doc for the
    /// effect on the distribution.
    F32,
}

impl Precision {
    fn kind(self) -> Kind {
        match self {
            Precision::F64 => Kind::Double,
            Precision::F32 => Kind::Float,
        }
    }
}

/// The tensor element type of a column type.
pub fn kind_of(dtype: DType) -> Kind {
    match dtype {
        DType::U8 => Kind::Uint8,
        DType::I32 => Kind::Int,
        DType::I64 => Kind::Int64,
        DType::F32 => Kind::Float,
        DType::F64 => Kind::Double,
        DType::Bool => Kind::Bool,
    }
}

/// Keys of a [`DeviceBuffer`] as two `i64` tensors of equal length on its device.
#[derive(Debug)]
pub struct DeviceKeys {
    /// Slot indices.
    pub indices: Tensor,
    /// Generations (insertion numbers) of the items the keys name.
    pub generations: Tensor,
}

impl DeviceKeys {
    /// The keys on the host.
    pub fn to_host(&self) -> Vec<Key> {
        let indices =
            Vec::<i64>::try_from(&self.indices.to_device(Device::Cpu)).unwrap_or_default();
        let generations =
            Vec::<i64>::try_from(&self.generations.to_device(Device::Cpu)).unwrap_or_default();
        indices
            .iter()
            .zip(&generations)
            .map(|(&i, &g)| Key {
                index: i as usize,
                generation: g as u64,
            })
            .collect()
    }

    /// Host keys moved to `device`.
    pub fn from_host(keys: &[Key], device: Device) -> DeviceKeys {
        let indices: Vec<i64> = keys.iter().map(|k| k.index as i64).collect();
        let generations: Vec<i64> = keys.iter().map(|k| k.generation as i64).collect();
        DeviceKeys {
            indices: Tensor::from_slice(&indices).to_device(device),
            generations: Tensor::from_slice(&generations).to_device(device),
        }
    }
}

/// A batch sampled on the device: every tensor is on the buffer's device.
#[derive(Debug)]
pub struct DeviceSample {
    /// Keys for [`DeviceBuffer::update_priorities`].
    pub keys: DeviceKeys,
    /// Normalized importance weights in `(0, 1]` (`[B]`, node precision).
    pub weights: Tensor,
    /// Sampling probabilities `p_i / total` (`[B]`, node precision).
    pub probabilities: Tensor,
    /// Stored priorities (`[B]`, node precision).
    pub priorities: Tensor,
    /// The gathered columns, in schema order, each `[B, *dims]` (the column's per-item
    /// dimensions: `[B, 4]`, `[B, 84, 84]`).
    pub columns: Vec<Tensor>,
}

/// Checks that `t` lives on `device`, has element type `kind` and the shape `shape`.
fn check_tensor(what: &str, t: &Tensor, device: Device, kind: Kind, shape: &[i64]) -> Result<()> {
    if t.device() != device {
        return Err(tensor_error(format!(
            "{what} is on {:?}, the buffer on {device:?}",
            t.device()
        )));
    }
    if t.kind() != kind {
        return Err(tensor_error(format!(
            "{what} has element type {:?}, expected {kind:?}",
            t.kind()
        )));
    }
    if t.size() != shape {
        return Err(tensor_error(format!(
            "{what} has shape {:?}, expected {shape:?}",
            t.size()
        )));
    }
    Ok(())
}

/// Checks a batch of column tensors against `schema` (one per column, `[M, *dims]`, or
/// flat `[M, shape]`, or `[M]` for shape 1; the column's element type, on `device`) and
/// returns M.
fn check_columns(schema: &Schema, columns: &[Tensor], device: Device) -> Result<i64> {
    if columns.len() != schema.columns().len() {
        return Err(Error::ColumnCount {
            expected: schema.columns().len(),
            got: columns.len(),
        });
    }
    let m = columns
        .first()
        .map_or(0, |c| c.size().first().copied().unwrap_or(0));
    for (col, spec) in columns.iter().zip(schema.columns()) {
        let dims = rows_shape(m, spec);
        let shape = if spec.shape == 1 && col.dim() == 1 {
            vec![m]
        } else if col.dim() == 2 && dims.len() != 2 {
            vec![m, spec.shape as i64]
        } else {
            dims
        };
        let what = format!("column {:?}", spec.name);
        check_tensor(&what, col, device, kind_of(spec.dtype), &shape)?;
    }
    Ok(m)
}

/// The shape of a column's storage: `[capacity, *dims]`.
fn column_shape(capacity: usize, spec: &crate::storage::ColumnSpec) -> Vec<usize> {
    std::iter::once(capacity)
        .chain(spec.dims.iter().copied())
        .collect()
}

/// The shape of `rows` items of the column `spec`: `[rows, *dims]`.
fn rows_shape(rows: i64, spec: &crate::storage::ColumnSpec) -> Vec<i64> {
    std::iter::once(rows)
        .chain(spec.dims.iter().map(|&d| d as i64))
        .collect()
}

/// A tensor of `shape`, every element `value`, on `device`; [`Error::Allocation`] where the
/// device cannot hold it (tch's plain constructors panic on libtorch's allocation failure,
/// and a buffer's construction must return an error instead) and [`Error::SizeOverflow`]
/// where a dimension does not fit in i64.
fn filled(shape: &[usize], value: f64, kind: Kind, device: Device) -> Result<Tensor> {
    let dims = shape
        .iter()
        .map(|&d| i64::try_from(d))
        .collect::<std::result::Result<Vec<i64>, _>>()
        .map_err(|_| Error::SizeOverflow {
            what: "a device tensor's dimension",
        })?;
    // `f_zeros`, then the fill: a failing `f_full` panics anyway (tch 0.26 drops its fill
    // scalar with libtorch's error still set, and that drop unwraps it).
    let bytes = shape.iter().fold(kind.elt_size_in_bytes(), |bytes, &d| {
        bytes.saturating_mul(d)
    });
    let mut tensor =
        Tensor::f_zeros(&dims[..], (kind, device)).map_err(|_| Error::Allocation { bytes })?;
    if value != 0.0 {
        let _ = tensor.fill_(value);
    }
    Ok(tensor)
}

/// A tensor's elements on the host, row-major, as bytes (a save's copy of a column).
fn host_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let numel = t.numel();
    let bytes = numel.saturating_mul(t.kind().elt_size_in_bytes());
    let host = (t.f_to_device(Device::Cpu))
        .and_then(|h| h.f_contiguous())
        .map_err(|_| Error::Allocation { bytes })?;
    let mut out = Vec::new();
    crate::mem::reserve(&mut out, bytes)?;
    out.resize(bytes, 0);
    host.f_copy_data_u8(&mut out, numel)
        .map_err(|e| tensor_error(format!("copying a tensor to the host: {e}")))?;
    Ok(out)
}

/// A `[shape]` tensor of `kind` on `device` holding `bytes` (row-major; a load's column).
fn tensor_from_bytes(bytes: &[u8], shape: &[usize], kind: Kind, device: Device) -> Result<Tensor> {
    let overflow = || Error::SizeOverflow {
        what: "a device tensor's dimension",
    };
    let dims = (shape.iter().map(|&d| i64::try_from(d)))
        .collect::<std::result::Result<Vec<i64>, _>>()
        .map_err(|_| overflow())?;
    let expected = (shape.iter()).try_fold(kind.elt_size_in_bytes(), |b, &d| b.checked_mul(d));
    if expected != Some(bytes.len()) {
        return Err(tensor_error(format!(
            "{} bytes for a {kind:?} tensor of shape {shape:?}",
            bytes.len()
        )));
    }
    // `f_from_data_size` copies `bytes` (its length checked above) into a new host tensor.
    Tensor::f_from_data_size(bytes, &dims, kind)
        .and_then(|t| t.f_to_device(device))
        .map_err(|_| Error::Allocation { bytes: bytes.len() })
}

/// Column `c` of the checkpoint `plan` opened, as a `[capacity, *dims]` tensor on `device`
/// (read and checked on the host, then moved).
fn column_from(plan: &crate::checkpoint::Plan, c: usize, device: Device) -> Result<Tensor> {
    let capacity = plan.config.capacity();
    let spec = &plan.config.schema().columns()[c];
    let n = (capacity.checked_mul(spec.shape))
        .and_then(|n| n.checked_mul(spec.dtype.size()))
        .ok_or(Error::SizeOverflow {
            what: "a column's bytes",
        })?;
    let mut bytes = Vec::new();
    crate::mem::reserve(&mut bytes, n)?;
    bytes.resize(n, 0);
    plan.read_column(c, &mut bytes)?;
    tensor_from_bytes(
        &bytes,
        &column_shape(capacity, spec),
        kind_of(spec.dtype),
        device,
    )
}

/// The rows of `source` at `indices` (`index_select` on dimension 0), with a result the
/// device cannot hold an [`Error::Allocation`] of its size rather than a panic inside tch.
/// The indices are the buffer's own (a descent's, or the CPU tree's), always in range, so
/// a failure here is the output's allocation.
fn gathered(source: &Tensor, indices: &Tensor) -> Result<Tensor> {
    source.f_index_select(0, indices).map_err(|_| {
        let size = source.size();
        let row: usize = (size.iter().skip(1))
            .fold(source.kind().elt_size_in_bytes(), |bytes, &d| {
                bytes.saturating_mul(usize::try_from(d).unwrap_or(usize::MAX))
            });
        let rows = indices.size().first().copied().unwrap_or(0);
        Error::Allocation {
            bytes: row.saturating_mul(usize::try_from(rows).unwrap_or(usize::MAX)),
        }
    })
}

fn tensor_error(message: String) -> Error {
    Error::TensorMismatch(message)
}

/// The device buffers hold no rate limiter (their inserts take `&mut self`) and retire
/// nothing as they draw: a configuration with a limit or `max_times_sampled` is refused
/// rather than silently not held.
pub(crate) fn refuse_unheld(config: &Config) -> Result<()> {
    if let Some(k) = config.max_times_sampled() {
        return Err(Error::InvalidParameter {
            name: "max_times_sampled",
            value: f64::from(k),
            reason: "the device buffers do not retire items as they draw them: use a \
                     concurrent CPU buffer",
        });
    }
    match config.rate_limit() {
        None => Ok(()),
        Some(_) => Err(Error::InvalidParameter {
            name: "rate_limit",
            value: 1.0,
            reason: "the device buffers hold no rate limiter: use a standalone \
                     kary_replay::rate::RateLimiter beside them, or a concurrent CPU buffer",
        }),
    }
}
