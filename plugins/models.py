"""Built-in models: logistic regression, the MLP, a small CNN for 8×8 to 32×32 images, and the GroupNorm
Wide-ResNet that De et al. (2022) train with DP-SGD on CIFAR-10."""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, PositiveInt, model_validator
from torch import nn

from arena import Dense, Model, ModelParams, hookimpl

Activation = Literal["relu", "tanh", "sigmoid"]
_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


class DenseNet(nn.Module):
    """Flattened input through linear layers with an activation between them (none: logistic regression)."""

    def __init__(self, dims: list[int], activation: Activation) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in zip(dims, dims[1:]))
        self.act = _ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.act(h)
        return h


class LogRegParams(ModelParams):
    pass


class LogReg(Model):
    """Multinomial logistic regression on the flattened record; non-private training solves it exactly (Newton)."""

    name = "logreg"
    Params = LogRegParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        return DenseNet([math.prod(input_shape), n_classes], "relu")

    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> Dense:
        return Dense("logreg", math.prod(input_shape), n_classes, (), "relu", self.params.l2)


class MLPParams(ModelParams):
    hidden: list[PositiveInt] = Field(min_length=1, description="width of each hidden layer")
    activation: Activation = "relu"


class MLP(Model):
    """Fully connected network on the flattened record."""

    name = "mlp"
    Params = MLPParams
    params: MLPParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        return DenseNet([math.prod(input_shape), *self.params.hidden, n_classes], self.params.activation)

    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> Dense:
        p = self.params
        return Dense("mlp", math.prod(input_shape), n_classes, tuple(p.hidden), p.activation, p.l2)


Norm = Literal["none", "group", "batch"]


def _norm(kind: Norm, channels: int, groups: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(math.gcd(groups, channels), channels)
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    return nn.Identity()


def _image_shape(input_shape: tuple[int, ...], model: str) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ValueError(f"model {model!r} needs image records of shape (channels, height, width), "
                         f"not {tuple(input_shape)}")
    return input_shape


class CNNParams(ModelParams):
    channels: list[PositiveInt] = Field(default=[16, 32], min_length=1, description="filters per conv block")
    hidden: int = Field(default=64, ge=0, description="width of the dense layer before the output (0: none)")
    activation: Activation = "relu"
    norm: Norm = Field(default="none", description="group (DP-SGD safe), batch (mixes examples) or none")
    groups: PositiveInt = Field(default=8, description="GroupNorm groups (at most the channel count)")


class CNN(Model):
    """Conv blocks (3×3 conv, norm, activation, 2×2 max-pool while the map is at least 2×2), then a dense layer:
    about 14k parameters on 1×8×8 digits, 110k on 1×28×28 MNIST, 140k on 3×32×32 CIFAR-10."""

    name = "cnn"
    Params = CNNParams
    params: CNNParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        p = self.params
        c, h, w = _image_shape(input_shape, self.name)
        layers: list[nn.Module] = []
        for out in p.channels:
            layers += [nn.Conv2d(c, out, 3, padding=1), _norm(p.norm, out, p.groups), _ACTIVATIONS[p.activation]()]
            if min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            c = out
        layers.append(nn.Flatten())
        width = c * h * w
        if p.hidden:
            layers += [nn.Linear(width, p.hidden), _ACTIVATIONS[p.activation]()]
            width = p.hidden
        layers.append(nn.Linear(width, n_classes))
        return nn.Sequential(*layers)


class StandardizedConv2d(nn.Conv2d):
    """Convolution with weight standardisation (each filter centred and scaled to unit variance), which De et al.
    pair with GroupNorm in place of BatchNorm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return self._conv_forward(x, (w - mean) * torch.rsqrt(var + 1e-5), self.bias)


class _Block(nn.Module):
    """Pre-activation residual block: norm, act, conv, norm, act, conv; a 1×1 conv shortcut when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int, groups: int, act: type[nn.Module], conv: type) -> None:
        super().__init__()
        self.norm1, self.act1 = nn.GroupNorm(math.gcd(groups, c_in), c_in), act()
        self.conv1 = conv(c_in, c_out, 3, stride=stride, padding=1)
        self.norm2, self.act2 = nn.GroupNorm(math.gcd(groups, c_out), c_out), act()
        self.conv2 = conv(c_out, c_out, 3, padding=1)
        self.shortcut = conv(c_in, c_out, 1, stride=stride) if stride != 1 or c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.norm1(x))
        skip = x if self.shortcut is None else self.shortcut(h)
        return skip + self.conv2(self.act2(self.norm2(self.conv1(h))))


class WideResNet(nn.Module):
    def __init__(self, c_in: int, n_classes: int, depth: int, width: int, groups: int, act: type[nn.Module],
                 conv: type) -> None:
        super().__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        blocks: list[nn.Module] = [conv(c_in, widths[0], 3, padding=1)]
        for stage in range(3):
            for i in range(n):
                c = widths[stage] if i == 0 else widths[stage + 1]
                blocks.append(_Block(c, widths[stage + 1], 2 if (i == 0 and stage > 0) else 1, groups, act, conv))
        self.features = nn.Sequential(*blocks)
        self.norm, self.act = nn.GroupNorm(math.gcd(groups, widths[3]), widths[3]), act()
        self.head = nn.Linear(widths[3], n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.norm(self.features(x)))
        return self.head(h.mean(dim=(2, 3)))


class WRNParams(ModelParams):
    depth: int = Field(default=16, ge=10, description="6n + 4 layers (16: WRN-16-w, De et al.'s CIFAR-10 model)")
    width: PositiveInt = Field(default=4, description="widening factor w")
    groups: PositiveInt = Field(default=16, description="GroupNorm groups")
    activation: Activation = "relu"
    standardize: bool = Field(default=True, description="weight-standardised convolutions (De et al. 2022)")

    @model_validator(mode="after")
    def _depth(self) -> WRNParams:
        if (self.depth - 4) % 6:
            raise ValueError(f"depth must be 6n + 4 (10, 16, 22, 28, 40, ...), got {self.depth}")
        return self


class WRN(Model):
    """Wide-ResNet-depth-width with GroupNorm instead of BatchNorm and weight standardisation: the model De et al.
    (2022) train with DP-SGD on CIFAR-10 (WRN-16-4 reaches 79.5 % at ε = 8 with augmentation multiplicity)."""

    name = "wrn"
    Params = WRNParams
    params: WRNParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        p = self.params
        c, _, _ = _image_shape(input_shape, self.name)
        conv = StandardizedConv2d if p.standardize else nn.Conv2d
        return WideResNet(c, n_classes, p.depth, p.width, p.groups, _ACTIVATIONS[p.activation], conv)


@hookimpl
def register_models(register) -> None:  # noqa: ANN001
    for model in (LogReg, MLP, CNN, WRN):
        register(model)
