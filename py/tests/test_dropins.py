"""The drop-ins against the real libraries: Stable-Baselines3, TorchRL and tianshou (each
test is skipped where its library is not installed; the test command runs them in the
pinned peers' venv, scripts/lib/peers-env.sh, where all three are)."""

import numpy as np
import pytest

# ------------------------------------------------------------------ Stable-Baselines3


def test_sb3_buffer_is_a_replay_buffer_and_samples_by_priority():
    pytest.importorskip("stable_baselines3")
    from gymnasium import spaces
    from kary_replay.sb3 import PrioritizedReplayBuffer
    from stable_baselines3.common.buffers import ReplayBuffer

    obs_space = spaces.Box(-1, 1, (3,), np.float32)
    buf = PrioritizedReplayBuffer(64, obs_space, spaces.Discrete(2), device="cpu", n_envs=2, alpha=1.0, seed=1)
    assert isinstance(buf, ReplayBuffer)
    for step in range(40):  # 2 envs: 80 transitions, 64 kept
        obs = np.full((2, 3), step, np.float32)
        infos = [{"TimeLimit.truncated": step == 5}, {}]
        buf.add(
            obs, obs + 1, np.array([step % 2, 1]), np.array([step, -step], np.float32), np.array([step == 5, 0]), infos
        )
    assert buf.full and buf.size() == 32 and len(buf.replay) == 64
    s = buf.sample(16)
    assert s.observations.shape == (16, 3) and s.actions.shape == (16, 1) and s.weights.shape == (16, 1)
    # Rows are whole: next_obs = obs + 1, and the reward is +-step of that obs.
    assert np.allclose(s.next_observations.numpy(), s.observations.numpy() + 1)
    assert np.allclose(np.abs(s.rewards.numpy()[:, 0]), s.observations.numpy()[:, 0])
    # A truncated step is not terminal.
    assert (s.dones.numpy() == 0).all()
    # Priority 100 for one item: it dominates the next sample.
    target = s.keys[0]
    buf.update_priorities(np.array([target]), np.array([100.0]))
    assert (buf.sample(64).keys == target).mean() > 0.5


def test_sb3_perdqn_learns_through_the_buffer(tmp_path):
    pytest.importorskip("stable_baselines3")
    from kary_replay.sb3 import PERDQN, PrioritizedReplayBuffer
    from stable_baselines3 import DQN

    model = PERDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=200,
        buffer_size=5000,
        train_freq=4,
        batch_size=32,
        seed=0,
        device="cpu",
    )
    assert isinstance(model, DQN) and isinstance(model.replay_buffer, PrioritizedReplayBuffer)
    model.learn(1500)
    rb = model.replay_buffer.replay
    # Priorities were written back: the stored ones are no longer all the initial maximum.
    stored = np.array([rb.priority(i) for i in range(len(rb))])
    assert len(rb) == 1500 and stored.min() < stored.max()
    assert model.logger.name_to_value.get("train/beta", 0.4) >= 0.4
    # SB3's save_replay_buffer / load_replay_buffer pickle it whole.
    model.save_replay_buffer(tmp_path / "rb.pkl")
    other = PERDQN("MlpPolicy", "CartPole-v1", buffer_size=5000, device="cpu")
    other.load_replay_buffer(tmp_path / "rb.pkl")
    back = other.replay_buffer.replay
    assert len(back) == 1500 and [back.priority(i) for i in range(1500)] == list(stored)


# ------------------------------------------------------------------ TorchRL


def _torchrl():
    pytest.importorskip("torchrl")
    import torch
    from tensordict import TensorDict

    return torch, TensorDict


