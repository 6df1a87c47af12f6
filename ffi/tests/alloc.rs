//! Allocation and size checks through the C ABI, in its own test binary (a counting global allocator):
//! - 1.e: a warm `kr_buffer_sample` + `kr_buffer_update_priorities` allocates nothing, nor
//!   do an actor's warm `kr_buffer_insert` and `kr_writer_push`;
//! - 1.a: a batch no allocator can give returns `KR_E_ALLOCATION` (it used to abort the
//!   process, or to report `KR_E_PANIC`), with the outputs untouched;
//! - 1.g: a failing `kr_last_error_message` keeps the message it was asked for, and
//!   misaligned output pointers are refused like misaligned inputs.

use std::ffi::c_void;
use std::ptr;

use kary_replay_ffi::*;

#[path = "../../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocations;

const B: usize = 256;

fn null_out() -> kr_sample_out {
    kr_sample_out {
        keys: ptr::null_mut(),
        indices: ptr::null_mut(),
        weights: ptr::null_mut(),
        probabilities: ptr::null_mut(),
        priorities: ptr::null_mut(),
        columns: ptr::null(),
        ..Default::default()
    }
}

fn last_error() -> String {
    let mut buf = [0u8; 256];
    let mut written = 0;
    // SAFETY: a 256-byte buffer and a valid out pointer.
    let status = unsafe { kr_last_error_message(buf.as_mut_ptr().cast(), buf.len(), &mut written) };
    assert_eq!(status, KR_OK);
    String::from_utf8_lossy(&buf[..written.min(255)]).into_owned()
}

#[test]
fn the_c_abi_is_hardened_and_allocation_free_once_warm() {
    // The counter sees an allocation (so a count of 0 below means something).
    assert_eq!(allocations(|| drop(std::hint::black_box(vec![1u8; 16]))), 1);
    for variant in [
        KR_VARIANT_GLOBAL_LOCK,
        KR_VARIANT_SPLIT_LOCK,
        KR_VARIANT_LOCK_FREE,
    ] {
        let mut config = kr_config_default();
        config.capacity = 4096;
        config.variant = variant;
        let columns = [kr_column {
            name: c"obs".as_ptr(),
            dtype: KR_DTYPE_F32,
            shape: 4,
            ndim: 0,
            dims: std::ptr::null(),
        }];
        let mut buffer = ptr::null_mut();
        assert_eq!(
            // SAFETY: valid config, one valid column, valid out pointer.
            unsafe { kr_buffer_new(&config, columns.as_ptr(), 1, &mut buffer) },
            KR_OK
        );
        let obs = vec![1.0f32; 4 * 4096];
        let cols = [obs.as_ptr().cast::<c_void>()];
        // SAFETY: 4096 items of 4 f32, no priorities, no keys wanted.
        let status = unsafe {
            kr_buffer_insert_batch(buffer, cols.as_ptr(), 1, 4096, ptr::null(), ptr::null_mut())
        };
        assert_eq!(status, KR_OK);
        let mut rng = ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { kr_rng_new(3, &mut rng) }, KR_OK);

        let mut keys = vec![
            kr_key {
                index: 0,
                generation: 0
            };
            B
        ];
        let mut weights = vec![0.0f64; B];
        let mut obs_out = vec![0.0f32; 4 * B];
        let priorities = vec![0.5f64; B];
        let dsts = [obs_out.as_mut_ptr().cast::<c_void>()];
        let out = kr_sample_out {
            keys: keys.as_mut_ptr(),
            weights: weights.as_mut_ptr(),
            columns: dsts.as_ptr(),
            ..null_out()
        };
        let step = || {
            // SAFETY: every output has room for B items.
            let s = unsafe { kr_buffer_sample(buffer, rng, B, 0.4, KR_SAMPLE_STRATIFIED, &out) };
            assert_eq!(s, KR_OK);
            // SAFETY: B keys and B priorities; no report wanted.
            let s = unsafe {
                kr_buffer_update_priorities(
                    buffer,
                    out.keys,
                    priorities.as_ptr(),
                    B,
                    ptr::null_mut(),
                )
            };
            assert_eq!(s, KR_OK);
        };
        for _ in 0..3 {
            step();
        }
        let made = allocations(|| {
            for _ in 0..100 {
                step();
            }
        });
        assert_eq!(
            made, 0,
            "variant {variant}: {made} allocations in 100 warm steps"
        );

        // 1.a: all outputs NULL (allowed), batches no allocator can give.
        for batch in [1usize << 40, usize::MAX / 4] {
            // SAFETY: every output is NULL.
            let s = unsafe {
                kr_buffer_sample(buffer, rng, batch, 0.4, KR_SAMPLE_INDEPENDENT, &null_out())
            };
            assert_eq!(
                s,
                KR_E_ALLOCATION,
                "variant {variant} batch {batch}: {}",
                last_error()
            );
        }

        // 1.g: a misaligned output is refused before anything is written.
        let mut raw = vec![0u8; 8 * (B + 1)];
        let misaligned = kr_sample_out {
            // SAFETY: one byte into a buffer of 8(B + 1) bytes: in bounds, misaligned.
            weights: unsafe { raw.as_mut_ptr().add(1) }.cast::<f64>(),
            ..null_out()
        };
        // SAFETY: the misaligned pointer is refused before any write.
        let s =
            unsafe { kr_buffer_sample(buffer, rng, B, 0.4, KR_SAMPLE_INDEPENDENT, &misaligned) };
        assert_eq!(s, KR_E_INVALID_ARGUMENT, "variant {variant}");
        assert!(raw.iter().all(|&b| b == 0));
        let message = last_error();
        assert!(message.contains("out->weights"), "{message}");

        // 1.g: asking for the message wrongly does not replace it.
        // SAFETY: a NULL buffer with a nonzero length is refused without a write.
        let s = unsafe { kr_last_error_message(ptr::null_mut(), 16, ptr::null_mut()) };
        assert_eq!(s, KR_E_NULL);
        assert_eq!(last_error(), message);

        // An actor's calls once warm: single inserts, and pushes through a staged writer
        // (default and explicit priorities, so that a kind change flushes early too).
        let item = [2.0f32; 4];
        let one = [item.as_ptr().cast::<c_void>()];
        let mut writer = ptr::null_mut();
        // SAFETY: a live buffer and a valid out pointer.
        assert_eq!(unsafe { kr_writer_new(buffer, 32, &mut writer) }, KR_OK);
        let act = |i: usize| {
            let p = 0.5f64;
            let priority = if i % 50 >= 40 {
                &p as *const f64
            } else {
                ptr::null()
            };
            // SAFETY: one item of 4 f32, a priority or NULL, no key wanted.
            let s = unsafe { kr_buffer_insert(buffer, one.as_ptr(), 1, priority, ptr::null_mut()) };
            assert_eq!(s, KR_OK);
            // SAFETY: a live writer used by this thread; one item; no count wanted.
            let s = unsafe { kr_writer_push(writer, one.as_ptr(), 1, priority, ptr::null_mut()) };
            assert_eq!(s, KR_OK);
        };
        for i in 0..200 {
            act(i);
        }
        let made = allocations(|| {
            for i in 0..5000 {
                act(i);
            }
        });
        assert_eq!(
            made, 0,
            "variant {variant}: {made} allocations in 5000 warm inserts and pushes"
        );

        // SAFETY: live handles, freed once.
        unsafe {
            assert_eq!(kr_writer_free(writer), KR_OK);
            kr_rng_free(rng);
            kr_buffer_free(buffer);
        }
    }
}
