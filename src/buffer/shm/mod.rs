//! One buffer shared by several processes: the lock-free buffer's state in a shared mapping.

mod journal;

pub(crate) use journal::{Journal, RecordGuard};
