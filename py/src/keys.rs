//! Python keys: a key's generation word (`kary_replay::Key`: the buffer's tag in bits 48..63,
//! the item's insertion number below), one int for each key.

use kary_replay::{ConcurrentBuffer, Key};
use pyo3::prelude::*;

use crate::errors::argument_error;
use crate::input::{keys_from, numbers, Numbers};

/// A buffer's keys: its tag and capacity.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keys {
    pub(crate) tag: u64,
    capacity: u64,
}

impl Keys {
    /// The keys of `buffer`.
    pub(crate) fn of(buffer: &dyn ConcurrentBuffer) -> Keys {
        Keys::new(buffer.config().key_tag(), buffer.capacity())
    }

    /// The keys of a buffer of tag `tag` with `capacity` slots (a sequence buffer's leaves).
    pub(crate) fn new(tag: u16, capacity: usize) -> Keys {
        Keys {
            tag: u64::from(tag),
            capacity: capacity as u64,
        }
    }

    /// The Python key of `key`: its generation word.
    pub(crate) fn encode(self, key: &Key) -> u64 {
        key.generation
    }

    /// The buffer's key for a Python key (its slot from its insertion number); the buffer's
    /// update checks the rest (another buffer's key, its tag not this one's, is
    /// `InvalidKeyError`).
    pub(crate) fn decode(self, key: u64) -> Key {
        let insertion = key & ((1 << Key::INSERTION_BITS) - 1);
        Key {
            index: (insertion % self.capacity) as usize,
            generation: key,
        }
    }

    /// The keys and priorities of an update, read once: the keys decoded as this buffer's
    /// (every family's `update_priorities` and `check_update`).
    /// The keys of a Python array-like (any integers; torch CPU tensors included).
    pub(crate) fn decode_all(self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<Key>> {
        Ok(keys_from(py, keys)?
            .into_iter()
            .map(|k| self.decode(k))
            .collect())
    }

    pub(crate) fn update_arguments(
        self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        priorities: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<Key>, Vec<f64>)> {
        let keys: Vec<Key> = keys_from(py, keys)?
            .into_iter()
            .map(|k| self.decode(k))
            .collect();
        let (priorities, _) = numbers(
            py,
            "priorities",
            priorities,
            Numbers::Floats,
            argument_error,
        )?;
        Ok((keys, priorities))
    }
}
