"""Import the reference implementation's result files into a headtrace results directory.

The study's research scripts wrote one JSON per screened revision, with `all_head_selectivity`
(`"L{l}_H{h}"` -> class -> selectivity), and one PR-trajectory JSON per model (`pr`: head -> one
value per entry of `revisions`, with `ckpt_step` and `ckpt_tokens_B`). Importing them as Parquet
shards lets headtrace re-analyse the published results (`headtrace findings`).

What the files do not hold stays unknown: raw attention means, the null target, Gu's sink score,
capability and timings are NaN (booleans derived from them are NA), and so is the screen's precision
(the screen files do not state it: `dtype` stays empty, never headtrace's default). Where the files
say how they were made, the run record keeps it: the screen's `n_examples` and `n_valid`, and the PR
file's sample and precision (`pr_examples`, `pr_dtype`; the study's PR used n = 500 in float16).
Labels and all-head screens are recomputed from the selectivities with the default thresholds.
Tokens come from the revision name where `revisions` knows the scheme (Pythia), else from the PR
file. PR values of revisions without a screen file are not imported (a revision needs its
selectivities), and a PR file whose model has no screen file is not used: both are warned about.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from headtrace import __version__
from headtrace.errors import HeadtraceError
from headtrace.probes import CHANNELS, CLASS_KEYS
from headtrace.revisions import parse_revision, tokens_per_step_for
from headtrace.schema import ScreenConfig, add_labels, head_id
from headtrace.store import ResultsDir

SOURCE = "reference import"
_DTYPE_NAMES = {"fp16": "float16", "fp32": "float32", "bf16": "bfloat16"}  # the reference's names -> torch's
Warn = Callable[[str], None]
_HEAD_KEY = re.compile(r"^L(\d+)_H(\d+)$")


@dataclass(frozen=True)
class PRTrajectory:
    """One model's PR-trajectory file: PR per head per revision, and tokens per revision."""

    model: str
    path: str
    pr: dict[str, dict[tuple[int, int], float]]  # revision -> (layer, head) -> PR
    tokens: dict[str, float]
    head_dim: int | None
    n_examples: int | None  # the PR sample, where the file states it
    dtype: str | None  # the PR's precision, where the file states it (torch names: float16, ...)


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise HeadtraceError(f"cannot read '{path}': {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise HeadtraceError(
            f"'{path}' is not valid JSON ({exc.msg}, line {exc.lineno}); pass the reference "
            "implementation's screen or pr_trajectory files"
        ) from None
    if not isinstance(data, dict) or ("all_head_selectivity" not in data and "pr" not in data):
        raise HeadtraceError(
            f"'{path}' is neither a reference screen (all_head_selectivity) nor a PR trajectory (pr) file"
        )
    return data


def _head(key: str, path: Path) -> tuple[int, int]:
    match = _HEAD_KEY.match(key)
    if not match:
        raise HeadtraceError(f"'{path}': head key '{key}' is not of the form L<layer>_H<head>")
    return int(match.group(1)), int(match.group(2))


def _field(data: dict, key: str, path: Path):
    if key not in data:
        raise HeadtraceError(f"'{path}' lacks the field '{key}'; is it a reference implementation file?")
    return data[key]


def _pr_trajectory(data: dict, path: Path) -> PRTrajectory:
    revisions = [str(r) for r in _field(data, "revisions", path)]
    tokens_b = data.get("ckpt_tokens_B") or [None] * len(revisions)
    per_revision: dict[str, dict[tuple[int, int], float]] = {r: {} for r in revisions}
    for key, values in _field(data, "pr", path).items():
        if len(values) != len(revisions):
            raise HeadtraceError(f"'{path}': head {key} has {len(values)} PR values for {len(revisions)} revisions")
        for revision, value in zip(revisions, values):
            per_revision[revision][_head(key, path)] = np.nan if value is None else float(value)
    tokens = {r: float(t) * 1e9 for r, t in zip(revisions, tokens_b) if t is not None}
    dtype = data.get("dtype")
    return PRTrajectory(
        str(_field(data, "model", path)),
        str(path),
        per_revision,
        tokens,
        data.get("head_dim"),
        int(data["n_examples"]) if data.get("n_examples") is not None else None,
        _DTYPE_NAMES.get(dtype, dtype) if dtype is not None else None,
    )


