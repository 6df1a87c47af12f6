//! Columnar storage of transitions in a FIFO ring.
//!
//! A [`Schema`] fixed at construction names the columns, each with a [`DType`] and a shape
//! (elements per item). Each column is one contiguous typed array of `capacity x shape`
//! elements, so a sampled batch is gathered column by column into contiguous outputs.
//!
//! Items come in as [`ColumnSlice`]s (one per column, in schema order) and go out as
//! [`ColumnData`] (owned, typed vectors). The ring's cursor lives with the buffer that owns
//! the storage; this module only writes and reads slots.

mod columns;
mod schema;

pub use crate::dtype::DType;
use crate::error::{Error, Result};
pub(crate) use columns::ColumnRows;
pub use columns::{ColumnData, ColumnSlice, ColumnSliceMut, ColumnViews};
pub(crate) use schema::check_outputs;
pub use schema::{ColumnSpec, IntoDims, Schema};
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

    /// The schema and capacity of columns that live elsewhere (a shared mapping's:
    /// `buffer/slots/`); no column memory of its own.
    pub(crate) fn schema_only(schema: Schema, capacity: usize) -> Storage {
        Storage {
            schema,
            capacity,
            columns: Vec::new(),
        }
    }

    /// `capacity` slots of no columns (state words whose items live elsewhere).
    pub(crate) fn without_columns(capacity: usize) -> Storage {
        Storage {
            schema: Schema::default(),
            capacity,
            columns: Vec::new(),
        }
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
        for (c, (spec, src)) in self.schema.columns().iter().zip(columns).enumerate() {
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

    /// Write item `item` of each of `columns` (column position, data) into slot `slot`.
    ///
    /// # Safety
    /// `columns` passed [`Schema::check_some`] for more than `item` items; `slot < capacity`.
    pub(crate) unsafe fn write_some_unchecked(
        &mut self,
        slot: usize,
        columns: &[(usize, ColumnSlice<'_>)],
        item: usize,
    ) {
        debug_assert!(slot < self.capacity, "slot {slot} out of range");
        for (c, src) in columns {
            let n = self.schema.columns()[*c].shape * self.schema.columns()[*c].dtype.size();
            let row = &src.as_bytes()[item * n..(item + 1) * n];
            let dst = self.columns[*c].as_mut_bytes_ptr();
            // SAFETY: as in `write_unchecked`: the row lies inside the column (`slot <
            // capacity`), `&mut self` lets us write it, and `src` is of the column's dtype.
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
            let n = self.schema.columns()[c].shape * self.schema.columns()[c].dtype.size();
            (n, self.columns[c].as_slice(), out.column_base(c))
        };
        // SAFETY (both copies below): column `c` of `out` has room for `slots.len()` rows of
        // `n` bytes of this dtype (the caller's contract), so the copied bytes are a valid
        // value of it; the source row is a checked subslice of our own memory, a different
        // allocation.
        let row_bytes: usize = (self.schema.columns().iter().take(width))
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
