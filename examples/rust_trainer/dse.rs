//! Design-space exploration (--auto): profile f_a(x) and f_l(x), then solve equation 5.

use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use crate::{actor::*, learner::*, monitor::*, nets::*, optim::*, replay::*};
use crate::{ckpt::RngBoard, cli::*, policy::*, rate::*};
use tch::Device;

pub(crate) fn publish_fresh_policy(board: &SnapshotBoard, o: &Options, h: &Hyper) {
    board.publish(Snapshot {
        policy: Agent::new(o, h, Device::Cpu, false).online[0].native(),
        round: 0,
    });
}

pub(crate) fn profile_actors(o: &Options, h: &Hyper, device: Device, x: usize) -> f64 {
    // Act as after the exploration schedule (epsilon at its floor, no warm-up).
    let mut p = o.clone();
    p.steps = 1;
    p.warmup = 0;
    let d = dims_for(&p);
    let buffer = make_replay(&p, h, &d, 1 << 16, device, None).expect("a valid profiling buffer");
    let rate = RateControl::unthrottled(1 << 40); // actors never wait
    let board = SnapshotBoard::default();
    publish_fresh_policy(&board, &p, h);
    let stats = Stats::default();
    let rngs = RngBoard::new(p.seed, x, 0, None);
    let s = Shared {
        o: &p,
        h,
        dims: d,
        device,
        buffer: &*buffer,
        rate: &rate,
        board: &board,
        stats: &stats,
        rngs: &rngs,
    };
    let left = AtomicUsize::new(x);
    let t0 = Instant::now();
    let (steps, dt) = std::thread::scope(|sc| {
        for i in 0..x {
            let (s, left) = (&s, &left);
            sc.spawn(move || run_actor(s, i, left));
        }
        std::thread::sleep(Duration::from_secs_f64(o.profile_seconds));
        let r = (rate.steps(), t0.elapsed().as_secs_f64());
        rate.stop();
        r
    });
    steps as f64 / dt
}

pub(crate) fn profile_learners(o: &Options, h: &Hyper, device: Device, x: usize) -> f64 {
    // A buffer filled by random play, then x learners doing real rounds, unthrottled.
    let d = dims_for(o);
    let buffer = make_replay(o, h, &d, 1 << 14, device, None).expect("a valid profiling buffer");
    {
        let mut fill = o.clone();
        fill.steps = 1 << 14;
        fill.warmup = 1 << 40;
        let rate = RateControl::unthrottled(fill.steps);
        let board = SnapshotBoard::default();
        publish_fresh_policy(&board, &fill, h);
        let stats = Stats::default();
        let rngs = RngBoard::new(fill.seed, 1, 0, None);
        let s = Shared {
            o: &fill,
            h,
            dims: dims_for(o),
            device,
            buffer: &*buffer,
            rate: &rate,
            board: &board,
            stats: &stats,
            rngs: &rngs,
        };
        run_actor(&s, 0, &AtomicUsize::new(1));
    }
    let board = SnapshotBoard::default();
    let server = ParamServer::new(o, h, Agent::new(o, h, device, false), x, &board);
    // The learners take batches freely.
    let rate = RateControl::unthrottled(1 << 40);
    let stats = Stats::default();
    let rngs = RngBoard::new(o.seed, 0, x, None);
    let s = Shared {
        o,
        h,
        dims: d,
        device,
        buffer: &*buffer,
        rate: &rate,
        board: &board,
        stats: &stats,
        rngs: &rngs,
    };
    let t0 = Instant::now();
    let (rounds, dt) = std::thread::scope(|sc| {
        for i in 0..x {
            let (s, server) = (&s, &server);
            sc.spawn(move || run_learner(s, i, server, 1 << 40));
        }
        std::thread::sleep(Duration::from_secs_f64(o.profile_seconds));
        let r = (server.round(), t0.elapsed().as_secs_f64());
        rate.stop();
        server.stop();
        r
    });
    rounds as f64 * x as f64 / dt // gradient steps (batches) per second
}

