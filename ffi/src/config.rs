//! Configuration and schema: `kr_config` (with `kr_config_default`), `kr_column`,
//! `kr_rate_limit`, and the integer selectors of variant, dtype, weight normalization,
//! default priority and rate limit, with the one conversion each way between the rate
//! fields and `kary_replay::rate::RateLimit`.

use std::ffi::c_char;

use kary_replay::rate::{Batches, ErrorBuffer, RateLimit};
use kary_replay::{DType, WeightNormalization};

use crate::status::Failure;

/// `kr_config.variant`: one mutex around everything.
pub const KR_VARIANT_GLOBAL_LOCK: u32 = 0;

/// `kr_config.variant`: global tree lock + last-level lock, lazy writing.
pub const KR_VARIANT_SPLIT_LOCK: u32 = 1;

/// `kr_config.variant`: lock-free tree.
pub const KR_VARIANT_LOCK_FREE: u32 = 2;

/// `kr_config.variant` of a buffer shared by processes (`kr_shm_create`): the lock-free
/// protocol in a shared mapping. `kr_buffer_new` refuses it.
pub const KR_VARIANT_SHARED: u32 = 3;

/// `kr_column.dtype`: `uint8_t`.
pub const KR_DTYPE_U8: u32 = 0;

/// `kr_column.dtype`: `int32_t`.
pub const KR_DTYPE_I32: u32 = 1;

/// `kr_column.dtype`: `int64_t`.
pub const KR_DTYPE_I64: u32 = 2;

/// `kr_column.dtype`: `float`.
pub const KR_DTYPE_F32: u32 = 3;

/// `kr_column.dtype`: `double`.
pub const KR_DTYPE_F64: u32 = 4;

/// `kr_column.dtype`: `bool` as one byte, 0 or 1.
pub const KR_DTYPE_BOOL: u32 = 5;

/// `kr_config.weight_normalization`: by the largest possible weight.
pub const KR_WEIGHTS_GLOBAL: u32 = 0;

/// `kr_config.weight_normalization`: by the largest weight in the batch.
pub const KR_WEIGHTS_BATCH: u32 = 1;

/// `kr_config.default_priority`: the largest priority ever stored.
pub const KR_DEFAULT_PRIORITY_RUNNING_MAX: u32 = 0;

/// `kr_config.default_priority`: the largest priority stored now.
pub const KR_DEFAULT_PRIORITY_LIVE_MAX: u32 = 1;

