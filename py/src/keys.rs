//! Python keys: the item's generation and the buffer's tag in one int64.

use crate::errors::InvalidKeyError;
use crate::rng::{entropy_seed, Xoshiro};
use kary_replay::Key;
use pyo3::prelude::*;

/// Bits of a Python key that hold the item's generation (its insertion number; its slot is
/// that modulo the capacity); the 15 bits above hold the buffer's tag, so that a key of
/// another buffer is recognised.
/// (The layout of `kary_replay::shard`'s keys: a shard's tag is its number plus one.)
pub(crate) const GENERATION_BITS: u32 = kary_replay::shard::GENERATION_BITS;
pub(crate) const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
/// The user-map key under which a save keeps the buffer's key tag.
pub(crate) const TAG_KEY: &str = "kary_replay.python.key_tag";

/// A buffer's keys: its tag and its generations.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keys {
    pub(crate) tag: u64,
}

impl Keys {
    /// A fresh random tag in 1..=0x7fff (keys stay below 2^63: torch's int64 holds them).
    pub(crate) fn fresh() -> Keys {
        let mut r = Xoshiro::new(entropy_seed());
        Keys {
            tag: 1 + r.next_u64() % 0x7fff,
        }
    }

    pub(crate) fn encode(self, k: &Key) -> u64 {
        (self.tag << GENERATION_BITS) | (k.generation & GENERATION_MASK)
    }

    /// The buffer's key for a Python key; an error for another buffer's key.
    pub(crate) fn decode(self, key: u64, capacity: usize) -> PyResult<Key> {
        if key >> GENERATION_BITS != self.tag {
            return Err(InvalidKeyError::new_err(format!("key {key:#x} was not handed out by this buffer (its tag is {:#x}, this buffer's {:#x})", key >> GENERATION_BITS, self.tag)));
        }
        let generation = key & GENERATION_MASK;
        Ok(Key {
            index: (generation % capacity as u64) as usize,
            generation,
        })
    }
}
