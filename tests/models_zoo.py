"""Tiny random-weight models of every supported architecture, built from configs (no network)."""

from __future__ import annotations

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    OlmoConfig,
    OlmoeConfig,
    OlmoeForCausalLM,
    OlmoForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

VOCAB = 10240
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=512,
)

BUILDERS = {
    # Pythia: rotary on 25% of head dims, parallel residual, dense has a bias.
    "gpt_neox": lambda: GPTNeoXForCausalLM(GPTNeoXConfig(**COMMON, rotary_pct=0.25, use_parallel_residual=True)),
    # OLMo 1B-0724: clip_qkv 8, non-parametric LayerNorm, untied embeddings.
    "olmo": lambda: OlmoForCausalLM(OlmoConfig(**COMMON, clip_qkv=8.0, tie_word_embeddings=False)),
    # OLMoE: q/k RMSNorm, top-k routed experts.
    "olmoe": lambda: OlmoeForCausalLM(
        OlmoeConfig(**{**COMMON, "intermediate_size": 32}, num_experts=4, num_experts_per_tok=2)
    ),
    # Llama with grouped-query attention (4 query heads share 2 key/value heads).
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**COMMON, num_key_value_heads=2)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=None)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**COMMON, num_key_value_heads=2)),
    # GPT-2: the output projection is a Conv1D.
    "gpt2": lambda: GPT2LMHeadModel(
        GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=512, bos_token_id=0, eos_token_id=0)
    ),
}


def tiny_model(arch: str, seed: int = 0, qk_std: float = 0.3):
    """A random model whose attention is far from uniform: query/key weights are rescaled to a
    large spread so heads attend selectively, which makes every comparison with a reference meaningful."""
    torch.manual_seed(seed)
    model = BUILDERS[arch]()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(k in name for k in ("q_proj.weight", "k_proj.weight", "query_key_value.weight", "c_attn.weight")):
                param.mul_(qk_std / param.std())
            if any(k in name for k in ("q_norm.weight", "k_norm.weight")):  # OLMoE normalises q and k
                param.fill_(3.0)
    model.config._attn_implementation = "sdpa"
    return model.eval()
