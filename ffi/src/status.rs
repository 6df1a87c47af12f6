//! Status codes and errors: `kr_status` and the `KR_E_*` codes, the thread's last error
//! message, the one boundary helper (`catch_unwind`, a failure turned into a status), and
//! the pointer checks every entry point makes before it changes anything: NULL where a
//! pointer is required, alignment for the pointed-to type, and counts that no memory holds.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use kary_replay::{CheckpointErrorKind, Error};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A status code: `KR_OK` (0) or one of the negative `KR_E_*` codes.
pub type kr_status = i32;

/// Success.
pub const KR_OK: kr_status = 0;

/// A required pointer argument was NULL.
pub const KR_E_NULL: kr_status = -1;

/// An argument is out of its range (unknown variant, fanout, dtype, mode; capacity; beta;
/// alpha; a bool column byte other than 0 or 1; a pointer misaligned for its type; a count
/// whose elements are more bytes than the address space holds, `PTRDIFF_MAX`, as a negative
/// count converted to `size_t` is). Pointers and counts are checked before anything changes.
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

/// A checkpoint's file system operation failed: no such directory or file, a path that is a
/// file, permissions, a full disk, a save's target that exists already.
pub const KR_E_IO: kr_status = -15;

/// A checkpoint cannot be trusted: a save that did not finish (no COMMIT), a damaged or
/// truncated file (length or CRC), a file not in the format, or contents that contradict
/// themselves. Nothing was loaded.
pub const KR_E_CORRUPT: kr_status = -16;

/// The rate limiter did not admit the call now (a `*_wait` call with timeout 0); nothing was
/// inserted or sampled. Retryable.
pub const KR_E_RATE_LIMITED: kr_status = -17;

/// The rate limiter did not admit the call before its timeout (`*_wait`); nothing was
/// inserted or sampled. Retryable.
pub const KR_E_TIMEOUT: kr_status = -18;

/// The buffer's rate limiter was closed (`kr_buffer_close`): waiters are woken with this,
/// and no insert or sample is admitted afterwards.
pub const KR_E_CLOSED: kr_status = -19;

/// A shared buffer (`kr_shm_*`) could not be created or attached: the name is taken or
/// unknown, the file is not a shared buffer of this version's layout, or the system refused
/// a call.
pub const KR_E_SHARED: kr_status = -20;

/// Why a call failed (becomes a status and the thread's last-error message).
pub(crate) enum Failure {
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
                Error::RateLimited(_) => KR_E_RATE_LIMITED,
                Error::Timeout { .. } => KR_E_TIMEOUT,
                Error::Closed | Error::LaneClosed { .. } => KR_E_CLOSED,
                Error::InvalidSequence(_) => KR_E_INVALID_ARGUMENT,
                Error::GenerationsExhausted { .. } => KR_E_EXHAUSTED,
                Error::Allocation { .. } => KR_E_ALLOCATION,
                Error::Shared { .. } => KR_E_SHARED,
                Error::SizeOverflow { .. } => KR_E_INVALID_ARGUMENT,
                Error::Checkpoint { kind, .. } => match kind {
                    CheckpointErrorKind::Io
                    | CheckpointErrorKind::Exists
                    | CheckpointErrorKind::NotFound => KR_E_IO,
                    CheckpointErrorKind::Mismatch => KR_E_INVALID_SCHEMA,
                    _ => KR_E_CORRUPT,
                },
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

pub(crate) fn set_last_error(message: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// The one boundary helper: runs `f` inside `catch_unwind`, records the failure message,
/// and turns the outcome into a status.
pub(crate) fn boundary(f: impl FnOnce() -> Result<(), Failure>) -> kr_status {
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

/// `&T` from a required pointer (a handle, an input struct): [`optional`], and
/// `Failure::Null` naming it when NULL.
///
/// # Safety
/// As [`optional`].
pub(crate) unsafe fn get<'a, T>(p: *const T, what: &'static str) -> Result<&'a T, Failure> {
    // SAFETY: forwarded from the caller.
    unsafe { optional(p, what) }?.ok_or(Failure::Null(what))
}

/// A slice of `len` `T`s at `p` (any pointer when `len == 0`).
///
/// # Safety
/// When `len > 0`, `p` is NULL or valid for reads of `len` `T`s for `'a`.
pub(crate) unsafe fn slice<'a, T>(
    p: *const T,
    len: usize,
    what: &'static str,
) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::Null(what));
    }
    aligned(p, std::mem::align_of::<T>(), what)?;
    addressable(len, std::mem::size_of::<T>(), what)?;
    // SAFETY: non-null, aligned, at most `isize::MAX` bytes, and the caller promises `len`
    // readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `KR_E_INVALID_ARGUMENT` unless `len` elements of `size` bytes fit in `isize::MAX` bytes,
