"""A finding from outside headtrace, registered in-process (`register_finding`) or installed as a
distribution with a `headtrace.findings` entry point, appears wherever findings appear: findings.md,
the family rows, the report's findings tables and its own figure, with no headtrace module edited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest
from test_families import FAMILY, PLANTED, planted_shards

from headtrace.cli import main
from headtrace.errors import HeadtraceError
from headtrace.families import manifest_entry
from headtrace.finding_kinds import FINDINGS, FindingKind, Summary, register_finding, show_share
from headtrace.findings import write_findings
from headtrace.report import build_report
from headtrace.report.figures import FIGURES, Plot, register_figure
from headtrace.schema import tag
from headtrace.store import ResultsDir, slug
from headtrace.trajectory import DOES_NOT_HOLD, HOLDS

SEEDS = (0, 2)  # two seeds of the planted family; both end with their top layer all sink heads


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    """Two seeds of tests/test_families.py's planted family, as `headtrace run` leaves them."""
    out = tmp_path_factory.mktemp("family")
    for seed in SEEDS:
        for heads, run in planted_shards(f"{FAMILY}-s{seed}", PLANTED[seed]):
            ResultsDir(out).write_shard(tag(heads, FAMILY, seed), tag(run, FAMILY, seed))

    class Member:
        def __init__(self, seed):
            self.id, self.family, self.seed = f"{FAMILY}-s{seed}", FAMILY, seed

    (out / "manifest.json").write_text(json.dumps(manifest_entry([Member(s) for s in SEEDS], [])))
    return out


@dataclass(frozen=True)
class TopLayerSinks(FindingKind):
    """A finding a user might add: the last layer is mostly sink heads at the last revision."""

    code: ClassVar[str] = "X1"
    title: ClassVar[str] = "top-layer sinks"
    share: float = 0.5

    def claim(self, config) -> str:
        return f"at the last revision, at least {self.share:.0%} of the last layer's heads are sink heads"

    def compute(self, panel, config):
        last = panel.layers.loc[panel.layers.revision == panel.names[-1]]
        top = last.loc[last.layer == last.layer.max()].iloc[0]
        share = float(top.screen_sink / top.n_heads)
        status = HOLDS if share >= self.share else DOES_NOT_HOLD
        return self.finding(status, f"{share:.0%} of layer {top.layer}'s heads", {"share": share}, config)

    def across_seeds(self, per, config):
        summary = Summary(per)
        summary.spread("share", summary.values("share"), show_share, "share of the last layer")
        return summary.result()


def top_layer_plot(data, panel) -> Plot:
    """The finding's figure, registered under its code on the report side."""
    from matplotlib.figure import Figure

    row = data.findings.loc[(data.findings.model == panel.name) & (data.findings.finding == "X1")].iloc[0]
    plot = Plot(f"top-layer-{slug(panel.name)}", f"{panel.name}: top-layer sinks (X1)", f"X1 {row.status}.")
    plot.figure = Figure(figsize=(3, 2))
    plot.figure.add_subplot().bar([0], [json.loads(row.numbers)["share"]])
    return plot


@pytest.fixture
def registered():
    register_finding(TopLayerSinks())
    register_figure("X1", top_layer_plot)
    yield
    FINDINGS._entries.pop("X1")
    FIGURES._entries.pop("X1")


def check_everywhere(folder: Path, statement: str) -> None:
    """The finding's rows in findings.parquet and findings.md, per seed and across seeds."""
    table = pd.read_parquet(folder / "findings.parquet")
    rows = table.loc[table.finding == "X1"]
    assert list(rows.model.fillna("across seeds")) == [f"{FAMILY}-s{s}" for s in SEEDS] + ["across seeds"]
    assert set(rows.status) == {"holds", "holds in 2/2"} and statement in set(rows.statement)
    across = json.loads(rows.numbers.iloc[-1])
    assert across["share"]["per_seed"] == {"0": 1.0, "2": 1.0} and across["counts"] == {"holds": 2}
    markdown = (folder / "findings.md").read_text()
    assert f"| {FAMILY}-s0 | X1 | top-layer sinks | holds | {statement} |" in markdown
    assert "| X1 | top-layer sinks | holds in 2/2 | holds in 2 of 2 seeds; share of the last layer: 100.0%" in markdown
    assert list(table.loc[table.model.notna()].groupby("model").size()) == [10, 10]  # F1-F9 and X1


