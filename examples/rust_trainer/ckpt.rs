//! Checkpoints of a run (`--checkpoint DIR --checkpoint-every N --resume`).
//!
//! Every N env steps the monitor holds the learners at a round's end and then the actors
//! (each flushes its staged transitions and parks), so that the buffer holds exactly the
//! transitions of the counted env steps and the networks hold every gradient of the batches
//! taken. It then writes, in `DIR`:
//!
//! - `trainer-<step>.pt`: the master networks (online and target), Adam's moments and step
//!   counts, and the parameter server's round (named tensors, `Tensor::save_multi`); written
//!   to a temporary name, fsynced, renamed, and the directory fsynced;
//! - `ckpt-<step>/`: the replay buffer in the crate's checkpoint format, whose user map holds
//!   the rest: env steps, samples granted (the rate control), episodes, priority updates,
//!   every actor's and learner's RNG state, the trainer file's name and CRC-32. Its `COMMIT`
//!   is the checkpoint's: a crash before it leaves the previous checkpoint the newest.
//!
//! The last three checkpoints are kept (and their trainer files). A run also saves one when
//! it ends. `--resume` starts from the newest committed checkpoint in `DIR` (a new run when
//! there is none): the buffer, networks, optimizer, counters and RNGs come back; episodes
//! restart (environments are reset), torch's generator is reseeded from the seed and the
//! step, and with `--priority-delay D` the up to D batches per learner whose priorities were
//! not yet written back are not in the checkpoint.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kary_replay::checkpoint::{self, SaveOptions, UserData, UserValue};
use tch::Tensor;

use crate::cli::Options;
use crate::envs::Rng;

/// Checkpoints kept in `DIR` (older ones are removed after a save).
const KEEP: usize = 3;

/// Every actor's and learner's RNG as it stood last: actors store theirs when they park or
/// stop, learners after each batch they draw.
pub(crate) struct RngBoard {
    pub(crate) actors: Vec<Mutex<Rng>>,
    pub(crate) learners: Vec<Mutex<Rng>>,
}

impl RngBoard {
    /// Fresh generators from `seed` for `actors` and `learners` threads, or those of the
    /// checkpoint for the threads it had.
    pub(crate) fn new(
        seed: u64,
        actors: usize,
        learners: usize,
        resumed: Option<&Resume>,
    ) -> RngBoard {
        let pick = |saved: Option<&Vec<Rng>>, i: usize, fresh: Rng| {
            Mutex::new(saved.and_then(|v| v.get(i).cloned()).unwrap_or(fresh))
        };
        RngBoard {
            actors: (0..actors)
                .map(|i| {
                    let fresh = Rng::new(seed.wrapping_mul(7919).wrapping_add(i as u64 + 1));
                    pick(resumed.map(|r| &r.actor_rngs), i, fresh)
                })
                .collect(),
            learners: (0..learners)
                .map(|i| {
                    let fresh = Rng::new(seed.wrapping_mul(31).wrapping_add(i as u64 + 7));
                    pick(resumed.map(|r| &r.learner_rngs), i, fresh)
                })
                .collect(),
        }
    }
}

/// What a resumed run starts from.
pub(crate) struct Resume {
    pub(crate) dir: PathBuf,
    pub(crate) steps: i64,
    pub(crate) granted: i64,
    pub(crate) episodes: i64,
    pub(crate) priority_updates: i64,
    pub(crate) stale_updates: i64,
    pub(crate) evaluations: u64,
    pub(crate) actor_rngs: Vec<Rng>,
    pub(crate) learner_rngs: Vec<Rng>,
    /// The parameter server's state (`ParamServer::restore`).
    pub(crate) tensors: Vec<(String, Tensor)>,
}

/// The counters a checkpoint records beside the buffer and the networks.
pub(crate) struct Counters {
    pub(crate) steps: i64,
    pub(crate) granted: i64,
    pub(crate) episodes: i64,
    pub(crate) priority_updates: i64,
    pub(crate) stale_updates: i64,
    pub(crate) evaluations: u64,
}

fn io(what: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("{what} {}: {e}", path.display())
}

