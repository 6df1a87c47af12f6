"""kary_replay.ray on real Ray: a local runtime, then a cluster of several raylets on this
machine (ray.cluster_utils.Cluster, loopback only). Exact sampling of the union through the
actors, routed updates, the bound on calls in flight, actor tasks inserting while a learner
samples and updates (nothing lost, sums exact), a shard killed mid-run (a typed error naming
it, or sampling from the others), a shard restarted from its checkpoint (its keys still
valid), and a whole restore."""

import json
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import warnings

import numpy as np
import pytest

# Loopback only, no usage report, no token; Ray's files under a short path (socket paths
# must stay under 108 bytes). Set before Ray is imported.
_TMP = tempfile.mkdtemp(prefix="kr-ray-", dir="/tmp")
for _name, _value in dict(
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
    RAY_USAGE_STATS_ENABLED="0",
    RAY_AUTH_MODE="disabled",
    RAY_TMPDIR=_TMP,
).items():
    os.environ.setdefault(_name, _value)

ray = pytest.importorskip("ray")
import ray.cloudpickle  # noqa: E402, F811
from ray.cluster_utils import Cluster  # noqa: E402

# Ray's workers cannot import this test module: its remote functions travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

import kary_replay as kr  # noqa: E402
from kary_replay.ray import FORMAT, ShardedReplay, ShardedSequenceReplay, read_manifest  # noqa: E402

SCHEMA = {"obs": ("float32", (3,)), "id": ("int64", ())}
NODE = dict(node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=200 << 20)


def rows(ids):
    ids = np.asarray(ids, np.int64)
    obs = np.stack([ids, -ids, ids * 2], axis=1).astype(np.float32)
    return dict(obs=obs, id=ids)


def priority(ids):
    ids = np.asarray(ids)
    return np.where(ids % 11 == 5, 0.0, 0.2 + (ids % 13) * 0.5)


@pytest.fixture(scope="module", autouse=True)
def ray_files():
    yield
    shutil.rmtree(_TMP, ignore_errors=True)


@pytest.fixture(scope="class")
def local_ray():
    ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=200 << 20)
    yield
    ray.shutdown()


@pytest.fixture(scope="class")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=2, **NODE))
    for _ in range(2):
        c.add_node(num_cpus=2, **NODE)
    ray.init(address=c.address)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def filled(fill, **options):
    """A ShardedReplay whose shard k holds items k * 1000 + j, j < fill[k], and one local
    buffer holding the same items in the same order."""
    r = ShardedReplay(len(fill), 128, SCHEMA, alpha=0.7, **options)
    union = kr.PrioritizedReplayBuffer(
        128 * len(fill), SCHEMA, alpha=0.7, weight_norm=options.get("weight_norm", "global")
    )
    for k, n in enumerate(fill):
        if n:
            ids = k * 1000 + np.arange(n)
            r.add_batch(priority(ids), shard=k, **rows(ids))
            union.add_batch(priority(ids), **rows(ids))
    return r, union


def by_id(batch):
    order = np.lexsort((batch.probabilities, batch["id"]))
    return batch["id"][order], batch.probabilities[order], batch.weights[order]


