//! Lanes of steps and windows over them (`kary_replay::sequence`): the `kr_seq` buffer,
//! one `kr_lane` writer per lane, and `kr_seq_sample`, which writes windows, stacks, next
//! observations and n-step returns straight into the caller's memory.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use kary_replay::sequence::{
    LaneWriter, Padding, Partial, SequenceBatch, SequenceBuffer, SequenceConfig, SequenceRef,
};
use kary_replay::{ColumnSliceMut, DType, Key, Wait};

use crate::buffer::{
    c_column, column_slices, kr_key, kr_update_report, read_handle_into, schema_from, to_c_key,
};
use crate::config::*;
use crate::sample::{check_room, kr_rng, sample_mode};
use crate::status::*;

thread_local! {
    /// Each sampling thread's batch, reused (no allocation once warm).
    static SCRATCH: RefCell<SequenceBatch> = RefCell::new(SequenceBatch::default());
}

/// Windows cut short by their episode's end are kept (shorter, masked).
pub const KR_PARTIAL_KEEP: u32 = 0;
/// Windows cut short by their episode's end are never sampled.
pub const KR_PARTIAL_DROP: u32 = 1;
/// Stacked frames before an episode's start repeat its first frame.
pub const KR_PADDING_REPEAT: u32 = 0;
/// Stacked frames before an episode's start are zeros.
pub const KR_PADDING_ZEROS: u32 = 1;

/// The configuration of a sequence buffer (`kr_seq_new`). Start from
/// `kr_seq_config_default()` and set what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_seq_config {
    /// Lanes (one writer each: one per actor or vectorized environment).
    pub lanes: usize,
    /// Steps each lane's ring holds (a multiple of `period`).
    pub steps_per_lane: usize,
    /// Steps per window; 0: 1 (one transition, with its n-step return when `nstep` is set).
    pub window: usize,
    /// Steps between window starts (>= 1).
    pub period: usize,
    /// `KR_PARTIAL_*`.
    pub partial: u32,
    /// `KR_PADDING_*`.
    pub padding: u32,
    /// n of the n-step return (0: none); it may reach past the window.
    pub nstep: usize,
    /// The n-step discount, in [0, 1].
    pub gamma: f64,
    /// The reward column (a scalar f32 or f64), when `nstep` > 0.
    pub reward: *const c_char,
    /// `n_stack` column names to hand out as stacks of `stack_frames[i]` frames.
    pub stack_columns: *const *const c_char,
    /// Frames per stacked column.
    pub stack_frames: *const usize,
    /// Stacked columns.
    pub n_stack: usize,
    /// `n_next_of` column names whose next observation a sample returns.
    pub next_of: *const *const c_char,
    /// Columns in `next_of`.
    pub n_next_of: usize,
    /// Tree fanout: 2, 4, 8, 16, 32 or 64.
    pub fanout: usize,
    /// Priority exponent.
    pub alpha: f64,
    /// Starting value of the running maximum that windows are installed with.
    pub initial_priority: f64,
    /// `KR_WEIGHTS_*`.
    pub weight_normalization: u32,
    /// The keys' tag (1 to 32767), or 0: drawn at random.
    pub key_tag: u32,
    /// The rate limit, counted in windows (`kind` `KR_RATE_NONE`, the default: none): lane
    /// calls wait for the windows they complete, samples for their batch (`kr_lane_push`,
    /// `kr_seq_sample` and their `*_wait` forms).
    pub rate: kr_rate_limit,
}

/// The default sequence configuration: 1 lane of 2^16 steps, windows of 1 step every step,
/// partial windows kept, stacks padded by repetition, no n-step return (gamma 0.99 once
/// `nstep` is set), no stack, no next observation, fanout 8, alpha 0.6, initial priority 1,
/// global weight normalization, a drawn key tag, no rate limit (its fields as
/// `kr_config_default`'s, but the insert batch 0: worked out).
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_seq_config_default() -> kr_seq_config {
    kr_seq_config {
        lanes: 1,
        steps_per_lane: 1 << 16,
        window: 0,
        period: 1,
        partial: KR_PARTIAL_KEEP,
        padding: KR_PADDING_REPEAT,
        nstep: 0,
        gamma: 0.99,
        reward: std::ptr::null(),
        stack_columns: std::ptr::null(),
        stack_frames: std::ptr::null(),
        n_stack: 0,
        next_of: std::ptr::null(),
        n_next_of: 0,
        fanout: 8,
        alpha: 0.6,
        initial_priority: 1.0,
        weight_normalization: KR_WEIGHTS_GLOBAL,
        key_tag: 0,
        rate: no_sequence_rate_limit(),
    }
}

