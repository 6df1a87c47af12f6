//! A sequence buffer's configuration as JSON, in the words a sequence checkpoint's
//! manifest uses ([`SeqConfig`] and the schema's [`ColumnFields`]), and the whole record a
//! shared sequence buffer's mapping holds ([`sequence_config_json`],
//! [`sequence_config_from_json`]). A configuration read back is built through
//! [`SequenceConfig::builder`], so every rule of a configuration holds for it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Padding, Partial, SequenceConfig};
#[cfg(all(unix, not(loom)))]
use crate::buffer::config_json::schema_fields;
use crate::buffer::config_json::{
    parse_schema, weight_norm_field, weight_norm_name, ColumnFields, RateLimitFields,
};
use crate::error::{CheckpointErrorKind as Kind, Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeqConfig {
    lanes: u64,
    steps_per_lane: u64,
    window: u64,
    period: u64,
    /// "keep" or "drop".
    partial: String,
    nstep: Option<SeqNStep>,
    stack: Vec<SeqStack>,
    /// "repeat" or "zeros".
    padding: String,
    next_of: Vec<String>,
    fanout: u64,
    alpha: f64,
    weight_normalization: String,
    initial_priority: f64,
    key_tag: u16,
    /// The rate limit, counted in windows; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_limit: Option<RateLimitFields>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeqNStep {
    n: u64,
    gamma: f64,
    reward: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeqStack {
    column: String,
    frames: u64,
}

impl SeqConfig {
    /// The manifest's record of `config` (its schema apart).
    pub(crate) fn of(config: &SequenceConfig) -> SeqConfig {
        let names = |cs: &[usize]| -> Vec<String> {
            cs.iter()
                .map(|&c| config.schema().columns()[c].name.clone())
                .collect()
        };
        let tree = config.tree();
        SeqConfig {
            lanes: config.lanes() as u64,
            steps_per_lane: config.steps_per_lane() as u64,
            window: config.window() as u64,
            period: config.period() as u64,
            partial: match config.partial {
                Partial::Keep => "keep",
                Partial::Drop => "drop",
            }
            .into(),
            nstep: config.nstep.as_ref().map(|(n, _)| SeqNStep {
                n: n.n as u64,
                gamma: n.gamma,
                reward: n.reward.clone(),
            }),
            stack: config
                .stack
                .iter()
                .map(|&(c, k)| SeqStack {
                    column: config.schema().columns()[c].name.clone(),
                    frames: k as u64,
                })
                .collect(),
            padding: match config.padding {
                Padding::Repeat => "repeat",
                Padding::Zeros => "zeros",
            }
            .into(),
            next_of: names(&config.next_of),
            fanout: tree.fanout().get() as u64,
            alpha: tree.alpha(),
            weight_normalization: weight_norm_name(tree.weight_normalization()).into(),
            initial_priority: tree.initial_priority(),
            key_tag: tree.key_tag(),
            rate_limit: config.rate_limit().map(RateLimitFields::of),
        }
    }
}

fn to_usize(v: u64, what: &str, dir: &Path) -> Result<usize> {
    usize::try_from(v).map_err(|_| invalid(dir, format!("{what} {v}")))
}

fn invalid(dir: &Path, detail: String) -> Error {
    Error::Checkpoint {
        kind: Kind::Invalid,
        path: dir.display().to_string(),
        detail,
    }
}

/// The configuration `c` and `schema` describe, built through the builder (errors name
/// `dir`, where they were read from).
pub(crate) fn sequence_config_of(
    c: &SeqConfig,
    schema: &[ColumnFields],
    dir: &Path,
) -> Result<SequenceConfig> {
    let bad = |what: String| invalid(dir, what);
    let schema = parse_schema(schema, dir)?;
    let mut builder = SequenceConfig::builder(
        to_usize(c.lanes, "lanes", dir)?,
        to_usize(c.steps_per_lane, "steps_per_lane", dir)?,
        schema,
    )
    .window(to_usize(c.window, "window", dir)?)
    .period(to_usize(c.period, "period", dir)?)
    .partial(match c.partial.as_str() {
        "keep" => Partial::Keep,
        "drop" => Partial::Drop,
        other => return Err(bad(format!("partial {other:?}"))),
    })
    .padding(match c.padding.as_str() {
        "repeat" => Padding::Repeat,
        "zeros" => Padding::Zeros,
        other => return Err(bad(format!("padding {other:?}"))),
    })
    .fanout(to_usize(c.fanout, "fanout", dir)?)
    .alpha(c.alpha)
    .initial_priority(c.initial_priority)
    .key_tag(c.key_tag)
    .weight_normalization(weight_norm_field(&c.weight_normalization, dir)?);
    if let Some(n) = &c.nstep {
        builder = builder.nstep(to_usize(n.n, "nstep n", dir)?, n.gamma, &n.reward);
    }
    for s in &c.stack {
        builder = builder.stack(&s.column, to_usize(s.frames, "stack frames", dir)?);
    }
    for name in &c.next_of {
        builder = builder.next_of(name);
    }
    if let Some(rate) = c.rate_limit {
        let (limit, batches) = rate.parse();
        builder = builder.rate_limit(limit, batches);
    }
    // The lanes' rows must be addressable before the builder multiplies them out.
    c.lanes
        .checked_mul(c.steps_per_lane)
        .filter(|&rows| rows <= crate::tree::MAX_CAPACITY as u64)
        .ok_or_else(|| bad(format!("{} lanes of {} steps", c.lanes, c.steps_per_lane)))?;
    let config = builder.build().map_err(|e| bad(format!("config: {e}")))?;
    Ok(config)
}

/// A whole sequence configuration, schema included: what a shared sequence buffer's
/// mapping holds.
#[cfg(all(unix, not(loom)))]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeqConfigRecord {
    sequence: SeqConfig,
    schema: Vec<ColumnFields>,
}

/// `config` as JSON (see `SeqConfigRecord`).
#[cfg(all(unix, not(loom)))]
pub(crate) fn sequence_config_json(config: &SequenceConfig) -> String {
    serde_json::to_string(&SeqConfigRecord {
        sequence: SeqConfig::of(config),
        schema: schema_fields(config.schema()),
    })
    .expect("a configuration serializes")
}

/// The configuration [`sequence_config_json`] wrote; errors name `what`.
#[cfg(all(unix, not(loom)))]
pub(crate) fn sequence_config_from_json(bytes: &[u8], what: &Path) -> Result<SequenceConfig> {
    let record: SeqConfigRecord = serde_json::from_slice(bytes).map_err(|e| Error::Checkpoint {
        kind: Kind::Format,
        path: what.display().to_string(),
        detail: format!("configuration: {e}"),
    })?;
    sequence_config_of(&record.sequence, &record.schema, what)
}
