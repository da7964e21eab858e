"""A user extends headtrace without editing panel.py or executors.py: a probe and a per-checkpoint
stage, each registered, then named by a panel file and run by `run_panel` like the built-in ones."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

from headtrace.errors import HeadtraceError
from headtrace.panel import load_panel, run_panel
from headtrace.probes import PROBES, ProbeKind, ProbeSpec, synthetic_induction
from headtrace.stages import STAGES, CheckpointContext, Stage, StageResult
from headtrace.store import ResultsDir
from panel_helpers import REVISIONS, SCREEN, local_panel, save_checkpoints

NORMS = "output_norms"


def _reversed_synthetic(spec: ProbeSpec, tokenizer_loader) -> object:
    """The reference batch with its examples in reverse order (a probe a user might add)."""
    probe = synthetic_induction(spec)
    flip = {
        f.name: getattr(probe, f.name)[::-1].copy()
        for f in dataclasses.fields(probe)
        if isinstance(getattr(probe, f.name), np.ndarray)
    }
    return dataclasses.replace(probe, **flip, description={**probe.description, "kind": "reversed-synthetic"})


@dataclass(frozen=True)
class OutputNorms(Stage):
    """Per head: the Frobenius norm of its slice of the attention output projection (a measurement
    a user might add), one table per (model, revision) in DIR/output_norms/."""

    name: ClassVar[str] = NORMS
    scale: float = 1.0

    def done(self, results, model, revision, config) -> bool:
        return results.table_path(NORMS, model, revision).is_file()

    def run(self, checkpoint: CheckpointContext) -> StageResult:
        adapter, rows = checkpoint.adapter, []
        width = adapter.layout.head_dim
        for layer, proj in enumerate(adapter.out_proj):
            weight = proj.weight.detach().float().numpy()  # [d_model, n_heads * head_dim]
            for head in range(adapter.layout.n_heads):
                norm = np.linalg.norm(weight[:, head * width : (head + 1) * width]) * self.scale
                rows.append(
                    {
                        "model": checkpoint.model,
                        "revision": checkpoint.revision.name,
                        "layer": layer,
                        "head": head,
                        "norm": float(norm),
                    }
                )
        checkpoint.results.write_table(NORMS, pd.DataFrame(rows))
        return StageResult(summary=f"{len(rows)} heads")


@pytest.fixture
def registered():
    PROBES.add("reversed-synthetic", ProbeKind(_reversed_synthetic))
    STAGES.add(NORMS, OutputNorms)
    yield
    for registry, name in ((PROBES, "reversed-synthetic"), (STAGES, NORMS)):
        registry._entries.pop(name)


def test_a_registered_stage_runs_from_a_panel_section_and_resumes(registered, tmp_path):
    checkpoints = save_checkpoints(tmp_path / "ckpt")
    panel = load_panel(local_panel(tmp_path, checkpoints, REVISIONS[:2], extra=f"\n[{NORMS}]\nscale = 2.0\n"))
    assert panel.stages[0].stage == OutputNorms(scale=2.0) and panel.stages[0].revisions == "all"

    run = run_panel(panel, tmp_path / "out")
    assert not run.failed and sorted(run.stages[NORMS].done) == sorted(run.stages[NORMS].todo)
    assert len(run.stages[NORMS].done) == 2
    table = ResultsDir(tmp_path / "out").read_tables(NORMS)
    for revision in REVISIONS[:2]:  # against the weights as saved, read without headtrace or torch
        weights = load_file(str(checkpoints / revision / "model.safetensors"))
        for row in table.loc[table.revision == revision].itertuples():
            dense = weights[f"gpt_neox.layers.{row.layer}.attention.dense.weight"]
            width = dense.shape[1] // 4
            expected = 2.0 * np.sqrt(
                (dense[:, row.head * width : (row.head + 1) * width].astype(np.float64) ** 2).sum()
            )
            assert row.norm == pytest.approx(expected, rel=1e-6)

    again = run_panel(panel, tmp_path / "out")
    assert sorted(again.stages[NORMS].kept) == sorted(run.stages[NORMS].done) and not again.stages[NORMS].todo


def test_a_registered_stage_checks_its_section(registered, tmp_path):
    checkpoints = save_checkpoints(tmp_path / "ckpt")
    with pytest.raises(HeadtraceError, match=rf"panel\.toml:\d+: unknown key 'scal' in \[{NORMS}\]; did you mean"):
        load_panel(local_panel(tmp_path, checkpoints, REVISIONS[:1], extra=f"\n[{NORMS}]\nscal = 2.0\n"))


def test_an_unregistered_section_is_refused(tmp_path):
    checkpoints = save_checkpoints(tmp_path / "ckpt")
    with pytest.raises(HeadtraceError, match=r"unknown key 'output_norms' in the top level"):
        load_panel(local_panel(tmp_path, checkpoints, REVISIONS[:1], extra=f"\n[{NORMS}]\n"))


def test_a_registered_probe_is_named_by_the_screen_section(registered, tmp_path):
    checkpoints = save_checkpoints(tmp_path / "ckpt")
    plain = local_panel(tmp_path, checkpoints, REVISIONS[:1], name="plain")
    mine = local_panel(tmp_path, checkpoints, REVISIONS[:1], name="mine")
    mine.write_text(mine.read_text().replace(SCREEN, SCREEN + 'probe = "reversed-synthetic"\n'))
    run_panel(load_panel(plain), tmp_path / "plain")
    run_panel(load_panel(mine), tmp_path / "mine")
    a, b = (ResultsDir(tmp_path / name).read()[0] for name in ("plain", "mine"))
    # The same examples in another order: the same means up to float summation order.
    np.testing.assert_allclose(b.sel_induction, a.sel_induction, rtol=1e-4)
    np.testing.assert_allclose(b.mean_induction, a.mean_induction, rtol=1e-4, atol=1e-7)
    assert (ResultsDir(tmp_path / "mine").read()[1].probe == "reversed-synthetic").all()
