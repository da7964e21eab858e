"""Trajectory analysis: when each circuit formed, computed from a panel's tables (docs/definitions.md).

Input: the (heads, runs) tables of `store.read_results`, any number of models, each model's
revisions ordered by training tokens. Output: class counts per revision and per layer, milestones,
and the study's findings F1-F6, each judged by an explicit criterion whose thresholds live in
`TrajectoryConfig` (finding_kinds.py registers them as units, with F7, and assembles the table).

Counts come in two kinds, named apart: `screen_*` columns are the all-head screens (a head may be
in several: induction circuit >= 50x, previous-token circuit = best class previous-token and >= 100x
(the reference's shipped circuit; `previous_any`: any head >= 100x), sink = first-token >= 30x,
Gu sink score > 0.3), `label_*` columns count best-class labels (one per head). Both are re-derived
from the selectivity columns with `schema.add_labels`, so their thresholds are parameters of the
analysis; with the defaults they equal the screen's own columns.

Milestone = the first revision where a condition holds. Checkpoints are a grid: the event happened
after the revision before it (the bracket's lower end; 0 tokens for the first revision) and no
later than the milestone revision.

Criteria (defaults):
- F1 floor: no sink head in layers 0 .. floor_layers-1 (2) at any revision.
- F2 shape (a measurement, not a claim): `sharp` when the largest adjacent-revision rise of the sink
  fraction is at least `sharp_share` (0.5) of its total rise (the largest rise between any two
  revisions, in order), else `gradual`. Given an expected shape per model (a panel's
  `expect = { F2 = "gradual" }`), the status says `as expected` or `differs`.
  Checked on the study: OLMo's 7.4% -> 70.3% step is >= 62.9% of any possible total rise (a fraction
  rises at most 100 points), so sharp whatever its other revisions; Pythia's largest step is 18.8 of
  57.8 points (33%), gradual. Below `min_rise` (5 points) there is no rise to judge.
- F3 timing: tokens(sink fraction >= 50%) / tokens(induction circuit >= 3 heads) > 1, with the ratio's
  range over both brackets; holds when even the range's low end is >= 1, fails when its high end
  is <= 1, otherwise the grid cannot order the two.
- F4 early identification: recall of the final circuit (heads >= 50x at the last revision) reaches
  `early_recall` (2/3) within the first `early_share` (10%) of training tokens (the last revision's).
- F5 spectral lead: PR is "elevated" at the first revision where it stands at least `pr_rise_fraction`
  (0.5) of its largest rise above its running minimum, provided that rise is >= `pr_min_rise` (1.0,
  one effective dimension): PR at initialisation is no baseline (Pythia's layer-0 heads start near
  182 and collapse; deeper heads start near 2), so elevation is a rise from the floor reached so far,
  scaled by the head's own largest rise. The claim is "at or before": holds when the median lead
  over final-circuit heads is >= 0 revisions. A head already past the threshold at the first
  revision has no measurable lead and is left out. The verdict is recomputed for `pr_rise_fraction`
  over `PR_RISE_RANGE` (0.25-0.75), so a verdict that flips inside it shows as fragile.
- F6 noise floor: every induction-circuit head, at every revision, lies above that revision's null
  p99 (the `null_quantile` of `sel_null` over heads whose baseline did not underflow).

docs/definitions.md ("Trajectories and findings") gives the reasons and the checks against the study.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.probes import CLASS_KEYS, CLASSES
from headtrace.schema import Thresholds, add_labels
from headtrace.store import training_order

HOLDS, DOES_NOT_HOLD, NOT_MEASURABLE = "holds", "does not hold", "not measurable"
SHARP, GRADUAL = "sharp", "gradual"  # F2 is a measurement: its status is the shape ...
AS_EXPECTED, DIFFERS = "as expected", "differs"  # ... or, given an expected shape, the comparison
PR_RISE_RANGE: tuple[float, ...] = tuple(np.round(np.linspace(0.25, 0.75, 11), 2))  # F5 sensitivity grid
SCREENS: tuple[str, ...] = ("induction_circuit", "previous_circuit", "previous_any", "sink", "gu_sink")
LABELS: tuple[tuple[str, str], ...] = tuple(CLASS_KEYS.items()) + (("unclassified", "unclassified"),)
CAPABILITY: tuple[str, ...] = ("top1", "top5", "loss", "mean_logit_answer")
CEILINGS: tuple[str, ...] = tuple(f"ceiling_{key}" for key in CLASS_KEYS.values())  # the probe's, per revision
REQUIRED_HEAD_COLUMNS = ("model", "revision", "tokens", "layer", "head", "head_id") + tuple(
    f"sel_{CLASS_KEYS[c]}" for c in CLASSES
)
OPTIONAL_HEAD_COLUMNS = ("sel_null", "sink_score", "pr", "baseline_underflow")
ONE_REVISION = "one revision: a trajectory needs at least two"
_TOLERANCE = 1e-9  # counts and fractions compared with thresholds like 2/3


@dataclass(frozen=True)
class TrajectoryConfig:
    """Thresholds of the screens, milestones and findings (module docstring: what each one means)."""

    thresholds: Thresholds = Thresholds()
    induction_counts: tuple[int, ...] = (3, 5)
    sink_fractions: tuple[float, ...] = (0.10, 0.30, 0.50, 0.70)
    previous_selective_threshold: float = 30.0
    previous_selective_count: int = 30
    floor_layers: int = 2
    sharp_share: float = 0.5
    min_rise: float = 0.05
    timing_sink_fraction: float = 0.5
    timing_induction_count: int = 3
    recall_levels: tuple[float, ...] = (1 / 3, 2 / 3, 1.0)
    early_recall: float = 2 / 3
    early_share: float = 0.10
    pr_rise_fraction: float = 0.5
    pr_min_rise: float = 1.0
    null_quantile: float = 0.99

    def validate(self) -> None:
        for name in ("sharp_share", "early_share", "pr_rise_fraction", "null_quantile", "early_recall"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise HeadtraceError(f"{name.replace('_', '-')} must be in (0, 1] (got {value})")
        if self.floor_layers < 1:
            raise HeadtraceError(f"floor-layers must be >= 1 (got {self.floor_layers})")


# --------------------------------------------------------------------------------------------
# Per-revision and per-layer tables.


def labelled_heads(heads: pd.DataFrame, config: TrajectoryConfig = TrajectoryConfig()) -> pd.DataFrame:
    """The heads table with screens and labels re-derived under `config`, revisions in training order."""
    missing = [c for c in REQUIRED_HEAD_COLUMNS if c not in heads.columns]
    if missing:
        raise HeadtraceError(f"the heads table lacks columns {missing}; re-screen or re-import the results")
    if heads.duplicated(["model", "revision", "head_id"]).any():
        raise HeadtraceError(
            "the heads table has a head twice for one model and revision; keep one results directory per panel"
        )
    table = heads.copy()
    for column in OPTIONAL_HEAD_COLUMNS:
        if column not in table.columns:
            table[column] = np.nan
    add_labels(table, config.thresholds)
    score = table["sink_score"].astype(float)
    table["gu_sink"] = pd.array(
        np.where(score.isna(), None, score > config.thresholds.gu_sink_epsilon), dtype="boolean"
    )
    table["previous_selective"] = table["sel_previous"] >= config.previous_selective_threshold
    return training_order(table, ("layer", "head"))


def _class_counts(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Screen and label counts and fractions per group; a screen count is NaN where a head's is unknown."""
    indicators = table[keys].copy()
    for screen in SCREENS:
        indicators[f"screen_{screen}"] = table[screen].astype("Float64")
    for label, key in LABELS:
        indicators[f"label_{key}"] = (table["label"] == label).astype(float)
    grouped = indicators.groupby(keys, sort=False)
    counts = grouped.sum(skipna=False).astype(float)
    counts.insert(0, "n_heads", grouped.size())
    for column in [c for c in counts.columns if c != "n_heads"]:
        counts[f"{column}_fraction"] = counts[column] / counts["n_heads"]
    return counts.reset_index()


