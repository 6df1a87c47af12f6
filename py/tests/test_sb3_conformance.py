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


def test_the_nstep_buffer_has_sb3s_signature_and_class():
    from kary_replay.sb3 import PrioritizedNStepReplayBuffer
    from stable_baselines3.common.buffers import NStepReplayBuffer

    assert issubclass(PrioritizedNStepReplayBuffer, NStepReplayBuffer)
    mine = parameters(PrioritizedNStepReplayBuffer.__init__)
    sb3 = parameters(ReplayBuffer.__init__)  # NStepReplayBuffer passes *args to it
    assert [(n, k, d) for n, k, d in mine[: len(sb3)]] == [(n, k, d) for n, k, d in sb3]
    rest = {n: (k, d) for n, k, d in mine[len(sb3) :]}
    assert rest["n_steps"] == (inspect.Parameter.KEYWORD_ONLY, 3)
    assert rest["gamma"] == (inspect.Parameter.KEYWORD_ONLY, 0.99)


def test_nstep_targets_equal_sb3s():
    """The same episodes (terminals and time-limit truncations) into SB3's NStepReplayBuffer
    and ours: every transition we sample has SB3's n-step return, bootstrap factor
    (1 - done) x discount and next observation for that step."""
    from kary_replay.sb3 import PrioritizedNStepReplayBuffer
    from stable_baselines3.common.buffers import NStepReplayBuffer

    space, actions = spaces.Box(-1e6, 1e6, (2,), np.float32), spaces.Discrete(3)
    theirs = NStepReplayBuffer(512, space, actions, "cpu", n_steps=3, gamma=0.9)
    ours = PrioritizedNStepReplayBuffer(512, space, actions, "cpu", n_steps=3, gamma=0.9, seed=1)
    rng = np.random.default_rng(0)
    left = 0
    for t in range(300):
        if left == 0:
            left = int(rng.integers(1, 9))
        left -= 1
        done = left == 0
        truncated = done and bool(rng.integers(0, 2))
        obs = np.array([[t, 0]], np.float32)
        # The true next observation: the next step's, or at an episode's end its final one.
        nxt = np.array([[t, 1]] if done else [[t + 1, 0]], np.float32)
        args = (obs, nxt, np.array([t % 3]), np.array([rng.integers(-3, 4)], np.float32), np.array([done]))
        infos = [{"TimeLimit.truncated": truncated}]
        theirs.add(*args, infos)
        ours.add(*args, infos)
    assert not theirs.full
    s = ours.sample(256)
    for i in range(256):
        t = int(s.observations[i, 0])
        want = theirs._get_samples(np.array([t]))
        assert s.rewards[i, 0].item() == pytest.approx(want.rewards[0, 0].item(), rel=1e-6)
        bootstrap = (1 - s.dones[i, 0]) * s.discounts[i, 0]
        assert bootstrap.item() == pytest.approx(((1 - want.dones[0, 0]) * want.discounts[0, 0]).item(), rel=1e-6)
        np.testing.assert_array_equal(s.next_observations[i].numpy(), want.next_observations[0].numpy())
        assert s.actions[i, 0].item() == t % 3


def test_nstep_truncations_keep_the_true_final_observation_with_optimize_memory_usage():
    """SB3's optimize_memory_usage takes the next slot's observation as the next observation,
    wrong at an episode's end; ours stores the final observation once, so it is right."""
    from kary_replay.sb3 import PrioritizedNStepReplayBuffer

    space = spaces.Box(-1e6, 1e6, (1,), np.float32)
    buf = PrioritizedNStepReplayBuffer(64, space, spaces.Discrete(2), "cpu", 1, True, True, n_steps=2, gamma=0.5)
    assert buf.optimize_memory_usage
    for t in range(6):
        done = t == 2
        final = np.array([[100.0]], np.float32) if done else np.array([[t + 1]], np.float32)
        buf.add(
            np.array([[t]], np.float32),
            final,
            np.array([0]),
            np.array([1.0], np.float32),
            np.array([done]),
            [{"TimeLimit.truncated": done}],
        )
    s = buf.sample(128)
    for i in range(128):
        t = int(s.observations[i, 0])
        if t == 2:  # the truncated episode's last step: bootstraps from the true final observation
            assert s.next_observations[i, 0].item() == 100.0
            assert s.dones[i, 0].item() == 0 and s.discounts[i, 0].item() == 0.5
        if t == 1:
            assert s.next_observations[i, 0].item() == 100.0 and s.rewards[i, 0].item() == 1.5
        assert t != 3 or s.next_observations[i, 0].item() == 5.0


def test_perdqn_learns_on_the_nstep_buffer():
    from kary_replay.sb3 import PrioritizedNStepReplayBuffer

    model = PERDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=200,
        train_freq=4,
        replay_buffer_class=PrioritizedNStepReplayBuffer,
        replay_buffer_kwargs={"n_steps": 3, "seed": 0},
        seed=0,
    )
    model.learn(1200)
    buf = model.replay_buffer
    assert isinstance(buf, PrioritizedNStepReplayBuffer)
    assert len(buf.replay) > 900 and buf.replay.consistent()
    # Priorities moved off the initial value: the TD errors came back by key.
    assert buf.replay.total_priority != pytest.approx(len(buf.replay) * 1.0)
