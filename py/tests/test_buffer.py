"""The Python package against its documented behaviour: every method and error."""

import contextlib
import os
import pickle

import kary_replay as kr
import numpy as np
import pytest

SCHEMA = {
    "obs": ("float32", (4,)),
    "action": ("int64", ()),
    "reward": (np.float32, ()),
    "frame": ("uint8", (2, 3)),
    "done": ("bool", ()),
}


def rows(ids):
    """Item `i`: obs [i, i + .5, -i, 1], action 3 i, reward i / 2, frame filled with i % 256,
    done when i is odd."""
    ids = np.asarray(ids)
    n = len(ids)
    return dict(
        obs=np.stack([ids, ids + 0.5, -ids, np.ones(n)], axis=1).astype(np.float32),
        action=(3 * ids).astype(np.int64),
        reward=(ids / 2).astype(np.float32),
        frame=np.repeat((ids % 256).astype(np.uint8), 6).reshape(n, 2, 3),
        done=(ids % 2 == 1),
    )


def gen(keys):
    """The generations (insertion numbers) of keys: their low 48 bits."""
    return np.asarray(keys, dtype=np.uint64).astype(np.int64) & ((1 << 48) - 1)


def check_rows(batch, ids):
    want = rows(ids)
    for name, value in want.items():
        np.testing.assert_array_equal(batch[name], value, err_msg=name)


@pytest.fixture(params=["split", "lockfree", "global"])
def variant(request):
    return request.param


def filled(variant, n=100, capacity=64, alpha=0.6):
    rb = kr.PrioritizedReplayBuffer(capacity, SCHEMA, alpha=alpha, variant=variant)
    keys = rb.add_batch(priorities=np.linspace(0.5, 5.0, n), **rows(np.arange(n)))
    return rb, keys


def test_construction_and_introspection(variant):
    rb = kr.PrioritizedReplayBuffer(16, SCHEMA, alpha=0.7, fanout=4, variant=variant)
    assert len(rb) == 0 and rb.capacity == 16 and rb.variant == variant
    assert rb.schema["obs"] == ("float32", (4,))
    assert rb.schema["frame"] == ("uint8", (2, 3))
    assert rb.schema["reward"] == ("float32", ())
    assert rb.total_priority == 0.0
    s = rb.stats()
    assert s["len"] == 0 and s["capacity"] == 16 and s["inserted"] == 0
    assert rb.consistency()["exact"]
    assert "PrioritizedReplayBuffer(len=0" in repr(rb)


@pytest.mark.parametrize(
    "kwargs, says",
    [
        (dict(capacity=0), "capacity"),
        (dict(alpha=-1.0), "alpha"),
        (dict(fanout=6), "fanout"),
        (dict(variant="mutex"), "variant"),
        (dict(weight_norm="max"), "weight_norm"),
        (dict(default_priority="one"), "default_priority"),
        (dict(schema={}), "no column"),
        (dict(schema={"x": ("complex64", ())}), "complex64"),
        (dict(schema={"x": ("float32", (0,))}), "no element"),
        (dict(schema={"x": "float32"}), "(dtype, shape)"),
        (dict(key_tag=0), "key_tag"),
        (dict(key_tag=0x8000), "key_tag"),
        (dict(key_tag=3, shard=2), "give one"),
    ],
)
def test_bad_construction_is_a_typed_error(kwargs, says):
    args = dict(capacity=8, schema=SCHEMA)
    args.update(kwargs)
    capacity, schema = args.pop("capacity"), args.pop("schema")
    with pytest.raises(kr.KaryReplayError, match=None) as e:
        kr.PrioritizedReplayBuffer(capacity, schema, **args)
    assert says in str(e.value)
    assert not e.value.retryable


def test_add_and_add_batch_return_keys_and_store_rows(variant):
    rb = kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant)
    k = rb.add(priority=2.0, **{n: v[0] for n, v in rows([5]).items()})
    assert isinstance(k, int) and gen(k) == 0
    keys = rb.add_batch(**rows(np.arange(1, 4)))
    assert keys.dtype == np.uint64 and list(gen(keys)) == [1, 2, 3]
    assert len(rb) == 4 and rb.key(0) == k and rb.key(3) == keys[2]
    assert k >> 48 == int(keys[0]) >> 48 > 0  # one tag per buffer
    assert rb.priority(0) == pytest.approx(2.0**0.6)
    # Scalars and lists are converted to the column's dtype.
    rb.add(obs=[1, 2, 3, 4], action=7, reward=0.5, frame=np.zeros((2, 3), np.uint8), done=True)
    assert len(rb) == 5


def test_sampled_columns_are_the_items_their_keys_name(variant):
    rb, _ = filled(variant, n=100, capacity=64)
    b = rb.sample(256, 0.4, rng=kr.Rng(3))
    assert isinstance(b, kr.Batch)
    assert b["obs"].shape == (256, 4) and b["obs"].dtype == np.float32
    assert b["frame"].shape == (256, 2, 3) and b["done"].dtype == np.bool_
    assert b["keys"].dtype == np.uint64 and b.indices.dtype == np.int64
    assert b.weights.dtype == np.float32 and b.probabilities.dtype == np.float64
    assert np.all(gen(b["keys"]) >= 36) and np.all(b.indices == gen(b["keys"]) % 64)
    check_rows(b, gen(b["keys"]))
    assert np.all((b.weights > 0) & (b.weights <= 1))


