"""The reference implementation's Pythia-1B results, imported and re-analysed, reproduce the study's figures.

Expected values are the study's published figures or are computed here from the raw JSON with plain Python."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from headtrace.cli import main
from headtrace.errors import HeadtraceError
from headtrace.findings import model_findings
from headtrace.reference import import_reference
from headtrace.store import read_results
from headtrace.trajectory import (
    TrajectoryConfig,
    final_circuit,
    layer_table,
    model_trajectories,
    pr_elevation,
    recall,
    revision_table,
)

REFERENCE = Path(__file__).parent / "data" / "reference" / "pythia-1b"
STEPS = [1, 4, 16, 64, 256, 512, 3000, 10000, 38000, 143000]
REVISIONS = [f"step{s}" for s in STEPS]


def raw_screen(step: int) -> dict[str, dict[str, float]]:
    return json.loads((REFERENCE / f"screen_step{step}.json").read_text())["all_head_selectivity"]


def raw_pr() -> dict:
    return json.loads((REFERENCE / "pr_trajectory.json").read_text())


def layer_of(key: str) -> int:
    return int(key.split("_")[0][1:])


def design_id(key: str) -> str:
    return key.replace("_", "")


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    out = tmp_path_factory.mktemp("pythia")
    written = import_reference(sorted(REFERENCE.glob("*.json")), out)
    assert len(written) == 10
    heads, runs = read_results(out)
    return heads, runs


def test_revisions_tokens_and_run_records(panel):
    heads, runs = panel
    assert list(runs.revision) == REVISIONS
    assert list(runs.tokens) == [s * 2_097_152 for s in STEPS]
    assert [round(t / 1e9, 2) for t in runs.tokens[6:]] == [6.29, 20.97, 79.69, 299.89]
    assert set(runs.source) == {"reference import"}
    assert set(runs.n_examples) == {2000}
    assert len(heads) == 10 * 16 * 8
    assert heads.mean_induction.isna().all() and heads.sel_null.isna().all() and runs.top1.isna().all()


def test_sink_fractions(panel):
    table = revision_table(*panel)
    assert list(table.revision) == REVISIONS
    assert list(table.screen_sink) == [0] * 6 + [14, 38, 59, 74]
    assert [round(100 * f, 1) for f in table.screen_sink_fraction] == [0.0] * 6 + [10.9, 29.7, 46.1, 57.8]
    assert table.screen_gu_sink.isna().all()  # Gu's score is not in the reference files


def test_sink_heads_per_layer(panel):
    layers = layer_table(panel[0])
    for step in STEPS:
        expected = Counter(layer_of(k) for k, v in raw_screen(step).items() if v["first-token"] >= 30)
        got = layers.loc[layers.revision == f"step{step}"].set_index("layer")["screen_sink"]
        assert {layer: int(got[layer]) for layer in range(16)} == {layer: expected[layer] for layer in range(16)}
    assert layers.loc[layers.layer <= 3, "screen_sink"].sum() == 0


def test_best_class_labels(panel):
    layers = layer_table(panel[0])
    table = revision_table(*panel)
    for step in STEPS:
        labels = Counter()
        for values in raw_screen(step).values():
            best = max(values, key=values.get)
            labels[best if values[best] >= 30 else "unclassified"] += 1
        row = table.loc[table.revision == f"step{step}"].iloc[0]
        assert row.label_previous == labels["previous-token"] and row.label_first == labels["first-token"]
        assert row.label_induction == labels["induction"] and row.label_unclassified == labels["unclassified"]
        assert layers.loc[layers.revision == f"step{step}", "label_previous"].sum() == labels["previous-token"]


def test_induction_heads_per_revision(panel):
    heads = panel[0]
    for step in STEPS:
        expected = {design_id(k) for k, v in raw_screen(step).items() if v["induction"] >= 50}
        rows = heads.loc[(heads.revision == f"step{step}") & heads.induction_circuit]
        assert set(rows.head_id) == expected
    at = heads.set_index(["revision", "head_id"])["sel_induction"].round(1)
    assert {h: at["step3000", h] for h in ("L4H4", "L5H7", "L7H1", "L6H7", "L4H5")} == {
        "L4H4": 171.8,
        "L5H7": 164.4,
        "L7H1": 70.1,
        "L6H7": 66.8,
        "L4H5": 54.7,
    }
    assert {h: at["step143000", h] for h in ("L4H4", "L7H1", "L7H0")} == {"L4H4": 181.6, "L7H1": 127.2, "L7H0": 112.6}
    table = revision_table(*panel)
    assert list(table.screen_induction_circuit) == [0] * 6 + [5, 4, 4, 3]


def test_final_circuit_and_recall(panel):
    model = model_trajectories(*panel)[0]
    config = TrajectoryConfig()
    assert set(final_circuit(model, config)) == {"L4H4", "L7H0", "L7H1"}
    per_revision = recall(model, config)
    assert list(per_revision[:6]) == [0.0] * 6
    assert per_revision["step3000"] == pytest.approx(2 / 3) and per_revision["step10000"] == pytest.approx(2 / 3)
    assert per_revision["step38000"] == 1.0 and per_revision["step143000"] == 1.0


def reference_best_class(values: dict[str, float]) -> str:
    """The reference's best class: the first maximum in the file's class order."""
    return max(values, key=values.get)


def test_previous_token_circuit_is_the_references(panel):
    """Best class previous-token and >= 100x, counted from the raw files at every revision; at
    step143000 that is the study's 8 heads. The looser set (any head >= 100x) keeps its own name."""
    heads = panel[0]
    for step in STEPS:
        raw = raw_screen(step)
        strict = {
            design_id(k)
            for k, v in raw.items()
            if reference_best_class(v) == "previous-token" and v["previous-token"] >= 100
        }
        loose = {design_id(k) for k, v in raw.items() if v["previous-token"] >= 100}
        rows = heads.loc[heads.revision == f"step{step}"]
        assert set(rows.loc[rows.previous_circuit, "head_id"]) == strict
        assert set(rows.loc[rows.previous_any, "head_id"]) == loose
    final = heads.loc[heads.revision == "step143000"]
    assert final.previous_circuit.sum() == 8 and final.previous_any.sum() > 8
    table = revision_table(*panel)
    assert table.screen_previous_circuit.iloc[-1] == 8
    assert table.screen_previous_any.iloc[-1] == final.previous_any.sum()