fn rng_bytes(r: &Rng) -> Vec<u8> {
    r.state().iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn rng_from(bytes: &[u8]) -> Option<Rng> {
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let state: [u64; 4] = words.try_into().ok()?;
    Rng::from_state(state)
}

/// The trainer file's name for a checkpoint at `step`.
fn trainer_file(step: i64) -> String {
    format!("trainer-{step:012}.pt")
}

/// Writes a checkpoint of the held run: the trainer file, then the buffer with the user map
/// (its COMMIT last). Returns the buffer checkpoint's directory, or None when one exists
/// for this step already.
pub(crate) fn save(
    o: &Options,
    buffer: &dyn crate::replay::Replay,
    server_state: Vec<(String, Tensor)>,
    counters: &Counters,
    rngs: &RngBoard,
) -> Result<Option<PathBuf>, String> {
    let parent = Path::new(&o.checkpoint);
    let dir = checkpoint::numbered(parent, counters.steps as u64);
    if dir.exists() {
        return Ok(None);
    }
    fs::create_dir_all(parent).map_err(|e| io("cannot create", parent, e))?;
    let name = trainer_file(counters.steps);
    let path = parent.join(&name);
    let tmp = parent.join(format!(".{name}.tmp"));
    Tensor::save_multi(&server_state, &tmp).map_err(|e| io("cannot write", &tmp, e))?;
    let bytes = fs::read(&tmp).map_err(|e| io("cannot read", &tmp, e))?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot fsync", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| io("cannot rename", &tmp, e))?;
    File::open(parent)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot fsync", parent, e))?;

    let u64v = |v: i64| UserValue::U64(v.max(0) as u64);
    let mut user = UserData::new();
    user.insert("trainer".into(), UserValue::Str("rust".into()));
    user.insert("env".into(), UserValue::Str(o.env.clone()));
    user.insert("algo".into(), UserValue::Str(o.algo.clone()));
    user.insert("env_steps".into(), u64v(counters.steps));
    user.insert("granted".into(), u64v(counters.granted));
    user.insert("episodes".into(), u64v(counters.episodes));
    user.insert("priority_updates".into(), u64v(counters.priority_updates));
    user.insert("stale_updates".into(), u64v(counters.stale_updates));
    user.insert("evaluations".into(), UserValue::U64(counters.evaluations));
    user.insert("trainer_file".into(), UserValue::Str(name));
    user.insert(
        "trainer_crc32".into(),
        UserValue::U64(u64::from(crc32fast::hash(&bytes))),
    );
    for (kind, board) in [("actor", &rngs.actors), ("learner", &rngs.learners)] {
        for (i, r) in board.iter().enumerate() {
            let r = r.lock().unwrap();
            user.insert(format!("{kind}_rng.{i}"), UserValue::Bytes(rng_bytes(&r)));
        }
    }
    let options = SaveOptions::new().with_user_data(user).keep_last(KEEP);
    buffer
        .save(&dir, &options)
        .map_err(|e| format!("saving the buffer to {}: {e}", dir.display()))?;
    remove_orphans(parent);
    Ok(Some(dir))
}

/// Removes trainer files whose buffer checkpoint was rotated away (best effort).
fn remove_orphans(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(step) = name
            .strip_prefix("trainer-")
            .and_then(|s| s.strip_suffix(".pt"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        if !checkpoint::numbered(parent, step).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The newest committed checkpoint in `--checkpoint`, read whole; None when there is none.
pub(crate) fn find(o: &Options) -> Result<Option<Resume>, String> {
    let parent = Path::new(&o.checkpoint);
    let Some(dir) = checkpoint::latest(parent).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let user = checkpoint::user_data(&dir).map_err(|e| e.to_string())?;
    let bad = |what: &str| format!("checkpoint {}: {what}", dir.display());
    let text = |k: &str| match user.get(k) {
        Some(UserValue::Str(s)) => Ok(s.clone()),
        _ => Err(bad(&format!("no {k}"))),
    };
    let count = |k: &str| match user.get(k) {
        Some(UserValue::U64(v)) if *v <= i64::MAX as u64 => Ok(*v),
        _ => Err(bad(&format!("no {k}"))),
    };
    if text("trainer")? != "rust" {
        return Err(bad("not a checkpoint of the Rust trainer"));
    }
    for (k, want) in [("env", &o.env), ("algo", &o.algo)] {
        let got = text(k)?;
        if &got != want {
            return Err(bad(&format!("--{k} {got} was saved, --{k} {want} asked")));
        }
    }
    let rngs = |kind: &str| -> Result<Vec<Rng>, String> {
        let mut out = Vec::new();
        while let Some(v) = user.get(&format!("{kind}_rng.{}", out.len())) {
            match v {
                UserValue::Bytes(b) => out.push(rng_from(b).ok_or_else(|| bad("a bad RNG state"))?),
                _ => return Err(bad("a bad RNG state")),
            }
        }
        Ok(out)
    };
    let file = parent.join(text("trainer_file")?);
    let bytes = fs::read(&file).map_err(|e| io("cannot read", &file, e))?;
    if u64::from(crc32fast::hash(&bytes)) != count("trainer_crc32")? {
        return Err(format!("{}: CRC-32 mismatch (damaged)", file.display()));
    }
    let tensors = Tensor::load_multi(&file).map_err(|e| io("cannot load", &file, e))?;
    Ok(Some(Resume {
        steps: count("env_steps")? as i64,
        granted: count("granted")? as i64,
        episodes: count("episodes")? as i64,
        priority_updates: count("priority_updates")? as i64,
        stale_updates: count("stale_updates")? as i64,
        evaluations: count("evaluations")?,
        actor_rngs: rngs("actor")?,
        learner_rngs: rngs("learner")?,
        tensors,
        dir,
    }))
}
