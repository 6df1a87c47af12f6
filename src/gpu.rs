//! Batch sampling on a tch device (cargo feature `tch`, DESIGN.md section 9): for learners
//! whose networks live on a GPU and who want a sampled batch without a host round trip.
//!
//! Two buffers:
//! - [`DeviceBuffer`]: everything on the device. The K-ary sum tree is one tensor per level
//!   (`sums[0]` is the root, `sums[depth]` the leaves), with a companion tree of positive
//!   minima (`mins`, `+inf` where a subtree holds no positive priority) for the global
//!   importance-weight normalization; the columns are `[capacity, shape]` tensors; a
//!   generation per slot makes keys. Sampling descends the tree level-synchronously for the
//!   whole batch: gather the K children of the B current nodes (`[B, K]`), take their
//!   cumulative sums, count the positive children whose prefix is passed, step down. There is
//!   no per-item host loop and no host round trip except one 8-byte read of the total (to
//!   refuse an empty tree, as the CPU buffers do). Updates write the leaves and recompute only
//!   the touched parents, level by level (`B x K` work per level, not the whole tree); a level
//!   with no more nodes than B (the top of the tree) is recomputed whole, which is cheaper
//!   than gathering B rows of it.
//! - [`HybridBuffer`]: the CPU concurrent buffer's tree chooses the indices; the columns live
//!   on the device; per batch only the B indices travel to the device.
//!
//! Precision ([`Precision`]): nodes are f64 by default, as in the CPU tree, so the sampling
//! distribution matches it to f64 rounding. With f32 nodes each level's prefix sums carry a
//! relative error of about `K * 2^-24`: an item's probability is off by that much relative
//! to the total (for N = 2^22 a priority below about 1e-7 of the total may be under- or
//! over-sampled by a visible factor), and a priority below f32's range becomes 0 (never
//! sampled). Stored priorities are exponentiated (`^alpha`) in f64 before the cast.
//!
//! Robustness (as the CPU tree): the descent clamps each target into `[0, total)` and, at
//! every level, picks the child among the *positive* ones only (the `(c+1)`-th positive child
//! after `c` passed prefixes), so a zero-priority item or an index past the end is never
//! returned, whatever the rounding of the cumulative sums (a GPU scan does not add in a fixed
//! order).
//!
//! Semantics follow [`crate::ReplayBuffer`] (keys with generations, stale updates dropped,
//! duplicate keys: last wins, alpha on the way in, beta on the weights, running-max or
//! live-max default priority), with two differences, both documented on the methods: keys
//! are tensors ([`DeviceKeys`]), and a batch insert's evicted items do not count for
//! [`DefaultPriority::LiveMax`](crate::DefaultPriority::LiveMax).
//!
//! ```no_run
//! use kary_replay::gpu::{DeviceBuffer, Precision};
//! use kary_replay::{Config, DType, SampleMode, Schema};
//! use tch::{Device, Kind, Tensor};
//!
//! let device = Device::cuda_if_available();
//! let schema = Schema::new().column("obs", DType::F32, 4);
//! let mut buffer = DeviceBuffer::new(Config::builder(1 << 20, schema).build()?, device, Precision::F64)?;
//! let obs = Tensor::rand([256, 4], (Kind::Float, device));
//! buffer.insert_batch(&[obs], None)?;
//! let batch = buffer.sample(64, 0.4, SampleMode::Stratified)?;
//! let td = batch.weights.abs() + 0.01; // |delta| + eps from your loss
//! let report = buffer.update_priorities(&batch.keys, &td)?;
//! assert_eq!(report.applied, 64);
//! # Ok::<(), kary_replay::Error>(())
//! ```

use tch::{Device, Kind, Tensor};

use crate::buffer::check_beta;
use crate::{
    ConcurrentBuffer, Config, DType, DefaultPriority, Error, Key, Result, SampleBatch, SampleMode,
    Schema, UpdateReport, WeightNormalization, MAX_PRIORITY,
};

