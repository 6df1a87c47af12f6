//! The manifest: its fields as JSON (the configuration's in `buffer/config_json.rs`), the
//! column files' names, and its reading and checking against `COMMIT` and the buffer's
//! rules.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::*;
pub(crate) use crate::buffer::config_json::{config_of, dtype_name, ColumnFields, ConfigFields};
use crate::buffer::Config;
use crate::error::{CheckpointErrorKind as Kind, Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Manifest {
    pub(super) format: String,
    pub(super) version: u32,
    pub(super) crate_version: String,
    pub(super) config: ConfigFields,
    pub(super) schema: Vec<ColumnFields>,
    pub(super) state: ManifestState,
    pub(super) files: BTreeMap<String, ManifestFile>,
    pub(super) user: UserData,
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
    /// The policy-version floor (`retire_before`); absent when none was raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) version_floor: Option<i64>,
    /// The running maximum as a raw priority (`running_max` is its power under the
    /// configuration's alpha); absent where the raw priorities are not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) running_max_raw: Option<f64>,
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
