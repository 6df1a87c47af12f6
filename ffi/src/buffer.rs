//! The buffer handle: creation and freeing, inserts, priority updates by key, the getters
//! (state, configuration, schema), `clear` and `rebuild`.

use std::ffi::{c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use kary_replay::storage::ColumnViews;
use kary_replay::{
    ColumnSlice, ConcurrentBuffer, Config, DType, DefaultPriority, Error, GlobalLockBuffer, Key,
    LockFreeBuffer, Schema, SplitLockBuffer, UpdateReport, Wait, WeightNormalization,
};

use crate::config::*;
use crate::status::*;

/// A sampled item's identity, for `kr_buffer_update_priorities`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct kr_key {
    /// Slot index.
    pub index: u64,
    /// The tag of the buffer that made the key (bits 48..63, `kr_config.key_tag`) and the
    /// item's insertion number (bits 0..48): the word a Python key is, the same for the key
    /// of the same item in every language. A key of another buffer is
    /// `KR_E_INVALID_KEY` unless the two share a tag.
    pub generation: u64,
}

/// Outcome of a priority update.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kr_update_report {
    /// Entries applied.
    pub applied: usize,
    /// Entries dropped because their slot was overwritten since the key was made.
    pub stale: usize,
}

/// An opaque buffer handle.
pub struct kr_buffer {
    /// Shared with the staged writers made from the handle (`kr_writer_new`), so that a
    /// writer keeps the buffer alive after `kr_buffer_free`.
    pub(crate) inner: Arc<dyn ConcurrentBuffer>,
    /// (dtype, shape) per column, for reading the caller's pointers.
    pub(crate) columns: Vec<(DType, usize)>,
    /// Column names and dtype codes, for `kr_buffer_column` (the names live as long as the
    /// handle, so a pointer to one can be handed out).
    column_names: Vec<CString>,
    column_codes: Vec<u32>,
    /// Each column's dimensions, for `kr_buffer_column`'s `dims`.
    column_dims: Vec<Vec<usize>>,
    /// The configuration it was made with, for `kr_buffer_config`.
    config: kr_config,
    /// The shared buffer's own handle (`kr_shm_*`), when it is one.
    pub(crate) shm: Option<Arc<kary_replay::ShmBuffer>>,
}

impl kr_buffer {
    /// A handle over a Rust buffer of variant `variant` (`KR_VARIANT_*`): its layout,
    /// names and configuration read from the buffer's own config.
    pub(crate) fn from_rust(
        inner: Arc<dyn ConcurrentBuffer>,
        variant: u32,
    ) -> Result<kr_buffer, Failure> {
        let c = inner.config();
        let specs = c.schema().columns();
        let column_names = specs
            .iter()
            .map(|s| CString::new(s.name.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Failure::Invalid("a column name holds a NUL byte".into()))?;
        let config = kr_config {
            capacity: c.capacity(),
            fanout: c.fanout().get(),
            variant,
            alpha: c.alpha(),
            initial_priority: c.initial_priority(),
            weight_normalization: match c.weight_normalization() {
                WeightNormalization::Global => KR_WEIGHTS_GLOBAL,
                WeightNormalization::Batch => KR_WEIGHTS_BATCH,
            },
            default_priority: match c.default_priority() {
                DefaultPriority::RunningMax => KR_DEFAULT_PRIORITY_RUNNING_MAX,
                DefaultPriority::LiveMax => KR_DEFAULT_PRIORITY_LIVE_MAX,
            },
            key_tag: u32::from(c.key_tag()),
            max_times_sampled: c.max_times_sampled().unwrap_or(0),
            max_heap: u32::from(c.max_heap()),
            // The CString's bytes stay where they are when it moves into the handle.
            version_column: c
                .version_column()
                .map_or(std::ptr::null(), |i| column_names[i].as_ptr()),
            ..with_rate_limit(kr_config_default(), c.rate_limit())
        };
        Ok(kr_buffer {
            columns: specs.iter().map(|s| (s.dtype, s.shape)).collect(),
            column_names,
            column_codes: specs.iter().map(|s| dtype_code(s.dtype)).collect(),
            column_dims: specs.iter().map(|s| s.dims.clone()).collect(),
            config,
            inner,
            shm: None,
        })
    }

    /// The Rust buffer behind the handle, for a Rust program that shares one buffer with C
    /// code (and for comparing the two APIs on the same buffer: `benches/ffi.rs`).
    pub fn rust(&self) -> &dyn ConcurrentBuffer {
        &*self.inner
    }
}

/// The caller's column pointers as slices of `items` items each.
///
/// # Safety
/// `columns` is NULL or points to `n_columns` pointers, each NULL or to `items x shape`
/// readable elements of its column's dtype.
pub(crate) unsafe fn column_slices<'a>(
    schema: &[(DType, usize)],
    columns: *const *const c_void,
    n_columns: usize,
    items: usize,
) -> Result<ColumnViews<'a>, Failure> {
    if n_columns != schema.len() {
        return Err(Error::ColumnCount {
            expected: schema.len(),
            got: n_columns,
        }
        .into());
    }
    // SAFETY: forwarded from the caller.
    let pointers = unsafe { slice(columns, n_columns, "columns") }?;
    // On the stack for up to `ColumnViews::STACK` columns: a single insert or a writer's
    // push does not allocate.
    let mut out = ColumnViews::new();
    for (&p, &(dtype, shape)) in pointers.iter().zip(schema) {
        // SAFETY: forwarded from the caller.
        out.push(unsafe { column_slice(p, dtype, shape, items) }?);
    }
    Ok(out)
}

