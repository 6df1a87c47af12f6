//! The replay adapter: the device buffers behind locks, as actors and learners see them
//! (`HybridBuffer` over a CPU concurrent buffer, or `DeviceBuffer`), or, with `--nstep N`,
//! lanes of steps on the host (`sequence::SequenceBuffer`, one lane per actor); and the
//! run's schema.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use crate::cli::*;
use crate::envs::{CartPole, Pendulum, Rng};
use crate::nets::*;
use kary_replay::checkpoint::{LoadOptions, SaveOptions, TreeState};
use kary_replay::gpu::{DeviceBuffer, DeviceKeys, HybridBuffer, Precision};
use kary_replay::sequence::{LaneWriter, SequenceBatch, SequenceBuffer, SequenceConfig};
use kary_replay::{
    Checkpoint, ColumnSlice, ConcurrentBuffer, Config, DType, DefaultPriority, GlobalLockBuffer,
    Key, Load, LockFreeBuffer, SampleMode, Schema, SplitLockBuffer, UpdateReport,
};
use tch::{Device, Kind, Tensor};

// The replay buffer, seen by actors and learners: a HybridBuffer over one of the three CPU
// concurrent buffers, or a DeviceBuffer. Inserts take `&mut self` on both (an insert never
// races a gather of the slot it overwrites), so the buffer sits behind a lock: an RwLock
// for the HybridBuffer (learners sample and update under the read lock, concurrently; an
// actor's staged insert of 16 takes the write lock), a Mutex for the DeviceBuffer (its
// update_priorities is `&mut self` too).

/// Keys of a sampled batch: on the host (HybridBuffer's CPU tree) or on the device.
pub(crate) enum BatchKeys {
    Host(Vec<Key>),
    Device(DeviceKeys),
}

/// A sampled batch: every tensor on the learners' device.
pub(crate) struct Batch {
    pub(crate) keys: BatchKeys,
    pub(crate) weights: Tensor,      // [B, 1] f32
    pub(crate) columns: Vec<Tensor>, // obs, action, reward, next_obs, done; each [B, shape]
}

/// How a transition's episode goes on after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Continues,
    /// It terminated: nothing to bootstrap from.
    Terminated,
    /// It was cut (a time limit): the return bootstraps from the next observation.
    Truncated,
}

/// A learner's new priorities ([B] on the device) as the host trees take them.
fn host_priorities(priorities: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&priorities.to_kind(Kind::Double).to_device(Device::Cpu))
        .expect("a 1-D tensor")
}

pub(crate) trait Replay: Send + Sync {
    /// Insert actor `lane`'s next transitions, in the order it took them (`ends[i]` says how
    /// transition i's episode goes on; only the lanes of `--nstep` need it).
    fn insert(&self, lane: usize, columns: &[Tensor], ends: &[End]) -> kary_replay::Result<()>;
    fn sample(&self, batch: usize, beta: f64, rng: &mut Rng) -> kary_replay::Result<Batch>;
    /// Writes `priorities` ([B] f32 on the device) back by key.
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport>;
    fn len(&self) -> usize;
    /// Items inserted since the buffer began (across checkpoints).
    fn inserted(&self) -> u64;
    fn name(&self) -> String;
    /// Saves a checkpoint (inserts wait; learners may go on).
    fn save(&self, dir: &Path, options: &SaveOptions) -> kary_replay::Result<()>;
}

pub(crate) struct Hybrid<T: ConcurrentBuffer>(
    pub(crate) RwLock<HybridBuffer<T>>,
    pub(crate) &'static str,
);

