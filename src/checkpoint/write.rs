//! Writing a checkpoint: each file fsynced, the manifest, then `COMMIT`, then the rename.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::*;
use crate::error::{CheckpointErrorKind as Kind, Result};

/// Write `header` then `data` to `path`, fsync it, and return (bytes, CRC-32).
pub(super) fn write_file(path: &Path, header: &[u8], data: &[u8]) -> Result<ManifestFile> {
    let mut file = File::create_new(path).map_err(|e| io(path, e))?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(header);
    file.write_all(header).map_err(|e| io(path, e))?;
    for chunk in data.chunks(CHUNK) {
        crc.update(chunk);
        file.write_all(chunk).map_err(|e| io(path, e))?;
    }
    file.sync_all().map_err(|e| io(path, e))?;
    Ok(ManifestFile {
        bytes: (header.len() + data.len()) as u64,
        crc32: crc.finalize(),
    })
}

pub(super) fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: `T` is `f64` or `u64` here (plain data with no padding, any byte pattern
    // readable as `u8`); the slice covers exactly the values' bytes.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

pub(super) fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(path, e))
}

pub(super) fn check_user(user: &UserData, dir: &Path) -> Result<()> {
    for (key, value) in user {
        if let UserValue::F64(v) = value {
            if !v.is_finite() {
                return Err(err(
                    Kind::Invalid,
                    dir,
                    format!("user value {key:?} is {v}: only finite floats can be saved"),
                ));
            }
        }
    }
    let bytes = serde_json::to_vec(user).map_err(|e| err(Kind::Invalid, dir, e.to_string()))?;
    if bytes.len() > MAX_USER_BYTES {
        return Err(err(
            Kind::Invalid,
            dir,
            format!(
                "the user map is {} bytes as JSON, more than {MAX_USER_BYTES}: keep data in the buffer",
                bytes.len()
            ),
        ));
    }
    Ok(())
}

/// Write `snap` as a checkpoint at `dir`, crash-safely (module doc).
pub(crate) fn write(snap: &Snapshot<'_>, dir: &Path, options: &SaveOptions) -> Result<()> {
    write_dir(dir, options, |tmp| write_into(snap, tmp, options))
}

