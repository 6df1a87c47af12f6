"""Prioritized replay for Stable-Baselines3 (which has none): a ``ReplayBuffer`` subclass on
kary-replay's tree and ``PERDQN``, a DQN whose loss is weighted by the importance weights and
whose |TD error| goes back to the buffer by key.

>>> from kary_replay.sb3 import PERDQN
>>> model = PERDQN("MlpPolicy", "CartPole-v1", learning_starts=1000)   # doctest: +SKIP
>>> model.learn(50_000)                                                 # doctest: +SKIP

Or any off-policy algorithm with the buffer alone (its samples carry ``weights`` and
``keys``; the algorithm must use them to be prioritized):
``DQN(..., replay_buffer_class=PrioritizedReplayBuffer, replay_buffer_kwargs={"alpha": 0.6})``.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt
import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import BaseBuffer, DictReplayBuffer, NStepReplayBuffer, ReplayBuffer
from stable_baselines3.common.vec_env import VecNormalize

import kary_replay
from kary_replay.errors import InvalidArgumentError


class PrioritizedReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields, plus the importance ``weights`` ``(B, 1)`` and
    the ``keys`` (a numpy uint64 array) for :meth:`PrioritizedReplayBuffer.update_priorities`."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    keys: npt.NDArray[np.uint64]


class PrioritizedDictReplayBufferSamples(NamedTuple):
    """SB3's ``DictReplayBufferSamples`` fields (observations as dicts of tensors), plus the
    importance ``weights`` ``(B, 1)`` and the ``keys``."""

    observations: dict[str, th.Tensor]
    actions: th.Tensor
    next_observations: dict[str, th.Tensor]
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    keys: npt.NDArray[np.uint64]


class _KaryStore:
    """What both drop-ins share: the kary-replay buffer holding the transitions (one column per
    observation key, ``obs.<key>`` and ``next_obs.<key>``, or ``obs`` and ``next_obs``), the
    adds, the prioritized sample as arrays, the priority updates and the reset."""

    # Set by SB3's BaseBuffer.__init__, which every subclass runs first.
    n_envs: int
    action_dim: int
    buffer_size: int
    pos: int
    full: bool

    def _store(
        self,
        buffer_size: int,
        observations: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
        action_dtype: np.dtype[Any],
        handle_timeout_termination: bool,
        optimize_memory_usage: bool,
        alpha: float,
        beta: float,
        variant: Literal["split", "lockfree", "global"],
        seed: int | None,
    ) -> None:
        if optimize_memory_usage:
            raise InvalidArgumentError(f"kary_replay.sb3.{type(self).__name__}: optimize_memory_usage is not supported")
        self.buffer_size = max(buffer_size // self.n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.beta = beta
        self._observations = observations
        self._schema: dict[str, tuple[Any, tuple[int, ...]]] = {}
        for prefix in ("obs", "next_obs"):
            for name, spec in observations.items():
                self._schema[prefix if name == "" else f"{prefix}.{name}"] = spec
        self._schema |= {
            "action": (action_dtype, (self.action_dim,)),
            "reward": (np.dtype(np.float32), ()),
            "done": (np.dtype(np.float32), ()),
        }
        self.replay = kary_replay.PrioritizedReplayBuffer(
            self.buffer_size * self.n_envs, self._schema, alpha=alpha, variant=variant
        )
        self._rng = kary_replay.Rng(seed)

    def _columns(self, prefix: str, value: Any) -> dict[str, npt.NDArray[Any]]:
        """One observation (an array, or a dict of arrays by key) as its columns."""
        n = self.n_envs
        if "" in self._observations:
            dtype, shape = self._observations[""]
            return {prefix: np.asarray(value, dtype=dtype).reshape((n, *shape))}
        return {
            f"{prefix}.{name}": np.asarray(value[name], dtype=dtype).reshape((n, *shape))
            for name, (dtype, shape) in self._observations.items()
        }

    def _add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any, infos: list[dict[str, Any]]) -> None:
        n = self.n_envs
        action = np.asarray(action, dtype=self._schema["action"][0]).reshape((n, self.action_dim))
        done = np.asarray(done, dtype=np.float32).reshape(n)
        if self.handle_timeout_termination:
            # A time-limit truncation is not a terminal state: the target still bootstraps.
            timeouts = np.array([info.get("TimeLimit.truncated", False) for info in infos], dtype=np.float32)
            done = done * (1.0 - timeouts)
        # Column names never collide with add_batch's keywords (the schema refuses them).
        columns: dict[str, Any] = {
            **self._columns("obs", obs),
            **self._columns("next_obs", next_obs),
            "action": action,
            "reward": np.asarray(reward, dtype=np.float32).reshape(n),
            "done": done,
        }
        self.replay.add_batch(**columns)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def _draw(self, batch_size: int, beta: float | None) -> tuple[Any, Any, kary_replay.Batch]:
        """A prioritized batch: its observations and next observations as SB3 holds them
        (arrays, or dicts by key), and the whole batch."""
        b = self.replay.sample(batch_size, self.beta if beta is None else beta, rng=self._rng)
        if "" in self._observations:
            return b["obs"], b["next_obs"], b
        obs = {name: b[f"obs.{name}"] for name in self._observations}
        next_obs = {name: b[f"next_obs.{name}"] for name in self._observations}
        return obs, next_obs, b

    def update_priorities(self, keys: npt.NDArray[np.uint64], priorities: npt.ArrayLike | th.Tensor) -> tuple[int, int]:
        """New raw priorities (|TD error| + eps, say) for the items of a sample; returns
        ``(applied, stale)``."""
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        return self.replay.update_priorities(keys, priorities)


class PrioritizedReplayBuffer(_KaryStore, ReplayBuffer):
    """A drop-in for SB3's ``ReplayBuffer`` (a subclass of it) whose storage and sampling are
    a :class:`kary_replay.PrioritizedReplayBuffer`: items come back with probability
    proportional to priority^alpha, with importance weights; new items get the largest
    priority seen so far.

    ``buffer_size`` counts transitions over all envs, as in SB3. Extra keyword arguments:
    ``alpha`` (0.6), ``beta`` (0.4: the exponent :meth:`sample` uses unless given one;
    :class:`PERDQN` anneals it to 1), ``variant`` ("split"), ``seed`` (the sampling RNG).
    ``optimize_memory_usage`` is not supported (each transition keeps its next observation).
    For ``Dict`` observation spaces: :class:`PrioritizedDictReplayBuffer`.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        variant: Literal["split", "lockfree", "global"] = "split",
        seed: int | None = None,
    ) -> None:
        # SB3's own arrays are not allocated: the kary-replay buffer holds the transitions.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        obs_dtype = np.dtype(observation_space.dtype or np.float32)
        self._store(
            buffer_size,
            {"": (obs_dtype, tuple(self.obs_shape))},
            np.dtype(self._maybe_cast_dtype(action_space.dtype) or np.float32),
            handle_timeout_termination,
            optimize_memory_usage,
            alpha,
            beta,
            variant,
            seed,
        )

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        self._add(obs, next_obs, action, reward, done, infos)

    # Returns SB3's fields and two more (a NamedTuple cannot extend another): code that reads
    # SB3's fields by name or position reads them unchanged.
    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedReplayBufferSamples:
        """``batch_size`` transitions drawn by priority (stratified), with importance weights
        for ``beta`` (default: the buffer's ``beta``)."""
        obs, next_obs, b = self._draw(batch_size, beta)
        data = (
            self._normalize_obs(obs, env),
            b["action"],
            self._normalize_obs(next_obs, env),
            b["done"].reshape(-1, 1),
            self._normalize_reward(b["reward"].reshape(-1, 1), env),
        )
        obs_t, action, next_obs_t, done, reward = (self.to_torch(np.asarray(x), copy=False) for x in data)
        weights = self.to_torch(b["weights"].reshape(-1, 1), copy=False)
        return PrioritizedReplayBufferSamples(obs_t, action, next_obs_t, done, reward, None, weights, b["keys"])

    def reset(self) -> None:
        super().reset()
        self.replay.clear()