def revision_table(
    heads: pd.DataFrame, runs: pd.DataFrame | None = None, config: TrajectoryConfig = TrajectoryConfig()
) -> pd.DataFrame:
    """One row per model x revision: class counts, milestone measures, noise floor, capability."""
    table = labelled_heads(heads, config)
    keys = ["model", "revision"]
    per_revision = table.groupby(keys, sort=False)
    extra = per_revision.agg(tokens=("tokens", "first"), n_previous_selective=("previous_selective", "sum"))
    trusted = table.loc[~table["baseline_underflow"].astype("boolean").fillna(False).to_numpy()]
    extra["null_p99"] = trusted.groupby(keys, sort=False)["sel_null"].quantile(config.null_quantile)
    above = table.merge(extra["null_p99"].reset_index(), on=keys)
    extra["n_induction_above_null"] = (
        (above["sel_induction"] > above["null_p99"]).groupby([above["model"], above["revision"]], sort=False).sum()
    )
    extra.loc[extra["null_p99"].isna(), "n_induction_above_null"] = np.nan
    result = extra.reset_index().merge(_class_counts(table, keys), on=keys)
    if runs is not None and len(runs):
        capability = runs.reindex(columns=keys + list(CAPABILITY + CEILINGS))
        result = result.merge(capability, on=keys, how="left")
    else:
        result = result.assign(**{c: np.nan for c in CAPABILITY + CEILINGS})
    return training_order(result)


