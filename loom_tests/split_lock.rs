//! `SplitLockBuffer`: global tree lock + last-level lock, lazy writing, slot protocol.

use kary_replay::{ConcurrentBuffer, SplitLockBuffer};

crate::scenarios::models!(|c| SplitLockBuffer::new(c).unwrap());