def test_a_batch_is_not_reused_by_the_next_sample(variant):
    rb, _ = filled(variant)
    a = rb.sample(32, 0.4, rng=kr.Rng(1))
    copy = {k: v.copy() for k, v in a.items()}
    rb.sample(32, 0.4, rng=kr.Rng(2))
    rb.add_batch(**rows(np.arange(200, 264)))
    for k in copy:
        np.testing.assert_array_equal(a[k], copy[k], err_msg=k)


def test_same_rng_same_draws_and_independent_mode(variant):
    rb, _ = filled(variant)
    a = rb.sample(16, 0.4, rng=kr.Rng(9))
    b = rb.sample(16, 0.4, rng=kr.Rng(9))
    np.testing.assert_array_equal(a["keys"], b["keys"])
    c = rb.sample(16, 0.4, mode="independent", rng=kr.Rng(9))
    assert len(c["keys"]) == 16
    assert rb.sample(4, 0.4) is not None  # the buffer's own generator


def test_sampling_without_replacement(variant):
    rb, _ = filled(variant)  # the last 64 of 100 items, priorities rising from about 2.2 to 5
    for seed in range(20):
        b = rb.sample(64, 1.0, mode="without_replacement", rng=kr.Rng(seed))
        assert len(set(b["indices"].tolist())) == 64  # every item, once
        total = float(b["priorities"].sum())
        taken = np.concatenate([[0.0], np.cumsum(b["priorities"])[:-1]])
        np.testing.assert_allclose(b["probabilities"], b["priorities"] / (total - taken), rtol=1e-5)
        check_rows(b, gen(b["keys"]))
    before = rb.stats()
    with pytest.raises(ValueError, match="without replacement"):
        rb.sample(65, 0.4, mode="without_replacement")
    assert rb.stats() == before
    with pytest.raises(ValueError, match="without_replacement"):
        rb.sample(4, 0.4, mode="no_replacement")


def test_priorities_by_key(variant):
    rb = kr.PrioritizedReplayBuffer(4, SCHEMA, alpha=0.5, variant=variant)
    keys = rb.add_batch(priorities=np.arange(1.0, 7.0), **rows(np.arange(6)))  # 2 evicted
    got = rb.priorities_of(keys)
    assert got.dtype == np.float64 and np.isnan(got[:2]).all()
    np.testing.assert_allclose(got[2:], np.sqrt(np.arange(3.0, 7.0)))
    rb.update_priorities(keys[5:], [16.0])
    assert rb.priorities_of(keys[5:])[0] == 4.0
    with pytest.raises(kr.errors.InvalidKeyError):
        rb.priorities_of(np.array([keys[5] + (1 << 47)], np.uint64))


def test_delete_by_key(variant):
    rb, keys = filled(variant, n=10, capacity=16)
    with pytest.raises(kr.errors.InvalidKeyError):
        rb.delete(np.array([keys[0], keys[9] + (1 << 47)], np.uint64))
    assert len(rb) == 10  # nothing deleted
    assert rb.delete(keys[[2, 5, 5]]) == (2, 1)
    assert len(rb) == 8 and rb.key(2) is None
    assert np.isnan(rb.priorities_of(keys[[2, 5]])).all()
    assert rb.update_priorities(keys[[2]], [9.0]) == (0, 1)
    for mode in ("stratified", "uniform", "without_replacement"):
        b = rb.sample(8, 0.4, mode=mode, rng=kr.Rng(3))
        assert not np.isin(gen(b["keys"]), [2, 5]).any(), mode
        check_rows(b, gen(b["keys"]))
    # Deletions survive a pickle (a checkpoint), and the ring goes on counting as before.
    copy = pickle.loads(pickle.dumps(rb))
    assert len(copy) == 8 and copy.key(5) is None
    for i in range(10, 16):  # the free slots 10..15
        for buffer in (rb, copy):
            buffer.add(**{k: v[0] for k, v in rows([i]).items()})
    assert len(rb) == len(copy) == 14
    for i in range(16, 22):  # slots 0..5: 2 and 5 (deleted) fill, the others evict
        rb.add(**{k: v[0] for k, v in rows([i]).items()})
    assert len(rb) == 16
    rb.clear()
    assert len(rb) == 0 and rb.delete(keys) == (0, 10)


def test_write_back_by_key(variant):
    rb, keys = filled(variant, n=10, capacity=16)
    before = rb.priorities_of(keys)
    rb.delete(keys[[3]])
    with pytest.raises(kr.errors.SchemaError):
        rb.write_back(keys[[1]], nope=[1.0])
    with pytest.raises(kr.errors.SchemaError):
        rb.write_back(keys[[1]])
    with pytest.raises(kr.errors.InvalidKeyError):
        rb.write_back(np.array([keys[4], keys[1] + (1 << 47)], np.uint64), reward=[1.0, 1.0])
    with pytest.raises(kr.errors.SchemaError, match="expected"):
        rb.write_back(keys[[1, 2]], reward=[1.0])  # one row for two keys
    assert rb.write_back(keys[[1, 2, 3]], reward=[10.0, 20.0, 30.0], action=[-1, -2, -3]) == (2, 1)
    np.testing.assert_array_equal(rb.priorities_of(keys[[1, 2]]), before[[1, 2]])
    b = rb.sample(9, 0.4, mode="without_replacement", rng=kr.Rng(1))
    want = rows(gen(b["keys"]))
    for name in ("reward", "action"):
        for g, value in {1: (10.0, -1), 2: (20.0, -2)}.items():
            want[name][gen(b["keys"]) == g] = value[0 if name == "reward" else 1]
    for name, value in want.items():
        np.testing.assert_array_equal(b[name], value, err_msg=name)


