//! Rate limits (the `kr_config.rate_*` fields and `kr_rate_limit` are in `config.rs`): the
//! calls that wait with a timeout (`kr_buffer_insert_batch_wait`, `kr_buffer_sample_wait`,
//! `kr_lane_push_wait`, `kr_lane_end_episode_wait`, `kr_seq_sample_wait`), `kr_*_close`
//! and `kr_*_rate_stats` for both buffer kinds; and a limiter of its own
//! (`kr_rate_limiter_*`).

use std::ffi::c_void;
use std::time::Duration;

use kary_replay::Wait;

use crate::buffer::{kr_buffer, kr_key};
use crate::config::{kr_config, rate_limit_from};
use crate::sample::{kr_rng, kr_sample_out};
use crate::sequence::{kr_lane, kr_seq, kr_seq_sample_out};
use crate::status::*;

/// A timeout of the `*_wait` calls: wait as long as it takes (any negative value or
/// INFINITY does the same); 0 does not wait.
pub const KR_WAIT_FOREVER: f64 = -1.0;

/// A rate limiter's counts and state (`kr_buffer_rate_stats`), each read once.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kr_rate_stats {
    /// Whether the buffer has a rate limit; every other field is 0 when it has none.
    pub limited: bool,
    /// Items admitted to be inserted.
    pub inserts: u64,
    /// Items admitted to be sampled.
    pub samples: u64,
    /// `inserts * samples_per_insert - samples`, exact.
    pub diff: f64,
    /// Whether `min_size` items have been inserted (sampling is open).
    pub open: bool,
    /// Whether `kr_buffer_close` was called.
    pub closed: bool,
    /// Inserts waiting now.
    pub insert_waiters: u64,
    /// Samples waiting now.
    pub sample_waiters: u64,
    /// Seconds waited by every call that waited, added when each wait ends.
    pub blocked_seconds: f64,
}

/// A `*_wait` call's timeout as a [`Wait`]: negative or infinite waits as long as it takes,
/// 0 does not wait, a positive number of seconds waits at most that; NaN is
/// `KR_E_INVALID_ARGUMENT`.
pub(crate) fn wait_from(timeout_seconds: f64) -> Result<Wait, Failure> {
    if timeout_seconds.is_nan() {
        return Err(Failure::Invalid("timeout_seconds is NaN".into()));
    }
    Ok(if timeout_seconds < 0.0 || timeout_seconds.is_infinite() {
        Wait::Block
    } else if timeout_seconds == 0.0 {
        Wait::Never
    } else {
        Duration::try_from_secs_f64(timeout_seconds).map_or(Wait::Block, Wait::For)
    })
}

/// `kr_buffer_insert_batch` that waits at most `timeout_seconds` for the rate limiter:
/// `KR_E_TIMEOUT` then, `KR_E_RATE_LIMITED` at once when `timeout_seconds` is 0 and the
/// batch does not fit now, `KR_WAIT_FOREVER` (or any negative value) waits as
/// `kr_buffer_insert_batch` does. Either way nothing was inserted and nothing counted, and
/// the same call may succeed later (`kr_status_is_retryable`). `KR_E_CLOSED` after
/// `kr_buffer_close`. A buffer without a rate limit never waits. `timeout_seconds` is
/// checked after `buffer` (NaN: `KR_E_INVALID_ARGUMENT`).
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// As `kr_buffer_insert_batch`.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_insert_batch_wait(
    buffer: *const kr_buffer,
    columns: *const *const c_void,
    n_columns: usize,
    items: usize,
    priorities: *const f64,
    timeout_seconds: f64,
    out_keys: *mut kr_key,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::buffer::insert_batch_waiting(
            buffer,
            columns,
            n_columns,
            items,
            priorities,
            out_keys,
            || wait_from(timeout_seconds),
        )
    }
}

/// `kr_buffer_sample` that waits at most `timeout_seconds` for the rate limiter, as
/// `kr_buffer_insert_batch_wait` does (`KR_E_TIMEOUT`, `KR_E_RATE_LIMITED`, `KR_E_CLOSED`;
/// nothing written, nothing counted). `timeout_seconds` is checked after `mode`.
///
/// Thread safety: any number of threads at once on one buffer, each with its own `rng`.
///
/// # Safety
/// As `kr_buffer_sample`.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_sample_wait(
    buffer: *const kr_buffer,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    timeout_seconds: f64,
    out: *const kr_sample_out,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::sample::sample_waiting(buffer, rng, batch, beta, mode, out, || {
            wait_from(timeout_seconds)
        })
    }
}

