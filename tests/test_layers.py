"""The layering docs/architecture.md describes: the results layer, the analysis, panel planning,
the watcher and the organism's settings load without torch or transformers (the CLI's analysis
commands: tests/test_cli_input.py; the import graph: tests/test_import_graph.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from panel_helpers import REVISIONS, local_panel, save_checkpoints

ROOT = Path(__file__).resolve().parents[1]
PLAN = """
import sys
import headtrace.executors, headtrace.panel, headtrace.reference, headtrace.report, headtrace.schema
import headtrace.stages, headtrace.store, headtrace.trajectory, headtrace.headview
import headtrace.families, headtrace.family_findings, headtrace.findings, headtrace.organism, headtrace.watch
from headtrace.organism import Organism, TrainConfig, checkpoint_steps
from headtrace.panel import load_panel, plan
tasks = plan(load_panel(sys.argv[1]))
print(len(tasks), sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""


def test_the_results_layer_analysis_panel_planning_and_organism_settings_import_neither_torch_nor_transformers(
    tmp_path,
):
    panel = local_panel(tmp_path, save_checkpoints(tmp_path / "ckpt"), REVISIONS, extra="\n[ablation]\n")
    proc = subprocess.run(
        [sys.executable, "-c", PLAN, str(panel)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "3 []"