def test_consume_after_k_draws(variant):
    if variant == "global":
        with pytest.raises(kr.errors.InvalidArgumentError, match="max_times_sampled"):
            kr.PrioritizedReplayBuffer(16, SCHEMA, variant=variant, max_times_sampled=2)
        return
    with pytest.raises(kr.errors.InvalidArgumentError, match="max_times_sampled"):
        kr.PrioritizedReplayBuffer(16, SCHEMA, variant=variant, max_times_sampled=512)
    rb = kr.PrioritizedReplayBuffer(16, SCHEMA, variant=variant, max_times_sampled=2)
    keys = rb.add_batch(**rows(np.arange(6)))
    drawn = []
    for seed in range(2):  # each item twice, 6 at a time without replacement
        b = rb.sample(6, 0.4, mode="without_replacement", rng=kr.Rng(seed))
        check_rows(b, gen(b["keys"]))
        drawn += b["keys"].tolist()
    assert sorted(drawn) == sorted(keys.tolist() * 2)
    assert len(rb) == 0 and rb.delete(keys) == (0, 6)
    with pytest.raises(kr.errors.EmptyBufferError):
        rb.sample(1)
    # A pickle keeps the setting.
    rb.add_batch(**rows(np.arange(6, 8)))
    copy = pickle.loads(pickle.dumps(rb))
    for _ in range(2):
        copy.sample(2, 0.4, mode="without_replacement")
    assert len(copy) == 0


def test_fifo_and_lifo(variant):
    rb, _ = filled(variant, n=20, capacity=16)  # items 4..19 stored
    for mode, first in (("fifo", 4), ("lifo", 19)):
        b = rb.sample(3, 0.4, mode=mode)
        np.testing.assert_array_equal(gen(b["keys"]), [first] * 3)
        np.testing.assert_array_equal(b["probabilities"], np.ones(3))
        check_rows(b, gen(b["keys"]))
    if variant == "global":
        return
    queue = kr.PrioritizedReplayBuffer(16, SCHEMA, variant=variant, max_times_sampled=1)
    queue.add_batch(**rows(np.arange(10)))
    assert gen(queue.sample(4, mode="fifo")["keys"]).tolist() == [0, 1, 2, 3]
    assert gen(queue.sample(2, mode="lifo")["keys"]).tolist() == [9, 8]
    assert len(queue) == 4
    with pytest.raises(ValueError, match="max_heap"):
        queue.sample(1, mode="oldest")


def test_max_and_min_heap(variant):
    priorities = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 0.0, 9.0, 2.0])
    # Without max_heap=True the tree keeps no maxima: the max-heap draw is refused.
    plain = kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant)
    plain.add_batch(priorities=priorities, **rows(np.arange(8)))
    with pytest.raises(kr.InvalidArgumentError, match="max_heap"):
        plain.sample(1, mode="max_heap")
    assert gen(plain.sample(1, mode="min_heap")["keys"]).tolist() == [1]
    with pytest.raises(TypeError):
        kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant, max_heap="yes")
    rb = kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant, max_heap=True)
    rb.add_batch(priorities=priorities, **rows(np.arange(8)))
    # A pickle keeps the setting.
    assert gen(pickle.loads(pickle.dumps(rb)).sample(1, mode="max_heap")["keys"]).tolist() == [6]
    for mode, top in (("max_heap", 6), ("min_heap", 1)):
        b = rb.sample(3, 0.4, mode=mode)
        np.testing.assert_array_equal(gen(b["keys"]), [top] * 3)
        np.testing.assert_array_equal(b["probabilities"], np.ones(3))
        np.testing.assert_array_equal(b["weights"], np.ones(3))
        check_rows(b, gen(b["keys"]))
    if variant == "global":
        return
    # One draw each: the items in priority order (ties to the lower slot), never the 0.
    queue = kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant, max_times_sampled=1, max_heap=True)
    queue.add_batch(priorities=priorities, **rows(np.arange(8)))
    assert gen(queue.sample(4, mode="max_heap")["keys"]).tolist() == [6, 4, 2, 0]
    assert gen(queue.sample(3, mode="min_heap")["keys"]).tolist() == [1, 3, 7]
    assert len(queue) == 1
    with pytest.raises(kr.EmptyBufferError):
        queue.sample(1, mode="max_heap")


def test_set_alpha_equals_a_fresh_build(variant):
    rb, keys = filled(variant)  # the last 64 of 100 items, priorities 0.5 .. 5
    keys = keys[36:]
    rb.update_priorities(keys[:10], np.arange(1.0, 11.0))
    raw = rb.raw_priorities_of(keys)
    np.testing.assert_array_equal(raw[10:], np.linspace(0.5, 5.0, 100)[46:])
    np.testing.assert_array_equal(raw[:10], np.arange(1.0, 11.0))
    assert rb.alpha == 0.6
    rb.set_alpha(0.3)
    assert rb.alpha == 0.3
    # A fresh buffer with alpha 0.3 over the same raw priorities in the same slots (36 items
    # first, evicted, as in `rb`).
    fresh = kr.PrioritizedReplayBuffer(64, SCHEMA, alpha=0.3, variant=variant)
    fresh_keys = fresh.add_batch(priorities=np.r_[np.ones(36), raw], **rows(np.arange(100)))[36:]
    np.testing.assert_array_equal(rb.priorities_of(keys), fresh.priorities_of(fresh_keys))
    assert rb.total_priority == fresh.total_priority
    # A pickle keeps the alpha and the raw priorities; bad alphas change nothing.
    copy = pickle.loads(pickle.dumps(rb))
    assert copy.alpha == 0.3
    np.testing.assert_array_equal(copy.raw_priorities_of(keys), raw)
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            rb.set_alpha(bad)
    assert rb.alpha == 0.3 and rb.total_priority == fresh.total_priority


