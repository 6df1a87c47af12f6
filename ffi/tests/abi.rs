//! The C ABI called from Rust: a smoke test of the main path and the error model (status
//! codes, outputs untouched on failure, last-error message). The C and C++ tests of the
//! header are in ffi/tests/c (run by ffi/tests/run.sh).

use std::ffi::{c_void, CStr};
use std::ptr;

use kary_replay_ffi::*;

fn new_buffer(variant: u32) -> *mut kr_buffer {
    let mut config = kr_config_default();
    config.capacity = 8;
    config.variant = variant;
    config.alpha = 1.0;
    let columns = [
        kr_column {
            name: c"obs".as_ptr(),
            dtype: KR_DTYPE_F32,
            shape: 2,
            ndim: 0,
            dims: std::ptr::null(),
        },
        kr_column {
            name: c"done".as_ptr(),
            dtype: KR_DTYPE_BOOL,
            shape: 1,
            ndim: 0,
            dims: std::ptr::null(),
        },
    ];
    let mut buffer = ptr::null_mut();
    // SAFETY: valid config, two valid columns, valid out pointer.
    let status = unsafe { kr_buffer_new(&config, columns.as_ptr(), 2, &mut buffer) };
    assert_eq!(status, KR_OK);
    buffer
}

#[test]
fn insert_sample_update_round_trip_in_every_variant() {
    for variant in [
        KR_VARIANT_GLOBAL_LOCK,
        KR_VARIANT_SPLIT_LOCK,
        KR_VARIANT_LOCK_FREE,
    ] {
        let buffer = new_buffer(variant);
        let obs = [1.0f32, 2.0, 3.0, 4.0];
        let done = [0u8, 1];
        let cols = [
            obs.as_ptr().cast::<c_void>(),
            done.as_ptr().cast::<c_void>(),
        ];
        let priorities = [1.0, 3.0];
        let mut keys = [kr_key {
            index: 9,
            generation: 9,
        }; 2];
        // SAFETY: all pointers valid with the right lengths.
        unsafe {
            assert_eq!(
                kr_buffer_insert_batch(
                    buffer,
                    cols.as_ptr(),
                    2,
                    2,
                    priorities.as_ptr(),
                    keys.as_mut_ptr()
                ),
                KR_OK
            );
        }
        assert_eq!((keys[1].index, kr_key_insertion(keys[1])), (1, 1));
        let mut config = kr_config_default();
        // SAFETY: a live buffer and a valid out pointer.
        assert_eq!(unsafe { kr_buffer_config(buffer, &mut config) }, KR_OK);
        assert_eq!(kr_key_tag(keys[1]), u64::from(config.key_tag));
        let mut rng = ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { kr_rng_new(7, &mut rng) }, KR_OK);
        let mut out_keys = [kr_key {
            index: 0,
            generation: 0,
        }; 4];
        let mut weights = [0.0; 4];
        let mut out_obs = [0.0f32; 8];
        let mut out_done = [7u8; 4];
        let dsts = [
            out_obs.as_mut_ptr().cast::<c_void>(),
            out_done.as_mut_ptr().cast::<c_void>(),
        ];
        let out = kr_sample_out {
            keys: out_keys.as_mut_ptr(),
            indices: ptr::null_mut(),
            weights: weights.as_mut_ptr(),
            probabilities: ptr::null_mut(),
            priorities: ptr::null_mut(),
            columns: dsts.as_ptr(),
            ..Default::default()
        };
        // SAFETY: every destination has room for 4 items.
        assert_eq!(
            // SAFETY: the pointers are valid for the lengths given, or deliberately NULL.
            unsafe { kr_buffer_sample(buffer, rng, 4, 1.0, KR_SAMPLE_STRATIFIED, &out) },
            KR_OK
        );
        for (b, key) in out_keys.iter().enumerate() {
            let i = key.index as usize;
            assert_eq!(&out_obs[2 * b..2 * b + 2], &obs[2 * i..2 * i + 2]);
            assert_eq!(out_done[b], done[i]);
            assert!(weights[b] > 0.0 && weights[b] <= 1.0);
        }
        let mut report = kr_update_report::default();
        let new = [2.0; 4];
        // SAFETY: 4 keys and 4 priorities.
        assert_eq!(
            // SAFETY: the pointers are valid for the lengths given, or deliberately NULL.
            unsafe {
                kr_buffer_update_priorities(buffer, out_keys.as_ptr(), new.as_ptr(), 4, &mut report)
            },
            KR_OK
        );
        assert_eq!((report.applied, report.stale), (4, 0));
        let (mut len, mut total) = (0usize, 0.0f64);
        // SAFETY: valid handles and out pointers.
        unsafe {
            assert_eq!(kr_buffer_len(buffer, &mut len), KR_OK);
            assert_eq!(kr_buffer_total_priority(buffer, &mut total), KR_OK);
            kr_rng_free(rng);
            kr_buffer_free(buffer);
        }
        assert_eq!(len, 2);
        let touched: std::collections::HashSet<u64> = out_keys.iter().map(|k| k.index).collect();
        let expected: f64 = (0..2u64)
            .map(|i| {
                if touched.contains(&i) {
                    2.0
                } else {
                    priorities[i as usize]
                }
            })
            .sum();
        assert_eq!(total, expected);
    }
}

