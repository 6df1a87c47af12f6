//! Numbered checkpoints in a parent directory: names, the latest committed one, clean-up
//! of interrupted saves, and keeping the newest few.

use std::fs::{self};
use std::path::{Path, PathBuf};

use super::*;
use crate::error::Result;

/// `parent/ckpt-<step>`, the step zero-padded to 12 digits so that names sort by step.
pub fn numbered<P: AsRef<Path>>(parent: P, step: u64) -> PathBuf {
    parent.as_ref().join(format!("{NUMBERED}{step:012}"))
}

/// The numbered checkpoints in `parent` (committed or not), oldest step first.
pub(super) fn numbered_dirs(parent: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io(parent, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io(parent, e))?;
        let name = entry.file_name();
        let Some(step) = name
            .to_str()
            .and_then(|n| n.strip_prefix(NUMBERED))
            .and_then(|d| d.parse::<u64>().ok())
        else {
            continue;
        };
        out.push((step, entry.path()));
    }
    out.sort();
    Ok(out)
}

/// Whether `dir` is a committed checkpoint of any format (a buffer's, a sequence buffer's or
/// a sharded one): its `COMMIT` matches its manifest.
fn committed(dir: &Path) -> bool {
    committed_manifest(dir).is_ok()
        || manifest::committed_manifest_of(dir, SEQUENCE_FORMAT, SEQUENCE_VERSION).is_ok()
        || read_sharded_manifest(dir).is_ok()
}

/// The newest numbered checkpoint in `parent` (of any format) whose `COMMIT` matches its manifest
/// (uncommitted and damaged ones are skipped), or `None`.
pub fn latest<P: AsRef<Path>>(parent: P) -> Result<Option<PathBuf>> {
    for (_, dir) in numbered_dirs(parent.as_ref())?.into_iter().rev() {
        if committed(&dir) {
            return Ok(Some(dir));
        }
    }
    Ok(None)
}

/// Remove what interrupted saves left in `parent`: temporary directories, and numbered
/// directories without a valid `COMMIT`. Returns how many were removed.
pub fn clean<P: AsRef<Path>>(parent: P) -> Result<usize> {
    let parent = parent.as_ref();
    let mut removed = 0;
    for (_, dir) in numbered_dirs(parent)? {
        if !committed(&dir) {
            fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
            removed += 1;
        }
    }
    let entries = match fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(io(parent, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io(parent, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp-") {
            fs::remove_dir_all(entry.path()).map_err(|e| io(&entry.path(), e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Keep the newest `keep` committed numbered checkpoints in `parent`; remove older ones.
pub(super) fn rotate(parent: &Path, keep: usize) -> Result<()> {
    let committed: Vec<PathBuf> = numbered_dirs(parent)?
        .into_iter()
        .filter(|(_, d)| committed(d))
        .map(|(_, d)| d)
        .collect();
    for dir in committed.iter().rev().skip(keep) {
        fs::remove_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    Ok(())
}
