//! The staged writer handle (`kr_writer`): an actor thread's `kary_replay::Writer`, which
//! stages single inserts and writes them to the buffer `batch` at a time through the
//! batch-aware `insert_batch`.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use kary_replay::{ConcurrentBuffer, DType, Writer};

use crate::buffer::{column_slices, kr_buffer, kr_key};
use crate::status::*;

/// An opaque staged writer: one actor thread's batch of pending inserts (see
/// `kr_writer_new`).
pub struct kr_writer {
    inner: Writer<Arc<dyn ConcurrentBuffer>>,
    /// (dtype, shape) per column, for reading the caller's pointers.
    columns: Vec<(DType, usize)>,
}

/// Create a staged writer on `buffer` that writes every `batch` pushed items at once
/// (`batch >= 1`; 32 to 256 is typical for an actor that inserts once per environment
/// step); `*out` is the handle (free it with `kr_writer_free`, which flushes).
///
/// Pushed items become visible (sampleable, counted by `kr_buffer_len`, with keys) only
/// when the writer flushes: when `batch` items are staged, on `kr_writer_flush`, when a push
/// switches between an explicit and the default priority, and in `kr_writer_free`. The
/// writer holds a reference to the buffer: `kr_buffer_free` may come first, and the buffer
/// is freed with its last writer.
///
/// Thread safety: `buffer` as usual; the writer belongs to one thread at a time.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_writer_new(
    buffer: *const kr_buffer,
    batch: usize,
    out: *mut *mut kr_writer,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        let inner = Writer::new(Arc::clone(&buffer.inner), batch)?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = Box::into_raw(Box::new(kr_writer {
            inner,
            columns: buffer.columns.clone(),
        }));
        Ok(())
    })
}

/// Stage one item: `columns` holds one pointer per schema column, each to one item's
/// elements (as for `kr_buffer_insert`); `priority` is NULL (the default priority, decided
/// at the flush) or points to a raw priority. The item is checked now: a bad one is an error
/// and stages nothing. On success `*out_flushed` (if not NULL) is the number of items this
/// push wrote to the buffer (0 when it only staged); their keys are then readable with
/// `kr_writer_keys`. If the flush that a push triggers fails, its items stay staged.
///
/// # Safety
/// `writer` is NULL or live and used by this thread only; `columns`, `priority` and
/// `out_flushed` as for `kr_buffer_insert`.
#[no_mangle]
pub unsafe extern "C" fn kr_writer_push(
    writer: *mut kr_writer,
    columns: *const *const c_void,
    n_columns: usize,
    priority: *const f64,
    out_flushed: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let writer = unsafe { writer.as_mut() }.ok_or(Failure::Null("writer"))?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let cols = unsafe { column_slices(&writer.columns, columns, n_columns, 1) }?;
        // SAFETY: NULL or valid (caller).
        let priority = unsafe { optional(priority, "priority") }?.copied();
        // SAFETY: NULL or valid for a write (caller).
        let out_flushed = unsafe { optional_mut(out_flushed, "out_flushed") }?;
        let flushed = writer.inner.push(&cols, priority)?.len();
        if let Some(out) = out_flushed {
            *out = flushed;
        }
        Ok(())
    })
}

/// Write the staged items to the buffer now (one batch insert). On success
/// `*out_flushed` (if not NULL) is the number written; their keys are readable with
/// `kr_writer_keys`. On failure the items stay staged.
///
/// # Safety
/// `writer` is NULL or live and used by this thread only; `out_flushed` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_writer_flush(
    writer: *mut kr_writer,
    out_flushed: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let writer = unsafe { writer.as_mut() }.ok_or(Failure::Null("writer"))?;
        // SAFETY: NULL or valid for a write (caller).
        let out_flushed = unsafe { optional_mut(out_flushed, "out_flushed") }?;
        let flushed = writer.inner.flush()?.len();
        if let Some(out) = out_flushed {
            *out = flushed;
        }
        Ok(())
    })
}

/// The keys of the items the writer's last successful push or flush wrote, in push order:
/// `*out_keys` points to `*out_n` keys owned by the writer, valid until its next call.
///
/// # Safety
/// `writer` is NULL or live; `out_keys` and `out_n` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_writer_keys(
    writer: *const kr_writer,
    out_keys: *mut *const kr_key,
    out_n: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let writer = unsafe { get(writer, "writer") }?;
        // SAFETY: forwarded from the caller.
        let out_keys = unsafe { required_mut(out_keys, "out_keys") }?;
        // SAFETY: forwarded from the caller.
        let out_n = unsafe { required_mut(out_n, "out_n") }?;
        let keys = writer.inner.keys();
        // `Key` is `repr(C)` with the layout of `kr_key` on the 64-bit targets the library
        // is built for (checked in `buffer.rs`'s update, which casts the other way).
        *out_keys = keys.as_ptr().cast::<kr_key>();
        *out_n = keys.len();
        Ok(())
    })
}

/// Items staged and not yet written: `*out`.
///
/// # Safety
/// `writer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_writer_staged(writer: *const kr_writer, out: *mut usize) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let writer = unsafe { get(writer, "writer") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = writer.inner.staged();
        Ok(())
    })
}

/// Flush the staged items and free the writer (NULL: `KR_OK`, nothing happens). The writer
/// is freed whatever the flush returns; a failed flush's items are lost then, so call
/// `kr_writer_flush` first where that matters.
///
/// # Safety
/// `writer` is NULL or a handle from `kr_writer_new` not freed before, and no other thread
/// uses it.
#[no_mangle]
pub unsafe extern "C" fn kr_writer_free(writer: *mut kr_writer) -> kr_status {
    if writer.is_null() {
        return KR_OK;
    }
    // SAFETY: a live handle from `kr_writer_new` (caller), freed once below.
    let mut writer = unsafe { Box::from_raw(writer) };
    let status = boundary(|| {
        writer.inner.flush()?;
        Ok(())
    });
    // A panic in a destructor must not unwind into C either (the flush above already ran,
    // so dropping flushes nothing).
    let _ = catch_unwind(AssertUnwindSafe(|| drop(writer)));
    status
}
