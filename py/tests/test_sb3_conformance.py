"""Stable-Baselines3 conformance: ``PrioritizedReplayBuffer`` and
``PrioritizedDictReplayBuffer`` built as SB3 builds its buffers (its off-policy algorithms
pass ``replay_buffer_class`` the same positional and keyword arguments), used by SB3's own
``DQN`` through ``replay_buffer_class``, and ``PERDQN`` picking the dict buffer for ``Dict``
observation spaces as SB3 picks ``DictReplayBuffer``. Run in the peers' venv (SB3 pinned in
scripts/lib/peers-requirements.txt); skipped without SB3."""

import inspect

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
from gymnasium import spaces
from kary_replay.errors import InvalidArgumentError
from kary_replay.sb3 import PERDQN, PrioritizedDictReplayBuffer, PrioritizedReplayBuffer
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.envs import SimpleMultiObsEnv


def parameters(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


@pytest.mark.parametrize(
    ("ours", "theirs"), [(PrioritizedReplayBuffer, ReplayBuffer), (PrioritizedDictReplayBuffer, DictReplayBuffer)]
)
def test_signatures_and_class_relations_are_sb3s(ours, theirs):
    assert issubclass(ours, theirs)
    mine = parameters(ours.__init__)
    sb3 = parameters(theirs.__init__)
    # SB3's names in SB3's order (its annotations aside), then ours by keyword only.
    assert [(n, k) for n, k, _ in mine[: len(sb3)]] == [(n, k) for n, k, _ in sb3]
    assert [d for _, _, d in mine[: len(sb3)]] == [d for _, _, d in sb3]
    assert all(k == inspect.Parameter.KEYWORD_ONLY for _, k, _ in mine[len(sb3) :])


def dict_space():
    return spaces.Dict({"vec": spaces.Box(-1, 1, (3,), np.float32), "img": spaces.Box(0, 255, (1, 4, 4), np.uint8)})


def test_the_dict_buffer_stores_every_key_and_samples_them_together():
    space = dict_space()
    # Positionally, as SB3's off-policy algorithms build their buffer.
    buf = PrioritizedDictReplayBuffer(64, space, spaces.Discrete(3), "cpu", 2, False, True, alpha=1.0, seed=3)
    assert isinstance(buf, DictReplayBuffer)
    for t in range(40):  # 2 envs
        obs = {"vec": np.full((2, 3), t, np.float32), "img": np.full((2, 1, 4, 4), t, np.uint8)}
        nxt = {"vec": obs["vec"] + 1, "img": obs["img"] + 1}
        infos = [{"TimeLimit.truncated": t == 7}, {}]
        buf.add(obs, nxt, np.array([t % 3, 1]), np.array([t, -t], np.float32), np.array([t == 7, 0]), infos)
    assert buf.full and buf.size() == 32
    s = buf.sample(16)
    assert set(s.observations) == {"vec", "img"} == set(s.next_observations)
    assert s.observations["img"].shape == (16, 1, 4, 4) and s.observations["img"].dtype.is_floating_point is False
    vec, img = s.observations["vec"].numpy(), s.observations["img"].numpy()
    # Each row's keys belong to one transition, and its next observation follows it.
    np.testing.assert_array_equal(vec[:, 0], img[:, 0, 0, 0])
    np.testing.assert_array_equal(s.next_observations["vec"].numpy(), vec + 1)
    assert (s.dones.numpy() == 0).all()  # the truncation at t = 7 is not terminal
    assert s.weights.shape == (16, 1) and len(s.keys) == 16
    buf.update_priorities(s.keys[:1], np.array([1e4]))
    assert (buf.sample(64).keys == s.keys[0]).mean() > 0.5
    with pytest.raises(InvalidArgumentError, match="Dict observation space"):
        PrioritizedDictReplayBuffer(8, spaces.Box(-1, 1, (2,)), spaces.Discrete(2))
    with pytest.raises(InvalidArgumentError, match="optimize_memory_usage"):
        PrioritizedDictReplayBuffer(8, space, spaces.Discrete(2), optimize_memory_usage=True)


def test_sb3s_dqn_trains_on_both_buffers_through_replay_buffer_class():
    box = DQN(
        "MlpPolicy",
        "CartPole-v1",
        buffer_size=500,
        learning_starts=100,
        train_freq=4,
        replay_buffer_class=PrioritizedReplayBuffer,
        replay_buffer_kwargs={"alpha": 0.6},
        seed=1,
    )
    box.learn(300)
    assert isinstance(box.replay_buffer, PrioritizedReplayBuffer) and box.replay_buffer.size() == 300
    assert box._n_updates > 0
    multi = DQN(
        "MultiInputPolicy",
        SimpleMultiObsEnv(random_start=False),
        buffer_size=500,
        learning_starts=50,
        replay_buffer_class=PrioritizedDictReplayBuffer,
        seed=1,
    )
    multi.learn(200)
    assert isinstance(multi.replay_buffer, PrioritizedDictReplayBuffer) and multi._n_updates > 0


def test_perdqn_picks_the_dict_buffer_for_dict_spaces_as_sb3_does():
    model = PERDQN(
        "MultiInputPolicy", SimpleMultiObsEnv(random_start=False), buffer_size=500, learning_starts=50, seed=2
    )
    assert isinstance(model.replay_buffer, PrioritizedDictReplayBuffer)
    model.learn(200)
    assert model._n_updates > 0 and model.replay_buffer.replay.stats()["len"] == 200
    plain = PERDQN("MlpPolicy", "CartPole-v1", buffer_size=500, learning_starts=50, seed=2)
    assert type(plain.replay_buffer) is PrioritizedReplayBuffer