/// An opaque sequence buffer handle.
pub struct kr_seq {
    pub(crate) inner: SequenceRef,
    /// The names, codes and dimensions the getters hand out (owned here, valid until
    /// `kr_seq_free`).
    described: Described,
    /// (dtype, shape) per column, for reading the caller's pointers.
    columns: Vec<(DType, usize)>,
    /// (dtype, shape) per `next_of` column, for the final observations.
    next_of: Vec<(DType, usize)>,
    /// Elements per window of each column (`W x k x shape`), and per next observation.
    column_elements: Vec<usize>,
    next_elements: Vec<usize>,
}

/// An opaque lane writer: one actor's steps into one lane.
pub struct kr_lane {
    inner: LaneWriter<SequenceRef>,
    columns: Vec<(DType, usize)>,
    next_of: Vec<(DType, usize)>,
}

/// Where `kr_seq_sample` writes B windows of W steps. Every pointer may be NULL (that output
/// is skipped). `columns`, when not NULL, holds one pointer per schema column, each to room
/// for `B x W x k x shape` elements (k the column's stacked frames, 1 without a stack), zero
/// past each window's length; `next`, when not NULL, one pointer per `next_of` column (in
/// schema order), each to `B x k x shape` elements. `returns` and `discounts` are written
/// only with an n-step configuration. Zero-initialize it and set what you want.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_seq_sample_out {
    /// B keys, for `kr_seq_update_priorities`.
    pub keys: *mut kr_key,
    /// B importance weights in (0, 1].
    pub weights: *mut f64,
    /// B importance weights as float.
    pub weights_f32: *mut f32,
    /// B sampling probabilities.
    pub probabilities: *mut f64,
    /// B stored priorities.
    pub priorities: *mut f64,
    /// B window lengths (1 to W).
    pub lengths: *mut u64,
    /// B x W flags: the step is one of the window's episode steps.
    pub mask: *mut bool,
    /// B n-step returns.
    pub returns: *mut f32,
    /// B discounts to bootstrap with (gamma^m, 0 after a terminal).
    pub discounts: *mut f32,
    /// One destination per schema column, or NULL.
    pub columns: *const *mut c_void,
    /// One destination per `next_of` column, or NULL.
    pub next: *const *mut c_void,
}

/// The NUL-terminated UTF-8 string at `p`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn name<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::Null(what));
    }
    // SAFETY: non-null and NUL-terminated (caller).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Failure::Invalid(format!("{what} is not UTF-8")))
}

/// Create a sequence buffer of the `n_columns` columns at `columns` (as `kr_buffer_new`'s)
/// configured by `config`; `*out` is the handle (free it with `kr_seq_free`). A bad
/// configuration (a period of 0, a window longer than a lane's ring, a stack or reward on a
/// column the schema does not have, ...) is `KR_E_INVALID_ARGUMENT` with the reason in
/// `kr_last_error_message`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `config` and `out` are NULL or valid; `columns` as for `kr_buffer_new`; the strings and
/// arrays `config` points to are NULL or hold what its counts say.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_new(
    config: *const kr_seq_config,
    columns: *const kr_column,
    n_columns: usize,
    out: *mut *mut kr_seq,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        // SAFETY: forwarded from the caller.
        let config = unsafe { seq_config_from(config, columns, n_columns) }?;
        let inner = SequenceRef::Owned(Arc::new(SequenceBuffer::new(config)?));
        *out = Box::into_raw(Box::new(kr_seq::from_rust(inner)));
        Ok(())
    })
}