/// The caller's pointer `p` as a slice of `items` items of a column of `dtype` and `shape`.
///
/// # Safety
/// `p` is NULL or points to `items x shape` readable elements of `dtype`.
unsafe fn column_slice<'a>(
    p: *const c_void,
    dtype: DType,
    shape: usize,
    items: usize,
) -> Result<ColumnSlice<'a>, Failure> {
    let len = items
        .checked_mul(shape)
        .ok_or_else(|| Failure::Invalid("items x shape overflows".into()))?;
    addressable(len, dtype.size(), "a column")?;
    if len > 0 {
        // Checked here, so that `from_raw_parts` gets what it asks for.
        if p.is_null() {
            return Err(Failure::Null("a column pointer"));
        }
        aligned(p, dtype.size(), "a column pointer")?;
    }
    if dtype == DType::Bool {
        // Bytes first: a byte other than 0 or 1 is not a bool.
        // SAFETY: forwarded from the caller: `len` readable bytes.
        let bytes: &[u8] = unsafe { slice(p.cast(), len, "a column pointer") }?;
        if bytes.iter().any(|&b| b > 1) {
            return Err(Failure::Invalid(
                "a bool column holds a byte other than 0 or 1".into(),
            ));
        }
    }
    // SAFETY: non-null and aligned when `len > 0` (checked above); `len` readable elements
    // of the dtype (caller); bool bytes are 0 or 1 (checked above).
    Ok(unsafe { ColumnSlice::from_raw_parts(dtype, p.cast(), len) })
}

/// The schema of the caller's `n_columns` columns at `columns` (names checked, dims read).
///
/// # Safety
/// `columns` is NULL or points to `n_columns` columns whose names are NULL or NUL-terminated
/// strings and whose `dims` are NULL or hold `ndim` sizes.
pub(crate) unsafe fn schema_from(
    columns: *const kr_column,
    n_columns: usize,
) -> Result<Schema, Failure> {
    // SAFETY: forwarded from the caller.
    let specs = unsafe { slice(columns, n_columns, "columns") }?;
    let mut schema = Schema::new();
    for spec in specs {
        if spec.name.is_null() {
            return Err(Failure::Null("a column name"));
        }
        // SAFETY: non-null and NUL-terminated (caller).
        let name = unsafe { CStr::from_ptr(spec.name) }
            .to_str()
            .map_err(|_| Failure::Invalid("a column name is not UTF-8".into()))?;
        let dims = match spec.ndim {
            0 => vec![spec.shape],
            n => {
                // SAFETY: forwarded from the caller (`dims` holds `ndim` sizes).
                let dims = unsafe { slice(spec.dims, n, "a column's dims") }?.to_vec();
                if spec.shape != 0 && Schema::elements(&dims) != Some(spec.shape) {
                    return Err(Error::InvalidSchema(format!(
                        "column {name:?}: shape {} is not the product of its dims {dims:?}",
                        spec.shape
                    ))
                    .into());
                }
                dims
            }
        };
        schema = schema.column(name, dtype(spec.dtype)?, dims);
    }
    Ok(schema)
}