def trapezoid_log_tokens(steps: list[int], values: list[float]) -> float:
    """The study's time-integrated PR, written out: trapezoid of max(PR - 1, 0) over ln(tokens)."""
    x = [math.log(s * 2_097_152) for s in steps]
    y = [max(v - 1.0, 0.0) for v in values]
    return sum((x[i + 1] - x[i]) * (y[i] + y[i + 1]) / 2 for i in range(len(x) - 1))


def test_pr_top_k_is_the_time_integrated_pr_ranking(panel, tmp_path):
    from headtrace.ablation import AblationConfig, pr_ranking, pr_top_circuit

    out = tmp_path / "pythia"
    import_reference(sorted(REFERENCE.glob("*.json")), out)
    pr = raw_pr()
    integral = {design_id(k): trapezoid_log_tokens(pr["ckpt_step"], v) for k, v in pr["pr"].items()}
    expected = sorted(integral, key=lambda h: -integral[h])
    ranking = pr_ranking(panel[0])
    assert list(ranking.head_id[:10]) == expected[:10]
    assert dict(zip(ranking.head_id, ranking.integral)) == pytest.approx(integral, rel=1e-9)
    for k in (1, 5, 12):
        heads, source = pr_top_circuit(out, "EleutherAI/pythia-1b", k)
        assert {f"L{l}H{h}" for l, h in heads} == set(expected[:k])
        assert source.startswith("time-integrated PR over 10 revisions")
    with pytest.raises(HeadtraceError, match="needs PR at two or more revisions of org/other"):
        pr_top_circuit(out, "org/other", 3)
    with pytest.raises(HeadtraceError, match="pass --out DIR"):
        pr_top_circuit(None, "EleutherAI/pythia-1b", 3)
    AblationConfig(circuit="pr-top:4").validate()
    with pytest.raises(HeadtraceError, match="K must be >= 1"):
        AblationConfig(circuit="pr-top:0").validate()


