"""The defense contract: a training procedure that turns data into K models and its privacy claim."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Literal, cast

import torch
from pydantic import BaseModel

from arena.contracts.architecture import Architecture, Batch, ModelStack, State
from arena.contracts.engine import training_engine
from arena.contracts.params import NoParams
from arena.contracts.recipe import DPNoise, Recipe


@dataclass(frozen=True)
class Claim:
    """What a DP defense promises, as accounted: the ε achieved (never above the target) and how."""

    epsilon: float
    delta: float
    accountant: str
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    mechanism: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


RECIPE_FIELDS = frozenset({"epochs", "lr", "batch_size", "momentum", "solver", "augment", "ema", "l2"})
"""The fields of a track's training recipe (``training.<field>``, and the model's ``l2``) a defense may honour."""


class RecipeSGD(torch.optim.SGD):
    """``torch.optim.SGD`` as the engine steps: heavy-ball momentum (v ← μv + g; w ← w − lr·v), weight decay
    ``model.l2`` on the weight tensors only, and, when the recipe asks (``training.ema``), an exponential moving
    average of the iterates updated after every step, which ``FitTask.finish`` releases."""

    def __init__(self, weights: list[torch.Tensor], others: list[torch.Tensor], recipe: Recipe, l2: float) -> None:
        groups = [{"params": weights, "weight_decay": l2}, {"params": others, "weight_decay": 0.0}]
        super().__init__([g for g in groups if g["params"]], lr=recipe.lr, momentum=recipe.momentum)
        self.ema = recipe.ema
        self.average: dict[int, torch.Tensor] = (
            {id(p): p.detach().clone() for p in [*weights, *others]} if self.ema else {})

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim's signature
        loss = super().step(closure)
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if id(p) in self.average:
                        self.average[id(p)].mul_(self.ema).add_(p, alpha=1.0 - self.ema)
        return loss


def _stacked(params: object) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(weights, others) among the trainable tensors of a ``ModelStack`` (its ``penalised`` ones are the weights)
    or of an iterable of tensors stacked over the K models (weights: two or more dimensions per model)."""
    if isinstance(params, ModelStack):
        penalised = {id(p) for p in params.penalised()}
        trainable = [p for p in params.parameters() if p.requires_grad]
        return [p for p in trainable if id(p) in penalised], [p for p in trainable if id(p) not in penalised]
    tensors = [p for p in params if p.requires_grad] if isinstance(params, Iterable) else []
    if not tensors:
        raise TypeError("pass the ensemble (task.ensemble()) or its trainable tensors, stacked over the K models")
    return [p for p in tensors if p.ndim >= 3], [p for p in tensors if p.ndim < 3]