/// Create a buffer for `config` and the `n_columns` columns at `columns`; on success
/// `*out` is the new handle (free it with `kr_buffer_free`).
///
/// Thread safety: any thread.
///
/// # Safety
/// `config` and `out` are NULL or valid; `columns` is NULL or points to `n_columns`
/// columns whose names are NULL or NUL-terminated strings and whose `dims` are NULL or
/// hold `ndim` sizes.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_new(
    config: *const kr_config,
    columns: *const kr_column,
    n_columns: usize,
    out: *mut *mut kr_buffer,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let config = unsafe { get(config, "config") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        // SAFETY: forwarded from the caller.
        let built = unsafe { config_from(config, columns, n_columns) }?;
        let inner: Arc<dyn ConcurrentBuffer> = match config.variant {
            KR_VARIANT_GLOBAL_LOCK => Arc::new(GlobalLockBuffer::new(built)?),
            KR_VARIANT_SPLIT_LOCK => Arc::new(SplitLockBuffer::new(built)?),
            KR_VARIANT_LOCK_FREE => Arc::new(LockFreeBuffer::new(built)?),
            KR_VARIANT_SHARED => {
                return Err(Failure::Invalid(
                    "a shared buffer is made by kr_shm_create (its name, or none)".into(),
                ))
            }
            other => return Err(Failure::Invalid(format!("unknown variant {other}"))),
        };
        let handle = Box::into_raw(Box::new(kr_buffer::from_rust(inner, config.variant)?));
        *out = handle;
        Ok(())
    })
}

/// The Rust configuration that `config` and the `n_columns` columns describe.
///
/// # Safety
/// As for `kr_buffer_new`'s `columns`.
pub(crate) unsafe fn config_from(
    config: &kr_config,
    columns: *const kr_column,
    n_columns: usize,
) -> Result<Config, Failure> {
    {
        // SAFETY: forwarded from the caller.
        let schema = unsafe { schema_from(columns, n_columns) }?;
        let weight_normalization = weight_normalization_from(config.weight_normalization)?;
        let default_priority = match config.default_priority {
            KR_DEFAULT_PRIORITY_RUNNING_MAX => DefaultPriority::RunningMax,
            KR_DEFAULT_PRIORITY_LIVE_MAX => DefaultPriority::LiveMax,
            other => {
                return Err(Failure::Invalid(format!(
                    "unknown default priority {other}"
                )))
            }
        };
        let mut builder = Config::builder(config.capacity, schema);
        if let Some((limit, batches)) = rate_limit_from(config)? {
            builder = builder.rate_limit(limit, batches);
        }
        if !config.version_column.is_null() {
            // SAFETY: a non-NULL `version_column` is a NUL-terminated string (the caller's
            // contract, `kr_config`'s doc).
            let name = unsafe { CStr::from_ptr(config.version_column) }
                .to_str()
                .map_err(|_| Failure::Invalid("version_column is not UTF-8".into()))?;
            builder = builder.version_column(name);
        }
        let built = builder
            .fanout(config.fanout)
            .alpha(config.alpha)
            .initial_priority(config.initial_priority)
            .weight_normalization(weight_normalization)
            .default_priority(default_priority)
            .key_tag(u16::try_from(config.key_tag).unwrap_or(u16::MAX))
            .max_times_sampled(config.max_times_sampled)
            .max_heap(match config.max_heap {
                0 => false,
                1 => true,
                other => return Err(Failure::Invalid(format!("max_heap is 0 or 1, got {other}"))),
            })
            .build()?;
        Ok(built)
    }
}

/// Free a buffer (NULL: nothing happens).
///
/// Thread safety: no other thread may use the buffer during or after the call.
///
/// # Safety
/// `buffer` is NULL or a handle from `kr_buffer_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_free(buffer: *mut kr_buffer) {
    if !buffer.is_null() {
        // A panic in a destructor must not unwind into C either.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: a live handle from `kr_buffer_new` (caller), freed once.
            drop(unsafe { Box::from_raw(buffer) })
        }));
    }
}

/// The tag of the buffer that made `key` (`key.generation >> 48`; `kr_config.key_tag`).
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_key_tag(key: kr_key) -> u64 {
    key.generation >> Key::INSERTION_BITS
}

/// The insertion number of the item `key` names, modulo 2^48 (the low 48 bits of
/// `key.generation`; the first item a buffer ever holds is 0).
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_key_insertion(key: kr_key) -> u64 {
    key.generation & ((1 << Key::INSERTION_BITS) - 1)
}

pub(crate) fn to_c_key(k: &Key) -> kr_key {
    kr_key {
        index: k.index as u64,
        generation: k.generation,
    }
}

