//! The sequence buffer against a naive model that keeps every step ever written and builds
//! each window's stacked columns, next observation and n-step return from scratch; plus the
//! peers' reported window bugs as named regressions, the sampling distribution, bad input,
//! and a many-lane stress with exact sums at rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kary_replay::sequence::{
    sequence_priorities, Padding, Partial, SequenceBatch, SequenceBuffer, SequenceConfig,
};
use kary_replay::{ColumnSlice, DType, Error, SampleMode, Schema, Xoshiro256};
use proptest::prelude::*;

/// obs: f32 x 2 = (lane, step); action: i64 = step; reward: f32.
fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 2)
        .column("action", DType::I64, [])
        .column("reward", DType::F32, [])
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    steps: usize,
    window: usize,
    period: usize,
    frames: usize,
    nstep: Option<(usize, f64)>,
    partial: Partial,
    padding: Padding,
}

fn config(lanes: usize, s: Shape) -> SequenceConfig {
    let mut b = SequenceConfig::builder(lanes, s.steps, schema())
        .window(s.window)
        .period(s.period)
        .partial(s.partial)
        .padding(s.padding)
        .next_of("obs")
        .key_tag(7);
    if s.frames > 1 {
        b = b.stack("obs", s.frames);
    }
    if let Some((n, gamma)) = s.nstep {
        b = b.nstep(n, gamma, "reward");
    }
    b.build().expect("a valid configuration")
}

/// What the model remembers of one lane position.
#[derive(Debug, Clone, Copy)]
struct Row {
    obs: [f32; 2],
    action: i64,
    reward: f32,
    episode: usize,
}

#[derive(Debug, Clone)]
struct Episode {
    start: u64,
    /// Last step and whether it terminated (`None` while under way).
    end: Option<(u64, bool)>,
}

/// The naive model of one lane: every row ever written at its lane position (the same
/// positions the writer uses: an episode starts on a multiple of the period, its final
/// observation follows its last step).
#[derive(Debug, Default, Clone)]
struct LaneModel {
    rows: HashMap<u64, Row>,
    episodes: Vec<Episode>,
    next: u64,
    last_written: Option<u64>,
}

struct Model {
    shape: Shape,
    lanes: Vec<LaneModel>,
}

/// One expected window, built from scratch.
#[derive(Debug, PartialEq)]
struct Expected {
    len: usize,
    obs: Vec<f32>,
    action: Vec<i64>,
    reward: Vec<f32>,
    next_obs: Vec<f32>,
    nstep: Option<(f64, f64)>,
}

impl Model {
    fn push(&mut self, lane: usize, reward: f32) {
        let l = &mut self.lanes[lane];
        if l.episodes.last().is_none_or(|e| e.end.is_some()) {
            l.episodes.push(Episode {
                start: l.next,
                end: None,
            });
        }
        let p = l.next;
        l.rows.insert(
            p,
            Row {
                obs: [lane as f32, p as f32],
                action: p as i64,
                reward,
                episode: l.episodes.len() - 1,
            },
        );
        l.last_written = Some(p);
        l.next += 1;
    }

    fn end(&mut self, lane: usize, truncated: bool) {
        let period = self.shape.period as u64;
        let l = &mut self.lanes[lane];
        let last = l.next - 1;
        let e = l.episodes.len() - 1;
        l.episodes[e].end = Some((last, !truncated));
        l.rows.insert(
            l.next,
            Row {
                obs: [-1.0 - lane as f32, l.next as f32],
                action: 0,
                reward: 0.0,
                episode: e,
            },
        );
        l.last_written = Some(l.next);
        l.next = (l.next + 1).div_ceil(period) * period;
    }

    /// The windows that should be sampleable now: `(lane, start) -> expected`.
    fn live(&self) -> HashMap<(usize, u64), Expected> {
        let s = self.shape;
        let (w, k, t) = (s.window as u64, s.frames as u64, s.steps as u64);
        // How far a window reads ahead: its steps, or the n-step return's.
        let reach = s.nstep.map_or(w, |(n, _)| (n as u64).max(w));
        let mut out = HashMap::new();
        for (lane, l) in self.lanes.iter().enumerate() {
            let Some(last_written) = l.last_written else {
                continue;
            };
            for (ei, e) in l.episodes.iter().enumerate() {
                let last = e.end.map_or(u64::MAX, |(last, _)| last);
                let mut start = e.start;
                while start <= last.min(last_written) {
                    let left = e.end.map_or(u64::MAX, |(last, _)| last + 1 - start);
                    let len = left.min(w);
                    // Complete once the row of its next observation is written.
                    let complete = start + left.min(reach) <= last_written;
                    let kept = len == w || s.partial == Partial::Keep;
                    // Retired once the writer wrote a position p with start <= p - T + k - 1.
                    let retired = last_written + k > t && start + t < last_written + k;
                    if complete && kept && !retired {
                        let to_end = left.min(reach);
                        out.insert((lane, start), self.expected(lane, ei, start, len, to_end));
                    }
                    start += s.period as u64;
                }
            }
        }
        out
    }

