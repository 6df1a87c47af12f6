//! A column's elements, typed: borrowed for inserting ([`ColumnSlice`]), owned
//! ([`ColumnData`]), and the caller's memory to sample into ([`ColumnSliceMut`]).

use super::*;
use crate::error::{Error, Result};

/// Calls `$m!(Variant, type)` for every dtype.
macro_rules! for_each_dtype {
    ($m:ident) => {
        $m!(U8, u8);
        $m!(I32, i32);
        $m!(I64, i64);
        $m!(F32, f32);
        $m!(F64, f64);
        $m!(Bool, bool);
    };
}

/// Borrowed elements of one column, for inserting.
///
/// Made with `From` from a slice (or array, or `Vec`) of the column's element type:
/// `(&obs[..]).into()`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnSlice<'a> {
    /// `u8` elements
    U8(&'a [u8]),
    /// `i32` elements
    I32(&'a [i32]),
    /// `i64` elements
    I64(&'a [i64]),
    /// `f32` elements
    F32(&'a [f32]),
    /// `f64` elements
    F64(&'a [f64]),
    /// `bool` elements
    Bool(&'a [bool]),
}

/// Owned elements of one column: a gathered batch, or a column's whole storage.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    /// `u8` elements
    U8(Vec<u8>),
    /// `i32` elements
    I32(Vec<i32>),
    /// `i64` elements
    I64(Vec<i64>),
    /// `f32` elements
    F32(Vec<f32>),
    /// `f64` elements
    F64(Vec<f64>),
    /// `bool` elements
    Bool(Vec<bool>),
}

/// Caller memory that a sample writes one column into: `rows x shape` elements of the
/// column's type (a tensor's storage, say). Made with `From` from a mutable slice or `Vec`:
/// `(&mut obs[..]).into()`; from raw memory (a C caller's pointer) with
/// [`ColumnSliceMut::from_raw_parts`].
#[derive(Debug, PartialEq)]
pub enum ColumnSliceMut<'a> {
    /// `u8` elements
    U8(&'a mut [u8]),
    /// `i32` elements
    I32(&'a mut [i32]),
    /// `i64` elements
    I64(&'a mut [i64]),
    /// `f32` elements
    F32(&'a mut [f32]),
    /// `f64` elements
    F64(&'a mut [f64]),
    /// `bool` elements
    Bool(&'a mut [bool]),
}

/// Where sampled rows go, column by column: the crate's own [`ColumnData`] vectors or a
/// caller's [`ColumnSliceMut`]s; with no columns at all (`width() == 0`) nothing is copied
/// (index-only sampling). Otherwise the caller of [`column_base`](ColumnRows::column_base)
/// has checked that there is one destination per schema column, of the column's dtype, with
/// room for the rows it writes.
pub(crate) trait ColumnRows {
    /// Destinations: 0 (copy nothing) or one per schema column.
    fn width(&self) -> usize;
    /// Pointer to the first byte of column `c` (no reference to its elements is formed).
    fn column_base(&mut self, c: usize) -> *mut u8;
}

impl ColumnRows for [ColumnData] {
    fn width(&self) -> usize {
        self.len()
    }
    fn column_base(&mut self, c: usize) -> *mut u8 {
        self[c].as_mut_bytes_ptr()
    }
}

impl ColumnRows for [ColumnSliceMut<'_>] {
    fn width(&self) -> usize {
        self.len()
    }
    fn column_base(&mut self, c: usize) -> *mut u8 {
        self[c].as_mut_bytes_ptr()
    }
}

macro_rules! impl_from {
    ($v:ident, $t:ty) => {
        impl<'a> From<&'a [$t]> for ColumnSlice<'a> {
            fn from(s: &'a [$t]) -> Self {
                ColumnSlice::$v(s)
            }
        }
        impl<'a> From<&'a Vec<$t>> for ColumnSlice<'a> {
            fn from(s: &'a Vec<$t>) -> Self {
                ColumnSlice::$v(s)
            }
        }
        impl<'a, const N: usize> From<&'a [$t; N]> for ColumnSlice<'a> {
            fn from(s: &'a [$t; N]) -> Self {
                ColumnSlice::$v(s)
            }
        }
        impl From<Vec<$t>> for ColumnData {
            fn from(v: Vec<$t>) -> Self {
                ColumnData::$v(v)
            }
        }
        impl<'a> From<&'a mut [$t]> for ColumnSliceMut<'a> {
            fn from(s: &'a mut [$t]) -> Self {
                ColumnSliceMut::$v(s)
            }
        }
        impl<'a> From<&'a mut Vec<$t>> for ColumnSliceMut<'a> {
            fn from(s: &'a mut Vec<$t>) -> Self {
                ColumnSliceMut::$v(s)
            }
        }
    };
}
for_each_dtype!(impl_from);

/// A list of column views kept on the stack for up to [`ColumnViews::STACK`] columns (on the
/// heap beyond), for front ends that build one per call on a hot path: a staged
/// [`Writer`](crate::Writer)'s flush, and the C ABI's inserts and pushes, which then do not
/// allocate. Build it with `collect()` or [`ColumnViews::push`]; it derefs to the slice of
/// views the buffers take.
///
/// ```
/// use kary_replay::storage::ColumnViews;
/// let (obs, done) = ([1.0f32; 4], [false]);
/// let views: ColumnViews = [(&obs[..]).into(), (&done[..]).into()].into_iter().collect();
/// assert_eq!(views.len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ColumnViews<'a>(Views<'a>);

// The large variant is the point (it avoids the allocation); one lives on a call's stack.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Views<'a> {
    Stack([ColumnSlice<'a>; ColumnViews::STACK], usize),
    Heap(Vec<ColumnSlice<'a>>),
}

impl<'a> ColumnViews<'a> {
    /// Columns held without an allocation.
    pub const STACK: usize = 16;

    /// No views yet.
    pub fn new() -> Self {
        ColumnViews(Views::Stack([ColumnSlice::U8(&[]); Self::STACK], 0))
    }

    /// Append `view` (the first beyond [`ColumnViews::STACK`] moves the list to the heap).
    pub fn push(&mut self, view: ColumnSlice<'a>) {
        match &mut self.0 {
            Views::Stack(views, len) if *len < Self::STACK => {
                views[*len] = view;
                *len += 1;
            }
            Views::Stack(views, _) => {
                let mut heap = views.to_vec();
                heap.push(view);
                self.0 = Views::Heap(heap);
            }
            Views::Heap(views) => views.push(view),
        }
    }
}

impl Default for ColumnViews<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> FromIterator<ColumnSlice<'a>> for ColumnViews<'a> {
    fn from_iter<I: IntoIterator<Item = ColumnSlice<'a>>>(iter: I) -> Self {
        let mut views = ColumnViews::new();
        for view in iter {
            views.push(view);
        }
        views
    }
}

impl<'a> std::ops::Deref for ColumnViews<'a> {
    type Target = [ColumnSlice<'a>];
    fn deref(&self) -> &[ColumnSlice<'a>] {
        match &self.0 {
            Views::Stack(views, len) => &views[..*len],
            Views::Heap(views) => views,
        }
    }
}

impl<'a> ColumnSlice<'a> {
    /// Elements `range` (panics when out of range, as indexing does): item `i` of a batch
    /// of items of `shape` elements each is `range(i * shape..(i + 1) * shape)`.
    pub fn range(self, range: std::ops::Range<usize>) -> Self {
        match self {
            ColumnSlice::U8(v) => ColumnSlice::U8(&v[range]),
            ColumnSlice::I32(v) => ColumnSlice::I32(&v[range]),
            ColumnSlice::I64(v) => ColumnSlice::I64(&v[range]),
            ColumnSlice::F32(v) => ColumnSlice::F32(&v[range]),
            ColumnSlice::F64(v) => ColumnSlice::F64(&v[range]),
            ColumnSlice::Bool(v) => ColumnSlice::Bool(&v[range]),
        }
    }

    /// The first `elements` elements (at most all of them).
    pub(crate) fn head(self, elements: usize) -> Self {
        fn cut<T>(v: &[T], n: usize) -> &[T] {
            &v[..n.min(v.len())]
        }
        match self {
            ColumnSlice::U8(v) => ColumnSlice::U8(cut(v, elements)),
            ColumnSlice::I32(v) => ColumnSlice::I32(cut(v, elements)),
            ColumnSlice::I64(v) => ColumnSlice::I64(cut(v, elements)),
            ColumnSlice::F32(v) => ColumnSlice::F32(cut(v, elements)),
            ColumnSlice::F64(v) => ColumnSlice::F64(cut(v, elements)),
            ColumnSlice::Bool(v) => ColumnSlice::Bool(cut(v, elements)),
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            ColumnSlice::U8(_) => DType::U8,
            ColumnSlice::I32(_) => DType::I32,
            ColumnSlice::I64(_) => DType::I64,
            ColumnSlice::F32(_) => DType::F32,
            ColumnSlice::F64(_) => DType::F64,
            ColumnSlice::Bool(_) => DType::Bool,
        }
    }

    /// The elements' bytes (native byte order): the one view every copy goes through.
    pub fn as_bytes(&self) -> &'a [u8] {
        fn bytes<T>(x: &[T]) -> &[u8] {
            // SAFETY: the dtypes are plain integers, floats and bools, without padding, so
            // every byte of the slice is initialized and may be read as a `u8`; the length
            // is the slice's size in bytes, and `u8` needs no alignment.
            unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
        }
        match *self {
            ColumnSlice::U8(x) => x,
            ColumnSlice::I32(x) => bytes(x),
            ColumnSlice::I64(x) => bytes(x),
            ColumnSlice::F32(x) => bytes(x),
            ColumnSlice::F64(x) => bytes(x),
            ColumnSlice::Bool(x) => bytes(x),
        }
    }

    /// Pointer to the first element's bytes.
    pub(crate) fn as_bytes_ptr(&self) -> *const u8 {
        self.as_bytes().as_ptr()
    }

    /// A column of `len` elements of `dtype` at `data` (the C ABI's untyped pointers).
    ///
    /// # Safety
    /// `data` is aligned for `dtype` and valid for reads of `len` elements of it for `'a`,
    /// with no writer in that time; for [`DType::Bool`] every byte is 0 or 1. Any pointer
    /// (NULL included) will do when `len == 0`.
    pub unsafe fn from_raw_parts<'b>(dtype: DType, data: *const u8, len: usize) -> ColumnSlice<'b> {
        unsafe fn typed<'a, T>(data: *const u8, len: usize) -> &'a [T] {
            if len == 0 {
                return &[];
            }
            // SAFETY: forwarded from the caller.
            unsafe { std::slice::from_raw_parts(data.cast::<T>(), len) }
        }
        // SAFETY: forwarded from the caller, each arm with its own element type.
        unsafe {
            match dtype {
                DType::U8 => ColumnSlice::U8(typed(data, len)),
                DType::I32 => ColumnSlice::I32(typed(data, len)),
                DType::I64 => ColumnSlice::I64(typed(data, len)),
                DType::F32 => ColumnSlice::F32(typed(data, len)),
                DType::F64 => ColumnSlice::F64(typed(data, len)),
                DType::Bool => ColumnSlice::Bool(typed(data, len)),
            }
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ColumnSlice::U8(s) => s.len(),
            ColumnSlice::I32(s) => s.len(),
            ColumnSlice::I64(s) => s.len(),
            ColumnSlice::F32(s) => s.len(),
            ColumnSlice::F64(s) => s.len(),
            ColumnSlice::Bool(s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `dtype`, `len`, `is_empty` and `as_slice` of a column type whose variants each hold a
/// slice or vector of one dtype (`$enum::U8(v)` ... `$enum::Bool(v)`): read through the
/// [`ColumnSlice`] that borrows it.
macro_rules! through_as_slice {
    ($enum:ident) => {
        /// Element type.
        pub fn dtype(&self) -> DType {
            self.as_slice().dtype()
        }

        /// Number of elements.
        pub fn len(&self) -> usize {
            self.as_slice().len()
        }

        /// Whether there are no elements.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Borrow as a [`ColumnSlice`].
        pub fn as_slice(&self) -> ColumnSlice<'_> {
            match self {
                $enum::U8(v) => ColumnSlice::U8(v),
                $enum::I32(v) => ColumnSlice::I32(v),
                $enum::I64(v) => ColumnSlice::I64(v),
                $enum::F32(v) => ColumnSlice::F32(v),
                $enum::F64(v) => ColumnSlice::F64(v),
                $enum::Bool(v) => ColumnSlice::Bool(v),
            }
        }
    };
}

impl ColumnSliceMut<'_> {
    through_as_slice!(ColumnSliceMut);

    /// Pointer to the first element's bytes (no reference to the elements is formed).
    pub(crate) fn as_mut_bytes_ptr(&mut self) -> *mut u8 {
        match self {
            ColumnSliceMut::U8(x) => x.as_mut_ptr().cast(),
            ColumnSliceMut::I32(x) => x.as_mut_ptr().cast(),
            ColumnSliceMut::I64(x) => x.as_mut_ptr().cast(),
            ColumnSliceMut::F32(x) => x.as_mut_ptr().cast(),
            ColumnSliceMut::F64(x) => x.as_mut_ptr().cast(),
            ColumnSliceMut::Bool(x) => x.as_mut_ptr().cast(),
        }
    }

    /// Writable memory for `len` elements of `dtype` at `data` (the C ABI's untyped
    /// destinations).
    ///
    /// # Safety
    /// `data` is aligned for `dtype` and valid for reads and writes of `len` elements of it
    /// for `'a`, and nothing else accesses that memory in that time; for [`DType::Bool`]
    /// every byte is 0 or 1 (a sample only ever stores 0 or 1 there). Any pointer (NULL
    /// included) will do when `len == 0`.
    pub unsafe fn from_raw_parts<'a>(
        dtype: DType,
        data: *mut u8,
        len: usize,
    ) -> ColumnSliceMut<'a> {
        unsafe fn typed<'a, T>(data: *mut u8, len: usize) -> &'a mut [T] {
            if len == 0 {
                return &mut [];
            }
            // SAFETY: forwarded from the caller.
            unsafe { std::slice::from_raw_parts_mut(data.cast::<T>(), len) }
        }
        // SAFETY: forwarded from the caller, each arm with its own element type.
        unsafe {
            match dtype {
                DType::U8 => ColumnSliceMut::U8(typed(data, len)),
                DType::I32 => ColumnSliceMut::I32(typed(data, len)),
                DType::I64 => ColumnSliceMut::I64(typed(data, len)),
                DType::F32 => ColumnSliceMut::F32(typed(data, len)),
                DType::F64 => ColumnSliceMut::F64(typed(data, len)),
                DType::Bool => ColumnSliceMut::Bool(typed(data, len)),
            }
        }
    }
}

impl ColumnData {
    /// `len` zero elements of `dtype` (allocation failure is an error).
    pub(crate) fn zeros(dtype: DType, len: usize) -> Result<ColumnData> {
        /// Zeroed memory from the allocator (`calloc`: the kernel maps zero pages on first
        /// touch, so a large buffer costs nothing until it is written), fallibly.
        fn alloc<T: Copy>(len: usize) -> Result<Vec<T>> {
            let error = || Error::Allocation {
                bytes: len.saturating_mul(std::mem::size_of::<T>()),
            };
            if len == 0 {
                return Ok(Vec::new());
            }
            let layout = std::alloc::Layout::array::<T>(len).map_err(|_| error())?;
            // SAFETY: the layout's size is nonzero (`len > 0`, and every dtype has a size).
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                return Err(error());
            }
            // SAFETY: `p` comes from the global allocator with `T`'s layout for `len`
            // elements, all of them zero bytes, which is a valid value of every dtype (0,
            // 0.0, false); the vector takes ownership with that capacity.
            Ok(unsafe { Vec::from_raw_parts(p.cast::<T>(), len, len) })
        }
        Ok(match dtype {
            DType::U8 => ColumnData::U8(alloc(len)?),
            DType::I32 => ColumnData::I32(alloc(len)?),
            DType::I64 => ColumnData::I64(alloc(len)?),
            DType::F32 => ColumnData::F32(alloc(len)?),
            DType::F64 => ColumnData::F64(alloc(len)?),
            DType::Bool => ColumnData::Bool(alloc(len)?),
        })
    }

    /// Make the vector `len` elements long, zeroing those it gains (memory reserved
    /// fallibly: [`Error::Allocation`]); a vector long enough already keeps its capacity.
    pub(crate) fn resize_zeroed(&mut self, len: usize) -> Result<()> {
        macro_rules! fit {
            ($($v:ident => $zero:expr),*) => {
                match self {
                    $(ColumnData::$v(d) => {
                        crate::mem::reserve(d, len)?;
                        d.resize(len, $zero);
                    })*
                }
            };
        }
        fit!(U8 => 0, I32 => 0, I64 => 0, F32 => 0.0, F64 => 0.0, Bool => false);
        Ok(())
    }

    /// An empty vector of `dtype`.
    pub fn empty(dtype: DType) -> ColumnData {
        match dtype {
            DType::U8 => ColumnData::U8(Vec::new()),
            DType::I32 => ColumnData::I32(Vec::new()),
            DType::I64 => ColumnData::I64(Vec::new()),
            DType::F32 => ColumnData::F32(Vec::new()),
            DType::F64 => ColumnData::F64(Vec::new()),
            DType::Bool => ColumnData::Bool(Vec::new()),
        }
    }

    through_as_slice!(ColumnData);

    /// Elements `range` as a [`ColumnSliceMut`] (panics when out of range, as indexing does).
    pub(crate) fn slice_mut(&mut self, range: std::ops::Range<usize>) -> ColumnSliceMut<'_> {
        match self {
            ColumnData::U8(v) => ColumnSliceMut::U8(&mut v[range]),
            ColumnData::I32(v) => ColumnSliceMut::I32(&mut v[range]),
            ColumnData::I64(v) => ColumnSliceMut::I64(&mut v[range]),
            ColumnData::F32(v) => ColumnSliceMut::F32(&mut v[range]),
            ColumnData::F64(v) => ColumnSliceMut::F64(&mut v[range]),
            ColumnData::Bool(v) => ColumnSliceMut::Bool(&mut v[range]),
        }
    }

    /// Pointer to the first element's bytes (no reference to the elements is formed).
    pub(crate) fn as_mut_bytes_ptr(&mut self) -> *mut u8 {
        match self {
            ColumnData::U8(x) => x.as_mut_ptr().cast(),
            ColumnData::I32(x) => x.as_mut_ptr().cast(),
            ColumnData::I64(x) => x.as_mut_ptr().cast(),
            ColumnData::F32(x) => x.as_mut_ptr().cast(),
            ColumnData::F64(x) => x.as_mut_ptr().cast(),
            ColumnData::Bool(x) => x.as_mut_ptr().cast(),
        }
    }

    /// The elements as `f32`, if that is the dtype.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            ColumnData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as `i64`, if that is the dtype.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match self {
            ColumnData::I64(v) => Some(v),
            _ => None,
        }
    }
}
