//! Sampling: the per-thread `kr_rng`, `kr_sample_out`, and `kr_buffer_sample`, which
//! writes the rows straight into the caller's column memory.

use std::cell::RefCell;
use std::ffi::c_void;

use kary_replay::buffer::{Descent, Draw, Rows};
use kary_replay::{ColumnSliceMut, Error, SampleBatch, SampleMode, Wait};
use rand::{rngs::SmallRng, SeedableRng};

use crate::buffer::{kr_buffer, kr_key, to_c_key};
use crate::status::*;

thread_local! {
    /// Each sampling thread's batch, reused so that a sample allocates nothing once warm
    /// (it keeps the largest batch's memory until the thread exits).
    static SCRATCH: RefCell<SampleBatch> = RefCell::new(SampleBatch::default());
}

/// Sampling mode: B independent draws.
pub const KR_SAMPLE_INDEPENDENT: u32 = 0;

/// Sampling mode: one draw in each of B equal strata.
pub const KR_SAMPLE_STRATIFIED: u32 = 1;

/// Sampling mode: successive draws without replacement: no item twice in one batch; each item's
/// probability is its conditional one, `p / (total - E)` with `E` the priorities drawn
/// before it. A batch larger than the items of positive priority is `KR_E_INVALID_ARGUMENT`.
/// Flat and sequence buffers; a sharded buffer refuses it.
pub const KR_SAMPLE_WITHOUT_REPLACEMENT: u32 = 2;

/// Sampling mode: every item stored equally likely, whatever its priority (0 included); the
/// probabilities are `1 / N` and the weights 1. Flat buffers; a sequence or sharded buffer
/// refuses it (`KR_E_INVALID_ARGUMENT`).
pub const KR_SAMPLE_UNIFORM: u32 = 3;

/// Sampling mode: the oldest item (Reverb's `Fifo` selector): each draw takes the oldest item
/// stored that has a draw left, so without `kr_config.max_times_sampled` every draw is the
/// same item, and with `max_times_sampled = 1` the buffer is a queue. Probabilities and
/// weights are 1. Flat buffers; a sequence or sharded buffer refuses it.
pub const KR_SAMPLE_FIFO: u32 = 4;

/// Sampling mode: the newest item (Reverb's `Lifo` selector), as `KR_SAMPLE_FIFO` from the
/// other end.
pub const KR_SAMPLE_LIFO: u32 = 5;

/// Sampling mode: uniform draws without replacement across batches (an epoch over the data,
/// as TorchRL's `SamplerWithoutReplacement`): every sampler of the buffer draws from one
/// pass, a random order of the items stored when it began, so no item is drawn twice in a
/// pass; when it runs out the next pass begins, and a batch that spans two still holds no
/// item twice. An item gone since its pass began is skipped, one inserted during a pass
/// joins the next. Probabilities `1 / N`, weights 1; a batch larger than the items stored is
/// `KR_E_INVALID_ARGUMENT`. Flat buffers on the heap; a shared, sequence or sharded buffer
/// refuses it, and a checkpoint does not keep the pass.
pub const KR_SAMPLE_SHUFFLED: u32 = 6;

/// Sampling mode: the item of the largest priority (Reverb's `MaxHeap` selector): each draw
/// takes the stored item of the largest positive priority that has a draw left, so without
/// `kr_config.max_times_sampled` every draw is the same item, and with `max_times_sampled =
/// 1` a batch takes the B largest in order. Ties go to the lower slot; items of priority 0
/// are not drawn (`KR_E_ZERO_TOTAL_PRIORITY` when every one is 0). Probabilities and weights
/// are 1. Flat buffers made with `kr_config.max_heap = 1` (or
/// `KR_DEFAULT_PRIORITY_LIVE_MAX`), whose trees keep their maxima; any other buffer refuses
/// it (`KR_E_INVALID_ARGUMENT`).
pub const KR_SAMPLE_MAX_HEAP: u32 = 7;

/// Sampling mode: the item of the smallest positive priority (Reverb's `MinHeap` selector),
/// as `KR_SAMPLE_MAX_HEAP` from the other end, on every flat buffer (every tree keeps its
/// minima: no option needed).
pub const KR_SAMPLE_MIN_HEAP: u32 = 8;

