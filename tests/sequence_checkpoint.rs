//! Sequence checkpoints: a buffer saved at any point of random lane operations (wraps,
//! episodes under way, retired leaves held, closed lanes, updated priorities) and loaded
//! goes on exactly as the original does; saves while lane writers, samplers and an updater
//! run are states the writers passed through; damaged checkpoints are refused.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use kary_replay::checkpoint::{self, LoadOptions, SaveOptions, UserValue};
use kary_replay::sequence::{
    LaneWriter, Padding, Partial, SequenceBatch, SequenceBuffer, SequenceConfig,
};
use kary_replay::{
    Checkpoint, CheckpointErrorKind, ConcurrentBuffer, DType, Error, Load, LockFreeBuffer,
    SampleMode, Schema, Xoshiro256,
};
use proptest::prelude::*;

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, [1, 2])
        .column("action", DType::I64, [])
        .column("reward", DType::F32, [])
        .column("first", DType::Bool, [])
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    steps: usize,
    window: usize,
    period: usize,
    frames: usize,
    n: Option<usize>,
    drop: bool,
}

fn config(lanes: usize, s: Shape) -> SequenceConfig {
    let mut b = SequenceConfig::builder(lanes, s.steps, schema())
        .window(s.window)
        .period(s.period)
        .partial(if s.drop { Partial::Drop } else { Partial::Keep })
        .padding(Padding::Zeros)
        .next_of("obs");
    if s.frames > 1 {
        b = b.stack("obs", s.frames);
    }
    if let Some(n) = s.n {
        b = b.nstep(n, 0.75, "reward");
    }
    b.build().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kr-seqckpt-{}-{name}-{:x}",
        std::process::id(),
        Xoshiro256::from_entropy().next_u64()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[derive(Debug, Clone)]
enum Op {
    Push { lane: usize, reward: i8 },
    End { lane: usize, truncated: bool },
    Close { lane: usize },
    Update { seed: u64 },
    Flush { lane: usize },
}

fn apply<B: std::ops::Deref<Target = SequenceBuffer>>(
    buffer: &SequenceBuffer,
    writers: &mut [LaneWriter<B>],
    op: &Op,
) {
    match *op {
        Op::Push { lane, reward } => {
            let p = writers[lane].position();
            let obs = [lane as f32, p as f32];
            let r = writers[lane].push(&[
                (&obs[..]).into(),
                (&[p as i64][..]).into(),
                (&[f32::from(reward)][..]).into(),
                (&[!writers[lane].in_episode()][..]).into(),
            ]);
            assert!(matches!(r, Ok(()) | Err(Error::LaneClosed { .. })), "{r:?}");
        }
        Op::End { lane, truncated } => {
            let obs = [-1.0 - lane as f32, writers[lane].position() as f32];
            let r = writers[lane].end_episode(&[(&obs[..]).into()], truncated);
            assert!(
                matches!(
                    r,
                    Ok(()) | Err(Error::InvalidSequence(_) | Error::LaneClosed { .. })
                ),
                "{r:?}"
            );
        }
        Op::Close { lane } => writers[lane].close(),
        Op::Flush { lane } => writers[lane].flush(),
        Op::Update { seed } => {
            let mut rng = Xoshiro256::new(seed);
            let mut out = SequenceBatch::default();
            if buffer
                .sample_into(4, 0.4, SampleMode::Independent, &mut rng, &mut out)
                .is_ok()
            {
                let ps: Vec<f64> = (0..4).map(|i| (seed % 7 + i) as f64 * 0.5).collect();
                buffer.update_priorities(&out.keys, &ps).unwrap();
            }
        }
    }
}

/// The two buffers hold the same leaves, keys and counts, and sample the same batches.
fn assert_same(a: &SequenceBuffer, b: &SequenceBuffer, seed: u64) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.steps_written(), b.steps_written());
    for leaf in 0..a.config().capacity() {
        assert_eq!(
            a.priority(leaf).unwrap().to_bits(),
            b.priority(leaf).unwrap().to_bits(),
            "leaf {leaf}"
        );
        assert_eq!(a.key(leaf).unwrap(), b.key(leaf).unwrap(), "leaf {leaf}");
    }
    assert!(b.consistency().exact);
    let (mut ra, mut rb) = (Xoshiro256::new(seed), Xoshiro256::new(seed));
    let (mut oa, mut ob) = (SequenceBatch::default(), SequenceBatch::default());
    let (x, y) = (
        a.sample_into(16, 0.4, SampleMode::Stratified, &mut ra, &mut oa),
        b.sample_into(16, 0.4, SampleMode::Stratified, &mut rb, &mut ob),
    );
    assert_eq!(format!("{x:?}"), format!("{y:?}"));
    assert_eq!(oa, ob);
}

