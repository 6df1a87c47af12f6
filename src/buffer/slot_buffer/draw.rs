//! The draw path: the descent, the joins of read references in runs, and the redraws of
//! items whose slots were in flight (module doc of `slot_buffer`, "Sample").

use crate::rng::RandomSource;

use super::super::sample::{Order, Selector};
use super::super::slots::ReadGuard;
use super::super::slots::SlotState;
use super::super::{Descent, Draw, SampleBatch};
use super::*;
use crate::buffer::protocol::{
    batch_weights, redraw, Candidate, Counted, Drawn, DrawnBatch, Pick, Uniform,
};
use crate::error::{Error, Result};
use crate::storage::ColumnRows;
use crate::sync::{spin_wait, Ordering};
use crate::tree::Extreme;

/// The leaves a heap draw ranks first ([`SlotBuffer::sample_heap`]).
const FIRST_RANKED: usize = 8;

impl<T: SharedTree> SlotBuffer<T> {
    /// Sample `draw` into `out` (everything but its columns) and copy each sampled item's
    /// row into `columns` (none when it has no columns); returns what the descent read.
    ///
    /// # Safety
    /// `columns` has no columns, or one per schema column, each of the column's dtype with
    /// room for at least `draw.len()` rows.
    pub(super) unsafe fn sample_in_spare<D: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        drawn: &mut Drawn,
        columns: &mut D,
    ) -> Result<Descent> {
        let batch = draw.len();
        out.reserve_rows(batch)?;
        drawn.start(batch)?;
        match draw.ordered() {
            // SAFETY: forwarded from the caller.
            Some(Selector::Ring(order)) => unsafe {
                return self.sample_ordered(draw, order, out, drawn, columns);
            },
            // SAFETY: forwarded from the caller.
            Some(Selector::Heap(extreme)) => unsafe {
                return self.sample_heap(draw, extreme, out, drawn, columns);
            },
            None => {}
        }
        if draw.shuffled() {
            // SAFETY: forwarded from the caller.
            return unsafe { self.sample_shuffled(draw, rng, out, drawn, columns) };
        }
        // Uniform: the ring's newest `span` slots, no tree walk; a slot that holds no item
        // (deleted by key) is drawn again like one in flight, so each of the `len` items is
        // equally likely: `total` is their count (each probability 1 / len), every weight 1.
        let uniform = match draw.uniform() {
            true => Some(Uniform::newest(
                self.inserted(),
                self.span(),
                self.slots.capacity(),
            )),
            false => None,
        };
        let mut attempt = 0;
        let (total, min_positive) = loop {
            if let Some(uniform) = uniform {
                let len = self.len();
                if uniform.n == 0 || len == 0 {
                    return Err(Error::Empty);
                }
                let mut fill = |total, targets: &mut [f64]| draw.fill(total, targets, rng);
                drawn.uniform(&self.tree, &self.slots, uniform, &mut fill);
                break (len as f64, 1.0);
            }
            // ORDERING: SeqCst, with the cursor load below and the writers' SeqCst increments
            // of both counters: a writer whose lazy-writing zero this descent saw had taken
            // its generation before (so `started` counts it) and completes after (so
            // `finished` does not), whence `started != finished`.
            let finished = self.counters.completed.load(Ordering::SeqCst);
            let mut fill = |total, targets: &mut [f64]| draw.fill(total, targets, rng);
            match self.tree.candidates(&self.slots, &mut fill, drawn) {
                Err(Error::ZeroTotalPriority) => self.after_zero_total(finished, &mut attempt)?,
                other => break other?,
            }
        };
        let (candidates, distinct, counted) = drawn.parts();
        // With `max_times_sampled`: the draws counted, kept if the call succeeds.
        let mut tally = self.draws.as_ref().map(|draws| Tally {
            draws,
            counted,
            done: false,
        });
        let without = draw.without_replacement();
        if without {
            distinct.start(batch)?;
        }
        // Without replacement, `probabilities` takes each item's conditional one, in order.
        out.clear_drawn();
        // Rows are copied in runs: read references on up to `READ_RUN` consecutive
        // candidates, joined in the state each was drawn in, then their rows copied
        // (`Slots::copy_rows`, which says why), then the references dropped. A run ends
        // before the first candidate that cannot be joined; that item is drawn again holding
        // no reference, so the sampler never waits while it keeps a writer waiting. A writer
        // that needs a slot of a run waits for the run's copies (64 rows: about 10 us at
        // 1028 bytes) where it waited for one row's.
        let mut held: [Option<ReadGuard<'_>>; READ_RUN] = std::array::from_fn(|_| None);
        let mut b = 0;
        while b < batch {
            let start = b;
            while b < batch && b - start < READ_RUN {
                let c = candidates[b];
                if without && distinct.contains(c.index) {
                    // A repeat (of an item taken or held by this run): drawn again among
                    // the items not taken.
                    break;
                }
                // An item: a positive priority (by priority), or a slot written at least once
                // (uniform: its join checks the rest).
                let item = match uniform {
                    Some(_) => c.state.epoch() > 0,
                    None => c.priority > 0.0,
                };
                let guard = item
                    .then(|| self.slots.try_read(c.index, c.state))
                    .flatten();
                let Some(guard) = guard else { break };
                if without {
                    distinct.hold(c.index);
                }
                held[b - start] = Some(guard);
                b += 1;
            }
            let run = &mut held[..b - start];
            // SAFETY: rows `start..b` lie within the `batch` rows `columns` has room for (the
            // caller's contract); the guards are this buffer's.
            let good = unsafe { self.slots.copy_rows(run, columns, start) };
            self.slots.point(crate::faults::Point::Sampling);
            // With `max_times_sampled`: each kept row's draw counted while it is held; a
            // spent item ends the run there, as a torn copy does (drawn again).
            let good = Tally::count(&mut tally, &candidates[start..start + good]);
            for (r, (guard, &c)) in run.iter_mut().zip(&candidates[start..b]).enumerate() {
                if r < good {
                    self.push_sampled(c, out);
                    if without {
                        out.probabilities
                            .push(distinct.take(c.index, c.priority, total));
                    }
                } else if without {
                    // Torn: drawn again, so no longer held.
                    distinct.release(c.index);
                }
                *guard = None;
            }
            // An optimistic copy that a writer tore ends the run there: that item is drawn
            // again, and the ones after it go in the next run.
            b = start + good;
            if b < batch && b - start < READ_RUN {
                // Candidate `b` was in flight or rewritten: draw that item again.
                let pick = Pick {
                    draw,
                    total,
                    uniform,
                };
                let taken = redraw(&self.tree, &self.slots, pick, b, rng, distinct, |c| {
                    let Some(guard) = self.slots.try_read(c.index, c.state) else {
                        return false;
                    };
                    held[0] = Some(guard);
                    // SAFETY: row `b < batch`, as above.
                    let good = unsafe { self.slots.copy_rows(&held[..1], columns, b) };
                    let good = Tally::count(&mut tally, &[c][..good]);
                    held[0] = None;
                    if good == 1 {
                        self.push_sampled(c, out);
                    }
                    good == 1
                })?;
                if without {
                    out.probabilities.push(taken);
                }
                b += 1;
            }
        }
        let norm = self.config.weight_normalization();
        batch_weights(draw, norm, (total, min_positive), out, distinct);
        if let Some(tally) = tally {
            tally.keep(|c| self.retire_drawn(c));
        }
        Ok(Descent {
            total,
            min_positive,
        })
    }

    /// A ring selector's draw ([`SampleMode::Fifo`](crate::SampleMode::Fifo) or `Lifo`):
    /// [`Self::sample_stepwise`] over the generations from `order`'s end. A FIFO draw
    /// starts at the `oldest` hint and raises it past the generations it found gone for
    /// good.
    ///
    /// # Safety
    /// As [`Self::sample_in_spare`].
    unsafe fn sample_ordered<D: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        order: Order,
        out: &mut SampleBatch,
        drawn: &mut Drawn,
        columns: &mut D,
    ) -> Result<Descent> {
        // Every generation that may be in the ring: the last `capacity` handed out (those
        // before are overwritten, or being overwritten by a writer that holds their slot's
        // next generation). Not the completed inserts' count: with writes in flight it would
        // hide the oldest items stored.
        let capacity = self.slots.capacity() as u64;
        let handed = self.inserted();
        let span = handed.min(capacity);
        let first = handed - span;
        // ORDERING: Relaxed: a hint; a stale one only costs a longer scan. It only ever
        // passes generations a scan found gone (or older than `first`), so starting there
        // skips nothing that can be drawn.
        let hint = self.counters.oldest.load(Ordering::Relaxed);
        let start = match order {
            Order::Oldest => hint.saturating_sub(first).min(span),
            Order::Newest => 0,
        };
        // Whether every generation from the hint (or `first`) to this one was gone for good,
        // so that the hint may pass them.
        let mut gone_so_far = order == Order::Oldest;
        let at = |step: u64| {
            if step >= span {
                // Items are stored, but every one was in flight or spent: retry.
                return Err(Error::Contention {
                    attempts: u32::try_from(span).unwrap_or(u32::MAX),
                });
            }
            let g = order.generation(handed, span, step);
            let (slot, _) = self.slots.locate(g);
            let state = self.slots.state(slot);
            if gone_so_far {
                if state.gone(g, capacity) {
                    return Ok(None);
                }
                gone_so_far = false;
                // ORDERING: Relaxed, as above: every generation below `g` is gone.
                self.counters.oldest.fetch_max(g, Ordering::Relaxed);
            }
            Ok((self.slots.generation(slot, state) == Some(g)).then_some((slot, state)))
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.sample_stepwise(draw, start, out, drawn, columns, at) }
    }

    /// A search that found no positive priority, begun when `finished` writes had completed:
    /// `ZeroTotalPriority` when no write was in flight (every stored priority was 0); else the
    /// zero may be lazy writing's (the evicted leaf zeroed, the new item not yet published),
    /// not final, so `Ok` (search again, after a spin) up to `MAX_ATTEMPTS`, then the
    /// retryable `Contention`.
    fn after_zero_total(&self, finished: u64, attempt: &mut u32) -> Result<()> {
        // ORDERING: SeqCst, with the load of `finished` and the writers' SeqCst increments
        // (`sample_in_spare`).
        let started = self.counters.cursor.load(Ordering::SeqCst) & !SAVING;
        if started == finished || !self.slots.faults.zero_total_checks_writers() {
            return Err(Error::ZeroTotalPriority);
        }
        *attempt += 1;
        if *attempt >= MAX_ATTEMPTS {
            return Err(Error::Contention { attempts: *attempt });
        }
        spin_wait(*attempt);
        Ok(())
    }

    /// A heap selector's draw ([`SampleMode::MaxHeap`](crate::SampleMode::MaxHeap) or
    /// `MinHeap`): [`Self::sample_stepwise`] over the slots of the largest (smallest)
    /// positive priorities, in the order the tree's walk ranks them (`tree::rank`). The walk
    /// ranks [`FIRST_RANKED`] leaves, and with `max_times_sampled = k` the `B / k` a batch of
    /// B takes at least besides; a batch that needs more (items spent, or in flight) ranks
    /// four times as many again from the top, up to every slot. A walk that finds no
    /// positive priority while writes are in flight is made again, as a prioritized
    /// descent is (`Self::after_zero_total`).
    ///
    /// # Safety
    /// As [`Self::sample_in_spare`].
    unsafe fn sample_heap<D: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        extreme: Extreme,
        out: &mut SampleBatch,
        drawn: &mut Drawn,
        columns: &mut D,
    ) -> Result<Descent> {
        let capacity = self.slots.capacity();
        let mut ranked = std::mem::take(&mut drawn.indices);
        // Few at first: without `max_times_sampled` a batch is the top item alone; with `k`,
        // a batch of B takes at least B / k items, ranked at once (a ranking made again
        // starts from the top, so growing from 8 would rank about twice as many leaves).
        let least = match self.config.max_times_sampled() {
            Some(k) => draw.len().div_ceil(k as usize),
            None => 0,
        };
        let mut m = (FIRST_RANKED + least).min(capacity);
        let mut attempt = 0;
        loop {
            // ORDERING: SeqCst, as in `sample_in_spare`: a writer whose lazy-writing zero the
            // walk saw is counted as started and not as finished.
            let finished = self.counters.completed.load(Ordering::SeqCst);
            self.tree.rank(extreme, m, &mut ranked);
            if !ranked.is_empty() {
                break;
            }
            let retry = match self.len() {
                0 => Err(Error::Empty),
                _ => self.after_zero_total(finished, &mut attempt),
            };
            if let Err(e) = retry {
                drawn.indices = ranked;
                return Err(e);
            }
        }
        // The step at which `ranked` begins: a ranking made again starts from the top of the
        // tree as it is then, so nothing that other samplers' retirements moved up is passed.
        let mut base = 0;
        let at = |step: u64| {
            let step = step as usize;
            if step - base >= ranked.len() && ranked.len() == m && m < capacity {
                m = m.saturating_mul(4).min(capacity);
                self.tree.rank(extreme, m, &mut ranked);
                base = step;
            }
            let Some(&slot) = ranked.get(step - base) else {
                // Every positive priority was tried: each item in flight or spent. Retry.
                return Err(Error::Contention {
                    attempts: u32::try_from(step).unwrap_or(u32::MAX),
                });
            };
            let state = self.slots.state(slot);
            Ok(self.slots.generation(slot, state).map(|_| (slot, state)))
        };
        // SAFETY: forwarded from the caller.
        let result = unsafe { self.sample_stepwise(draw, 0, out, drawn, columns, at) };
        drawn.indices = ranked;
        result
    }

    /// A selector's draw: each draw of the batch takes the first candidate `at(step)` gives,
    /// from `start` on, that can be read and, with `max_times_sampled`, has a draw left; a
    /// draw that takes an item stays on it, so without `max_times_sampled` the batch is that
    /// item `batch` times. `at(step)` is `Ok(None)` for a step that holds no item to draw,
    /// an error when the steps ran out. Probabilities and weights 1.
    ///
    /// # Safety
    /// As [`Self::sample_in_spare`].
    unsafe fn sample_stepwise<D: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        start: u64,
        out: &mut SampleBatch,
        drawn: &mut Drawn,
        columns: &mut D,
        mut at: impl FnMut(u64) -> Result<Option<(usize, SlotState)>>,
    ) -> Result<Descent> {
        let (_, distinct, counted) = drawn.parts();
        let mut tally = self.draws.as_ref().map(|draws| Tally {
            draws,
            counted,
            done: false,
        });
        out.clear_drawn();
        let len = self.len();
        if len == 0 {
            return Err(Error::Empty);
        }
        let mut step = start;
        let mut held: [Option<ReadGuard<'_>>; 1] = [None];
        for j in 0..draw.len() {
            loop {
                let Some((slot, state)) = at(step)? else {
                    step += 1;
                    continue;
                };
                let Some(guard) = self.slots.try_read(slot, state) else {
                    step += 1;
                    continue;
                };
                held[0] = Some(guard);
                // SAFETY: row `j < batch`, within what `columns` has room for (the caller's
                // contract); the guard is this buffer's.
                let good = unsafe { self.slots.copy_rows(&held[..1], columns, j) };
                let c = Candidate {
                    index: slot,
                    priority: self.tree.get(slot),
                    state,
                };
                let good = Tally::count(&mut tally, &[c][..good]);
                held[0] = None;
                if good == 1 {
                    self.push_sampled(c, out);
                    break;
                }
                step += 1;
            }
        }
        let norm = self.config.weight_normalization();
        batch_weights(draw, norm, (len as f64, 1.0), out, distinct);
        if let Some(tally) = tally {
            tally.keep(|c| self.retire_drawn(c));
        }
        Ok(Descent {
            total: len as f64,
            min_positive: 1.0,
        })
    }

    /// A shuffled draw ([`SampleMode::Shuffled`](crate::SampleMode::Shuffled)): the batch's
    /// generations come from the buffer's passes (`protocol::Passes`), in order; each is
    /// read if its item is still stored (waiting out a writer at work on the slot, which
    /// either overwrites it, and then it is gone, or rewrites it in place), and one whose
    /// item is gone, or spent under `max_times_sampled`, is skipped: the pass gives the
    /// next in its place.
    ///
    /// # Safety
    /// As [`Self::sample_in_spare`].
    unsafe fn sample_shuffled<D: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        drawn: &mut Drawn,
        columns: &mut D,
    ) -> Result<Descent> {
        let Some(passes) = &self.passes else {
            return Err(Error::InvalidParameter {
                name: "mode",
                value: f64::from(crate::SampleMode::Shuffled as u32),
                reason: "a buffer in a shared mapping does not draw shuffled passes (a pass \
                         lives in one process's memory)",
            });
        };
        let batch = draw.len();
        let Drawn {
            counted,
            held,
            pending,
            distinct,
            candidates,
            ..
        } = drawn;
        let mut tally = self.draws.as_ref().map(|draws| Tally {
            draws,
            counted,
            done: false,
        });
        out.clear_drawn();
        let len = self.len();
        if len == 0 {
            return Err(Error::Empty);
        }
        crate::mem::reserve(held, batch)?;
        held.clear();
        let capacity = self.slots.capacity() as u64;
        // The generations stored now: the ring's last `capacity` handed out whose slot
        // shows them (a slot being overwritten still shows its item: skipped at its turn).
        let present = |order: &mut Vec<u64>| {
            let handed = self.inserted();
            let span = handed.min(capacity);
            crate::mem::reserve(order, span as usize)?;
            for g in handed - span..handed {
                let (slot, _) = self.slots.locate(g);
                if self.slots.generation(slot, self.slots.state(slot)) == Some(g) {
                    order.push(g);
                }
            }
            Ok(())
        };
        let mut guard: [Option<ReadGuard<'_>>; 1] = [None];
        let mut rounds = 0;
        while held.len() < batch {
            rounds += 1;
            if rounds > MAX_ATTEMPTS {
                return Err(Error::Contention { attempts: rounds });
            }
            pending.clear();
            passes.take(batch - held.len(), batch, held, present, rng, pending)?;
            // Each slot's state, then the priorities under one acquisition of the tree's
            // locks (as a descent's candidates): a join in that state proves the priority
            // belonged to the item copied.
            candidates.clear();
            candidates.extend(pending.iter().map(|&g| {
                let (index, _) = self.slots.locate(g);
                Candidate {
                    index,
                    priority: 0.0,
                    state: self.slots.state(index),
                }
            }));
            self.tree.get_candidates(candidates);
            for (&g, &first) in pending.iter().zip(candidates.iter()) {
                let mut c = first;
                let mut attempt = 0;
                loop {
                    if self.slots.generation(c.index, c.state) != Some(g) {
                        break; // gone: the pass gives another
                    }
                    let copied = match self.slots.try_read(c.index, c.state) {
                        Some(read) => {
                            guard[0] = Some(read);
                            // SAFETY: row `held.len() < batch`, within what `columns` has
                            // room for (the caller's contract); the guard is this buffer's.
                            unsafe { self.slots.copy_rows(&guard[..1], columns, held.len()) }
                        }
                        None => 0,
                    };
                    let kept = Tally::count(&mut tally, &[c][..copied]);
                    if kept == 1 {
                        self.push_sampled(c, out);
                        held.push(g);
                    }
                    guard[0] = None;
                    if copied == 1 {
                        break; // delivered, or spent: skipped
                    }
                    // A writer at work on the slot, or a copy it tore: look again.
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        break; // a writer that does not finish: skipped
                    }
                    spin_wait(attempt);
                    c.state = self.slots.state(c.index);
                    c.priority = self.tree.get(c.index);
                }
            }
        }
        let norm = self.config.weight_normalization();
        batch_weights(draw, norm, (len as f64, 1.0), out, distinct);
        if let Some(tally) = tally {
            tally.keep(|c| self.retire_drawn(c));
        }
        Ok(Descent {
            total: len as f64,
            min_positive: 1.0,
        })
    }

    /// Retire the item of candidate `c`, whose `max_times_sampled`-th delivered draw this
    /// sampler made and no longer holds: deleted by key, as `delete` does (entering as an update,
    /// so that a save in progress sees it whole or not at all).
    fn retire_drawn(&self, c: Candidate) {
        let Some(generation) = self.slots.generation(c.index, c.state) else {
            return;
        };
        let key = self.config.key(c.index, generation);
        let _updating = self.enter_update();
        // Another call that made a `k`-th draw of it may have retired it first.
        (self.slots).remove(key, || self.tree.set_owned(&[(key.index, 0.0)]));
    }

    /// Record sampled candidate `c`, whose row was copied under a read reference that the
    /// caller still holds: its key, index and priority.
    pub(super) fn push_sampled(&self, c: Candidate, out: &mut SampleBatch) {
        let priority = (self.slots.faults).reported_priority(c.priority, || self.tree.get(c.index));
        // A positive priority means the slot holds an item: epoch >= 1.
        let generation = self.slots.generation(c.index, c.state).unwrap_or(0);
        out.keys.push(self.config.key(c.index, generation));
        out.indices.push(c.index);
        out.priorities.push(priority);
    }
}

