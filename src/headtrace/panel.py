"""Panels: several models x their revisions, screened from one TOML file, resumable.

A panel file names the models (where their checkpoints come from and which revisions to screen),
the screen config (fields of `ScreenConfig`) and optional ablations:

    name = "xu2026"
    [screen]
    n_examples = 2000
    device = "cuda"
    [[models]]
    id = "EleutherAI/pythia-1b"          # hub id; for local sources, the name used in tables
    source = "hub"                       # hub | local | organism
    revisions = ["step1", "step4"]       # or "log:10" (log-spaced by tokens) or "all"
    # path = "checkpoints/run1"          # local and organism sources (relative to this file)
    # tokens_per_step = 4194304          # names headtrace cannot read tokens from (docs/revisions.md):
    # revision_pattern = "ckpt-(\\d+)"    # ... the step of names no scheme knows, x tokens_per_step
    # revision_tokens = "tokens.csv"     # ... or a table of names with their tokens (and steps)
    # expect = { F2 = "gradual" }        # expected result of a measurement finding: as expected / differs
    # dtype = "float16"                  # this model's compute dtype (default: the [screen] dtype)
    # seeds = [1, 2, 3]                  # a seed family: {seed} in id (and path) names each member;
    # seed0 = "EleutherAI/pythia-160m"   # ... seed0 the hub id of seed 0; family = "name"; organisms:
    # train = true                       # ... train = true trains those missing, organism = { steps = 600 }
    [ablation]                           # optional: a stage (stages.py): circuit, draws, mode, revisions;
                                         # circuit = "final:induction": F8's second pass (below)
    [download]                           # optional: attempts, backoff_s, max_backoff_s (RetryPolicy)
    [run]                                # optional: max_workers (weight files of a revision downloaded
                                         # side by side; default 4)

`run_panel` plans one task per (model, revision), checks every name before any work starts, skips
shards already written with the same config hash, runs the rest on an executor (executors.py),
and keeps `DIR/manifest.json` up to date. Each further section names a registered stage (the
ablation, or one a user adds) that runs on the selected revisions after their screen; a result
already stored with the same config is kept, so a re-run resumes. A lock file stops two runs
from sharing a directory. Planning is torch-free: the model code loads when a task runs. A seed
family's entry expands into one model per seed, whose shards carry `family` and `seed` columns
(families.py).

A stage with `second_pass` (the ablation of a `final:<set>` circuit, F8) runs after every screen:
the set is read at each model's last revision, then ablated at the section's revisions (`log:8`
unless it says). Its checkpoints are fetched again with the same executor and disk bound as the
first pass (at most two revisions on disk with the local executor): local and organism folders are
read in place, hub revisions come from the cache when `keep_checkpoints` kept them, else they
download again.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pandas as pd

from headtrace import __version__
from headtrace.errors import HeadtraceError
from headtrace.executors import (
    EXECUTORS,
    ExecutionOptions,
    QuietReporter,
    RayOptions,
    Reporter,
    Task,
    TaskResult,
    TaskSettings,
)
from headtrace.families import Gap, check_new_members, expand, groups, manifest_entry, select_members
from headtrace.finding_kinds import check_expectations
from headtrace.organism.config import ORGANISM_FILE, Organism
from headtrace.schema import DTYPES, FLAT_TYPES, ScreenConfig
from headtrace.revisions import NameMap, log_count, log_selection, selection_notes, training_key
from headtrace.series import Series, list_series
from headtrace.sources import SOURCES, CheckpointSource, HubSource, RetryPolicy
from headtrace.stages import STAGES, ScreenStage, SettingError, Stage
from headtrace.store import (
    MANIFEST_SCHEMA,
    OutputLock,
    ResultsDir,
    check_written_by_us,
    identical_weights,
    manifest_shards,
    read_table,
    utc_now,
    write_manifest,
)


# --------------------------------------------------------------------------------------------
# The panel file.


@dataclass(frozen=True)
class ModelSpec:
    """One model of a panel: where its checkpoints are and which revisions to screen."""

    id: str
    revisions: str | tuple[str, ...]
    source: str = "hub"
    path: str | None = None
    names: NameMap = NameMap()  # the entry's map of revision names to tokens (revisions.py)
    expect: tuple[tuple[str, str], ...] = ()  # (finding, expected result), e.g. (("F2", "gradual"),)
    dtype: str | None = None  # the compute dtype of this model's screens (default: the [screen] dtype)
    family: str | None = None  # a seed family's name (families.py); None for a single model
    seed: int | None = None  # the member's training seed
    organism: Organism | None = None  # what to train when its folder lacks it (train = true)
    line: int | None = field(default=None, compare=False)  # where `revisions` is written, for errors

    def checkpoint_source(self, retry: RetryPolicy = RetryPolicy(), max_workers: int = 4) -> CheckpointSource:
        source = SOURCES.get(self.source).make(self.id, self.path, self.names, retry)
        return dataclasses.replace(source, max_workers=max_workers) if isinstance(source, HubSource) else source


@dataclass(frozen=True)
class StagePlan:
    """A stage's section (e.g. `[ablation]`): the stage with its settings, and the revisions it
    runs on: final (each model's last), all, log:N (log-spaced over each model's), or a list of names."""

    stage: Stage
    revisions: str | tuple[str, ...] = "final"


@dataclass(frozen=True)
class Panel:
    name: str
    models: tuple[ModelSpec, ...]
    screen: ScreenConfig
    stages: tuple[StagePlan, ...] = ()  # the stages after the screen, in the order the file names them
    retry: RetryPolicy = RetryPolicy()
    path: str | None = None
    sha256: str | None = None
    max_workers: int = 4  # [run]: weight files of one revision downloaded side by side

    def screen_for(self, model: str) -> ScreenConfig:
        """The screen config of one model: the [screen] section with the model's own dtype, if it has one."""
        spec = next((m for m in self.models if m.id == model), None)
        return dataclasses.replace(self.screen, dtype=spec.dtype) if spec and spec.dtype else self.screen

    @property
    def expectations(self) -> dict[str, dict[str, str]]:
        """Per model, the expected result of each measurement finding it names (finding_kinds.FINDINGS)."""
        return {m.id: dict(m.expect) for m in self.models if m.expect}


