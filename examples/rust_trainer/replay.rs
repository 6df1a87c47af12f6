//! The replay adapter: the device buffers behind locks, as actors and learners see them
//! (`HybridBuffer` over a CPU concurrent buffer, or `DeviceBuffer`), and the run's schema.

use std::path::Path;
use std::sync::{Mutex, RwLock};

use crate::cli::*;
use crate::envs::{CartPole, Pendulum, Rng};
use crate::nets::*;
use kary_replay::checkpoint::{LoadOptions, SaveOptions, TreeState};
use kary_replay::gpu::{DeviceBuffer, DeviceKeys, HybridBuffer, Precision};
use kary_replay::{
    Checkpoint, ConcurrentBuffer, Config, DType, DefaultPriority, GlobalLockBuffer, Key,
    LockFreeBuffer, SampleMode, Schema, SplitLockBuffer, UpdateReport,
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

pub(crate) trait Replay: Send + Sync {
    fn insert(&self, columns: &[Tensor]) -> kary_replay::Result<()>;
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
    fn insert(&self, columns: &[Tensor]) -> kary_replay::Result<()> {
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
        let ps = Vec::<f64>::try_from(&priorities.to_kind(Kind::Double).to_device(Device::Cpu))
            .expect("a 1-D tensor");
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
    fn insert(&self, columns: &[Tensor]) -> kary_replay::Result<()> {
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