impl<T: ConcurrentBuffer + TreeState + Send + Sync> Replay for Hybrid<T> {
    fn insert(&self, _lane: usize, columns: &[Tensor], _ends: &[End]) -> kary_replay::Result<()> {
        self.0
            .write()
            .unwrap()
            .insert_batch(columns, None)
            .map(|_| ())
    }
    fn sample(&self, batch: usize, beta: f64, rng: &mut Rng) -> kary_replay::Result<Batch> {
        let buffer = self.0.read().unwrap();
        let s = buffer.sample(batch, beta, SampleMode::Stratified, rng)?;
        // The B weights travel with the B indices; the columns were gathered on the device.
        let weights = Tensor::from_slice(&s.host.weights)
            .to_kind(Kind::Float)
            .to_device(buffer.device())
            .view([-1, 1]);
        Ok(Batch {
            keys: BatchKeys::Host(s.host.keys),
            weights,
            columns: s.columns,
        })
    }
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport> {
        let BatchKeys::Host(keys) = keys else {
            unreachable!("a HybridBuffer's keys are on the host")
        };
        let ps = host_priorities(priorities);
        self.0.read().unwrap().update_priorities(keys, &ps)
    }
    fn len(&self) -> usize {
        self.0.read().unwrap().len()
    }
    fn inserted(&self) -> u64 {
        self.0.read().unwrap().inserted()
    }
    fn name(&self) -> String {
        format!("HybridBuffer<{}>", self.1)
    }
    fn save(&self, dir: &Path, options: &SaveOptions) -> kary_replay::Result<()> {
        self.0.read().unwrap().save_with(dir, options)
    }
}

pub(crate) struct OnDevice(pub(crate) Mutex<DeviceBuffer>);

