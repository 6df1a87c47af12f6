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
        },
        kr_column {
            name: c"done".as_ptr(),
            dtype: KR_DTYPE_BOOL,
            shape: 1,
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
        assert_eq!(
            keys[1],
            kr_key {
                index: 1,
                generation: 1
            }
        );
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
        };
        assert_eq!(
            kr_buffer_new(&config, &huge, 1, &mut other),
            KR_E_ALLOCATION
        );
        let bad_dtype = kr_column {
            name: c"x".as_ptr(),
            dtype: 42,
            shape: 1,
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