/// The floating-point type of the device tree's nodes (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f64 nodes: the CPU tree's precision.
    #[default]
    F64,
    /// f32 nodes: half the memory and faster on consumer GPUs; see the module doc for the
    /// effect on the distribution.
    F32,
}

impl Precision {
    fn kind(self) -> Kind {
        match self {
            Precision::F64 => Kind::Double,
            Precision::F32 => Kind::Float,
        }
    }
}

/// The tensor element type of a column type.
pub fn kind_of(dtype: DType) -> Kind {
    match dtype {
        DType::U8 => Kind::Uint8,
        DType::I32 => Kind::Int,
        DType::I64 => Kind::Int64,
        DType::F32 => Kind::Float,
        DType::F64 => Kind::Double,
        DType::Bool => Kind::Bool,
    }
}

/// Keys of a [`DeviceBuffer`] as two `i64` tensors of equal length on its device.
#[derive(Debug)]
pub struct DeviceKeys {
    /// Slot indices.
    pub indices: Tensor,
    /// Generations (insertion numbers) of the items the keys name.
    pub generations: Tensor,
}

impl DeviceKeys {
    /// The keys on the host.
    pub fn to_host(&self) -> Vec<Key> {
        let indices =
            Vec::<i64>::try_from(&self.indices.to_device(Device::Cpu)).unwrap_or_default();
        let generations =
            Vec::<i64>::try_from(&self.generations.to_device(Device::Cpu)).unwrap_or_default();
        indices
            .iter()
            .zip(&generations)
            .map(|(&i, &g)| Key {
                index: i as usize,
                generation: g as u64,
            })
            .collect()
    }

    /// Host keys moved to `device`.
    pub fn from_host(keys: &[Key], device: Device) -> DeviceKeys {
        let indices: Vec<i64> = keys.iter().map(|k| k.index as i64).collect();
        let generations: Vec<i64> = keys.iter().map(|k| k.generation as i64).collect();
        DeviceKeys {
            indices: Tensor::from_slice(&indices).to_device(device),
            generations: Tensor::from_slice(&generations).to_device(device),
        }
    }
}

/// A batch sampled on the device: every tensor is on the buffer's device.
#[derive(Debug)]
pub struct DeviceSample {
    /// Keys for [`DeviceBuffer::update_priorities`].
    pub keys: DeviceKeys,
    /// Normalized importance weights in `(0, 1]` (`[B]`, node precision).
    pub weights: Tensor,
    /// Sampling probabilities `p_i / total` (`[B]`, node precision).
    pub probabilities: Tensor,
    /// Stored priorities (`[B]`, node precision).
    pub priorities: Tensor,
    /// The gathered columns, in schema order, each `[B, shape]`.
    pub columns: Vec<Tensor>,
}

/// Checks that `t` lives on `device`, has element type `kind` and the shape `shape`.
fn check_tensor(what: &str, t: &Tensor, device: Device, kind: Kind, shape: &[i64]) -> Result<()> {
    if t.device() != device {
        return Err(tensor_error(format!(
            "{what} is on {:?}, the buffer on {device:?}",
            t.device()
        )));
    }
    if t.kind() != kind {
        return Err(tensor_error(format!(
            "{what} has element type {:?}, expected {kind:?}",
            t.kind()
        )));
    }
    if t.size() != shape {
        return Err(tensor_error(format!(
            "{what} has shape {:?}, expected {shape:?}",
            t.size()
        )));
    }
    Ok(())
}

/// Checks a batch of column tensors against `schema` (one per column, `[M, shape]` or `[M]`
/// for shape 1, the column's element type, on `device`) and returns M.
fn check_columns(schema: &Schema, columns: &[Tensor], device: Device) -> Result<i64> {
    if columns.len() != schema.columns().len() {
        return Err(Error::ColumnCount {
            expected: schema.columns().len(),
            got: columns.len(),
        });
    }
    let m = columns
        .first()
        .map_or(0, |c| c.size().first().copied().unwrap_or(0));
    for (col, spec) in columns.iter().zip(schema.columns()) {
        let shape = if spec.shape == 1 && col.dim() == 1 {
            vec![m]
        } else {
            vec![m, spec.shape as i64]
        };
        let what = format!("column {:?}", spec.name);
        check_tensor(&what, col, device, kind_of(spec.dtype), &shape)?;
    }
    Ok(m)
}

