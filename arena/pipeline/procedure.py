"""The training procedure as a callable: a defense configuration bound to a track's model and recipe, cached.

Released models and every attacker's shadow models go through ``TrainingProcedure``, so they share one code
path and one content-addressed cache: identical requests train once per run directory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from arena.contracts.defense import Claim, Defense, FitTask
from arena.contracts.procedure import Chunk
from arena.contracts.release import Answering, Models
from arena.engine.architecture import TRAINING_SEMANTICS, Architecture, mode_dependent
from arena.engine.recipe import Recipe
from arena.pipeline.store import TensorCache, content_key, tensor_digest

Solver = Literal["auto", "gradient", "newton"]
Device = Literal["cpu", "cuda", "auto"]
_STATE = "state."
_ANSWERING = "answering."
GPU_SHARE = 0.25
"""Fraction of a GPU each task of a ``cuda`` track requests: four matchups or pool chunks share one GPU."""



def resolve_device(device: Device) -> str:
    """The torch device this process trains on: ``auto`` takes CUDA when this worker has it; ``cuda`` without a
    GPU is an error naming the field, raised where the work runs (a cluster's driver may have no GPU)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: 'cuda' requested but torch.cuda.is_available() is False on this worker")
    return device


def gpu_request(device: Device) -> float:
    """GPUs a Ray task of a track on ``device`` asks for (``auto`` asks when the cluster has any)."""
    if device == "cuda":
        return GPU_SHARE
    if device == "auto":
        import ray

        return GPU_SHARE if ray.is_initialized() and ray.cluster_resources().get("GPU", 0) > 0 else 0.0
    return 0.0


def _inside_ray_worker() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray and ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE)


@dataclass
class TrainingStats:
    """How many models this procedure trained and how many it found in the cache (tests and timings read it)."""

    trained: int = 0
    cached: int = 0
    calls: int = 0
    tasks: int = 0
    """Pool chunks dispatched as Ray tasks."""
    nodes: set[str] = field(default_factory=set)
    """Ray nodes those tasks ran on."""