/// The configuration `config` and `columns` describe (`kr_seq_new`, `kr_seq_shm_create`).
///
/// # Safety
/// As for `kr_seq_new`.
pub(crate) unsafe fn seq_config_from(
    config: *const kr_seq_config,
    columns: *const kr_column,
    n_columns: usize,
) -> Result<SequenceConfig, Failure> {
    // SAFETY: forwarded from the caller.
    let c = unsafe { get(config, "config") }?;
    // SAFETY: forwarded from the caller.
    let schema = unsafe { schema_from(columns, n_columns) }?;
    let mut b = SequenceConfig::builder(c.lanes, c.steps_per_lane, schema)
        .period(c.period)
        .fanout(c.fanout)
        .alpha(c.alpha)
        .initial_priority(c.initial_priority)
        .weight_normalization(weight_normalization_from(c.weight_normalization)?)
        .partial(match c.partial {
            KR_PARTIAL_KEEP => Partial::Keep,
            KR_PARTIAL_DROP => Partial::Drop,
            other => return Err(Failure::Invalid(format!("unknown partial {other}"))),
        })
        .padding(match c.padding {
            KR_PADDING_REPEAT => Padding::Repeat,
            KR_PADDING_ZEROS => Padding::Zeros,
            other => return Err(Failure::Invalid(format!("unknown padding {other}"))),
        });
    if c.window > 0 {
        b = b.window(c.window);
    }
    if c.nstep > 0 {
        // SAFETY: forwarded from the caller.
        let reward = unsafe { name(c.reward, "config->reward") }?;
        b = b.nstep(c.nstep, c.gamma, reward);
    }
    // SAFETY: forwarded from the caller.
    let stack = unsafe { slice(c.stack_columns, c.n_stack, "config->stack_columns") }?;
    // SAFETY: forwarded from the caller.
    let frames = unsafe { slice(c.stack_frames, c.n_stack, "config->stack_frames") }?;
    for (&s, &k) in stack.iter().zip(frames) {
        // SAFETY: forwarded from the caller.
        b = b.stack(unsafe { name(s, "a stack column") }?, k);
    }
    // SAFETY: forwarded from the caller.
    let next_of = unsafe { slice(c.next_of, c.n_next_of, "config->next_of") }?;
    for &n in next_of {
        // SAFETY: forwarded from the caller.
        b = b.next_of(unsafe { name(n, "a next_of column") }?);
    }
    if c.key_tag != 0 {
        b = b.key_tag(u16::try_from(c.key_tag).unwrap_or(u16::MAX));
    }
    if let Some((limit, mut batches)) = rate_limit_of(&c.rate)? {
        if batches.insert == 0 {
            batches.insert = b.clone().build()?.max_windows_per_call();
        }
        b = b.rate_limit(limit, batches);
    }
    Ok(b.build()?)
}

/// What `kr_seq_column` and `kr_seq_config_of` point into.
struct Described {
    names: Vec<std::ffi::CString>,
    codes: Vec<u32>,
    dims: Vec<Vec<usize>>,
    reward: Option<std::ffi::CString>,
    stack: Vec<std::ffi::CString>,
    stack_ptrs: Vec<*const c_char>,
    stack_frames: Vec<usize>,
    next_of: Vec<std::ffi::CString>,
    next_of_ptrs: Vec<*const c_char>,
}

fn c_string(s: &str) -> std::ffi::CString {
    // Schema names were checked to hold no NUL when the buffer was made.
    std::ffi::CString::new(s).unwrap_or_default()
}

impl Described {
    fn of(config: &SequenceConfig) -> Described {
        let specs = config.schema().columns();
        let stack: Vec<_> = config.stacks().iter().map(|(n, _)| c_string(n)).collect();
        let next_of: Vec<_> = (config.next_of_columns().iter())
            .map(|n| c_string(n))
            .collect();
        Described {
            names: specs.iter().map(|s| c_string(&s.name)).collect(),
            codes: specs.iter().map(|s| dtype_code(s.dtype)).collect(),
            dims: specs.iter().map(|s| s.dims.clone()).collect(),
            reward: config.nstep().map(|n| c_string(&n.reward)),
            stack_ptrs: stack.iter().map(|c| c.as_ptr()).collect(),
            stack_frames: config.stacks().iter().map(|&(_, k)| k).collect(),
            stack,
            next_of_ptrs: next_of.iter().map(|c| c.as_ptr()).collect(),
            next_of,
        }
    }
}

