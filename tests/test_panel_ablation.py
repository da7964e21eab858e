"""Panels with an [ablation] section: selected revisions are ablated after their screen, from the stored
screen, into DIR/ablations/; a re-run skips ablations done with the same config; widening the selection
ablates only what is missing (fetching the checkpoint again, without re-screening)."""

from __future__ import annotations

import pandas as pd
import pytest

from headtrace.ablation import AblationConfig, ablate
from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter
from headtrace.panel import load_panel, run_panel
from headtrace.probes import build_probe
from headtrace.store import ABLATIONS, shard_name, ResultsDir
from models_zoo import tiny_model
from panel_helpers import PYTHIA, SCREEN, fake_hub, panel_file, point_hub_env, seed_of

ABLATION = '[ablation]\ncircuit = "L1H0,L1H2"\ndraws = 3\nrevisions = {revisions}\n'


@pytest.fixture(scope="module")
def hub():
    with fake_hub() as server:
        yield server


@pytest.fixture
def cache(hub, tmp_path, monkeypatch):
    return point_hub_env(monkeypatch, hub.url, tmp_path / "hf")


def ablation_panel(tmp_path, revisions: str):
    return load_panel(
        panel_file(
            tmp_path, {PYTHIA: ["step1", "step2", "step4"]}, screen=SCREEN + ABLATION.format(revisions=revisions)
        )
    )


def test_panel_ablates_the_final_revision_then_resumes_and_widens(cache, tmp_path):
    out = tmp_path / "out"
    panel = ablation_panel(tmp_path, '"final"')
    run = run_panel(panel, out)
    final = shard_name(PYTHIA, "step4")
    assert not run.failed and run.stages["ablation"].todo == [final] and run.stages["ablation"].done == [final]
    assert not run.stages["ablation"].failed
    table = ResultsDir(out).read_ablations()
    assert set(table.revision) == {"step4"}

    # The stored rows are the ablation of exactly that checkpoint (the fake hub serves tiny_model seeds).
    adapter = ModelAdapter(tiny_model("gpt_neox", seed_of(PYTHIA, "step4")))
    direct = ablate(
        adapter,
        build_probe(panel.screen.probe, lambda: None),
        ((1, 0), (1, 2)),
        AblationConfig(circuit="L1H0,L1H2", draws=3),
        panel.screen,
        PYTHIA,
        "step4",
        tokens=4 * 2_097_152,
    ).table
    pd.testing.assert_frame_equal(table, direct, check_exact=True)

    # Re-run: nothing to do.
    stamp = (out / ABLATIONS / final).stat().st_mtime_ns
    again = run_panel(panel, out)
    assert again.stages["ablation"].kept == [final] and not again.stages["ablation"].todo and not again.computed
    assert (out / ABLATIONS / final).stat().st_mtime_ns == stamp

    # All revisions: the two missing ablations run, without screening again.
    wider = run_panel(ablation_panel(tmp_path, '"all"'), out)
    assert len(wider.skipped) == 3 and not wider.computed and not wider.recomputed
    assert sorted(wider.stages["ablation"].done) == sorted(shard_name(PYTHIA, r) for r in ("step1", "step2"))
    assert set(ResultsDir(out).read_ablations().revision) == {"step1", "step2", "step4"}
    assert (out / ABLATIONS / final).stat().st_mtime_ns == stamp


def test_unknown_ablation_revision_fails_before_any_work(cache, tmp_path):
    with pytest.raises(HeadtraceError, match=r"\[ablation\] revisions step3 are not among"):
        run_panel(ablation_panel(tmp_path, '["step3"]'), tmp_path / "out")
    assert not (tmp_path / "out" / "runs").exists()


def test_an_empty_circuit_leaves_the_screen_and_says_why(cache, tmp_path):
    path = panel_file(
        tmp_path,
        {PYTHIA: ["step8"]},
        screen=SCREEN.replace("[screen]\n", "[screen]\ninduction_threshold = 1e30\n")
        + '[ablation]\ncircuit = "induction"\ndraws = 2\n',
    )
    run = run_panel(load_panel(path), tmp_path / "out")
    assert not run.failed and run.computed and not run.stages["ablation"].done
    assert "empty" in run.stages["ablation"].failed[f"{PYTHIA}@step8"]
