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
            let source = src.map_or(self.rows.zeros.as_ptr(), |src| src.as_bytes_ptr());
            // SAFETY: the row lies inside the column's allocation of `lanes x T` rows of `n`
            // bytes; no one else writes it (the caller's contract), and in optimistic mode
            // samplers read it only with atomic loads; the source holds `n` bytes of the
            // column's dtype (the caller's contract) in another allocation, or is the zero
            // row; zero bytes are a valid value of every dtype.
            unsafe { self.store_row(source, raw.base.add(row * n), n) }
            if c == 0 {
                self.slots.point(crate::faults::Point::LaneRow);
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
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn gather<C: ColumnRows + ?Sized, N: ColumnRows + ?Sized>(
        &self,
        b: usize,
        lane: usize,
        start: u64,
        info: WindowInfo,
        columns: &mut C,
        next: &mut N,
        torn: &mut bool,
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
                        unsafe { self.copy_row(lane, source, c, dst, torn) };
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
                    unsafe { self.copy_row(lane, frame(start + m as u64, j, k), c, dst, torn) };
                }
            }
        }
        let (nstep, reward) = self.config.nstep.as_ref()?;
        let raw = &self.rows.columns[*reward];
        let dtype = self.config.schema().columns()[*reward].dtype;
        let (mut ret, mut discount) = (0.0f64, 1.0f64);
        for i in 0..m {
            let step = start + i as u64;
            let row = self.row(lane, step);
            let mut bytes = [0u8; 8];
            // SAFETY: the row holds one scalar of the reward's dtype (f32 or f64, checked by
            // the configuration: at most 8 bytes) and stays put (the caller's contract).
            unsafe {
                self.load_row(
                    row,
                    step,
                    raw.base.add(row * raw.row_bytes),
                    bytes.as_mut_ptr(),
                    raw.row_bytes,
                    torn,
                )
            };
            let r = match dtype {
                DType::F32 => f64::from(f32::from_ne_bytes(bytes[..4].try_into().unwrap())),
                _ => f64::from_ne_bytes(bytes),
            };
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
    unsafe fn copy_row(
        &self,
        lane: usize,
        step: Option<u64>,
        c: usize,
        dst: *mut u8,
        torn: &mut bool,
    ) {
        let raw = &self.rows.columns[c];
        let n = raw.row_bytes;
        match step {
            Some(step) => {
                let row = self.row(lane, step);
                // SAFETY: the row lies inside the column's allocation; no writer touches it
                // (counted mode: the caller's contract), or the caller checks its copy
                // afterwards (optimistic mode); `dst` is the caller's memory, with room.
                unsafe { self.load_row(row, step, raw.base.add(row * n), dst, n, torn) }
            }
            // SAFETY: `dst` has room for `n` bytes; zero is a valid value of every dtype.
            None => unsafe { std::ptr::write_bytes(dst, 0, n) },
        }
    }

    /// Store `n` bytes from `src` into the row bytes at `dst`: plain in counted mode (no
    /// reader is there), atomic in optimistic mode (samplers may load them meanwhile).
    ///
    /// # Safety
    /// As for `write_columns`: `dst` is `n` bytes of a row its lane's writer owns, `src`
    /// holds `n` bytes.
    unsafe fn store_row(&self, src: *const u8, dst: *mut u8, n: usize) {
        #[cfg(not(loom))]
        if self.slots.optimistic() {
            // SAFETY: forwarded; readers of these bytes load them atomically.
            unsafe { crate::mem::copy_row_to_atomic(src, dst, n) };
            return;
        }
        // SAFETY: forwarded (under loom, optimistic rows are plain bytes guarded by their
        // tokens: loom's threads take turns at its operations only).
        unsafe { crate::mem::copy_row_bytes(src, dst, n) }
    }

    /// Load row `row` (lane step `step`) from `src` into `dst`: plain and tracked in
    /// counted mode, atomic in optimistic mode; under loom in optimistic mode, its token
    /// read first and `torn` set if it is not `step`'s.
    ///
    /// # Safety
    /// `src` is `n` bytes of the row, `dst` has room for them; in counted mode the row
    /// stays put during the call.
    #[allow(unused_variables)]
    unsafe fn load_row(
        &self,
        row: usize,
        step: u64,
        src: *const u8,
        dst: *mut u8,
        n: usize,
        torn: &mut bool,
    ) {
        if self.slots.optimistic() {
            #[cfg(loom)]
            {
                // ORDERING: Relaxed, as a sequence lock's data load.
                let token = self.rows.tokens[row].load(crate::sync::Ordering::Relaxed);
                *torn |= token != step + 1;
                // SAFETY: forwarded; see `store_row`.
                unsafe { crate::mem::copy_row_bytes(src, dst, n) };
            }
            #[cfg(not(loom))]
            // SAFETY: forwarded; the writer stores these bytes atomically.
            unsafe {
                crate::mem::copy_row_from_atomic(src, dst, n)
            };
            return;
        }
        self.rows.cells[row].with(|_| {
            // SAFETY: forwarded.
            unsafe { crate::mem::copy_row_bytes(src, dst, n) }
        });
    }
}