impl kr_seq {
    /// The handle of `inner`: each column's dtype and shape and each output's elements per
    /// window, from its configuration.
    pub(crate) fn from_rust(inner: SequenceRef) -> kr_seq {
        let config = inner.config();
        let described = Described::of(config);
        let specs = config.schema().columns();
        let stacks = config.stacks();
        let frames_of = |name: &str| {
            (stacks.iter())
                .find(|(s, _)| *s == name)
                .map_or(1, |&(_, k)| k)
        };
        let next_names = config.next_of_columns();
        let next: Vec<usize> = (0..specs.len())
            .filter(|&i| next_names.contains(&specs[i].name.as_str()))
            .collect();
        let w = config.window();
        kr_seq {
            described,
            columns: specs.iter().map(|s| (s.dtype, s.shape)).collect(),
            next_of: next
                .iter()
                .map(|&i| (specs[i].dtype, specs[i].shape))
                .collect(),
            column_elements: specs
                .iter()
                .map(|s| w * frames_of(&s.name) * s.shape)
                .collect(),
            next_elements: next
                .iter()
                .map(|&i| frames_of(&specs[i].name) * specs[i].shape)
                .collect(),
            inner,
        }
    }
}

/// Write the steps written over all lanes (final-observation rows included; a loaded
/// buffer's count goes on from its checkpoint's) to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_steps_written(seq: *const kr_seq, out: *mut u64) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(seq, "seq", out, |s| s.inner.steps_written()) }
}

/// Write the number of columns of the sequence buffer's schema to `*out`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_n_columns(seq: *const kr_seq, out: *mut usize) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(seq, "seq", out, |s| s.columns.len()) }
}

/// Write column `index` of the sequence buffer's schema to `*out` (as `kr_buffer_column`:
/// the name and dimensions are the handle's own, valid until `kr_seq_free`).
/// `KR_E_OUT_OF_RANGE` when `index` is not below `kr_seq_n_columns`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_column(
    seq: *const kr_seq,
    index: usize,
    out: *mut kr_column,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let d = &seq.described;
        let (Some(name), Some(&(_, shape))) = (d.names.get(index), seq.columns.get(index)) else {
            return Err(kary_replay::Error::OutOfRange {
                index,
                capacity: seq.columns.len(),
            }
            .into());
        };
        *out = c_column(name, d.codes[index], shape, &d.dims[index]);
        Ok(())
    })
}

/// Write the sequence buffer's configuration to `*out` (a loaded buffer's is its
/// checkpoint's): every count as `kr_seq_new` took it (`window` the actual window, never 0;
/// `key_tag` the tag its keys carry), and the names (`reward`, `stack_columns`, `next_of`)
/// pointing into the handle, valid until `kr_seq_free`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_config_of(
    seq: *const kr_seq,
    out: *mut kr_seq_config,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let c = seq.inner.config();
        let d = &seq.described;
        let array = |v: &[*const c_char]| {
            if v.is_empty() {
                std::ptr::null()
            } else {
                v.as_ptr()
            }
        };
        *out = kr_seq_config {
            lanes: c.lanes(),
            steps_per_lane: c.steps_per_lane(),
            window: c.window(),
            period: c.period(),
            partial: match c.partial() {
                Partial::Keep => KR_PARTIAL_KEEP,
                Partial::Drop => KR_PARTIAL_DROP,
            },
            padding: match c.padding() {
                Padding::Repeat => KR_PADDING_REPEAT,
                Padding::Zeros => KR_PADDING_ZEROS,
            },
            nstep: c.nstep().map_or(0, |n| n.n),
            gamma: c.nstep().map_or(0.99, |n| n.gamma),
            reward: d.reward.as_ref().map_or(std::ptr::null(), |r| r.as_ptr()),
            stack_columns: array(&d.stack_ptrs),
            stack_frames: if d.stack_frames.is_empty() {
                std::ptr::null()
            } else {
                d.stack_frames.as_ptr()
            },
            n_stack: d.stack.len(),
            next_of: array(&d.next_of_ptrs),
            n_next_of: d.next_of.len(),
            fanout: c.tree().fanout().get(),
            alpha: c.tree().alpha(),
            initial_priority: c.tree().initial_priority(),
            weight_normalization: match c.tree().weight_normalization() {
                kary_replay::WeightNormalization::Global => KR_WEIGHTS_GLOBAL,
                kary_replay::WeightNormalization::Batch => KR_WEIGHTS_BATCH,
            },
            key_tag: u32::from(c.tree().key_tag()),
            rate: rate_fields(c.rate_limit()),
        };
        Ok(())
    })
}

