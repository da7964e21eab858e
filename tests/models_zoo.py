"""Tiny random-weight models of every supported architecture, built from configs (no network).

The attention variants each need a probe longer than their window: SLIDING_WINDOW is 16 tokens,
and the reference probes are 48 and 64 tokens long."""

from __future__ import annotations

import torch
from transformers import (
    ApertusConfig,
    ApertusForCausalLM,
    BloomConfig,
    BloomForCausalLM,
    FalconConfig,
    FalconForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Olmo3Config,
    Olmo3ForCausalLM,
    OlmoConfig,
    OlmoeConfig,
    OlmoeForCausalLM,
    OlmoForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
    StableLmConfig,
    StableLmForCausalLM,
)

VOCAB = 10240
SLIDING_WINDOW = 16
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=512,
)
GQA = {**COMMON, "num_key_value_heads": 2}
# Layer 0 slides over the last SLIDING_WINDOW tokens, layer 1 attends globally (local-global models).
LOCAL_GLOBAL = {"sliding_window": SLIDING_WINDOW, "layer_types": ["sliding_attention", "full_attention"]}
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}

BUILDERS = {
    # Pythia: rotary on 25% of head dims, parallel residual, dense has a bias.
    "gpt_neox": lambda: GPTNeoXForCausalLM(GPTNeoXConfig(**COMMON, rotary_pct=0.25, use_parallel_residual=True)),
    # OLMo 1B-0724: clip_qkv 8, non-parametric LayerNorm, untied embeddings.
    "olmo": lambda: OlmoForCausalLM(OlmoConfig(**COMMON, clip_qkv=8.0, tie_word_embeddings=False)),
    # OLMo 2: q/k RMSNorm over all heads, norms after attention and MLP.
    "olmo2": lambda: Olmo2ForCausalLM(Olmo2Config(**COMMON)),
    # OLMo 3: OLMo 2 with sliding-window and global layers.
    "olmo3": lambda: Olmo3ForCausalLM(Olmo3Config(**GQA, **LOCAL_GLOBAL)),
    # OLMoE: q/k RMSNorm, top-k routed experts.
    "olmoe": lambda: OlmoeForCausalLM(
        OlmoeConfig(**{**COMMON, "intermediate_size": 32}, num_experts=4, num_experts_per_tok=2)
    ),
    # Llama with grouped-query attention (4 query heads share 2 key/value heads).
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**GQA)),
    # Mistral: every layer slides over a window shorter than the probe.
    "mistral": lambda: MistralForCausalLM(MistralConfig(**GQA, sliding_window=SLIDING_WINDOW)),
    "mixtral": lambda: MixtralForCausalLM(MixtralConfig(**GQA, **MOE, sliding_window=SLIDING_WINDOW)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**GQA)),
    # Qwen3: per-head q/k RMSNorm, head_dim set apart from the hidden size.
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**GQA, head_dim=16)),
    "qwen3_moe": lambda: Qwen3MoeForCausalLM(
        Qwen3MoeConfig(**GQA, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    ),
    # SmolLM3: layer 1 has no positional encoding (NoPE), layer 0 rotary.
    "smollm3": lambda: SmolLM3ForCausalLM(
        SmolLM3Config(**GQA, no_rope_layers=[1, 0], pad_token_id=None, bos_token_id=0, eos_token_id=0)
    ),
    # Apertus: xIELU MLP, q/k norms.
    "apertus": lambda: ApertusForCausalLM(ApertusConfig(**GQA)),
    # Gemma 2: attention-logit soft-capping (small, so that it bites), final-logit soft-capping, local-global.
    "gemma2": lambda: Gemma2ForCausalLM(
        Gemma2Config(
            **GQA,
            head_dim=16,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=3.0,
            final_logit_softcapping=5.0,
            **LOCAL_GLOBAL,
        )
    ),
    # Gemma 3 (text): q/k norms, local-global with two rotary bases.
    "gemma3_text": lambda: Gemma3ForCausalLM(
        Gemma3TextConfig(**GQA, head_dim=16, query_pre_attn_scalar=16, **LOCAL_GLOBAL)
    ),
    # gpt-oss: a learned sink logit per head, local-global, routed experts.
    "gpt_oss": lambda: GptOssForCausalLM(GptOssConfig(**GQA, head_dim=16, **MOE, **LOCAL_GLOBAL)),
    # Phi-3: fused qkv projection and gate-up MLP.
    "phi3": lambda: Phi3ForCausalLM(Phi3Config(**GQA, pad_token_id=0, bos_token_id=0, eos_token_id=0)),
    # StableLM: partial rotary, per-head q/k LayerNorm.
    "stablelm": lambda: StableLmForCausalLM(StableLmConfig(**GQA, qk_layernorm=True)),
    # Granite: attention, residual and embedding multipliers, logits divided by logits_scaling.
    "granite": lambda: GraniteForCausalLM(
        GraniteConfig(
            **GQA, attention_multiplier=0.2, residual_multiplier=0.5, embedding_multiplier=2.0, logits_scaling=4.0
        )
    ),
    # GPT-2: the output projection is a Conv1D.
    "gpt2": lambda: GPT2LMHeadModel(
        GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=512, bos_token_id=0, eos_token_id=0)
    ),
    # GPT-Neo: a local layer (window in the module's own causal buffer) and a global one; unscaled scores.
    "gpt_neo": lambda: GPTNeoForCausalLM(
        GPTNeoConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            intermediate_size=128,
            max_position_embeddings=512,
            attention_types=[[["local", "global"], 1]],
            window_size=SLIDING_WINDOW,
            bos_token_id=0,
            eos_token_id=0,
        )
    ),
    # BLOOM: ALiBi, no positional embedding, fused query-key-value.
    "bloom": lambda: BloomForCausalLM(BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4)),
}

# Architectures headtrace registers nowhere, for discovery. Falcon's attention reads the attention
# choice itself: under SDPA it returns no weights, under eager attention it does.
UNLISTED = {
    "falcon": lambda: FalconForCausalLM(
        FalconConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=512,
            bos_token_id=0,
            eos_token_id=0,
        )
    ),
}

QK_WEIGHTS = ("q_proj.weight", "k_proj.weight", "query_key_value.weight", "c_attn.weight", "qkv_proj.weight")
QK_NORMS = ("q_norm.weight", "k_norm.weight", "q_layernorm", "k_layernorm")
# Gemma's norms scale by 1 + weight; OLMo 2's normalise all heads' queries together.
NORM_GAIN = {"gemma2": 1.0, "gemma3_text": 1.0, "olmo2": 2.5, "olmo3": 2.5, "apertus": 2.0}


def tiny_model(arch: str, seed: int = 0, qk_std: float = 0.3):
    """A random model whose attention is far from uniform: query/key weights are rescaled to a
    large spread so heads attend selectively, which makes every comparison with a reference meaningful.
    Runs SDPA where the architecture supports it, else transformers' default (eager)."""
    torch.manual_seed(seed)
    model = (BUILDERS.get(arch) or UNLISTED[arch])()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(k in name for k in QK_WEIGHTS):
                param.mul_(qk_std / param.std())
            if any(k in name for k in QK_NORMS) and name.endswith("weight"):  # models that normalise q and k
                param.fill_(NORM_GAIN.get(arch, 3.0))
            if name.endswith(".sinks"):  # gpt-oss: sink logits from strong to weak
                param.copy_(torch.linspace(14.0, 2.0, param.numel()))
    if model._supports_sdpa:
        model.config._attn_implementation = "sdpa"
    return model.eval()
