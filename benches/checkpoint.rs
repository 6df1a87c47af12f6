//! Checkpoint save and load against plain file I/O of the same bytes, in one run.
//!
//! | group | workload (per iteration) |
//! |---|---|
//! | checkpoint/save | `save` of a full buffer (SplitLock: pause, copy, write; sequential: write) into a new directory, every file fsynced |
//! | checkpoint/load | `load` of that checkpoint into a SplitLock buffer: read, CRC, checks, exact rebuild |
//! | checkpoint/plain_write | `write_all` of the same number of bytes into one new file, fsync |
//! | checkpoint/plain_read | `read_exact` of that file into a buffer (allocated once) |
//! | checkpoint/plain_read_fresh | the same into a newly allocated buffer, as a load has |
//!
//! The buffer: 2^21 items of 128 f32 (1 GiB of columns) by default; `KARY_CKPT_ITEMS`
//! changes it. Before each read (ours and the plain one) the files' pages are dropped from
//! the page cache (`posix_fadvise(DONTNEED)`, clean pages after the fsync), so both read
//! from the disk. Files live under `KARY_CKPT_DIR` (default: `target/ckpt-bench`).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use kary_replay::{
    Checkpoint, ConcurrentBuffer, Config, DType, Load, ReplayBuffer, Schema, SplitLockBuffer,
};

const SHAPE: usize = 128;

fn items() -> usize {
    std::env::var("KARY_CKPT_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 21)
}

fn root() -> PathBuf {
    let dir = std::env::var("KARY_CKPT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ckpt-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Drop `path`'s pages (a file, or every file of a directory) from the page cache.
fn drop_cache(path: &Path) {
    let files: Vec<PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    } else {
        vec![path.to_path_buf()]
    };
    for f in files {
        let file = File::open(&f).unwrap();
        use std::os::unix::io::AsRawFd;
        // SAFETY: a valid descriptor of an open file; the advice reads nothing of ours.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn config(n: usize) -> Config {
    Config::builder(n, Schema::new().column("obs", DType::F32, SHAPE))
        .build()
        .unwrap()
}

fn fill<B: ConcurrentBuffer>(b: &B, n: usize) {
    let chunk = 4096;
    let obs: Vec<f32> = (0..chunk * SHAPE).map(|i| i as f32 * 0.5).collect();
    let priorities: Vec<f64> = (0..chunk).map(|i| 0.1 + (i % 97) as f64).collect();
    for _ in 0..n / chunk {
        b.insert_batch(&[(&obs).into()], Some(&priorities)).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let n = items();
    let bytes = (n * SHAPE * 4) as u64;
    let root = root();
    let mut group = c.benchmark_group("checkpoint");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Bytes(bytes));

    let split = SplitLockBuffer::new(config(n)).unwrap();
    fill(&split, n);
    let mut seq = ReplayBuffer::new(config(n)).unwrap();
    {
        let chunk = 4096;
        let obs: Vec<f32> = (0..chunk * SHAPE).map(|i| i as f32 * 0.5).collect();
        for _ in 0..n / chunk {
            seq.insert_batch(&[(&obs).into()], None).unwrap();
        }
    }
    let dir = root.join("ckpt");
    /// Time `iters` saves into a fresh `dir` (the removal of the last one untimed).
    fn saves(dir: &Path, iters: u64, save: impl Fn(&Path)) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let _ = std::fs::remove_dir_all(dir);
            let t = Instant::now();
            save(dir);
            total += t.elapsed();
        }
        total
    }
    group.bench_function("save/SplitLock", |b| {
        b.iter_custom(|iters| saves(&dir, iters, |d| split.save(d).unwrap()))
    });
    group.bench_function("save/sequential", |b| {
        b.iter_custom(|iters| saves(&dir, iters, |d| seq.save(d).unwrap()))
    });
    group.bench_function("load/SplitLock", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                drop_cache(&dir);
                let t = Instant::now();
                let loaded = SplitLockBuffer::load(&dir).unwrap();
                total += t.elapsed();
                assert_eq!(loaded.len(), n);
            }
            total
        })
    });

    let data = vec![7u8; bytes as usize];
    let file = root.join("plain.bin");
    group.bench_function("plain_write", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let _ = std::fs::remove_file(&file);
                let t = Instant::now();
                let mut f = File::create_new(&file).unwrap();
                f.write_all(&data).unwrap();
                f.sync_all().unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    let mut into = vec![0u8; bytes as usize];
    group.bench_function("plain_read", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                drop_cache(&file);
                let t = Instant::now();
                File::open(&file).unwrap().read_exact(&mut into).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    // The bound a load meets: it reads into a buffer it has just allocated, whose pages the
    // kernel zeroes and maps on the first touch.
    group.bench_function("plain_read_fresh", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                drop_cache(&file);
                let t = Instant::now();
                let mut fresh = vec![0u8; bytes as usize];
                File::open(&file).unwrap().read_exact(&mut fresh).unwrap();
                total += t.elapsed();
                drop(fresh);
            }
            total
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&file);
}

criterion_group!(benches, bench);
criterion_main!(benches);
