"""Causal language models from Hugging Face ``transformers``, for text datasets (``arena.TextDataset``): a GPT-2 or
a Llama built from a small config (the CPU scenario's and the tests'), or a model saved with ``save_pretrained`` in
a local folder. Nothing is ever downloaded: the offline flags are set before ``transformers`` is imported and a
local model is opened with ``local_files_only``.

The module a plugin builds (``CausalLM``) takes a batch of records as the arena passes them, token ids as floats
[B, length] padded with ``arena.PAD``, and returns next-token logits [B, length, vocabulary]: position t predicts
token t + 1. ``n_classes`` is the dataset's vocabulary size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, PositiveInt

from arena import PAD, Model, ModelParams, hookimpl


def transformers_module() -> Any:
    """``transformers``, imported offline (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE), or a ValueError saying how to
    install it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import transformers
    except ImportError:
        raise ValueError("name: language models need the transformers library, which is not installed "
                         "(pip install 'privacy-arena[language]')") from None
    transformers.logging.set_verbosity_error()
    return transformers


class CausalLM(torch.nn.Module):
    """A ``transformers`` causal LM taking float token ids [B, L] padded with PAD; logits [B, L, V]."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        ids = X.long()
        mask = ids != PAD
        return self.lm(input_ids=ids.clamp(min=0), attention_mask=mask.long()).logits


class TinyLMParams(ModelParams):
    layers: PositiveInt = Field(default=2, le=48)
    dim: PositiveInt = Field(default=64, le=8192, description="hidden size")
    heads: PositiveInt = Field(default=4, le=128)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="GPT-2: residual, embedding and attention dropout")


def _check_heads(params: TinyLMParams) -> None:
    if params.dim % params.heads:
        raise ValueError(f"heads: dim {params.dim} is not a multiple of heads {params.heads}")


class GPT2(Model):
    """GPT-2 (Radford et al. 2019) of ``layers`` blocks of width ``dim``, context the record length."""

    name = "gpt2"
    Params = TinyLMParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
        p = self.params
        assert isinstance(p, TinyLMParams)
        _check_heads(p)
        tf = transformers_module()
        config = tf.GPT2Config(vocab_size=n_classes, n_positions=input_shape[-1], n_embd=p.dim, n_layer=p.layers,
                               n_head=p.heads, resid_pdrop=p.dropout, embd_pdrop=p.dropout, attn_pdrop=p.dropout,
                               bos_token_id=0, eos_token_id=0)
        config._attn_implementation = "eager"
        return CausalLM(tf.GPT2LMHeadModel(config))


class Llama(Model):
    """A Llama (Touvron et al. 2023): RMSNorm, rotary positions, SwiGLU, of ``layers`` blocks of width ``dim``."""

    name = "llama"
    Params = TinyLMParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
        p = self.params
        assert isinstance(p, TinyLMParams)
        _check_heads(p)
        tf = transformers_module()
        config = tf.LlamaConfig(vocab_size=n_classes, hidden_size=p.dim, intermediate_size=4 * p.dim,
                                num_hidden_layers=p.layers, num_attention_heads=p.heads, num_key_value_heads=p.heads,
                                max_position_embeddings=input_shape[-1], attention_dropout=p.dropout,
                                bos_token_id=0, eos_token_id=0, pad_token_id=None)
        config._attn_implementation = "eager"
        return CausalLM(tf.LlamaForCausalLM(config))


class LocalLMParams(ModelParams):
    path: Path = Field(strict=False, description="a folder written by save_pretrained (config.json and weights)")
    dtype: Literal["float32"] = "float32"


class LocalLM(Model):
    """A causal LM saved with ``save_pretrained`` in a local folder (its pretrained weights, which fine-tuning starts
    from); its vocabulary must cover the dataset's tokenizer. ``build`` loads the same weights every time: the
    engine's seed only draws what fine-tuning adds (LoRA matrices, sampling)."""

    name = "hf-local"
    Params = LocalLMParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
        p = self.params
        assert isinstance(p, LocalLMParams)
        if not (p.path / "config.json").is_file():
            raise ValueError(f"path: {p.path}: no config.json (not a save_pretrained folder)")
        tf = transformers_module()
        lm = tf.AutoModelForCausalLM.from_pretrained(str(p.path), local_files_only=True, dtype=torch.float32,
                                                     attn_implementation="eager")
        vocab = lm.get_input_embeddings().num_embeddings
        if vocab < n_classes:
            raise ValueError(f"path: {p.path}: a vocabulary of {vocab} ids, fewer than the dataset's {n_classes}")
        return CausalLM(lm)


@hookimpl
def register_models(register) -> None:  # noqa: ANN001
    register(GPT2)
    register(Llama)
    register(LocalLM)
