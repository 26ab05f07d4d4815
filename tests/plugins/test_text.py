"""Text datasets: records from documents or chunks, the tokenizer trained on public documents only, sources kept,
and bad input refused naming its file and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from arena import PAD, TextDataset
from arena_plugins.text import (
    LocalText,
    LocalTextParams,
    PydocTopics,
    PydocTopicsParams,
    TextParams,
    TokenizerSpec,
    build,
    encode,
    make_records,
    train_bpe,
)

SEED = 4
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]


def _docs(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=12)) + f" number {i}." for i in range(n)]


def test_document_records_are_truncated_and_padded() -> None:
    params = TextParams(length=5, min_tokens=2)
    X, doc = make_records([[1, 2, 3, 4, 5, 6, 7], [8, 9], [10]], params, eos=0)
    assert X.tolist() == [[1, 2, 3, 4, 5], [8, 9, PAD, PAD, PAD]]  # the one-token document is dropped
    assert doc.tolist() == [0, 1]


def test_chunk_records_join_documents_with_end_of_text() -> None:
    X, doc = make_records([[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]], TextParams(records="chunks", length=4), eos=0)
    assert X.tolist() == [[1, 2, 3, 0], [4, 5, 0, 6], [7, 8, 9, 0]]  # "10 <eos>" does not fill a record: dropped
    assert doc.tolist() == [0, 1, 2]  # the document each record starts in


def test_the_tokenizer_is_trained_on_public_documents_only() -> None:
    docs = _docs(40, 0)
    docs[3] = "zyxw " * 30  # a private oddity: if the tokenizer saw it, "zyxw" would be one merged token
    params = TextParams(length=16, min_tokens=1, public=0.5, seed=SEED, tokenizer=TokenizerSpec(vocab=300))
    order = np.random.default_rng(SEED).permutation(40)
    assert 3 not in order[:20]  # this seed keeps document 3 private
    ds = build("t", docs, np.zeros(40, dtype=np.int64), ("s",), params)
    assert ds.kind == "text" and ds.X.shape[1] == 16 and len(ds.X) == 20  # only the 20 private documents
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(ds.tokenizer)
    assert len(tok.encode("zyxw").ids) > 1
    assert tok.to_str() == train_bpe([docs[i] for i in sorted(order[:20])], 300)


def test_pydoc_topics_needs_no_download_and_keeps_ids_below_the_vocabulary() -> None:
    ds = PydocTopics().load(PydocTopicsParams(length=32, limit=200))
    assert isinstance(ds, TextDataset) and ds.n == 200 and ds.shape == (32,)
    real = ds.X[ds.X != PAD]
    assert real.min() >= 0 and real.max() < ds.n_classes == 512
    assert (ds.X[:, :8] != PAD).all()  # min_tokens 8: every record has at least 8 tokens
    again = PydocTopics().load(PydocTopicsParams(length=32, limit=200))
    assert again.fingerprint() == ds.fingerprint()


def test_local_files_are_sources(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("\n\n".join(_docs(30, 1)))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in _docs(30, 2)))
    ds = LocalText().load(LocalTextParams(paths=[tmp_path / "a.txt", tmp_path / "b.jsonl"], length=16,
                                          min_tokens=2, tokenizer=TokenizerSpec(vocab=300)))
    assert ds.sources == (str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl"))
    assert sorted(set(ds.source.tolist())) == [0, 1] and ds.n == 48  # 60 documents, 12 public
    tok_ids = encode(ds.tokenizer, ["alpha beta"])[0]
    assert len(tok_ids) >= 2


def test_a_local_tokenizer_file_is_used_as_given(tmp_path: Path) -> None:
    (tmp_path / "tok.json").write_text(train_bpe(_docs(20, 5), 320))
    (tmp_path / "a.txt").write_text("\n".join(_docs(20, 6)))
    ds = LocalText().load(LocalTextParams(paths=[tmp_path / "a.txt"], split="lines", length=16, min_tokens=2,
                                          public=0.0, tokenizer=TokenizerSpec(path=tmp_path / "tok.json")))
    assert ds.n == 20 and ds.tokenizer == (tmp_path / "tok.json").read_text()


@pytest.mark.parametrize(("content", "message"), [
    (None, "paths: "),
    ('{"text": "fine"}\n{"text": 3}\n', "field: "),
    ('{"text": "fine"}\nnot json\n', "paths: "),
])
def test_bad_files_name_the_file_and_field(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "d.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=f"^{message}.*d.jsonl") as err:
        LocalText().load(LocalTextParams(paths=[path]))
    if content is not None:
        assert ":2:" in str(err.value)  # the line


def test_too_few_tokens_for_a_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("\n\n".join(_docs(20, 1)))
    with pytest.raises(ValueError, match="^length: 0 record"):
        LocalText().load(LocalTextParams(paths=[tmp_path / "a.txt"], min_tokens=500, length=600,
                                         tokenizer=TokenizerSpec(vocab=300)))


def test_a_tokenizer_is_given_one_way() -> None:
    with pytest.raises(ValueError, match="exactly one of path"):
        TokenizerSpec(path=Path("x.json"), vocab=400)
    with pytest.raises(ValueError, match="public"):
        TextParams(public=0.0)