fn tensor_error(message: String) -> Error {
    Error::TensorMismatch(message)
}

/// The K-ary sum tree and minimum tree as per-level tensors.
struct LevelTree {
    k: i64,
    kind: Kind,
    /// `sums[0]` is the root (one node), `sums[depth]` the leaves (padded to a multiple of K).
    sums: Vec<Tensor>,
    /// Positive minima, `+inf` for subtrees without a positive priority.
    mins: Vec<Tensor>,
}

impl LevelTree {
    fn new(capacity: usize, k: usize, kind: Kind, device: Device) -> LevelTree {
        let k = k as i64;
        // Widths bottom-up: leaves, then ceil(width / K) per level, up to one root.
        let mut widths = vec![capacity as i64];
        while *widths.last().unwrap() > 1 {
            let w = *widths.last().unwrap();
            widths.push((w + k - 1) / k);
        }
        if widths.len() == 1 {
            // Capacity 1: a root over one leaf group.
            widths.push(1);
        }
        // widths[0] == 1: the root. Level j >= 1 holds K children for each node of level
        // j - 1 (padding included), so its size is widths[j - 1] * K.
        widths.reverse();
        let sizes: Vec<i64> = (0..widths.len())
            .map(|j| if j == 0 { 1 } else { widths[j - 1] * k })
            .collect();
        LevelTree {
            k,
            kind,
            sums: sizes
                .iter()
                .map(|&n| Tensor::zeros([n], (kind, device)))
                .collect(),
            mins: sizes
                .iter()
                .map(|&n| Tensor::full([n], f64::INFINITY, (kind, device)))
                .collect(),
        }
    }

    fn depth(&self) -> usize {
        self.sums.len() - 1
    }

    fn leaves(&self) -> &Tensor {
        &self.sums[self.depth()]
    }

    /// Write `values` at leaf `slots` and recompute the touched parents level by level.
    /// Entries with the same slot must carry the same value (callers make them so).
    fn set_leaves(&mut self, slots: &Tensor, values: &Tensor) {
        let d = self.depth();
        let values = values.to_kind(self.kind);
        let _ = self.sums[d].index_copy_(0, slots, &values);
        let positive = values.gt(0.0);
        let _ = self.mins[d].index_copy_(
            0,
            slots,
            &values.where_scalarother(&positive, f64::INFINITY),
        );
        let b = slots.size()[0];
        let mut idx = slots.shallow_clone();
        for j in (0..d).rev() {
            // A level with no more nodes than the batch is cheaper to recompute whole than
            // to gather B rows of it (and most of it is touched anyway): the upper levels.
            let nodes = self.sums[j + 1].size()[0] / self.k;
            if nodes <= b {
                self.recompute_level(j);
                continue;
            }
            let parents = idx.floor_divide_scalar(self.k);
            let rows = self.sums[j + 1]
                .view([-1, self.k])
                .index_select(0, &parents);
            let sums = rows.sum_dim_intlist(1, false, self.kind);
            let _ = self.sums[j].index_copy_(0, &parents, &sums);
            let min_rows = self.mins[j + 1]
                .view([-1, self.k])
                .index_select(0, &parents);
            let _ = self.mins[j].index_copy_(0, &parents, &min_rows.amin(1, false));
            idx = parents;
        }
    }

    /// Recompute every level from the leaves (all nodes, not only touched ones).
    fn rebuild(&mut self) {
        for j in (0..self.depth()).rev() {
            self.recompute_level(j);
        }
    }

