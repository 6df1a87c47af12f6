"""A pytest plugin for running tianshou's own tests on kary-replay's drop-ins
(``scripts/host-suites.sh``; ``-p kary_swap_tianshou`` with this folder on ``PYTHONPATH``):
``PrioritizedReplayBuffer`` and ``PrioritizedVectorReplayBuffer`` are ours at the names
tests import them by."""

import tianshou.data
from kary_replay.tianshou import PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer

vars(tianshou.data).update(
    PrioritizedReplayBuffer=PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer=PrioritizedVectorReplayBuffer
)
