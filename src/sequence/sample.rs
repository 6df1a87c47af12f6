//! Sampling windows: [`SequenceBatch`], the one prelude of both entry points, the draw
//! (the tree's candidates, each window joined, gathered and checked, redrawn under writes),
//! and the importance weights.

use std::time::Instant;

use crate::buffer::protocol::{batch_weights, too_few, Drawn, DrawnBatch, Pick};
use crate::storage::check_outputs;

use super::*;

/// A sampled batch of windows. With B windows of W steps: `columns[c]` holds `B x W x k_c x
/// shape_c` elements (`k_c` the frames stacked for the column, 1 without a stack), zero past
/// each window's length; `next[j]` holds `B x k x shape` for the j-th `next_of` column;
/// `mask` is `B x W`; `returns` and `discounts` have B entries with an n-step configuration
/// and none without.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SequenceBatch {
    /// Keys for [`SequenceBuffer::update_priorities`].
    pub keys: Vec<Key>,
    /// Leaves (the keys' `index`).
    pub indices: Vec<usize>,
    /// Stored priorities at sampling time.
    pub priorities: Vec<f64>,
    /// Sampling probabilities.
    pub probabilities: Vec<f64>,
    /// Normalized importance weights in `(0, 1]`.
    pub weights: Vec<f64>,
    /// Each window's length in steps (`1..=W`).
    pub lengths: Vec<usize>,
    /// `mask[b x W + i]`: step `i` of window `b` is one of its episode's steps.
    pub mask: Vec<bool>,
    /// The n-step return of each window.
    pub returns: Vec<f64>,
    /// The discount to bootstrap each window's return with: `gamma^m`, 0 after a terminal.
    pub discounts: Vec<f64>,
    /// The sum of the stored priorities the windows were drawn over (what a coordinator of
    /// shards refers each shard's draws to).
    pub total: f64,
    /// The smallest positive stored priority read with `total`.
    pub min_positive: f64,
    /// The windows' columns, in schema order.
    pub columns: Vec<ColumnData>,
    /// The next observations, in the order of the configuration's `next_of` columns (schema
    /// order).
    pub next: Vec<ColumnData>,
    /// The draw's working space, kept so that a warm batch allocates nothing.
    scratch: SampleScratch,
}

/// The working space of a sample (its targets, the tree's candidates): never compared,
/// never cloned.
#[derive(Debug, Default)]
struct SampleScratch {
    shapes: OutputShapes,
    drawn: Drawn,
}

impl Clone for SampleScratch {
    fn clone(&self) -> SampleScratch {
        SampleScratch::default()
    }
}

impl PartialEq for SampleScratch {
    fn eq(&self, _: &SampleScratch) -> bool {
        true
    }
}

/// The priority R2D2 gives a sequence: `eta x max + (1 - eta) x mean` of `|td|` over the
/// steps the mask keeps (`td` and `mask` are `B x W`; 0 for a window with no step).
///
/// ```
/// use kary_replay::sequence::sequence_priorities;
/// let p = sequence_priorities(&[1.0, -3.0, 5.0, 2.0], &[true, true, false, true], 2, 0.9).unwrap();
/// assert!((p[0] - (0.9 * 3.0 + 0.1 * 2.0)).abs() < 1e-12);
/// assert!((p[1] - 2.0).abs() < 1e-12);
/// ```
pub fn sequence_priorities(td: &[f64], mask: &[bool], window: usize, eta: f64) -> Result<Vec<f64>> {
    if window == 0 || td.len() % window != 0 || mask.len() != td.len() {
        return Err(Error::LengthMismatch {
            what: "td errors and mask (B x window each)",
            expected: if window == 0 { 0 } else { td.len() },
            got: mask.len(),
        });
    }
    if !(0.0..=1.0).contains(&eta) {
        return Err(Error::InvalidParameter {
            name: "eta",
            value: eta,
            reason: "must be in [0, 1]",
        });
    }
    Ok(td
        .chunks(window)
        .zip(mask.chunks(window))
        .map(|(td, mask)| {
            let (mut max, mut sum, mut n) = (0.0f64, 0.0, 0usize);
            for (&d, _) in td.iter().zip(mask).filter(|(_, &m)| m) {
                max = max.max(d.abs());
                sum += d.abs();
                n += 1;
            }
            if n == 0 {
                0.0
            } else {
                eta * max + (1.0 - eta) * sum / n as f64
            }
        })
        .collect())
}

