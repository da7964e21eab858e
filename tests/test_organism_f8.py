"""F8 end to end on organism checkpoints (the fast `tiny` recipe of test_organism.py): the trainer
keeps F8's subset while a watcher screens, a panel's second pass ablates the final circuit at each
revision of the subset (each stored table equal to a direct ablation of those heads), re-runs keep
it until the final circuit changes, `headtrace ablate --circuit final:induction` does one revision,
and F8 against its definition recomputed from the stored tables."""

from __future__ import annotations

import dataclasses
import json
import sys

import pandas as pd
import pytest
from test_organism import TINY_CORPUS, tiny

from headtrace.ablation import ablate
from headtrace.cli import main
from headtrace.findings import write_findings
from headtrace.models import load_model, load_tokenizer
from headtrace.organism import train
from headtrace.organism.config import causal_steps, revision_name
from headtrace.organism.demo import demo_screen, panel_toml
from headtrace.panel import load_panel, plan, run_panel
from headtrace.probes import build_probe
from headtrace.schema import AblationConfig
from headtrace.store import ResultsDir
from headtrace.trajectory import Thresholds, TrajectoryConfig
from headtrace.watch import Watcher

MODEL = "organism-dense"
SCREEN = demo_screen(TINY_CORPUS, n_examples=8)


def test_a_watched_training_keeps_the_subset_and_the_final_checkpoint(tmp_path):
    organism = tiny(steps=12)
    organism = dataclasses.replace(organism, train=dataclasses.replace(organism.train, n_checkpoints=6))
    keep = causal_steps(organism.train, 3)
    assert keep == [1, 3, 12]  # of the scheduled 1, 2, 3, 4, 7, 12: the nearest to 1, sqrt(12), 12 in log
    folder = tmp_path / "organisms" / "dense"
    result = train(folder, organism, watch=Watcher(tmp_path / "results", MODEL, SCREEN, revisions=None), keep=keep)
    assert [e["step"] for e in result.checkpoints] == keep
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [revision_name(s, 12) for s in keep]
    assert json.loads((folder / "organism.json").read_text())["kept"] == keep
    assert len(ResultsDir(tmp_path / "results").existing_runs()) == 6  # every scheduled step screened
    # The demo's panel (--causal) ablates the final circuit at every checkpoint kept.
    (tmp_path / "demo.toml").write_text(panel_toml("demo", SCREEN, {MODEL: "organisms/dense"}, 3, causal=True))
    panel = load_panel(tmp_path / "demo.toml")
    [stage] = panel.stages
    assert stage.stage.config.circuit == "final:induction" and stage.stage.second_pass and stage.revisions == "all"
    assert sorted(t.revision.name for t in plan(panel)) == [revision_name(s, 12) for s in keep]

    # The same subset is reused; another one trains again.
    assert train(folder, organism, watch=Watcher(tmp_path / "results", MODEL, SCREEN, revisions=None), keep=keep).reused
    other = train(folder, organism, watch=Watcher(tmp_path / "results", MODEL, SCREEN, revisions=None), keep=[1, 12])
    assert not other.reused and [e["step"] for e in other.checkpoints] == [1, 12]


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    root = tmp_path_factory.mktemp("f8")
    train(root / "organisms" / "dense", tiny(steps=8))
    return root


def threshold_for_one_head(root, results) -> tuple[float, tuple[int, int]]:
    """A screen threshold between the best and the second induction head at the last revision: the
    final induction set is that one head, and its layer keeps another head for the matched draws."""
    (root / "screen.toml").write_text(panel_toml("screen", SCREEN, {MODEL: "organisms/dense"}))
    run_panel(load_panel(root / "screen.toml"), results)
    heads, runs = ResultsDir(results).read()
    last = heads.loc[heads.revision == runs.revision.iloc[-1]].sort_values("sel_induction", ascending=False)
    best, second = last.sel_induction.iloc[:2]
    return float((best + second) / 2), (int(last.layer.iloc[0]), int(last["head"].iloc[0]))


