"""The report page: one HTML file that opens without a network (figures inlined as SVG, the style
sheet and the hover script inlined), with the findings table, the run metadata and what is missing."""

from __future__ import annotations

import html
import io
import itertools
import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from headtrace import __version__
from headtrace.family_findings import family_rows, family_status_class, model_rows
from headtrace.report.data import ReportData, model_gaps, panel_gaps, revision_label
from headtrace.report.figures import Plot
from headtrace.schema import ceiling_text
from headtrace.store import slug

RUN_COLUMNS = (
    "revision",
    "tokens",
    "top1",
    "n_sink_heads",
    "n_induction_heads",
    "n_examples",
    "dtype",
    "device",
    "config_hash",
    "wall_s",
    "started_at",
)
VERSIONED = ("headtrace", "torch", "transformers")  # run-table columns <name>_version


def render(plot: Plot, folder: Path) -> str:
    """Save the plot as PNG and SVG in `folder`; return its SVG for inlining (empty when not drawn)."""
    if plot.figure is None:
        return ""
    buffer = io.StringIO()
    plot.figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    (folder / f"{plot.key}.svg").write_text(svg)
    plot.figure.set_layout_engine("none")  # keep the layout just computed (it does not depend on dpi)
    plot.figure.savefig(folder / f"{plot.key}.png", dpi=200)
    return inline_svg(svg, plot.key, plot.tips, plot.heads)


def inline_svg(
    svg: str, prefix: str, tips: dict[str, list[str]], heads: dict[str, tuple[str, list[str]]] | None = None
) -> str:
    """An SVG document as page markup: tips attached to their groups, and the head of each shape
    where a click opens the head view, ids prefixed so that figures on one page never share one
    (matplotlib names clip paths and markers by content hash)."""
    svg = svg[svg.index("<svg") :]
    for gid, texts in tips.items():
        anchor = f'id="{gid}"'
        if svg.count(anchor) != 1:
            raise RuntimeError(f"figure {prefix}: {anchor} occurs {svg.count(anchor)} times in its SVG")
        clicks = ""
        if heads and gid in heads:
            revision, names = heads[gid]
            clicks = f' data-revision="{_e(revision)}" data-heads="{html.escape(json.dumps(names), quote=True)}"'
        svg = svg.replace(anchor, f'{anchor} data-tips="{html.escape(json.dumps(texts), quote=True)}"{clicks}')
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)


def _asset(name: str) -> str:
    return resources.files("headtrace.report").joinpath("static", name).read_text()


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _cell(value) -> str:
    """A table cell: numbers right-aligned with 4 significant digits, unknowns as a dash."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)) or value is pd.NA:
        return "<td>&ndash;</td>"
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return f'<td class="num">{float(value):.4g}</td>'
    return f"<td>{_e(value)}</td>"


def _table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in frame.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _attribute(name: str, value: str) -> str:
    return f' {name}="{_e(value)}"' if value else ""


def _share(plot: Plot) -> str:
    """A figure's share of a row it shares: as wide as the figure is (in inches)."""
    width = plot.figure.get_figwidth() if plot.figure is not None else 3.0
    return f"flex: {width:.2f} 1 0"


def _figure(plot: Plot, svg: str, number: int, style: str = "") -> str:
    body = f'<div class="canvas">{svg}</div>' if svg else f'<p class="gap">Not drawn: {_e(plot.note)}</p>'
    files = (
        f' <span class="files"><a href="figures/{plot.key}.png">PNG</a> &middot; '
        f'<a href="figures/{plot.key}.svg">SVG</a></span>'
        if svg
        else ""
    )
    return (
        f'<figure class="plot" id="fig-{plot.key}"{_attribute("style", style)}>{body}'
        f"<figcaption><b>Figure {number}. {_e(plot.title)}.</b> "
        f"{_e(plot.caption)}{files}</figcaption></figure>"
    )


