"""TorchRL conformance: ``KarySampler`` and ``KaryPrioritizedReplayBuffer`` built the way
TorchRL builds and uses the classes they replace (positionally, through TorchRL's own
``PrioritizedReplayBuffer``, ``TensorDictReplayBuffer`` and ``ReplayBuffer(sampler=...)``),
compared with TorchRL's classes where both are deterministic. Run in the peers' venv
(TorchRL pinned in scripts/lib/peers-requirements.txt); skipped without TorchRL."""

import inspect
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from kary_replay.errors import InvalidArgumentError  # noqa: E402
from kary_replay.torchrl import KaryPrioritizedReplayBuffer, KaryPrioritizedSliceSampler, KarySampler  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data import (  # noqa: E402
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers.samplers import PrioritizedSampler, PrioritizedSliceSampler  # noqa: E402


def parameters(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def assert_takes_the_arguments_of(ours_class, their_class):
    """A subclass whose parameters are TorchRL's, in order, with TorchRL's defaults; then
    fanout, keyword-only."""
    assert issubclass(ours_class, their_class)
    ours = parameters(ours_class.__init__)
    theirs = parameters(their_class.__init__)
    assert ours[: len(theirs)] == theirs
    assert [(n, k) for n, k, _ in ours[len(theirs) :]] == [("fanout", inspect.Parameter.KEYWORD_ONLY)]


def test_the_sampler_takes_torchrls_arguments_in_torchrls_order():
    assert_takes_the_arguments_of(KarySampler, PrioritizedSampler)
    s = KarySampler(100, 0.7, 0.4, 1e-6, torch.float64, "mean", True, "cpu")
    assert (s._max_capacity, s._alpha, s._beta, s._eps, s.dtype, s.reduction) == (
        100,
        0.7,
        0.4,
        1e-6,
        torch.float64,
        "mean",
    )
    assert s._max_priority_within_buffer


def test_the_buffer_is_a_tensordict_prioritized_replay_buffer_with_its_arguments():
    assert issubclass(KaryPrioritizedReplayBuffer, TensorDictPrioritizedReplayBuffer)
    ours = {n: (k, d) for n, k, d in parameters(KaryPrioritizedReplayBuffer.__init__)}
    for name, kind, default in parameters(TensorDictPrioritizedReplayBuffer.__init__):
        if kind == inspect.Parameter.KEYWORD_ONLY:
            # Taken by name (ours pass the rest to TorchRL's parent as they are).
            assert name in ours or inspect.Parameter.VAR_KEYWORD in [k for k, _ in ours.values()], name
            if name in ours:
                assert ours[name] == (kind, default), name
    rb = KaryPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(64), batch_size=8)
    assert isinstance(rb, TensorDictPrioritizedReplayBuffer)
    assert isinstance(rb.prioritized_sampler, KarySampler)


def filled(rb, n=32):
    td = TensorDict({"obs": torch.arange(n, dtype=torch.float32), "td_error": 1.0 + (torch.arange(n) % 4)}, [n])
    rb.extend(td)
    return td


def test_torchrls_own_prioritized_buffer_builds_our_sampler_positionally(monkeypatch):
    # TorchRL's PrioritizedReplayBuffer builds PrioritizedSampler(max_size, alpha, beta, eps,
    # dtype, ...) by position: with ours in its place, the same samples and weights.
    # The module whose PrioritizedSampler TorchRL's class builds.
    module = sys.modules[PrioritizedReplayBuffer.__init__.__module__]

    def run(sampler_class):
        monkeypatch.setattr(module, "PrioritizedSampler", sampler_class)
        rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(64), batch_size=16)
        rb.extend(torch.arange(32))
        rb.update_priority(torch.arange(32), (1.0 + (torch.arange(32) % 4)).float())
        torch.manual_seed(3)
        np.random.seed(3)  # TorchRL draws its masses with numpy on the CPU
        data, info = rb.sample(return_info=True)
        return rb, data, info

    ours, data, info = run(KarySampler)
    assert isinstance(ours._sampler, KarySampler)
    # And given to it as sampler=, as TorchRL's signature allows.
    direct = PrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(64), sampler=KarySampler(64, 0.7, 0.5)
    )
    direct.extend(torch.arange(8))
    assert len(direct.sample(4)) == 4
    _, ref_data, ref_info = run(PrioritizedSampler)
    np.testing.assert_array_equal(data.numpy(), ref_data.numpy())
    np.testing.assert_array_equal(np.asarray(info["index"]), np.asarray(ref_info["index"]))
    np.testing.assert_allclose(np.asarray(info["priority_weight"]), np.asarray(ref_info["priority_weight"]), rtol=1e-6)


