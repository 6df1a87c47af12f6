//! Checkpoints from C: save a buffer, load one (any variant), verify, find the latest,
//! read the caller's saved counters. The format is the crate's (`docs/checkpoint.md`).

use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::sync::Arc;

use kary_replay::checkpoint::{self, LoadOptions, SaveOptions, UserValue};
use kary_replay::{ConcurrentBuffer, GlobalLockBuffer, Load, LockFreeBuffer, SplitLockBuffer};

use crate::buffer::kr_buffer;
use crate::config::{KR_VARIANT_GLOBAL_LOCK, KR_VARIANT_LOCK_FREE, KR_VARIANT_SPLIT_LOCK};
use crate::status::*;

/// How `kr_buffer_save` saves. Start from `kr_save_options_default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_save_options {
    /// After the save, keep only the newest this many numbered checkpoints (`ckpt-*`) in the
    /// target's parent directory; 0 keeps all.
    pub keep_last: usize,
    /// Counters of the caller to store with the checkpoint (read back with
    /// `kr_checkpoint_user_u64`): `n_user` NUL-terminated UTF-8 keys and as many values.
    pub n_user: usize,
    /// The keys (NULL when `n_user` is 0).
    pub user_keys: *const *const c_char,
    /// The values (NULL when `n_user` is 0).
    pub user_values: *const u64,
}

/// Default save options: keep every checkpoint, no user counters.
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_save_options_default() -> kr_save_options {
    kr_save_options {
        keep_last: 0,
        n_user: 0,
        user_keys: std::ptr::null(),
        user_values: std::ptr::null(),
    }
}

/// What `kr_checkpoint_verify` found in a checkpoint that loads.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct kr_checkpoint_report {
    /// Slots.
    pub capacity: usize,
    /// Items stored.
    pub len: usize,
    /// Items inserted before the save (the next item's generation).
    pub inserted: u64,
    /// The slot the next item goes to.
    pub cursor: usize,
    /// Columns of the schema.
    pub n_columns: usize,
    /// Stored priorities that are positive.
    pub positive: usize,
    /// Smallest positive stored priority (0 if none).
    pub min_positive: f64,
    /// Largest stored priority.
    pub max: f64,
    /// Sum of the stored priorities.
    pub total: f64,
    /// The running maximum (new items' default priority).
    pub running_max: f64,
}

/// A path from C: NUL-terminated bytes (any bytes on Unix, UTF-8 elsewhere).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn path(p: *const c_char, what: &'static str) -> Result<PathBuf, Failure> {
    if p.is_null() {
        return Err(Failure::Null(what));
    }
    // SAFETY: non-null and NUL-terminated (caller).
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.is_empty() {
        return Err(Failure::Invalid(format!("{what} is empty")));
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes)
            .map(PathBuf::from)
            .map_err(|_| Failure::Invalid(format!("{what} is not UTF-8")))
    }
}

/// Save `buffer` as a checkpoint in the new directory `dir` (its parent is created; `dir`
/// must not exist). `options` is NULL (defaults) or from `kr_save_options_default()`. A
/// concurrent save pauses the buffer's writers and priority updates for the copy; samplers
/// go on. On failure no directory is left at `dir`.
///
/// Errors: `KR_E_NULL`; `KR_E_INVALID_ARGUMENT` (an empty path, a user key that is not
/// UTF-8); `KR_E_IO` (the file system refused, `dir` exists); `KR_E_ALLOCATION`.
///
/// Thread safety: any number of threads at once (saves of one buffer take turns).
///
/// # Safety
/// `buffer` is NULL or a live handle; `dir` is NULL or NUL-terminated; `options` is NULL or
/// valid, its arrays holding `n_user` entries.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_save(
    buffer: *const kr_buffer,
    dir: *const c_char,
    options: *const kr_save_options,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let dir = unsafe { path(dir, "dir") }?;
        // SAFETY: forwarded from the caller.
        let save = unsafe { save_options(options) }?;
        buffer.rust().save_with(&dir, &save)?;
        Ok(())
    })
}

/// The save options `options` (NULL: the defaults) asks for.
///
/// # Safety
/// `options` is NULL or valid, its arrays holding `n_user` entries.
pub(crate) unsafe fn save_options(options: *const kr_save_options) -> Result<SaveOptions, Failure> {
    // SAFETY: forwarded from the caller.
    let options = unsafe { optional(options, "options") }?
        .copied()
        .unwrap_or_else(|| kr_save_options_default());
    let mut save = SaveOptions::new();
    if options.keep_last > 0 {
        save = save.keep_last(options.keep_last);
    }
    // SAFETY: forwarded from the caller.
    let keys = unsafe { slice(options.user_keys, options.n_user, "options->user_keys") }?;
    // SAFETY: forwarded from the caller.
    let values = unsafe { slice(options.user_values, options.n_user, "options->user_values") }?;
    for (&k, &v) in keys.iter().zip(values) {
        if k.is_null() {
            return Err(Failure::Null("a user key"));
        }
        // SAFETY: non-null and NUL-terminated (caller).
        let key = unsafe { CStr::from_ptr(k) }
            .to_str()
            .map_err(|_| Failure::Invalid("a user key is not UTF-8".into()))?;
        save = save.user(key, UserValue::U64(v));
    }
    Ok(save)
}