/// Insert one item: `columns` holds one pointer per schema column, each to one item's
/// elements; `priority` is NULL (default priority) or points to a raw priority. On success
/// `*out_key` (if not NULL) is the item's key.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or a live handle; `columns` is NULL or points to `n_columns` pointers
/// to the elements; `priority` and `out_key` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_insert(
    buffer: *const kr_buffer,
    columns: *const *const c_void,
    n_columns: usize,
    priority: *const f64,
    out_key: *mut kr_key,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let cols = unsafe { column_slices(&buffer.columns, columns, n_columns, 1) }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let priority = unsafe { optional(priority, "priority") }?.copied();
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out_key = unsafe { optional_mut(out_key, "out_key") }?;
        let key = buffer.inner.insert(&cols, priority)?;
        if let Some(out) = out_key {
            *out = to_c_key(&key);
        }
        Ok(())
    })
}

/// Insert `items` items: `columns` holds one pointer per schema column, each to
/// `items x shape` elements, item-major; `priorities` is NULL (default priorities) or
/// points to `items` raw priorities. On success `out_keys` (if not NULL) receives `items`
/// keys.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// As `kr_buffer_insert`, with `items` items everywhere.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_insert_batch(
    buffer: *const kr_buffer,
    columns: *const *const c_void,
    n_columns: usize,
    items: usize,
    priorities: *const f64,
    out_keys: *mut kr_key,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        insert_batch_waiting(
            buffer,
            columns,
            n_columns,
            items,
            priorities,
            out_keys,
            || Ok(Wait::Block),
        )
    }
}

/// `kr_buffer_insert_batch` with the rate limiter's wait from `wait` (checked after the
/// handle, before the rest).
///
/// # Safety
/// As `kr_buffer_insert_batch`.
pub(crate) unsafe fn insert_batch_waiting(
    buffer: *const kr_buffer,
    columns: *const *const c_void,
    n_columns: usize,
    items: usize,
    priorities: *const f64,
    out_keys: *mut kr_key,
    wait: impl FnOnce() -> Result<Wait, Failure>,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        let wait = wait()?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let cols = unsafe { column_slices(&buffer.columns, columns, n_columns, items) }?;
        let priorities = if priorities.is_null() {
            None
        } else {
            // SAFETY: forwarded from the caller (see the function's `# Safety`).
            Some(unsafe { slice(priorities, items, "priorities") }?)
        };
        // Checked before the insert, which cannot be undone.
        aligned(out_keys, std::mem::align_of::<kr_key>(), "out_keys")?;
        let mut keys = Vec::new();
        (buffer.inner).insert_batch_waiting(&cols, priorities, &mut keys, wait)?;
        if !out_keys.is_null() {
            for (i, k) in keys.iter().enumerate() {
                // SAFETY: room for `items` keys (caller).
                unsafe { *out_keys.add(i) = to_c_key(k) };
            }
        }
        Ok(())
    })
}

/// Set the raw priorities of the `n` items named by `keys` (alpha is applied); stale keys
/// are dropped and counted, a key given twice ends with its last entry. On success
/// `*out_report` (if not NULL) says how many were applied and how many were stale.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `keys` and `priorities` are NULL or hold `n` values;
/// `out_report` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_update_priorities(
    buffer: *const kr_buffer,
    keys: *const kr_key,
    priorities: *const f64,
    n: usize,
    out_report: *mut kr_update_report,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let keys = unsafe { slice(keys, n, "keys") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let priorities = unsafe { slice(priorities, n, "priorities") }?;
        let keys = rust_keys(keys)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out_report = unsafe { optional_mut(out_report, "out_report") }?;
        let report = buffer.inner.update_priorities(&keys, priorities)?;
        write_report(out_report, report);
        Ok(())
    })
}

/// `report` into the caller's `out_report`, if given.
pub(crate) fn write_report(out_report: Option<&mut kr_update_report>, report: UpdateReport) {
    if let Some(out) = out_report {
        *out = kr_update_report {
            applied: report.applied,
            stale: report.stale,
        };
    }
}

/// Delete the `n` items named by `keys`: each current one's priority set to 0 and its key
/// made stale for good; no sample returns it once the call returns, and `kr_buffer_len`
/// no longer counts it. Its slot stays in the FIFO ring: the insert that reaches it fills
/// it without evicting anything. A stale key (or one given twice) is counted in
/// `out_report->stale`; a key the buffer never handed out is `KR_E_INVALID_KEY` (or
/// `KR_E_OUT_OF_RANGE`), and then nothing is deleted. On success `*out_report` (if not
/// NULL) says how many were deleted (`applied`) and how many were stale.
///
/// Thread safety: any number of threads at once, beside inserts, samples and updates.
///
/// # Safety
/// `buffer` is NULL or live; `keys` is NULL or holds `n` keys; `out_report` is NULL or
/// valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_delete(
    buffer: *const kr_buffer,
    keys: *const kr_key,
    n: usize,
    out_report: *mut kr_update_report,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let keys = unsafe { slice(keys, n, "keys") }?;
        let keys = rust_keys(keys)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out_report = unsafe { optional_mut(out_report, "out_report") }?;
        let report = buffer.inner.delete(&keys)?;
        write_report(out_report, report);
        Ok(())
    })
}