def test_tensordict_buffers_and_replay_buffer_with_our_sampler_match_torchrls():
    def draws(make):
        rb = make()
        filled(rb)
        torch.manual_seed(5)
        np.random.seed(5)
        batch = rb.sample()
        return batch["obs"].numpy(), batch["priority_weight"].numpy(), rb

    for ours_make, theirs_make in [
        (
            lambda: KaryPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(64), batch_size=16),
            lambda: TensorDictPrioritizedReplayBuffer(
                alpha=0.6, beta=0.4, storage=LazyTensorStorage(64), batch_size=16
            ),
        ),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(64), sampler=KarySampler(64, 0.6, 0.4), priority_key="td_error", batch_size=16
            ),
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(64),
                sampler=PrioritizedSampler(64, 0.6, 0.4),
                priority_key="td_error",
                batch_size=16,
            ),
        ),
    ]:
        obs, w, rb = draws(ours_make)
        ref_obs, ref_w, _ = draws(theirs_make)
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_allclose(w, ref_w, rtol=1e-6)
        # update_tensordict_priority through TorchRL's API: the first row's item dominates afterwards.
        batch = rb.sample()
        batch["td_error"] = torch.where(batch["obs"] == batch["obs"][0], 1e6, 1e-3)
        rb.update_tensordict_priority(batch)
        assert (rb.sample()["obs"] == batch["obs"][0]).float().mean() > 0.5


def test_sync_false_samples_uniformly_then_prioritizes_as_torchrls():
    rb = KaryPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(64), batch_size=8, sync=False, sampler_device="cpu"
    )
    filled(rb)
    assert rb.sample()["obs"].shape == (8,)
    assert isinstance(rb.prioritized_sampler, KarySampler)
    with pytest.raises(ValueError):
        KaryPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(16, ndim=2), sync=False)


def test_documented_refusals():
    # A device other than the CPU: the tree lives on the CPU.
    with pytest.raises(InvalidArgumentError, match="CPU"):
        KarySampler(8, 0.6, 0.4, device="meta")
    # A sampler smaller than its storage: TorchRL's ignores the writes past it (and never
    # samples those items); ours refuses, saying what to do.
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=KarySampler(5, 0.6, 0.4), batch_size=2)
    with pytest.raises(InvalidArgumentError, match="max_capacity at least the storage's max_size"):
        rb.extend(torch.arange(10))


def _write_from_a_process(rb, worker, queue):
    rb.extend(
        TensorDict(
            {"obs": torch.full((4, 1), float(worker)), "prio": {"td_error": torch.linspace(0.1, 1.0, 4) + worker}},
            [4],
        )
    )
    queue.put(worker)


