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
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
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


class PrioritizedReplayBuffer(ReplayBuffer):
    """A drop-in for SB3's ``ReplayBuffer`` (a subclass of it) whose storage and sampling are
    a :class:`kary_replay.PrioritizedReplayBuffer`: items come back with probability
    proportional to priority^alpha, with importance weights; new items get the largest
    priority seen so far.

    ``buffer_size`` counts transitions over all envs, as in SB3. Extra keyword arguments:
    ``alpha`` (0.6), ``beta`` (0.4: the exponent :meth:`sample` uses unless given one;
    :class:`PERDQN` anneals it to 1), ``variant`` ("split"), ``seed`` (the sampling RNG).
    ``optimize_memory_usage`` is not supported (each transition keeps its next observation).
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
        if optimize_memory_usage:
            raise InvalidArgumentError(
                "kary_replay.sb3.PrioritizedReplayBuffer: optimize_memory_usage is not supported"
            )
        # SB3's own arrays are not allocated: the kary-replay buffer holds the transitions.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.beta = beta
        obs_dtype = np.dtype(observation_space.dtype or np.float32)
        act_dtype = np.dtype(self._maybe_cast_dtype(action_space.dtype) or np.float32)
        self._schema = {
            "obs": (obs_dtype, tuple(self.obs_shape)),
            "next_obs": (obs_dtype, tuple(self.obs_shape)),
            "action": (act_dtype, (self.action_dim,)),
            "reward": ("float32", ()),
            "done": ("float32", ()),
        }
        self.replay = kary_replay.PrioritizedReplayBuffer(
            self.buffer_size * n_envs, self._schema, alpha=alpha, variant=variant
        )
        self._rng = kary_replay.Rng(seed)

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
        obs_dtype = self._schema["obs"][0]
        obs = np.asarray(obs, dtype=obs_dtype).reshape((n, *self.obs_shape))
        next_obs = np.asarray(next_obs, dtype=obs_dtype).reshape((n, *self.obs_shape))
        action = np.asarray(action, dtype=self._schema["action"][0]).reshape((n, self.action_dim))
        done = np.asarray(done, dtype=np.float32).reshape(n)
        if self.handle_timeout_termination:
            # A time-limit truncation is not a terminal state: the target still bootstraps.
            timeouts = np.array([info.get("TimeLimit.truncated", False) for info in infos], dtype=np.float32)
            done = done * (1.0 - timeouts)
        self.replay.add_batch(
            obs=obs,
            next_obs=next_obs,
            action=action,
            reward=np.asarray(reward, dtype=np.float32).reshape(n),
            done=done,
        )
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    # Returns SB3's fields and two more (a NamedTuple cannot extend another): code that reads
    # SB3's fields by name or position reads them unchanged.
    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedReplayBufferSamples:
        """``batch_size`` transitions drawn by priority (stratified), with importance weights
        for ``beta`` (default: the buffer's ``beta``)."""
        b = self.replay.sample(batch_size, self.beta if beta is None else beta, rng=self._rng)
        data = (
            self._normalize_obs(b["obs"], env),
            b["action"],
            self._normalize_obs(b["next_obs"], env),
            b["done"].reshape(-1, 1),
            self._normalize_reward(b["reward"].reshape(-1, 1), env),
        )
        obs, action, next_obs, done, reward = (self.to_torch(np.asarray(x), copy=False) for x in data)
        weights = self.to_torch(b["weights"].reshape(-1, 1), copy=False)
        return PrioritizedReplayBufferSamples(obs, action, next_obs, done, reward, None, weights, b["keys"])

    def update_priorities(self, keys: npt.NDArray[np.uint64], priorities: npt.ArrayLike | th.Tensor) -> tuple[int, int]:
        """New raw priorities (|TD error| + eps, say) for the items of a sample; returns
        ``(applied, stale)``."""
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        return self.replay.update_priorities(keys, priorities)

    def reset(self) -> None:
        super().reset()
        self.replay.clear()


class _Prioritized(Protocol):
    """What :class:`PERDQN` needs of its buffer."""

    def sample(
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedReplayBufferSamples: ...

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
        kwargs["replay_buffer_class"] = replay_buffer_class or PrioritizedReplayBuffer
        kwargs["replay_buffer_kwargs"] = replay_buffer_kwargs
        super().__init__(policy, env, *args, **kwargs)

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


__all__ = ["PERDQN", "PrioritizedReplayBuffer", "PrioritizedReplayBufferSamples"]
