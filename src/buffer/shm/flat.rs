//! The flat family in a mapping: [`ShmBuffer`], the lock-free buffer over a [`Handle`].

use std::sync::Arc;

use super::handle::{shared_handle_api, Family, Handle};
use super::recover::Recoverer;
use crate::buffer::reservations::{Entry, Journal};
use crate::buffer::slot_buffer::SlotBuffer;
use crate::buffer::slots::ReadMode;
use crate::buffer::{ConcurrentBuffer, Config};
use crate::error::Result;
use crate::region::{Region, RegionBuf};
use crate::tree::AtomicSumTree;

impl Family for SlotBuffer<AtomicSumTree> {
    type Config = Config;
    const MAGIC: [u8; 8] = *b"KRSHMBUF";
    const WHAT: &'static str = "shared buffer";

    fn prepare(config: Config) -> Config {
        config.tagged()
    }
    fn config_json(config: &Config) -> String {
        crate::buffer::config_json::config_json(config)
    }
    fn config_from_json(json: &[u8], label: &str) -> Result<Config> {
        crate::buffer::config_json::config_from_json(json, std::path::Path::new(label))
    }
    fn build(config: &Config, region: &mut Region) -> Result<Self> {
        SlotBuffer::in_region(config.clone(), region)
    }
    fn layout_sizes() -> Vec<usize> {
        vec![
            std::mem::size_of::<crate::buffer::slot_buffer::Counters>(),
            std::mem::size_of::<crate::rate::RateWords>(),
        ]
    }
    fn join(&mut self, me: usize, table: &Arc<RegionBuf<Entry>>) {
        self.slots.set_mode(ReadMode::Optimistic {
            owner: me as u64 + 1,
        });
        self.journal = Some(Journal::new(Arc::clone(table), me));
    }
    fn recover(&self, table: &[Entry], dead: &[usize]) -> bool {
        Recoverer {
            buffer: self,
            table,
        }
        .recover_entries(dead)
    }
}

/// The lock-free buffer with its state in a mapping shared by processes: see the module
/// doc of `buffer::shm` and docs/design.md ("One buffer across processes").
///
/// Every process that uses the buffer holds a handle: the creator's
/// ([`ShmBuffer::create`], or [`ConcurrentBuffer::new`] for an anonymous one), and one
/// per attach ([`ShmBuffer::attach`] by name, [`ShmBuffer::attach_fd`] by descriptor).
/// A handle is a [`ConcurrentBuffer`] like the in-process buffers, shared by the threads
/// of its process. A process that dies, at any instruction, costs at most the items it
/// was writing: a survivor recovers what it held within
/// [`WATCH_INTERVAL`](crate::buffer::WATCH_INTERVAL) and the time of one recovery.
///
/// A handle survives `fork`: the child's copy attaches again on its first call (its
/// own participant entry and lease, its own watchdog), so a buffer passed to a forked
/// process by inheritance works there as it does in its parent.
///
/// ```
/// # #[cfg(target_os = "linux")] {
/// use kary_replay::{ConcurrentBuffer, Config, DType, Schema, ShmBuffer};
/// let name = format!("kr-doc-{}", std::process::id());
/// let config = Config::builder(64, Schema::new().column("x", DType::F32, 2)).build()?;
/// let actor = ShmBuffer::create(&name, config)?;
/// let learner = ShmBuffer::attach(&name)?; // in another process, usually
/// actor.insert(&[(&[1.0f32, 2.0][..]).into()], Some(1.0))?;
/// assert_eq!(learner.len(), 1);
/// assert_eq!(learner.participants()?.len(), 2);
/// actor.unlink()?;
/// # }
/// # Ok::<(), kary_replay::Error>(())
/// ```
#[derive(Debug)]
pub struct ShmBuffer(Handle<SlotBuffer<AtomicSumTree>>);

shared_handle_api!(ShmBuffer, Config);

impl ShmBuffer {
    fn buffer(&self) -> &SlotBuffer<AtomicSumTree> {
        &self.0.state().buffer
    }

    fn live_buffer(&self) -> Result<&SlotBuffer<AtomicSumTree>> {
        Ok(&self.0.live()?.buffer)
    }
}