def test_shuffled_passes(variant):
    rb, _ = filled(variant, n=20, capacity=16)  # items 4..19 stored
    # Batches of 6 over 16 items: passes end inside batches, and no batch repeats an item.
    stream = []
    for _ in range(8):
        b = rb.sample(6, 0.4, mode="shuffled")
        keys = gen(b["keys"])
        assert len(set(keys.tolist())) == 6
        np.testing.assert_array_equal(b["probabilities"], np.full(6, 1 / 16))
        np.testing.assert_array_equal(b["weights"], np.ones(6))
        check_rows(b, keys)
        stream.extend(keys.tolist())
    for p in range(3):
        assert sorted(stream[16 * p : 16 * (p + 1)]) == list(range(4, 20))
    with pytest.raises(ValueError, match="shuffled sample"):
        rb.sample(17, mode="shuffled")


def test_uniform_sampling(variant):
    rb, _ = filled(variant)  # the last 64 of 100 items
    rb.update_priorities(rb.sample(64, 0.0, mode="without_replacement")["keys"], np.zeros(64))
    counts = np.zeros(64)
    for seed in range(50):
        b = rb.sample(64, 0.4, mode="uniform", rng=kr.Rng(seed))
        assert (b["priorities"] == 0).all()  # priority 0: never drawn by priority
        np.testing.assert_array_equal(b["probabilities"], np.full(64, 1 / 64))
        np.testing.assert_array_equal(b["weights"], np.ones(64, np.float32))
        check_rows(b, gen(b["keys"]))
        counts += np.bincount(b["indices"], minlength=64)
    assert counts.min() > 20 and counts.max() < 90  # 50 each on average
    seq = kr.SequenceReplayBuffer(1, 8, {"x": ("float32", ())})
    lane = seq.lane(0)
    for t in range(4):
        lane.push(x=float(t))
    with pytest.raises(ValueError, match="uniform"):
        seq.sample(1, mode="uniform")


def test_sample_into_numpy_and_torch(variant):
    rb, _ = filled(variant)
    out = {
        "obs": np.zeros((40, 4), np.float32),
        "action": np.zeros(40, np.int64),
        "reward": np.zeros(40, np.float32),
        "frame": np.zeros((40, 2, 3), np.uint8),
        "done": np.zeros(40, bool),
    }
    info = rb.sample_into(out, 32, 0.4, rng=kr.Rng(4))
    assert isinstance(info, kr.SampleInfo) and "obs" not in info
    check_rows({k: v[:32] for k, v in out.items()}, gen(info["keys"]))
    assert not out["obs"][32:].any()  # rows past the batch untouched
    torch = pytest.importorskip("torch")
    t = {
        "obs": torch.zeros(32, 4),
        "action": torch.zeros(32, dtype=torch.int64),
        "reward": torch.zeros(32),
        "frame": torch.zeros(32, 2, 3, dtype=torch.uint8),
        "done": torch.zeros(32, dtype=torch.bool),
    }
    info = rb.sample_into(t, 32, 0.4, rng=kr.Rng(5))
    check_rows({k: v.numpy() for k, v in t.items()}, gen(info["keys"]))


def test_sample_into_checks_its_destinations(variant):
    rb, _ = filled(variant)

    def good():
        return {
            "obs": np.zeros((8, 4), np.float32),
            "action": np.zeros(8, np.int64),
            "reward": np.zeros(8, np.float32),
            "frame": np.zeros((8, 2, 3), np.uint8),
            "done": np.zeros(8, bool),
        }

    for name, bad, says in [
        ("obs", np.zeros((8, 4), np.float64), "float32"),
        ("obs", np.zeros((4, 4), np.float32), ">= 8"),
        ("obs", np.zeros((8, 8), np.float32)[:, ::2], "not contiguous"),
        ("action", [0] * 8, "numpy array"),
    ]:
        out = good()
        out[name] = bad
        with pytest.raises(kr.SchemaError, match=None) as e:
            rb.sample_into(out, 8, 0.4)
        assert says in str(e.value)
    out = good()
    out["obs"].setflags(write=False)
    with pytest.raises(kr.InvalidArgumentError, match="writable"):
        rb.sample_into(out, 8, 0.4)
    out = good()
    del out["done"]
    with pytest.raises(kr.SchemaError, match="done"):
        rb.sample_into(out, 8, 0.4)


