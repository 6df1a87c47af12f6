//! The C ABI of kary-replay (DESIGN.md section 8): the concurrent buffers, with the variant
//! and fanout chosen at creation, for C and C++ callers.
//!
//! Rules (repeated in the header's banner):
//! - Every fallible function returns a `kr_status`: `KR_OK` (0) or a negative error code.
//!   Out-parameters come last and are written only on success; a failed call changes
//!   nothing. `kr_status_str` describes a code; `kr_last_error_message` gives the detail of
//!   the calling thread's last failure.
//! - No panic crosses the boundary: one helper (`boundary`) checks, runs the call inside
//!   `catch_unwind`, and turns a panic into `KR_E_PANIC`.
//! - Values that select behaviour (variant, dtype, mode, ...) are integers checked on entry.
//! - Ownership: `kr_buffer_new` / `kr_buffer_free` and `kr_rng_new` / `kr_rng_free` are the
//!   only allocations handed to C; everything else is written into the caller's memory.
//! - Threads: a `kr_buffer` may be used by any number of threads at once (except
//!   `kr_buffer_free`); a `kr_rng` by one thread at a time.
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use kary_replay::{
    ColumnSlice, ColumnSliceMut, ConcurrentBuffer, Config, DType, DefaultPriority, Error,
    GlobalLockBuffer, Key, LockFreeBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer,
    WeightNormalization,
};
use rand::{rngs::SmallRng, SeedableRng};

/// A status code: `KR_OK` (0) or one of the negative `KR_E_*` codes.
pub type kr_status = i32;
/// Success.
pub const KR_OK: kr_status = 0;
/// A required pointer argument was NULL.
pub const KR_E_NULL: kr_status = -1;
/// An argument is out of its range (unknown variant, fanout, dtype, mode; capacity; beta;
/// alpha; misaligned column pointer; a bool column byte other than 0 or 1).
pub const KR_E_INVALID_ARGUMENT: kr_status = -2;
/// A priority is NaN, infinite, negative or too large.
pub const KR_E_INVALID_PRIORITY: kr_status = -3;
/// A count does not match (columns, items, priorities, elements of a column).
pub const KR_E_LENGTH_MISMATCH: kr_status = -4;
/// An index is outside the buffer.
pub const KR_E_OUT_OF_RANGE: kr_status = -5;
/// A key that this buffer never made.
pub const KR_E_INVALID_KEY: kr_status = -6;
/// Nothing to sample: the buffer is empty.
pub const KR_E_EMPTY: kr_status = -7;
/// Nothing to sample: every stored priority is 0.
pub const KR_E_ZERO_TOTAL_PRIORITY: kr_status = -8;
/// Sampling gave up on slots being written; retry.
pub const KR_E_CONTENTION: kr_status = -9;
/// Memory could not be allocated.
pub const KR_E_ALLOCATION: kr_status = -10;
/// The column schema is unusable (no columns, empty or duplicate names, zero shapes).
pub const KR_E_INVALID_SCHEMA: kr_status = -11;
/// A slot was overwritten the maximum number of times.
pub const KR_E_EXHAUSTED: kr_status = -12;
/// A panic inside the library (a bug): caught, reported, nothing changed that is known.
pub const KR_E_PANIC: kr_status = -13;
/// A column was given with another element type than the schema's (the C++ wrapper, which
/// knows the types of what it is given; the C ABI itself takes untyped column pointers).
pub const KR_E_DTYPE_MISMATCH: kr_status = -14;

/// `kr_config.variant`: one mutex around everything.
pub const KR_VARIANT_GLOBAL_LOCK: u32 = 0;
/// `kr_config.variant`: global tree lock + last-level lock, lazy writing.
pub const KR_VARIANT_SPLIT_LOCK: u32 = 1;
/// `kr_config.variant`: lock-free tree.
pub const KR_VARIANT_LOCK_FREE: u32 = 2;

/// `kr_column.dtype`: `uint8_t`.
pub const KR_DTYPE_U8: u32 = 0;
/// `kr_column.dtype`: `int32_t`.
pub const KR_DTYPE_I32: u32 = 1;
/// `kr_column.dtype`: `int64_t`.
pub const KR_DTYPE_I64: u32 = 2;
/// `kr_column.dtype`: `float`.
pub const KR_DTYPE_F32: u32 = 3;
/// `kr_column.dtype`: `double`.
pub const KR_DTYPE_F64: u32 = 4;
/// `kr_column.dtype`: `bool` as one byte, 0 or 1.
pub const KR_DTYPE_BOOL: u32 = 5;

