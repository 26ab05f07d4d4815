"""Text datasets for the language track: local plain text, JSONL or a Hugging Face ``save_to_disk`` folder, and a
built-in corpus that needs no download (the Python documentation's topics, ``pydoc_data.topics``, which ships
with Python). Records are documents (each truncated to ``length`` tokens and padded) or fixed-length chunks of the
concatenated text; the tokenizer is a local ``tokenizers`` JSON file or a byte-level BPE trained here.

What a trained tokenizer sees: only the ``public`` documents, a seeded share of the corpus that is set aside
before records are made and never becomes a record, so that no member (nor any challenge record) shapes the
vocabulary. Every size is checked before the work it bounds: file sizes before reading, the document count and
the records' memory before tokenizing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from arena import PAD, DatasetLoader, PluginParams, TextDataset, available_memory, hookimpl
from arena_plugins.datasets import regular_file

MAX_LENGTH = 4096
"""Longest record in tokens (the tiny models of the track take 64-256)."""
MAX_VOCAB = 1 << 20
"""Largest vocabulary a trained tokenizer may have (ids travel as float32, exact below 2^24)."""
MAX_DOCUMENTS = 10_000_000
MIN_CHARS = 1
SPECIALS = ("<|endoftext|>",)
"""The trained tokenizer's special token, id 0: the end of a document in ``chunks`` records."""


