//! A buffer's configuration as JSON, in the words a checkpoint's manifest uses: its fields
//! ([`ConfigFields`], [`RateLimitFields`]), its columns ([`ColumnFields`]), the dtype and
//! weight-normalization names, and the whole record a shared buffer's mapping holds
//! ([`config_json`], [`config_from_json`]). A configuration read back is built through
//! [`Config::builder`], so every rule of a configuration holds for it; what breaks one is a
//! checkpoint error of kind `Invalid` (`Format` for JSON that does not parse) naming where it
//! was read from.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::buffer::{Config, DefaultPriority, WeightNormalization};
use crate::dtype::DType;
use crate::error::{CheckpointErrorKind as Kind, Error, Result};
use crate::rate::{Batches, ErrorBuffer, RateLimit};
use crate::storage::Schema;
use crate::tree::MAX_CAPACITY;

fn err(kind: Kind, path: &Path, detail: impl Into<String>) -> Error {
    Error::Checkpoint {
        kind,
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFields {
    pub(crate) capacity: u64,
    pub(crate) fanout: u64,
    pub(crate) alpha: f64,
    pub(crate) weight_normalization: String,
    pub(crate) default_priority: String,
    pub(crate) initial_priority: f64,
    /// The buffer's key tag; absent (0) in a checkpoint written before keys carried one,
    /// whose buffer then draws a new tag when loaded.
    #[serde(default)]
    pub(crate) key_tag: u16,
    /// The rate limit ([`Config::rate_limit`]); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rate_limit: Option<RateLimitFields>,
    /// Draws after which an item is deleted ([`Config::max_times_sampled`]); absent (0)
    /// when there is no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) max_times_sampled: u32,
    /// The column holding each item's policy version ([`Config::version_column`]), by
    /// name; absent when items carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version_column: Option<String>,
    /// Whether the tree keeps its maxima ([`Config::max_heap`]); absent (false) when not.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) max_heap: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(k: &u32) -> bool {
    *k == 0
}

impl ConfigFields {
    /// The manifest's record of `config` (its schema apart).
    pub(crate) fn of(config: &Config) -> ConfigFields {
        ConfigFields {
            capacity: config.capacity() as u64,
            fanout: config.fanout().get() as u64,
            alpha: config.alpha(),
            weight_normalization: weight_norm_name(config.weight_normalization()).to_string(),
            default_priority: match config.default_priority() {
                DefaultPriority::RunningMax => "running_max",
                DefaultPriority::LiveMax => "live_max",
            }
            .to_string(),
            initial_priority: config.initial_priority(),
            key_tag: config.key_tag(),
            rate_limit: config.rate_limit().map(RateLimitFields::of),
            max_times_sampled: config.max_times_sampled().unwrap_or(0),
            version_column: config
                .version_column()
                .map(|c| config.schema().columns()[c].name.clone()),
            max_heap: config.max_heap(),
        }
    }
}

#[cfg(all(unix, not(loom)))]
/// A whole configuration, schema included, as JSON: what a shared buffer's mapping holds
/// (`buffer/shm`), in the manifest's words.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRecord {
    config: ConfigFields,
    schema: Vec<ColumnFields>,
}

#[cfg(all(unix, not(loom)))]
/// `config` as JSON (see [`ConfigRecord`]).
pub(crate) fn config_json(config: &Config) -> String {
    serde_json::to_string(&ConfigRecord {
        config: ConfigFields::of(config),
        schema: schema_fields(config.schema()),
    })
    .expect("a configuration serializes")
}

#[cfg(all(unix, not(loom)))]
/// The configuration [`config_json`] wrote; errors name `what` (a path or a name).
pub(crate) fn config_from_json(bytes: &[u8], what: &Path) -> Result<Config> {
    let record: ConfigRecord = serde_json::from_slice(bytes)
        .map_err(|e| err(Kind::Format, what, format!("configuration: {e}")))?;
    config_of(&record.config, &record.schema, what)
}

/// The columns of `schema` in a manifest's words, with no file (a mapping's record).
#[cfg(all(unix, not(loom)))]
pub(crate) fn schema_fields(schema: &Schema) -> Vec<ColumnFields> {
    schema
        .columns()
        .iter()
        .map(|spec| ColumnFields {
            name: spec.name.clone(),
            dtype: dtype_name(spec.dtype).to_string(),
            shape: spec.shape as u64,
            dims: (spec.dims != [spec.shape])
                .then(|| spec.dims.iter().map(|&d| d as u64).collect()),
            file: String::new(),
        })
        .collect()
}

/// A rate limit and the largest calls it admits. A bound that JSON cannot hold (an infinite
/// one) is written as `null`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimitFields {
    pub(crate) limit: LimitFields,
    pub(crate) insert_batch: u64,
    pub(crate) sample_batch: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum LimitFields {
    MinSize {
        min_size: u64,
    },
    Queue {
        size: u64,
    },
    SampleToInsertRatio {
        samples_per_insert: f64,
        min_size: u64,
        /// The symmetric error buffer (`null`: unbounded).
        error_buffer: Option<f64>,
    },
    SampleToInsertRange {
        samples_per_insert: f64,
        min_size: u64,
        /// `null`: no lower bound.
        min_diff: Option<f64>,
        /// `null`: no upper bound.
        max_diff: Option<f64>,
    },
}

impl RateLimitFields {
    pub(crate) fn of((limit, batches): (RateLimit, Batches)) -> RateLimitFields {
        let finite = |x: f64| x.is_finite().then_some(x);
        let limit = match limit {
            RateLimit::MinSize(min_size) => LimitFields::MinSize { min_size },
            RateLimit::Queue(size) => LimitFields::Queue { size },
            RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Symmetric(e),
            } => LimitFields::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: finite(e),
            },
            RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Range(lo, hi),
            } => LimitFields::SampleToInsertRange {
                samples_per_insert,
                min_size,
                min_diff: finite(lo),
                max_diff: finite(hi),
            },
        };
        RateLimitFields {
            limit,
            insert_batch: batches.insert,
            sample_batch: batches.sample,
        }
    }

    pub(crate) fn parse(self) -> (RateLimit, Batches) {
        let limit = match self.limit {
            LimitFields::MinSize { min_size } => RateLimit::MinSize(min_size),
            LimitFields::Queue { size } => RateLimit::Queue(size),
            LimitFields::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer,
            } => RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Symmetric(error_buffer.unwrap_or(f64::INFINITY)),
            },
            LimitFields::SampleToInsertRange {
                samples_per_insert,
                min_size,
                min_diff,
                max_diff,
            } => RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Range(
                    min_diff.unwrap_or(f64::NEG_INFINITY),
                    max_diff.unwrap_or(f64::INFINITY),
                ),
            },
        };
        let batches = Batches {
            insert: self.insert_batch,
            sample: self.sample_batch,
        };
        (limit, batches)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ColumnFields {
    pub(crate) name: String,
    pub(crate) dtype: String,
    pub(crate) shape: u64,
    /// The per-item dimensions; absent when they are `[shape]` (so a flat column's
    /// manifest reads as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dims: Option<Vec<u64>>,
    pub(crate) file: String,
}

