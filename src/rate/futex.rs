//! Sleeping on a shared word until another process changes it (Linux's futex, without the
//! private flag, so that it works across processes on a shared mapping); elsewhere a short
//! sleep. (Under loom, `RateLimiter::sleep` and `wake_shared` model it.)

use super::{AtomicU32, Duration};

/// Sleep while `word` holds `seen`, at most `nap` (and at most `SHARED_NAP`).
#[cfg(all(target_os = "linux", not(loom)))]
pub(super) fn wait(word: &AtomicU32, seen: u32, nap: Option<Duration>) {
    let nap = nap.map_or(super::SHARED_NAP, |n| n.min(super::SHARED_NAP));
    let timeout = libc::timespec {
        tv_sec: nap.as_secs() as libc::time_t,
        tv_nsec: nap.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned u32 (an `AtomicU32` has u32's layout) for the
    // whole call; the timeout is a valid relative timespec; the kernel only reads them.
    // Any result (woken, the word already changed, timed out, interrupted) sends the
    // caller back to its try.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &timeout as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wake every process's thread asleep on `word`.
#[cfg(all(target_os = "linux", not(loom)))]
pub(super) fn wake_all(word: &AtomicU32) {
    // SAFETY: as in `wait`; a wake reads nothing but the address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(all(not(target_os = "linux"), not(loom)))]
pub(super) fn wait(_word: &AtomicU32, _seen: u32, nap: Option<Duration>) {
    let nap = nap.map_or(Duration::from_millis(1), |n| {
        n.min(Duration::from_millis(1))
    });
    std::thread::sleep(nap);
}

#[cfg(all(not(target_os = "linux"), not(loom)))]
pub(super) fn wake_all(_word: &AtomicU32) {}
