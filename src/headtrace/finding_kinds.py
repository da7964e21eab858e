"""Findings as registered units (docs/architecture.md, "Where to add things").

A finding is one `FindingKind`: its code, title and claim, its settings (thresholds, with defaults),
its computation on one model's trajectory (a `trajectory.Finding`, whose `numbers` are what the
report draws), and its summary across a seed family. `FINDINGS` holds them in order: the study's
F1-F7, F8 (causal emergence), F9 (the previous-token -> induction link), then any registered with
`register_finding` or installed through the `headtrace.findings` entry-point group. `headtrace
findings`, the family rows (family_findings.py) and the report iterate over it; a finding's figure is
registered on the report side under its code (report/figures.py).

F1-F6 are computed in trajectory.py; F7 (middle-first), F8 (causal emergence, from the stored
ablations of a final:<set> circuit) and F9 (from composition.py's tables) live in their units here,
as a finding from outside the package would.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Mapping, NamedTuple

import numpy as np
import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.registry import Registry
from headtrace.schema import head_id, heads_in_set, parse_circuit
from headtrace.store import ResultsDir
from headtrace.trajectory import (
    AS_EXPECTED,
    DIFFERS,
    DOES_NOT_HOLD,
    GRADUAL,
    HOLDS,
    NOT_MEASURABLE,
    SHARP,
    Finding,
    ModelTrajectory,
    TrajectoryConfig,
    early_claim,
    early_identification,
    first_reaching,
    floor,
    floor_claim,
    noise_claim,
    noise_floor,
    shape,
    shape_claim,
    spectral_claim,
    spectral_lead,
    timing,
    timing_claim,
    tokens_label,
)

ENTRY_POINTS = "headtrace.findings"  # the entry-point group of findings installed from outside


# --------------------------------------------------------------------------------------------
# Summaries across seeds.


class SeedFinding(NamedTuple):
    """One seed's row of a finding: what a summary across seeds reads."""

    status: str
    numbers: dict
    statement: str


@dataclass(frozen=True)
class Spread:
    """One figure over a family's seeds: its median and range over the seeds that have it."""

    values: dict[int, float]  # seed -> value (finite values only)

    @classmethod
    def of(cls, values: dict[int, float | None]) -> "Spread":
        return cls({s: float(v) for s, v in values.items() if v is not None and np.isfinite(v)})

    @property
    def n(self) -> int:
        return len(self.values)

    def as_dict(self) -> dict:
        data = np.array(list(self.values.values()), dtype=float)
        return {
            "per_seed": {str(s): v for s, v in self.values.items()},
            "n": self.n,
            "median": float(np.median(data)) if self.n else None,
            "low": float(data.min()) if self.n else None,
            "high": float(data.max()) if self.n else None,
        }

    def text(self, show: Callable[[float], str], of: int | None = None) -> str:
        """'1.1B [0.9B-1.3B] (9/10 seeds)': median [range] (seeds that have it / all); 'no seed' when empty."""
        if not self.n:
            return "no seed"
        d = self.as_dict()
        over = f"{self.n}/{of}" if of is not None and of != self.n else str(self.n)
        dash = " to " if d["low"] < 0 else "-"
        return f"{show(d['median'])} [{show(d['low'])}{dash}{show(d['high'])}] ({over} seed{'s' if self.n > 1 else ''})"


def show_share(value: float) -> str:
    return f"{value:.1%}"


def show_ratio(value: float) -> str:
    return f"{value:.3g}x"


def show_count(value: float) -> str:
    return f"{value:g}"


def get(numbers: dict, *path):
    """numbers[path[0]][path[1]]..., or None where a key is missing."""
    for key in path:
        if not isinstance(numbers, dict) or key not in numbers:
            return None
        numbers = numbers[key]
    return numbers


class Summary:
    """A finding's figures across seeds as they are collected: numbers, and statement fragments."""

    def __init__(self, per: Mapping[int, SeedFinding]):
        self.per = per
        self.numbers: dict = {}
        self.parts: list[str] = []

    def values(self, *path) -> dict[int, object]:
        """seed -> numbers[path...] of each seed's row (None where it lacks it)."""
        return {seed: get(found.numbers, *path) for seed, found in self.per.items()}

    def spread(self, name: str, values: Mapping[int, float | None], show: Callable[[float], str], label: str) -> Spread:
        """Add one figure's median [range] over the seeds that have it."""
        spread = Spread.of(dict(values))
        self.numbers[name] = spread.as_dict()
        if spread.n:
            self.parts.append(f"{label}: {spread.text(show, len(self.per))}")
        return spread

    def result(self) -> tuple[dict, list[str]]:
        return self.numbers, self.parts


