"""Seed families' findings across their seeds (docs/definitions.md, "Seed families").

Findings are computed per member as for any model (finding_kinds.py), then summarised per family
(`with_family_rows`): how many seeds each finding holds for or is measurable in, and the median and
range over seeds of the figures its unit names (`FindingKind.across_seeds`); which heads form each
seed's own circuit, and when; every milestone's tokens across seeds. Who belongs to which family
comes from the run records' `family` and `seed` columns (`members`); what a member lacks, from the
gaps the panel recorded (families.Gap).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.families import Gap
from headtrace.finding_kinds import FINDINGS, SeedFinding, Spread, get, show_count
from headtrace.trajectory import (
    AS_EXPECTED,
    DIFFERS,
    DOES_NOT_HOLD,
    GRADUAL,
    HOLDS,
    NOT_MEASURABLE,
    SHARP,
    ModelTrajectory,
    TrajectoryConfig,
    _markdown_table,
    _to_json,
    final_circuit,
    milestones,
    model_trajectories,
    tokens_label,
)

_OUTCOMES = (HOLDS, DOES_NOT_HOLD, SHARP, GRADUAL, AS_EXPECTED, DIFFERS)  # tie order of a family's status


# --------------------------------------------------------------------------------------------
# Reading results: who belongs to which family.


def members(runs: pd.DataFrame) -> dict[str, dict[int, str]]:
    """family -> {seed: model}, from the run records' family and seed columns (empty without families)."""
    if "family" not in runs.columns:
        return {}
    rows = runs.loc[runs["family"].notna(), ["model", "family", "seed"]].drop_duplicates()
    found: dict[str, dict[int, str]] = {}
    for row in rows.itertuples():
        seeds = found.setdefault(str(row.family), {})
        seed = int(row.seed)
        if seeds.get(seed, row.model) != row.model or rows.model.eq(row.model).sum() > 1:
            raise HeadtraceError(
                f"the results hold two runs as seed {seed} of family '{row.family}' (or one model in "
                "two families); keep one results directory per panel"
            )
        seeds[seed] = str(row.model)
    return {family: dict(sorted(seeds.items())) for family, seeds in found.items()}


def across_seeds(panels: Sequence[ModelTrajectory], column: str) -> pd.DataFrame:
    """Per revision of a family (training order): median, min and max of `column` over the members
    that have the revision (`n` of them; a member without it is left out, never filled)."""
    frames = [p.revisions[["revision", "tokens", column]].assign(model=p.name) for p in panels]
    table = pd.concat(frames, ignore_index=True)
    grouped = table.groupby("revision", sort=False)
    stats = grouped.agg(
        tokens=("tokens", "first"),
        median=(column, "median"),
        low=(column, "min"),
        high=(column, "max"),
        n=(column, "count"),
    )
    values: dict[str, dict[str, float]] = {}
    for row in table.dropna(subset=[column]).itertuples():
        values.setdefault(row.revision, {})[row.model] = float(getattr(row, column))
    stats["values"] = [values.get(revision, {}) for revision in stats.index]
    return (
        stats.reset_index()
        .sort_values(["tokens", "revision"], kind="stable", na_position="last")
        .reset_index(drop=True)
    )


# --------------------------------------------------------------------------------------------
# Findings across seeds.


def tally(statuses: dict[int, str]) -> tuple[str, str, dict]:
    """A family's status ('holds in 8/9': the commonest outcome over the seeds where the finding is
    measurable), the counts as text, and as numbers."""
    counts = Counter(statuses.values())
    measurable = sum(n for status, n in counts.items() if status != NOT_MEASURABLE)
    order = sorted(
        counts, key=lambda s: (s == NOT_MEASURABLE, -counts[s], _OUTCOMES.index(s) if s in _OUTCOMES else 99)
    )
    if not measurable:
        status = NOT_MEASURABLE
    else:
        status = f"{order[0]} in {counts[order[0]]}/{measurable}"
    text = ", ".join(f"{s} in {counts[s]}" for s in order) + f" of {len(statuses)} seeds"
    return status, text, {"counts": dict(counts), "n_seeds": len(statuses), "n_measurable": measurable}


def _per_seed(rows: pd.DataFrame, code: str) -> dict[int, SeedFinding]:
    """seed -> (status, numbers, statement) of one finding's per-seed rows."""
    found = rows.loc[rows.finding == code]
    return {int(r.seed): SeedFinding(r.status, json.loads(r.numbers), r.statement) for r in found.itertuples()}


def _missing_clause(gaps: Sequence[Gap]) -> str:
    if not gaps:
        return ""
    by_seed: dict[int, list[str]] = {}
    for gap in gaps:
        by_seed.setdefault(gap.seed, []).append(gap.revision)
    return "; missing (left out, not filled): " + ", ".join(
        f"seed {s} lacks {', '.join(r)}" for s, r in sorted(by_seed.items())
    )