/// Where `kr_buffer_sample` writes a batch of B items. Every pointer may be NULL (that
/// output is skipped) except that `columns`, when not NULL, must hold one pointer per
/// schema column, each to room for `B x shape` elements of the column's dtype: the rows are
/// copied there straight from the buffer, once (a tensor's `data_ptr()` will do).
/// `weights_f32` and `indices_i64` are the same values as `weights` and `indices` in the
/// types a LibTorch learner uses (float32 weights, int64 indices), so that no cast kernel
/// is needed; any combination may be asked for.
///
/// Zero-initialize it (`kr_sample_out out = {0};`, or `{}` in C++) and set what you want,
/// so that fields added later stay NULL.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_sample_out {
    /// B keys.
    pub keys: *mut kr_key,
    /// B slot indices.
    pub indices: *mut u64,
    /// B importance weights in (0, 1].
    pub weights: *mut f64,
    /// B sampling probabilities.
    pub probabilities: *mut f64,
    /// B stored priorities.
    pub priorities: *mut f64,
    /// One destination per column, or NULL for no columns.
    pub columns: *const *mut c_void,
    /// B importance weights as `float`.
    pub weights_f32: *mut f32,
    /// B slot indices as `int64_t`.
    pub indices_i64: *mut i64,
}

impl Default for kr_sample_out {
    /// Every output NULL (skipped).
    fn default() -> kr_sample_out {
        kr_sample_out {
            keys: std::ptr::null_mut(),
            indices: std::ptr::null_mut(),
            weights: std::ptr::null_mut(),
            probabilities: std::ptr::null_mut(),
            priorities: std::ptr::null_mut(),
            columns: std::ptr::null(),
            weights_f32: std::ptr::null_mut(),
            indices_i64: std::ptr::null_mut(),
        }
    }
}

/// An opaque random number generator state; each sampling thread owns one.
pub struct kr_rng {
    pub(crate) rng: SmallRng,
}

/// Create a random number generator seeded with `seed`; `*out` is the handle (free it
/// with `kr_rng_free`).
///
/// Thread safety: any thread; the generator is then used by one thread at a time.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_rng_new(seed: u64, out: *mut *mut kr_rng) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = Box::into_raw(Box::new(kr_rng {
            rng: SmallRng::seed_from_u64(seed),
        }));
        Ok(())
    })
}

/// Free a generator (NULL: nothing happens).
///
/// Thread safety: no other thread may use the generator during or after the call.
///
/// # Safety
/// `rng` is NULL or a handle from `kr_rng_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kr_rng_free(rng: *mut kr_rng) {
    if !rng.is_null() {
        // SAFETY: a live handle from `kr_rng_new` (caller), freed once.
        drop(unsafe { Box::from_raw(rng) });
    }
}

/// Sample `batch` items proportionally to their priorities with importance-weight exponent
/// `beta` and `mode` (`KR_SAMPLE_*`), drawing from `rng`, and write them into `out` (see
/// `kr_sample_out`). On failure nothing is written to keys, indices, weights, probabilities
/// and priorities; the column memory is untouched too when the call is refused before
/// sampling (every status but `KR_E_CONTENTION`), and after `KR_E_CONTENTION` it may hold
/// whole rows of items sampled before the failure (never a torn row): take it as
/// unspecified.
///
/// Arguments are checked in one order, so that a call with several faults reports the same
/// one everywhere (the C++ wrapper too): `buffer` (`KR_E_NULL`); then the values: `mode`,
/// `batch` (0), `beta` (`KR_E_INVALID_ARGUMENT`); then the pointers: `rng`, `out`, the
/// column destinations (`KR_E_NULL`; a misaligned output is `KR_E_INVALID_ARGUMENT`); then
/// the buffer's state and its rate limiter (`KR_E_EMPTY`, `KR_E_ZERO_TOTAL_PRIORITY`,
/// `KR_E_CONTENTION`; `KR_E_CLOSED`). Under a rate limit (`kr_config.rate_limit`) it waits
/// as long as the limiter makes it: `kr_buffer_sample_wait` takes a timeout.
///
/// Thread safety: any number of threads at once on one buffer, each with its own `rng`.
///
/// # Safety
/// `buffer`, `rng`, `out` are NULL or valid; every non-NULL pointer in `*out` has room for
/// `batch` items (columns: `batch x shape` elements), and no other thread reads or writes
/// that memory during the call.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_sample(
    buffer: *const kr_buffer,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    out: *const kr_sample_out,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { sample_waiting(buffer, rng, batch, beta, mode, out, || Ok(Wait::Block)) }
}

