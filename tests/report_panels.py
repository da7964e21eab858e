"""Results directories for the report tests: the reference Pythia-1B screens, imported, and a small
partial panel of tiny random models screened for real (seeds stand in for training revisions)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from models_zoo import tiny_model

from headtrace.models import ModelAdapter
from headtrace.reference import import_reference
from headtrace.screen import ScreenConfig, screen
from headtrace.probes import build_probe
from headtrace.store import HEADS, shard_name, ResultsDir

REFERENCE = Path(__file__).parent / "data" / "reference" / "pythia-1b"
PYTHIA = "EleutherAI/pythia-1b"
# model -> (architecture, [(revision, seed, tokens)]): one model with three revisions, one with one
# revision whose tokens are unknown.
TINY_PANEL = {
    "tiny/gpt-neox": ("gpt_neox", [("seed0", 0, 1e6), ("seed1", 1, 1e7), ("seed2", 2, 1e8)]),
    "tiny/llama": ("llama", [("seed0", 0, None)]),
}
UNFINISHED = ("tiny/gpt-neox", "seed3")  # heads written, run record not yet
ABLATED = ("tiny/gpt-neox", "seed2", 1e8)


def reference_results(out: Path) -> Path:
    import_reference(sorted(REFERENCE.glob("*.json")), out)
    return out


def tiny_results(out: Path) -> Path:
    """Screen the tiny panel (16 sequences of 64 tokens), leave one shard unfinished, add an ablation."""
    config = ScreenConfig.of(n_examples=16, seq_len=64)
    probe = build_probe(config.probe, lambda: None)
    for model, (arch, revisions) in TINY_PANEL.items():
        for revision, seed, tokens in revisions:
            result = screen(
                ModelAdapter(tiny_model(arch, seed)), probe, config, model_name=model, revision=revision, tokens=tokens
            )
            ResultsDir(out).write_shard(result.heads, result.run)
    model, revision = UNFINISHED
    shutil.copy(out / HEADS / shard_name(model, "seed2"), out / HEADS / shard_name(model, revision))
    write_ablation_rows(out, ablation_rows(*ABLATED))
    return out


def ablation_rows(model: str, revision: str, tokens: float, seeds: int = 6) -> pd.DataFrame:
    """One ablation as the ablation stage stores it (one row per condition; ablation.py's columns)."""
    rng = np.random.default_rng(0)
    conditions = (
        [("clean", -1, ""), ("circuit", -1, "L1H0,L1H2")]
        + [("random", s, "L1H1,L1H3") for s in range(seeds)]
        + [("layers", -1, "L1H0,L1H1,L1H2,L1H3"), ("single", -1, "L1H0"), ("single", -1, "L1H2")]
    )
    loss = {"clean": 9.0, "circuit": 9.4, "layers": 9.9, "single": 9.2}
    rows = [
        {
            "condition": kind,
            "seed": seed,
            "heads": heads,
            "n_ablated": heads.count("L"),
            "shortfall": 0,
            "top1": 0.0,
            "top5": 0.01,
            "loss": loss.get(kind, 9.1 + 0.05 * rng.standard_normal()),
            "mean_logit_answer": 0.1,
        }
        for kind, seed, heads in conditions
    ]
    table = pd.DataFrame(rows)
    return table.assign(
        model=model,
        revision=revision,
        tokens=tokens,
        circuit="induction",
        circuit_heads="L1H0,L1H2",
        mode="zero",
        verdict="necessary",
        decided_by="loss",
        differential=0.3,
        differential_low=0.22,
        differential_high=0.38,
        probe="synthetic",
        n_examples=16,
        seq_len=64,
    )


def write_ablation_rows(out: Path, table: pd.DataFrame) -> None:
    folder = out / "ablations"
    folder.mkdir(parents=True, exist_ok=True)
    table.to_parquet(folder / shard_name(table.model[0], table.revision[0]), index=False)
