//! Checkpoints: a buffer's whole state as files that outlive the process, restored bit for
//! bit into a buffer of any variant, and readable with numpy alone.
//!
//! A checkpoint is a directory ("kary-replay checkpoint v1", `docs/checkpoint.md`):
//!
//! ```text
//! manifest.json       format, version, crate version, config, schema, state, each file's
//!                     length and CRC-32, the caller's user map
//! priorities.npy      <f8[capacity]   the stored (alpha-domain) leaves; 0 for empty slots
//! generations.npy     <u8[capacity]   each slot's item's generation; NO_ITEM if it holds none
//! col.<name>.npy      dtype[capacity, *dims]   each column, in slot order
//! COMMIT              written last: the manifest's CRC-32
//! ```
//!
//! A save writes everything into a temporary directory beside the target, fsyncs each file,
//! writes the manifest and then `COMMIT`, fsyncs the directory, renames it into place and
//! fsyncs the parent: a crash leaves either the whole checkpoint or none. A load checks
//! every length before it allocates, every CRC, and every field against the buffer's rules,
//! then rebuilds the tree's sums from the leaves (exact). Keys stay valid across a save and
//! a load: the generations come back with the items.
//!
//! ```
//! use kary_replay::checkpoint::{self, SaveOptions, UserValue};
//! use kary_replay::{Checkpoint, ConcurrentBuffer, Config, DType, Load, LockFreeBuffer, Schema,
//!     SplitLockBuffer};
//!
//! let schema = Schema::new().column("obs", DType::F32, 4).column("done", DType::Bool, 1);
//! let buffer = SplitLockBuffer::new(Config::builder(1024, schema).build()?)?;
//! let key = buffer.insert(&[(&[0.5f32; 4]).into(), (&[false]).into()], Some(2.0))?;
//!
//! let parent = std::env::temp_dir().join(format!("kr-doc-{}", std::process::id()));
//! let dir = checkpoint::numbered(&parent, 1000);
//! let options = SaveOptions::new().user("env_steps", UserValue::U64(1000)).keep_last(3);
//! buffer.save_with(&dir, &options)?;
//!
//! assert_eq!(checkpoint::latest(&parent)?, Some(dir.clone()));
//! let report = checkpoint::verify(&dir)?;
//! assert_eq!(report.len, 1);
//! // Another variant, the same items, priorities and keys.
//! let loaded = LockFreeBuffer::load_with(&dir, &Default::default())?;
//! assert_eq!(loaded.buffer.priority(key.index)?, buffer.priority(key.index)?);
//! assert_eq!(loaded.buffer.key(key.index)?, Some(key));
//! assert_eq!(loaded.user.get("env_steps"), Some(&UserValue::U64(1000)));
//! # std::fs::remove_dir_all(&parent).unwrap();
//! # Ok::<(), kary_replay::Error>(())
//! ```

mod manifest;
mod npy;
mod read;
mod rotation;
mod sequence;
mod sharded;
mod write;

use manifest::*;
pub use read::verify;
use rotation::rotate;
pub use rotation::{clean, latest, numbered};
pub use sequence::verify_sequence;
pub(crate) use sequence::{
    write_sequence, LaneState, SequenceCounts, SequencePlan, SequenceSnapshot, SequenceState,
};
pub use sharded::{
    manifest_of_saved, read_sharded_manifest, shard_dir, write_sharded_manifest, ShardEntry,
    ShardedManifest, SHARDED_FORMAT,
};
pub(crate) use write::write;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::buffer::Config;
use crate::error::{CheckpointErrorKind as Kind, Error, Result};
use crate::storage::Schema;

/// The manifest's `format`.
pub const FORMAT: &str = "kary-replay-checkpoint";
/// The manifest's `version`, the only one this crate reads.
pub const VERSION: u32 = 1;
/// A sequence checkpoint's manifest `format`.
pub const SEQUENCE_FORMAT: &str = "kary-replay-sequence-checkpoint";
/// A sequence checkpoint's manifest `version`, the only one this crate reads.
pub const SEQUENCE_VERSION: u32 = 1;
/// `generations.npy`'s value for a slot that holds no item (never written, cleared, or a
/// write that did not complete).
pub const NO_ITEM: u64 = u64::MAX;

