"""tianshou conformance: ``PrioritizedReplayBuffer`` and ``PrioritizedVectorReplayBuffer``
built and used as tianshou builds and uses its own (by keyword and by position; a
collector's vector buffer written through ``add`` with ``buffer_ids``), compared with
tianshou's classes item by item where both are deterministic. Run in the peers' venv
(tianshou pinned in scripts/lib/peers-requirements.txt); skipped without tianshou."""

import inspect
import pickle

import numpy as np
import pytest

pytest.importorskip("tianshou")
from kary_replay.tianshou import PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer
from tianshou.data import (
    Batch,
    PrioritizedReplayBuffer as TheirBuffer,
    PrioritizedVectorReplayBuffer as TheirVectorBuffer,
)


def parameters(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def test_signatures_and_class_relations_are_tianshous():
    assert issubclass(PrioritizedReplayBuffer, TheirBuffer)
    assert issubclass(PrioritizedVectorReplayBuffer, TheirVectorBuffer)
    for ours, theirs in [(PrioritizedReplayBuffer, TheirBuffer), (PrioritizedVectorReplayBuffer, TheirVectorBuffer)]:
        ps = parameters(ours.__init__)
        positional = [p for p in parameters(theirs.__init__) if p[1] != inspect.Parameter.VAR_KEYWORD]
        assert ps[: len(positional)] == positional
        assert ("fanout", inspect.Parameter.KEYWORD_ONLY, 8) in ps


def step_batches(n_envs, t):
    """One vectorized step of n_envs environments at time t, as a collector adds it."""
    ids = np.arange(n_envs)
    return Batch(
        obs=(t * 10 + ids)[:, None].astype(np.float32),
        act=ids % 2,
        rew=(t + ids).astype(np.float32),
        terminated=(t + ids) % 7 == 6,
        truncated=np.zeros(n_envs, bool),
        obs_next=(t * 10 + ids + 1)[:, None].astype(np.float32),
        info=Batch(),
    )


def same_seeded_samples(ours, theirs, batch, seed):
    """tianshou draws its masses with numpy: with the same seed, both buffers sample the same
    items with the same weights. Returns both (batch, indices)."""
    np.random.seed(seed)
    b_ours, i_ours = ours.sample(batch)
    np.random.seed(seed)
    b_theirs, i_theirs = theirs.sample(batch)
    np.testing.assert_array_equal(i_ours, i_theirs)
    np.testing.assert_allclose(b_ours.weight, b_theirs.weight, rtol=1e-6)
    return b_ours, i_ours, b_theirs, i_theirs


@pytest.mark.parametrize("positional", [False, True])
def test_the_vector_buffer_equals_tianshous_as_a_collector_fills_it(positional):
    n_envs, total = 4, 64
    if positional:
        ours = PrioritizedVectorReplayBuffer(total, n_envs, alpha=0.6, beta=0.4)
        theirs = TheirVectorBuffer(total, n_envs, alpha=0.6, beta=0.4)
    else:
        ours = PrioritizedVectorReplayBuffer(total_size=total, buffer_num=n_envs, alpha=0.6, beta=0.4)
        theirs = TheirVectorBuffer(total_size=total, buffer_num=n_envs, alpha=0.6, beta=0.4)
    assert isinstance(ours, TheirVectorBuffer) and ours.maxsize == theirs.maxsize == total
    for t in range(30):  # past each sub-buffer's 16: they wrap
        b = step_batches(n_envs, t)
        r_ours = ours.add(b, buffer_ids=np.arange(n_envs))
        r_theirs = theirs.add(b, buffer_ids=np.arange(n_envs))
        for a, c in zip(r_ours, r_theirs, strict=True):
            np.testing.assert_array_equal(a, c)
    assert len(ours) == len(theirs)
    idx = np.arange(0, total, 3)
    td = np.linspace(0.1, 4.0, len(idx))
    ours.update_weight(idx, td)
    theirs.update_weight(idx, td)
    np.testing.assert_allclose(ours.get_weight(np.arange(total)), theirs.get_weight(np.arange(total)), rtol=1e-12)
    assert ours.weight.reduce() == pytest.approx(theirs.weight.reduce(), rel=1e-12)
    b_ours, i_ours, b_theirs, i_theirs = same_seeded_samples(ours, theirs, 32, seed=7)
    np.testing.assert_array_equal(b_ours.obs, b_theirs.obs)
    # Episodes across sub-buffers: prev/next and the n-step indices are tianshou's.
    np.testing.assert_array_equal(ours.next(i_ours), theirs.next(i_theirs))
    np.testing.assert_array_equal(ours.prev(i_ours), theirs.prev(i_theirs))
    ours.set_beta(0.9)
    assert all(buf._beta == 0.9 for buf in ours.buffers)


def test_tianshous_collector_fills_ours_as_it_fills_tianshous():
    # A real Collector over a DummyVectorEnv of 4 CartPoles (episodes end at different
    # steps, sub-buffers wrap), with a policy that alternates its action by observation.
    import gymnasium as gym
    from tianshou.algorithm.algorithm_base import Policy
    from tianshou.data import Collector
    from tianshou.env import DummyVectorEnv

    class Alternate(Policy):
        def forward(self, batch, state=None, **kwargs):
            return Batch(act=(np.asarray(batch.obs)[:, 2] > 0).astype(np.int64), state=state)

    def collect(buffer):
        envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
        envs.seed([1, 2, 3, 4])
        collector = Collector(Alternate(action_space=envs.action_space[0]), envs, buffer)
        collector.reset()
        stats = collector.collect(n_step=400)
        envs.close()
        return stats

    ours = PrioritizedVectorReplayBuffer(200, 4, alpha=0.6, beta=0.4)
    theirs = TheirVectorBuffer(200, 4, alpha=0.6, beta=0.4)
    s_ours, s_theirs = collect(ours), collect(theirs)
    assert s_ours.n_collected_episodes == s_theirs.n_collected_episodes > 0
    assert len(ours) == len(theirs) == 200
    for key in ("obs", "act", "rew", "terminated", "truncated", "obs_next"):
        np.testing.assert_array_equal(getattr(ours, key), getattr(theirs, key), err_msg=key)
    np.testing.assert_allclose(ours.get_weight(np.arange(200)), theirs.get_weight(np.arange(200)), rtol=1e-12)
    same_seeded_samples(ours, theirs, 64, seed=3)


def test_tianshous_n_step_returns_over_ours_are_tianshous_and_brute_forces():
    # tianshou's n-step path: its algorithms' targets come from Algorithm.compute_nstep_return,
    # which walks the buffer with next(), done and unfinished_index. Over our vector buffer
    # (4 envs whose episodes end by terminal or truncation, sub-buffers wrapped, a write head
    # mid-episode) it gives tianshou's returns, and both equal a brute-force walk of the
    # generated episodes.
    import torch
    from tianshou.algorithm.algorithm_base import Algorithm

    n_envs, per_env, steps, gamma = 4, 16, 45, 0.9
    ours = PrioritizedVectorReplayBuffer(n_envs * per_env, n_envs, alpha=0.6, beta=0.4)
    theirs = TheirVectorBuffer(n_envs * per_env, n_envs, alpha=0.6, beta=0.4)
    ids = np.arange(n_envs)
    rew = np.random.default_rng(5).normal(size=(steps, n_envs)).astype(np.float32)
    terminated = (np.arange(steps)[:, None] + 3 * ids) % 7 == 6
    truncated = ~terminated & ((np.arange(steps)[:, None] + 2 * ids) % 11 == 10)
    for t in range(steps):
        b = Batch(
            obs=(t * 10 + ids)[:, None].astype(np.float32),
            act=ids % 2,
            rew=rew[t],
            terminated=terminated[t],
            truncated=truncated[t],
            obs_next=(t * 10 + ids + 5)[:, None].astype(np.float32),
            info=Batch(),
        )
        ours.add(b, buffer_ids=ids)
        theirs.add(b, buffer_ids=ids)
    ours.update_weight(np.arange(0, 64, 5), np.linspace(0.5, 3.0, 13))
    theirs.update_weight(np.arange(0, 64, 5), np.linspace(0.5, 3.0, 13))

    def q_after(buffer, indices):
        # The bootstrap value of an index: its next observation, as a target network would.
        return torch.as_tensor(buffer.obs_next[indices, 0], dtype=torch.float32)

    b_ours, i_ours, b_theirs, i_theirs = same_seeded_samples(ours, theirs, 48, seed=9)
    for n in (1, 3, 5):
        r_ours = Algorithm.compute_nstep_return(b_ours, ours, i_ours, q_after, gamma, n).returns.numpy().ravel()
        r_theirs = Algorithm.compute_nstep_return(b_theirs, theirs, i_theirs, q_after, gamma, n).returns.numpy()
        np.testing.assert_array_equal(r_ours, r_theirs.ravel())
        for index, got in zip(i_ours, r_ours, strict=True):
            t, env = divmod(int(ours.obs[index, 0]), 10)
            ret, m = 0.0, n
            for i in range(n):
                ret += gamma**i * rew[t + i, env]
                if terminated[t + i, env] or truncated[t + i, env] or t + i == steps - 1:
                    m = i + 1
                    break
            last = t + m - 1
            bootstrap = 0.0 if terminated[last, env] else last * 10 + env + 5
            assert got == pytest.approx(ret + gamma**m * bootstrap, rel=1e-5), (n, t, env)


def test_the_vector_buffer_pickles_and_samples_by_priority():
    ours = PrioritizedVectorReplayBuffer(32, 2, alpha=1.0, beta=0.4, fanout=4)
    for t in range(10):
        ours.add(step_batches(2, t), buffer_ids=np.arange(2))
    back = pickle.loads(pickle.dumps(ours))
    filled = np.r_[0:10, 16:26]  # each sub-buffer's first 10 slots
    np.testing.assert_allclose(back.get_weight(filled), ours.get_weight(filled))
    back.update_weight(np.array([3]), np.array([1e4]))
    _, indices = back.sample(1000)
    assert (indices == 3).mean() > 0.8


def test_the_host_suite_plugin_puts_ours_where_tianshou_tests_import_theirs():
    # scripts/host-suites.sh runs tianshou's own tests with this plugin; in a fresh process,
    # as it patches tianshou for the whole run.
    import os
    import pathlib
    import subprocess
    import sys

    code = """
import kary_swap_tianshou
import kary_replay.tianshou as ours
from tianshou.data import PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer
assert PrioritizedReplayBuffer is ours.PrioritizedReplayBuffer
assert PrioritizedVectorReplayBuffer is ours.PrioritizedVectorReplayBuffer
"""
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent / "hosts")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