def layer_table(heads: pd.DataFrame, config: TrajectoryConfig = TrajectoryConfig()) -> pd.DataFrame:
    """One row per model x revision x layer: class counts and fractions within the layer."""
    table = labelled_heads(heads, config)
    counts = _class_counts(table, ["model", "revision", "layer"])
    tokens = table.groupby(["model", "revision"], sort=False)["tokens"].first().reset_index()
    return training_order(counts.merge(tokens, on=["model", "revision"]), ("layer",))


# --------------------------------------------------------------------------------------------
# Milestones.


@dataclass(frozen=True)
class Milestone:
    """The first revision (index into the model's revisions) where a condition holds, if any."""

    name: str
    index: int | None
    revision: str | None
    tokens: float
    previous_revision: str | None
    previous_tokens: float  # bracket's lower end: 0 tokens when the milestone is the first revision
    value: float  # the measure at the milestone revision (its maximum when never reached)

    def as_dict(self) -> dict:
        return {
            "milestone": self.name,
            "revision": self.revision,
            "tokens": self.tokens,
            "previous_revision": self.previous_revision,
            "previous_tokens": self.previous_tokens,
            "value": self.value,
        }


MilestoneSpec = tuple[str, str, float]  # (name, column of the revision table, minimum)


def _induction_milestone(count: int, config: TrajectoryConfig) -> MilestoneSpec:
    return (
        f"induction >= {count} heads at {config.thresholds.induction_threshold:g}x",
        "screen_induction_circuit",
        count,
    )


def _sink_milestone(fraction: float) -> MilestoneSpec:
    return f"sink fraction >= {fraction:.0%}", "screen_sink_fraction", fraction


def _milestone_specs(config: TrajectoryConfig) -> list[MilestoneSpec]:
    previous = (
        f"previous-token >= {config.previous_selective_count} heads at {config.previous_selective_threshold:g}x",
        "n_previous_selective",
        config.previous_selective_count,
    )
    return (
        [_induction_milestone(n, config) for n in config.induction_counts]
        + [_sink_milestone(f) for f in config.sink_fractions]
        + [previous]
    )


def first_reaching(rows: pd.DataFrame, name: str, measure: str, minimum: float) -> Milestone:
    """The milestone `measure` >= `minimum` over one model's revision rows (in training order)."""
    values = rows[measure].to_numpy(dtype=float)
    tokens = rows["tokens"].to_numpy(dtype=float)
    hit = np.flatnonzero(values >= minimum - _TOLERANCE)
    if not len(hit):
        peak = float(np.nanmax(values)) if np.isfinite(values).any() else math.nan
        return Milestone(name, None, None, math.nan, None, math.nan, peak)
    i = int(hit[0])
    return Milestone(
        name,
        i,
        str(rows["revision"].iloc[i]),
        float(tokens[i]),
        str(rows["revision"].iloc[i - 1]) if i else None,
        float(tokens[i - 1]) if i else 0.0,
        float(values[i]),
    )


def milestones(revisions: pd.DataFrame, config: TrajectoryConfig = TrajectoryConfig()) -> pd.DataFrame:
    """One row per model x milestone, from `revision_table`'s output."""
    rows = [
        {"model": model, **first_reaching(group, *spec).as_dict()}
        for model, group in revisions.groupby("model", sort=False)
        for spec in _milestone_specs(config)
    ]
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# Findings.


@dataclass(frozen=True)
class Finding:
    """One finding for one model: the claim tested, its status, a one-line statement, the numbers."""

    code: str
    title: str
    claim: str
    status: str
    statement: str
    numbers: dict