/// Retire every item whose policy version (`kr_config.version_column`) is below `version`
/// and raise the buffer's floor to `version` (it never goes down). Once the call returns no
/// item below the floor is stored, counted by `kr_buffer_len` or sampled, and an insert that
/// holds one is refused (`KR_E_INVALID_ARGUMENT`, nothing inserted); a write already past
/// that check when the floor rose retires its own item as it publishes it (its key is
/// returned, stale at once). Retired items' keys are stale. `*out_retired` (if not NULL)
/// gets the number of items this call retired. A buffer whose items carry no version is
/// `KR_E_INVALID_ARGUMENT`. `kr_buffer_clear` keeps the floor; checkpoints keep it. Each slot
/// is taken as a writer takes it, one at a time: O(capacity).
///
/// Thread safety: any number of threads at once, beside inserts, samples and updates.
///
/// # Safety
/// `buffer` is NULL or live; `out_retired` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_retire_before(
    buffer: *const kr_buffer,
    version: i64,
    out_retired: *mut u64,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out_retired = unsafe { optional_mut(out_retired, "out_retired") }?;
        let retired = buffer.inner.retire_before(version)?;
        if let Some(out) = out_retired {
            *out = retired;
        }
        Ok(())
    })
}

/// The buffer's policy-version floor (`kr_buffer_retire_before`) into `*out_floor`:
/// `INT64_MIN` until the first call. A buffer whose items carry no version is
/// `KR_E_INVALID_ARGUMENT`, and `*out_floor` is left as it was.
///
/// # Safety
/// `buffer` is NULL or live; `out_floor` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_version_floor(
    buffer: *const kr_buffer,
    out_floor: *mut i64,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let out_floor = unsafe { required_mut(out_floor, "out_floor") }?;
        let floor = buffer.inner.version_floor().ok_or_else(|| {
            Failure::Invalid(
                "the buffer's items carry no policy version (kr_config.version_column)".into(),
            )
        })?;
        *out_floor = floor;
        Ok(())
    })
}

/// Overwrite some columns of the `n` items named by `keys`, in place (a relabelled goal, a
/// recomputed return): `columns[j]` holds `n x shape` elements of the column at position
/// `column_indices[j]` (item-major, one item per key), for `j < n_columns`. Each current
/// item is taken as a writer takes a slot (after the copies of it in flight), its rows
/// written, and released with its key and priority unchanged: no sample sees a half-written
/// row. A stale key is counted in `out_report->stale` and its rows skipped. A key the
/// buffer never handed out (`KR_E_INVALID_KEY`, `KR_E_OUT_OF_RANGE`), a position past the
/// last column (`KR_E_LENGTH_MISMATCH`, as a wrong count of columns anywhere), a column
/// named twice (`KR_E_INVALID_ARGUMENT`) or a
/// NULL pointer (`KR_E_NULL`) writes nothing. A shared buffer (`kr_shm_*`) refuses the call
/// (`KR_E_INVALID_ARGUMENT`): its readers check a copy by the slot's epoch, which a write
/// back keeps.
///
/// Thread safety: any number of threads at once, beside inserts, samples and updates.
///
/// # Safety
/// `buffer` is NULL or live; `keys` is NULL or holds `n` keys; `column_indices` and
/// `columns` are NULL or hold `n_columns` values, each column pointer NULL or to `n x shape`
/// readable elements of its column's dtype; `out_report` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_write_back(
    buffer: *const kr_buffer,
    keys: *const kr_key,
    n: usize,
    column_indices: *const usize,
    columns: *const *const c_void,
    n_columns: usize,
    out_report: *mut kr_update_report,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let keys = unsafe { slice(keys, n, "keys") }?;
        let keys = rust_keys(keys)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let indices = unsafe { slice(column_indices, n_columns, "column_indices") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let pointers = unsafe { slice(columns, n_columns, "columns") }?;
        let mut named = Vec::with_capacity(n_columns);
        for (&c, &p) in indices.iter().zip(pointers) {
            let &(dtype, shape) = buffer.columns.get(c).ok_or(Error::ColumnCount {
                expected: buffer.columns.len(),
                got: c.saturating_add(1),
            })?;
            // SAFETY: forwarded from the caller (see the function's `# Safety`).
            named.push((c, unsafe { column_slice(p, dtype, shape, n) }?));
        }
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out_report = unsafe { optional_mut(out_report, "out_report") }?;
        let report = buffer.inner.write_back(&keys, &named)?;
        write_report(out_report, report);
        Ok(())
    })
}