    /// Recompute all of level `j` from level `j + 1`.
    fn recompute_level(&mut self, j: usize) {
        let sums = self.sums[j + 1]
            .view([-1, self.k])
            .sum_dim_intlist(1, false, self.kind);
        let mins = self.mins[j + 1].view([-1, self.k]).amin(1, false);
        let n = sums.size()[0];
        let mut stored_sums = self.sums[j].narrow(0, 0, n);
        stored_sums.copy_(&sums);
        let mut stored_mins = self.mins[j].narrow(0, 0, n);
        stored_mins.copy_(&mins);
    }

    /// Leaf indices for prefix targets (`[B]`, node precision, already in `[0, total)`).
    fn descend(&self, targets: &Tensor) -> Tensor {
        let device = targets.device();
        let b = targets.size()[0];
        let mut x = targets.shallow_clone();
        let mut node = Tensor::zeros([b], (Kind::Int64, device));
        for j in 1..=self.depth() {
            // The K children of each current node: [B, K].
            let rows = self.sums[j].view([-1, self.k]).index_select(0, &node);
            let positive = rows.gt(0.0);
            let csum = rows.cumsum(1, self.kind);
            // Keep x inside this node's range, below its total (float drift between levels).
            let row_total = csum.narrow(1, self.k - 1, 1);
            let below = row_total.nextafter(&Tensor::zeros_like(&row_total));
            let xs = x.unsqueeze(1).minimum(&below).clamp_min(0.0);
            // c = positive children whose whole prefix lies at or below x; the chosen child
            // is the (c + 1)-th positive one, so it is always positive (also where a GPU
            // scan's rounding makes the prefixes non-monotone).
            let passed = csum.le_tensor(&xs).logical_and(&positive);
            let npos = positive.sum_dim_intlist(1, true, Kind::Int64);
            let c = passed
                .sum_dim_intlist(1, true, Kind::Int64)
                .minimum(&(&npos - 1))
                .clamp_min(0);
            // Positives among children 0..=i; `values.searchsorted(sorted)`: the receiver
            // holds the values.
            let rank = positive.cumsum(1, Kind::Int64);
            let child = (&c + 1)
                .searchsorted(&rank, false, false, "left", None::<Tensor>)
                .clamp_max(self.k - 1);
            // Step down: subtract the prefix before the chosen child.
            let prev = (&child - 1).clamp_min(0);
            let prefix = csum
                .gather(1, &prev, false)
                .where_scalarother(&child.gt(0), 0.0);
            x = (xs - prefix).squeeze_dim(1).clamp_min(0.0);
            node = node * self.k + child.squeeze_dim(1);
        }
        node
    }

