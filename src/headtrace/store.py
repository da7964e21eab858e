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
import errno
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow

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
    """Write to a temporary file beside `path`, fsync, then rename over it. The file gets the
    user's umask (as any file the user writes), not mkstemp's 0600: results folders are shared."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
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
def writing_results(out_dir: str | Path, option: str = "--out") -> Iterator[None]:
    """A failed write (disk full, read-only, permissions) becomes one actionable error."""
    try:
        yield
    except OSError as exc:
        raise HeadtraceError(cannot_write(out_dir, exc, option)) from None


def cannot_write(where: str | Path, exc: OSError, option: str = "--out") -> str:
    """The one-line message for a failed write, with the advice that fits its cause."""
    advice = "free space or pick another" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "pick another"
    return f"cannot write results to '{where}': {exc.strerror or exc}; {advice} {option}"


def check_writable(out_dir: str | Path, option: str = "--out") -> None:
    """Fail now, before any expensive work, when `out_dir` (or the folder it would be made in)
    cannot take a file. Leaves nothing behind: no folder is created."""
    folder = Path(out_dir).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise HeadtraceError(f"cannot write results to '{out_dir}': '{folder}' is not a folder; pick another {option}")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise HeadtraceError(cannot_write(out_dir, exc, option)) from None


def read_table(path: Path) -> pd.DataFrame:
    """One Parquet file of a results directory; a corrupt or truncated one becomes one line naming it."""
    try:
        return pd.read_parquet(path)
    except (OSError, pyarrow.ArrowException) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HeadtraceError(
            f"cannot read '{path}': not a valid Parquet file ({reason}); `headtrace run` re-screens that revision "
            "(or delete the file)"
        ) from None


def readable(path: Path) -> bool:
    """Whether a Parquet file's footer reads (a cheap check: a truncated file fails it)."""
    import pyarrow.parquet

    try:
        pyarrow.parquet.read_metadata(path)
    except (OSError, pyarrow.ArrowException):
        return False
    return True


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
    runs = pd.concat([read_table(out / RUNS / n) for n in names], ignore_index=True)
    check_one_config_per_model(out, runs)
    heads = pd.concat([read_table(out / HEADS / n) for n in names], ignore_index=True)
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
    return pd.concat([read_table(p) for p in paths], ignore_index=True) if paths else None


def identical_weights(runs: pd.DataFrame) -> pd.Series:
    """Per run, the revision with the same checkpoint hash and fewest tokens (else None), per model."""
    if "checkpoint_hash" not in runs:
        return pd.Series([None] * len(runs), index=runs.index, dtype=object)
    ordered = runs.sort_values(["tokens", "revision"], kind="stable", na_position="last")
    first = ordered.dropna(subset=["checkpoint_hash"]).groupby(["model", "checkpoint_hash"]).revision.first()
    same = [
        first.get((m, h)) if isinstance(h, str) else None for m, h in zip(runs.model, runs.checkpoint_hash)
    ]
    return pd.Series(
        [s if s != r else None for s, r in zip(same, runs.revision)], index=runs.index, dtype=object
    )


def load_results(out: str | Path) -> pd.DataFrame:
    """A results directory as one tidy table: one row per head, with its revision's run columns
    (capability, config and checkpoint hashes, timings) and `same_weights_as`."""
    heads, runs = read_results(out)
    runs = runs.assign(same_weights_as=identical_weights(runs))
    extra = [c for c in runs.columns if c not in heads.columns or c in ("model", "revision")]
    return heads.merge(runs[extra], on=["model", "revision"], how="left", validate="many_to_one")


SAVE_FORMATS = (".parquet", ".csv", ".json")


def check_save_path(path: str | Path) -> None:
    """A `--save` path must name a format by its extension and lie where a file can be written."""
    path = Path(path)
    if path.suffix.lower() not in SAVE_FORMATS:
        raise HeadtraceError(f"cannot tell the format of '{path}' from its extension; end it with "
                             f"{', '.join(SAVE_FORMATS)}")
    check_writable(path.parent, "--save path")


def save_table(table: pd.DataFrame, path: str | Path) -> None:
    """Write a table in the format its extension names (.parquet, .csv or .json: one record per row)."""
    path = Path(path)
    check_save_path(path)
    writers = {".parquet": lambda p: table.to_parquet(p, index=False), ".csv": lambda p: table.to_csv(p, index=False),
               ".json": lambda p: table.to_json(p, orient="records", indent=1)}
    with writing_results(path, "--save path"):
        path.parent.mkdir(parents=True, exist_ok=True)
        writers[path.suffix.lower()](path)