class TokenizerSpec(BaseModel):
    """``path``: a ``tokenizers`` JSON file (``tokenizer.json``); or ``vocab``: train a byte-level BPE of that size
    on the public documents."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    path: Path | None = Field(default=None, strict=False)
    vocab: PositiveInt | None = Field(default=None, ge=300, le=MAX_VOCAB,
                                      description="byte-level BPE vocabulary size (at least the 256 bytes + merges)")

    @model_validator(mode="after")
    def _one(self) -> TokenizerSpec:
        if (self.path is None) == (self.vocab is None):
            raise ValueError("give exactly one of path (a tokenizer.json) and vocab (train a byte-level BPE)")
        return self


class TextParams(PluginParams):
    """How documents become records."""

    model_config = ConfigDict(strict=True)
    records: Literal["documents", "chunks"] = Field(
        default="documents", description="documents: one record per document, truncated to length and padded; "
        "chunks: the documents joined by <|endoftext|> and cut into records of exactly length tokens")
    length: PositiveInt = Field(default=64, ge=2, le=MAX_LENGTH, description="tokens per record")
    min_tokens: PositiveInt = Field(default=8, description="documents: drop documents of fewer tokens")
    tokenizer: TokenizerSpec = Field(default_factory=lambda: TokenizerSpec(vocab=512))
    public: float = Field(default=0.2, ge=0.0, lt=1.0, description="share of documents set aside (never records) to "
                                                                   "train the tokenizer on")
    seed: int = Field(default=0, ge=0, lt=2**32, description="which documents are public")
    limit: PositiveInt | None = Field(default=None, description="keep at most this many records (the first ones)")

    @model_validator(mode="after")
    def _public(self) -> TextParams:
        if self.tokenizer.vocab is not None and self.public <= 0:
            raise ValueError("public: training a tokenizer needs public documents (public > 0)")
        return self


def train_bpe(documents: list[str], vocab: int) -> str:
    """A byte-level BPE tokenizer (GPT-2's pre-tokenizer and decoder) of ``vocab`` ids trained on ``documents``,
    as ``tokenizers`` JSON; id 0 is ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(documents, trainer=trainer)
    return str(tok.to_str())


def load_tokenizer(path: Path) -> str:
    """The JSON of a local ``tokenizers`` file, checked to load ('tokenizer.path: ...' otherwise)."""
    from tokenizers import Tokenizer

    try:
        text = regular_file(path).read_text(encoding="utf-8")
        Tokenizer.from_str(text)
    except ValueError as exc:
        raise ValueError(f"tokenizer.{exc}" if str(exc).startswith("path:") else f"tokenizer.path: {path}: {exc}"
                         ) from None
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises a bare Exception for a malformed file
        raise ValueError(f"tokenizer.path: {path}: not a tokenizers JSON file ({exc})") from None
    return text


def encode(tokenizer_json: str, documents: list[str]) -> list[list[int]]:
    """Token ids of each document (no special tokens added)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    return [e.ids for e in tok.encode_batch(documents, add_special_tokens=False)]


def end_of_text(tokenizer_json: str) -> int | None:
    """The id of ``<|endoftext|>`` (or ``</s>``) in the tokenizer, if it has one."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    for special in (*SPECIALS, "</s>"):
        i = tok.token_to_id(special)
        if i is not None:
            return int(i)
    return None


def make_records(ids: list[list[int]], params: TextParams, eos: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(X [n, length] float32 ids padded with PAD, document index of each record [n]) as ``params.records`` asks."""
    L = params.length
    if params.records == "documents":
        kept = [(i, d[:L]) for i, d in enumerate(ids) if len(d) >= params.min_tokens]
        X = np.full((len(kept), L), PAD, dtype=np.float32)
        for row, (_, d) in enumerate(kept):
            X[row, : len(d)] = d
        return X, np.array([i for i, _ in kept], dtype=np.int64)
    stream: list[int] = []
    owner: list[int] = []
    for i, d in enumerate(ids):
        piece = [*d, eos] if eos is not None else d
        stream += piece
        owner += [i] * len(piece)
    n = len(stream) // L
    X = np.asarray(stream[: n * L], dtype=np.float32).reshape(n, L)
    return X, np.asarray(owner[: n * L:L], dtype=np.int64)


def build(name: str, documents: list[str], doc_source: np.ndarray, sources: tuple[str, ...],
          params: TextParams) -> TextDataset:
    """The text dataset of ``documents`` (``doc_source[i]``: the index in ``sources`` of document i's origin):
    public documents set aside to train the tokenizer, the others tokenized into records."""
    if len(documents) < 2:
        raise ValueError(f"path: {len(documents)} document(s) of text; a membership game needs many")
    if len(documents) > MAX_DOCUMENTS:
        raise ValueError(f"path: {len(documents)} documents, more than the {MAX_DOCUMENTS} a text dataset may have")
    order = np.random.default_rng(params.seed).permutation(len(documents))
    n_public = int(round(params.public * len(documents)))
    public = sorted(order[:n_public].tolist())
    private = sorted(order[n_public:].tolist())
    need = len(private) * params.length * 4 * 2  # X and the list it is built from
    if need > available_memory():
        raise ValueError(f"length: {len(private)} records of {params.length} tokens need {need / 2**30:.3g} GiB")
    if params.tokenizer.path is not None:
        tokenizer = load_tokenizer(params.tokenizer.path)
    else:
        assert params.tokenizer.vocab is not None
        tokenizer = train_bpe([documents[i] for i in public], params.tokenizer.vocab)
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_str(tokenizer).get_vocab_size(with_added_tokens=True)
    if vocab > MAX_VOCAB:
        raise ValueError(f"tokenizer.path: a vocabulary of {vocab} ids, more than the {MAX_VOCAB} a record can hold")
    ids = encode(tokenizer, [documents[i] for i in private])
    X, doc = make_records(ids, params, end_of_text(tokenizer))
    if params.limit is not None:
        X, doc = X[: params.limit], doc[: params.limit]
    if len(X) < 2:
        raise ValueError(f"length: {len(X)} record(s) of {params.length} tokens from {len(private)} documents "
                         f"(records: {params.records}, min_tokens: {params.min_tokens}); lower them or add text")
    source = doc_source[np.asarray(private)[doc]]
    return TextDataset(name, X, np.zeros(len(X), dtype=np.int64), vocab, "text", (params.length,),
                       tokenizer=tokenizer, sources=sources, source=source.astype(np.int64))


class LocalTextParams(TextParams):
    paths: list[Annotated[Path, Field(strict=False)]] = Field(min_length=1, max_length=1000,
                              description="text files (.txt: one document per paragraph or line; .jsonl: one JSON "
                                          "object per line) or save_to_disk folders; each is a source")
    split: Literal["paragraphs", "lines"] = Field(default="paragraphs", description=".txt: what a document is")
    field: str = Field(default="text", min_length=1, description=".jsonl and save_to_disk: the text field")


def _documents(path: Path, params: LocalTextParams) -> list[str]:
    """The documents of one source file or folder ('path: ...' naming it when it cannot be read)."""
    if path.is_dir():
        from arena_plugins.hf import _datasets, check_saved

        check_saved(path)
        ds: Any = _datasets().load_from_disk(str(path))
        if hasattr(ds, "keys"):
            ds = ds[sorted(ds.keys())[0]]
        if params.field not in ds.column_names:
            raise ValueError(f"field: {path}: no column {params.field!r} (columns: {', '.join(ds.column_names)})")
        return [str(t) for t in ds[params.field]]
    raw = regular_file(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"path: {path}: not UTF-8 text (byte {exc.start})") from None
    if path.suffix == ".jsonl":
        docs = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"path: {path}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get(params.field), str):
                raise ValueError(f"field: {path}:{lineno}: no string field {params.field!r}")
            docs.append(obj[params.field])
        return docs
    sep = "\n\n" if params.split == "paragraphs" else "\n"
    return [d.strip() for d in text.split(sep) if d.strip()]


class LocalText(DatasetLoader):
    """Documents from local files: plain text (paragraphs or lines), JSONL or a Hugging Face ``save_to_disk``
    folder; each path is one source."""

    name = "text"
    Params = LocalTextParams

    def load(self, params: BaseModel) -> TextDataset:
        assert isinstance(params, LocalTextParams)
        try:
            return self._load(params)
        except ValueError as exc:  # the shared file checks name 'path'; this loader's field is 'paths'
            text = str(exc)
            raise ValueError(f"paths{text[4:]}" if text.startswith("path:") else text) from None

    def _load(self, params: LocalTextParams) -> TextDataset:
        for p in params.paths:  # every size checked before anything is read
            if p.is_dir():
                from arena_plugins.hf import check_saved

                check_saved(p)
            else:
                regular_file(p)
        docs: list[str] = []
        origin: list[int] = []
        for i, p in enumerate(params.paths):
            found = _documents(p, params)
            docs += found
            origin += [i] * len(found)
        return build("text", docs, np.asarray(origin, dtype=np.int64), tuple(str(p) for p in params.paths), params)


class PydocTopicsParams(TextParams):
    min_chars: PositiveInt = Field(default=80, description="drop paragraphs shorter than this")


class PydocTopics(DatasetLoader):
    """The Python documentation's topics (``pydoc_data.topics``, shipped with Python), one document per paragraph
    of at least ``min_chars`` characters (1,530 at the default 80 on Python 3.12). The Python version changes the
    text, so the fingerprint of the records keys every cache."""

    name = "pydoc-topics"
    Params = PydocTopicsParams

    def load(self, params: BaseModel) -> TextDataset:
        assert isinstance(params, PydocTopicsParams)
        from pydoc_data.topics import topics

        docs = [p.strip() for key in sorted(topics) for p in topics[key].split("\n\n")
                if len(p.strip()) >= params.min_chars]
        return build("pydoc-topics", docs, np.zeros(len(docs), dtype=np.int64), ("pydoc_data.topics",), params)


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001
    register(LocalText)
    register(PydocTopics)
