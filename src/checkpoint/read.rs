//! Reading a checkpoint: the plan of a load (every length checked before any allocation,
//! every CRC), `verify` and `user_data`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use super::*;
use crate::dtype::DType;
use crate::error::{CheckpointErrorKind as Kind, Error, Result};
use crate::tree::MAX_PRIORITY;

impl Plan {
    /// Read and check the manifest and every data file's length and header: nothing is
    /// allocated for the data yet, and nothing the files claim sizes an allocation.
    pub(crate) fn open(dir: &Path, options: &LoadOptions) -> Result<Plan> {
        let bytes = committed_manifest(dir)?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
        let config = parse_config(&manifest, dir)?;
        options.check(dir, config.schema(), config.capacity(), "capacity")?;
        let plan = Plan {
            dir: dir.to_path_buf(),
            manifest,
            config,
        };
        let capacity = plan.config.capacity();
        let mut expected: Vec<(String, Vec<u8>, u64)> = vec![
            (
                PRIORITIES.into(),
                npy::header("<f8", &[capacity]),
                capacity as u64 * 8,
            ),
            (
                GENERATIONS.into(),
                npy::header("<u8", &[capacity]),
                capacity as u64 * 8,
            ),
        ];
        // The draws delivered: with `max_times_sampled`, from the version that keeps them
        // (an older checkpoint's counts start again from 0).
        if plan.manifest.files.contains_key(DRAWS) {
            if plan.config.max_times_sampled().is_none() {
                return Err(err(
                    Kind::Invalid,
                    dir,
                    "draw counts without max_times_sampled",
                ));
            }
            expected.push((
                DRAWS.into(),
                npy::header("<u2", &[capacity]),
                capacity as u64 * 2,
            ));
        }
        // The raw priorities: from the version that keeps them, with the running maximum's.
        let raw_listed = plan.manifest.files.contains_key(RAW_PRIORITIES);
        if raw_listed != plan.manifest.state.running_max_raw.is_some() {
            return Err(err(
                Kind::Invalid,
                dir,
                "raw priorities and the raw running maximum come together",
            ));
        }
        if raw_listed {
            expected.push((
                RAW_PRIORITIES.into(),
                npy::header("<f8", &[capacity]),
                capacity as u64 * 8,
            ));
        }
        for (c, (spec, col)) in plan
            .config
            .schema()
            .columns()
            .iter()
            .zip(&plan.manifest.schema)
            .enumerate()
        {
            if col.file != column_file(c, &spec.name) {
                return Err(err(
                    Kind::Invalid,
                    dir,
                    format!("column file {:?}", col.file),
                ));
            }
            let data = data_bytes(capacity, spec.dtype.size(), spec.shape)
                .ok_or_else(|| err(Kind::Invalid, dir, "column size overflows"))?;
            expected.push((
                col.file.clone(),
                npy::header(npy::descr(spec.dtype), &npy_shape(capacity, spec)),
                data,
            ));
        }
        if plan.manifest.files.len() != expected.len() {
            return Err(err(
                Kind::Invalid,
                dir,
                format!(
                    "{} files listed, the schema needs {}",
                    plan.manifest.files.len(),
                    expected.len()
                ),
            ));
        }
        for (name, header, data) in &expected {
            check_file(dir, &plan.manifest.files, name, header, *data)?;
        }
        Ok(plan)
    }

    /// Read file `name` (already checked: header, length) into `out`, which holds exactly its
    /// data, and check its CRC.
    fn read_into(&self, name: &str, out: &mut [u8]) -> Result<()> {
        read_file_into(&self.dir.join(name), self.manifest.files[name], out)
    }

    /// Read column `c`'s bytes into `out` (exactly `capacity x row bytes`), checked. A bool
    /// column's bytes are checked to be 0 or 1 before they reach `out`.
    pub(crate) fn read_column(&self, c: usize, out: &mut [u8]) -> Result<()> {
        let m = &self.manifest;
        read_listed_column(&self.dir, self.config.schema(), &m.schema, &m.files, c, out)
    }