/// Sampling mode: B independent draws.
pub const KR_SAMPLE_INDEPENDENT: u32 = 0;
/// Sampling mode: one draw in each of B equal strata.
pub const KR_SAMPLE_STRATIFIED: u32 = 1;

/// `kr_config.weight_normalization`: by the largest possible weight.
pub const KR_WEIGHTS_GLOBAL: u32 = 0;
/// `kr_config.weight_normalization`: by the largest weight in the batch.
pub const KR_WEIGHTS_BATCH: u32 = 1;

/// `kr_config.default_priority`: the largest priority ever stored.
pub const KR_DEFAULT_PRIORITY_RUNNING_MAX: u32 = 0;
/// `kr_config.default_priority`: the largest priority stored now.
pub const KR_DEFAULT_PRIORITY_LIVE_MAX: u32 = 1;

/// Buffer configuration; start from `kr_config_default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_config {
    /// Items held before FIFO eviction (>= 1).
    pub capacity: usize,
    /// Tree fanout: 2, 4, 8, 16, 32 or 64.
    pub fanout: usize,
    /// `KR_VARIANT_*`.
    pub variant: u32,
    /// Priority exponent (finite, >= 0).
    pub alpha: f64,
    /// Default priority before any is seen (finite, > 0).
    pub initial_priority: f64,
    /// `KR_WEIGHTS_*`.
    pub weight_normalization: u32,
    /// `KR_DEFAULT_PRIORITY_*`.
    pub default_priority: u32,
}

/// One column of the schema.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_column {
    /// NUL-terminated UTF-8 name, unique and non-empty (copied).
    pub name: *const c_char,
    /// `KR_DTYPE_*`.
    pub dtype: u32,
    /// Elements per item (>= 1).
    pub shape: usize,
}

/// A sampled item's identity, for `kr_buffer_update_priorities`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct kr_key {
    /// Slot index.
    pub index: u64,
    /// Insertion number of the item in the slot.
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

/// Where `kr_buffer_sample` writes a batch of B items. Every pointer may be NULL (that
/// output is skipped) except that `columns`, when not NULL, must hold one pointer per
/// schema column, each to room for `B x shape` elements of the column's dtype: the rows are
/// copied there straight from the buffer, once (a tensor's `data_ptr()` will do).
/// `weights_f32` and `indices_i64` are the same values as `weights` and `indices` in the
/// types a LibTorch learner uses (float32 weights, int64 indices), so that no cast kernel
/// is needed; any combination may be asked for.
///
/// Zero-initialize it (`kr_sample_out out = {0};`, or `{}` in C++) and set what you want,
/// so that fields added later stay NULL.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_sample_out {
    /// B keys.
    pub keys: *mut kr_key,
    /// B slot indices.
    pub indices: *mut u64,
    /// B importance weights in (0, 1].
    pub weights: *mut f64,
    /// B sampling probabilities.
    pub probabilities: *mut f64,
    /// B stored priorities.
    pub priorities: *mut f64,
    /// One destination per column, or NULL for no columns.
    pub columns: *const *mut c_void,
    /// B importance weights as `float`.
    pub weights_f32: *mut f32,
    /// B slot indices as `int64_t`.
    pub indices_i64: *mut i64,
}

impl Default for kr_sample_out {
    /// Every output NULL (skipped).
    fn default() -> kr_sample_out {
        kr_sample_out {
            keys: std::ptr::null_mut(),
            indices: std::ptr::null_mut(),
            weights: std::ptr::null_mut(),
            probabilities: std::ptr::null_mut(),
            priorities: std::ptr::null_mut(),
            columns: std::ptr::null(),
            weights_f32: std::ptr::null_mut(),
            indices_i64: std::ptr::null_mut(),
        }
    }
}

/// An opaque buffer handle.
pub struct kr_buffer {
    inner: Box<dyn ConcurrentBuffer>,
    /// (dtype, shape) per column, for reading the caller's pointers.
    columns: Vec<(DType, usize)>,
    /// Column names and dtype codes, for `kr_buffer_column` (the names live as long as the
    /// handle, so a pointer to one can be handed out).
    column_names: Vec<CString>,
    column_codes: Vec<u32>,
    /// The configuration it was made with, for `kr_buffer_config`.
    config: kr_config,
}