def test_pr_imported_per_head_and_revision(panel):
    heads = panel[0]
    pr = raw_pr()
    got = heads.set_index(["revision", "head_id"])["pr"]
    for key in ("L0_H0", "L4_H4", "L7_H0", "L15_H7"):
        assert [got[rev, design_id(key)] for rev in pr["revisions"]] == pytest.approx(pr["pr"][key], rel=1e-7)


def first_elevated(values: list[float], fraction: float = 0.5, min_rise: float = 1.0) -> int | None:
    """The F5 criterion written out in plain Python: rise above the running minimum."""
    rises, low = [], values[0]
    for v in values:
        low = min(low, v)
        rises.append(v - low)
    if max(rises) < min_rise:
        return None
    return next(i for i, r in enumerate(rises) if r >= fraction * max(rises))


def test_findings(panel):
    table = model_findings(*panel).set_index("finding")
    numbers = {code: json.loads(row.numbers) for code, row in table.iterrows()}
    assert list(table.model.unique()) == ["EleutherAI/pythia-1b"]
    assert table.loc["F1", "status"] == "holds"
    assert numbers["F1"]["low_layers_never"] == [0, 1, 2, 3]
    # F2: the largest jump is 14 -> 38 heads of a rise from 0 to 74: gradual under the 50% criterion.
    assert table.loc["F2", "status"] == "gradual" and numbers["F2"]["verdict"] == "gradual"
    assert numbers["F2"]["share"] == pytest.approx((38 - 14) / 74)
    assert (numbers["F2"]["jump_from"], numbers["F2"]["jump_to"], numbers["F2"]["monotone"]) == (
        "step3000",
        "step10000",
        True,
    )
    # F3: sink >= 50% first at step143000, induction >= 3 heads first at step3000.
    assert table.loc["F3", "status"] == "holds"
    assert numbers["F3"]["ratio"] == pytest.approx(143000 / 3000)
    assert (numbers["F3"]["ratio_low"], numbers["F3"]["ratio_high"]) == pytest.approx((38000 / 3000, 143000 / 512))
    # F4: 2/3 at step3000 (2.1% of training), 3/3 at step38000.
    assert table.loc["F4", "status"] == "holds"
    levels = numbers["F4"]["levels"]
    assert [levels[k]["revision"] for k in ("33%", "67%", "100%")] == ["step3000", "step3000", "step38000"]
    assert levels["67%"]["share"] == pytest.approx(3000 / 143000)
    # F5: elevation per head from the raw PR file, crossing from the raw screens.
    pr = raw_pr()
    for key in ("L4_H4", "L7_H0", "L7_H1"):
        elevated = first_elevated(pr["pr"][key])
        crossing = next(i for i, s in enumerate(STEPS) if raw_screen(s)[key]["induction"] >= 50)
        assert numbers["F5"]["heads"][design_id(key)]["lead_revisions"] == crossing - elevated
    assert {h: v["lead_revisions"] for h, v in numbers["F5"]["heads"].items()} == {"L4H4": 2, "L7H0": 2, "L7H1": 0}
    assert table.loc["F5", "status"] == "holds" and not numbers["F5"]["fragile"]
    assert "median lead 0 to 2, holds throughout" in table.loc["F5", "statement"]
    assert table.loc["F6", "status"] == "not measurable" and "sel_null" in table.loc["F6", "statement"]


def test_imported_runs_say_where_their_values_came_from(panel):
    """The screen files state n (2000) but not the precision; the PR file states n = 500 and fp16."""
    runs = panel[1]
    pr = raw_pr()
    assert set(runs.n_examples) == {2000} and runs.dtype.isna().all()
    assert set(runs.pr_examples) == {pr["n_examples"]} == {500} and set(runs.pr_dtype) == {"float16"}
    config = json.loads(runs.config_json.iloc[0])
    assert config["pr"] == {"n_examples": 500, "dtype": "float16"} and config["screen"]["dtype"] is None


