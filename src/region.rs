//! Where a concurrent buffer's shared state lives: the heap of one process, or a mapping
//! that several processes share (`buffer/shm`).
//!
//! The lock-free buffer's state words, tree nodes, counters and columns are each allocated
//! from a [`Region`] when the buffer is built. On the heap each is its own allocation, as
//! any Rust collection; in a mapping they follow each other at offsets fixed by the order
//! of the allocations, so two processes that build the same configuration in the same order
//! find every array at the same offset. The protocol that runs over them is the same code
//! either way: only where the arrays are differs.
//!
//! A mapped region has two modes: `fresh` (the creator, which writes each element's
//! initial value) and attached (a later process, which takes the values it finds). A
//! measuring region allocates on the heap and counts the bytes a mapping would need, so the
//! creator can size the file before it maps it; its column bytes are not allocated at all.

use std::ptr::NonNull;
#[cfg(all(unix, not(loom)))]
use std::sync::Arc;

use crate::error::{Error, Result};

/// Elements that may live in memory shared by processes: no pointers, no destructor that
/// matters, valid for any bit pattern a previous process of the same build left (atomics,
/// bytes, and structs of them).
///
/// # Safety
/// The type has no drop glue, holds no pointer, and every bit pattern of it that this
/// crate's code stores is valid when read by another process of the same build.
pub(crate) unsafe trait Shareable: Sync {}

// SAFETY: plain integers and atomics of them: any bits are valid, nothing to drop.
unsafe impl Shareable for u8 {}
// SAFETY: as above.
unsafe impl Shareable for crate::sync::AtomicU64 {}
// SAFETY: as above (an `AtomicU64` holding an f64's bits).
unsafe impl Shareable for crate::sync::AtomicF64 {}
// SAFETY: padding around a shareable value.
unsafe impl<T: Shareable> Shareable for crate::sync::CachePadded<T> {}

/// A shared mapping of a file (a memfd or a file under /dev/shm), unmapped when the last
/// [`RegionBuf`] or handle using it is dropped.
#[cfg(all(unix, not(loom)))]
#[derive(Debug)]
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

