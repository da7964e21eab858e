"""The data behind each figure, taken from trajectory's tables (counts, milestones, findings, recall).

Nothing here re-derives a screen or a finding: the figures draw what `headtrace findings` reports,
so a number on the page is the number in findings.parquet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from headtrace.families import Gap, read_gaps
from headtrace.family_findings import across_seeds, members, summary_numbers
from headtrace.findings import findings_table
from headtrace.headview import Results, report_data
from headtrace.probes import CLASSES
from headtrace.schema import random_draws_summary
from headtrace.store import ABLATIONS, ResultsDir, weight_flags
from headtrace.trajectory import (
    ModelTrajectory,
    TrajectoryConfig,
    final_circuit,
    milestones,
    model_trajectories,
    tokens_label,
)

LABEL_ORDER: tuple[str, ...] = CLASSES + ("unclassified",)
SINK_MILESTONE, INDUCTION_MILESTONE = "sink fraction", "induction"  # prefixes of trajectory's milestone names
MAX_GRID_REVISIONS = 12  # label-grid panels shown per model
FALLBACK_HEADS = 3  # heads drawn when a model has no final circuit


@dataclass
class ReportData:
    """One results directory, read once and analysed with trajectory's tables."""

    results_dir: Path
    runs: pd.DataFrame
    config: TrajectoryConfig
    panels: list[ModelTrajectory]
    revisions: pd.DataFrame  # trajectory.revision_table, all models
    milestones: pd.DataFrame
    findings: pd.DataFrame
    ablations: pd.DataFrame | None  # DIR/ablations/*.parquet, one row per condition; None when absent
    unfinished: list[str]  # shards with a heads file but no run record
    families: dict[str, dict[int, str]] = field(default_factory=dict)  # family -> {seed: model} (families.py)
    gaps: list[Gap] = field(default_factory=list)  # revisions a family member lacks (from the manifest)
    head_views: dict[str, dict] = field(default_factory=dict)  # model -> headview.report_data, where patterns were kept
    flags: dict[tuple[str, str], str] = field(default_factory=dict)  # (model, revision) -> weights warning, suspect

    def panel(self, model: str) -> ModelTrajectory:
        return next(p for p in self.panels if p.name == model)

    def series(self) -> list[tuple[str, list[ModelTrajectory], bool]]:
        """What the panel-wide figures draw, in panel order: (model, [its panel], False) for a single
        model, (family, [member panels by seed], True) for a seed family."""
        family_of = {m: f for f, seeds in self.families.items() for m in seeds.values()}
        drawn, result = set(), []
        for panel in self.panels:
            family = family_of.get(panel.name)
            if family is None:
                result.append((panel.name, [panel], False))
            elif family not in drawn:
                drawn.add(family)
                result.append((family, [self.panel(m) for m in self.families[family].values()], True))
        return result

    def seed_of(self, model: str) -> int | None:
        return next((s for seeds in self.families.values() for s, m in seeds.items() if m == model), None)


def load(results_dir: str | Path, config: TrajectoryConfig = TrajectoryConfig()) -> ReportData:
    """Read a results directory and compute every table the report draws."""
    config.validate()
    out = Path(results_dir)
    results = ResultsDir(out)
    heads, runs = results.read()
    ablations = results.read_ablations()
    panels = model_trajectories(heads, runs, config, ablations)
    revisions = pd.concat([p.revisions for p in panels], ignore_index=True)
    gaps = read_gaps(out)
    table = findings_table(out, heads, runs, config, gaps)
    views = Results(heads, runs, results.read_patterns)
    head_views = {model: report_data(views, model) for model in views.models}
    return ReportData(
        results_dir=out,
        runs=runs,
        config=config,
        panels=panels,
        revisions=revisions,
        milestones=milestones(revisions, config),
        findings=table,
        ablations=ablations,
        unfinished=results.unfinished_shards(),
        families=members(runs),
        gaps=gaps,
        head_views={model: view for model, view in head_views.items() if view is not None},
        flags=weight_flags(out, runs),
    )


# --------------------------------------------------------------------------------------------
# Time axes.