impl kr_buffer {
    /// The Rust buffer behind the handle, for a Rust program that shares one buffer with C
    /// code (and for comparing the two APIs on the same buffer: `benches/ffi.rs`).
    pub fn rust(&self) -> &dyn ConcurrentBuffer {
        &*self.inner
    }
}

/// An opaque random number generator state; each sampling thread owns one.
pub struct kr_rng {
    rng: SmallRng,
}

/// Why a call failed (becomes a status and the thread's last-error message).
enum Failure {
    Null(&'static str),
    Invalid(String),
    Core(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Core(e)
    }
}

impl Failure {
    fn status(&self) -> kr_status {
        match self {
            Failure::Null(_) => KR_E_NULL,
            Failure::Invalid(_) => KR_E_INVALID_ARGUMENT,
            Failure::Core(e) => match e {
                Error::InvalidPriority { .. } => KR_E_INVALID_PRIORITY,
                Error::InvalidCapacity(_)
                | Error::UnsupportedFanout(_)
                | Error::InvalidParameter { .. }
                | Error::ZeroBatch => KR_E_INVALID_ARGUMENT,
                Error::InvalidSchema(_) => KR_E_INVALID_SCHEMA,
                Error::Empty => KR_E_EMPTY,
                Error::ZeroTotalPriority => KR_E_ZERO_TOTAL_PRIORITY,
                Error::ColumnType { .. } => KR_E_DTYPE_MISMATCH,
                Error::ColumnCount { .. }
                | Error::ColumnLength { .. }
                | Error::LengthMismatch { .. } => KR_E_LENGTH_MISMATCH,
                Error::OutOfRange { .. } => KR_E_OUT_OF_RANGE,
                Error::InvalidKey { .. } => KR_E_INVALID_KEY,
                Error::Contention { .. } => KR_E_CONTENTION,
                Error::GenerationsExhausted { .. } => KR_E_EXHAUSTED,
                Error::Allocation { .. } => KR_E_ALLOCATION,
                Error::SizeOverflow { .. } => KR_E_INVALID_ARGUMENT,
                _ => KR_E_INVALID_ARGUMENT,
            },
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Null(what) => format!("{what} is NULL"),
            Failure::Invalid(m) => m.clone(),
            Failure::Core(e) => e.to_string(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// Each sampling thread's batch, reused so that a sample allocates nothing once warm
    /// (it keeps the largest batch's memory until the thread exits).
    static SCRATCH: RefCell<SampleBatch> = RefCell::new(SampleBatch::default());
}

fn set_last_error(message: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// The one boundary helper: runs `f` inside `catch_unwind`, records the failure message,
/// and turns the outcome into a status.
fn boundary(f: impl FnOnce() -> Result<(), Failure>) -> kr_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => KR_OK,
        Ok(Err(failure)) => {
            set_last_error(failure.message());
            failure.status()
        }
        Err(_) => {
            set_last_error(
                "a panic inside kary-replay was caught (a bug: please report it)".into(),
            );
            KR_E_PANIC
        }
    }
}

/// `&T` from a pointer, or `Failure::Null` naming it.
///
/// # Safety
/// `p` is NULL or valid for reads of a `T` for `'a`.
unsafe fn get<'a, T>(p: *const T, what: &'static str) -> Result<&'a T, Failure> {
    // SAFETY: the caller promises NULL or a valid pointer.
    unsafe { p.as_ref() }.ok_or(Failure::Null(what))
}

/// A slice of `len` `T`s at `p` (any pointer when `len == 0`).
///
/// # Safety
/// When `len > 0`, `p` is NULL or valid for reads of `len` `T`s for `'a`.
unsafe fn slice<'a, T>(p: *const T, len: usize, what: &'static str) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::Null(what));
    }
    aligned(p, std::mem::align_of::<T>(), what)?;
    // SAFETY: non-null, aligned, and the caller promises `len` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `KR_E_INVALID_ARGUMENT` unless `p` is a multiple of `align` (inputs and outputs alike).
fn aligned<T>(p: *const T, align: usize, what: &'static str) -> Result<(), Failure> {
    if p as usize % align != 0 {
        return Err(Failure::Invalid(format!(
            "{what} is not aligned for its type"
        )));
    }
    Ok(())
}