#[cfg(all(unix, not(loom)))]
impl Mapping {
    /// Map `len` bytes of `fd` shared, readable and writable.
    pub(crate) fn map(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> std::io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh mapping chosen by the kernel (no address given), of a file we hold
        // open; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            base: NonNull::new(p.cast()).expect("mmap returned a null mapping"),
            len,
        })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(all(unix, not(loom)))]
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; nothing borrows it any more (every
        // `RegionBuf` into it holds an `Arc` to this).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

// SAFETY: the mapping is a range of addresses; what is shared through it is accessed only
// through `RegionBuf`s of `Shareable` (Sync) elements.
#[cfg(all(unix, not(loom)))]
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
#[cfg(all(unix, not(loom)))]
unsafe impl Sync for Mapping {}

/// Where the next allocation goes.
pub(crate) enum Region {
    /// Each array its own heap allocation: one process.
    Heap,
    /// Heap allocations, counting the bytes a mapping would take (`next`); column bytes are
    /// not allocated.
    #[cfg_attr(loom, allow(dead_code))]
    Measure { next: usize },
    /// Consecutive arrays of a shared mapping from `next`; `fresh`: write initial values.
    #[cfg(all(unix, not(loom)))]
    Mapped {
        map: Arc<Mapping>,
        next: usize,
        fresh: bool,
    },
}

/// One array allocated from a [`Region`]: dereferences to its elements.
pub(crate) struct RegionBuf<T> {
    ptr: NonNull<T>,
    len: usize,
    /// What keeps the memory alive.
    _keep: Keep<T>,
}

enum Keep<T> {
    Heap(#[allow(dead_code)] Vec<std::mem::MaybeUninit<T>>),
    #[cfg(all(unix, not(loom)))]
    Mapped(#[allow(dead_code)] Arc<Mapping>),
    Nothing,
}

// SAFETY: the elements are reached only as `&T` (shared) through `Deref`; `T: Sync` makes
// that safe from any thread, and the owner (a `Vec` or the mapping) is itself movable across
// threads.
unsafe impl<T: Sync + Send> Send for RegionBuf<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Sync + Send> Sync for RegionBuf<T> {}

impl<T> std::ops::Deref for RegionBuf<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialized elements that `_keep` keeps alive, and
        // only shared references to them are ever formed.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::fmt::Debug for RegionBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionBuf")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<T> RegionBuf<T> {
    /// The first element's address (for the columns, reached through raw pointers).
    pub(crate) fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }
}

/// One value allocated from a [`Region`]: dereferences to it.
pub(crate) struct RegionBox<T>(RegionBuf<T>);

impl<T> std::ops::Deref for RegionBox<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a `RegionBox` holds exactly one initialized element (`Region::alloc_one`),
        // kept alive by its `RegionBuf`, reached only through shared references.
        unsafe { &*self.0.ptr.as_ptr() }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for RegionBox<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

fn round_up(n: usize, align: usize) -> Option<usize> {
    n.checked_add(align - 1).map(|n| n & !(align - 1))
}

impl Region {
    /// Whether allocations go to the heap for good (a buffer of one process).
    pub(crate) fn is_heap(&self) -> bool {
        matches!(self, Region::Heap)
    }

    /// Whether the arrays go into a mapping that other processes share.
    pub(crate) fn is_shared(&self) -> bool {
        !matches!(self, Region::Heap | Region::Measure { .. })
    }

    /// Whether allocations write their initial values (all but a mapping that another
    /// process initialized).
    pub(crate) fn is_fresh(&self) -> bool {
        match self {
            Region::Heap | Region::Measure { .. } => true,
            #[cfg(all(unix, not(loom)))]
            Region::Mapped { fresh, .. } => *fresh,
        }
    }

    /// Bytes a mapping needs for what was allocated so far (0 on the heap).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn used(&self) -> usize {
        match self {
            Region::Heap => 0,
            Region::Measure { next } => *next,
            #[cfg(all(unix, not(loom)))]
            Region::Mapped { next, .. } => *next,
        }
    }

    /// Take `bytes` at `align` (a power of two) from the mapping's counter: the offset.
    fn take(next: &mut usize, bytes: usize, align: usize) -> Result<usize> {
        let offset = round_up(*next, align).ok_or(Error::Allocation { bytes })?;
        *next = offset
            .checked_add(bytes)
            .ok_or(Error::Allocation { bytes })?;
        Ok(offset)
    }

    /// `len` elements made by `fill`, the first at a multiple of `align` bytes (a power of
    /// two). In a mapping that another process initialized, the elements are taken as found.
    pub(crate) fn alloc<T: Shareable>(
        &mut self,
        len: usize,
        align: usize,
        fill: impl FnMut() -> T,
    ) -> Result<RegionBuf<T>> {
        let align = align.max(std::mem::align_of::<T>());
        debug_assert!(align.is_power_of_two());
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::Allocation { bytes: usize::MAX })?;
        match self {
            Region::Heap => heap(len, align, fill),
            Region::Measure { next } => {
                Region::take(next, bytes, align)?;
                heap(len, align, fill)
            }
            #[cfg(all(unix, not(loom)))]
            Region::Mapped { map, next, fresh } => {
                let offset = Region::take(next, bytes, align)?;
                if *next > map.len() {
                    return Err(Error::Allocation { bytes: *next });
                }
                // SAFETY: `offset + bytes <= map.len()` (checked), so the range lies in the
                // mapping; the base is page-aligned, so the offset's alignment is the
                // pointer's.
                let ptr = unsafe { map.base().add(offset) }.cast::<T>();
                if *fresh {
                    let mut fill = fill;
                    for i in 0..len {
                        // SAFETY: inside the mapping (above), aligned for `T`, and not yet
                        // shared with any other process or thread (the creator initializes
                        // before it publishes the header).
                        unsafe { ptr.add(i).write(fill()) };
                    }
                }
                Ok(RegionBuf {
                    ptr: NonNull::new(ptr).expect("a mapping is not at address 0"),
                    len,
                    _keep: Keep::Mapped(Arc::clone(map)),
                })
            }
        }
    }

    /// One value, at a multiple of `align` bytes (see [`Region::alloc`]).
    pub(crate) fn alloc_one<T: Shareable>(
        &mut self,
        align: usize,
        value: T,
    ) -> Result<RegionBox<T>> {
        let mut value = Some(value);
        let buf = self.alloc(1, align, || {
            value.take().expect("one value for one element")
        })?;
        Ok(RegionBox(buf))
    }

    /// `len` zero bytes for a column, the first at a multiple of `align`; `None` on the
    /// heap, where the columns are the storage's own (`Storage::new`). A measuring region
    /// counts them and allocates nothing (the result is empty and never read).
    pub(crate) fn alloc_zeroed_bytes(
        &mut self,
        len: usize,
        align: usize,
    ) -> Result<Option<RegionBuf<u8>>> {
        match self {
            Region::Heap => Ok(None),
            Region::Measure { next } => {
                Region::take(next, len, align)?;
                Ok(Some(RegionBuf {
                    ptr: NonNull::dangling(),
                    len: 0,
                    _keep: Keep::Nothing,
                }))
            }
            #[cfg(all(unix, not(loom)))]
            Region::Mapped { map, next, .. } => {
                let offset = Region::take(next, len, align)?;
                if *next > map.len() {
                    return Err(Error::Allocation { bytes: *next });
                }
                // A fresh mapping's file is zero (reserved, never written): nothing to fill.
                // SAFETY: inside the mapping, as in `alloc`.
                let ptr = unsafe { map.base().add(offset) };
                Ok(Some(RegionBuf {
                    ptr: NonNull::new(ptr).expect("a mapping is not at address 0"),
                    len,
                    _keep: Keep::Mapped(Arc::clone(map)),
                }))
            }
        }
    }
}