pub(crate) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::Bool => "bool",
    }
}

pub(crate) fn dtype_from(name: &str) -> Option<DType> {
    Some(match name {
        "u8" => DType::U8,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "f32" => DType::F32,
        "f64" => DType::F64,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// The configuration that `c` and `columns` describe.
pub(crate) fn config_of(c: &ConfigFields, columns: &[ColumnFields], dir: &Path) -> Result<Config> {
    let bad = |what: String| err(Kind::Invalid, dir, what);
    if c.capacity == 0 || c.capacity > MAX_CAPACITY as u64 {
        return Err(bad(format!("capacity {} (1..={MAX_CAPACITY})", c.capacity)));
    }
    let schema = parse_schema(columns, dir)?;
    let mut builder = Config::builder(c.capacity as usize, schema)
        .fanout(usize::try_from(c.fanout).unwrap_or(usize::MAX))
        .alpha(c.alpha)
        .initial_priority(c.initial_priority)
        .key_tag(c.key_tag)
        .weight_normalization(weight_norm_field(&c.weight_normalization, dir)?)
        .default_priority(match c.default_priority.as_str() {
            "running_max" => DefaultPriority::RunningMax,
            "live_max" => DefaultPriority::LiveMax,
            other => return Err(bad(format!("default priority {other:?}"))),
        });
    if let Some(rate) = c.rate_limit {
        let (limit, batches) = rate.parse();
        builder = builder.rate_limit(limit, batches);
    }
    builder = builder
        .max_times_sampled(c.max_times_sampled)
        .max_heap(c.max_heap);
    if let Some(name) = &c.version_column {
        builder = builder.version_column(name);
    }
    builder.build().map_err(|e| bad(format!("config: {e}")))
}

/// The schema a manifest lists (every dtype known, every shape the product of its dims).
pub(crate) fn parse_schema(columns: &[ColumnFields], dir: &Path) -> Result<Schema> {
    let bad = |what: String| err(Kind::Invalid, dir, what);
    let mut schema = Schema::new();
    for col in columns {
        let dtype = dtype_from(&col.dtype).ok_or_else(|| bad(format!("dtype {:?}", col.dtype)))?;
        let shape = usize::try_from(col.shape).map_err(|_| bad(format!("shape {}", col.shape)))?;
        let dims = match &col.dims {
            None => vec![shape],
            Some(dims) => dims
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| bad(format!("dims {dims:?}")))?,
        };
        if Schema::elements(&dims) != Some(shape) {
            return Err(bad(format!(
                "column {:?}: shape {shape} is not the product of its dims {dims:?}",
                col.name
            )));
        }
        schema = schema.column(col.name.clone(), dtype, dims);
    }
    Ok(schema)
}

/// A weight normalization's name in a manifest.
pub(crate) fn weight_norm_name(w: WeightNormalization) -> &'static str {
    match w {
        WeightNormalization::Global => "global",
        WeightNormalization::Batch => "batch",
    }
}

/// The weight normalization a manifest names.
pub(crate) fn weight_norm_from(name: &str) -> Option<WeightNormalization> {
    match name {
        "global" => Some(WeightNormalization::Global),
        "batch" => Some(WeightNormalization::Batch),
        _ => None,
    }
}

/// The weight normalization a record's field names; an `Invalid` error naming `dir` for
/// any other name.
pub(crate) fn weight_norm_field(name: &str, dir: &Path) -> Result<WeightNormalization> {
    weight_norm_from(name)
        .ok_or_else(|| err(Kind::Invalid, dir, format!("weight normalization {name:?}")))
}