/// Close the buffer's rate limiter: every insert and sample waiting for it returns
/// `KR_E_CLOSED` now, and so does every later one (updates, reads and saves go on): how a
/// trainer stops its actors and learners. A buffer without a rate limit has no waits to
/// end: nothing happens.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `buffer` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_close(buffer: *const kr_buffer) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { get(buffer, "buffer") }?.inner.close();
        Ok(())
    })
}

/// Write the rate limiter's counts and state to `*out` (`limited` false and the rest 0
/// without a rate limit).
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `buffer` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_buffer_rate_stats(
    buffer: *const kr_buffer,
    out: *mut kr_rate_stats,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let buffer = unsafe { get(buffer, "buffer") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = buffer
            .inner
            .rate_stats()
            .map_or_else(kr_rate_stats::default, |s| c_stats(&s));
        Ok(())
    })
}

/// `kr_lane_push` that waits at most `timeout_seconds` for the rate limiter (a step that
/// completes a window is admitted as an insert of it first), as
/// `kr_buffer_insert_batch_wait` does: `KR_E_TIMEOUT`, `KR_E_RATE_LIMITED` (timeout 0),
/// `KR_E_CLOSED` after `kr_seq_close`; nothing written, nothing counted. A buffer without
/// a rate limit never waits. `timeout_seconds` is checked after the columns.
///
/// # Safety
/// As `kr_lane_push`.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_push_wait(
    lane: *mut kr_lane,
    columns: *const *const c_void,
    n_columns: usize,
    timeout_seconds: f64,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::sequence::lane_push_waiting(lane, columns, n_columns, || wait_from(timeout_seconds))
    }
}

/// `kr_lane_end_episode` that waits at most `timeout_seconds` for the rate limiter to admit
/// the windows it completes, as `kr_lane_push_wait` does.
///
/// # Safety
/// As `kr_lane_end_episode`.
#[no_mangle]
pub unsafe extern "C" fn kr_lane_end_episode_wait(
    lane: *mut kr_lane,
    final_obs: *const *const c_void,
    n_final: usize,
    truncated: bool,
    timeout_seconds: f64,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::sequence::lane_end_waiting(lane, final_obs, n_final, truncated, || {
            wait_from(timeout_seconds)
        })
    }
}

/// `kr_seq_sample` that waits at most `timeout_seconds` for the rate limiter to admit
/// `batch` windows (and, for a buffer still empty, for its first window), as
/// `kr_buffer_sample_wait` does. `timeout_seconds` is checked after `mode`.
///
/// Thread safety: any number of threads at once, each with its own `rng`.
///
/// # Safety
/// As `kr_seq_sample`.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_sample_wait(
    seq: *const kr_seq,
    rng: *mut kr_rng,
    batch: usize,
    beta: f64,
    mode: u32,
    timeout_seconds: f64,
    out: *const kr_seq_sample_out,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::sequence::seq_sample_waiting(seq, rng, batch, beta, mode, out, || {
            wait_from(timeout_seconds)
        })
    }
}

/// Close the sequence buffer's rate limiter, as `kr_buffer_close` closes a buffer's: every
/// lane call and sample waiting for it, and every later one, returns `KR_E_CLOSED`.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `seq` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_close(seq: *const kr_seq) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { get(seq, "seq") }?.inner.close();
        Ok(())
    })
}

/// Write the sequence buffer's rate limiter's counts (in windows) and state to `*out`, as
/// `kr_buffer_rate_stats` does.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `seq` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_seq_rate_stats(
    seq: *const kr_seq,
    out: *mut kr_rate_stats,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let seq = unsafe { get(seq, "seq") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = seq
            .inner
            .rate_stats()
            .map_or_else(kr_rate_stats::default, |s| c_stats(&s));
        Ok(())
    })
}

/// A rate limiter of its own, apart from any buffer (`kr_rate_limiter_new`): for loops that
/// admit their inserts and samples themselves (a trainer that counts env steps, a buffer of
/// another library).
pub struct kr_rate_limiter {
    inner: kary_replay::rate::RateLimiter,
}