# --------------------------------------------------------------------------------------------
# The unit.


@dataclass(frozen=True)
class FindingKind:
    """One finding: a subclass names it (`code`, `title`), says what it claims (`claim`), computes it
    on one model (`compute`) and summarises it across a seed family (`across_seeds`). Its dataclass
    fields are its own settings, with their defaults; `uses` names the `TrajectoryConfig` fields it
    reads. A measurement (a status that is a result, not a verdict) lists its possible results in
    `expectable`, and a panel may then state the one it expects (`expect = { F2 = "gradual" }`)."""

    code: ClassVar[str]
    title: ClassVar[str]
    uses: ClassVar[tuple[str, ...]] = ()
    expectable: ClassVar[tuple[str, ...]] = ()

    def claim(self, config: TrajectoryConfig) -> str:
        raise NotImplementedError

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        raise NotImplementedError

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        """The figures of this finding across seeds (numbers, statement fragments), beyond the status
        counts that every finding gets; none by default."""
        return {}, []

    def settings(self, config: TrajectoryConfig = TrajectoryConfig()) -> dict[str, object]:
        """Every setting this finding reads: the config's fields it uses, then its own."""
        return {name: getattr(config, name) for name in self.uses} | {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self)
        }

    def validate(self) -> None:
        """Refuse settings out of their range (one line); nothing to check by default."""

    def finding(self, status: str, statement: str, numbers: dict, config: TrajectoryConfig) -> Finding:
        """This finding's result for one model."""
        return Finding(self.code, self.title, self.claim(config), status, statement, numbers)


# --------------------------------------------------------------------------------------------
# F1-F6: computed in trajectory.py, summarised across seeds here.