/// Save `seq` as a sequence checkpoint in the new directory `dir` (its parent is created;
/// `dir` must not exist): the lanes' steps as numpy files of shape
/// `(lanes, steps_per_lane, *dims)`, every window, priority, key and lane cursor
/// (`docs/checkpoint.md`). `options` is NULL (defaults) or from
/// `kr_save_options_default()`. Lane writers and priority updates pause for the in-memory
/// copy (the windows a writer staged are installed first); samplers go on. On failure no
/// directory is left at `dir`.
///
/// Errors: as `kr_buffer_save`.
///
/// Thread safety: any number of threads at once, beside the lane writers.
///
/// # Safety
/// `seq` is NULL or a live handle; `dir` is NULL or NUL-terminated; `options` is NULL or
/// valid, its arrays holding `n_user` entries.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_save(
    seq: *const kr_seq,
    dir: *const c_char,
    options: *const crate::checkpoint::kr_save_options,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let dir = unsafe { crate::checkpoint::path(dir, "dir") }?;
        // SAFETY: forwarded from the caller.
        let options = unsafe { crate::checkpoint::save_options(options) }?;
        kary_replay::Checkpoint::save_with(&*seq.inner, &dir, &options)?;
        Ok(())
    })
}

/// Load the sequence checkpoint at `dir` into a new sequence buffer; `*out` is the handle
/// (free it with `kr_seq_free`). Every lane stands where it stood (an episode under way
/// goes on with the lane's next writer; a closed lane stays closed), with every window,
/// priority and key as saved. Every length, CRC, cursor and window is checked before the
/// handle is made.
///
/// Errors: `KR_E_NULL`; `KR_E_INVALID_ARGUMENT` (an empty path); `KR_E_IO` (no such
/// directory, a missing file); `KR_E_CORRUPT` (a save that did not finish, a damaged,
/// truncated or self-contradicting checkpoint, a checkpoint of `kr_buffer_save`);
/// `KR_E_ALLOCATION`.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `dir` is NULL or NUL-terminated; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_load(dir: *const c_char, out: *mut *mut kr_seq) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let dir = unsafe { crate::checkpoint::path(dir, "dir") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let buffer = <SequenceBuffer as kary_replay::Load>::load(&dir)?;
        *out = Box::into_raw(Box::new(kr_seq::from_rust(SequenceRef::Owned(Arc::new(
            buffer,
        )))));
        Ok(())
    })
}

/// Free a sequence buffer (NULL: nothing happens). Lane writers keep it alive until they
/// are freed.
///
/// # Safety
/// `seq` is NULL or a handle from `kr_seq_new` not freed before; no other thread uses it.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_free(seq: *mut kr_seq) {
    if !seq.is_null() {
        // SAFETY: a live handle from `kr_seq_new` (caller), freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(seq) })));
    }
}

/// Take the writer of lane `lane` (`KR_E_OUT_OF_RANGE` past the last lane;
/// `KR_E_INVALID_ARGUMENT` while another writer holds it); `*out` is the handle (free it
/// with `kr_lane_free`, which gives the lane back where it stands).
///
/// Thread safety: any thread; the writer is then used by one thread at a time.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_lane(
    seq: *const kr_seq,
    lane: usize,
    out: *mut *mut kr_lane,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let inner = SequenceBuffer::lane_shared(seq.inner.clone(), lane)?;
        *out = Box::into_raw(Box::new(kr_lane {
            inner,
            columns: seq.columns.clone(),
            next_of: seq.next_of.clone(),
        }));
        Ok(())
    })
}

/// Append one step: `columns` holds one pointer per schema column, each to one item's
/// elements. The first step after an episode's end starts a new episode. A closed lane is
/// `KR_E_CLOSED`. With a rate limit, a step that completes a window waits until the
/// limiter admits it (`kr_lane_push_wait` bounds the wait).
///
/// # Safety
/// `lane` is NULL or live and used by this thread only; `columns` as for
/// `kr_buffer_insert`.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_push(
    lane: *mut kr_lane,
    columns: *const *const c_void,
    n_columns: usize,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { lane_push_waiting(lane, columns, n_columns, || Ok(Wait::Block)) }
}

