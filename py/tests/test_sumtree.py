"""The bare K-ary sum tree that the drop-ins put in place of their libraries' trees."""

import pickle

import kary_replay as kr
import numpy as np
import pytest


def test_set_get_total_min_max_and_prefix():
    t = kr.SumTree(10, fanout=4)
    assert len(t) == 10 and t.fanout == 4 and t.total() == 0.0
    t.set([3, 7, 3], [1.0, 2.0, 5.0])  # a repeated index: the last wins
    assert t.total() == 7.0 and t.min_positive() == 2.0 and t.max() == 5.0
    np.testing.assert_array_equal(t.get([3, 7, 0]), [5.0, 2.0, 0.0])
    np.testing.assert_array_equal(t.find_prefix([0.0, 4.99, 5.0, 6.9, 7.0, 100.0]), [3, 3, 7, 7, 7, 7])
    t.set(np.arange(10), 1.0)  # one value for many indices
    assert t.total() == 10.0
    t.clear()
    assert t.total() == 0.0


def test_bad_input_is_an_error_and_changes_nothing():
    t = kr.SumTree(4)
    t.set([1], [2.0])
    for indices, values, error in [
        ([4], [1.0], kr.InvalidKeyError),
        ([-1], [1.0], kr.InvalidKeyError),
        ([0], [float("nan")], kr.InvalidPriorityError),
        ([0], [-1.0], kr.InvalidPriorityError),
        ([0, 1], [1.0, 2.0, 3.0], kr.InvalidArgumentError),
        ([0.5], [1.0], kr.InvalidArgumentError),
    ]:
        with pytest.raises(error):
            t.set(indices, values)
    assert t.total() == 2.0 and list(t.leaves()) == [0.0, 2.0, 0.0, 0.0]
    with pytest.raises(kr.EmptyBufferError):
        kr.SumTree(4).find_prefix([0.5])
    with pytest.raises(kr.InvalidArgumentError):
        kr.SumTree(4, fanout=3)
    with pytest.raises(kr.AllocationError):
        t.sample(2**62, kr.Rng(1))  # a batch no host holds: an error, not an abort


def test_sample_is_proportional():
    t = kr.SumTree(4)
    t.set([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    rng = kr.Rng(3)
    counts = np.zeros(4)
    for _ in range(100):
        idx, values = t.sample(1000, rng, stratified=False)
        counts += np.bincount(idx, minlength=4)
        np.testing.assert_array_equal(values, idx + 1.0)
    expected = 1e5 * np.array([1, 2, 3, 4]) / 10
    assert (((counts - expected) ** 2) / expected).sum() < 16.27
    idx, _ = t.sample(10, rng)  # stratified: each tenth of the mass once
    np.testing.assert_array_equal(np.bincount(idx, minlength=4), [1, 2, 3, 4])


def test_pickle():
    t = kr.SumTree(100, fanout=16)
    t.set(np.arange(100), np.linspace(0, 1, 100))
    back = pickle.loads(pickle.dumps(t))
    assert back.fanout == 16 and back.total() == t.total()
    np.testing.assert_array_equal(back.leaves(), t.leaves())
