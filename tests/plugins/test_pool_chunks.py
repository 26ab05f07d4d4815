"""Shadow pools planned as chunks: each chunk its own cache entry and, inside Ray, its own task; same models."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arena.engine.recipe import Recipe
from arena.games.membership.pools import train_pool
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import true_class_log_odds
from tests.conftest import architecture

SHADOWS = 64


def _view(cache_root: Path | None, chunk: int) -> SimpleNamespace:
    """The parts of a membership view that ``train_pool`` reads, with a CNN procedure chunked by ``chunk``."""
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(40, 64, generator=g), torch.randint(0, 4, (40,), generator=g)
    procedure = TrainingProcedure(
        NonPrivate(NonPrivate.Params()),
        architecture("cnn", (1, 8, 8), 4, channels=[4], hidden=8),
        Recipe(epochs=2, lr=0.1, batch_size=10),
        cache=TensorCache(cache_root) if cache_root else None,
        chunk=chunk,
    )
    return SimpleNamespace(challenge_X=X, challenge_y=y, train_size=20, pool_seed=7, train=procedure)


def _scores(view: SimpleNamespace, chunk_root: Path | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    pool = train_pool(view, SHADOWS)
    stats = view.train.stats
    return true_class_log_odds(pool.models.logits(view.challenge_X), view.challenge_y), pool.challenge_in, {
        "trained": stats.trained, "tasks": stats.tasks, "nodes": len(stats.nodes), "calls": stats.calls}


@pytest.mark.slow
def test_chunks_are_cached_apart_and_give_the_models_of_one_chunk(tmp_path: Path) -> None:
    whole, whole_in, _ = _scores(_view(None, SHADOWS))
    view = _view(tmp_path, 16)
    chunked, chunked_in, stats = _scores(view)
    assert np.array_equal(whole_in, chunked_in)
    np.testing.assert_allclose(chunked, whole, rtol=1e-4, atol=1e-4)
    assert stats["trained"] == SHADOWS and stats["tasks"] == 0  # outside Ray: trained here, chunk by chunk
    assert len(list((tmp_path / "models").glob("*.safetensors"))) == SHADOWS // 16
    again = _view(tmp_path, 16)
    _scores(again)
    assert again.train.stats.trained == 0 and again.train.stats.cached == SHADOWS


@pytest.mark.timeout(300)
def test_a_pool_of_4_chunks_spreads_to_the_idle_node_and_the_rest_trains_in_the_asking_worker(tmp_path: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    expected, _, _ = _scores(_view(None, SHADOWS))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()

        @ray.remote(num_cpus=1)
        def attack_task(root: str) -> tuple[np.ndarray, dict]:
            scores, _, stats = _scores(_view(Path(root), 16))
            return scores, stats

        scores, stats = ray.get(attack_task.remote(str(tmp_path)))
    finally:
        ray.shutdown()
        cluster.shutdown()
    # the attack's task holds the head node's one CPU: the idle second node takes chunks as tasks (one, or more
    # where the cluster's view of its idle CPUs lags), the attack's worker trains the first chunk and the others
    assert 1 <= stats["tasks"] <= 3 and stats["trained"] == SHADOWS
    assert stats["nodes"] == 2, "the pool trains on both nodes"
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
    assert len(list((tmp_path / "models").glob("*.safetensors"))) == 4