fn dtype(code: u32) -> Result<DType, Failure> {
    Ok(match code {
        KR_DTYPE_U8 => DType::U8,
        KR_DTYPE_I32 => DType::I32,
        KR_DTYPE_I64 => DType::I64,
        KR_DTYPE_F32 => DType::F32,
        KR_DTYPE_F64 => DType::F64,
        KR_DTYPE_BOOL => DType::Bool,
        other => return Err(Failure::Invalid(format!("unknown dtype {other}"))),
    })
}

/// The caller's column pointers as slices of `items` items each.
///
/// # Safety
/// `columns` is NULL or points to `n_columns` pointers, each NULL or to `items x shape`
/// readable elements of its column's dtype.
unsafe fn column_slices<'a>(
    buffer: &kr_buffer,
    columns: *const *const c_void,
    n_columns: usize,
    items: usize,
) -> Result<Vec<ColumnSlice<'a>>, Failure> {
    if n_columns != buffer.columns.len() {
        return Err(Error::ColumnCount {
            expected: buffer.columns.len(),
            got: n_columns,
        }
        .into());
    }
    // SAFETY: forwarded from the caller.
    let pointers = unsafe { slice(columns, n_columns, "columns") }?;
    let mut out = Vec::with_capacity(n_columns);
    for (&p, &(dtype, shape)) in pointers.iter().zip(&buffer.columns) {
        let len = items
            .checked_mul(shape)
            .ok_or_else(|| Failure::Invalid("items x shape overflows".into()))?;
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
        // SAFETY: non-null and aligned when `len > 0` (checked above); `len` readable
        // elements of the dtype (caller); bool bytes are 0 or 1 (checked above).
        out.push(unsafe { ColumnSlice::from_raw_parts(dtype, p.cast(), len) });
    }
    Ok(out)
}

/// The library's version, a static NUL-terminated string ("0.1.0").
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A static NUL-terminated description of `status` ("unknown status" for other values).
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_status_str(status: kr_status) -> *const c_char {
    let s: &'static str = match status {
        KR_OK => "ok\0",
        KR_E_NULL => "a required pointer was NULL\0",
        KR_E_INVALID_ARGUMENT => "an argument is out of range\0",
        KR_E_INVALID_PRIORITY => "invalid priority (NaN, infinite, negative or too large)\0",
        KR_E_LENGTH_MISMATCH => "a count or length does not match\0",
        KR_E_OUT_OF_RANGE => "index out of range\0",
        KR_E_INVALID_KEY => "invalid key (not made by this buffer)\0",
        KR_E_EMPTY => "the buffer is empty\0",
        KR_E_ZERO_TOTAL_PRIORITY => "every stored priority is 0\0",
        KR_E_CONTENTION => "sampling gave up on slots being written; retry\0",
        KR_E_ALLOCATION => "memory allocation failed\0",
        KR_E_INVALID_SCHEMA => "invalid column schema\0",
        KR_E_EXHAUSTED => "a slot was overwritten the maximum number of times\0",
        KR_E_PANIC => "internal panic (a bug)\0",
        KR_E_DTYPE_MISMATCH => "a column's element type does not match the schema\0",
        _ => "unknown status\0",
    };
    s.as_ptr().cast()
}

/// Whether a call that failed with `status` may succeed when simply made again: true for
/// `KR_E_CONTENTION` (sampling gave up on slots being written, or found the tree at 0 for a
/// moment while an insert was in flight), false for every other status.
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_status_is_retryable(status: kr_status) -> bool {
    status == KR_E_CONTENTION
}

/// Copy the calling thread's last error message (empty if none) into `buf` (at most
/// `len` bytes, always NUL-terminated when `len > 0`, truncated if needed) and its full
/// length (without the NUL) into `*written` when `written` is not NULL. Its own failure
/// (`KR_E_NULL` for a NULL `buf` with `len > 0`) leaves the stored message as it was.
///
/// Thread safety: any thread; each thread has its own message.
///
/// # Safety
/// `buf` is NULL (with `len == 0`) or valid for writes of `len` bytes; `written` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_last_error_message(
    buf: *mut c_char,
    len: usize,
    written: *mut usize,
) -> kr_status {
    // Not through `boundary`: a failure here must not replace the message asked for.
    if buf.is_null() && len > 0 {
        return KR_E_NULL;
    }
    boundary(|| {
        LAST_ERROR.with(|e| {
            let e = e.borrow();
            if len > 0 {
                let n = e.len().min(len - 1);
                // SAFETY: `buf` holds `len > n` writable bytes (caller); the source is ours.
                unsafe {
                    std::ptr::copy_nonoverlapping(e.as_ptr(), buf.cast::<u8>(), n);
                    *buf.add(n) = 0;
                }
            }
            // SAFETY: NULL or valid for a write (caller).
            if let Some(w) = unsafe { written.as_mut() } {
                *w = e.len();
            }
        });
        Ok(())
    })
}