# Allowed keys of each table and their types ("revisions": a string or a list of strings).
_ROOT_KEYS = {
    "name": "str",
    "description": "str",
    "screen": "table",
    "models": "tables",
    "download": "table",
    "run": "table",
}  # and a table per stage the file enables (STAGES: e.g. [ablation])
_MODEL_KEYS = {
    "id": "str",
    "source": "str",
    "path": "str",
    "revisions": "revisions",
    "tokens_per_step": "float",
    "revision_pattern": "str",
    "revision_tokens": "str",
    "expect": "table",
    "dtype": "str",
    "seeds": "seeds",
    "seed0": "str",
    "family": "str",
    "train": "bool",
    "organism": "table",
}
_SCREEN_KEYS = FLAT_TYPES
_DOWNLOAD_KEYS = {f.name: str(f.type) for f in dataclasses.fields(RetryPolicy)}
_RUN_KEYS = {"max_workers": "int"}


class _KeyLines:
    """Where each key and table of a TOML document is written, so errors can name the line."""

    _ARRAY = re.compile(r"^\s*\[\[\s*([\w.-]+)\s*\]\]")
    _TABLE = re.compile(r"^\s*\[\s*([\w.-]+)\s*\]")
    _KEY = re.compile(r"^\s*(\"?)([\w-]+)\1\s*=")

    def __init__(self, text: str):
        self.keys: dict[tuple[str, str], int] = {}
        self.tables: dict[str, int] = {}
        table, counts = "", {}
        for number, line in enumerate(text.splitlines(), 1):
            if match := self._ARRAY.match(line):
                index = counts[match[1]] = counts.get(match[1], -1) + 1
                table = f"{match[1]}.{index}"
                self.tables[table] = number
            elif match := self._TABLE.match(line):
                table = match[1]
                self.tables[table] = number
            elif match := self._KEY.match(line):
                self.keys.setdefault((table, match[2]), number)

    def of(self, table: str, key: str | None = None) -> int | None:
        return (
            (self.keys.get((table, key)) if key else None)
            or self.tables.get(table)
            or self.keys.get(("", table.split(".")[0]))
        )


_PYTHON_TYPES = {
    "str": str,
    "str | None": str,
    "int | None": int,
    "int": int,
    "float": (int, float),
    "bool": bool,
    "table": dict,
    "tables": list,
}


def _type_ok(value, kind: str) -> bool:
    if kind == "revisions":
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind == "seeds":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if isinstance(value, bool):  # TOML booleans are not numbers
        return kind == "bool"
    return isinstance(value, _PYTHON_TYPES[kind])


_TYPE_NAMES = {
    "str": "a string",
    "str | None": "a string",
    "int | None": "an integer",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "table": "a table",
    "tables": "an array of tables ([[models]])",
    "revisions": "a list of names or 'log:N' / 'all'",
    "seeds": "a list of integers",
}


