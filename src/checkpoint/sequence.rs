//! Sequence checkpoints: a [`SequenceBuffer`](crate::sequence::SequenceBuffer)'s lanes,
//! windows and steps as files, in the same crash-safe, numpy-readable way as a buffer's.
//!
//! ```text
//! manifest.json       format "kary-replay-sequence-checkpoint", version, crate version,
//!                     the sequence configuration (lanes, steps_per_lane, window, period,
//!                     partial, nstep, stack, padding, next_of, the tree's options, key
//!                     tag and rate limit), schema, state (with the rate limiter's counts),
//!                     each lane's cursor, each file's length and CRC-32, the caller's
//!                     user map
//! priorities.npy      <f8[leaves]          the stored (alpha-domain) leaves
//! windows.npy         <u4[leaves, 4]       each leaf's window: length, steps to its
//!                                          episode's end within its reach, steps of its
//!                                          episode before it (stacks), terminal; all 0
//!                                          when the leaf holds no window
//! col.<name>.npy      dtype[lanes, steps_per_lane, *dims]   each column's rows: lane l's
//!                                          step s is row [l, s mod steps_per_lane]
//! COMMIT              written last: the manifest's CRC-32
//! ```
//!
//! A lane's cursor is `next` (the next step it writes), `episode` (the first step of the
//! episode under way, or null), `finished_to` and `retired_to` (the first window start not
//! yet installed or published empty, and not yet retired) and `closed`. Leaf
//! `lane x starts_per_lane + i` is the window starting at step `i x period` of its lane's
//! ring, in the newest lap that `finished_to` reaches; keys stay valid across a save and a
//! load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::manifest::{committed_manifest_of, ColumnFields, ManifestFile, ManifestRateCounts};
use super::read::{check_file, read_file_into, read_listed_column};
use super::write::{as_bytes, write_columns, write_dir, write_file, write_manifest};
use super::{
    err, npy, LoadOptions, SaveOptions, UserData, MANIFEST, PRIORITIES, SEQUENCE_FORMAT,
    SEQUENCE_VERSION,
};
use crate::error::{CheckpointErrorKind as Kind, Result};
use crate::sequence::config_json::{sequence_config_of, SeqConfig};
use crate::sequence::SequenceConfig;
use crate::tree::MAX_PRIORITY;

const WINDOWS: &str = "windows.npy";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeqManifest {
    format: String,
    version: u32,
    crate_version: String,
    config: SeqConfig,
    schema: Vec<ColumnFields>,
    state: SeqState,
    lanes: Vec<LaneState>,
    files: BTreeMap<String, ManifestFile>,
    user: UserData,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeqState {
    /// Windows that could be sampled (installed, not retired).
    windows: u64,
    running_max: f64,
    /// One more than the largest insertion number of a window ever installed.
    handed_out: u64,
    steps_written: u64,
    /// The rate limiter's counts (windows) at the save; absent without a rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate: Option<ManifestRateCounts>,
}

/// One lane's cursor as a checkpoint keeps it (module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaneState {
    pub(crate) next: u64,
    pub(crate) episode: Option<u64>,
    pub(crate) finished_to: u64,
    pub(crate) retired_to: u64,
    pub(crate) closed: bool,
}

/// A sequence buffer's state at one instant, as a save writes it.
pub(crate) struct SequenceSnapshot<'a> {
    pub(crate) config: &'a SequenceConfig,
    pub(crate) priorities: Vec<f64>,
    /// Each leaf's window description (module doc), `[0; 4]` for none.
    pub(crate) windows: Vec<[u32; 4]>,
    /// Each column's rows, `lanes x steps_per_lane` of them.
    pub(crate) columns: Vec<Vec<u8>>,
    pub(crate) lanes: Vec<LaneState>,
    pub(crate) counts: SequenceCounts,
}

/// A sequence buffer's counts, as a save writes them and a load reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SequenceCounts {
    /// Windows that could be sampled.
    pub(crate) live: u64,
    pub(crate) running_max: f64,
    /// One more than the largest insertion number of a window ever installed.
    pub(crate) handed_out: u64,
    pub(crate) steps_written: u64,
    /// The rate limiter's counts (inserts, samples), when there is one.
    pub(crate) rate_counts: Option<(u64, u64)>,
}