const MANIFEST: &str = "manifest.json";
const COMMIT: &str = "COMMIT";
const PRIORITIES: &str = "priorities.npy";
const GENERATIONS: &str = "generations.npy";
/// With `max_times_sampled`: each slot's item's draws delivered (`<u2`, 0 for an empty slot).
const DRAWS: &str = "draws.npy";
/// Each slot's raw priority, before the exponent (`<f8`, 0 for an empty slot): what
/// `set_alpha` raises again.
const RAW_PRIORITIES: &str = "raw_priorities.npy";
/// Prefix of numbered checkpoints in a parent directory ([`numbered`], [`latest`]).
const NUMBERED: &str = "ckpt-";
/// Largest manifest a load reads (the user map is small state, not data).
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Largest user map a save writes, as JSON.
const MAX_USER_BYTES: usize = 64 << 10;
/// Bytes per write and CRC update when a file is written or read.
const CHUNK: usize = 8 << 20;

/// One value of the caller's own state kept in a checkpoint (an RNG state, rate-control
/// counters, an optimizer step). Floats must be finite (JSON has no NaN).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum UserValue {
    /// An unsigned integer.
    U64(u64),
    /// A signed integer.
    I64(i64),
    /// A finite float, kept bit for bit.
    F64(f64),
    /// A flag.
    Bool(bool),
    /// Text.
    Str(String),
    /// Raw bytes (an RNG's state words, say).
    Bytes(Vec<u8>),
}

/// The caller's map of small values, saved in the manifest and returned by a load.
pub type UserData = BTreeMap<String, UserValue>;

/// How to save: the user map, and how many numbered checkpoints to keep beside this one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaveOptions {
    /// The caller's state, stored in the manifest (at most 64 KiB as JSON).
    pub user: UserData,
    /// After the save commits, keep only the newest this many numbered checkpoints
    /// (`ckpt-*`, [`numbered`]) in the target's parent directory; `None` keeps all.
    pub keep_last: Option<usize>,
}

impl SaveOptions {
    /// No user data, nothing rotated.
    pub fn new() -> SaveOptions {
        SaveOptions::default()
    }

    /// Add `key = value` to the user map.
    pub fn user(mut self, key: impl Into<String>, value: UserValue) -> SaveOptions {
        self.user.insert(key.into(), value);
        self
    }

    /// Replace the user map.
    pub fn with_user_data(mut self, user: UserData) -> SaveOptions {
        self.user = user;
        self
    }

    /// Keep only the newest `n` numbered checkpoints beside this one (`n >= 1`).
    pub fn keep_last(mut self, n: usize) -> SaveOptions {
        self.keep_last = Some(n);
        self
    }
}

/// What a load must find: a checkpoint that differs is
/// [`CheckpointErrorKind::Mismatch`](crate::CheckpointErrorKind::Mismatch). `None` accepts whatever the checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadOptions {
    /// The schema the caller's code expects.
    pub schema: Option<Schema>,
    /// The capacity the caller's code expects.
    pub capacity: Option<usize>,
}

impl LoadOptions {
    /// Refuse (`Mismatch`) a checkpoint at `dir` whose schema or capacity (`items` of what
    /// `unit` names) is not what these options expect.
    pub(crate) fn check(
        &self,
        dir: &Path,
        schema: &Schema,
        items: usize,
        unit: &str,
    ) -> Result<()> {
        if let Some(want) = &self.schema {
            if want != schema {
                return Err(err(
                    Kind::Mismatch,
                    dir,
                    format!(
                        "schema {:?}, expected {:?}",
                        schema.columns(),
                        want.columns()
                    ),
                ));
            }
        }
        match self.capacity {
            Some(want) if want != items => Err(err(
                Kind::Mismatch,
                dir,
                format!("{unit} {items}, expected {want}"),
            )),
            _ => Ok(()),
        }
    }
}

/// A loaded buffer and the user map saved with it.
#[derive(Debug)]
pub struct Loaded<B> {
    /// The buffer, in the state it was saved in.
    pub buffer: B,
    /// The user map of [`SaveOptions::user`].
    pub user: UserData,
}

/// One data file of a checkpoint, as its manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// File name inside the checkpoint directory.
    pub name: String,
    /// Length in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
}