class _Checker:
    def __init__(self, path: Path, lines: _KeyLines):
        self.path, self.lines = path, lines

    def fail(self, table: str, key: str | None, message: str) -> HeadtraceError:
        line = self.lines.of(table, key)
        return HeadtraceError(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")

    def table(self, values: dict, schema: dict[str, str], table: str, required: Sequence[str] = ()) -> dict:
        """Check keys and types of one table; returns it with lists turned into tuples."""
        where = f"[{table.split('.')[0]}]" if table else "the top level"
        for key, value in values.items():
            if key not in schema:
                hint = difflib.get_close_matches(key, list(schema), n=1)
                raise self.fail(
                    table,
                    key,
                    f"unknown key '{key}' in {where}"
                    + (f"; did you mean '{hint[0]}'?" if hint else f"; allowed: {', '.join(schema)}"),
                )
            if not _type_ok(value, schema[key]):
                raise self.fail(table, key, f"'{key}' must be {_TYPE_NAMES[schema[key]]}, not {value!r}")
        for key in required:
            if key not in values:
                raise self.fail(table, None, f"{where} is missing '{key}'")
        return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}

    def choice(self, table: str, key: str, value: str, allowed: Sequence[str]) -> None:
        if value not in allowed:
            raise self.fail(table, key, f"{key} = '{value}' is not one of: {', '.join(allowed)}")


def load_panel(path: str | Path) -> Panel:
    """Read and validate a panel file; every error names the file and the line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HeadtraceError(f"cannot read panel file '{path}': {exc.strerror or exc}") from None
    text = raw.decode("utf-8", errors="replace")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HeadtraceError(f"{path}: not valid TOML: {exc}") from None
    check = _Checker(path, _KeyLines(text))
    stage_sections = {name: "table" for name in STAGES if name != ScreenStage.name}
    document = check.table(document, {**_ROOT_KEYS, **stage_sections}, "", required=("models",))
    base = path.parent

    screen_values = check.table(document.get("screen", {}), _SCREEN_KEYS, "screen")
    if screen_values.get("texts"):
        screen_values["texts"] = str(base / screen_values["texts"])
    try:
        screen = ScreenConfig.of(**screen_values)
        screen.validate()
    except HeadtraceError as exc:
        raise check.fail("screen", None, str(exc)) from None

    models = []
    for index, entry in enumerate(document["models"]):
        table = f"models.{index}"
        if not isinstance(entry, dict):
            raise check.fail("", "models", "models must be an array of tables ([[models]])")
        values = check.table(entry, _MODEL_KEYS, table, required=("id", "revisions"))
        source = values.get("source", "hub")
        check.choice(table, "source", source, SOURCES.names())
        if SOURCES.get(source).needs_path:
            if "path" not in values:
                raise check.fail(table, None, f"model '{values['id']}' has source = \"{source}\" but no path")
            values["path"] = str((base / values["path"]).resolve())
        elif "path" in values:
            raise check.fail(table, "path", f"model '{values['id']}' comes from the {source}: drop path, or set source")
        values["names"] = _name_map(check, table, values, base)
        if "dtype" in values:
            check.choice(table, "dtype", values["dtype"], DTYPES)
        if "expect" in values:
            try:
                check_expectations({values["id"]: values["expect"]})
            except HeadtraceError as exc:
                raise check.fail(table, "expect", str(exc)) from None
            values["expect"] = tuple(sorted(values["expect"].items()))
        fail = functools.partial(check.fail, table)
        members = expand(values, fail)
        check_new_members(members, models, fail)
        models += [ModelSpec(**member, line=check.lines.of(table, "revisions")) for member in members]
    if not models:
        raise check.fail("", "models", "the panel names no models: add a [[models]] table")

    stages = tuple(_stage_plan(check, name, values) for name, values in document.items() if name not in _ROOT_KEYS)
    retry = RetryPolicy(**check.table(document.get("download", {}), _DOWNLOAD_KEYS, "download"))
    if retry.attempts < 1 or retry.backoff_s < 0:
        raise check.fail("download", None, "attempts must be >= 1 and backoff_s >= 0")
    run = check.table(document.get("run", {}), _RUN_KEYS, "run")
    if run.get("max_workers", 4) < 1:
        raise check.fail("run", "max_workers", "max_workers must be >= 1")
    return Panel(
        name=document.get("name", path.stem),
        models=tuple(models),
        screen=screen,
        stages=stages,
        retry=retry,
        path=str(path),
        sha256=hashlib.sha256(raw).hexdigest(),
        max_workers=run.get("max_workers", 4),
    )


def _name_map(check: _Checker, table: str, values: dict, base: Path) -> NameMap:
    """An entry's `tokens_per_step`, `revision_pattern` and `revision_tokens` (a table file, relative to
    the panel file) as one NameMap, each checked now; the keys leave `values`."""
    readers = {
        "tokens_per_step": lambda value: {"tokens_per_step": value},
        "revision_pattern": lambda value: {"pattern": value},
        "revision_tokens": lambda value: {"table": NameMap.read_table(base / value)},
    }
    parts: dict = {}
    for key, read in readers.items():
        value = values.pop(key, None)
        if value is None:
            continue
        try:
            part = read(value)
            NameMap(**part)
        except HeadtraceError as exc:
            raise check.fail(table, key, str(exc)) from None
        parts |= part
    return NameMap(**parts)


def _stage_plan(check: _Checker, name: str, values) -> StagePlan:
    """A stage's section: its settings (checked as the stage declares them) and its revisions."""
    kind = STAGES.get(name)
    values = check.table(values, {**kind.section_keys(), "revisions": "revisions"}, name)
    revisions = values.pop("revisions", None)
    if isinstance(revisions, str) and revisions not in ("final", "all"):
        if not log_count(revisions):
            raise check.fail(name, "revisions", "revisions must be 'final', 'all', 'log:N' or a list of names")
    try:
        stage = kind.from_section(values)
        return StagePlan(stage, stage.revisions_default if revisions is None else revisions)
    except SettingError as exc:
        raise check.fail(name, exc.key, str(exc)) from None
    except (HeadtraceError, TypeError, ValueError) as exc:
        raise check.fail(name, None, str(exc)) from None