#[test]
fn failures_return_their_status_write_nothing_and_explain() {
    let buffer = new_buffer(KR_VARIANT_SPLIT_LOCK);
    let mut rng = ptr::null_mut();
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { kr_rng_new(1, &mut rng) }, KR_OK);
    let mut weights = [-1.0; 2];
    let out = kr_sample_out {
        keys: ptr::null_mut(),
        indices: ptr::null_mut(),
        weights: weights.as_mut_ptr(),
        probabilities: ptr::null_mut(),
        priorities: ptr::null_mut(),
        columns: ptr::null(),
        ..Default::default()
    };
    // SAFETY: pointers are valid or deliberately NULL.
    unsafe {
        assert_eq!(
            kr_buffer_sample(buffer, rng, 2, 0.5, KR_SAMPLE_INDEPENDENT, &out),
            KR_E_EMPTY
        );
        assert_eq!(weights, [-1.0; 2]);
        assert_eq!(
            kr_buffer_sample(ptr::null(), rng, 2, 0.5, 0, &out),
            KR_E_NULL
        );
        assert_eq!(
            kr_buffer_sample(buffer, rng, 2, 0.5, 9, &out),
            KR_E_INVALID_ARGUMENT
        );
        let obs = [1.0f32, 2.0];
        let bad_done = [2u8];
        let cols = [
            obs.as_ptr().cast::<c_void>(),
            bad_done.as_ptr().cast::<c_void>(),
        ];
        let mut key = kr_key {
            index: 5,
            generation: 5,
        };
        assert_eq!(
            kr_buffer_insert(buffer, cols.as_ptr(), 2, ptr::null(), &mut key),
            KR_E_INVALID_ARGUMENT
        );
        assert_eq!(
            kr_buffer_insert(buffer, cols.as_ptr(), 1, ptr::null(), &mut key),
            KR_E_LENGTH_MISMATCH
        );
        let done = [1u8];
        let cols = [
            obs.as_ptr().cast::<c_void>(),
            done.as_ptr().cast::<c_void>(),
        ];
        for p in [f64::NAN, -1.0, f64::INFINITY] {
            assert_eq!(
                kr_buffer_insert(buffer, cols.as_ptr(), 2, &p, &mut key),
                KR_E_INVALID_PRIORITY
            );
        }
        assert_eq!(
            key,
            kr_key {
                index: 5,
                generation: 5
            }
        );
        let mut written = 0;
        let mut message = [0 as std::ffi::c_char; 1024];
        assert_eq!(
            kr_last_error_message(message.as_mut_ptr(), message.len(), &mut written),
            KR_OK
        );
        let text = CStr::from_ptr(message.as_ptr()).to_str().unwrap();
        assert!(text.contains("invalid priority"), "{text}");
        assert_eq!(written, text.len());
        let mut len = 9usize;
        assert_eq!(kr_buffer_len(buffer, &mut len), KR_OK);
        assert_eq!(len, 0);
        let mut config = kr_config_default();
        let mut other = ptr::null_mut();
        config.capacity = 0;
        let col = kr_column {
            name: c"x".as_ptr(),
            dtype: KR_DTYPE_F64,
            shape: 1,
            ndim: 0,
            dims: std::ptr::null(),
        };
        assert_eq!(
            kr_buffer_new(&config, &col, 1, &mut other),
            KR_E_INVALID_ARGUMENT
        );
        config = kr_config_default();
        config.variant = 7;
        assert_eq!(
            kr_buffer_new(&config, &col, 1, &mut other),
            KR_E_INVALID_ARGUMENT
        );
        config = kr_config_default();
        config.capacity = 1 << 40;
        let huge = kr_column {
            name: c"x".as_ptr(),
            dtype: KR_DTYPE_F64,
            shape: 1 << 12,
            ndim: 0,
            dims: std::ptr::null(),
        };
        assert_eq!(
            kr_buffer_new(&config, &huge, 1, &mut other),
            KR_E_ALLOCATION
        );
        let bad_dtype = kr_column {
            name: c"x".as_ptr(),
            dtype: 42,
            shape: 1,
            ndim: 0,
            dims: std::ptr::null(),
        };
        assert_eq!(
            kr_buffer_new(&kr_config_default(), &bad_dtype, 1, &mut other),
            KR_E_INVALID_ARGUMENT
        );
        assert!(other.is_null());
        assert!(!CStr::from_ptr(kr_status_str(KR_E_CONTENTION))
            .to_bytes()
            .is_empty());
        assert_eq!(
            CStr::from_ptr(kr_version()).to_str().unwrap(),
            env!("CARGO_PKG_VERSION")
        );
        kr_buffer_free(ptr::null_mut());
        kr_rng_free(rng);
        kr_buffer_free(buffer);
    }
}