/// `len` elements on the heap, the first at a multiple of `align` bytes (`fill` called once
/// per element). The elements have no drop glue (`Shareable`), so the padding around them
/// stays uninitialized and nothing is dropped.
fn heap<T>(len: usize, align: usize, mut fill: impl FnMut() -> T) -> Result<RegionBuf<T>> {
    debug_assert!(!std::mem::needs_drop::<T>());
    let size = std::mem::size_of::<T>().max(1);
    let pad = align.div_ceil(size);
    let total = len
        .checked_add(pad)
        .ok_or(Error::Allocation { bytes: usize::MAX })?;
    let mut raw: Vec<std::mem::MaybeUninit<T>> = Vec::new();
    raw.try_reserve_exact(total)
        .map_err(|_| Error::Allocation {
            bytes: total.saturating_mul(size),
        })?;
    raw.resize_with(total, std::mem::MaybeUninit::uninit);
    let misalign = raw.as_ptr() as usize % align;
    let start = if misalign == 0 {
        0
    } else {
        (align - misalign).div_ceil(size).min(pad)
    };
    for slot in &mut raw[start..start + len] {
        slot.write(fill());
    }
    // SAFETY: `start <= pad`, so `start + len <= total` elements of the vector, all
    // initialized just above.
    let ptr = unsafe { raw.as_mut_ptr().add(start) }.cast::<T>();
    Ok(RegionBuf {
        ptr: NonNull::new(ptr).expect("a vector's buffer is not null"),
        len,
        _keep: Keep::Heap(raw),
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;

    #[test]
    fn heap_arrays_are_aligned_and_filled() {
        for align in [8, 64, 128, 4096] {
            for len in [0, 1, 7, 100] {
                let b = Region::Heap
                    .alloc(len, align, || AtomicU64::new(7))
                    .unwrap();
                assert_eq!(b.as_ptr() as usize % align, 0, "align {align} len {len}");
                assert_eq!(b.len(), len);
                assert!(b
                    .iter()
                    .all(|a| a.load(crate::sync::Ordering::Relaxed) == 7));
            }
        }
    }

    #[test]
    fn a_measuring_region_counts_aligned_offsets() {
        let mut r = Region::Measure { next: 0 };
        r.alloc(3, 8, || 0u8).unwrap();
        assert_eq!(r.used(), 3);
        r.alloc(2, 64, || AtomicU64::new(0)).unwrap();
        assert_eq!(r.used(), 64 + 16);
        assert_eq!(r.alloc_zeroed_bytes(10, 128).unwrap().unwrap().len(), 0);
        assert_eq!(r.used(), 128 + 10);
    }
}
