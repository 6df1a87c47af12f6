//! [`HybridBuffer`]: a CPU concurrent buffer's tree chooses the indices, the columns live on
//! a tch device.

use tch::{Device, Kind, Tensor};

use std::borrow::Cow;
use std::path::Path;

use super::{
    check_columns, column_from, column_shape, filled, gathered, host_bytes, kind_of, rows_shape,
};
use crate::checkpoint::{Checkpoint, LoadOptions, Loaded, Plan, SaveOptions, Snapshot, TreeState};
use crate::{
    ConcurrentBuffer, Config, DType, Error, Key, Result, SampleBatch, SampleMode, Schema,
    UpdateReport,
};

/// The CPU concurrent buffer's tree chooses the indices; the columns live on a device.
///
/// The CPU buffer `T` (any [`ConcurrentBuffer`]) keeps the priorities, keys and the sampling;
/// its own storage holds one byte per item. Per sampled batch only the B indices move to the
/// device, where the columns are gathered. Learners may sample and update from many threads
/// at once (`&self`); inserts take `&mut self`, so an insert never races a sample of the slot
/// it overwrites.
pub struct HybridBuffer<T: ConcurrentBuffer> {
    tree: T,
    /// The caller's configuration (the tree's has a one-byte schema instead).
    config: Config,
    schema: Schema,
    device: Device,
    columns: Vec<Tensor>,
}

/// A batch from [`HybridBuffer::sample`]: the tree's results on the host, the columns on the
/// device.
#[derive(Debug)]
pub struct HybridSample {
    /// Keys, indices, priorities, probabilities and weights from the CPU tree (its
    /// `columns` are empty).
    pub host: SampleBatch,
    /// The sampled slot indices on the device (`[B]`, i64): the one transfer per batch.
    pub indices: Tensor,
    /// The gathered columns, on the device, each `[B, *dims]`.
    pub columns: Vec<Tensor>,
}

// SAFETY: a `tch::Tensor` is not `Sync` because a `&Tensor` can make an alias
// (`shallow_clone`) through which another thread writes in place. A `HybridBuffer`'s
// column tensors are private and never aliased out: `&self` methods only read them
// (`index_select` allocates the gathered batch; the tensors' reference counts and version
// counters are atomic in libtorch), and every write (`insert_batch`) takes `&mut self`. The
// CPU tree is `T: Sync`, and the schema and device are plain data. So shared references may
// cross threads: learners sample and update concurrently, as the type's documentation says.
unsafe impl<T: ConcurrentBuffer + Sync> Sync for HybridBuffer<T> {}

impl<T: ConcurrentBuffer> HybridBuffer<T> {
    /// An empty buffer: `config`'s tree settings on the CPU, its schema's columns on `device`;
    /// [`crate::Error::Allocation`] where the device (or the host, for the tree) cannot hold
    /// it.
    pub fn new(config: Config, device: Device) -> Result<HybridBuffer<T>> {
        super::refuse_unheld(&config)?;
        let config = config.tagged();
        let schema = config.schema().clone();
        let columns = schema
            .columns()
            .iter()
            .map(|c| {
                filled(
                    &column_shape(config.capacity(), c),
                    0.0,
                    kind_of(c.dtype),
                    device,
                )
            })
            .collect::<Result<_>>()?;
        Ok(HybridBuffer {
            tree: T::new(tree_config(&config)?)?,
            config,
            schema,
            device,
            columns,
        })
    }

    // No accessor hands out the CPU buffer itself: an insert through it would give the tree
    // an item whose columns the device never received. Its read-only
    // getters are forwarded instead.

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Items stored.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether no item is stored.
    pub fn is_empty(&self) -> bool {
        self.tree.len() == 0
    }

    /// Items held before FIFO eviction.
    pub fn capacity(&self) -> usize {
        self.tree.capacity()
    }

    /// Items inserted since creation (the next item's generation).
    pub fn inserted(&self) -> u64 {
        self.tree.inserted()
    }

