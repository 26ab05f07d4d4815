"""No member is in any built-in defense's reference or validation set, and every member is trained on as one.

Each built-in defense (every one the registry holds, so a new one joins this test) fits one model while the test
records, by the rows' contents, every set of rows something trains on (the engine's ``train``/``train_augmult``,
the exact solvers, the recipe's batches of ``FitTask.minibatches``), every row a model is evaluated on
(``Ensemble.forward``, ``Models.logits``) and the reference set it asks for (``FitTask.reference``). Members and
the challenger's reference records are distinct rows, so each recorded row is known to be one or the other.

What must hold: every member is in a training set; a training set holding one member holds all of them (no member
is held out of a model trained on members to serve as its non-member: SELENA's sub-models alone leave members out,
each member from exactly L of the K); no training set mixes members and reference records; the reference set a
defense asks for holds no member; a defense that needs a reference set uses the challenger's records, and one that
does not never touches them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator

import pytest
import torch

from arena.contracts.defense import Defense, FitTask
from arena.contracts.release import Models
from arena.engine.augment import Augment
from arena.engine.ensemble import Ensemble
from arena.engine.recipe import Recipe
from arena.plugins import registries
from tests.conftest import architecture
from tests.plugins.tiny_tasks import digits

N, R = 40, 30
CONFIG = {  # small, valid configurations of the defenses whose parameters have no default, or are slow
    "dpsgd": {"epsilons": [8.0], "delta": 1e-3},
    "dpsgd-augmult": {"epsilons": [8.0], "delta": 1e-3, "multiplicity": 2},
    "output-perturbation": {"epsilons": [8.0]},
    "relaxloss": {"alpha": 0.5},
    "label-smoothing": {"smoothing": 0.1},
    "selena": {"submodels": 4, "excluded": 2},
    "hamp": {"bank": 8},
    "memguard": {"steps": 3},
    "client-dpsgd": {"epsilons": [8.0], "delta": 1e-3},
    "dp-fedavg": {"epsilons": [8.0], "delta": 1e-3},
    "gradient-pruning": {"rates": [0.5]},
}
TRAINERS = ("train", "train_augmult", "fit_logreg", "fit_penalised")
LANGUAGE = ("trains language models on token records (no reference or validation set; lm-dedup's kept records: "
            "tests/plugins/test_lm_defenses.py)")
SKIP = {"checkpoint": "trains nothing: its model was trained elsewhere on the game's members"} | dict.fromkeys(
    ("lm-dedup", "lm-dpsgd", "lm-finetune"), LANGUAGE)


@functools.cache
def records() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """N members and R reference records of the digits, all distinct rows."""
    X, y = digits()
    _, first = torch.unique(X, dim=0, return_inverse=True)
    distinct = [i for i in range(len(y)) if int((first == first[i]).sum()) == 1]
    pick = torch.tensor(distinct)[torch.randperm(len(distinct), generator=torch.Generator().manual_seed(2))]
    members, reference = pick[:N], pick[N : N + R]
    return X[members], y[members], X[reference], y[reference]


def task_for(name: str) -> FitTask:
    X, y, Xr, yr = records()
    if name == "output-perturbation":
        arch = architecture("logreg", (64,), 10, l2=0.01)
        X, Xr = X.reshape(1, N, 64), Xr.reshape(1, R, 64)
    else:
        arch = architecture("mlp", (1, 8, 8), 10, hidden=[8])
    recipe = Recipe(epochs=2, lr=0.1, momentum=0.0, batch_size=16,
                    augment=Augment(crop=1) if name == "dpsgd-augmult" else Augment())
    return FitTask(arch, recipe, X.reshape(1, N, -1), y[None], torch.tensor([1]), torch.tensor([2]),
                   reference_X=Xr.reshape(1, R, -1), reference_y=yr[None])


class Recorder:
    """Sets of rows trained on and rows evaluated, each as the member and reference indices it holds."""

    def __init__(self) -> None:
        X, _, Xr, _ = records()
        self.index = {tuple(r.tolist()): ("M", i) for i, r in enumerate(X.double())}
        self.index.update({tuple(r.tolist()): ("R", i) for i, r in enumerate(Xr.double())})
        self.d = X.shape[1]
        self.trained: list[tuple[set[int], set[int]]] = []
        self.seen: list[tuple[set[int], set[int]]] = []
        self.asked: list[tuple[set[int], set[int]]] = []

    def split(self, rows: torch.Tensor) -> Iterator[tuple[set[int], set[int]]]:
        """Per model of ``rows`` [..., n, d'] (d' = d, or d + 1 with a design's column of ones): its (member,
        reference) indices; rows that are neither (mixed, augmented) are left out."""
        rows = rows.detach().double().cpu()
        rows = rows.reshape(-1, rows.shape[-1]) if rows.ndim == 2 else rows.reshape(*rows.shape[:2], -1)
        if rows.shape[-1] == self.d + 1:
            rows = rows[..., :-1]
        for block in ([rows] if rows.ndim == 2 else rows):
            m, r = set(), set()
            for row in block:
                kind, i = self.index.get(tuple(row.tolist()), ("", -1))
                (m if kind == "M" else r if kind == "R" else set()).add(i)
            yield m, r


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()

    def trainer(real):
        def spy(arch, X, *args, **kwargs):
            rec.trained.extend(rec.split(X))
            return real(arch, X, *args, **kwargs)
        return spy

    def solver(real):
        def spy(X, *args, **kwargs):
            rec.trained.extend(rec.split(X))
            return real(X, *args, **kwargs)
        return spy

    for module in {importlib.import_module(entry.obj.__module__) for entry in registries().defenses}:
        for fn in TRAINERS:
            if hasattr(module, fn):
                real = getattr(module, fn)
                monkeypatch.setattr(module, fn, (solver if fn.startswith("fit_") else trainer)(real))
    minibatches, forward, logits, reference = (FitTask.minibatches, Ensemble.forward, Models.logits,
                                               FitTask.reference)
    task_train = FitTask.train

    def spy_task_train(self, *args, **kwargs):  # a defense handing its task to the training engine
        rec.trained.extend(rec.split(self.X))
        return task_train(self, *args, **kwargs)

    def spy_minibatches(self, *args, **kwargs):
        rec.trained.extend(rec.split(self.X))
        return minibatches(self, *args, **kwargs)

    def spy_forward(self, X):
        rec.seen.extend(rec.split(X))
        return forward(self, X)

    def spy_logits(self, X):
        rec.seen.extend(rec.split(X))
        return logits(self, X)

    def spy_reference(self, defense):
        out = reference(self, defense)
        rec.asked.extend(rec.split(out[0]))
        return out

    monkeypatch.setattr(FitTask, "minibatches", spy_minibatches)
    monkeypatch.setattr(FitTask, "train", spy_task_train)
    monkeypatch.setattr(Ensemble, "forward", spy_forward)
    monkeypatch.setattr(Models, "logits", spy_logits)
    monkeypatch.setattr(FitTask, "reference", spy_reference)
    return rec


def defense_names() -> list[str]:
    return sorted(registries().defenses.names())


@pytest.mark.slow
@pytest.mark.parametrize("name", defense_names())
def test_no_member_is_in_a_reference_or_validation_set_and_every_member_trains(name: str,
                                                                               recorder: Recorder) -> None:
    if name in SKIP:
        pytest.skip(SKIP[name])
    cls = registries().defenses.get(name)
    defense: Defense = cls(cls.Params(**CONFIG.get(name, {})))
    defense.fit(task_for(name))
    members = set(range(N))
    trained = [(m, r) for m, r in recorder.trained if m or r]
    assert trained, f"{name}: nothing recorded as trained"
    assert set().union(*(m for m, _ in trained)) == members, f"{name}: members never trained on"
    assert all(not (m and r) for m, r in trained), f"{name}: a training set mixes members and reference records"
    partial = [m for m, _ in trained if m and m != members]
    if name == "selena":  # Split-AI's sub-models: each member excluded from exactly L of the K
        K, L = CONFIG["selena"]["submodels"], CONFIG["selena"]["excluded"]
        assert len(partial) == K
        assert all(sum(i in m for m in partial) == K - L for i in members)
    else:
        assert not partial, f"{name}: a model trained on members holds some of them out"
    assert all(not m for m, _ in recorder.asked), f"{name}: its reference set holds members"
    used = set().union(*(r for _, r in [*trained, *recorder.seen, *recorder.asked]))
    if cls.needs_reference:
        assert used, f"{name}: needs a reference set but never used the challenger's"
        assert recorder.asked, f"{name}: needs a reference set but never asked the task for it"
    else:
        assert not used and not recorder.asked, f"{name}: touches reference records it does not declare it needs"
