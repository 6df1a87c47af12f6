"""Our buffer's decisions beside a real Reverb table's (dm-reverb 0.14, in a venv of its own:
scripts/lib/reverb-env.sh; skipped where reverb is not installed): seeded sequences of
inserts, samples, updates and deletions where both libraries' semantics are deterministic
(FIFO, LIFO and heap selectors, consume after k draws), the items each draw returns and
the sizes compared call by call. Where the semantics differ (a ring evicts by position), the difference is
pinned by its own test and documented in docs/design.md ("Ordered draws: FIFO and LIFO")."""

import random

import kary_replay as kr
import numpy as np
import pytest

reverb = pytest.importorskip("reverb")

SCHEMA = {"id": ("int64", ())}


class Pair:
    """One Reverb table and one of our buffers, driven by the same calls."""

    def __init__(self, capacity, selector, k, variant, priorities=None):
        sel = {
            "fifo": reverb.selectors.Fifo,
            "lifo": reverb.selectors.Lifo,
            "max_heap": reverb.selectors.MaxHeap,
            "min_heap": reverb.selectors.MinHeap,
        }[selector]
        # Where priorities matter (the heaps): a source of distinct positive ones.
        self.priorities = priorities
        table = reverb.Table(
            "t",
            sampler=sel(),
            remover=reverb.selectors.Fifo(),
            max_size=capacity,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            max_times_sampled=k,
        )
        self.server = reverb.Server(tables=[table])
        self.client = reverb.Client(f"localhost:{self.server.port}")
        self.ours = kr.PrioritizedReplayBuffer(
            capacity, SCHEMA, variant=variant, max_times_sampled=k, max_heap=selector == "max_heap"
        )
        self.mode = selector
        self.next_id = 0
        self.reverb_keys = {}  # id -> Reverb's key, learnt when a sample returns the item
        self.our_keys = {}  # id -> our key

    def close(self):
        self.server.stop()

    def insert(self, n):
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        ps = [self.priorities.uniform(0.1, 10.0) if self.priorities else 1.0 for _ in ids]
        for i, p in zip(ids, ps, strict=True):
            self.client.insert(np.int64(i), priorities={"t": p})
        keys = self.ours.add_batch(priorities=np.array(ps), id=ids)
        self.our_keys.update(zip(ids.tolist(), keys.tolist(), strict=True))

    def sample(self, n):
        theirs = []
        for s in self.client.sample("t", num_samples=n):
            i = int(s[0].data[0])
            self.reverb_keys[i] = s[0].info.key
            theirs.append(i)
        ours = self.ours.sample(n, mode=self.mode)["id"].tolist()
        return theirs, ours

    def delete(self, i):
        self.client.mutate_priorities("t", deletes=[self.reverb_keys[i]])
        applied, _ = self.ours.delete(np.array([self.our_keys[i]], np.uint64))
        return applied

    def update(self, i, p):
        self.client.mutate_priorities("t", updates={self.reverb_keys[i]: p})
        report = self.ours.update_priorities(np.array([self.our_keys[i]], np.uint64), np.array([p]))
        return report

    def sizes(self):
        return self.client.server_info()["t"].current_size, len(self.ours)


@pytest.fixture(params=["split", "lockfree"])
def variant(request):
    return request.param


def run(pair, rng, ops, draws_left, may_delete):
    """`ops` random calls on both sides; `draws_left(size)` bounds a sample so that neither
    side would block or fail (Reverb blocks when a batch outruns the items)."""
    for step in range(ops):
        reverb_size, our_size = pair.sizes()
        assert reverb_size == our_size, f"call {step}: sizes {reverb_size} (Reverb) and {our_size} (ours)"
        roll = rng.random()
        if roll < 0.45 or our_size == 0:
            pair.insert(rng.randint(1, 3))
        elif may_delete and roll < 0.6:
            live = [
                i for i in pair.reverb_keys if pair.ours.priorities_of(np.array([pair.our_keys[i]], np.uint64))[0] > 0
            ]
            if live:
                assert pair.delete(rng.choice(live)) == 1
        else:
            n = rng.randint(1, max(1, draws_left(our_size)))
            theirs, ours = pair.sample(n)
            assert theirs == ours, f"call {step}: Reverb drew {theirs}, we drew {ours}"


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_fifo_queue_wrapping_many_times(variant, k):
    """FIFO draws, FIFO removal, consume after k: the ring wraps ~25 times; every draw and
    every size equal Reverb's. (Consumed items leave at the old end, where the ring's next
    insert lands, so the ring's eviction and Reverb's FIFO remover agree.)"""
    pair = Pair(8, "fifo", k, variant)
    try:
        run(pair, random.Random(k), 400, lambda size: size * k if k == 1 else 1, may_delete=False)
        assert pair.next_id > 8 * 20
    finally:
        pair.close()


