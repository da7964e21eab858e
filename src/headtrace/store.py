"""Results on disk: one `ResultsDir` knows the layout of a results folder, and every file in it is
written atomically by `atomic_write`. Torch-free, with schema.py: the analysis (trajectory,
reference, report) and panel planning read results without loading torch.

Layout of a results directory (pandas, polars and DuckDB read each folder as one table):

    DIR/heads/<model-slug>@<revision>.parquet      one row per head
    DIR/runs/<model-slug>@<revision>.parquet       one row: the run record (capability, config, timings)
    DIR/ablations/<model-slug>@<revision>.parquet  one row per ablation condition (ablation.py)
    DIR/patterns/<model-slug>@<revision>.npz       kept attention rows (`keep_patterns`; patterns.py)
    DIR/manifest.json                              what a panel run or a watched training run wrote
    DIR/.headtrace.lock                            held by the panel or watcher writing the folder
    DIR/findings.parquet, findings.md, expect.json the findings (findings.py)
    DIR/report/index.html                          the report (report/)

A shard is complete when its run file exists: the heads file is renamed into place first, the run
file last, so a killed process never leaves a shard that looks finished.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow
import pyarrow.parquet
from filelock import lock_descriptor, unlock_descriptor
from packaging.version import InvalidVersion, Version

from headtrace import __version__
from headtrace.errors import DiskFull, HeadtraceError, ResultsNotWritable
from headtrace.revisions import parse_revision
from headtrace.schema import SCHEMA_VERSION, heads_in_set

HEADS = "heads"
RUNS = "runs"
ABLATIONS = "ablations"
COMPOSITION = "composition"  # composition.py: induction heads' composition with earlier heads
PATTERNS = "patterns"
MANIFEST = "manifest.json"
FINDINGS = "findings.parquet"
FINDINGS_MD = "findings.md"
EXPECT = "expect.json"
REPORT = "report"
LOCK = ".headtrace.lock"


def utc_now(seconds: float | None = None) -> str:
    """The timestamp format of every record headtrace writes (ISO 8601, UTC, whole seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def slug(model: str) -> str:
    """A file-name-safe model name: 'EleutherAI/pythia-1b' -> 'EleutherAI--pythia-1b'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", model.strip("/").replace("/", "--")) or "model"


def shard_name(model: str, revision: str | None) -> str:
    return f"{slug(model)}@{re.sub(r'[^A-Za-z0-9._-]', '-', revision or 'main')}.parquet"


def training_order(frame: pd.DataFrame, then: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rows in training order: by model, tokens seen, step (for revisions without tokens), revision
    name, then `then`. The one sort key of revisions everywhere."""
    step = frame["revision"].map(lambda name: parse_revision(str(name)).step)
    ordered = frame.assign(_step=step).sort_values(
        ["model", "tokens", "_step", "revision", *then], na_position="last", kind="stable"
    )
    return ordered.drop(columns="_step").reset_index(drop=True)


def run_record(
    run: pd.DataFrame,
    source: str,
    checkpoint_hash: str | None = None,
    downloaded_bytes: int = 0,
    fetch_s: float = 0.0,
    load_s: float = 0.0,
    **extra,
) -> pd.DataFrame:
    """A screen's run record with where its checkpoint came from, as a shard stores it (panels and
    the watcher alike)."""
    return run.assign(
        source=source,
        checkpoint_hash=checkpoint_hash,
        downloaded_bytes=downloaded_bytes,
        fetch_s=fetch_s,
        load_s=load_s,
        schema_version=SCHEMA_VERSION,
        **extra,
        finished_at=utc_now(),
    )


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write a file through `write(tmp)` into a temporary file beside `path`, fsync it, rename it
    over `path`: readers see the old file or the new one, never a part. The file gets the user's
    umask (as any file the user writes), not mkstemp's 0600: results folders are shared."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_folder(path: Path, write: Callable[[Path], None]) -> None:
    """Write a folder (a checkpoint) through `write(tmp)` into a hidden folder beside `path`, then
    rename it into place, replacing one already there: a killed process leaves no half folder."""
    tmp = path.parent / f".{path.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_text_atomic(text: str, path: Path) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(document, path: Path) -> None:
    write_text_atomic(json.dumps(document, indent=1) + "\n", path)


@contextlib.contextmanager
def writing_results(out_dir: str | Path, option: str = "--out") -> Iterator[None]:
    """A failed write (disk full, read-only, permissions) becomes one actionable error."""
    try:
        yield
    except OSError as exc:
        raise ResultsNotWritable(cannot_write(out_dir, exc, option)) from None


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


def read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """One Parquet file of a results directory; a corrupt or truncated one becomes one line naming it."""
    try:
        return pd.read_parquet(path, columns=columns)
    except (OSError, pyarrow.ArrowException) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HeadtraceError(
            f"cannot read '{path}': not a valid Parquet file ({reason}); `headtrace run` re-screens that revision "
            "(or delete the file)"
        ) from None


def readable(path: Path) -> bool:
    """Whether a Parquet file's footer reads (a cheap check: a truncated file fails it)."""
    try:
        pyarrow.parquet.read_metadata(path)
    except (OSError, pyarrow.ArrowException):
        return False
    return True


@dataclass(frozen=True)
class ResultsDir:
    """A results folder: where each file is, how shards are written and read back."""

    root: Path

    def __init__(self, root: str | Path):
        object.__setattr__(self, "root", Path(root))

    def __str__(self) -> str:
        return str(self.root)

    # Where things are.

    def heads_path(self, model: str, revision: str | None) -> Path:
        return self.root / HEADS / shard_name(model, revision)

    def run_path(self, model: str, revision: str | None) -> Path:
        return self.root / RUNS / shard_name(model, revision)

    def table_path(self, folder: str, model: str, revision: str | None) -> Path:
        """A per-(model, revision) table in a stage's own folder (ablations/, or a stage a user adds)."""
        return self.root / folder / shard_name(model, revision)

    def ablation_path(self, model: str, revision: str | None) -> Path:
        return self.table_path(ABLATIONS, model, revision)

    def patterns_path(self, model: str, revision: str | None) -> Path:
        return self.table_path(PATTERNS, model, revision).with_suffix(".npz")

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    @property
    def findings(self) -> Path:
        return self.root / FINDINGS

    @property
    def findings_md(self) -> Path:
        return self.root / FINDINGS_MD

    @property
    def expect(self) -> Path:
        return self.root / EXPECT

    @property
    def report(self) -> Path:
        return self.root / REPORT

    # Writing.

    def write_shard(
        self, heads: pd.DataFrame, run: pd.DataFrame, patterns: dict[str, np.ndarray] | None = None
    ) -> Path:
        """Write one (model, revision) shard: heads first, then the kept attention patterns (an
        earlier shard's are removed when there are none), the run record (the completion marker)
        last. Returns the run file's path."""
        record = run.iloc[0]
        model, revision = str(record["model"]), str(record["revision"])
        with writing_results(self.root):
            write_parquet_atomic(heads, self.heads_path(model, revision))
            if patterns is None:
                self.patterns_path(model, revision).unlink(missing_ok=True)
            else:
                atomic_write(self.patterns_path(model, revision), lambda tmp: _save_npz(tmp, patterns))
            write_parquet_atomic(run, self.run_path(model, revision))
        return self.run_path(model, revision)

    def write_table(self, folder: str, table: pd.DataFrame) -> Path:
        """Write one (model, revision) table of a stage (its `model` and `revision` columns name it)."""
        path = self.table_path(folder, str(table["model"].iloc[0]), str(table["revision"].iloc[0]))
        with writing_results(self.root):
            write_parquet_atomic(table, path)
        return path

    def write_ablation(self, table: pd.DataFrame) -> Path:
        return self.write_table(ABLATIONS, table)

    # Reading.

    def completed_shards(self) -> list[str]:
        """Names of shards whose run file exists (temporary files are ignored)."""
        runs = self.root / RUNS
        return sorted(p.name for p in runs.glob("*.parquet")) if runs.is_dir() else []

    def unfinished_shards(self) -> list[str]:
        """Shards whose heads file exists without its run record: being written, or interrupted."""
        heads = {p.name for p in (self.root / HEADS).glob("*.parquet")}
        return sorted(name.removesuffix(".parquet") for name in heads - set(self.completed_shards()))

    def existing_runs(self) -> pd.DataFrame:
        """Every finished shard's run record, with its `shard` name (empty when there are none). A shard
        without a readable heads table, or whose run file cannot be read, does not count: a panel
        runs its task again and replaces it."""
        frames = []
        for name in self.completed_shards():
            if not readable(self.root / HEADS / name):
                continue
            try:
                frames.append(pd.read_parquet(self.root / RUNS / name).assign(shard=name))
            except (OSError, pyarrow.ArrowException):
                continue
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["shard", "config_hash"])

    def read(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """All completed shards as (heads, runs), in training order (then layer, head)."""
        names = self.completed_shards()
        if not names:
            raise HeadtraceError(
                f"no results in '{self.root}' (expected {RUNS}/*.parquet); run `headtrace screen` or `run` first"
            )
        missing = [n for n in names if not (self.root / HEADS / n).exists()]
        if missing:
            raise HeadtraceError(
                f"results in '{self.root}' are inconsistent: run records without head tables: {missing}"
            )
        runs = pd.concat([read_table(self.root / RUNS / n) for n in names], ignore_index=True)
        check_one_config_per_model(self.root, runs)
        heads = pd.concat([read_table(self.root / HEADS / n) for n in names], ignore_index=True)
        return training_order(heads, ("layer", "head")), training_order(runs)

    def load(self) -> pd.DataFrame:
        """One tidy table: a row per head, with its revision's run columns (capability, config and
        checkpoint hashes, timings) and `same_weights_as`."""
        heads, runs = self.read()
        runs = runs.assign(same_weights_as=identical_weights(runs))
        extra = [c for c in runs.columns if c not in heads.columns or c in ("model", "revision")]
        return heads.merge(runs[extra], on=["model", "revision"], how="left", validate="many_to_one")

    def stored_screen(self, model: str, revision: str | None, config_hash: str) -> pd.DataFrame | None:
        """The heads table stored for (model, revision) under this screen config hash, else None."""
        heads, run = self.heads_path(model, revision), self.run_path(model, revision)
        if not (heads.is_file() and run.is_file()):
            return None
        if str(read_table(run, ["config_hash"]).config_hash.iloc[0]) != config_hash:
            return None
        return read_table(heads)

    def last_revision(self, model: str) -> str | None:
        """The last (training order) screened revision of `model` here, None when there is none."""
        runs = self.existing_runs()
        if "model" not in runs or not (runs["model"] == model).any():
            return None
        return str(training_order(runs.loc[runs["model"] == model])["revision"].iloc[-1])

    def final_circuit(self, model: str, head_set: str) -> tuple[tuple[tuple[int, int], ...], str]:
        """A head set's heads (schema.HEAD_SETS) at `model`'s last screened revision here, and that
        revision: the circuit of final:<set> (F8). One-line errors when there is none."""
        last = self.last_revision(model)
        if last is None:
            raise HeadtraceError(
                f"final:{head_set}: '{self.root}' holds no screened revision of {model}; screen its revisions "
                "there first (headtrace run, or headtrace screen --out)"
            )
        circuit = heads_in_set(read_table(self.heads_path(model, last)), head_set)
        if not circuit:
            raise HeadtraceError(
                f"final:{head_set}: the {head_set} set of {model} at its last revision in '{self.root}' ({last}) "
                "is empty: nothing to ablate"
            )
        return circuit, last

    def stored_screen_hash(self, model: str, revision: str | None) -> str | None:
        """The screen config hash of the shard stored for (model, revision), else None."""
        return _stored_hash(self.run_path(model, revision)) if readable(self.heads_path(model, revision)) else None

    def stored_ablation_hash(self, model: str, revision: str | None) -> str | None:
        """The config hash of the ablation stored for (model, revision), else None."""
        return _stored_hash(self.ablation_path(model, revision))

    def read_tables(self, folder: str) -> pd.DataFrame | None:
        """Every (model, revision) table in a stage's folder as one table; None when there are none."""
        paths = sorted((self.root / folder).glob("*.parquet"))
        return pd.concat([read_table(p) for p in paths], ignore_index=True) if paths else None

    def read_patterns(self, model: str, revision: str | None) -> dict[str, np.ndarray] | None:
        """The attention rows kept for (model, revision) (patterns.PatternKeeper.arrays), else None."""
        path = self.patterns_path(model, revision)
        if not path.is_file():
            return None
        try:
            with np.load(path) as stored:
                return {name: stored[name] for name in stored.files}
        except (OSError, ValueError) as exc:
            raise HeadtraceError(
                f"cannot read '{path}': {exc}; screen that revision again (or delete the file)"
            ) from None

    def read_ablations(self) -> pd.DataFrame | None:
        """Every ablation condition stored, one row per condition."""
        return self.read_tables(ABLATIONS)


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as handle:  # a file object: np.savez would add ".npz" to the temporary name
        np.savez_compressed(handle, **arrays)


def _stored_hash(path: Path) -> str | None:
    """The `config_hash` of a stored table's first row; None when absent or unreadable (compute it again)."""
    if not readable(path):
        return None
    hashes = read_table(path, ["config_hash"]).config_hash
    return str(hashes.iloc[0]) if len(hashes) else None


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


def identical_weights(runs: pd.DataFrame) -> pd.Series:
    """Per run, the revision with the same checkpoint hash and fewest tokens (else None), per model."""
    if "checkpoint_hash" not in runs:
        return pd.Series([None] * len(runs), index=runs.index, dtype=object)
    ordered = training_order(runs.reset_index(drop=True))
    first = ordered.dropna(subset=["checkpoint_hash"]).groupby(["model", "checkpoint_hash"]).revision.first()
    same = [first.get((m, h)) if isinstance(h, str) else None for m, h in zip(runs.model, runs.checkpoint_hash)]
    return pd.Series([s if s != r else None for s, r in zip(same, runs.revision)], index=runs.index, dtype=object)


def weight_flags(out: str | Path, runs: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Revisions whose weights are in doubt: the run record's `weights_warning` (the hub's listing)
    and the manifest's `suspects` (the neighbour check), one text per (model, revision)."""
    flags: dict[tuple[str, str], list[str]] = {}
    if "weights_warning" in runs:
        for run in runs.itertuples():
            if isinstance(run.weights_warning, str) and run.weights_warning:
                flags.setdefault((run.model, run.revision), []).append(run.weights_warning)
    try:
        suspects = json.loads(ResultsDir(out).manifest.read_text()).get("suspects") or []
        for s in suspects:
            far, near = f"{s['distance']:.3g}", f"{s['neighbour_distance']:.3g}"
            text = f"closer to {s['closer_to']} ({far}) than to its neighbours ({near})"
            flags.setdefault((s["model"], s["revision"]), []).append(f"suspect: {text}")
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        pass
    return {key: "; ".join(texts) for key, texts in flags.items()}


def new_shards(out: str | Path, interval: float, timeout: float | None = None) -> Iterator[list[str]]:
    """The shards finished since the last look, in the order they were written (a training run's
    revisions in training order): now, then every `interval` seconds until `timeout` (never without
    one). What `headtrace results --follow` prints; the folder need not exist yet."""
    results, seen, started = ResultsDir(out), set(), time.monotonic()
    while True:
        runs = results.root / RUNS
        fresh = sorted(
            (n for n in results.completed_shards() if n not in seen), key=lambda n: ((runs / n).stat().st_mtime_ns, n)
        )
        seen.update(fresh)
        yield fresh
        left = None if timeout is None else timeout - (time.monotonic() - started)
        if left is not None and left <= 0:
            return
        time.sleep(interval if left is None else min(interval, left))


def read_results(out: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(heads, runs) of a results directory (`ResultsDir.read`)."""
    return ResultsDir(out).read()


def load_results(out: str | Path) -> pd.DataFrame:
    """A results directory as one tidy table (`ResultsDir.load`)."""
    return ResultsDir(out).load()


# --------------------------------------------------------------------------------------------
# Who writes a folder: the lock and the manifest (panels and the watcher alike).

MANIFEST_SCHEMA = 1
MANIFEST_COLUMNS = (
    "model",
    "revision",
    "tokens",
    "source",
    "config_hash",
    "checkpoint_hash",
    "same_weights_as",
    "weights_warning",
    "downloaded_bytes",
    "fetch_s",
    "load_s",
    "wall_s",
    "started_at",
    "finished_at",
    "headtrace_version",
    "torch_version",
    "transformers_version",
    "device",
    "dtype",
    "run_id",
)


class OutputLock:
    """An exclusive lock on a results folder, held by an OS file lock (released when its process
    dies, so a dead run's lock is taken over); the file records who holds it, for the message.

    holder: how a refused process's message names this one; option: how this one's own refusal
    says to pick another folder."""

    def __init__(self, out: ResultsDir, holder: str = "another `headtrace run`", option: str = "--out"):
        self.path = out.lock
        self.holder, self.option = holder, option
        self.previous_owner: dict | None = None  # a dead run's record, when its lock was taken over
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not lock_descriptor(fd, blocking=False):
            owner = _read_owner(fd)
            os.close(fd)
            who = (
                f"pid {owner.get('pid')} on {owner.get('host')}, since {owner.get('started')}"
                if owner
                else "another process"
            )
            holder = owner.get("holder", "another `headtrace run`") if owner else "another `headtrace run`"
            raise HeadtraceError(
                f"'{self.path.parent}' is in use by {holder} ({who}); wait for it to finish or pick "
                f"another {self.option}"
            )
        self.previous_owner = _read_owner(fd)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": utc_now(),
            "command": " ".join(sys.argv),
            "holder": self.holder,
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        with contextlib.suppress(OSError):  # a full disk: the lock holds without its record
            os.write(fd, json.dumps(record).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Let the folder go (once; again does nothing)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        unlock_descriptor(fd)
        os.close(fd)


def _read_owner(fd: int) -> dict | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return json.loads(os.read(fd, 4096).decode() or "null")
    except ValueError:
        return None


def _newer(version: str) -> bool:
    try:
        return Version(version) > Version(__version__)
    except InvalidVersion:
        return True


def check_written_by_us(out: ResultsDir, runs: pd.DataFrame, option: str = "--out") -> None:
    """Refuse a directory that a newer headtrace (or results schema) wrote: we might misread it."""
    manifest = out.manifest
    if manifest.is_file():
        try:
            document = json.loads(manifest.read_text())
        except ValueError:
            document = {}
        if document.get("schema", 0) > MANIFEST_SCHEMA or _newer(str(document.get("headtrace_version", "0"))):
            raise HeadtraceError(
                f"'{out}' was written by headtrace {document.get('headtrace_version')} (manifest "
                f"schema {document.get('schema')}), newer than this {__version__}; upgrade headtrace "
                f"or pick another {option}"
            )
    for row in runs.itertuples():
        schema = getattr(row, "schema_version", None)
        if _newer(str(row.headtrace_version)) or (pd.notna(schema) and schema > SCHEMA_VERSION):
            raise HeadtraceError(
                f"'{out}/{RUNS}' holds {row.model}@{row.revision} from headtrace "
                f"{row.headtrace_version}, newer than this {__version__}; upgrade headtrace or pick "
                f"another {option}"
            )


def manifest_shards(runs: pd.DataFrame) -> list[dict]:
    """The manifest's record of each finished shard: its run record's provenance columns."""
    runs = runs.assign(same_weights_as=identical_weights(runs))
    columns = [c for c in MANIFEST_COLUMNS if c in runs]
    return json.loads(runs[columns + ["shard"]].to_json(orient="records"))


def write_manifest(out: ResultsDir, document: dict) -> None:
    """DIR/manifest.json, atomically; a full disk is one line that says the finished shards are kept."""
    try:
        write_json_atomic(document, out.manifest)
    except OSError as exc:
        raise DiskFull(
            f"cannot update '{out.manifest}': {exc.strerror or exc}; free space and re-run the same "
            "command (finished shards are kept)"
        ) from None


SAVE_FORMATS = (".parquet", ".csv", ".json")


def check_save_path(path: str | Path) -> None:
    """A `--save` path must name a format by its extension and lie where a file can be written."""
    path = Path(path)
    if path.suffix.lower() not in SAVE_FORMATS:
        raise HeadtraceError(
            f"cannot tell the format of '{path}' from its extension; end it with {', '.join(SAVE_FORMATS)}"
        )
    check_writable(path.parent, "--save path")


def save_table(table: pd.DataFrame, path: str | Path) -> None:
    """Write a table in the format its extension names (.parquet, .csv or .json: one record per row)."""
    path = Path(path)
    check_save_path(path)
    writers = {
        ".parquet": lambda p: table.to_parquet(p, index=False),
        ".csv": lambda p: table.to_csv(p, index=False),
        ".json": lambda p: table.to_json(p, orient="records", indent=1),
    }
    with writing_results(path, "--save path"):
        atomic_write(path, writers[path.suffix.lower()])
