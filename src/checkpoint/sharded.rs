//! Sharded checkpoints: the buffers of a [`ShardedBuffer`](crate::shard::ShardedBuffer)
//! (or of the Python package's Ray shards) saved as one.
//!
//! ```text
//! dir/shard-00000/    a checkpoint of shard 0 (this module's parent's format)
//! dir/shard-00001/    ...
//! dir/manifest.json   format, num_shards, capacity, one {dir, inserted, len} per shard,
//!                     and any fields a front end adds (the Python client's schema, options
//!                     and key tags), kept as they are
//! dir/COMMIT          written last: "kary-replay sharded checkpoint v1 manifest-crc32 XXXXXXXX"
//! ```
//!
//! Every shard's directory is a committed checkpoint of its own before the manifest is
//! written; the manifest and `COMMIT` are each fsynced, then the directory. A directory
//! without `COMMIT` is an unfinished save: [`read_sharded_manifest`] refuses it
//! (`Uncommitted`). A `COMMIT` of the format's first writer, the format line alone, is read
//! too (without the CRC check it could not have).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::manifest::{committed_state, read_small};
use super::write::sync_dir;
use super::{err, io, Load, LoadOptions, SaveOptions, COMMIT, MANIFEST, MAX_MANIFEST_BYTES};
use crate::buffer::ConcurrentBuffer;
use crate::error::{CheckpointErrorKind as Kind, Result};
use crate::rate::{Batches, ErrorBuffer, RateLimit};
use crate::shard::ShardedBuffer;
use serde_json::json;

/// The manifest's `format`, and the first words of a sharded checkpoint's `COMMIT`.
pub const SHARDED_FORMAT: &str = "kary-replay sharded checkpoint v1";

/// A sharded checkpoint's `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardedManifest {
    /// [`SHARDED_FORMAT`].
    pub format: String,
    /// Shards (`shards.len()`).
    pub num_shards: usize,
    /// Slots of each shard.
    pub capacity: usize,
    /// Each shard's directory (relative to the checkpoint) and its counts at the save.
    pub shards: Vec<ShardEntry>,
    /// Fields a front end adds, kept as they are (the Python client's `schema`, `options` and
    /// `key_base`).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One shard of a [`ShardedManifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Its checkpoint's directory, relative to the sharded checkpoint (`shard-NNNNN`).
    pub dir: String,
    /// Generations it had handed out.
    pub inserted: u64,
    /// Items it held.
    pub len: usize,
}

/// Shard `k`'s directory in the sharded checkpoint `dir`: `dir/shard-NNNNN`.
pub fn shard_dir<P: AsRef<Path>>(dir: P, k: usize) -> PathBuf {
    dir.as_ref().join(shard_name(k))
}

fn shard_name(k: usize) -> String {
    format!("shard-{k:05}")
}

/// The manifest of `num_shards` shards of `capacity` slots each, as they were saved in `dir`
/// (each shard's counts read from its own committed checkpoint), with no extra field.
pub fn manifest_of_saved(
    dir: &Path,
    num_shards: usize,
    capacity: usize,
) -> Result<ShardedManifest> {
    let mut shards = Vec::new();
    crate::mem::reserve(&mut shards, num_shards)?;
    for k in 0..num_shards {
        let (inserted, len) = committed_state(&shard_dir(dir, k))?;
        shards.push(ShardEntry {
            dir: shard_name(k),
            inserted,
            len,
        });
    }
    Ok(ShardedManifest {
        format: SHARDED_FORMAT.into(),
        num_shards,
        capacity,
        shards,
        extra: serde_json::Map::new(),
    })
}

/// Write `manifest.json` and then `COMMIT` into `dir`, whose shards' checkpoints are already
/// written, each file fsynced and then the directory: after this returns, the sharded
/// checkpoint is whole on disk. An `Invalid` error for a manifest whose fields contradict
/// each other (nothing is written then); `Exists` if `dir` has a manifest already.
pub fn write_sharded_manifest(dir: &Path, manifest: &ShardedManifest) -> Result<()> {
    check(manifest, dir, Kind::Invalid)?;
    let bytes = serde_json::to_vec_pretty(manifest)
        .map_err(|e| err(Kind::Invalid, dir, format!("manifest: {e}")))?;
    write_synced(&dir.join(MANIFEST), &bytes)?;
    let commit = format!(
        "{SHARDED_FORMAT} manifest-crc32 {:08x}\n",
        crc32fast::hash(&bytes)
    );
    write_synced(&dir.join(COMMIT), commit.as_bytes())?;
    sync_dir(dir)
}

