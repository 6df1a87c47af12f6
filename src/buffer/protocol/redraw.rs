//! The one redraw loop of every family that copies rows under the slot protocol.

use super::{Candidate, SharedTree, MAX_ATTEMPTS, STRATUM_ATTEMPTS};
use crate::buffer::slots::Slots;
use crate::buffer::Draw;
use crate::error::{Error, Result};
use crate::rng::RandomSource;
use crate::sync::spin_wait;

/// Draw item `b` of `draw` again, its candidate having been in flight or rewritten, until
/// `take` accepts a candidate (joins its slot and copies what the family copies): after a
/// backoff, in the item's own stratum for the first `STRATUM_ATTEMPTS` redraws, then over
/// the whole range; [`Error::Contention`] after `MAX_ATTEMPTS`. The one redraw loop of every
/// family that copies rows under the slot protocol (this buffer's items, the sequence
/// buffer's windows).
pub(crate) fn redraw<T: SharedTree>(
    tree: &T,
    slots: &Slots,
    draw: Draw<'_>,
    b: usize,
    total: f64,
    rng: &mut dyn RandomSource,
    mut take: impl FnMut(Candidate) -> bool,
) -> Result<()> {
    let batch = draw.len();
    let mut attempt = 0;
    loop {
        attempt += 1;
        if attempt >= MAX_ATTEMPTS {
            return Err(Error::Contention { attempts: attempt });
        }
        spin_wait(attempt);
        let in_stratum = attempt < STRATUM_ATTEMPTS;
        let x = draw.redraw(in_stratum, b, rng.next_f64(), total, batch);
        let Some(c) = tree.candidate(slots, x) else {
            continue;
        };
        if c.priority > 0.0 && take(c) {
            return Ok(());
        }
    }
}
