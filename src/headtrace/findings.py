"""The findings of a results folder, as `headtrace findings` writes them and the report draws them:
per model, every registered finding (finding_kinds.FINDINGS, with the expectations kept in
DIR/expect.json), then per seed family across its seeds (family_findings.with_family_rows, with the
gaps DIR/manifest.json records).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from headtrace.families import Gap, read_gaps
from headtrace.family_findings import family_markdown, model_rows, with_family_rows
from headtrace.finding_kinds import FINDINGS, Expectations, check_expectations, read_expectations, with_composition
from headtrace.store import COMPOSITION, ResultsDir, write_parquet_atomic, write_text_atomic, writing_results
from headtrace.trajectory import (
    TrajectoryConfig,
    _to_json,
    compare_expected,
    findings_markdown,
    milestones,
    model_trajectories,
    revision_table,
)

COLUMNS = ["model", "finding", "title", "status", "statement", "claim", "numbers"]


def model_findings(
    heads: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    config: TrajectoryConfig = TrajectoryConfig(),
    expect: Expectations | None = None,
    ablations: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per model x registered finding: status, one-line statement, claim, and its numbers as JSON.

    `expect`: per model, the expected result of a measurement finding (F2: sharp or gradual); its
    status then says `as expected` or `differs`. `ablations`: the stored ablation rows (F8 reads them)."""
    config.validate()
    expect = expect or {}
    check_expectations(expect)
    kinds = FINDINGS.kinds()
    rows = []
    for panel in model_trajectories(heads, runs, config, ablations):
        for kind in kinds:
            found = kind.compute(panel, config)
            if kind.expectable:
                found = compare_expected(found, expect.get(panel.name, {}).get(found.code))
            rows.append(
                {
                    "model": panel.name,
                    "finding": found.code,
                    "title": found.title,
                    "status": found.status,
                    "statement": found.statement,
                    "claim": found.claim,
                    "numbers": _to_json(found.numbers),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def findings_table(
    results_dir: str | Path,
    heads: pd.DataFrame,
    runs: pd.DataFrame,
    config: TrajectoryConfig = TrajectoryConfig(),
    gaps: Sequence[Gap] | None = None,
) -> pd.DataFrame:
    """The findings of (heads, runs), read from `results_dir`: one row per model and finding, then
    each family's rows across seeds (`gaps`: what members lack, default the manifest's)."""
    gaps = read_gaps(results_dir) if gaps is None else gaps
    heads = with_composition(heads, ResultsDir(results_dir).read_tables(COMPOSITION))
    ablations = ResultsDir(results_dir).read_ablations()
    table = model_findings(heads, runs, config, read_expectations(results_dir), ablations)
    return with_family_rows(table, heads, runs, config, gaps)


def write_findings(
    results_dir: str | Path, config: TrajectoryConfig = TrajectoryConfig(), expect: Expectations | None = None
) -> pd.DataFrame:
    """Compute the findings of a results directory; write DIR/findings.parquet and DIR/findings.md.

    `expect` (a panel's per-model expectations) is stored in DIR/expect.json and used by later calls
    and the report; without it, the stored expectations apply."""
    config.validate()
    out = ResultsDir(results_dir)
    heads, runs = out.read()
    with writing_results(out.root):
        if expect is not None:
            check_expectations(expect)
            write_text_atomic(json.dumps(expect, indent=1, sort_keys=True), out.expect)
        table = findings_table(out.root, heads, runs, config)
        stones = milestones(revision_table(heads, runs, config), config)
        write_parquet_atomic(table, out.findings)
        write_text_atomic(findings_markdown(model_rows(table), stones) + family_markdown(table), out.findings_md)
    return table
