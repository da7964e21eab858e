"""Findings on synthetic panels with planted trajectories, and on degenerate panels."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from headtrace.errors import HeadtraceError
from headtrace.probes import CLASS_KEYS
from headtrace.findings import model_findings, write_findings
from headtrace.store import read_results, ResultsDir
from headtrace.trajectory import TrajectoryConfig, revision_table

STEP_TOKENS = 1e9


def make_heads(
    n_revisions: int,
    n_layers: int = 4,
    n_heads: int = 4,
    model: str = "org/synthetic",
    tokens: list[float] | None = None,
    **columns: np.ndarray,
) -> pd.DataFrame:
    """A heads table of `n_revisions` revisions (tokens doubling from 1B unless given); `columns` hold
    [revision, head] arrays (heads in layer order); selectivities default to 1 (no preference)."""
    tokens = tokens if tokens is not None else [STEP_TOKENS * 2**r for r in range(n_revisions)]
    size = n_layers * n_heads
    frames = []
    for r, t in enumerate(tokens):
        frame = pd.DataFrame(
            {
                "model": model,
                "revision": f"step{2**r}",
                "tokens": float(t),
                "layer": np.repeat(np.arange(n_layers), n_heads),
                "head": np.tile(np.arange(n_heads), n_layers),
            }
        )
        frame["head_id"] = [f"L{l}H{h}" for l, h in zip(frame["layer"], frame["head"])]
        for key in CLASS_KEYS.values():
            frame[f"sel_{key}"] = 1.0
        for name, values in columns.items():
            frame[name] = np.broadcast_to(np.asarray(values, dtype=float), (len(tokens), size))[r]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def sink_selectivity(counts: list[int], n_layers: int = 4, n_heads: int = 4) -> np.ndarray:
    """First-token selectivity 100 for `count` heads per revision, filled from the top layer down."""
    sel = np.ones((len(counts), n_layers * n_heads))
    for r, count in enumerate(counts):
        if count:
            sel[r, -count:] = 100.0
    return sel


def head_index(name: str, n_heads: int = 4) -> int:
    layer, head = name[1:].split("H")
    return int(layer) * n_heads + int(head)


def by_finding(heads: pd.DataFrame, config: TrajectoryConfig = TrajectoryConfig()) -> dict[str, pd.Series]:
    table = model_findings(heads, None, config)
    return {row.finding: row for _, row in table.iterrows()}


def numbers(row: pd.Series) -> dict:
    return json.loads(row.numbers)


def test_planted_sharp_jump_is_sharp():
    row = by_finding(make_heads(6, sel_first=sink_selectivity([0, 0, 1, 1, 12, 12])))["F2"]
    assert row.status == "sharp" and row.statement.startswith("sharp")
    assert numbers(row)["share"] == pytest.approx(11 / 12)
    assert (numbers(row)["jump_from"], numbers(row)["jump_to"]) == ("step8", "step16")


def test_planted_gradual_ramp_is_gradual_and_threshold_is_a_parameter():
    heads = make_heads(6, sel_first=sink_selectivity([0, 2, 4, 6, 8, 10]))
    row = by_finding(heads)["F2"]
    assert row.status == "gradual" and row.statement.startswith("gradual") and "(< 50%)" in row.statement
    assert numbers(row)["share"] == pytest.approx(0.2) and numbers(row)["monotone"]
    assert by_finding(heads, TrajectoryConfig(sharp_share=0.2))["F2"].status == "sharp"


def test_olmo_step_is_sharp_whatever_the_other_revisions():
    """OLMo 7.4% (117B) -> 70.3% (264B), 16 x 16 heads; the worst case for the criterion puts the
    rest of the trajectory at 0% first and 100% last."""
    tokens = [2e9, 4e9, 10e9, 23e9, 52e9, 117e9, 264e9, 597e9, 1350e9, 3048e9]
    counts = [0, 0, 2, 5, 10, 19, 180, 220, 256, 256]
    row = by_finding(make_heads(10, 16, 16, tokens=tokens, sel_first=sink_selectivity(counts, 16, 16)))["F2"]
    assert round(19 / 256, 3) == 0.074 and round(180 / 256, 3) == 0.703
    assert row.status == "sharp" and numbers(row)["share"] == pytest.approx(161 / 256)
    assert (numbers(row)["jump_from_tokens"], numbers(row)["jump_to_tokens"]) == (117e9, 264e9)


def test_non_monotone_trajectory_uses_largest_rise():
    row = by_finding(make_heads(5, sel_first=sink_selectivity([4, 0, 2, 8, 6])))["F2"]
    assert numbers(row)["total_rise"] == pytest.approx(8 / 16)  # from 0 heads at step2 to 8 at step8
    assert not numbers(row)["monotone"] and numbers(row)["largest_drop"] == pytest.approx(4 / 16)


def test_floor_and_timing_on_a_planted_panel():
    sel_first = sink_selectivity([0, 0, 2, 8, 8, 8])  # layers 2-3 only
    induction = np.ones((6, 16))
    induction[1:, [head_index(h) for h in ("L1H0", "L1H1", "L2H0")]] = 80.0
    row = by_finding(make_heads(6, sel_first=sel_first, sel_induction=induction))
    assert row["F1"].status == "holds" and numbers(row["F1"])["low_layers_never"] == [0, 1]
    assert numbers(row["F1"])["sink_heads_per_layer"]["step4"] == [0, 0, 0, 2]
    assert numbers(row["F1"])["sink_heads_per_layer"]["step8"] == [0, 0, 4, 4]
    # sink >= 50% first at step8 (8e9 tokens, after step4 = 4e9); induction >= 3 heads at step2 (2e9, after 1e9)
    assert row["F3"].status == "holds"
    assert numbers(row["F3"])["sink"]["revision"] == "step8" and numbers(row["F3"])["induction"]["revision"] == "step2"
    assert (numbers(row["F3"])["ratio"], numbers(row["F3"])["ratio_low"], numbers(row["F3"])["ratio_high"]) == (
        pytest.approx(4),
        pytest.approx(2),
        pytest.approx(8),
    )


def test_timing_grid_cannot_order_milestones_in_one_interval():
    induction = np.ones((3, 16))
    induction[2, :3] = 80.0
    row = by_finding(make_heads(3, sel_first=sink_selectivity([0, 0, 10]), sel_induction=induction))["F3"]
    assert row.status == "not measurable" and "cannot order" in row.statement


def test_sink_heads_in_floor_layers_fail_f1():
    sel_first = sink_selectivity([0, 3, 6])
    sel_first[2, head_index("L1H2")] = 100.0
    row = by_finding(make_heads(3, sel_first=sel_first))["F1"]
    assert row.status == "does not hold" and numbers(row)["floor_sink_heads"] == 1


def test_spectral_lead_measures_rise_from_the_floor_not_from_initialisation():
    """L3H0 starts at PR 180 (like Pythia's layer 0) and collapses: its elevation is the later rise."""
    induction = np.ones((6, 16))
    induction[3:, head_index("L2H0")] = 90.0
    induction[4:, head_index("L3H0")] = 90.0
    pr = np.full((6, 16), 2.0)
    pr[:, head_index("L2H0")] = [2.0, 1.5, 12.0, 20.0, 21.0, 20.0]  # elevated at step4, crosses at step8
    pr[:, head_index("L3H0")] = [180.0, 90.0, 3.0, 3.0, 25.0, 24.0]  # elevated at step16 = its crossing
    row = by_finding(make_heads(6, sel_induction=induction, pr=pr))["F5"]
    heads = numbers(row)["heads"]
    assert heads["L2H0"]["pr_elevated"] == "step4" and heads["L2H0"]["lead_revisions"] == 1
    assert heads["L2H0"]["lead_tokens"] == pytest.approx(8e9 - 4e9)
    assert heads["L3H0"]["pr_elevated"] == "step16" and heads["L3H0"]["lead_revisions"] == 0
    assert row.status == "holds"  # median of (1, 0) = 0.5 >= 0


def test_spectral_lead_of_zero_holds_and_a_head_past_threshold_at_the_start_is_not_measurable():
    """The claim is "at or before": PR rising at the crossing revision supports it. A head already at
    50x at the first revision has no measurable lead (never a negative one)."""
    induction = np.ones((5, 16))
    induction[2:, head_index("L2H0")] = 90.0  # crosses at step4
    induction[:, head_index("L3H1")] = 120.0  # past 50x from step1 on
    pr = np.full((5, 16), 2.0)
    pr[:, head_index("L2H0")] = [2.0, 2.0, 9.0, 10.0, 10.0]  # elevated at step4 too: lead 0
    pr[:, head_index("L3H1")] = [2.0, 2.0, 2.0, 2.0, 30.0]  # would be a lead of -4
    row = by_finding(make_heads(5, sel_induction=induction, pr=pr))["F5"]
    found = numbers(row)
    assert found["heads"]["L2H0"]["lead_revisions"] == 0 and found["median_lead_revisions"] == 0
    assert row.status == "holds"
    assert "L3H1" not in found["heads"] and "no measurable lead" in found["not_measured"]["L3H1"]
    assert "L3H1: already at 120x at the first revision" in row.statement
    assert "L2H0 step4 vs step4 (+0)" in row.statement
    # The lead does not depend on the rise fraction here (a step from 2 to 9): robust across 0.25-0.75.
    assert set(found["sensitivity"]) == {f"{f:g}" for f in np.round(np.linspace(0.25, 0.75, 11), 2)}
    assert not found["fragile"] and "holds throughout" in row.statement


def test_spectral_lead_sensitivity_shows_a_fragile_verdict():
    """PR climbs 2 -> 5 -> 8 -> 11 while selectivity crosses at step4 (index 2): elevated at step2
    (lead +1) for fractions <= 1/3, at step4 (0) up to 2/3, at step8 (-1) above: the verdict flips."""
    induction = np.ones((5, 16))
    induction[2:, head_index("L2H0")] = 90.0
    pr = np.full((5, 16), 2.0)
    pr[:, head_index("L2H0")] = [2.0, 5.0, 8.0, 11.0, 11.0]
    heads = make_heads(5, sel_induction=induction, pr=pr)
    row = by_finding(heads)["F5"]
    sensitivity = numbers(row)["sensitivity"]
    assert row.status == "holds" and numbers(row)["fragile"]
    assert sensitivity["0.3"]["median_lead_revisions"] == 1 and sensitivity["0.5"]["median_lead_revisions"] == 0
    assert sensitivity["0.7"]["verdict"] == "does not hold" and sensitivity["0.75"]["median_lead_revisions"] == -1
    assert "fragile, the verdict flips (holds at 0.25-0.65, does not hold at 0.7-0.75)" in row.statement
    assert by_finding(heads, TrajectoryConfig(pr_rise_fraction=0.75))["F5"].status == "does not hold"


def test_shape_is_compared_only_with_a_stated_expectation(tmp_path):
    gradual = make_heads(6, model="org/ramp", sel_first=sink_selectivity([0, 2, 4, 6, 8, 10]))
    sharp = make_heads(6, model="org/step", sel_first=sink_selectivity([0, 0, 1, 1, 12, 12]))
    heads = pd.concat([gradual, sharp], ignore_index=True)
    table = model_findings(
        heads, None, TrajectoryConfig(), {"org/ramp": {"F2": "gradual"}, "org/step": {"F2": "gradual"}}
    )
    f2 = table.loc[table.finding == "F2"].set_index("model")
    assert f2.loc["org/ramp", "status"] == "as expected" and f2.loc["org/step", "status"] == "differs"
    assert f2.loc["org/step", "statement"].startswith("sharp") and "expected gradual" in f2.loc["org/step", "statement"]
    assert "does not hold" not in set(model_findings(heads).loc[lambda t: t.finding == "F2", "status"])
    with pytest.raises(HeadtraceError, match="F3, which is a claim"):
        model_findings(heads, None, TrajectoryConfig(), {"org/ramp": {"F3": "holds"}})
    with pytest.raises(HeadtraceError, match="'steep' is not one of: sharp, gradual"):
        model_findings(heads, None, TrajectoryConfig(), {"org/ramp": {"F2": "steep"}})


def test_panel_expectation_reaches_findings_and_the_report(tmp_path, monkeypatch):
    """`findings --panel` reads `expect` from the panel's models and keeps it for the report."""
    from headtrace.cli import findings as findings_command
    from headtrace.report.data import load

    results = tmp_path / "results"
    heads = make_heads(4, model="org/ramp", sel_first=sink_selectivity([0, 4, 8, 12]))
    for _, shard in heads.groupby("revision"):
        ResultsDir(results).write_shard(shard, shard[["model", "revision", "tokens"]].iloc[:1])
    panel = tmp_path / "panel.toml"
    panel.write_text(
        'name = "p"\n[[models]]\nid = "org/ramp"\nsource = "local"\npath = "."\n'
        'revisions = "all"\nexpect = { F2 = "sharp" }\n'
    )
    findings_command(results, None, None, None, panel)
    assert json.loads((results / "expect.json").read_text()) == {"org/ramp": {"F2": "sharp"}}
    report = load(results).findings.set_index("finding")
    assert report.loc["F2", "status"] == "differs"
    assert write_findings(results).set_index("finding").loc["F2", "status"] == "differs"
    panel.write_text(panel.read_text().replace('F2 = "sharp"', 'F5 = "holds"'))
    with pytest.raises(HeadtraceError, match=r"panel.toml:7: org/ramp: expect names F5"):
        findings_command(results, None, None, None, panel)


def test_noise_floor_counts_heads_above_null_p99_and_ignores_underflow():
    induction = np.ones((2, 16))
    induction[:, 5] = 60.0
    null = np.tile(np.linspace(1.0, 2.5, 16), (2, 1))
    null[:, 0] = 1e8  # an underflowed baseline: excluded from the noise floor
    underflow = np.zeros((2, 16))
    underflow[:, 0] = 1
    heads = make_heads(2, sel_induction=induction, sel_null=null)
    heads["baseline_underflow"] = underflow.ravel().astype(bool)
    row = by_finding(heads)["F6"]
    assert row.status == "holds"
    expected_p99 = np.quantile(np.linspace(1.0, 2.5, 16)[1:], 0.99)
    assert numbers(row)["null_p99"]["step1"] == pytest.approx(expected_p99)
    assert numbers(row)["n_induction_above_null"] == {"step1": 1, "step2": 1}
    heads = make_heads(2, sel_induction=induction, sel_null=np.tile(np.linspace(1.0, 100.0, 16), (2, 1)))
    row = by_finding(heads)["F6"]
    assert row.status == "does not hold" and numbers(row)["below_null"] == 2


def test_early_identification_late_circuit_does_not_hold():
    induction = np.ones((6, 16))
    induction[4:, :3] = 80.0  # whole circuit appears at step16 = 16e9 of 32e9 tokens
    row = by_finding(make_heads(6, sel_induction=induction))["F4"]
    assert row.status == "does not hold"
    assert numbers(row)["levels"]["67%"]["share"] == pytest.approx(0.5)


# --------------------------------------------------------------------------------------------
# Degenerate panels: "not measurable" with a reason, never a crash.


def test_one_revision():
    induction = np.ones((1, 16))
    induction[0, :3] = 80.0
    rows = by_finding(make_heads(1, sel_first=sink_selectivity([4]), sel_induction=induction, pr=5.0))
    for code in ("F2", "F3", "F4", "F5"):
        assert rows[code].status == "not measurable" and "one revision" in rows[code].statement
    assert rows["F1"].status == "holds"


def test_no_induction_head_ever():
    rows = by_finding(make_heads(4, sel_first=sink_selectivity([0, 4, 8, 12]), pr=2.0, sel_null=1.5))
    assert rows["F3"].status == "not measurable" and "never reached: induction" in rows["F3"].statement
    assert rows["F4"].status == "not measurable" and "no head at 50x at the last revision" in rows["F4"].statement
    assert rows["F5"].status == "not measurable" and "no head at 50x" in rows["F5"].statement
    assert rows["F6"].status == "not measurable" and "no head at 50x at any revision" in rows["F6"].statement


def test_no_sink_ever():
    rows = by_finding(make_heads(4))
    assert rows["F1"].status == "not measurable" and "no sink head" in rows["F1"].statement
    assert rows["F2"].status == "not measurable" and "never rises" in rows["F2"].statement
    assert rows["F3"].status == "not measurable" and "never reached: sink fraction >= 50%" in rows["F3"].statement


def test_all_nan_head_and_missing_pr():
    induction = np.ones((4, 16))
    induction[1:, 0] = 80.0
    selectivity = {f"sel_{key}": np.ones((4, 16)) for key in CLASS_KEYS.values()}
    selectivity["sel_induction"] = induction
    for values in selectivity.values():
        values[:, 9] = np.nan  # one head never measured
    selectivity["sel_first"][2:, 12:] = 100.0
    pr = np.full((4, 16), 3.0)
    pr[:, 0] = np.nan  # the only final-circuit head has no PR
    rows = by_finding(make_heads(4, pr=pr, **selectivity))
    assert rows["F5"].status == "not measurable" and "L0H0: no PR" in rows["F5"].statement
    assert rows["F2"].status == "sharp"  # 0 -> 4 of 16 heads in one step
    assert rows["F4"].status == "does not hold" and numbers(rows["F4"])["levels"]["100%"]["share"] == 0.25
    table = revision_table(make_heads(4, pr=pr, **selectivity))
    assert list(table.n_heads) == [16] * 4 and list(table.label_unclassified) == [16, 15, 11, 11]
    no_pr = by_finding(make_heads(4, sel_induction=induction))["F5"]
    assert no_pr.status == "not measurable" and no_pr.statement == "no PR in the panel"


def test_unknown_tokens():
    induction = np.ones((3, 16))
    induction[1:, :3] = 80.0
    heads = make_heads(3, tokens=[np.nan] * 3, sel_first=sink_selectivity([0, 0, 10]), sel_induction=induction)
    rows = by_finding(heads)
    assert rows["F3"].status == "not measurable" and "tokens unknown" in rows["F3"].statement
    assert rows["F4"].status == "not measurable" and "tokens unknown" in rows["F4"].statement


def test_tokens_unknown_for_later_revisions_are_named():
    """Revisions without tokens come after those with, by step; a finding that needs their tokens says
    which ones it lacks."""
    induction = np.ones((4, 16))
    induction[1:, :3] = 80.0
    heads = make_heads(
        4, tokens=[1e9, 2e9, np.nan, np.nan], sel_first=sink_selectivity([0, 0, 0, 10]), sel_induction=induction
    )
    rows = by_finding(heads)
    assert rows["F3"].status == "not measurable" and rows["F3"].statement.startswith("tokens unknown for step4, step8")
    assert rows["F4"].status == "not measurable" and rows["F4"].statement.endswith("tokens unknown for step8")
    assert rows["F2"].status == "sharp"  # the shape needs no tokens


def test_two_models_in_one_results_directory(tmp_path):
    """Through the store: shards of two models, findings per model, revisions ordered by tokens."""
    sharp = make_heads(4, model="org/sharp", sel_first=sink_selectivity([0, 0, 12, 12]))
    ramp = make_heads(4, model="org/ramp", sel_first=sink_selectivity([0, 4, 8, 12]))
    for heads in (sharp, ramp):
        for revision, shard in heads.groupby("revision"):
            run = shard[["model", "revision", "tokens"]].iloc[:1].assign(top1=0.5)
            ResultsDir(tmp_path).write_shard(shard, run)
    table = write_findings(tmp_path)
    status = table.set_index(["model", "finding"])["status"]
    assert status["org/sharp", "F2"] == "sharp" and status["org/ramp", "F2"] == "gradual"
    assert len(table) == 2 * 9 and (tmp_path / "findings.md").exists()  # F1-F9 per model
    assert pd.read_parquet(tmp_path / "findings.parquet").equals(table)
    revisions = revision_table(*read_results(tmp_path))
    assert list(revisions.loc[revisions.model == "org/ramp", "revision"]) == ["step1", "step2", "step4", "step8"]
    assert set(revisions.top1) == {0.5}


def test_findings_on_real_screen_output(tmp_path):
    """The analysis reads what the screen writes; its counts agree with the screen's run records."""
    from models_zoo import tiny_model

    from headtrace.models import ModelAdapter
    from headtrace.probes import ProbeSpec, synthetic_induction
    from headtrace.screen import ScreenConfig, screen

    probe = synthetic_induction(ProbeSpec(n_examples=16, seq_len=64))
    config = ScreenConfig.of(n_examples=16, seq_len=64)
    for step, seed in ((1, 0), (2, 1)):
        result = screen(
            ModelAdapter(tiny_model("gpt_neox", seed)),
            probe,
            config,
            model_name="tiny",
            revision=f"step{step}",
            tokens=step * 1e6,
        )
        ResultsDir(tmp_path).write_shard(result.heads, result.run)
    heads, runs = read_results(tmp_path)
    table = revision_table(heads, runs)
    for column, screened in (
        ("screen_sink", "n_sink_heads"),
        ("screen_induction_circuit", "n_induction_heads"),
        ("screen_previous_circuit", "n_previous_heads"),
    ):
        assert list(table[column]) == list(runs[screened])
    assert list(table.screen_gu_sink_fraction) == list(runs.gu_sink_fraction)
    assert list(table.top1) == list(runs.top1) and table.null_p99.notna().all()
    assert list(write_findings(tmp_path).finding) == ["F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9"]


def test_tokens_read_the_same_in_findings_reports_and_the_command_line():
    """One formatter (trajectory.tokens_label), pinned: stored statements and figures depend on it."""
    from headtrace.cli import _tokens_text
    from headtrace.trajectory import tokens_label

    cases = {
        2048.0: "0.002048M",
        1.2288e5: "0.1229M",
        4.194304e6: "4.194M",
        9.99999e8: "1000M",
        1e9: "1B",
        1.5e9: "1.5B",
        3e11: "300B",
        2.1e12: "2100B",
        0.0: "0M",
        float("nan"): "? tokens",
        float("inf"): "? tokens",
    }
    assert {t: tokens_label(t) for t in cases} == cases
    assert _tokens_text(1.5e9) == "1.5B" and _tokens_text(float("nan")) == ""