@dataclass
class ModelTrajectory:
    """One model's labelled heads and revision rows, revisions in training order; its stored
    ablations (one row per condition, as DIR/ablations/ holds them) when they were read."""

    name: str
    heads: pd.DataFrame
    revisions: pd.DataFrame
    layers: pd.DataFrame
    ablations: pd.DataFrame | None = None

    @property
    def names(self) -> list[str]:
        return list(self.revisions["revision"])

    @property
    def tokens(self) -> np.ndarray:
        return self.revisions["tokens"].to_numpy(dtype=float)

    def wide(self, column: str) -> pd.DataFrame:
        """`column` as a [revision x head_id] frame, revisions in training order, heads by layer."""
        order = self.heads.drop_duplicates("head_id").sort_values(["layer", "head"])["head_id"]
        return (
            self.heads.pivot(index="revision", columns="head_id", values=column)
            .reindex(index=self.names, columns=order)
            .astype(float)
        )


def tokens_label(tokens: float) -> str:
    if not np.isfinite(tokens):
        return "? tokens"
    return f"{tokens / 1e9:.4g}B" if tokens >= 1e9 else f"{tokens / 1e6:.4g}M"


def _at(panel: ModelTrajectory, i: int | None) -> str:
    return "never" if i is None else f"{panel.names[i]} ({tokens_label(panel.tokens[i])})"


def floor_claim(config: TrajectoryConfig) -> str:
    return (
        f"no sink head (first-token >= {config.thresholds.sink_threshold:g}x) in layers 0-{config.floor_layers - 1} "
        "at any revision"
    )


