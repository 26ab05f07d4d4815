"""Trained models as the arena hands them around: batched parameters, and the black-box query interface."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from arena.contracts.architecture import Architecture, State
from arena.contracts.defense import Claim
from arena.contracts.dense import Layers, to_layers
from arena.contracts.engine import training_engine


@dataclass(frozen=True)
class Answering:
    """An inference-time defense's post-processing of the K models' outputs: ``fn(logits [K, n, C], tensors)``,
    with ``tensors`` stacked over the same K models."""

    fn: Callable[[torch.Tensor, State], torch.Tensor]
    tensors: State = field(default_factory=dict)
    keeps_labels: bool = False
    """The defense declares that ``fn`` never changes the argmax (``Defense.answers_keep_labels``)."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return self.fn(logits, {k: v.to(logits.device) for k, v in self.tensors.items()})

    def select(self, sl: slice) -> Answering:
        return Answering(self.fn, {k: v[sl] for k, v in self.tensors.items()}, self.keeps_labels)


LOGITS_KEPT = 8
"""Answers of ``Models.logits`` kept per process (a few MB: [K, n, C] each)."""
MEMO_STATE_BYTES = 64 << 20
"""Pools larger than this are not kept: hashing their state would cost more than it saves."""
_LOGITS: OrderedDict[bytes, torch.Tensor] = OrderedDict()


@dataclass(frozen=True)
class Models:
    """K trained models of one architecture: their parameters and buffers stacked along a leading model axis.
    ``answering``: an inference-time defense's post-processing, applied to every output (``logits`` and all that
    derives from it); the parameters are the model's own."""

    arch: Architecture
    state: State
    answering: Answering | None = field(default=None, compare=False)

    @classmethod
    def cat(cls, parts: Sequence[Models]) -> Models:
        """The models of ``parts`` (one architecture, one answering function) stacked in order."""
        state = {name: torch.cat([m.state[name] for m in parts]) for name in parts[0].state}
        first = parts[0].answering
        answering = None if first is None else Answering(first.fn, {
            name: torch.cat([m.answering.tensors[name] for m in parts if m.answering is not None])
            for name in first.tensors}, first.keeps_labels)
        return cls(parts[0].arch, state, answering)

    @property
    def k(self) -> int:
        return next(iter(self.state.values())).shape[0]

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        """Logits [K, n, C] for flat records X [n, d] (shared) or [K, n, d] (one set per model), as answered (through
        the defense's ``answering`` when it has one). A pure function of the models and X: for a pool of models (K >
        1) of at most ``MEMO_STATE_BYTES``, the last few answers are kept (``_LOGITS``), so the same shadows queried
        on the same records for each target of the vulnerable-record protocol run their forward pass once."""
        memo = self.k > 1 and sum(t.numel() * t.element_size() for t in self.state.values()) <= MEMO_STATE_BYTES
        key = self._memo_key(X) if memo else b""
        if memo and (hit := _LOGITS.get(key)) is not None:
            _LOGITS.move_to_end(key)
            return hit.clone()
        dtype = next(iter(self.state.values())).dtype
        with torch.no_grad():
            raw = training_engine().logits(self.arch, self.state, X.to(dtype))
            out = raw if self.answering is None else self.answering(raw)
        if memo:
            _LOGITS[key] = out.clone()
            while len(_LOGITS) > LOGITS_KEPT:
                _LOGITS.popitem(last=False)
        return out

    def _memo_key(self, X: torch.Tensor) -> bytes:
        """A digest of everything ``logits`` reads: the architecture, the state, the answering function and its
        tensors, and X."""
        h = hashlib.blake2b(repr(self.arch.identity()).encode(), digest_size=20)
        if self.answering is not None:  # the function, and the parameters of the defense it is bound to
            fn = self.answering.fn
            h.update(f"{fn.__module__}.{fn.__qualname__}".encode())
            params = getattr(getattr(fn, "__self__", None), "params", None)
            dump = getattr(params, "model_dump_json", None)
            h.update(dump().encode() if callable(dump) else f"unbound:{id(fn)}".encode())
        for name, t in (*sorted(self.state.items()), *sorted((self.answering.tensors if self.answering else {})
                                                              .items()), ("X", X)):
            c = t.detach().to("cpu").contiguous()
            h.update(f"{name}{tuple(c.shape)}{c.dtype}".encode())
            h.update(c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b"")
        return h.digest()

    def labels(self, X: torch.Tensor) -> torch.Tensor:
        """Predicted labels [K, n]: the argmax of the answered logits; for a defense whose answers keep the label
        (``Answering.keeps_labels``), of the raw ones, without running its answering (the same labels)."""
        if self.answering is not None and self.answering.keeps_labels:
            return Models(self.arch, self.state).logits(X).argmax(dim=-1)
        return self.logits(X).argmax(dim=-1)

    def predict_proba(self, X: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(X), dim=-1)

    def loss(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-example cross-entropy [K, n]."""
        logp = torch.log_softmax(self.logits(X), dim=-1)
        yy = y.expand(logp.shape[:2]) if y.ndim == 1 else y
        return -logp.gather(-1, yy.unsqueeze(-1)).squeeze(-1)

    def accuracy(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Accuracy [K] of each model on (X, y)."""
        return (self.logits(X).argmax(-1) == y).to(torch.float64).mean(-1)

    def select(self, index: int) -> Models:
        return self.part(index, index + 1)

    def part(self, start: int, stop: int) -> Models:
        """Models ``start`` to ``stop`` (exclusive), with their answering function's tensors."""
        sl = slice(start, stop)
        return Models(self.arch, {k: v[sl] for k, v in self.state.items()},
                      None if self.answering is None else self.answering.select(sl))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one record as the module takes it (records travel flat: ``X.reshape(-1, *input_shape)``)."""
        return self.arch.input_shape

    def module(self, k: int = 0, *, train: bool = False) -> torch.nn.Module:
        """Model ``k`` as an ordinary, differentiable ``torch.nn.Module``: a fresh module of the track's model (as its
        plugin builds it, with GroupNorm for BatchNorm where the defense clipped per-example gradients) holding
        model k's parameters and buffers (copies: changing them changes nothing here), on their device and dtype,
        in eval mode (``train=True``: train mode). It answers raw logits for records shaped ``input_shape``,
        without an inference-time defense's ``answering`` (white-box access sees the model itself)."""
        if not -self.k <= k < self.k:
            raise IndexError(f"model {k} of {self.k}")
        with torch.random.fork_rng(devices=[]):  # the module's own initialisation, overwritten below
            module = self.arch.build()
        first = next(iter(self.state.values()))
        module = module.to(first.device)
        tensors = dict([*module.named_parameters(), *module.named_buffers()])
        missing = sorted(set(tensors) - set(self.state))
        if missing:
            raise ValueError(f"model {self.arch.model.name!r}: the released state lacks {', '.join(missing[:5])}")
        with torch.no_grad():
            for name, t in tensors.items():
                t.data = self.state[name][k].detach().clone()
        return module.train(train)

    def flat(self) -> torch.Tensor:
        """[K, P]: each model's trainable parameters, flattened in module order."""
        names = self.arch.template().trainable
        return torch.cat([self.state[n].reshape(self.k, -1) for n in names], dim=1)

    def layers(self) -> Layers:
        """Dense layers [W1 [K,in,out], b1 [K,out], ...] of a logistic regression or MLP (ValueError otherwise)."""
        if self.arch.dense is None:
            raise ValueError(f"model {self.arch.model.name!r} is not a stack of dense layers")
        return to_layers(self.state)