pub(crate) fn choose_threads(o: &mut Options, h: &Hyper, device: Device) {
    let m = if o.max_threads > 0 {
        o.max_threads
    } else {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2)
    };
    let (mut fa, mut fl) = (Vec::new(), Vec::new());
    println!(
        "--auto: profiling 1..{} actor and learner threads ({:.1} s each), M = {m} cores",
        m - 1,
        o.profile_seconds
    );
    println!(
        "{:>8} {:>18} {:>22}",
        "threads", "f_a (env steps/s)", "f_l (grad steps/s)"
    );
    for x in 1..m {
        fa.push(profile_actors(o, h, device, x));
        fl.push(profile_learners(o, h, device, x));
        println!("{x:>8} {:>18.0} {:>22.1}", fa[x - 1], fl[x - 1]);
        let _ = std::io::stdout().flush();
    }
    let ui = o.batch as f64 / o.replay_ratio; // env steps per gradient step
    let c = solve_equation5(&fa, &fl, ui, m).expect("M >= 2 leaves a pair");
    println!(
        "--auto: equation 5 with update_interval = B/R = {}/{} = {ui:.3} env steps per gradient step:",
        o.batch, o.replay_ratio
    );
    println!(
        "--auto: choose {} actors + {} learners: f_a = {:.0}, update_interval x f_l = {:.0} env steps/s (balanced {:.0})",
        c.actors,
        c.learners,
        fa[c.actors - 1],
        ui * fl[c.learners - 1],
        c.balanced
    );
    o.actors = c.actors;
    o.learners = c.learners;
}

// Design-space exploration: the paper's equation 5, as `trainer::solve_equation5`:
//   f_a(x_a) = update_interval x f_l(x_l),  x_a + x_l <= M.
// The exhaustive search takes the pair whose balanced rate min(f_a, update_interval f_l) is
// highest; among pairs within 2% of it, the smaller mismatch, then fewer threads.

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DseChoice {
    pub actors: usize,
    pub learners: usize,
    /// Env steps/s at the replay ratio.
    pub balanced: f64,
    /// |ln(f_a / (update_interval f_l))|.
    pub mismatch: f64,
}

/// `f_a[x-1]` and `f_l[x-1]` are the profiles for x threads. None when no pair fits in m.
pub fn solve_equation5(
    f_a: &[f64],
    f_l: &[f64],
    update_interval: f64,
    m: usize,
) -> Option<DseChoice> {
    let mut best: Option<DseChoice> = None;
    for xa in 1..=f_a.len() {
        for xl in 1..=f_l.len() {
            if xa + xl > m {
                continue;
            }
            let a = f_a[xa - 1];
            let l = update_interval * f_l[xl - 1];
            let c = DseChoice {
                actors: xa,
                learners: xl,
                balanced: a.min(l),
                mismatch: (a.max(1e-12) / l.max(1e-12)).ln().abs(),
            };
            let better = match best {
                None => true,
                Some(b) if c.balanced > b.balanced * 1.02 => true,
                Some(b) if c.balanced >= b.balanced / 1.02 => {
                    c.mismatch < b.mismatch - 1e-9
                        || ((c.mismatch - b.mismatch).abs() <= 1e-9
                            && xa + xl < b.actors + b.learners)
                }
                Some(_) => false,
            };
            if better {
                best = Some(c);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equation5_picks_the_balanced_pair() {
        // Actors scale linearly (1000/s each), learners saturate; update interval 4.
        let fa = [1000.0, 2000.0, 3000.0];
        let fl = [300.0, 500.0, 550.0];
        let c = solve_equation5(&fa, &fl, 4.0, 4).unwrap();
        // (2, 2): min(2000, 2000) = 2000 is the best balanced rate within 4 threads.
        assert_eq!((c.actors, c.learners), (2, 2));
        assert!((c.balanced - 2000.0).abs() < 1e-9 && c.mismatch < 1e-9);
        // With 3 threads: (2, 1) gives min(2000, 1200) = 1200 > (1, 2)'s 1000.
        let c = solve_equation5(&fa, &fl, 4.0, 3).unwrap();
        assert_eq!((c.actors, c.learners), (2, 1));
        assert!(solve_equation5(&fa, &fl, 4.0, 1).is_none());
    }
}