/// `kr_lane_push` and `kr_lane_push_wait`: the step pushed after the rate limiter admitted
/// what it completes, waiting as `wait` says (read after the lane and the columns).
///
/// # Safety
/// As `kr_lane_push`.
pub(crate) unsafe fn lane_push_waiting(
    lane: *mut kr_lane,
    columns: *const *const c_void,
    n_columns: usize,
    wait: impl FnOnce() -> Result<Wait, Failure>,
) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let lane = unsafe { lane.as_mut() }.ok_or(Failure::Null("lane"))?;
        // SAFETY: forwarded from the caller.
        let cols = unsafe { column_slices(&lane.columns, columns, n_columns, 1) }?;
        lane.inner.push_waiting(&cols, wait()?)?;
        Ok(())
    })
}

/// End the episode: `final_obs` holds one pointer per `next_of` column (schema order), each
/// to one item, the true next observation after the episode's last step (NULL and 0 without
/// `next_of`). `truncated`: cut by a time limit (its windows bootstrap); otherwise it
/// terminated. Ending an episode with no step is `KR_E_INVALID_ARGUMENT`. With a rate
/// limit, the windows it completes are admitted first, as one insert
/// (`kr_lane_end_episode_wait` bounds the wait).
///
/// # Safety
/// As `kr_lane_push`, with `n_final` pointers.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_end_episode(
    lane: *mut kr_lane,
    final_obs: *const *const c_void,
    n_final: usize,
    truncated: bool,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { lane_end_waiting(lane, final_obs, n_final, truncated, || Ok(Wait::Block)) }
}

/// `kr_lane_end_episode` and `kr_lane_end_episode_wait` (as [`lane_push_waiting`]).
///
/// # Safety
/// As `kr_lane_end_episode`.
pub(crate) unsafe fn lane_end_waiting(
    lane: *mut kr_lane,
    final_obs: *const *const c_void,
    n_final: usize,
    truncated: bool,
    wait: impl FnOnce() -> Result<Wait, Failure>,
) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let lane = unsafe { lane.as_mut() }.ok_or(Failure::Null("lane"))?;
        // SAFETY: forwarded from the caller.
        let cols = unsafe { column_slices(&lane.next_of, final_obs, n_final, 1) }?;
        lane.inner.end_episode_waiting(&cols, truncated, wait()?)?;
        Ok(())
    })
}

/// Install the windows a batch staged (`kr_lane_set_batch`).
///
/// # Safety
/// `lane` is NULL or live and used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_flush(lane: *mut kr_lane) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let lane = unsafe { lane.as_mut() }.ok_or(Failure::Null("lane"))?;
        lane.inner.flush();
        Ok(())
    })
}

/// Install complete windows in batches of `windows` (>= 1; default 1).
///
/// # Safety
/// `lane` is NULL or live and used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_set_batch(lane: *mut kr_lane, windows: usize) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let lane = unsafe { lane.as_mut() }.ok_or(Failure::Null("lane"))?;
        lane.inner.set_batch(windows)?;
        Ok(())
    })
}

/// Close the lane: later pushes are `KR_E_CLOSED`; the windows of an episode under way
/// never become sampleable.
///
/// # Safety
/// `lane` is NULL or live and used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_close(lane: *mut kr_lane) -> kr_status {
    boundary(|| {
        // SAFETY: NULL or a live handle used by this thread only (caller).
        let lane = unsafe { lane.as_mut() }.ok_or(Failure::Null("lane"))?;
        lane.inner.close();
        Ok(())
    })
}

/// The lane's position in its timeline: `*out`.
///
/// # Safety
/// `lane` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_position(lane: *const kr_lane, out: *mut u64) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let lane = unsafe { get(lane, "lane") }?;
        // SAFETY: forwarded from the caller.
        *unsafe { required_mut(out, "out") }? = lane.inner.position();
        Ok(())
    })
}

/// Free a lane writer and give the lane back (NULL: nothing happens); staged windows are
/// installed first.
///
/// # Safety
/// `lane` is NULL or a handle from `kr_seq_lane` not freed before; no other thread uses it.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_free(lane: *mut kr_lane) {
    if !lane.is_null() {
        // SAFETY: a live handle from `kr_seq_lane` (caller), freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(lane) })));
    }
}