impl Replay for OnDevice {
    fn insert(&self, _lane: usize, columns: &[Tensor], _ends: &[End]) -> kary_replay::Result<()> {
        self.0
            .lock()
            .unwrap()
            .insert_batch(columns, None)
            .map(|_| ())
    }
    fn sample(&self, batch: usize, beta: f64, _rng: &mut Rng) -> kary_replay::Result<Batch> {
        // Targets are drawn with torch's generator on the device (seeded in main).
        let s = self
            .0
            .lock()
            .unwrap()
            .sample(batch, beta, SampleMode::Stratified)?;
        Ok(Batch {
            keys: BatchKeys::Device(s.keys),
            weights: s.weights.to_kind(Kind::Float).view([-1, 1]),
            columns: s.columns,
        })
    }
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport> {
        let BatchKeys::Device(keys) = keys else {
            unreachable!("a DeviceBuffer's keys are on the device")
        };
        self.0.lock().unwrap().update_priorities(keys, priorities)
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn inserted(&self) -> u64 {
        self.0.lock().unwrap().inserted()
    }
    fn name(&self) -> String {
        "DeviceBuffer".into()
    }
    fn save(&self, dir: &Path, options: &SaveOptions) -> kary_replay::Result<()> {
        self.0.lock().unwrap().save_with(dir, options)
    }
}

/// `--nstep N`: one lane per actor of one row per step (obs, action, reward), each episode's
/// final observation stored once; the learners sample one-step windows with their n-step
/// return, the discount to bootstrap with and the observation n steps on, on the host, and
/// copy them to the device. The batch keeps the learners' columns: `reward` is the n-step
/// return and `done` is `1 - discount / gamma`, so the learners' `reward + (1 - done) x
/// gamma x Q(next)` is `return + gamma^m x Q(next)` (0 after a terminal) unchanged.
pub(crate) struct Lanes {
    buffer: Arc<SequenceBuffer>,
    writers: Vec<Mutex<LaneWriter<Arc<SequenceBuffer>>>>,
    gamma: f64,
    discrete: bool,
    device: Device,
}

impl Lanes {
    fn new(
        buffer: SequenceBuffer,
        gamma: f64,
        discrete: bool,
        device: Device,
    ) -> kary_replay::Result<Lanes> {
        let buffer = Arc::new(buffer);
        let writers = (0..buffer.config().lanes())
            .map(|l| SequenceBuffer::lane_shared(Arc::clone(&buffer), l).map(Mutex::new))
            .collect::<kary_replay::Result<_>>()?;
        Ok(Lanes {
            buffer,
            writers,
            gamma,
            discrete,
            device,
        })
    }
}

impl Replay for Lanes {
    fn insert(&self, lane: usize, columns: &[Tensor], ends: &[End]) -> kary_replay::Result<()> {
        let host = |t: &Tensor| t.to_device(Device::Cpu).flatten(0, -1);
        let f32s = |t: &Tensor| Vec::<f32>::try_from(host(t)).expect("an f32 column");
        let (obs, reward, next) = (f32s(&columns[0]), f32s(&columns[2]), f32s(&columns[3]));
        let (act_i, act_f) = match self.discrete {
            true => (
                Vec::<i64>::try_from(host(&columns[1])).expect("an i64 column"),
                vec![],
            ),
            false => (vec![], f32s(&columns[1])),
        };
        let m = reward.len();
        let (o, a) = (obs.len() / m, (act_i.len() + act_f.len()) / m);
        let mut writer = self.writers[lane].lock().unwrap();
        for (i, end) in ends.iter().enumerate().take(m) {
            let action: ColumnSlice<'_> = match self.discrete {
                true => (&act_i[i * a..(i + 1) * a]).into(),
                false => (&act_f[i * a..(i + 1) * a]).into(),
            };
            writer.push(&[
                (&obs[i * o..(i + 1) * o]).into(),
                action,
                (&reward[i..i + 1]).into(),
            ])?;
            if *end != End::Continues {
                writer.end_episode(
                    &[(&next[i * o..(i + 1) * o]).into()],
                    *end == End::Truncated,
                )?;
            }
        }
        Ok(())
    }
    fn sample(&self, batch: usize, beta: f64, rng: &mut Rng) -> kary_replay::Result<Batch> {
        let mut out = SequenceBatch::default();
        self.buffer
            .sample_into(batch, beta, SampleMode::Stratified, rng, &mut out)?;
        let on = |t: Tensor, k: usize| t.view([batch as i64, k as i64]).to_device(self.device);
        let obs_dim = out.next[0].len() / batch;
        let column = |c: usize| -> Tensor {
            let col = &out.columns[c];
            match (col.as_f32(), col.as_i64()) {
                (Some(v), _) => on(Tensor::from_slice(v), v.len() / batch),
                (_, Some(v)) => on(Tensor::from_slice(v), v.len() / batch),
                _ => unreachable!("the lanes' columns are f32 or i64"),
            }
        };
        let next = out.next[0].as_f32().expect("an f32 observation");
        let returns: Vec<f32> = out.returns.iter().map(|&r| r as f32).collect();
        let done: Vec<f32> = (out.discounts.iter())
            .map(|&d| (1.0 - d / self.gamma) as f32)
            .collect();
        let weights: Vec<f32> = out.weights.iter().map(|&w| w as f32).collect();
        Ok(Batch {
            weights: on(Tensor::from_slice(&weights), 1),
            columns: vec![
                column(0),
                column(1),
                on(Tensor::from_slice(&returns), 1),
                on(Tensor::from_slice(next), obs_dim),
                on(Tensor::from_slice(&done), 1),
            ],
            keys: BatchKeys::Host(out.keys),
        })
    }
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport> {
        let BatchKeys::Host(keys) = keys else {
            unreachable!("the lanes' keys are on the host")
        };
        let ps = host_priorities(priorities);
        self.buffer.update_priorities(keys, &ps)
    }
    fn len(&self) -> usize {
        self.buffer.len()
    }
    fn inserted(&self) -> u64 {
        self.buffer.steps_written()
    }
    fn name(&self) -> String {
        format!(
            "SequenceBuffer ({} lanes, n = {})",
            self.buffer.config().lanes(),
            self.buffer.config().nstep().map_or(1, |n| n.n)
        )
    }
    fn save(&self, dir: &Path, options: &SaveOptions) -> kary_replay::Result<()> {
        self.buffer.save_with(dir, options)
    }
}

/// The schema's shapes: obs, action (DQN: one i64 index; TD3: the action dimension in f32).
pub(crate) struct Dims {
    pub(crate) obs: usize,
    pub(crate) act: usize,
    pub(crate) discrete: bool,
}

