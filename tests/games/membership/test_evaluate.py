"""Bring your own scores: ``arena.evaluate`` and ``arena evaluate FILE`` give every membership metric as
scikit-learn computes it, ``n/r`` where the non-members cannot resolve an FPR, bootstrap intervals around the
estimate, and a ROC figure whose PDF embeds no Type 3 font; a bad file is exit 2 naming the file and the field,
and nothing is written."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

import arena
from arena.cli import EXIT_INPUT, EXIT_OK, main


def sklearn_tpr_at(is_member: np.ndarray, scores: np.ndarray, fpr_level: float) -> float:
    fpr, tpr, _ = roc_curve(is_member, scores, drop_intermediate=False)
    return float(tpr[fpr <= fpr_level + 1e-12].max())


def random_scores(seed: int, members: int, nonmembers: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    is_member = np.r_[np.ones(members, dtype=int), np.zeros(nonmembers, dtype=int)]
    scores = rng.normal(size=members + nonmembers) + shift * is_member  # continuous: no ties
    perm = rng.permutation(len(scores))
    return scores[perm], is_member[perm]


@pytest.mark.parametrize(("seed", "members", "nonmembers", "shift"),
                         [(0, 500, 500, 1.0), (1, 300, 2000, 0.5), (2, 2000, 1200, 2.0), (3, 50, 50, 0.0)])
def test_the_metrics_are_scikit_learns(seed: int, members: int, nonmembers: int, shift: float) -> None:
    scores, is_member = random_scores(seed, members, nonmembers, shift)
    assert len(np.unique(scores)) == len(scores)
    result = arena.evaluate(scores, is_member, resamples=200)
    assert result.metrics["auc"] == pytest.approx(roc_auc_score(is_member, scores), abs=1e-12)
    fpr, tpr, _ = roc_curve(is_member, scores)
    assert result.metrics["advantage"] == pytest.approx(float(np.max(tpr - fpr)), abs=1e-12)
    for level in (0.1, 0.01, 0.001):
        key = f"tpr@{level * 100:g}%fpr"
        if level * nonmembers < 1:
            assert result.metrics[key] is None and result.value(key) == "n/r"  # never a number
            assert result.intervals[key] is None
        else:
            assert result.metrics[key] == pytest.approx(sklearn_tpr_at(is_member, scores, level), abs=1e-12)
    assert (result.n_members, result.n_nonmembers) == (members, nonmembers)


def test_intervals_hold_the_estimate_and_follow_the_seed() -> None:
    scores, is_member = random_scores(4, 400, 400, 1.0)
    result = arena.evaluate(scores, is_member, resamples=500, seed=7)
    for metric in ("auc", "advantage", "tpr@10%fpr", "tpr@1%fpr"):
        low, high = result.intervals[metric]
        assert 0.0 <= low <= result.metrics[metric] <= high <= 1.0
        assert high - low > 0.005  # 400 + 400 points: not a point
    again = arena.evaluate(scores, is_member, resamples=500, seed=7)
    other = arena.evaluate(scores, is_member, resamples=500, seed=8)
    assert again.intervals == result.intervals and other.intervals != result.intervals
    # 400 non-members resolve 1% FPR (4 false positives) but not 0.1%
    assert result.metrics["tpr@0.1%fpr"] is None and result.as_dict()["metrics"]["tpr@0.1%fpr"] == "n/r"
    frame = result.frame()
    assert math.isnan(frame.loc["tpr@0.1%fpr", "value"]) and not frame.loc["tpr@0.1%fpr", "resolvable"]
    assert "n/r" in result.table() and "not measurable" in result.table()


def test_decisions_add_the_balanced_accuracy() -> None:
    scores, is_member = random_scores(5, 200, 200, 1.5)
    result = arena.evaluate(scores, is_member, decisions=scores > 0.75, resamples=50)
    expected = ((scores > 0.75)[is_member == 1].mean() + (scores <= 0.75)[is_member == 0].mean()) / 2
    assert result.metrics["balanced_accuracy"] == pytest.approx(expected)
    assert "balanced_accuracy" not in arena.evaluate(scores, is_member, resamples=0).metrics


@pytest.mark.parametrize(("scores", "is_member", "field", "says"), [
    ([0.1, float("nan"), 0.3], [1, 0, 1], "scores", "NaN or infinite"),
    ([0.1, 0.2, 0.3], [1, 0, 2], "is_member", "0/1"),
    ([0.1, 0.2, 0.3], [1, 0], "is_member", "2 values, but scores has 3"),
    ([0.1, 0.2], [1, 1], "is_member", "members and non-members"),
    ([[0.1, 0.2]], [1, 0], "scores", "1-D"),
    (["a", "b"], [1, 0], "scores", "not numbers"),
])
def test_bad_input_names_the_field(scores, is_member, field: str, says: str) -> None:
    with pytest.raises(arena.EvaluationInputError) as exc:
        arena.evaluate(scores, is_member)
    assert exc.value.field == field and says in str(exc.value) and str(exc.value).startswith(f"{field}: ")


@pytest.mark.slow
def test_the_cli_reads_npz_and_csv_alike_and_writes_the_figure(tmp_path: Path, capsys) -> None:
    scores, is_member = random_scores(6, 300, 300, 1.0)
    np.savez(tmp_path / "mine.npz", scores=scores, is_member=is_member)
    (tmp_path / "mine.csv").write_text("is_member,scores\n" + "".join(f"{m},{float(s)!r}\n" for s, m in
                                                                     zip(scores, is_member)))
    outs = {}
    out = tmp_path / "out"
    for name, extra in (("mine.npz", ["--out", str(out)]), ("mine.csv", [])):
        assert main(["evaluate", str(tmp_path / name), "--format", "json", "--resamples", "100", *extra]) == EXIT_OK
        outs[name] = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "metrics.json", "roc.pdf", "roc.png", "roc.svg"]
    assert json.loads((out / "metrics.json").read_text()) == outs["mine.npz"]
    pdf = (out / "roc.pdf").read_bytes()
    assert b"/Type3" not in pdf and (b"/TrueType" in pdf or b"/CIDFontType2" in pdf)  # TrueType, not Type 3
    assert outs["mine.npz"] == outs["mine.csv"]
    assert outs["mine.npz"]["metrics"]["auc"] == pytest.approx(roc_auc_score(is_member, scores))
    assert outs["mine.npz"]["metrics"]["tpr@0.1%fpr"] == "n/r"


def _bad_files(tmp: Path) -> list[tuple[Path, str]]:
    good = np.r_[0.1, 0.9, 0.3, 0.7]
    np.savez(tmp / "no-scores.npz", score=good, is_member=[1, 0, 1, 0])
    np.savez(tmp / "short.npz", scores=good, is_member=[1, 0, 1])
    np.savez(tmp / "nan.npz", scores=np.r_[0.1, np.nan, 0.3, 0.7], is_member=[1, 0, 1, 0])
    np.savez(tmp / "objects.npz", scores=np.array([0.1, "x"], dtype=object), is_member=[1, 0])
    (tmp / "labels.csv").write_text("scores,is_member\n0.1,1\n0.2,yes\n")
    (tmp / "column.csv").write_text("score,is_member\n0.1,1\n0.2,0\n")
    (tmp / "nan.csv").write_text("scores,is_member\n0.1,1\nnan,0\n")
    (tmp / "text.csv").write_text("scores,is_member\n0.1,1\nhigh,0\n")
    (tmp / "broken.npz").write_bytes(b"not a zip archive")
    (tmp / "scores.txt").write_text("0.1 1\n")
    (tmp / "a-directory.npz").mkdir()
    return [(tmp / "no-scores.npz", "scores: missing"), (tmp / "short.npz", "is_member: 3 values, but scores has 4"),
            (tmp / "nan.npz", "scores: 1 value(s) NaN or infinite"), (tmp / "objects.npz", "scores: cannot be read"),
            (tmp / "labels.csv", "is_member: line 3: 'yes' is not 0/1"), (tmp / "column.csv", "scores: missing column"),
            (tmp / "nan.csv", "scores: line 3: 'nan' is NaN or infinite"),
            (tmp / "text.csv", "scores: line 3: 'high' is not a number"),
            (tmp / "broken.npz", "(file): not a readable .npz"), (tmp / "scores.txt", "(file): a .txt file"),
            (tmp / "a-directory.npz", "(file): not a file"), (tmp / "absent.csv", "(file): cannot read")]


def test_a_bad_file_is_exit_2_naming_the_file_and_the_field_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    for path, says in _bad_files(tmp_path):
        out = tmp_path / f"out-{path.name}"
        assert main(["evaluate", str(path), "--out", str(out)]) == EXIT_INPUT, path
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"{path}: {says}"), err
        assert not out.exists()


def _hostile_files(tmp: Path) -> list[tuple[Path, str]]:
    """Inputs of the hostile review (issue 40, M): complex scores, a malformed ``.npy`` header, a CSV field past
    csv's limit, a zip bomb whose arrays declare more than the cap."""
    import zipfile

    np.savez(tmp / "complex.npz", scores=np.r_[0.1, 0.9, 0.3, 0.7] + 1j, is_member=[1, 0, 1, 0])
    (tmp / "complex.csv").write_text("scores,is_member\n0.1+1j,1\n0.2,0\n")
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (4,), '''}"  # an unterminated string: TokenError
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + np.zeros(4).tobytes()
    with zipfile.ZipFile(tmp / "header.npz", "w") as z:
        z.writestr("scores.npy", npy)
        z.writestr("is_member.npy", npy)
    (tmp / "field.csv").write_text("scores,is_member\n" + "1" * (5 << 20) + ",1\n0.2,0\n")
    bomb = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    bomb["shape"] = (9 << 24,)  # 1.1 GiB of float64 zeros (over the 1 GiB cap), compressed to about 1 MB
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, bomb)
    with zipfile.ZipFile(tmp / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("scores.npy", "w", force_zip64=True) as f:
            f.write(out.getvalue())
            chunk = bytes(1 << 24)
            for _ in range(9 << 3):
                f.write(chunk)
        z.writestr("is_member.npy", npy)
    return [(tmp / "complex.npz", "scores: complex numbers"), (tmp / "complex.csv", "scores: line 2: '0.1+1j'"),
            (tmp / "header.npz", "(file): not a readable .npz archive"),
            (tmp / "field.csv", "(file): line 2: not a readable .csv row"),
            (tmp / "bomb.npz", "scores: declares 1207959680 bytes uncompressed")]


@pytest.mark.slow
def test_a_hostile_file_is_exit_2_in_one_line_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    import resource

    for path, says in _hostile_files(tmp_path):
        out = tmp_path / f"out-{path.name}"
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert main(["evaluate", str(path), "--out", str(out)]) == EXIT_INPUT, path
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert captured.out == "" and len(err.splitlines()) == 1, err[:500]
        assert err.startswith(f"{path}: {says}"), err[:500]
        assert not out.exists()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
        assert path.suffix == ".csv" or grown < 200 << 10, f"{path.name}: the peak memory grew by {grown} KiB"


def test_complex_scores_are_refused_not_cut_to_their_real_part() -> None:
    with pytest.raises(arena.EvaluationInputError, match="scores: complex numbers"):
        arena.evaluate(np.r_[0.1, 0.9] + 0j, [1, 0])
