//! The manifest: its fields as JSON, the dtype names, the column files' names, and its
//! reading and checking against `COMMIT` and the buffer's rules.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::*;
use crate::buffer::{Config, DefaultPriority, WeightNormalization};
use crate::dtype::DType;
use crate::error::{CheckpointErrorKind as Kind, Error, Result};
use crate::rate::{Batches, ErrorBuffer, RateLimit};
use crate::storage::Schema;
use crate::tree::MAX_CAPACITY;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Manifest {
    pub(super) format: String,
    pub(super) version: u32,
    pub(super) crate_version: String,
    pub(super) config: ManifestConfig,
    pub(super) schema: Vec<ManifestColumn>,
    pub(super) state: ManifestState,
    pub(super) files: BTreeMap<String, ManifestFile>,
    pub(super) user: UserData,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ManifestConfig {
    pub(super) capacity: u64,
    pub(super) fanout: u64,
    pub(super) alpha: f64,
    pub(super) weight_normalization: String,
    pub(super) default_priority: String,
    pub(super) initial_priority: f64,
    /// The buffer's key tag; absent (0) in a checkpoint written before keys carried one,
    /// whose buffer then draws a new tag when loaded.
    #[serde(default)]
    pub(super) key_tag: u16,
    /// The rate limit ([`Config::rate_limit`]); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) rate_limit: Option<ManifestRateLimit>,
}

impl ManifestConfig {
    /// The manifest's record of `config` (its schema apart).
    pub(super) fn of(config: &Config) -> ManifestConfig {
        ManifestConfig {
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
            rate_limit: config.rate_limit().map(ManifestRateLimit::of),
        }
    }
}

#[cfg(all(unix, not(loom)))]
/// A whole configuration, schema included, as JSON: what a shared buffer's mapping holds
/// (`buffer/shm`), in the manifest's words.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRecord {
    config: ManifestConfig,
    schema: Vec<ManifestColumn>,
}