fn shape_strategy() -> impl Strategy<Value = Shape> {
    (
        (1usize..4, 1usize..4, 1usize..4),
        (proptest::option::of(1usize..6), any::<bool>(), 0usize..3),
    )
        .prop_map(|((window, period, frames), (n, drop, extra))| {
            let reach = n.map_or(window, |n| n.max(window));
            let steps = (reach + frames).div_ceil(period) * period + extra * period;
            Shape {
                steps,
                window,
                period,
                frames,
                n,
                drop,
            }
        })
}

fn ops_strategy(lanes: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            12 => (0..lanes, -4i8..5).prop_map(|(lane, reward)| Op::Push { lane, reward }),
            2 => (0..lanes, any::<bool>()).prop_map(|(lane, truncated)| Op::End { lane, truncated }),
            2 => any::<u64>().prop_map(|seed| Op::Update { seed }),
            1 => (0..lanes).prop_map(|lane| Op::Flush { lane }),
            1 => (0..lanes).prop_map(|lane| Op::Close { lane }),
        ],
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Save at a random point (writers held, some batching installs, some lanes mid-episode
    /// or closed), load, then run the same operations on both: they stay equal leaf for
    /// leaf, key for key and batch for batch.
    #[test]
    fn a_loaded_buffer_goes_on_as_the_saved_one(
        shape in shape_strategy(),
        ops in ops_strategy(3),
        batch in 1usize..4,
        split in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let split = split.index(ops.len() + 1);
        let dir = scratch("prop");
        let a = SequenceBuffer::new(config(3, shape)).unwrap();
        let mut wa: Vec<_> = (0..3).map(|l| a.lane(l).unwrap()).collect();
        for w in &mut wa {
            w.set_batch(batch).unwrap();
        }
        for op in &ops[..split] {
            apply(&a, &mut wa, op);
        }
        a.save_with(&dir, &SaveOptions::new().user("split", UserValue::U64(split as u64))).unwrap();
        let loaded = SequenceBuffer::load_with(&dir, &LoadOptions::default()).unwrap();
        prop_assert_eq!(loaded.user.get("split"), Some(&UserValue::U64(split as u64)));
        prop_assert_eq!(checkpoint::user_data(&dir).unwrap(), loaded.user.clone());
        let b = loaded.buffer;
        prop_assert_eq!(b.config(), a.config());
        assert_same(&a, &b, seed);
        let mut wb: Vec<_> = (0..3).map(|l| b.lane(l).unwrap()).collect();
        for w in &mut wb {
            w.set_batch(batch).unwrap();
        }
        for (x, y) in wa.iter().zip(&wb) {
            prop_assert_eq!(x.position(), y.position());
            prop_assert_eq!(x.in_episode(), y.in_episode());
        }
        for (i, op) in ops[split..].iter().enumerate() {
            apply(&a, &mut wa, op);
            apply(&b, &mut wb, op);
            if i % 9 == 0 {
                for (x, y) in wa.iter_mut().zip(&mut wb) {
                    x.flush();
                    y.flush();
                }
                assert_same(&a, &b, seed ^ i as u64);
            }
        }
        drop(wa);
        drop(wb);
        assert_same(&a, &b, !seed);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn push_step(lane: &mut LaneWriter<&SequenceBuffer>, l: usize) {
    let p = lane.position();
    lane.push(&[
        (&[l as f32, p as f32][..]).into(),
        (&[p as i64][..]).into(),
        (&[1f32][..]).into(),
        (&[false][..]).into(),
    ])
    .unwrap();
}

/// Saves taken while four lane writers wrap their rings beside a sampler and an updater:
/// each loads, with exact sums, and every window of it holds the steps its key implies.
#[test]
fn saves_while_lanes_write_are_states_the_lanes_passed_through() {
    let shape = Shape {
        steps: 32,
        window: 3,
        period: 1,
        frames: 2,
        n: Some(4),
        drop: false,
    };
    let lanes = 4;
    let buffer = SequenceBuffer::new(config(lanes, shape)).unwrap();
    let parent = scratch("live");
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for l in 0..lanes {
            let (buffer, done) = (&buffer, &done);
            scope.spawn(move || {
                let mut lane = buffer.lane(l).unwrap();
                lane.set_batch(1 + l).unwrap();
                let mut rng = Xoshiro256::new(l as u64);
                while !done.load(Ordering::Relaxed) {
                    push_step(&mut lane, l);
                    if rng.next_u64() % 7 == 0 {
                        let fin = [l as f32, -1.0];
                        lane.end_episode(&[(&fin[..]).into()], rng.next_u64() % 2 == 0)
                            .unwrap();
                    }
                }
            });
        }
        scope.spawn(|| {
            let mut rng = Xoshiro256::new(99);
            let mut out = SequenceBatch::default();
            while !done.load(Ordering::Relaxed) {
                if buffer
                    .sample_into(8, 0.4, SampleMode::Stratified, &mut rng, &mut out)
                    .is_ok()
                {
                    let ps: Vec<f64> = (0..8).map(|i| 0.25 + i as f64).collect();
                    buffer.update_priorities(&out.keys, &ps).unwrap();
                }
            }
        });
        for i in 0..12 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            buffer
                .save_with(&checkpoint::numbered(&parent, i), &SaveOptions::new())
                .unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let mut checked = 0;
    for i in 0..12 {
        let loaded = SequenceBuffer::load(checkpoint::numbered(&parent, i)).unwrap();
        assert!(loaded.consistency().exact);
        let mut held = 0;
        for leaf in 0..loaded.config().capacity() {
            if loaded.key(leaf).unwrap().is_some() {
                held += 1;
            }
        }
        assert_eq!(held, loaded.len());
        if loaded.is_empty() {
            continue;
        }
        let mut out = SequenceBatch::default();
        let mut rng = Xoshiro256::new(i);
        loaded
            .sample_into(64, 0.4, SampleMode::Stratified, &mut rng, &mut out)
            .unwrap();
        let steps = out.columns[1].as_i64().unwrap();
        let obs = out.columns[0].as_f32().unwrap();
        for b in 0..64 {
            let (lane, start) = loaded.window_of(out.keys[b]).unwrap();
            for s in 0..out.lengths[b] {
                assert_eq!(steps[b * 3 + s], (start + s as u64) as i64);
                // Frame 1 of the 2-frame stack is the step itself: (lane, step).
                let f = ((b * 3 + s) * 2 + 1) * 2;
                assert_eq!(&obs[f..f + 2], &[lane as f32, (start + s as u64) as f32]);
            }
        }
        // The loaded lanes take new steps where they stood.
        let mut lane = loaded.lane(0).unwrap();
        push_step(&mut lane, 0);
        checked += 1;
    }
    assert!(checked > 0);
    std::fs::remove_dir_all(&parent).unwrap();
}

/// A small saved buffer with wrapped lanes, one mid-episode and one closed.
fn saved(dir: &Path) -> SequenceBuffer {
    let shape = Shape {
        steps: 8,
        window: 2,
        period: 2,
        frames: 2,
        n: Some(3),
        drop: false,
    };
    let buffer = SequenceBuffer::new(config(2, shape)).unwrap();
    {
        let mut a = buffer.lane(0).unwrap();
        let mut b = buffer.lane(1).unwrap();
        for i in 0..13 {
            push_step(&mut a, 0);
            push_step(&mut b, 1);
            if i % 5 == 4 {
                a.end_episode(&[(&[0f32, -1.0][..]).into()], false).unwrap();
            }
        }
        b.close();
    }
    buffer.save(dir).unwrap();
    buffer
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// Rewrite the manifest and its COMMIT so that only the change is wrong.
fn rewrite(dir: &Path, m: &serde_json::Value) {
    let mut json = serde_json::to_vec_pretty(m).unwrap();
    json.push(b'\n');
    std::fs::write(dir.join("manifest.json"), &json).unwrap();
    let commit = format!(
        "{} v{} manifest-crc32 {:08x}\n",
        checkpoint::SEQUENCE_FORMAT,
        checkpoint::SEQUENCE_VERSION,
        crc32(&json)
    );
    std::fs::write(dir.join("COMMIT"), commit).unwrap();
}

fn crc32(bytes: &[u8]) -> u32 {
    // CRC-32 (IEEE), bit by bit: the tests need no crate for it.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (!(crc & 1)).wrapping_add(1));
        }
    }
    !crc
}

fn invalid(dir: &Path) -> String {
    match SequenceBuffer::load(dir) {
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Invalid,
            detail,
            ..
        }) => detail,
        other => panic!("expected an Invalid checkpoint error, got {other:?}"),
    }
}