/// Create a rate limiter holding the limit of `config`'s rate fields (`rate_limit`, which
/// must not be `KR_RATE_NONE`, and `rate_*`; the other fields are ignored), continuing from
/// `inserts` inserted and `samples` sampled items (0 and 0 for a new run; a checkpoint's
/// counts to resume one). `*out` is the handle (free it with `kr_rate_limiter_free`).
///
/// Errors: `KR_E_NULL`; `KR_E_INVALID_ARGUMENT` for no limit, an unknown kind, a parameter
/// out of its range, a range that could deadlock with calls of `rate_insert_batch` and
/// `rate_sample_batch` items (the message says what would work), or counts the range could
/// not have reached.
///
/// Thread safety: any thread.
///
/// # Safety
/// `config` and `out` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_rate_limiter_new(
    config: *const kr_config,
    inserts: u64,
    samples: u64,
    out: *mut *mut kr_rate_limiter,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let config = unsafe { get(config, "config") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        let (limit, batches) = rate_limit_from(config)?.ok_or_else(|| {
            Failure::Invalid("config.rate_limit is KR_RATE_NONE: no limit to hold".into())
        })?;
        let inner = kary_replay::rate::RateLimiter::with_counts(limit, batches, inserts, samples)?;
        *out = Box::into_raw(Box::new(kr_rate_limiter { inner }));
        Ok(())
    })
}

/// Free a rate limiter (NULL: nothing happens).
///
/// Thread safety: no other thread may use it during or after the call.
///
/// # Safety
/// `limiter` is NULL or a handle from `kr_rate_limiter_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kr_rate_limiter_free(limiter: *mut kr_rate_limiter) {
    if !limiter.is_null() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: a live handle (caller), freed once.
            drop(unsafe { Box::from_raw(limiter) })
        }));
    }
}

/// Admit an insert of `n` items, waiting at most `timeout_seconds` (as the `*_wait` calls
/// take it: `KR_WAIT_FOREVER` or any negative value waits as long as it takes, 0 does not
/// wait). `KR_OK` when admitted (counted); `KR_E_RATE_LIMITED` (timeout 0) or
/// `KR_E_TIMEOUT` when not, with nothing counted; `KR_E_CLOSED` after
/// `kr_rate_limiter_close`; `KR_E_INVALID_ARGUMENT` for `n` past `rate_insert_batch` or a
/// NaN timeout.
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `limiter` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_rate_limiter_insert(
    limiter: *const kr_rate_limiter,
    n: u64,
    timeout_seconds: f64,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { admit(limiter, timeout_seconds, |l, wait| l.admit_insert(n, wait)) }
}

/// Admit a sample of `n` items, as `kr_rate_limiter_insert` admits an insert (`n` at most
/// `rate_sample_batch`).
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `limiter` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_rate_limiter_sample(
    limiter: *const kr_rate_limiter,
    n: u64,
    timeout_seconds: f64,
) -> kr_status {
    // SAFETY: forwarded from the caller.
    unsafe { admit(limiter, timeout_seconds, |l, wait| l.admit_sample(n, wait)) }
}

/// One admission of `kr_rate_limiter_insert` or `_sample`: the handle, then the timeout,
/// then `admit`.
///
/// # Safety
/// `limiter` is NULL or live.
unsafe fn admit(
    limiter: *const kr_rate_limiter,
    timeout_seconds: f64,
    admit: impl FnOnce(&kary_replay::rate::RateLimiter, Wait) -> kary_replay::Result<()>,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let limiter = unsafe { get(limiter, "limiter") }?;
        let wait = wait_from(timeout_seconds)?;
        admit(&limiter.inner, wait).map_err(Failure::from)
    })
}

/// Close the limiter: every waiting and later insert and sample returns `KR_E_CLOSED`.
///
/// Thread safety: any thread, any time.
///
/// # Safety
/// `limiter` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn kr_rate_limiter_close(limiter: *const kr_rate_limiter) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        unsafe { get(limiter, "limiter") }?.inner.close();
        Ok(())
    })
}

/// Write the limiter's counts and state to `*out` (`limited` is true).
///
/// Thread safety: any number of threads at once.
///
/// # Safety
/// `limiter` is NULL or live; `out` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn kr_rate_limiter_stats(
    limiter: *const kr_rate_limiter,
    out: *mut kr_rate_stats,
) -> kr_status {
    boundary(|| {
        // SAFETY: forwarded from the caller.
        let limiter = unsafe { get(limiter, "limiter") }?;
        // SAFETY: forwarded from the caller.
        let out = unsafe { required_mut(out, "out") }?;
        *out = c_stats(&limiter.inner.stats());
        Ok(())
    })
}

/// A limiter's stats as `kr_rate_stats`.
fn c_stats(s: &kary_replay::rate::RateStats) -> kr_rate_stats {
    kr_rate_stats {
        limited: true,
        inserts: s.inserts,
        samples: s.samples,
        diff: s.diff,
        open: s.open,
        closed: s.closed,
        insert_waiters: s.insert_waiters as u64,
        sample_waiters: s.sample_waiters as u64,
        blocked_seconds: s.blocked.as_secs_f64(),
    }
}
