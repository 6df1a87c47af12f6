//! Columnar storage of transitions in a FIFO ring.
//!
//! A [`Schema`] fixed at construction names the columns, each with a [`DType`] and a shape
//! (elements per item). Each column is one contiguous typed array of `capacity x shape`
//! elements, so a sampled batch is gathered column by column into contiguous outputs.
//!
//! Items come in as [`ColumnSlice`]s (one per column, in schema order) and go out as
//! [`ColumnData`] (owned, typed vectors). The ring's cursor lives with the buffer that owns
//! the storage; this module only writes and reads slots.

pub use crate::dtype::DType;
use crate::error::{Error, Result};

/// One column of a [`Schema`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSpec {
    /// Unique, non-empty name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Elements per item (>= 1): 4 for a CartPole observation, 1 for a reward.
    pub shape: usize,
}

/// The columns of every stored item, fixed at construction.
///
/// ```
/// use kary_replay::{DType, Schema};
/// let schema = Schema::new()
///     .column("obs", DType::F32, 4)
///     .column("action", DType::I64, 1)
///     .column("reward", DType::F32, 1)
///     .column("next_obs", DType::F32, 4)
///     .column("done", DType::Bool, 1);
/// assert_eq!(schema.item_bytes(), 4 * 4 + 8 + 4 + 4 * 4 + 1);
/// assert!(schema.validate().is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    columns: Vec<ColumnSpec>,
}

impl Schema {
    /// Shape `out` for `rows` sampled items: one vector per column of its dtype with
    /// `rows x shape` elements (kept when they fit, so a warm batch does not allocate).
    pub(crate) fn shape_output(&self, rows: usize, out: &mut Vec<ColumnData>) -> Result<()> {
        let specs = &self.columns;
        if out.len() != specs.len() || out.iter().zip(specs).any(|(o, c)| o.dtype() != c.dtype) {
            *out = specs.iter().map(|c| ColumnData::empty(c.dtype)).collect();
        }
        for (spec, dst) in self.columns.iter().zip(out) {
            let len = rows.checked_mul(spec.shape).ok_or(Error::SizeOverflow {
                what: "rows x shape of a sampled column",
            })?;
            macro_rules! fit {
                ($($v:ident => $zero:expr),*) => {
                    match dst {
                        $(ColumnData::$v(d) => {
                            crate::mem::reserve(d, len)?;
                            d.resize(len, $zero);
                        })*
                    }
                };
            }
            fit!(U8 => 0, I32 => 0, I64 => 0, F32 => 0.0, F64 => 0.0, Bool => false);
        }
        Ok(())
    }

