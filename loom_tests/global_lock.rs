//! `GlobalLockBuffer`: the models (trivially true under one mutex; kept as the baseline's
//! proof that the models' expectations are right).

use kary_replay::{ConcurrentBuffer, GlobalLockBuffer};

crate::scenarios::models!(|c| GlobalLockBuffer::new(c).unwrap());
