"""The language game: a split with members from one source and non-members from another is refused before any
work, bad text inputs exit 2 with nothing written, and a game on text records is refused for a non-text dataset."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from arena.cli import main
from arena.games.language.game import SHIFT, LanguageGame
from arena.games.language.spec import LanguageGameSpec
from arena_plugins.text import PydocTopics, PydocTopicsParams

SCENARIO = """
name: lang
seeds: [0]
tracks:
  - name: t
    dataset: {dataset}
    model: {{name: gpt2, layers: 1, dim: 16, heads: 2}}
    training: {{epochs: 1, lr: 0.01, batch_size: 8}}
    game: {game}
    defenses: [{{name: lm-finetune}}]
    attacks: [{{name: lm-loss}}]
"""


def _write(tmp_path: Path, dataset: str, game: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(dataset=dataset, game=game))
    return path


def test_a_split_by_source_is_refused_as_measuring_a_shift() -> None:
    ds = PydocTopics().load(PydocTopicsParams(length=16, limit=100))
    spec = LanguageGameSpec(name="language", members=20, test=10, split="by-source")
    assert LanguageGame.problems(spec, ds) == [("split", SHIFT)]
    assert LanguageGame.problems(LanguageGameSpec(name="language", members=20, test=10), ds) == []


@pytest.mark.slow
def test_a_shifted_split_exits_2_at_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "{name: pydoc-topics, length: 16, limit: 100}",
                  "{name: language, members: 20, test: 10, split: by-source}")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tracks[0].game.split" in err and "not membership" in err


@pytest.mark.parametrize(("content", "field"), [(None, "dataset.paths"), ('{"text": 1}\n', "dataset.field")])
def test_bad_text_input_exits_2_naming_file_and_field_with_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, field: str) -> None:
    data = tmp_path / "d.jsonl"
    if content is not None:
        data.write_text(content)
    path = _write(tmp_path, f"{{name: text, paths: [{data}]}}", "{name: language, members: 20, test: 10}")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"tracks[0].{field}" in err and "d.jsonl" in err
    assert not out.exists()


def test_the_language_game_needs_a_text_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "{name: digits}", "{name: language, members: 20, test: 10}")
    assert main(["validate", str(path)]) == 2
    assert "text datasets" in capsys.readouterr().err


def test_canaries_that_do_not_fit_the_records_or_the_tokenizer_are_refused() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    ds = PydocTopics().load(PydocTopicsParams(length=16, limit=100))
    fits = LanguageGameSpec.model_validate({"name": "language", "members": 20, "test": 10, "exposure": {"digits": 2}})
    assert LanguageGame.problems(fits, ds) == []
    long = LanguageGameSpec.model_validate({"name": "language", "members": 20, "test": 10, "exposure": {"digits": 5}})
    [(field, why)] = LanguageGame.problems(long, ds)
    assert field == "exposure.prefix" and "more than the records' 16" in why
    words = Tokenizer(models.WordLevel({"<unk>": 0, "my": 1, "secret": 2}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    no_digits = replace(ds, tokenizer=words.to_str())
    [(field, why)] = LanguageGame.problems(fits, no_digits)
    assert field == "exposure" and "ten distinct tokens" in why


@pytest.mark.slow
def test_a_canary_longer_than_the_records_exits_2_naming_the_field_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "{name: pydoc-topics, length: 16, limit: 100}",
                  "{name: language, members: 20, test: 10, exposure: {digits: 5}}")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    assert "exposure.prefix" in capsys.readouterr().err
    assert not out.exists()


def test_exposure_canaries_count_in_the_training_set_size() -> None:
    spec = LanguageGameSpec.model_validate({"name": "language", "members": 50,
                                            "exposure": {"repetitions": [1, 10, 100], "per_level": 2}})
    assert LanguageGame.train_size(spec) == 50 + 2 * 111
    assert np.isclose(1.0 / LanguageGame.train_size(spec), 1 / 272)