/// The stored (alpha-exponentiated) priorities of the `n` items named by `keys` into
/// `out_priorities` (`n` doubles): NaN for a key whose item was overwritten since. On
/// success `*out_stale` (if not NULL) is how many were. A key the buffer never handed out is
/// `KR_E_INVALID_KEY` (or `KR_E_OUT_OF_RANGE`), and then nothing is written. Allocates
/// nothing once the thread's scratch is warm.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `keys` and `out_priorities` are NULL or hold `n` values;
/// `out_stale` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_priorities(
    buffer: *const kr_buffer,
    keys: *const kr_key,
    n: usize,
    out_priorities: *mut f64,
    out_stale: *mut usize,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        read_by_key(buffer, keys, n, out_priorities, out_stale, |b, k, out| {
            b.priorities_of(k, out)
        })
    }
}

/// The raw priorities (before the exponent: as given, or for a default priority the raw
/// maximum it stood for) of the `n` items named by `keys` into `out_priorities`, as
/// `kr_buffer_priorities` reads the stored ones: NaN for a key whose item was overwritten
/// since, `*out_stale` (if not NULL) how many were, nothing written on a bad key.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// As `kr_buffer_priorities`.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_raw_priorities(
    buffer: *const kr_buffer,
    keys: *const kr_key,
    n: usize,
    out_priorities: *mut f64,
    out_stale: *mut usize,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        read_by_key(buffer, keys, n, out_priorities, out_stale, |b, k, out| {
            b.raw_priorities_of(k, out)
        })
    }
}

/// The body of `kr_buffer_priorities` and `kr_buffer_raw_priorities`: `read` of the `n`
/// keys into `out_priorities`, through `write_priorities`.
///
/// # Safety
/// As `kr_buffer_priorities`.
unsafe fn read_by_key(
    buffer: *const kr_buffer,
    keys: *const kr_key,
    n: usize,
    out_priorities: *mut f64,
    out_stale: *mut usize,
    read: impl FnOnce(&dyn ConcurrentBuffer, &[Key], &mut Vec<f64>) -> kary_replay::Result<usize>,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let keys = unsafe { slice(keys, n, "keys") }?;
        let keys = rust_keys(keys)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        unsafe {
            write_priorities(n, out_priorities, out_stale, |out| {
                read(&*buffer.inner, &keys, out)
            })
        }
    })
}

/// Change the priority exponent at run time: every item's stored priority becomes its raw
/// priority raised to `alpha`, and the tree is summed again, bit for bit as a buffer built
/// with `alpha` over the same raw priorities. Inserts, updates and deletions pause
/// meanwhile, as for a save; samplers go on. Priorities are still checked against the bound
/// of `kr_config.alpha`; under a larger alpha a power past `1e250` is stored as `1e250`. A
/// NaN, infinite or negative alpha is `KR_E_INVALID_ARGUMENT` and changes nothing.
///
/// Thread safety: any number of threads at once, beside inserts, samples and updates.
///
/// # Safety
/// `buffer` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_set_alpha(buffer: *const kr_buffer, alpha: f64) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        buffer.inner.set_alpha(alpha)?;
        Ok(())
    })
}

/// The priority exponent now into `*out_alpha`: `kr_config.alpha` until a
/// `kr_buffer_set_alpha`.
///
/// # Safety
/// `buffer` is NULL or live; `out_alpha` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_alpha(
    buffer: *const kr_buffer,
    out_alpha: *mut f64,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let out_alpha = unsafe { required_mut(out_alpha, "out_alpha") }?;
        *out_alpha = buffer.inner.alpha();
        Ok(())
    })
}

