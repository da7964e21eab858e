"""Models a researcher already has loaded: a Hugging Face model, a TransformerLens model
(`HookedTransformer`, `TransformerBridge`) or an nnsight `LanguageModel`, screened as they are.

- A Hugging Face model gets a `models.ModelAdapter`.
- nnsight wraps a Hugging Face model without changing it: the wrapped model is screened
  (`native_model`).
- A TransformerLens model is read through its own hooks (`TransformerLensAdapter`): each layer's
  `blocks.{l}.attn.hook_pattern` (attention probabilities) and `blocks.{l}.attn.hook_z` (per-head
  outputs, the input of W_O), reduced inside the hook (screen.py).

Head ids are `L{layer}H{head}` everywhere, the indices TransformerLens and nnsight use. Neither
library is a dependency: nothing here imports them.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from headtrace.errors import HeadtraceError
from headtrace.models import HeadLayout, ModelAdapter


def _library(model) -> str:
    return type(model).__module__.split(".")[0]


def native_model(model):
    """The torch module to screen: nnsight's wrapped model, else `model` itself."""
    if _library(model) == "nnsight":
        inner = getattr(model, "_module", None) or getattr(model, "_model", None)
        if not isinstance(inner, nn.Module):
            raise HeadtraceError(f"cannot find the torch model inside nnsight's {type(model).__name__}")
        return inner
    return model


def is_transformer_lens(model) -> bool:
    return _library(model) == "transformer_lens" and hasattr(model, "run_with_hooks") and hasattr(model, "cfg")


def as_adapter(model) -> ModelAdapter | TransformerLensAdapter:
    """The adapter a screen runs on, for any of the supported kinds of loaded model (module docstring)."""
    model = native_model(model)
    if is_transformer_lens(model):
        return TransformerLensAdapter(model)
    if isinstance(model, nn.Module) and hasattr(model, "config") and hasattr(model, "get_output_embeddings"):
        return ModelAdapter(model)
    raise HeadtraceError(
        f"cannot screen a {type(model).__module__}.{type(model).__name__}: give a Hugging Face causal "
        "LM, a TransformerLens HookedTransformer or TransformerBridge, or an nnsight LanguageModel"
    )


class TransformerLensAdapter:
    """A TransformerLens model: the head layout from its config, heads read at its hooks."""

    attention_route = "transformer-lens"
    trim_last_layer = False

    def __init__(self, model: nn.Module):
        self.model = model
        cfg = model.cfg
        tokenizer = getattr(model, "tokenizer", None)
        # What the watcher reads of a Hugging Face config.
        self.config = types.SimpleNamespace(
            bos_token_id=getattr(tokenizer, "bos_token_id", None), model_type=self._architecture(cfg)
        )
        self.model_type = self.config.model_type
        self.layout = HeadLayout(
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            n_kv_heads=getattr(cfg, "n_key_value_heads", None) or cfg.n_heads,
            head_dim=cfg.d_head,
        )
        missing = [
            name
            for name in ("blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z")
            if name not in getattr(model, "hook_dict", {name: None})
        ]
        if missing:
            raise HeadtraceError(
                f"this {type(model).__name__} has no {missing[0]} hook: the screen reads attention there"
            )

    @staticmethod
    def _architecture(cfg) -> str:
        name = getattr(cfg, "original_architecture", None) or getattr(cfg, "architecture", None) or "custom"
        return f"transformer_lens:{name}"

    @property
    def layout_description(self) -> str:
        return f"{type(self.model).__name__} blocks[i].attn.hook_pattern / hook_z (transformer_lens)"

    @property
    def vocab_size(self) -> int:
        cfg = self.model.cfg
        out = getattr(cfg, "d_vocab_out", -1)
        return int(out if out and out > 0 else cfg.d_vocab)

    @property
    def max_positions(self) -> int | None:
        return getattr(self.model.cfg, "n_ctx", None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype
