//! Buffers shared by processes: `kr_shm_create`, `kr_shm_attach`, `kr_shm_attach_fd`,
//! `kr_shm_recover`, `kr_shm_participants`, `kr_shm_fd` and `kr_shm_unlink`, each returning
//! or taking a `kr_buffer*`; and sequence buffers shared by processes: `kr_seq_shm_create`,
//! `kr_seq_shm_attach`, `kr_seq_shm_recover` and `kr_seq_shm_participants`, each returning or
//! taking a `kr_seq*`. So every other call (inserts, lanes, samples, updates, writers,
//! checkpoints) works on a shared buffer as on any other of its family.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

use kary_replay::sequence::{SequenceRef, ShmSequenceBuffer};
use kary_replay::{ConcurrentBuffer, ShmBuffer};

use crate::buffer::{config_from, kr_buffer};
use crate::config::*;
use crate::sequence::{kr_seq, kr_seq_config, seq_config_from};
use crate::status::*;

/// A name from C: NUL-terminated UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn name(p: *const c_char) -> Result<String, Failure> {
    if p.is_null() {
        return Err(Failure::Null("name"));
    }
    // SAFETY: non-null and NUL-terminated (caller).
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|_| Failure::Invalid("name is not UTF-8".into()))
}

/// The handle over shared buffer `shm`.
fn handle(shm: ShmBuffer) -> Result<*mut kr_buffer, Failure> {
    let shm = Arc::new(shm);
    let inner: Arc<dyn ConcurrentBuffer> = shm.clone();
    let mut b = kr_buffer::from_rust(inner, KR_VARIANT_SHARED)?;
    b.shm = Some(shm);
    Ok(Box::into_raw(Box::new(b)))
}

/// The shared buffer behind `buffer`.
///
/// # Safety
/// `buffer` is NULL or a live handle.
unsafe fn shared<'a>(buffer: *const kr_buffer) -> Result<&'a ShmBuffer, Failure> {
    // SAFETY: forwarded from the caller.
    let b = unsafe { get(buffer, "buffer") }?;
    b.shm
        .as_deref()
        .ok_or_else(|| Failure::Invalid("not a shared buffer (kr_shm_create)".into()))
}

/// Create a buffer shared by processes: `name` (letters, digits, '.', '_', '-'; a file under
/// /dev/shm, `KR_E_SHARED` if it exists) or NULL for an anonymous one (attach to it with
/// `kr_shm_attach_fd` and the descriptor of `kr_shm_fd`). `config` and `columns` as for
/// `kr_buffer_new` (`config->variant` is ignored: the protocol is the lock-free one). A rate
/// limit is the buffer's, one for every process: its counts live in the mapping, a call in
/// any process waits for the calls of all, and `kr_buffer_close` in one process ends every
/// process's waits. Every byte is reserved now: a /dev/shm too small is `KR_E_ALLOCATION`
/// here, never a SIGBUS later. The name stays until `kr_shm_unlink`.
///
/// A process that dies at any point, even killed mid-insert, costs at most the items it was
/// inserting: every other process's handle recovers what it held within about 10 ms. A
/// handle inherited across `fork` attaches again in the child on its first call.
///
/// Thread safety: any thread; the handle is then shared by the process's threads.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `config`, `columns` and `out` as for
/// `kr_buffer_new`.
#[no_mangle]
pub unsafe extern "C" fn kr_shm_create(
    name: *const c_char,
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
        let shm = match name.is_null() {
            true => ShmBuffer::create_anonymous(built)?,
            // SAFETY: forwarded from the caller.
            false => ShmBuffer::create(&unsafe { self::name(name) }?, built)?,
        };
        *out = handle(shm)?;
        Ok(())
    })
}

/// Attach to the shared buffer named `name` (its configuration and schema are read from it:
/// `kr_buffer_config`, `kr_buffer_column`). `KR_E_SHARED` when there is none, or when it is
/// not a shared buffer of this version's layout.
///
/// Thread safety: any thread.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_shm_attach(name: *const c_char, out: *mut *mut kr_buffer) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        // SAFETY: forwarded from the caller.
        let name = unsafe { self::name(name) }?;
        *out = handle(ShmBuffer::attach(&name)?)?;
        Ok(())
    })
}

/// Attach to the shared buffer behind descriptor `fd` (from `kr_shm_fd` in another process,
/// passed by inheritance or over a Unix socket). The descriptor stays the caller's.
///
/// Thread safety: any thread.
///
/// # Safety
/// `out` is NULL or valid; `fd` is any number (a bad one is `KR_E_SHARED`).
#[no_mangle]
pub unsafe extern "C" fn kr_shm_attach_fd(fd: c_int, out: *mut *mut kr_buffer) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        if fd < 0 {
            return Err(Failure::Invalid(format!("descriptor {fd}")));
        }
        // SAFETY: a number, borrowed for the call only; `attach_fd` duplicates it (a
        // descriptor that is not open fails there).
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        *out = handle(ShmBuffer::attach_fd(borrowed)?)?;
        Ok(())
    })
}

/// The shared buffer's descriptor, for `kr_shm_attach_fd` elsewhere (close-on-exec: pass
/// it on explicitly); it stays the handle's, valid while the handle is.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `buffer` is NULL or a live handle; `fd` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_shm_fd(buffer: *const kr_buffer, fd: *mut c_int) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let shm = unsafe { shared(buffer) }?;
        // SAFETY: forwarded from the caller.
        let fd = unsafe { required_mut(fd, "fd") }?;
        use std::os::fd::AsRawFd;
        *fd = shm.fd().as_raw_fd();
        Ok(())
    })
}