def test_update_priorities_applies_counts_stale_and_accepts_array_likes(variant):
    rb, keys = filled(variant, n=100, capacity=64)
    applied, stale = rb.update_priorities(keys[-10:], np.full(10, 7.0, np.float32))
    assert (applied, stale) == (10, 0)
    assert rb.priority(int(keys[-1]) % 64) == pytest.approx(7.0**0.6)
    # Evicted keys are stale, not errors; lists and signed ints are accepted.
    assert rb.update_priorities([int(keys[0]), int(keys[1]), int(keys[-1])], [1.0, 1.0, 3.0]) == (1, 2)
    torch = pytest.importorskip("torch")
    b = rb.sample(8, 0.4, rng=kr.Rng(1)).to_torch()
    assert rb.update_priorities(b["keys"], torch.ones(8, 1)) == (8, 0)
    # Read-only arrays (as Ray hands them) are fine.
    k = keys[-4:].copy()
    k.setflags(write=False)
    assert rb.update_priorities(k, np.ones(4)) == (4, 0)


def test_check_update_refuses_as_an_update_would_and_changes_nothing(variant):
    rb, keys = filled(variant, n=100, capacity=64)
    before = [rb.priority(i) for i in range(64)]
    assert rb.check_update(keys[-10:], np.full(10, 7.0)) is None
    assert rb.check_update(keys[:3], [1.0, 1.0, 1.0]) is None  # stale keys pass, as they apply
    tag = int(keys[0]) >> 48 << 48
    for bad_keys, bad_priorities, error in [
        ([tag | 10**6], [1.0], kr.InvalidKeyError),
        ([int(keys[-1])], [float("nan")], kr.InvalidPriorityError),
        ([int(keys[-1])], [1.0, 2.0], kr.InvalidArgumentError),
        (np.array([1.5]), [1.0], kr.SchemaError),
    ]:
        with pytest.raises(error):
            rb.check_update(bad_keys, bad_priorities)
    assert [rb.priority(i) for i in range(64)] == before


def test_key_tag_sets_the_keys_top_bits():
    rb = kr.PrioritizedReplayBuffer(8, SCHEMA, key_tag=0x7FFF)
    assert rb.key_tag == 0x7FFF
    key = int(rb.add_batch(**rows(np.arange(1)))[0])
    assert key >> 48 == 0x7FFF and key < 2**63
    other = kr.PrioritizedReplayBuffer(8, SCHEMA, key_tag=0x7FFE)
    other.add_batch(**rows(np.arange(1)))
    with pytest.raises(kr.InvalidKeyError, match="tag"):
        other.update_priorities([key], [1.0])


@pytest.mark.parametrize(
    "keys, priorities, error",
    [
        ([99], [float("nan")], kr.InvalidPriorityError),
        ([99], [float("inf")], kr.InvalidPriorityError),
        ([99], [-1.0], kr.InvalidPriorityError),
        ([99, 98], [1.0], kr.InvalidArgumentError),
        ([10**6], [1.0], kr.InvalidKeyError),  # a generation never handed out
        ("foreign", [1.0], kr.InvalidKeyError),  # another buffer's key
        ("untagged", [1.0], kr.InvalidKeyError),  # a bare generation
        ([-1], [1.0], kr.InvalidKeyError),
        (np.array([1.5]), [1.0], kr.SchemaError),
        ([99], ["high"], kr.InvalidArgumentError),
    ],
)
def test_bad_updates_are_typed_errors_and_change_nothing(variant, keys, priorities, error):
    rb, own = filled(variant)
    tag = int(own[0]) >> 48 << 48
    if keys == "foreign":
        keys = [int(filled(variant)[1][-1])]
        if keys[0] >> 48 == tag >> 48:  # the same tag by chance (1 in 32767)
            pytest.skip("two buffers drew the same tag")
    elif keys == "untagged":
        keys = [99]
    elif isinstance(keys, list) and keys and keys[0] >= 0:
        keys = [tag | k for k in keys]
    before = [rb.priority(i) for i in range(64)]
    total = rb.total_priority
    with pytest.raises(error):
        rb.update_priorities(keys, priorities)
    assert [rb.priority(i) for i in range(64)] == before
    assert rb.total_priority == total


def test_bad_inserts_name_the_column_and_change_nothing(variant):
    rb, _ = filled(variant, n=10)
    good = rows(np.arange(4))
    cases = [
        (dict(obs=good["obs"].astype(np.float64)), "column 'obs': dtype float64, expected float32"),
        (dict(obs=good["obs"][:, :3]), "column 'obs': shape [4, 3], expected (4, 4)"),
        (dict(frame=good["frame"].reshape(4, 6)), "column 'frame'"),
        (dict(action=good["action"][:3]), "column 'action'"),
        (dict(extra=good["obs"]), "no column 'extra'"),
    ]
    for change, says in cases:
        cols = dict(good)
        cols.update(change)
        with pytest.raises(kr.SchemaError) as e:
            rb.add_batch(**cols)
        assert says in str(e.value), str(e.value)
    cols = dict(good)
    del cols["done"]
    with pytest.raises(kr.SchemaError, match="'done' is missing"):
        rb.add_batch(**cols)
    with pytest.raises(kr.InvalidPriorityError):
        rb.add_batch(priorities=[1.0, -2.0, 1.0, 1.0], **good)
    with pytest.raises(kr.InvalidArgumentError, match="priorities"):
        rb.add_batch(priorities=[1.0, 1.0], **good)
    with pytest.raises(kr.InvalidPriorityError):
        rb.add(priority=float("nan"), **{n: v[0] for n, v in good.items()})
    assert len(rb) == 10 and rb.stats()["inserted"] == 10