@dataclass(frozen=True)
class Release:
    """The released model of one (track, defense configuration, seed): parameters, utility and claim."""

    models: Models
    utility: float
    claim: Claim | None


class BlackBox:
    """Query access to one released model: output probabilities and losses on points the attacker chooses."""

    def __init__(self, models: Models) -> None:
        if models.k != 1:
            raise ValueError("a black box wraps exactly one model")
        self._models = models

    def predict_proba(self, X: torch.Tensor) -> torch.Tensor:
        """Probabilities [n, C]."""
        return self._models.predict_proba(X)[0]

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [n, C]: the same answers as ``predict_proba``, without rounding 1 - p to zero."""
        return torch.log_softmax(self._models.logits(X), dim=-1)[0]

    def loss(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy [n] of each (x, y)."""
        return self._models.loss(X, y)[0]


class LabelOnly:
    """Label-only query access to one released model (Choquette-Choo et al. 2021): the predicted label of each
    query, nothing else. The model lives only in the closure behind ``predict``; the instance has no ``__dict__``
    and answers every other attribute with ``ThreatModelError``, so no probability, logit or parameter is reachable
    through it short of deliberately bypassing the class (``object.__getattribute__``)."""

    __slots__ = ("_predict",)

    def __init__(self, models: Models) -> None:
        if models.k != 1:
            raise ValueError("a label-only interface wraps exactly one model")

        def predict(X: torch.Tensor) -> torch.Tensor:
            return models.labels(X)[0]

        object.__setattr__(self, "_predict", predict)

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        """Predicted labels [n] (int64): the argmax of the model's output on each query in X [n, ...]."""
        return object.__getattribute__(self, "_predict")(X)

    def __getattribute__(self, name: str) -> object:
        if name in ("predict", "__class__"):
            return object.__getattribute__(self, name)
        from arena.contracts.view import ThreatModelError  # arena.games imports this module

        raise ThreatModelError(f"label-only access answers predict(X) only, not {name!r}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a label-only interface is read-only")
