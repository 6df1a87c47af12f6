//! Shuffled passes ([`SampleMode::Shuffled`](crate::SampleMode::Shuffled)): uniform draws
//! without replacement across batches. A pass is a uniformly random order of the items
//! stored when it begins, named by their generations; every sampler of the buffer takes
//! its draws from the same pass, in order, under one lock, so no item is drawn twice in a
//! pass however many learners sample. When a pass runs out the next begins at once, over
//! the items stored then; a batch that ends one pass and begins the next never holds an
//! item twice: the new pass's first draws for that batch are drawn among the items the
//! batch does not hold yet (the rest of the order stays uniform). An item gone since its
//! pass began (evicted, deleted, consumed, retired) is skipped when its turn comes, and an
//! item inserted during a pass joins the next one. docs/design.md, "Shuffled passes".
//!
//! The order lives on the heap of one process: a buffer in a shared mapping refuses the
//! mode, and a checkpoint or pickle does not keep it (a restored buffer begins a pass).

use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::rng::RandomSource;

/// The shuffled passes of one buffer: the current pass's order and how far its draws went.
#[derive(Debug, Default)]
pub(crate) struct Passes {
    pass: Mutex<Pass>,
}

#[derive(Debug, Default, Clone)]
struct Pass {
    /// The generations of the pass, in the order they are drawn.
    order: Vec<u64>,
    /// The next draw's position in `order`.
    next: usize,
    /// Passes begun so far.
    begun: u64,
}

impl Clone for Passes {
    fn clone(&self) -> Passes {
        Passes {
            pass: Mutex::new(self.lock().clone()),
        }
    }
}

/// Why a shuffled sample is refused: more draws than items.
pub(crate) fn too_few_to_shuffle(batch: usize) -> Error {
    Error::InvalidParameter {
        name: "batch",
        value: batch as f64,
        reason: "a shuffled sample draws at most as many items as are stored (no item twice \
                 in a batch)",
    }
}

/// A uniform integer in `0..n` (`n >= 1`) from one uniform double.
#[inline]
fn below(rng: &mut dyn RandomSource, n: usize) -> usize {
    ((rng.next_f64() * n as f64) as usize).min(n - 1)
}

impl Passes {
    fn lock(&self) -> MutexGuard<'_, Pass> {
        // A panic under the lock leaves the order as valid as before it: keep it.
        self.pass
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Passes begun so far.
    #[cfg(all(test, not(loom)))]
    fn begun(&self) -> u64 {
        self.lock().begun
    }

    /// Append the next `need` generations of the pass to `out`, beginning passes as they run
    /// out: `present` fills a fresh pass's (empty) order with the generations stored now
    /// (its room reserved fallibly),
    /// and the first draws a new pass makes for this batch avoid `held`, the generations the
    /// batch holds already. Fewer than `need` only when the items stored
    /// cannot make up the batch without a repeat (refused: [`too_few_to_shuffle`], with
    /// `batch` the call's size).
    pub(crate) fn take(
        &self,
        need: usize,
        batch: usize,
        held: &[u64],
        present: impl Fn(&mut Vec<u64>) -> Result<()>,
        rng: &mut dyn RandomSource,
        out: &mut Vec<u64>,
    ) -> Result<()> {
        crate::mem::reserve(out, need)?;
        let mut pass = self.lock();
        let mut left = need;
        let mut fresh = false;
        while left > 0 {
            if pass.next == pass.order.len() {
                if fresh {
                    // A pass just begun ran out: the items stored cannot make up the batch.
                    return Err(too_few_to_shuffle(batch));
                }
                // The held generations this batch took from the pass that ran out, and
                // those of this call so far.
                let mut avoid: Vec<u64> = Vec::new();
                crate::mem::reserve(&mut avoid, held.len() + out.len())?;
                avoid.extend_from_slice(held);
                avoid.extend_from_slice(out);
                avoid.sort_unstable();
                if !pass.begin(&present, &avoid, left, rng)? {
                    return Err(too_few_to_shuffle(batch));
                }
                fresh = true;
            }
            let (next, end) = (pass.next, pass.order.len().min(pass.next + left));
            out.extend_from_slice(&pass.order[next..end]);
            left -= end - next;
            pass.next = end;
        }
        Ok(())
    }
}

impl Pass {
    /// Begin a pass over the generations `present` gives, in a uniformly random order but
    /// for its first `first` draws, which avoid the sorted `avoid`; false (nothing begun)
    /// when fewer than `first` items are outside `avoid`, and `present`'s error when it
    /// fails (then too the pass is left ended).
    fn begin(
        &mut self,
        present: &impl Fn(&mut Vec<u64>) -> Result<()>,
        avoid: &[u64],
        first: usize,
        rng: &mut dyn RandomSource,
    ) -> Result<bool> {
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        let filled = present(&mut order);
        if let Err(e) = filled {
            self.order = order;
            self.next = self.order.len();
            return Err(e);
        }
        let avoided = |g: &u64| avoid.binary_search(g).is_ok();
        let n = order.len();
        let free = n - order.iter().filter(|g| avoided(g)).count();
        if free < first.min(n) || n == 0 {
            self.order = order;
            self.next = self.order.len();
            return Ok(false);
        }
        // Fisher-Yates; the first `first` positions each draw among the later items not
        // avoided (rejection: at least one is left, as `free >= first`).
        for i in 0..n {
            let mut j = i + below(rng, n - i);
            if i < first {
                while avoided(&order[j]) {
                    j = i + below(rng, n - i);
                }
            }
            order.swap(i, j);
        }
        self.order = order;
        self.next = 0;
        self.begun += 1;
        Ok(true)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Xoshiro256;

    fn present(n: u64) -> impl Fn(&mut Vec<u64>) -> Result<()> {
        move |out: &mut Vec<u64>| {
            out.extend(0..n);
            Ok(())
        }
    }

    #[test]
    fn a_pass_draws_every_item_once() {
        let passes = Passes::default();
        let mut rng = Xoshiro256::new(1);
        let mut out = Vec::new();
        for _ in 0..5 {
            passes
                .take(2, 2, &[], present(10), &mut rng, &mut out)
                .unwrap();
        }
        let mut seen = out.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(passes.begun(), 1);
    }

    #[test]
    fn a_batch_across_two_passes_holds_no_item_twice() {
        let passes = Passes::default();
        let mut rng = Xoshiro256::new(2);
        for _ in 0..200 {
            let mut out = Vec::new();
            passes
                .take(3, 3, &[], present(4), &mut rng, &mut out)
                .unwrap();
            let mut seen = out.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), 3, "{out:?}");
        }
        assert!(passes.begun() > 100);
    }

    #[test]
    fn too_few_items_are_refused() {
        let passes = Passes::default();
        let mut rng = Xoshiro256::new(3);
        let mut out = Vec::new();
        let err = passes.take(5, 5, &[], present(4), &mut rng, &mut out);
        assert!(matches!(
            err,
            Err(Error::InvalidParameter { name: "batch", .. })
        ));
    }
}