def plan(
    panel: Panel,
    missing: list[Gap] | None = None,
    models: Sequence[ModelSpec] | None = None,
    notes: list[str] | None = None,
) -> list[Task]:
    """One task per (model, revision), every revision checked against the names that exist. A seed
    family's members are resolved together (families.select_members): revisions a member lacks go
    to `missing`. `models`: plan only these (default: all). `notes`: what each selection left out
    or cannot measure (revisions.selection_notes)."""
    tasks = []
    for group in groups(panel.models if models is None else models):
        sources = [model.checkpoint_source(panel.retry, panel.max_workers) for model in group]
        name = group[0].family or group[0].id
        where = f"{panel.path}:{group[0].line}: {name}" if panel.path else name
        catalogs = [source.revisions() for source in sources]
        chosen, gaps = select_members(group, catalogs, where)
        tasks += [Task(source, revision) for source, revisions in zip(sources, chosen) for revision in revisions]
        if missing is not None:
            missing += gaps
        if notes is not None:
            for model, catalog, revisions in zip(group, catalogs, chosen):
                label = where if len(group) == 1 else f"{where} ({model.id})"
                notes += selection_notes(catalog, revisions, group[0].revisions, label)
    return tasks


# --------------------------------------------------------------------------------------------
# What the hub's listing says of the planned revisions' weights (series.py).


@dataclass
class WeightsPlan:
    """Per shard: the shard whose tables it takes (identical weights: neither downloaded nor screened
    again), the warning its run record carries (some weight files shared, or equal to the final
    revision), and the weight bytes its download costs (None: not known before fetching)."""

    copies: dict[str, str] = field(default_factory=dict)  # shard -> the shard screened for it
    warnings: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int | None] = field(default_factory=dict)
    listings: dict[str, Series] = field(default_factory=dict)  # model -> its series (hub models)
    notes: list[str] = field(default_factory=list)  # models planned without their listing, and why


def weights_plan(tasks: Sequence[Task], keep: set[str] = frozenset()) -> WeightsPlan:
    """Read each hub model's listing for its planned revisions (no weight byte downloaded). Among a
    model's revisions with the same weight files, the one with fewest tokens is screened and the
    others take its tables, except the shards in `keep` (a later stage needs their checkpoint)."""
    result = WeightsPlan()
    by_model: dict[str, list[Task]] = {}
    for task in tasks:
        by_model.setdefault(task.source.name, []).append(task)
        result.sizes[task.shard] = None
    for model, group in by_model.items():
        source = group[0].source
        if not isinstance(source, HubSource):
            continue
        try:
            found = list_series(source, only=[n for t in group for n in (t.revision.name, t.revision.alias_of) if n])
        except HeadtraceError as exc:  # offline without a cached listing: duplicates are found after the screen
            result.notes.append(f"{model}: planned without the hub's listing ({exc})")
            continue
        result.listings[model] = found
        listed = found.by_name()
        kept: dict[frozenset[str], Task] = {}
        for task in sorted(group, key=lambda t: training_key(t.revision)):
            entry = listed.get(task.revision.alias_of or task.revision.name)
            if entry is None or not entry.files:
                continue
            result.sizes[task.shard] = entry.size
            first = kept.setdefault(entry.digests, task)
            if first is not task and task.shard not in keep:
                result.copies[task.shard] = first.shard
                result.sizes[task.shard] = 0
        names = {t.revision.alias_of or t.revision.name: t for t in group}
        for duplicate in found.duplicates:
            task = names.get(duplicate.revision)
            if task is not None and duplicate.kind != "identical" and task.shard not in result.copies:
                text = duplicate.text()
                result.warnings[task.shard] = "; ".join(filter(None, [result.warnings.get(task.shard), text]))
    return result