@pytest.mark.usefixtures("local_ray")
class TestLocalRuntime:
    @pytest.mark.parametrize("weight_norm", ["global", "batch"])
    @pytest.mark.parametrize("mode", ["stratified", "independent"])
    def test_a_sample_equals_one_buffer_holding_the_union(self, mode, weight_norm):
        r, union = filled([40, 0, 128, 7], weight_norm=weight_norm)
        try:
            for seed, beta in [(1, 0.4), (2, 1.0), (3, 0.0)]:
                a = r.sample(256, beta, mode=mode, rng=kr.Rng(seed))
                b = union.sample(256, beta, mode=mode, rng=kr.Rng(seed))
                ia, pa, wa = by_id(a)
                ib, pb, wb = by_id(b)
                np.testing.assert_array_equal(ia, ib)
                np.testing.assert_allclose(pa, pb, rtol=1e-12, atol=0)
                # Weights are float32 on both sides.
                np.testing.assert_array_equal(wa, wb)
                if mode == "stratified":
                    np.testing.assert_array_equal(a["id"], b["id"])
                # Rows are the items their keys name, on the shard the key names.
                np.testing.assert_array_equal(a["keys"] >> np.uint64(48), np.asarray(r.key_tags)[a["shards"]])
                np.testing.assert_array_equal(a["id"] // 1000, a["shards"])
                np.testing.assert_array_equal(a["obs"][:, 1], -a["id"])
                assert a["skipped"] == []
        finally:
            r.shutdown()

    def test_draws_through_ray_pass_a_chi_square(self):
        fill = [128, 30, 0, 61]
        r, _ = filled(fill)
        try:
            ids = np.concatenate([k * 1000 + np.arange(n) for k, n in enumerate(fill)])
            stored = priority(ids) ** 0.7
            counts = dict.fromkeys(ids.tolist(), 0)
            rng = kr.Rng(5)
            draws = 0
            for _ in range(120):
                batch = r.sample(512, 0.4, mode="independent", rng=rng)
                for i in batch["id"].tolist():
                    counts[i] += 1
                draws += 512
            observed = np.array([counts[i] for i in ids.tolist()])
            assert observed[stored == 0].sum() == 0, "an item of priority 0 was drawn"
            positive = stored > 0
            expected = stored[positive] / stored.sum() * draws
            chi2 = ((observed[positive] - expected) ** 2 / expected).sum()
            df = positive.sum() - 1
            # Wilson-Hilferty z-score; a correct sampler exceeds 4.75 with p ~ 1e-6.
            v = 2 / (9 * df)
            z = ((chi2 / df) ** (1 / 3) - (1 - v)) / np.sqrt(v)
            assert z < 4.75, f"chi-square z = {z}"
        finally:
            r.shutdown()

    def test_one_round_trip_weighs_each_draw_by_its_actual_probability(self):
        r, _ = filled([50, 50])
        try:
            a = r.sample(64, 0.4, rng=kr.Rng(7))
            # No write since: the cached stats are the fresh ones, so the same draws.
            b = r.sample(64, 0.4, rng=kr.Rng(7), one_round_trip=True)
            np.testing.assert_array_equal(a["id"], b["id"])
            np.testing.assert_allclose(a.probabilities, b.probabilities, rtol=1e-12)
            cached = [s["total_priority"] for s in r.stats()]
            # Shard 1 grows after the stats were cached: its draws' probabilities are
            # (T_1 / T) (p / T_1'), the plan's share times the shard's actual one.
            ids = 1000 + np.arange(50, 120)
            r.add_batch(np.full(70, 9.0), shard=1, **rows(ids))
            fresh = [s["total_priority"] for s in r.stats()]
            c = r.sample(256, 0.4, rng=kr.Rng(8), one_round_trip=True)
            share = np.array(cached)[c["shards"]] / sum(cached)
            actual = np.array(fresh)[c["shards"]]
            np.testing.assert_allclose(c.probabilities, share * c.priorities / actual, rtol=1e-12)
            assert (c.weights > 0).all() and (c.weights <= 1).all()
            # The next plan uses the stats that came back with that reply.
            d = r.sample(256, 0.4, rng=kr.Rng(9), one_round_trip=True)
            np.testing.assert_allclose(d.probabilities, d.priorities / sum(fresh), rtol=1e-12)
        finally:
            r.shutdown()

    def test_batches_ahead_are_exact_at_rest_and_serve_several_per_call(self):
        r, _ = filled([60, 0, 90])
        try:
            total = sum(s["total_priority"] for s in r.stats())
            stream = r.batches(128, 0.4, depth=2, per_call=3, rng=kr.Rng(11))
            seen = set()
            for _ in range(10):
                b = next(stream)
                assert len(b["keys"]) == 128
                np.testing.assert_allclose(b.probabilities, b.priorities / total, rtol=1e-12)
                np.testing.assert_array_equal(b["id"] // 1000, b["shards"])
                np.testing.assert_array_equal(b["obs"][:, 2], 2 * b["id"])
                seen.update(b["id"].tolist())
            # Batches differ (each its own draws) and cover both non-empty shards.
            assert len(seen) > 100 and {i // 1000 for i in seen} == {0, 2}
            with pytest.raises(kr.InvalidArgumentError):
                next(r.batches(8, depth=0))
            with pytest.raises(kr.InvalidArgumentError):
                next(r.batches(8, per_call=0))
        finally:
            r.shutdown()

    def test_updates_route_by_key_and_bad_keys_send_nothing(self):
        r, _ = filled([20, 20, 20])
        try:
            batch = r.sample(60, 0.4, rng=kr.Rng(1))
            assert r.update_priorities(batch["keys"], np.full(60, 3.0), wait=True) == (60, 0)
            before = [s["total_priority"] for s in r.stats()]
            bad = [
                np.uint64(5),  # no shard tag
                (np.uint64(r.key_tags[-1] % 0x7FFF + 1) << np.uint64(48))
                | np.uint64(1),  # the tag after the last shard's
            ]
            for key in bad:
                with pytest.raises(kr.InvalidKeyError, match="shard"):
                    r.update_priorities(np.array([batch["keys"][0], key]), [1.0, 1.0], wait=True)
            with pytest.raises(kr.InvalidArgumentError):
                r.update_priorities(batch["keys"][:2], [1.0], wait=True)
            # A priority the shard refuses: its typed error, and nothing changed there.
            with pytest.raises(kr.InvalidPriorityError):
                r.update_priorities(batch["keys"][:1], [float("nan")], wait=True)
            assert [s["total_priority"] for s in r.stats()] == before
            # A key one shard never handed out, alone or beside good keys of the others:
            # every shard's part is checked before any applies, so nothing changes.
            never = (np.uint64(r.key_tags[0]) << np.uint64(48)) | np.uint64(999)
            with pytest.raises(kr.InvalidKeyError):
                r.update_priorities([never], [1.0], wait=True)
            others = batch["keys"][batch["shards"] != 0]
            assert len(others) > 0
            with pytest.raises(kr.InvalidKeyError):
                r.update_priorities(np.append(others, never), np.full(len(others) + 1, 9.0), wait=True)
            assert [s["total_priority"] for s in r.stats()] == before
            with pytest.raises(kr.SchemaError):
                r.add_batch(shard=0, obs=np.zeros((2, 4), np.float32), id=np.arange(2))
            with pytest.raises(kr.InvalidArgumentError):
                r.add_batch(shard=3, **rows([1]))
        finally:
            r.shutdown()

    def test_deletes_route_by_key_and_bad_keys_delete_nothing(self):
        r, _ = filled([20, 20, 20])
        try:
            never = (np.uint64(r.key_tags[0]) << np.uint64(48)) | np.uint64(999)
            # Write back by key: each row in the shard its key names (keys of three shards,
            # interleaved); refused calls write nothing. The rows are read back by a sample
            # that the picked items' large priorities fill.
            stored = r.stored_keys()
            picked = np.array([stored[0][1], stored[2][3], stored[0][4], stored[1][0]], np.uint64)
            r.update_priorities(picked, np.full(4, 1e6), wait=True)
            new_obs = 100 + np.arange(12, dtype=np.float32).reshape(4, 3)

            def obs_of_picked():
                batch = r.sample(256, 0.4, rng=kr.Rng(5))
                seen = {}
                for key, obs, id in zip(batch["keys"], batch["obs"], batch["id"], strict=True):
                    if key in picked:
                        seen[int(key)] = (obs.tolist(), rows([id])["obs"][0].tolist())
                assert len(seen) == 4
                return [seen[int(k)] for k in picked]

            with pytest.raises(kr.InvalidKeyError):
                r.write_back(np.append(picked, never), obs=np.zeros((5, 3), np.float32))
            with pytest.raises(kr.SchemaError):
                r.write_back(picked, obs=np.zeros((4, 3), np.float64))
            with pytest.raises(kr.SchemaError):
                r.write_back(picked, obs=np.zeros((3, 3), np.float32))
            with pytest.raises(kr.SchemaError):
                r.write_back(picked, nothing=np.zeros(4, np.float32))
            assert all(obs == inserted for obs, inserted in obs_of_picked())  # nothing written
            assert r.write_back(picked, obs=new_obs) == (4, 0)
            assert [obs for obs, _ in obs_of_picked()] == new_obs.tolist()
            doomed = np.concatenate([k[:10] for k in r.stored_keys()])  # 10 of each shard
            with pytest.raises(kr.InvalidKeyError):
                r.delete(np.append(doomed, never))
            assert sum(len(k) for k in r.stored_keys()) == 60  # nothing deleted
            assert r.delete(np.append(doomed, doomed[:3])) == (30, 3)
            stored = np.concatenate(r.stored_keys())
            assert len(stored) == 30 and not np.isin(doomed, stored).any()
            assert sum(s["len"] for s in r.stats()) == 30
            after = r.sample(64, 0.4, rng=kr.Rng(3))
            assert not np.isin(after["keys"], doomed).any()
            # Alpha at run time on every shard: alpha 0 makes each positive priority 1, so a
            # shard's total is its count of stored items of positive priority (item j of
            # shard k is insertion j, nothing evicted).
            with pytest.raises(kr.InvalidArgumentError, match="alpha"):
                r.set_alpha(-1.0)
            r.set_alpha(0.0)
            for k, (keys, s) in enumerate(zip(r.stored_keys(), r.stats(), strict=True)):
                ids = k * 1000 + (keys & np.uint64((1 << 48) - 1)).astype(np.int64)
                assert s["total_priority"] == np.count_nonzero(priority(ids))
        finally:
            r.shutdown()

    def test_a_policy_version_window_over_shards(self, tmp_path):
        schema = {"obs": ("float32", (2,)), "version": ("int64", ())}
        r = ShardedReplay(2, 32, schema, version_column="version")
        plain = ShardedReplay(2, 32, schema)
        try:
            with pytest.raises(kr.InvalidArgumentError, match="version_column"):
                plain.retire_before(1)
            for shard in (0, 1):
                r.add_batch(shard=shard, obs=np.zeros((4, 2), np.float32), version=np.arange(4))
            assert r.retire_before(2) == 4
            assert sum(s["len"] for s in r.stats()) == 4
            assert (r.sample(32, 0.4, rng=kr.Rng(1))["version"] >= 2).all()
            with pytest.raises(kr.InvalidArgumentError, match="retired"):
                r.add_batch(shard=0, obs=np.zeros((1, 2), np.float32), version=np.array([1]), wait=True)
            r.save(str(tmp_path / "c"))
            loaded = ShardedReplay.restore(str(tmp_path / "c"))
            try:
                assert loaded.options["version_column"] == "version"
                assert loaded.retire_before(3) == 2
            finally:
                loaded.shutdown()
        finally:
            r.shutdown()
            plain.shutdown()

    def test_each_sharded_replay_has_its_own_tags(self, tmp_path):
        a = ShardedReplay(2, 16, SCHEMA, _key_base=0)
        b = ShardedReplay(2, 16, SCHEMA, _key_base=100)
        fresh = ShardedReplay(3, 16, SCHEMA)
        try:
            assert a.key_tags == [1, 2] and b.key_tags == [101, 102]
            base = fresh.key_tags[0]
            assert fresh.key_tags == [1 + (base - 1 + k) % 0x7FFF for k in range(3)]
            keys_a = a.add_batch(shard=0, **rows(np.arange(4)))
            keys_b = b.add_batch(shard=0, **rows(np.arange(4)))
            assert (keys_a >> np.uint64(48) == 1).all() and (keys_b >> np.uint64(48) == 101).all()
            # The same slots and generations, another replay: refused, nothing changes.
            before = b.stats()[0]["total_priority"]
            with pytest.raises(kr.InvalidKeyError, match="tag 1"):
                b.update_priorities(keys_a, np.full(4, 5.0), wait=True)
            assert b.stats()[0]["total_priority"] == before
            assert b.update_priorities(keys_b, np.full(4, 5.0), wait=True) == (4, 0)
            # Restored, a replay keeps its tags; a checkpoint of the first layout (no
            # key_base: tags shard + 1) restores with those.
            b.save(tmp_path / "b")
            back = ShardedReplay.restore(tmp_path / "b")
            assert back.key_tags == [101, 102]
            assert back.update_priorities(keys_b, np.full(4, 1.0), wait=True) == (4, 0)
            back.shutdown()
            a.save(tmp_path / "a")
            manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
            del manifest["key_base"]
            (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
            # As the first layout's writer left it: COMMIT the format line alone.
            (tmp_path / "a" / "COMMIT").write_text(FORMAT + "\n")
            old = ShardedReplay.restore(tmp_path / "a")
            assert old.key_tags == [1, 2]
            assert old.update_priorities(keys_a, np.full(4, 1.0), wait=True) == (4, 0)
            old.shutdown()
        finally:
            for r in (a, b, fresh):
                r.shutdown()

    def test_calls_in_flight_are_bounded_and_flush_surfaces_errors(self):
        r, _ = filled([64, 64])
        r.max_in_flight = 3
        try:
            batch = r.sample(128, 0.4, rng=kr.Rng(2))
            for i in range(40):
                r.update_priorities(batch["keys"], np.full(128, 1.0 + i))
                r.add_batch(shard=i % 2, wait=False, **rows([i]))
                assert len(r._in_flight) <= 3
            r.flush()
            assert not r._in_flight
            stats = r.stats()
            assert [s["inserted"] for s in stats] == [64 + 20, 64 + 20]
            r.add_batch(shard=0, wait=False, obs=np.zeros((1, 2), np.float32), id=np.arange(1))
            with pytest.raises(kr.SchemaError):
                r.flush()
        finally:
            r.shutdown()

    def test_constructor_checks_before_starting_actors(self):
        for bad in [
            dict(num_shards=0),
            dict(on_failure="ignore"),
            dict(max_in_flight=0),
            dict(nodes=["x"]),
            dict(capacity=0),
        ]:
            args = dict(num_shards=2, capacity=8, schema=SCHEMA) | bad
            with pytest.raises(kr.InvalidArgumentError):
                ShardedReplay(**args)
        with pytest.raises(kr.SchemaError):
            ShardedReplay(2, 8, {"obs": ("complex64", (2,))})
        with pytest.raises(kr.InvalidArgumentError):
            ShardedReplay(2, 8, SCHEMA, alpha=-1.0)
        with pytest.raises(kr.InvalidArgumentError, match="deadlock"):
            ShardedReplay(2, 8, SCHEMA, rate_limit=kr.SampleToInsertRatio(8.0, min_size=100, error_buffer=50))

    def test_one_rate_limiter_holds_the_union_and_its_counts_survive_a_save(self, tmp_path):
        # 2 samples per insert from 8 items on: the difference stays within [8, 24].
        limit = kr.SampleToInsertRatio(2.0, min_size=8, error_buffer=8.0)
        r = ShardedReplay(2, 64, SCHEMA, rate_limit=limit, max_insert=4, max_sample=4)
        restored = None
        try:
            with pytest.raises(kr.RateLimitedError):
                r.sample(4, timeout=0)
            r.add_batch(shard=0, **rows(np.arange(4)))
            r.add_batch(shard=1, **rows(100 + np.arange(4)))  # 8 items over two shards
            r.sample(4, rng=kr.Rng(1))
            r.sample(4, rng=kr.Rng(2), timeout=1.0)
            with pytest.raises(kr.RateLimitedError):
                r.sample(1, timeout=0)
            # A copy (as a Ray task gets it) shares the limiter.
            copy = pickle.loads(pickle.dumps(r))
            copy.add_batch(shard=1, **rows(200 + np.arange(4)))
            r.add_batch(shard=0, wait=False, **rows(300 + np.arange(4)))  # difference 24
            r.flush()
            with pytest.raises(kr.RateLimitTimeoutError):
                r.add_batch(shard=0, timeout=0.05, **rows(400 + np.arange(4)))
            with pytest.raises(kr.InvalidArgumentError):
                r.add_batch(shard=0, obs=np.zeros((2, 3), np.float32), id=np.arange(3))
            stats = r.rate_stats()
            assert (stats["inserts"], stats["samples"]) == (16, 8) == (len(r), 8)
            assert copy.rate_stats() == stats
            r.save(tmp_path / "ckpt")
            restored = ShardedReplay.restore(tmp_path / "ckpt")
            assert restored.rate_limit == limit
            assert (restored.rate_stats()["inserts"], restored.rate_stats()["samples"]) == (16, 8)
            # A blocked insert is woken by close, in any copy, with ClosedError.
            threading.Timer(0.3, copy.close).start()
            with pytest.raises(kr.ClosedError):
                r.add_batch(shard=1, **rows(500 + np.arange(4)))
            with pytest.raises(kr.ClosedError):
                r.sample(4)
            assert r.rate_stats()["closed"] and len(r) == 16
            # The restored replay has a limiter of its own, still open.
            restored.sample(4, rng=kr.Rng(3), timeout=0)
        finally:
            r.shutdown()
            if restored is not None:
                restored.shutdown()


@ray.remote(num_cpus=1)
def actor_task(replay, task, items, chunk):
    """Insert numbered items into the shard on this task's node; returns (shard, keys)."""
    node = ray.get_runtime_context().get_node_id()
    shard = replay.node_ids.index(node)
    keys = []
    for start in range(0, items, chunk):
        ids = task * 100_000 + start + np.arange(chunk)
        keys.append(replay.add_batch(priority(ids) + 0.5, **rows(ids)))
    return shard, np.concatenate(keys)


@pytest.mark.usefixtures("cluster")
class TestCluster:
    def nodes(self):
        return [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    def test_tasks_insert_while_a_learner_samples_and_nothing_is_lost(self):
        nodes = self.nodes()
        assert len(nodes) == 3
        capacity, items, chunk = 3000, 2400, 40
        r = ShardedReplay(3, capacity, SCHEMA, nodes=nodes)
        assert len(set(r.node_ids)) == 3, "shards on different nodes"
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        tasks = [
            actor_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[t % 3], soft=False)).remote(
                r, t, items, chunk
            )
            for t in range(6)
        ]
        rng = kr.Rng(3)
        samples = 0
        pending = list(tasks)
        while pending or samples < 20:
            _, pending = ray.wait(pending, timeout=0)
            try:
                batch = r.sample(128, 0.4, rng=rng)
            except kr.EmptyBufferError:
                continue
            np.testing.assert_array_equal(batch["obs"][:, 2], 2 * batch["id"])
            assert (batch["weights"] > 0).all() and (batch["weights"] <= 1).all()
            r.update_priorities(batch["keys"], np.abs(batch["id"] % 7) + 0.25)
            samples += 1
        r.flush()
        results = ray.get(tasks)
        per_shard = {k: [] for k in range(3)}
        for shard, keys in results:
            per_shard[shard].append(keys)
            np.testing.assert_array_equal(keys >> np.uint64(48), r.key_tags[shard])
        stats = r.stats()
        for k in range(3):
            generations = np.sort(np.concatenate(per_shard[k]) & np.uint64((1 << 48) - 1))
            inserted = stats[k]["inserted"]
            # Every generation handed out exactly once, to one of the tasks.
            np.testing.assert_array_equal(generations, np.arange(inserted, dtype=np.uint64))
            assert inserted == 2 * items
            # The newest `capacity` items are stored; the rest were evicted (FIFO).
            stored = np.sort(r.stored_keys()[k])
            expected = np.arange(max(0, inserted - capacity), inserted, dtype=np.uint64) | np.uint64(
                r.key_tags[k] << 48
            )
            np.testing.assert_array_equal(stored, expected)
            assert stats[k]["len"] == min(capacity, inserted)
        assert all(c["exact"] for c in r.consistency())
        r.shutdown()

    def test_a_killed_shard_is_named_and_restarts_from_its_checkpoint(self, tmp_path):
        nodes = self.nodes()
        r = ShardedReplay(3, 256, SCHEMA, nodes=nodes)
        keys = {
            k: r.add_batch(priority(k * 1000 + np.arange(100)) + 0.1, shard=k, **rows(k * 1000 + np.arange(100)))
            for k in range(3)
        }
        r.save(tmp_path / "ckpt")
        assert read_manifest(tmp_path / "ckpt")["num_shards"] == 3
        # After the save, shard 1 takes more items; they are lost with it.
        r.add_batch(shard=1, **rows(1000 + np.arange(100, 120)))
        skipping = ShardedReplay.__new__(ShardedReplay)
        skipping.__setstate__(r.__getstate__())
        skipping.on_failure = "skip"
        ray.kill(r.shards[1])
        with pytest.raises(kr.ShardUnavailableError, match="shard 1") as e:
            for _ in range(50):  # the kill lands within milliseconds
                r.sample(64, 0.4)
                time.sleep(0.01)
        assert e.value.shard == 1 and not e.value.retryable
        with pytest.raises(kr.ShardUnavailableError):
            r.update_priorities(keys[1], np.ones(100), wait=True)
        # Beside a live shard's keys: the dead shard is found by the check, before any
        # part applies; shard 0 is unchanged.
        before = ray.get(r.shards[0].stats.remote())["total_priority"]
        with pytest.raises(kr.ShardUnavailableError) as e:
            r.update_priorities(np.concatenate([keys[0], keys[1]]), np.full(200, 7.0), wait=True)
        assert e.value.shard == 1 and e.value.applied == []
        assert ray.get(r.shards[0].stats.remote())["total_priority"] == before
        # Configured to go on: samples from shards 0 and 2, and says so.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = skipping.sample(64, 0.4)
            assert any("shard 1" in str(w.message) for w in caught)
        assert batch["skipped"] == [1] and set(batch["shards"].tolist()) <= {0, 2}
        np.testing.assert_allclose(batch.probabilities.sum() > 0, True)
        # Restarted from its checkpoint: the items at the save, with their keys valid.
        r.restart_shard(1, tmp_path / "ckpt")
        assert r.stats()[1]["len"] == 100
        assert r.update_priorities(keys[1], np.full(100, 2.0), wait=True) == (100, 0)
        batch = r.sample(300, 0.4)
        assert set(batch["shards"].tolist()) == {0, 1, 2}
        assert all(c["exact"] for c in r.consistency())
        r.shutdown()

    def test_restore_and_unfinished_saves(self, tmp_path):
        r = ShardedReplay(2, 64, SCHEMA, alpha=0.5, weight_norm="batch")
        keys = r.add_batch(shard=0, **rows(np.arange(70)))  # 6 evicted
        r.add_batch(priority(np.arange(5)) + 1, shard=1, **rows(1000 + np.arange(5)))
        r.save(tmp_path / "ckpt")
        with pytest.raises(FileExistsError):
            r.save(tmp_path / "ckpt")
        before = r.stats()
        r.shutdown()
        back = ShardedReplay.restore(tmp_path / "ckpt", max_in_flight=4)
        assert back.options["weight_norm"] == "batch" and back.options["alpha"] == 0.5
        after = back.stats()
        for s, t in zip(before, after, strict=True):
            assert (s["len"], s["inserted"], s["total_priority"]) == (t["len"], t["inserted"], t["total_priority"])
        assert back.update_priorities(keys, np.ones(70), wait=True) == (64, 6)
        back.shutdown()
        with pytest.raises(kr.InvalidArgumentError, match="alpha"):
            ShardedReplay.restore(tmp_path / "ckpt", alpha=0.9)
        # A shard's file cut short is found before any actor starts.
        shard_files = sorted((tmp_path / "ckpt" / "shard-00001").iterdir())
        victim = next(f for f in shard_files if f.suffix == ".npy")
        data = victim.read_bytes()
        victim.write_bytes(data[: len(data) // 2])
        with pytest.raises(kr.CheckpointError):
            ShardedReplay.restore(tmp_path / "ckpt")
        victim.write_bytes(data)
        # A manifest changed after the save: the CRC in COMMIT says so.
        m = tmp_path / "ckpt" / "manifest.json"
        text = m.read_text()
        assert '"capacity": 64' in text
        m.write_text(text.replace('"capacity": 64', '"capacity": 65'))
        with pytest.raises(kr.CheckpointError) as e:
            ShardedReplay.restore(tmp_path / "ckpt")
        assert e.value.kind == "corrupt"
        m.write_text(text)
        # A save without COMMIT (interrupted) is refused, as is a missing one.
        os.remove(tmp_path / "ckpt" / "COMMIT")
        with pytest.raises(kr.CheckpointError) as e:
            ShardedReplay.restore(tmp_path / "ckpt")
        assert e.value.kind == "uncommitted"
        with pytest.raises(kr.CheckpointError) as e:
            ShardedReplay.restore(tmp_path / "nothing")
        assert e.value.kind == "notfound"


# -- sequences on Ray -----------------------------------------------------------------------

SEQ_SCHEMA = {"obs": ("float32", (2,)), "reward": ("float32", ())}
SEQ = dict(window=4, nstep=(3, 0.9, "reward"), next_of=("obs",), alpha=0.7)


def episodes(lane, n, seed):
    """Lane ``lane``'s episodes: (steps, truncated), step t of episode e has obs
    [lane * 10000 + e * 100 + t, t] and reward t % 3."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        length = int(rng.integers(1, 12))
        ids = lane * 10000 + e * 100 + np.arange(length)
        steps = [dict(obs=np.array([i, t], np.float32), reward=np.float32(t % 3)) for t, i in enumerate(ids)]
        final = dict(obs=np.array([ids[-1] + 1, length], np.float32))
        out.append((steps, final, bool(rng.integers(0, 2))))
    return out


def write(lane, eps):
    for steps, final, truncated in eps:
        for step in steps:
            lane.push(**step)
        lane.end_episode(truncated, **final)


def seq_priority(first_ids):
    ids = np.asarray(first_ids, np.int64)
    return np.where(ids % 7 == 3, 0.0, 0.25 + (ids % 5) * 0.5)


def set_priorities(rb, rng):
    """Give every window of ``rb`` priority ``seq_priority`` of its first step's id, through
    keys of sampled batches (until every window was updated)."""
    done = set()
    for _ in range(60):
        b = rb.sample(512, 0.4, mode="independent", rng=rng)
        first = b["obs"][:, 0, 0].astype(np.int64)
        fresh = [i for i, f in enumerate(first.tolist()) if f not in done]
        if fresh:
            rb.update_priorities(b["keys"][fresh], seq_priority(first[fresh]))
            done.update(first[fresh].tolist())
        if len(done) == len(rb):
            return
    raise AssertionError(f"{len(done)} of {len(rb)} windows updated")


def sequence_filled(num_shards=3, lanes_per_shard=2, **options):
    r = ShardedSequenceReplay(num_shards, lanes_per_shard, 64, SEQ_SCHEMA, **SEQ, **options)
    union = kr.SequenceReplayBuffer(num_shards * lanes_per_shard, 64, SEQ_SCHEMA, **SEQ, **options)
    for g in range(r.lanes):
        eps = episodes(g, 4 + g % 3, seed=g)
        with r.lane(g, chunk=5) as remote:
            write(remote, eps)
        with union.lane(g) as local:
            write(local, eps)
    set_priorities(r, kr.Rng(11))
    set_priorities(union, kr.Rng(12))
    return r, union


def by_first(batch):
    first = batch["obs"][:, 0, 0]
    order = np.lexsort((batch.probabilities, first))
    return order, first[order]


@pytest.mark.usefixtures("local_ray")
class TestSequenceShards:
    @pytest.mark.parametrize("mode", ["stratified", "independent"])
    def test_windows_sample_as_one_buffer_holding_the_union(self, mode):
        r, union = sequence_filled()
        try:
            assert len(r) == len(union) and r.lanes == union.lanes
            for seed, beta in [(1, 0.4), (2, 1.0)]:
                a = r.sample(256, beta, mode=mode, rng=kr.Rng(seed))
                b = union.sample(256, beta, mode=mode, rng=kr.Rng(seed))
                oa, fa = by_first(a)
                ob, fb = by_first(b)
                np.testing.assert_array_equal(fa, fb)
                np.testing.assert_allclose(a.probabilities[oa], b.probabilities[ob], rtol=1e-9)
                np.testing.assert_allclose(a.weights[oa], b.weights[ob], rtol=1e-6)
                for name in ("obs", "reward", "mask", "lengths", "returns", "discounts", "next_obs"):
                    np.testing.assert_array_equal(a[name][oa], b[name][ob], err_msg=name)
                if mode == "stratified":
                    np.testing.assert_array_equal(a["obs"], b["obs"])
                # Each window is one lane's, on the shard that lane belongs to.
                lanes = a["obs"][:, 0, 0].astype(np.int64) // 10000
                np.testing.assert_array_equal(lanes // r.lanes_per_shard, a["shards"])
                np.testing.assert_array_equal(a["keys"] >> np.uint64(48), np.asarray(r.key_tags)[a["shards"]])
                assert (seq_priority(a["obs"][:, 0, 0]) > 0).all(), "a window of priority 0 was drawn"
            # Updates route by key; a key of no shard sends nothing.
            a = r.sample(64, rng=kr.Rng(3))
            assert r.update_priorities(a["keys"], np.full(64, 2.0), wait=True) == (64, 0)
            with pytest.raises(kr.InvalidKeyError):
                r.update_priorities(np.array([5], np.uint64), [1.0])
            assert all(c["exact"] for c in r.consistency())
        finally:
            r.shutdown()

    def test_lanes_are_held_once_and_steps_are_checked_before_they_travel(self):
        r = ShardedSequenceReplay(2, 2, 32, SEQ_SCHEMA, **SEQ)
        try:
            a = r.lane(3)
            assert (a.lane, a.shard) == (3, 1)
            with pytest.raises(kr.InvalidArgumentError, match="held"):
                r.lane(3)
            with pytest.raises(kr.InvalidArgumentError):
                r.lane(4)
            # None: a free lane (one node here: any shard's).
            free = [r.lane() for _ in range(3)]
            assert sorted(x.lane for x in free) == [0, 1, 2]
            with pytest.raises(kr.InvalidArgumentError, match="all 4 lanes"):
                r.lane()
            with pytest.raises(kr.InvalidArgumentError, match="dtype"):
                a.push(obs=np.zeros(2, np.float64), reward=0.0)
            with pytest.raises(kr.InvalidArgumentError, match="shape"):
                a.push(obs=np.zeros(3, np.float32), reward=0.0)
            with pytest.raises(kr.InvalidArgumentError, match="columns"):
                a.push(obs=np.zeros(2, np.float32))
            with pytest.raises(kr.InvalidArgumentError, match="columns"):
                a.end_episode(True)
            write(a, episodes(3, 2, seed=1))
            assert a.position > 0 and len(r) > 0
            # A step is copied when pushed: the caller may reuse its array at once.
            obs = np.zeros(2, np.float32)
            for t in range(8):
                obs[:] = (38000 + t, t)
                a.push(obs=obs, reward=np.float32(0))
            a.end_episode(True, obs=obs)
            got = r.sample(256, mode="independent", rng=kr.Rng(9))["obs"][:, :, 0]
            mine = got[(got >= 38000) & (got < 38010)]
            assert len(mine) and set(np.unique(mine)) <= set(range(38000, 38008))
            assert len(np.unique(mine)) > 1, "every pushed step holds the array's last value"
            # A handle pickled on (to the process that writes the lane) goes on where it was.
            b = pickle.loads(pickle.dumps(a))
            write(b, episodes(3, 1, seed=2))
            b.close()
            with pytest.raises(kr.InvalidArgumentError, match="no longer holds"):
                a.push(obs=np.zeros(2, np.float32), reward=0.0)
                a.flush()
            again = r.lane(3)
            again.close(close_lane=True)
            closed = r.lane(3)
            closed.push(obs=np.zeros(2, np.float32), reward=0.0)
            with pytest.raises(kr.ClosedError):
                closed.flush()
            with pytest.raises(kr.InvalidArgumentError):
                ShardedSequenceReplay(2, 2, 4, SEQ_SCHEMA, window=8)
        finally:
            r.shutdown()

    def test_one_rate_limit_counts_the_unions_windows_and_survives_a_save(self, tmp_path):
        # 1 sampled window per window written, within +-8, from 4 windows on; chunks of 2
        # steps complete at most 8 windows (with an episode's end), batches of at most 4.
        limit = kr.SampleToInsertRatio(1.0, min_size=4, error_buffer=8.0)
        r = ShardedSequenceReplay(2, 1, 256, SEQ_SCHEMA, rate_limit=limit, max_insert=8, max_sample=4, **SEQ)
        restored = None
        try:
            with pytest.raises(kr.RateLimitedError):
                r.sample(2, timeout=0)
            a = r.lane(0, chunk=2)
            # Each chunk is admitted for the windows it completes, before its shard writes
            # it; the first chunk the limiter refuses writes nothing and stays with the lane.
            with pytest.raises(kr.RateLimitTimeoutError):
                for t in range(200):
                    a.push(obs=np.array([t, t], np.float32), reward=np.float32(1), timeout=0.05)
            written = len(r)
            assert 4 <= written == r.rate_stats()["inserts"]
            assert a._n == 2, "the refused chunk's steps stay pending"
            # Samples make room; the kept steps go with the next call.
            with pytest.raises(kr.RateLimitedError):
                while True:
                    r.sample(1, rng=kr.Rng(5), timeout=0)
            a.flush(timeout=5.0)
            assert a._n == 0 and len(r) == written + 2 == r.rate_stats()["inserts"]
            a.end_episode(False, obs=np.zeros(2, np.float32), timeout=5.0)
            assert r.rate_stats()["inserts"] == len(r)
            r.save(tmp_path / "ckpt")
            restored = ShardedSequenceReplay.restore(tmp_path / "ckpt")
            assert restored.rate_limit == limit
            assert restored.rate_stats()["inserts"] == r.rate_stats()["inserts"]
            # close wakes a waiting sampler with ClosedError.
            threading.Timer(0.3, r.close).start()
            with pytest.raises(kr.ClosedError):
                while True:
                    r.sample(4)
        finally:
            r.shutdown()
            if restored is not None:
                restored.shutdown()


@ray.remote(num_cpus=1)
def lane_task(replay, task, n):
    """An actor process: a lane of a shard on its node, ``n`` episodes written through it;
    returns the lane it got (still held, as by an actor that would write on)."""
    lane = replay.lane(chunk=7)
    write(lane, episodes(100 + task, n, seed=task))
    lane.flush()
    return lane.lane


@pytest.mark.usefixtures("cluster")
class TestSequenceCluster:
    def test_actor_processes_write_lanes_while_a_learner_samples(self):
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        r = ShardedSequenceReplay(3, 2, 256, SEQ_SCHEMA, nodes=nodes, **SEQ)
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            tasks = [
                lane_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[t % 3], soft=False)).remote(
                    r, t, 30
                )
                for t in range(6)
            ]
            rng, samples, pending = kr.Rng(4), 0, list(tasks)
            while pending or samples < 10:
                _, pending = ray.wait(pending, timeout=0)
                try:
                    b = r.sample(64, 0.4, rng=rng)
                except kr.EmptyBufferError:
                    continue
                # Whole windows of one episode: consecutive ids, the mask over their length.
                ids = b["obs"][:, :, 0]
                steps = np.arange(4)
                ok = ids == ids[:, :1] + steps
                assert (ok | ~b["mask"]).all()
                np.testing.assert_array_equal(b["mask"].sum(axis=1), b["lengths"])
                r.update_priorities(b["keys"], np.full(64, 1.5))
                samples += 1
            lanes = ray.get(tasks)
            # Each task wrote a lane of a shard on its own node.
            for t, g in enumerate(lanes):
                assert r.node_ids[g // r.lanes_per_shard] == nodes[t % 3]
            assert sorted(lanes) == list(range(6))
            r.flush()
            # Nothing lost: the windows are those of one local buffer given the same lanes.
            union = kr.SequenceReplayBuffer(6, 256, SEQ_SCHEMA, **SEQ)
            for t, g in enumerate(lanes):
                with union.lane(g) as lane:
                    write(lane, episodes(100 + t, 30, seed=t))
            stats = r.stats()
            assert sum(s["len"] for s in stats) == len(union)
            assert sum(s["inserted"] for s in stats) > 0
            assert all(c["exact"] for c in r.consistency())
        finally:
            r.shutdown()

    def test_a_killed_shard_is_named_restarts_and_the_whole_replay_restores(self, tmp_path):
        r, _ = sequence_filled(num_shards=3)
        try:
            keys = r.sample(200, rng=kr.Rng(1))["keys"]
            before = r.stats()
            r.save(tmp_path / "ckpt")
            assert read_manifest(tmp_path / "ckpt")["kind"] == "sequence"
            with pytest.raises(kr.CheckpointError) as e:
                ShardedReplay.restore(tmp_path / "ckpt")
            assert e.value.kind == "mismatch"
            lane = r.lane(2)  # shard 1's
            ray.kill(r.shards[1])
            with pytest.raises(kr.ShardUnavailableError, match="shard 1") as e:
                for _ in range(50):
                    r.sample(64)
                    time.sleep(0.01)
            assert e.value.shard == 1
            with pytest.raises(kr.ShardUnavailableError):
                write(lane, episodes(2, 1, seed=9))
                lane.flush()
            skipping = ShardedSequenceReplay.__new__(ShardedSequenceReplay)
            skipping.__setstate__(r.__getstate__())
            skipping.on_failure = "skip"
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                b = skipping.sample(64)
            assert b["skipped"] == [1] and set(b["shards"].tolist()) <= {0, 2}
            r.restart_shard(1, tmp_path / "ckpt")
            assert r.stats()[1]["len"] == before[1]["len"]
            applied, stale = r.update_priorities(keys, np.full(len(keys), 3.0), wait=True)
            assert (applied, stale) == (len(keys), 0)
            # A handle is bound to the actor it opened its lane on; the restarted shard's
            # lanes are free again for new writers.
            with pytest.raises(kr.ShardUnavailableError):
                write(lane, episodes(2, 1, seed=9))
                lane.flush()
            with r.lane(2) as again:
                write(again, episodes(2, 1, seed=9))
        finally:
            r.shutdown()
        back = ShardedSequenceReplay.restore(tmp_path / "ckpt", max_in_flight=4)
        try:
            assert back.options["nstep"] == (3, 0.9, "reward") and back.options["next_of"] == ("obs",)
            for s, t in zip(before, back.stats(), strict=True):
                assert (s["len"], s["inserted"], s["total_priority"]) == (t["len"], t["inserted"], t["total_priority"])
            assert back.update_priorities(keys, np.ones(len(keys)), wait=True) == (len(keys), 0)
            with pytest.raises(kr.InvalidArgumentError, match="window"):
                ShardedSequenceReplay.restore(tmp_path / "ckpt", window=2)
        finally:
            back.shutdown()
        # A shard's file cut short is found before any actor starts.
        victim = next(f for f in sorted((tmp_path / "ckpt" / "shard-00002").iterdir()) if f.suffix == ".npy")
        data = victim.read_bytes()
        victim.write_bytes(data[: len(data) // 2])
        with pytest.raises(kr.CheckpointError):
            ShardedSequenceReplay.restore(tmp_path / "ckpt")
