//! The actors' and evaluators' policy: a ReLU MLP evaluated in plain Rust from a snapshot
//! of the parameter server's weights, and the board the snapshots are published on.

use std::sync::{Arc, Mutex};

// The actors' and evaluators' policy: a ReLU MLP evaluated in plain Rust from a snapshot of
// the parameter server's weights (row-major [out, in] weights, then biases, per layer), as
// `trainer::Mlp`: a few microseconds per step.

#[derive(Clone, Debug, Default)]
pub struct NativeMlp {
    pub sizes: Vec<usize>,
    pub w: Vec<Vec<f32>>,
    pub b: Vec<Vec<f32>>,
    /// TD3's actor: tanh, then x this scale.
    pub tanh_scale: Option<f32>,
}

/// A NativeMlp's working memory (reused between calls; one per thread).
#[derive(Default)]
pub struct Scratch {
    x: Vec<f32>,
    y: Vec<f32>,
    out: Vec<f32>,
}

impl NativeMlp {
    /// Writes `sizes.last()` outputs into `out`.
    pub fn forward(&self, input: &[f32], out: &mut [f32], scratch: &mut Scratch) {
        let Scratch { x, y, .. } = scratch;
        x.clear();
        x.extend_from_slice(input);
        let layers = self.sizes.len() - 1;
        for layer in 0..layers {
            let (n_in, n_out) = (self.sizes[layer], self.sizes[layer + 1]);
            let last = layer + 1 == layers;
            y.clear();
            for o in 0..n_out {
                let row = &self.w[layer][o * n_in..(o + 1) * n_in];
                let mut acc = self.b[layer][o];
                for (w, v) in row.iter().zip(x.iter()) {
                    acc += w * v;
                }
                if !last {
                    acc = acc.max(0.0);
                } else if let Some(scale) = self.tanh_scale {
                    acc = scale * acc.tanh();
                }
                y.push(acc);
            }
            std::mem::swap(x, y);
        }
        out.copy_from_slice(&x[..out.len()]);
    }

    pub fn outputs(&self) -> usize {
        *self.sizes.last().unwrap()
    }

    /// The index of the largest output (DQN's greedy action; the first on a tie, as
    /// std::max_element).
    pub fn argmax(&self, input: &[f32], scratch: &mut Scratch) -> usize {
        let mut out = std::mem::take(&mut scratch.out);
        out.resize(self.outputs(), 0.0);
        self.forward(input, &mut out, scratch);
        let mut best = 0;
        for (i, &v) in out.iter().enumerate() {
            if v > out[best] {
                best = i;
            }
        }
        scratch.out = out;
        best
    }
}

/// A published policy: the weights and the gradient round they come from.
pub struct Snapshot {
    pub policy: NativeMlp,
    pub round: i64,
}

/// The newest snapshot, swapped under a mutex (readers clone an Arc, nothing more).
#[derive(Default)]
pub struct SnapshotBoard {
    current: Mutex<Option<Arc<Snapshot>>>,
}

impl SnapshotBoard {
    pub fn publish(&self, s: Snapshot) {
        *self.current.lock().unwrap() = Some(Arc::new(s));
    }
    pub fn get(&self) -> Arc<Snapshot> {
        self.current
            .lock()
            .unwrap()
            .clone()
            .expect("a policy is published before any thread starts")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_mlp_computes_relu_layers_and_tanh() {
        // 2-2-1: hidden = relu([1 -1; 0.5 0.5] x + [0, -1]), out = [2 3] h + 0.5
        let mut m = NativeMlp {
            sizes: vec![2, 2, 1],
            w: vec![vec![1.0, -1.0, 0.5, 0.5], vec![2.0, 3.0]],
            b: vec![vec![0.0, -1.0], vec![0.5]],
            tanh_scale: None,
        };
        let mut s = Scratch::default();
        let mut out = [0.0f32];
        m.forward(&[3.0, 1.0], &mut out, &mut s);
        // h = relu([2, 1]) = [2, 1]; out = 4 + 3 + 0.5
        assert_eq!(out[0], 7.5);
        m.forward(&[0.0, 1.0], &mut out, &mut s);
        // h = relu([-1, -0.5]) = [0, 0]
        assert_eq!(out[0], 0.5);
        m.tanh_scale = Some(2.0);
        m.forward(&[3.0, 1.0], &mut out, &mut s);
        assert_eq!(out[0], 2.0 * 7.5f32.tanh());
        let q = NativeMlp {
            sizes: vec![1, 3],
            w: vec![vec![1.0, 3.0, 2.0]],
            b: vec![vec![0.0; 3]],
            tanh_scale: None,
        };
        assert_eq!(q.argmax(&[1.0], &mut s), 1);
        assert_eq!(q.argmax(&[-1.0], &mut s), 0);
    }
}
