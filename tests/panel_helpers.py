"""Shared pieces of the panel tests: the fake hub's repositories, hub environment, panel files, table comparison."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pandas as pd
import torch

from hub_server import OLMO_BRANCHES, PYTHIA_BRANCHES, FakeRepo, HubServer, fake_repo
from models_zoo import tiny_model

PYTHIA = "EleutherAI/pythia-1b"
OLMO = "allenai/OLMo-1B-0724-hf"
SCREEN = "[screen]\nn_examples = 16\nseq_len = 64\nbatch_size = 8\n"
REVISIONS = ["step1", "step2", "step3"]  # of the local checkpoint series (save_checkpoints)
# Columns that record when and how fast, not what: they differ between identical runs.
TIMING_COLUMNS = ["wall_s", "started_at", "finished_at", "fetch_s", "load_s", "downloaded_bytes"]


def fake_hub() -> HubServer:
    """Pythia-like and OLMo-like repos; Pythia's step2 serves step1's files (a mis-served branch)."""
    return HubServer(
        [
            fake_repo(PYTHIA, "gpt_neox", PYTHIA_BRANCHES, same_as={"step2": "step1"}),
            fake_repo(OLMO, "olmo", OLMO_BRANCHES),
        ]
    )


def seed_of(repo_id: str, branch: str) -> int:
    """The models_zoo seed the fake hub uses for a branch (its index in the branch list)."""
    return (PYTHIA_BRANCHES if repo_id == PYTHIA else OLMO_BRANCHES).index(branch)


def point_hub_env(monkeypatch, url: str, home: Path) -> Path:
    """HF_ENDPOINT at the fake hub, HF_HOME in a temporary folder; returns the hub cache folder."""
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return home / "hub"


def panel_file(folder: Path, models: dict[str, object], screen: str = SCREEN, name: str = "panel") -> Path:
    """A panel TOML with the given models (id -> revisions list or selection string)."""
    lines = [f'name = "{name}"', screen]
    for model, revisions in models.items():
        selection = (
            f'"{revisions}"' if isinstance(revisions, str) else "[" + ", ".join(f'"{r}"' for r in revisions) + "]"
        )
        lines += ["[[models]]", f'id = "{model}"', f"revisions = {selection}", ""]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def assert_same_tables(a: tuple[pd.DataFrame, pd.DataFrame], b: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    """Heads tables identical to the bit; run records identical except timings."""
    pd.testing.assert_frame_equal(a[0], b[0], check_exact=True)
    runs_a, runs_b = (r.drop(columns=[c for c in TIMING_COLUMNS if c in r]) for r in (a[1], b[1]))
    pd.testing.assert_frame_equal(runs_a, runs_b, check_exact=True)


def save_checkpoints(root: Path, overflow: str | None = None) -> Path:
    """Tiny GPT-NeoX checkpoints, one folder per revision; `overflow` gets finite weights that overflow."""
    for seed, name in enumerate(REVISIONS):
        model = tiny_model("gpt_neox", seed=seed)
        if name == overflow:
            with torch.no_grad():  # finite, but every activation after layer 1's norm is inf
                model.gpt_neox.layers[1].input_layernorm.weight.fill_(3e38)
        model.save_pretrained(root / name)
    return root


def local_panel(folder: Path, checkpoints: Path, revisions: list[str], name: str = "panel", extra: str = "") -> Path:
    """A panel over a local checkpoint series (model 'tiny/neox'); `extra` is appended (e.g. an [ablation])."""
    path = folder / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\n{SCREEN}\n[[models]]\nid = "tiny/neox"\nsource = "local"\n'
        f'path = "{checkpoints}"\ntokens_per_step = 1000\nrevisions = {revisions!r}\n'.replace("'", '"')
        + extra
    )
    return path


SERIES = "test/series"
SERIES_BRANCHES = ["step0", "step1", "step2", "step3", "step4", "step5", "main"]


def sharded(seed: int) -> dict[str, bytes]:
    """A tiny GPT-NeoX saved in three weight shards (with its index), built once per seed."""
    return _sharded(seed)


@functools.cache
def _sharded(seed: int) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        tiny_model("gpt_neox", seed).save_pretrained(tmp, max_shard_size="1MB")
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def series_repo() -> FakeRepo:
    """A sharded series with each kind of duplicate: step1 = step0 (identical), step3 holds the final
    revision's first shard (shares files with step5), step4 = step5 (equal to the final); main is
    step5's commit (an alias)."""

    def mixed() -> dict[str, bytes]:
        own, final = sharded(3), sharded(5)
        first = min(n for n in own if n.endswith(".safetensors"))
        return {**own, first: final[first]}

    builders = {
        "step0": lambda: sharded(0),
        "step1": lambda: sharded(0),
        "step2": lambda: sharded(2),
        "step3": mixed,
        "step4": lambda: sharded(5),
        "step5": lambda: sharded(5),
        "main": lambda: sharded(5),
    }
    return FakeRepo(SERIES, builders, same_commit={"main": "step5"})
