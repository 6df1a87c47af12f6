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