@dataclass
class TrainingProcedure:
    """``defense`` with ``arch`` and ``recipe`` bound; call it with data and seeds to get trained models."""

    defense: Defense
    arch: Architecture
    recipe: Recipe
    solver: Solver = "auto"
    device: Device = "cpu"
    cache: TensorCache | None = None
    chunk: int = 32
    """Models per independently scheduled and cached part of a shadow pool (``train_chunks``)."""
    stats: TrainingStats = field(default_factory=TrainingStats)
    code: dict = field(default_factory=dict)
    """The code that trains (``arena.pipeline.provenance``: the defense's and model's plugins, with their source
    hashes when installed locally), part of every cache key: an edited defense never reuses models."""
    reference_X: torch.Tensor | None = None
    """The reference set bound to this procedure ([r, d], shared by every model; ``reference_y`` [r]), handed to a
    defense that ``needs_reference`` when a call passes none: the membership game binds the attacker's population
    to ``view.train`` (it stays in the arena's process: the sandbox's proxy never carries it)."""
    reference_y: torch.Tensor | None = None

    def identity(self) -> dict:
        """Everything that determines the trained models apart from data and seeds."""
        return {
            "defense": self.defense.name,
            "defense_version": self.defense.version,
            "params": self.defense.params.model_dump(mode="json"),
            "arch": self.arch.identity(),
            "recipe": {**self.recipe.__dict__, "augment": self.recipe.augment.__dict__},
            "solver": self.solver,
            **({"code": self.code} if self.code else {}),
            **({"training_semantics": TRAINING_SEMANTICS} if mode_dependent(self.arch) else {}),
        }

    def __call__(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        init_seeds: Sequence[int] | torch.Tensor,
        train_seeds: Sequence[int] | torch.Tensor,
        reference_X: torch.Tensor | None = None,
        reference_y: torch.Tensor | None = None,
    ) -> tuple[Models, Claim | None]:
        """Train K models, model k on (X[k], y[k]); X is [K, n, d], y [K, n]. ``reference_X`` [r, d] (shared) or
        [K, r, d] and ``reference_y`` [r] or [K, r] (default: the bound ones): the reference set a defense that
        ``needs_reference`` is given (records in no model's training set); other defenses never see it, and it is
        in the cache key only for those that do."""
        init = torch.as_tensor(init_seeds, dtype=torch.int64)
        train = torch.as_tensor(train_seeds, dtype=torch.int64)
        if X.ndim != 3 or y.shape != X.shape[:2] or len(init) != X.shape[0] or len(train) != X.shape[0]:
            raise ValueError("training procedure needs X [K, n, d], y [K, n] and K init and train seeds")
        reference = self._reference(X, reference_X, reference_y)
        self.stats.calls += 1
        data = tensor_digest(X, y, init, train) if reference is None else tensor_digest(X, y, init, train, *reference)
        key = content_key({**self.identity(), "data": data})
        if self.cache is None:
            models, claim, _ = self._fit(X, y, init, train, reference)
            return models, claim
        with self.cache.lock("models", key):
            if (hit := self.cache.get("models", key)) is not None:
                self.stats.cached += X.shape[0]
                return self._models(hit), self._claim(hit)
            models, claim, tensors = self._fit(X, y, init, train, reference)
            self.cache.put("models", key, tensors)
            return models, claim

    def _reference(self, X: torch.Tensor, reference_X: torch.Tensor | None,
                   reference_y: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The reference set [K, r, d], [K, r] the defense is handed (None for a defense that needs none)."""
        if not self.defense.needs_reference:
            return None
        if (reference_X is None) != (reference_y is None):
            raise ValueError("pass both reference_X and reference_y, or neither")
        if reference_X is None:
            reference_X, reference_y = self.reference_X, self.reference_y
        if reference_X is None or reference_y is None or reference_y.numel() == 0:
            raise ValueError(f"defense {self.defense.name!r} needs a reference set (population records outside every "
                             "model's training set): pass reference_X and reference_y, or bind them to the procedure")
        K = X.shape[0]
        if reference_X.ndim == 2:
            reference_X, reference_y = reference_X.expand(K, *reference_X.shape), reference_y.expand(K, -1)
        if (reference_X.ndim != 3 or reference_X.shape[0] != K or reference_X.shape[2] != X.shape[2]
                or tuple(reference_y.shape) != tuple(reference_X.shape[:2])):
            raise ValueError(f"reference set of shape {tuple(reference_X.shape)} / {tuple(reference_y.shape)} does "
                             f"not fit X {tuple(X.shape)}: need [r, d] and [r], or [K, r, d] and [K, r]")
        return reference_X, reference_y

    def train_chunks(self, chunks: Sequence[Chunk]) -> list[Models]:
        """``train_chunked``'s models (what an attacker's pool asks for)."""
        return self.train_chunked(chunks)[0]

    def train_chunked(self, chunks: Sequence[Chunk]) -> tuple[list[Models], Claim | None]:
        """Train each chunk as its own cached unit; the models and the claim they train under (the first chunk's:
        one procedure, one claim). Inside a Ray worker, with a cache, the chunks after the first become Ray tasks
        of their own (a GPU share on ``cuda`` tracks), as many as the cluster has CPUs idle, so a pool spreads over
        a cluster's idle workers and a chunk finished before a crash is never retrained; this worker, which holds
        its CPU, trains the rest meanwhile (a task the cluster cannot start at once would only start another
        worker process beside this one, idle in its wait); elsewhere the chunks train here, one after another."""
        here: dict[int, tuple[Models, Claim | None]] = {}
        if len(chunks) > 1 and self.cache is not None and _inside_ray_worker():
            import ray

            gpus = gpu_request(self.device)
            task = ray.remote(num_cpus=1, num_gpus=gpus, scheduling_strategy="SPREAD")(_train_chunk)
            idle = len(chunks) - 1 if gpus else int(ray.available_resources().get("CPU", 0.0))
            first_spread = len(chunks) - max(0, min(idle, len(chunks) - 1))  # chunks from here on go to tasks
            refs = [task.remote(self, *chunk) for chunk in chunks[first_spread:]]
            self.stats.tasks += len(refs)
            here = {i: self(*chunks[i]) for i in range(first_spread)}
            self.stats.nodes.add(ray.get_runtime_context().get_node_id())
            if gpus:  # a task holding a GPU share waits on others needing one: work from the back meanwhile
                for i in reversed(range(first_spread, len(chunks))):
                    here[i] = self(*chunks[i])
            for count, node in ray.get(refs):
                self.stats.trained += count
                self.stats.nodes.add(node)
        trained = [here[i] if i in here else self(*chunk) for i, chunk in enumerate(chunks)]
        return [models for models, _ in trained], (trained[0][1] if trained else None)

    def _fit(
        self, X: torch.Tensor, y: torch.Tensor, init: torch.Tensor, train: torch.Tensor,
        reference: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[Models, Claim | None, dict[str, torch.Tensor]]:
        """Train through the defense; also return the tensors the cache stores."""
        device = resolve_device(self.device)
        Xr, yr = (None, None) if reference is None else (reference[0].to(device, torch.float32),
                                                         reference[1].to(device, torch.int64))
        task = FitTask(
            arch=self.arch,
            recipe=self.recipe,
            X=X.to(device, torch.float32),
            y=y.to(device, torch.int64),
            init_seeds=init.to(device),
            train_seeds=train.to(device),
            solver=self.solver,
            reference_X=Xr,
            reference_y=yr,
        )
        fit = self.defense.fit(task)
        self.stats.trained += X.shape[0]
        tensors = {f"{_STATE}{name}": t.detach().cpu().contiguous() for name, t in fit.state.items()}
        tensors.update({f"{_ANSWERING}{name}": t.detach().cpu().contiguous() for name, t in fit.answering.items()})
        if fit.claim is not None:
            tensors["claim"] = torch.frombuffer(bytearray(json.dumps(fit.claim.as_dict()).encode()), dtype=torch.uint8)
        return self._models(tensors), fit.claim, tensors

    def _models(self, tensors: dict[str, torch.Tensor]) -> Models:
        state = {k[len(_STATE):]: v for k, v in tensors.items() if k.startswith(_STATE)}
        template = self.arch.template()
        order = [*template.trainable, *template.buffers]
        if sorted(state) != sorted(order):
            raise ValueError(f"defense {self.defense.name!r} returned tensors {sorted(state)}, "
                             f"the model has {sorted(order)}")
        answering = None
        if self.defense.answers_queries:
            answering = Answering(self.defense.answer, {
                k[len(_ANSWERING):]: v for k, v in tensors.items() if k.startswith(_ANSWERING)},
                keeps_labels=bool(getattr(self.defense, "answers_keep_labels", False)))
        return Models(self.arch, {k: state[k] for k in order}, answering)

    @staticmethod
    def _claim(tensors: dict[str, torch.Tensor]) -> Claim | None:
        if "claim" not in tensors:
            return None
        return Claim(**json.loads(bytes(tensors["claim"].tolist()).decode()))


def _train_chunk(procedure: TrainingProcedure, *chunk: torch.Tensor) -> tuple[int, str]:
    """Ray task: train (or find) one chunk in the shared cache; return (models trained, the node it ran on)."""
    import ray

    torch.set_num_threads(1)
    procedure.stats = TrainingStats()
    procedure(*chunk)
    return procedure.stats.trained, ray.get_runtime_context().get_node_id()