/// Buffer configuration; start from `kr_config_default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_config {
    /// Items held before FIFO eviction (>= 1).
    pub capacity: usize,
    /// Tree fanout: 2, 4, 8, 16, 32 or 64.
    pub fanout: usize,
    /// `KR_VARIANT_*`.
    pub variant: u32,
    /// Priority exponent (finite, >= 0).
    pub alpha: f64,
    /// Default priority before any is seen (finite, > 0).
    pub initial_priority: f64,
    /// `KR_WEIGHTS_*`.
    pub weight_normalization: u32,
    /// `KR_DEFAULT_PRIORITY_*`.
    pub default_priority: u32,
    /// The tag in the buffer's keys (`kr_key.generation >> 48`), 1 to 32767; 0 (the
    /// default): the buffer draws one at random, so that another buffer's key is refused.
    /// `kr_buffer_config` reports the tag the buffer has.
    pub key_tag: u32,
    /// `KR_RATE_*`: the rate limit the buffer holds (`KR_RATE_NONE`, the default: none).
    /// Counted in items; see `kary_replay::rate` for Reverb's semantics.
    pub rate_limit: u32,
    /// `KR_RATE_SAMPLE_TO_INSERT_*`: how many times each item is sampled on average (> 0).
    pub rate_samples_per_insert: f64,
    /// `KR_RATE_MIN_SIZE`, `KR_RATE_SAMPLE_TO_INSERT_*`: items inserted before the first
    /// sample (>= 1); `KR_RATE_QUEUE`: the most inserts not yet sampled.
    pub rate_min_size: u64,
    /// `KR_RATE_SAMPLE_TO_INSERT_RATIO`: the range `samples_per_insert * min_size +-
    /// error_buffer` of `inserts * samples_per_insert - samples` (>= 0; INFINITY: none).
    pub rate_error_buffer: f64,
    /// `KR_RATE_SAMPLE_TO_INSERT_RANGE`: that range's lower end (-INFINITY: none).
    pub rate_min_diff: f64,
    /// `KR_RATE_SAMPLE_TO_INSERT_RANGE`: that range's upper end (INFINITY: none).
    pub rate_max_diff: f64,
    /// With a limit: the largest insert (a writer's batch, an `insert_batch`), >= 1.
    pub rate_insert_batch: u64,
    /// With a limit: the largest sample, >= 1. A limit under which a call of these sizes
    /// could wait forever is refused by `kr_buffer_new` (`KR_E_INVALID_ARGUMENT`, with the
    /// reason and what would work in `kr_last_error_message`).
    pub rate_sample_batch: u64,
    /// Delete each item once `max_times_sampled` of its draws reached callers (Reverb's
    /// `max_times_sampled`; 0, the default, is no limit; at most 511). Held by the split-lock,
    /// lock-free and shared buffers; `KR_VARIANT_GLOBAL_LOCK` refuses it
    /// (`KR_E_INVALID_ARGUMENT`). A batch needs as many draws as its size: when the items left
    /// cannot give them, a sample is `KR_E_CONTENTION` and consumes nothing. With
    /// `KR_RATE_QUEUE`, `rate_min_size + rate_sample_batch` must not exceed `capacity`
    /// (`KR_E_INVALID_ARGUMENT`; one more `rate_sample_batch` for each further sampler
    /// thread), so that inserts admitted while a sample runs never evict items not handed
    /// out yet.
    pub max_times_sampled: u32,
    /// The name of the column that holds each item's policy version (a `KR_DTYPE_I64` column of
    /// one element), or NULL (the default): items carry no version. With one,
    /// `kr_buffer_retire_before` retires every item older than a version. The string is
    /// copied at `kr_buffer_new`; `kr_buffer_config` returns a pointer owned by the buffer.
    pub version_column: *const c_char,
    /// 1: keep, in each tree node, the largest priority below it, which `KR_SAMPLE_MAX_HEAP`
    /// walks; 0 (the default): not, and `KR_SAMPLE_MAX_HEAP` is refused
    /// (`KR_E_INVALID_ARGUMENT`) unless `default_priority` is `KR_DEFAULT_PRIORITY_LIVE_MAX`,
    /// which keeps them anyway. Every priority write pays for it (about 1.4x a lock-free
    /// update). `KR_SAMPLE_MIN_HEAP` needs nothing. Other values are refused.
    pub max_heap: u32,
}

/// One column of the schema.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_column {
    /// NUL-terminated UTF-8 name, unique and non-empty (copied).
    pub name: *const c_char,
    /// `KR_DTYPE_*`.
    pub dtype: u32,
    /// Elements per item (>= 1). With `ndim` > 0 it is 0 (worked out) or the product of
    /// `dims`.
    pub shape: usize,
    /// The number of per-item dimensions in `dims`, or 0: one dimension of `shape`.
    /// From `kr_buffer_column`, the column's own (0 for a scalar column, `shape` 1).
    pub ndim: usize,
    /// `ndim` per-item dimensions, row-major (`{84, 84}` for a frame; copied), or NULL
    /// when `ndim` is 0. A checkpoint's column file has the shape `(capacity, *dims)`.
    pub dims: *const usize,
}

/// The `KR_DTYPE_*` code of `dtype`.
pub(crate) fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::U8 => KR_DTYPE_U8,
        DType::I32 => KR_DTYPE_I32,
        DType::I64 => KR_DTYPE_I64,
        DType::F32 => KR_DTYPE_F32,
        DType::F64 => KR_DTYPE_F64,
        DType::Bool => KR_DTYPE_BOOL,
    }
}

/// `KR_WEIGHTS_*` as a normalization.
pub(crate) fn weight_normalization_from(code: u32) -> Result<WeightNormalization, Failure> {
    match code {
        KR_WEIGHTS_GLOBAL => Ok(WeightNormalization::Global),
        KR_WEIGHTS_BATCH => Ok(WeightNormalization::Batch),
        other => Err(Failure::Invalid(format!(
            "unknown weight normalization {other}"
        ))),
    }
}