/// Recover now what dead processes held (each handle's watchdog does it every 10 ms);
/// `recovered` (may be NULL) gets how many this call recovered.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `buffer` is NULL or a live handle; `recovered` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_shm_recover(
    buffer: *const kr_buffer,
    recovered: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let shm = unsafe { shared(buffer) }?;
        let n = shm.recover()?;
        if !recovered.is_null() {
            // SAFETY: non-null and valid (caller).
            unsafe { *recovered = n };
        }
        Ok(())
    })
}

/// How many processes are attached now (their leases held), this one included.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `buffer` is NULL or a live handle; `n` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_shm_participants(buffer: *const kr_buffer, n: *mut usize) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let shm = unsafe { shared(buffer) }?;
        // SAFETY: forwarded from the caller.
        let n = unsafe { required_mut(n, "n") }?;
        *n = shm.participants()?.len();
        Ok(())
    })
}

/// Remove the name `name` of a shared buffer or shared sequence buffer: handles keep
/// working, no new process can attach by it, and the memory goes when the last handle does.
/// `KR_E_SHARED` when no shared buffer has it.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kr_shm_unlink(name: *const c_char) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let name = unsafe { self::name(name) }?;
        ShmBuffer::unlink_name(&name)?;
        Ok(())
    })
}

/// The shared sequence buffer behind `seq`.
///
/// # Safety
/// `seq` is NULL or a live handle.
unsafe fn shared_seq<'a>(seq: *const kr_seq) -> Result<&'a ShmSequenceBuffer, Failure> {
    // SAFETY: forwarded from the caller.
    let s = unsafe { get(seq, "seq") }?;
    s.inner
        .shared()
        .ok_or_else(|| Failure::Invalid("not a shared sequence buffer (kr_seq_shm_create)".into()))
}

/// Create a sequence buffer shared by processes: `name` as for `kr_shm_create` (NULL for an
/// anonymous one), `config` and `columns` as for `kr_seq_new`. Every `kr_seq_*` and
/// `kr_lane_*` call works on it as on any sequence buffer, from any process that attaches
/// (`kr_seq_shm_attach`): one lane writer per lane across every process, samples and
/// updates from any. Each window is installed as soon as it completes (`kr_lane_set_batch`
/// above 1 is `KR_E_INVALID_ARGUMENT`). A rate limit is the buffer's, one for every
/// process. Every byte is reserved now (`KR_E_ALLOCATION` if /dev/shm is too small). The
/// name stays until `kr_shm_unlink`.
///
/// A process killed at any point costs the step it was writing and the windows of its
/// episode that waited for later steps: every handle's watchdog recovers its lane within
/// about 10 ms (`kr_seq_shm_recover` does it at once), no window that reads a half-written
/// step is handed out, and the lane takes a new writer.
///
/// Thread safety: any thread.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; the rest as for `kr_seq_new`.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_shm_create(
    name: *const c_char,
    config: *const kr_seq_config,
    columns: *const kr_column,
    n_columns: usize,
    out: *mut *mut kr_seq,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        // SAFETY: forwarded from the caller.
        let config = unsafe { seq_config_from(config, columns, n_columns) }?;
        let shm = match name.is_null() {
            true => ShmSequenceBuffer::create_anonymous(config)?,
            // SAFETY: forwarded from the caller.
            false => ShmSequenceBuffer::create(&unsafe { self::name(name) }?, config)?,
        };
        *out = Box::into_raw(Box::new(kr_seq::from_rust(SequenceRef::Shared(Arc::new(
            shm,
        )))));
        Ok(())
    })
}

/// Attach to the shared sequence buffer named `name`; `*out` is the handle (free it with
/// `kr_seq_free`). `KR_E_SHARED` for a name no shared sequence buffer of this build's
/// layout has (a flat shared buffer's included).
///
/// Thread safety: any thread.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_shm_attach(
    name: *const c_char,
    out: *mut *mut kr_seq,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let name = unsafe { self::name(name) }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let shm = ShmSequenceBuffer::attach(&name)?;
        *out = Box::into_raw(Box::new(kr_seq::from_rust(SequenceRef::Shared(Arc::new(
            shm,
        )))));
        Ok(())
    })
}

/// Recover now what dead processes held in a shared sequence buffer (each handle's watchdog
/// does it every 10 ms); `recovered` (may be NULL) gets how many this call recovered.
/// `KR_E_INVALID_ARGUMENT` for a sequence buffer that is not shared.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `seq` is NULL or a live handle; `recovered` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_shm_recover(
    seq: *const kr_seq,
    recovered: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let shm = unsafe { shared_seq(seq) }?;
        let n = shm.recover()?;
        if !recovered.is_null() {
            // SAFETY: non-null and valid (caller).
            unsafe { *recovered = n };
        }
        Ok(())
    })
}

/// How many processes are attached to a shared sequence buffer now, this one included.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `seq` is NULL or a live handle; `n` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_shm_participants(seq: *const kr_seq, n: *mut usize) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let shm = unsafe { shared_seq(seq) }?;
        // SAFETY: forwarded from the caller.
        let n = unsafe { required_mut(n, "n") }?;
        *n = shm.participants()?.len();
        Ok(())
    })
}
