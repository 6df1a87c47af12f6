//! `LockFreeBuffer`: CAS-recomputed atomic tree, lazy writing, slot protocol.

use kary_replay::{ConcurrentBuffer, LockFreeBuffer};

crate::scenarios::models!(|c| LockFreeBuffer::new(c).unwrap());