    /// A schema with no columns (add them with [`Schema::column`]).
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Adds a column; [`Schema::validate`] (run by the buffer's config) checks the whole.
    pub fn column(mut self, name: impl Into<String>, dtype: DType, shape: usize) -> Schema {
        self.columns.push(ColumnSpec {
            name: name.into(),
            dtype,
            shape,
        });
        self
    }

    /// The columns, in order.
    pub fn columns(&self) -> &[ColumnSpec] {
        &self.columns
    }

    /// Index of the column called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Bytes per item, all columns together.
    pub fn item_bytes(&self) -> usize {
        self.columns.iter().map(|c| c.dtype.size() * c.shape).sum()
    }

    /// The number of items in `columns` (each `items x shape` long, of the right dtype),
    /// or the error that describes the first mismatch.
    pub fn count_items(&self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        let specs = self.columns();
        if columns.len() != specs.len() {
            return Err(Error::ColumnCount {
                expected: specs.len(),
                got: columns.len(),
            });
        }
        // One row, the common case (a staged writer's push), without the division.
        let items = match columns[0].len() {
            n if n == specs[0].shape => 1,
            n => n / specs[0].shape,
        };
        for (spec, col) in specs.iter().zip(columns) {
            if col.dtype() != spec.dtype {
                return Err(Error::ColumnType {
                    column: spec.name.clone(),
                    expected: spec.dtype,
                    got: col.dtype(),
                });
            }
            // Checked: the copies rely on `items * shape` elements being there, and a
            // wrapped product would let a short slice pass.
            let expected = items.checked_mul(spec.shape).ok_or(Error::SizeOverflow {
                what: "items x shape of a column",
            })?;
            if col.len() != expected {
                return Err(Error::ColumnLength {
                    column: spec.name.clone(),
                    expected,
                    got: col.len(),
                });
            }
        }
        Ok(items)
    }

    /// Checks caller memory for `rows` sampled items: one destination per column, each of
    /// the column's dtype ([`Error::ColumnType`]) and exactly `rows x shape` elements long
    /// ([`Error::ColumnCount`], [`Error::ColumnLength`], [`Error::SizeOverflow`]).
    pub fn check_destinations(&self, rows: usize, columns: &[ColumnSliceMut<'_>]) -> Result<()> {
        if columns.len() != self.columns.len() {
            return Err(Error::ColumnCount {
                expected: self.columns.len(),
                got: columns.len(),
            });
        }
        for (spec, col) in self.columns.iter().zip(columns) {
            if col.dtype() != spec.dtype {
                return Err(Error::ColumnType {
                    column: spec.name.clone(),
                    expected: spec.dtype,
                    got: col.dtype(),
                });
            }
            let expected = rows.checked_mul(spec.shape).ok_or(Error::SizeOverflow {
                what: "rows x shape of a sampled column",
            })?;
            if col.len() != expected {
                return Err(Error::ColumnLength {
                    column: spec.name.clone(),
                    expected,
                    got: col.len(),
                });
            }
        }
        Ok(())
    }

    /// At least one column; names non-empty and unique; shapes >= 1.
    pub fn validate(&self) -> Result<()> {
        if self.columns.is_empty() {
            return Err(Error::InvalidSchema("no columns".into()));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if c.name.is_empty() {
                return Err(Error::InvalidSchema(format!(
                    "column {i} has an empty name"
                )));
            }
            if c.shape == 0 {
                return Err(Error::InvalidSchema(format!(
                    "column {:?} has shape 0",
                    c.name
                )));
            }
            if self.columns[..i].iter().any(|d| d.name == c.name) {
                return Err(Error::InvalidSchema(format!(
                    "duplicate column {:?}",
                    c.name
                )));
            }
        }
        // `item_bytes` and every row size derived from it are then free of overflow.
        self.columns
            .iter()
            .try_fold(0usize, |total, c| {
                c.shape
                    .checked_mul(c.dtype.size())
                    .and_then(|row| total.checked_add(row))
            })
            .ok_or_else(|| {
                Error::InvalidSchema("an item's size in bytes overflows usize".into())
            })?;
        Ok(())
    }
}

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

impl ColumnSliceMut<'_> {
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
            ColumnSliceMut::U8(v) => ColumnSlice::U8(v),
            ColumnSliceMut::I32(v) => ColumnSlice::I32(v),
            ColumnSliceMut::I64(v) => ColumnSlice::I64(v),
            ColumnSliceMut::F32(v) => ColumnSlice::F32(v),
            ColumnSliceMut::F64(v) => ColumnSlice::F64(v),
            ColumnSliceMut::Bool(v) => ColumnSlice::Bool(v),
        }
    }

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
            ColumnData::U8(v) => ColumnSlice::U8(v),
            ColumnData::I32(v) => ColumnSlice::I32(v),
            ColumnData::I64(v) => ColumnSlice::I64(v),
            ColumnData::F32(v) => ColumnSlice::F32(v),
            ColumnData::F64(v) => ColumnSlice::F64(v),
            ColumnData::Bool(v) => ColumnSlice::Bool(v),
        }
    }

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

/// `capacity` slots of the schema's columns.
#[derive(Debug, Clone)]
pub struct Storage {
    schema: Schema,
    capacity: usize,
    columns: Vec<ColumnData>,
}

