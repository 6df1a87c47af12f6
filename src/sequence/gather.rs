//! The row copies of a lane: a step in, a window (with its stacks, its next observation and
//! its n-step return) out.

use super::{Padding, SequenceBuffer, WindowInfo};
use crate::storage::{ColumnRows, ColumnSlice, DType};

impl SequenceBuffer {
    /// The row of lane `lane`'s step `step`.
    #[inline]
    pub(super) fn row(&self, lane: usize, step: u64) -> usize {
        let steps = self.config.steps;
        lane * steps + (step % steps as u64) as usize
    }

    /// Write one item of `columns` into row `row`: every schema column in order, or, with
    /// `only`, the columns it names (one slice each, in its order) and zeros in the rest.
    ///
    /// # Safety
    /// Each slice holds at least one item of its column's dtype; the caller owns the row:
    /// every window that reads it is retired (its leaf held, its readers gone) and the caller
    /// is the lane's writer, inside the row's tracked cell.
    pub(super) unsafe fn write_columns(
        &self,
        row: usize,
        columns: &[ColumnSlice<'_>],
        only: Option<&[usize]>,
    ) {
        for (c, raw) in self.rows.columns.iter().enumerate() {
            let n = raw.row_bytes;
            let src = match only {
                None => Some(&columns[c]),
                Some(list) => list.iter().position(|&o| o == c).map(|k| &columns[k]),
            };
            // SAFETY: the row lies inside the column's allocation of `lanes x T` rows of `n`
            // bytes; no one else accesses it (the caller's contract); the source holds `n`
            // bytes of the column's dtype (the caller's contract) in another allocation;
            // zero bytes are a valid value of every dtype.
            unsafe {
                let dst = raw.base.add(row * n);
                match src {
                    Some(src) => crate::mem::copy_row_bytes(src.as_bytes_ptr(), dst, n),
                    None => std::ptr::write_bytes(dst, 0, n),
                }
            }
        }
    }

    /// Copy the window of lane `lane` starting at `start`, described by `info`, into item `b`
    /// of `columns` (`[B, W, k_c, shape]` each, or none) and `next` (`[B, k, shape]` per
    /// `next_of` column, or none). Returns the n-step return and discount with an n-step
    /// configuration.
    ///
    /// # Safety
    /// The caller holds a read reference on the window's leaf in the state whose epoch
    /// gave `start`, so every row it reads stays put; the destinations are shaped for at
    /// least `b + 1` windows (or have no columns).
    pub(super) unsafe fn gather<C: ColumnRows + ?Sized, N: ColumnRows + ?Sized>(
        &self,
        b: usize,
        lane: usize,
        start: u64,
        info: WindowInfo,
        columns: &mut C,
        next: &mut N,
    ) -> Option<(f64, f64)> {
        let w = self.config.window;
        let len = info.len as usize;
        // The first step of the episode a stack may read (all it needs when `back == k - 1`).
        let floor = start - u64::from(info.back);
        let zeros = self.config.padding == Padding::Zeros;
        // The step a stack's frame at `step + j - (k - 1)` reads, or `None` for zeros.
        let frame = |step: u64, j: usize, k: usize| -> Option<u64> {
            match (step + j as u64).checked_sub(k as u64 - 1) {
                Some(t) if t >= floor => Some(t),
                _ if zeros => None,
                _ => Some(floor),
            }
        };
        if columns.width() > 0 {
            for (c, raw) in self.rows.columns.iter().enumerate() {
                let n = raw.row_bytes;
                let k = self.config.frames(c);
                let dst_base = columns.column_base(c);
                for i in 0..w {
                    for j in 0..k {
                        // SAFETY: item `b` of the destination has `W x k` rows of `n` bytes
                        // (the caller's contract).
                        let dst = unsafe { dst_base.add(((b * w + i) * k + j) * n) };
                        let source = (i < len).then(|| frame(start + i as u64, j, k)).flatten();
                        // SAFETY: as in `copy_row`.
                        unsafe { self.copy_row(lane, source, c, dst) };
                    }
                }
            }
        }
        // The next observation's step: after the n-step return's steps, or the window's.
        let m = (self.config.nstep.as_ref()).map_or(len, |(n, _)| n.n.min(info.to_end as usize));
        if next.width() > 0 {
            for (j_col, &c) in self.config.next_of.iter().enumerate() {
                let n = self.rows.columns[c].row_bytes;
                let k = self.config.frames(c);
                let dst_base = next.column_base(j_col);
                for j in 0..k {
                    // SAFETY: item `b` of the destination has `k` rows of `n` bytes.
                    let dst = unsafe { dst_base.add((b * k + j) * n) };
                    // SAFETY: as in `copy_row`.
                    unsafe { self.copy_row(lane, frame(start + m as u64, j, k), c, dst) };
                }
            }
        }
        let (nstep, reward) = self.config.nstep.as_ref()?;
        let raw = &self.rows.columns[*reward];
        let dtype = self.config.schema().columns()[*reward].dtype;
        let (mut ret, mut discount) = (0.0f64, 1.0f64);
        for i in 0..m {
            let row = self.row(lane, start + i as u64);
            let r = self.rows.cells[row].with(|_| {
                // SAFETY: the row holds one scalar of the reward's dtype (f32 or f64, checked
                // by the configuration) and stays put (the caller's contract).
                unsafe {
                    let p = raw.base.add(row * raw.row_bytes);
                    match dtype {
                        DType::F32 => f64::from(p.cast::<f32>().read_unaligned()),
                        _ => p.cast::<f64>().read_unaligned(),
                    }
                }
            });
            ret += discount * r;
            discount *= nstep.gamma;
        }
        if info.terminal && info.to_end as usize <= nstep.n {
            discount = 0.0;
        }
        Some((ret, discount))
    }

    /// Copy column `c` of lane `lane`'s step `step` to `dst`, or zeros for `None`.
    ///
    /// # Safety
    /// `dst` has room for one row of the column; the step's row stays put during the call
    /// (the caller holds a window that reads it).
    unsafe fn copy_row(&self, lane: usize, step: Option<u64>, c: usize, dst: *mut u8) {
        let raw = &self.rows.columns[c];
        let n = raw.row_bytes;
        match step {
            Some(step) => {
                let row = self.row(lane, step);
                self.rows.cells[row].with(|_| {
                    // SAFETY: the row lies inside the column's allocation; no writer touches
                    // it (the caller's contract); `dst` is the caller's memory, with room.
                    unsafe { crate::mem::copy_row_bytes(raw.base.add(row * n), dst, n) }
                });
            }
            // SAFETY: `dst` has room for `n` bytes; zero is a valid value of every dtype.
            None => unsafe { std::ptr::write_bytes(dst, 0, n) },
        }
    }
}