def floor(panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
    """F1: sink heads per layer at every revision; the low layers that never have one."""
    floor_layers = list(range(config.floor_layers))
    claim = floor_claim(config)
    per_layer = panel.layers.pivot(index="revision", columns="layer", values="screen_sink").reindex(panel.names)
    numbers = {"sink_heads_per_layer": {rev: [int(v) for v in row] for rev, row in per_layer.iterrows()}}
    found = per_layer.sum(axis=0)
    if found.sum() == 0:
        return Finding("F1", "floor", claim, NOT_MEASURABLE, "no sink head in any layer at any revision", numbers)
    never = [int(layer) for layer in found.index if found[layer] == 0]
    low = int(np.argmax(found.to_numpy() > 0))  # the first layer that ever has a sink head
    in_floor = int(found.reindex(floor_layers, fill_value=0).sum())
    numbers |= {"layers_never": never, "low_layers_never": list(range(low)), "floor_sink_heads": in_floor}
    never_text = f"layers 0-{low - 1} never have one" if low else "layer 0 has one"
    if in_floor:
        return Finding(
            "F1",
            "floor",
            claim,
            DOES_NOT_HOLD,
            f"{in_floor} sink head-revisions in layers 0-{floor_layers[-1]}; {never_text}",
            numbers,
        )
    return Finding(
        "F1",
        "floor",
        claim,
        HOLDS,
        f"no sink head in layers 0-{floor_layers[-1]} at any of {len(panel.names)} revisions; {never_text}",
        numbers,
    )


def _largest_rise(values: np.ndarray) -> float:
    """The largest increase from one revision to any later one."""
    return float(np.max(values - np.minimum.accumulate(values)))


def shape_claim(config: TrajectoryConfig) -> str:
    return (
        f"shape of the sink-fraction trajectory: sharp when the largest adjacent-revision rise is >= "
        f"{config.sharp_share:.0%} of the total rise, else gradual"
    )


def shape(panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
    """F2: the shape of the whole-model sink fraction, `sharp` or `gradual` (a measurement, no verdict)."""
    claim = shape_claim(config)
    fractions = panel.revisions["screen_sink_fraction"].to_numpy(dtype=float)
    numbers = {"sink_fraction": dict(zip(panel.names, fractions.tolist()))}
    if len(fractions) < 2:
        return Finding("F2", "shape", claim, NOT_MEASURABLE, ONE_REVISION, numbers)
    total = _largest_rise(fractions)
    if not total >= config.min_rise:
        return Finding(
            "F2",
            "shape",
            claim,
            NOT_MEASURABLE,
            f"the sink fraction never rises by {config.min_rise:.0%} (largest rise {total:.1%})",
            numbers,
        )
    steps = np.diff(fractions)
    i = int(np.argmax(steps))
    share = float(steps[i] / total)
    verdict = SHARP if share >= config.sharp_share - _TOLERANCE else GRADUAL
    numbers |= {
        "total_rise": total,
        "largest_jump": float(steps[i]),
        "jump_from": panel.names[i],
        "jump_to": panel.names[i + 1],
        "jump_from_tokens": panel.tokens[i],
        "jump_to_tokens": panel.tokens[i + 1],
        "share": share,
        "verdict": verdict,
        "monotone": bool((steps >= 0).all()),
        "largest_drop": float(max(0.0, -steps.min())),
    }
    criterion = f"{'>=' if verdict == SHARP else '<'} {config.sharp_share:.0%}"
    statement = (
        f"{verdict}: the largest jump, {fractions[i]:.1%} -> {fractions[i + 1]:.1%} from {_at(panel, i)} to "
        f"{_at(panel, i + 1)}, is {share:.0%} of the {total:.1%} rise ({criterion}); "
        + ("monotone" if numbers["monotone"] else f"not monotone (largest drop {numbers['largest_drop']:.1%})")
    )
    return Finding("F2", "shape", claim, verdict, statement, numbers)


def compare_expected(found: Finding, expected: str | None) -> Finding:
    """A measurement's finding against the shape a panel expects: `as expected` or `differs`."""
    measured = found.numbers.get("verdict")
    if expected is None or measured is None:
        return found
    status = AS_EXPECTED if measured == expected else DIFFERS
    return dataclasses.replace(
        found,
        status=status,
        statement=f"{found.statement}; expected {expected}",
        numbers=found.numbers | {"expected": expected},
    )


def timing_claim(config: TrajectoryConfig) -> str:
    sink = _sink_milestone(config.timing_sink_fraction)[0]
    induction = _induction_milestone(config.timing_induction_count, config)[0]
    return f"sinks spread after the induction circuit forms: tokens({sink}) / tokens({induction}) > 1"


def timing(panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
    """F3: tokens(sink >= 50%) / tokens(induction >= 3 heads), bracketed by the revision grid."""
    sink_spec = _sink_milestone(config.timing_sink_fraction)
    induction_spec = _induction_milestone(config.timing_induction_count, config)
    claim = timing_claim(config)
    if len(panel.names) < 2:
        return Finding("F3", "timing", claim, NOT_MEASURABLE, ONE_REVISION, {})
    sink = first_reaching(panel.revisions, *sink_spec)
    induction = first_reaching(panel.revisions, *induction_spec)
    numbers = {"sink": sink.as_dict(), "induction": induction.as_dict()}
    never = ([f"{sink.name} (max {sink.value:.1%})"] if sink.index is None else []) + (
        [f"{induction.name} (max {induction.value:g} heads)"] if induction.index is None else []
    )
    if never:
        return Finding("F3", "timing", claim, NOT_MEASURABLE, "never reached: " + "; ".join(never), numbers)
    brackets = (
        (sink.revision, sink.tokens),
        (sink.previous_revision, sink.previous_tokens),
        (induction.revision, induction.tokens),
        (induction.previous_revision, induction.previous_tokens),
    )
    unknown = sorted({revision for revision, tokens in brackets if revision is not None and not np.isfinite(tokens)})
    if unknown:
        return Finding(
            "F3",
            "timing",
            claim,
            NOT_MEASURABLE,
            f"tokens unknown for {', '.join(unknown)}, which bracket the milestones",
            numbers,
        )
    ratio = sink.tokens / induction.tokens
    low = sink.previous_tokens / induction.tokens
    high = sink.tokens / induction.previous_tokens if induction.previous_tokens > 0 else math.inf
    numbers |= {"ratio": ratio, "ratio_low": low, "ratio_high": high}
    statement = (
        f"ratio {ratio:.3g}x ({sink.name} at {sink.revision}, {tokens_label(sink.tokens)}; {induction.name} "
        f"at {induction.revision}, {tokens_label(induction.tokens)}); grid range {low:.3g}x-{high:.3g}x"
    )
    if low >= 1:
        return Finding("F3", "timing", claim, HOLDS, statement, numbers)
    if high <= 1:
        return Finding("F3", "timing", claim, DOES_NOT_HOLD, statement, numbers)
    return Finding(
        "F3",
        "timing",
        claim,
        NOT_MEASURABLE,
        statement + ": the revision grid cannot order the two milestones",
        numbers,
    )


def final_circuit(panel: ModelTrajectory, config: TrajectoryConfig) -> list[str]:
    """Heads at or above the induction threshold at the last revision, strongest first."""
    last = panel.wide("sel_induction").iloc[-1]
    return list(last[last >= config.thresholds.induction_threshold].sort_values(ascending=False, kind="stable").index)


def recall(panel: ModelTrajectory, config: TrajectoryConfig) -> pd.Series:
    """Share of the final induction circuit already at or above the threshold, per revision."""
    circuit = final_circuit(panel, config)
    return (panel.wide("sel_induction")[circuit] >= config.thresholds.induction_threshold).mean(axis=1)


def _no_trajectory(panel: ModelTrajectory, config: TrajectoryConfig) -> str:
    """Why a final-circuit finding cannot be measured: one revision, or no final circuit."""
    if len(panel.names) < 2:
        return ONE_REVISION
    return f"no head at {config.thresholds.induction_threshold:g}x at the last revision ({panel.names[-1]})"


def early_claim(config: TrajectoryConfig) -> str:
    return (
        f"the final induction circuit is identified early: recall >= {config.early_recall:.0%} within the first "
        f"{config.early_share:.0%} of training tokens"
    )


def early_identification(panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
    """F4: recall of the final induction circuit per revision; first revisions at each level."""
    claim = early_claim(config)
    circuit = final_circuit(panel, config)
    if len(panel.names) < 2 or not circuit:
        return Finding("F4", "early identification", claim, NOT_MEASURABLE, _no_trajectory(panel, config), {})
    per_revision = recall(panel, config).to_numpy()
    rows = panel.revisions.assign(recall=per_revision)
    total = panel.tokens[-1]
    levels = {
        f"{level:.0%}": first_reaching(rows, f"recall >= {level:.0%}", "recall", level)
        for level in config.recall_levels
    }
    numbers = {
        "final_circuit": circuit,
        "recall": dict(zip(panel.names, per_revision.tolist())),
        "total_tokens": total,
        "levels": {k: {**m.as_dict(), "share": m.tokens / total} for k, m in levels.items()},
    }
    reached = ", ".join(
        f"{k} at {_at(panel, m.index)} = {m.tokens / total:.1%} of training"
        if np.isfinite(m.tokens / total)
        else f"{k} at {_at(panel, m.index)}"
        for k, m in levels.items()
    )
    statement = f"final circuit {{{', '.join(sorted(circuit))}}}; recall {reached}"
    early = first_reaching(rows, "early", "recall", config.early_recall)
    share = early.tokens / total
    if not np.isfinite(share):
        unknown = dict.fromkeys(
            name
            for name, tokens in ((early.revision, early.tokens), (panel.names[-1], total))
            if not np.isfinite(tokens)
        )
        return Finding(
            "F4",
            "early identification",
            claim,
            NOT_MEASURABLE,
            statement + f"; tokens unknown for {', '.join(unknown)}",
            numbers,
        )
    return Finding(
        "F4", "early identification", claim, HOLDS if share <= config.early_share else DOES_NOT_HOLD, statement, numbers
    )


def pr_elevation(pr: np.ndarray, fraction: float, min_rise: float) -> int | None:
    """First index where PR stands >= `fraction` of its largest rise above its running minimum.

    None when PR never rises by `min_rise` above an earlier value (or is all NaN)."""
    if np.isnan(pr).all():
        return None
    rise = pr - np.fmin.accumulate(pr)
    top = np.nanmax(rise)
    if not top >= min_rise:
        return None
    return int(np.flatnonzero(rise >= fraction * top)[0])


def _leads(
    panel: ModelTrajectory, config: TrajectoryConfig, circuit: list[str], fraction: float
) -> tuple[dict[str, dict], dict[str, str]]:
    """Per circuit head: its PR elevation vs its crossing (lead in revisions), or why it has none."""
    pr, selectivity = panel.wide("pr"), panel.wide("sel_induction")
    per_head, unmeasured = {}, {}
    for head in circuit:
        crossing = int(np.flatnonzero(selectivity[head].to_numpy() >= config.thresholds.induction_threshold)[0])
        if crossing == 0:
            unmeasured[head] = (
                f"already at {selectivity[head].iloc[0]:.3g}x at the first revision "
                f"({panel.names[0]}): no measurable lead"
            )
            continue
        elevated = pr_elevation(pr[head].to_numpy(), fraction, config.pr_min_rise)
        if elevated is None:
            unmeasured[head] = (
                "no PR" if pr[head].isna().all() else f"PR never rises by {config.pr_min_rise:g} above an earlier value"
            )
            continue
        per_head[head] = {
            "pr_elevated": panel.names[elevated],
            "pr_elevated_tokens": panel.tokens[elevated],
            "crossing": panel.names[crossing],
            "crossing_tokens": panel.tokens[crossing],
            "lead_revisions": crossing - elevated,
            "lead_tokens": panel.tokens[crossing] - panel.tokens[elevated],
        }
    return per_head, unmeasured


def _lead_verdict(median: float) -> str:
    """The claim is "at or before": a median lead of 0 supports it."""
    return HOLDS if median >= 0 else DOES_NOT_HOLD


def _sensitivity(panel: ModelTrajectory, config: TrajectoryConfig, circuit: list[str]) -> dict[float, dict]:
    """Median lead and verdict for each `pr_rise_fraction` of `PR_RISE_RANGE`."""
    rows = {}
    for fraction in PR_RISE_RANGE:
        per_head, _ = _leads(panel, config, circuit, float(fraction))
        leads = [v["lead_revisions"] for v in per_head.values()]
        median = float(np.median(leads)) if leads else math.nan
        rows[float(fraction)] = {
            "median_lead_revisions": median,
            "n_heads": len(leads),
            "verdict": _lead_verdict(median) if leads else NOT_MEASURABLE,
        }
    return rows


def _sensitivity_text(rows: dict[float, dict]) -> str:
    """'holds throughout' or the verdict per run of fractions ('fragile'), with the medians' range."""
    medians = [r["median_lead_revisions"] for r in rows.values() if np.isfinite(r["median_lead_revisions"])]
    spans: list[tuple[str, float, float]] = []
    for fraction, row in rows.items():
        if spans and spans[-1][0] == row["verdict"]:
            spans[-1] = (row["verdict"], spans[-1][1], fraction)
        else:
            spans.append((row["verdict"], fraction, fraction))
    first, last = min(rows), max(rows)
    where = f"pr-rise-fraction {first:g}-{last:g}"
    median_range = f"median lead {min(medians):g} to {max(medians):g}" if medians else "no measurable head"
    if len(spans) == 1:
        return f"{where}: {median_range}, {spans[0][0]} throughout"
    parts = ", ".join(f"{verdict} at {a:g}" + (f"-{b:g}" if b != a else "") for verdict, a, b in spans)
    return f"{where}: {median_range}; fragile, the verdict flips ({parts})"


def spectral_claim(config: TrajectoryConfig) -> str:
    return (
        "PR rises at or before the revision where induction selectivity crosses "
        f"{config.thresholds.induction_threshold:g}x (median lead >= 0 revisions; elevated = PR >= "
        f"{config.pr_rise_fraction:g} of its largest rise above its running minimum)"
    )


def spectral_lead(panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
    """F5: per final-circuit head, first revision with elevated PR vs first selectivity crossing."""
    claim = spectral_claim(config)
    circuit = final_circuit(panel, config)
    if len(panel.names) < 2 or not circuit:
        return Finding("F5", "spectral lead", claim, NOT_MEASURABLE, _no_trajectory(panel, config), {})
    if panel.wide("pr").isna().all().all():
        return Finding("F5", "spectral lead", claim, NOT_MEASURABLE, "no PR in the panel", {})
    per_head, unmeasured = _leads(panel, config, circuit, config.pr_rise_fraction)
    sensitivity = _sensitivity(panel, config, circuit)
    numbers = {
        "heads": per_head,
        "not_measured": unmeasured,
        "sensitivity": sensitivity,
        "fragile": len({r["verdict"] for r in sensitivity.values()}) > 1,
    }
    not_measured = "; ".join(f"{h}: {why}" for h, why in unmeasured.items())
    if not per_head:
        return Finding(
            "F5", "spectral lead", claim, NOT_MEASURABLE, f"no final-circuit head measurable ({not_measured})", numbers
        )
    leads = np.array([v["lead_revisions"] for v in per_head.values()])
    median = float(np.median(leads))
    numbers["median_lead_revisions"] = median
    detail = ", ".join(
        f"{h} {v['pr_elevated']} vs {v['crossing']} ({v['lead_revisions']:+d})" for h, v in per_head.items()
    )
    statement = (
        f"PR elevated at or before the crossing in {int((leads >= 0).sum())} of {len(leads)} measurable "
        f"final-circuit heads ({detail}); median lead {median:g} revisions"
        + (f"; not measurable: {not_measured}" if unmeasured else "")
        + f"; {_sensitivity_text(sensitivity)}"
    )
    return Finding("F5", "spectral lead", claim, _lead_verdict(median), statement, numbers)


def noise_claim(config: TrajectoryConfig) -> str:
    return (
        f"every induction-circuit head (>= {config.thresholds.induction_threshold:g}x) lies above its revision's null "
        f"p{config.null_quantile * 100:g}"
    )


def noise_floor(panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
    """F6: null-selectivity p99 per revision and induction heads above it."""
    claim = noise_claim(config)
    p99 = panel.revisions["null_p99"].to_numpy(dtype=float)
    numbers = {
        "null_p99": dict(zip(panel.names, p99.tolist())),
        "n_induction_above_null": dict(zip(panel.names, panel.revisions["n_induction_above_null"].tolist())),
    }
    if np.isnan(p99).all():
        return Finding(
            "F6", "noise floor", claim, NOT_MEASURABLE, "no null selectivity (sel_null) in the panel", numbers
        )
    selectivity = panel.wide("sel_induction")
    members = selectivity >= config.thresholds.induction_threshold
    if not members.any().any():
        return Finding(
            "F6",
            "noise floor",
            claim,
            NOT_MEASURABLE,
            f"no head at {config.thresholds.induction_threshold:g}x at any revision",
            numbers,
        )
    measured = members & np.isfinite(p99)[:, None]
    below = measured & ~(selectivity.gt(pd.Series(p99, index=selectivity.index), axis=0))
    n_members, n_below = int(measured.to_numpy().sum()), int(below.to_numpy().sum())
    numbers |= {"circuit_memberships": n_members, "below_null": n_below}
    statement = (
        f"null p{config.null_quantile * 100:g} {np.nanmin(p99):.3g}x-{np.nanmax(p99):.3g}x over "
        f"{int(np.isfinite(p99).sum())} revisions; {n_members - n_below} of {n_members} circuit "
        f"memberships above it"
    )
    return Finding("F6", "noise floor", claim, HOLDS if n_below == 0 else DOES_NOT_HOLD, statement, numbers)


def model_trajectories(
    heads: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    config: TrajectoryConfig = TrajectoryConfig(),
    ablations: pd.DataFrame | None = None,
) -> list[ModelTrajectory]:
    """Split a panel's tables into per-model panels (labelled under `config`); `ablations`: the
    stored ablation rows, each model's own attached."""
    table = labelled_heads(heads, config)
    revisions = revision_table(heads, runs, config)
    layers = layer_table(heads, config)
    return [
        ModelTrajectory(
            str(model),
            table.loc[table.model == model].reset_index(drop=True),
            revisions.loc[revisions.model == model].reset_index(drop=True),
            layers.loc[layers.model == model].reset_index(drop=True),
            None if ablations is None else ablations.loc[ablations.model == model].reset_index(drop=True),
        )
        for model in revisions["model"].unique()
    ]


def _to_json(numbers: dict) -> str:
    """JSON with NaN and infinities as null and numpy scalars as Python numbers."""

    def clean(value):
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, (np.generic,)):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value

    return json.dumps(clean(numbers), sort_keys=True)


# --------------------------------------------------------------------------------------------
# Report files.


def _markdown_table(frame: pd.DataFrame) -> str:
    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def findings_markdown(table: pd.DataFrame, stones: pd.DataFrame) -> str:
    """The findings table, the criteria it applied, and the milestones, as Markdown."""
    claims = table.drop_duplicates("finding")[["finding", "title", "claim"]]
    shown = stones.assign(
        revision=stones["revision"].fillna("never"),
        tokens=stones["tokens"].map(lambda t: tokens_label(t) if np.isfinite(t) else ""),
        bracket=[
            f"{prev if isinstance(prev, str) else 'start'} < t <= {rev}" if isinstance(rev, str) else ""
            for prev, rev in zip(stones["previous_revision"], stones["revision"])
        ],
    )[["model", "milestone", "revision", "tokens", "bracket"]]
    return (
        "\n\n".join(
            [
                "# headtrace findings",
                _markdown_table(table[["model", "finding", "title", "status", "statement"]]),
                "## Criteria",
                _markdown_table(claims),
                "## Milestones (first revision where the condition holds; the event lies in the bracket)",
                _markdown_table(shown),
            ]
        )
        + "\n"
    )