def _families(data: ReportData) -> str:
    """The findings across seeds, one table per family (empty without families)."""
    summary = family_rows(data.findings)
    if summary.empty:
        return ""
    parts = []
    for family, rows in summary.groupby("family", sort=False):
        seeds = ", ".join(f"{s} ({m})" for s, m in data.families.get(family, {}).items())
        body = "".join(
            f"<tr><td>{_e(r.finding)} {_e(r.title)}</td>"
            f'<td class="status {family_status_class(r.status).replace(" ", "-")}">{_e(r.status)}</td>'
            f"<td>{_e(r.statement)}</td></tr>"
            for r in rows.itertuples()
        )
        parts.append(
            f"<h3>{_e(family)}: across seeds</h3><p>Seeds: {_e(seeds)}. Status: the commonest outcome over "
            "the seeds where the finding is measurable; figures: median [range] over the seeds that have "
            "them.</p><table><thead><tr><th>finding</th><th>status</th><th>statement</th></tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )
    return "".join(parts) + ("<h3>Per model (each seed of a family, and single models)</h3>" if parts else "")


def _findings(data: ReportData) -> str:
    table = model_rows(data.findings)
    rows = "".join(
        f"<tr><td>{_e(r.model)}</td><td>{_e(r.finding)} {_e(r.title)}</td>"
        f'<td class="status {r.status.replace(" ", "-")}">{_e(r.status)}</td><td>{_e(r.statement)}</td></tr>'
        for r in table.itertuples()
    )
    criteria = table.drop_duplicates("finding")[["finding", "title", "claim"]]
    return (
        _families(data) + "<table><thead><tr><th>model</th><th>finding</th><th>status</th><th>statement</th></tr>"
        f"</thead><tbody>{rows}</tbody></table><h3>Criteria</h3>{_table(criteria)}"
    )


def _metadata(data: ReportData) -> str:
    runs = data.runs
    summary = []
    for model, group in runs.groupby("model", sort=False):
        first = group.iloc[0]
        versions = sorted(
            {
                ", ".join(
                    f"{name} {getattr(r, f'{name}_version')}"
                    for name in VERSIONED
                    if isinstance(getattr(r, f"{name}_version", None), str)
                )
                for r in group.itertuples()
            }
        )
        summary.append(
            {
                "model": model,
                "revisions": len(group),
                "architecture": first.architecture,
                "layers x heads": f"{first.n_layers} x {first.n_heads}",
                "probe": first.probe,
                "examples": first.n_examples,
                "PR sample": _pr_sample(group),
                "baseline": _baseline(first),
                "induction ceiling": _ceiling(group, "ceiling_induction"),
                "duplicate ceiling": _ceiling(group, "ceiling_duplicate"),
                "devices": ", ".join(sorted(map(str, group.device.dropna().unique()))),
                "config hashes": ", ".join(sorted(map(str, group.config_hash.dropna().unique()))),
                "versions": "; ".join(versions),
                "wall time (s)": group.wall_s.sum(min_count=1),
            }
        )
    per_run = runs.reindex(columns=["model", *RUN_COLUMNS])
    return (
        _table(pd.DataFrame(summary))
        + "<details><summary>Every run (model x revision)</summary>"
        + _table(per_run)
        + "</details>"
    )


def _baseline(run: pd.Series) -> str:
    """The run's baseline kind; runs written before the option had the reference one."""
    kind = run.get("baseline")
    return kind if isinstance(kind, str) else "reference"


def _ceiling(runs: pd.DataFrame, column: str) -> str:
    """A class's selectivity ceiling over a model's runs (docs/definitions.md); '?' for runs without it."""
    values = runs[column].dropna().unique() if column in runs else []
    return ", ".join(ceiling_text(v) for v in sorted(values)) or "?"


def _pr_sample(group: pd.DataFrame) -> str:
    """Where a model's PR came from: an imported PR file's sample and precision, else the screen's."""
    first = group.iloc[0]
    if "pr_examples" in group and group.pr_examples.notna().any():  # a reference import: as its PR file says
        dtypes = ", ".join(sorted(map(str, group.pr_dtype.dropna().unique()))) or "precision not stated"
        return f"n = {int(group.pr_examples.dropna().iloc[0])} ({dtypes}), from the PR file"
    config = json.loads(first.config_json) if isinstance(first.get("config_json"), str) else {}
    if config.get("source"):
        return "none"
    return f"n = {config.get('pr_examples') or first.n_examples} ({first.dtype})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _family_count(data: ReportData) -> str:
    n = len(data.families)
    return f" ({n} seed {'family' if n == 1 else 'families'})" if n else ""


def _head_view(view: dict | None) -> str:
    """A model's head view: its data for the page's script, which draws the head clicked in the label grid."""
    if view is None:
        return (
            '<div class="headview"><h3>Head view</h3><p class="gap">No attention patterns were kept for this model: '
            "screen it with --keep-patterns 4 (keep_patterns = 4 in the panel's [screen]) to see its heads' "
            "attention here.</p></div>"
        )
    payload = json.dumps(view, separators=(",", ":")).replace("</", "<\\/")
    return (
        '<div class="headview"><h3>Head view</h3><p>Click a cell of the label grid: the head\'s attention from the '
        "query over the tokens of a probe example, at each revision (slider). Marked: A (the earlier occurrence "
        "of the query token), B (the token after it, the induction target), the previous token and the first. "
        "Kept for the heads labelled or in a circuit at some revision.</p>"
        f'<div class="hv-body"></div><script type="application/json" class="hv-data">{payload}</script></div>'
    )


def _warnings(data: ReportData) -> str:
    """The Warnings section: revisions whose weights are in doubt, one row each (never dropped)."""
    if not data.flags:
        return ""
    rows = pd.DataFrame([{"model": m, "revision": r, "warning": text} for (m, r), text in sorted(data.flags.items())])
    return (
        "<p>Revisions whose weights are in doubt: weight files shared with another revision or equal to the "
        "final one (the hub's listing), or heads much closer to a far revision than to their neighbours "
        "(the neighbour check). Their results are kept and marked with red triangles on the trajectory "
        "figures.</p>" + _table(rows)
    )


def _gaps(gaps: list[str]) -> str:
    return '<ul class="gaps">' + "".join(f"<li>{_e(g)}</li>" for g in gaps) + "</ul>" if gaps else ""


def page(
    data: ReportData, overview: list[Plot], per_model: dict[str, list[Plot]], ablation: Plot, svgs: dict[str, str]
) -> str:
    """The whole page as one HTML string."""
    counter = itertools.count(1)

    def figures(plots: list[Plot]) -> str:
        numbered = [(p, next(counter)) for p in plots]
        shown, i = [], 0
        while i < len(numbered):
            pair = numbered[i : i + 2] if i + 1 < len(numbered) and numbered[i + 1][0].beside else numbered[i : i + 1]
            if len(pair) == 2:  # one row, each figure's share of it as wide as the figure
                shown.append(
                    '<div class="beside">' + "".join(_figure(p, svgs[p.key], k, _share(p)) for p, k in pair) + "</div>"
                )
            else:
                shown.append(_figure(pair[0][0], svgs[pair[0][0].key], pair[0][1]))
            i += len(pair)
        return "".join(shown)

    models = [p.name for p in data.panels]
    per_model_gaps = {p.name: model_gaps(p, data.config) for p in data.panels}
    missing = _gaps(panel_gaps(data)) + "".join(f"<h3>{_e(m)}</h3>{_gaps(g)}" for m, g in per_model_gaps.items() if g)
    warnings = _warnings(data)
    nav = ['<a href="#overview">Overview</a>', '<a href="#findings">Findings</a>']
    nav += ['<a href="#warnings">Warnings</a>'] if warnings else []
    nav += [f'<a href="#model-{slug(m)}">{_e(m)}</a>' for m in models]
    nav += ['<a href="#ablations">Ablations</a>', '<a href="#runs">Runs</a>'] + (
        ['<a href="#missing">Missing</a>'] if missing else []
    )
    sections = [
        f'<section id="overview"><h2>Overview</h2>{figures(overview)}</section>',
        f'<section id="findings"><h2>Findings</h2>{_findings(data)}</section>',
    ]
    if warnings:
        sections.append(f'<section id="warnings"><h2>Warnings</h2>{warnings}</section>')
    for panel in data.panels:
        names = ", ".join(revision_label(n, t) for n, t in zip(panel.names, panel.tokens))
        sections.append(
            f'<section id="model-{slug(panel.name)}"><h2>{_e(panel.name)}</h2>'
            f"<p>{_count(len(panel.names), 'revision')}: {_e(names)}</p>"
            f"{_gaps(per_model_gaps[panel.name])}{figures(per_model[panel.name])}"
            f"{_head_view(data.head_views.get(panel.name))}</section>"
        )
    sections.append(f'<section id="ablations"><h2>Ablations</h2>{figures([ablation])}</section>')
    sections.append(f'<section id="runs"><h2>Runs</h2>{_metadata(data)}</section>')
    if missing:
        sections.append(f'<section id="missing"><h2>What is missing</h2>{missing}</section>')
    notice = '<p class="gap">Some results are missing: <a href="#missing">what, and why</a>.</p>' if missing else ""
    title = f"headtrace report: {data.results_dir.name}"
    counts = f"{_count(len(models), 'model')}{_family_count(data)}, {_count(len(data.revisions), 'revision')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_asset("report.css")}</style></head>
<body><header><h1>{_e(title)}</h1><p>{counts} from
{_e(data.results_dir)};
headtrace {__version__}. Hover a point or a cell for its numbers.</p></header>
<nav>{"".join(nav)}</nav><main>{notice}{"".join(sections)}</main>
<div id="tip" hidden></div><script>{_asset("report.js")}</script></body></html>
"""