/// The default configuration: capacity 2^20, fanout 8, `KR_VARIANT_SPLIT_LOCK`, alpha
/// 0.6, initial priority 1, global weight normalization, running-max default priority.
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_config_default() -> kr_config {
    kr_config {
        capacity: 1 << 20,
        fanout: 8,
        variant: KR_VARIANT_SPLIT_LOCK,
        alpha: 0.6,
        initial_priority: 1.0,
        weight_normalization: KR_WEIGHTS_GLOBAL,
        default_priority: KR_DEFAULT_PRIORITY_RUNNING_MAX,
    }
}

/// Create a buffer for `config` and the `n_columns` columns at `columns`; on success
/// `*out` is the new handle (free it with `kr_buffer_free`).
///
/// Thread safety: any thread.
///
/// # Safety
/// `config` and `out` are NULL or valid; `columns` is NULL or points to `n_columns`
/// columns whose names are NULL or NUL-terminated strings.
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
        if out.is_null() {
            return Err(Failure::Null("out"));
        }
        // SAFETY: forwarded from the caller.
        let specs = unsafe { slice(columns, n_columns, "columns") }?;
        let mut schema = Schema::new();
        let mut layout = Vec::with_capacity(specs.len());
        let mut column_names = Vec::with_capacity(specs.len());
        let mut column_codes = Vec::with_capacity(specs.len());
        for spec in specs {
            if spec.name.is_null() {
                return Err(Failure::Null("a column name"));
            }
            // SAFETY: non-null and NUL-terminated (caller).
            let name = unsafe { CStr::from_ptr(spec.name) }
                .to_str()
                .map_err(|_| Failure::Invalid("a column name is not UTF-8".into()))?;
            let dtype = dtype(spec.dtype)?;
            schema = schema.column(name, dtype, spec.shape);
            layout.push((dtype, spec.shape));
            // SAFETY: non-null and NUL-terminated (caller); checked as UTF-8 above.
            column_names.push(unsafe { CStr::from_ptr(spec.name) }.to_owned());
            column_codes.push(spec.dtype);
        }
        let weight_normalization = match config.weight_normalization {
            KR_WEIGHTS_GLOBAL => WeightNormalization::Global,
            KR_WEIGHTS_BATCH => WeightNormalization::Batch,
            other => {
                return Err(Failure::Invalid(format!(
                    "unknown weight normalization {other}"
                )))
            }
        };
        let default_priority = match config.default_priority {
            KR_DEFAULT_PRIORITY_RUNNING_MAX => DefaultPriority::RunningMax,
            KR_DEFAULT_PRIORITY_LIVE_MAX => DefaultPriority::LiveMax,
            other => {
                return Err(Failure::Invalid(format!(
                    "unknown default priority {other}"
                )))
            }
        };
        let built = Config::builder(config.capacity, schema)
            .fanout(config.fanout)
            .alpha(config.alpha)
            .initial_priority(config.initial_priority)
            .weight_normalization(weight_normalization)
            .default_priority(default_priority)
            .build()?;
        let inner: Box<dyn ConcurrentBuffer> = match config.variant {
            KR_VARIANT_GLOBAL_LOCK => Box::new(GlobalLockBuffer::new(built)?),
            KR_VARIANT_SPLIT_LOCK => Box::new(SplitLockBuffer::new(built)?),
            KR_VARIANT_LOCK_FREE => Box::new(LockFreeBuffer::new(built)?),
            other => return Err(Failure::Invalid(format!("unknown variant {other}"))),
        };
        let handle = Box::into_raw(Box::new(kr_buffer {
            inner,
            columns: layout,
            column_names,
            column_codes,
            config: *config,
        }));
        // SAFETY: `out` is non-null and valid for a write (caller).
        unsafe { *out = handle };
        Ok(())
    })
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

/// Create a random number generator seeded with `seed`; `*out` is the handle (free it
/// with `kr_rng_free`).
///
/// Thread safety: any thread; the generator is then used by one thread at a time.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_rng_new(seed: u64, out: *mut *mut kr_rng) -> kr_status {
    boundary(|| {
        if out.is_null() {
            return Err(Failure::Null("out"));
        }
        let handle = Box::into_raw(Box::new(kr_rng {
            rng: SmallRng::seed_from_u64(seed),
        }));
        // SAFETY: non-null and valid for a write (caller).
        unsafe { *out = handle };
        Ok(())
    })
}