/// The draws one sample call reserved toward `max_times_sampled` (`protocol::DrawCounts`):
/// committed when the call succeeds (and the items whose `k`-th delivered draw it made are
/// retired), given back when it fails (dropped uncommitted), so that a failed call consumes
/// nothing and a retired item had exactly `k` draws delivered.
struct Tally<'a> {
    draws: &'a DrawCounts,
    counted: &'a mut Vec<Candidate>,
    done: bool,
}

impl Tally<'_> {
    /// Reserve the draws of `copied` (rows copied and still held) in `tally`, if there is
    /// one: returns how many of them, from the first, are kept (up to the first spent one).
    fn count(tally: &mut Option<Tally<'_>>, copied: &[Candidate]) -> usize {
        let Some(tally) = tally else {
            return copied.len();
        };
        for (r, &c) in copied.iter().enumerate() {
            match tally.draws.reserve(c.index, c.state.epoch()) {
                Counted::Kept => tally.counted.push(c),
                Counted::Spent => return r,
            }
        }
        copied.len()
    }

    /// The call succeeded: commit its draws, and `retire` the items whose `k`-th delivered
    /// draw one of them was.
    fn keep(mut self, retire: impl Fn(Candidate)) {
        self.done = true;
        for &c in self.counted.iter() {
            if self.draws.commit(c.index, c.state.epoch()) {
                retire(c);
            }
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        if !self.done {
            for &c in self.counted.iter() {
                self.draws.give_back(c.index, c.state.epoch());
            }
        }
    }
}
