"""SequenceReplayBuffer from Python: windows, stacks, next observations and n-step returns
against a model written here from scratch; errors; lanes written from threads."""

import contextlib
import threading
import time

import kary_replay as kr
import numpy as np
import pytest

SCHEMA = {"obs": ("float32", (2,)), "action": ("int64", ()), "reward": ("float32", ())}


def step(lane: int, t: int, reward: float = 1.0) -> dict[str, object]:
    return {"obs": np.array([lane, t], np.float32), "action": t, "reward": reward}


class Model:
    """Every step a lane ever wrote, at the positions the writer gives them."""

    def __init__(self, period: int) -> None:
        self.period = period
        self.rows: dict[int, tuple[np.ndarray, int, float]] = {}
        self.episodes: list[list[int | None]] = []  # [start, last, terminal]
        self.next = 0

    def push(self, obs: np.ndarray, action: int, reward: float) -> None:
        if not self.episodes or self.episodes[-1][1] is not None:
            self.episodes.append([self.next, None, None])
        self.rows[self.next] = (obs, action, reward)
        self.next += 1

    def end(self, final: np.ndarray, truncated: bool) -> None:
        self.episodes[-1][1] = self.next - 1
        self.episodes[-1][2] = not truncated
        self.rows[self.next] = (final, 0, 0.0)
        self.next = -(-(self.next + 1) // self.period) * self.period

    def window(self, start: int, w: int, k: int, n: int | None, gamma: float) -> dict[str, object]:
        ep = next(e for e in self.episodes if e[0] <= start and (e[1] is None or start <= e[1]))
        first, last, terminal = ep
        left = 10**9 if last is None else last + 1 - start
        length = min(w, left)
        obs = np.zeros((w, k, 2), np.float32)
        for i in range(length):
            for j in range(k):
                t = max(start + i + j - (k - 1), first)
                obs[i, j] = self.rows[t][0]
        m = length if n is None else min(n, left)
        nxt = np.zeros((k, 2), np.float32)
        for j in range(k):
            nxt[j] = self.rows[max(start + m + j - (k - 1), first)][0]
        ret = sum(gamma**i * self.rows[start + i][2] for i in range(m))
        disc = 0.0 if (terminal and n is not None and left <= n) else gamma**m
        return {"length": length, "obs": obs, "next": nxt, "return": ret, "discount": disc}


@pytest.mark.parametrize("period,stack,w,n", [(1, 1, 3, 2), (1, 3, 3, 2), (2, 2, 3, 2), (1, 4, 1, 3), (2, 1, 2, 5)])
def test_windows_equal_a_model_built_from_scratch(period: int, stack: int, w: int, n: int) -> None:
    gamma = 0.9
    rb = kr.SequenceReplayBuffer(
        1,
        64,
        SCHEMA,
        window=w,
        period=period,
        nstep=(n, gamma, "reward"),
        stack={"obs": stack} if stack > 1 else None,
        next_of=("obs",),
    )
    model = Model(period)
    rng = np.random.default_rng(5)
    lane = rb.lane(0)
    for _ in range(40):  # episodes of 1..6 steps: no wrap, every window still stored
        for _ in range(int(rng.integers(1, 7))):
            if lane.position >= 60:
                break
            t = lane.position
            reward = float(rng.integers(-3, 4))
            lane.push(**step(0, t, reward))
            model.push(np.array([0, t], np.float32), t, reward)
        if lane.position >= 60:
            break
        truncated = bool(rng.integers(0, 2))
        final = np.array([-1, lane.position], np.float32)
        lane.end_episode(truncated=truncated, obs=final)
        model.end(final, truncated)
    b = rb.sample(256, rng=kr.Rng(2))
    obs = b["obs"].reshape(256, w, stack, 2)
    nxt = b["next_obs"].reshape(256, stack, 2)
    for i in range(256):
        _, start = rb.window_of(int(b["keys"][i]))
        want = model.window(start, w, stack, n, gamma)
        assert b.lengths[i] == want["length"]
        assert b.mask[i].sum() == want["length"]
        np.testing.assert_array_equal(obs[i], want["obs"])
        np.testing.assert_array_equal(nxt[i], want["next"])
        assert b.returns[i] == pytest.approx(want["return"], rel=1e-6)
        assert b.discounts[i] == pytest.approx(want["discount"], rel=1e-6)


def test_shapes_dtypes_and_updates() -> None:
    rb = kr.SequenceReplayBuffer(
        2, 256, {"frame": ("uint8", (8, 8)), "reward": ("float32", ())}, window=4, period=2, stack={"frame": 4}
    )
    lane = rb.lane(1)
    for t in range(20):
        lane.push(frame=np.full((8, 8), t, np.uint8), reward=0.5)
    b = rb.sample(16, rng=kr.Rng(3))
    assert b["frame"].shape == (16, 4, 4, 8, 8) and b["frame"].dtype == np.uint8
    assert b["reward"].shape == (16, 4)
    assert b.mask.dtype == np.bool_ and b.mask.all()
    assert "returns" not in b and "next_frame" not in b
    assert b.weights.dtype == np.float32 and b["keys"].dtype == np.uint64
    applied, stale = rb.update_priorities(b["keys"], np.linspace(0.1, 2, 16))
    assert (applied, stale) == (16, 0)
    assert rb.consistent()
    assert len(rb) == 8  # windows at 0, 2, ..., 14 have their next row written
    assert rb.capacity == 2 * 256 // 2
    assert rb.steps_written == 20
    assert rb.memory_bytes > 2 * 256 * 65


def test_windows_without_replacement() -> None:
    rb = kr.SequenceReplayBuffer(2, 64, SCHEMA, window=4, period=2)
    for lane in range(2):
        writer = rb.lane(lane)
        for t in range(30):
            writer.push(obs=np.array([lane, t], np.float32), action=t, reward=1.0)
        writer.end_episode()
    n = len(rb)
    for seed in range(10):
        b = rb.sample(n, 1.0, mode="without_replacement", rng=kr.Rng(seed))
        assert len(set(b["keys"].tolist())) == n
        assert b.mask.any(axis=1).all()
    with pytest.raises(ValueError, match="without replacement"):
        rb.sample(n + 1, mode="without_replacement")


def test_window_priorities_by_key() -> None:
    rb = kr.SequenceReplayBuffer(1, 8, SCHEMA, window=2, alpha=0.5)
    lane = rb.lane(0)
    for t in range(4):
        lane.push(obs=np.array([0, t], np.float32), action=t, reward=1.0)
    keys = rb.sample(len(rb), mode="without_replacement")["keys"]
    rb.update_priorities(keys, np.full(len(keys), 4.0))
    np.testing.assert_array_equal(rb.priorities_of(keys), np.full(len(keys), 2.0))
    for t in range(4, 20):
        lane.push(obs=np.array([0, t], np.float32), action=t, reward=1.0)
    assert np.isnan(rb.priorities_of(keys)).all()


def test_errors_change_nothing() -> None:
    with pytest.raises(kr.InvalidArgumentError, match="window"):
        kr.SequenceReplayBuffer(1, 8, SCHEMA, window=8)
    with pytest.raises(kr.InvalidArgumentError, match="period"):
        kr.SequenceReplayBuffer(1, 8, SCHEMA, period=0)
    with pytest.raises(kr.InvalidArgumentError, match="stack"):
        kr.SequenceReplayBuffer(1, 8, SCHEMA, stack={"frame": 2})
    with pytest.raises(kr.InvalidArgumentError, match="reward"):
        kr.SequenceReplayBuffer(1, 8, SCHEMA, nstep=(2, 0.9, "action"))
    with pytest.raises(kr.SchemaError, match="taken"):
        kr.SequenceReplayBuffer(1, 8, {"mask": ("bool", ())})
    with pytest.raises(kr.SchemaError, match="next_obs"):
        kr.SequenceReplayBuffer(1, 8, {"obs": ("float32", ()), "next_obs": ("float32", ())}, next_of=("obs",))
    rb = kr.SequenceReplayBuffer(2, 16, SCHEMA, window=2, next_of=("obs",))
    lane = rb.lane(0)
    with pytest.raises(kr.InvalidArgumentError, match="already has a writer"):
        rb.lane(0)
    with pytest.raises(kr.InvalidKeyError):
        rb.lane(2)
    with pytest.raises(kr.SchemaError):
        lane.push(obs=np.zeros(2, np.float64), action=0, reward=0.0)
    with pytest.raises(kr.SchemaError):
        lane.push(obs=np.zeros(3, np.float32), action=0, reward=0.0)
    with pytest.raises(kr.SchemaError, match="missing"):
        lane.push(obs=np.zeros(2, np.float32), action=0)
    with pytest.raises(kr.InvalidArgumentError, match="no step"):
        lane.end_episode(obs=np.zeros(2, np.float32))
    assert lane.position == 0 and rb.steps_written == 0
    with pytest.raises(kr.EmptyBufferError):
        rb.sample(4)
    lane.push(**step(0, 0))
    with pytest.raises(kr.SchemaError, match="missing"):
        lane.end_episode()
    with pytest.raises(kr.SchemaError, match="next_of"):
        lane.end_episode(obs=np.zeros(2, np.float32), action=1)
    assert lane.position == 1 and lane.in_episode
    lane.close()
    with pytest.raises(kr.ClosedError):
        lane.push(**step(0, 1))
    with pytest.raises(kr.EmptyBufferError):
        rb.sample(4)
    with rb.lane(1) as other:
        for t in range(3):
            other.push(**step(1, t))
    b = rb.sample(4, rng=kr.Rng(1))
    with pytest.raises(kr.InvalidPriorityError):
        rb.update_priorities(b["keys"], np.full(4, np.nan))
    with pytest.raises(kr.InvalidKeyError):
        rb.update_priorities(b["keys"] ^ np.uint64(1 << 50), np.ones(4))
    assert rb.total_priority == pytest.approx(len(rb) * 1.0)


def test_sequence_priorities() -> None:
    td = np.array([[1.0, -3.0, 5.0], [2.0, 0.0, 0.0]])
    mask = np.array([[True, True, False], [True, False, False]])
    p = kr.sequence_priorities(td, mask, eta=0.9)
    np.testing.assert_allclose(p, [0.9 * 3 + 0.1 * 2, 2.0])
    with pytest.raises(kr.InvalidArgumentError):
        kr.sequence_priorities(td, mask[:1])


def test_lanes_from_threads_beside_a_sampler() -> None:
    """Four Python threads each write a lane while a fifth samples: every sampled row is
    the step its key implies, of its lane (the calls release the GIL)."""
    lanes, w = 4, 4
    rb = kr.SequenceReplayBuffer(lanes, 128, SCHEMA, window=w, stack={"obs": 2})
    stop = threading.Event()
    errors: list[BaseException] = []

    def actor(i: int) -> None:
        try:
            lane = rb.lane(i)
            rng = np.random.default_rng(i)
            for _ in range(2000):
                lane.push(**step(i, lane.position))
                if rng.random() < 0.1:
                    lane.end_episode(truncated=bool(rng.random() < 0.5))
        except BaseException as e:
            errors.append(e)

    def learner() -> None:
        rng = kr.Rng(9)
        try:
            while not stop.is_set():
                if len(rb) == 0:
                    continue
                b = rb.sample(32, rng=rng)
                for i, key in enumerate(b["keys"]):
                    lane, start = rb.window_of(int(key))
                    n = int(b.lengths[i])
                    np.testing.assert_array_equal(b["action"][i, :n], np.arange(start, start + n))
                    assert (b["obs"][i, :n, 1, 0] == lane).all()
                rb.update_priorities(b["keys"], np.abs(b["reward"].sum(1)) + 0.5)
        except BaseException as e:
            errors.append(e)

    actors = [threading.Thread(target=actor, args=(i,)) for i in range(lanes)]
    sampler = threading.Thread(target=learner)
    sampler.start()
    for t in actors:
        t.start()
    for t in actors:
        t.join()
    stop.set()
    sampler.join()
    assert not errors, errors
    assert rb.consistent()
    assert rb.steps_written >= lanes * 2000


def test_sample_into_the_callers_arrays() -> None:
    rb = kr.SequenceReplayBuffer(1, 64, SCHEMA, nstep=(3, 0.9, "reward"), stack={"obs": 2}, next_of=("obs",))
    lane = rb.lane(0)
    for t in range(20):
        lane.push(**step(0, t, float(t)))
    want = rb.sample(8, rng=kr.Rng(11))
    out = {
        "obs": np.full((10, 1, 2, 2), -7, np.float32),
        "action": np.zeros((10, 1), np.int64),
        "reward": np.zeros((10, 1), np.float32),
        "next_obs": np.zeros((10, 2, 2), np.float32),
    }
    info = rb.sample_into(out, 8, rng=kr.Rng(11))
    for name in ("obs", "action", "reward", "next_obs"):
        np.testing.assert_array_equal(out[name][:8], want[name])
    assert (out["obs"][8:] == -7).all(), "rows past the batch were written"
    np.testing.assert_array_equal(info["keys"], want["keys"])
    np.testing.assert_array_equal(info.returns, want.returns)
    np.testing.assert_array_equal(info.mask, want.mask)
    bad = dict(out, next_obs=np.zeros((10, 2), np.float32))
    with pytest.raises(kr.SchemaError, match="next_obs"):
        rb.sample_into(bad, 8)
    with pytest.raises(kr.SchemaError, match="no array for 'reward'"):
        rb.sample_into({k: v for k, v in out.items() if k != "reward"}, 8)
    with pytest.raises(kr.SchemaError):
        rb.sample_into(dict(out, action=np.zeros((10, 1), np.int32)), 8)


def _fill(rb: kr.SequenceReplayBuffer, lanes: int, steps: int, seed: int) -> list[kr.LaneWriter]:
    """Random episodes on every lane (wrapping the rings); the writers stay held."""
    rng = np.random.default_rng(seed)
    writers = [rb.lane(i) for i in range(lanes)]
    for _ in range(steps):
        i = int(rng.integers(lanes))
        w = writers[i]
        w.push(**step(i, w.position, float(rng.integers(-2, 3))))
        if rng.random() < 0.15:
            w.end_episode(truncated=bool(rng.random() < 0.5), obs=np.array([-1, w.position], np.float32))
    return writers


def _same_samples(a: kr.SequenceReplayBuffer, b: kr.SequenceReplayBuffer, seed: int) -> None:
    x, y = a.sample(32, rng=kr.Rng(seed)), b.sample(32, rng=kr.Rng(seed))
    assert sorted(x.keys()) == sorted(y.keys())
    for name in sorted(x.keys()):
        np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def test_save_load_and_pickle_go_on_as_the_original(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pickle

    def make() -> kr.SequenceReplayBuffer:
        return kr.SequenceReplayBuffer(
            3, 32, SCHEMA, window=2, nstep=(3, 0.9, "reward"), stack={"obs": 2}, next_of=("obs",), key_tag=9
        )

    rb = make()
    writers = _fill(rb, 3, 200, seed=4)
    b = rb.sample(16, rng=kr.Rng(1))
    rb.update_priorities(b["keys"], np.arange(16) + 0.5)
    # Saved with the writers held, mid-episode.
    rb.save(tmp_path / "ckpt", user={"env_steps": 200, "tag": "x"})
    loaded, user = kr.SequenceReplayBuffer.load(tmp_path / "ckpt", with_user=True)
    assert user == {"env_steps": 200, "tag": "x"}
    copies = [loaded, pickle.loads(pickle.dumps(rb, protocol=5)), pickle.loads(pickle.dumps(rb, protocol=4))]
    for c in copies:
        assert isinstance(c, kr.SequenceReplayBuffer)
        assert (len(c), c.capacity, c.lanes, c.window, c.key_tag) == (len(rb), rb.capacity, rb.lanes, rb.window, 9)
        assert c.schema == rb.schema and c.steps_written == rb.steps_written
        _same_samples(rb, c, 7)
    # Keys handed out before the save name the same windows after it.
    for c in copies:
        assert c.update_priorities(b["keys"][:4], np.ones(4)) == (4, 0)
        assert [c.window_of(int(k)) for k in b["keys"]] == [rb.window_of(int(k)) for k in b["keys"]]
    # The loaded lanes go on where they stood: the same steps keep them equal.
    for c in copies:
        cw = [c.lane(i) for i in range(3)]
        assert [w.position for w in cw] == [w.position for w in writers]
        assert [w.in_episode for w in cw] == [w.in_episode for w in writers]
    # numpy reads the files alone.
    obs = np.load(tmp_path / "ckpt" / "col.obs.npy")
    assert obs.shape == (3, 32, 2) and obs.dtype == np.float32
    assert np.load(tmp_path / "ckpt" / "windows.npy").shape == (rb.capacity, 4)
    assert np.load(tmp_path / "ckpt" / "priorities.npy").shape == (rb.capacity,)


def test_a_loaded_buffer_takes_the_same_steps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rb = kr.SequenceReplayBuffer(2, 16, SCHEMA, window=3, period=2, next_of=("obs",))
    writers = _fill(rb, 2, 70, seed=11)
    rb.save(tmp_path / "c")
    c = kr.SequenceReplayBuffer.load(tmp_path / "c")
    cw = [c.lane(i) for i in range(2)]
    for t in range(50):
        for i in range(2):
            for w in (writers[i], cw[i]):
                w.push(**step(i, w.position, float(t % 3)))
                if t % 9 == 8:
                    w.end_episode(obs=np.zeros(2, np.float32))
    for w in writers + cw:
        w.flush()
    assert len(c) == len(rb)
    _same_samples(rb, c, 3)


def test_saves_while_lanes_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rb = kr.SequenceReplayBuffer(4, 64, SCHEMA, window=2, next_of=("obs",))
    stop = threading.Event()

    def actor(i: int) -> None:
        with rb.lane(i) as w:
            t = 0
            while not stop.is_set():
                w.push(**step(i, w.position))
                t += 1
                if t % 13 == 0:
                    w.end_episode(obs=np.zeros(2, np.float32))

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        for k in range(5):
            rb.save(kr.numbered(tmp_path, k), keep_last=3)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert sorted(p.name for p in tmp_path.iterdir()) == [kr.numbered(tmp_path, k).name for k in (2, 3, 4)]
    for k in (2, 3, 4):
        c = kr.SequenceReplayBuffer.load(kr.numbered(tmp_path, k))
        assert c.consistent()
        if len(c):
            s = c.sample(64, rng=kr.Rng(k))
            lanes_starts = [c.window_of(int(key)) for key in s["keys"]]
            for b, (lane, start) in enumerate(lanes_starts):
                n = int(s["lengths"][b])
                np.testing.assert_array_equal(s["obs"][b, :n, 0], lane)
                np.testing.assert_array_equal(s["obs"][b, :n, 1], start + np.arange(n))


def test_damaged_or_foreign_checkpoints_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rb = kr.SequenceReplayBuffer(1, 8, SCHEMA, next_of=("obs",))
    _fill(rb, 1, 10, seed=2)
    rb.save(tmp_path / "seq")
    with pytest.raises(kr.CheckpointError, match="SequenceReplayBuffer"):
        kr.load(tmp_path / "seq")
    flat = kr.PrioritizedReplayBuffer(8, SCHEMA)
    flat.save(tmp_path / "flat")
    with pytest.raises(kr.CheckpointError, match="PrioritizedReplayBuffer"):
        kr.SequenceReplayBuffer.load(tmp_path / "flat")
    path = tmp_path / "seq" / "col.action.npy"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(kr.CheckpointError, match="bytes on disk"):
        kr.SequenceReplayBuffer.load(tmp_path / "seq")
    with pytest.raises(kr.CheckpointError, match="must not exist"):
        rb.save(tmp_path / "flat")
    with pytest.raises(kr.InvalidArgumentError):
        rb.save(tmp_path / "u", user={"x": object()})  # type: ignore[dict-item]
    assert not (tmp_path / "u").exists()


def limited(lanes: int = 1, **kw: object) -> kr.SequenceReplayBuffer:
    """Windows of 4 steps every 2; 2 sampled windows per window from 4 on, within +-8."""
    return kr.SequenceReplayBuffer(
        lanes,
        64,
        SCHEMA,
        window=4,
        period=2,
        next_of=("obs",),
        rate_limit=kr.SampleToInsertRatio(2.0, min_size=4, error_buffer=8.0),
        max_sample=4,
        **kw,  # type: ignore[arg-type]
    )


def test_a_rate_limit_counts_windows() -> None:
    rb = limited()
    assert rb.rate_limit == kr.SampleToInsertRatio(2.0, 4, 8.0)
    lane = rb.lane(0)
    with pytest.raises(kr.RateLimitedError):
        rb.sample(4, timeout=0)
    with pytest.raises(kr.RateLimitTimeoutError):
        rb.sample(4, timeout=0.02)
    # No sample: 8 windows fit (2 x 8 = 16); the 8th is completed by step 18, step 20 waits.
    pushed = 0
    with pytest.raises(kr.RateLimitedError):
        for t in range(64):
            lane.push(timeout=0, **step(0, t))
            pushed += 1
    assert (pushed, len(rb), lane.position) == (20, 8, 20)
    with pytest.raises(kr.RateLimitTimeoutError):
        lane.push(timeout=0.02, **step(0, 20))
    assert lane.position == 20
    stats = rb.rate_stats()
    assert stats is not None and (stats["inserts"], stats["samples"]) == (8, 0)
    rb.sample(2, timeout=0)
    lane.push(timeout=0, **step(0, 20))
    # Bad input is refused before the admission and spends nothing.
    with pytest.raises(kr.SchemaError):
        lane.push(timeout=0, obs=np.zeros(2, np.float32))
    with pytest.raises(kr.InvalidArgumentError):
        rb.sample(5, timeout=0)  # past max_sample
    stats = rb.rate_stats()
    assert stats is not None and (stats["inserts"], stats["samples"]) == (9, 2)
    # An episode's end is one insert of the windows it completes: those starting at 18 and
    # 20, which need room for 2 (2 x 11 - 2 > 16: refused, whole), then fit after a sample.
    with pytest.raises(kr.RateLimitedError):
        lane.end_episode(obs=np.zeros(2, np.float32), timeout=0)
    assert lane.in_episode
    rb.sample(4, timeout=0)
    lane.end_episode(obs=np.zeros(2, np.float32), timeout=0)
    stats = rb.rate_stats()
    assert stats is not None and stats["inserts"] == len(rb) == 11
    with pytest.raises(kr.SchemaError, match="timeout"):
        kr.SequenceReplayBuffer(1, 16, {"timeout": ("float32", ())})
    assert kr.SequenceReplayBuffer(1, 16, SCHEMA).rate_stats() is None


def test_close_wakes_a_blocked_lane_and_sampler(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rb = limited(lanes=2)
    errors: list[BaseException] = []

    def actor() -> None:
        lane = rb.lane(1)
        try:
            for t in range(1000):
                lane.push(**step(1, t))
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=actor, daemon=True)
    thread.start()
    try:
        batch = rb.sample(4, timeout=30)
        assert batch["obs"].shape == (4, 4, 2)
        # After 4 samples the actor blocks at 10 windows (2 x 10 - 4 = 16).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stats = rb.rate_stats()
            assert stats is not None
            if stats["inserts"] == 10 and stats["insert_waiters"] > 0:
                break
        # A checkpoint keeps the limit and its counts while the actor waits.
        rb.save(tmp_path / "ckpt")
        copy = kr.SequenceReplayBuffer.load(tmp_path / "ckpt")
        assert copy.rate_limit == rb.rate_limit
        copied = copy.rate_stats()
        assert copied is not None and (copied["inserts"], copied["samples"]) == (10, 4)
    finally:
        rb.close()
    thread.join(30)
    assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], kr.ClosedError)
    with pytest.raises(kr.ClosedError):
        rb.sample(1)
    with pytest.raises(kr.ClosedError):
        rb.lane(0).push(timeout=0, **step(0, 0))