def run_cli(monkeypatch, *args) -> int:
    monkeypatch.setattr(sys, "argv", ["headtrace", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code


def test_the_second_pass_ablates_the_final_circuit_at_the_subset(organism, tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    threshold, head = threshold_for_one_head(organism, results)
    screen = dataclasses.replace(
        SCREEN, thresholds=dataclasses.replace(SCREEN.thresholds, induction_threshold=threshold)
    )
    text = panel_toml("f8", screen, {MODEL: "organisms/dense"}) + '\n[ablation]\ncircuit = "final:induction"\n'
    (organism / "f8.toml").write_text(text + 'draws = 3\nn_bootstrap = 200\nrevisions = "log:3"\n')
    panel = load_panel(organism / "f8.toml")
    run = run_panel(panel, results)
    revisions = [e["revision"] for e in json.loads((organism / "organisms/dense/revisions.json").read_text())]
    tally = run.stages["ablation"]
    assert not run.failed and not tally.failed and len(tally.done) == 3 and len(run.recomputed) == len(revisions)
    table = ResultsDir(results).read_ablations()
    assert set(table.circuit) == {"final:induction"} and set(table.circuit_heads) == {f"L{head[0]}H{head[1]}"}
    config = AblationConfig(circuit="final:induction", draws=3, n_bootstrap=200)
    assert set(table.config_hash) == {config.config_hash(panel.screen, (head,))}
    assert set(table.revision) <= set(revisions) and table.revision.nunique() == 3
    assert {revisions[0], revisions[-1]} <= set(table.revision)  # log:N keeps the first and the last

    # Each stored table is the ablation of those heads at that checkpoint, run directly.
    for revision in sorted(set(table.revision)):
        checkpoint = str(organism / "organisms" / "dense" / revision)
        adapter = load_model(checkpoint)
        probe = build_probe(panel.screen.probe, lambda: load_tokenizer(checkpoint))
        direct = ablate(adapter, probe, (head,), config, panel.screen, MODEL, revision, tokens=None).table
        stored = table.loc[table.revision == revision].reset_index(drop=True)
        columns = [c for c in direct.columns if c not in ("tokens", "headtrace_version")]
        pd.testing.assert_frame_equal(stored[columns], direct[columns], check_exact=True)

    # A re-run keeps them.
    again = run_panel(panel, results)
    assert len(again.stages["ablation"].kept) == 3 and not again.stages["ablation"].todo

    # F8 against its definition, from the stored tables.
    config = TrajectoryConfig(Thresholds(induction_threshold=threshold), timing_induction_count=1)
    row = write_findings(results, config).set_index("finding").loc["F8"]
    numbers = json.loads(row.numbers)
    ordered = sorted(set(table.revision), key=revisions.index)
    assert numbers["revisions"] == ordered
    verdicts = table.loc[table.condition == "circuit"].set_index("revision").verdict
    heads, _ = ResultsDir(results).read()
    formed = next(r for r in revisions if (heads.loc[heads.revision == r, "sel_induction"] >= threshold).any())
    first = next((r for r in ordered if verdicts[r] == "necessary"), None)
    if first is None:
        assert row.status == "not measurable" and "not necessary at any of 3" in row.statement
    else:
        assert numbers["necessary"]["revision"] == first and numbers["formed"]["revision"] == formed
        assert row.status in ("before formation", "with formation", "after formation", "cannot be ordered on this grid")

    # headtrace ablate: one revision, the final circuit read from DIR; bad input is one line, exit 2.
    one = tmp_path / "one"
    code = run_cli(
        monkeypatch,
        "ablate",
        organism / "organisms" / "dense",
        "--revision",
        revisions[1],
        "--circuit",
        "final:induction",
        "--name",
        MODEL,
        "--out",
        results,
        "-n",
        8,
        "--seq-len",
        63,
        "--id-low",
        3,
        "--id-high",
        64,
        "--prepend-bos",
        "--draws",
        3,
        "--n-bootstrap",
        100,
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    written = pd.read_parquet(ResultsDir(results).ablation_path(MODEL, revisions[1]))
    assert set(written.circuit_heads) == {f"L{head[0]}H{head[1]}"} and f"L{head[0]}H{head[1]}, from induction" in (
        " ".join(out.out.split())
    )
    for args, message in (
        ([], "pass --out DIR"),
        (["--out", one], "holds no screened revision of organism-dense"),
        (["--out", results, "--circuit", "final:bogus"], "final:<set> takes one of the screen's head sets"),
    ):
        circuit = [] if "--circuit" in args else ["--circuit", "final:induction"]
        code = run_cli(monkeypatch, "ablate", organism / "organisms" / "dense", "--name", MODEL, *circuit, *args)
        said = capsys.readouterr().err
        assert code == 2 and message in " ".join(said.split()) and "Traceback" not in said, said
        assert len([line for line in said.splitlines() if line.startswith("error:")]) == 1

    # The final circuit's heads are in the hash: when the last revision's set changes (rewritten here
    # to another head of the same layer), the pass runs again without screening again.
    last = ResultsDir(results).heads_path(MODEL, revisions[-1])
    stored = pd.read_parquet(last)
    other = stored.index[(stored.layer == head[0]) & (stored["head"] != head[1])][0]
    stored["induction_circuit"] = stored.index == other
    stored.to_parquet(last)
    redo = run_panel(panel, results)
    assert len(redo.stages["ablation"].done) == 3 and not redo.computed and not redo.recomputed
    moved = f"L{head[0]}H{int(stored.loc[other, 'head'])}"
    assert set(ResultsDir(results).read_ablations().circuit_heads) >= {moved}