    /// Read and check everything but the columns.
    pub(crate) fn read_state(&self) -> Result<State> {
        let capacity = self.config.capacity();
        let bad = |what: String| err(Kind::Invalid, &self.dir, what);
        let mut priorities = vec![0f64; capacity];
        let mut bytes = vec![0u8; capacity * 8];
        self.read_into(PRIORITIES, &mut bytes)?;
        for (p, b) in priorities.iter_mut().zip(bytes.chunks_exact(8)) {
            *p = f64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
        let mut generations = vec![0u64; capacity];
        self.read_into(GENERATIONS, &mut bytes)?;
        for (g, b) in generations.iter_mut().zip(bytes.chunks_exact(8)) {
            *g = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
        let s = &self.manifest.state;
        let inserted = s.inserted;
        let len = usize::try_from(s.len).map_err(|_| bad(format!("len {}", s.len)))?;
        if len > capacity || s.len > inserted {
            return Err(bad(format!(
                "len {len} with capacity {capacity} and {inserted} inserted"
            )));
        }
        if s.cursor != inserted % capacity as u64 {
            return Err(bad(format!("cursor {} with {inserted} inserted", s.cursor)));
        }
        if !(0.0..=MAX_PRIORITY).contains(&s.running_max) {
            return Err(bad(format!("running maximum {}", s.running_max)));
        }
        let mut held = 0usize;
        for (slot, (&g, &p)) in generations.iter().zip(&priorities).enumerate() {
            if !(0.0..=MAX_PRIORITY).contains(&p) {
                return Err(bad(format!("priority {p} in slot {slot}")));
            }
            if g == NO_ITEM {
                if p != 0.0 {
                    return Err(bad(format!("priority {p} in empty slot {slot}")));
                }
                continue;
            }
            // The item a slot holds is the newest generation that maps to it.
            let newest = (inserted > slot as u64).then(|| {
                slot as u64 + (inserted - 1 - slot as u64) / capacity as u64 * capacity as u64
            });
            if newest != Some(g) {
                return Err(bad(format!(
                    "generation {g} in slot {slot}, which holds generation {newest:?} after {inserted} inserts"
                )));
            }
            held += 1;
        }
        if held != len {
            return Err(bad(format!("{held} slots hold items, len says {len}")));
        }
        let draws = match self.manifest.files.contains_key(DRAWS) {
            false => None,
            true => {
                let k = self.config.max_times_sampled().unwrap_or(0);
                let mut bytes = vec![0u8; capacity * 2];
                self.read_into(DRAWS, &mut bytes)?;
                let draws: Vec<u16> = bytes
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect();
                for (slot, (&n, &g)) in draws.iter().zip(&generations).enumerate() {
                    // A stored item had fewer than k draws delivered (its k-th retires it);
                    // an empty slot counts none.
                    if u32::from(n) >= k.max(1) || (g == NO_ITEM && n != 0) {
                        return Err(bad(format!("{n} draws counted in slot {slot}")));
                    }
                }
                Some(draws)
            }
        };
        let raw = match s.running_max_raw {
            None => None,
            Some(running_max) => {
                let alpha = self.config.alpha();
                if !(running_max.is_finite() && running_max >= 0.0) {
                    return Err(bad(format!("raw running maximum {running_max}")));
                }
                let mut raw = vec![0f64; capacity];
                self.read_into(RAW_PRIORITIES, &mut bytes)?;
                for (r, b) in raw.iter_mut().zip(bytes.chunks_exact(8)) {
                    *r = f64::from_le_bytes(b.try_into().expect("8 bytes"));
                }
                for (slot, ((&r, &p), &g)) in
                    raw.iter().zip(&priorities).zip(&generations).enumerate()
                {
                    // A stored item's priority is its raw one's power; an empty slot's raw
                    // priority is 0, as its priority.
                    let expected = match g {
                        NO_ITEM if r != 0.0 => f64::NAN,
                        NO_ITEM => 0.0,
                        _ => crate::buffer::stored_at(alpha, r),
                    };
                    if !(r.is_finite() && r >= 0.0) || expected.to_bits() != p.to_bits() {
                        return Err(bad(format!(
                            "raw priority {r} in slot {slot}, whose stored priority is {p}"
                        )));
                    }
                }
                Some(RawState {
                    priorities: std::borrow::Cow::Owned(raw),
                    running_max,
                })
            }
        };
        Ok(State {
            inserted,
            len,
            running_max: s.running_max,
            priorities,
            generations,
            user: self.manifest.user.clone(),
            rate_counts: s.rate.map(|r| (r.inserts, r.samples)),
            version_floor: s.version_floor,
            draws,
            raw,
        })
    }

    /// The number of writes a slot has had after `inserted` inserts: its state word's epoch.
    pub(crate) fn epoch(inserted: u64, capacity: usize, slot: usize) -> u64 {
        match inserted > slot as u64 {
            true => (inserted - 1 - slot as u64) / capacity as u64 + 1,
            false => 0,
        }
    }
}

/// Check that data file `name` is listed in `files` and on disk with `header` and `data`
/// bytes after it (nothing read past the header).
pub(crate) fn check_file(
    dir: &Path,
    files: &BTreeMap<String, ManifestFile>,
    name: &str,
    header: &[u8],
    data: u64,
) -> Result<()> {
    let listed = files
        .get(name)
        .ok_or_else(|| err(Kind::Invalid, dir, format!("{name} is not listed")))?;
    let path = dir.join(name);
    let want = header.len() as u64 + data;
    let on_disk = fs::metadata(&path).map_err(|e| io(&path, e))?.len();
    if listed.bytes != want || on_disk != want {
        return Err(err(
            Kind::Corrupt,
            &path,
            format!(
                "{on_disk} bytes on disk, {} listed, {want} expected",
                listed.bytes
            ),
        ));
    }
    let mut got = vec![0u8; header.len()];
    File::open(&path)
        .and_then(|mut f| f.read_exact(&mut got))
        .map_err(|e| io(&path, e))?;
    if got != header {
        return Err(err(
            Kind::Format,
            &path,
            "not the NPY header this file needs",
        ));
    }
    Ok(())
}

/// Read the file at `path` (already checked: header, length) into `out`, which holds
/// exactly its data, and check its CRC against `listed`.
pub(crate) fn read_file_into(path: &Path, listed: ManifestFile, out: &mut [u8]) -> Result<()> {
    let mut file = File::open(path).map_err(|e| io(path, e))?;
    let header_len = (listed.bytes - out.len() as u64) as usize;
    let mut header = vec![0u8; header_len];
    file.read_exact(&mut header).map_err(|e| io(path, e))?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header);
    for chunk in out.chunks_mut(CHUNK) {
        file.read_exact(chunk).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => err(Kind::Corrupt, path, "truncated"),
            _ => io(path, e),
        })?;
        crc.update(chunk);
    }
    let mut extra = [0u8; 1];
    if file.read(&mut extra).map_err(|e| io(path, e))? != 0 {
        return Err(err(Kind::Corrupt, path, "longer than listed"));
    }
    let actual = crc.finalize();
    if actual != listed.crc32 {
        return Err(err(
            Kind::Corrupt,
            path,
            format!(
                "CRC-32 {actual:08x}, the manifest says {:08x}",
                listed.crc32
            ),
        ));
    }
    Ok(())
}

