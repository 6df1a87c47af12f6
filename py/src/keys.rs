//! Python keys: a key's generation word (`kary_replay::Key`: the buffer's tag in bits 48..63,
//! the item's insertion number below), one int for each key.

use crate::errors::InvalidKeyError;
use kary_replay::{ConcurrentBuffer, Key};
use pyo3::prelude::*;

/// A buffer's keys: its tag and capacity.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keys {
    pub(crate) tag: u64,
    capacity: u64,
}

impl Keys {
    /// The keys of `buffer`.
    pub(crate) fn of(buffer: &dyn ConcurrentBuffer) -> Keys {
        Keys {
            tag: u64::from(buffer.config().key_tag()),
            capacity: buffer.capacity() as u64,
        }
    }

    /// The Python key of `key`: its generation word.
    pub(crate) fn encode(self, key: &Key) -> u64 {
        key.generation
    }

    /// The buffer's key for a Python key; an error for another buffer's key (the buffer
    /// checks the rest).
    pub(crate) fn decode(self, key: u64) -> PyResult<Key> {
        if key >> Key::INSERTION_BITS != self.tag {
            return Err(InvalidKeyError::new_err(format!(
                "key {key:#x} was not handed out by this buffer (its tag is {:#x}, this buffer's {:#x})",
                key >> Key::INSERTION_BITS,
                self.tag
            )));
        }
        let insertion = key & ((1 << Key::INSERTION_BITS) - 1);
        Ok(Key {
            index: (insertion % self.capacity) as usize,
            generation: key,
        })
    }
}