pub(crate) fn dims_for(o: &Options) -> Dims {
    if o.algo == "dqn" {
        Dims {
            obs: CartPole::OBS,
            act: 1,
            discrete: true,
        }
    } else {
        Dims {
            obs: Pendulum::OBS,
            act: Pendulum::ACTION_DIM,
            discrete: false,
        }
    }
}

pub(crate) fn make_replay(
    o: &Options,
    h: &Hyper,
    d: &Dims,
    capacity: usize,
    device: Device,
    from: Option<&Path>,
) -> kary_replay::Result<Box<dyn Replay>> {
    let schema = Schema::new()
        .column("obs", DType::F32, d.obs)
        .column(
            "action",
            if d.discrete { DType::I64 } else { DType::F32 },
            d.act,
        )
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, d.obs)
        .column("done", DType::F32, 1);
    if o.nstep > 1 {
        // One lane per actor, holding its share of the capacity plus an n-step's reach.
        let lanes = Schema::new()
            .column("obs", DType::F32, d.obs)
            .column(
                "action",
                if d.discrete { DType::I64 } else { DType::F32 },
                d.act,
            )
            .column("reward", DType::F32, 1);
        let config = SequenceConfig::builder(o.actors, capacity / o.actors + o.nstep + 2, lanes)
            .nstep(o.nstep, h.gamma, "reward")
            .next_of("obs")
            .fanout(o.fanout)
            .alpha(h.alpha)
            .build()?;
        let buffer = match from {
            Some(dir) => {
                let loaded = SequenceBuffer::load(dir)?;
                if loaded.config().schema() != config.schema()
                    || loaded.config().lanes() != config.lanes()
                    || loaded.config().steps_per_lane() != config.steps_per_lane()
                    || loaded.config().nstep() != config.nstep()
                {
                    return Err(kary_replay::Error::Checkpoint {
                        kind: kary_replay::CheckpointErrorKind::Mismatch,
                        path: dir.display().to_string(),
                        detail: "not this run's lanes (actors, capacity, --nstep or schema)".into(),
                    });
                }
                loaded
            }
            None => SequenceBuffer::new(config)?,
        };
        return Ok(Box::new(Lanes::new(buffer, h.gamma, d.discrete, device)?));
    }
    let config = Config::builder(capacity, schema.clone())
        .fanout(o.fanout)
        .alpha(h.alpha)
        .default_priority(DefaultPriority::RunningMax)
        .build()?;
    // A checkpoint must hold this run's schema and capacity; its tree settings are kept.
    let load = LoadOptions {
        schema: Some(schema),
        capacity: Some(capacity),
    };
    fn hybrid<T: ConcurrentBuffer + TreeState + Send + Sync + 'static>(
        config: Config,
        device: Device,
        from: Option<&Path>,
        load: &LoadOptions,
        name: &'static str,
    ) -> kary_replay::Result<Box<dyn Replay>> {
        let buffer = match from {
            Some(dir) => HybridBuffer::<T>::load_with(dir, load, device)?.buffer,
            None => HybridBuffer::new(config, device)?,
        };
        Ok(Box::new(Hybrid::<T>(RwLock::new(buffer), name)))
    }
    Ok(match (o.sampler, o.variant.as_str()) {
        (Sampler::Device, _) => Box::new(OnDevice(Mutex::new(match from {
            Some(dir) => DeviceBuffer::load_with(dir, &load, device, Precision::F64)?.buffer,
            None => DeviceBuffer::new(config, device, Precision::F64)?,
        }))),
        (Sampler::Hybrid, "global") => {
            hybrid::<GlobalLockBuffer>(config, device, from, &load, "GlobalLock")?
        }
        (Sampler::Hybrid, "split") => {
            hybrid::<SplitLockBuffer>(config, device, from, &load, "SplitLock")?
        }
        (Sampler::Hybrid, _) => hybrid::<LockFreeBuffer>(config, device, from, &load, "LockFree")?,
    })
}