/// Cursors, window descriptions and counts that no writer could have left are refused with
/// `Invalid` (each change made with its CRCs fixed, so that the rules, not the checksums,
/// refuse it); damaged files are `Corrupt`; the other format is named.
#[test]
fn damaged_sequence_checkpoints_are_refused() {
    let base = scratch("bad");
    let good = base.join("good");
    let original = saved(&good);
    let loaded = SequenceBuffer::load(&good).unwrap();
    assert_same(&original, &loaded, 5);
    let m = manifest(&good);
    assert!(m["lanes"][0]["episode"].is_u64() && m["lanes"][1]["closed"] == true);

    let copy = |name: &str| {
        let dir = base.join(name);
        std::fs::create_dir(&dir).unwrap();
        for e in std::fs::read_dir(&good).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        dir
    };
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "retired past finished",
            Box::new(|m| {
                m["lanes"][0]["retired_to"] =
                    (m["lanes"][0]["finished_to"].as_u64().unwrap() + 2).into()
            }),
        ),
        (
            "a ring unretired",
            Box::new(|m| m["lanes"][0]["retired_to"] = 0.into()),
        ),
        (
            "unaligned cursor",
            Box::new(|m| {
                m["lanes"][0]["finished_to"] =
                    (m["lanes"][0]["finished_to"].as_u64().unwrap() - 1).into()
            }),
        ),
        (
            "finished past the head",
            Box::new(|m| m["lanes"][1]["next"] = 2.into()),
        ),
        (
            "closed mid-episode",
            Box::new(|m| m["lanes"][0]["closed"] = true.into()),
        ),
        (
            "episode after the head",
            Box::new(|m| m["lanes"][0]["episode"] = 1000.into()),
        ),
        ("live count", Box::new(|m| m["state"]["windows"] = 1.into())),
        (
            "handed out",
            Box::new(|m| m["state"]["handed_out"] = 1_000_000.into()),
        ),
        (
            "steps written",
            Box::new(|m| m["state"]["steps_written"] = 1_000_000.into()),
        ),
        (
            "lane count",
            Box::new(|m| {
                m["lanes"].as_array_mut().unwrap().pop();
            }),
        ),
        (
            "window past the ring",
            Box::new(|m| m["config"]["window"] = 9.into()),
        ),
    ];
    for (name, edit) in &edits {
        let dir = copy(&name.replace(' ', "-"));
        let mut m = manifest(&dir);
        edit(&mut m);
        rewrite(&dir, &m);
        let detail = invalid(&dir);
        assert!(!detail.is_empty(), "{name}");
    }

    // A window description past the configuration, its CRC fixed in the manifest.
    let dir = copy("window-too-long");
    let mut bytes = std::fs::read(dir.join("windows.npy")).unwrap();
    let header = bytes.len() - 16 * loaded.config().capacity();
    let leaf = (0..loaded.config().capacity())
        .find(|&l| loaded.key(l).unwrap().is_some())
        .unwrap();
    bytes[header + leaf * 16] = 3; // len 3 > window 2
    std::fs::write(dir.join("windows.npy"), &bytes).unwrap();
    let mut m = manifest(&dir);
    m["files"]["windows.npy"]["crc32"] = crc32(&bytes).into();
    rewrite(&dir, &m);
    assert!(invalid(&dir).contains(&format!("leaf {leaf}")));

    // A priority on a leaf with no window.
    let dir = copy("priority-on-empty");
    let mut bytes = std::fs::read(dir.join("priorities.npy")).unwrap();
    let header = bytes.len() - 8 * loaded.config().capacity();
    let empty = (0..loaded.config().capacity())
        .find(|&l| loaded.key(l).unwrap().is_none())
        .unwrap();
    bytes[header + empty * 8..header + empty * 8 + 8].copy_from_slice(&1.0f64.to_le_bytes());
    std::fs::write(dir.join("priorities.npy"), &bytes).unwrap();
    let mut m = manifest(&dir);
    m["files"]["priorities.npy"]["crc32"] = crc32(&bytes).into();
    rewrite(&dir, &m);
    invalid(&dir);

    // A flipped byte, a truncated column, no COMMIT.
    let config = kary_replay::checkpoint::verify_sequence(&good).unwrap();
    assert_eq!(&config, original.config());
    let dir = copy("flipped");
    let path = dir.join("col.obs.npy");
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        SequenceBuffer::load(&dir),
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Corrupt,
            ..
        })
    ));
    // `verify_sequence` finds what a load finds, without building a buffer.
    assert!(matches!(
        kary_replay::checkpoint::verify_sequence(&dir),
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Corrupt,
            ..
        })
    ));
    let dir = copy("truncated");
    let path = dir.join("col.action.npy");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 8]).unwrap();
    assert!(matches!(
        SequenceBuffer::load(&dir),
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Corrupt,
            ..
        })
    ));
    assert!(matches!(
        kary_replay::checkpoint::verify_sequence(&dir),
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Corrupt,
            ..
        })
    ));
    let dir = copy("uncommitted");
    std::fs::remove_file(dir.join("COMMIT")).unwrap();
    assert!(matches!(
        SequenceBuffer::load(&dir),
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Uncommitted,
            ..
        })
    ));

    // Each format's loader names the other.
    let err = LockFreeBuffer::load(&good).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Checkpoint {
                kind: CheckpointErrorKind::Format,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("SequenceBuffer::load"), "{err}");
    let flat = base.join("flat");
    let buffer = LockFreeBuffer::new(
        kary_replay::Config::builder(8, Schema::new().column("x", DType::F32, 1))
            .build()
            .unwrap(),
    )
    .unwrap();
    buffer.save(&flat).unwrap();
    let err = SequenceBuffer::load(&flat).unwrap_err();
    assert!(err.to_string().contains("Load::load"), "{err}");

    // What the caller expects.
    let err = SequenceBuffer::load_with(
        &good,
        &LoadOptions {
            capacity: Some(3),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(
        err,
        Error::Checkpoint {
            kind: CheckpointErrorKind::Mismatch,
            ..
        }
    ));
    // A save onto an existing directory changes nothing.
    assert!(matches!(
        original.save(&good),
        Err(Error::Checkpoint {
            kind: CheckpointErrorKind::Exists,
            ..
        })
    ));
    std::fs::remove_dir_all(&base).unwrap();
}

