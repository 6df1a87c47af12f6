//! [`DeviceBuffer`]: the whole buffer (tree, columns, generations) on a tch device.

use std::borrow::Cow;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::level_tree::LevelTree;
use super::{
    check_columns, check_tensor, column_from, column_shape, filled, gathered, host_bytes, kind_of,
    rows_shape, tensor_error, DeviceKeys, DeviceSample, Precision,
};
use crate::buffer::check_beta;
use crate::checkpoint::{Checkpoint, LoadOptions, Loaded, Plan, SaveOptions, Snapshot, NO_ITEM};
use crate::{
    Config, Error, Key, Result, SampleMode, UpdateReport, WeightNormalization, MAX_PRIORITY,
};

/// Raw priorities as stored ones: `p^alpha`, 0 stays 0 (also for alpha = 0).
fn stored(config: &Config, p: &Tensor, kind: Kind) -> Tensor {
    let p = p.to_kind(Kind::Double);
    let alpha = config.alpha();
    let s = if alpha == 1.0 {
        p.shallow_clone()
    } else {
        p.pow_tensor_scalar(alpha)
    };
    s.where_scalarother(&p.gt(0.0), 0.0).to_kind(kind)
}

/// The first position where `ok` is false (one host read, on the error path only).
fn first_false(ok: &Tensor) -> usize {
    let bad = ok.logical_not().nonzero();
    if bad.size()[0] == 0 {
        0
    } else {
        bad.int64_value(&[0, 0]) as usize
    }
}

/// A prioritized replay buffer that lives on a tch device (see the module doc).
///
/// Methods that change it take `&mut self`; share it between threads behind a lock (a tch
/// `Tensor` is `Send`, and the device executes one stream at a time anyway).
pub struct DeviceBuffer {
    config: Config,
    device: Device,
    precision: Precision,
    tree: LevelTree,
    columns: Vec<Tensor>,
    /// Generation of the item in each slot, -1 when empty.
    generations: Tensor,
    inserted: u64,
    running_max: f64,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("capacity", &self.config.capacity())
            .field("fanout", &self.tree.k)
            .field("device", &self.device)
            .field("precision", &self.precision)
            .field("inserted", &self.inserted)
            .finish()
    }
}

