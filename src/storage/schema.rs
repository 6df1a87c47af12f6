//! The schema: the columns' names, dtypes and shapes, and the checks of what callers hand
//! in and out against it.

use super::*;
use crate::error::{Error, Result};

/// One column of a [`Schema`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSpec {
    /// Unique, non-empty name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Elements per item (>= 1): 4 for a CartPole observation, 1 for a reward, 7056 for
    /// an 84x84 frame. The product of `dims`.
    pub shape: usize,
    /// The per-item dimensions, row-major: `[4]`, `[84, 84]`, `[]` for a scalar. Storage
    /// and copies see `shape` elements per item; a checkpoint's column file has the shape
    /// `(capacity, *dims)` and the C and Python interfaces hand the dimensions back.
    pub dims: Vec<usize>,
}

/// The per-item dimensions of a column, as [`Schema::column`] takes them: a width `n`
/// (one dimension, `[n]`), an array or a slice of dimensions (`[84, 84]`; `[]` for a
/// scalar), or a `Vec`.
pub trait IntoDims {
    /// The dimensions.
    fn into_dims(self) -> Vec<usize>;
}

impl IntoDims for usize {
    fn into_dims(self) -> Vec<usize> {
        vec![self]
    }
}

impl<const N: usize> IntoDims for [usize; N] {
    fn into_dims(self) -> Vec<usize> {
        self.to_vec()
    }
}

impl IntoDims for &[usize] {
    fn into_dims(self) -> Vec<usize> {
        self.to_vec()
    }
}

impl IntoDims for Vec<usize> {
    fn into_dims(self) -> Vec<usize> {
        self
    }
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
            dst.resize_zeroed(len)?;
        }
        Ok(())
    }

    /// Elements per item of a column of `dims` (their product; 1 for `[]`), or `None`
    /// when the product overflows `usize`.
    pub fn elements(dims: &[usize]) -> Option<usize> {
        dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// A schema with no columns (add them with [`Schema::column`]).
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Adds a column of `dims` per item: a width (`4`) or dimensions (`[84, 84]`, `[]`
    /// for a scalar); [`Schema::validate`] (run by the buffer's config) checks the whole.
    ///
    /// ```
    /// use kary_replay::{DType, Schema};
    /// let schema = Schema::new().column("frame", DType::U8, [84, 84]).column("reward", DType::F32, []);
    /// assert_eq!(schema.columns()[0].shape, 7056);
    /// assert_eq!(schema.columns()[0].dims, [84, 84]);
    /// assert_eq!(schema.columns()[1].shape, 1);
    /// ```
    pub fn column(mut self, name: impl Into<String>, dtype: DType, dims: impl IntoDims) -> Schema {
        let dims = dims.into_dims();
        // Saturating: an overflowing product is refused by `validate` (as a dimension of
        // 0 is), not wrapped into a plausible width.
        let shape = Schema::elements(&dims).unwrap_or(usize::MAX);
        self.columns.push(ColumnSpec {
            name: name.into(),
            dtype,
            shape,
            dims,
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
        // A first column shorter than one item counts as one item, so that its error says
        // how long one item is rather than "expected 0".
        let items = match columns[0].len() {
            n if n == specs[0].shape => 1,
            0 => 0,
            n => (n / specs[0].shape).max(1),
        };
        for (spec, col) in specs.iter().zip(columns) {
            check_column(spec, col, items)?;
        }
        Ok(items)
    }

    /// Checks some of the columns for `items` items (a write back by key): each entry names a
    /// column by its position, at most once ([`Error::InvalidParameter`] `columns`, or
    /// [`Error::ColumnCount`] for a position past the last), and holds `items x shape`
    /// elements of the column's dtype ([`Error::ColumnType`], [`Error::ColumnLength`]).
    pub fn check_some(&self, columns: &[(usize, ColumnSlice<'_>)], items: usize) -> Result<()> {
        let specs = self.columns();
        for (j, (c, col)) in columns.iter().enumerate() {
            let spec = specs.get(*c).ok_or(Error::ColumnCount {
                expected: specs.len(),
                got: c + 1,
            })?;
            if columns[..j].iter().any(|(other, _)| other == c) {
                return Err(Error::InvalidParameter {
                    name: "columns",
                    value: *c as f64,
                    reason: "a column is named twice",
                });
            }
            check_column(spec, col, items)?;
        }
        Ok(())
    }

    /// Checks caller memory for `rows` sampled items: one destination per column, each of
    /// the column's dtype ([`Error::ColumnType`]) and exactly `rows x shape` elements long
    /// ([`Error::ColumnCount`], [`Error::ColumnLength`], [`Error::SizeOverflow`]).
    pub fn check_destinations(&self, rows: usize, columns: &[ColumnSliceMut<'_>]) -> Result<()> {
        check_outputs(
            columns,
            self.columns.len(),
            |c| {
                let spec = &self.columns[c];
                let n = rows.checked_mul(spec.shape).ok_or(Error::SizeOverflow {
                    what: "rows x shape of a sampled column",
                })?;
                Ok((spec.dtype, n))
            },
            |c| self.columns[c].name.clone(),
        )
    }

    /// At least one column; names non-empty and unique; every dimension >= 1; `shape` the
    /// product of `dims`.
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
            if c.shape == 0 || c.dims.contains(&0) {
                return Err(Error::InvalidSchema(format!(
                    "column {:?} has a dimension of 0 ({:?})",
                    c.name, c.dims
                )));
            }
            if Schema::elements(&c.dims) != Some(c.shape) {
                return Err(Error::InvalidSchema(format!(
                    "column {:?}: shape {} is not the product of its dims {:?}",
                    c.name, c.shape, c.dims
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

/// The checks of a sample's destinations, for every family: `columns` holds one destination
/// per output (`outputs` of them: [`Error::ColumnCount`]), output `i` of the dtype and
/// exactly the elements `shape(i)` says ([`Error::ColumnType`], [`Error::ColumnLength`]).
/// `name(i)` names output `i` in an error (called only then).
pub(crate) fn check_outputs(
    columns: &[ColumnSliceMut<'_>],
    outputs: usize,
    shape: impl Fn(usize) -> Result<(DType, usize)>,
    name: impl Fn(usize) -> String,
) -> Result<()> {
    if columns.len() != outputs {
        return Err(Error::ColumnCount {
            expected: outputs,
            got: columns.len(),
        });
    }
    for (i, col) in columns.iter().enumerate() {
        let (dtype, n) = shape(i)?;
        if col.dtype() != dtype {
            return Err(Error::ColumnType {
                column: name(i),
                expected: dtype,
                got: col.dtype(),
            });
        }
        if col.len() != n {
            return Err(Error::ColumnLength {
                column: name(i),
                expected: n,
                got: col.len(),
            });
        }
    }
    Ok(())
}

/// `col` holds `items` items of `spec`: its dtype ([`Error::ColumnType`]) and `items x shape`
/// elements ([`Error::ColumnLength`]; the product checked, [`Error::SizeOverflow`]: the copies
/// rely on that many elements being there, and a wrapped product would let a short slice
/// pass).
fn check_column(spec: &ColumnSpec, col: &ColumnSlice<'_>, items: usize) -> Result<()> {
    if col.dtype() != spec.dtype {
        return Err(Error::ColumnType {
            column: spec.name.clone(),
            expected: spec.dtype,
            got: col.dtype(),
        });
    }
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
    Ok(())
}