class PrioritizedDictReplayBuffer(_KaryStore, DictReplayBuffer):
    """A drop-in for SB3's ``DictReplayBuffer`` (a subclass of it: what SB3 uses for ``Dict``
    observation spaces), on a :class:`kary_replay.PrioritizedReplayBuffer` with one column
    per observation key; the arguments and samples of :class:`PrioritizedReplayBuffer`, its
    observations dicts of tensors by key."""

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        variant: Literal["split", "lockfree", "global"] = "split",
        seed: int | None = None,
    ) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise InvalidArgumentError(
                f"PrioritizedDictReplayBuffer takes a Dict observation space, not {type(observation_space).__name__}"
            )
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        assert isinstance(self.obs_shape, dict)
        observations = {
            name: (np.dtype(observation_space.spaces[name].dtype or np.float32), tuple(shape))
            for name, shape in self.obs_shape.items()
        }
        self._store(
            buffer_size,
            observations,
            np.dtype(self._maybe_cast_dtype(action_space.dtype) or np.float32),
            handle_timeout_termination,
            optimize_memory_usage,
            alpha,
            beta,
            variant,
            seed,
        )

    def add(  # type: ignore[override]
        self,
        obs: dict[str, np.ndarray],
        next_obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        self._add(obs, next_obs, action, reward, done, infos)

    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedDictReplayBufferSamples:
        """As :meth:`PrioritizedReplayBuffer.sample`, the observations as dicts by key."""
        obs, next_obs, b = self._draw(batch_size, beta)
        obs_n = self._normalize_obs(obs, env)
        next_n = self._normalize_obs(next_obs, env)
        assert isinstance(obs_n, dict) and isinstance(next_n, dict)
        return PrioritizedDictReplayBufferSamples(
            {k: self.to_torch(np.asarray(v), copy=False) for k, v in obs_n.items()},
            self.to_torch(b["action"], copy=False),
            {k: self.to_torch(np.asarray(v), copy=False) for k, v in next_n.items()},
            self.to_torch(b["done"].reshape(-1, 1), copy=False),
            self.to_torch(np.asarray(self._normalize_reward(b["reward"].reshape(-1, 1), env)), copy=False),
            None,
            self.to_torch(b["weights"].reshape(-1, 1), copy=False),
            b["keys"],
        )

    def reset(self) -> None:
        BaseBuffer.reset(self)
        self.replay.clear()


class PrioritizedNStepReplayBuffer(NStepReplayBuffer):
    """A drop-in for SB3's ``NStepReplayBuffer`` (a subclass of it) on a
    :class:`kary_replay.SequenceReplayBuffer`: one lane per env, each step stored once, and
    n-step transitions sampled by priority with importance weights. ``rewards`` is the
    n-step return over the ``m <= n_steps`` steps before the episode's end, ``discounts`` is
    ``gamma**m``, ``dones`` marks a return that ends in a terminal (its discount is then 0
    too), and ``next_observations`` is the observation ``m`` steps on: the episode's true
    final observation at its end, whether it terminated or was truncated.

    Unlike SB3's, a transition is sampleable only once its n steps (or its episode's end) are
    stored, never across an episode's end or the write head, including once the buffer is
    full; and ``optimize_memory_usage=True`` is accepted (and correct at truncations): every
    observation is stored once either way, the next observation of an episode's last step in
    a row of its own. Extra keyword arguments as :class:`PrioritizedReplayBuffer`'s.
    ``Dict`` observation spaces are not supported."""

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        n_steps: int = 3,
        gamma: float = 0.99,
        alpha: float = 0.6,
        beta: float = 0.4,
        seed: int | None = None,
    ) -> None:
        if isinstance(observation_space, spaces.Dict):
            raise InvalidArgumentError(
                "kary_replay.sb3.PrioritizedNStepReplayBuffer: Dict observations are not supported"
            )
        # SB3's own arrays are not allocated: the lanes hold the steps.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.n_steps = n_steps
        self.gamma = gamma
        self.optimize_memory_usage = optimize_memory_usage
        self.handle_timeout_termination = handle_timeout_termination
        self.beta = beta
        self.buffer_size = max(buffer_size // self.n_envs, 1)
        self._obs_dtype = np.dtype(observation_space.dtype or np.float32)
        self._action_dtype = np.dtype(self._maybe_cast_dtype(action_space.dtype) or np.float32)
        self._alpha = alpha
        self._rng = kary_replay.Rng(seed)
        self._new_replay()

    def _new_replay(self) -> None:
        """An empty sequence buffer and one writer per env's lane."""
        schema = {
            "obs": (self._obs_dtype, tuple(self.obs_shape)),
            "action": (self._action_dtype, (self.action_dim,)),
            "reward": (np.dtype(np.float32), ()),
        }
        # Room for the ring's transitions plus an episode's final row and a return's reach.
        steps = self.buffer_size + self.n_steps + 1
        self._lanes: list[kary_replay.LaneWriter] = []
        self.replay = kary_replay.SequenceReplayBuffer(
            self.n_envs,
            steps,
            schema,
            nstep=(self.n_steps, self.gamma, "reward"),
            next_of=("obs",),
            alpha=self._alpha,
        )
        self._lanes = [self.replay.lane(i) for i in range(self.n_envs)]

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        n = self.n_envs
        obs = np.asarray(obs, dtype=self._obs_dtype).reshape((n, *self.obs_shape))
        next_obs = np.asarray(next_obs, dtype=self._obs_dtype).reshape((n, *self.obs_shape))
        action = np.asarray(action, dtype=self._action_dtype).reshape((n, self.action_dim))
        reward = np.asarray(reward, dtype=np.float32).reshape(n)
        done = np.asarray(done).reshape(n)
        for i, lane in enumerate(self._lanes):
            lane.push(obs=obs[i], action=action[i], reward=reward[i])
            if done[i]:
                # A time-limit truncation bootstraps; SB3 hands the true final observation
                # (its terminal_observation) as next_obs.
                truncated = self.handle_timeout_termination and bool(infos[i].get("TimeLimit.truncated", False))
                lane.end_episode(truncated=truncated, obs=next_obs[i])
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedReplayBufferSamples:
        """``batch_size`` n-step transitions drawn by priority (stratified), with importance
        weights for ``beta`` (default: the buffer's ``beta``)."""
        b = self.replay.sample(batch_size, self.beta if beta is None else beta, rng=self._rng)
        discounts = b["discounts"].reshape(-1, 1)
        data = (
            self._normalize_obs(b["obs"][:, 0], env),
            b["action"][:, 0],
            self._normalize_obs(b["next_obs"], env),
            (discounts == 0).astype(np.float32),
            self._normalize_reward(b["returns"].reshape(-1, 1), env),
            discounts,
        )
        obs_t, action, next_obs_t, done, reward, disc = (self.to_torch(np.asarray(x), copy=False) for x in data)
        weights = self.to_torch(b["weights"].reshape(-1, 1), copy=False)
        return PrioritizedReplayBufferSamples(obs_t, action, next_obs_t, done, reward, disc, weights, b["keys"])

    def update_priorities(self, keys: npt.NDArray[np.uint64], priorities: npt.ArrayLike | th.Tensor) -> tuple[int, int]:
        """New raw priorities for the transitions of a sample; returns ``(applied, stale)``."""
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        return self.replay.update_priorities(keys, priorities)

    def reset(self) -> None:
        BaseBuffer.reset(self)
        self._new_replay()


class _Prioritized(Protocol):
    """What :class:`PERDQN` needs of its buffer."""

    def sample(
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedReplayBufferSamples | PrioritizedDictReplayBufferSamples: ...

    def update_priorities(
        self, keys: npt.NDArray[np.uint64], priorities: npt.ArrayLike | th.Tensor
    ) -> tuple[int, int]: ...


class PERDQN(DQN):
    """DQN with prioritized replay: SB3's DQN whose Huber loss is weighted by the importance
    weights and whose new priorities, |TD error| + ``priority_eps``, go back to the buffer by
    key after each gradient step. Beta anneals linearly from ``beta0`` to 1 over the run.
    Every other argument is DQN's; the buffer is :class:`PrioritizedReplayBuffer` unless
    ``replay_buffer_class`` names another with the same ``sample(..., beta=)`` and
    ``update_priorities``."""

    def __init__(
        self,
        policy: Any,
        env: Any,
        *args: Any,
        beta0: float = 0.4,
        priority_eps: float = 1e-3,
        replay_buffer_class: type[ReplayBuffer] | None = None,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.beta0 = beta0
        self.priority_eps = priority_eps
        self._default_buffer = replay_buffer_class is None
        kwargs["replay_buffer_class"] = replay_buffer_class or PrioritizedReplayBuffer
        kwargs["replay_buffer_kwargs"] = replay_buffer_kwargs
        super().__init__(policy, env, *args, **kwargs)

    def _setup_model(self) -> None:
        # As SB3 picks DictReplayBuffer for Dict observation spaces, the dict drop-in.
        if self._default_buffer and isinstance(self.observation_space, spaces.Dict):
            self.replay_buffer_class = PrioritizedDictReplayBuffer
        super()._setup_model()

    def _prioritized(self) -> _Prioritized:
        buffer = self.replay_buffer
        if buffer is None or not all(hasattr(buffer, m) for m in ("sample", "update_priorities")):
            raise InvalidArgumentError(f"PERDQN needs a prioritized replay buffer, not {type(buffer).__name__}")
        return buffer  # type: ignore[return-value]

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        # SB3 2.x's DQN.train, with the importance weights in the loss and the priority update.
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        beta = self.beta0 + (1.0 - self.beta0) * (1.0 - self._current_progress_remaining)
        losses = []
        buffer = self._prioritized()
        for _ in range(gradient_steps):
            replay_data = buffer.sample(batch_size, env=self._vec_normalize_env, beta=beta)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma
            with th.no_grad():
                next_q_values = self.q_net_target(replay_data.next_observations)
                next_q_values, _ = next_q_values.max(dim=1)
                next_q_values = next_q_values.reshape(-1, 1)
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * discounts * next_q_values
            current_q_values = self.q_net(replay_data.observations)
            current_q_values = th.gather(current_q_values, dim=1, index=replay_data.actions.long())
            per_item = F.smooth_l1_loss(current_q_values, target_q_values, reduction="none")
            loss = (replay_data.weights * per_item).mean()
            losses.append(loss.item())
            self.policy.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            td = (current_q_values - target_q_values).detach().abs().reshape(-1).cpu().numpy()
            buffer.update_priorities(replay_data.keys, td + self.priority_eps)
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("train/beta", beta)


__all__ = [
    "PERDQN",
    "PrioritizedDictReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedNStepReplayBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
]
