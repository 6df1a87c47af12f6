//! Shared by the benches: the textbook baseline and seeded inputs.
//!
//! The baseline is what most RL libraries' cores do (OpenAI baselines' SegmentTree, cpprb's
//! and tianshou's sum trees): a binary tree over a power-of-two array, one-at-a-time
//! branchy descent, parents recomputed from both children on update.

pub mod round_trip;

use rand::{rngs::SmallRng, Rng, SeedableRng};

pub fn rng() -> SmallRng {
    SmallRng::seed_from_u64(0x5eed)
}

/// Random priorities in (0, 1].
pub fn priorities(n: usize, rng: &mut SmallRng) -> Vec<f64> {
    (0..n).map(|_| 1.0 - rng.random::<f64>()).collect()
}

pub struct BinarySumTree {
    leaves: usize,
    nodes: Vec<f64>,
}

impl BinarySumTree {
    pub fn new(n: usize) -> Self {
        let leaves = n.next_power_of_two();
        BinarySumTree {
            leaves,
            nodes: vec![0.0; 2 * leaves],
        }
    }

    pub fn set(&mut self, i: usize, p: f64) {
        let mut idx = i + self.leaves;
        self.nodes[idx] = p;
        idx /= 2;
        while idx >= 1 {
            self.nodes[idx] = self.nodes[2 * idx] + self.nodes[2 * idx + 1];
            idx /= 2;
        }
    }

    pub fn get(&self, i: usize) -> f64 {
        self.nodes[i + self.leaves]
    }

    pub fn total(&self) -> f64 {
        self.nodes[1]
    }

    pub fn find_prefix(&self, mut x: f64) -> usize {
        let mut idx = 1;
        while idx < self.leaves {
            let left = self.nodes[2 * idx];
            if x < left {
                idx *= 2;
            } else {
                x -= left;
                idx = 2 * idx + 1;
            }
        }
        idx - self.leaves
    }
}

/// The baseline buffer: the binary tree plus one contiguous f32 array per column.
pub struct BaselineBuffer {
    pub tree: BinarySumTree,
    capacity: usize,
    cursor: usize,
    len: usize,
    max_priority: f64,
    shapes: Vec<usize>,
    columns: Vec<Vec<f32>>,
}

impl BaselineBuffer {
    pub fn new(capacity: usize, shapes: &[usize]) -> Self {
        BaselineBuffer {
            tree: BinarySumTree::new(capacity),
            capacity,
            cursor: 0,
            len: 0,
            max_priority: 1.0,
            shapes: shapes.to_vec(),
            columns: shapes.iter().map(|s| vec![0.0; s * capacity]).collect(),
        }
    }

    pub fn insert_batch(&mut self, columns: &[&[f32]], items: usize) {
        for item in 0..items {
            let slot = self.cursor;
            for ((dst, src), &s) in self.columns.iter_mut().zip(columns).zip(&self.shapes) {
                dst[slot * s..(slot + 1) * s].copy_from_slice(&src[item * s..(item + 1) * s]);
            }
            self.tree.set(slot, self.max_priority);
            self.cursor = (self.cursor + 1) % self.capacity;
            self.len = (self.len + 1).min(self.capacity);
        }
    }

    pub fn sample(
        &self,
        batch: usize,
        rng: &mut SmallRng,
        idx: &mut Vec<usize>,
        out: &mut [Vec<f32>],
    ) {
        let total = self.tree.total();
        let segment = total / batch as f64;
        idx.clear();
        for b in 0..batch {
            let x = (b as f64 + rng.random::<f64>()) * segment;
            idx.push(self.tree.find_prefix(x).min(self.len - 1));
        }
        for ((dst, src), &s) in out.iter_mut().zip(&self.columns).zip(&self.shapes) {
            dst.clear();
            for &i in idx.iter() {
                dst.extend_from_slice(&src[i * s..(i + 1) * s]);
            }
        }
    }

    pub fn update(&mut self, idx: &[usize], priorities: &[f64]) {
        for (&i, &p) in idx.iter().zip(priorities) {
            self.max_priority = self.max_priority.max(p);
            self.tree.set(i, p);
        }
    }
}

pub fn quick_criterion() -> criterion::Criterion {
    criterion::Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(1000))
        .sample_size(20)
}