/// Sample `batch` windows in proportion to their priorities (`mode`: `KR_SAMPLE_*`,
/// importance-weight exponent `beta`), drawing from `rng`, into `out` (see
/// `kr_seq_sample_out`). Nothing is written on failure, except after `KR_E_CONTENTION`,
/// when the column memory may hold whole windows sampled before it (take it as
/// unspecified). `KR_E_EMPTY` before any window is complete, unless there is a rate limit:
/// then the call waits until the limiter admits `batch` windows and one is complete
/// (`kr_seq_sample_wait` bounds the wait).
///
/// Thread safety: any number of threads at once, each with its own `rng`.
///
/// # Safety
/// `seq`, `rng` and `out` are NULL or valid; every non-NULL pointer in `*out` has the room
/// `kr_seq_sample_out` says for `batch` windows, used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_sample(
    seq: *const kr_seq,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    out: *const kr_seq_sample_out,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { seq_sample_waiting(seq, rng, batch, beta, mode, out, || Ok(Wait::Block)) }
}

/// `kr_seq_sample` and `kr_seq_sample_wait`: waiting for the rate limiter as `wait` says
/// (read after `mode`).
///
/// # Safety
/// As `kr_seq_sample`.
pub(crate) unsafe fn seq_sample_waiting(
    seq: *const kr_seq,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    out: *const kr_seq_sample_out,
    wait: impl FnOnce() -> Result<Wait, Failure>,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        let mode = sample_mode(mode)?;
        let wait = wait()?;
        kary_replay::buffer::check_sample_arguments(batch, beta)?;
        // SAFETY: forwarded from the caller.
        let rng = unsafe { rng.as_mut() }.ok_or(Failure::Null("rng"))?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { get(out, "out") }?;
        let w = seq.inner.config().window();
        // SAFETY: forwarded from the caller: room for `batch` windows of each column.
        let mut columns = unsafe {
            destinations(
                out.columns,
                &seq.columns,
                &seq.column_elements,
                batch,
                "out->columns",
            )
        }?;
        // SAFETY: as above, for the next observations.
        let mut next = unsafe {
            destinations(
                out.next,
                &seq.next_of,
                &seq.next_elements,
                batch,
                "out->next",
            )
        }?;
        check_room(out.keys, batch, "out->keys")?;
        check_room(out.weights, batch, "out->weights")?;
        check_room(out.weights_f32, batch, "out->weights_f32")?;
        check_room(out.probabilities, batch, "out->probabilities")?;
        check_room(out.priorities, batch, "out->priorities")?;
        check_room(out.lengths, batch, "out->lengths")?;
        check_room(out.mask, batch.saturating_mul(w), "out->mask")?;
        check_room(out.returns, batch, "out->returns")?;
        check_room(out.discounts, batch, "out->discounts")?;
        SCRATCH.with(|scratch| {
            let mut b = scratch.borrow_mut();
            seq.inner.sample_columns_into_waiting(
                kary_replay::Draw::Batch { batch, beta, mode },
                &mut rng.rng,
                &mut b,
                &mut columns,
                &mut next,
                wait,
            )?;
            // SAFETY: each non-NULL output has room for its values (caller), checked for
            // alignment and size above.
            unsafe {
                write(out.keys, b.keys.iter().map(to_c_key));
                write(out.weights, b.weights.iter().copied());
                write(out.weights_f32, b.weights.iter().map(|&x| x as f32));
                write(out.probabilities, b.probabilities.iter().copied());
                write(out.priorities, b.priorities.iter().copied());
                write(out.lengths, b.lengths.iter().map(|&l| l as u64));
                write(out.mask, b.mask.iter().copied());
                write(out.returns, b.returns.iter().map(|&x| x as f32));
                write(out.discounts, b.discounts.iter().map(|&x| x as f32));
            }
            Ok(())
        })
    })
}

/// Write `values` from `p` on (nothing when `p` is NULL).
///
/// # Safety
/// `p` is NULL or aligned and valid for as many writes as `values` yields.
unsafe fn write<T>(p: *mut T, values: impl Iterator<Item = T>) {
    if p.is_null() {
        return;
    }
    for (i, v) in values.enumerate() {
        // SAFETY: forwarded from the caller.
        unsafe { p.add(i).write(v) };
    }
}