def write_copy(results: ResultsDir, task: Task, screened: Task, config_hash: str) -> dict | None:
    """Write `task`'s shard from `screened`'s stored tables (the same weight files): its own revision
    and tokens, `same_weights_as` set, nothing downloaded. None when `screened` has no stored shard."""
    heads = results.stored_screen(screened.source.name, screened.revision.name, config_hash)
    if heads is None:
        return None
    run = read_table(results.run_path(screened.source.name, screened.revision.name))
    tokens = float("nan") if task.revision.tokens is None else float(task.revision.tokens)
    heads = heads.assign(revision=task.revision.name, tokens=tokens)
    run = run.assign(
        revision=task.revision.name,
        tokens=tokens,
        same_weights_as=screened.revision.name,
        weights_warning=None,
        downloaded_bytes=0,
        fetch_s=0.0,
        load_s=0.0,
        finished_at=utc_now(),
    )
    results.write_shard(heads, run)
    return run.iloc[0].to_dict()


# --------------------------------------------------------------------------------------------
# Training the organisms a panel asks for.

Trainer = Callable[[Organism, Path, str], object]  # (organism, folder, model id): train it there


def untrained(models: Sequence[ModelSpec], where: str = "panel") -> list[ModelSpec]:
    """Members with `train = true` whose folder does not hold their organism, complete. A folder that
    holds something else is refused now, before any training."""
    pending = []
    for model in models:
        if model.organism is None:
            continue
        folder = Path(model.path)
        if not folder.is_dir() or not any(folder.iterdir()):
            pending.append(model)
            continue
        try:
            meta = json.loads((folder / ORGANISM_FILE).read_text())
        except (OSError, ValueError):
            meta = None
        if not isinstance(meta, dict) or meta.get("organism") != model.organism.to_dict():
            raise HeadtraceError(
                f"{where}:{model.line}: '{folder}' is not empty and holds no organism with "
                f"{model.id}'s settings; delete it or change path"
            )
        if not meta.get("complete"):
            pending.append(model)
    return pending


def train_pending(panel: Panel, train_one: Trainer | None = None) -> list[str]:
    """Train the organisms of `train = true` entries that are not trained yet; returns their model ids.

    Every other model's revisions are checked first (`plan`), so a typo elsewhere costs no
    training. `train_one` trains one (default: `organism.train`, silently)."""
    pending = untrained(panel.models, panel.path or panel.name)
    if not pending:
        return []
    waiting = {m.family or m.id for m in pending}
    plan(panel, models=[m for m in panel.models if (m.family or m.id) not in waiting])
    if train_one is None:
        from headtrace.organism.trainer import train  # torch: planning a panel stays torch-free

        def train_one(organism, folder, _model):
            return train(folder, organism)

    for model in pending:
        train_one(model.organism, Path(model.path), model.id)
    return [m.id for m in pending]


# --------------------------------------------------------------------------------------------
# The output directory: lock, resume decisions, manifest.


def _write_manifest(
    out: ResultsDir,
    panel: Panel,
    runs: pd.DataFrame,
    failed: dict[str, str],
    missing: Sequence[Gap] = (),
    extra: dict | None = None,
) -> None:
    document = {
        "schema": MANIFEST_SCHEMA,
        "headtrace_version": __version__,
        "updated_at": utc_now(),
        "panel": {"name": panel.name, "file": panel.path, "sha256": panel.sha256},
        "config_hash": panel.screen.config_hash,
        "config": panel.screen.to_dict(),
        "stages": {p.stage.name: {"revisions": p.revisions, **p.stage.describe()} for p in panel.stages},
        "shards": manifest_shards(runs),
        "failed": [{"task": k, "error": v} for k, v in failed.items()],
        **manifest_entry(panel.models, missing),
        **(extra or {}),
    }
    write_manifest(out, document)


def _weights_entries(result: "RunOutcome", tasks: Sequence[Task]) -> dict:
    """The manifest's account of the listing: shards taken from another's tables, warnings, suspects."""
    by_shard = {t.shard: t for t in tasks}
    return {
        "same_weights": [
            {
                "model": by_shard[copy].source.name,
                "revision": by_shard[copy].revision.name,
                "same_weights_as": by_shard[screened].revision.name,
                "downloaded": False,
                "screened": False,
            }
            for copy, screened in result.copies.items()
        ],
        "weights_warnings": [
            {"model": by_shard[s].source.name, "revision": by_shard[s].revision.name, "warning": w}
            for s, w in result.warnings.items()
        ],
        "suspects": [dataclasses.asdict(s) for s in result.suspects],
    }