@dataclass(frozen=True)
class FitTask:
    """Everything a defense needs to train K models of one architecture at once.

    ``X`` is [K, n, d] (flat records) and ``y`` [K, n]: model k trains on (X[k], y[k]). ``init_seeds`` fix each
    model's initialisation, ``train_seeds`` its sampling, augmentation and noise. A defense may hand the task to
    the training engine (``train(dp)``) or train in plain PyTorch on the task's device (``device``):
    ``ensemble()`` is an ``nn.Module`` holding the K seeded models, ``minibatches()`` the recipe's batches (its
    epochs, batch size and augmentation), ``optimizer(ensemble)`` the recipe's optimiser (learning rate, momentum,
    ``model.l2`` as weight decay on weights, the moving average of ``training.ema``), ``penalty(ensemble)`` the L2
    penalty for a loss stepped by an optimiser of the defense's own, and ``finish(ensemble, optimizer)`` the result.
    A plain-PyTorch defense declares the recipe fields it honours (``Defense.honours``); a track that sets one it
    does not is refused when the scenario is validated.

    ``reference_X`` [K, r, d] and ``reference_y`` [K, r]: population records from the training data's distribution
    that are in none of the K training sets (nor the game's challenge), given only to a defense that declares
    ``Defense.needs_reference`` (None otherwise): its reference or validation data. Every row of ``X`` is a member
    and must be trained on as one; never carve a reference set out of ``X``.
    """

    arch: Architecture
    recipe: Recipe
    X: torch.Tensor
    y: torch.Tensor
    init_seeds: torch.Tensor
    train_seeds: torch.Tensor
    solver: Literal["auto", "gradient", "newton"] = "auto"
    reference_X: torch.Tensor | None = None
    reference_y: torch.Tensor | None = None

    @property
    def k(self) -> int:
        return self.X.shape[0]

    @property
    def n(self) -> int:
        return self.X.shape[1]

    def reference(self, defense: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(``reference_X`` [K, r, d], ``reference_y`` [K, r]); a ``ValueError`` naming ``defense`` without them."""
        if self.reference_X is None or self.reference_y is None or self.reference_X.shape[1] == 0:
            raise ValueError(f"defense {defense!r} needs a reference set (population records outside its training "
                             "set; Defense.needs_reference), and none was given: the game supplies one to the "
                             "release, the attacker's population to its shadow models")
        return self.reference_X, self.reference_y

    def ensemble(self) -> ModelStack:
        """The K models, initialised from ``init_seeds`` exactly as the engine initialises them; in train mode, what
        a module draws itself (dropout) comes from each model's ``train_seeds`` alone."""
        return training_engine().ensemble(self.arch, self.init_seeds, self.train_seeds, self.X.dtype, self.X.device)

    def train(self, dp: DPNoise | None = None) -> State:
        """The K models trained by the training engine under the task's recipe, by DP-SGD with ``dp``
        (``arena.contracts.engine.TrainingEngine.train``): their state, for ``Fit(state, claim)``."""
        return training_engine().train(self.arch, self.X, self.y, self.recipe, self.init_seeds, self.train_seeds, dp)

    @property
    def device(self) -> torch.device:
        """Where the task's data lives, and where ``ensemble()`` puts the models: train there."""
        return self.X.device

    def optimizer(self, params: ModelStack | Iterable[torch.Tensor]) -> RecipeSGD:
        """The recipe's optimiser for ``params`` (the ensemble, or its trainable tensors stacked over the K
        models): the engine's update (``lr``, ``momentum``), ``model.l2`` as weight decay on the weight tensors
        only (not biases or norm scales), and the recipe's moving average of the iterates (``ema``), which
        ``finish`` releases. Do not add ``penalty`` to a loss it steps: the decay is that penalty's gradient."""
        weights, others = _stacked(params)
        return RecipeSGD(weights, others, self.recipe, self.arch.l2)

    def penalty(self, params: ModelStack | Iterable[torch.Tensor]) -> torch.Tensor:
        """``model.l2``'s penalty Σ_k (l2/2)·||w_k||² over the weight tensors of the K models (0 without l2): add it
        to the summed loss when stepping with an optimiser of the defense's own (not with ``optimizer``)."""
        weights, _ = _stacked(params)
        if not self.arch.l2 or not weights:
            return torch.zeros((), dtype=self.X.dtype, device=self.device)
        return 0.5 * self.arch.l2 * cast(torch.Tensor, sum(w.pow(2).sum() for w in weights))  # weights: non-empty

    def finish(self, ensemble: ModelStack, optimizer: torch.optim.Optimizer | None = None,
               claim: Claim | None = None) -> Fit:
        """The trained models of ``ensemble`` as the recipe releases them: the moving average of ``optimizer``
        (from ``optimizer()``) when the recipe keeps one, else the last iterate; with ``claim``."""
        if not self.recipe.ema:
            return Fit.of(ensemble, claim)
        if not isinstance(optimizer, RecipeSGD):
            raise ValueError(f"the recipe keeps a moving average of the iterates (training.ema = {self.recipe.ema:g})"
                             ": step with task.optimizer(ensemble) and pass it to task.finish(ensemble, optimizer)")
        state = ensemble.detached()
        for name, p in ensemble.state().items():
            if id(p) in optimizer.average:
                state[name] = optimizer.average[id(p)].detach().clone()
        return Fit(state, claim)

    def minibatches(self, poisson: bool = False) -> Iterator[Batch]:
        """(X [K, B, *input_shape], y [K, B], valid [K, B] or None) per step: a fresh per-model shuffle each epoch
        cut into batches (or, with ``poisson``, DP-SGD's Poisson samples), augmented as the recipe asks."""
        for Xb, yb, valid in training_engine().minibatches(self.arch, self.recipe, self.X, self.y, self.train_seeds,
                                                           poisson):
            yield Xb.reshape(*Xb.shape[:2], *self.arch.input_shape), yb, valid


def honours_problem(cls: type) -> str | None:
    """Why a defense class's ``honours`` is not a set of recipe fields, or its ``requires`` not a set of fields it
    honours, or None (checked at registration)."""
    honours = getattr(cls, "honours", RECIPE_FIELDS)
    if not isinstance(honours, (set, frozenset)) or not all(isinstance(f, str) for f in honours):
        return f"declares honours = {honours!r}: a frozenset of recipe fields ({', '.join(sorted(RECIPE_FIELDS))})"
    unknown = sorted(honours - RECIPE_FIELDS)
    if unknown:
        return (f"declares honours with unknown recipe fields {', '.join(map(repr, unknown))}; known: "
                f"{', '.join(sorted(RECIPE_FIELDS))}")
    requires: object = getattr(cls, "requires", frozenset())
    if not isinstance(requires, (set, frozenset)) or not requires <= honours:
        return f"declares requires = {requires!r}: a frozenset of the recipe fields it honours"
    return None


@dataclass(frozen=True)
class Fit:
    """The trained parameters of K models (stacked, by module name), and the privacy claim covering each (or None).

    ``answering``: tensors stacked over the K models (leading axis K) that an inference-time defense's ``answer``
    reads besides the model's output (e.g. its own membership classifier); cached and released with the models."""

    state: State
    claim: Claim | None
    answering: State = field(default_factory=dict)

    @classmethod
    def of(cls, ensemble: ModelStack, claim: Claim | None = None) -> Fit:
        """The result of a defense that trained ``ensemble`` itself."""
        return cls(ensemble.detached(), claim)


class Defense(abc.ABC):
    """Base class of defense plugins; one instance holds one validated configuration."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[BaseModel]] = NoParams
    per_example_gradients: ClassVar[bool] = False
    """True for defenses that clip per-example gradients (DP-SGD): models that mix examples are refused."""
    honours: ClassVar[frozenset[str]] = RECIPE_FIELDS
    """The recipe fields (``RECIPE_FIELDS``) this defense's training follows: every one for a defense that hands
    its task to the engine. A defense trained in plain PyTorch lists those it applies (the ``FitTask`` helpers
    apply them all); a scenario that sets any other away from its neutral value (momentum, ema or l2 above 0,
    a batch size, augmentation, solver 'newton'; epochs and lr always count) is refused, naming the field."""

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    @classmethod
    def expand(cls, params: BaseModel) -> list[BaseModel]:
        """The configurations one scenario entry stands for (e.g. one per ε); default: itself."""
        return [params]

    def target_epsilon(self) -> float | None:
        """The ε this configuration aims for, or None for a defense that claims nothing."""
        return None

    def target_delta(self) -> float | None:
        return None

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        """Problems with this configuration for a training set of ``n_train`` records, as (field, message)."""
        return []

    requires: ClassVar[frozenset[str]] = frozenset()
    """Recipe fields that must be in effect for this defense (e.g. ``augment`` for augmentation multiplicity): a
    scenario that leaves one at its neutral value is refused when validated, naming the field."""
    needs_reference: ClassVar[bool] = False
    """True for a defense that needs reference (or validation) records outside its training set: the procedure
    hands it ``FitTask.reference_X``/``reference_y`` (population records the challenger provides, disjoint from the
    members and the challenge); a game that supplies none refuses it when the scenario is validated."""
    answers_queries: ClassVar[bool] = False
    """True for an inference-time defense: every query answer of its released models (and of shadow models it
    trains) goes through ``answer``; white-box access (``parameters``) still sees the model itself."""
    answers_keep_labels: ClassVar[bool] = False
    """True for an inference-time defense whose ``answer`` never changes the predicted label (MemGuard: by
    construction): a label query (``Models.labels``, label-only access) is then answered from the raw logits,
    without running ``answer``; the labels are the same."""

    row_note: ClassVar[str | None] = None
    """A line every result row of this defense carries (e.g. which engine trained its models, ``user_defense``)."""

    @abc.abstractmethod
    def fit(self, task: FitTask) -> Fit:
        """Train the K models of ``task``."""

    def answer(self, logits: torch.Tensor, answering: State) -> torch.Tensor:
        """The logits [K, n, C] the released models answer for their raw ``logits`` [K, n, C], given the fit's
        ``answering`` tensors (rows of the same K models); only called when ``answers_queries``."""
        return logits