@dataclass(frozen=True)
class TimeAxis:
    """Where a model's revisions sit on a time axis: training tokens (log) when every revision's
    tokens are known, else the training order."""

    x: np.ndarray  # one value per revision
    drawn: np.ndarray  # bool per revision: placeable (a log axis has no place for 0 tokens)
    log: bool
    names: list[str]

    @property
    def label(self) -> str:
        return "training tokens" if self.log else "revision (training order; tokens unknown)"


def time_axis(panel: ModelTrajectory) -> TimeAxis:
    tokens = panel.tokens
    if np.isfinite(tokens).all():
        return TimeAxis(tokens, tokens > 0, True, panel.names)
    return TimeAxis(np.arange(len(tokens), dtype=float), np.ones(len(tokens), bool), False, panel.names)


def revision_label(name: str, tokens: float) -> str:
    return f"{name} ({tokens_label(tokens)})" if np.isfinite(tokens) else name


# --------------------------------------------------------------------------------------------
# What each figure draws.


def sink_curve(panel: ModelTrajectory) -> pd.DataFrame:
    """Per revision: sink heads (first-token >= sink threshold), all heads, and their ratio."""
    return panel.revisions[["revision", "tokens", "screen_sink", "n_heads", "screen_sink_fraction"]]


def model_milestones(data: ReportData, model: str, prefix: str) -> pd.DataFrame:
    """The model's milestones whose name starts with `prefix` (sink fraction / induction)."""
    stones = data.milestones
    return stones.loc[(stones.model == model) & stones.milestone.str.startswith(prefix)].reset_index(drop=True)


def sink_layer_matrix(panel: ModelTrajectory) -> pd.DataFrame:
    """Sink heads per layer: [layer x revision], revisions in training order."""
    return panel.layers.pivot(index="layer", columns="revision", values="screen_sink").reindex(columns=panel.names)


def label_grid(panel: ModelTrajectory, revision: str) -> pd.DataFrame:
    """Each head's label at one revision: [layer x head]."""
    rows = panel.heads.loc[panel.heads.revision == revision]
    return rows.pivot(index="layer", columns="head", values="label")


def grid_revisions(panel: ModelTrajectory, limit: int = MAX_GRID_REVISIONS) -> list[str]:
    """The revisions given a label-grid panel: all, or `limit` spread over the training order
    (first and last included)."""
    names = panel.names
    if len(names) <= limit:
        return names
    return [names[i] for i in np.unique(np.round(np.linspace(0, len(names) - 1, limit)).astype(int))]


def trajectory_heads(panel: ModelTrajectory, config: TrajectoryConfig) -> tuple[list[str], bool]:
    """The final induction circuit (strongest first) and True; without one, the heads with the highest
    induction selectivity at any revision and False."""
    circuit = final_circuit(panel, config)
    if circuit:
        return circuit, True
    peak = panel.wide("sel_induction").max(axis=0).dropna()
    return list(peak.sort_values(ascending=False, kind="stable").index[:FALLBACK_HEADS]), False


def finding(data: ReportData, model: str, code: str) -> tuple[pd.Series, dict]:
    """One finding row of a model and its numbers."""
    row = data.findings.loc[(data.findings.model == model) & (data.findings.finding == code)].iloc[0]
    return row, json.loads(row.numbers)


def family_finding(data: ReportData, family: str, code: str) -> tuple[pd.Series, dict]:
    """One family row (a finding across seeds, family_findings.with_family_rows) and its numbers."""
    table = data.findings
    row = table.loc[table.model.isna() & (table.family == family) & (table.finding == code)].iloc[0]
    return row, summary_numbers(table, family, code)


def family_sink_curve(panels: list[ModelTrajectory]) -> pd.DataFrame:
    """Per revision of a family: median, min and max sink fraction over the members that have it."""
    return across_seeds(panels, "screen_sink_fraction")


def timeline(data: ReportData) -> pd.DataFrame:
    """Induction and sink milestones per model, with the grid bracket each lies in."""
    stones = data.milestones
    lane = np.select(
        [stones.milestone.str.startswith(INDUCTION_MILESTONE), stones.milestone.str.startswith(SINK_MILESTONE)],
        ["induction", "sink"],
        "",
    )
    return stones.assign(lane=lane).loc[lambda f: f.lane != ""].reset_index(drop=True)