def test_actor_and_learner_threads_hold_the_ratio() -> None:
    rb = kr.SequenceReplayBuffer(
        2,
        64,
        SCHEMA,
        window=4,
        period=2,
        next_of=("obs",),
        rate_limit=kr.SampleToInsertRatio(4.0, min_size=8, error_buffer=16.0),
        max_sample=8,
    )

    def actor(n: int) -> None:
        lane = rb.lane(n)
        for t in range(400):
            lane.push(**step(n, t))
            if t % 31 == 30:
                lane.end_episode(obs=np.zeros(2, np.float32))
        lane.close()

    actors = [threading.Thread(target=actor, args=(n,)) for n in range(2)]
    for a in actors:
        a.start()
    drawn = 0
    while True:
        try:
            rb.sample(8, timeout=0.3)
            drawn += 8
        except kr.RateLimitTimeoutError:
            if not any(a.is_alive() for a in actors):
                break
    for a in actors:
        a.join()
    with contextlib.suppress(kr.RateLimitedError):
        while True:  # what the actors' last windows admitted
            rb.sample(8, timeout=0)
            drawn += 8
    stats = rb.rate_stats()
    assert stats is not None and stats["samples"] == drawn
    # At rest the learner stopped one batch above the range's low end, 32 - 16.
    assert 16 <= 4 * stats["inserts"] - stats["samples"] < 24


