"""Scenario files: pydantic models (unknown keys forbidden), safe YAML loading, and error messages with field paths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
)


class ScenarioError(Exception):
    """One or more problems in scenario files; each problem names the file and the field path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginRef(BaseModel):
    """A plugin named by its registered name; every other key is a parameter its plugin validates."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(min_length=1)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class AugmentSpec(Strict):
    """Training-time augmentation of image records, drawn per model from its train seed."""

    crop: NonNegativeInt = Field(default=0, le=64, description="pad by this many pixels, cut a random window")
    flip: bool = Field(default=False, description="mirror left-right with probability 1/2")


class TrainingSpec(Strict):
    epochs: PositiveInt
    lr: PositiveFloat = Field(allow_inf_nan=False)
    batch_size: PositiveInt | None = None
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0)
    solver: Literal["auto", "gradient", "newton"] = "auto"
    augment: AugmentSpec = Field(default_factory=AugmentSpec)


class TrainingOverride(Strict):
    """A defense entry's ``training``: the fields it sets replace the track's recipe for that defense's release
    and for the shadow models attacks train with it (DP-SGD wants larger batches and fewer epochs)."""

    epochs: PositiveInt | None = None
    lr: PositiveFloat | None = Field(default=None, allow_inf_nan=False)
    batch_size: PositiveInt | None = None
    momentum: float | None = Field(default=None, ge=0.0, lt=1.0)
    augment: AugmentSpec | None = None

    def apply(self, base: TrainingSpec) -> TrainingSpec:
        return TrainingSpec.model_validate({**base.model_dump(), **self.model_dump(exclude_unset=True)})


class MembershipGameSpec(Strict):
    """Members and as many non-members are the challenge; population and test are disjoint from both."""

    name: Literal["membership"]
    members: PositiveInt
    test: PositiveInt = 400
    population: PositiveInt | None = None
    stratify: bool = True

    def required_points(self) -> int:
        return 2 * self.members + self.test + (self.population or 1)


class ReconstructionGameSpec(Strict):
    """Informed adversary: a fixed set D⁻, targets drawn from a pool disjoint from D⁻ and the shadow targets."""

    name: Literal["reconstruction"]
    fixed: PositiveInt = 100
    targets: PositiveInt = 50
    shadow_targets: PositiveInt = 500
    test: PositiveInt = 200
    init: Literal["known", "hidden"] = "known"

    def required_points(self) -> int:
        return self.fixed + self.targets + self.shadow_targets + self.test


GameSpec = Annotated[Union[MembershipGameSpec, ReconstructionGameSpec], Field(discriminator="name")]


class Track(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    dataset: PluginRef
    model: PluginRef
    training: TrainingSpec
    game: GameSpec
    defenses: list[PluginRef] = Field(min_length=1)
    attacks: list[PluginRef] = Field(min_length=1)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    pool_chunk: PositiveInt = Field(default=32, description="shadow models per independently scheduled chunk")


class Scenario(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    seeds: list[NonNegativeInt] = Field(min_length=1)
    tracks: list[Track] = Field(min_length=1)
    timeout: PositiveFloat = Field(default=3600.0, description="seconds one matchup may take")
    retries: NonNegativeInt = Field(default=2, description="re-runs of a matchup whose worker process died")

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


def field_path(loc: tuple[Any, ...]) -> str:
    """('tracks', 0, 'defenses', 1, 'epsilons') -> 'tracks[0].defenses[1].epsilons'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


_TAGGED_UNIONS = ("game",)


def _drop_union_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Pydantic puts the discriminator value after a tagged union's field ('model', 'mlp', ...); users wrote none."""
    out: list[Any] = []
    for part in loc:
        if out and out[-1] in _TAGGED_UNIONS and isinstance(part, str) and not _is_field(out[-1], part):
            continue
        out.append(part)
    return tuple(out)


def _is_field(union: str, name: str) -> bool:
    return any(name in spec.model_fields for spec in (MembershipGameSpec, ReconstructionGameSpec))


def pydantic_problems(source: str, prefix: str, exc: ValidationError) -> list[str]:
    """One line per pydantic error: 'file: field.path: message'."""
    problems = []
    for err in exc.errors():
        loc = _drop_union_tags(err["loc"])
        path = field_path(loc)
        full = f"{prefix}.{path}" if prefix and path != "(top level)" else (prefix or path)
        problems.append(f"{source}: {full}: {err['msg']}")
    return problems


class _NoTagsLoader(yaml.SafeLoader):
    """Safe YAML that also rejects every explicit tag, so ``!!python/...`` is named as the problem."""


def _reject_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag!r} is not allowed in scenario files", node.start_mark
    )


_NoTagsLoader.add_multi_constructor("tag:yaml.org,2002:python/", _reject_tag)
_NoTagsLoader.add_multi_constructor("!", _reject_tag)


def read_yaml(path: Path) -> Any:
    """Parse a scenario file with safe loading; raise ``ScenarioError`` for unreadable or invalid YAML."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read file: {exc.strerror or exc}"]) from None
    try:
        return yaml.load(text, Loader=_NoTagsLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError([f"{path}: invalid YAML: {where}{what}"]) from None


def parse_scenario(path: Path) -> Scenario:
    """Read and validate the shape of one scenario file (plugin names and parameters are checked later)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ScenarioError([f"{path}: (top level): expected a mapping with name, seeds and tracks"])
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(pydantic_problems(str(path), "", exc)) from None