/// The caller's destinations for `batch` items of `elements[c]` elements of each column,
/// or none when `p` is NULL.
///
/// # Safety
/// `p` is NULL or points to one pointer per column, each to room for `batch x elements[c]`
/// elements of the column's dtype, used by nothing else during the call.
unsafe fn destinations<'a>(
    p: *const *mut c_void,
    columns: &[(DType, usize)],
    elements: &[usize],
    batch: usize,
    what: &'static str,
) -> Result<Vec<ColumnSliceMut<'a>>, Failure> {
    if p.is_null() || columns.is_empty() {
        return Ok(Vec::new());
    }
    // SAFETY: forwarded from the caller.
    let pointers = unsafe { slice(p, columns.len(), what) }?;
    let mut out = Vec::with_capacity(columns.len());
    for ((&d, &(dtype, _)), &n) in pointers.iter().zip(columns).zip(elements) {
        if d.is_null() {
            return Err(Failure::Null("a column destination"));
        }
        aligned(d, dtype.size(), "a column destination")?;
        let len = batch
            .checked_mul(n)
            .ok_or_else(|| Failure::Invalid("batch x elements overflows".into()))?;
        addressable(len, dtype.size(), "a column destination")?;
        // SAFETY: non-null, aligned, `len` writable elements (caller), used by nothing else.
        out.push(unsafe { ColumnSliceMut::from_raw_parts(dtype, d.cast(), len) });
    }
    Ok(out)
}

/// Set the raw priorities of the windows `keys` name; `*out` (if not NULL) says how many
/// were applied and how many were stale (windows retired since). Bad priorities or keys
/// of another buffer change nothing.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `keys` and `priorities` are NULL or hold `n` values; `out` is
/// NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_update_priorities(
    seq: *const kr_seq,
    keys: *const kr_key,
    priorities: *const f64,
    n: usize,
    out: *mut kr_update_report,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let keys = unsafe { slice(keys, n, "keys") }?;
        // SAFETY: forwarded from the caller.
        let priorities = unsafe { slice(priorities, n, "priorities") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { optional_mut(out, "out") }?;
        let keys = crate::buffer::rust_keys(keys)?;
        let report = seq.inner.update_priorities(&keys, priorities)?;
        crate::buffer::write_report(out, report);
        Ok(())
    })
}

/// The stored priorities of the `n` windows named by `keys` into `out_priorities` (`n`
/// doubles): NaN for a window retired since; `*out_stale` (if not NULL) how many were. As
/// `kr_buffer_priorities`.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `keys` and `out_priorities` are NULL or hold `n` values;
/// `out_stale` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_priorities(
    seq: *const kr_seq,
    keys: *const kr_key,
    n: usize,
    out_priorities: *mut f64,
    out_stale: *mut usize,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let keys = unsafe { slice(keys, n, "keys") }?;
        let keys = crate::buffer::rust_keys(keys)?;
        // SAFETY: forwarded from the caller.
        unsafe {
            crate::buffer::write_priorities(n, out_priorities, out_stale, |out| {
                seq.inner.priorities_of(&keys, out)
            })
        }
    })
}

/// Windows that can be sampled now: `*out`.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_len(seq: *const kr_seq, out: *mut usize) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(seq, "seq", out, |s| s.inner.len()) }
}

/// The lane and first step of the window `key` names: `*out_lane`, `*out_start`.
///
/// # Safety
/// `seq` is NULL or live; the outputs are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_window_of(
    seq: *const kr_seq,
    key: kr_key,
    out_lane: *mut usize,
    out_start: *mut u64,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let out_lane = unsafe { required_mut(out_lane, "out_lane") }?;
        // SAFETY: forwarded from the caller.
        let out_start = unsafe { required_mut(out_start, "out_start") }?;
        let (lane, start) = seq.inner.window_of(Key {
            index: usize::try_from(key.index).unwrap_or(usize::MAX),
            generation: key.generation,
        })?;
        *out_lane = lane;
        *out_start = start;
        Ok(())
    })
}

/// Bytes held by the steps, the tree and the state words: `*out`.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_memory_bytes(seq: *const kr_seq, out: *mut usize) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { read_handle_into(seq, "seq", out, |s| s.inner.memory_bytes()) }
}
