"""F8, causal emergence: planted trajectories with known ablation outcomes for each order (before,
with, after formation, cannot be ordered) and each case that is not measurable, an expectation, and
the order per seed across a family (docs/definitions.md)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_trajectory_synthetic import make_heads

from headtrace.errors import HeadtraceError
from headtrace.finding_kinds import CausalEmergence, SeedFinding, order, Bracket
from headtrace.findings import model_findings
from headtrace.trajectory import TrajectoryConfig

MODEL = "org/synthetic"
CIRCUIT = "L1H0,L1H1,L1H2"


def planted_heads(formed: int | None, n_revisions: int = 6) -> pd.DataFrame:
    """Two layers of four heads; L1H0-L1H2 are induction heads (100x) from revision `formed` on
    (the milestone, 3 heads at 50x, is first reached there), and at the last revision in any case."""
    sel = np.ones((n_revisions, 8))
    sel[formed if formed is not None else n_revisions - 1 :, 4:7] = 100.0
    if formed is None:  # the final circuit without the milestone: only two heads at the last revision
        sel[-1, 6] = 1.0
    return make_heads(n_revisions, n_layers=2, n_heads=4, sel_induction=sel)


def planted_ablations(heads: pd.DataFrame, necessary: dict[int, bool], circuit: str = CIRCUIT) -> pd.DataFrame:
    """The circuit condition's row of a final:induction ablation at each revision index given, with
    its verdict (the differential's interval above 0 when necessary)."""
    revisions = heads.drop_duplicates("revision")[["revision", "tokens"]].reset_index(drop=True)
    rows = []
    for i, yes in necessary.items():
        rows += [
            {
                "model": MODEL,
                "revision": revisions.revision[i],
                "tokens": revisions.tokens[i],
                "condition": condition,
                "circuit": "final:induction",
                "circuit_heads": circuit,
                "verdict": "necessary" if yes else "not shown",
                "decided_by": "top1",
                "differential": 0.4 if yes else 0.01,
                "differential_low": 0.3 if yes else -0.05,
                "differential_high": 0.5 if yes else 0.07,
            }
            for condition in ("clean", "circuit", "random")
        ]
    return pd.DataFrame(rows)


def f8(heads, ablations, expect=None, config=TrajectoryConfig()) -> tuple[str, str, dict]:
    row = model_findings(heads, None, config, expect, ablations).set_index("finding").loc["F8"]
    return row.status, row.statement, json.loads(row.numbers)


@pytest.mark.parametrize(
    "necessary, status, first, previous",
    [
        # Necessary at step4 (index 2), where the circuit has not formed (first at index 3): before.
        ({1: False, 2: True, 5: True}, "before formation", "step4", "step2"),
        # Not at step4, necessary at step8, the milestone's own revision and bracket: with.
        ({2: False, 3: True, 5: True}, "with formation", "step8", "step4"),
        # Not yet at step8, where the circuit has formed: after.
        ({1: False, 3: False, 4: True, 5: True}, "after formation", "step16", "step8"),
        # Ablated at the first and last revisions only: the brackets overlap.
        ({0: False, 5: True}, "cannot be ordered on this grid", "step32", "step1"),
        # Necessary at the first ablated revision: its bracket opens at the start of training.
        ({0: True, 5: True}, "before formation", "step1", None),
    ],
)
def test_each_order_on_a_planted_trajectory(necessary, status, first, previous):
    heads = planted_heads(formed=3)
    found, statement, numbers = f8(heads, planted_ablations(heads, necessary))
    assert found == status and numbers["verdict"] == status
    assert (numbers["necessary"]["revision"], numbers["necessary"]["previous_revision"]) == (first, previous)
    assert (numbers["formed"]["revision"], numbers["formed"]["previous_revision"]) == ("step8", "step4")
    assert numbers["revisions"] == [f"step{2**i}" for i in sorted(necessary)]
    assert numbers["circuit_heads"] == CIRCUIT.split(",")
    assert f"first necessary at {first}" in statement and "first at step8 (8B; after step4)" in statement


@pytest.mark.parametrize(
    "formed, necessary, circuit, why",
    [
        (3, None, CIRCUIT, "no ablation of final:induction stored"),
        (3, {1: False, 5: False}, CIRCUIT, "not necessary at any of 2 ablated revisions"),
        (None, {1: False, 5: True}, "L1H0,L1H1", "never reached (max 2 heads)"),
        (3, {1: False, 5: True}, "L1H0,L1H3", "not the induction set at the last revision step32"),
    ],
)
def test_not_measurable_cases(formed, necessary, circuit, why):
    heads = planted_heads(formed)
    ablations = None if necessary is None else planted_ablations(heads, necessary, circuit)
    status, statement, _ = f8(heads, ablations)
    assert status == "not measurable" and why in statement, statement


def test_a_shortfall_of_the_matched_draws_is_said():
    heads = planted_heads(formed=3)
    ablations = planted_ablations(heads, {1: False, 2: True, 5: True}).assign(shortfall=0)
    ablations.loc[(ablations.condition == "random") & (ablations.revision == "step4"), "shortfall"] = 2
    status, statement, numbers = f8(heads, ablations)
    assert status == "before formation" and numbers["shortfall"] == [0, 2, 0]
    assert statement.endswith(
        "the matched-random draws lack up to 2 head(s) (the circuit fills its layers), which favours necessary"
    )
    assert "lack" not in f8(heads, ablations.assign(shortfall=0))[1]


def test_an_expected_order_is_compared():
    heads = planted_heads(formed=3)
    ablations = planted_ablations(heads, {1: False, 2: True, 5: True})
    assert f8(heads, ablations, {MODEL: {"F8": "before formation"}})[0] == "as expected"
    status, statement, numbers = f8(heads, ablations, {MODEL: {"F8": "after formation"}})
    assert status == "differs" and numbers["expected"] == "after formation" and "expected after formation" in statement


def test_order_against_every_bracket_by_hand():
    """`order` against the plain definitions, over every pair of brackets on a grid of 6 revisions."""
    for n_after in range(-1, 5):
        for n_at in range(n_after + 1, 6):
            for f_after in range(-1, 5):
                for f_at in range(f_after + 1, 6):
                    if n_at <= f_after:
                        expected = "before formation"
                    elif n_after >= f_at:
                        expected = "after formation"
                    elif (n_after, n_at) == (f_after, f_at):
                        expected = "with formation"
                    else:
                        expected = "cannot be ordered on this grid"
                    assert order(Bracket(n_after, n_at), Bracket(f_after, f_at)) == expected


def test_order_per_seed_across_a_family():
    per = {
        0: SeedFinding("before formation", {"verdict": "before formation", "necessary": {"tokens": 2e9}}, ""),
        1: SeedFinding("after formation", {"verdict": "after formation", "necessary": {"tokens": 4e9}}, ""),
        2: SeedFinding("before formation", {"verdict": "before formation", "necessary": {"tokens": 3e9}}, ""),
        3: SeedFinding("not measurable", {}, "no ablation"),
    }
    numbers, parts = CausalEmergence().across_seeds(per, TrajectoryConfig())
    assert numbers["order"] == {"0": "before formation", "1": "after formation", "2": "before formation"}
    assert parts[0] == (
        "order: before formation in 2/3, after formation in 1/3 (seed 0 before formation; seed 1 after "
        "formation; seed 2 before formation)"
    )
    assert numbers["necessary_tokens"]["median"] == 3e9 and parts[1] == "first necessary: 3B [2B-4B] (3/4 seeds)"


def test_only_a_final_circuit():
    with pytest.raises(HeadtraceError, match="final:<set>"):
        CausalEmergence(circuit="induction").validate()


def test_the_report_draws_f8_from_a_results_folder(tmp_path):
    """Through the store: shards, stored ablations with every column (report_panels.ablation_rows),
    findings.md and the F8 figure (the whole report is drawn in the organism test)."""
    from report_panels import ablation_rows

    from headtrace.findings import write_findings
    from headtrace.report.data import load
    from headtrace.report.figures import FIGURES, causal_plot
    from headtrace.store import ResultsDir

    heads = planted_heads(formed=3)
    results = ResultsDir(tmp_path)
    for revision, shard in heads.groupby("revision"):
        results.write_shard(shard, shard[["model", "revision", "tokens"]].iloc[:1].assign(top1=0.5))
    outcomes = planted_ablations(heads, {1: False, 2: True, 5: True}).drop_duplicates("revision")
    for row in outcomes.itertuples():
        rows = ablation_rows(MODEL, row.revision, row.tokens).assign(
            circuit="final:induction",
            circuit_heads=CIRCUIT,
            verdict=row.verdict,
            differential=row.differential,
            differential_low=row.differential_low,
            differential_high=row.differential_high,
        )
        results.write_ablation(rows)
    table = write_findings(tmp_path).set_index("finding")
    assert table.loc["F8", "status"] == "before formation"
    assert "| org/synthetic | F8 | causal emergence | before formation |" in results.findings_md.read_text()
    data = load(tmp_path)
    plot = causal_plot(data, data.panel(MODEL))
    assert plot.figure is not None and plot.title == f"{MODEL}: when the final circuit becomes necessary (F8)"
    assert plot.tips["tip0"][1] == "step4: differential +0.4 [+0.3, +0.5] (loss), necessary"
    assert FIGURES.get("F8").draw is causal_plot