/// `KR_DTYPE_*` as a dtype.
pub(crate) fn dtype(code: u32) -> Result<DType, Failure> {
    Ok(match code {
        KR_DTYPE_U8 => DType::U8,
        KR_DTYPE_I32 => DType::I32,
        KR_DTYPE_I64 => DType::I64,
        KR_DTYPE_F32 => DType::F32,
        KR_DTYPE_F64 => DType::F64,
        KR_DTYPE_BOOL => DType::Bool,
        other => return Err(Failure::Invalid(format!("unknown dtype {other}"))),
    })
}

/// The default configuration: capacity 2^20, fanout 8, `KR_VARIANT_SPLIT_LOCK`, alpha
/// 0.6, initial priority 1, global weight normalization, running-max default priority, a
/// key tag drawn by each buffer, no rate limit (the rate fields: 1 sample per insert, min
/// size 1, unbounded ranges, batches of 1).
///
/// Thread safety: any thread, any time.
#[no_mangle]
pub extern "C" fn kr_config_default() -> kr_config {
    let rate = no_rate_limit();
    kr_config {
        capacity: 1 << 20,
        fanout: 8,
        variant: KR_VARIANT_SPLIT_LOCK,
        alpha: 0.6,
        initial_priority: 1.0,
        weight_normalization: KR_WEIGHTS_GLOBAL,
        default_priority: KR_DEFAULT_PRIORITY_RUNNING_MAX,
        key_tag: 0,
        rate_limit: rate.kind,
        rate_samples_per_insert: rate.samples_per_insert,
        rate_min_size: rate.min_size,
        rate_error_buffer: rate.error_buffer,
        rate_min_diff: rate.min_diff,
        rate_max_diff: rate.max_diff,
        rate_insert_batch: rate.insert_batch,
        rate_sample_batch: rate.sample_batch,
        max_times_sampled: 0,
        version_column: std::ptr::null(),
        max_heap: 0,
    }
}

/// `kr_config.rate_limit`: no rate limit (the default).
pub const KR_RATE_NONE: u32 = 0;

/// `kr_config.rate_limit`: no sample before `rate_min_size` items were inserted; nothing
/// else is limited.
pub const KR_RATE_MIN_SIZE: u32 = 1;

/// `kr_config.rate_limit`: from `rate_min_size` items on, `inserts * samples_per_insert -
/// samples` stays within `samples_per_insert * min_size +- rate_error_buffer` (Reverb's
/// `SampleToInsertRatio` with a symmetric error buffer).
pub const KR_RATE_SAMPLE_TO_INSERT_RATIO: u32 = 2;

/// `kr_config.rate_limit`: as `KR_RATE_SAMPLE_TO_INSERT_RATIO`, within
/// `[rate_min_diff, rate_max_diff]` as given.
pub const KR_RATE_SAMPLE_TO_INSERT_RANGE: u32 = 3;

/// `kr_config.rate_limit`: one sample per insert, at most `rate_min_size` inserts ahead.
pub const KR_RATE_QUEUE: u32 = 4;

/// A sequence buffer's rate limit (`kr_seq_config.rate`), counted in windows: the same
/// meanings as `kr_config`'s `rate_*` fields, which hold a flat buffer's.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kr_rate_limit {
    /// `KR_RATE_*` (`KR_RATE_NONE`, the default: none).
    pub kind: u32,
    /// As `kr_config.rate_samples_per_insert`.
    pub samples_per_insert: f64,
    /// As `kr_config.rate_min_size`.
    pub min_size: u64,
    /// As `kr_config.rate_error_buffer`.
    pub error_buffer: f64,
    /// As `kr_config.rate_min_diff`.
    pub min_diff: f64,
    /// As `kr_config.rate_max_diff`.
    pub max_diff: f64,
    /// The largest insert: for a sequence buffer, the most windows one lane call completes;
    /// 0 (the default): exactly that (`ceil(reach / period)`).
    pub insert_batch: u64,
    /// The largest sample, >= 1.
    pub sample_batch: u64,
}

/// No rate limit; the other fields as `kr_config_default` has them.
fn no_rate_limit() -> kr_rate_limit {
    kr_rate_limit {
        kind: KR_RATE_NONE,
        samples_per_insert: 1.0,
        min_size: 1,
        error_buffer: f64::INFINITY,
        min_diff: f64::NEG_INFINITY,
        max_diff: f64::INFINITY,
        insert_batch: 1,
        sample_batch: 1,
    }
}