/// `kr_buffer_sample` with the rate limiter's wait from `wait` (checked after `mode`).
///
/// # Safety
/// As `kr_buffer_sample`.
pub(crate) unsafe fn sample_waiting(
    buffer: *const kr_buffer,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    out: *const kr_sample_out,
    wait: impl FnOnce() -> Result<Wait, Failure>,
) -> kr_status {
    boundary(|| {
        // Checks in the documented order: the handle, then sizes and values, then pointers.
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        let mode = sample_mode(mode)?;
        let wait = wait()?;
        kary_replay::buffer::check_sample_arguments(batch, beta)?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let rng = unsafe { rng.as_mut() }.ok_or(Failure::Null("rng"))?;
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        let (out, destinations) = unsafe { checked_out(buffer, out, batch) }?;
        let draw = Draw::Batch { batch, beta, mode };
        // SAFETY: `out` and `destinations` checked above for `batch` items, and the caller
        // promises the room (see the function's `# Safety`).
        unsafe { sample_to(buffer, draw, rng, out, destinations, wait) }.map(drop)
    })
}

/// `KR_SAMPLE_*` as a mode.
pub(crate) fn sample_mode(mode: u32) -> Result<SampleMode, Failure> {
    match mode {
        KR_SAMPLE_INDEPENDENT => Ok(SampleMode::Independent),
        KR_SAMPLE_STRATIFIED => Ok(SampleMode::Stratified),
        KR_SAMPLE_WITHOUT_REPLACEMENT => Ok(SampleMode::WithoutReplacement),
        KR_SAMPLE_UNIFORM => Ok(SampleMode::Uniform),
        KR_SAMPLE_FIFO => Ok(SampleMode::Fifo),
        KR_SAMPLE_LIFO => Ok(SampleMode::Lifo),
        KR_SAMPLE_SHUFFLED => Ok(SampleMode::Shuffled),
        KR_SAMPLE_MAX_HEAP => Ok(SampleMode::MaxHeap),
        KR_SAMPLE_MIN_HEAP => Ok(SampleMode::MinHeap),
        other => Err(Failure::Invalid(format!("unknown sample mode {other}"))),
    }
}

/// The checks of a sample's outputs, in the documented order: `out` (NULL), its column
/// destinations (NULL, alignment), then each other output's alignment and room for
/// `batch` items. Returns `out` and the column destinations (`None`: no columns).
///
/// # Safety
/// `out` is NULL or valid, and when not NULL its `columns` is NULL or holds one pointer per
/// column of `buffer`'s schema.
pub(crate) unsafe fn checked_out<'a>(
    buffer: &kr_buffer,
    out: *const kr_sample_out,
    batch: usize,
) -> Result<(&'a kr_sample_out, Option<&'a [*mut c_void]>), Failure> {
    // SAFETY: forwarded from the caller.
    let out = unsafe { get(out, "out") }?;
    let destinations = if out.columns.is_null() {
        None
    } else {
        // SAFETY: forwarded from the caller.
        let d = unsafe { slice(out.columns, buffer.columns.len(), "out->columns") }?;
        if d.iter().any(|p| p.is_null()) {
            return Err(Failure::Null("a column destination"));
        }
        for (&p, &(dtype, _)) in d.iter().zip(&buffer.columns) {
            // Every dtype's alignment is its size.
            aligned(p, dtype.size(), "a column destination")?;
        }
        Some(d)
    };
    check_room(out.keys, batch, "out->keys")?;
    check_room(out.indices, batch, "out->indices")?;
    check_room(out.weights, batch, "out->weights")?;
    check_room(out.probabilities, batch, "out->probabilities")?;
    check_room(out.priorities, batch, "out->priorities")?;
    check_room(out.weights_f32, batch, "out->weights_f32")?;
    check_room(out.indices_i64, batch, "out->indices_i64")?;
    Ok((out, destinations))
}

/// The one check of an output array of the C ABI: `KR_E_INVALID_ARGUMENT` unless `p` is
/// aligned for `T` and `n` of its elements fit the address space (a batch whose outputs
/// cannot exist is an impossible count, like a column's). NULL passes: the output is
/// skipped.
pub(crate) fn check_room<T>(p: *mut T, n: usize, what: &'static str) -> Result<(), Failure> {
    aligned(p, std::mem::align_of::<T>(), what)?;
    match p.is_null() {
        true => Ok(()),
        false => addressable(n, std::mem::size_of::<T>(), what),
    }
}