    fn expected(&self, lane: usize, ei: usize, start: u64, len: u64, to_end: u64) -> Expected {
        let s = self.shape;
        let l = &self.lanes[lane];
        let e = &l.episodes[ei];
        let k = s.frames as u64;
        let frame = |t: u64, j: u64| -> Option<&Row> {
            let want = (t + j).checked_sub(k - 1);
            match want {
                Some(q) if q >= e.start => Some(&l.rows[&q]),
                _ if s.padding == Padding::Zeros => None,
                _ => Some(&l.rows[&e.start]),
            }
        };
        let mut x = Expected {
            len: len as usize,
            obs: vec![],
            action: vec![],
            reward: vec![],
            next_obs: vec![],
            nstep: None,
        };
        for i in 0..s.window as u64 {
            for j in 0..k {
                let row = (i < len).then(|| frame(start + i, j)).flatten();
                x.obs.extend(row.map_or([0.0, 0.0], |r| r.obs));
            }
            let row = (i < len).then(|| &l.rows[&(start + i)]);
            x.action.push(row.map_or(0, |r| r.action));
            x.reward.push(row.map_or(0.0, |r| r.reward));
        }
        let m = s.nstep.map_or(len, |(n, _)| (n as u64).min(to_end));
        for j in 0..k {
            x.next_obs
                .extend(frame(start + m, j).map_or([0.0, 0.0], |r| r.obs));
        }
        if let Some((n, gamma)) = s.nstep {
            let (mut ret, mut power) = (0.0, 1.0);
            for i in 0..m {
                ret += power * f64::from(l.rows[&(start + i)].reward);
                power *= gamma;
            }
            // Terminated within the n steps: the return reaches the episode's end.
            let terminal = e
                .end
                .is_some_and(|(last, term)| term && start + m == last + 1);
            let discount = if terminal && m <= n as u64 {
                0.0
            } else {
                power
            };
            x.nstep = Some((ret, discount));
        }
        // Every row the window read belongs to its episode.
        for q in start..start + m {
            assert_eq!(l.rows[&q].episode, ei);
        }
        x
    }
}

/// Window `b` of a sampled batch, in the model's terms.
fn got(buffer: &SequenceBuffer, out: &SequenceBatch, b: usize) -> Expected {
    let c = buffer.config();
    let (w, k) = (
        c.window(),
        out.columns[0].len() / (out.keys.len() * c.window() * 2),
    );
    let obs = out.columns[0].as_f32().unwrap();
    let action = out.columns[1].as_i64().unwrap();
    let reward = out.columns[2].as_f32().unwrap();
    let next = out.next[0].as_f32().unwrap();
    Expected {
        len: out.lengths[b],
        obs: obs[b * w * k * 2..(b + 1) * w * k * 2].to_vec(),
        action: action[b * w..(b + 1) * w].to_vec(),
        reward: reward[b * w..(b + 1) * w].to_vec(),
        next_obs: next[b * k * 2..(b + 1) * k * 2].to_vec(),
        nstep: (!out.returns.is_empty()).then(|| (out.returns[b], out.discounts[b])),
    }
}