def test_torchrl_sampler_in_a_replay_buffer_matches_priorities():
    torch, TensorDict = _torchrl()
    from kary_replay.torchrl import KarySampler
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    n = 1000
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(n),
        sampler=KarySampler(n, alpha=1.0, beta=0.5),
        priority_key="td_error",
        batch_size=512,
    )
    data = TensorDict({"obs": torch.arange(n).float(), "td_error": torch.ones(n)}, batch_size=[n])
    rb.extend(data)
    # The item at index 7 gets 999 times the priority of each other one: about half the draws.
    td = rb.sample()
    td["td_error"] = torch.where(td["index"] == 7, 999.0, 1.0)
    rb.update_tensordict_priority(td)
    rb.update_priority(torch.tensor([7]), torch.tensor([999.0]))
    share = np.mean([(rb.sample()["index"] == 7).float().mean().item() for _ in range(20)])
    assert 0.4 < share < 0.6, share
    s = rb.sample()
    assert (s["obs"] == s["index"].float()).all()  # rows are the storage's
    w = s["priority_weight"]
    assert w.dtype == torch.float32  # as TorchRL's own (float32) trees give
    assert torch.allclose(w[s["index"] == 7].max(), torch.tensor((999.0 + 1e-8) / (1 + 1e-8)) ** -0.5, rtol=1e-4)


def test_torchrl_prioritized_buffer_class_state_dict_and_dumps(tmp_path):
    torch, TensorDict = _torchrl()
    from kary_replay.torchrl import KaryPrioritizedReplayBuffer, KarySampler
    from torchrl.data import LazyTensorStorage

    rb = KaryPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(100), batch_size=16)
    assert isinstance(rb._sampler, KarySampler)
    rb.extend(TensorDict({"obs": torch.randn(100, 3), "td_error": torch.linspace(0.1, 5, 100)}, batch_size=[100]))
    s = rb.sample()
    assert s["obs"].shape == (16, 3) and "priority_weight" in s.keys()  # noqa: SIM118 - a TensorDict
    tree = rb._sampler._sum_tree
    np.testing.assert_allclose(tree[np.arange(100)], (np.linspace(0.1, 5, 100) + 1e-8) ** 0.6, rtol=1e-6)
    state = rb.state_dict()
    other = KaryPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(100), batch_size=16)
    other.load_state_dict(state)
    assert other._sampler._sum_tree.query(0, 100) == tree.query(0, 100)
    # The loaded sampler's minimum follows its own tree's updates.
    other.update_priority(torch.arange(100), torch.full((100,), 7.0))
    assert other._sampler._min_tree.query(0, 100) == pytest.approx((7.0 + 1e-8) ** 0.6)
    assert tree.query(0, 100) != other._sampler._sum_tree.query(0, 100)  # no sharing with rb
    rb.dumps(tmp_path / "d")
    third = KaryPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(100), batch_size=16)
    third.loads(tmp_path / "d")
    assert third._sampler._sum_tree.query(0, 100) == pytest.approx(tree.query(0, 100))


# ------------------------------------------------------------------ tianshou


def test_tianshou_buffer_is_theirs_on_our_tree():
    pytest.importorskip("tianshou")
    from kary_replay.tianshou import PrioritizedReplayBuffer
    from tianshou.data import Batch, PrioritizedReplayBuffer as TheirBuffer

    ours = PrioritizedReplayBuffer(size=50, alpha=0.6, beta=0.4)
    theirs = TheirBuffer(size=50, alpha=0.6, beta=0.4)
    assert isinstance(ours, TheirBuffer)
    for i in range(70):
        b = Batch(
            obs=np.array([i]),
            act=i % 2,
            rew=float(i),
            terminated=i % 10 == 9,
            truncated=False,
            obs_next=np.array([i + 1]),
            info={},
        )
        ours.add(b)
        theirs.add(b)
    idx = np.arange(0, 50, 5)
    td = np.linspace(0.1, 3.0, len(idx))
    ours.update_weight(idx, td)
    theirs.update_weight(idx, td)
    # The same weights as tianshou's own tree, item by item, and the same totals.
    np.testing.assert_allclose(ours.get_weight(np.arange(50)), theirs.get_weight(np.arange(50)), rtol=1e-12)
    assert ours.weight.reduce() == pytest.approx(theirs.weight.reduce(), rel=1e-12)
    batch, indices = ours.sample(32)
    assert len(batch) == 32 and (batch.obs[:, 0] == ours.obs[indices][:, 0]).all()
    assert batch.weight.max() == pytest.approx(1.0)
    # Proportional: one item at a huge priority takes most draws.
    ours.update_weight(np.array([3]), np.array([1e4]))
    _, indices = ours.sample(1000)
    assert (indices == 3).mean() > 0.8