std::thread_local! {
    /// Each thread's priorities read by key, reused (no allocation once warm).
    static PRIORITIES: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The body of `kr_buffer_priorities` and `kr_seq_priorities` once the keys are read:
/// checks `out_priorities` and `out_stale`, runs `read` into the thread's scratch, copies.
///
/// # Safety
/// `out_priorities` is NULL or holds `n` doubles; `out_stale` is NULL or valid.
pub(crate) unsafe fn write_priorities(
    n: usize,
    out_priorities: *mut f64,
    out_stale: *mut usize,
    read: impl FnOnce(&mut Vec<f64>) -> kary_replay::Result<usize>,
) -> Result<(), Failure> {
    if n > 0 && out_priorities.is_null() {
        return Err(Failure::Null("out_priorities"));
    }
    aligned(
        out_priorities,
        std::mem::align_of::<f64>(),
        "out_priorities",
    )?;
    addressable(n, std::mem::size_of::<f64>(), "out_priorities")?;
    // SAFETY: forwarded from the caller.
    let out_stale = unsafe { optional_mut(out_stale, "out_stale") }?;
    PRIORITIES.with(|scratch| {
        let mut values = scratch.borrow_mut();
        let stale = read(&mut values)?;
        if n > 0 {
            // SAFETY: non-null, aligned, room for `n` doubles (the caller); `values` holds
            // one per key, `n` of them.
            unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out_priorities, n) };
        }
        if let Some(out) = out_stale {
            *out = stale;
        }
        Ok(())
    })
}

/// The caller's keys as Rust keys: the same memory where `Key` has `kr_key`'s layout.
#[cfg(target_pointer_width = "64")]
pub(crate) fn rust_keys(keys: &[kr_key]) -> Result<std::borrow::Cow<'_, [Key]>, Failure> {
    const _: () = assert!(
        std::mem::size_of::<Key>() == std::mem::size_of::<kr_key>()
            && std::mem::align_of::<Key>() == std::mem::align_of::<kr_key>()
            && std::mem::offset_of!(Key, index) == std::mem::offset_of!(kr_key, index)
            && std::mem::offset_of!(Key, generation) == std::mem::offset_of!(kr_key, generation)
    );
    // SAFETY: both are `repr(C)` structs of two 8-byte integers at the same offsets (checked
    // above at compile time), and every bit pattern is valid for both.
    Ok(std::borrow::Cow::Borrowed(unsafe {
        std::slice::from_raw_parts(keys.as_ptr().cast::<Key>(), keys.len())
    }))
}

/// The caller's keys as Rust keys (converted: `usize` is narrower than `kr_key.index`).
#[cfg(not(target_pointer_width = "64"))]
pub(crate) fn rust_keys(keys: &[kr_key]) -> Result<std::borrow::Cow<'_, [Key]>, Failure> {
    keys.iter()
        .map(|k| {
            Ok(Key {
                index: usize::try_from(k.index).map_err(|_| {
                    Failure::Invalid(format!("key index {} does not fit in size_t", k.index))
                })?,
                generation: k.generation,
            })
        })
        .collect::<Result<Vec<_>, Failure>>()
        .map(std::borrow::Cow::Owned)
}

/// Write the stored (alpha-exponentiated) priority of slot `index` to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_priority(
    buffer: *const kr_buffer,
    index: usize,
    out: *mut f64,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out = unsafe { required_mut(out, "out") }?;
        *out = buffer.inner.priority(index)?;
        Ok(())
    })
}

/// Write the number of items stored to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_len(buffer: *const kr_buffer, out: *mut usize) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_into(buffer, out, |b| b.len()) }
}

/// Write the capacity (items held before FIFO eviction) to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_capacity(
    buffer: *const kr_buffer,
    out: *mut usize,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_into(buffer, out, |b| b.capacity()) }
}

/// Write the sum of the stored priorities to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_total_priority(
    buffer: *const kr_buffer,
    out: *mut f64,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_into(buffer, out, |b| b.total_priority()) }
}

/// Write the number of generations handed out (inserts begun) to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_inserted(buffer: *const kr_buffer, out: *mut u64) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_into(buffer, out, |b| b.inserted()) }
}

/// Write the bytes the buffer holds (tree, columns, slot state) to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_memory_bytes(
    buffer: *const kr_buffer,
    out: *mut usize,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_into(buffer, out, |b| b.memory_bytes()) }
}