/// Free a generator (NULL: nothing happens).
///
/// Thread safety: no other thread may use the generator during or after the call.
///
/// # Safety
/// `rng` is NULL or a handle from `kr_rng_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kr_rng_free(rng: *mut kr_rng) {
    if !rng.is_null() {
        // SAFETY: a live handle from `kr_rng_new` (caller), freed once.
        drop(unsafe { Box::from_raw(rng) });
    }
}

fn to_c_key(k: &Key) -> kr_key {
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
        let cols = unsafe { column_slices(buffer, columns, n_columns, 1) }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let priority = unsafe { priority.as_ref() }.copied();
        let key = buffer.inner.insert(&cols, priority)?;
        // SAFETY: NULL or valid for a write (caller).
        if let Some(out) = unsafe { out_key.as_mut() } {
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
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let cols = unsafe { column_slices(buffer, columns, n_columns, items) }?;
        let priorities = if priorities.is_null() {
            None
        } else {
            // SAFETY: forwarded from the caller (see the function's `# Safety`).
            Some(unsafe { slice(priorities, items, "priorities") }?)
        };
        let keys = buffer.inner.insert_batch(&cols, priorities)?;
        if !out_keys.is_null() {
            for (i, k) in keys.iter().enumerate() {
                // SAFETY: room for `items` keys (caller).
                unsafe { *out_keys.add(i) = to_c_key(k) };
            }
        }
        Ok(())
    })
}

/// Sample `batch` items proportionally to their priorities with importance-weight exponent
/// `beta` and `mode` (`KR_SAMPLE_*`), drawing from `rng`, and write them into `out` (see
/// `kr_sample_out`). On failure nothing is written to keys, indices, weights, probabilities
/// and priorities; the column memory is untouched too when the call is refused before
/// sampling (every status but `KR_E_CONTENTION`), and after `KR_E_CONTENTION` it may hold
/// whole rows of items sampled before the failure (never a torn row): take it as
/// unspecified.
///
/// Arguments are checked in one order, so that a call with several faults reports the same
/// one everywhere (the C++ wrapper too): `buffer` (`KR_E_NULL`); then the values: `mode`,
/// `batch` (0), `beta` (`KR_E_INVALID_ARGUMENT`); then the pointers: `rng`, `out`, the
/// column destinations (`KR_E_NULL`; a misaligned output is `KR_E_INVALID_ARGUMENT`); then
/// the buffer's state (`KR_E_EMPTY`, `KR_E_ZERO_TOTAL_PRIORITY`, `KR_E_CONTENTION`).
///
/// Thread safety: any number of threads at once on one buffer, each with its own `rng`.
///
/// # Safety
/// `buffer`, `rng`, `out` are NULL or valid; every non-NULL pointer in `*out` has room for
/// `batch` items (columns: `batch x shape` elements), and no other thread reads or writes
/// that memory during the call.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_sample(
    buffer: *const kr_buffer,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    out: *const kr_sample_out,
) -> kr_status {
    boundary(|| {
        // Checks in the documented order: the handle, then sizes and values, then pointers.
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        let mode = match mode {
            KR_SAMPLE_INDEPENDENT => SampleMode::Independent,
            KR_SAMPLE_STRATIFIED => SampleMode::Stratified,
            other => return Err(Failure::Invalid(format!("unknown sample mode {other}"))),
        };
        kary_replay::buffer::check_sample_arguments(batch, beta)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let rng = unsafe { rng.as_mut() }.ok_or(Failure::Null("rng"))?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let out = unsafe { get(out, "out") }?;
        let destinations = if out.columns.is_null() {
            None
        } else {
            // SAFETY: forwarded from the caller (see the function's `# Safety`).
            let d = unsafe { slice(out.columns, buffer.columns.len(), "out->columns") }?;
            if d.iter().any(|p| p.is_null()) {
                return Err(Failure::Null("a column destination"));
            }
            for (&p, &(dtype, _)) in d.iter().zip(&buffer.columns) {
                // Every dtype's alignment is its size.
                aligned(p, dtype.size(), "a column destination")?;
            }
            Some(d)
        };
        aligned(out.keys, std::mem::align_of::<kr_key>(), "out->keys")?;
        aligned(out.indices, std::mem::align_of::<u64>(), "out->indices")?;
        aligned(out.weights, std::mem::align_of::<f64>(), "out->weights")?;
        aligned(
            out.probabilities,
            std::mem::align_of::<f64>(),
            "out->probabilities",
        )?;
        aligned(
            out.priorities,
            std::mem::align_of::<f64>(),
            "out->priorities",
        )?;
        aligned(
            out.weights_f32,
            std::mem::align_of::<f32>(),
            "out->weights_f32",
        )?;
        aligned(
            out.indices_i64,
            std::mem::align_of::<i64>(),
            "out->indices_i64",
        )?;
        SCRATCH.with(|scratch| {
            // Not re-entered: nothing below calls back into C.
            let mut sampled = scratch.borrow_mut();
            match destinations {
                // The rows go straight into the caller's columns.
                Some(d) => with_destinations(buffer, d, batch, |columns| {
                    buffer.inner.sample_columns_into(
                        batch,
                        beta,
                        mode,
                        &mut rng.rng,
                        &mut sampled,
                        columns,
                    )
                })?,
                None => buffer.inner.sample_indices_into(
                    batch,
                    beta,
                    mode,
                    &mut rng.rng,
                    &mut sampled,
                )?,
            }
            // SAFETY: forwarded from the caller (see the function's `# Safety`).
            unsafe { write_sample(&sampled, out) };
            Ok(())
        })
    })
}