/// the most that any memory (and a Rust slice) holds: a count that large cannot be what
/// the caller has (a negative count converted to `size_t`, say), and a slice made of it
/// would be undefined behaviour even before it is read.
pub(crate) fn addressable(len: usize, size: usize, what: &'static str) -> Result<(), Failure> {
    match len.checked_mul(size) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(Failure::Invalid(format!(
            "{what}: {len} elements of {size} bytes are more than the address space holds"
        ))),
    }
}

/// `&T` from an optional input pointer (`None` when NULL), checked for alignment first.
///
/// # Safety
/// `p` is NULL or valid for reads of a `T` for `'a` when aligned.
pub(crate) unsafe fn optional<'a, T>(
    p: *const T,
    what: &'static str,
) -> Result<Option<&'a T>, Failure> {
    aligned(p, std::mem::align_of::<T>(), what)?;
    // SAFETY: NULL or valid (caller), and aligned (checked above).
    Ok(unsafe { p.as_ref() })
}

/// `&mut T` from an optional output pointer (`None` when NULL), checked for alignment first:
/// taken before the call changes anything, so that an output that cannot be written
/// refuses the call instead of following a change.
///
/// # Safety
/// `p` is NULL or valid for writes of a `T` for `'a` when aligned, and nothing else uses
/// that memory in that time.
pub(crate) unsafe fn optional_mut<'a, T>(
    p: *mut T,
    what: &'static str,
) -> Result<Option<&'a mut T>, Failure> {
    aligned(p, std::mem::align_of::<T>(), what)?;
    // SAFETY: NULL or valid (caller), and aligned (checked above).
    Ok(unsafe { p.as_mut() })
}

/// `&mut T` from a required output pointer: [`optional_mut`], and `Failure::Null` naming it
/// when NULL.
///
/// # Safety
/// As [`optional_mut`].
pub(crate) unsafe fn required_mut<'a, T>(
    p: *mut T,
    what: &'static str,
) -> Result<&'a mut T, Failure> {
    // SAFETY: forwarded from the caller.
    unsafe { optional_mut(p, what) }?.ok_or(Failure::Null(what))
}

/// `KR_E_INVALID_ARGUMENT` unless `p` is a multiple of `align` (inputs and outputs alike).
pub(crate) fn aligned<T>(p: *const T, align: usize, what: &'static str) -> Result<(), Failure> {
    if p as usize % align != 0 {
        return Err(Failure::Invalid(format!(
            "{what} is not aligned for its type"
        )));
    }
    Ok(())
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
        KR_E_IO => "a checkpoint's file system operation failed\0",
        KR_E_CORRUPT => "the checkpoint is unfinished, damaged or invalid\0",
        KR_E_RATE_LIMITED => "the rate limiter did not admit the call now; retry\0",
        KR_E_TIMEOUT => "timed out waiting for the rate limiter; retry\0",
        KR_E_CLOSED => "the rate limiter is closed\0",
        KR_E_SHARED => "a shared buffer could not be created or attached\0",
        _ => "unknown status\0",
    };
    s.as_ptr().cast()
}

/// Whether a call that failed with `status` may succeed when simply made again: true for
/// `KR_E_CONTENTION` (sampling gave up on slots being written, or found the tree at 0 for a
/// moment while an insert was in flight), `KR_E_RATE_LIMITED` and `KR_E_TIMEOUT` (the rate
/// limiter did not admit the call yet), false for every other status.
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_status_is_retryable(status: kr_status) -> bool {
    matches!(status, KR_E_CONTENTION | KR_E_RATE_LIMITED | KR_E_TIMEOUT)
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
    if aligned(written, std::mem::align_of::<usize>(), "written").is_err() {
        return KR_E_INVALID_ARGUMENT;
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
            // SAFETY: NULL or valid for a write (caller), and aligned (checked above).
            if let Some(w) = unsafe { written.as_mut() } {
                *w = e.len();
            }
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kary_replay::DType;

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
        let cases: [(Failure, kr_status); 9] = [
            (Failure::Null("x"), KR_E_NULL),
            (Failure::Invalid("x".into()), KR_E_INVALID_ARGUMENT),
            (Error::Empty.into(), KR_E_EMPTY),
            (Error::ZeroTotalPriority.into(), KR_E_ZERO_TOTAL_PRIORITY),
            (Error::Contention { attempts: 1 }.into(), KR_E_CONTENTION),
            (Error::Allocation { bytes: 1 }.into(), KR_E_ALLOCATION),
            // The core's tests reach this error end to end (`generations_run_out_cleanly_*`);
            // from C it is this arm.
            (
                Error::GenerationsExhausted { index: 3 }.into(),
                KR_E_EXHAUSTED,
            ),
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