/// `kr_seq_config_default`'s rate limit: none, the insert batch worked out.
pub(crate) fn no_sequence_rate_limit() -> kr_rate_limit {
    kr_rate_limit {
        insert_batch: 0,
        ..no_rate_limit()
    }
}

impl kr_config {
    /// The `rate_*` fields as one [`kr_rate_limit`].
    fn rate(&self) -> kr_rate_limit {
        kr_rate_limit {
            kind: self.rate_limit,
            samples_per_insert: self.rate_samples_per_insert,
            min_size: self.rate_min_size,
            error_buffer: self.rate_error_buffer,
            min_diff: self.rate_min_diff,
            max_diff: self.rate_max_diff,
            insert_batch: self.rate_insert_batch,
            sample_batch: self.rate_sample_batch,
        }
    }
}

/// The rate limit `config` asks for, or none; `KR_E_INVALID_ARGUMENT` for an unknown kind
/// (the values are checked when the configuration is built).
pub(crate) fn rate_limit_from(config: &kr_config) -> Result<Option<(RateLimit, Batches)>, Failure> {
    rate_limit_of(&config.rate())
}

/// The rate limit `rate` asks for, or none (as [`rate_limit_from`]).
pub(crate) fn rate_limit_of(rate: &kr_rate_limit) -> Result<Option<(RateLimit, Batches)>, Failure> {
    let (spi, min_size) = (rate.samples_per_insert, rate.min_size);
    let limit = match rate.kind {
        KR_RATE_NONE => return Ok(None),
        KR_RATE_MIN_SIZE => RateLimit::MinSize(min_size),
        KR_RATE_QUEUE => RateLimit::Queue(min_size),
        KR_RATE_SAMPLE_TO_INSERT_RATIO => RateLimit::SampleToInsertRatio {
            samples_per_insert: spi,
            min_size,
            error_buffer: ErrorBuffer::Symmetric(rate.error_buffer),
        },
        KR_RATE_SAMPLE_TO_INSERT_RANGE => RateLimit::SampleToInsertRatio {
            samples_per_insert: spi,
            min_size,
            error_buffer: ErrorBuffer::Range(rate.min_diff, rate.max_diff),
        },
        other => return Err(Failure::Invalid(format!("unknown rate limit {other}"))),
    };
    let batches = Batches {
        insert: rate.insert_batch,
        sample: rate.sample_batch,
    };
    Ok(Some((limit, batches)))
}

/// `config` with the rate fields of `rate` (what `kr_buffer_config` reports); the
/// defaults' when there is none.
pub(crate) fn with_rate_limit(
    mut config: kr_config,
    rate: Option<(RateLimit, Batches)>,
) -> kr_config {
    let r = rate_fields(rate);
    config.rate_limit = r.kind;
    config.rate_samples_per_insert = r.samples_per_insert;
    config.rate_min_size = r.min_size;
    config.rate_error_buffer = r.error_buffer;
    config.rate_min_diff = r.min_diff;
    config.rate_max_diff = r.max_diff;
    config.rate_insert_batch = r.insert_batch;
    config.rate_sample_batch = r.sample_batch;
    config
}

/// `rate` as C's fields (the defaults' when there is none).
pub(crate) fn rate_fields(rate: Option<(RateLimit, Batches)>) -> kr_rate_limit {
    let mut r = no_rate_limit();
    let Some((limit, batches)) = rate else {
        return r;
    };
    r.insert_batch = batches.insert;
    r.sample_batch = batches.sample;
    match limit {
        RateLimit::MinSize(n) => {
            r.kind = KR_RATE_MIN_SIZE;
            r.min_size = n;
        }
        RateLimit::Queue(n) => {
            r.kind = KR_RATE_QUEUE;
            r.min_size = n;
        }
        RateLimit::SampleToInsertRatio {
            samples_per_insert,
            min_size,
            error_buffer,
        } => {
            r.samples_per_insert = samples_per_insert;
            r.min_size = min_size;
            match error_buffer {
                ErrorBuffer::Symmetric(e) => {
                    r.kind = KR_RATE_SAMPLE_TO_INSERT_RATIO;
                    r.error_buffer = e;
                }
                ErrorBuffer::Range(lo, hi) => {
                    r.kind = KR_RATE_SAMPLE_TO_INSERT_RANGE;
                    (r.min_diff, r.max_diff) = (lo, hi);
                }
            }
        }
    }
    r
}