/// What a load reads besides the columns, its file-level checks done (the sequence
/// module checks it against the protocol's rules).
pub(crate) struct SequenceState {
    pub(crate) priorities: Vec<f64>,
    pub(crate) windows: Vec<[u32; 4]>,
    pub(crate) lanes: Vec<LaneState>,
    pub(crate) counts: SequenceCounts,
    pub(crate) user: UserData,
}

/// Write `snap` as a sequence checkpoint at `dir`, crash-safely.
pub(crate) fn write_sequence(
    snap: &SequenceSnapshot<'_>,
    dir: &Path,
    options: &SaveOptions,
) -> Result<()> {
    write_dir(dir, options, |tmp| {
        let config = snap.config;
        let leaves = config.capacity();
        let mut files = BTreeMap::new();
        files.insert(
            PRIORITIES.to_string(),
            write_file(
                &tmp.join(PRIORITIES),
                &npy::header("<f8", &[leaves]),
                as_bytes(&snap.priorities),
            )?,
        );
        let words: Vec<u32> = snap.windows.iter().flatten().copied().collect();
        files.insert(
            WINDOWS.to_string(),
            write_file(
                &tmp.join(WINDOWS),
                &npy::header("<u4", &[leaves, 4]),
                as_bytes(&words),
            )?,
        );
        let schema = write_columns(
            tmp,
            config.schema(),
            &[config.lanes(), config.steps_per_lane()],
            &snap.columns,
            &mut files,
        )?;
        let manifest = SeqManifest {
            format: SEQUENCE_FORMAT.into(),
            version: SEQUENCE_VERSION,
            crate_version: env!("CARGO_PKG_VERSION").into(),
            config: SeqConfig::of(config),
            schema,
            state: SeqState {
                windows: snap.counts.live,
                running_max: snap.counts.running_max,
                handed_out: snap.counts.handed_out,
                steps_written: snap.counts.steps_written,
                rate: snap
                    .counts
                    .rate_counts
                    .map(|(inserts, samples)| ManifestRateCounts { inserts, samples }),
            },
            lanes: snap.lanes.clone(),
            files,
            user: options.user.clone(),
        };
        write_manifest(tmp, SEQUENCE_FORMAT, SEQUENCE_VERSION, &manifest)
    })
}

/// The user map of the committed sequence checkpoint `dir`.
pub(crate) fn user_data(dir: &Path) -> Result<UserData> {
    let bytes = committed_manifest_of(dir, SEQUENCE_FORMAT, SEQUENCE_VERSION)?;
    let manifest: SeqManifest = serde_json::from_slice(&bytes)
        .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
    Ok(manifest.user)
}

/// A sequence checkpoint whose manifest, configuration and file headers have been checked.
pub(crate) struct SequencePlan {
    dir: PathBuf,
    manifest: SeqManifest,
    pub(crate) config: SequenceConfig,
}

impl SequencePlan {
    /// Read and check the manifest and every data file's length and header.
    pub(crate) fn open(dir: &Path, options: &LoadOptions) -> Result<SequencePlan> {
        let bytes = committed_manifest_of(dir, SEQUENCE_FORMAT, SEQUENCE_VERSION)?;
        let manifest: SeqManifest = serde_json::from_slice(&bytes)
            .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
        if manifest.format != SEQUENCE_FORMAT || manifest.version != SEQUENCE_VERSION {
            return Err(err(
                Kind::Format,
                dir,
                format!(
                    "format {:?} version {}, this crate reads {SEQUENCE_FORMAT:?} version \
                     {SEQUENCE_VERSION}",
                    manifest.format, manifest.version
                ),
            ));
        }
        let bad = |what: String| err(Kind::Invalid, dir, what);
        let config = sequence_config_of(&manifest.config, &manifest.schema, dir)?;
        options.check(dir, config.schema(), config.capacity(), "windows")?;
        if manifest.lanes.len() != config.lanes() {
            return Err(bad(format!(
                "{} lane cursors for {} lanes",
                manifest.lanes.len(),
                config.lanes()
            )));
        }
        let leaves = config.capacity();
        let rows = config.lanes() * config.steps_per_lane();
        let mut expected: Vec<(String, Vec<u8>, u64)> = vec![
            (
                PRIORITIES.into(),
                npy::header("<f8", &[leaves]),
                leaves as u64 * 8,
            ),
            (
                WINDOWS.into(),
                npy::header("<u4", &[leaves, 4]),
                leaves as u64 * 16,
            ),
        ];
        for (c, (spec, col)) in config
            .schema()
            .columns()
            .iter()
            .zip(&manifest.schema)
            .enumerate()
        {
            if col.file != super::manifest::column_file(c, &spec.name) {
                return Err(bad(format!("column file {:?}", col.file)));
            }
            let data = super::data_bytes(rows, spec.dtype.size(), spec.shape)
                .ok_or_else(|| bad("column size overflows".into()))?;
            let shape: Vec<usize> = [config.lanes(), config.steps_per_lane()]
                .iter()
                .chain(&spec.dims)
                .copied()
                .collect();
            expected.push((
                col.file.clone(),
                npy::header(npy::descr(spec.dtype), &shape),
                data,
            ));
        }
        if manifest.files.len() != expected.len() {
            return Err(bad(format!(
                "{} files listed, the schema needs {}",
                manifest.files.len(),
                expected.len()
            )));
        }
        for (name, header, data) in &expected {
            check_file(dir, &manifest.files, name, header, *data)?;
        }
        Ok(SequencePlan {
            dir: dir.to_path_buf(),
            manifest,
            config,
        })
    }