def _finding_row(family: str, code: str, rows: pd.DataFrame, config: TrajectoryConfig, gaps: Sequence[Gap]) -> dict:
    per = _per_seed(rows, code)
    first = rows.loc[rows.finding == code].iloc[0]
    status, counts_text, numbers = tally({s: st for s, (st, _, _) in per.items()})
    figures, parts = FINDINGS.get(code).across_seeds(per, config) if code in FINDINGS else ({}, [])
    why: dict[str, list[int]] = {}
    for seed, (st, _, text) in per.items():
        if st == NOT_MEASURABLE:
            why.setdefault(text, []).append(seed)
    unmeasured = [f"seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}: {text}" for text, s in why.items()]
    statement = (
        counts_text
        + (f" (not measurable: {'; '.join(unmeasured)})" if unmeasured else "")
        + ("; " + "; ".join(parts) if parts else "")
        + _missing_clause(gaps)
    )
    numbers |= figures | {
        "statuses": {str(s): st for s, (st, _, _) in per.items()},
        "missing": [g.as_dict() for g in gaps],
    }
    return {
        "family": family,
        "finding": code,
        "title": first.title,
        "status": status,
        "statement": statement,
        "claim": first.claim,
        "numbers": numbers,
    }


def circuit_layers(circuit: Sequence[str]) -> dict[int, int]:
    """Circuit heads per layer, from head ids 'L{layer}H{head}'."""
    return dict(sorted(Counter(int(h[1:].split("H")[0]) for h in circuit).items()))


def _circuit_row(
    family: str,
    seeds: dict[int, str],
    panels: dict[str, ModelTrajectory],
    rows: pd.DataFrame,
    stones: pd.DataFrame,
    config: TrajectoryConfig,
    gaps: Sequence[Gap],
) -> dict:
    """Which heads across seeds: each seed's own final circuit (identity does not carry over between
    seeds), its size and layers, and when it formed."""
    circuits = {s: final_circuit(panels[m], config) for s, m in seeds.items()}
    n = len(seeds)
    size = Spread.of({s: len(c) for s, c in circuits.items()})
    layers: dict[int, dict[str, int]] = {}
    for circuit in circuits.values():
        for layer, count in circuit_layers(circuit).items():
            entry = layers.setdefault(layer, {"seeds": 0, "heads": 0})
            entry["seeds"] += 1
            entry["heads"] += count
    layers = dict(sorted(layers.items()))
    name = f"induction >= {config.timing_induction_count} heads at {config.thresholds.induction_threshold:g}x"
    reached = stones.loc[stones.milestone == name].set_index("model")["tokens"]
    formed = Spread.of({s: reached.get(m) for s, m in seeds.items()})
    f4 = _per_seed(rows, "F4")
    complete = Spread.of({s: get(v, "levels", "100%", "tokens") for s, (_, v, _) in f4.items()})
    with_circuit = sum(1 for c in circuits.values() if c)
    numbers = {
        "heads": {str(s): c for s, c in circuits.items()},
        "size": size.as_dict(),
        "layers": {str(k): v for k, v in layers.items()},
        "formed_tokens": formed.as_dict(),
        "complete_tokens": complete.as_dict(),
        "n_seeds": n,
        "n_with_circuit": with_circuit,
        "missing": [g.as_dict() for g in gaps],
    }
    where = ", ".join(f"layer {k} in {v['seeds']}/{n} seeds ({v['heads']} heads)" for k, v in layers.items())
    statement = (
        f"{with_circuit}/{n} seeds have a final circuit "
        f"(>= {config.thresholds.induction_threshold:g}x at the seed's last revision); "
        f"heads in it: {size.text(show_count, n)}"
        + (f"; {where}" if where else "")
        + (f"; {name}: {formed.text(tokens_label, n)}" if formed.n else "")
        + (
            f"; whole final circuit >= {config.thresholds.induction_threshold:g}x: {complete.text(tokens_label, n)}"
            if complete.n
            else ""
        )
        + _missing_clause(gaps)
    )
    status = f"circuit in {with_circuit}/{n}" if with_circuit else NOT_MEASURABLE
    return {
        "family": family,
        "finding": "circuit",
        "title": "circuit heads across seeds",
        "status": status,
        "statement": statement,
        "claim": "per-head identity does not carry over between seeds: layers, size and "
        "timing of each seed's own final induction circuit",
        "numbers": numbers,
    }


