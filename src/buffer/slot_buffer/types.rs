//! The public buffer types over `SlotBuffer`.

/// A public buffer type over `SlotBuffer<$tree>`: the newtype, its [`ConcurrentBuffer`]
/// impl forwarding every method, and the loom-only constructor with faults. One definition
/// for `SplitLockBuffer` and `LockFreeBuffer`, so that users name and read real types.
macro_rules! slot_buffer_type {
    ($(#[$attr:meta])* $name:ident, $tree:ty) => {
        $(#[$attr])*
        #[derive(Debug)]
        pub struct $name(pub(crate) $crate::buffer::slot_buffer::SlotBuffer<$tree>);

        impl $name {
            /// A buffer with deliberate protocol faults, for the loom models only.
            #[cfg(loom)]
            #[doc(hidden)]
            pub fn with_faults(
                config: $crate::buffer::Config,
                faults: $crate::faults::Faults,
            ) -> $crate::Result<Self> {
                $crate::buffer::slot_buffer::SlotBuffer::with_faults(config, faults).map($name)
            }
        }

        impl $name {
            /// The state a save would write, for the loom models: (inserted, len, running
            /// maximum, each slot's priority, generation and column bytes).
            #[cfg(loom)]
            #[doc(hidden)]
            #[allow(clippy::type_complexity)]
            pub fn snapshot_for_model(
                &self,
            ) -> (u64, usize, f64, Vec<f64>, Vec<u64>, Vec<Vec<u8>>) {
                let s = self.0.snapshot().expect("a small snapshot");
                (
                    s.inserted,
                    s.len,
                    s.running_max,
                    s.priorities,
                    s.generations.into_owned(),
                    s.columns.into_iter().map(|c| c.into_owned()).collect(),
                )
            }
        }

        impl $crate::checkpoint::Checkpoint for $name {
            fn save_with(
                &self,
                dir: &std::path::Path,
                options: &$crate::checkpoint::SaveOptions,
            ) -> $crate::Result<()> {
                self.0.save_with(dir, options)
            }
        }

        impl $crate::checkpoint::sealed::TreeState for $name {
            #[allow(private_interfaces)]
            fn tree_state(&self) -> $crate::Result<$crate::checkpoint::State> {
                self.0.snapshot().map($crate::checkpoint::State::of)
            }
            #[allow(private_interfaces)]
            fn from_tree_state(
                config: $crate::buffer::Config,
                state: &$crate::checkpoint::State,
            ) -> $crate::Result<Self> {
                $crate::buffer::slot_buffer::SlotBuffer::<$tree>::from_state(config, state)
                    .map($name)
            }
        }

        impl $crate::checkpoint::TreeState for $name {}

        impl $crate::checkpoint::Load for $name {
            fn load_with<P: AsRef<std::path::Path>>(
                dir: P,
                options: &$crate::checkpoint::LoadOptions,
            ) -> $crate::Result<$crate::checkpoint::Loaded<Self>> {
                let plan = $crate::checkpoint::Plan::open(dir.as_ref(), options)?;
                let (buffer, user) =
                    $crate::buffer::slot_buffer::SlotBuffer::<$tree>::restore(&plan)?;
                Ok($crate::checkpoint::Loaded {
                    buffer: $name(buffer),
                    user,
                })
            }
        }

        impl $crate::buffer::ConcurrentBuffer for $name {
            fn new(config: $crate::buffer::Config) -> $crate::Result<Self> {
                <$crate::buffer::slot_buffer::SlotBuffer<$tree> as $crate::buffer::ConcurrentBuffer>::new(config).map($name)
            }
            fn config(&self) -> &$crate::buffer::Config {
                self.0.config()
            }
            fn insert_waiting(
                &self,
                columns: &[$crate::storage::ColumnSlice<'_>],
                priority: Option<f64>,
                wait: $crate::rate::Wait,
            ) -> $crate::Result<$crate::buffer::Key> {
                self.0.insert_waiting(columns, priority, wait)
            }
            fn insert_batch_waiting(
                &self,
                columns: &[$crate::storage::ColumnSlice<'_>],
                priorities: Option<&[f64]>,
                keys: &mut Vec<$crate::buffer::Key>,
                wait: $crate::rate::Wait,
            ) -> $crate::Result<()> {
                self.0.insert_batch_waiting(columns, priorities, keys, wait)
            }
            fn sample_waiting(
                &self,
                draw: $crate::buffer::Draw<'_>,
                rows: $crate::buffer::Rows<'_, '_>,
                rng: &mut dyn $crate::RandomSource,
                out: &mut $crate::buffer::SampleBatch,
                wait: $crate::rate::Wait,
            ) -> $crate::Result<$crate::buffer::Descent> {
                self.0.sample_waiting(draw, rows, rng, out, wait)
            }
            fn rate_limiter(&self) -> Option<&$crate::rate::RateLimiter> {
                self.0.rate_limiter()
            }
            fn stats(&self) -> $crate::buffer::Stats {
                self.0.stats()
            }
            fn update_priorities(
                &self,
                keys: &[$crate::buffer::Key],
                priorities: &[f64],
            ) -> $crate::Result<$crate::buffer::UpdateReport> {
                self.0.update_priorities(keys, priorities)
            }
            fn priorities_of(
                &self,
                keys: &[$crate::buffer::Key],
                out: &mut Vec<f64>,
            ) -> $crate::Result<usize> {
                self.0.priorities_of(keys, out)
            }
            fn delete(
                &self,
                keys: &[$crate::buffer::Key],
            ) -> $crate::Result<$crate::buffer::UpdateReport> {
                self.0.delete(keys)
            }
            fn retire_before(&self, version: i64) -> $crate::Result<u64> {
                self.0.retire_before(version)
            }
            fn version_floor(&self) -> Option<i64> {
                self.0.version_floor()
            }
            fn alpha(&self) -> f64 {
                self.0.alpha()
            }
            fn set_alpha(&self, alpha: f64) -> $crate::Result<()> {
                self.0.set_alpha(alpha)
            }
            fn raw_priorities_of(
                &self,
                keys: &[$crate::buffer::Key],
                out: &mut Vec<f64>,
            ) -> $crate::Result<usize> {
                self.0.raw_priorities_of(keys, out)
            }
            fn write_back(
                &self,
                keys: &[$crate::buffer::Key],
                columns: &[(usize, $crate::storage::ColumnSlice<'_>)],
            ) -> $crate::Result<$crate::buffer::UpdateReport> {
                self.0.write_back(keys, columns)
            }
            fn priority(&self, index: usize) -> $crate::Result<f64> {
                self.0.priority(index)
            }
            fn key(&self, index: usize) -> $crate::Result<Option<$crate::buffer::Key>> {
                self.0.key(index)
            }
            fn len(&self) -> usize {
                self.0.len()
            }
            fn inserted(&self) -> u64 {
                self.0.inserted()
            }
            fn total_priority(&self) -> f64 {
                self.0.total_priority()
            }
            fn consistency(&self) -> $crate::tree::Consistency {
                self.0.consistency()
            }
            fn memory_bytes(&self) -> usize {
                self.0.memory_bytes()
            }
            fn clear(&self) {
                self.0.clear()
            }
            fn rebuild(&self) {
                self.0.rebuild()
            }
        }
    };
}
pub(crate) use slot_buffer_type;
