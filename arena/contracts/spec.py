"""The scenario's typed form: tracks, plugin references, the training recipe and a game's spec (pydantic models,
unknown keys forbidden). What a plugin reads of the scenario it plays in; ``arena.pipeline.scenario`` reads the
files."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SerializeAsAny,
    field_validator,
)

MAX_TIMEOUT = 7 * 24 * 3600.0
MAX_RETRIES = 100
MAX_SEEDS = 10_000
MAX_SEED = 2**63 - 1
MAX_TRACKS = 1_000
MAX_EPOCHS = 100_000
MAX_LR = 1e4


class Strict(BaseModel):
    """Unknown keys forbidden, and strict types: ``true`` is not a number, ``"5"`` not an integer (an integer
    still serves where a float is asked)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PluginRef(BaseModel):
    """A plugin named by its registered name; every other key is a parameter its plugin validates."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    name: str = Field(min_length=1)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


MAX_LABEL = 40


class EntryRef(PluginRef):
    """A defense or attack entry of a track: a plugin reference that may carry a ``label`` for tables and figures
    (short, printable, unique among the track's defenses or attacks; planning checks it). Without one, the label is
    the plugin's name plus the parameters that differ between entries of that plugin on the track."""

    label: str | None = Field(default=None, min_length=1, max_length=MAX_LABEL)

    @field_validator("label")
    @classmethod
    def _printable(cls, label: str | None) -> str | None:
        if label is not None and (label != label.strip() or not label.isprintable()):
            raise ValueError("a label holds printable characters only, without leading or trailing spaces")
        return label


class AugmentSpec(Strict):
    """Training-time augmentation of image records, drawn per model from its train seed."""

    crop: NonNegativeInt = Field(default=0, le=64, description="pad by this many pixels, cut a random window")
    flip: bool = Field(default=False, description="mirror left-right with probability 1/2")


class TrainingSpec(Strict):
    epochs: PositiveInt = Field(le=MAX_EPOCHS)
    lr: PositiveFloat = Field(allow_inf_nan=False, le=MAX_LR)
    batch_size: PositiveInt | None = None
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0)
    solver: Literal["auto", "gradient", "newton"] = "auto"
    augment: AugmentSpec = Field(default_factory=AugmentSpec)
    ema: float = Field(default=0.0, ge=0.0, lt=1.0, description="decay of the released moving average of iterates")


class TrainingOverride(Strict):
    """A defense entry's ``training``: the fields it sets replace the track's recipe for that defense's release
    and for the shadow models attacks train with it (DP-SGD wants larger batches and fewer epochs)."""

    epochs: PositiveInt | None = Field(default=None, le=MAX_EPOCHS)
    lr: PositiveFloat | None = Field(default=None, allow_inf_nan=False, le=MAX_LR)
    batch_size: PositiveInt | None = None
    momentum: float | None = Field(default=None, ge=0.0, lt=1.0)
    augment: AugmentSpec | None = None
    ema: float | None = Field(default=None, ge=0.0, lt=1.0)

    def apply(self, base: TrainingSpec) -> TrainingSpec:
        return TrainingSpec.model_validate({**base.model_dump(), **self.model_dump(exclude_unset=True)})


class GameSpec(BaseModel):
    """A track's ``game:``: the registered game's name and its parameters.

    As read from the file it keeps every other key unchecked (``options``); planning validates it with the
    registered game's ``Spec`` (a subclass of this class with ``extra="forbid"``) and puts that in its place,
    so the field paths of its errors read ``tracks[0].game.<field>``."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    name: str = Field(min_length=1)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def required_points(self) -> int:
        """How many dataset records the game needs (checked against the dataset); 0 when it cannot say."""
        return 0


class Track(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    dataset: PluginRef
    model: PluginRef
    training: TrainingSpec
    game: SerializeAsAny[GameSpec]
    defenses: list[EntryRef] = Field(min_length=1)
    attacks: list[EntryRef] = Field(min_length=1)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    pool_chunk: PositiveInt = Field(default=32, description="shadow models per independently scheduled chunk")
    engine: Literal["auto", "batched", "loop"] = Field(
        default="auto", description="what trains the track's models: auto (the batched engine where it trains the "
        "module as written, else the loop engine), batched (torch.func, K models at once) or loop (plain PyTorch, one "
        "model at a time, Opacus for DP-SGD)")


class Scenario(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    seeds: list[Annotated[NonNegativeInt, Field(le=MAX_SEED)]] = Field(min_length=1, max_length=MAX_SEEDS)
    tracks: list[Track] = Field(min_length=1, max_length=MAX_TRACKS)
    timeout: PositiveFloat = Field(default=3600.0, le=MAX_TIMEOUT, allow_inf_nan=False,
                                   description="seconds one matchup may take (at most 7 days)")
    retries: NonNegativeInt = Field(default=2, le=MAX_RETRIES,
                                    description="re-runs of a matchup whose worker process died (at most 100)")
    rank_by: str | None = Field(default=None, min_length=1, max_length=100,
                                description="the metric tracks are ranked by (default: the game's default ranking "
                                            "metric); a track whose game has no such metric keeps its default")

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds must be distinct")
        return seeds

    @field_validator("tracks")
    @classmethod
    def _unique_tracks(cls, tracks: list[Track]) -> list[Track]:
        names = [t.name for t in tracks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"track names must be distinct; repeated: {', '.join(dup)}")
        return tracks