impl DeviceBuffer {
    /// An empty buffer for `config` on `device` with nodes of `precision`;
    /// [`Error::Allocation`] where the device cannot hold it (nothing is kept).
    pub fn new(config: Config, device: Device, precision: Precision) -> Result<DeviceBuffer> {
        super::refuse_unheld(&config)?;
        let config = config.tagged();
        let capacity = config.capacity();
        let tree = LevelTree::new(capacity, config.fanout().get(), precision.kind(), device)?;
        let columns = config
            .schema()
            .columns()
            .iter()
            .map(|c| filled(&column_shape(capacity, c), 0.0, kind_of(c.dtype), device))
            .collect::<Result<_>>()?;
        let running_max = config.stored_priority(config.initial_priority());
        Ok(DeviceBuffer {
            generations: filled(&[capacity], -1.0, Kind::Int64, device)?,
            config,
            device,
            precision,
            tree,
            columns,
            inserted: 0,
            running_max,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The buffer's key tag in the place it has in a key's generation word ([`Key`]).
    fn tag_word(&self) -> i64 {
        i64::from(self.config.key_tag()) << Key::INSERTION_BITS
    }

    /// The device everything lives on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The node precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Items stored.
    pub fn len(&self) -> usize {
        self.inserted.min(self.config.capacity() as u64) as usize
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.inserted == 0
    }

    /// Capacity (items held before FIFO eviction).
    pub fn capacity(&self) -> usize {
        self.config.capacity()
    }

    /// Generations handed out (items ever inserted).
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Levels below the root.
    pub fn depth(&self) -> usize {
        self.tree.depth()
    }

    /// The sum of the stored priorities (one host read).
    pub fn total_priority(&self) -> f64 {
        self.tree.sums[0].double_value(&[0])
    }

    /// Total, length, capacity, inserted, smallest positive priority and running maximum
    /// ([`Stats`](crate::Stats)): three host reads (the root, the minimum tree's root, and
    /// with [`DefaultPriority::LiveMax`](crate::DefaultPriority::LiveMax) the largest leaf).
    pub fn stats(&self) -> crate::Stats {
        let min = self.tree.mins[0].double_value(&[0]);
        let running_max = (self.config).default_stored(self.running_max, || {
            Some(self.tree.leaves().max().double_value(&[]))
        });
        crate::Stats {
            total: self.total_priority(),
            len: self.len(),
            capacity: self.capacity(),
            inserted: self.inserted,
            min_positive: (min.is_finite() && min > 0.0).then_some(min),
            running_max,
        }
    }

    /// The stored priority of slot `index` (one host read).
    pub fn priority(&self, index: usize) -> Result<f64> {
        self.check_index(index)?;
        Ok(self.tree.leaves().double_value(&[index as i64]))
    }

    /// The key of the item in slot `index`, if any (one host read).
    pub fn key(&self, index: usize) -> Result<Option<Key>> {
        self.check_index(index)?;
        let g = self.generations.int64_value(&[index as i64]);
        Ok((g >= 0).then(|| self.config.key(index, g as u64)))
    }

    /// The leaf priorities `[capacity]` (a view of the tree's last level).
    pub fn leaf_priorities(&self) -> Tensor {
        self.tree.leaves().narrow(0, 0, self.capacity() as i64)
    }

    /// Recompute every internal node from the leaves (O(N) on the device). Updates keep the
    /// tree exact by themselves; this is for callers that edit [`Self::leaf_priorities`]
    /// directly.
    pub fn rebuild(&mut self) {
        self.tree.rebuild();
    }

    /// The baseline that `benches/tch.rs` compares updates with (TorchRL's CUDA sum tree):
    /// write B leaves, then recompute every level. No checks: indices must be in range and
    /// distinct, values stored priorities. Not for use.
    #[doc(hidden)]
    pub fn write_leaves_and_rebuild_all(&mut self, indices: &Tensor, stored: &Tensor) {
        let d = self.tree.depth();
        let _ = self.tree.sums[d].index_copy_(0, indices, &stored.to_kind(self.tree.kind));
        let positive = stored.gt(0.0);
        let mins = stored
            .to_kind(self.tree.kind)
            .where_scalarother(&positive, f64::INFINITY);
        let _ = self.tree.mins[d].index_copy_(0, indices, &mins);
        self.tree.rebuild();
    }

    /// How far the stored parents are from their children (host reads; for tests).
    pub fn consistency(&self) -> crate::Consistency {
        self.tree.check()
    }

    /// Bytes held on the device (tree levels, columns, generations).
    pub fn memory_bytes(&self) -> usize {
        let bytes = |t: &Tensor| t.numel() * t.kind().elt_size_in_bytes();
        self.tree
            .sums
            .iter()
            .chain(&self.tree.mins)
            .map(bytes)
            .sum::<usize>()
            + self.columns.iter().map(bytes).sum::<usize>()
            + bytes(&self.generations)
    }

    fn check_index(&self, index: usize) -> Result<()> {
        if index < self.capacity() {
            Ok(())
        } else {
            Err(Error::OutOfRange {
                index,
                capacity: self.capacity(),
            })
        }
    }

    /// Checks raw priorities on the device with one host read: all in
    /// `[0, max_raw_priority]`. Returns their largest value (0 for none).
    fn check_priorities(&self, p: &Tensor) -> Result<f64> {
        if p.numel() == 0 {
            return Ok(0.0);
        }
        let p64 = p.to_kind(Kind::Double);
        let max_raw = self.config.max_raw_priority();
        let ok = p64.ge(0.0).logical_and(&p64.le(max_raw));
        let summary = Tensor::stack(&[ok.all().to_kind(Kind::Double), p64.max()], 0);
        let summary = Vec::<f64>::try_from(&summary.to_device(Device::Cpu)).unwrap_or_default();
        if summary.first() == Some(&1.0) {
            Ok(summary[1])
        } else {
            let position = first_false(&ok);
            Err(Error::InvalidPriority {
                position,
                value: p64.double_value(&[position as i64]),
                max: MAX_PRIORITY,
            })
        }
    }

    /// Insert `M` items: one tensor per schema column on this device, `[M, *dims]` (or flat
    /// `[M, shape]`, or `[M]` when shape is 1) of the column's element type; `priorities` is `None` (default
    /// priorities) or `[M]` raw priorities (f32 or f64) on this device. Returns the keys of
    /// all M items (when M > capacity, the first M - capacity are evicted at once).
    ///
    /// With [`DefaultPriority::LiveMax`](crate::DefaultPriority::LiveMax), the items this
    /// batch evicts no longer count for the default (the CPU buffer evicts them one at a
    /// time); it costs a reduction over the leaves.
    ///
    /// A failed call changes nothing. Costs one host read when priorities are given (their
    /// check) or when the default is LiveMax (the live maximum), none otherwise.
    pub fn insert_batch(
        &mut self,
        columns: &[Tensor],
        priorities: Option<&Tensor>,
    ) -> Result<DeviceKeys> {
        let schema = self.config.schema();
        let m = check_columns(schema, columns, self.device)?;
        let max_given = match priorities {
            Some(p) => {
                if p.kind() != Kind::Float && p.kind() != Kind::Double {
                    return Err(tensor_error(format!(
                        "priorities have element type {:?}, expected Float or Double",
                        p.kind()
                    )));
                }
                check_tensor("priorities", p, self.device, p.kind(), &[m])?;
                Some(self.check_priorities(p)?)
            }
            None => None,
        };
        let n = self.capacity() as i64;
        let all_generations = Tensor::arange_start(
            self.inserted as i64,
            self.inserted as i64 + m,
            (Kind::Int64, self.device),
        );
        let keys = DeviceKeys {
            indices: all_generations.remainder(n),
            generations: &all_generations + self.tag_word(),
        };
        if m == 0 {
            return Ok(keys);
        }
        // Only the last `kept` items survive this batch.
        let kept = m.min(n);
        let start = m - kept;
        let generations = all_generations.narrow(0, start, kept);
        let slots = generations.remainder(n);
        for ((dst, col), spec) in self.columns.iter_mut().zip(columns).zip(schema.columns()) {
            let src = col.narrow(0, start, kept).reshape(rows_shape(kept, spec));
            let _ = dst.index_copy_(0, &slots, &src);
        }
        let _ = self.generations.index_copy_(0, &slots, &generations);
        let values = match priorities {
            Some(p) => {
                let p = p.narrow(0, start, kept);
                let max_stored = self.config.stored_priority(max_given.unwrap_or(0.0));
                self.running_max = self.running_max.max(max_stored);
                stored(&self.config, &p, self.tree.kind)
            }
            None => {
                let (tree, device) = (&mut self.tree, self.device);
                let default = self.config.default_stored(self.running_max, || {
                    // The evicted items are not live any more.
                    let zeros = Tensor::zeros([kept], (tree.kind, device));
                    tree.set_leaves(&slots, &zeros);
                    Some(tree.leaves().max().double_value(&[]))
                });
                Tensor::full([kept], default, (self.tree.kind, self.device))
            }
        };
        self.tree.set_leaves(&slots, &values);
        self.inserted += m as u64;
        Ok(keys)
    }

    /// Leaf indices (`[B]`, i64) for prefix targets (`[B]`, node precision, on this device):
    /// the item `i` with `prefix(i) <= target < prefix(i + 1)`, counting only positive
    /// priorities. Targets are clamped into `[0, total)`. No host read. A batch whose
    /// descent the device cannot hold (about `32 * K` bytes per target) is
    /// [`Error::Allocation`].
    pub fn find_prefix(&self, targets: &Tensor) -> Result<Tensor> {
        let b = targets.size().first().copied().unwrap_or(0);
        check_tensor("targets", targets, self.device, self.tree.kind, &[b])?;
        self.probe_descent(b)?;
        let total = &self.tree.sums[0];
        let below = total.nextafter(&Tensor::zeros_like(total));
        Ok(self.tree.descend(&targets.minimum(&below).clamp_min(0.0)))
    }

    /// Sample `batch` items (with replacement) proportionally to their stored priorities,
    /// drawing targets with torch's generator on the device (seed it with
    /// `tch::manual_seed`). Everything returned is on the device. One host read: the total,
    /// so that an empty or all-zero tree is refused ([`Error::Empty`],
    /// [`Error::ZeroTotalPriority`]) rather than sampled. A batch the device cannot hold (its
    /// draws, the descent's working set of about `32 * K` bytes per item, or the gathered
    /// rows) is [`Error::Allocation`] (or [`Error::SizeOverflow`] past i64), and changes
    /// nothing.
    pub fn sample(&self, batch: usize, beta: f64, mode: SampleMode) -> Result<DeviceSample> {
        if batch == 0 {
            return Err(Error::ZeroBatch);
        }
        check_beta(beta)?;
        crate::buffer::with_replacement_only(
            mode,
            "a device buffer samples by priority with replacement only (modes 2 to 6, without replacement, uniform, fifo, lifo and shuffled, are for host buffers)",
        )?;
        if self.is_empty() {
            return Err(Error::Empty);
        }
        let total = self.total_priority();
        if total.is_nan() || total <= 0.0 {
            return Err(Error::ZeroTotalPriority);
        }
        let kind = self.tree.kind;
        // A batch no device can hold is an error, as on the CPU buffers (tch's plain `rand`
        // would panic): the draws are the first of the batch's allocations.
        let b = i64::try_from(batch).map_err(|_| Error::SizeOverflow {
            what: "the batch size as a tensor dimension",
        })?;
        self.probe_descent(b)?;
        let u = Tensor::f_rand([b], (kind, self.device)).map_err(|_| Error::Allocation {
            bytes: batch.saturating_mul(kind.elt_size_in_bytes()),
        })?;
        let strata = Tensor::arange(b, (kind, self.device));
        let targets = crate::buffer::sampling_target(mode, strata, u, total, batch);
        let below = f64::from_bits(total.to_bits() - 1);
        let indices = self.tree.descend(&targets.clamp(0.0, below));
        self.gather(indices, beta)
    }

    /// Allocate and free the working set of a descent of `b` targets (about four `[B, K]`
    /// tensors of 8 bytes live at once, in plain tch calls), so that a batch the device
    /// cannot hold is an error, not a panic inside the descent.
    fn probe_descent(&self, b: i64) -> Result<()> {
        let work = b.checked_mul(4 * self.tree.k).ok_or(Error::SizeOverflow {
            what: "the descent's working set as a tensor dimension",
        })?;
        let probe =
            Tensor::f_empty([work], (Kind::Int64, self.device)).map_err(|_| Error::Allocation {
                bytes: usize::try_from(work).map_or(usize::MAX, |w| w.saturating_mul(8)),
            })?;
        drop(probe);
        Ok(())
    }

    /// Keys, weights, probabilities and columns of the items at `indices`. Every tensor it
    /// makes is allocated fallibly (a batch of wide rows may not fit where its draws did):
    /// an [`Error::Allocation`] then, and nothing has changed. The in-place `pow_` allocates
    /// nothing (tch's fallible calls that take a scalar panic when they fail: see `filled`).
    fn gather(&self, indices: Tensor, beta: f64) -> Result<DeviceSample> {
        let priorities = gathered(self.tree.leaves(), &indices)?;
        let per_item = || Error::Allocation {
            bytes: (priorities.numel()).saturating_mul(self.tree.kind.elt_size_in_bytes()),
        };
        // The root is the total that `sample` read (`&self`: nothing wrote in between).
        let probabilities = priorities
            .f_div(&self.tree.sums[0])
            .map_err(|_| per_item())?;
        let weights = if beta == 0.0 {
            priorities.f_ones_like().map_err(|_| per_item())?
        } else {
            let reference = match self.config.weight_normalization() {
                WeightNormalization::Global => self.tree.mins[0].shallow_clone(),
                WeightNormalization::Batch => priorities.f_min().map_err(|_| per_item())?,
            };
            let mut weights = priorities.f_div(&reference).map_err(|_| per_item())?;
            let _ = weights.pow_(-beta);
            weights
        };
        let generations = gathered(&self.generations, &indices)? + self.tag_word();
        let columns = (self.columns.iter())
            .map(|c| gathered(c, &indices))
            .collect::<Result<Vec<_>>>()?;
        Ok(DeviceSample {
            keys: DeviceKeys {
                generations,
                indices,
            },
            weights,
            probabilities,
            priorities,
            columns,
        })
    }

    /// Set the raw priorities (f32 or f64, `[B]`, on this device) of the items named by
    /// `keys`; stale keys (slot overwritten since) are dropped and counted, a key given twice
    /// ends with its last entry. Only the touched parents are recomputed.
    ///
    /// Errors (nothing changes): an index out of range, a key this buffer never made, an
    /// invalid priority, a device, type or length mismatch. One host read (the checks and
    /// the report's counts together).
    pub fn update_priorities(
        &mut self,
        keys: &DeviceKeys,
        priorities: &Tensor,
    ) -> Result<UpdateReport> {
        let b = keys.indices.size().first().copied().unwrap_or(0);
        check_tensor(
            "keys.indices",
            &keys.indices,
            self.device,
            Kind::Int64,
            &[b],
        )?;
        check_tensor(
            "keys.generations",
            &keys.generations,
            self.device,
            Kind::Int64,
            &[b],
        )?;
        if priorities.kind() != Kind::Float && priorities.kind() != Kind::Double {
            return Err(tensor_error(format!(
                "priorities have element type {:?}, expected Float or Double",
                priorities.kind()
            )));
        }
        if priorities.size() != [b] {
            return Err(Error::LengthMismatch {
                what: "priorities",
                expected: b as usize,
                got: priorities.size().first().copied().unwrap_or(0) as usize,
            });
        }
        check_tensor(
            "priorities",
            priorities,
            self.device,
            priorities.kind(),
            &[b],
        )?;
        if b == 0 {
            return Ok(UpdateReport::default());
        }
        let n = self.capacity() as i64;
        let idx = &keys.indices;
        // A key's generation word is the buffer's tag word plus the insertion number.
        let tag_word = self.tag_word();
        let gen = &keys.generations - tag_word;
        let in_range = idx.ge(0).logical_and(&idx.lt(n));
        let made = gen
            .ge(0)
            .logical_and(&gen.lt(self.inserted as i64))
            .logical_and(&gen.remainder(n).eq_tensor(idx));
        let p64 = priorities.to_kind(Kind::Double);
        let p_ok = p64
            .ge(0.0)
            .logical_and(&p64.le(self.config.max_raw_priority()));
        let safe_idx = idx.clamp(0, n - 1);
        let fresh = self
            .generations
            .index_select(0, &safe_idx)
            .eq_tensor(&gen)
            .logical_and(&in_range);
        let max_fresh = p64.where_scalarother(&fresh, 0.0).max();
        let summary = Tensor::stack(
            &[
                in_range.all().to_kind(Kind::Double),
                made.logical_or(&in_range.logical_not())
                    .all()
                    .to_kind(Kind::Double),
                p_ok.all().to_kind(Kind::Double),
                fresh.sum(Kind::Double),
                max_fresh,
            ],
            0,
        );
        let s = Vec::<f64>::try_from(&summary.to_device(Device::Cpu)).unwrap_or_default();
        if s.len() != 5 {
            return Err(tensor_error("could not read the update's checks".into()));
        }
        if s[0] != 1.0 {
            let i = first_false(&in_range);
            return Err(Error::OutOfRange {
                index: idx.int64_value(&[i as i64]).max(0) as usize,
                capacity: n as usize,
            });
        }
        if s[1] != 1.0 {
            let i = first_false(&made) as i64;
            return Err(Error::InvalidKey {
                index: idx.int64_value(&[i]) as usize,
                generation: keys.generations.int64_value(&[i]) as u64,
                tag: self.config.key_tag(),
            });
        }
        if s[2] != 1.0 {
            let position = first_false(&p_ok);
            return Err(Error::InvalidPriority {
                position,
                value: p64.double_value(&[position as i64]),
                max: MAX_PRIORITY,
            });
        }
        let applied = s[3] as usize;
        if applied > 0 {
            self.apply_update(idx, &fresh, &stored(&self.config, &p64, self.tree.kind));
            self.running_max = self.running_max.max(self.config.stored_priority(s[4]));
        }
        Ok(UpdateReport {
            applied,
            stale: b as usize - applied,
        })
    }

    /// Last-wins among fresh entries, with no host read and no data-dependent shape: sort by
    /// (index, fresh, position), so that each index's run ends with its last fresh entry (if
    /// any); every entry of a run then writes the run's final value (the current leaf if the
    /// run holds no fresh entry), so duplicate writes agree.
    fn apply_update(&mut self, idx: &Tensor, fresh: &Tensor, values: &Tensor) {
        let b = idx.size()[0];
        let device = self.device;
        let position = Tensor::arange(b, (Kind::Int64, device));
        let order_key = idx * (2 * b) + fresh.to_kind(Kind::Int64) * b + &position;
        let (_, perm) = order_key.sort_stable(true, 0, false);
        let sorted_idx = idx.index_select(0, &perm);
        let sorted_fresh = fresh.index_select(0, &perm);
        let sorted_values = values.index_select(0, &perm);
        // Last entry of each run of equal indices.
        let next_differs = if b > 1 {
            sorted_idx
                .narrow(0, 0, b - 1)
                .not_equal_tensor(&sorted_idx.narrow(0, 1, b - 1))
        } else {
            Tensor::zeros([0], (Kind::Bool, device))
        };
        let is_last = Tensor::cat(&[next_differs, Tensor::ones([1], (Kind::Bool, device))], 0);
        let candidates = position.where_scalarother(&is_last, b);
        let (run_end, _) = candidates.flip([0]).cummin(0);
        let run_end = run_end.flip([0]);
        let run_value = sorted_values.index_select(0, &run_end);
        let run_fresh = sorted_fresh.index_select(0, &run_end);
        let current = self.tree.leaves().index_select(0, &sorted_idx);
        let value = run_value.where_self(&run_fresh, &current);
        self.tree.set_leaves(&sorted_idx, &value);
    }
}

/// Saves the checkpoint format of [`crate::checkpoint`], everything copied from the device
/// (the leaves as f64: an f32 tree's are exact in it).
impl Checkpoint for DeviceBuffer {
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        let words = |t: &Tensor| -> Result<Vec<[u8; 8]>> {
            let bytes = host_bytes(t)?;
            Ok((bytes.chunks_exact(8))
                .map(|b| b.try_into().expect("8 bytes"))
                .collect())
        };
        let priorities = words(&self.leaf_priorities().to_kind(Kind::Double))?
            .into_iter()
            .map(f64::from_le_bytes)
            .collect();
        let generations = (words(&self.generations)?.into_iter())
            .map(|b| match i64::from_le_bytes(b) {
                g if g < 0 => NO_ITEM,
                g => g as u64,
            })
            .collect();
        let columns = (self.columns.iter())
            .map(|c| host_bytes(c).map(Cow::Owned))
            .collect::<Result<Vec<_>>>()?;
        let snapshot = Snapshot {
            config: &self.config,
            inserted: self.inserted,
            len: self.len(),
            running_max: self.running_max,
            priorities,
            generations: Cow::Owned(generations),
            columns,
            rate_counts: None,
            version_floor: None,
            draws: None,
            alpha: self.config.alpha(),
            raw: None,
        };
        crate::checkpoint::write(&snapshot, dir, options)
    }
}

impl DeviceBuffer {
    /// Load the checkpoint at `dir` onto `device` with nodes of `precision`, checked against
    /// `options`, with its user map; as [`crate::Load::load_with`]. A checkpoint of a
    /// buffer that was cleared (some slots written and then emptied) is
    /// [`CheckpointErrorKind::Mismatch`](crate::CheckpointErrorKind): a `DeviceBuffer`
    /// holds every slot it has written.
    pub fn load_with<P: AsRef<Path>>(
        dir: P,
        options: &LoadOptions,
        device: Device,
        precision: Precision,
    ) -> Result<Loaded<DeviceBuffer>> {
        let dir = dir.as_ref();
        let plan = Plan::open(dir, options)?;
        let state = plan.read_state()?;
        let capacity = plan.config.capacity();
        if state.len as u64 != state.inserted.min(capacity as u64) {
            return Err(Error::Checkpoint {
                kind: crate::CheckpointErrorKind::Mismatch,
                path: dir.display().to_string(),
                detail: format!(
                    "{} items held after {} inserts: a cleared buffer, which a DeviceBuffer cannot hold",
                    state.len, state.inserted
                ),
            });
        }
        // A rate limit saved by a CPU buffer is not held here (its counts stay in the files).
        let config = plan.config.clone().without_rate_limit();
        let mut buffer = DeviceBuffer::new(config, device, precision)?;
        for (c, column) in buffer.columns.iter_mut().enumerate() {
            *column = column_from(&plan, c, device)?;
        }
        let generations: Vec<i64> = (state.generations.iter())
            .map(|&g| if g == NO_ITEM { -1 } else { g as i64 })
            .collect();
        let priorities = Tensor::from_slice(&state.priorities).to_device(device);
        buffer.generations = Tensor::from_slice(&generations).to_device(device);
        let all = Tensor::arange(capacity as i64, (Kind::Int64, device));
        buffer.write_leaves_and_rebuild_all(&all, &priorities);
        buffer.inserted = state.inserted;
        buffer.running_max = state.running_max;
        Ok(Loaded {
            buffer,
            user: state.user,
        })
    }

    /// [`Self::load_with`] with no checks beyond the checkpoint's own.
    pub fn load<P: AsRef<Path>>(dir: P, device: Device, precision: Precision) -> Result<Self> {
        Self::load_with(dir, &LoadOptions::default(), device, precision).map(|l| l.buffer)
    }
}
