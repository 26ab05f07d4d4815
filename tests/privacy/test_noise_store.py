"""A calibration is computed once per configuration across processes, and a stored entry can never change a claim:
it is re-checked with the accountant and ignored when it misses the contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.privacy import accounting, noise_store

CONFIG = (3.0, 1.0, 40, 1e-5)  # target ε, q (1: the Gaussian, whose accounting is quick), steps, δ


@pytest.fixture
def counted(tmp_path: Path, monkeypatch) -> list[float]:
    """A private cache folder, no in-memory accountant cache, and the σ of every accountant call."""
    monkeypatch.setenv(noise_store.CACHE_ENV, str(tmp_path / "cache"))
    accounting.epsilon_under.cache_clear()
    calls: list[float] = []
    real = accounting.epsilon

    def epsilon(sigma: float, *args: object) -> float:
        calls.append(sigma)
        return real(sigma, *args)

    monkeypatch.setattr(accounting, "epsilon", epsilon)
    return calls


def test_a_second_calibration_makes_one_accountant_call_and_gives_the_same_sigma(counted: list[float]) -> None:
    first = accounting.calibrate_noise(*CONFIG)
    bisection = len(counted)
    assert bisection >= 5, "the first calibration bisects"
    accounting.epsilon_under.cache_clear()  # as in another process
    counted.clear()
    assert accounting.calibrate_noise(*CONFIG) == first
    assert counted == [first[0]], "one accountant call: the stored σ re-checked"
    assert 0.99 * CONFIG[0] <= first[1] <= CONFIG[0]


def test_an_entry_that_misses_the_contract_is_ignored_and_replaced(counted: list[float]) -> None:
    sigma, achieved = accounting.calibrate_noise(*CONFIG)
    (entry,) = (noise_store.cache_root() / noise_store.NAMESPACE).glob("*.json")
    for tampered in (sigma / 2, sigma * 3):  # ε above the target; ε far below 0.99 of it
        entry.write_text(entry.read_text().replace(repr(sigma), repr(tampered)))
        assert noise_store.load_sigma(_key()) == tampered
        assert accounting.calibrate_noise(*CONFIG) == (sigma, achieved)
        assert noise_store.load_sigma(_key()) == sigma, "the bisection's σ is stored again"


@pytest.mark.parametrize("text", ["", "{", '{"sigma": "1.0"}', '{"sigma": -1.0}', '{"sigma": true}',
                                  '{"sigma": NaN}', '{"nothing": 1}', "[1.0]"])
def test_a_malformed_entry_reads_as_absent(text: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(noise_store.CACHE_ENV, str(tmp_path))
    noise_store.store_sigma(("k",), 1.5)
    assert noise_store.load_sigma(("k",)) == 1.5
    (entry,) = (tmp_path / noise_store.NAMESPACE).glob("*.json")
    entry.write_text(text)
    assert noise_store.load_sigma(("k",)) is None


def test_an_unwritable_cache_folder_only_costs_the_bisection(counted: list[float], tmp_path: Path,
                                                              monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(noise_store.CACHE_ENV, str(blocker))
    first = accounting.calibrate_noise(*CONFIG)
    assert accounting.calibrate_noise(*CONFIG) == first
    assert not list(tmp_path.glob("**/*.json"))


def test_the_folder_is_the_users_cache_unless_configured(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv(noise_store.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert noise_store.cache_root() == tmp_path / "privacy-arena"
    monkeypatch.setenv(noise_store.CACHE_ENV, str(tmp_path / "mine"))
    assert noise_store.cache_root() == tmp_path / "mine"


def _key() -> tuple:
    return accounting.calibration_key(*CONFIG, "rdp")