def test_non_contiguous_and_read_only_inputs_are_accepted(variant):
    rb = kr.PrioritizedReplayBuffer(32, SCHEMA, variant=variant)
    r = rows(np.arange(8))
    wide = np.zeros((8, 8), np.float32)
    wide[:, ::2] = r["obs"]
    r["obs"] = wide[:, ::2]  # a strided view
    assert not r["obs"].flags["C_CONTIGUOUS"]
    r["action"].setflags(write=False)
    keys = rb.add_batch(**r)
    b = rb.sample(64, 0.4, rng=kr.Rng(1))
    check_rows(b, gen(b["keys"]))
    assert len(keys) == 8


def test_sizes_too_large_are_typed_errors_not_panics(variant):
    with pytest.raises(kr.InvalidArgumentError, match="capacity"):
        kr.PrioritizedReplayBuffer(2**62, SCHEMA, variant=variant)
    with pytest.raises(kr.SchemaError, match="too many"):
        kr.PrioritizedReplayBuffer(8, {"x": ("float32", (2**40, 2**40))}, variant=variant)
    rb, _ = filled(variant, n=10)
    for batch in (2**40, 2**62):
        with pytest.raises(kr.AllocationError):
            rb.sample(batch, 0.4)
    with pytest.raises(kr.AllocationError):
        rb.writer(2**62)
    with pytest.raises(kr.InvalidArgumentError):
        kr.SumTree(2**62)
    assert len(rb) == 10 and rb.add_batch(**rows(np.arange(0))).size == 0


def test_sampling_errors(variant):
    rb = kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant)
    with pytest.raises(kr.EmptyBufferError):
        rb.sample(4, 0.4)
    rb.add_batch(priorities=np.zeros(2), **rows([0, 1]))
    with pytest.raises(kr.EmptyBufferError):
        rb.sample(4, 0.4)
    rb.add_batch(**rows([2]))
    with pytest.raises(kr.InvalidArgumentError):
        rb.sample(0, 0.4)
    with pytest.raises(kr.InvalidArgumentError):
        rb.sample(4, -1.0)
    with pytest.raises(kr.InvalidArgumentError, match="mode"):
        rb.sample(4, 0.4, mode="greedy")


def test_writer_flushes_every_batch_and_on_exit(variant):
    rb = kr.PrioritizedReplayBuffer(64, SCHEMA, variant=variant)
    r = rows(np.arange(10))
    with rb.writer(4) as w:
        flushed = []
        for i in range(10):
            flushed.extend(w.push(**{n: v[i] for n, v in r.items()}))
            if i == 3:
                assert len(rb) == 4
        assert w.staged == 2 and len(flushed) == 8
    assert len(rb) == 10
    with pytest.raises(kr.SchemaError):
        rb.writer(2).push(obs=np.zeros(3, np.float32))
    with pytest.raises(kr.InvalidArgumentError):
        rb.writer(0)


def test_clear_rebuild_and_live_max(variant):
    rb, keys = filled(variant, n=10)
    rb.rebuild()
    assert rb.consistency()["exact"]
    rb.clear()
    assert len(rb) == 0 and rb.update_priorities(keys, np.ones(10)) == (0, 10)
    rb2 = kr.PrioritizedReplayBuffer(8, SCHEMA, variant=variant, default_priority="live_max", weight_norm="batch")
    rb2.add_batch(priorities=[4.0], **rows([0]))
    rb2.add_batch(**rows([1]))
    assert rb2.priority(1) == rb2.priority(0)


def test_checkpoint_round_trip_across_variants(variant, tmp_path):
    rb, keys = filled(variant, n=100, capacity=64)
    rb.update_priorities(keys[-5:], [9.0] * 5)
    rb.save(tmp_path / "c", user={"step": 100, "name": "run", "lr": 1e-3, "ok": True, "raw": b"\x00\x01"})
    report = kr.verify(tmp_path / "c")
    assert report["len"] == 64 and report["inserted"] == 100
    assert report["user"] == {"step": 100, "name": "run", "lr": 1e-3, "ok": True, "raw": b"\x00\x01"}
    for other in ["split", "lockfree", "global"]:
        loaded, user = kr.load(tmp_path / "c", variant=other, with_user=True)
        assert isinstance(loaded, kr.PrioritizedReplayBuffer) and loaded.variant == other
        assert user["step"] == 100
        assert loaded.schema == rb.schema
        assert [loaded.priority(i) for i in range(64)] == [rb.priority(i) for i in range(64)]
        assert loaded.total_priority == rb.total_priority
        a = rb.sample(32, 0.4, rng=kr.Rng(7))
        b = loaded.sample(32, 0.4, rng=kr.Rng(7))
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        # Keys from before the save: a live one applies, an evicted one is stale.
        assert loaded.update_priorities([keys[-1], keys[0]], [1.0, 1.0]) == (1, 1)
        assert loaded.key(int(gen(keys[-1])) % 64) == keys[-1]


def test_a_checkpoint_keeps_each_column_shape_for_numpy(tmp_path):
    rb, _ = filled("split", n=100, capacity=64)
    rb.save(tmp_path / "c")
    report = kr.verify(tmp_path / "c")
    assert report["columns"] == {
        "obs": ("float32", (4,)),
        "action": ("int64", ()),
        "reward": ("float32", ()),
        "frame": ("uint8", (2, 3)),
        "done": ("bool", ()),
    }
    frames = np.load(tmp_path / "c" / "col.frame.npy")
    rewards = np.load(tmp_path / "c" / "col.reward.npy")
    assert frames.shape == (64, 2, 3) and rewards.shape == (64,)
    gens = np.load(tmp_path / "c" / "generations.npy")
    np.testing.assert_array_equal(frames[:, 0, 0], gens % 256)
    np.testing.assert_array_equal(rewards, (gens / 2).astype(np.float32))
    assert kr.load(tmp_path / "c").schema == rb.schema