@pytest.mark.parametrize("selector", ["fifo", "lifo"])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_fifo_and_lifo_with_deletions_before_the_ring_wraps(variant, selector, k):
    """FIFO or LIFO draws, consume after k (0: never), deletions by key of items a sample
    returned: each draw and size equal Reverb's while the ring has not wrapped."""
    pair = Pair(256, selector, k, variant)
    try:
        rng = random.Random(100 + k)
        run(pair, rng, 150, lambda size: size if k == 1 else 1, may_delete=True)
        assert pair.next_id < 256
    finally:
        pair.close()


@pytest.mark.parametrize("selector", ["fifo", "lifo"])
def test_fifo_and_lifo_over_a_wrapping_ring_without_consumption(variant, selector):
    """No consumption, no deletion: the ring's eviction is Reverb's FIFO remover; draws of
    several items at once (the oldest or newest, repeated) equal Reverb's."""
    pair = Pair(8, selector, 0, variant)
    try:
        run(pair, random.Random(7), 200, lambda size: 4, may_delete=False)
        assert pair.next_id > 8 * 5
    finally:
        pair.close()


def test_where_a_ring_differs_from_reverbs_fifo_remover(variant):
    """LIFO draws consuming items leave a hole at the new end: Reverb's table then has room
    and removes nothing on the next insert; the ring's next insert lands on the oldest slot
    and evicts its item. Both draw the same item next; the sizes differ by the one evicted."""
    pair = Pair(4, "lifo", 1, variant)
    try:
        pair.insert(4)  # ids 0..3: full
        assert pair.sample(1) == ([3], [3])  # consumed: 3 items on both sides
        pair.insert(1)  # id 4
        assert pair.sizes() == (4, 3)  # Reverb kept id 0; the ring evicted it
        assert pair.sample(1) == ([4], [4])
        assert pair.sample(2) == ([2, 1], [2, 1])
        assert pair.sizes() == (1, 0)  # Reverb still holds id 0
    finally:
        pair.close()


@pytest.mark.parametrize("selector", ["max_heap", "min_heap"])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_heaps_with_updates_and_deletions(variant, selector, k):
    """Max- or min-heap draws, consume after k (0: never), priorities drawn at random
    (distinct: ties are where the two differ, docs/design.md "Heap selectors"), updates and
    deletions of items a sample returned: each draw and size equal Reverb's."""
    rng = random.Random(200 + k)
    pair = Pair(256, selector, k, variant, priorities=random.Random(300 + k))
    try:
        for step in range(150):
            reverb_size, our_size = pair.sizes()
            assert reverb_size == our_size, f"call {step}: sizes {reverb_size} (Reverb) and {our_size} (ours)"
            live = [
                i for i in pair.reverb_keys if pair.ours.priorities_of(np.array([pair.our_keys[i]], np.uint64))[0] > 0
            ]
            roll = rng.random()
            if roll < 0.4 or our_size == 0:
                pair.insert(rng.randint(1, 3))
            elif roll < 0.55 and live:
                assert pair.update(rng.choice(live), rng.uniform(0.1, 10.0))[0] == 1
            elif roll < 0.65 and live:
                assert pair.delete(rng.choice(live)) == 1
            else:
                n = rng.randint(1, our_size) if k == 1 else rng.randint(1, 3) if k == 0 else 1
                theirs, ours = pair.sample(n)
                assert theirs == ours, f"call {step}: Reverb drew {theirs}, we drew {ours}"
        assert pair.next_id < 256
    finally:
        pair.close()