#[cfg(all(unix, not(loom)))]
/// `config` as JSON (see [`ConfigRecord`]).
pub(crate) fn config_json(config: &Config) -> String {
    let schema = config
        .schema()
        .columns()
        .iter()
        .map(|spec| ManifestColumn {
            name: spec.name.clone(),
            dtype: dtype_name(spec.dtype).to_string(),
            shape: spec.shape as u64,
            dims: (spec.dims != [spec.shape])
                .then(|| spec.dims.iter().map(|&d| d as u64).collect()),
            file: String::new(),
        })
        .collect();
    serde_json::to_string(&ConfigRecord {
        config: ManifestConfig::of(config),
        schema,
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

/// A rate limit and the largest calls it admits. A bound that JSON cannot hold (an infinite
/// one) is written as `null`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ManifestRateLimit {
    pub(super) limit: ManifestLimit,
    pub(super) insert_batch: u64,
    pub(super) sample_batch: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum ManifestLimit {
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

impl ManifestRateLimit {
    pub(super) fn of((limit, batches): (RateLimit, Batches)) -> ManifestRateLimit {
        let finite = |x: f64| x.is_finite().then_some(x);
        let limit = match limit {
            RateLimit::MinSize(min_size) => ManifestLimit::MinSize { min_size },
            RateLimit::Queue(size) => ManifestLimit::Queue { size },
            RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Symmetric(e),
            } => ManifestLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: finite(e),
            },
            RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Range(lo, hi),
            } => ManifestLimit::SampleToInsertRange {
                samples_per_insert,
                min_size,
                min_diff: finite(lo),
                max_diff: finite(hi),
            },
        };
        ManifestRateLimit {
            limit,
            insert_batch: batches.insert,
            sample_batch: batches.sample,
        }
    }

    pub(super) fn parse(self) -> (RateLimit, Batches) {
        let limit = match self.limit {
            ManifestLimit::MinSize { min_size } => RateLimit::MinSize(min_size),
            ManifestLimit::Queue { size } => RateLimit::Queue(size),
            ManifestLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer,
            } => RateLimit::SampleToInsertRatio {
                samples_per_insert,
                min_size,
                error_buffer: ErrorBuffer::Symmetric(error_buffer.unwrap_or(f64::INFINITY)),
            },
            ManifestLimit::SampleToInsertRange {
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
pub(super) struct ManifestColumn {
    pub(super) name: String,
    pub(super) dtype: String,
    pub(super) shape: u64,
    /// The per-item dimensions; absent when they are `[shape]` (so a flat column's
    /// manifest reads as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dims: Option<Vec<u64>>,
    pub(super) file: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ManifestState {
    pub(super) inserted: u64,
    pub(super) len: u64,
    pub(super) cursor: u64,
    pub(super) running_max: f64,
    /// The rate limiter's counts at the save; absent without a rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) rate: Option<ManifestRateCounts>,
}

/// A rate limiter's counts: items admitted to be inserted and to be sampled.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ManifestRateCounts {
    pub(super) inserts: u64,
    pub(super) samples: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ManifestFile {
    pub(super) bytes: u64,
    pub(super) crc32: u32,
}

pub(super) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::Bool => "bool",
    }
}

pub(super) fn dtype_from(name: &str) -> Option<DType> {
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

/// The shape of a column's `.npy` file: `(capacity, *dims)`.
pub(super) fn npy_shape(capacity: usize, spec: &crate::storage::ColumnSpec) -> Vec<usize> {
    std::iter::once(capacity)
        .chain(spec.dims.iter().copied())
        .collect()
}

/// A column's file: `col.<name>.npy` when the name is a plain file name, else by position.
pub(super) fn column_file(index: usize, name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    match plain {
        true => format!("col.{name}.npy"),
        false => format!("col.{index}.npy"),
    }
}

/// Read a small file whole, refusing one longer than `max` bytes before reading it.
pub(super) fn read_small(path: &Path, max: u64) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(|e| io(path, e))?;
    let len = file.metadata().map_err(|e| io(path, e))?.len();
    if len > max {
        return Err(err(
            Kind::Format,
            path,
            format!("{len} bytes, more than {max}"),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io(path, e))?;
    Ok(bytes)
}

/// The manifest's CRC that `COMMIT` holds, and the manifest's bytes; `Uncommitted` when
/// there is no valid `COMMIT`, `Corrupt` when the two disagree.
pub(super) fn committed_manifest(dir: &Path) -> Result<Vec<u8>> {
    committed_manifest_of(dir, FORMAT, VERSION)
}

/// [`committed_manifest`] of a checkpoint of `format` `version`: another format's `COMMIT`
/// is a `Format` error that names it.
pub(crate) fn committed_manifest_of(dir: &Path, format: &str, version: u32) -> Result<Vec<u8>> {
    let meta = fs::metadata(dir).map_err(|e| io(dir, e))?;
    if !meta.is_dir() {
        return Err(err(Kind::NotFound, dir, "not a directory"));
    }
    let commit_path = dir.join(COMMIT);
    let commit = match read_small(&commit_path, 256) {
        Ok(c) => c,
        Err(Error::Checkpoint {
            kind: Kind::NotFound,
            ..
        }) => {
            return Err(err(
                Kind::Uncommitted,
                dir,
                "no COMMIT file: the save did not finish",
            ))
        }
        Err(e) => return Err(e),
    };
    let prefix = format!("{format} v{version} manifest-crc32 ");
    let text = std::str::from_utf8(&commit).unwrap_or("");
    for other in [FORMAT, SEQUENCE_FORMAT] {
        if other != format && text.starts_with(&format!("{other} v")) {
            return Err(err(
                Kind::Format,
                dir,
                format!(
                    "a {other:?} checkpoint, not a {format:?} one: load it as {}",
                    match other {
                        FORMAT => "a PrioritizedReplayBuffer (kr_buffer_load, Load::load)",
                        _ => "a SequenceReplayBuffer (kr_seq_load, SequenceBuffer::load)",
                    }
                ),
            ));
        }
    }
    let crc = text
        .strip_prefix(&prefix)
        .and_then(|t| t.strip_suffix('\n'))
        .and_then(crc_hex)
        .ok_or_else(|| {
            err(
                Kind::Uncommitted,
                &commit_path,
                format!("not a {format} v{version} COMMIT record"),
            )
        })?;
    let manifest_path = dir.join(MANIFEST);
    let manifest = read_small(&manifest_path, MAX_MANIFEST_BYTES)?;
    let actual = crc32fast::hash(&manifest);
    if actual != crc {
        return Err(err(
            Kind::Corrupt,
            &manifest_path,
            format!("CRC-32 {actual:08x}, COMMIT says {crc:08x}"),
        ));
    }
    Ok(manifest)
}

/// A COMMIT record's CRC-32 exactly as a save writes it: 8 lowercase hex digits
/// (`from_str_radix` alone would take a damaged record whose letters changed case, or a
/// leading `+`).
pub(super) fn crc_hex(h: &str) -> Option<u32> {
    (h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(h, 16).ok())
        .flatten()
}

pub(super) fn parse_config(m: &Manifest, dir: &Path) -> Result<Config> {
    if m.format != FORMAT || m.version != VERSION {
        return Err(err(
            Kind::Format,
            dir,
            format!(
                "format {:?} version {}, this crate reads {FORMAT:?} version {VERSION}",
                m.format, m.version
            ),
        ));
    }
    config_of(&m.config, &m.schema, dir)
}

/// The configuration that `c` and `columns` describe.
fn config_of(c: &ManifestConfig, columns: &[ManifestColumn], dir: &Path) -> Result<Config> {
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
        .weight_normalization(
            weight_norm_from(&c.weight_normalization)
                .ok_or_else(|| bad(format!("weight normalization {:?}", c.weight_normalization)))?,
        )
        .default_priority(match c.default_priority.as_str() {
            "running_max" => DefaultPriority::RunningMax,
            "live_max" => DefaultPriority::LiveMax,
            other => return Err(bad(format!("default priority {other:?}"))),
        });
    if let Some(rate) = c.rate_limit {
        let (limit, batches) = rate.parse();
        builder = builder.rate_limit(limit, batches);
    }
    builder.build().map_err(|e| bad(format!("config: {e}")))
}

/// The counts of the committed checkpoint `dir` (generations handed out, items held), read
/// from its manifest alone (its `COMMIT` checked, the data files not read).
pub(super) fn committed_state(dir: &Path) -> Result<(u64, usize)> {
    let bytes = committed_manifest(dir)?;
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
    let len = usize::try_from(manifest.state.len)
        .map_err(|_| err(Kind::Invalid, dir, "a length past usize"))?;
    Ok((manifest.state.inserted, len))
}

/// The schema a manifest lists (every dtype known, every shape the product of its dims).
pub(crate) fn parse_schema(columns: &[ManifestColumn], dir: &Path) -> Result<Schema> {
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