/// Make the checkpoint directory `dir` crash-safely: `fill` writes its files (each fsynced,
/// `COMMIT` last, [`write_manifest`]) into a temporary directory beside it, which is then
/// renamed into place, the parent fsynced, and older numbered checkpoints rotated as
/// `options` says. On error nothing is left at `dir`.
pub(crate) fn write_dir(
    dir: &Path,
    options: &SaveOptions,
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    if cfg!(target_endian = "big") {
        return Err(err(
            Kind::Io,
            dir,
            "checkpoints are little-endian; this host is not",
        ));
    }
    check_user(&options.user, dir)?;
    if options.keep_last == Some(0) {
        return Err(err(Kind::Invalid, dir, "keep_last must be at least 1"));
    }
    if dir.exists() {
        return Err(err(
            Kind::Exists,
            dir,
            "the target of a save must not exist",
        ));
    }
    let name = dir
        .file_name()
        .ok_or_else(|| err(Kind::Io, dir, "the target has no directory name"))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if parent.exists() && !parent.is_dir() {
        return Err(err(Kind::Io, &parent, "not a directory"));
    }
    fs::create_dir_all(&parent).map_err(|e| io(&parent, e))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = parent.join(format!(".{name}.tmp-{}-{nanos}", std::process::id()));
    fs::create_dir(&tmp).map_err(|e| io(&tmp, e))?;
    let result = fill(&tmp).and_then(|()| {
        fs::rename(&tmp, dir).map_err(|e| io(dir, e))?;
        sync_dir(&parent)
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
        return result;
    }
    if let Some(n) = options.keep_last {
        rotate(&parent, n)?;
    }
    Ok(())
}

/// Write `manifest` as `manifest.json` into `tmp`, then `COMMIT` (`"<format> v<version>
/// manifest-crc32 <crc>"`), each fsynced, then fsync `tmp`.
pub(crate) fn write_manifest<M: Serialize>(
    tmp: &Path,
    format: &str,
    version: u32,
    manifest: &M,
) -> Result<()> {
    let mut json =
        serde_json::to_vec_pretty(manifest).map_err(|e| err(Kind::Invalid, tmp, e.to_string()))?;
    json.push(b'\n');
    let crc = crc32fast::hash(&json);
    write_file(&tmp.join(MANIFEST), &[], &json)?;
    write_file(
        &tmp.join(COMMIT),
        &[],
        format!("{format} v{version} manifest-crc32 {crc:08x}\n").as_bytes(),
    )?;
    sync_dir(tmp)
}

/// Write each column of `schema` as `col.<name>.npy` of shape `(*leading, *dims)` holding
/// `columns[c]`, listing it in `files`; returns the manifest's schema.
pub(crate) fn write_columns<D: AsRef<[u8]>>(
    tmp: &Path,
    schema: &Schema,
    leading: &[usize],
    columns: &[D],
    files: &mut BTreeMap<String, ManifestFile>,
) -> Result<Vec<ColumnFields>> {
    let mut out = Vec::new();
    for (c, (spec, bytes)) in schema.columns().iter().zip(columns).enumerate() {
        let file = column_file(c, &spec.name);
        let shape: Vec<usize> = leading.iter().chain(&spec.dims).copied().collect();
        let header = npy::header(npy::descr(spec.dtype), &shape);
        files.insert(
            file.clone(),
            write_file(&tmp.join(&file), &header, bytes.as_ref())?,
        );
        out.push(ColumnFields {
            name: spec.name.clone(),
            dtype: dtype_name(spec.dtype).to_string(),
            shape: spec.shape as u64,
            dims: (spec.dims != [spec.shape])
                .then(|| spec.dims.iter().map(|&d| d as u64).collect()),
            file,
        });
    }
    Ok(out)
}

pub(super) fn write_into(snap: &Snapshot<'_>, tmp: &Path, options: &SaveOptions) -> Result<()> {
    let config = snap.config;
    let capacity = config.capacity();
    let mut files = BTreeMap::new();
    files.insert(
        PRIORITIES.to_string(),
        write_file(
            &tmp.join(PRIORITIES),
            &npy::header("<f8", &[capacity]),
            as_bytes(&snap.priorities),
        )?,
    );
    files.insert(
        GENERATIONS.to_string(),
        write_file(
            &tmp.join(GENERATIONS),
            &npy::header("<u8", &[capacity]),
            as_bytes(&snap.generations),
        )?,
    );
    if let Some(draws) = &snap.draws {
        let bytes: Vec<u8> = draws.iter().flat_map(|n| n.to_le_bytes()).collect();
        files.insert(
            DRAWS.to_string(),
            write_file(&tmp.join(DRAWS), &npy::header("<u2", &[capacity]), &bytes)?,
        );
    }
    if let Some(raw) = &snap.raw {
        files.insert(
            RAW_PRIORITIES.to_string(),
            write_file(
                &tmp.join(RAW_PRIORITIES),
                &npy::header("<f8", &[capacity]),
                as_bytes(&raw.priorities),
            )?,
        );
    }
    let schema = write_columns(tmp, config.schema(), &[capacity], &snap.columns, &mut files)?;
    // The alpha now: the stored priorities are its powers (a `set_alpha` may have changed it).
    let mut config_fields = ConfigFields::of(config);
    config_fields.alpha = snap.alpha;
    let manifest = Manifest {
        format: FORMAT.to_string(),
        version: VERSION,
        crate_version: env!("CARGO_PKG_VERSION").to_string(),
        config: config_fields,
        schema,
        state: ManifestState {
            inserted: snap.inserted,
            len: snap.len as u64,
            cursor: snap.inserted % capacity as u64,
            running_max: snap.running_max,
            rate: snap
                .rate_counts
                .map(|(inserts, samples)| ManifestRateCounts { inserts, samples }),
            version_floor: snap.version_floor,
            running_max_raw: snap.raw.as_ref().map(|r| r.running_max),
        },
        files,
        user: options.user.clone(),
    };
    write_manifest(tmp, FORMAT, VERSION, &manifest)
}