# --------------------------------------------------------------------------------------------
# Running a panel.


@dataclass
class RunOutcome:
    """What a `run_panel` call did."""

    out: Path
    planned: list[Task]
    skipped: list[str] = field(default_factory=list)  # shards already done with this config
    recomputed: list[str] = field(default_factory=list)  # shards written by another config, redone
    computed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # task label -> error
    written: list[str] = field(default_factory=list)  # shards this call wrote
    stopped_by: str | None = None  # the error that stopped the panel (disk full, results not writable)
    identical: list[tuple[str, str, str]] = field(default_factory=list)  # (model, revision, same weights as)
    stale_lock: dict | None = None
    stages: dict[str, "StageTally"] = field(default_factory=dict)  # per stage after the screen
    missing: list[Gap] = field(default_factory=list)  # revisions of its family's selection a member lacks
    notes: list[str] = field(default_factory=list)  # what the revision selections left out or cannot measure
    copies: dict[str, str] = field(default_factory=dict)  # shard -> the shard with the same weights screened for it
    copied: list[str] = field(default_factory=list)  # copies this call wrote from their screened shard's tables
    warnings: dict[str, str] = field(default_factory=dict)  # shard -> weights warning (series.py)
    suspects: list = field(default_factory=list)  # series.Suspect: the neighbour check after the screen


@dataclass
class StageTally:
    """What a run did with one stage after the screen."""

    todo: list[str] = field(default_factory=list)  # shards it runs on in this call
    kept: list[str] = field(default_factory=list)  # shards whose result is already stored with this config
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # task label -> why it did not run


