//! The sequence buffer across real processes (`ShmSequenceBuffer`): this test binary runs
//! itself again as actor processes (`KR_SEQ_CHILD` says what a child does) that write lanes,
//! kills them at chosen points of the lane protocol and at random times, and checks that no
//! sampled window is torn or crosses what was written, that at most the dead writer's step
//! and its episode's unfinished windows are lost, and that the lane takes a new writer.

#![cfg(all(target_os = "linux", not(loom)))]

#[path = "support/scale.rs"]
mod scale;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kary_replay::buffer::{shm_pause_at, ShmPoint};
use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig, ShmSequenceBuffer};
use kary_replay::{Config, DType, Error, SampleMode, Schema, ShmBuffer, Xoshiro256};

const LANES: usize = 4;
const STEPS: usize = 64;
const WINDOW: usize = 4;
const PERIOD: usize = 2;

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 2)
        .column("check", DType::I64, [])
        .column("reward", DType::F32, [])
}

fn config() -> SequenceConfig {
    SequenceConfig::builder(LANES, STEPS, schema())
        .window(WINDOW)
        .period(PERIOD)
        .nstep(3, 0.5, "reward")
        .next_of("obs")
        .alpha(1.0)
        .build()
        .unwrap()
}

fn name(tag: &str) -> String {
    format!("kr-seq-test-{}-{tag}", std::process::id())
}

/// Step `t` of lane `lane`: its value, and a check of it in another column.
fn value(lane: usize, t: u64) -> f32 {
    (lane * 100_000) as f32 + t as f32
}
fn check(v: f32) -> i64 {
    (v as i64).wrapping_mul(0x9E37_79B9) ^ 0x5555
}

/// Push lane `l`'s next step.
fn push(lane: &mut kary_replay::sequence::LaneWriter<&SequenceBuffer>, l: usize) {
    let v = value(l, lane.position());
    lane.push(&[
        (&[v, -v][..]).into(),
        (&[check(v)][..]).into(),
        (&[1.0f32][..]).into(),
    ])
    .unwrap();
}

/// Sample every window of `buffer` once over (stratified, a large batch) and check each:
/// its steps are consecutive steps of the lane and start its key names, none torn (each
/// row's check matches its value), its next observation the step after its reach. Returns
/// how many windows were checked.
fn check_windows(buffer: &SequenceBuffer, rng: &mut Xoshiro256) -> usize {
    let mut out = SequenceBatch::default();
    match buffer.sample_into(256, 0.4, SampleMode::Stratified, rng, &mut out) {
        Ok(()) => {}
        Err(Error::Empty | Error::ZeroTotalPriority) => return 0,
        Err(e) => panic!("sample: {e}"),
    }
    let obs = out.columns[0].as_f32().unwrap();
    let checks = out.columns[1].as_i64().unwrap();
    for b in 0..out.keys.len() {
        let (lane, start) = buffer.window_of(out.keys[b]).unwrap();
        for i in 0..out.lengths[b] {
            let v = obs[(b * WINDOW + i) * 2];
            assert_eq!(v, value(lane, start + i as u64), "window {b} step {i}");
            assert_eq!(obs[(b * WINDOW + i) * 2 + 1], -v, "torn obs in window {b}");
            assert_eq!(checks[b * WINDOW + i], check(v), "torn row in window {b}");
        }
    }
    out.keys.len()
}

