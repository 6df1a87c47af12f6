//! The system calls of a shared buffer: its file (a name under /dev/shm, or a memfd), the
//! reservation of its bytes, and the leases (open-file-description locks, which the kernel
//! drops when the last descriptor of their open file closes, a process's death included).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Where names live.
pub(crate) const SHM_DIR: &str = "/dev/shm";

/// The error for shared buffer `name` (or "memfd").
pub(crate) fn err(name: &str, detail: impl Into<String>) -> Error {
    Error::Shared {
        name: name.to_string(),
        detail: detail.into(),
    }
}

/// Check a name: 1 to 200 bytes of letters, digits, `.`, `_`, `-`, not starting with `.`.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    match ok {
        true => Ok(()),
        false => Err(err(
            name,
            "a name is 1 to 200 letters, digits, '.', '_' or '-', not starting with '.'",
        )),
    }
}

/// The path of name `name`.
pub(crate) fn path_of(name: &str) -> std::path::PathBuf {
    std::path::Path::new(SHM_DIR).join(name)
}

/// Create the file of a new buffer: `name` under /dev/shm (refused if it exists), or an
/// anonymous memfd.
pub(crate) fn create_file(name: Option<&str>) -> Result<File> {
    match name {
        Some(name) => {
            check_name(name)?;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC)
                .open(path_of(name))
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => {
                        err(name, "the name is taken: attach to it, or unlink it first")
                    }
                    _ => err(
                        name,
                        format!("cannot create {}: {e}", path_of(name).display()),
                    ),
                })
        }
        None => {
            // SAFETY: a C string literal; the result is checked.
            let fd = unsafe { libc::memfd_create(c"kary-replay".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(err(
                    "memfd",
                    format!("memfd_create: {}", std::io::Error::last_os_error()),
                ));
            }
            // SAFETY: a descriptor just returned to us and owned by nothing else.
            Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
        }
    }
}

/// Size `file` to `len` bytes and reserve them, so that a full /dev/shm is an error now
/// rather than a SIGBUS at a later first touch.
pub(crate) fn reserve(file: &File, len: usize, name: &str) -> Result<()> {
    file.set_len(len as u64)
        .map_err(|e| err(name, format!("cannot size the file to {len} bytes: {e}")))?;
    // SAFETY: a descriptor we own; the call returns an error number, checked.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::EFBIG | libc::ENOMEM => Err(Error::Allocation { bytes: len }),
        e => Err(err(
            name,
            format!(
                "cannot reserve {len} bytes: {}",
                std::io::Error::from_raw_os_error(e)
            ),
        )),
    }
}

/// Open the file behind `fd` again: a new open file description (ours alone), for a lease.
pub(crate) fn reopen(fd: RawFd, name: &str) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{fd}"))
        .map_err(|e| err(name, format!("cannot open the mapping's file again: {e}")))
}

fn flock(kind: libc::c_int, byte: usize) -> libc::flock {
    // SAFETY: a plain C struct, all zeros valid.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = byte as libc::off_t;
    l.l_len = 1;
    l
}

/// Take the lease on byte `byte` with `fd`'s open file description, without waiting:
/// `false` when another description holds it.
pub(crate) fn try_lease(fd: RawFd, byte: usize) -> std::io::Result<bool> {
    let mut l = flock(libc::F_WRLCK, byte);
    // SAFETY: a valid flock struct for the call's duration; the result is checked.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut l) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Give back the lease on byte `byte` held by `fd`'s open file description.
pub(crate) fn release_lease(fd: RawFd, byte: usize) {
    let mut l = flock(libc::F_UNLCK, byte);
    // SAFETY: as in `try_lease`. An unlock of a range we hold cannot fail but for a bad
    // descriptor, which ours is not.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut l) };
}

/// Whether some open file description other than `fd`'s holds the lease on `byte`.
pub(crate) fn leased(fd: RawFd, byte: usize) -> bool {
    let mut l = flock(libc::F_WRLCK, byte);
    // SAFETY: as in `try_lease`.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut l) };
    // An error (which a valid descriptor does not give) counts as held: never recover a
    // participant we cannot prove dead.
    rc != 0 || l.l_type != libc::F_UNLCK as libc::c_short
}

/// The lease descriptors of this process, closed in a child right after `fork` (so that a
/// child that lives on does not keep its parent's leases, and so its parent, alive), and
/// the number of forks this process went through (a handle made before one refuses to be
/// used after it: it would share its parent's participant entry).
static LEASES: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
    for slot in &LEASES {
        let fd = slot.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: a descriptor this process registered as a lease; close is
            // async-signal-safe, as a fork handler needs.
            unsafe { libc::close(fd) };
        }
    }
}

/// Forks so far (see [`LEASES`]).
pub(crate) fn forks() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// A lease descriptor, registered so that a fork's child closes it.
#[derive(Debug)]
pub(crate) struct Lease {
    fd: RawFd,
    slot: usize,
    /// [`forks`] when registered: after a fork the child's handler has closed it.
    forks: u64,
}

impl Lease {
    /// Register `file`'s descriptor (taking it over).
    pub(crate) fn register(file: File, name: &str) -> Result<Lease> {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            // SAFETY: registers a handler that only touches atomics and closes descriptors.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
        let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        for (slot, cell) in LEASES.iter().enumerate() {
            if cell
                .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Ok(Lease {
                    fd,
                    slot,
                    forks: forks(),
                });
            }
        }
        // SAFETY: the descriptor is ours (taken over above) and registered nowhere.
        unsafe { libc::close(fd) };
        Err(err(
            name,
            format!(
                "this process holds {} shared buffer handles, the most",
                LEASES.len()
            ),
        ))
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Closed here unless a fork's child handler closed it already (then the slot no
        // longer holds it, or holds a later lease that reused the number).
        if forks() == self.forks
            && LEASES[self.slot]
                .compare_exchange(self.fd, -1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // SAFETY: our registered descriptor, closed once (the slot was cleared first).
            unsafe { libc::close(self.fd) };
        }
    }
}

/// Remove name `name` (existing handles keep their mapping).
pub(crate) fn unlink(name: &str) -> Result<()> {
    check_name(name)?;
    std::fs::remove_file(path_of(name)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => err(name, "no shared buffer has this name"),
        _ => err(name, format!("cannot unlink: {e}")),
    })
}
