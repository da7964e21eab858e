"""Organism architectures, built from Hugging Face configs so every checkpoint loads with
`AutoModelForCausalLM` and headtrace screens it like any hub model.

- `dense` (default): GPT-NeoX / Pythia style (rotary on a share of head dims, parallel residual).
- `llama`: Llama style (RMSNorm, SwiGLU MLP, full rotary, grouped-query attention).
- `moe`: OLMoE style (q/k RMSNorm, top-k routed experts with a load-balancing loss).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from headtrace.errors import HeadtraceError
from headtrace.organism.corpus import BOS_ID

ARCHS: tuple[str, ...] = ("dense", "llama", "moe")


@dataclass(frozen=True)
class Recipe:
    """A model's shape; vocabulary and context come from the corpus."""

    arch: str = "dense"
    n_layers: int = 3
    n_heads: int = 4
    d_model: int = 128  # head dim 32: narrower heads cannot match and copy a 256-token vocabulary
    d_mlp: int = 256
    rotary_pct: float = 1.0  # dense only: share of rotary head dims (Pythia: 0.25)
    n_kv_heads: int | None = None  # llama: grouped-query attention (None: one per head)
    n_experts: int = 4  # moe
    experts_per_token: int = 2  # moe
    router_aux_loss: float = 0.01  # moe: load-balancing loss weight
    init_std: float | None = None  # weight init spread (None: 1/sqrt(d_model), not HF's 0.02 made for wide models)

    def validate(self) -> None:
        if self.arch not in ARCHS:
            raise HeadtraceError(f"unknown arch '{self.arch}'; use one of: {', '.join(ARCHS)}")
        if self.n_layers < 1 or self.n_heads < 1 or self.d_model % self.n_heads:
            raise HeadtraceError(f"need n_layers >= 1 and d_model divisible by n_heads (got {self})")
        if self.arch == "moe" and not 1 <= self.experts_per_token <= self.n_experts:
            raise HeadtraceError("need 1 <= experts_per_token <= n_experts")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def recipe(arch: str = "dense", **overrides) -> Recipe:
    """The default recipe of an architecture (the MoE's experts are narrower: similar active size)."""
    defaults = {"moe": {"d_mlp": 128}}.get(arch, {})
    chosen = Recipe(arch=arch, **{**defaults, **overrides})
    chosen.validate()
    return chosen


def hf_config(r: Recipe, vocab_size: int, context: int):
    """The transformers config of a recipe."""
    from transformers import GPTNeoXConfig, LlamaConfig, OlmoeConfig  # a recipe's settings stay torch-free

    common = dict(
        vocab_size=vocab_size,
        hidden_size=r.d_model,
        num_hidden_layers=r.n_layers,
        num_attention_heads=r.n_heads,
        intermediate_size=r.d_mlp,
        max_position_embeddings=context,
        bos_token_id=BOS_ID,
        eos_token_id=1,
        pad_token_id=None,
        tie_word_embeddings=False,
        initializer_range=r.init_std or r.d_model**-0.5,
    )
    if r.arch == "dense":
        return GPTNeoXConfig(
            **common, rotary_pct=r.rotary_pct, use_parallel_residual=True, hidden_dropout=0.0, attention_dropout=0.0
        )
    if r.arch == "llama":
        return LlamaConfig(**common, num_key_value_heads=r.n_kv_heads or r.n_heads)
    return OlmoeConfig(
        **common,
        num_experts=r.n_experts,
        num_experts_per_tok=r.experts_per_token,
        output_router_logits=True,
        router_aux_loss_coef=r.router_aux_loss,
    )


def build_model(r: Recipe, vocab_size: int, context: int):
    """A freshly initialised causal LM (seed torch before calling for a reproducible init)."""
    from transformers import AutoModelForCausalLM  # a recipe's settings stay torch-free

    r.validate()
    config = hf_config(r, vocab_size, context)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