/// What [`verify`] found: a checkpoint that loads.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The crate version that wrote it.
    pub crate_version: String,
    /// The buffer's configuration (schema included).
    pub config: Config,
    /// Items inserted before the save (the next item's generation).
    pub inserted: u64,
    /// Items stored.
    pub len: usize,
    /// The FIFO cursor: the slot the next item goes to.
    pub cursor: usize,
    /// The running maximum of stored priorities (the default priority of new items).
    pub running_max: f64,
    /// Stored priorities: the number that are positive, their smallest, largest and sum.
    pub positive: usize,
    /// Smallest positive stored priority (0 if none).
    pub min_positive: f64,
    /// Largest stored priority.
    pub max: f64,
    /// Sum of the stored priorities (the buffer's total once loaded).
    pub total: f64,
    /// Every data file with its length and CRC.
    pub files: Vec<FileReport>,
    /// The user map.
    pub user: UserData,
}

/// Saving: every buffer has it, [`ConcurrentBuffer`](crate::ConcurrentBuffer)s while their
/// threads run (writers and priority updates pause for the copy; samplers go on).
pub trait Checkpoint {
    /// Save into the new directory `dir` (its parent is created if needed; `dir` must not
    /// exist: [`CheckpointErrorKind::Exists`](crate::CheckpointErrorKind)). On error no
    /// directory is left at `dir`.
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()>;

    /// [`Checkpoint::save_with`] with no user data and no rotation.
    fn save<P: AsRef<Path>>(&self, dir: P) -> Result<()>
    where
        Self: Sized,
    {
        self.save_with(dir.as_ref(), &SaveOptions::default())
    }
}

/// The crate's concurrent buffers, whose tree state (priorities, keys, cursor, running
/// maximum) can be taken and restored apart from their columns: what
/// `gpu::HybridBuffer` (feature `tch`) needs of its CPU buffer to save and load, its
/// columns being on the device. Sealed: implemented by the crate's three variants.
pub trait TreeState: sealed::TreeState {}

pub(crate) mod sealed {
    use crate::buffer::Config;
    use crate::error::Result;

    /// See [`super::TreeState`].
    #[allow(private_interfaces)]
    pub trait TreeState {
        /// The state at one instant (a concurrent buffer pauses its writers and updates for
        /// the copy, as a save does); `user` empty.
        fn tree_state(&self) -> Result<super::State>;
        /// A buffer of `config` in `state` (a checked checkpoint's), its columns zero.
        fn from_tree_state(config: Config, state: &super::State) -> Result<Self>
        where
            Self: Sized;
    }
}

impl State {
    /// A snapshot's state, without its columns.
    pub(crate) fn of(s: Snapshot<'_>) -> State {
        State {
            inserted: s.inserted,
            len: s.len,
            running_max: s.running_max,
            priorities: s.priorities,
            generations: s.generations.into_owned(),
            user: UserData::new(),
            rate_counts: s.rate_counts,
            version_floor: s.version_floor,
            draws: s.draws,
            raw: s.raw.map(|r| RawState {
                priorities: Cow::Owned(r.priorities.into_owned()),
                running_max: r.running_max,
            }),
        }
    }

    /// The raw priorities and raw running maximum: the checkpoint's, or, for one saved
    /// before they were kept, each stored priority's root under `alpha`
    /// ([`raw_of_stored`](crate::buffer::raw_of_stored): within rounding; 1 for every
    /// positive priority under alpha 0).
    pub(crate) fn raw_or_derived(&self, alpha: f64) -> RawState<'_> {
        match &self.raw {
            Some(r) => RawState {
                priorities: Cow::Borrowed(&r.priorities),
                running_max: r.running_max,
            },
            None => RawState {
                priorities: Cow::Owned(
                    (self.priorities.iter())
                        .map(|&p| crate::buffer::raw_of_stored(alpha, p))
                        .collect(),
                ),
                running_max: crate::buffer::raw_of_stored(alpha, self.running_max),
            },
        }
    }
}

/// Loading: a buffer of this type from a checkpoint of any variant.
pub trait Load: Sized {
    /// Load the checkpoint at `dir`, checked against `options`, with its user map.
    fn load_with<P: AsRef<Path>>(dir: P, options: &LoadOptions) -> Result<Loaded<Self>>;

    /// Load the checkpoint at `dir`.
    fn load<P: AsRef<Path>>(dir: P) -> Result<Self> {
        Self::load_with(dir, &LoadOptions::default()).map(|l| l.buffer)
    }
}