@dataclass(frozen=True)
class Floor(FindingKind):
    code: ClassVar[str] = "F1"
    title: ClassVar[str] = "floor"
    uses: ClassVar[tuple[str, ...]] = ("floor_layers",)

    def claim(self, config: TrajectoryConfig) -> str:
        return floor_claim(config)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        return floor(panel, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        summary.spread(
            "floor_sink_heads",
            summary.values("floor_sink_heads"),
            show_count,
            f"sink head-revisions in layers 0-{config.floor_layers - 1}",
        )
        summary.spread(
            "low_layers_never",
            {s: (len(v["low_layers_never"]) if "low_layers_never" in v else None) for s, (_, v, _) in per.items()},
            show_count,
            "low layers without any sink head",
        )
        return summary.result()


@dataclass(frozen=True)
class Shape(FindingKind):
    code: ClassVar[str] = "F2"
    title: ClassVar[str] = "shape"
    uses: ClassVar[tuple[str, ...]] = ("sharp_share", "min_rise")
    expectable: ClassVar[tuple[str, ...]] = (SHARP, GRADUAL)

    def claim(self, config: TrajectoryConfig) -> str:
        return shape_claim(config)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        return shape(panel, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        shapes = Counter(v["verdict"] for _, v, _ in per.values() if "verdict" in v)
        summary.numbers["shapes"] = {shape: shapes.get(shape, 0) for shape in (SHARP, GRADUAL)}
        measured = sum(shapes.values())
        if measured and any(st in (AS_EXPECTED, DIFFERS) for st, _, _ in per.values()):
            summary.parts.append(
                f"sharp in {shapes.get(SHARP, 0)}/{measured}, gradual in {shapes.get(GRADUAL, 0)}/{measured}"
            )
        summary.spread("share", summary.values("share"), lambda x: f"{x:.0%}", "largest jump's share of the rise")
        summary.spread("jump_to_tokens", summary.values("jump_to_tokens"), tokens_label, "largest jump ends at")
        return summary.result()


@dataclass(frozen=True)
class Timing(FindingKind):
    code: ClassVar[str] = "F3"
    title: ClassVar[str] = "timing"
    uses: ClassVar[tuple[str, ...]] = ("timing_sink_fraction", "timing_induction_count")

    def claim(self, config: TrajectoryConfig) -> str:
        return timing_claim(config)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        return timing(panel, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        summary.spread("ratio", summary.values("ratio"), show_ratio, "ratio")
        summary.spread("induction_tokens", summary.values("induction", "tokens"), tokens_label, "induction milestone")
        summary.spread("sink_tokens", summary.values("sink", "tokens"), tokens_label, "sink milestone")
        return summary.result()


@dataclass(frozen=True)
class EarlyIdentification(FindingKind):
    code: ClassVar[str] = "F4"
    title: ClassVar[str] = "early identification"
    uses: ClassVar[tuple[str, ...]] = ("recall_levels", "early_recall", "early_share")

    def claim(self, config: TrajectoryConfig) -> str:
        return early_claim(config)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        return early_identification(panel, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        summary.spread(
            "circuit_size",
            {s: (len(v["final_circuit"]) if "final_circuit" in v else None) for s, (_, v, _) in per.items()},
            show_count,
            "final circuit heads",
        )
        levels = sorted(
            {k for _, v, _ in per.values() for k in v.get("levels", {})}, key=lambda k: float(k.rstrip("%"))
        )
        summary.numbers["levels"] = {}
        for level in levels:
            share = Spread.of(summary.values("levels", level, "share"))
            tokens = Spread.of(summary.values("levels", level, "tokens"))
            summary.numbers["levels"][level] = {"share": share.as_dict(), "tokens": tokens.as_dict()}
            if share.n:
                summary.parts.append(f"share of training at recall >= {level}: {share.text(show_share, len(per))}")
        return summary.result()


@dataclass(frozen=True)
class SpectralLead(FindingKind):
    code: ClassVar[str] = "F5"
    title: ClassVar[str] = "spectral lead"
    uses: ClassVar[tuple[str, ...]] = ("pr_rise_fraction", "pr_min_rise")

    def claim(self, config: TrajectoryConfig) -> str:
        return spectral_claim(config)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        return spectral_lead(panel, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        leads = summary.spread(
            "median_lead_revisions", summary.values("median_lead_revisions"), show_count, "median lead (revisions)"
        )
        fragile = sorted(s for s, (_, v, _) in per.items() if v.get("fragile"))
        summary.numbers["fragile"] = fragile
        if leads.n:
            summary.parts.append(f"fragile in {len(fragile)}/{leads.n}")
        return summary.result()


@dataclass(frozen=True)
class NoiseFloor(FindingKind):
    code: ClassVar[str] = "F6"
    title: ClassVar[str] = "noise floor"
    uses: ClassVar[tuple[str, ...]] = ("null_quantile",)

    def claim(self, config: TrajectoryConfig) -> str:
        return noise_claim(config)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        return noise_floor(panel, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        members = summary.values("circuit_memberships")
        below = summary.values("below_null")
        summary.numbers["circuit_memberships"] = int(sum(v for v in members.values() if v is not None))
        summary.numbers["below_null"] = {str(s): v for s, v in below.items() if v is not None}
        if summary.numbers["below_null"]:
            summary.parts.append(
                f"{sum(summary.numbers['below_null'].values())} of {summary.numbers['circuit_memberships']} circuit "
                "memberships below the null"
            )
        return summary.result()


# --------------------------------------------------------------------------------------------
# F7: middle-first.


def layer_ranges(layers: list[int]) -> str:
    """[6, 7, 8, 10, 11] -> 'layers 6-8, 10-11'; [3] -> 'layer 3'."""
    runs: list[list[int]] = []
    for layer in sorted(layers):
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return f"layer{'s' if len(layers) > 1 else ''} {text}"


@dataclass(frozen=True)
class MiddleFirst(FindingKind):
    """F7: sink heads appear first in the middle of the network and reach the layers just above the
    floor last (docs/definitions.md). Counted on revisions in training order: no token counts needed."""

    code: ClassVar[str] = "F7"
    title: ClassVar[str] = "middle-first"
    uses: ClassVar[tuple[str, ...]] = ("floor_layers",)
    middle_low: float = 0.25  # the middle of the depth: middle_low * n_layers <= median(E) < middle_high * n_layers
    middle_high: float = 0.75

    def validate(self) -> None:
        if not 0 <= self.middle_low < self.middle_high <= 1:
            raise HeadtraceError(
                f"F7: the middle of the depth needs 0 <= middle_low < middle_high <= 1 "
                f"(got {self.middle_low:g}, {self.middle_high:g})"
            )

    def claim(self, config: TrajectoryConfig) -> str:
        return (
            f"sink heads (first-token >= {config.thresholds.sink_threshold:g}x) appear first in the middle of the "
            f"network: the median of the earliest layers lies in [{self.middle_low:g}, {self.middle_high:g}) of the "
            f"depth, and the two layers just above the floor (layers 0-{config.floor_layers - 1}) acquire them after "
            "the median onset"
        )

    @staticmethod
    def onsets(panel: ModelTrajectory, config: TrajectoryConfig) -> tuple[dict[int, int], int]:
        """Per layer at or above the floor: the index of the first revision where it holds a sink head
        (n_revisions when it never does); and n_layers."""
        per_layer = panel.layers.pivot(index="revision", columns="layer", values="screen_sink").reindex(panel.names)
        n_layers, n_revisions = int(per_layer.columns.max()) + 1, len(panel.names)
        onset = {}
        for layer in range(config.floor_layers, n_layers):
            counts = per_layer[layer].to_numpy(dtype=float) if layer in per_layer else np.zeros(n_revisions)
            hit = np.flatnonzero(counts >= 1)
            onset[layer] = int(hit[0]) if len(hit) else n_revisions
        return onset, n_layers

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        onset, n_layers = self.onsets(panel, config)
        n = len(panel.names)
        numbers: dict = {
            "n_layers": n_layers,
            "n_revisions": n,
            "floor_layers": config.floor_layers,
            "onset": {str(layer): i for layer, i in onset.items()},
            "onset_revision": {str(layer): panel.names[i] if i < n else None for layer, i in onset.items()},
            "onset_tokens": {str(layer): float(panel.tokens[i]) if i < n else None for layer, i in onset.items()},
        }
        if not onset:
            why = f"no layer at or above the floor (layers 0-{config.floor_layers - 1} of {n_layers})"
            return self.finding(NOT_MEASURABLE, why, numbers, config)
        first = min(onset.values())
        if first == n:
            why = f"no sink head in {layer_ranges(list(onset))} at any revision"
            return self.finding(NOT_MEASURABLE, why, numbers, config)
        earliest = [layer for layer, i in onset.items() if i == first]
        if first == 0:
            why = (
                f"sink heads already at the first revision ({self.at(panel, 0)}) in {layer_ranges(earliest)}: "
                "no onset order to see"
            )
            return self.finding(NOT_MEASURABLE, why, numbers | {"earliest_layers": earliest}, config)
        middle_of_e = float(np.median(earliest))  # the mean of the two middle layers for an even count
        low, high = self.middle_low * n_layers, self.middle_high * n_layers
        ordered = sorted(onset.values())
        median_onset = ordered[(len(ordered) - 1) // 2]  # the lower median
        adjacent = {layer: onset[layer] for layer in (config.floor_layers, config.floor_layers + 1) if layer in onset}
        in_middle = low <= middle_of_e < high
        later = all(i > median_onset for i in adjacent.values())
        numbers |= {
            "earliest_layers": earliest,
            "earliest_onset": first,
            "median_earliest_layer": middle_of_e,
            "middle": [low, high],
            "in_middle": in_middle,
            "median_onset": median_onset,
            "median_onset_revision": panel.names[median_onset] if median_onset < n else None,
            "floor_adjacent": {str(layer): i for layer, i in adjacent.items()},
            "floor_adjacent_later": later,
        }
        statement = (
            f"first sink heads at {self.at(panel, first)} in {layer_ranges(earliest)} (median layer "
            f"{middle_of_e:g}, {'inside' if in_middle else 'outside'} the middle {low:g} <= layer < {high:g} of "
            f"{n_layers}); just above the floor: "
            + ", ".join(f"layer {layer} {self.at(panel, i)}" for layer, i in adjacent.items())
            + f"; median onset {self.at(panel, median_onset)} over {layer_ranges(list(onset))}"
            + ("" if later else ", not later than the layers just above the floor")
        )
        return self.finding(HOLDS if in_middle and later else DOES_NOT_HOLD, statement, numbers, config)

    @staticmethod
    def at(panel: ModelTrajectory, i: int) -> str:
        """A revision by its index, with its tokens; 'never' past the last one."""
        if i >= len(panel.names):
            return "never"
        return f"{panel.names[i]} (revision {i + 1} of {len(panel.names)}, {tokens_label(panel.tokens[i])})"

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        earliest = {s: v["earliest_layers"] for s, (_, v, _) in per.items() if v.get("earliest_layers")}
        summary.numbers["earliest_layers"] = {str(s): layers for s, layers in earliest.items()}
        if earliest:
            summary.parts.append(
                "earliest: " + "; ".join(f"seed {s} {layer_ranges(layers)}" for s, layers in earliest.items())
            )
        summary.spread(
            "median_earliest_layer", summary.values("median_earliest_layer"), show_count, "median earliest layer"
        )
        for name, text in (("in_middle", "in the middle"), ("floor_adjacent_later", "floor-adjacent layers later")):
            flags = {s: v[name] for s, (_, v, _) in per.items() if name in v}
            summary.numbers[name] = {str(s): flag for s, flag in flags.items()}
            if flags:
                summary.parts.append(f"{text} in {sum(flags.values())}/{len(flags)}")
        return summary.result()


# --------------------------------------------------------------------------------------------
# F8: causal emergence.

BEFORE, WITH, AFTER = "before formation", "with formation", "after formation"
UNORDERED = "cannot be ordered on this grid"
SELECTIVITY_OF_SET = {  # the selectivity a head set is chosen by (schema.HEAD_SETS), drawn against F8
    "induction": "sel_induction",
    "previous-token": "sel_previous",
    "previous-token-any": "sel_previous",
    "sink": "sel_first",
}


@dataclass(frozen=True)
class Bracket:
    """An event on a revision grid: it first shows at revision `at` (an index into the model's
    revisions, training order) and not at `after` (-1: the start of training)."""

    after: int
    at: int

    def text(self, panel: ModelTrajectory) -> str:
        before = "the start" if self.after < 0 else panel.names[self.after]
        return f"{panel.names[self.at]} ({tokens_label(panel.tokens[self.at])}; after {before})"

    def as_dict(self, panel: ModelTrajectory) -> dict:
        return {
            "revision": panel.names[self.at],
            "tokens": float(panel.tokens[self.at]),
            "index": self.at,
            "previous_revision": panel.names[self.after] if self.after >= 0 else None,
            "previous_tokens": float(panel.tokens[self.after]) if self.after >= 0 else 0.0,
            "previous_index": self.after,
        }


def order(necessary: Bracket, formed: Bracket) -> str:
    """Necessity against formation on the grid: before (necessary at a revision where the circuit has
    not formed yet), after (not necessary at a revision where it has), with (both first show between
    the same two revisions), else unordered (the brackets overlap)."""
    if necessary.at <= formed.after:
        return BEFORE
    if necessary.after >= formed.at:
        return AFTER
    if (necessary.after, necessary.at) == (formed.after, formed.at):
        return WITH
    return UNORDERED


@dataclass(frozen=True)
class CausalEmergence(FindingKind):
    """F8: when ablating the final circuit (its heads at the last revision, ablated at earlier ones
    against matched-random heads: `[ablation] circuit = "final:induction"`) first becomes necessary,
    against when the induction milestone is reached (docs/definitions.md)."""

    code: ClassVar[str] = "F8"
    title: ClassVar[str] = "causal emergence"
    uses: ClassVar[tuple[str, ...]] = ("timing_induction_count",)
    expectable: ClassVar[tuple[str, ...]] = (BEFORE, WITH, AFTER, UNORDERED)
    circuit: str = "final:induction"  # the stored ablations it reads

    def validate(self) -> None:
        spec = parse_circuit(self.circuit)
        if not spec.final:
            raise HeadtraceError(f"F8 reads the ablations of a final:<set> circuit, not '{self.circuit}'")

    def claim(self, config: TrajectoryConfig) -> str:
        return (
            f"the first revision at which ablating {self.circuit} (its heads at the last revision) is necessary, "
            f"against the induction milestone (>= {config.timing_induction_count} heads at "
            f"{config.thresholds.induction_threshold:g}x): before, with or after formation"
        )

    def ablated(self, panel: ModelTrajectory) -> pd.DataFrame:
        """One row per revision at which the final circuit was ablated, in training order."""
        rows = panel.ablations
        if rows is None or not len(rows):
            return pd.DataFrame(columns=["revision"])
        rows = rows.loc[rows["circuit"] == self.circuit]
        short = rows.groupby("revision")["shortfall"].max() if "shortfall" in rows else pd.Series(dtype=float)
        rows = rows.loc[(rows["condition"] == "circuit") & rows["revision"].isin(panel.names)]
        rows = rows.drop_duplicates("revision")
        index = {name: i for i, name in enumerate(panel.names)}
        rows = rows.assign(index=rows["revision"].map(index), shortfall=rows["revision"].map(short).fillna(0))
        return rows.sort_values("index").reset_index(drop=True)

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        rows = self.ablated(panel)
        if not len(rows):
            why = (
                f'no ablation of {self.circuit} stored for this model: add [ablation] circuit = "{self.circuit}" '
                f"to the panel, or run headtrace ablate MODEL --revision R --circuit {self.circuit} --out DIR"
            )
            return self.finding(NOT_MEASURABLE, why, {}, config)
        head_set = parse_circuit(self.circuit).head_set
        current = heads_in_set(panel.heads.loc[panel.heads["revision"] == panel.names[-1]], head_set)
        circuit = str(rows["circuit_heads"].iloc[0])
        numbers: dict = {
            "circuit": self.circuit,
            "circuit_heads": circuit.split(",") if circuit else [],
            "revisions": list(rows["revision"]),
            "index": [int(i) for i in rows["index"]],
            "tokens": [float(t) for t in rows["tokens"]],
            "verdicts": list(rows["verdict"]),
            "decided_by": list(rows["decided_by"]),
            "differential": [float(v) for v in rows["differential"]],
            "differential_low": [float(v) for v in rows["differential_low"]],
            "differential_high": [float(v) for v in rows["differential_high"]],
            "shortfall": [int(v) for v in rows["shortfall"]],
        }
        stale = sorted({str(h) for h in rows["circuit_heads"]} - {",".join(head_id(l, h) for l, h in current)})
        if stale:
            why = (
                f"the ablations of {self.circuit} name heads ({'; '.join(stale)}) that are not the {head_set} set "
                f"at the last revision {panel.names[-1]} ({','.join(head_id(l, h) for l, h in current) or 'none'}): "
                "run the panel again"
            )
            return self.finding(NOT_MEASURABLE, why, numbers, config)
        spec = (
            f"induction >= {config.timing_induction_count} heads at {config.thresholds.induction_threshold:g}x",
            "screen_induction_circuit",
            config.timing_induction_count,
        )
        formed = first_reaching(panel.revisions, *spec)
        hit = [k for k, verdict in enumerate(rows["verdict"]) if verdict == "necessary"]
        necessary = (
            Bracket(int(rows["index"].iloc[hit[0] - 1]) if hit[0] else -1, int(rows["index"].iloc[hit[0]]))
            if hit
            else None
        )
        formation = Bracket(formed.index - 1, formed.index) if formed.index is not None else None
        if necessary is not None:
            numbers["necessary"] = necessary.as_dict(panel)
        if formation is not None:
            numbers["formed"] = formation.as_dict(panel) | {"milestone": spec[0]}
        never = []
        if necessary is None:
            never.append(f"{self.circuit} not necessary at any of {len(rows)} ablated revisions")
        if formation is None:
            never.append(f"{spec[0]} never reached (max {formed.value:g} heads)")
        if never:
            return self.finding(NOT_MEASURABLE, "; ".join(never), numbers, config)
        verdict = order(necessary, formation)
        numbers["verdict"] = verdict
        statement = (
            f"{self.circuit} ({circuit}) first necessary at {necessary.text(panel)}, {len(rows)} revisions "
            f"ablated; {spec[0]} first at {formation.text(panel)}: necessary {verdict}"
            if verdict != UNORDERED
            else f"{self.circuit} ({circuit}) first necessary at {necessary.text(panel)}, {len(rows)} revisions "
            f"ablated; {spec[0]} first at {formation.text(panel)}: the brackets overlap, so the two "
            f"{UNORDERED}"
        )
        if max(numbers["shortfall"]):
            statement += (
                f"; the matched-random draws lack up to {max(numbers['shortfall'])} head(s) (the circuit fills "
                "its layers), which favours necessary"
            )
        return self.finding(verdict, statement, numbers, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        orders = {s: v["verdict"] for s, (_, v, _) in per.items() if "verdict" in v}
        summary.numbers["order"] = {str(s): o for s, o in orders.items()}
        if orders:
            counts = Counter(orders.values())
            summary.parts.append(
                "order: "
                + ", ".join(f"{o} in {counts[o]}/{len(orders)}" for o in self.expectable if counts.get(o))
                + " ("
                + "; ".join(f"seed {s} {o}" for s, o in orders.items())
                + ")"
            )
        summary.spread("necessary_tokens", summary.values("necessary", "tokens"), tokens_label, "first necessary")
        return summary.result()


# --------------------------------------------------------------------------------------------
# F9: the previous-token -> induction link (composition.py's tables, merged by `with_composition`).

LINK_COLUMNS = (
    "comp_top_sender",
    "comp_top_k",
    "comp_top_previous",
    "comp_prev_sender",
    "comp_prev_k",
    "comp_prev_drop",
)


def with_composition(heads: pd.DataFrame, composition: pd.DataFrame | None) -> pd.DataFrame:
    """The heads table with each induction head's links from its (model, revision)'s composition
    table (DIR/composition/): its strongest K-composition sender (`comp_top_*`: which head, the score,
    whether it is a previous-token head), and its strongest previous-token sender (`comp_prev_*`: which
    head, the score, its ablation drop, NaN where the drops were not measured). Other heads, and every
    head without a composition table, get NaN; no table at all: the heads table as it is."""
    if composition is None or not len(composition):
        return heads
    keys = ["model", "revision", "receiver"]
    ranked = composition.assign(_k=composition.k_comp.fillna(-1.0)).sort_values("_k", ascending=False)
    top = ranked.drop_duplicates(keys)[[*keys, "sender", "k_comp", "sender_previous"]]
    top.columns = [*keys, "comp_top_sender", "comp_top_k", "comp_top_previous"]
    previous = ranked[ranked.sender_previous.astype(bool)].drop_duplicates(keys)[[*keys, "sender", "k_comp", "drop"]]
    previous.columns = [*keys, "comp_prev_sender", "comp_prev_k", "comp_prev_drop"]
    links = top.merge(previous, on=keys, how="left").rename(columns={"receiver": "head_id"})
    merged = heads.drop(columns=[c for c in LINK_COLUMNS if c in heads]).merge(
        links, on=["model", "revision", "head_id"], how="left"
    )
    merged["comp_top_previous"] = merged["comp_top_previous"].astype("boolean")
    return merged


@dataclass(frozen=True)
class CompositionLink(FindingKind):
    """F9: when an induction head comes to read its keys mainly from a previous-token head of an
    earlier layer (its strongest K-composition, from the weights; docs/definitions.md)."""

    code: ClassVar[str] = "F9"
    title: ClassVar[str] = "previous-token -> induction link"

    def claim(self, config: TrajectoryConfig) -> str:
        return (
            f"an induction head (>= {config.thresholds.induction_threshold:g}x) has a previous-token head "
            f"(>= {config.thresholds.previous_threshold:g}x) of an earlier layer as its strongest K-composition "
            "partner; the link forms at a milestone, bracketed by two revisions"
        )

    def compute(self, panel: ModelTrajectory, config: TrajectoryConfig) -> Finding:
        heads = panel.heads
        if "comp_top_sender" not in heads or heads["comp_top_sender"].isna().all():
            why = (
                "no composition stored (watch with composition=True, or a [composition] section in the panel, "
                "writes DIR/composition/)"
            )
            return self.finding(NOT_MEASURABLE, why, {}, config)
        names, tokens = panel.names, panel.tokens
        linked, strength, pairs = [], [], []
        for name in names:
            at = heads[heads.revision == name]
            rows = at[at.comp_top_sender.notna()]
            if len(rows):
                linked.append(bool(rows.comp_top_previous.fillna(False).any()))
            else:  # no induction head: no link; induction heads without a composition table: not measured
                linked.append(None if at.induction_circuit.astype(bool).any() else False)
            prev = rows[rows.comp_prev_k.notna()]
            best = prev.loc[prev.comp_prev_k.idxmax()] if len(prev) else None
            strength.append(float(best.comp_prev_k) if best is not None else None)
            pairs.append(f"{best.comp_prev_sender} -> {best.head_id}" if best is not None else None)
        numbers: dict = {
            "revisions": names,
            "tokens": [float(t) for t in tokens],
            "linked": linked,
            "strongest_k": strength,
            "strongest_pair": pairs,
        }
        final = heads[(heads.revision == names[-1]) & heads.comp_top_sender.notna()]
        numbers["final_links"] = {
            str(r.head_id): {
                "top": r.comp_top_sender,
                "top_k": float(r.comp_top_k),
                "previous": r.comp_prev_sender if isinstance(r.comp_prev_sender, str) else None,
                "previous_k": float(r.comp_prev_k),
                "previous_drop": float(r.comp_prev_drop),
            }
            for r in final.itertuples()
        }
        hit = [i for i, value in enumerate(linked) if value]
        measured = [value for value in linked if value is not None]
        if not hit:
            why = (
                f"no induction head's strongest K-composition partner is a previous-token head at any of the "
                f"{len(names)} revisions"
            )
            return self.finding(DOES_NOT_HOLD, why, numbers, config)
        i = hit[0]
        # The bracket's lower end: the last revision before where the link is known to be absent.
        before = next((j for j in range(i - 1, -1, -1) if linked[j] is False), None)
        numbers |= {
            "index": i,
            "revision": names[i],
            "tokens_at": float(tokens[i]),
            "previous_revision": names[before] if before is not None else None,
            "previous_tokens": float(tokens[before]) if before is not None else 0.0,
            "at_final": measured[-1],
        }
        at = f"{names[i]} ({tokens_label(tokens[i])})"
        if before is not None:
            bracket = f"between {names[before]} ({tokens_label(tokens[before])}) and {at}"
        elif i:
            bracket = f"by {at} (not measured before it)"
        else:
            bracket = f"by the first revision, {at}"
        statement = (
            f"the previous-token -> induction link forms {bracket} ({pairs[i]}, K-composition {strength[i]:.3f})"
        )
        if pairs[-1] is not None:
            statement += f"; at {names[-1]}: {pairs[-1]}, {strength[-1]:.3f}"
        if not measured[-1]:
            statement += ", no longer the strongest link there"
        return self.finding(HOLDS if measured[-1] else DOES_NOT_HOLD, statement, numbers, config)

    def across_seeds(self, per: Mapping[int, SeedFinding], config: TrajectoryConfig) -> tuple[dict, list[str]]:
        summary = Summary(per)
        summary.spread("tokens_at", summary.values("tokens_at"), tokens_label, "link forms at")
        return summary.result()


# --------------------------------------------------------------------------------------------
# The registry.


class FindingRegistry(Registry[FindingKind]):
    """The findings by code, in order; findings installed through the `headtrace.findings` entry-point
    group join on first use (and whenever a new one appears on sys.path)."""

    def __init__(self) -> None:
        super().__init__("finding")
        self._plugins: dict[tuple[str, str], str] = {}  # (entry point name, value) -> the code it registered

    def add(self, name: str, entry: FindingKind) -> FindingKind:
        if not isinstance(entry, FindingKind):
            raise HeadtraceError(f"finding '{name}' is a {type(entry).__name__}, not a headtrace FindingKind")
        if name != entry.code:
            raise HeadtraceError(f"finding {entry.code} registered under another code, '{name}'")
        entry.validate()
        return super().add(name, entry)

    def load_plugins(self) -> None:
        """Register the findings of installed distributions (entry points of group `headtrace.findings`,
        each a FindingKind subclass or instance); a broken one is a one-line error naming it."""
        for point in importlib.metadata.entry_points(group=ENTRY_POINTS):
            key = (point.name, point.value)
            if self._plugins.get(key) in self._entries:
                continue
            where = f"finding plugin '{point.name} = {point.value}'" + (f" of {point.dist.name}" if point.dist else "")
            try:
                loaded = point.load()
                kind = loaded() if isinstance(loaded, type) and issubclass(loaded, FindingKind) else loaded
            except Exception as exc:  # any error of foreign code: say whose it is
                raise HeadtraceError(f"{where} does not load: {type(exc).__name__}: {exc}") from None
            if not isinstance(kind, FindingKind):
                raise HeadtraceError(f"{where} is a {type(kind).__name__}, not a headtrace FindingKind")
            if kind.code in self._entries and type(self._entries[kind.code]) is not type(kind):
                raise HeadtraceError(
                    f"{where} has code {kind.code}, which {type(self._entries[kind.code]).__name__} has already"
                )
            self.add(kind.code, kind)
            self._plugins[key] = kind.code

    def get(self, name: str) -> FindingKind:
        self.load_plugins()
        return super().get(name)

    def names(self) -> tuple[str, ...]:
        self.load_plugins()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return super().__contains__(name)

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return super().__iter__()

    def kinds(self) -> list[FindingKind]:
        """Every registered finding, in order."""
        return [self._entries[code] for code in self.names()]


FINDINGS = FindingRegistry()
for _kind in (
    Floor(),
    Shape(),
    Timing(),
    EarlyIdentification(),
    SpectralLead(),
    NoiseFloor(),
    MiddleFirst(),
    CausalEmergence(),
    CompositionLink(),
):
    FINDINGS.add(_kind.code, _kind)


def register_finding(kind: FindingKind) -> FindingKind:
    """Add a finding (a later one with the same code replaces it): `headtrace findings`, the family
    rows and the report then include it."""
    return FINDINGS.add(kind.code, kind)


# --------------------------------------------------------------------------------------------
# Expected results of measurements.

Expectations = Mapping[str, Mapping[str, str]]  # model -> finding code -> expected result


def check_expectations(expect: Expectations) -> None:
    """Every expectation names a finding that is a measurement and one of its possible results."""
    measurements = {kind.code: kind.expectable for kind in FINDINGS.kinds() if kind.expectable}
    for model, codes in expect.items():
        for code, value in codes.items():
            if code not in measurements:
                raise HeadtraceError(
                    f"{model}: expect names {code}, which is a claim with a verdict; "
                    f"expected results are for measurements: {', '.join(measurements)}"
                )
            if value not in measurements[code]:
                raise HeadtraceError(
                    f"{model}: expect {code} = '{value}' is not one of: {', '.join(measurements[code])}"
                )


def read_expectations(results_dir: str | Path) -> dict[str, dict[str, str]]:
    """The expectations stored in DIR/expect.json by `write_findings` (empty when there are none)."""
    path = ResultsDir(results_dir).expect
    if not path.is_file():
        return {}
    try:
        expect = json.loads(path.read_text())
    except ValueError:
        raise HeadtraceError(f"'{path}' is not valid JSON; delete it or pass the panel again with --panel") from None
    check_expectations(expect)
    return expect