/// The manifest of the committed sharded checkpoint `dir`. `NotFound` when there is no such
/// directory, `Uncommitted` when it has no `COMMIT` (a save that did not finish), `Format`
/// when `COMMIT` is not this format's, `Corrupt` when the manifest does not match its CRC,
/// does not parse or contradicts itself.
pub fn read_sharded_manifest<P: AsRef<Path>>(dir: P) -> Result<ShardedManifest> {
    let dir = dir.as_ref();
    let meta = fs::metadata(dir).map_err(|e| io(dir, e))?;
    if !meta.is_dir() {
        return Err(err(Kind::NotFound, dir, "not a directory"));
    }
    let commit_path = dir.join(COMMIT);
    let commit = match read_small(&commit_path, 256) {
        Ok(bytes) => bytes,
        Err(crate::Error::Checkpoint {
            kind: Kind::NotFound,
            ..
        }) => {
            return Err(err(
                Kind::Uncommitted,
                dir,
                "no COMMIT file: not a committed sharded checkpoint (an unfinished save?)",
            ))
        }
        Err(e) => return Err(e),
    };
    let line = std::str::from_utf8(&commit).unwrap_or("").trim_end();
    let crc = match line.strip_prefix(SHARDED_FORMAT) {
        Some("") => None,
        Some(rest) => Some(
            rest.strip_prefix(" manifest-crc32 ")
                .and_then(super::manifest::crc_hex)
                .ok_or_else(|| err(Kind::Format, &commit_path, format!("COMMIT says {line:?}")))?,
        ),
        None => {
            return Err(err(
                Kind::Format,
                &commit_path,
                format!("COMMIT says {line:?}, expected {SHARDED_FORMAT:?}"),
            ))
        }
    };
    let manifest_path = dir.join(MANIFEST);
    let bytes = read_small(&manifest_path, MAX_MANIFEST_BYTES)?;
    if let Some(crc) = crc {
        let actual = crc32fast::hash(&bytes);
        if actual != crc {
            return Err(err(
                Kind::Corrupt,
                &manifest_path,
                format!("CRC-32 {actual:08x}, COMMIT says {crc:08x}"),
            ));
        }
    }
    let manifest: ShardedManifest = serde_json::from_slice(&bytes)
        .map_err(|e| err(Kind::Corrupt, &manifest_path, e.to_string()))?;
    check(&manifest, &manifest_path, Kind::Corrupt)?;
    Ok(manifest)
}

/// The rules a manifest keeps; a broken one is an error of `kind`.
fn check(m: &ShardedManifest, path: &Path, kind: Kind) -> Result<()> {
    let problem = if m.format != SHARDED_FORMAT {
        Some(format!(
            "format {:?}, expected {SHARDED_FORMAT:?}",
            m.format
        ))
    } else if m.num_shards == 0 || m.num_shards > crate::shard::MAX_SHARDS {
        Some(format!("{} shards (1 to 32767)", m.num_shards))
    } else if m.num_shards != m.shards.len() {
        Some(format!(
            "num_shards {} but {} shard entries",
            m.num_shards,
            m.shards.len()
        ))
    } else if let Some(k) = (0..m.num_shards).find(|&k| m.shards[k].dir != shard_name(k)) {
        Some(format!(
            "shard {k}'s directory is {:?}, expected {:?}",
            m.shards[k].dir,
            shard_name(k)
        ))
    } else if m.capacity == 0 || m.shards.iter().any(|s| s.len > m.capacity) {
        Some(format!(
            "capacity {} and the shards' lengths contradict each other",
            m.capacity
        ))
    } else {
        None
    };
    match problem {
        Some(detail) => Err(err(kind, path, detail)),
        None => Ok(()),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = File::create_new(path).map_err(|e| io(path, e))?;
    file.write_all(bytes).map_err(|e| io(path, e))?;
    file.sync_all().map_err(|e| io(path, e))
}

impl<B: ConcurrentBuffer> ShardedBuffer<B> {
    /// Save every shard into `dir/shard-NNNNN` (each a checkpoint of its own, taken while
    /// the other threads work, as [`Checkpoint::save_with`](crate::Checkpoint::save_with) takes it), then the manifest and
    /// `COMMIT` (module doc). `dir` must not exist (`Exists`). The shards are saved one after
    /// another, so the checkpoint holds each shard at its own instant.
    ///
    /// ```
    /// use kary_replay::shard::ShardedBuffer;
    /// use kary_replay::{Config, DType, LockFreeBuffer, Schema};
    ///
    /// let config = Config::builder(8, Schema::new().column("x", DType::I64, 1)).build()?;
    /// let buffer = ShardedBuffer::<LockFreeBuffer>::new(2, config)?;
    /// let key = buffer.insert(1, &[(&[5i64][..]).into()], Some(2.0))?;
    /// let dir = std::env::temp_dir().join(format!("kr-sharded-doc-{}", std::process::id()));
    /// buffer.save(&dir)?;
    /// let back = ShardedBuffer::<LockFreeBuffer>::load(&dir)?;
    /// assert_eq!(back.update_priorities(&[key], &[1.0])?.applied, 1);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn save<P: AsRef<Path>>(&self, dir: P) -> Result<()> {
        let dir = dir.as_ref();
        fs::create_dir(dir).map_err(|e| io(dir, e))?;
        for (k, shard) in self.shards().iter().enumerate() {
            shard.save_with(&shard_dir(dir, k), &SaveOptions::new())?;
        }
        let mut manifest =
            manifest_of_saved(dir, self.shards().len(), self.shards()[0].capacity())?;
        if let (Some(limiter), Some(stats)) = (self.rate_limiter(), self.rate_stats()) {
            let value = rate_entry(
                limiter.limit(),
                limiter.batches(),
                stats.inserts,
                stats.samples,
            );
            manifest.extra.insert(RATE_LIMIT.into(), value);
        }
        write_sharded_manifest(dir, &manifest)
    }

    /// The sharded checkpoint `dir` (written by [`Self::save`], or by the Python package's
    /// `ShardedReplay.save`), every shard loaded and checked as [`Load::load_with`] checks
    /// one: items, priorities, keys and counts as saved. Errors as
    /// [`read_sharded_manifest`]'s, a shard's own, or `Corrupt` when a shard's counts are
    /// not the manifest's.
    pub fn load<P: AsRef<Path>>(dir: P) -> Result<Self>
    where
        B: Load,
    {
        let dir = dir.as_ref();
        let manifest = read_sharded_manifest(dir)?;
        let mut shards = Vec::new();
        crate::mem::reserve(&mut shards, manifest.num_shards)?;
        for (k, entry) in manifest.shards.iter().enumerate() {
            let path = shard_dir(dir, k);
            let shard = B::load_with(&path, &LoadOptions::default())?.buffer;
            if shard.inserted() != entry.inserted
                || shard.len() != entry.len
                || shard.capacity() != manifest.capacity
            {
                return Err(err(
                    Kind::Corrupt,
                    &path,
                    format!(
                        "holds {} of {} slots after {} inserts; the manifest says {} of {} after {}",
                        shard.len(),
                        shard.capacity(),
                        shard.inserted(),
                        entry.len,
                        manifest.capacity,
                        entry.inserted
                    ),
                ));
            }
            shards.push(shard);
        }
        let buffer = ShardedBuffer::from_shards(shards)?;
        match manifest.extra.get(RATE_LIMIT).filter(|v| !v.is_null()) {
            None => Ok(buffer),
            Some(value) => {
                let (limit, batches, counts) = parse_rate_entry(value)
                    .ok_or_else(|| err(Kind::Corrupt, dir, format!("rate_limit {value}")))?;
                buffer.with_rate_limit(limit, batches, Some(counts))
            }
        }
    }
}