def _tokens(model: str, revision: str, pr: PRTrajectory | None) -> float:
    parsed = parse_revision(revision, tokens_per_step_for(model)).tokens
    if parsed is not None:
        return parsed
    return pr.tokens.get(revision, np.nan) if pr else np.nan


def _screen_tables(data: dict, path: Path, pr: PRTrajectory | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    model, revision = str(_field(data, "model", path)), str(_field(data, "revision", path))
    selectivity = {_head(k, path): v for k, v in _field(data, "all_head_selectivity", path).items()}
    n_layers = max(l for l, _ in selectivity) + 1
    n_heads = max(h for _, h in selectivity) + 1
    if len(selectivity) != n_layers * n_heads:
        raise HeadtraceError(
            f"'{path}': all_head_selectivity covers {len(selectivity)} heads, not the full {n_layers} x {n_heads} grid"
        )
    tokens = _tokens(model, revision, pr)
    grid = sorted(selectivity)
    heads = pd.DataFrame(
        {
            "model": model,
            "revision": revision,
            "tokens": np.float64(tokens),
            "layer": np.array([l for l, _ in grid], dtype=np.int32),
            "head": np.array([h for _, h in grid], dtype=np.int32),
            "head_id": [head_id(l, h) for l, h in grid],
        }
    )
    for channel in CHANNELS:
        heads[f"mean_{channel}"] = np.nan
    for name, key in CLASS_KEYS.items():
        heads[f"sel_{key}"] = [float(selectivity[g].get(name, np.nan)) for g in grid]
    heads["sel_null"] = np.nan
    config = ScreenConfig()
    add_labels(heads, config.thresholds)
    heads["sink_score"] = np.nan
    heads["gu_sink"] = pd.array([None] * len(grid), dtype="boolean")
    pr_values = pr.pr.get(revision, {}) if pr else {}
    heads["pr"] = [pr_values.get(g, np.nan) for g in grid]
    heads["pr_cov"] = np.nan
    heads["baseline_underflow"] = pd.array([None] * len(grid), dtype="boolean")
    run = pd.DataFrame(
        [
            {
                "model": model,
                "revision": revision,
                "tokens": tokens,
                "architecture": None,
                "n_layers": n_layers,
                "n_heads": n_heads,
                "n_kv_heads": np.nan,
                "head_dim": float(pr.head_dim) if pr and pr.head_dim else np.nan,
                "probe": "synthetic",
                "n_examples": int(_field(data, "n_examples", path)),
                "n_valid": int(data.get("n_examples_valid", _field(data, "n_examples", path))),
                "seq_len": np.nan,
                "dtype": None,
                "device": None,
                "pr_examples": float(pr.n_examples) if pr and pr.n_examples else np.nan,
                "pr_dtype": pr.dtype if pr else None,
                "top1": np.nan,
                "top5": np.nan,
                "loss": np.nan,
                "mean_logit_answer": np.nan,
                "n_induction_heads": int(heads.induction_circuit.sum()),
                "n_previous_heads": int(heads.previous_circuit.sum()),
                "n_sink_heads": int(heads.sink.sum()),
                "sink_fraction": float(heads.sink.mean()),
                "gu_sink_fraction": np.nan,
                "n_underflow_heads": np.nan,
                "config_hash": SOURCE,
                "config_json": json.dumps(
                    {
                        "source": SOURCE,
                        "files": [path.name] + ([Path(pr.path).name] if pr else []),
                        "thresholds": {k: v for k, v in config.to_dict().items() if "threshold" in k},
                        "screen": {"n_examples": int(_field(data, "n_examples", path)), "dtype": None},
                        "pr": {"n_examples": pr.n_examples, "dtype": pr.dtype} if pr else None,
                    },
                    sort_keys=True,
                ),
                "wall_s": np.nan,
                "started_at": None,
                "headtrace_version": __version__,
                "torch_version": None,
                "transformers_version": None,
                "source": SOURCE,
            }
        ]
    )
    return heads, run


def reference_tables(files: Sequence[str | Path], warn: Warn | None = None) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """(heads, run) per screened revision of the given reference files, PR filled from PR files.

    `warn` hears, in one line each, what is given but not imported: a PR file whose model has no
    screen file, and PR revisions without a screen file."""
    if not files:
        raise HeadtraceError("no reference files given; pass screen_*.json and pr_trajectory.json files")
    loaded = [(Path(f), _load_json(Path(f))) for f in files]
    trajectories: dict[str, PRTrajectory] = {}
    for path, data in loaded:
        if "all_head_selectivity" not in data:
            trajectory = _pr_trajectory(data, path)
            if trajectory.model in trajectories:
                raise HeadtraceError(
                    f"two PR trajectory files for {trajectory.model}: "
                    f"'{trajectories[trajectory.model].path}' and '{path}'; pass one"
                )
            trajectories[trajectory.model] = trajectory
    tables, seen = [], {}
    for path, data in loaded:
        if "all_head_selectivity" in data:
            heads, run = _screen_tables(data, path, trajectories.get(str(data.get("model"))))
            key = (run.model[0], run.revision[0])
            if key in seen:
                raise HeadtraceError(f"'{seen[key]}' and '{path}' both hold {key[0]} at {key[1]}; pass one")
            seen[key] = path
            tables.append((heads, run))
    if not tables:
        raise HeadtraceError(
            "no reference screen files given (JSON with all_head_selectivity); PR files alone "
            "have no selectivities to analyse"
        )
    if warn:
        _warn_unused(trajectories, set(seen), warn)
    return tables


def _warn_unused(trajectories: dict[str, PRTrajectory], screened: set[tuple[str, str]], warn: Warn) -> None:
    """One line per PR file, or part of one, that no screen file takes up."""
    models = {model for model, _ in screened}
    for model, trajectory in trajectories.items():
        if model not in models:
            warn(
                f"'{trajectory.path}': its model {model} matches no imported screen file "
                f"({', '.join(sorted(models))}); its PR is not imported"
            )
            continue
        missing = [r for r in trajectory.pr if (model, r) not in screened]
        if missing:
            warn(
                f"'{trajectory.path}': PR of {len(missing)} revision(s) of {model} without a screen file is not "
                f"imported ({', '.join(missing)})"
            )


def import_reference(files: Sequence[str | Path], out: str | Path, warn: Warn | None = None) -> list[Path]:
    """Convert reference files into results shards under `out`; returns the run files written.

    Every file is read and checked before the first shard is written; `warn` as in `reference_tables`."""
    return [ResultsDir(out).write_shard(heads, run) for heads, run in reference_tables(files, warn)]


def provenance(runs: pd.DataFrame) -> list[str]:
    """Per imported model, one line: where its selectivities and PR came from, as the files say."""
    lines = []
    for model, group in runs.groupby("model", sort=False):
        sizes = ", ".join(map(str, sorted(set(group.n_examples))))
        text = f"selectivities from {len(group)} screen file(s) (n = {sizes}; precision not stated in the files)"
        pr = group.dropna(subset=["pr_examples"])
        if len(pr):
            dtype = ", ".join(sorted(set(pr.pr_dtype.dropna()))) or "precision not stated"
            text += f", PR from the PR file (n = {int(pr.pr_examples.iloc[0])}, {dtype}) at {len(pr)} revision(s)"
        lines.append(f"{model}: {text if len(pr) else text + ', no PR'}")
    return lines