def run_panel(
    panel: Panel,
    out: str | Path,
    executor: str = "local",
    keep_checkpoints: bool = False,
    prefetch: bool = True,
    ray: RayOptions = RayOptions(),
    reporter: Reporter | None = None,
    on_start: Callable[[RunOutcome], None] | None = None,
    train_one: Trainer | None = None,
) -> RunOutcome:
    """Screen every (model, revision) of a panel into `out`, skipping shards already done.

    All revision names are checked before any work starts; organisms of `train = true` entries are
    trained first (`train_pending`, by `train_one`). `on_start` sees the plan (what will be skipped
    and recomputed) before the first task runs. Hub models are planned with their listing
    (`weights_plan`): a revision with the same weight files as one with fewer tokens takes its tables;
    one sharing some files, or equal to the final revision, is screened with a `weights_warning`.
    After the screen, the neighbour check (series.neighbour_suspects) names suspects."""
    EXECUTORS.get(executor)
    train_pending(panel, train_one)
    missing: list[Gap] = []
    notes: list[str] = []
    tasks = plan(panel, missing, notes=notes)
    targets = {p.stage.name: stage_targets(panel, p, tasks) for p in panel.stages}
    weights = weights_plan(tasks, keep=set().union(*targets.values()))
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HeadtraceError(f"cannot create output directory '{out}': {exc.strerror or exc}") from None
    reporter = reporter or QuietReporter()
    results = ResultsDir(out)
    by_shard = {t.shard: t for t in tasks}
    with OutputLock(results) as lock:
        runs = results.existing_runs()
        check_written_by_us(results, runs)
        result = RunOutcome(out=out, planned=tasks, stale_lock=lock.previous_owner, missing=missing, notes=notes)
        result.copies, result.warnings = dict(weights.copies), dict(weights.warnings)
        result.notes += weights.notes
        written = dict(zip(runs.shard, runs.config_hash))
        result.stages = {p.stage.name: StageTally() for p in panel.stages}
        todo, pending_copies = [], []
        for task in tasks:
            config = panel.screen_for(task.source.name)
            screened = written.get(task.shard) == config.config_hash
            if screened:
                result.skipped.append(task.shard)
            elif task.shard in weights.copies:
                pending_copies.append(task)
                continue
            else:
                (result.recomputed if task.shard in written else result.computed).append(task.shard)
            names = [] if screened else [ScreenStage.name]
            for stage_plan in panel.stages:
                name, tally = stage_plan.stage.name, result.stages[stage_plan.stage.name]
                if task.shard not in targets[name]:
                    continue
                if screened and stage_plan.stage.done(results, task.source.name, task.revision.name, config):
                    tally.kept.append(task.shard)
                else:
                    tally.todo.append(task.shard)
                    if not stage_plan.stage.second_pass:
                        names.append(name)
            if names:
                todo.append(
                    dataclasses.replace(task, stages=tuple(names), weights_warning=weights.warnings.get(task.shard))
                )
        if on_start:
            on_start(result)
        runs = runs.set_index("shard", drop=False)

        def copy_from(source_shard: str) -> None:
            nonlocal runs
            for task in [t for t in pending_copies if weights.copies[t.shard] == source_shard]:
                config = panel.screen_for(task.source.name)
                record = write_copy(results, task, by_shard[source_shard], config.config_hash)
                if record is None:
                    result.failed[task.label] = (
                        f"its weights equal {by_shard[source_shard].label}, which was not screened"
                    )
                    continue
                result.copied.append(task.shard)
                runs = _with_row(runs, TaskResult(task, run=record))
                reporter.warn(
                    f"{task.label}: same weight files as {by_shard[source_shard].revision.name}, its tables taken"
                )

        for shard in result.skipped:
            copy_from(shard)
        options = ExecutionOptions(prefetch=prefetch, ray=ray)
        extra = functools.partial(_weights_entries, result, tasks)

        def take(outcome: TaskResult, first_pass: bool) -> None:
            nonlocal runs
            if outcome.error:
                result.failed[outcome.task.label] = outcome.error
            elif outcome.run is not None:
                result.written.append(outcome.task.shard)
                runs = _with_row(runs, outcome)
                same = identical_weights(runs).get(outcome.task.shard)
                if same:
                    reporter.warn(f"{outcome.task.label} has the same weight files as {same}")
            if first_pass and not outcome.error:
                copy_from(outcome.task.shard)
            elif first_pass:
                for task in [t for t in pending_copies if weights.copies[t.shard] == outcome.task.shard]:
                    result.failed[task.label] = f"its weights equal {outcome.task.label}, which failed"
            for name in outcome.stages:
                result.stages[name].done.append(outcome.task.shard)
            for name, error in outcome.stage_errors.items():
                result.stages[name].failed[outcome.task.label] = error
                reporter.warn(f"{outcome.task.label}: {name} not run: {error}")
            _write_manifest(results, panel, runs, result.failed, missing, extra())
            if outcome.fatal:
                result.stopped_by = f"{outcome.task.label}: {outcome.error or '; '.join(outcome.stage_errors.values())}"

        for outcome in _execute(todo, panel, out, executor, keep_checkpoints, options, reporter):
            take(outcome, first_pass=True)
            if result.stopped_by:
                break
        if not result.stopped_by:  # second pass: stages that need every screen (a final circuit, F8)
            later = _second_pass(panel, tasks, targets, result, results)
            for outcome in _execute(later, panel, out, executor, keep_checkpoints, options, reporter):
                take(outcome, first_pass=False)
                if result.stopped_by:
                    break
        if result.stopped_by is None:
            result.suspects = _neighbour_check(results, runs, tasks)
            for suspect in result.suspects:
                reporter.warn(suspect.text())
        _write_manifest(results, panel, runs, result.failed, missing, extra())
    mine = runs[runs.shard.isin({t.shard for t in tasks})]
    result.identical = [(r.model, r.revision, s) for r, s in zip(mine.itertuples(), identical_weights(mine)) if s]
    return result


@dataclass(frozen=True)
class PlannedShard:
    """One line of `run --dry-run`: what would happen to a (model, revision)."""

    model: str
    revision: str
    action: str  # download | local | kept | same weights | train first
    bytes: int | None  # weight bytes to download (None: unknown before fetching; 0: none)
    why: str = ""


def dry_run(panel: Panel, out: str | Path) -> list[PlannedShard]:
    """What `run_panel` would do, from the listings alone: no weight is downloaded, no organism is
    trained, nothing is written."""
    waiting = {m.family or m.id for m in untrained(panel.models, panel.path or panel.name)}
    rows = [
        PlannedShard(m.id, str(m.revisions), "train first", 0, "an organism not trained yet (train = true)")
        for m in panel.models
        if (m.family or m.id) in waiting
    ]
    tasks = plan(panel, models=[m for m in panel.models if (m.family or m.id) not in waiting])
    targets = {p.stage.name: stage_targets(panel, p, tasks) for p in panel.stages}
    weights = weights_plan(tasks, keep=set().union(*targets.values()))
    results = ResultsDir(out)
    runs = results.existing_runs() if Path(out).is_dir() else pd.DataFrame(columns=["shard", "config_hash"])
    written = dict(zip(runs.shard, runs.config_hash))
    by_shard = {t.shard: t for t in tasks}
    for task in tasks:
        name, revision = task.source.name, task.revision.name
        if written.get(task.shard) == panel.screen_for(name).config_hash:
            rows.append(PlannedShard(name, revision, "kept", 0, "already screened with this config"))
        elif task.shard in weights.copies:
            same = by_shard[weights.copies[task.shard]].revision.name
            rows.append(
                PlannedShard(name, revision, "same weights", 0, f"identical weight files to {same}: its tables")
            )
        elif isinstance(task.source, HubSource):
            rows.append(
                PlannedShard(
                    name, revision, "download", weights.sizes.get(task.shard), weights.warnings.get(task.shard, "")
                )
            )
        else:
            rows.append(PlannedShard(name, revision, "local", 0, "read from disk"))
    return rows