crate::buffer::protocol::drawn_batch!(SequenceBatch);

impl SequenceBuffer {
    /// Sample `batch` windows (with replacement) in proportion to their priorities into
    /// `out`'s own vectors (reused: no allocation once warm). On error `out` is unchanged
    /// unless the error is [`Error::Contention`], or, in
    /// [`SampleMode::WithoutReplacement`], a batch that ran out of windows of positive
    /// priority ([`Error::InvalidParameter`]: a batch larger than [`Self::len`] is refused
    /// before anything is drawn); after those its content is unspecified.
    /// With a rate limit, waits until the limiter admits `batch` windows
    /// ([`SequenceBuffer::sample_into_waiting`]).
    pub fn sample_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SequenceBatch,
    ) -> Result<()> {
        let draw = Draw::Batch { batch, beta, mode };
        self.sample_into_waiting(draw, rng, out, Wait::Block)
    }

    /// [`SequenceBuffer::sample_into`] of any [`Draw`] (a batch drawn here, or the windows
    /// at a coordinator's fractions of this buffer's total, with weights of 1: what a shard
    /// of a union does), waiting for the rate limiter as `wait` says ([`Error::Timeout`],
    /// [`Error::RateLimited`], [`Error::Closed`] change nothing). With a rate limit, an
    /// empty buffer is a wait for the first windows, not [`Error::Empty`].
    pub fn sample_into_waiting(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SequenceBatch,
        wait: Wait,
    ) -> Result<()> {
        self.with_shapes(draw, out, wait, |shapes, out| {
            shape_columns(&mut out.columns, &shapes.columns)?;
            shape_columns(&mut out.next, &shapes.next)?;
            let (mut columns, mut next) = (
                std::mem::take(&mut out.columns),
                std::mem::take(&mut out.next),
            );
            // SAFETY: `columns` and `next` were just shaped for the draw's windows.
            let result = unsafe { self.sample_in(draw, rng, out, &mut columns[..], &mut next[..]) };
            out.columns = columns;
            out.next = next;
            result
        })
    }

    /// [`SequenceBuffer::sample_into`] straight into the caller's memory: `columns` has one
    /// destination per schema column (`B x W x k_c x shape_c` elements of its dtype) and
    /// `next` one per `next_of` column (`B x k x shape`), or either is empty (those outputs
    /// are skipped); `out`'s own `columns` and `next` are left alone. Wrong destinations
    /// are refused before anything is drawn. With a rate limit, waits as
    /// [`SequenceBuffer::sample_into`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn sample_columns_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SequenceBatch,
        columns: &mut [ColumnSliceMut<'_>],
        next: &mut [ColumnSliceMut<'_>],
    ) -> Result<()> {
        let draw = Draw::Batch { batch, beta, mode };
        self.sample_columns_into_waiting(draw, rng, out, columns, next, Wait::Block)
    }

    /// [`SequenceBuffer::sample_columns_into`] of any [`Draw`], waiting for the rate limiter
    /// as `wait` says (as [`SequenceBuffer::sample_into_waiting`]).
    pub fn sample_columns_into_waiting(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SequenceBatch,
        columns: &mut [ColumnSliceMut<'_>],
        next: &mut [ColumnSliceMut<'_>],
        wait: Wait,
    ) -> Result<()> {
        self.with_shapes(draw, out, wait, |shapes, out| {
            self.check_destinations(columns, next, shapes)?;
            // SAFETY: both were just checked against the shapes of the draw's windows.
            unsafe { self.sample_in(draw, rng, out, columns, next) }
        })
    }

    /// Every sample's prelude: the draw's checks, the rate limiter's admission of its
    /// windows (given back if the sample fails), then `sample` with the shapes of their
    /// outputs (computed in `out`'s working space, no allocation once warm).
    fn with_shapes(
        &self,
        draw: Draw<'_>,
        out: &mut SequenceBatch,
        wait: Wait,
        sample: impl FnOnce(&OutputShapes, &mut SequenceBatch) -> Result<()>,
    ) -> Result<()> {
        draw.check()?;
        if let Draw::Batch {
            mode:
                mode @ (SampleMode::Uniform
                | SampleMode::Fifo
                | SampleMode::Lifo
                | SampleMode::Shuffled
                | SampleMode::MaxHeap
                | SampleMode::MinHeap),
            ..
        } = draw
        {
            // A window's slot is in its lane's ring: the sampleable windows are not one range
            // of generations to draw from evenly, or in order.
            return Err(Error::InvalidParameter {
                name: "mode",
                value: mode as u32 as f64,
                reason: "a sequence buffer samples by priority (modes 3 to 8, uniform, fifo, \
                         lifo, shuffled and the heaps, are for flat buffers)",
            });
        }
        let batch = draw.len();
        let mut shapes = std::mem::take(&mut out.scratch.shapes);
        let result = self.output_shapes(batch, &mut shapes).and_then(|()| {
            let started = self.rate.is_some().then(Instant::now);
            if self.rate.is_none() {
                self.check_nonempty()?;
            }
            let admission = Admission::sample(self.rate.as_ref(), batch, wait)?;
            // With a limit, `Empty` is a wait for the first windows, after the admission.
            admission.until_filled(wait, started, || self.check_nonempty().is_ok())?;
            // Without replacement, a batch larger than the windows now is refused whole.
            let enough = !draw.without_replacement() || batch <= self.len();
            let checked = if enough { Ok(()) } else { Err(too_few(batch)) };
            admission.settle(checked.and_then(|()| sample(&shapes, out)))
        });
        out.scratch.shapes = shapes;
        result
    }

    fn check_nonempty(&self) -> Result<()> {
        // ORDERING: Relaxed: no window ever installed means an empty buffer; a racing
        // install is a sample that came first.
        if self.counters.handed_out.load(Ordering::Relaxed) == 0 {
            return Err(Error::Empty);
        }
        Ok(())
    }

    /// Draw and gather the draw's windows.
    ///
    /// # Safety
    /// `columns` and `next` are shaped as [`SequenceBuffer::output_shapes`] says for the
    /// draw's windows.
    unsafe fn sample_in<C: ColumnRows + ?Sized, N: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SequenceBatch,
        columns: &mut C,
        next: &mut N,
    ) -> Result<()> {
        let mut scratch = std::mem::take(&mut out.scratch);
        // SAFETY: forwarded from the caller.
        let drawn = unsafe { self.draw_in(draw, rng, &mut scratch, out, columns, next) };
        if let Ok(descent) = drawn {
            (out.total, out.min_positive) = descent;
            // Without replacement, `draw_in` left each window's conditional probability in
            // `probabilities`.
            let norm = self.config.tree.weight_normalization();
            batch_weights(draw, norm, descent, out, &mut scratch.drawn.distinct);
        }
        out.scratch = scratch;
        drawn?;
        Ok(())
    }

    /// [`Self::sample_in`]'s body, with the working space taken out of `out`.
    ///
    /// # Safety
    /// As [`Self::sample_in`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn draw_in<C: ColumnRows + ?Sized, N: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        scratch: &mut SampleScratch,
        out: &mut SequenceBatch,
        columns: &mut C,
        next: &mut N,
    ) -> Result<(f64, f64)> {
        let (w, batch) = (self.config.window, draw.len());
        let drawn = &mut scratch.drawn;
        drawn.start(batch)?;
        let mut fill = |total, targets: &mut [f64]| draw.fill(total, targets, rng);
        let (total, min_positive) = self.tree.candidates(&self.slots, &mut fill, drawn)?;
        let (candidates, distinct, _) = drawn.parts();
        let without = draw.without_replacement();
        if without {
            distinct.start(batch)?;
        }
        let pick = Pick {
            draw,
            total,
            uniform: None,
        };
        out.clear_drawn();
        out.lengths.clear();
        out.returns.clear();
        out.discounts.clear();
        out.mask.clear();
        out.mask.resize(batch * w, false);
        for (b, &first) in candidates.iter().enumerate().take(batch) {
            // Join the window, copy it, record it; false when its leaf is in flight.
            let mut take = |c: Candidate| -> bool {
                let Some(guard) = self.slots.try_read(c.index, c.state) else {
                    return false;
                };
                let epoch = c.state.epoch();
                // ORDERING: Relaxed: the join's Acquire ordered the writer's store of the
                // description (before its Release publication) before this load.
                let info = WindowInfo::unpack(self.info[c.index].load(Ordering::Relaxed));
                let (lane, start) = self.locate(c.index, epoch - 1);
                let mut torn = false;
                // SAFETY: we hold a read reference on the window, so its rows stay put
                // (counted mode; module doc), or the copy is checked below (optimistic
                // mode); the destinations fit `batch` windows (ours).
                let ret = unsafe { self.gather(b, lane, start, info, columns, next, &mut torn) };
                if self.faults.sequence_sampler_checks_copy() && !guard.still_current() {
                    return false; // a writer retired the window meanwhile: draw again
                }
                assert!(
                    !torn,
                    "torn: a window was kept while its rows were overwritten"
                );
                drop(guard);
                let generation = self.slots.generation(c.index, c.state).unwrap_or(0);
                out.keys.push(self.config.tree.key(c.index, generation));
                out.indices.push(c.index);
                out.priorities.push(c.priority);
                out.lengths.push(info.len as usize);
                out.mask[b * w..b * w + info.len as usize].fill(true);
                if let Some((r, d)) = ret {
                    out.returns.push(r);
                    out.discounts.push(d);
                }
                true
            };
            let repeat = without && distinct.contains(first.index);
            if !repeat && first.priority > 0.0 && take(first) {
                if without {
                    out.probabilities
                        .push(distinct.take(first.index, first.priority, total));
                }
            } else {
                let (tree, slots) = (&self.tree, &self.slots);
                let taken = redraw(tree, slots, pick, b, rng, distinct, &mut take)?;
                if without {
                    out.probabilities.push(taken);
                }
            }
        }
        Ok((total, min_positive))
    }
}

impl SequenceBuffer {
    /// Destinations fit the shapes, each kind (columns, next observations) checked by the
    /// schema's check with the outputs' names, or there are none of a kind (those outputs
    /// are skipped).
    fn check_destinations(
        &self,
        columns: &[ColumnSliceMut<'_>],
        next: &[ColumnSliceMut<'_>],
        shapes: &OutputShapes,
    ) -> Result<()> {
        let specs = self.config.schema().columns();
        if !columns.is_empty() {
            check_outputs(
                columns,
                shapes.columns.len(),
                |c| Ok(shapes.columns[c]),
                |c| specs[c].name.clone(),
            )?;
        }
        if !next.is_empty() {
            check_outputs(
                next,
                shapes.next.len(),
                |j| Ok(shapes.next[j]),
                |j| format!("next_{}", specs[self.config.next_of[j]].name),
            )?;
        }
        Ok(())
    }
}

/// The shapes (dtype, elements) of a sample's outputs.
#[derive(Debug, Default)]
struct OutputShapes {
    columns: Vec<(crate::storage::DType, usize)>,
    next: Vec<(crate::storage::DType, usize)>,
}

impl SequenceBuffer {
    /// Elements of each output column for `batch` windows, into `shapes`, whose vectors are reused (no allocation once warm).
    fn output_shapes(&self, batch: usize, shapes: &mut OutputShapes) -> Result<()> {
        let specs = self.config.schema().columns();
        let overflow = || Error::SizeOverflow {
            what: "batch x window x frames x shape of a sampled column",
        };
        shapes.columns.clear();
        for (c, spec) in specs.iter().enumerate() {
            let n = batch
                .checked_mul(self.config.window)
                .and_then(|n| n.checked_mul(self.config.frames(c)))
                .and_then(|n| n.checked_mul(spec.shape))
                .ok_or_else(overflow)?;
            shapes.columns.push((spec.dtype, n));
        }
        shapes.next.clear();
        for &c in &self.config.next_of {
            let n = batch
                .checked_mul(self.config.frames(c))
                .and_then(|n| n.checked_mul(specs[c].shape))
                .ok_or_else(overflow)?;
            shapes.next.push((specs[c].dtype, n));
        }
        Ok(())
    }
}

fn shape_columns(
    out: &mut Vec<ColumnData>,
    shapes: &[(crate::storage::DType, usize)],
) -> Result<()> {
    if out.len() != shapes.len() || out.iter().zip(shapes).any(|(o, &(d, _))| o.dtype() != d) {
        *out = shapes.iter().map(|&(d, _)| ColumnData::empty(d)).collect();
    }
    for (col, &(_, n)) in out.iter_mut().zip(shapes) {
        col.resize_zeroed(n)?;
    }
    Ok(())
}
