//! The sequence buffer's arithmetic: window descriptions in one word, and keys to windows
//! and back.

use super::*;
use crate::storage::{DType, Schema};

#[test]
fn a_window_description_packs_into_one_word_and_back() {
    let max = config::MAX_STEPS as u32;
    for info in [
        WindowInfo {
            len: 1,
            to_end: 1,
            terminal: false,
            back: 0,
        },
        WindowInfo {
            len: max,
            to_end: max,
            terminal: true,
            back: max,
        },
        WindowInfo {
            len: 120,
            to_end: 37,
            terminal: true,
            back: 3,
        },
        WindowInfo {
            len: 5,
            to_end: max,
            terminal: false,
            back: max - 1,
        },
    ] {
        assert_eq!(WindowInfo::unpack(info.pack()), info);
    }
}

#[test]
fn a_windows_leaf_and_lap_name_it_back() {
    let schema = Schema::new().column("x", DType::U8, 1);
    let config = SequenceConfig::builder(3, 40, schema)
        .window(7)
        .period(4)
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    let leaves = buffer.config().capacity();
    assert_eq!(leaves, 3 * 40 / 4);
    let mut seen = std::collections::HashSet::new();
    for lane in 0..3 {
        for start in (0..400u64).step_by(4) {
            let (leaf, lap) = buffer.leaf_of(lane, start);
            assert!(leaf < leaves);
            assert_eq!(lap, start / 40);
            assert_eq!(buffer.locate(leaf, lap), (lane, start));
            // One lap of one lane's starts fills its own leaves, each once.
            if lap == 0 {
                assert!(seen.insert(leaf), "leaf {leaf} taken twice");
            }
            // The key's insertion number names the same window.
            let key = buffer
                .config()
                .tree()
                .key(leaf, lap * leaves as u64 + leaf as u64);
            assert_eq!(buffer.window_of(key).unwrap(), (lane, start));
        }
    }
    assert_eq!(seen.len(), leaves);
}
