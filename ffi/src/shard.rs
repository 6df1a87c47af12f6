//! Sampling the union of several buffers (shards) exactly, from C: each shard's
//! `kr_buffer_stats`, a `kr_coordinator` that plans the draws over them, each shard's
//! `kr_buffer_sample_at` at its part of the plan, and `kr_coordinator_finish`, which gives
//! the batch its probabilities and importance weights as one buffer holding the union would
//! (`kary_replay::shard` has the arithmetic). The shards may live in this process or behind
//! any transport the caller runs: only `kr_stats`, fractions and priorities cross it.

use kary_replay::buffer::Draw;
use kary_replay::shard::{Coordinator, Reply};
use kary_replay::{Stats, Wait};

use crate::buffer::kr_buffer;
use crate::config::*;
use crate::sample::{checked_out, kr_rng, kr_sample_out, sample_mode, sample_to};
use crate::status::*;

/// A buffer's state as a coordinator reads it (`kr_buffer_stats`, `kr_buffer_sample_at`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct kr_stats {
    /// Sum of the stored priorities.
    pub total: f64,
    /// Items stored.
    pub len: usize,
    /// Slots.
    pub capacity: usize,
    /// Inserts so far (evicted items included).
    pub inserted: u64,
    /// The smallest positive stored priority; 0 when there is none.
    pub min_positive: f64,
    /// The stored priority an insert without one would get now.
    pub running_max: f64,
}

impl From<Stats> for kr_stats {
    fn from(s: Stats) -> kr_stats {
        kr_stats {
            total: s.total,
            len: s.len,
            capacity: s.capacity,
            inserted: s.inserted,
            min_positive: s.min_positive.filter(|m| *m > 0.0).unwrap_or(0.0),
            running_max: s.running_max,
        }
    }
}

/// A shard's reply to its part of a plan (`kr_coordinator_finish`): the stored priorities
/// `kr_buffer_sample_at` returned for its fractions, in their order, and the `total` of
/// the `kr_stats` it returned with them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_reply {
    /// `n` stored priorities (NULL when `n` is 0).
    pub priorities: *const f64,
    /// How many: as many as the shard's fractions in the plan.
    pub n: usize,
    /// The shard's total at its descent.
    pub total: f64,
}

/// An opaque coordinator of shards: plans a batch over them and finishes it. One per
/// sampling thread; it keeps its memory, so a warm one allocates only the replies' list.
pub struct kr_coordinator {
    inner: Coordinator,
    stats: Vec<Stats>,
    probabilities: Vec<f64>,
    weights: Vec<f64>,
}

/// The buffer's total, length, capacity, inserts, smallest positive priority (0: none) and
/// running maximum, each read once, into `*out`: what a coordinator plans with.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` and `out` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_stats(
    buffer: *const kr_buffer,
    out: *mut kr_stats,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = buffer.inner.stats().into();
        Ok(())
    })
}

/// Sample one item at each of the `n` `fractions` (each in `[0, 1)`) of this buffer's own
/// total, as its descent reads it: the shard's part of a `kr_coordinator_plan`. Writes
/// into `out` as `kr_buffer_sample` does, with `weights` all 1 and `probabilities` within
/// this buffer (`kr_coordinator_finish` gives the batch's); `*stats` (NULL: skipped) gets
/// the buffer's stats with the total and smallest positive priority the descent used, so
/// that `stats->total` is the reply's total. A redraw (a slot being written) draws anew
/// over the whole buffer, so an item is still drawn in proportion to its priority.
///
/// Arguments are checked in one order: `buffer` (`KR_E_NULL`); `fractions` (`KR_E_NULL`
/// when `n` > 0); the values: `n` (0) and each fraction (`KR_E_INVALID_ARGUMENT`); then the
/// pointers: `rng`, `out`, the column destinations, `stats` (`KR_E_NULL`, misaligned
/// `KR_E_INVALID_ARGUMENT`); then the buffer's state (`KR_E_EMPTY`,
/// `KR_E_ZERO_TOTAL_PRIORITY`, `KR_E_CONTENTION`). On failure nothing is written but, after
/// `KR_E_CONTENTION`, whole rows in the column memory, as with `kr_buffer_sample`.
///
/// Thread safety: any number of threads at once on one buffer, each with its own `rng`.
///
/// # Safety
/// `buffer`, `rng`, `out` and `stats` are NULL or valid; `fractions` is NULL or holds `n`
/// values; every non-NULL pointer in `*out` has room for `n` items (columns: `n x shape`
/// elements), memory no other thread reads or writes during the call.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_sample_at(
    buffer: *const kr_buffer,
    rng: *mut kr_rng,
    fractions: *const f64,
    n: usize,
    out: *const kr_sample_out,
    stats: *mut kr_stats,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let fractions = unsafe { slice(fractions, n, "fractions") }?;
        kary_replay::buffer::check_fractions(fractions)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let rng = unsafe { rng.as_mut() }.ok_or(Failure::Null("rng"))?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let (out, destinations) = unsafe { checked_out(buffer, out, n) }?;
        // SAFETY: forwarded from the caller.
        let stats = unsafe { optional_mut(stats, "stats") }?;
        // SAFETY: `out` and `destinations` checked above for `n` items, and the caller
        // promises the room (see the function's `# Safety`).
        let descent = unsafe {
            sample_to(
                buffer,
                Draw::At(fractions),
                rng,
                out,
                destinations,
                Wait::Block,
            )
        }?;
        if let Some(stats) = stats {
            *stats = Stats {
                total: descent.total,
                min_positive: Some(descent.min_positive),
                ..buffer.inner.stats()
            }
            .into();
        }
        Ok(())
    })
}

