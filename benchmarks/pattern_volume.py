"""What kept attention patterns (`keep_patterns`) cost: the rows a screen keeps per revision (in
memory and on disk), and the report's size for a panel shaped like the study's (3 models x 10
revisions, docs/performance.md, "Kept attention patterns").

Models are random ones of the study's head layouts (Pythia-1B 16 x 8, OLMo-1B and OLMoE 16 x 16)
with a small width: what is kept depends on the layout and the probe, not the width. The report is
measured twice: as the screens labelled the heads, and with every head labelled (the most the
report keeps).

    python benchmarks/pattern_volume.py --out /tmp/pattern-volume
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from headtrace.patterns import kept_examples
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.report import build_report
from headtrace.schema import ScreenConfig
from headtrace.screen import screen_model

LAYOUTS = {"pythia-1b-like": (16, 8), "olmo-1b-like": (16, 16), "olmoe-1b-7b-like": (16, 16)}
K = 4


def kept_bytes(n_layers: int, n_heads: int, k: int = K, spec: ProbeSpec = ProbeSpec()) -> int:
    """Bytes of the float16 rows a screen keeps per revision for the default synthetic probe."""
    probe = synthetic_induction(ProbeSpec(n_examples=max(k, 16), seq_len=spec.seq_len, seed=spec.seed))
    chosen = kept_examples(probe, k)
    width = int((probe.query[chosen] - probe.duplicate[chosen]).max()) + 1
    return k * n_layers * n_heads * width * probe.seq_len * 2


def model(n_layers: int, n_heads: int, seed: int):
    torch.manual_seed(seed)
    config = GPTNeoXConfig(
        vocab_size=10240,
        hidden_size=8 * n_heads,
        intermediate_size=32,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        max_position_embeddings=512,
    )
    built = GPTNeoXForCausalLM(config)
    with torch.no_grad():  # selective attention, as in tests/models_zoo.py
        for name, param in built.named_parameters():
            if "query_key_value.weight" in name:
                param.mul_(0.3 / param.std())
    return built.eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--revisions", type=int, default=10)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    results = args.out / "results"
    config = ScreenConfig.of(n_examples=8, seq_len=256, batch_size=8, keep_patterns=K)
    for name, (layers, heads) in LAYOUTS.items():
        mib = kept_bytes(layers, heads) / 2**20
        print(f"{name}: {layers} x {heads} heads, kept rows per revision {mib:.1f} MiB (float16, K={K}, T=256)")
        started = time.perf_counter()
        for r in range(args.revisions):
            screen_model(model(layers, heads, r), config, name=name, revision=f"step{1000 * (r + 1)}", out=str(results))
        print(f"  {args.revisions} screens in {time.perf_counter() - started:.1f} s")
    disk = sorted((results / "patterns").glob("*.npz"))
    sizes = [p.stat().st_size for p in disk]
    print(
        f"patterns on disk: {len(disk)} files, {np.mean(sizes) / 2**20:.1f} MiB each (compressed), "
        f"{sum(sizes) / 2**20:.0f} MiB in all"
    )
    for tag in ("as screened", "every head labelled"):
        if tag == "every head labelled":
            for path in (results / "heads").glob("*.parquet"):
                heads = pd.read_parquet(path)
                heads.loc[heads.label == "unclassified", "label"] = heads.best_class
                heads.to_parquet(path, index=False)
        started = time.perf_counter()
        page = build_report(results, args.out / f"report-{tag.replace(' ', '-')}")
        heads = pd.concat(pd.read_parquet(p) for p in (results / "heads").glob("*.parquet"))
        kept = heads.loc[heads.label != "unclassified"].groupby("model").head_id.nunique().sum()
        runs = len(list((results / "runs").glob("*.parquet")))
        size = page.stat().st_size / 2**20
        print(
            f"report ({tag}): {kept} heads kept, {runs} runs, index.html {size:.2f} MiB "
            f"({size / runs:.3f} MiB per run), built in {time.perf_counter() - started:.0f} s"
        )


if __name__ == "__main__":
    main()