/// Columns a schema may have before `kr_buffer_sample` needs the heap for their views.
const STACK_COLUMNS: usize = 16;

/// Run `f` on the caller's column destinations as typed slices of `batch` rows each, built
/// on the stack for up to [`STACK_COLUMNS`] columns (no allocation once warm).
fn with_destinations(
    buffer: &kr_buffer,
    destinations: &[*mut c_void],
    batch: usize,
    f: impl FnOnce(&mut [ColumnSliceMut<'_>]) -> kary_replay::Result<()>,
) -> Result<(), Failure> {
    let mut views = destinations
        .iter()
        .zip(&buffer.columns)
        .map(|(&p, &(dtype, shape))| {
            let len = batch.checked_mul(shape).ok_or(Error::SizeOverflow {
                what: "batch x shape of a sampled column",
            })?;
            // SAFETY: `p` is non-null and aligned for the dtype (checked by the caller of this
            // function) and has room for `batch x shape` elements (the C caller's promise in
            // `kr_buffer_sample`'s `# Safety`); a sample writes only 0 or 1 into bool columns.
            Ok(unsafe { ColumnSliceMut::from_raw_parts(dtype, p.cast(), len) })
        });
    if destinations.len() <= STACK_COLUMNS {
        let mut stack: [ColumnSliceMut<'_>; STACK_COLUMNS] =
            std::array::from_fn(|_| ColumnSliceMut::U8(&mut []));
        for slot in stack.iter_mut().take(destinations.len()) {
            *slot = views.next().expect("one view per destination")?;
        }
        f(&mut stack[..destinations.len()])?;
    } else {
        let mut heap = views.collect::<Result<Vec<_>, Error>>()?;
        f(&mut heap)?;
    }
    Ok(())
}

/// Copy a sampled batch's keys, indices, weights, probabilities and priorities into the
/// caller's outputs (its columns went straight into the caller's memory).
///
/// # Safety
/// Every non-NULL pointer in `out` has room for the batch.
unsafe fn write_sample(sampled: &SampleBatch, out: &kr_sample_out) {
    // SAFETY: every non-NULL output has room for the batch (caller), and `sampled`
    // holds exactly one batch of each.
    unsafe {
        write(out.keys, sampled.keys.iter().map(to_c_key));
        write(out.indices, sampled.indices.iter().map(|&i| i as u64));
        write(out.indices_i64, sampled.indices.iter().map(|&i| i as i64));
        write(out.weights, sampled.weights.iter().copied());
        write(out.weights_f32, sampled.weights.iter().map(|&w| w as f32));
        write(out.probabilities, sampled.probabilities.iter().copied());
        write(out.priorities, sampled.priorities.iter().copied());
    }
}

/// Write `values` to `dst` one after another (skip when `dst` is NULL).
///
/// # Safety
/// `dst` is NULL or has room for every value.
unsafe fn write<T>(dst: *mut T, values: impl Iterator<Item = T>) {
    if !dst.is_null() {
        for (i, v) in values.enumerate() {
            // SAFETY: room for every value (caller).
            unsafe { dst.add(i).write(v) };
        }
    }
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
        let report = buffer.inner.update_priorities(&keys, priorities)?;
        // SAFETY: NULL or valid for a write (caller).
        if let Some(out) = unsafe { out_report.as_mut() } {
            *out = kr_update_report {
                applied: report.applied,
                stale: report.stale,
            };
        }
        Ok(())
    })
}

/// The caller's keys as Rust keys: the same memory where `Key` has `kr_key`'s layout.
#[cfg(target_pointer_width = "64")]
fn rust_keys(keys: &[kr_key]) -> Result<std::borrow::Cow<'_, [Key]>, Failure> {
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
fn rust_keys(keys: &[kr_key]) -> Result<std::borrow::Cow<'_, [Key]>, Failure> {
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
        let out = unsafe { out.as_mut() }.ok_or(Failure::Null("out"))?;
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
        if out_key.is_null() {
            return Err(Failure::Null("out_key"));
        }
        if out_present.is_null() {
            return Err(Failure::Null("out_present"));
        }
        let key = buffer.inner.key(index)?;
        // SAFETY: both non-null and valid for a write (caller).
        unsafe {
            if let Some(k) = &key {
                *out_key = to_c_key(k);
            }
            *out_present = key.is_some();
        }
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
    unsafe { read_handle_into(buffer, out, |b| b.config) }
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
    unsafe { read_handle_into(buffer, out, |b| b.columns.len()) }
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
        if out.is_null() {
            return Err(Failure::Null("out"));
        }
        let (Some(name), Some(&(_, shape))) =
            (buffer.column_names.get(index), buffer.columns.get(index))
        else {
            return Err(Error::OutOfRange {
                index,
                capacity: buffer.columns.len(),
            }
            .into());
        };
        let column = kr_column {
            name: name.as_ptr(),
            dtype: buffer.column_codes[index],
            shape,
        };
        // SAFETY: non-null and valid for a write (caller).
        unsafe { out.write(column) };
        Ok(())
    })
}