def test_a_finding_registered_in_process_appears_everywhere(family, registered, tmp_path):
    write_findings(family)
    check_everywhere(family, "100% of layer 3's heads")
    page = build_report(family, tmp_path / "report").read_text()
    assert page.count("<td>X1 top-layer sinks</td>") == 2 + 1  # each seed's row, the family's
    assert all((tmp_path / "report" / "figures" / f"top-layer-{slug(f'{FAMILY}-s{s}')}.svg").is_file() for s in SEEDS)


PLUGIN = '''
"""A finding installed from outside headtrace, with its report figure."""
from dataclasses import dataclass
from typing import ClassVar

from headtrace.finding_kinds import FindingKind, Summary, show_share
from headtrace.report.figures import Plot, register_figure
from headtrace.trajectory import DOES_NOT_HOLD, HOLDS


@dataclass(frozen=True)
class TopLayerSinks(FindingKind):
    code: ClassVar[str] = "X1"
    title: ClassVar[str] = "top-layer sinks"
    share: float = 0.5

    def claim(self, config):
        return f"at the last revision, at least {self.share:.0%} of the last layer's heads are sink heads"

    def compute(self, panel, config):
        last = panel.layers.loc[panel.layers.revision == panel.names[-1]]
        top = last.loc[last.layer == last.layer.max()].iloc[0]
        share = float(top.screen_sink / top.n_heads)
        status = HOLDS if share >= self.share else DOES_NOT_HOLD
        return self.finding(status, f"{share:.0%} of the top layer (plugin)", {"share": share}, config)

    def across_seeds(self, per, config):
        summary = Summary(per)
        summary.spread("share", summary.values("share"), show_share, "share of the last layer")
        return summary.result()


def figure(data, panel):
    from matplotlib.figure import Figure

    plot = Plot(f"plugin-{panel.name.replace('/', '--')}", "top-layer sinks (plugin)", "X1 from a plugin.")
    plot.figure = Figure(figsize=(3, 2))
    plot.figure.add_subplot().plot([0, 1], [0, 1])
    return plot


register_figure("X1", figure)
'''


def install(site: Path, name: str, entry_points: str, module: str | None = None) -> Path:
    """A distribution as pip leaves it on sys.path: its module and a dist-info with its entry points."""
    dist = site / f"{name.replace('-', '_')}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    if module is not None:
        (site / f"{name.replace('-', '_')}.py").write_text(module)
    return site


def test_an_installed_plugin_is_seen_by_the_findings_command_and_the_report(family, tmp_path):
    site = install(
        tmp_path / "site", "headtrace-topsinks", "[headtrace.findings]\nX1 = headtrace_topsinks:TopLayerSinks\n", PLUGIN
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    printed = []
    for command in (["findings", str(family)], ["report", str(family), "--out", str(tmp_path / "report")]):
        proc = subprocess.run(
            [sys.executable, "-m", "headtrace", *command], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        printed.append(proc.stdout)
    assert "X1 top-layer" in printed[0]  # the findings command's table
    check_everywhere(family, "100% of the top layer (plugin)")
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("100% of the top layer (plugin)") == 2 and page.count("<td>X1 top-layer sinks</td>") == 3
    assert (tmp_path / "report" / "figures" / f"plugin-{FAMILY.replace('/', '--')}-s0.svg").is_file()
    assert "X1" not in FINDINGS  # this process never saw the plugin's folder


def test_a_broken_plugin_or_a_taken_code_is_one_line_exit_2(family, tmp_path, monkeypatch, capsys):
    site = install(tmp_path / "broken", "headtrace-broken", "[headtrace.findings]\nX9 = headtrace_nowhere:Finding\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(sys, "argv", ["headtrace", "findings", str(family)])
    with pytest.raises(SystemExit) as done:
        main()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert done.value.code == 2 and len(errors) == 1
    assert "finding plugin 'X9 = headtrace_nowhere:Finding' of headtrace-broken does not load" in errors[0]
    module = "from headtrace.finding_kinds import Floor\n\nclass MyFloor(Floor):\n    pass\n"
    site = install(
        tmp_path / "taken", "headtrace-taken", "[headtrace.findings]\nF1 = headtrace_taken:MyFloor\n", module
    )
    monkeypatch.syspath_prepend(str(site))
    (tmp_path / "broken" / "headtrace_broken-0.1.dist-info" / "entry_points.txt").write_text("")
    with pytest.raises(HeadtraceError, match="has code F1, which Floor has already"):
        FINDINGS.load_plugins()