    /// Sum of the stored (alpha-exponentiated) priorities.
    pub fn total_priority(&self) -> f64 {
        self.tree.total_priority()
    }

    /// The CPU tree's [`Stats`](crate::Stats).
    pub fn stats(&self) -> crate::Stats {
        self.tree.stats()
    }

    /// The stored priority of slot `index`.
    pub fn priority(&self, index: usize) -> Result<f64> {
        self.tree.priority(index)
    }

    /// The key of the item in slot `index`, if any.
    pub fn key(&self, index: usize) -> Result<Option<Key>> {
        self.tree.key(index)
    }

    /// How far the CPU tree's sums are from their children's.
    pub fn consistency(&self) -> crate::Consistency {
        self.tree.consistency()
    }

    /// The device the columns live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Insert `M` items from device tensors (`[M, *dims]`, flat `[M, shape]`, or `[M]` for shape 1) with
    /// optional raw priorities; returns their keys. A failed call changes nothing.
    pub fn insert_batch(
        &mut self,
        columns: &[Tensor],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        let m = check_columns(&self.schema, columns, self.device)?;
        self.tree
            .config()
            .check_batch_priorities(m as usize, priorities)?;
        if m == 0 {
            return Ok(Vec::new());
        }
        // The CPU tree hands out generations inserted.. in order (no other inserter: &mut).
        let n = self.tree.capacity() as i64;
        let first = self.tree.inserted() as i64;
        let kept = m.min(n);
        let start = m - kept;
        // The CPU insert first: its one failure past the checks above (a slot's generations
        // exhausted) then leaves the device columns as they were. Nothing can sample between
        // it and the copies below (`&mut self`).
        let tags = vec![0u8; m as usize];
        let keys = self.tree.insert_batch(&[(&tags[..]).into()], priorities)?;
        let slots =
            Tensor::arange_start(first + start, first + m, (Kind::Int64, self.device)).remainder(n);
        for ((dst, col), spec) in self
            .columns
            .iter_mut()
            .zip(columns)
            .zip(self.schema.columns())
        {
            let src = col.narrow(0, start, kept).reshape(rows_shape(kept, spec));
            let _ = dst.index_copy_(0, &slots, &src);
        }
        Ok(keys)
    }

    /// Sample on the CPU tree, move the B indices to the device, gather the columns there.
    /// A batch that the host or the device cannot hold is [`Error::Allocation`] (or
    /// [`Error::SizeOverflow`]) and changes nothing.
    pub fn sample(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn crate::RandomSource,
    ) -> Result<HybridSample> {
        let mut host = SampleBatch::default();
        // Index-only: the host copies no column; the rows are gathered once, on the device.
        self.tree
            .sample_indices_into(batch, beta, mode, rng, &mut host)?;
        let indices: Vec<i64> = host.indices.iter().map(|&i| i as i64).collect();
        // A batch of rows the device cannot hold is an error, as in `DeviceBuffer::sample`
        // (the host's batch fitted; the device's copy of its indices or its rows may not).
        let indices = Tensor::f_from_slice(&indices)
            .and_then(|t| t.f_to_device_(self.device, Kind::Int64, false, false))
            .map_err(|_| Error::Allocation {
                bytes: indices.len().saturating_mul(8),
            })?;
        let columns = (self.columns.iter())
            .map(|c| gathered(c, &indices))
            .collect::<Result<Vec<_>>>()?;
        Ok(HybridSample {
            host,
            indices,
            columns,
        })
    }

    /// Update priorities by key on the CPU tree (see [`ConcurrentBuffer::update_priorities`]).
    pub fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        self.tree.update_priorities(keys, priorities)
    }
}

/// The CPU tree's configuration: `config`'s tree settings, one byte per item.
fn tree_config(config: &Config) -> Result<Config> {
    Config::builder(config.capacity(), Schema::new().column("tag", DType::U8, 1))
        .fanout(config.fanout().get())
        .alpha(config.alpha())
        .initial_priority(config.initial_priority())
        .weight_normalization(config.weight_normalization())
        .default_priority(config.default_priority())
        .key_tag(config.key_tag())
        .build()
}