def _milestones_row(family: str, seeds: dict[int, str], stones: pd.DataFrame, gaps: Sequence[Gap]) -> dict:
    """Every milestone's tokens over the seeds that reach it: median and range."""
    mine = stones.loc[stones.model.isin(seeds.values())]
    by_model = {m: s for s, m in seeds.items()}
    numbers: dict = {"n_seeds": len(seeds), "missing": [g.as_dict() for g in gaps], "milestones": {}}
    parts = []
    for name, group in mine.groupby("milestone", sort=False):
        tokens = Spread.of({by_model[r.model]: r.tokens for r in group.itertuples()})
        numbers["milestones"][name] = tokens.as_dict() | {"reached": tokens.n}
        parts.append(f"{name}: {tokens.text(tokens_label, len(seeds))}" if tokens.n else f"{name}: no seed reaches it")
    reached = sum(1 for v in numbers["milestones"].values() if v["reached"])
    status = f"{reached}/{len(numbers['milestones'])} reached" if reached else NOT_MEASURABLE
    return {
        "family": family,
        "finding": "milestones",
        "title": "milestones across seeds",
        "status": status,
        "statement": "; ".join(parts) + _missing_clause(gaps),
        "claim": "first revision where each condition holds, per seed (the bracket's upper end)",
        "numbers": numbers,
    }


def with_family_rows(
    table: pd.DataFrame,
    heads: pd.DataFrame,
    runs: pd.DataFrame | None,
    config: TrajectoryConfig = TrajectoryConfig(),
    gaps: Sequence[Gap] = (),
) -> pd.DataFrame:
    """`findings.model_findings`' per-model table with `family` and `seed` columns and, per family, one
    row per finding summarised across seeds by its registered unit (finding_kinds.FINDINGS), then
    `circuit` and `milestones` (model null). Unchanged when the results hold no family."""
    families = members(runs) if runs is not None else {}
    if not families:
        return table
    of = {m: (f, s) for f, seeds in families.items() for s, m in seeds.items()}
    tagged = table.assign(
        family=table.model.map(lambda m: of.get(m, (None, None))[0]),
        seed=pd.array([of.get(m, (None, None))[1] for m in table.model], dtype="Int64"),
    )
    columns = ["model", "family", "seed"] + [c for c in table.columns if c != "model"]
    tagged = tagged[columns]
    panels = {p.name: p for p in model_trajectories(heads, runs, config)}
    stones = milestones(pd.concat([p.revisions for p in panels.values()], ignore_index=True), config)
    rows = []
    for family, seeds in families.items():
        mine = tagged.loc[tagged.family == family]
        lacking = [g for g in gaps if g.family == family]
        for code in dict.fromkeys(mine.finding):
            rows.append(_finding_row(family, code, mine, config, lacking))
        rows.append(_circuit_row(family, seeds, panels, mine, stones, config, lacking))
        rows.append(_milestones_row(family, seeds, stones, lacking))
    summary = pd.DataFrame(rows).assign(model=None, seed=pd.array([None] * len(rows), dtype="Int64"))
    summary["numbers"] = summary["numbers"].map(_to_json)
    return pd.concat([tagged, summary[columns]], ignore_index=True)


def family_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The across-seed rows of a findings table (empty when it has none)."""
    if "family" not in table.columns:
        return table.iloc[0:0]
    return table.loc[table.model.isna()]


def model_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The per-model rows of a findings table (single models and each family member)."""
    return table.loc[table.model.notna()] if "family" in table.columns else table


def family_markdown(table: pd.DataFrame) -> str:
    """The findings.md section of the families: each finding across seeds (empty without families)."""
    summary = family_rows(table)
    if summary.empty:
        return ""
    parts = [
        "\n## Seed families: each finding per seed (above), then across seeds",
        "Status: the commonest outcome over the seeds where the finding is measurable ('holds in 8/9'); "
        "figures: median [range] over the seeds that have them. Per-head identity does not carry over "
        "between seeds: `circuit` gives each seed's own circuit's size, layers and timing.",
    ]
    members_of = model_rows(table).dropna(subset=["family"]).drop_duplicates("model")
    for family, rows in summary.groupby("family", sort=False):
        seeds = members_of.loc[members_of.family == family].sort_values("seed")
        listed = ", ".join(f"{int(r.seed)} ({r.model})" for r in seeds.itertuples())
        parts += [
            f"### {family}",
            f"Seeds: {listed}.",
            _markdown_table(rows[["finding", "title", "status", "statement"]]),
        ]
    return "\n\n".join(parts) + "\n"


def family_status_class(status: str) -> str:
    """The outcome a family status leads with ('holds in 8/9' -> 'holds'), for styling."""
    return status.split(" in ")[0]


def summary_numbers(table: pd.DataFrame, family: str, code: str) -> dict:
    """The numbers of one family row."""
    row = table.loc[(table.family == family) & table.model.isna() & (table.finding == code)]
    return json.loads(row.numbers.iloc[0]) if len(row) else {}
