//! `kary-replay-ckpt`: check and describe checkpoints from the command line.
//!
//! ```text
//! kary-replay-ckpt verify DIR      read every file, check every CRC and field; exit 0 or 1
//! kary-replay-ckpt inspect DIR     verify, then print config, schema, state, priorities,
//!                                  files and the user map
//! kary-replay-ckpt latest PARENT   print the newest committed numbered checkpoint
//! ```
//!
//! A sequence buffer's checkpoint is verified by loading it whole (every CRC, cursor and
//! window checked); `inspect` then prints its lanes and windows.
//!
//! Exit codes: 0 the checkpoint is good (or, for `latest`, one was found), 1 it is not (the
//! error is printed), 2 a usage error.

use std::process::ExitCode;

use kary_replay::checkpoint::{self, Report};

const USAGE: &str = "usage: kary-replay-ckpt verify DIR | inspect DIR | latest PARENT";

fn inspect(dir: &str, r: &Report) {
    let c = &r.config;
    println!(
        "checkpoint {dir} (written by kary-replay {})",
        r.crate_version
    );
    println!(
        "config: capacity {}, fanout {}, alpha {}, weights {:?}, default priority {:?}, initial priority {}",
        c.capacity(),
        c.fanout().get(),
        c.alpha(),
        c.weight_normalization(),
        c.default_priority(),
        c.initial_priority()
    );
    println!("schema:");
    for col in c.schema().columns() {
        println!("  {:<16} {:?} {:?}", col.name, col.dtype, col.dims);
    }
    println!(
        "state: {} items of {}, {} inserted, cursor {}, running maximum {}",
        r.len,
        c.capacity(),
        r.inserted,
        r.cursor,
        r.running_max
    );
    println!(
        "priorities (stored): {} positive, min {}, max {}, total {}",
        r.positive, r.min_positive, r.max, r.total
    );
    println!("files:");
    for f in &r.files {
        println!(
            "  {:<24} {:>14} bytes  crc32 {:08x}",
            f.name, f.bytes, f.crc32
        );
    }
    if !r.user.is_empty() {
        println!("user:");
        for (k, v) in &r.user {
            println!("  {k} = {v:?}");
        }
    }
}

/// `inspect` of a sequence checkpoint (loaded whole): its configuration, schema and state
/// (the `state:` line as a buffer's, in windows and steps written).
fn inspect_sequence(dir: &str, b: &kary_replay::sequence::SequenceBuffer) {
    let c = b.config();
    println!("sequence checkpoint {dir}");
    println!(
        "config: {} lanes of {} steps, window {}, period {}, partial {:?}, padding {:?}, \
         n-step {:?}, stacks {:?}, next_of {:?}, fanout {}, alpha {}",
        c.lanes(),
        c.steps_per_lane(),
        c.window(),
        c.period(),
        c.partial(),
        c.padding(),
        c.nstep().map(|n| (n.n, n.gamma, n.reward.as_str())),
        c.stacks(),
        c.next_of_columns(),
        c.tree().fanout().get(),
        c.tree().alpha()
    );
    println!("schema:");
    for col in c.schema().columns() {
        println!("  {:<16} {:?} {:?}", col.name, col.dtype, col.dims);
    }
    println!(
        "state: {} items of {}, {} inserted (windows; steps written), total priority {}",
        b.len(),
        c.capacity(),
        b.steps_written(),
        b.total()
    );
    if let Ok(user) = checkpoint::user_data(dir) {
        if !user.is_empty() {
            println!("user:");
            for (k, v) in &user {
                println!("  {k} = {v:?}");
            }
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, path) = match args.as_slice() {
        [c, p] if matches!(c.as_str(), "verify" | "inspect" | "latest") => (c.as_str(), p),
        [h] if h == "-h" || h == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if command == "latest" {
        return match checkpoint::latest(path) {
            Ok(Some(dir)) => {
                println!("{}", dir.display());
                ExitCode::SUCCESS
            }
            Ok(None) => {
                eprintln!("no committed checkpoint in {path}");
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        };
    }
    match checkpoint::verify(path) {
        Ok(r) => {
            if command == "inspect" {
                inspect(path, &r);
            } else {
                println!(
                    "ok: {path}: {} items of {}, {} inserted, {} files",
                    r.len,
                    r.config.capacity(),
                    r.inserted,
                    r.files.len()
                );
            }
            ExitCode::SUCCESS
        }
        Err(
            e @ kary_replay::Error::Checkpoint {
                kind: kary_replay::CheckpointErrorKind::Format,
                ..
            },
        ) => match <kary_replay::sequence::SequenceBuffer as kary_replay::Load>::load(path) {
            Ok(b) => {
                let c = b.config();
                if command == "inspect" {
                    inspect_sequence(path, &b);
                } else {
                    println!(
                        "ok: {path}: sequence checkpoint, {} windows of {} (window {}, period \
                         {}), {} lanes of {} steps, {} steps written",
                        b.len(),
                        c.capacity(),
                        c.window(),
                        c.period(),
                        c.lanes(),
                        c.steps_per_lane(),
                        b.steps_written()
                    );
                }
                ExitCode::SUCCESS
            }
            Err(kary_replay::Error::Checkpoint {
                kind: kary_replay::CheckpointErrorKind::Format,
                ..
            }) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