def test_unused_pr_files_are_warned_about(tmp_path):
    screens = [REFERENCE / f"screen_step{s}.json" for s in (3000, 10000, 143000)]
    other = tmp_path / "pr_other.json"
    other.write_text(json.dumps({**raw_pr(), "model": "EleutherAI/pythia-410m"}))
    heard: list[str] = []
    import_reference([*screens, other], tmp_path / "a", heard.append)
    assert len(heard) == 1 and "model EleutherAI/pythia-410m matches no imported screen" in heard[0]
    assert read_results(tmp_path / "a")[0].pr.isna().all()
    heard.clear()
    import_reference([*screens, REFERENCE / "pr_trajectory.json"], tmp_path / "b", heard.append)
    assert heard == [
        f"'{REFERENCE / 'pr_trajectory.json'}': PR of 7 revision(s) of EleutherAI/pythia-1b without a "
        "screen file is not imported (step1, step4, step16, step64, step256, step512, step38000)"
    ]


def test_pr_collapse_from_initialisation_is_not_elevation():
    collapse = raw_pr()["pr"]["L0_H0"]  # 182 at step1, 2.8 at step38000, 3.7 at step143000
    assert pr_elevation(pd.Series(collapse).to_numpy(), 0.5, 1.0) is None
    assert first_elevated(collapse) is None


def run_cli(monkeypatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["headtrace", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code


def test_cli_import_and_findings(tmp_path, monkeypatch, capsys):
    out = tmp_path / "results"
    files = [str(p) for p in sorted(REFERENCE.glob("*.json"))]
    assert run_cli(monkeypatch, "import-reference", *files, "--out", str(out)) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert (
        "EleutherAI/pythia-1b: selectivities from 10 screen file(s) (n = 2000; precision not stated in the files), "
        "PR from the PR file (n = 500, float16) at 10 revision(s)"
    ) in said and "warning" not in said
    assert run_cli(monkeypatch, "findings", str(out)) == 0
    table = pd.read_parquet(out / "findings.parquet")
    assert list(table.finding) == ["F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9"]
    markdown = (out / "findings.md").read_text()
    assert "| EleutherAI/pythia-1b | F2 | shape | gradual | gradual:" in markdown
    assert "step38000 < t <= step143000" in markdown
    assert "F4 early" in capsys.readouterr().out
    # The study's panel says Pythia's sink fraction rises gradually: as expected, never "does not hold".
    panel = Path(__file__).resolve().parents[1] / "panels" / "xu2026.toml"
    assert run_cli(monkeypatch, "findings", str(out), "--panel", str(panel)) == 0
    assert "| EleutherAI/pythia-1b | F2 | shape | as expected | gradual:" in (out / "findings.md").read_text()


def test_cli_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "x"}')
    assert run_cli(monkeypatch, "import-reference", str(bad), "--out", str(tmp_path / "r")) == 2
    assert run_cli(monkeypatch, "findings", str(tmp_path / "empty")) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and "neither a reference screen" in errors[0] and "no results" in errors[1]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "case, message",
    [
        ("not json", "is not valid JSON"),
        ("duplicate", "both hold EleutherAI/pythia-1b at step1"),
        ("partial grid", "not the full 16 x 8 grid"),
        ("pr only", "no reference screen files"),
    ],
)
def test_import_rejects_bad_files_before_writing(tmp_path, case, message):
    screen = REFERENCE / "screen_step1.json"
    files = {
        "not json": [screen, tmp_path / "x.json"],
        "duplicate": [screen, tmp_path / "x.json"],
        "partial grid": [tmp_path / "x.json"],
        "pr only": [REFERENCE / "pr_trajectory.json"],
    }[case]
    data = json.loads(screen.read_text())
    if case == "partial grid":
        del data["all_head_selectivity"]["L3_H2"]
    (tmp_path / "x.json").write_text("{" if case == "not json" else json.dumps(data))
    with pytest.raises(HeadtraceError, match=message):
        import_reference(files, tmp_path / "out")
    assert not (tmp_path / "out").exists()