/// Create a coordinator; `*out` is the handle (free it with `kr_coordinator_free`).
///
/// Thread safety: any thread; the coordinator is then used by one thread at a time.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_coordinator_new(out: *mut *mut kr_coordinator) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = Box::into_raw(Box::new(kr_coordinator {
            inner: Coordinator::new(),
            stats: Vec::new(),
            probabilities: Vec::new(),
            weights: Vec::new(),
        }));
        Ok(())
    })
}

/// Free a coordinator (NULL: nothing happens).
///
/// Thread safety: no other thread may use the coordinator during or after the call.
///
/// # Safety
/// `coordinator` is NULL or a handle from `kr_coordinator_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kr_coordinator_free(coordinator: *mut kr_coordinator) {
    if !coordinator.is_null() {
        // SAFETY: a live handle from `kr_coordinator_new` (caller), freed once.
        drop(unsafe { Box::from_raw(coordinator) });
    }
}

/// Plan `batch` draws over the union of `n_shards` shards whose stats are `stats` (each
/// from the shard's `kr_buffer_stats` or its last `kr_buffer_sample_at`), in `mode`
/// (`KR_SAMPLE_*`), drawing from `rng`; then `kr_coordinator_fractions` gives each shard's
/// part. Errors: `KR_E_INVALID_ARGUMENT` (an unknown mode, `batch` 0, more than 32767
/// shards, a total or smallest positive priority that is not finite or negative),
/// `KR_E_EMPTY` (no shard holds an item), `KR_E_ZERO_TOTAL_PRIORITY`; the plan is then
/// empty.
///
/// Thread safety: one thread at a time per coordinator.
///
/// # Safety
/// `coordinator` and `rng` are NULL or valid; `stats` is NULL or holds `n_shards` values.
#[no_mangle]
pub unsafe extern "C" fn kr_coordinator_plan(
    coordinator: *mut kr_coordinator,
    stats: *const kr_stats,
    n_shards: usize,
    batch: usize,
    mode: u32,
    rng: *mut kr_rng,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let coordinator = unsafe { required_mut(coordinator, "coordinator") }?;
        // SAFETY: forwarded from the caller.
        let given = unsafe { slice(stats, n_shards, "stats") }?;
        let mode = sample_mode(mode)?;
        // SAFETY: forwarded from the caller.
        let rng = unsafe { rng.as_mut() }.ok_or(Failure::Null("rng"))?;
        if let Some(bad) = given
            .iter()
            .find(|s| !(s.min_positive.is_finite() && s.min_positive >= 0.0))
        {
            return Err(Failure::Invalid(format!(
                "a shard's min_positive is {}: it must be finite and >= 0 (0: none)",
                bad.min_positive
            )));
        }
        coordinator.stats.clear();
        coordinator.stats.extend(given.iter().map(|s| Stats {
            total: s.total,
            len: s.len,
            capacity: s.capacity,
            inserted: s.inserted,
            min_positive: (s.min_positive > 0.0).then_some(s.min_positive),
            running_max: s.running_max,
        }));
        coordinator
            .inner
            .plan(&coordinator.stats, batch, mode, &mut rng.rng)?;
        Ok(())
    })
}

