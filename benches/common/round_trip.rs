//! The core-to-core round trip: how far apart two cores are right now. Shared by
//! `benches/concurrent.rs` and `examples/staged_actor_windows.rs` (which includes this file
//! by path, as an example cannot use the benches' `common` module). On the 2-vCPU VM this
//! project was measured on it is about 65-85 ns in some hours and about 370 ns in others
//! (the host's placement of the two vCPUs), and two-thread rates follow it
//! (docs/performance.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `iters` round trips of one cache line between two fresh threads: each waits for the
/// other's store, then stores.
pub fn round_trips(iters: u64) -> Duration {
    let line = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for parity in 0..2 {
            let line = &line;
            s.spawn(move || {
                for i in 0..iters {
                    // ORDERING: Acquire/Release hand the line back and forth; nothing else
                    // is published through it.
                    while line.load(Ordering::Acquire) != 2 * i + parity {
                        std::hint::spin_loop();
                    }
                    line.store(2 * i + parity + 1, Ordering::Release);
                }
            });
        }
    });
    start.elapsed()
}