/// The key of the item now in slot `index`: on success `*out_present` says whether the
/// slot holds an item and, when it does, `*out_key` is its key (left alone otherwise).
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out_key` and `out_present` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_key(
    buffer: *const kr_buffer,
    index: usize,
    out_key: *mut kr_key,
    out_present: *mut bool,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let out_key = unsafe { required_mut(out_key, "out_key") }?;
        // SAFETY: forwarded from the caller.
        let out_present = unsafe { required_mut(out_present, "out_present") }?;
        let key = buffer.inner.key(index)?;
        if let Some(k) = &key {
            *out_key = to_c_key(k);
        }
        *out_present = key.is_some();
        Ok(())
    })
}

/// How far the tree's stored sums are from the sums of their children (see
/// `kr_buffer_consistency`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kr_consistency {
    /// Largest `|stored - sum of children|` over the internal nodes.
    pub max_abs_error: f64,
    /// Largest relative error over the internal nodes with a nonzero sum.
    pub max_rel_error: f64,
    /// Whether every internal node equals its children's sum bit for bit.
    pub exact: bool,
    /// Whether the companion minimum (and maximum) nodes are exact (they always should be).
    pub extrema_exact: bool,
}

/// Check the whole tree (O(N): for tests and monitoring, not the hot path) and write the
/// result to `*out`. With writers active the answer describes a moment in between.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_consistency(
    buffer: *const kr_buffer,
    out: *mut kr_consistency,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        read_into(buffer, out, |b| {
            let c = b.consistency();
            kr_consistency {
                max_abs_error: c.max_abs_error,
                max_rel_error: c.max_rel_error,
                exact: c.exact,
                extrema_exact: c.extrema_exact,
            }
        })
    }
}

/// Remove every item: keys made before stay stale for good, generations keep counting
/// (`kr_buffer_inserted` does not go back), the running maximum priority restarts from the
/// configuration's initial priority.
///
/// Thread safety: any number of threads at once, other calls included. Slot by slot it
/// waits, as an insert would, for a write of that slot in flight and that slot's copies;
/// an insert made after it passed a slot stays. `kr_buffer_len` is exact when no insert ran
/// beside it.
///
/// # Safety
/// `buffer` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_clear(buffer: *const kr_buffer) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { get(buffer, "buffer") }?.inner.clear();
        Ok(())
    })
}

/// Recompute every sum in the tree from the stored priorities. Writes already keep the
/// sums exact (see `kr_buffer_consistency`): a repair, never needed in normal use.
///
/// Thread safety: any number of threads at once; the result is exact once no other thread
/// writes.
///
/// # Safety
/// `buffer` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_rebuild(buffer: *const kr_buffer) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { get(buffer, "buffer") }?.inner.rebuild();
        Ok(())
    })
}

/// Write the configuration the buffer was made with to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_config(
    buffer: *const kr_buffer,
    out: *mut kr_config,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(buffer, "buffer", out, |b| b.config) }
}

/// Write the number of columns in the buffer's schema to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_n_columns(
    buffer: *const kr_buffer,
    out: *mut usize,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(buffer, "buffer", out, |b| b.columns.len()) }
}

/// Write column `index` of the buffer's schema to `*out`: its dtype (`KR_DTYPE_*`), shape
/// and name. The name is the buffer's own NUL-terminated copy, valid until `kr_buffer_free`
/// (do not free it). `KR_E_OUT_OF_RANGE` when `index` is not below `kr_buffer_n_columns`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_column(
    buffer: *const kr_buffer,
    index: usize,
    out: *mut kr_column,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let (Some(name), Some(&(_, shape))) =
            (buffer.column_names.get(index), buffer.columns.get(index))
        else {
            return Err(Error::OutOfRange {
                index,
                capacity: buffer.columns.len(),
            }
            .into());
        };
        *out = c_column(
            name,
            buffer.column_codes[index],
            shape,
            &buffer.column_dims[index],
        );
        Ok(())
    })
}

/// The shape of the getters that read a handle itself: check both pointers, read, write
/// `*out`.
///
/// # Safety
/// `handle` is NULL or live; `out` is NULL or valid for a write.
pub(crate) unsafe fn read_handle_into<H, T>(
    handle: *const H,
    what: &'static str,
    out: *mut T,
    read: impl FnOnce(&H) -> T,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let handle = unsafe { get(handle, what) }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = read(handle);
        Ok(())
    })
}

/// The `kr_column` of a handle's column: its own name and dimensions, valid as long as the
/// handle.
pub(crate) fn c_column(name: &CString, dtype: u32, shape: usize, dims: &[usize]) -> kr_column {
    kr_column {
        name: name.as_ptr(),
        dtype,
        shape,
        ndim: dims.len(),
        dims: if dims.is_empty() {
            std::ptr::null()
        } else {
            dims.as_ptr()
        },
    }
}

/// The shape of the read-only getters: check both pointers, read, write `*out`.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid for a write.
pub(crate) unsafe fn read_into<T>(
    buffer: *const kr_buffer,
    out: *mut T,
    read: impl FnOnce(&dyn ConcurrentBuffer) -> T,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(buffer, "buffer", out, |b| read(&*b.inner)) }
}
