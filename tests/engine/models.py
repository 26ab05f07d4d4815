"""Small user modules for the training-semantics tests: a residual MLP with dropout and a ResNet-like CNN with
BatchNorm, as model plugins (the contract's duck type: name, version, params, build, dense)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from arena.contracts.model import ModelParams
from arena.engine.architecture import Architecture


class ResidualMLP(nn.Module):
    """x → Linear → [ReLU, Dropout, Linear] + skip → Linear: the issue's residual MLP with dropout."""

    def __init__(self, d: int, width: int, n_classes: int, p: float, functional: bool = False) -> None:
        super().__init__()
        self.inp, self.hidden, self.out = nn.Linear(d, width), nn.Linear(width, width), nn.Linear(width, n_classes)
        self.p, self.functional = p, functional
        self.drop = nn.Identity() if functional else nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.inp(x.flatten(1)))
        h = F.dropout(h, self.p, self.training) if self.functional else self.drop(h)
        return self.out(h + self.hidden(F.relu(h)))


class Block(nn.Module):
    """A torchvision-style basic block: conv, BatchNorm, ReLU, conv, BatchNorm, plus the input."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class TinyResNet(nn.Module):
    """Stem conv + BatchNorm, two basic blocks, global average pool, linear head (torchvision's ResNet, tiny)."""

    def __init__(self, c_in: int, width: int, n_classes: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.layer1 = nn.Sequential(Block(width), Block(width))
        self.fc = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer1(F.relu(self.bn1(self.conv1(x))))
        return self.fc(h.mean(dim=(2, 3)))


class DropoutParams(ModelParams):
    width: int = 16
    dropout: float = 0.0
    functional: bool = False


class ResNetParams(ModelParams):
    width: int = 8


class _Plugin:
    version = "1"

    def __init__(self, params: ModelParams) -> None:
        self.params = params

    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> None:
        return None


class DropoutPlugin(_Plugin):
    name = "residual-mlp"

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        p = self.params
        return ResidualMLP(int(torch.tensor(input_shape).prod()), p.width, n_classes, p.dropout, p.functional)


class ResNetPlugin(_Plugin):
    name = "tiny-resnet"

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        return TinyResNet(input_shape[0], self.params.width, n_classes)


def dropout_mlp(d: int, n_classes: int, dropout: float, **params: object) -> Architecture:
    return Architecture(DropoutPlugin(DropoutParams(dropout=dropout, **params)), (d,), n_classes)


def tiny_resnet(input_shape: tuple[int, int, int], n_classes: int, **params: object) -> Architecture:
    return Architecture(ResNetPlugin(ResNetParams(**params)), input_shape, n_classes)