/// Column `c` of `schema`, listed as `fields[c]` in a manifest whose `files` give its
/// length and CRC, read from `dir` into `out` ([`read_column_into`]).
pub(crate) fn read_listed_column(
    dir: &Path,
    schema: &crate::storage::Schema,
    fields: &[super::manifest::ColumnFields],
    files: &BTreeMap<String, ManifestFile>,
    c: usize,
    out: &mut [u8],
) -> Result<()> {
    let name = &fields[c].file;
    read_column_into(&dir.join(name), files[name], schema.columns()[c].dtype, out)
}

/// [`read_file_into`] for a column of `dtype`: a bool column's bytes are checked to be 0 or
/// 1 before they reach `out`.
pub(crate) fn read_column_into(
    path: &Path,
    listed: ManifestFile,
    dtype: DType,
    out: &mut [u8],
) -> Result<()> {
    if dtype != DType::Bool {
        return read_file_into(path, listed, out);
    }
    let mut scratch = vec![0u8; out.len()];
    read_file_into(path, listed, &mut scratch)?;
    if let Some(i) = scratch.iter().position(|&b| b > 1) {
        return Err(err(
            Kind::Invalid,
            path,
            format!("byte {i} is {} in a bool column", scratch[i]),
        ));
    }
    out.copy_from_slice(&scratch);
    Ok(())
}

/// Open, read and check the checkpoint at `dir` whole (every file's CRC, every field),
/// as a load does, without building a buffer.
pub fn verify<P: AsRef<Path>>(dir: P) -> Result<Report> {
    let dir = dir.as_ref();
    let plan = Plan::open(dir, &LoadOptions::default())?;
    let state = plan.read_state()?;
    for (c, spec) in plan.config.schema().columns().iter().enumerate() {
        let n = data_bytes(plan.config.capacity(), spec.dtype.size(), spec.shape)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| err(Kind::Invalid, dir, "column size overflows"))?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(n)
            .map_err(|_| Error::Allocation { bytes: n })?;
        bytes.resize(n, 0);
        plan.read_column(c, &mut bytes)?;
    }
    let positive: Vec<f64> = state
        .priorities
        .iter()
        .copied()
        .filter(|&p| p > 0.0)
        .collect();
    let mut tree = crate::tree::SumTree::new(plan.config.capacity(), plan.config.fanout())?;
    tree.set_many_unchecked(state.priorities.iter().copied().enumerate());
    Ok(Report {
        crate_version: plan.manifest.crate_version.clone(),
        inserted: state.inserted,
        len: state.len,
        cursor: (state.inserted % plan.config.capacity() as u64) as usize,
        running_max: state.running_max,
        positive: positive.len(),
        min_positive: positive.iter().copied().reduce(f64::min).unwrap_or(0.0),
        max: state.priorities.iter().copied().fold(0.0, f64::max),
        total: tree.total(),
        files: plan
            .manifest
            .files
            .iter()
            .map(|(name, f)| FileReport {
                name: name.clone(),
                bytes: f.bytes,
                crc32: f.crc32,
            })
            .collect(),
        user: state.user,
        config: plan.config,
    })
}
