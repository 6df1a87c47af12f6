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
//! col.<name>.npy      dtype[capacity, shape]   each column, in slot order
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

mod npy;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::buffer::{Config, DefaultPriority, WeightNormalization};
use crate::dtype::DType;
use crate::error::{CheckpointErrorKind as Kind, Error, Result};
use crate::storage::Schema;
use crate::tree::{MAX_CAPACITY, MAX_PRIORITY};

/// The manifest's `format`.
pub const FORMAT: &str = "kary-replay-checkpoint";
/// The manifest's `version`, the only one this crate reads.
pub const VERSION: u32 = 1;
/// `generations.npy`'s value for a slot that holds no item (never written, cleared, or a
/// write that did not complete).
pub const NO_ITEM: u64 = u64::MAX;

const MANIFEST: &str = "manifest.json";
const COMMIT: &str = "COMMIT";
const PRIORITIES: &str = "priorities.npy";
const GENERATIONS: &str = "generations.npy";
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
}

// ---------------------------------------------------------------------------------------
// The manifest

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    format: String,
    version: u32,
    crate_version: String,
    config: ManifestConfig,
    schema: Vec<ManifestColumn>,
    state: ManifestState,
    files: BTreeMap<String, ManifestFile>,
    user: UserData,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestConfig {
    capacity: u64,
    fanout: u64,
    alpha: f64,
    weight_normalization: String,
    default_priority: String,
    initial_priority: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestColumn {
    name: String,
    dtype: String,
    shape: u64,
    file: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestState {
    inserted: u64,
    len: u64,
    cursor: u64,
    running_max: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    bytes: u64,
    crc32: u32,
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::Bool => "bool",
    }
}

fn dtype_from(name: &str) -> Option<DType> {
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

/// A column's file: `col.<name>.npy` when the name is a plain file name, else by position.
fn column_file(index: usize, name: &str) -> String {
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

/// Write `header` then `data` to `path`, fsync it, and return (bytes, CRC-32).
fn write_file(path: &Path, header: &[u8], data: &[u8]) -> Result<ManifestFile> {
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

fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: `T` is `f64` or `u64` here (plain data with no padding, any byte pattern
    // readable as `u8`); the slice covers exactly the values' bytes.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(path, e))
}

fn check_user(user: &UserData, dir: &Path) -> Result<()> {
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
    let result = write_into(snap, &tmp, options).and_then(|()| {
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

fn write_into(snap: &Snapshot<'_>, tmp: &Path, options: &SaveOptions) -> Result<()> {
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
    let mut schema = Vec::new();
    for (c, (spec, bytes)) in config
        .schema()
        .columns()
        .iter()
        .zip(&snap.columns)
        .enumerate()
    {
        let file = column_file(c, &spec.name);
        let header = npy::header(npy::descr(spec.dtype), &[capacity, spec.shape]);
        files.insert(file.clone(), write_file(&tmp.join(&file), &header, bytes)?);
        schema.push(ManifestColumn {
            name: spec.name.clone(),
            dtype: dtype_name(spec.dtype).to_string(),
            shape: spec.shape as u64,
            file,
        });
    }
    let manifest = Manifest {
        format: FORMAT.to_string(),
        version: VERSION,
        crate_version: env!("CARGO_PKG_VERSION").to_string(),
        config: ManifestConfig {
            capacity: capacity as u64,
            fanout: config.fanout().get() as u64,
            alpha: config.alpha(),
            weight_normalization: match config.weight_normalization() {
                WeightNormalization::Global => "global",
                WeightNormalization::Batch => "batch",
            }
            .to_string(),
            default_priority: match config.default_priority() {
                DefaultPriority::RunningMax => "running_max",
                DefaultPriority::LiveMax => "live_max",
            }
            .to_string(),
            initial_priority: config.initial_priority(),
        },
        schema,
        state: ManifestState {
            inserted: snap.inserted,
            len: snap.len as u64,
            cursor: snap.inserted % capacity as u64,
            running_max: snap.running_max,
        },
        files,
        user: options.user.clone(),
    };
    let mut json =
        serde_json::to_vec_pretty(&manifest).map_err(|e| err(Kind::Invalid, tmp, e.to_string()))?;
    json.push(b'\n');
    let crc = crc32fast::hash(&json);
    write_file(&tmp.join(MANIFEST), &[], &json)?;
    write_file(
        &tmp.join(COMMIT),
        &[],
        format!("{FORMAT} v{VERSION} manifest-crc32 {crc:08x}\n").as_bytes(),
    )?;
    sync_dir(tmp)
}

// ---------------------------------------------------------------------------------------
// Reading

/// Read a small file whole, refusing one longer than `max` bytes before reading it.
fn read_small(path: &Path, max: u64) -> Result<Vec<u8>> {
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
fn committed_manifest(dir: &Path) -> Result<Vec<u8>> {
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
    let prefix = format!("{FORMAT} v{VERSION} manifest-crc32 ");
    let text = std::str::from_utf8(&commit).unwrap_or("");
    let crc = text
        .strip_prefix(&prefix)
        .and_then(|t| t.strip_suffix('\n'))
        .filter(|h| h.len() == 8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| err(Kind::Uncommitted, &commit_path, "not a v1 COMMIT record"))?;
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

fn parse_config(m: &Manifest, dir: &Path) -> Result<Config> {
    let bad = |what: String| err(Kind::Invalid, dir, what);
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
    let c = &m.config;
    if c.capacity == 0 || c.capacity > MAX_CAPACITY as u64 {
        return Err(bad(format!("capacity {} (1..={MAX_CAPACITY})", c.capacity)));
    }
    let mut schema = Schema::new();
    for col in &m.schema {
        let dtype = dtype_from(&col.dtype).ok_or_else(|| bad(format!("dtype {:?}", col.dtype)))?;
        let shape = usize::try_from(col.shape).map_err(|_| bad(format!("shape {}", col.shape)))?;
        schema = schema.column(col.name.clone(), dtype, shape);
    }
    let builder = Config::builder(c.capacity as usize, schema)
        .fanout(usize::try_from(c.fanout).unwrap_or(usize::MAX))
        .alpha(c.alpha)
        .initial_priority(c.initial_priority)
        .weight_normalization(match c.weight_normalization.as_str() {
            "global" => WeightNormalization::Global,
            "batch" => WeightNormalization::Batch,
            other => return Err(bad(format!("weight normalization {other:?}"))),
        })
        .default_priority(match c.default_priority.as_str() {
            "running_max" => DefaultPriority::RunningMax,
            "live_max" => DefaultPriority::LiveMax,
            other => return Err(bad(format!("default priority {other:?}"))),
        });
    builder.build().map_err(|e| bad(format!("config: {e}")))
}

impl Plan {
    /// Read and check the manifest and every data file's length and header: nothing is
    /// allocated for the data yet, and nothing the files claim sizes an allocation.
    pub(crate) fn open(dir: &Path, options: &LoadOptions) -> Result<Plan> {
        let bytes = committed_manifest(dir)?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
        let config = parse_config(&manifest, dir)?;
        if let Some(schema) = &options.schema {
            if schema != config.schema() {
                return Err(err(
                    Kind::Mismatch,
                    dir,
                    format!(
                        "schema {:?}, expected {:?}",
                        config.schema().columns(),
                        schema.columns()
                    ),
                ));
            }
        }
        if let Some(capacity) = options.capacity {
            if capacity != config.capacity() {
                return Err(err(
                    Kind::Mismatch,
                    dir,
                    format!("capacity {}, expected {capacity}", config.capacity()),
                ));
            }
        }
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
                npy::header(npy::descr(spec.dtype), &[capacity, spec.shape]),
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
            let listed = plan
                .manifest
                .files
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
            if &got != header {
                return Err(err(
                    Kind::Format,
                    &path,
                    "not the NPY header this column needs",
                ));
            }
        }
        Ok(plan)
    }

    /// Read file `name` (already checked: header, length) into `out`, which holds exactly its
    /// data, and check its CRC.
    fn read_into(&self, name: &str, out: &mut [u8]) -> Result<()> {
        let path = self.dir.join(name);
        let listed = self.manifest.files[name];
        let mut file = File::open(&path).map_err(|e| io(&path, e))?;
        let header_len = (listed.bytes - out.len() as u64) as usize;
        let mut header = vec![0u8; header_len];
        file.read_exact(&mut header).map_err(|e| io(&path, e))?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header);
        for chunk in out.chunks_mut(CHUNK) {
            file.read_exact(chunk).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => err(Kind::Corrupt, &path, "truncated"),
                _ => io(&path, e),
            })?;
            crc.update(chunk);
        }
        let mut extra = [0u8; 1];
        if file.read(&mut extra).map_err(|e| io(&path, e))? != 0 {
            return Err(err(Kind::Corrupt, &path, "longer than listed"));
        }
        let actual = crc.finalize();
        if actual != listed.crc32 {
            return Err(err(
                Kind::Corrupt,
                &path,
                format!(
                    "CRC-32 {actual:08x}, the manifest says {:08x}",
                    listed.crc32
                ),
            ));
        }
        Ok(())
    }

    /// Read column `c`'s bytes into `out` (exactly `capacity x row bytes`), checked. A bool
    /// column's bytes are checked to be 0 or 1 before they reach `out`.
    pub(crate) fn read_column(&self, c: usize, out: &mut [u8]) -> Result<()> {
        let spec = &self.config.schema().columns()[c];
        let name = &self.manifest.schema[c].file;
        if spec.dtype != DType::Bool {
            return self.read_into(name, out);
        }
        let mut scratch = vec![0u8; out.len()];
        self.read_into(name, &mut scratch)?;
        if let Some(i) = scratch.iter().position(|&b| b > 1) {
            return Err(err(
                Kind::Invalid,
                &self.dir.join(name),
                format!("byte {i} is {} in a bool column", scratch[i]),
            ));
        }
        out.copy_from_slice(&scratch);
        Ok(())
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
        Ok(State {
            inserted,
            len,
            running_max: s.running_max,
            priorities,
            generations,
            user: self.manifest.user.clone(),
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

/// The user map of the checkpoint at `dir` (its manifest checked against `COMMIT`).
pub fn user_data<P: AsRef<Path>>(dir: P) -> Result<UserData> {
    let dir = dir.as_ref();
    let bytes = committed_manifest(dir)?;
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| err(Kind::Format, &dir.join(MANIFEST), e.to_string()))?;
    Ok(manifest.user)
}

// ---------------------------------------------------------------------------------------
// Numbered checkpoints in a parent directory

/// `parent/ckpt-<step>`, the step zero-padded to 12 digits so that names sort by step.
pub fn numbered<P: AsRef<Path>>(parent: P, step: u64) -> PathBuf {
    parent.as_ref().join(format!("{NUMBERED}{step:012}"))
}

/// The numbered checkpoints in `parent` (committed or not), oldest step first.
fn numbered_dirs(parent: &Path) -> Result<Vec<(u64, PathBuf)>> {
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

/// The newest numbered checkpoint in `parent` whose `COMMIT` matches its manifest
/// (uncommitted and damaged ones are skipped), or `None`.
pub fn latest<P: AsRef<Path>>(parent: P) -> Result<Option<PathBuf>> {
    for (_, dir) in numbered_dirs(parent.as_ref())?.into_iter().rev() {
        if committed_manifest(&dir).is_ok() {
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
        if committed_manifest(&dir).is_err() {
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
fn rotate(parent: &Path, keep: usize) -> Result<()> {
    let committed: Vec<PathBuf> = numbered_dirs(parent)?
        .into_iter()
        .filter(|(_, d)| committed_manifest(d).is_ok())
        .map(|(_, d)| d)
        .collect();
    for dir in committed.iter().rev().skip(keep) {
        fs::remove_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    Ok(())
}
