//! Low-level memory helpers every layer uses: fallible reservation, the row copy, and cache
//! prefetch hints. They depend on nothing else in the crate, so the tree, the storage and the
//! buffers can all call them without importing each other.

use crate::error::{Error, Result};

/// Make `v` able to hold `len` elements without reallocating; a failure is
/// [`Error::Allocation`], never an abort.
pub(crate) fn reserve<T>(v: &mut Vec<T>, len: usize) -> Result<()> {
    v.try_reserve(len.saturating_sub(v.len()))
        .map_err(|_| Error::Allocation {
            bytes: len.saturating_mul(std::mem::size_of::<T>()),
        })
}

/// Copy one row of `n` bytes from `src` to `dst`: the row copy of every buffer (insert,
/// a writer's stage, sample). The common row sizes of RL transitions (a few scalars or a short
/// vector: up to 64 bytes) are fixed-size copies, which compile to a few moves; others go
/// through `copy_nonoverlapping` with a run-time length, a call into libc's `memmove`
/// whose fixed cost is most of a short row's copy when the row is in cache (a writer's
/// rows are).
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]`(src, dst, n)`: `src` readable and `dst` writable
/// for `n` bytes, the two not overlapping.
#[inline(always)]
pub(crate) unsafe fn copy_row_bytes(src: *const u8, dst: *mut u8, n: usize) {
    macro_rules! by_size {
        ($($k:literal)*) => {
            match n {
                // SAFETY: the caller's contract, with `n == $k`.
                $($k => unsafe { std::ptr::copy_nonoverlapping(src, dst, $k) },)*
                // SAFETY: the caller's contract.
                _ => unsafe { std::ptr::copy_nonoverlapping(src, dst, n) },
            }
        };
    }
    by_size!(1 2 4 8 12 16 20 24 28 32 40 48 56 64)
}

/// Copy `n` bytes from `src` to `dst`, storing into `dst` with relaxed atomic stores (words
/// where `dst` is 8-byte aligned, bytes at the ends): a sequence lock's writer, whose
/// destination readers may load at the same time.
///
/// # Safety
/// `src` is valid for reading `n` bytes and no one writes them meanwhile; `dst` is valid
/// for `n` bytes that every other thread accesses only through this function and
/// [`copy_row_from_atomic`] (atomics of the same size at the same addresses: the split
/// depends only on the address).
#[cfg(not(loom))]
pub(crate) unsafe fn copy_row_to_atomic(src: *const u8, dst: *mut u8, n: usize) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
    let head = dst.align_offset(8).min(n);
    let words = (n - head) / 8;
    // SAFETY: every access below is inside the `n` bytes of both ranges; the word accesses
    // are 8-byte aligned in `dst` (after `head` bytes); `src` is read unaligned.
    unsafe {
        for i in 0..head {
            (*dst.add(i).cast::<AtomicU8>()).store(*src.add(i), Relaxed);
        }
        for w in 0..words {
            let at = head + w * 8;
            let value = src.add(at).cast::<u64>().read_unaligned();
            (*dst.add(at).cast::<AtomicU64>()).store(value, Relaxed);
        }
        for i in head + words * 8..n {
            (*dst.add(i).cast::<AtomicU8>()).store(*src.add(i), Relaxed);
        }
    }
}

/// Copy `n` bytes from `src` to `dst`, loading from `src` with relaxed atomic loads (the
/// split of [`copy_row_to_atomic`]): a sequence lock's reader, which checks afterwards
/// whether a writer was at work.
///
/// # Safety
/// `src` is valid for `n` bytes accessed by others only through [`copy_row_to_atomic`] and
/// this function; `dst` is valid for writing `n` bytes that no one else accesses, and any
/// bytes are a valid value for it until the caller's check decides to keep them.
#[cfg(not(loom))]
pub(crate) unsafe fn copy_row_from_atomic(src: *const u8, dst: *mut u8, n: usize) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
    let head = src.align_offset(8).min(n);
    let words = (n - head) / 8;
    // SAFETY: every access below is as in `copy_row_to_atomic`, with the roles swapped.
    unsafe {
        for i in 0..head {
            *dst.add(i) = (*src.add(i).cast::<AtomicU8>()).load(Relaxed);
        }
        for w in 0..words {
            let at = head + w * 8;
            let value = (*src.add(at).cast::<AtomicU64>()).load(Relaxed);
            dst.add(at).cast::<u64>().write_unaligned(value);
        }
        for i in head + words * 8..n {
            *dst.add(i) = (*src.add(i).cast::<AtomicU8>()).load(Relaxed);
        }
    }
}

/// How many items ahead batched writes prefetch their leaf.
pub(crate) const PREFETCH_AHEAD: usize = 8;

/// Ask for the cache line holding `ptr`: a hint, never a read (any address is fine).
#[inline(always)]
pub(crate) fn prefetch_line<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults and reads nothing into the program,
        // whatever the address; the pointer is not dereferenced.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// Ask for every cache line of the `len` bytes from `ptr` (a hint, as [`prefetch_line`]:
/// any address is fine). Row copies call it a few rows ahead: a whole row's misses then
/// overlap with the copies before it, where the first line alone left the rest of a long
/// row to the hardware prefetcher, one miss after another (a SplitLock learner
/// at 1028 B took 24-28.5 us for 64 rows with the first line, 20.4-20.8 with all).
#[inline(always)]
pub(crate) fn prefetch_bytes<T>(ptr: *const T, len: usize) {
    let start = ptr.cast::<u8>();
    let mut offset = 0;
    while offset < len {
        prefetch_line(start.wrapping_add(offset));
        offset += 64;
    }
    // A row that does not start on a line boundary ends in one line more.
    if len > 0 {
        prefetch_line(start.wrapping_add(len - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_copy_of_any_size_copies_exactly_its_bytes() {
        // Every fixed size of `copy_row_bytes`, the sizes beside them, and the run-time path.
        let src: Vec<u8> = (0..=255u8).collect();
        for n in 0..=130 {
            for offset in [0, 1, 3] {
                let mut dst = vec![0xAAu8; 140];
                // SAFETY: `src` has 256 bytes, `offset + n <= 133`; `dst` has 140 bytes and
                // is written from byte 2 (`2 + n <= 132`); different allocations.
                unsafe { copy_row_bytes(src.as_ptr().add(offset), dst.as_mut_ptr().add(2), n) };
                assert_eq!(&dst[2..2 + n], &src[offset..offset + n], "n = {n}");
                assert!(
                    dst[..2].iter().chain(&dst[2 + n..]).all(|&b| b == 0xAA),
                    "n = {n}"
                );
            }
        }
    }
}