/// Check the buffer against the model: the sampleable windows leaf by leaf, then a sample.
fn check(buffer: &SequenceBuffer, model: &Model, rng: &mut Xoshiro256) {
    let live = model.live();
    let mut seen = 0;
    for leaf in 0..buffer.config().capacity() {
        if let Some(key) = buffer.key(leaf).unwrap() {
            let window = buffer.window_of(key).unwrap();
            assert!(
                live.contains_key(&window),
                "leaf {leaf} holds {window:?}, which the model retired or never completed"
            );
            assert!(buffer.priority(leaf).unwrap() > 0.0);
            seen += 1;
        } else {
            assert_eq!(
                buffer.priority(leaf).unwrap(),
                0.0,
                "leaf {leaf} holds no window but a priority"
            );
        }
    }
    assert_eq!(seen, live.len(), "sampleable windows");
    assert_eq!(buffer.len(), live.len());
    if live.is_empty() {
        let mut out = SequenceBatch::default();
        let err = buffer.sample_into(4, 0.4, SampleMode::Stratified, rng, &mut out);
        assert!(
            matches!(err, Err(Error::Empty | Error::ZeroTotalPriority)),
            "{err:?}"
        );
        return;
    }
    let mut out = SequenceBatch::default();
    buffer
        .sample_into(64, 0.4, SampleMode::Stratified, rng, &mut out)
        .unwrap();
    assert_eq!(out.keys.len(), 64);
    for b in 0..64 {
        let window = buffer.window_of(out.keys[b]).unwrap();
        let want = &live[&window];
        let w = buffer.config().window();
        assert_eq!(&got(buffer, &out, b), want, "window {window:?}");
        assert_eq!(
            out.mask[b * w..(b + 1) * w].iter().filter(|&&m| m).count(),
            want.len
        );
        assert!(out.weights[b] > 0.0 && out.weights[b] <= 1.0);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Push { lane: usize, reward: i8 },
    End { lane: usize, truncated: bool },
}

fn shape_strategy() -> impl Strategy<Value = Shape> {
    (
        (1usize..5, 1usize..4, 1usize..4),
        (any::<bool>(), 1usize..7),
        (any::<bool>(), any::<bool>(), 0usize..3),
    )
        .prop_map(
            |((window, period, frames), (nstep, n), (drop, zeros, extra))| {
                // The smallest ring that holds a window's reach and its look-back, a multiple
                // of the period, plus a little. n may reach past the window.
                let reach = if nstep { window.max(n) } else { window };
                let steps = (reach + frames).div_ceil(period) * period + extra * period;
                Shape {
                    steps,
                    window,
                    period,
                    frames,
                    nstep: nstep.then_some((n, 0.5)),
                    partial: if drop { Partial::Drop } else { Partial::Keep },
                    padding: if zeros {
                        Padding::Zeros
                    } else {
                        Padding::Repeat
                    },
                }
            },
        )
}

fn ops_strategy(lanes: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0..lanes, -4i8..5).prop_map(|(lane, reward)| Op::Push { lane, reward }),
            1 => (0..lanes, any::<bool>()).prop_map(|(lane, truncated)| Op::End { lane, truncated }),
        ],
        1..160,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random episode lengths, terminals, truncations, ring wraps, three lanes: after every
    /// few operations the sampleable windows are the model's, and a sample's windows equal
    /// the model's key for key.
    #[test]
    fn windows_equal_the_naive_model(shape in shape_strategy(), ops in ops_strategy(3), seed in any::<u64>()) {
        let buffer = SequenceBuffer::new(config(3, shape)).unwrap();
        let mut model = Model { shape, lanes: vec![LaneModel::default(); 3] };
        let mut rng = Xoshiro256::new(seed);
        let mut writers: Vec<_> = (0..3).map(|l| buffer.lane(l).unwrap()).collect();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Push { lane, reward } => {
                    let p = writers[lane].position();
                    let obs = [lane as f32, p as f32];
                    let (action, r) = ([p as i64], [f32::from(reward)]);
                    let cols: [ColumnSlice<'_>; 3] = [(&obs[..]).into(), (&action[..]).into(), (&r[..]).into()];
                    writers[lane].push(&cols).unwrap();
                    model.push(lane, f32::from(reward));
                }
                Op::End { lane, truncated } => {
                    let p = writers[lane].position();
                    let obs = [-1.0 - lane as f32, p as f32];
                    let r = writers[lane].end_episode(&[(&obs[..]).into()], truncated);
                    if writers[lane].in_episode() || r.is_err() {
                        prop_assert!(matches!(r, Err(Error::InvalidSequence(_))));
                    } else {
                        model.end(lane, truncated);
                    }
                }
            }
            prop_assert_eq!(writers[i % 3].position(), model.lanes[i % 3].next);
            if i % 7 == 0 {
                check(&buffer, &model, &mut rng);
            }
        }
        check(&buffer, &model, &mut rng);
        prop_assert!(buffer.consistency().exact);
    }
}

fn push(lane: &mut kary_replay::sequence::LaneWriter<&SequenceBuffer>, l: usize, reward: f32) {
    let p = lane.position();
    let obs = [l as f32, p as f32];
    lane.push(&[
        (&obs[..]).into(),
        (&[p as i64][..]).into(),
        (&[reward][..]).into(),
    ])
    .unwrap();
}

fn end(lane: &mut kary_replay::sequence::LaneWriter<&SequenceBuffer>, truncated: bool) {
    let obs = [-1.0f32, lane.position() as f32];
    lane.end_episode(&[(&obs[..]).into()], truncated).unwrap();
}