def test_torchrls_multiprocess_writers_fill_our_buffer():
    # TorchRL's way for writers in other processes: a shared storage and sync=False (the
    # tree is built from the storage's write count when a sample comes); with sync=True
    # sharing is refused, as TorchRL's own sampler refuses it.
    import multiprocessing as mp

    from torchrl.data import LazyMemmapStorage

    rb = KaryPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        priority_key=("prio", "td_error"),
        storage=LazyMemmapStorage(32, shared_init=True),
        batch_size=4,
        shared=True,
        sync=False,
    )
    queue = mp.Queue()
    procs = [mp.Process(target=_write_from_a_process, args=(rb, w, queue)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(queue.get(timeout=5) for _ in procs) == [0, 1]
    assert rb.write_count == 8
    sample = rb.sample()
    assert rb._prioritized_sampler_write_count == 8
    assert set(sample["obs"].flatten().tolist()) <= {0.0, 1.0}
    assert sample.get("priority_weight", None) is not None
    sample["prio", "td_error"] = torch.full(sample.shape, 10.0)
    rb.update_tensordict_priority(sample)
    sampler = rb.prioritized_sampler
    assert isinstance(sampler, KarySampler) and sampler._max_priority[0] is not None
    # Every written item holds a positive priority in our tree.
    assert (sampler._sum_tree[np.arange(8)] > 0).all()

    shared_sync = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(21), sampler=KarySampler(21, alpha=1.1, beta=0.5), shared=True
    )
    shared_sync.extend(TensorDict({"a": torch.zeros(10)}, [10]))
    proc = mp.get_context("spawn").Process(target=len, args=(shared_sync,))
    with pytest.raises(RuntimeError, match="sync=False"):
        proc.start()


def test_the_host_suite_plugin_puts_ours_where_torchrl_builds_its_own():
    # scripts/host-suites.sh runs TorchRL's own tests with this plugin; in a fresh process,
    # as it patches TorchRL for the whole run.
    import os
    import pathlib
    import subprocess

    code = """
import kary_swap_torchrl
from kary_replay.torchrl import KaryPrioritizedReplayBuffer, KaryPrioritizedSliceSampler, KarySampler
import torchrl.data as d
from torchrl.data import replay_buffers
from torchrl.data.replay_buffers import samplers
assert d.PrioritizedSampler is KarySampler and samplers.PrioritizedSampler is KarySampler
for module in (d, replay_buffers, samplers):
    assert module.PrioritizedSliceSampler is KaryPrioritizedSliceSampler
assert d.TensorDictPrioritizedReplayBuffer is KaryPrioritizedReplayBuffer
rb = d.PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=d.ListStorage(10))
assert type(rb._sampler) is KarySampler, type(rb._sampler)
"""
    hosts = pathlib.Path(__file__).parent / "hosts"
    env = {**os.environ, "PYTHONPATH": str(hosts)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_the_slice_sampler_takes_torchrls_arguments_in_torchrls_order():
    assert_takes_the_arguments_of(KaryPrioritizedSliceSampler, PrioritizedSliceSampler)
    s = KaryPrioritizedSliceSampler(100, 0.7, 0.4, 1e-6, torch.float64, "mean", slice_len=5, fanout=4)
    assert (s._max_capacity, s._alpha, s._beta, s._eps, s.dtype, s.reduction, s.slice_len) == (
        100,
        0.7,
        0.4,
        1e-6,
        torch.float64,
        "mean",
        5,
    )
    assert "fanout=4" in repr(s)


class _Shape:
    """What ``_preceding_stop_idx`` reads of a storage that has not wrapped."""

    def __init__(self, n):
        self.shape = torch.Size([n])
        self._is_full = False


def test_slice_starts_excluded_are_torchrls_for_every_configuration():
    # The positions no slice may start at, computed without TorchRL's loop over trajectories:
    # equal to TorchRL's list for random trajectory lengths, strict or not, every right span.
    rng = np.random.default_rng(7)
    for _ in range(150):
        lengths = torch.as_tensor(rng.integers(1, 12, size=rng.integers(1, 8)))
        storage = _Shape(int(lengths.sum()))
        for strict in (True, False):
            for span in (0, 1, 2, 5, True):
                for seq in (1, 2, 3, 7):
                    kwargs = dict(slice_len=seq, strict_length=strict, span=(False, span), traj_key="episode")
                    theirs = PrioritizedSliceSampler(64, 0.6, 0.4, **kwargs)._preceding_stop_idx(
                        storage, lengths, seq, None
                    )
                    ours = KaryPrioritizedSliceSampler(64, 0.6, 0.4, **kwargs)._preceding_stop_idx(
                        storage, lengths, seq, None
                    )
                    assert torch.equal(ours, theirs), (lengths.tolist(), strict, span, seq)


def _episodes(n, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 30, size=n)
    return torch.from_numpy(np.concatenate([np.full(e, i) for i, e in enumerate(lengths)])[:n])


@pytest.mark.parametrize(
    "strict_length,span,flags", [(True, False, True), (True, False, False), (False, False, True), (True, 2, True)]
)
def test_slices_weights_and_truncation_flags_match_torchrls_after_a_wrap(strict_length, span, flags):
    # The same storage, written past its capacity (so slices come from a wrapped ring), the
    # same integer priorities (sums exact in TorchRL's float32 trees and our float64 one),
    # the same seeds: the same slices, weights and flags as TorchRL's sampler, with the
    # storage's done and terminated entries and without them. Full-length slices read the
    # flags from those entries alone; shorter ones go through TorchRL's own code.
    def run(cls):
        sampler = cls(200, 1.0, 0.5, slice_len=8, traj_key="episode", strict_length=strict_length, span=(False, span))
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(200), sampler=sampler, batch_size=64)
        n = 260
        episode = _episodes(n, 3)
        data = TensorDict({"obs": torch.arange(n), "episode": episode}, [n])
        if flags:
            # Trajectories come from the episode key; the flags are whatever the storage
            # holds, here bits that a sampler reading the wrong rows would not reproduce.
            bits = torch.from_numpy(np.random.default_rng(4).random((n, 2)) < 0.3)
            data["next", "done"] = bits[:, :1]
            data["next", "terminated"] = bits[:, 1:]
        rb.extend(data)
        rb.update_priority(torch.arange(200), (1 + torch.arange(200) % 5).float())
        torch.manual_seed(11)
        np.random.seed(11)
        batches = [rb.sample(return_info=True) for _ in range(4)]
        return batches, sampler

    ours, sampler = run(KaryPrioritizedSliceSampler)
    theirs, _ = run(PrioritizedSliceSampler)
    for (data, info), (ref_data, ref_info) in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(data["obs"].numpy(), ref_data["obs"].numpy())
        for flag in ("truncated", "done", "terminated"):
            np.testing.assert_array_equal(data["next", flag].numpy(), ref_data["next", flag].numpy(), err_msg=flag)
        if flags:
            assert data["next", "terminated"].any() and not data["next", "terminated"].all()
            assert not torch.equal(data["next", "done"], data["next", "truncated"])
        np.testing.assert_allclose(
            np.asarray(info["priority_weight"]), np.asarray(ref_info["priority_weight"]), rtol=1e-6
        )
        if strict_length and not span:
            # No slice crosses an episode (TorchRL's rule, kept).
            e = data["episode"].reshape(-1, 8)
            assert (e == e[:, :1]).all()
    # Every leaf is back after the sample's exclusion, and state_dict round-trips.
    np.testing.assert_array_equal(sampler._sum_tree[np.arange(200)], (1 + np.arange(200) % 5).astype(np.float32))
    restored = KaryPrioritizedSliceSampler(200, 1.0, 0.5, slice_len=8, traj_key="episode")
    restored.load_state_dict(sampler.state_dict())
    np.testing.assert_array_equal(restored._sum_tree[np.arange(200)], sampler._sum_tree[np.arange(200)])
    assert restored._min_tree.query(0, 200) == 1.0


def test_a_slice_sampler_smaller_than_its_storage_refuses_the_write():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=KaryPrioritizedSliceSampler(5, 0.6, 0.4, slice_len=2, traj_key="episode"),
        batch_size=2,
    )
    with pytest.raises(InvalidArgumentError, match="max_capacity at least the storage's max_size"):
        rb.extend(TensorDict({"obs": torch.arange(10), "episode": torch.zeros(10, dtype=torch.long)}, [10]))