/// Shard `shard`'s fractions in the last plan: `*fractions` points at `*n` values (in draw
/// order; 0 when the shard got no draw, and then the pointer is not to be read), valid until
/// the coordinator's next plan or its free. `KR_E_OUT_OF_RANGE` for a shard the plan did not
/// have.
///
/// Thread safety: one thread at a time per coordinator.
///
/// # Safety
/// `coordinator` is NULL or valid; `fractions` and `n` are NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_coordinator_fractions(
    coordinator: *const kr_coordinator,
    shard: usize,
    fractions: *mut *const f64,
    n: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let coordinator = unsafe { get(coordinator, "coordinator") }?;
        // SAFETY: forwarded from the caller.
        let fractions = unsafe { required_mut(fractions, "fractions") }?;
        // SAFETY: forwarded from the caller.
        let n = unsafe { required_mut(n, "n") }?;
        let shards = coordinator.inner.shards();
        if shard >= shards {
            return Err(kary_replay::Error::OutOfRange {
                index: shard,
                capacity: shards,
            }
            .into());
        }
        let f = coordinator.inner.fractions(shard);
        *fractions = f.as_ptr();
        *n = f.len();
        Ok(())
    })
}

/// The probabilities and importance weights (exponent `beta`, normalized by
/// `weight_normalization`, `KR_WEIGHTS_*`) of the batch made of the shards' replies to the
/// last plan, concatenated in shard order: `replies[k]` is shard k's (see `kr_reply`),
/// `n_replies` the plan's shards. `probabilities`, `weights` and `weights_f32` (each NULL:
/// skipped) get `batch` values, the plan's batch. Errors: `KR_E_LENGTH_MISMATCH` (replies
/// that do not match the plan, or another `batch`), `KR_E_INVALID_ARGUMENT` (beta, the
/// normalization, a reply's total); nothing is written then.
///
/// Thread safety: one thread at a time per coordinator.
///
/// # Safety
/// `coordinator` is NULL or valid; `replies` is NULL or holds `n_replies` values whose
/// `priorities` hold `n` values each; every non-NULL output has room for `batch` values.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // Three optional outputs, as kr_sample_out's types.
pub unsafe extern "C" fn kr_coordinator_finish(
    coordinator: *mut kr_coordinator,
    replies: *const kr_reply,
    n_replies: usize,
    beta: f64,
    weight_normalization: u32,
    batch: usize,
    probabilities: *mut f64,
    weights: *mut f64,
    weights_f32: *mut f32,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let coordinator = unsafe { required_mut(coordinator, "coordinator") }?;
        // SAFETY: forwarded from the caller.
        let given = unsafe { slice(replies, n_replies, "replies") }?;
        let norm = weight_normalization_from(weight_normalization)?;
        let replies = given
            .iter()
            .map(|r| {
                // SAFETY: forwarded from the caller: `n` readable priorities each.
                let priorities = unsafe { slice(r.priorities, r.n, "a reply's priorities") }?;
                Ok(Reply {
                    priorities,
                    total: r.total,
                })
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        let planned: usize = (0..coordinator.inner.shards())
            .map(|k| coordinator.inner.fractions(k).len())
            .sum();
        if batch != planned {
            return Err(kary_replay::Error::LengthMismatch {
                what: "batch",
                expected: planned,
                got: batch,
            }
            .into());
        }
        for (p, what) in [
            (probabilities.cast::<u8>(), "probabilities"),
            (weights.cast::<u8>(), "weights"),
        ] {
            aligned(p, std::mem::align_of::<f64>(), what)?;
            if !p.is_null() {
                addressable(batch, std::mem::size_of::<f64>(), what)?;
            }
        }
        aligned(weights_f32, std::mem::align_of::<f32>(), "weights_f32")?;
        if !weights_f32.is_null() {
            addressable(batch, std::mem::size_of::<f32>(), "weights_f32")?;
        }
        let c = &mut *coordinator;
        c.inner
            .finish(&replies, beta, norm, &mut c.probabilities, &mut c.weights)?;
        // SAFETY: every non-NULL output has room for `batch` values (caller), and the
        // vectors hold exactly `batch` (the plan's batch, checked above).
        unsafe {
            crate::sample::write(probabilities, c.probabilities.iter().copied());
            crate::sample::write(weights, c.weights.iter().copied());
            crate::sample::write(weights_f32, c.weights.iter().map(|&w| w as f32));
        }
        Ok(())
    })
}
