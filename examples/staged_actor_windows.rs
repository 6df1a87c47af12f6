//! Staged actors measured window by window: T threads push 36-byte transitions through
//! staged writers into one concurrent buffer (capacity 2^20, fanout 8), fresh threads
//! in every window, and each window's rate is printed on its own line.
//!
//! Why windows: `benches/concurrent.rs` reports one median per benchmark, and on two cores
//! the two-staged-actor cell moves by 2x from one run to the next. Window by window that is
//! two modes, not noise around one rate: most windows near one rate and some, in runs of
//! consecutive windows, near half of it, both threads alike; writers flushing at different
//! periods break the slow mode (docs/performance.md).
//!
//! Run: `cargo run --release --example staged_actor_windows -- [split|lockfree] [threads]
//! [windows] [step]` (defaults: split, 2, 30, 0): thread t flushes every `32 + t * step`
//! items, and pushes 2,000,000 items per window. Each line gives the window's rate (all
//! items over the window's time), each thread's own rate, and the round trip of one cache
//! line between two threads measured just before the window: the slow windows are those
//! of a slow round trip (docs/performance.md).

use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, Schema, SplitLockBuffer};
use std::sync::Barrier;
use std::time::Instant;

const PER_THREAD: usize = 2_000_000;
const STAGED: usize = 32;

#[path = "../benches/common/round_trip.rs"]
mod round_trip;

/// Nanoseconds per round trip of one cache line between two cores, measured now: the slow
/// windows are the windows of the slow round trip (`round_trip.rs`).
fn round_trip_ns() -> f64 {
    let rounds = 100_000u64;
    round_trip::round_trips(rounds).as_secs_f64() / rounds as f64 * 1e9
}

fn windows<B: ConcurrentBuffer>(buffer: &B, threads: usize, windows: usize, step: usize) {
    for w in 0..windows {
        let round_trip = round_trip_ns();
        let barrier = Barrier::new(threads + 1);
        let (start, each) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let obs = vec![t as f32; 4];
                        let reward = vec![1.0f32];
                        let mut writer = buffer.writer(STAGED + t * step).expect("a writer");
                        barrier.wait();
                        let start = Instant::now();
                        for _ in 0..PER_THREAD {
                            writer
                                .push(&[(&obs).into(), (&reward).into(), (&obs).into()], None)
                                .expect("a valid push");
                        }
                        writer.flush().expect("a flush");
                        PER_THREAD as f64 / start.elapsed().as_secs_f64() / 1e6
                    })
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            let each: Vec<f64> = handles
                .into_iter()
                .map(|h| h.join().expect("an actor"))
                .collect();
            (start, each)
        });
        let seconds = start.elapsed().as_secs_f64();
        let rate = (threads * PER_THREAD) as f64 / seconds / 1e6;
        let each: Vec<String> = each.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "window {w:3}: {rate:6.2} M items/s (each thread over its own time: {}); \
             core-to-core round trip before it {round_trip:.0} ns",
            each.join(", ")
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_else(|| "split".to_string());
    let threads: usize = args.next().map_or(Ok(2), |s| s.parse())?;
    let count: usize = args.next().map_or(Ok(30), |s| s.parse())?;
    let step: usize = args.next().map_or(Ok(0), |s| s.parse())?;
    let schema = Schema::new()
        .column("obs", DType::F32, 4)
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, 4);
    let config = Config::builder(1 << 20, schema)
        .fanout(8)
        .alpha(0.6)
        .build()?;
    println!("{variant}: {threads} staged actors, thread t flushing every {STAGED} + t x {step} items, {count} windows");
    match variant.as_str() {
        "split" => windows(&SplitLockBuffer::new(config)?, threads, count, step),
        "lockfree" => windows(&LockFreeBuffer::new(config)?, threads, count, step),
        other => return Err(format!("unknown variant {other:?}: split or lockfree").into()),
    }
    Ok(())
}
