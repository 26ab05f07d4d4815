"""A dataset plugin: seeded Gaussian blobs, a tabular classification set generated on the spot (no download).

Scenario files name it ``dataset: {name: example-blobs, n: 600, features: 8, classes: 3}``. The same parameters
always give the same records, so the set's fingerprint, and with it every cache key, is stable across machines.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, PositiveInt, ValidationInfo, field_validator

from arena import Dataset, DatasetLoader, PluginParams, hookimpl, minmax_scale


class BlobsParams(PluginParams):
    """What ``dataset:`` may say besides ``name`` (an unknown key is an error naming it)."""

    n: PositiveInt = Field(default=600, le=200_000, description="records")
    features: PositiveInt = Field(default=8, le=1_000, description="columns")
    classes: int = Field(default=3, ge=2, le=100, description="labels, one blob each")
    spread: float = Field(default=1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                          description="standard deviation of each blob around its centre (centres are ~N(0, 1))")
    binary: int = Field(default=0, ge=0, description="how many trailing columns are cut at their median into 0/1 "
                        "(a categorical attribute, e.g. for the example-attribute game)")
    label_noise: float = Field(default=0.0, ge=0.0, lt=1.0,
                               description="share of records whose label is redrawn uniformly at random")
    seed: int = Field(default=0, ge=0, lt=2**32)

    @field_validator("binary")
    @classmethod
    def _binary_fits(cls, binary: int, info: ValidationInfo) -> int:
        # fields are validated in order: ``features`` (declared above) is in info.data once it is valid
        features = info.data.get("features")
        if features is not None and binary > features:
            raise ValueError(f"{binary} binary columns but only {features} features")
        return binary


class Blobs(DatasetLoader):
    """One Gaussian blob per class; optional binary columns and label noise; every column scaled to [0, 1]."""

    name = "example-blobs"
    version = "1"
    Params = BlobsParams

    def load(self, params: BlobsParams) -> Dataset:
        rng = np.random.default_rng(params.seed)
        centres = rng.normal(size=(params.classes, params.features))
        y = rng.integers(params.classes, size=params.n)
        X = centres[y] + params.spread * rng.normal(size=(params.n, params.features))
        if params.binary:
            tail = X[:, params.features - params.binary :]
            X[:, params.features - params.binary :] = tail > np.median(tail, axis=0)
        noisy = rng.random(params.n) < params.label_noise
        y[noisy] = rng.integers(params.classes, size=int(noisy.sum()))
        # Dataset wants float32 features in [0, 1], one row per record, int64 labels, and one record's shape.
        return Dataset(self.name, minmax_scale(X), y.astype(np.int64), params.classes, "tabular", (params.features,))


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001 - the registry's callback
    register(Blobs)