def test_push_steps_equals_pushes_and_bad_columns_change_nothing() -> None:
    def filled(chunked: bool) -> kr.SequenceReplayBuffer:
        rb = kr.SequenceReplayBuffer(1, 64, SCHEMA, window=3, nstep=(2, 0.9, "reward"), next_of=("obs",))
        with rb.lane(0) as lane:
            t = 0
            for length in (5, 9, 4):
                steps = [step(0, t + i, reward=float(i)) for i in range(length)]
                if chunked:
                    n = lane.push_steps(
                        obs=np.stack([s["obs"] for s in steps]),
                        action=np.array([s["action"] for s in steps], np.int64),
                        reward=np.array([s["reward"] for s in steps], np.float32),
                    )
                    assert n == length
                else:
                    for s in steps:
                        lane.push(**s)
                lane.end_episode(obs=np.array([-1, t], np.float32))
                t += length
        return rb

    a, b = filled(True), filled(False)
    assert len(a) == len(b) and a.steps_written == b.steps_written
    sa, sb = a.sample(32, rng=kr.Rng(4)), b.sample(32, rng=kr.Rng(4))
    for name in ("obs", "action", "reward", "mask", "returns", "discounts", "next_obs"):
        np.testing.assert_array_equal(sa[name], sb[name], err_msg=name)
    low = np.uint64((1 << 48) - 1)  # each buffer draws its own key tag above
    np.testing.assert_array_equal(sa["keys"] & low, sb["keys"] & low)
    # Bad columns: refused before any step is written.
    with a.lane(0) as lane:
        before = lane.position
        with pytest.raises(kr.SchemaError):
            lane.push_steps(
                obs=np.zeros((3, 2), np.float64), action=np.zeros(3, np.int64), reward=np.zeros(3, np.float32)
            )
        with pytest.raises(kr.SchemaError):
            lane.push_steps(
                obs=np.zeros((3, 2), np.float32), action=np.zeros(2, np.int64), reward=np.zeros(3, np.float32)
            )
        assert lane.position == before
        # Windows of 3 reach 3 steps on: 3 pushes complete none, 4 one; an end all 3.
        assert lane.windows_completed_by(3) == 0 and lane.windows_completed_by(4) == 1
        assert lane.windows_completed_by(3, end=True) == 3