    /// Read everything but the columns, each file's CRC and each value's range checked.
    pub(crate) fn read_state(&self) -> Result<SequenceState> {
        let leaves = self.config.capacity();
        let bad = |what: String| err(Kind::Invalid, &self.dir, what);
        let mut bytes = vec![0u8; leaves * 8];
        read_file_into(
            &self.dir.join(PRIORITIES),
            self.manifest.files[PRIORITIES],
            &mut bytes,
        )?;
        let priorities: Vec<f64> = bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        if let Some((i, p)) =
            (priorities.iter().enumerate()).find(|(_, p)| !(0.0..=MAX_PRIORITY).contains(*p))
        {
            return Err(bad(format!("priority {p} in leaf {i}")));
        }
        let mut bytes = vec![0u8; leaves * 16];
        read_file_into(
            &self.dir.join(WINDOWS),
            self.manifest.files[WINDOWS],
            &mut bytes,
        )?;
        let windows = bytes
            .chunks_exact(16)
            .map(|w| {
                let word = |i: usize| u32::from_le_bytes(w[4 * i..4 * i + 4].try_into().unwrap());
                [word(0), word(1), word(2), word(3)]
            })
            .collect();
        let s = &self.manifest.state;
        if !(0.0..=MAX_PRIORITY).contains(&s.running_max) {
            return Err(bad(format!("running maximum {}", s.running_max)));
        }
        Ok(SequenceState {
            priorities,
            windows,
            lanes: self.manifest.lanes.clone(),
            counts: SequenceCounts {
                live: s.windows,
                running_max: s.running_max,
                handed_out: s.handed_out,
                steps_written: s.steps_written,
                rate_counts: s.rate.map(|r| (r.inserts, r.samples)),
            },
            user: self.manifest.user.clone(),
        })
    }

    /// Read column `c`'s rows into `out` (exactly `lanes x steps_per_lane x row bytes`),
    /// checked (a bool column's bytes are 0 or 1 before they reach `out`).
    pub(crate) fn read_column(&self, c: usize, out: &mut [u8]) -> Result<()> {
        let m = &self.manifest;
        read_listed_column(&self.dir, self.config.schema(), &m.schema, &m.files, c, out)
    }

    /// The checkpoint's directory (for errors).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Open, read and check the sequence checkpoint at `dir` whole (every file's CRC, every
/// field), as a load does, without building a buffer (one column's bytes in memory at a
/// time); returns its configuration.
pub fn verify_sequence<P: AsRef<Path>>(dir: P) -> Result<SequenceConfig> {
    let dir = dir.as_ref();
    let plan = SequencePlan::open(dir, &LoadOptions::default())?;
    plan.read_state()?;
    let rows = plan.config.lanes() * plan.config.steps_per_lane();
    for (c, spec) in plan.config.schema().columns().iter().enumerate() {
        let n = super::data_bytes(rows, spec.dtype.size(), spec.shape)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| err(Kind::Invalid, dir, "column size overflows"))?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(n)
            .map_err(|_| crate::Error::Allocation { bytes: n })?;
        bytes.resize(n, 0);
        plan.read_column(c, &mut bytes)?;
    }
    Ok(plan.config)
}