/// n-step returns and discounts, written out by hand: rewards 1, 2, 4, 8 then a terminal,
/// gamma 0.5, n = 3.
#[test]
fn nstep_arithmetic_by_hand() {
    let shape = Shape {
        steps: 32,
        window: 3,
        period: 1,
        frames: 1,
        nstep: Some((3, 0.5)),
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for r in [1.0, 2.0, 4.0, 8.0] {
        push(&mut lane, 0, r);
    }
    end(&mut lane, false);
    drop(lane);
    let want = [
        (1.0 + 1.0 + 1.0, 0.125),
        (2.0 + 2.0 + 2.0, 0.0),
        (4.0 + 4.0, 0.0),
        (8.0, 0.0),
    ];
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(1);
    buffer
        .sample_into(64, 0.0, SampleMode::Independent, &mut rng, &mut out)
        .unwrap();
    for b in 0..64 {
        let (_, start) = buffer.window_of(out.keys[b]).unwrap();
        assert_eq!((out.returns[b], out.discounts[b]), want[start as usize]);
        // The next observation: step start + 3, or the final row.
        let next = out.next[0].as_f32().unwrap()[b * 2 + 1];
        assert_eq!(next, (start + 3).min(4) as f32);
    }
    // Truncated instead: the last windows bootstrap.
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for r in [1.0, 2.0, 4.0, 8.0] {
        push(&mut lane, 0, r);
    }
    end(&mut lane, true);
    drop(lane);
    buffer
        .sample_into(64, 0.0, SampleMode::Independent, &mut rng, &mut out)
        .unwrap();
    for b in 0..64 {
        let (_, start) = buffer.window_of(out.keys[b]).unwrap();
        let m = 3.min(4 - start) as usize;
        assert_eq!(out.discounts[b], [1.0, 0.5, 0.25, 0.125][m]);
    }
}

/// TorchRL #2208: a slice sampler returned windows that cross an episode's end. Here every
/// step of every window, and every frame of its stacks, belongs to one episode.
#[test]
fn regression_no_window_crosses_an_episode() {
    let shape = Shape {
        steps: 64,
        window: 4,
        period: 1,
        frames: 3,
        nstep: None,
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    // Episodes of 2, 5, 1 and 6 steps; the episode of a step is the reward.
    for (e, len) in [2, 5, 1, 6].into_iter().enumerate() {
        for _ in 0..len {
            push(&mut lane, 0, e as f32);
        }
        end(&mut lane, false);
    }
    drop(lane);
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(3);
    buffer
        .sample_into(512, 0.4, SampleMode::Stratified, &mut rng, &mut out)
        .unwrap();
    let (w, k) = (4, 3);
    let reward = out.columns[2].as_f32().unwrap();
    let obs = out.columns[0].as_f32().unwrap();
    for b in 0..512 {
        let len = out.lengths[b];
        let episode = reward[b * w];
        for i in 0..len {
            assert_eq!(reward[b * w + i], episode, "a step of another episode");
            for j in 0..k {
                let step = obs[((b * w + i) * k + j) * 2 + 1] as usize;
                let starts = [0, 3, 9, 11];
                let ends = [1, 7, 9, 16];
                let e = episode as usize;
                assert!(
                    (starts[e]..=ends[e]).contains(&step),
                    "frame of step {step} outside episode {e}"
                );
            }
        }
        assert!(out.mask[b * w..b * w + len].iter().all(|&m| m));
        assert!(out.mask[b * w + len..(b + 1) * w].iter().all(|&m| !m));
    }
}

/// TorchRL #1969: slices broke at the storage's wrap. Windows that wrap the ring come out
/// whole and in order.
#[test]
fn regression_windows_across_the_ring_wrap() {
    let shape = Shape {
        steps: 16,
        window: 5,
        period: 1,
        frames: 1,
        nstep: None,
        partial: Partial::Drop,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..40 {
        push(&mut lane, 0, 0.0);
    }
    drop(lane);
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(4);
    buffer
        .sample_into(256, 0.4, SampleMode::Stratified, &mut rng, &mut out)
        .unwrap();
    let mut wrapped = 0;
    for b in 0..256 {
        let (_, start) = buffer.window_of(out.keys[b]).unwrap();
        let steps: Vec<i64> = out.columns[1].as_i64().unwrap()[b * 5..b * 5 + 5].to_vec();
        assert_eq!(steps, (start as i64..start as i64 + 5).collect::<Vec<_>>());
        assert!(start + 16 > 39, "window {start} outlived its first step");
        wrapped += usize::from(start % 16 > 11);
    }
    assert!(wrapped > 0, "no sampled window crossed the wrap");
}

/// TorchRL #2947: fewer items than asked. A sample always holds exactly the batch asked
/// for, however few windows there are.
#[test]
fn regression_a_batch_is_never_short() {
    let shape = Shape {
        steps: 16,
        window: 3,
        period: 1,
        frames: 1,
        nstep: None,
        partial: Partial::Drop,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..4 {
        push(&mut lane, 0, 0.0);
    }
    drop(lane);
    assert_eq!(buffer.len(), 1);
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(5);
    for batch in [1, 7, 100] {
        buffer
            .sample_into(batch, 0.4, SampleMode::Stratified, &mut rng, &mut out)
            .unwrap();
        assert_eq!(out.keys.len(), batch);
        assert_eq!(out.lengths, vec![3; batch]);
        assert_eq!(out.columns[1].len(), batch * 3);
    }
}

/// SB3's n-step buffer (FIXME in its source): once the buffer is full, a window may overlap
/// two episodes. Here a full ring of short episodes, overwritten many times, yields n-step
/// returns that stop at each episode's end.
#[test]
fn regression_sb3_full_buffer_windows_stay_in_their_episode() {
    let shape = Shape {
        steps: 12,
        window: 3,
        period: 1,
        frames: 1,
        nstep: Some((3, 1.0)),
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    // Episodes of 2 steps, reward 1 each: a return of 2 from the first step, 1 from the last.
    for _ in 0..50 {
        push(&mut lane, 0, 1.0);
        push(&mut lane, 0, 1.0);
        end(&mut lane, false);
    }
    drop(lane);
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(6);
    buffer
        .sample_into(256, 0.4, SampleMode::Stratified, &mut rng, &mut out)
        .unwrap();
    for b in 0..256 {
        let (_, start) = buffer.window_of(out.keys[b]).unwrap();
        let first = start % 3 == 0;
        assert_eq!(out.returns[b], if first { 2.0 } else { 1.0 });
        assert_eq!(out.discounts[b], 0.0);
        assert_eq!(out.lengths[b], if first { 2 } else { 1 });
    }
}

/// Window starts are drawn in proportion to their priorities (a chi-square over 8 windows
/// of priorities 1..8), and a window of priority 0 or not yet complete never.
#[test]
fn draws_follow_priorities() {
    let shape = Shape {
        steps: 32,
        window: 2,
        period: 1,
        frames: 1,
        nstep: None,
        partial: Partial::Drop,
        padding: Padding::Repeat,
    };
    let sc = SequenceConfig::builder(1, shape.steps, schema())
        .window(2)
        .alpha(1.0)
        .next_of("obs")
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(sc).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..11 {
        push(&mut lane, 0, 0.0);
    }
    drop(lane);
    // Windows 0..=8 are complete (row start + 2 written); set 0..8 to 1..=8 and window 8 to 0.
    assert_eq!(buffer.len(), 9);
    let keys: Vec<_> = (0..9)
        .map(|leaf| buffer.key(leaf).unwrap().unwrap())
        .collect();
    let priorities: Vec<f64> = (0..9)
        .map(|i| if i == 8 { 0.0 } else { (i + 1) as f64 })
        .collect();
    assert_eq!(
        buffer
            .update_priorities(&keys, &priorities)
            .unwrap()
            .applied,
        9
    );
    let mut counts = [0u64; 11];
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(9);
    let draws = 360_000;
    for _ in 0..draws / 360 {
        buffer
            .sample_into(360, 0.4, SampleMode::Independent, &mut rng, &mut out)
            .unwrap();
        for k in &out.keys {
            counts[buffer.window_of(*k).unwrap().1 as usize] += 1;
        }
    }
    assert_eq!(
        counts[8] + counts[9] + counts[10],
        0,
        "a zero-priority or incomplete window was drawn"
    );
    let chi2: f64 = (0..8)
        .map(|i| {
            let e = draws as f64 * (i + 1) as f64 / 36.0;
            (counts[i] as f64 - e).powi(2) / e
        })
        .sum();
    // 7 degrees of freedom: P(chi2 > 24.3) = 0.001.
    assert!(chi2 < 24.3, "chi2 = {chi2}, counts {counts:?}");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = schema();
    let err = |b: kary_replay::sequence::SequenceConfigBuilder| b.build().unwrap_err();
    assert!(
        matches!(
            err(SequenceConfig::builder(1, 8, s.clone()).window(8)),
            Error::InvalidSequence(_)
        ),
        "window + 1 > ring"
    );
    assert!(matches!(
        err(SequenceConfig::builder(1, 8, s.clone()).period(0)),
        Error::InvalidSequence(_)
    ));
    assert!(matches!(
        err(SequenceConfig::builder(1, 9, s.clone()).period(2)),
        Error::InvalidSequence(_)
    ));
    assert!(matches!(
        err(SequenceConfig::builder(0, 8, s.clone())),
        Error::InvalidSequence(_)
    ));
    assert!(matches!(
        err(SequenceConfig::builder(1, 8, s.clone()).stack("frame", 2)),
        Error::InvalidSequence(_)
    ));
    assert!(matches!(
        err(SequenceConfig::builder(1, 8, s.clone()).stack("obs", 0)),
        Error::InvalidSequence(_)
    ));
    assert!(matches!(
        err(SequenceConfig::builder(1, 8, s.clone()).next_of("nope")),
        Error::InvalidSequence(_)
    ));
    assert!(
        matches!(
            err(SequenceConfig::builder(1, 8, s.clone()).nstep(3, 0.9, "action")),
            Error::InvalidSequence(_)
        ),
        "an i64 reward"
    );
    assert!(
        matches!(
            err(SequenceConfig::builder(1, 8, s.clone()).nstep(0, 0.9, "reward")),
            Error::InvalidSequence(_)
        ),
        "n = 0"
    );
    assert!(
        matches!(
            err(SequenceConfig::builder(1, 8, s.clone())
                .nstep(6, 0.9, "reward")
                .stack("obs", 3)),
            Error::InvalidSequence(_)
        ),
        "an n-step reach and a stack longer than the ring"
    );
    assert!(matches!(
        err(SequenceConfig::builder(1, 8, s.clone()).nstep(3, 1.5, "reward")),
        Error::InvalidParameter { .. }
    ));
    assert!(matches!(
        err(SequenceConfig::builder(1, 8, Schema::new())),
        Error::InvalidSchema(_)
    ));

    let shape = Shape {
        steps: 16,
        window: 2,
        period: 1,
        frames: 1,
        nstep: None,
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(2, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    assert!(
        matches!(buffer.lane(0), Err(Error::InvalidSequence(_))),
        "a second writer"
    );
    assert!(matches!(buffer.lane(2), Err(Error::OutOfRange { .. })));
    // Ending an episode that has no step.
    assert!(matches!(
        lane.end_episode(&[(&[0f32, 0.0][..]).into()], false),
        Err(Error::InvalidSequence(_))
    ));
    // Wrong columns: too few, wrong dtype, wrong length.
    assert!(matches!(
        lane.push(&[(&[0f32, 0.0][..]).into()]),
        Err(Error::ColumnCount { .. })
    ));
    assert!(matches!(
        lane.push(&[
            (&[0f64, 0.0][..]).into(),
            (&[0i64][..]).into(),
            (&[0f32][..]).into()
        ]),
        Err(Error::ColumnType { .. })
    ));
    assert!(matches!(
        lane.push(&[
            (&[0f32][..]).into(),
            (&[0i64][..]).into(),
            (&[0f32][..]).into()
        ]),
        Err(Error::ColumnLength { .. })
    ));
    assert_eq!((lane.position(), buffer.steps_written()), (0, 0));
    push(&mut lane, 0, 1.0);
    assert!(matches!(
        lane.end_episode(&[(&[0f32][..]).into()], false),
        Err(Error::ColumnLength { .. })
    ));
    assert!(matches!(
        lane.end_episode(&[], false),
        Err(Error::ColumnCount { .. })
    ));
    assert_eq!((lane.position(), buffer.steps_written()), (1, 1));
    lane.close();
    assert!(matches!(
        lane.push(&[
            (&[0f32, 0.0][..]).into(),
            (&[0i64][..]).into(),
            (&[0f32][..]).into()
        ]),
        Err(Error::LaneClosed { lane: 0 })
    ));
    drop(lane);
    // Sampling: nothing yet, a zero batch, bad destinations.
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(1);
    assert!(matches!(
        buffer.sample_into(4, 0.4, SampleMode::Stratified, &mut rng, &mut out),
        Err(Error::Empty)
    ));
    let mut lane = buffer.lane(1).unwrap();
    for _ in 0..4 {
        push(&mut lane, 1, 1.0);
    }
    drop(lane);
    assert!(matches!(
        buffer.sample_into(0, 0.4, SampleMode::Stratified, &mut rng, &mut out),
        Err(Error::ZeroBatch)
    ));
    assert!(buffer
        .sample_into(4, f64::NAN, SampleMode::Stratified, &mut rng, &mut out)
        .is_err());
    let (mut obs, mut action, mut reward, mut next) = (
        vec![0f32; 4 * 2 * 2],
        vec![0i64; 4 * 2],
        vec![0f32; 4 * 2],
        vec![0f32; 4 * 2],
    );
    let mut short = [0f32; 3];
    let r = buffer.sample_columns_into(
        4,
        0.4,
        SampleMode::Stratified,
        &mut rng,
        &mut out,
        &mut [
            (&mut obs[..]).into(),
            (&mut action[..]).into(),
            (&mut reward[..]).into(),
        ],
        &mut [(&mut short[..]).into()],
    );
    // Errors name the output: the next observation of "obs" is "next_obs".
    assert!(
        matches!(&r, Err(Error::ColumnLength { column, .. }) if column == "next_obs"),
        "{r:?}"
    );
    assert!(out.keys.is_empty(), "a refused sample changed the batch");
    let mut wide = [0f64; 4 * 2];
    let r = buffer.sample_columns_into(
        4,
        0.4,
        SampleMode::Stratified,
        &mut rng,
        &mut out,
        &mut [
            (&mut obs[..]).into(),
            (&mut action[..]).into(),
            (&mut wide[..]).into(),
        ],
        &mut [],
    );
    assert!(
        matches!(&r, Err(Error::ColumnType { column, .. }) if column == "reward"),
        "{r:?}"
    );
    assert!(out.keys.is_empty(), "a refused sample changed the batch");
    buffer
        .sample_columns_into(
            4,
            0.4,
            SampleMode::Stratified,
            &mut rng,
            &mut out,
            &mut [
                (&mut obs[..]).into(),
                (&mut action[..]).into(),
                (&mut reward[..]).into(),
            ],
            &mut [(&mut next[..]).into()],
        )
        .unwrap();
    assert_eq!(out.keys.len(), 4);
    assert!(out.columns.is_empty() && out.next.is_empty());
    for b in 0..4 {
        let (lane, start) = buffer.window_of(out.keys[b]).unwrap();
        assert_eq!(lane, 1);
        assert_eq!(&action[b * 2..b * 2 + 2], &[start as i64, start as i64 + 1]);
        assert_eq!(next[b * 2 + 1], (start + 2) as f32);
    }
    // Updates: NaN, a key of another buffer, a stale key.
    let key = out.keys[0];
    assert!(matches!(
        buffer.update_priorities(&[key], &[f64::NAN]),
        Err(Error::InvalidPriority { .. })
    ));
    let bogus = kary_replay::Key::new(9, key.index, key.insertion());
    assert!(matches!(
        buffer.update_priorities(&[bogus], &[1.0]),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        sequence_priorities(&[1.0], &[true, false], 1, 0.9),
        Err(Error::LengthMismatch { .. })
    ));
}

/// An update through the key of a window whose first step was overwritten counts stale.
#[test]
fn updates_after_a_retire_are_stale() {
    let shape = Shape {
        steps: 8,
        window: 2,
        period: 1,
        frames: 2,
        nstep: None,
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(1, shape)).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..4 {
        push(&mut lane, 0, 0.0);
    }
    let key = buffer.key(0).unwrap().unwrap();
    assert_eq!(buffer.update_priorities(&[key], &[3.0]).unwrap().applied, 1);
    // With a look-back of one frame, the window starting at s reads from step s - 1: step 7
    // would evict step -1, so window 0 goes before it; step 8 evicts step 0, so window 1
    // goes before it.
    for _ in 4..7 {
        push(&mut lane, 0, 0.0);
    }
    assert!(buffer.key(0).unwrap().is_some());
    push(&mut lane, 0, 0.0);
    assert!(buffer.key(0).unwrap().is_none() && buffer.key(1).unwrap().is_some());
    push(&mut lane, 0, 0.0);
    assert!(buffer.key(1).unwrap().is_none() && buffer.key(2).unwrap().is_some());
    let report = buffer.update_priorities(&[key], &[5.0]).unwrap();
    assert_eq!((report.applied, report.stale), (0, 1));
    assert_eq!(buffer.priority(0).unwrap(), 0.0);
}

/// Eight lane writers wrapping their rings beside two samplers that check every window and
/// an updater; at rest the tree's sums are exact and the windows are the model's count.
#[test]
fn stress_eight_lanes() {
    stress_eight_lanes_in(SequenceBuffer::new);
}

/// The same with optimistic samplers (a sequence lock's readers, as in a mapping shared by
/// processes): a writer never waits for them, and a window copied while its rows were
/// overwritten is never kept.
#[test]
fn stress_eight_lanes_optimistic() {
    stress_eight_lanes_in(SequenceBuffer::optimistic_for_tests);
}

fn stress_eight_lanes_in(make: fn(SequenceConfig) -> Result<SequenceBuffer, Error>) {
    let lanes = 8;
    let shape = Shape {
        steps: 64,
        window: 4,
        period: 2,
        frames: 2,
        nstep: Some((3, 0.9)),
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = Arc::new(make(config(lanes, shape)).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        for t in 0..3 {
            let (buffer, done) = (&buffer, &done);
            scope.spawn(move || {
                let mut rng = Xoshiro256::new(t);
                let mut out = SequenceBatch::default();
                while !done.load(Ordering::Relaxed) {
                    match buffer.sample_into(32, 0.4, SampleMode::Stratified, &mut rng, &mut out) {
                        Ok(()) => {}
                        Err(Error::Empty | Error::ZeroTotalPriority) => continue,
                        Err(e) => panic!("{e}"),
                    }
                    let steps = out.columns[1].as_i64().unwrap();
                    let obs = out.columns[0].as_f32().unwrap();
                    for b in 0..32 {
                        let (lane, start) = buffer.window_of(out.keys[b]).unwrap();
                        for i in 0..out.lengths[b] {
                            // Every row is the step its key implies, of its lane.
                            assert_eq!(steps[b * 4 + i], (start + i as u64) as i64);
                            assert_eq!(obs[(b * 4 + i) * 2 * 2 + 2], lane as f32);
                        }
                    }
                    if t == 2 {
                        let ps: Vec<f64> = (0..32).map(|b| 0.5 + b as f64).collect();
                        buffer.update_priorities(&out.keys, &ps).unwrap();
                    }
                }
            });
        }
        let writers: Vec<_> = (0..lanes)
            .map(|l| {
                let buffer = Arc::clone(&buffer);
                scope.spawn(move || {
                    let mut lane = SequenceBuffer::lane_shared(&*buffer, l).unwrap();
                    let mut rng = Xoshiro256::new(100 + l as u64);
                    for _ in 0..3_000 {
                        let p = lane.position();
                        let obs = [l as f32, p as f32];
                        lane.push(&[
                            (&obs[..]).into(),
                            (&[p as i64][..]).into(),
                            (&[1f32][..]).into(),
                        ])
                        .unwrap();
                        if rng.next_u64() % 9 == 0 {
                            let fin = [l as f32, -1.0];
                            lane.end_episode(&[(&fin[..]).into()], rng.next_u64() % 2 == 0)
                                .unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let c = buffer.consistency();
    assert!(c.exact && c.extrema_exact, "{c:?}");
    let live = (0..buffer.config().capacity())
        .filter(|&l| buffer.key(l).unwrap().is_some())
        .count();
    assert_eq!(live, buffer.len());
    let sum: f64 = (0..buffer.config().capacity())
        .map(|l| buffer.priority(l).unwrap())
        .sum();
    assert!((sum - buffer.total()).abs() <= 1e-9 * sum.max(1.0));
}

/// A coordinator's draw: the window at each fraction of the buffer's total is the leaf whose
/// stretch of the cumulative priorities holds it, with weights of 1.
#[test]
fn windows_at_fractions_are_the_leaves_that_hold_them() {
    let shape = Shape {
        steps: 32,
        window: 3,
        period: 2,
        frames: 1,
        nstep: None,
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let buffer = SequenceBuffer::new(config(2, shape)).unwrap();
    for l in 0..2 {
        let mut lane = buffer.lane(l).unwrap();
        for t in 0..20 {
            push(&mut lane, l, t as f32);
        }
        end(&mut lane, false);
    }
    // Distinct priorities, through the keys a sample hands out.
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(5);
    buffer
        .sample_into(256, 0.4, SampleMode::Stratified, &mut rng, &mut out)
        .unwrap();
    let keys = out.keys.clone();
    let priorities: Vec<f64> = keys.iter().map(|k| 1.0 + k.index as f64).collect();
    buffer.update_priorities(&keys, &priorities).unwrap();
    let leaves: Vec<(usize, f64)> = (0..buffer.config().capacity())
        .map(|i| (i, buffer.priority(i).unwrap()))
        .filter(|&(_, p)| p > 0.0)
        .collect();
    let total: f64 = leaves.iter().map(|&(_, p)| p).sum();
    let mut before = 0.0;
    let mut fractions = Vec::new();
    for &(_, p) in &leaves {
        fractions.push((before + p / 2.0) / total);
        before += p;
    }
    buffer
        .sample_into_waiting(
            kary_replay::Draw::At(&fractions),
            &mut rng,
            &mut out,
            kary_replay::Wait::Never,
        )
        .unwrap();
    let got: Vec<usize> = out.indices.clone();
    let want: Vec<usize> = leaves.iter().map(|&(i, _)| i).collect();
    assert_eq!(got, want);
    assert!(out.weights.iter().all(|&w| w == 1.0));
    for (prob, &(_, p)) in out.probabilities.iter().zip(&leaves) {
        assert!((prob - p / total).abs() < 1e-12);
    }
    assert!(matches!(
        buffer.sample_into_waiting(
            kary_replay::Draw::At(&[0.5, 1.0]),
            &mut rng,
            &mut out,
            kary_replay::Wait::Never
        ),
        Err(Error::InvalidParameter { .. })
    ));
}

/// `push_steps` of a chunk is the same as its steps pushed one by one; bad columns are
/// refused before any step is written.
#[test]
fn push_steps_equals_pushes() {
    let shape = Shape {
        steps: 64,
        window: 3,
        period: 1,
        frames: 2,
        nstep: Some((2, 0.9)),
        partial: Partial::Keep,
        padding: Padding::Repeat,
    };
    let (a, b) = (
        SequenceBuffer::new(config(1, shape)).unwrap(),
        SequenceBuffer::new(config(1, shape)).unwrap(),
    );
    let (mut la, mut lb) = (a.lane(0).unwrap(), b.lane(0).unwrap());
    for (n, truncated) in [(5usize, false), (9, true), (4, false)] {
        let p = la.position();
        let obs: Vec<f32> = (0..n).flat_map(|i| [0.0, (p + i as u64) as f32]).collect();
        let steps: Vec<i64> = (0..n).map(|i| (p + i as u64) as i64).collect();
        let rewards: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let pushed = la
            .push_steps(&[
                (&obs[..]).into(),
                (&steps[..]).into(),
                (&rewards[..]).into(),
            ])
            .unwrap();
        assert_eq!(pushed, n);
        for i in 0..n {
            push(&mut lb, 0, i as f32);
        }
        end(&mut la, truncated);
        end(&mut lb, truncated);
    }
    assert_eq!((a.len(), a.steps_written()), (b.len(), b.steps_written()));
    let (mut oa, mut ob) = (SequenceBatch::default(), SequenceBatch::default());
    a.sample_into(
        16,
        0.4,
        SampleMode::Stratified,
        &mut Xoshiro256::new(3),
        &mut oa,
    )
    .unwrap();
    b.sample_into(
        16,
        0.4,
        SampleMode::Stratified,
        &mut Xoshiro256::new(3),
        &mut ob,
    )
    .unwrap();
    assert_eq!(oa, ob);
    let before = la.position();
    let short = [0i64; 2];
    let r = la.push_steps(&[
        (&[0f32; 6][..]).into(),
        (&short[..]).into(),
        (&[0f32; 3][..]).into(),
    ]);
    assert!(r.is_err(), "{r:?}");
    assert_eq!(la.position(), before);
}