/// Sample `draw` from `buffer` and write it into `out`: the rows straight into
/// `destinations` (none: the rows are skipped), the rest from the thread's reused batch.
/// Returns what the descent read.
///
/// # Safety
/// `out` and `destinations` passed [`checked_out`] for `draw.len()` items, and every
/// non-NULL pointer in them has room for that many (columns: `batch x shape` elements)
/// that nothing else reads or writes during the call.
pub(crate) unsafe fn sample_to(
    buffer: &kr_buffer,
    draw: Draw<'_>,
    rng: &mut kr_rng,
    out: &kr_sample_out,
    destinations: Option<&[*mut c_void]>,
    wait: Wait,
) -> Result<Descent, Failure> {
    let batch = draw.len();
    SCRATCH.with(|scratch| {
        // Not re-entered: nothing below calls back into C.
        let mut sampled = scratch.borrow_mut();
        let descent = match destinations {
            // SAFETY: `d` holds one non-NULL pointer per column, each aligned with room for
            // `batch x shape` elements that nothing else uses during the call (this
            // function's `# Safety`).
            Some(d) => unsafe {
                let mut descent = None;
                with_destinations(buffer, d, batch, |columns| {
                    descent = Some(buffer.inner.sample_waiting(
                        draw,
                        Rows::Into(columns),
                        &mut rng.rng,
                        &mut sampled,
                        wait,
                    )?);
                    Ok(())
                })?;
                descent.expect("set by a successful sample")
            },
            None => {
                (buffer.inner).sample_waiting(draw, Rows::Skip, &mut rng.rng, &mut sampled, wait)?
            }
        };
        // SAFETY: forwarded from the caller (see the function's `# Safety`).
        unsafe { write_sample(&sampled, out) };
        Ok(descent)
    })
}

/// Run `f` on the caller's column destinations as typed slices of `batch` rows each, built
/// on the stack for up to 16 columns (no allocation once warm).
///
/// # Safety
/// `destinations` holds one pointer per column of `buffer`'s schema, each non-NULL, aligned
/// for the column's dtype and valid for writes of `batch x shape` elements of it, memory
/// that nothing else reads or writes during the call.
pub(crate) unsafe fn with_destinations(
    buffer: &kr_buffer,
    destinations: &[*mut c_void],
    batch: usize,
    f: impl FnOnce(&mut [ColumnSliceMut<'_>]) -> kary_replay::Result<()>,
) -> Result<(), Failure> {
    // Columns a schema may have before a sample needs the heap for their views. Local, so
    // that cbindgen, which parses every module-level item, does not warn that it skips it.
    const STACK_COLUMNS: usize = 16;
    let mut views = destinations
        .iter()
        .zip(&buffer.columns)
        .map(|(&p, &(dtype, shape))| {
            let len = batch
                .checked_mul(shape)
                .ok_or(Failure::Core(Error::SizeOverflow {
                    what: "batch x shape of a sampled column",
                }))?;
            addressable(len, dtype.size(), "a column destination")?;
            // SAFETY: `p` is non-null, aligned for the dtype and has room for `batch x shape`
            // elements, used by nothing else (this function's `# Safety`); `len` is
            // addressable (checked above); a sample writes only 0 or 1 into bool columns.
            Ok(unsafe { ColumnSliceMut::from_raw_parts(dtype, p.cast(), len) })
        });
    if destinations.len() <= STACK_COLUMNS {
        let mut stack: [ColumnSliceMut<'_>; STACK_COLUMNS] =
            std::array::from_fn(|_| ColumnSliceMut::U8(&mut []));
        for slot in stack.iter_mut().take(destinations.len()) {
            *slot = views.next().expect("one view per destination")?;
        }
        f(&mut stack[..destinations.len()])?;
    } else {
        let mut heap = views.collect::<Result<Vec<_>, Failure>>()?;
        f(&mut heap)?;
    }
    Ok(())
}

/// Copy a sampled batch's keys, indices, weights, probabilities and priorities into the
/// caller's outputs (its columns went straight into the caller's memory).
///
/// # Safety
/// Every non-NULL pointer in `out` has room for the batch.
pub(crate) unsafe fn write_sample(sampled: &SampleBatch, out: &kr_sample_out) {
    // SAFETY: every non-NULL output has room for the batch (caller), and `sampled`
    // holds exactly one batch of each.
    unsafe {
        write(out.keys, sampled.keys.iter().map(to_c_key));
        write(out.indices, sampled.indices.iter().map(|&i| i as u64));
        write(out.indices_i64, sampled.indices.iter().map(|&i| i as i64));
        write(out.weights, sampled.weights.iter().copied());
        write(out.weights_f32, sampled.weights.iter().map(|&w| w as f32));
        write(out.probabilities, sampled.probabilities.iter().copied());
        write(out.priorities, sampled.priorities.iter().copied());
    }
}

/// Write `values` to `dst` one after another (skip when `dst` is NULL).
///
/// # Safety
/// `dst` is NULL or has room for every value.
pub(crate) unsafe fn write<T>(dst: *mut T, values: impl Iterator<Item = T>) {
    if !dst.is_null() {
        for (i, v) in values.enumerate() {
            // SAFETY: room for every value (caller).
            unsafe { dst.add(i).write(v) };
        }
    }
}