impl ConcurrentBuffer for ShmBuffer {
    /// An anonymous shared buffer ([`ShmBuffer::create_anonymous`]).
    fn new(config: Config) -> Result<Self> {
        ShmBuffer::create_anonymous(config)
    }
    fn config(&self) -> &Config {
        self.buffer().config()
    }
    fn insert_waiting(
        &self,
        columns: &[crate::storage::ColumnSlice<'_>],
        priority: Option<f64>,
        wait: crate::rate::Wait,
    ) -> Result<crate::buffer::Key> {
        self.live_buffer()?.insert_waiting(columns, priority, wait)
    }
    fn insert_batch_waiting(
        &self,
        columns: &[crate::storage::ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<crate::buffer::Key>,
        wait: crate::rate::Wait,
    ) -> Result<()> {
        self.live_buffer()?
            .insert_batch_waiting(columns, priorities, keys, wait)
    }
    fn sample_waiting(
        &self,
        draw: crate::buffer::Draw<'_>,
        rows: crate::buffer::Rows<'_, '_>,
        rng: &mut dyn crate::RandomSource,
        out: &mut crate::buffer::SampleBatch,
        wait: crate::rate::Wait,
    ) -> Result<crate::buffer::Descent> {
        self.live_buffer()?
            .sample_waiting(draw, rows, rng, out, wait)
    }
    fn rate_limiter(&self) -> Option<&crate::rate::RateLimiter> {
        self.buffer().rate_limiter()
    }
    fn stats(&self) -> crate::buffer::Stats {
        self.buffer().stats()
    }
    fn update_priorities(
        &self,
        keys: &[crate::buffer::Key],
        priorities: &[f64],
    ) -> Result<crate::buffer::UpdateReport> {
        self.live_buffer()?.update_priorities(keys, priorities)
    }
    fn priorities_of(&self, keys: &[crate::buffer::Key], out: &mut Vec<f64>) -> Result<usize> {
        self.live_buffer()?.priorities_of(keys, out)
    }
    fn delete(&self, keys: &[crate::buffer::Key]) -> Result<crate::buffer::UpdateReport> {
        self.live_buffer()?.delete(keys)
    }
    fn retire_before(&self, version: i64) -> Result<u64> {
        self.live_buffer()?.retire_before(version)
    }
    fn version_floor(&self) -> Option<i64> {
        self.buffer().version_floor()
    }
    fn alpha(&self) -> f64 {
        self.buffer().alpha()
    }
    fn set_alpha(&self, alpha: f64) -> Result<()> {
        self.live_buffer()?.set_alpha(alpha)
    }
    fn raw_priorities_of(&self, keys: &[crate::buffer::Key], out: &mut Vec<f64>) -> Result<usize> {
        self.live_buffer()?.raw_priorities_of(keys, out)
    }
    fn write_back(
        &self,
        keys: &[crate::buffer::Key],
        columns: &[(usize, crate::storage::ColumnSlice<'_>)],
    ) -> Result<crate::buffer::UpdateReport> {
        self.live_buffer()?.write_back(keys, columns)
    }
    fn priority(&self, index: usize) -> Result<f64> {
        self.buffer().priority(index)
    }
    fn key(&self, index: usize) -> Result<Option<crate::buffer::Key>> {
        self.buffer().key(index)
    }
    fn len(&self) -> usize {
        self.buffer().len()
    }
    fn inserted(&self) -> u64 {
        self.buffer().inserted()
    }
    fn total_priority(&self) -> f64 {
        self.buffer().total_priority()
    }
    fn consistency(&self) -> crate::tree::Consistency {
        self.buffer().consistency()
    }
    fn memory_bytes(&self) -> usize {
        self.buffer().memory_bytes()
    }
    fn clear(&self) {
        self.buffer().clear()
    }
    fn rebuild(&self) {
        self.buffer().rebuild()
    }
}

impl crate::checkpoint::Checkpoint for ShmBuffer {
    fn save_with(
        &self,
        dir: &std::path::Path,
        options: &crate::checkpoint::SaveOptions,
    ) -> Result<()> {
        self.live_buffer()?.save_with(dir, options)
    }
}
