//! Staged actors measured window by window: T threads push 36-byte transitions through
//! staged writers of 32 into one concurrent buffer (capacity 2^20, fanout 8), fresh threads
//! in every window, and each window's rate is printed on its own line.
//!
//! Why windows: `benches/concurrent.rs` reports one median per benchmark, and on two cores
//! the two-staged-actor cell of `SplitLock` moves by 2x from one run to the next. Window
//! by window that is two modes, not noise around one rate: most windows near one rate and
//! some, in runs of consecutive windows, near half of it (README, "Performance: concurrent
//! buffers").
//!
//! Run: `cargo run --release --example staged_actor_windows -- [split|lockfree] [threads]
//! [windows]` (defaults: split, 2, 30). Each window pushes 2,000,000 items per thread.

use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, Schema, SplitLockBuffer};
use std::sync::Barrier;
use std::time::Instant;

const PER_THREAD: usize = 2_000_000;
const STAGED: usize = 32;

fn windows<B: ConcurrentBuffer>(buffer: &B, threads: usize, windows: usize) {
    for w in 0..windows {
        let barrier = Barrier::new(threads + 1);
        let start = std::thread::scope(|s| {
            for t in 0..threads {
                let barrier = &barrier;
                s.spawn(move || {
                    let obs = vec![t as f32; 4];
                    let reward = vec![1.0f32];
                    let mut writer = buffer.writer(STAGED).expect("a writer of 32");
                    barrier.wait();
                    for _ in 0..PER_THREAD {
                        writer
                            .push(&[(&obs).into(), (&reward).into(), (&obs).into()], None)
                            .expect("a valid push");
                    }
                    writer.flush().expect("a flush");
                });
            }
            barrier.wait();
            Instant::now()
        });
        let seconds = start.elapsed().as_secs_f64();
        let rate = (threads * PER_THREAD) as f64 / seconds / 1e6;
        println!("window {w:3}: {rate:6.2} M items/s");
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_else(|| "split".to_string());
    let threads: usize = args.next().map_or(Ok(2), |s| s.parse())?;
    let count: usize = args.next().map_or(Ok(30), |s| s.parse())?;
    let schema = Schema::new()
        .column("obs", DType::F32, 4)
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, 4);
    let config = Config::builder(1 << 20, schema)
        .fanout(8)
        .alpha(0.6)
        .build()?;
    println!("{variant}: {threads} staged actors (writers of {STAGED}), {count} windows");
    match variant.as_str() {
        "split" => windows(&SplitLockBuffer::new(config)?, threads, count),
        "lockfree" => windows(&LockFreeBuffer::new(config)?, threads, count),
        other => return Err(format!("unknown variant {other:?}: split or lockfree").into()),
    }
    Ok(())
}