/// Run this test binary again as a child doing `what` on buffer `name`.
fn child(what: &str, name: &str, extra: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("KR_SEQ_CHILD", what)
        .env("KR_SEQ_NAME", name)
        .env("KR_SEQ_EXTRA", extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Wait until `child` writes a pause point's byte (10..=12) or its done byte, after the
/// '@' it writes when it starts (the test harness's own lines come before).
fn wait_byte(child: &mut Child) -> u8 {
    let out = child.stdout.as_mut().unwrap();
    let mut byte = [0u8];
    let mut started = false;
    loop {
        match out.read(&mut byte) {
            Ok(1) if byte[0] == b'@' => started = true,
            Ok(1) if started && ((10..=12).contains(&byte[0]) || byte[0] == b'D') => {
                return byte[0]
            }
            Ok(1) => continue,
            other => panic!(
                "the child ended early: {other:?}, status {:?}",
                child.wait()
            ),
        }
    }
}

/// What a child process does (the entry point of `child`).
#[test]
fn child_entry() {
    let Ok(what) = std::env::var("KR_SEQ_CHILD") else {
        return;
    };
    let name = std::env::var("KR_SEQ_NAME").unwrap();
    let extra: Vec<u64> = std::env::var("KR_SEQ_EXTRA")
        .unwrap()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let buffer = ShmSequenceBuffer::attach(&name).unwrap();
    print!("@");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    match what.as_str() {
        // extra: lane, steps, episode length, [pause point, after]
        "write" => {
            if extra.len() > 3 {
                let point = match extra[3] {
                    10 => ShmPoint::LaneRetired,
                    11 => ShmPoint::LaneRow,
                    _ => ShmPoint::LaneInstalled,
                };
                shm_pause_at(point, extra[4], 1);
            }
            let l = extra[0] as usize;
            let mut lane = buffer.lane(l).unwrap();
            let start = lane.position();
            for t in 0..extra[1] {
                push(&mut lane, l);
                if (t + 1) % extra[2] == 0 {
                    let v = value(l, lane.position());
                    lane.end_episode(&[(&[v, -v][..]).into()], true).unwrap();
                }
            }
            let _ = start;
        }
        // Sample and update priorities until killed.
        "update" => {
            let mut rng = Xoshiro256::new(1);
            let mut out = SequenceBatch::default();
            print!("U");
            std::io::Write::flush(&mut std::io::stdout()).unwrap();
            loop {
                buffer
                    .sample_into(64, 0.4, SampleMode::Stratified, &mut rng, &mut out)
                    .unwrap();
                let p: Vec<f64> = (0..out.keys.len()).map(|i| 1.0 + i as f64).collect();
                buffer.update_priorities(&out.keys, &p).unwrap();
            }
        }
        other => panic!("unknown child role {other}"),
    }
    print!("D");
}

#[test]
fn an_actor_process_writes_lanes_a_learner_samples() {
    let name = name("two");
    let learner = ShmSequenceBuffer::create(&name, config()).unwrap();
    let mut actors: Vec<Child> = (0..2)
        .map(|l| child("write", &name, &format!("{l},300,25")))
        .collect();
    let mut rng = Xoshiro256::new(3);
    let mut checked = 0;
    for a in &mut actors {
        while a.try_wait().unwrap().is_none() {
            checked += check_windows(&learner, &mut rng);
        }
        assert!(a.wait().unwrap().success());
    }
    checked += check_windows(&learner, &mut rng);
    assert!(checked > 0);
    assert!(learner.consistency().exact);
    // The same steps written in one process make the same buffer: windows, total, steps.
    let local = SequenceBuffer::new(config()).unwrap();
    for l in 0..2 {
        let mut lane = local.lane(l).unwrap();
        for t in 0..300u64 {
            push(&mut lane, l);
            if (t + 1) % 25 == 0 {
                let v = value(l, lane.position());
                lane.end_episode(&[(&[v, -v][..]).into()], true).unwrap();
            }
        }
    }
    assert_eq!(learner.len(), local.len());
    assert_eq!(learner.steps_written(), local.steps_written());
    assert_eq!(learner.total(), local.total());
    for leaf in 0..config().capacity() {
        assert_eq!(
            learner.priority(leaf).unwrap(),
            local.priority(leaf).unwrap()
        );
    }
    // Their lanes were given back: this process takes them; its writes go on from there.
    let mut lane = learner.lane(0).unwrap();
    assert_eq!(lane.position(), local.lane(0).unwrap().position());
    push(&mut lane, 0);
    drop(lane);
    learner.unlink().unwrap();
}

#[test]
fn a_lane_has_one_writer_across_processes_and_families_are_told_apart() {
    let name = name("one");
    let a = ShmSequenceBuffer::create(&name, config()).unwrap();
    let b = ShmSequenceBuffer::attach(&name).unwrap();
    let lane = a.lane(1).unwrap();
    let err = b.lane(1).unwrap_err().to_string();
    assert!(
        err.contains("lane 1 already has a writer (participant 0)"),
        "{err}"
    );
    drop(lane);
    drop(b.lane(1).unwrap());
    // A flat buffer's attach refuses a sequence mapping, and the other way round.
    let err = ShmBuffer::attach(&name).unwrap_err().to_string();
    assert!(err.contains("not a shared buffer"), "{err}");
    a.unlink().unwrap();
    let flat = name + "-flat";
    let f = ShmBuffer::create(
        &flat,
        Config::builder(8, Schema::new().column("x", DType::F32, 1))
            .build()
            .unwrap(),
    )
    .unwrap();
    let err = ShmSequenceBuffer::attach(&flat).unwrap_err().to_string();
    assert!(err.contains("not a shared sequence buffer"), "{err}");
    f.unlink().unwrap();
    // Batches of installs are one process's: refused in a shared buffer.
    let name = self::name("batch");
    let s = ShmSequenceBuffer::create(&name, config()).unwrap();
    let mut lane = s.lane(0).unwrap();
    assert!(lane.set_batch(8).is_err());
    lane.set_batch(1).unwrap();
    drop(lane);
    s.unlink().unwrap();
}

#[test]
fn a_saved_shared_buffer_loads_as_the_same_buffer() {
    let name = name("save");
    let buffer = ShmSequenceBuffer::create(&name, config()).unwrap();
    let mut c = child("write", &name, "2,200,30");
    assert_eq!(wait_byte(&mut c), b'D');
    c.wait().unwrap();
    let dir = std::env::temp_dir().join(format!("kr-seq-shm-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    kary_replay::Checkpoint::save(&*buffer, &dir).unwrap();
    let loaded = <SequenceBuffer as kary_replay::checkpoint::Load>::load(&dir).unwrap();
    assert_eq!(loaded.len(), buffer.len());
    assert_eq!(loaded.total(), buffer.total());
    let (mut r1, mut r2) = (Xoshiro256::new(9), Xoshiro256::new(9));
    let (mut o1, mut o2) = (SequenceBatch::default(), SequenceBatch::default());
    buffer
        .sample_into(32, 0.4, SampleMode::Stratified, &mut r1, &mut o1)
        .unwrap();
    loaded
        .sample_into(32, 0.4, SampleMode::Stratified, &mut r2, &mut o2)
        .unwrap();
    assert_eq!(o1.indices, o2.indices);
    assert_eq!(o1.columns, o2.columns);
    assert_eq!(o1.returns, o2.returns);
    std::fs::remove_dir_all(&dir).unwrap();
    buffer.unlink().unwrap();
}

/// Kill a lane writer at each point of the lane protocol (and at random times): after
/// recovery every window sampled is whole, at most the windows of the dead episode that
/// waited for later steps are gone, the lane takes a new writer, and the sums are exact.
#[test]
fn a_lane_writer_killed_anywhere_is_recovered() {
    let rounds = scale::scaled(60, 6) as u64;
    let mut rng = Xoshiro256::new(0x5eed);
    let mut killed_in_a_call = 0;
    for round in 0..rounds {
        let name = name(&format!("kill{round}"));
        let buffer = ShmSequenceBuffer::create(&name, config()).unwrap();
        let steps = 40 + rng.next_u64() % 200;
        let episode = 3 + rng.next_u64() % 40;
        let hooked = round % 4 != 3;
        let extra = match hooked {
            true => format!(
                "1,{steps},{episode},{},{}",
                10 + round % 3,
                rng.next_u64() % 60
            ),
            false => format!("1,{steps},{episode}"),
        };
        let recovered_before = buffer.recovered();
        let mut c = child("write", &name, &extra);
        let byte = match hooked {
            true => wait_byte(&mut c),
            false => {
                std::thread::sleep(Duration::from_micros(rng.next_u64() % 3000));
                0
            }
        };
        let _ = c.kill();
        c.wait().unwrap();
        buffer.recover().unwrap();
        // By this call or by the watchdog of this process's handle, whichever came first.
        let recovered = buffer.recovered() - recovered_before;
        let before = buffer.len();
        assert!(buffer.consistency().exact, "round {round}: sums not exact");
        assert!(buffer.total() >= 0.0);
        // Every window sampleable is whole, and `len` counts them.
        let mut seen = 0;
        for leaf in 0..config().capacity() {
            if let Some(key) = buffer.key(leaf).unwrap() {
                seen += 1;
                assert!(buffer.priority(leaf).unwrap() > 0.0);
                let _ = key;
            }
        }
        assert_eq!(seen, before, "round {round}: len counts what is sampleable");
        let mut r = Xoshiro256::new(round);
        check_windows(&buffer, &mut r);
        assert!(recovered <= 1);
        if (10..=12).contains(&byte) {
            // Paused inside a call: the child was a participant holding the lane.
            assert_eq!(recovered, 1, "round {round}: the dead writer was recovered");
            killed_in_a_call += 1;
        }
        // The lane takes a new writer and goes on (a new episode, if the writer died inside
        // one): its windows complete and are whole.
        let mut lane = buffer.lane(1).unwrap();
        if (10..=12).contains(&byte) {
            assert!(
                !lane.in_episode(),
                "round {round}: the dead episode was ended"
            );
        }
        for _ in 0..100 {
            push(&mut lane, 1);
        }
        drop(lane);
        assert!(!buffer.is_empty());
        for _ in 0..4 {
            check_windows(&buffer, &mut r);
        }
        assert!(buffer.consistency().exact);
        buffer.unlink().unwrap();
    }
    eprintln!("{rounds} kills, {killed_in_a_call} inside a lane call");
    assert!(
        killed_in_a_call * 2 >= rounds,
        "too few kills inside a call"
    );
}

/// An updater process killed inside its updates holds nothing a save waits for once it is
/// recovered (its update is a record of its entry, not a count), and what it updated is
/// exact.
#[test]
fn an_updater_killed_mid_update_does_not_block_saves() {
    let name = name("updater");
    let buffer = std::sync::Arc::new(ShmSequenceBuffer::create(&name, config()).unwrap());
    {
        let mut lane = buffer.lane(0).unwrap();
        for _ in 0..60 {
            push(&mut lane, 0);
        }
    }
    let dir = std::env::temp_dir().join(format!("kr-seq-shm-upd-{}", std::process::id()));
    for round in 0..10u64 {
        let mut c = child("update", &name, "");
        let out = c.stdout.as_mut().unwrap();
        let mut byte = [0u8];
        while byte[0] != b'U' {
            out.read_exact(&mut byte).unwrap();
        }
        std::thread::sleep(Duration::from_micros(200 + 300 * round));
        c.kill().unwrap();
        c.wait().unwrap();
        buffer.recover().unwrap();
        assert!(buffer.consistency().exact);
        // The save goes through (it would wait for ever for a dead update's count).
        let _ = std::fs::remove_dir_all(&dir);
        let (tx, rx) = std::sync::mpsc::channel();
        let (b, d) = (std::sync::Arc::clone(&buffer), dir.clone());
        // A thread of its own: a save that waits for ever fails the test, not hangs it.
        std::thread::spawn(move || {
            let _ = tx.send(kary_replay::Checkpoint::save(&**b, &d));
        });
        let saved = rx.recv_timeout(Duration::from_secs(20));
        assert!(matches!(saved, Ok(Ok(()))), "round {round}: save {saved:?}");
        let mut r = Xoshiro256::new(round);
        check_windows(&buffer, &mut r);
    }
    let _ = std::fs::remove_dir_all(&dir);
    buffer.unlink().unwrap();
}