def test_a_checkpoint_with_the_shapes_in_its_user_map_still_loads_them(tmp_path):
    # Checkpoints written before the schema held dimensions kept them under this user key.
    flat = kr.PrioritizedReplayBuffer(8, {"frame": ("uint8", (6,)), "r": ("float32", (1,))})
    flat.add(frame=np.arange(6, dtype=np.uint8), r=np.ones(1, np.float32))
    flat.save(tmp_path / "c", user={"kary_replay.python.shapes": "2x3,", "step": 1})
    loaded, user = kr.load(tmp_path / "c", with_user=True)
    assert loaded.schema == {"frame": ("uint8", (2, 3)), "r": ("float32", ())}
    assert user == {"step": 1}
    assert kr.verify(tmp_path / "c")["columns"]["frame"] == ("uint8", (2, 3))
    np.testing.assert_array_equal(loaded.sample(1, 0.4)["frame"][0], np.arange(6).reshape(2, 3))


def test_checkpoint_errors(tmp_path):
    rb, _ = filled("split", n=10)
    rb.save(tmp_path / "c")
    with pytest.raises(kr.CheckpointError) as e:
        rb.save(tmp_path / "c")
    assert e.value.kind == "exists"
    with pytest.raises(kr.CheckpointError) as e:
        kr.load(tmp_path / "nothing")
    assert e.value.kind in ("notfound", "io")
    with open(tmp_path / "c" / "priorities.npy", "r+b") as f:
        f.seek(200)
        f.write(b"\xff")
    with pytest.raises(kr.CheckpointError) as e:
        kr.load(tmp_path / "c")
    assert e.value.kind == "corrupt"
    assert isinstance(e.value, OSError)
    with pytest.raises(kr.InvalidArgumentError):
        rb.save(tmp_path / "d", user={"bad": [1, 2]})


def test_numbered_latest_and_keep_last(tmp_path):
    rb, _ = filled("lockfree", n=10)
    for step in (100, 200, 300):
        rb.save(kr.numbered(tmp_path, step), keep_last=2)
    assert os.path.basename(kr.latest(tmp_path)) == "ckpt-000000000300"
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000000200", "ckpt-000000000300"]
    assert kr.latest(tmp_path / "empty") is None


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_round_trip(variant, protocol):
    rb, keys = filled(variant, n=70, capacity=64)
    out_of_band = []
    data = pickle.dumps(rb, protocol=protocol, buffer_callback=out_of_band.append if protocol >= 5 else None)
    if protocol >= 5:
        assert out_of_band, "protocol 5 sends the arrays out of band"
        assert len(data) < 4096
    back = pickle.loads(data, buffers=out_of_band if protocol >= 5 else None)
    assert isinstance(back, kr.PrioritizedReplayBuffer) and back.variant == variant
    assert [back.priority(i) for i in range(64)] == [rb.priority(i) for i in range(64)]
    assert back.update_priorities([keys[-1]], [2.0]) == (1, 0)


def test_rng_is_picklable_and_not_reseeded():
    r = kr.Rng(5)
    first = [r.random() for _ in range(3)]
    r2 = pickle.loads(pickle.dumps(r))
    assert [r.random() for _ in range(3)] == [r2.random() for _ in range(3)]
    assert first != [kr.Rng(5).random() for _ in range(1)] * 3
    assert kr.Rng(5).random() == first[0]
    with pytest.raises(kr.InvalidArgumentError):
        kr.Rng.from_state((0, 0, 0, 0))


def test_to_torch():
    torch = pytest.importorskip("torch")
    rb, _ = filled("split")
    t = rb.sample(8, 0.4, rng=kr.Rng(1)).to_torch()
    assert t["obs"].dtype == torch.float32 and t["keys"].dtype == torch.int64
    assert t["weights"].shape == (8,)


SCALARS = {"u": "uint8", "i": "int32", "l": "int64", "f": "float32", "d": "float64", "b": "bool"}


@pytest.mark.parametrize(
    "values",
    [
        {"u": 255, "i": -(2**31), "l": 2**63 - 1, "f": 16777217, "d": 0.1, "b": True},
        {"u": True, "i": False, "l": True, "f": True, "d": False, "b": False},
        {"u": 0, "i": 7, "l": -5, "f": 1e40, "d": 2**60 + 1, "b": True},
        {"u": 3, "i": 3, "l": 3, "f": 0.1, "d": float("nan"), "b": 2},
        {"u": 1.0, "i": 2.5, "l": -2.5, "f": 2**64, "d": -0.0, "b": 0},
    ],
)
def test_python_scalars_are_stored_as_numpy_converts_them(values):
    """Python numbers for scalar columns (converted in Rust, not by numpy, where that is
    exact) are stored bit for bit as numpy.asarray(value, dtype) gives them; a lane push too."""
    schema = {k: (d, ()) for k, d in SCALARS.items()}
    a, b = kr.PrioritizedReplayBuffer(1, schema), kr.PrioritizedReplayBuffer(1, schema)
    a.add(**values)
    with np.errstate(over="ignore"):  # 1e40 as float32 is inf, as numpy says
        b.add(**{k: np.asarray(v, SCALARS[k]) for k, v in values.items()})
    x, y = a.sample(1, rng=kr.Rng(0)), b.sample(1, rng=kr.Rng(0))
    for k, dtype in SCALARS.items():
        assert x[k].dtype == np.dtype(dtype)
        with np.errstate(over="ignore"):  # 1e40 as float32 is inf, as numpy says
            want = np.asarray([values[k]]).astype(dtype).tobytes()
        assert x[k].tobytes() == y[k].tobytes() == want, k
    seq = kr.SequenceReplayBuffer(1, 4, schema)
    lane = seq.lane(0)
    lane.push(**values)
    lane.push(**values)
    s = seq.sample(1, rng=kr.Rng(0))
    for k in SCALARS:
        assert s[k][0, 0].tobytes() == y[k][0].tobytes(), k