/// The shape of the getters that read the handle itself: check both pointers, read,
/// write `*out`.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid for a write.
unsafe fn read_handle_into<T>(
    buffer: *const kr_buffer,
    out: *mut T,
    read: impl FnOnce(&kr_buffer) -> T,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        if out.is_null() {
            return Err(Failure::Null("out"));
        }
        let value = read(buffer);
        // SAFETY: non-null and valid for a write (caller).
        unsafe { out.write(value) };
        Ok(())
    })
}

/// The shape of the read-only getters: check both pointers, read, write `*out`.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid for a write.
unsafe fn read_into<T>(
    buffer: *const kr_buffer,
    out: *mut T,
    read: impl FnOnce(&dyn ConcurrentBuffer) -> T,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(buffer, out, |b| read(&*b.inner)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        LAST_ERROR.with(|e| e.borrow().clone())
    }

    #[test]
    fn a_panic_becomes_kr_e_panic_with_a_message() {
        let status = boundary(|| panic!("deliberate"));
        assert_eq!(status, KR_E_PANIC);
        assert!(last_error().contains("panic"), "{}", last_error());
        // The thread goes on working, and a success leaves the old message in place.
        assert_eq!(boundary(|| Ok(())), KR_OK);
        assert!(last_error().contains("panic"));
    }

    #[test]
    fn every_failure_maps_to_its_documented_status() {
        let cases: [(Failure, kr_status); 8] = [
            (Failure::Null("x"), KR_E_NULL),
            (Failure::Invalid("x".into()), KR_E_INVALID_ARGUMENT),
            (Error::Empty.into(), KR_E_EMPTY),
            (Error::ZeroTotalPriority.into(), KR_E_ZERO_TOTAL_PRIORITY),
            (Error::Contention { attempts: 1 }.into(), KR_E_CONTENTION),
            (Error::Allocation { bytes: 1 }.into(), KR_E_ALLOCATION),
            (
                Error::ColumnType {
                    column: "x".into(),
                    expected: DType::F32,
                    got: DType::F64,
                }
                .into(),
                KR_E_DTYPE_MISMATCH,
            ),
            (
                Error::SizeOverflow { what: "x" }.into(),
                KR_E_INVALID_ARGUMENT,
            ),
        ];
        for (failure, status) in cases {
            let message = failure.message();
            assert_eq!(boundary(|| Err(failure)), status);
            assert_eq!(last_error(), message);
        }
    }
}