/// The thread's last error message.
fn last_error() -> String {
    let mut written = 0;
    let mut message = [0 as std::ffi::c_char; 1024];
    // SAFETY: a valid buffer of the given length and a valid out pointer.
    unsafe {
        assert_eq!(
            kr_last_error_message(message.as_mut_ptr(), message.len(), &mut written),
            KR_OK
        );
        CStr::from_ptr(message.as_ptr())
            .to_str()
            .unwrap()
            .to_owned()
    }
}

/// Counts no memory can hold (a negative count converted to `size_t`, say) and misaligned
/// pointers are refused before anything happens: no slice of more than `isize::MAX` bytes is
/// ever made from the caller's pointers (undefined behaviour, and an abort where the
/// library is built with debug assertions), and an output that could not be written does
/// not follow an insert, update or push that already happened.
#[test]
fn huge_counts_and_misaligned_pointers_are_refused_and_change_nothing() {
    for variant in [
        KR_VARIANT_GLOBAL_LOCK,
        KR_VARIANT_SPLIT_LOCK,
        KR_VARIANT_LOCK_FREE,
    ] {
        let buffer = new_buffer(variant);
        let obs = [1.0f32, 2.0, 3.0, 4.0];
        let done = [0u8, 1];
        let cols = [
            obs.as_ptr().cast::<c_void>(),
            done.as_ptr().cast::<c_void>(),
        ];
        let priorities = [1.0f64, 2.0];
        let mut keys = [kr_key {
            index: 9,
            generation: 9,
        }; 2];
        // Room for 8 keys, so that an odd offset into it is a misaligned `kr_key*` (or f64*,
        // size_t*, kr_update_report*) that still points into valid memory.
        let mut raw = [0u64; 16];
        let misaligned = raw.as_mut_ptr().cast::<u8>().wrapping_add(1);
        let len = |b: *const kr_buffer| {
            let mut n = 99usize;
            // SAFETY: a live buffer and a valid out pointer.
            assert_eq!(unsafe { kr_buffer_len(b, &mut n) }, KR_OK);
            n
        };
        // SAFETY: every pointer is valid for what the call reads or writes, except the counts
        // and alignments under test, which the library must refuse before using them.
        unsafe {
            // `obs` has 2 elements per item: usize::MAX / 2 items are usize::MAX - 1 f32s,
            // a product that does not overflow but is far more bytes than isize::MAX.
            for items in [usize::MAX / 2, usize::MAX / 4 + 1] {
                assert_eq!(
                    kr_buffer_insert_batch(
                        buffer,
                        cols.as_ptr(),
                        2,
                        items,
                        ptr::null(),
                        keys.as_mut_ptr()
                    ),
                    KR_E_INVALID_ARGUMENT,
                    "{items} items"
                );
                assert!(last_error().contains("address space"), "{}", last_error());
            }
            assert_eq!(
                kr_buffer_insert_batch(
                    buffer,
                    cols.as_ptr(),
                    2,
                    2,
                    priorities.as_ptr(),
                    misaligned.cast::<kr_key>()
                ),
                KR_E_INVALID_ARGUMENT
            );
            assert!(last_error().contains("out_keys"), "{}", last_error());
            assert_eq!(
                kr_buffer_insert_batch(
                    buffer,
                    cols.as_ptr(),
                    2,
                    1,
                    misaligned.cast::<f64>(),
                    keys.as_mut_ptr()
                ),
                KR_E_INVALID_ARGUMENT
            );
            assert_eq!(
                kr_buffer_insert(
                    buffer,
                    cols.as_ptr(),
                    2,
                    ptr::null(),
                    misaligned.cast::<kr_key>()
                ),
                KR_E_INVALID_ARGUMENT
            );
            assert!(last_error().contains("out_key"), "{}", last_error());
            assert_eq!(
                kr_buffer_insert(
                    buffer,
                    cols.as_ptr(),
                    2,
                    misaligned.cast::<f64>(),
                    keys.as_mut_ptr()
                ),
                KR_E_INVALID_ARGUMENT
            );
            assert!(last_error().contains("priority"), "{}", last_error());
            assert_eq!(len(buffer), 0, "a refused insert inserted");
            assert_eq!(keys[0].index, 9, "a refused insert wrote a key");

            let mut writer = ptr::null_mut();
            assert_eq!(kr_writer_new(buffer, 1, &mut writer), KR_OK);
            assert_eq!(
                kr_writer_push(
                    writer,
                    cols.as_ptr(),
                    2,
                    ptr::null(),
                    misaligned.cast::<usize>()
                ),
                KR_E_INVALID_ARGUMENT
            );
            assert!(last_error().contains("out_flushed"), "{}", last_error());
            assert_eq!(
                kr_writer_push(
                    writer,
                    cols.as_ptr(),
                    2,
                    misaligned.cast::<f64>(),
                    ptr::null_mut()
                ),
                KR_E_INVALID_ARGUMENT
            );
            let mut out_writer = ptr::null_mut();
            assert_eq!(
                kr_writer_new(buffer, 4, misaligned.cast::<*mut kr_writer>()),
                KR_E_INVALID_ARGUMENT
            );
            assert_eq!(kr_writer_new(buffer, 4, &mut out_writer), KR_OK);
            assert_eq!(kr_writer_free(out_writer), KR_OK);
            let mut staged = 9usize;
            assert_eq!(kr_writer_staged(writer, &mut staged), KR_OK);
            assert_eq!(
                (staged, len(buffer)),
                (0, 0),
                "a refused push staged or wrote"
            );
            assert_eq!(
                kr_writer_flush(writer, misaligned.cast::<usize>()),
                KR_E_INVALID_ARGUMENT
            );
            assert_eq!(kr_writer_free(writer), KR_OK);

            assert_eq!(
                kr_buffer_insert_batch(
                    buffer,
                    cols.as_ptr(),
                    2,
                    2,
                    priorities.as_ptr(),
                    keys.as_mut_ptr()
                ),
                KR_OK
            );
            let total = {
                let mut t = 0.0;
                assert_eq!(kr_buffer_total_priority(buffer, &mut t), KR_OK);
                t
            };
            let new = [5.0f64; 2];
            let mut report = kr_update_report::default();
            // 2^60 keys are 2^64 bytes: more than any memory.
            assert_eq!(
                kr_buffer_update_priorities(
                    buffer,
                    keys.as_ptr(),
                    new.as_ptr(),
                    1 << 60,
                    &mut report
                ),
                KR_E_INVALID_ARGUMENT
            );
            assert!(last_error().contains("address space"), "{}", last_error());
            assert_eq!(
                kr_buffer_update_priorities(
                    buffer,
                    keys.as_ptr(),
                    new.as_ptr(),
                    2,
                    misaligned.cast::<kr_update_report>()
                ),
                KR_E_INVALID_ARGUMENT
            );
            let mut after = 0.0;
            assert_eq!(kr_buffer_total_priority(buffer, &mut after), KR_OK);
            assert_eq!(after, total, "a refused update changed a priority");

            // A batch whose column rows are more bytes than isize::MAX (1 f64 per item would
            // need 2^64 bytes for 2^61 items; the obs column, 2 f32s, too).
            let mut rng = ptr::null_mut();
            assert_eq!(kr_rng_new(3, &mut rng), KR_OK);
            let mut out_obs = [0.0f32; 2];
            let mut out_done = [7u8; 1];
            let dsts = [
                out_obs.as_mut_ptr().cast::<c_void>(),
                out_done.as_mut_ptr().cast::<c_void>(),
            ];
            let out = kr_sample_out {
                columns: dsts.as_ptr(),
                ..Default::default()
            };
            assert_eq!(
                kr_buffer_sample(buffer, rng, 1 << 61, 0.4, KR_SAMPLE_STRATIFIED, &out),
                KR_E_INVALID_ARGUMENT
            );
            assert!(last_error().contains("address space"), "{}", last_error());
            assert_eq!((out_obs, out_done), ([0.0; 2], [7]));
            // The same for the other outputs: each one asked for must fit the address space
            // (these were allocation failures of the library's own batch before).
            let mut keys_out = [kr_key {
                index: 9,
                generation: 9,
            }; 1];
            let mut indices_out = [9u64; 1];
            let mut w32 = [9.0f32; 1];
            for (batch, out, what) in [
                (
                    usize::MAX,
                    kr_sample_out {
                        indices: indices_out.as_mut_ptr(),
                        ..Default::default()
                    },
                    "out->indices",
                ),
                (
                    (1usize << 61) + 1,
                    kr_sample_out {
                        weights_f32: w32.as_mut_ptr(),
                        ..Default::default()
                    },
                    "out->weights_f32",
                ),
                (
                    usize::MAX / 16 + 1,
                    kr_sample_out {
                        keys: keys_out.as_mut_ptr(),
                        ..Default::default()
                    },
                    "out->keys",
                ),
            ] {
                assert_eq!(
                    kr_buffer_sample(buffer, rng, batch, 0.4, KR_SAMPLE_STRATIFIED, &out),
                    KR_E_INVALID_ARGUMENT,
                    "{what}, batch {batch}"
                );
                assert!(last_error().contains(what), "{}", last_error());
                assert!(last_error().contains("address space"), "{}", last_error());
            }
            assert_eq!((keys_out[0].index, indices_out[0], w32[0]), (9, 9, 9.0));
            // Getters and constructors check their outputs the same way.
            assert_eq!(
                kr_buffer_len(buffer, misaligned.cast::<usize>()),
                KR_E_INVALID_ARGUMENT
            );
            assert_eq!(
                kr_buffer_priority(buffer, 0, misaligned.cast::<f64>()),
                KR_E_INVALID_ARGUMENT
            );
            let mut present = false;
            assert_eq!(
                kr_buffer_key(buffer, 0, misaligned.cast::<kr_key>(), &mut present),
                KR_E_INVALID_ARGUMENT
            );
            assert!(!present);
            assert_eq!(
                kr_rng_new(1, misaligned.cast::<*mut kr_rng>()),
                KR_E_INVALID_ARGUMENT
            );
            let config = kr_config_default();
            let column = kr_column {
                name: c"x".as_ptr(),
                dtype: KR_DTYPE_F32,
                shape: 1,
                ndim: 0,
                dims: std::ptr::null(),
            };
            assert_eq!(
                kr_buffer_new(&config, &column, 1, misaligned.cast::<*mut kr_buffer>()),
                KR_E_INVALID_ARGUMENT
            );
            // The message asked for is not replaced by this call's own failure.
            let before = last_error();
            let mut message = [0 as std::ffi::c_char; 64];
            assert_eq!(
                kr_last_error_message(message.as_mut_ptr(), 64, misaligned.cast::<usize>()),
                KR_E_INVALID_ARGUMENT
            );
            assert_eq!(last_error(), before);
            assert!(raw.iter().all(|&w| w == 0), "a refused output was written");
            kr_rng_free(rng);
            kr_buffer_free(buffer);
        }
    }
}