/// Saves the checkpoint format of [`crate::checkpoint`]: the CPU tree's priorities, keys and
/// cursor (its writers and updates paused for the copy, as any concurrent save), the
/// columns copied from the device. Learners may go on sampling and updating meanwhile;
/// inserts cannot run (`&mut self`).
impl<T: ConcurrentBuffer + TreeState> Checkpoint for HybridBuffer<T> {
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        let state = self.tree.tree_state()?;
        let columns = (self.columns.iter())
            .map(|c| host_bytes(c).map(Cow::Owned))
            .collect::<Result<Vec<_>>>()?;
        let snapshot = Snapshot {
            config: &self.config,
            inserted: state.inserted,
            len: state.len,
            running_max: state.running_max,
            priorities: state.priorities,
            generations: Cow::Owned(state.generations),
            columns,
            rate_counts: None,
            version_floor: None,
            draws: None,
            alpha: self.tree.alpha(),
            raw: state.raw,
        };
        crate::checkpoint::write(&snapshot, dir, options)
    }
}

impl<T: ConcurrentBuffer + TreeState> HybridBuffer<T> {
    /// Load the checkpoint at `dir` (saved by any buffer) with its columns on `device`,
    /// checked against `options`, with its user map; as [`crate::Load::load_with`].
    pub fn load_with<P: AsRef<Path>>(
        dir: P,
        options: &LoadOptions,
        device: Device,
    ) -> Result<Loaded<Self>> {
        let plan = Plan::open(dir.as_ref(), options)?;
        let state = plan.read_state()?;
        // A rate limit saved by a CPU buffer is not held here (its counts stay in the files).
        let config = plan.config.clone().without_rate_limit().tagged();
        let tree = T::from_tree_state(tree_config(&config)?, &state)?;
        let columns = (0..config.schema().columns().len())
            .map(|c| column_from(&plan, c, device))
            .collect::<Result<Vec<_>>>()?;
        Ok(Loaded {
            buffer: HybridBuffer {
                tree,
                schema: config.schema().clone(),
                config,
                device,
                columns,
            },
            user: state.user,
        })
    }

    /// [`Self::load_with`] with no checks beyond the checkpoint's own.
    pub fn load<P: AsRef<Path>>(dir: P, device: Device) -> Result<Self> {
        Self::load_with(dir, &LoadOptions::default(), device).map(|l| l.buffer)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::HybridBuffer;
    use crate::{Config, DType, Error, Schema, SplitLockBuffer};
    use tch::{Device, Tensor};

    /// The CPU insert comes before the device copies, so an insert that its CPU tree refuses
    /// (here: past the slots' last generation) leaves the device columns as they were.
    #[test]
    fn an_insert_past_the_last_generation_leaves_the_device_columns_alone() {
        let config = Config::builder(4, Schema::new().column("x", DType::F32, 2))
            .build()
            .unwrap();
        let mut buffer: HybridBuffer<SplitLockBuffer> =
            HybridBuffer::new(config, Device::Cpu).unwrap();
        let rows = |first: f32| {
            let values: Vec<f32> = (0..8).map(|i| first + i as f32 / 2.0).collect();
            Tensor::from_slice(&values).reshape([4, 2])
        };
        buffer.insert_batch(&[rows(0.0)], None).unwrap();
        let next = buffer.tree.0.age_to_last_epoch_for_test();
        let last = rows(10.0);
        let keys = buffer
            .insert_batch(std::slice::from_ref(&last), None)
            .unwrap();
        assert_eq!(keys[0].insertion(), next % (1 << 48));
        let more = Tensor::from_slice(&[20.0f32, 20.5]).reshape([1, 2]);
        assert!(matches!(
            buffer.insert_batch(&[more], None),
            Err(Error::GenerationsExhausted { .. })
        ));
        assert!(buffer.columns[0].equal(&last), "the device rows changed");
        assert_eq!(buffer.inserted(), next + 4);
    }
}
