//! The shared buffer across real processes: this test binary runs itself again as the
//! other participants (`KR_SHM_CHILD` says what a child does), kills them at chosen points
//! of the protocol and at random times, and checks what survives.

#![cfg(all(target_os = "linux", not(loom)))]

#[path = "support/scale.rs"]
mod scale;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kary_replay::buffer::{shm_pause_at, ShmPoint};
use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, Key, SampleMode, Schema, ShmBuffer, Xoshiro256,
};

const OBS: usize = 4;

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, OBS)
        .column("id", DType::I64, 1)
        .column("check", DType::I64, 1)
}

fn config(capacity: usize) -> Config {
    Config::builder(capacity, schema())
        .alpha(1.0)
        .build()
        .unwrap()
}

fn name(tag: &str) -> String {
    format!(
        "kr-test-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "")
    .replace("ThreadId", "t")
}

/// The row of item `id`: observations and a checksum that a torn row breaks.
fn row(id: i64) -> ([f32; OBS], i64) {
    let obs = std::array::from_fn(|k| (id * 7 + k as i64) as f32 + 0.25);
    (obs, checksum(&obs, id))
}

fn checksum(obs: &[f32], id: i64) -> i64 {
    obs.iter().fold(id.wrapping_mul(0x9E37_79B9), |h, x| {
        h.rotate_left(5) ^ i64::from(x.to_bits())
    })
}

/// The columns of the rows `ids` (see `row`).
struct Rows {
    obs: Vec<f32>,
    id: Vec<i64>,
    check: Vec<i64>,
}

impl Rows {
    fn columns(&self) -> [kary_replay::ColumnSlice<'_>; 3] {
        [
            (&self.obs[..]).into(),
            (&self.id[..]).into(),
            (&self.check[..]).into(),
        ]
    }
}

fn rows(ids: std::ops::Range<i64>) -> Rows {
    let n = ids.clone().count();
    let mut r = Rows {
        obs: Vec::with_capacity(n * OBS),
        id: Vec::with_capacity(n),
        check: Vec::with_capacity(n),
    };
    for i in ids {
        let (o, c) = row(i);
        r.obs.extend_from_slice(&o);
        r.id.push(i);
        r.check.push(c);
    }
    r
}

fn insert_rows(buffer: &impl ConcurrentBuffer, ids: std::ops::Range<i64>) -> Vec<Key> {
    let r = rows(ids);
    let priorities: Vec<f64> = (0..r.id.len()).map(|j| 1.0 + (j % 5) as f64).collect();
    buffer
        .insert_batch(&r.columns(), Some(&priorities))
        .unwrap()
}

/// Sample `batch` rows and check every one: its checksum, and its key against the slot's.
fn sample_and_check(buffer: &impl ConcurrentBuffer, rng: &mut Xoshiro256, batch: usize) -> usize {
    let s = match buffer.sample(batch, 0.4, SampleMode::Stratified, rng) {
        Ok(s) => s,
        Err(Error::Empty | Error::ZeroTotalPriority) => return 0,
        Err(e) => panic!("sample: {e}"),
    };
    let (obs, ids, checks) = (
        s.columns[0].as_f32().unwrap(),
        s.columns[1].as_i64().unwrap(),
        s.columns[2].as_i64().unwrap(),
    );
    for r in 0..s.indices.len() {
        let o = &obs[r * OBS..(r + 1) * OBS];
        assert_eq!(
            checksum(o, ids[r]),
            checks[r],
            "torn row {r}: {o:?} id {}",
            ids[r]
        );
        assert_eq!(o, &row(ids[r]).0[..], "row {r} is not item {}", ids[r]);
        assert!(s.priorities[r] > 0.0);
    }
    s.indices.len()
}

/// Run this test binary again as a child doing `what` on buffer `name`.
fn child(what: &str, name: &str, extra: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("KR_SHM_CHILD", what)
        .env("KR_SHM_NAME", name)
        .env("KR_SHM_EXTRA", extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Wait until `child` writes a pause point's byte (1..=9) to its stdout.
fn wait_paused(child: &mut Child) -> u8 {
    let out = child.stdout.as_mut().unwrap();
    let mut byte = [0u8];
    loop {
        match out.read(&mut byte) {
            Ok(1) if (1..=9).contains(&byte[0]) => return byte[0],
            Ok(1) => continue,
            other => panic!(
                "the child ended before pausing: {other:?}, status {:?}",
                child.wait()
            ),
        }
    }
}

/// What a child process does (the entry point of `child`).
#[test]
fn child_entry() {
    let Ok(what) = std::env::var("KR_SHM_CHILD") else {
        return;
    };
    let name = std::env::var("KR_SHM_NAME").unwrap();
    let extra: Vec<u64> = std::env::var("KR_SHM_EXTRA")
        .unwrap()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    if what == "tiny" {
        // Under a /dev/shm of 1 MiB (the parent mounted it): a buffer that does not fit is
        // a clean allocation error at creation, one that fits works to its last byte.
        let big = ShmBuffer::create(&name, config(1 << 16));
        assert!(matches!(big, Err(Error::Allocation { .. })), "{big:?}");
        assert!(
            ShmBuffer::attach(&name).is_err(),
            "a failed creation left its name"
        );
        let small = ShmBuffer::create(&name, config(4096)).unwrap();
        insert_rows(&small, 0..4096);
        assert_eq!(small.len(), 4096);
        small.unlink().unwrap();
        print!("T");
        return;
    }
    let buffer = if what == "create" {
        ShmBuffer::create(&name, config(256)).unwrap()
    } else {
        ShmBuffer::attach(&name).unwrap()
    };
    let point = |p: u64| match p {
        1 => ShmPoint::Reserved,
        2 => ShmPoint::Owned,
        3 => ShmPoint::Copying,
        4 => ShmPoint::Installed,
        5 => ShmPoint::Publishing,
        6 => ShmPoint::Updating,
        7 => ShmPoint::Climbing,
        8 => ShmPoint::Sampling,
        _ => ShmPoint::Saving,
    };
    match what.as_str() {
        // extra: first id, items, batch, [pause point, after]
        "write" | "create" => {
            if extra.len() > 3 {
                shm_pause_at(point(extra[3]), extra[4], 1);
            }
            let (first, items, batch) = (extra[0] as i64, extra[1] as i64, extra[2] as i64);
            let mut id = first;
            while id < first + items {
                let end = (id + batch).min(first + items);
                insert_rows(&buffer, id..end);
                id = end;
            }
        }
        // extra: rounds, [pause point, after]
        "update" | "sample" => {
            if extra.len() > 1 {
                shm_pause_at(point(extra[1]), extra[2], 1);
            }
            let mut rng = Xoshiro256::new(extra[0]);
            for round in 0..extra[0] {
                let s = buffer
                    .sample(32, 0.4, SampleMode::Stratified, &mut rng)
                    .unwrap();
                if what == "update" {
                    let p: Vec<f64> = (0..s.keys.len())
                        .map(|j| 0.5 + ((round as usize + j) % 7) as f64)
                        .collect();
                    buffer.update_priorities(&s.keys, &p).unwrap();
                }
            }
        }
        // extra: [pause point, after]
        "save" => {
            if extra.len() > 1 {
                shm_pause_at(point(extra[0]), extra[1], 1);
            }
            let dir = std::env::temp_dir().join(format!("kr-shm-save-{}", std::process::id()));
            for _ in 0..=extra.get(1).copied().unwrap_or(0) {
                let _ = std::fs::remove_dir_all(&dir);
                kary_replay::Checkpoint::save(&buffer, &dir).unwrap();
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
        // extra: samples of 16 to take, each waiting for the rate limit
        "rate-sample" => {
            let mut rng = Xoshiro256::new(5);
            for _ in 0..extra[0] {
                buffer
                    .sample(16, 0.4, SampleMode::Stratified, &mut rng)
                    .unwrap();
            }
        }
        // insert 16 at a time, each waiting for the rate limit, until the limit is closed
        "rate-insert" => {
            for first in (1_000_000..).step_by(16) {
                match buffer.insert_batch(&rows(first..first + 16).columns(), None) {
                    Ok(_) => {}
                    Err(Error::Closed) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        other => panic!("unknown child role {other}"),
    }
    // Report done (a byte past the pause points).
    print!("D");
}

/// An attached handle reads the configuration's choices from the mapping: a tree with
/// maxima (`max_heap`) draws the max-heap's top through either handle.
#[test]
fn an_attached_handle_keeps_max_heap() {
    let name = name("max-heap");
    let schema = Schema::new().column("x", DType::I64, []);
    let config = Config::builder(8, schema).max_heap(true).build().unwrap();
    let a = ShmBuffer::create(&name, config).unwrap();
    let b = ShmBuffer::attach(&name).unwrap();
    assert!(b.config().max_heap());
    a.insert_batch(&[(&[0i64, 1, 2][..]).into()], Some(&[2.0, 5.0, 1.0]))
        .unwrap();
    let top = b
        .sample(1, 0.4, SampleMode::MaxHeap, &mut Xoshiro256::new(1))
        .unwrap();
    assert_eq!(top.columns[0].as_i64().unwrap(), [1]);
}

#[test]
fn two_handles_share_one_buffer() {
    let name = name("share");
    let a = ShmBuffer::create(&name, config(64)).unwrap();
    let b = ShmBuffer::attach(&name).unwrap();
    assert_eq!(b.config().capacity(), 64);
    assert_eq!(b.config().key_tag(), a.config().key_tag());
    let keys = insert_rows(&a, 0..10);
    assert_eq!(b.len(), 10);
    let mut rng = Xoshiro256::new(1);
    assert_eq!(sample_and_check(&b, &mut rng, 16), 16);
    // A key from one handle updates through the other.
    let report = b.update_priorities(&keys, &vec![3.0; keys.len()]).unwrap();
    assert_eq!(report.applied, 10);
    assert_eq!(a.total_priority(), 30.0);
    assert!(a.consistency().exact);
    let parts = a.participants().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts.iter().filter(|p| p.this_handle).count(), 1);
    drop(b);
    assert_eq!(a.participants().unwrap().len(), 1);
    a.unlink().unwrap();
    assert!(matches!(
        ShmBuffer::attach(&name),
        Err(Error::Shared { .. })
    ));
    // The handle outlives its name.
    insert_rows(&a, 10..20);
    assert_eq!(a.len(), 20);
}

#[test]
fn names_are_checked_and_taken_once() {
    for bad in ["", ".hidden", "a/b", "sp ace", &"x".repeat(201)] {
        assert!(
            matches!(ShmBuffer::create(bad, config(8)), Err(Error::Shared { .. })),
            "{bad:?}"
        );
    }
    let name = name("taken");
    let a = ShmBuffer::create(&name, config(8)).unwrap();
    let e = ShmBuffer::create(&name, config(8)).unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    a.unlink().unwrap();
    assert!(matches!(
        ShmBuffer::unlink_name(&name),
        Err(Error::Shared { .. })
    ));
}

#[test]
fn two_creators_racing_for_one_name_one_wins() {
    let name = name("race");
    let wins: Vec<bool> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| ShmBuffer::create(&name, config(32)).map(drop).is_ok()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(wins.iter().filter(|&&w| w).count(), 1, "{wins:?}");
    ShmBuffer::unlink_name(&name).unwrap();
}

#[test]
fn a_file_of_another_kind_or_layout_is_refused() {
    let name = name("foreign");
    let path = format!("/dev/shm/{name}");
    std::fs::write(&path, vec![7u8; 100_000]).unwrap();
    let e = ShmBuffer::attach(&name).unwrap_err();
    assert!(e.to_string().contains("magic"), "{e}");
    std::fs::write(&path, b"short").unwrap();
    assert!(ShmBuffer::attach(&name).is_err());
    std::fs::remove_file(&path).unwrap();
    // A real buffer whose layout hash (header bytes 16..24) no longer matches.
    let b = ShmBuffer::create(&name, config(16)).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[16] ^= 1;
    let other = format!("{name}-x");
    std::fs::write(format!("/dev/shm/{other}"), &bytes).unwrap();
    let e = ShmBuffer::attach(&other).unwrap_err();
    assert!(e.to_string().contains("layout"), "{e}");
    // Another version (bytes 8..12).
    bytes[16] ^= 1;
    bytes[8] = 99;
    std::fs::write(format!("/dev/shm/{other}"), &bytes).unwrap();
    let e = ShmBuffer::attach(&other).unwrap_err();
    assert!(e.to_string().contains("version"), "{e}");
    ShmBuffer::unlink_name(&other).unwrap();
    b.unlink().unwrap();
}

#[test]
fn an_anonymous_buffer_is_attached_by_descriptor() {
    let a = ShmBuffer::create_anonymous(config(32)).unwrap();
    let b = ShmBuffer::attach_fd(a.fd()).unwrap();
    insert_rows(&b, 0..5);
    assert_eq!(a.len(), 5);
    assert!(a.unlink().is_err());
    let c = <ShmBuffer as ConcurrentBuffer>::new(config(8)).unwrap();
    assert_eq!(c.name(), "memfd");
}

/// Wait (at most 10 s) until `done` holds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wait (at most 10 s) for `child` to exit; its status.
fn exit_within(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the child did not exit");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_rate_limit_is_one_for_every_process() {
    use kary_replay::rate::{Batches, RateLimit};
    // 2 samples per insert once 32 items are in, within +-64 samples; calls of 16 at most.
    let limited = Config::builder(1024, schema())
        .alpha(1.0)
        .rate_limit(
            RateLimit::sample_to_insert_ratio(2.0, 32, 64.0),
            Batches {
                insert: 16,
                sample: 16,
            },
        )
        .build()
        .unwrap();
    let name = name("rate");
    let buffer = ShmBuffer::create(&name, limited).unwrap();
    let stats = || buffer.rate_stats().unwrap();

    // A sampler process waits for the items this process inserts (32 before sampling opens).
    let mut sampler = child("rate-sample", &name, "4");
    wait_for("the sampler to wait", || stats().sample_waiters == 1);
    insert_rows(&buffer, 0..16);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        sampler.try_wait().unwrap().is_none(),
        "sampled before 32 items"
    );
    insert_rows(&buffer, 16..32);
    assert!(exit_within(&mut sampler).success());
    let s = stats();
    assert_eq!((s.inserts, s.samples, s.diff), (32, 64, 0.0));
    assert_eq!(s.sample_waiters, 0);
    let other = ShmBuffer::attach(&name).unwrap();
    assert_eq!(other.rate_stats().unwrap(), buffer.rate_stats().unwrap());

    // Inserts up to the range's top; the next one waits, in this process and in another.
    for first in (32..96).step_by(16) {
        insert_rows(&buffer, first..first + 16);
    }
    let more = rows(96..112);
    assert!(matches!(
        buffer.try_insert_batch(&more.columns(), None),
        Err(Error::RateLimited(_))
    ));
    assert_eq!(
        (stats().inserts, buffer.len()),
        (96, 96),
        "a refusal spent nothing"
    );
    let mut inserter = child("rate-insert", &name, "");
    wait_for("the inserter to wait", || stats().insert_waiters == 1);
    // A sample in this process makes room: the other process's insert goes in.
    let mut rng = Xoshiro256::new(9);
    for _ in 0..2 {
        buffer
            .sample(16, 0.4, SampleMode::Stratified, &mut rng)
            .unwrap();
    }
    wait_for("the inserter's insert", || stats().inserts == 112);
    wait_for("the inserter to wait again", || stats().insert_waiters == 1);
    // A close in one process ends the waits of the others, and every later call.
    let closed_at = Instant::now();
    other.close();
    assert!(exit_within(&mut inserter).success());
    assert!(closed_at.elapsed() < Duration::from_secs(2));
    assert!(stats().closed && buffer.rate_limiter().unwrap().is_closed());
    assert!(matches!(
        buffer.sample(16, 0.4, SampleMode::Stratified, &mut rng),
        Err(Error::Closed)
    ));
    assert_eq!(buffer.len(), 112);
    assert!(buffer.consistency().exact);
    buffer.unlink().unwrap();
}

#[test]
fn a_child_process_writes_what_the_parent_samples() {
    let name = name("child");
    let buffer = ShmBuffer::create(&name, config(1024)).unwrap();
    let mut c = child("write", &name, "0,500,7");
    let status = c.wait().unwrap();
    assert!(status.success());
    assert_eq!(buffer.len(), 500);
    let mut rng = Xoshiro256::new(2);
    for _ in 0..20 {
        assert_eq!(sample_and_check(&buffer, &mut rng, 64), 64);
    }
    assert!(buffer.consistency().exact);
    buffer.unlink().unwrap();
}

/// Kill a child paused at `point` (its `after`-th time there) while it `role`s; then the
/// survivors go on: returns the time from the kill to the recovery, and checks the rows,
/// the sums and the losses.
fn kill_at(role: &str, point: u64, after: u64, seed: u64) -> Duration {
    let name = name(&format!("kill{point}-{after}-{seed}"));
    let capacity = 256;
    let buffer = ShmBuffer::create(&name, config(capacity)).unwrap();
    insert_rows(&buffer, 0..100);
    let batch = 1 + seed % 9;
    let mut c = match role {
        "write" => child("write", &name, &format!("100,1000,{batch},{point},{after}")),
        "save" => child("save", &name, &format!("{point},{after}")),
        _ => child(role, &name, &format!("50,{point},{after}")),
    };
    wait_paused(&mut c);
    c.kill().unwrap();
    c.wait().unwrap();
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("kr-shm-save-{}", c.id())));
    let killed = Instant::now();
    // Recovery alone (the watchdog's, or this call's) leaves the tree exact: an updater
    // killed between its leaf stores and its climb included.
    buffer.recover().unwrap();
    assert!(
        buffer.consistency().exact,
        "sums not exact after the recovery"
    );
    assert_eq!(buffer.participants().unwrap().len(), 1);
    let mut rng = Xoshiro256::new(seed);
    sample_and_check(&buffer, &mut rng, 64);
    // A save by the survivor does not wait for the dead (its update, its save, its writes).
    let dir = std::env::temp_dir().join(format!("{name}-ckpt"));
    let _ = std::fs::remove_dir_all(&dir);
    kary_replay::Checkpoint::save(&buffer, &dir).unwrap();
    let loaded = <kary_replay::LockFreeBuffer as kary_replay::Load>::load(&dir).unwrap();
    assert_eq!(loaded.inserted(), buffer.inserted());
    assert!(loaded.consistency().exact);
    std::fs::remove_dir_all(&dir).unwrap();
    // The survivor inserts over the whole ring (through the dead writer's slots) and samples.
    let mut next = 10_000;
    let mut waited = Duration::ZERO;
    for _ in 0..3 {
        let t = Instant::now();
        insert_rows(&buffer, next..next + capacity as i64);
        waited = waited.max(t.elapsed());
        next += capacity as i64;
        sample_and_check(&buffer, &mut rng, 64);
    }
    let recovered_in = killed.elapsed();
    assert_eq!(
        buffer.recovered(),
        1,
        "the dead participant was not recovered"
    );
    assert!(buffer.participants().unwrap().len() == 1);
    assert!(buffer.consistency().exact, "sums not exact at rest");
    // Every slot holds an item of the survivor's last pass now.
    for i in 0..capacity {
        assert!(
            buffer.key(i).unwrap().is_some(),
            "slot {i} empty after a full pass"
        );
    }
    assert!(
        waited < Duration::from_secs(2),
        "an insert waited {waited:?}"
    );
    eprintln!("{role} killed at point {point} (after {after}): recovered {} in {recovered_in:?}, an insert waited at most {waited:?}", buffer.recovered());
    buffer.unlink().unwrap();
    recovered_in
}

#[test]
fn a_writer_killed_at_every_point_is_recovered() {
    for point in 1..=5 {
        for after in [0, 3] {
            kill_at("write", point, after, point * 10 + after);
        }
    }
}

#[test]
fn an_updater_a_sampler_or_a_saver_killed_mid_call_blocks_nobody() {
    for (role, point) in [("update", 6), ("update", 7), ("sample", 8), ("save", 9)] {
        for after in [0, 2] {
            kill_at(role, point, after, point * 10 + after);
        }
    }
}

/// Every item the buffer holds, read back once each (priorities set to 1, one fraction in
/// the middle of each item's share): each row's checksum must hold. Returns how many.
fn check_every_row(buffer: &ShmBuffer) -> usize {
    let keys: Vec<Key> = (0..buffer.capacity())
        .filter_map(|i| buffer.key(i).unwrap())
        .collect();
    if keys.is_empty() {
        return 0;
    }
    buffer
        .update_priorities(&keys, &vec![1.0; keys.len()])
        .unwrap();
    let m = keys.len();
    let fractions: Vec<f64> = (0..m).map(|j| (j as f64 + 0.5) / m as f64).collect();
    let mut out = kary_replay::SampleBatch::default();
    buffer
        .sample_at_into(&fractions, &mut Xoshiro256::new(1), &mut out)
        .unwrap();
    let mut seen: Vec<usize> = out.indices.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), m, "every held item once");
    let (obs, ids, checks) = (
        out.columns[0].as_f32().unwrap(),
        out.columns[1].as_i64().unwrap(),
        out.columns[2].as_i64().unwrap(),
    );
    for r in 0..m {
        let o = &obs[r * OBS..(r + 1) * OBS];
        assert_eq!(
            checksum(o, ids[r]),
            checks[r],
            "torn row in slot {}",
            out.indices[r]
        );
        assert_eq!(o, &row(ids[r]).0[..]);
    }
    m
}

/// Kills at random times (and at random protocol points) of writers, updaters and
/// samplers: each round a fresh buffer, a child that works on it, a kill; then the rows,
/// the losses (at most the dead writer's one reservation), the sums, and a survivor that
/// writes over every slot without waiting past the bound. `KR_SHM_KILLS` rounds (default
/// 1000, scaled by `KARY_STRESS_SCALE`).
#[test]
fn random_kills_lose_at_most_the_dead_writers_reservation() {
    let rounds: u64 = std::env::var("KR_SHM_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(scale::scaled(1000, 20) as u64);
    let capacity = 512;
    let mut rng = Xoshiro256::new(0x5eed);
    let mut worst = Duration::ZERO;
    let mut lost_total = 0;
    for round in 0..rounds {
        let name = name(&format!("random{round}"));
        let buffer = ShmBuffer::create(&name, config(capacity)).unwrap();
        insert_rows(&buffer, 0..64);
        let role = ["write", "write", "update", "sample"][(rng.next_u64() % 4) as usize];
        let batch = 1 + rng.next_u64() % 40;
        let hooked = rng.next_u64() % 3 == 0;
        let extra = match (role, hooked) {
            ("write", false) => format!("64,400,{batch}"),
            ("write", true) => format!(
                "64,400,{batch},{},{}",
                1 + rng.next_u64() % 5,
                rng.next_u64() % 4
            ),
            (_, false) => "30".to_string(),
            ("update", true) => format!("30,{},{}", 6 + rng.next_u64() % 3, rng.next_u64() % 4),
            (_, true) => format!("30,8,{}", rng.next_u64() % 4),
        };
        let mut c = child(role, &name, &extra);
        if hooked {
            wait_paused(&mut c);
        } else {
            std::thread::sleep(Duration::from_micros(rng.next_u64() % 6000));
        }
        let _ = c.kill();
        c.wait().unwrap();
        buffer.recover().unwrap();
        assert!(
            buffer.consistency().exact,
            "round {round}: sums not exact after recovery"
        );
        let inserted = buffer.inserted();
        assert!(inserted <= capacity as u64);
        let held = check_every_row(&buffer);
        let lost = inserted as usize - held;
        if role == "write" {
            assert!(
                lost as u64 <= batch,
                "round {round}: lost {lost} of a reservation of {batch}"
            );
        } else {
            assert_eq!(lost, 0, "round {round}: a {role} killed lost items");
        }
        lost_total += lost;
        // A survivor writes over every slot: nothing the dead held blocks it.
        let t = Instant::now();
        insert_rows(&buffer, 100_000..100_000 + capacity as i64);
        worst = worst.max(t.elapsed());
        assert_eq!(check_every_row(&buffer), capacity);
        buffer.unlink().unwrap();
    }
    eprintln!(
        "{rounds} kills: {lost_total} items lost in all, the slowest survivor pass took {worst:?}"
    );
    assert!(
        worst < Duration::from_secs(1),
        "a survivor waited {worst:?}"
    );
}

#[test]
fn a_stale_mapping_from_a_crashed_run_is_attached_and_recovered() {
    let name = name("stale");
    // The creator itself dies holding a write.
    let mut c = child("create", &name, "0,200,16,3,2");
    wait_paused(&mut c);
    c.kill().unwrap();
    c.wait().unwrap();
    // The attacher takes the first entry whose lease is free, the dead creator's, and
    // recovers it before it is its own.
    let buffer = ShmBuffer::attach(&name).unwrap();
    assert_eq!(buffer.recovered(), 1);
    assert_eq!(buffer.recover().unwrap(), 0);
    assert!(buffer.consistency().exact);
    let held = check_every_row(&buffer);
    assert!((32..=48).contains(&held), "held {held}");
    insert_rows(&buffer, 1000..1256);
    assert_eq!(check_every_row(&buffer), 256);
    buffer.unlink().unwrap();
}

#[test]
fn a_handle_inherited_across_fork_attaches_again_in_the_child() {
    for named in [true, false] {
        let name = name("fork");
        let buffer = match named {
            true => ShmBuffer::create(&name, config(64)).unwrap(),
            false => ShmBuffer::create_anonymous(config(64)).unwrap(),
        };
        insert_rows(&buffer, 0..8);
        // SAFETY: the child only calls into the buffer and exits with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // The inherited handle takes an entry of its own on its first call: two
            // participants, the parent's and the child's, and the child's writes land.
            let parts = buffer.participants().map(|p| p.len());
            insert_rows(&buffer, 8..10);
            let ok = matches!(parts, Ok(2)) && buffer.len() == 10;
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status}"
        );
        assert_eq!(buffer.len(), 10);
        // The child exited without dropping its handle: its lease went with the process,
        // and its entry is recovered (it held nothing).
        assert_eq!(buffer.participants().unwrap().len(), 1);
        buffer.recover().unwrap();
        assert_eq!(buffer.recovered(), 1);
        assert_eq!(check_every_row(&buffer), 10);
        if named {
            buffer.unlink().unwrap();
        }
    }
}

#[test]
fn a_tiny_dev_shm_fails_at_creation_not_later() {
    // A private mount namespace with a 1 MiB /dev/shm: needs unshare and root (or user
    // namespaces); says so and passes where the machine has neither.
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {} --exact child_entry --nocapture --test-threads=1",
        exe.display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--map-root-user", "sh", "-c", &script])
        .env("KR_SHM_CHILD", "tiny")
        .env("KR_SHM_NAME", name("tiny"))
        .env("KR_SHM_EXTRA", "")
        .output();
    match out {
        Ok(out) if out.status.success() => {
            assert!(
                String::from_utf8_lossy(&out.stdout).contains('T'),
                "the child did not run"
            );
        }
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("unshare") => {
            eprintln!(
                "skipped: no mount namespace here: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(out) => panic!(
            "the tiny /dev/shm child failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("skipped: cannot run unshare: {e}"),
    }
}
