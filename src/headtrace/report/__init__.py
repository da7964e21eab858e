"""The developmental report: a results directory as one self-contained HTML page plus each figure
as PNG and SVG (`headtrace report DIR`).

    DIR/report/index.html          opens offline: figures inlined as SVG, style and script inlined
    DIR/report/figures/<key>.png   each figure for a paper (200 dpi)
    DIR/report/figures/<key>.svg

Every number drawn comes from trajectory's tables (revision and layer counts, milestones, final
circuit, recall) and the registered findings' numbers under one `TrajectoryConfig`, so the page
agrees with `headtrace findings`. Layout: `data` (what each figure draws), `figures` (matplotlib), `page` (HTML).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

from headtrace.errors import HeadtraceError
from headtrace.report.data import load
from headtrace.report.figures import STYLE, ablations_plot, model_plots, panel_plots
from headtrace.report.page import page, render
from headtrace.store import REPORT, write_text_atomic
from headtrace.trajectory import TrajectoryConfig

FIGURES = "figures"
INDEX = "index.html"


def build_report(
    results_dir: str | Path, out: str | Path | None = None, config: TrajectoryConfig = TrajectoryConfig()
) -> Path:
    """Write the report of `results_dir` into `out` (default DIR/report); returns the page's path."""
    data = load(results_dir, config)
    folder = Path(out) if out is not None else Path(results_dir) / REPORT
    figures = folder / FIGURES
    try:
        figures.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HeadtraceError(
            f"cannot write the report to '{folder}': {exc.strerror or exc}; pick another --out"
        ) from None
    with matplotlib.rc_context(STYLE):
        overview = panel_plots(data)
        per_model = {panel.name: model_plots(data, panel) for panel in data.panels}
        ablation = ablations_plot(data)
        plots = overview + [p for plots in per_model.values() for p in plots] + [ablation]
        svgs = {plot.key: render(plot, figures) for plot in plots}
    for stale in [*figures.glob("*.png"), *figures.glob("*.svg")]:
        if not svgs.get(stale.stem):  # a figure of an earlier report that this one does not draw
            stale.unlink()
    index = folder / INDEX
    write_text_atomic(page(data, overview, per_model, ablation, svgs), index)
    return index