/// Load the checkpoint at `dir` into a new buffer of `variant` (`KR_VARIANT_*`: any, whatever
/// variant saved it); `*out` is the handle (free it with `kr_buffer_free`). Every length is
/// checked before anything is allocated, every CRC and every field before the handle is
/// made; keys handed out before the save stay valid.
///
/// Errors: `KR_E_NULL`; `KR_E_INVALID_ARGUMENT` (an unknown variant, an empty path);
/// `KR_E_IO` (no such directory, a path that is a file, a missing file); `KR_E_CORRUPT` (a
/// save that did not finish, a damaged, truncated or self-contradicting checkpoint);
/// `KR_E_ALLOCATION`.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `dir` is NULL or NUL-terminated; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_load(
    dir: *const c_char,
    variant: u32,
    out: *mut *mut kr_buffer,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let dir = unsafe { path(dir, "dir") }?;
        if !matches!(
            variant,
            KR_VARIANT_GLOBAL_LOCK | KR_VARIANT_SPLIT_LOCK | KR_VARIANT_LOCK_FREE
        ) {
            return Err(Failure::Invalid(format!("unknown variant {variant}")));
        }
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let options = LoadOptions::default();
        let inner: Arc<dyn ConcurrentBuffer> = match variant {
            KR_VARIANT_GLOBAL_LOCK => Arc::new(GlobalLockBuffer::load_with(&dir, &options)?.buffer),
            KR_VARIANT_SPLIT_LOCK => Arc::new(SplitLockBuffer::load_with(&dir, &options)?.buffer),
            _ => Arc::new(LockFreeBuffer::load_with(&dir, &options)?.buffer),
        };
        *out = Box::into_raw(Box::new(kr_buffer::from_rust(inner, variant)?));
        Ok(())
    })
}

/// Read and check the checkpoint at `dir` whole (every CRC, every field), as a load does,
/// without making a buffer; `*out` says what it holds.
///
/// Errors: as `kr_buffer_load`.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `dir` is NULL or NUL-terminated; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_checkpoint_verify(
    dir: *const c_char,
    out: *mut kr_checkpoint_report,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let dir = unsafe { path(dir, "dir") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let r = checkpoint::verify(&dir)?;
        *out = kr_checkpoint_report {
            capacity: r.config.capacity(),
            len: r.len,
            inserted: r.inserted,
            cursor: r.cursor,
            n_columns: r.config.schema().columns().len(),
            positive: r.positive,
            min_positive: r.min_positive,
            max: r.max,
            total: r.total,
            running_max: r.running_max,
        };
        Ok(())
    })
}

/// Write the path of the newest committed numbered checkpoint in `parent` (see
/// `kr_save_options.keep_last`; damaged and unfinished ones are skipped) into `buf`
/// (`len` bytes, NUL-terminated); `*written` (if not NULL) is its length without the NUL.
/// `*found` is false, and nothing is written, when there is none. A `buf` too small is
/// `KR_E_LENGTH_MISMATCH` with `*written` set to the length needed.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `parent` is NULL or NUL-terminated; `buf` is NULL or valid for `len` bytes; `written`
/// and `found` are NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_checkpoint_latest(
    parent: *const c_char,
    buf: *mut c_char,
    len: usize,
    written: *mut usize,
    found: *mut bool,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let parent = unsafe { path(parent, "parent") }?;
        // SAFETY: forwarded from the caller.
        let found = unsafe { required_mut(found, "found") }?;
        // SAFETY: forwarded from the caller.
        let written = unsafe { optional_mut(written, "written") }?;
        let Some(latest) = checkpoint::latest(&parent)? else {
            *found = false;
            return Ok(());
        };
        #[cfg(unix)]
        let bytes = {
            use std::os::unix::ffi::OsStrExt;
            latest.as_os_str().as_bytes().to_vec()
        };
        #[cfg(not(unix))]
        let bytes = latest.to_string_lossy().into_owned().into_bytes();
        if bytes.len() + 1 > len || buf.is_null() {
            if let Some(w) = written {
                *w = bytes.len();
            }
            return Err(Failure::Core(kary_replay::Error::LengthMismatch {
                what: "bytes for the path and its NUL",
                expected: bytes.len() + 1,
                got: len,
            }));
        }
        // SAFETY: `buf` is non-null and valid for `len > bytes.len()` bytes (caller,
        // checked above); `bytes` is our own allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
            *buf.add(bytes.len()) = 0;
        }
        if let Some(w) = written {
            *w = bytes.len();
        }
        *found = true;
        Ok(())
    })
}

/// Read the user counter `key` saved with the checkpoint at `dir` (its manifest checked
/// against its COMMIT): `*present` says whether there is one; `*value` is written only then.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `dir` and `key` are NULL or NUL-terminated; `value` and `present` are NULL or valid for
/// a write.
#[no_mangle]
pub unsafe extern "C" fn kr_checkpoint_user_u64(
    dir: *const c_char,
    key: *const c_char,
    value: *mut u64,
    present: *mut bool,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let dir = unsafe { path(dir, "dir") }?;
        if key.is_null() {
            return Err(Failure::Null("key"));
        }
        // SAFETY: non-null and NUL-terminated (caller).
        let key = unsafe { CStr::from_ptr(key) }
            .to_str()
            .map_err(|_| Failure::Invalid("key is not UTF-8".into()))?;
        // SAFETY: forwarded from the caller.
        let value = unsafe { required_mut(value, "value") }?;
        // SAFETY: forwarded from the caller.
        let present = unsafe { required_mut(present, "present") }?;
        match checkpoint::user_data(&dir)?.get(key) {
            Some(UserValue::U64(v)) => {
                *value = *v;
                *present = true;
            }
            Some(other) => {
                return Err(Failure::Invalid(format!(
                    "user value {key:?} is {other:?}, not an unsigned integer"
                )))
            }
            None => *present = false,
        }
        Ok(())
    })
}