/// The widest row (bytes of all columns together) that the sequential buffer's gather
/// copies row by row; wider rows are copied column by column, where that order measured
/// faster (docs/performance.md, "Measurements behind design choices").
pub(crate) const GATHER_BY_ROW_MAX: usize = 128;

impl Storage {
    /// Zeroed storage for `capacity` items; fails cleanly when the memory is not there.
    pub fn new(schema: Schema, capacity: usize) -> Result<Storage> {
        schema.validate()?;
        let columns = schema
            .columns()
            .iter()
            .map(|c| {
                let len = c
                    .shape
                    .checked_mul(capacity)
                    .ok_or(Error::Allocation { bytes: usize::MAX })?;
                ColumnData::zeros(c.dtype, len)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Storage {
            schema,
            capacity,
            columns,
        })
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held by the columns.
    pub fn memory_bytes(&self) -> usize {
        self.capacity * self.schema.item_bytes()
    }

    /// The number of items in `columns` (see [`Schema::count_items`]).
    pub fn count_items(&self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        self.schema.count_items(columns)
    }

    /// Copy item `item` of `columns` (one slice per schema column, each holding whole
    /// items of the column's dtype) into `slot`. Checks everything it relies on: the
    /// columns against the schema ([`Error::ColumnCount`], [`Error::ColumnType`],
    /// [`Error::ColumnLength`]), `item` against the items they hold and `slot` against the
    /// capacity ([`Error::OutOfRange`]); on error nothing is written.
    ///
    /// ```
    /// use kary_replay::{storage::Storage, DType, Error, Schema};
    /// let mut storage = Storage::new(Schema::new().column("done", DType::Bool, 1), 4)?;
    /// storage.write(1, &[(&[true][..]).into()], 0)?;
    /// // A u8 slice is not a bool column, whatever bytes it holds.
    /// let err = storage.write(2, &[(&[2u8][..]).into()], 0).unwrap_err();
    /// assert!(matches!(err, Error::ColumnType { .. }));
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn write(&mut self, slot: usize, columns: &[ColumnSlice<'_>], item: usize) -> Result<()> {
        let items = self.count_items(columns)?;
        if slot >= self.capacity {
            return Err(Error::OutOfRange {
                index: slot,
                capacity: self.capacity,
            });
        }
        if item >= items {
            return Err(Error::OutOfRange {
                index: item,
                capacity: items,
            });
        }
        // SAFETY: `count_items` just checked `columns` against this storage's schema, and
        // `slot` and `item` are in range (checked above).
        unsafe { self.write_unchecked(slot, columns, item) };
        Ok(())
    }

    /// [`Storage::write`] without its checks, for the buffer's insert path, which checks a
    /// whole batch once.
    ///
    /// # Safety
    /// `columns` passed [`Storage::count_items`] of this storage (one slice per schema
    /// column, of its dtype, holding whole items), `item` is below the count it returned,
    /// and `slot < capacity`.
    pub(crate) unsafe fn write_unchecked(
        &mut self,
        slot: usize,
        columns: &[ColumnSlice<'_>],
        item: usize,
    ) {
        debug_assert!(slot < self.capacity, "slot {slot} out of range");
        for (c, (spec, src)) in self.schema.columns.iter().zip(columns).enumerate() {
            let n = spec.shape * spec.dtype.size();
            let row = &src.as_bytes()[item * n..(item + 1) * n];
            let dst = self.columns[c].as_mut_bytes_ptr();
            // SAFETY: `slot < capacity` (the caller's contract), so the row lies inside the
            // column's `capacity x n` bytes, which `&mut self` lets us write; `src` is a
            // column of the same dtype (the caller's contract), so its bytes are a valid
            // value of it.
            unsafe { crate::mem::copy_row_bytes(row.as_ptr(), dst.add(slot * n), n) };
        }
    }

    /// Gather the rows `slots` of every column into `out` (one entry per column, resized).
    /// Sizes are checked and memory reserved fallibly ([`Error::SizeOverflow`],
    /// [`Error::Allocation`]); on error `out` may have been reshaped but holds no rows yet.
    pub fn gather(&self, slots: &[usize], out: &mut Vec<ColumnData>) -> Result<()> {
        if let Some(&slot) = slots.iter().find(|&&s| s >= self.capacity) {
            return Err(Error::OutOfRange {
                index: slot,
                capacity: self.capacity,
            });
        }
        self.shape_output(slots.len(), out)?;
        // SAFETY: `shape_output` just shaped `out` for `slots.len()` rows of each column.
        unsafe { self.gather_rows(slots, &mut out[..]) };
        Ok(())
    }

    /// Copy the rows `slots` of every column into rows `0..slots.len()` of `out`, whose
    /// columns the caller shaped ([`Storage::shape_output`]) or checked
    /// ([`Schema::check_destinations`]) for at least that many rows. Each row is prefetched
    /// [`PREFETCH_AHEAD`](crate::mem::PREFETCH_AHEAD) rows ahead. Rows of at most
    /// [`GATHER_BY_ROW_MAX`] bytes (all columns together) are copied row by row, wider
    /// ones column by column (see the constant for the measurement). A slot out of range
    /// panics before anything is copied for it.
    ///
    /// # Safety
    /// `out` has no columns, or one per schema column, each of the column's dtype with room
    /// for at least `slots.len()` rows.
    pub(crate) unsafe fn gather_rows<D: ColumnRows + ?Sized>(&self, slots: &[usize], out: &mut D) {
        let width = out.width().min(self.columns.len());
        // (row bytes, source column, destination) of column `c`.
        let column = |c: usize, out: &mut D| {
            let n = self.schema.columns[c].shape * self.schema.columns[c].dtype.size();
            (n, self.columns[c].as_slice(), out.column_base(c))
        };
        // SAFETY (both copies below): column `c` of `out` has room for `slots.len()` rows of
        // `n` bytes of this dtype (the caller's contract), so the copied bytes are a valid
        // value of it; the source row is a checked subslice of our own memory, a different
        // allocation.
        let row_bytes: usize = (self.schema.columns.iter().take(width))
            .map(|c| c.shape * c.dtype.size())
            .sum();
        if row_bytes <= GATHER_BY_ROW_MAX {
            for (row, &slot) in slots.iter().enumerate() {
                if let Some(&ahead) = slots.get(row + crate::mem::PREFETCH_AHEAD) {
                    for c in 0..width {
                        let (n, src, _) = column(c, out);
                        let src = src.as_bytes();
                        crate::mem::prefetch_bytes(src.as_ptr().wrapping_add(ahead * n), n);
                    }
                }
                for c in 0..width {
                    let (n, src, dst) = column(c, out);
                    let item = &src.as_bytes()[slot * n..(slot + 1) * n];
                    // SAFETY: see above.
                    unsafe { crate::mem::copy_row_bytes(item.as_ptr(), dst.add(row * n), n) };
                }
            }
        } else {
            for c in 0..width {
                let (n, src, dst) = column(c, out);
                let src = src.as_bytes();
                for (row, &slot) in slots.iter().enumerate() {
                    if let Some(&ahead) = slots.get(row + crate::mem::PREFETCH_AHEAD) {
                        crate::mem::prefetch_bytes(src.as_ptr().wrapping_add(ahead * n), n);
                    }
                    let item = &src[slot * n..(slot + 1) * n];
                    // SAFETY: see above.
                    unsafe { crate::mem::copy_row_bytes(item.as_ptr(), dst.add(row * n), n) };
                }
            }
        }
    }

    /// Base pointer of column `index`'s elements, for [`crate::buffer`]'s shared storage,
    /// which reaches the memory only through such pointers once it has them.
    pub(crate) fn column_base(&mut self, index: usize) -> *mut u8 {
        self.columns[index].as_mut_bytes_ptr()
    }

    /// Make `out` hold one column per schema column, each `rows x shape` elements long
    /// (reusing its allocations when the dtypes match).
    ///
    /// It reads only the schema, never the columns' memory, so it may run while other
    /// threads write slots.
    pub(crate) fn shape_output(&self, rows: usize, out: &mut Vec<ColumnData>) -> Result<()> {
        self.schema.shape_output(rows, out)
    }

    /// The bytes of column `index` (`capacity x shape` elements), to be filled (a checkpoint's
    /// restore).
    ///
    /// # Safety
    /// Every byte written into a bool column is 0 or 1 (any bytes are valid for the other
    /// dtypes).
    pub(crate) unsafe fn column_bytes_mut(&mut self, index: usize) -> &mut [u8] {
        let column = &mut self.columns[index];
        let len = column.len() * column.dtype().size();
        let base = column.as_mut_bytes_ptr();
        // SAFETY: `base` points to the column's `len` initialized bytes, borrowed mutably
        // through `&mut self` for the slice's lifetime; `u8` is valid for any byte, and the
        // caller writes only valid values for the column's dtype.
        unsafe { std::slice::from_raw_parts_mut(base, len) }
    }

    /// The whole of column `index` (`capacity x shape` elements), for inspection.
    pub fn column(&self, index: usize) -> &ColumnData {
        &self.columns[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new()
            .column("obs", DType::F32, 3)
            .column("action", DType::I64, 1)
            .column("done", DType::Bool, 1)
    }

    #[test]
    fn schema_validation() {
        assert!(Schema::new().validate().is_err());
        assert!(Schema::new().column("", DType::U8, 1).validate().is_err());
        assert!(Schema::new().column("a", DType::U8, 0).validate().is_err());
        assert!(Schema::new()
            .column("a", DType::U8, 1)
            .column("a", DType::F32, 1)
            .validate()
            .is_err());
        assert_eq!(schema().position("done"), Some(2));
        assert_eq!(schema().item_bytes(), 12 + 8 + 1);
    }

    #[test]
    fn column_views_hold_any_number_of_columns_in_order() {
        let data: Vec<[f32; 1]> = (0..40).map(|i| [i as f32]).collect();
        for n in [0, 1, ColumnViews::STACK, ColumnViews::STACK + 1, 40] {
            let views: ColumnViews = data[..n]
                .iter()
                .map(|d| ColumnSlice::from(&d[..]))
                .collect();
            assert_eq!(views.len(), n);
            for (i, v) in views.iter().enumerate() {
                assert_eq!(*v, ColumnSlice::F32(&data[i][..]));
            }
        }
    }

    #[test]
    fn write_and_gather_round_trip() {
        let mut st = Storage::new(schema(), 4).unwrap();
        let obs: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let act = [10i64, 11];
        let done = [false, true];
        let cols = [(&obs).into(), (&act).into(), (&done).into()];
        assert_eq!(st.count_items(&cols).unwrap(), 2);
        st.write(3, &cols, 0).unwrap();
        st.write(1, &cols, 1).unwrap();
        let mut out = Vec::new();
        st.gather(&[1, 3, 1], &mut out).unwrap();
        assert_eq!(
            out[0],
            ColumnData::F32(vec![3., 4., 5., 0., 1., 2., 3., 4., 5.])
        );
        assert_eq!(out[1], ColumnData::I64(vec![11, 10, 11]));
        assert_eq!(out[2], ColumnData::Bool(vec![true, false, true]));
    }

    #[test]
    fn gather_copies_narrow_rows_and_wide_rows_alike() {
        // Rows of 5 bytes (copied row by row) and of 161 bytes (column by column), more rows
        // than the prefetch distance, slots repeated and out of order.
        for shape in [1, 40] {
            let row_bytes = shape * 4 + 1;
            assert_eq!(row_bytes <= GATHER_BY_ROW_MAX, shape == 1);
            let schema =
                Schema::new()
                    .column("obs", DType::F32, shape)
                    .column("flag", DType::U8, 1);
            let capacity = 13;
            let mut st = Storage::new(schema, capacity).unwrap();
            for slot in 0..capacity {
                let obs = vec![slot as f32 + 0.25; shape];
                st.write(slot, &[(&obs).into(), (&[slot as u8][..]).into()], 0)
                    .unwrap();
            }
            let slots: Vec<usize> = (0..30).map(|r| (r * 5 + 2) % capacity).collect();
            let mut out = Vec::new();
            st.gather(&slots, &mut out).unwrap();
            let want_obs: Vec<f32> = (slots.iter())
                .flat_map(|&i| std::iter::repeat_n(i as f32 + 0.25, shape))
                .collect();
            let want_flag: Vec<u8> = slots.iter().map(|&i| i as u8).collect();
            assert_eq!(out[0], ColumnData::F32(want_obs), "shape {shape}");
            assert_eq!(out[1], ColumnData::U8(want_flag), "shape {shape}");
        }
    }

    #[test]
    fn mismatches_are_reported() {
        let st = Storage::new(schema(), 4).unwrap();
        let obs = [0f32; 6];
        let act = [0i64; 2];
        let done = [false; 2];
        assert!(matches!(
            st.count_items(&[(&obs).into(), (&act).into()]),
            Err(Error::ColumnCount {
                expected: 3,
                got: 2
            })
        ));
        let act32 = [0i32; 2];
        assert!(matches!(
            st.count_items(&[(&obs).into(), (&act32).into(), (&done).into()]),
            Err(Error::ColumnType { .. })
        ));
        let short = [false; 1];
        assert!(matches!(
            st.count_items(&[(&obs).into(), (&act).into(), (&short).into()]),
            Err(Error::ColumnLength {
                expected: 2,
                got: 1,
                ..
            })
        ));
        let ragged = [0f32; 7];
        assert!(matches!(
            st.count_items(&[(&ragged).into(), (&act).into(), (&done).into()]),
            Err(Error::ColumnLength {
                expected: 6,
                got: 7,
                ..
            })
        ));
    }

    #[test]
    fn write_checks_what_it_copies_and_changes_nothing_on_error() {
        // A u8 slice holding 2 into a bool column would put an invalid `bool` in memory:
        // Miri runs this test (the test command's storage:: filter).
        let mut st = Storage::new(Schema::new().column("done", DType::Bool, 1), 2).unwrap();
        assert!(matches!(
            st.write(0, &[(&[2u8][..]).into()], 0),
            Err(Error::ColumnType { .. })
        ));
        let yes = [true];
        assert!(matches!(
            st.write(2, &[(&yes[..]).into()], 0),
            Err(Error::OutOfRange {
                index: 2,
                capacity: 2
            })
        ));
        assert!(matches!(
            st.write(0, &[(&yes[..]).into()], 1),
            Err(Error::OutOfRange {
                index: 1,
                capacity: 1
            })
        ));
        assert!(matches!(
            st.write(0, &[(&yes[..]).into(), (&yes[..]).into()], 0),
            Err(Error::ColumnCount { .. })
        ));
        assert_eq!(st.column(0), &ColumnData::Bool(vec![false, false]));
        st.write(1, &[(&yes[..]).into()], 0).unwrap();
        let mut out = Vec::new();
        st.gather(&[1, 0], &mut out).unwrap();
        assert_eq!(out[0], ColumnData::Bool(vec![true, false]));
        assert!(matches!(
            st.gather(&[0, 5], &mut out),
            Err(Error::OutOfRange { index: 5, .. })
        ));
    }

    #[test]
    fn huge_capacity_fails_cleanly() {
        let s = Schema::new().column("x", DType::F64, 1 << 20);
        assert!(matches!(
            Storage::new(s, 1 << 40),
            Err(Error::Allocation { .. })
        ));
    }
}