def test_python_scalars_numpy_refuses_are_refused_and_change_nothing():
    schema = {k: (d, ()) for k, d in SCALARS.items()}
    rb = kr.PrioritizedReplayBuffer(4, schema)
    good = {"u": 1, "i": 1, "l": 1, "f": 1.0, "d": 1.0, "b": True}
    for bad in ({"u": 256}, {"u": -1}, {"i": 2**31}, {"l": 2**64}, {"f": "x"}):
        with pytest.raises(kr.SchemaError, match="cannot convert"):
            rb.add(**{**good, **bad})
    assert len(rb) == 0


def test_a_policy_version_window(variant, tmp_path):
    schema = {"obs": ("float32", (2,)), "version": ("int64", ())}
    with pytest.raises(kr.errors.SchemaError, match="version_column"):
        kr.PrioritizedReplayBuffer(16, schema, variant=variant, version_column="obs")
    plain = kr.PrioritizedReplayBuffer(16, schema, variant=variant)
    assert plain.version_floor is None and plain.version_column is None
    with pytest.raises(kr.errors.InvalidArgumentError, match="policy version"):
        plain.retire_before(1)
    rb = kr.PrioritizedReplayBuffer(16, schema, variant=variant, version_column="version")
    assert rb.version_column == "version" and rb.version_floor == np.iinfo(np.int64).min
    keys = rb.add_batch(obs=np.zeros((6, 2), np.float32), version=np.array([4, 1, 5, 2, 6, 3]))
    assert rb.retire_before(4) == 3 and len(rb) == 3 and rb.version_floor == 4
    assert rb.retire_before(2) == 0 and rb.version_floor == 4  # the floor never goes down
    assert rb.update_priorities(keys, np.ones(6)) == (3, 3)  # retired keys are stale
    for mode in ("independent", "uniform", "fifo"):
        assert (rb.sample(32, mode=mode)["version"] >= 4).all()
    with pytest.raises(kr.errors.InvalidArgumentError, match="policy version 3 is retired"):
        rb.add_batch(obs=np.zeros((2, 2), np.float32), version=np.array([7, 3]))
    with pytest.raises(kr.errors.InvalidArgumentError, match="retired"):
        rb.add(obs=np.zeros(2, np.float32), version=1)
    assert len(rb) == 3
    # Pickles and checkpoints keep the column and the floor.
    again = pickle.loads(pickle.dumps(rb))
    assert again.version_column == "version" and again.version_floor == 4 and len(again) == 3
    rb.save(str(tmp_path / "c"))
    loaded = kr.load(str(tmp_path / "c"), variant=variant)
    assert loaded.version_floor == 4
    with pytest.raises(kr.errors.InvalidArgumentError):
        loaded.add(obs=np.zeros(2, np.float32), version=3)
    rb.clear()
    assert rb.version_floor == 4


def test_threads_never_sample_below_the_floor(variant):
    import threading
    import time

    rb = kr.PrioritizedReplayBuffer(
        256, {"obs": ("float32", ()), "version": ("int64", ())}, variant=variant, version_column="version"
    )
    policy, stop, refused = [0], threading.Event(), [0]

    def actor():
        rng = np.random.default_rng(1)
        while not stop.is_set():
            v = policy[0] - int(rng.integers(0, 4))
            try:
                rb.add_batch(obs=np.zeros(4, np.float32), version=np.full(4, v))
            except kr.errors.InvalidArgumentError:
                refused[0] += 1

    t = threading.Thread(target=actor)
    t.start()
    try:
        for r in range(1, 150):
            time.sleep(0.0005)  # the actor inserts meanwhile
            policy[0] = r
            rb.retire_before(r - 1)
            with contextlib.suppress(kr.errors.EmptyBufferError, kr.errors.ContentionError):
                assert (rb.sample(8, mode="independent")["version"] >= r - 1).all()
    finally:
        stop.set()
        t.join()
    assert refused[0] > 0
    if len(rb):
        assert (rb.sample(len(rb), mode="without_replacement")["version"] >= rb.version_floor).all()


def test_pickles_keep_the_draws_delivered(variant):
    if variant == "global":
        return
    rb = kr.PrioritizedReplayBuffer(16, SCHEMA, variant=variant, max_times_sampled=2)
    rb.add_batch(**rows(np.arange(2)))
    rb.sample(1, mode="fifo")  # the oldest (x = 0): one of its two draws delivered
    again = pickle.loads(pickle.dumps(rb))
    assert gen(again.sample(1, mode="fifo")["keys"]).tolist() == [0]
    assert len(again) == 1  # its second draw retired it
