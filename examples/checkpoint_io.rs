//! Save and load times of a checkpoint, as one JSON line: our side of
//! `bench/checkpoint_peers.py`, which runs it beside cpprb's and TorchRL's savers and
//! plain file I/O of the same bytes, in one run.
//!
//! `cargo run --release --example checkpoint_io -- DIR ITEMS REPEATS`: a `SplitLockBuffer` of
//! ITEMS items of 128 f32 observations with random priorities; each repeat saves it into a
//! new directory under DIR (every file fsynced), drops the files' pages from the page cache,
//! and loads it into a new `SplitLockBuffer` (read, CRCs, checks, exact rebuild). Prints the
//! median seconds of each, the column bytes, and whether every priority came back bit for
//! bit.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use kary_replay::{Checkpoint, ConcurrentBuffer, Config, DType, Load, Schema, SplitLockBuffer};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const SHAPE: usize = 128;

fn drop_cache(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = File::open(entry.unwrap().path()).unwrap();
        // SAFETY: a valid descriptor of an open file; the advice reads nothing of ours.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> kary_replay::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (root, items, repeats) = match &args[..] {
        [d, n, r] => (
            Path::new(d).to_path_buf(),
            n.parse::<usize>().expect("ITEMS"),
            r.parse::<usize>().expect("REPEATS"),
        ),
        _ => {
            eprintln!("usage: checkpoint_io DIR ITEMS REPEATS");
            std::process::exit(2);
        }
    };
    std::fs::create_dir_all(&root).unwrap();
    let schema = Schema::new().column("obs", DType::F32, SHAPE);
    let buffer = SplitLockBuffer::new(Config::builder(items, schema).build()?)?;
    let mut rng = SmallRng::seed_from_u64(1);
    let chunk = 4096.min(items);
    let mut obs = vec![0f32; chunk * SHAPE];
    let mut priorities = vec![0f64; chunk];
    let mut filled = 0;
    while filled < items {
        let m = chunk.min(items - filled);
        obs[..m * SHAPE].iter_mut().for_each(|x| *x = rng.random());
        priorities[..m]
            .iter_mut()
            .for_each(|p| *p = rng.random_range(0.01..10.0));
        buffer.insert_batch(&[(&obs[..m * SHAPE]).into()], Some(&priorities[..m]))?;
        filled += m;
    }
    let (mut saves, mut loads) = (Vec::new(), Vec::new());
    let mut exact = true;
    for r in 0..repeats {
        let dir = root.join(format!("ours-{r}"));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Instant::now();
        buffer.save(&dir)?;
        saves.push(t.elapsed().as_secs_f64());
        drop_cache(&dir);
        let t = Instant::now();
        let loaded = SplitLockBuffer::load(&dir)?;
        loads.push(t.elapsed().as_secs_f64());
        exact &= loaded.total_priority().to_bits() == buffer.total_priority().to_bits()
            && (0..items).all(|i| {
                loaded.priority(i).map(f64::to_bits).ok()
                    == buffer.priority(i).map(f64::to_bits).ok()
            });
        drop(loaded);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    println!(
        "{{\"save_s\": {}, \"load_s\": {}, \"column_bytes\": {}, \"priorities_exact\": {}}}",
        median(saves),
        median(loads),
        items * SHAPE * 4,
        exact
    );
    Ok(())
}
