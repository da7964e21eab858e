"""What the study's panel moves and costs: checkpoint sizes of the three models (from their
architectures, no download) and, with --measure, the screen's CPU time per probe example at full size.

    PYTHONPATH=src python benchmarks/panel_volume.py [--measure] [--n-examples 4]

Sizes: parameters x bytes per parameter of the published checkpoints (Pythia fp16, OLMo-1B-0724
fp32, OLMoE bf16). Pythia's safetensors also hold the old per-layer causal-mask buffers
(16 x 2048 x 2048 bytes), which is why the hub lists ~2.09 GB for 2.02 GB of parameters.
GPU figures come from the performance benchmark (benchmarks for issue 8), not from this script.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import (
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    OlmoConfig,
    OlmoeConfig,
    OlmoeForCausalLM,
    OlmoForCausalLM,
)

COMMON = dict(vocab_size=50304, hidden_size=2048, num_hidden_layers=16, tie_word_embeddings=False)
MODELS = {  # the study's architectures (docs/reproduce-xu2026.md)
    "EleutherAI/pythia-1b": (
        GPTNeoXForCausalLM,
        GPTNeoXConfig(
            **COMMON,
            num_attention_heads=8,
            intermediate_size=8192,
            rotary_pct=0.25,
            max_position_embeddings=2048,
        ),
        2,
    ),
    "allenai/OLMo-1B-0724-hf": (
        OlmoForCausalLM,
        OlmoConfig(
            **COMMON,
            num_attention_heads=16,
            intermediate_size=8192,
            clip_qkv=8.0,
            max_position_embeddings=4096,
        ),
        4,
    ),
    "allenai/OLMoE-1B-7B-0924": (
        OlmoeForCausalLM,
        OlmoeConfig(
            **COMMON,
            num_attention_heads=16,
            intermediate_size=1024,
            num_experts=64,
            num_experts_per_tok=8,
            max_position_embeddings=4096,
        ),
        2,
    ),
}
MASK_BUFFERS = {"EleutherAI/pythia-1b": 16 * 2048 * 2048}


def sizes() -> None:
    total = 0.0
    for name, (cls, config, width) in MODELS.items():
        with torch.device("meta"):
            params = sum(p.numel() for p in cls(config).parameters())
        size = params * width + MASK_BUFFERS.get(name, 0)
        total += 10 * size
        print(
            f"{name:26s} {params / 1e9:5.2f}B parameters x {width} bytes -> {size / 1e9:5.2f} GB a revision, "
            f"{10 * size / 1e9:6.1f} GB for 10"
        )
    print(f"{'panel (30 revisions)':26s} {total / 1e9:.0f} GB to download")


def measure(n_examples: int) -> None:
    from headtrace.models import ModelAdapter
    from headtrace.probes import ProbeSpec, synthetic_induction
    from headtrace.screen import ScreenConfig, screen

    probe = synthetic_induction(ProbeSpec(n_examples=n_examples, seq_len=256))
    for name in (
        "EleutherAI/pythia-1b",
        "allenai/OLMo-1B-0724-hf",
    ):  # OLMoE in fp32 does not fit 23 GB of RAM
        cls, config, _ = MODELS[name]
        config._attn_implementation = "sdpa"
        model = cls(config).eval()
        result = screen(ModelAdapter(model), probe, ScreenConfig.of(n_examples=n_examples, batch_size=n_examples))
        seconds = float(result.run.wall_s.iloc[0])
        print(
            f"{name:26s} CPU fp32, {torch.get_num_threads()} threads: {seconds / n_examples:.2f} s an example "
            f"(T=256) -> {2000 * seconds / n_examples / 3600:.1f} h for n=2000"
        )
        del model, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="time the screen on this CPU at full size")
    parser.add_argument("--n-examples", type=int, default=4)
    args = parser.parse_args()
    sizes()
    if args.measure:
        started = time.perf_counter()
        measure(args.n_examples)
        print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
