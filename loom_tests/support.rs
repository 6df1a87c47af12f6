//! What every model needs: `model` (loom's exhaustive scheduler under `--cfg loom`, one
//! run with plain threads otherwise, so the suite always compiles and runs), the thread
//! and `Arc` types to go with it, and small helpers to build buffers.

#[cfg(loom)]
pub use loom::{sync::Arc, thread};
#[cfg(not(loom))]
pub use std::{sync::Arc, thread};

use kary_replay::{Config, ConfigBuilder, DType, DefaultPriority, Schema};

/// Run `f` under loom (every interleaving, bounded by `LOOM_MAX_PREEMPTIONS`) or once.
pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    #[cfg(loom)]
    loom::model(f);
    #[cfg(not(loom))]
    f();
}

/// `model` with at least `preemptions` preemptions explored (`LOOM_MAX_PREEMPTIONS`, when
/// larger, wins): for a model whose failing interleaving needs more than the default 2.
pub fn model_with_preemptions<F: Fn() + Sync + Send + 'static>(preemptions: usize, f: F) {
    #[cfg(loom)]
    {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(0).max(preemptions));
        builder.check(f);
    }
    #[cfg(not(loom))]
    {
        let _ = preemptions;
        f();
    }
}

/// `model` for a model whose threads wait for each other in spin loops (a save's pause):
/// every spin is a branch of loom's schedule, so the bound on branches is raised.
pub fn model_with_waits<F: Fn() + Sync + Send + 'static>(f: F) {
    #[cfg(loom)]
    {
        let mut builder = loom::model::Builder::new();
        builder.max_branches = 100_000;
        builder.check(f);
    }
    #[cfg(not(loom))]
    f();
}

/// Items are 4 equal `i64`s: a torn copy would show two different values.
pub const ROW: usize = 4;

/// The models' config, before `build`: alpha 1 (stored priority == raw priority), fanout 2.
fn builder(capacity: usize) -> ConfigBuilder {
    Config::builder(capacity, Schema::new().column("x", DType::I64, ROW))
        .fanout(2)
        .alpha(1.0)
}

/// A config with alpha 1 (stored priority == raw priority) and fanout 2.
pub fn config(capacity: usize) -> Config {
    builder(capacity).build().expect("valid config")
}

/// As [`config`], each item deleted after its `k`-th draw (`max_times_sampled`).
pub fn config_consumed(capacity: usize, k: u32) -> Config {
    builder(capacity)
        .max_times_sampled(k)
        .build()
        .expect("valid config")
}

/// As [`config_consumed`], the tree keeping its maxima (`max_heap`), for the max-heap
/// selector.
pub fn config_consumed_max_heap(capacity: usize, k: u32) -> Config {
    builder(capacity)
        .max_times_sampled(k)
        .max_heap(true)
        .build()
        .expect("valid config")
}

/// A config of two columns, `x` (as [`config`]'s) and `version` (one i64, the version
/// column), alpha 1, fanout 2.
pub fn config_versioned(capacity: usize) -> Config {
    Config::builder(
        capacity,
        Schema::new()
            .column("x", DType::I64, ROW)
            .column("version", DType::I64, 1),
    )
    .fanout(2)
    .alpha(1.0)
    .version_column("version")
    .build()
    .expect("valid config")
}

/// As [`config`], the default priority the largest live one (`DefaultPriority::LiveMax`).
pub fn config_live_max(capacity: usize) -> Config {
    builder(capacity)
        .default_priority(DefaultPriority::LiveMax)
        .build()
        .expect("valid config")
}

/// The one column of an item whose elements all equal `value`.
pub fn row(value: i64) -> [i64; ROW] {
    [value; ROW]
}

/// Loom prints every panic; a modeled death is one (`faults::Died`), caught by the model.
#[cfg(loom)]
pub fn quiet_deaths() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info
            .payload()
            .downcast_ref::<kary_replay::faults_hooks::Died>()
            .is_none()
        {
            previous(info);
        }
    }));
}