def ablation_summary(ablations: pd.DataFrame) -> pd.DataFrame:
    """One row per ablation (model, revision, circuit, mode): the deciding metric under each
    condition (clean_value, circuit_value, layers_value), the matched-random seeds' mean and
    2.5-97.5 percentile range, and the stored
    differential with its interval and verdict (the matched-random summary is the CLI's too:
    schema.random_draws_summary)."""
    keys = ["model", "revision", "circuit", "mode"]
    rows = []
    for key, group in ablations.groupby(keys, sort=False):
        first = group.iloc[0]
        metric = first["decided_by"]
        values = {
            kind: group.loc[group.condition == kind, metric].to_numpy(dtype=float)
            for kind in ("clean", "circuit", "random", "layers", "single")
        }
        seeds = values["random"]
        mean, low, high = random_draws_summary(seeds)
        once = {  # the metric under each single condition; not named after the condition, so `circuit` stays its name
            f"{kind}_value": values[kind][0] if len(values[kind]) else np.nan for kind in ("clean", "circuit", "layers")
        }
        rows.append(
            {
                **dict(zip(keys, key)),
                "tokens": first["tokens"],
                "metric": metric,
                "circuit_heads": first["circuit_heads"],
                **once,
                "random_mean": mean,
                "random_low": low,
                "random_high": high,
                "random_seeds": seeds,
                "singles": values["single"],
                "single_heads": list(group.loc[group.condition == "single", "heads"]),
                "differential": first["differential"],
                "differential_low": first["differential_low"],
                "differential_high": first["differential_high"],
                "verdict": first["verdict"],
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# What is missing.


def panel_gaps(data: ReportData) -> list[str]:
    """What the whole panel lacks, one sentence each."""
    gaps = []
    if data.unfinished:
        gaps.append(
            f"{len(data.unfinished)} shard(s) have head tables but no run record yet (still being written, "
            f"or interrupted), and are not in this report: {', '.join(data.unfinished)}"
        )
    counts = {p.name: len(p.names) for p in data.panels}
    most = max(counts.values())
    fewer = [f"{model} ({n})" for model, n in counts.items() if n < most]
    if fewer:
        gaps.append(f"models with fewer revisions than the panel's largest ({most}): {', '.join(fewer)}")
    for gap in data.gaps:
        gaps.append(gap.text())
    if data.ablations is None:
        gaps.append(
            f"no ablations in {data.results_dir / ABLATIONS}/ (run `headtrace ablate MODEL --circuit "
            f"induction --out {data.results_dir}`)"
        )
    return gaps


def model_gaps(panel: ModelTrajectory, config: TrajectoryConfig) -> list[str]:
    """What one model's results lack for the figures, one sentence each."""
    gaps = []
    revisions = panel.revisions
    if len(panel.names) < 2:
        gaps.append(f"one revision ({panel.names[0]}): trajectories, recall and milestones need at least two")
    unknown = revisions.loc[revisions.tokens.isna(), "revision"].tolist()
    if unknown:
        gaps.append(
            f"tokens unknown for {', '.join(unknown)}: time axes use the training order and the panel-wide "
            "token axes leave this model out"
        )
    at_zero = revisions.loc[revisions.tokens <= 0, "revision"].tolist()
    if at_zero:
        gaps.append(f"{', '.join(at_zero)} at 0 tokens: no place on a log token axis (shown in the grids only)")
    if panel.heads["pr"].isna().all():
        gaps.append("no participation ratio (PR): the spectral-lead figure (F5) is not drawn")
    if revisions["top1"].isna().all():
        gaps.append("no capability (top-1) recorded: the trajectory figure has no capability curve")
    if panel.heads["sel_null"].isna().all():
        gaps.append("no null selectivity (sel_null): the noise floor (F6) is not measurable")
    if not final_circuit(panel, config):
        gaps.append(
            f"no head at {config.thresholds.induction_threshold:g}x induction selectivity at the last "
            "revision: no final circuit, so recall (F4) is not drawn and the trajectory figure shows the "
            "strongest heads"
        )
    return gaps
