"""A pytest plugin for running TorchRL's own tests on kary-replay's drop-ins
(``scripts/host-suites.sh``; ``-p kary_swap_torchrl`` with this folder on ``PYTHONPATH``):
``PrioritizedSampler``, ``PrioritizedSliceSampler`` and ``TensorDictPrioritizedReplayBuffer`` are ours at every name a
test or TorchRL's own constructors reach them by. Modules that only test ``isinstance``
keep TorchRL's class, of which ours are subclasses."""

import importlib

from kary_replay.torchrl import KaryPrioritizedReplayBuffer, KaryPrioritizedSliceSampler, KarySampler

SAMPLER = [
    "torchrl.data",
    "torchrl.data.replay_buffers",
    "torchrl.data.replay_buffers.samplers",
    "torchrl.data.replay_buffers.replay_buffers.prioritized",
    "torchrl.data.replay_buffers.replay_buffers.prioritized_tensordict",
]
SLICE = ["torchrl.data", "torchrl.data.replay_buffers", "torchrl.data.replay_buffers.samplers"]
BUFFER = ["torchrl.data", "torchrl.data.replay_buffers", "torchrl.data.replay_buffers.replay_buffers"]
for name in SAMPLER:
    vars(importlib.import_module(name))["PrioritizedSampler"] = KarySampler
for name in BUFFER:
    vars(importlib.import_module(name))["TensorDictPrioritizedReplayBuffer"] = KaryPrioritizedReplayBuffer
for name in SLICE:
    vars(importlib.import_module(name))["PrioritizedSliceSampler"] = KaryPrioritizedSliceSampler
