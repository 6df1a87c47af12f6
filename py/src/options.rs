//! The options every buffer class takes from Python, parsed once: the variant, the weight
//! normalization, the sampling mode, the default priority, the key tag, and a flat buffer's
//! whole configuration ([`buffer_config`]).

use kary_replay::{Config, DefaultPriority, SampleMode, WeightNormalization};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{argument_error, py_err};
use crate::schema::{parse_schema, Column};

pub(crate) fn variant_name(v: &str) -> PyResult<&'static str> {
    match v {
        "split" => Ok("split"),
        "lockfree" => Ok("lockfree"),
        "global" => Ok("global"),
        other => Err(argument_error(format!(
            "variant is 'split', 'lockfree' or 'global', got {other:?} (a buffer shared by \
             processes is a kary_replay.SharedReplayBuffer)"
        ))),
    }
}

pub(crate) fn weight_norm_from(weight_norm: &str) -> PyResult<WeightNormalization> {
    match weight_norm {
        "global" => Ok(WeightNormalization::Global),
        "batch" => Ok(WeightNormalization::Batch),
        other => Err(argument_error(format!(
            "weight_norm is 'global' or 'batch', got {other:?}"
        ))),
    }
}

pub(crate) fn mode_from(mode: &str) -> PyResult<SampleMode> {
    match mode {
        "stratified" => Ok(SampleMode::Stratified),
        "independent" => Ok(SampleMode::Independent),
        "without_replacement" => Ok(SampleMode::WithoutReplacement),
        "uniform" => Ok(SampleMode::Uniform),
        "fifo" => Ok(SampleMode::Fifo),
        "lifo" => Ok(SampleMode::Lifo),
        "shuffled" => Ok(SampleMode::Shuffled),
        "max_heap" => Ok(SampleMode::MaxHeap),
        "min_heap" => Ok(SampleMode::MinHeap),
        other => Err(argument_error(format!(
            "mode is 'stratified', 'independent', 'without_replacement', 'uniform', 'fifo', \
             'lifo', 'shuffled', 'max_heap' or 'min_heap', got {other:?}"
        ))),
    }
}

/// The keys' tag of `shard=` (its number plus one) or `key_tag=` (at most one of them);
/// 0 for neither (the buffer draws one).
pub(crate) fn key_tag_from(shard: Option<usize>, key_tag: Option<u64>) -> PyResult<u16> {
    let max = kary_replay::shard::MAX_SHARDS;
    match (shard, key_tag) {
        (None, None) => Ok(0),
        (Some(k), None) if k < max => Ok(k as u16 + 1),
        (Some(k), None) => Err(argument_error(format!(
            "shard is a number in 0..{max}, got {k}"
        ))),
        (None, Some(tag)) if (1..=max as u64).contains(&tag) => Ok(tag as u16),
        (None, Some(tag)) => Err(argument_error(format!(
            "key_tag is a number in 1..={max}, got {tag}"
        ))),
        (Some(_), Some(_)) => Err(argument_error(
            "shard and key_tag both set the keys' tag: give one".into(),
        )),
    }
}

pub(crate) fn default_priority_from(name: &str) -> PyResult<DefaultPriority> {
    match name {
        "running_max" => Ok(DefaultPriority::RunningMax),
        "live_max" => Ok(DefaultPriority::LiveMax),
        other => Err(argument_error(format!(
            "default_priority is 'running_max' or 'live_max', got {other:?}"
        ))),
    }
}

/// A flat buffer's keyword options, as its Python classes take them.
pub(crate) struct BufferOptions<'a, 'py> {
    pub(crate) alpha: f64,
    pub(crate) fanout: usize,
    pub(crate) weight_norm: &'a str,
    pub(crate) default_priority: &'a str,
    pub(crate) shard: Option<usize>,
    pub(crate) key_tag: Option<u64>,
    pub(crate) rate_limit: Option<&'a Bound<'py, PyAny>>,
    pub(crate) max_insert: u64,
    pub(crate) max_sample: u64,
    pub(crate) max_times_sampled: u32,
    pub(crate) version_column: Option<&'a str>,
    pub(crate) max_heap: bool,
}

/// Names a flat buffer's column cannot have: the keywords of `add` and `add_batch`, and the
/// entries a sample's dict holds beside the columns.
const RESERVED_WHY: &str = "`add` and `add_batch` have keywords priority, priorities and \
     timeout, and a sample's dict holds keys, indices, weights, probabilities, priorities and stats";

const RESERVED: [&str; 8] = [
    "priority",
    "priorities",
    "timeout",
    "keys",
    "indices",
    "weights",
    "probabilities",
    "stats",
];

/// The columns and the checked configuration of a flat buffer of `capacity` items of
/// `schema` with `options` (every family's Python class builds its config here).
pub(crate) fn buffer_config(
    py: Python<'_>,
    capacity: usize,
    schema: &Bound<'_, PyDict>,
    options: &BufferOptions<'_, '_>,
) -> PyResult<(Vec<Column>, Config)> {
    let key_tag = key_tag_from(options.shard, options.key_tag)?;
    let (columns, core) = parse_schema(py, schema, &RESERVED, RESERVED_WHY)?;
    let mut builder = Config::builder(capacity, core);
    if let Some(limit) = crate::rate::rate_limit_arg(py, options.rate_limit)? {
        let batches = kary_replay::rate::Batches {
            insert: options.max_insert,
            sample: options.max_sample,
        };
        builder = builder.rate_limit(limit, batches);
    }
    let config = builder
        .alpha(options.alpha)
        .fanout(options.fanout)
        .weight_normalization(weight_norm_from(options.weight_norm)?)
        .default_priority(default_priority_from(options.default_priority)?)
        .key_tag(key_tag)
        .max_times_sampled(options.max_times_sampled)
        .max_heap(options.max_heap);
    let config = match options.version_column {
        Some(name) => config.version_column(name),
        None => config,
    }
    .build()
    .map_err(|e| py_err(py, e))?;
    Ok((columns, config))
}
