"""Results on disk: tidy Parquet shards, one per (model, revision), written atomically.

Layout of a results directory (pandas, polars and DuckDB read each folder as one table):

    DIR/heads/<model-slug>@<revision>.parquet   one row per head
    DIR/runs/<model-slug>@<revision>.parquet    one row: the run record (capability, config, timings)
    DIR/ablations/<model-slug>@<revision>.parquet   one row per ablation condition (ablation.py)

A shard is complete when its run file exists: the heads file is renamed into place first, the run
file last, each from a temporary file in the same folder, so a killed process never leaves a file
that looks finished.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

import pandas as pd

from headtrace.errors import HeadtraceError

HEADS = "heads"
RUNS = "runs"
ABLATIONS = "ablations"


def slug(model: str) -> str:
    """A file-name-safe model name: 'EleutherAI/pythia-1b' -> 'EleutherAI--pythia-1b'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", model.strip("/").replace("/", "--")) or "model"


def shard_name(model: str, revision: str) -> str:
    return f"{slug(model)}@{re.sub(r'[^A-Za-z0-9._-]', '-', revision or 'main')}.parquet"


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_shard(out_dir: str | Path, heads: pd.DataFrame, run: pd.DataFrame) -> Path:
    """Write one (model, revision) shard; returns the run file's path (the completion marker)."""
    out = Path(out_dir)
    record = run.iloc[0]
    name = shard_name(str(record["model"]), str(record["revision"]))
    with writing_results(out):
        write_parquet_atomic(heads, out / HEADS / name)
        write_parquet_atomic(run, out / RUNS / name)
    return out / RUNS / name


@contextlib.contextmanager
def writing_results(out_dir: str | Path) -> Iterator[None]:
    """A failed write (disk full, read-only, permissions) becomes one actionable error."""
    try:
        yield
    except OSError as exc:
        raise HeadtraceError(f"cannot write results to '{out_dir}': {exc.strerror or exc}; free space or pick --out") from None


def completed_shards(out_dir: str | Path) -> list[str]:
    """Names of shards whose run file exists (temporary files are ignored)."""
    runs = Path(out_dir) / RUNS
    return sorted(p.name for p in runs.glob("*.parquet")) if runs.is_dir() else []


def read_results(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All completed shards of a results directory as (heads, runs), sorted by model, tokens, head."""
    out = Path(out_dir)
    names = completed_shards(out)
    if not names:
        raise HeadtraceError(f"no results in '{out}' (expected {RUNS}/*.parquet); run `headtrace screen` or `run` first")
    missing = [n for n in names if not (out / HEADS / n).exists()]
    if missing:
        raise HeadtraceError(f"results in '{out}' are inconsistent: run records without head tables: {missing}")
    runs = pd.concat([pd.read_parquet(out / RUNS / n) for n in names], ignore_index=True)
    check_one_config_per_model(out, runs)
    heads = pd.concat([pd.read_parquet(out / HEADS / n) for n in names], ignore_index=True)
    runs = runs.sort_values(["model", "tokens", "revision"], na_position="last", kind="stable").reset_index(drop=True)
    heads = heads.sort_values(["model", "tokens", "revision", "layer", "head"], na_position="last",
                              kind="stable").reset_index(drop=True)
    return heads, runs


def check_one_config_per_model(out: Path, runs: pd.DataFrame) -> None:
    """A model's revisions screened with different configs are not one trajectory: refuse them."""
    if "config_hash" not in runs:
        return
    for model, hashes in runs.groupby("model").config_hash:
        distinct = sorted(hashes.dropna().astype(str).unique())
        if len(distinct) > 1:
            raise HeadtraceError(
                f"'{out}' holds {model} screened with {len(distinct)} different configs ({', '.join(distinct)}): "
                "re-run its panel with one config (`headtrace run` recomputes the others) or keep each config "
                "in its own results directory"
            )


def ablation_path(out_dir: str | Path, model: str, revision: str | None) -> Path:
    return Path(out_dir) / ABLATIONS / shard_name(model, revision or "")


def write_ablation(out_dir: str | Path, table: pd.DataFrame) -> Path:
    """Write one (model, revision) ablation table atomically; returns its path."""
    path = ablation_path(out_dir, str(table["model"].iloc[0]), str(table["revision"].iloc[0]))
    with writing_results(out_dir):
        write_parquet_atomic(table, path)
    return path


def read_ablations(out_dir: str | Path) -> pd.DataFrame | None:
    """Every ablation condition stored under DIR/ablations, one row per condition; None when there are none."""
    paths = sorted((Path(out_dir) / ABLATIONS).glob("*.parquet"))
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True) if paths else None