def _neighbour_check(results: ResultsDir, runs: pd.DataFrame, tasks: Sequence[Task]) -> list:
    """series.neighbour_suspects over the panel's screened shards (never drops data)."""
    from headtrace.series import neighbour_suspects

    mine = runs[runs.shard.isin({t.shard for t in tasks})] if len(runs) else runs
    if not len(mine):
        return []
    mine = mine.assign(same_weights_as=identical_weights(mine.reset_index(drop=True)).to_numpy())
    heads = [read_table(results.heads_path(r.model, r.revision)) for r in mine.itertuples()]
    return neighbour_suspects(pd.concat(heads, ignore_index=True), mine.reset_index(drop=True))


def _second_pass(
    panel: Panel, tasks: list[Task], targets: dict[str, set[str]], result: RunOutcome, results: ResultsDir
) -> list[Task]:
    """The tasks of the second-pass stages, decided now that every screen is stored: a target whose
    result is stored under the final circuit as it is now is kept, the others run (each tally is
    redone, since the final circuit may have changed in the first pass)."""
    later: dict[str, list[str]] = {}
    by_shard = {t.shard: t for t in tasks}
    for stage_plan in panel.stages:
        stage = stage_plan.stage
        if not stage.second_pass:
            continue
        tally = result.stages[stage.name] = StageTally()
        for task in tasks:
            if task.shard not in targets[stage.name] or task.label in result.failed:
                continue
            config = panel.screen_for(task.source.name)
            if stage.done(results, task.source.name, task.revision.name, config):
                tally.kept.append(task.shard)
            else:
                tally.todo.append(task.shard)
                later.setdefault(task.shard, []).append(stage.name)
    return [dataclasses.replace(by_shard[shard], stages=tuple(names)) for shard, names in later.items()]


def stage_targets(panel: Panel, spec: StagePlan, tasks: list[Task]) -> set[str]:
    """Shards a stage runs on: each model's last planned revision (final), every one (all), N
    log-spaced ones of each model (log:N, by tokens as revisions.log_spaced spaces them), or the named ones."""
    if spec.revisions == "all":
        return {t.shard for t in tasks}
    if isinstance(spec.revisions, str) and log_count(spec.revisions):
        chosen = set()
        for model in dict.fromkeys(t.source.name for t in tasks):
            mine = {t.revision: t for t in tasks if t.source.name == model}
            picked = log_selection(list(mine), log_count(spec.revisions))
            chosen |= {mine[r].shard for r in picked}
        return chosen
    if spec.revisions == "final":  # most tokens; where tokens are unknown, the last one listed
        final: dict[str, Task] = {}
        for task in tasks:
            best = final.get(task.source.name)
            if (
                best is None
                or best.revision.tokens is None
                or task.revision.tokens is None
                or task.revision.tokens >= best.revision.tokens
            ):
                final[task.source.name] = task
        return {t.shard for t in final.values()}
    names = set(spec.revisions)
    unknown = names - {t.revision.name for t in tasks}
    if unknown:
        raise HeadtraceError(
            f"{panel.path or panel.name}: [{spec.stage.name}] revisions {', '.join(sorted(unknown))} are not "
            "among the panel's revisions; pick from the models' revisions"
        )
    return {t.shard for t in tasks if t.revision.name in names}


def _with_row(runs: pd.DataFrame, outcome: TaskResult) -> pd.DataFrame:
    row = pd.DataFrame([{**outcome.run, "shard": outcome.task.shard}]).set_index("shard", drop=False)
    return pd.concat([runs.drop(index=outcome.task.shard, errors="ignore"), row]) if len(runs) else row


def _execute(
    tasks: list[Task], panel: Panel, out: Path, executor: str, keep: bool, options: ExecutionOptions, reporter: Reporter
) -> Iterator[TaskResult]:
    if not tasks:
        return iter(())
    settings = TaskSettings(
        config=panel.screen,
        out=str(out),
        keep_checkpoints=keep,
        stages=(ScreenStage(), *(p.stage for p in panel.stages)),
        model_configs=tuple((m.id, panel.screen_for(m.id)) for m in panel.models if m.dtype),
        members=tuple((m.id, m.family, m.seed) for m in panel.models if m.family),
    )
    return EXECUTORS.get(executor)(tasks, settings, reporter, options)