    /// How far each stored parent is from its children (sum and minimum), on the host.
    fn check(&self) -> crate::Consistency {
        let mut c = crate::Consistency::default();
        for j in 0..self.depth() {
            let recomputed = self.sums[j + 1]
                .view([-1, self.k])
                .sum_dim_intlist(1, false, self.kind);
            let stored = &self.sums[j].narrow(0, 0, recomputed.size()[0]);
            let diff = (stored - &recomputed).abs().max().double_value(&[]);
            let scale = recomputed.abs().clamp_min(f64::MIN_POSITIVE);
            let rel = ((stored - &recomputed).abs() / scale)
                .max()
                .double_value(&[]);
            c.max_abs_error = c.max_abs_error.max(diff);
            c.max_rel_error = c.max_rel_error.max(rel);
            if diff != 0.0 {
                c.exact = false;
            }
            let mins = self.mins[j + 1].view([-1, self.k]).amin(1, false);
            let stored_mins = self.mins[j].narrow(0, 0, mins.size()[0]);
            if !bool::try_from(mins.eq_tensor(&stored_mins).all()).unwrap_or(false) {
                c.extrema_exact = false;
            }
        }
        c
    }
}

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
    /// An empty buffer for `config` on `device` with nodes of `precision`.
    pub fn new(config: Config, device: Device, precision: Precision) -> Result<DeviceBuffer> {
        let capacity = config.capacity();
        let tree = LevelTree::new(capacity, config.fanout().get(), precision.kind(), device);
        let columns = config
            .schema()
            .columns()
            .iter()
            .map(|c| {
                Tensor::zeros(
                    [capacity as i64, c.shape as i64],
                    (kind_of(c.dtype), device),
                )
            })
            .collect();
        let running_max = config.stored_priority(config.initial_priority());
        Ok(DeviceBuffer {
            generations: Tensor::full([capacity as i64], -1, (Kind::Int64, device)),
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

    /// The stored priority of slot `index` (one host read).
    pub fn priority(&self, index: usize) -> Result<f64> {
        self.check_index(index)?;
        Ok(self.tree.leaves().double_value(&[index as i64]))
    }

    /// The key of the item in slot `index`, if any (one host read).
    pub fn key(&self, index: usize) -> Result<Option<Key>> {
        self.check_index(index)?;
        let g = self.generations.int64_value(&[index as i64]);
        Ok((g >= 0).then_some(Key {
            index,
            generation: g as u64,
        }))
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

    /// Insert `M` items: one tensor per schema column on this device, `[M, shape]` (or `[M]`
    /// when shape is 1) of the column's element type; `priorities` is `None` (default
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
            generations: all_generations.shallow_clone(),
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
            let src = col
                .narrow(0, start, kept)
                .reshape([kept, spec.shape as i64]);
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
                let default = match self.config.default_priority() {
                    DefaultPriority::RunningMax => self.running_max,
                    DefaultPriority::LiveMax => {
                        let zeros = Tensor::zeros([kept], (self.tree.kind, self.device));
                        self.tree.set_leaves(&slots, &zeros);
                        let live = self.tree.leaves().max().double_value(&[]);
                        if live > 0.0 {
                            live
                        } else {
                            self.config.stored_priority(self.config.initial_priority())
                        }
                    }
                };
                Tensor::full([kept], default, (self.tree.kind, self.device))
            }
        };
        self.tree.set_leaves(&slots, &values);
        self.inserted += m as u64;
        Ok(keys)
    }

    /// Leaf indices (`[B]`, i64) for prefix targets (`[B]`, node precision, on this device):
    /// the item `i` with `prefix(i) <= target < prefix(i + 1)`, counting only positive
    /// priorities. Targets are clamped into `[0, total)`. No host read.
    pub fn find_prefix(&self, targets: &Tensor) -> Result<Tensor> {
        let b = targets.size().first().copied().unwrap_or(0);
        check_tensor("targets", targets, self.device, self.tree.kind, &[b])?;
        let total = &self.tree.sums[0];
        let below = total.nextafter(&Tensor::zeros_like(total));
        Ok(self.tree.descend(&targets.minimum(&below).clamp_min(0.0)))
    }

    /// Sample `batch` items (with replacement) proportionally to their stored priorities,
    /// drawing targets with torch's generator on the device (seed it with
    /// `tch::manual_seed`). Everything returned is on the device. One host read: the total,
    /// so that an empty or all-zero tree is refused ([`Error::Empty`],
    /// [`Error::ZeroTotalPriority`]) rather than sampled.
    pub fn sample(&self, batch: usize, beta: f64, mode: SampleMode) -> Result<DeviceSample> {
        if batch == 0 {
            return Err(Error::ZeroBatch);
        }
        check_beta(beta)?;
        if self.is_empty() {
            return Err(Error::Empty);
        }
        let total = self.total_priority();
        if total.is_nan() || total <= 0.0 {
            return Err(Error::ZeroTotalPriority);
        }
        let kind = self.tree.kind;
        let b = batch as i64;
        let u = Tensor::rand([b], (kind, self.device));
        let strata = Tensor::arange(b, (kind, self.device));
        let targets = crate::buffer::sampling_target(mode, strata, u, total, batch);
        let below = f64::from_bits(total.to_bits() - 1);
        let indices = self.tree.descend(&targets.clamp(0.0, below));
        Ok(self.gather(indices, beta, total))
    }

    /// Keys, weights, probabilities and columns of the items at `indices`.
    fn gather(&self, indices: Tensor, beta: f64, total: f64) -> DeviceSample {
        let priorities = self.tree.leaves().index_select(0, &indices);
        let probabilities = &priorities / total;
        let weights = if beta == 0.0 {
            Tensor::ones_like(&priorities)
        } else {
            let reference = match self.config.weight_normalization() {
                WeightNormalization::Global => self.tree.mins[0].shallow_clone(),
                WeightNormalization::Batch => priorities.min(),
            };
            (&priorities / reference).pow_tensor_scalar(-beta)
        };
        DeviceSample {
            keys: DeviceKeys {
                generations: self.generations.index_select(0, &indices),
                indices: indices.shallow_clone(),
            },
            weights,
            probabilities,
            priorities,
            columns: self
                .columns
                .iter()
                .map(|c| c.index_select(0, &indices))
                .collect(),
        }
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
        let gen = &keys.generations;
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
            .eq_tensor(gen)
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
                generation: gen.int64_value(&[i]) as u64,
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

/// The CPU concurrent buffer's tree chooses the indices; the columns live on a device.
///
/// The CPU buffer `T` (any [`ConcurrentBuffer`]) keeps the priorities, keys and the sampling;
/// its own storage holds one byte per item. Per sampled batch only the B indices move to the
/// device, where the columns are gathered. Learners may sample and update from many threads
/// at once (`&self`); inserts take `&mut self`, so an insert never races a sample of the slot
/// it overwrites.
pub struct HybridBuffer<T: ConcurrentBuffer> {
    tree: T,
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
    /// The gathered columns, on the device, each `[B, shape]`.
    pub columns: Vec<Tensor>,
}

impl<T: ConcurrentBuffer> HybridBuffer<T> {
    /// An empty buffer: `config`'s tree settings on the CPU, its schema's columns on `device`.
    pub fn new(config: Config, device: Device) -> Result<HybridBuffer<T>> {
        let schema = config.schema().clone();
        let tree_config =
            Config::builder(config.capacity(), Schema::new().column("tag", DType::U8, 1))
                .fanout(config.fanout().get())
                .alpha(config.alpha())
                .initial_priority(config.initial_priority())
                .weight_normalization(config.weight_normalization())
                .default_priority(config.default_priority())
                .build()?;
        let capacity = config.capacity() as i64;
        let columns = schema
            .columns()
            .iter()
            .map(|c| Tensor::zeros([capacity, c.shape as i64], (kind_of(c.dtype), device)))
            .collect();
        Ok(HybridBuffer {
            tree: T::new(tree_config)?,
            schema,
            device,
            columns,
        })
    }

    /// The CPU buffer holding the tree (for its getters; insert through this type).
    pub fn tree(&self) -> &T {
        &self.tree
    }

    /// The device the columns live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Insert `M` items from device tensors (`[M, shape]`, or `[M]` for shape 1) with
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
        let slots =
            Tensor::arange_start(first + start, first + m, (Kind::Int64, self.device)).remainder(n);
        for ((dst, col), spec) in self
            .columns
            .iter_mut()
            .zip(columns)
            .zip(self.schema.columns())
        {
            let src = col
                .narrow(0, start, kept)
                .reshape([kept, spec.shape as i64]);
            let _ = dst.index_copy_(0, &slots, &src);
        }
        let tags = vec![0u8; m as usize];
        self.tree.insert_batch(&[(&tags[..]).into()], priorities)
    }

    /// Sample on the CPU tree, move the B indices to the device, gather the columns there.
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
        let indices = Tensor::from_slice(&indices).to_device(self.device);
        let columns = self
            .columns
            .iter()
            .map(|c| c.index_select(0, &indices))
            .collect();
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
