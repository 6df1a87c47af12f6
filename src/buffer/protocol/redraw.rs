//! The one redraw loop of every family that copies rows under the slot protocol.

use super::{Candidate, Distinct, SharedTree, Uniform, MAX_ATTEMPTS, STRATUM_ATTEMPTS};
use crate::buffer::slots::Slots;
use crate::buffer::Draw;
use crate::error::{Error, Result};
use crate::rng::RandomSource;
use crate::sync::spin_wait;

/// What a batch's redraws draw from: its draw, the total its targets were drawn over, and
/// for a uniform draw the items it picks among.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pick<'a> {
    pub(crate) draw: Draw<'a>,
    pub(crate) total: f64,
    pub(crate) uniform: Option<Uniform>,
}

/// Draw item `b` of `draw` again, its candidate having been in flight or rewritten, until
/// `take` accepts a candidate (joins its slot and copies what the family copies): after a
/// backoff, in the item's own stratum for the first `STRATUM_ATTEMPTS` redraws, then over
/// the whole range; [`Error::Contention`] after `MAX_ATTEMPTS`. The one redraw loop of every
/// family that copies rows under the slot protocol (this buffer's items, the sequence
/// buffer's windows).
///
/// Without replacement (`draw.without_replacement()`), each redraw is among the items
/// `distinct` has not taken ([`Distinct::target`]), a taken one found again is drawn again,
/// and the item accepted is taken into `distinct`: the returned value is then its
/// conditional probability (else 0).
///
/// A uniform draw (`pick.uniform`) redraws uniformly among the same items, a slot being written
/// or emptied included (it is refused again and drawn again).
pub(crate) fn redraw<T: SharedTree>(
    tree: &T,
    slots: &Slots,
    pick: Pick<'_>,
    b: usize,
    rng: &mut dyn RandomSource,
    distinct: &mut Distinct,
    mut take: impl FnMut(Candidate) -> bool,
) -> Result<f64> {
    let Pick {
        draw,
        total,
        uniform,
    } = pick;
    let batch = draw.len();
    let without = draw.without_replacement();
    let mut attempt = 0;
    loop {
        attempt += 1;
        if attempt >= MAX_ATTEMPTS {
            return Err(Error::Contention { attempts: attempt });
        }
        let u = rng.next_f64();
        if let Some(uniform) = uniform {
            spin_wait(attempt);
            let c = uniform.candidate(tree, slots, u);
            if c.state.epoch() > 0 && take(c) {
                return Ok(0.0);
            }
            continue;
        }
        let x = if without {
            distinct.target(u, total, batch, |i| tree.prefix_before(i))?
        } else {
            spin_wait(attempt);
            draw.redraw(attempt < STRATUM_ATTEMPTS, b, u, total, batch)
        };
        let Some(c) = tree.candidate(slots, x) else {
            continue;
        };
        if without && distinct.contains(c.index) {
            // Rounding or a concurrent update put a taken item under the target.
            continue;
        }
        if c.priority > 0.0 && take(c) {
            return Ok(if without {
                distinct.take(c.index, c.priority, total)
            } else {
                0.0
            });
        }
        if without {
            // In flight: wait as for any redraw.
            spin_wait(attempt);
        }
    }
}