/// The manifest field that holds a union's rate limit and its counts (the Python client
/// writes the same): kind ("min_size", "ratio", "queue"), size (min_size or the queue's),
/// samples_per_insert, error_buffer (a number, a [min_diff, max_diff] pair, or null for an
/// unbounded symmetric one), max_insert, max_sample, inserts, samples.
const RATE_LIMIT: &str = "rate_limit";

fn rate_entry(limit: RateLimit, batches: Batches, inserts: u64, samples: u64) -> serde_json::Value {
    let finite = |x: f64| if x.is_finite() { json!(x) } else { json!(null) };
    let (kind, size, spi, error_buffer) = match limit {
        RateLimit::MinSize(n) => ("min_size", n, 1.0, json!(null)),
        RateLimit::Queue(n) => ("queue", n, 1.0, json!(null)),
        RateLimit::SampleToInsertRatio {
            samples_per_insert,
            min_size,
            error_buffer,
        } => (
            "ratio",
            min_size,
            samples_per_insert,
            match error_buffer {
                ErrorBuffer::Symmetric(e) => finite(e),
                ErrorBuffer::Range(lo, hi) => json!([finite(lo), finite(hi)]),
            },
        ),
    };
    json!({
        "kind": kind,
        "size": size,
        "samples_per_insert": spi,
        "error_buffer": error_buffer,
        "max_insert": batches.insert,
        "max_sample": batches.sample,
        "inserts": inserts,
        "samples": samples,
    })
}

fn parse_rate_entry(v: &serde_json::Value) -> Option<(RateLimit, Batches, (u64, u64))> {
    let u = |name: &str| v.get(name)?.as_u64();
    let bound = |x: &serde_json::Value, none: f64| match x {
        serde_json::Value::Null => Some(none),
        x => x.as_f64(),
    };
    let size = u("size")?;
    let limit = match v.get("kind")?.as_str()? {
        "min_size" => RateLimit::MinSize(size),
        "queue" => RateLimit::Queue(size),
        "ratio" => {
            let e = v.get("error_buffer")?;
            RateLimit::SampleToInsertRatio {
                samples_per_insert: v.get("samples_per_insert")?.as_f64()?,
                min_size: size,
                error_buffer: match e.as_array() {
                    Some(pair) if pair.len() == 2 => ErrorBuffer::Range(
                        bound(&pair[0], f64::NEG_INFINITY)?,
                        bound(&pair[1], f64::INFINITY)?,
                    ),
                    Some(_) => return None,
                    None => ErrorBuffer::Symmetric(bound(e, f64::INFINITY)?),
                },
            }
        }
        _ => return None,
    };
    let batches = Batches {
        insert: u("max_insert")?,
        sample: u("max_sample")?,
    };
    Some((limit, batches, (u("inserts")?, u("samples")?)))
}