/// A buffer's state as a save writes it: the columns' bytes borrowed from a quiescent
/// buffer, or copied from a concurrent one while its writers paused.
pub(crate) struct Snapshot<'a> {
    pub(crate) config: &'a Config,
    pub(crate) inserted: u64,
    pub(crate) len: usize,
    pub(crate) running_max: f64,
    pub(crate) priorities: Vec<f64>,
    pub(crate) generations: Cow<'a, [u64]>,
    pub(crate) columns: Vec<Cow<'a, [u8]>>,
    /// The rate limiter's counts (inserts, samples), when the buffer has one.
    pub(crate) rate_counts: Option<(u64, u64)>,
    /// The policy-version floor, when the items carry versions and it was raised.
    pub(crate) version_floor: Option<i64>,
    /// With `max_times_sampled`: each slot's item's draws delivered (0 for an empty slot).
    pub(crate) draws: Option<Vec<u16>>,
    /// The alpha now (the configuration's until a `set_alpha`): the manifest's.
    pub(crate) alpha: f64,
    /// Each slot's raw priority (0 for an empty slot) and the running maximum as a raw
    /// priority, where the buffer keeps them.
    pub(crate) raw: Option<RawState<'a>>,
}

/// A buffer's raw priorities, as a save writes them and a load reads them.
#[derive(Debug, Clone)]
pub(crate) struct RawState<'a> {
    pub(crate) priorities: Cow<'a, [f64]>,
    pub(crate) running_max: f64,
}

/// A checkpoint whose manifest and file headers have been checked, ready to fill a buffer
/// of its configuration ([`Plan::read_state`]).
pub(crate) struct Plan {
    dir: PathBuf,
    manifest: Manifest,
    pub(crate) config: Config,
}

/// What a buffer needs besides its columns, read and checked by [`Plan::read_state`].
pub(crate) struct State {
    pub(crate) inserted: u64,
    pub(crate) len: usize,
    pub(crate) running_max: f64,
    pub(crate) priorities: Vec<f64>,
    pub(crate) generations: Vec<u64>,
    pub(crate) user: UserData,
    /// The rate limiter's counts (inserts, samples) at the save, when it had one.
    pub(crate) rate_counts: Option<(u64, u64)>,
    /// The policy-version floor at the save, when one was raised.
    pub(crate) version_floor: Option<i64>,
    /// Each slot's item's draws delivered, when the checkpoint has them.
    pub(crate) draws: Option<Vec<u16>>,
    /// The raw priorities, when the checkpoint has them (one written before they were kept
    /// has none: a load derives them, [`State::raw_or_derived`]).
    pub(crate) raw: Option<RawState<'static>>,
}

impl State {
    /// The generations from the oldest stored item on, as a count: the ring's newest
    /// generations that may hold an item (0 when none is stored). A restored buffer takes
    /// its empty slots among them as deleted by key (an insert that reaches one fills it,
    /// evicting nothing) and those before them as cleared.
    pub(crate) fn span(&self) -> u64 {
        let oldest = self.generations.iter().filter(|&&g| g != NO_ITEM).min();
        oldest.map_or(0, |&g| self.inserted - g)
    }
}

fn err(kind: Kind, path: &Path, detail: impl Into<String>) -> Error {
    Error::Checkpoint {
        kind,
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

fn io(path: &Path, e: std::io::Error) -> Error {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => Kind::NotFound,
        std::io::ErrorKind::AlreadyExists => Kind::Exists,
        _ => Kind::Io,
    };
    err(kind, path, e.to_string())
}

// ---------------------------------------------------------------------------------------
// Saving

/// Bytes of one column's file: header + capacity x row bytes.
fn data_bytes(capacity: usize, elem: usize, per_row: usize) -> Option<u64> {
    (capacity as u64)
        .checked_mul(elem as u64)?
        .checked_mul(per_row as u64)
}

/// The user map of the checkpoint at `dir`, a buffer's or a sequence buffer's (its
/// manifest checked against `COMMIT`).
pub fn user_data<P: AsRef<Path>>(dir: P) -> Result<UserData> {
    let dir = dir.as_ref();
    let bytes = match manifest::committed_manifest(dir) {
        Ok(bytes) => bytes,
        Err(
            e @ Error::Checkpoint {
                kind: Kind::Format, ..
            },
        ) => return sequence::user_data(dir).map_err(|_| e),
        Err(e) => return Err(e),
    };
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
    Ok(manifest.user)
}