/// The command-line tool verifies a sequence checkpoint by loading it, and fails a damaged
/// one.
#[test]
fn the_cli_verifies_sequence_checkpoints() {
    let dir = scratch("cli");
    saved(&dir);
    let tool = env!("CARGO_BIN_EXE_kary-replay-ckpt");
    let out = std::process::Command::new(tool)
        .args(["verify", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("sequence checkpoint") && text.contains("2 lanes of 8 steps"),
        "{text}"
    );
    let path = dir.join("windows.npy");
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let out = std::process::Command::new(tool)
        .args(["verify", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A closed lane stays closed after a load; an episode under way goes on.
#[test]
fn lanes_resume_where_they_stood() {
    let dir = scratch("resume");
    let original = saved(&dir);
    let loaded = SequenceBuffer::load(&dir).unwrap();
    let mut closed = loaded.lane(1).unwrap();
    assert!(matches!(
        closed.push(&[
            (&[0f32, 0.0][..]).into(),
            (&[0i64][..]).into(),
            (&[0f32][..]).into(),
            (&[false][..]).into(),
        ]),
        Err(Error::LaneClosed { lane: 1 })
    ));
    let mut a = original.lane(0).unwrap();
    let mut b = loaded.lane(0).unwrap();
    assert!(b.in_episode());
    assert_eq!(a.position(), b.position());
    for _ in 0..11 {
        push_step(&mut a, 0);
        push_step(&mut b, 0);
    }
    a.end_episode(&[(&[7f32, 7.0][..]).into()], true).unwrap();
    b.end_episode(&[(&[7f32, 7.0][..]).into()], true).unwrap();
    drop((a, b, closed));
    assert_same(&original, &loaded, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Numbered sequence checkpoints rotate, `latest` finds the newest, and `clean` keeps every
/// committed one while it removes an unfinished save.
#[test]
fn numbered_sequence_checkpoints_rotate_and_survive_clean() {
    let parent = scratch("numbered");
    let buffer = saved(&parent.join("first"));
    std::fs::remove_dir_all(parent.join("first")).unwrap();
    for step in 0..4 {
        buffer
            .save_with(
                &checkpoint::numbered(&parent, step),
                &SaveOptions::new().keep_last(2),
            )
            .unwrap();
    }
    let unfinished = checkpoint::numbered(&parent, 9);
    std::fs::create_dir(&unfinished).unwrap();
    assert_eq!(
        checkpoint::latest(&parent).unwrap(),
        Some(checkpoint::numbered(&parent, 3))
    );
    assert_eq!(checkpoint::clean(&parent).unwrap(), 1);
    let mut left: Vec<_> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec![
            checkpoint::numbered(&parent, 2),
            checkpoint::numbered(&parent, 3)
        ]
    );
    SequenceBuffer::load(checkpoint::numbered(&parent, 3)).unwrap();
    std::fs::remove_dir_all(&parent).unwrap();
}
