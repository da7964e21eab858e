"""The report's figures: each a `Plot` with a caption that names its definitions and thresholds,
hover tips for the page (one text per drawn shape), and a matplotlib figure saved as PNG and SVG.

A figure that cannot be drawn (no PR, one revision, no ablations) is a `Plot` with a `note`
saying why, so the page shows the gap where the figure would be.

`FIGURES` registers them in page order: drawn once for the panel, once per seed family or once per
model. A finding's figure is registered under the finding's code (`register_figure`), and drawn only
where the findings table holds that finding, so a finding from outside headtrace brings its figure
without an edit here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter

from headtrace.report.data import (
    INDUCTION_MILESTONE,
    LABEL_ORDER,
    SINK_MILESTONE,
    ReportData,
    TimeAxis,
    ablation_summary,
    family_finding,
    family_sink_curve,
    finding,
    grid_revisions,
    label_grid,
    model_milestones,
    revision_label,
    sink_curve,
    sink_layer_matrix,
    time_axis,
    timeline,
    trajectory_heads,
)
from headtrace.finding_kinds import SELECTIVITY_OF_SET
from headtrace.headview import LABEL_COLORS
from headtrace.probes import CLASS_KEYS, CLASSES
from headtrace.registry import Registry
from headtrace.store import COMPOSITION, ResultsDir, slug
from headtrace.trajectory import ModelTrajectory, recall, tokens_label

STYLE = {
    "svg.fonttype": "none",
    "svg.hashsalt": "headtrace",
    "font.size": 8.5,
    "axes.titlesize": 9,
    "legend.fontsize": 7.5,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "figure.dpi": 100,
}
MAX_SPECTRAL_HEADS = 8
MAX_ANNOTATED_CELLS = 600


@dataclass
class Plot:
    """One figure of the report; `tips` maps an artist's gid to one hover text per shape it draws."""

    key: str  # file stem, unique in the report
    title: str
    caption: str
    figure: Figure | None = None
    note: str = ""  # why the figure is not drawn (figure is None)
    tips: dict[str, list[str]] = field(default_factory=dict)
    beside: bool = False  # the page sets it beside the figure before it
    heads: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # gid -> (revision, head per shape): clicks

    def tip(self, artist, texts: Sequence[str]) -> None:
        gid = f"tip{len(self.tips)}"
        artist.set_gid(gid)
        self.tips[gid] = list(texts)


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _color(i: int) -> str:
    return f"C{i % 10}"


def _token_axis(ax: Axes) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: tokens_label(value)))
    ax.set_xlabel("training tokens")


def _use_time_axis(ax: Axes, axis: TimeAxis) -> None:
    if axis.log:
        _token_axis(ax)
    else:
        ax.set_xticks(axis.x, axis.names, rotation=30, ha="right")
        ax.set_xlabel(axis.label)


def _at(axis: TimeAxis, revision: str) -> float:
    return float(axis.x[axis.names.index(revision)])


def _mark_flagged(ax: Axes, plot: Plot, data: ReportData, model: str, axis: TimeAxis) -> None:
    """Red triangles on the time axis at revisions whose weights are in doubt (ReportData.flags)."""
    shown = [
        (name, text)
        for (m, name), text in data.flags.items()
        if m == model and name in axis.names and axis.drawn[axis.names.index(name)]
    ]
    if not shown:
        return
    points = ax.scatter(
        [_at(axis, name) for name, _ in shown],
        [0.0] * len(shown),
        marker="^",
        s=70,
        color="red",
        edgecolor="k",
        linewidth=0.5,
        zorder=6,
        clip_on=False,
        transform=ax.get_xaxis_transform(),
    )
    plot.tip(points, [f"{model} · {name}\nweights warning: {text}" for name, text in shown])
    if "Red triangles" not in plot.caption:
        plot.caption += " Red triangles: revisions whose weights are in doubt (see Warnings)."


def _threshold_line(ax: Axes, value: float, text: str, color: str = "k") -> None:
    ax.axhline(value, color=color, ls="--", lw=0.9)
    ax.annotate(
        text,
        (0, value),
        xycoords=("axes fraction", "data"),
        xytext=(3, 2),
        textcoords="offset points",
        fontsize=7,
        color=color,
    )


def _ceiling_line(ax: Axes, x: np.ndarray, ceiling: np.ndarray) -> str:
    """The probe's induction ceiling, where it binds (docs/definitions.md); returns a caption sentence."""
    bound = np.isfinite(ceiling) & (ceiling < 1e6)
    if not bound.any():
        return " The probe's induction ceiling is unbounded (clean baseline)." if np.isfinite(ceiling).any() else ""
    ax.plot(x[bound], ceiling[bound], color="C3", ls=":", lw=1.2, label="ceiling")
    return (
        f" Dotted red: the probe's ceiling ({np.nanmax(ceiling[bound]):.0f}x), the selectivity of a head with all "
        "its attention on the target; heads near it are compressed."
    )


def _selectivities(row) -> str:
    parts = [f"{name} {getattr(row, f'sel_{CLASS_KEYS[name]}'):.1f}x" for name in CLASSES]
    return ", ".join(parts[:3]) + "\n" + ", ".join(parts[3:])


def _head_tip(row, tokens: float) -> str:
    """A head's numbers at one revision: label, the six selectivities, sink score and PR when known."""
    label = row.label if row.label == "unclassified" else f"{row.label} ({row.best_selectivity:.1f}x)"
    extra = [
        f"{name} {value:.3g}" for name, value in (("sink score", row.sink_score), ("PR", row.pr)) if np.isfinite(value)
    ]
    return f"{row.head_id} · {revision_label(row.revision, tokens)}\nlabel: {label}\n{_selectivities(row)}" + (
        f"\n{', '.join(extra)}" if extra else ""
    )


# --------------------------------------------------------------------------------------------
# Panel-wide figures.


def sink_fraction_plot(data: ReportData) -> Plot:
    """Sink fraction vs training tokens, one line per model, milestones marked."""
    c = data.config
    levels = ", ".join(f"{f:.0%}" for f in c.sink_fractions)
    counts = ", ".join(str(n) for n in c.induction_counts)
    plot = Plot(
        "sink-fraction",
        "Sink (BOS-attractor) heads over training",
        (
            f"Share of all heads that are sink heads (first-token selectivity >= {c.thresholds.sink_threshold:g}x: "
            "mean attention from the query to position 0 over its mean attention to 50 fixed baseline positions) "
            "against training tokens (log axis), one line per model. Stars: the first revision where the fraction "
            f"reaches {levels} (dotted levels); dashed verticals: the first revision with >= {counts} induction "
            f"heads (induction selectivity >= {c.thresholds.induction_threshold:g}x). A milestone happened after "
            "the revision before it and no later than the one marked."
        ),
    )
    if data.families:
        plot.caption += (
            " A seed family is drawn as its median over seeds (thick) and the range over seeds (band) at "
            "each revision that more than half of its seeds have (a seed without that revision is left "
            "out of it, never filled), and each seed alone (faint); "
            "its stars and dashed lines sit at the median milestone over the seeds that reach it, with "
            "the range over seeds as a bar or a shaded span."
        )
    left_out = [p.name for p in data.panels if not time_axis(p).log]
    if len(left_out) == len(data.panels):
        plot.note = "no model has known training tokens at every revision"
        return plot
    fig = _figure(7.5, 4.2)
    ax = fig.add_subplot()
    for i, (name, panels, family) in enumerate(data.series()):
        if family:
            _family_sink_curve(ax, plot, data, name, panels, _color(i))
            continue
        panel = panels[0]
        axis = time_axis(panel)
        if not axis.log:
            continue
        curve = sink_curve(panel)[axis.drawn]
        color = _color(i)
        ax.plot(curve.tokens, curve.screen_sink_fraction, color=color, lw=1.6, label=panel.name)
        points = ax.scatter(curve.tokens, curve.screen_sink_fraction, color=color, s=16, zorder=3)
        plot.tip(
            points,
            [
                f"{panel.name} · {revision_label(r.revision, r.tokens)}\n{r.screen_sink:.0f} of "
                f"{r.n_heads} heads are sink heads ({r.screen_sink_fraction:.1%})"
                for r in curve.itertuples()
            ],
        )
        _mark_flagged(ax, plot, data, panel.name, axis)
        reached = model_milestones(data, panel.name, SINK_MILESTONE).dropna(subset=["revision"])
        stars = milestone_labels(reached.loc[reached.tokens > 0])
        if len(stars):
            points = ax.scatter(
                stars.tokens, stars.value, marker="*", s=110, color=color, edgecolor="k", linewidth=0.5, zorder=4
            )
            plot.tip(
                points,
                [
                    f"{panel.name}: sink fraction {s.label}\nfirst at {revision_label(s.revision, s.tokens)}"
                    f" ({s.value:.1%})"
                    for s in stars.itertuples()
                ],
            )
        induction = model_milestones(data, panel.name, INDUCTION_MILESTONE).dropna(subset=["revision"])
        for stone in milestone_labels(induction.loc[induction.tokens > 0]).itertuples():
            ax.axvline(stone.tokens, color=color, ls="--", lw=0.9)
            ax.annotate(
                f"induction {stone.label}",
                (stone.tokens, 1),
                xycoords=("data", "axes fraction"),
                xytext=(2, -10),
                textcoords="offset points",
                fontsize=6.5,
                color=color,
            )
    for level in c.sink_fractions:
        ax.axhline(level, color="0.75", ls=":", lw=0.8, zorder=0)
    _token_axis(ax)
    ax.set_ylabel(f"sink heads (first-token >= {c.thresholds.sink_threshold:g}x) / all heads")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left")
    if left_out:
        plot.caption += f" Left out (tokens unknown): {', '.join(left_out)}."
    plot.figure = fig
    return plot


def _seed_values(data: ReportData, values: dict, show) -> str:
    """Per-seed values as 'seed 0 12.5%, seed 1 ...' (values keyed by model or by seed)."""
    items = sorted(
        (
            (data.seed_of(k) if isinstance(k, str) and data.seed_of(k) is not None else int(k), v)
            for k, v in values.items()
        )
    )
    return ", ".join(f"seed {s} {show(v)}" for s, v in items)


def _family_sink_curve(
    ax: Axes, plot: Plot, data: ReportData, name: str, panels: list[ModelTrajectory], color: str
) -> None:
    """A family on the sink-fraction figure: faint seeds, the band over seeds, the median, median milestones."""
    drawn = [p for p in panels if time_axis(p).log]
    for panel in drawn:
        curve = sink_curve(panel)[time_axis(panel).drawn]
        ax.plot(curve.tokens, curve.screen_sink_fraction, color=color, lw=0.7, alpha=0.3, zorder=1)
    if not drawn:
        return
    stats = family_sink_curve(drawn)
    stats = stats.loc[(stats.tokens > 0) & (stats.n > len(drawn) / 2)]  # a seed's own checkpoints: its line only
    band = ax.fill_between(stats.tokens, stats.low, stats.high, color=color, alpha=0.18, lw=0, zorder=1)
    plot.tip(
        band, [f"{name}: band = min-max sink fraction over the seeds that have each revision ({len(drawn)} seeds)"]
    )
    ax.plot(stats.tokens, stats["median"], color=color, lw=1.8, label=f"{name} (median of {len(drawn)} seeds)")
    points = ax.scatter(stats.tokens, stats["median"], color=color, s=16, zorder=3)
    plot.tip(
        points,
        [
            f"{name} · {revision_label(r.revision, r.tokens)}\nmedian {r.median:.1%} sink heads over {r.n} "
            f"seeds (range {r.low:.1%}-{r.high:.1%})\n{_seed_values(data, r.values, _percent)}"
            for r in stats.itertuples()
        ],
    )
    _, numbers = family_finding(data, name, "milestones")
    n = numbers["n_seeds"]
    stars = [
        (key, v)
        for key, v in numbers["milestones"].items()
        if key.startswith(SINK_MILESTONE) and v["reached"] and v["median"] > 0
    ]
    if stars:
        levels = [float(key.split(">= ")[1].rstrip("%")) / 100 for key, _ in stars]
        medians = np.array([v["median"] for _, v in stars])
        ranges = [medians - [v["low"] for _, v in stars], [v["high"] for _, v in stars] - medians]
        ax.errorbar(medians, levels, xerr=ranges, fmt="none", ecolor=color, elinewidth=1, capsize=2, zorder=2)
        points = ax.scatter(medians, levels, marker="*", s=110, color=color, edgecolor="k", linewidth=0.5, zorder=4)
        plot.tip(
            points,
            [
                f"{name}: {key}\nmedian at {tokens_label(v['median'])} over {v['reached']}/{n} seeds "
                f"(range {tokens_label(v['low'])}-{tokens_label(v['high'])})\n"
                + _seed_values(data, v["per_seed"], tokens_label)
                for key, v in stars
            ],
        )
    induction: dict[float, list[str]] = {}
    for key, v in numbers["milestones"].items():
        if key.startswith(INDUCTION_MILESTONE) and v["reached"] and v["median"] > 0:
            ax.axvspan(v["low"], v["high"], color=color, alpha=0.07, lw=0)
            induction.setdefault(v["median"], []).append(key.split(">= ")[1].split(" ")[0])
    for median, counts in induction.items():
        ax.axvline(median, color=color, ls="--", lw=0.9)
        ax.annotate(
            f"induction >={', '.join(counts)} heads (median)",
            (median, 1),
            xycoords=("data", "axes fraction"),
            xytext=(2, -10),
            textcoords="offset points",
            fontsize=6.5,
            color=color,
        )


def _percent(value: float) -> str:
    return f"{value:.1%}"


def milestone_labels(stones: pd.DataFrame) -> pd.DataFrame:
    """One label per milestone revision, thresholds first met together joined: milestones
    'induction >= 3 heads at 50x' and '... >= 5 heads ...' at one revision -> '>=3, 5 heads'."""
    found = stones.milestone.str.extract(r">= (?P<threshold>\S+)(?P<unit> heads)?").fillna({"unit": ""})
    table = stones.assign(threshold=found.threshold, unit=found.unit)
    return (
        table.groupby(["revision", "tokens", "unit"], sort=False)
        .agg(value=("value", "max"), threshold=("threshold", ", ".join))
        .reset_index()
        .assign(label=lambda f: ">=" + f.threshold + f.unit)
    )


def milestones_plot(data: ReportData) -> Plot:
    """Induction and sink milestones per model (or seed family) on one token axis, with the F3 ratio."""
    c = data.config
    plot = Plot(
        "milestones",
        "Milestones: induction circuit vs sink spread",
        (
            "For each model, the first revision where the induction circuit has >= "
            f"{', '.join(map(str, c.induction_counts))} heads (induction selectivity >= "
            f"{c.thresholds.induction_threshold:g}x) and where the sink fraction (first-token selectivity >= "
            f"{c.thresholds.sink_threshold:g}x) reaches {', '.join(f'{f:.0%}' for f in c.sink_fractions)}; each bar "
            "is the bracket the event lies in (after the revision before, no later than the marked one). The arrow "
            f"carries F3's ratio tokens(sink fraction >= {c.timing_sink_fraction:.0%}) / tokens(induction >= "
            f"{c.timing_induction_count} heads), with its range over both brackets."
        ),
    )
    if data.families:
        plot.caption += (
            " For a seed family the marker is the median over the seeds that reach the milestone, the bar "
            "its range over seeds, the faint dots each seed's own milestone; its arrow carries the median "
            "of the seeds' F3 ratios and their range."
        )
    stones = timeline(data)
    series = [(name, [p for p in panels if time_axis(p).log], family) for name, panels, family in data.series()]
    series = [(name, panels, family) for name, panels, family in series if panels]
    drawn = {p.name for _, panels, _ in series for p in panels}
    reached = stones.loc[stones.model.isin(drawn) & (stones.tokens > 0)]
    if reached.empty:
        plot.note = "no milestone reached on a known token axis (or fewer than two revisions)"
        return plot
    left_out = [p.name for p in data.panels if p.name not in drawn]
    if left_out:
        plot.caption += f" Left out (tokens unknown): {', '.join(left_out)}."
    positive = pd.concat([p.revisions.tokens for _, panels, _ in series for p in panels])
    low, high = positive[positive > 0].min() / 3, positive.max() * 3
    fig = _figure(7.5, 0.85 * len(series) + 1.3)
    ax = fig.add_subplot()
    ticks, labels = [], []
    for i, (name, panels, family) in enumerate(series):
        lanes = {"induction": 2 * i + 0.9, "sink": 2 * i}
        ticks += [lanes["sink"], lanes["induction"]]
        labels += ["sink", f"{name}\ninduction" + (f"\n({len(panels)} seeds)" if family else "")]
        if family:
            _family_lanes(ax, plot, data, name, reached.loc[reached.model.isin([p.name for p in panels])], lanes, low)
            continue
        for lane, y in lanes.items():
            rows = reached.loc[(reached.model == name) & (reached.lane == lane)]
            color = "C3" if lane == "induction" else "C4"
            for r in rows.itertuples():
                ax.plot(
                    [max(r.previous_tokens, low), r.tokens],
                    [y, y],
                    color=color,
                    lw=5,
                    alpha=0.25,
                    solid_capstyle="butt",
                )
            for r in milestone_labels(rows).itertuples():
                ax.annotate(
                    r.label,
                    (r.tokens, y),
                    xytext=(0, 6),
                    textcoords="offset points",
                    ha="center",
                    fontsize=6.5,
                    color=color,
                )
            if len(rows):
                points = ax.scatter(rows.tokens, [y] * len(rows), color=color, s=22, zorder=3)
                plot.tip(
                    points,
                    [
                        f"{name}: {r.milestone}\nfirst at {revision_label(r.revision, r.tokens)}; "
                        f"after {r.previous_revision or 'the start'}"
                        for r in rows.itertuples()
                    ],
                )
        _ratio_arrow(ax, data, name, lanes)
    _token_axis(ax)
    ax.set_xlim(low, high)
    ax.set_yticks(ticks, labels)
    ax.set_ylim(-0.6, 2 * len(series) - 0.4)
    plot.figure = fig
    return plot


def _family_lanes(
    ax: Axes, plot: Plot, data: ReportData, family: str, reached: pd.DataFrame, lanes: dict[str, float], low: float
) -> None:
    """A family's milestone lanes: each seed's milestone (faint), the range over seeds (bar), the median."""
    _, numbers = family_finding(data, family, "milestones")
    n = numbers["n_seeds"]
    for lane, y in lanes.items():
        color = "C3" if lane == "induction" else "C4"
        mine = reached.loc[reached.lane == lane]
        ax.scatter(mine.tokens, [y] * len(mine), color=color, s=9, alpha=0.35, zorder=2)
        summary = [
            (key, v)
            for key, v in numbers["milestones"].items()
            if (key.startswith(INDUCTION_MILESTONE) if lane == "induction" else key.startswith(SINK_MILESTONE))
            and v["reached"]
            and v["median"] > 0
        ]
        for _, v in summary:
            ax.plot([max(v["low"], low), v["high"]], [y, y], color=color, lw=5, alpha=0.25, solid_capstyle="butt")
        if not summary:
            continue
        medians = pd.DataFrame(
            [
                {"milestone": key, "revision": tokens_label(v["median"]), "tokens": v["median"], "value": 0.0}
                for key, v in summary
            ]
        )
        for r in milestone_labels(medians).itertuples():
            ax.annotate(
                r.label,
                (r.tokens, y),
                xytext=(0, 6),
                textcoords="offset points",
                ha="center",
                fontsize=6.5,
                color=color,
            )
        points = ax.scatter(
            medians.tokens, [y] * len(medians), color=color, s=30, edgecolor="k", linewidth=0.5, zorder=3
        )
        plot.tip(
            points,
            [
                f"{family}: {key}\nmedian at {tokens_label(v['median'])} over {v['reached']}/{n} seeds "
                f"(range {tokens_label(v['low'])}-{tokens_label(v['high'])})\n"
                + _seed_values(data, v["per_seed"], tokens_label)
                for key, v in summary
            ],
        )
    row, f3 = family_finding(data, family, "F3")
    ratio = f3.get("ratio", {})
    if not ratio.get("n"):
        _f3_arrow(ax, lanes, row.status)
        return
    text = (
        f"F3: median x{ratio['median']:.3g} (seeds {ratio['low']:.3g}-{ratio['high']:.3g}, "
        f"{ratio['n']}/{n}), {row.status}"
    )
    _f3_arrow(ax, lanes, row.status, (f3["induction_tokens"]["median"], f3["sink_tokens"]["median"]), text)


def _ratio_arrow(ax: Axes, data: ReportData, model: str, lanes: dict[str, float]) -> None:
    """F3: an arrow from the induction milestone to the sink milestone, labelled with the ratio."""
    row, numbers = finding(data, model, "F3")
    if "ratio" not in numbers:
        _f3_arrow(ax, lanes, row.status)
        return
    high = numbers["ratio_high"]
    text = (
        f"F3: x{numbers['ratio']:.3g} (grid {numbers['ratio_low']:.3g}-"
        f"{'inf' if high is None else format(high, '.3g')}), {row.status}"
    )
    _f3_arrow(ax, lanes, row.status, (numbers["induction"]["tokens"], numbers["sink"]["tokens"]), text)


def _f3_arrow(
    ax: Axes, lanes: dict[str, float], status: str, span: tuple[float, float] | None = None, text: str = ""
) -> None:
    """F3 on the milestone lanes: an arrow from the induction milestone to the sink milestone
    (`span`, in tokens) with its label, or the finding's status alone where it is not measurable."""
    if span is None:
        ax.annotate(
            f"F3 {status}",
            (1, lanes["sink"] + 0.45),
            xycoords=("axes fraction", "data"),
            xytext=(-4, 0),
            textcoords="offset points",
            ha="right",
            fontsize=7,
            color="0.35",
        )
        return
    start, end = span
    ax.annotate(
        "",
        (end, lanes["sink"]),
        xytext=(start, lanes["induction"]),
        arrowprops={"arrowstyle": "->", "color": "0.2", "lw": 1},
    )
    ax.annotate(
        text,
        (1, lanes["induction"] + 0.45),
        xycoords=("axes fraction", "data"),
        xytext=(-4, 0),
        textcoords="offset points",
        fontsize=7,
        ha="right",
        va="center",
    )


# --------------------------------------------------------------------------------------------
# Per-model figures.


def sink_layers_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """Layer x revision heatmap of sink heads per layer; the F1 floor marked."""
    c = data.config
    row, _ = finding(data, panel.name, "F1")
    plot = Plot(
        f"sink-layers-{slug(panel.name)}",
        f"{panel.name}: sink heads per layer",
        (
            f"Sink heads (first-token selectivity >= {c.thresholds.sink_threshold:g}x) in each layer (rows, layer 0 "
            f"at the bottom) at each revision (columns, training order) of {panel.name}; grey: unknown. The dashed "
            f"line tops the F1 floor (layers 0-{c.floor_layers - 1}). F1 {row.status}: {row.statement}."
        ),
    )
    matrix = sink_layer_matrix(panel)
    n_layers, n_revisions = matrix.shape
    per_layer = int(panel.layers.n_heads.max())
    fig = _figure(max(4.5, 0.55 * n_revisions + 2.4), max(2.8, 0.2 * n_layers + 1.6))
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["magma_r"].with_extremes(under="#d9d9d9")
    values = matrix.to_numpy(dtype=float)
    mesh = ax.pcolormesh(
        np.arange(n_revisions + 1),
        np.arange(n_layers + 1),
        np.nan_to_num(values, nan=-1),
        cmap=cmap,
        vmin=0,
        vmax=per_layer,
        edgecolors="white",
        linewidth=0.4,
    )
    tokens = dict(zip(panel.names, panel.tokens))
    plot.tip(
        mesh,
        [
            f"layer {layer} · {revision_label(rev, tokens[rev])}\n"
            + (f"{v:.0f} of {per_layer} heads are sink heads" if np.isfinite(v) else "unknown")
            for layer, line in zip(matrix.index, values)
            for rev, v in zip(matrix.columns, line)
        ],
    )
    if values.size <= MAX_ANNOTATED_CELLS:
        for (i, j), v in np.ndenumerate(values):
            if v > 0:
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    f"{v:.0f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if v > per_layer / 2 else "black",
                )
    ax.axhline(c.floor_layers, color="C2", ls="--", lw=1.4)
    ax.annotate(
        f"F1 floor: layers 0-{c.floor_layers - 1}",
        (0, c.floor_layers),
        xytext=(3, 3),
        textcoords="offset points",
        fontsize=7,
        color="C2",
    )
    ax.set_xticks(
        np.arange(n_revisions) + 0.5,
        [revision_label(r, tokens[r]).replace(" (", "\n(") for r in matrix.columns],
        rotation=45 if n_revisions > 6 else 0,
        fontsize=6.5,
    )
    step = max(1, n_layers // 16)
    ax.set_yticks(np.arange(0, n_layers, step) + 0.5, [str(layer) for layer in matrix.index[::step]])
    ax.set_xlabel("revision")
    ax.set_ylabel("layer")
    fig.colorbar(mesh, ax=ax, label="sink heads in the layer", shrink=0.8, ticks=MaxNLocator(integer=True))
    plot.figure = fig
    return plot


def labels_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """Layer x head grid of labels, one small panel per revision."""
    c = data.config
    revisions = grid_revisions(panel)
    shown = "" if len(revisions) == len(panel.names) else f" ({len(revisions)} of {len(panel.names)} revisions)"
    plot = Plot(
        f"labels-{slug(panel.name)}",
        f"{panel.name}: head labels per revision",
        (
            f"Each head's label at each revision of {panel.name}{shown}: rows are layers (0 at the bottom), columns "
            "heads. A head's label is its best class (largest selectivity of the six classes: attention to the "
            "class's target position over the baseline) when that selectivity is >= "
            f"{c.thresholds.label_threshold:g}x, else unclassified. Hover a cell for the head's numbers; click it for "
            "its attention in the head view below (where the screen kept patterns)."
        ),
    )
    n_layers, n_heads = panel.heads.layer.max() + 1, panel.heads["head"].max() + 1
    ncols = min(len(revisions), 5)
    nrows = math.ceil(len(revisions) / ncols)
    width = max(5.0, ncols * (0.13 * n_heads + 0.6) + 0.4)
    fig = _figure(width, nrows * (0.1 * n_layers + 0.65) + 0.7)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    cmap = ListedColormap([LABEL_COLORS[label] for label in LABEL_ORDER])
    norm = BoundaryNorm(np.arange(len(LABEL_ORDER) + 1) - 0.5, len(LABEL_ORDER))
    tokens = dict(zip(panel.names, panel.tokens))
    for ax, revision in zip(axes.flat, revisions):
        grid = label_grid(panel, revision)
        codes = grid.map(LABEL_ORDER.index).to_numpy(dtype=float)
        mesh = ax.pcolormesh(codes, cmap=cmap, norm=norm, edgecolors="white", linewidth=0.3)
        rows = panel.heads.loc[panel.heads.revision == revision].sort_values(["layer", "head"])  # the mesh's order
        plot.tip(mesh, [_head_tip(r, tokens[revision]) for r in rows.itertuples()])
        plot.heads[mesh.get_gid()] = (revision, list(rows.head_id))  # a click opens the head view
        ax.set_title(revision_label(revision, tokens[revision]), fontsize=7)
        ax.set_xticks([0.5, n_heads - 0.5], ["0", str(n_heads - 1)], fontsize=6)
        ax.set_yticks([0.5, n_layers - 0.5], ["0", str(n_layers - 1)], fontsize=6)
        ax.tick_params(length=0)
        ax.set_aspect("equal")
    for ax in list(axes.flat)[len(revisions) :]:
        ax.set_axis_off()
    axes[-1, 0].set_xlabel("head", fontsize=7)
    axes[-1, 0].set_ylabel("layer", fontsize=7)
    fig.legend(
        handles=[Patch(color=LABEL_COLORS[label], label=label) for label in LABEL_ORDER],
        loc="outside lower center",
        ncols=len(LABEL_ORDER) if width >= 7.5 else 4,
        frameon=False,
    )
    plot.figure = fig
    return plot


def induction_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """Induction selectivity of the final circuit's heads, the threshold, and top-1 on a twin axis."""
    c = data.config
    heads, final = trajectory_heads(panel, c)
    chosen = (
        f"the final induction circuit (heads >= {c.thresholds.induction_threshold:g}x at the last revision, "
        f"{panel.names[-1]})"
        if final
        else f"the {len(heads)} heads with the highest induction selectivity at any revision (no head is >= "
        f"{c.thresholds.induction_threshold:g}x at the last revision, so there is no final circuit)"
    )
    plot = Plot(
        f"induction-{slug(panel.name)}",
        f"{panel.name}: induction selectivity and capability",
        (
            "Induction selectivity (attention from the second A to the token after the first A, over the baseline; "
            f"log axis) of {chosen}, with the {c.thresholds.induction_threshold:g}x circuit line; grey, right axis: "
            "top-1 accuracy of the induction target at the query (capability)."
        ),
    )
    axis = time_axis(panel)
    x = axis.x[axis.drawn]
    selectivity = panel.wide("sel_induction")
    fig = _figure(7.5, 4)
    ax = fig.add_subplot()
    for j, head in enumerate(heads):
        y = selectivity[head].to_numpy()[axis.drawn]
        ax.plot(x, y, color=_color(j), lw=1.5, label=head)
        points = ax.scatter(x, y, color=_color(j), s=16, zorder=3)
        plot.tip(
            points,
            [
                f"{head} · {revision_label(n, t)}\ninduction {v:.1f}x"
                for n, t, v in zip(np.array(axis.names)[axis.drawn], panel.tokens[axis.drawn], y)
            ],
        )
    ax.set_yscale("log")
    _threshold_line(ax, c.thresholds.induction_threshold, f"{c.thresholds.induction_threshold:g}x circuit")
    plot.caption += _ceiling_line(ax, x, panel.revisions.ceiling_induction.to_numpy(dtype=float)[axis.drawn])
    ax.set_ylabel("induction selectivity (x baseline)")
    _use_time_axis(ax, axis)
    _mark_flagged(ax, plot, data, panel.name, axis)
    top1 = panel.revisions.top1.to_numpy(dtype=float)[axis.drawn]
    if np.isfinite(top1).any():
        twin = ax.twinx()
        twin.plot(x, top1, color="0.35", ls="-.", lw=1.2, label="top-1")
        points = twin.scatter(x, top1, color="0.35", marker="s", s=12, zorder=3)
        plot.tip(
            points,
            [
                f"{revision_label(n, t)}\ntop-1 {v:.3f}"
                for n, t, v in zip(np.array(axis.names)[axis.drawn], panel.tokens[axis.drawn], top1)
            ],
        )
        twin.set_ylim(0, 1)
        twin.set_ylabel("top-1 at the query")
        lines = ax.get_legend_handles_labels()
        extra = twin.get_legend_handles_labels()
        ax.legend(lines[0] + extra[0], lines[1] + extra[1], loc="best")
    else:
        plot.caption += " No capability was recorded (top-1 unknown), so the grey curve is absent."
        ax.legend(loc="best")
    plot.figure = fig
    return plot


def spectral_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """Per final-circuit head: PR and induction selectivity on one time axis; F5's marks."""
    c = data.config
    row, numbers = finding(data, panel.name, "F5")
    plot = Plot(
        f"spectral-{slug(panel.name)}",
        f"{panel.name}: PR and selectivity per circuit head (F5)",
        (
            f"Per final-circuit head of {panel.name}: participation ratio (blue, left axis; PR = exp of the entropy "
            "of the normalised squared singular values of the head's outputs at the query) and induction "
            f"selectivity (red, right, log; dashed: {c.thresholds.induction_threshold:g}x) on one time axis. "
            f"Dotted: the revision where PR is first elevated (>= {c.pr_rise_fraction:g} of its largest rise above "
            f"its running minimum, that rise >= {c.pr_min_rise:g}) and the one where selectivity first crosses "
            f"{c.thresholds.induction_threshold:g}x. F5 {row.status}: {row.statement}."
        ),
    )
    heads, final = trajectory_heads(panel, c)
    pr = panel.wide("pr")
    if pr.isna().all().all():
        plot.note = "no participation ratio (PR) in these results"
        return plot
    if not final or len(panel.names) < 2:
        plot.note = row.statement
        return plot
    shown = heads[:MAX_SPECTRAL_HEADS]
    if len(shown) < len(heads):
        plot.caption += f" The {len(shown)} strongest of {len(heads)} circuit heads are shown."
    axis = time_axis(panel)
    x = axis.x[axis.drawn]
    names = np.array(axis.names)[axis.drawn]
    selectivity = panel.wide("sel_induction")
    ncols = min(len(shown), 4)
    nrows = math.ceil(len(shown) / ncols)
    fig = _figure(ncols * 2.6 + 0.6, nrows * 2.3 + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, head in zip(axes.flat, shown):
        values, sel = pr[head].to_numpy()[axis.drawn], selectivity[head].to_numpy()[axis.drawn]
        ax.plot(x, values, color="C0", lw=1.3)
        points = ax.scatter(x, values, color="C0", s=12, zorder=3)
        plot.tip(points, [f"{head} · {n}\nPR {p:.3g}, induction {s:.1f}x" for n, p, s in zip(names, values, sel)])
        twin = ax.twinx()
        twin.plot(x, sel, color="C3", lw=1.1, marker="s", ms=2.5)
        twin.set_yscale("log")
        twin.axhline(c.thresholds.induction_threshold, color="C3", ls="--", lw=0.8)
        twin.set_ylabel("induction selectivity", color="C3", fontsize=7)
        _use_time_axis(ax, axis)
        _mark_flagged(ax, plot, data, panel.name, axis)
        ax.set_xlabel("")
        ax.set_ylabel("PR", color="C0")
        marks = numbers.get("heads", {}).get(head)
        if marks:
            ax.axvline(_at(axis, marks["pr_elevated"]), color="C0", ls=":", lw=1.2)
            ax.axvline(_at(axis, marks["crossing"]), color="C3", ls=":", lw=1.2)
            ax.set_title(f"{head}: PR leads by {marks['lead_revisions']:+d} revisions", fontsize=8)
        else:
            reason = numbers.get("not_measured", {}).get(head, "not measured")
            ax.set_title(f"{head}: {reason.split(': ')[-1]}", fontsize=7)  # e.g. "no measurable lead"
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_axis_off()
    fig.supxlabel(axis.label, fontsize=8)
    plot.figure = fig
    return plot


def recall_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """Recall of the final induction circuit per revision (F4)."""
    c = data.config
    row, numbers = finding(data, panel.name, "F4")
    plot = Plot(
        f"recall-{slug(panel.name)}",
        f"{panel.name}: recall of the final induction circuit (F4)",
        (
            f"Share of {panel.name}'s final induction circuit (heads >= {c.thresholds.induction_threshold:g}x at "
            f"the last revision) already >= {c.thresholds.induction_threshold:g}x at each revision; dotted: "
            f"{', '.join(f'{level:.0%}' for level in c.recall_levels)}. F4 {row.status}: {row.statement}."
        ),
    )
    heads, final = trajectory_heads(panel, c)
    if not final or len(panel.names) < 2:
        plot.note = row.statement
        return plot
    axis = time_axis(panel)
    shares = recall(panel, c).to_numpy()[axis.drawn]
    members = panel.wide("sel_induction")[heads] >= c.thresholds.induction_threshold
    fig = _figure(7.5, 3.2)
    ax = fig.add_subplot()
    x = axis.x[axis.drawn]
    ax.plot(x, shares, color="C3", lw=1.6, drawstyle="steps-post")
    points = ax.scatter(x, shares, color="C3", s=18, zorder=3)
    plot.tip(
        points,
        [
            f"{revision_label(n, t)}\nrecall {share:.0%}: "
            + (", ".join(h for h in heads if members.loc[n, h]) or "none")
            + f" >= {c.thresholds.induction_threshold:g}x"
            for n, t, share in zip(np.array(axis.names)[axis.drawn], panel.tokens[axis.drawn], shares)
        ],
    )
    for level in c.recall_levels:
        ax.axhline(level, color="0.7", ls=":", lw=0.8)
    levels = pd.DataFrame([{"level": key, **level} for key, level in numbers["levels"].items()])
    for revision, group in levels.dropna(subset=["revision"]).groupby("revision", sort=False):
        share = group.share.iloc[0]
        text = f">={', '.join(group.level)} at {revision}" + (f" ({share:.1%} of training)" if pd.notna(share) else "")
        ax.annotate(
            text,
            (_at(axis, revision), group.value.max()),
            xytext=(-4, 4),
            textcoords="offset points",
            fontsize=6.5,
            ha="right",
        )
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(-0.03, 1.08)
    ax.set_ylabel(f"final circuit >= {c.thresholds.induction_threshold:g}x")
    _use_time_axis(ax, axis)
    _mark_flagged(ax, plot, data, panel.name, axis)
    plot.figure = fig
    return plot


# --------------------------------------------------------------------------------------------
# Ablations.


def ablations_plot(data: ReportData) -> Plot:
    """Per ablation: the deciding metric under each condition, and the circuit-vs-random differential."""
    plot = Plot(
        "ablations",
        "Ablations: circuit vs matched-random heads",
        (
            "One row per ablation (model, revision, circuit, mode). Left: the deciding metric (decided_by: top-1 "
            "when the clean top-1 is >= 0.1, else the loss, unless --metric set it) with nothing ablated (clean), "
            "with the circuit ablated, with matched-random heads ablated (same layers, same count per layer; grey "
            "dots: one per seed; blue: their mean and 2.5-97.5 percentile range), with every head of the circuit's "
            "layers ablated (upper bound), and with each circuit head alone. Right: the differential, "
            "damage(circuit) - damage(random), with the ablation's bootstrap interval; the circuit is necessary "
            "when the interval lies above 0."
        ),
    )
    if data.ablations is None:
        plot.note = "no ablations in these results"
        return plot
    summary = ablation_summary(data.ablations)
    fig = _figure(8, 1.15 * len(summary) + 0.9)
    axes = fig.subplots(len(summary), 2, squeeze=False, width_ratios=[2.2, 1])
    for (left, right), r in zip(axes, summary.itertuples()):
        names = ["clean", "circuit", "random", "layers"]
        values = [r.clean_value, r.circuit_value, r.random_mean, r.layers_value]
        colors = ["k", "C3", "C0", "0.5"]
        seeds = np.asarray(r.random_seeds, dtype=float)
        left.scatter(seeds, np.full(len(seeds), 2.0) + np.linspace(-0.18, 0.18, len(seeds)), color="0.6", s=6)
        left.errorbar(
            r.random_mean,
            2,
            xerr=[[r.random_mean - r.random_low], [r.random_high - r.random_mean]],
            color="C0",
            capsize=3,
            lw=1.2,
        )
        points = left.scatter(values, [0, 1, 2, 3], color=colors, s=30, zorder=3)
        plot.tip(
            points,
            [
                f"{r.model} · {r.revision} · {r.circuit} ({r.mode})\n{name}: {r.metric} {v:.4g}"
                for name, v in zip(names, values)
            ],
        )
        singles = np.asarray(r.singles, dtype=float)
        if len(singles):
            crosses = left.scatter(singles, np.full(len(singles), 1.0), marker="x", color="C3", s=18, alpha=0.7)
            plot.tip(crosses, [f"single {h}: {r.metric} {v:.4g}" for h, v in zip(r.single_heads, singles)])
        left.set_yticks(range(4), names)
        left.set_ylim(-0.6, 3.6)
        left.set_xlabel(f"{r.metric} (deciding metric)", fontsize=7)
        left.set_title(
            f"{r.model} · {revision_label(r.revision, r.tokens)} · {r.circuit} ({r.mode})", fontsize=7.5, loc="left"
        )
        right.errorbar(
            r.differential,
            0,
            xerr=[[r.differential - r.differential_low], [r.differential_high - r.differential]],
            fmt="o",
            color="C3" if r.verdict == "necessary" else "0.4",
            capsize=4,
        )
        right.axvline(0, color="k", lw=0.8)
        right.set_yticks([])
        right.set_title(f"{r.verdict} (decided by {r.metric})", fontsize=7.5)
        right.set_xlabel(f"differential ({r.metric})", fontsize=7)
    plot.figure = fig
    return plot


def family_circuits_plot(data: ReportData, family: str) -> Plot:
    """Which heads across seeds: each seed's own final circuit per layer, and when it formed."""
    c = data.config
    row, numbers = family_finding(data, family, "circuit")
    seeds = data.families[family]
    plot = Plot(
        f"circuits-{slug(family)}",
        f"{family}: induction circuits across {len(seeds)} seeds",
        (
            f"Left: each seed's own final induction circuit (heads >= {c.thresholds.induction_threshold:g}x at that "
            "seed's last revision) counted per layer; a head's identity does not carry over between seeds, so the "
            "layers and the size are what compares. Right: when it formed: the bracket of the first revision with "
            f">= {c.timing_induction_count} induction heads (bar; dot at its upper end) and the first revision with "
            f"the whole final circuit (cross); dashed: the median over seeds. {row.statement}."
        ),
    )
    heads = {int(s): h for s, h in numbers["heads"].items()}
    if not any(heads.values()):
        plot.note = "no seed has a final induction circuit"
        return plot
    n_layers = int(max(p.heads.layer.max() for p in (data.panel(m) for m in seeds.values()))) + 1
    matrix = np.zeros((len(seeds), n_layers))
    for i, seed in enumerate(seeds):
        for head in heads[seed]:
            matrix[i, int(head[1:].split("H")[0])] += 1
    fig = _figure(7.5, 0.32 * len(seeds) + 1.6)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.6], sharey=True)
    mesh = left.pcolormesh(
        np.arange(n_layers + 1),
        np.arange(len(seeds) + 1),
        matrix,
        cmap="Reds",
        vmin=0,
        vmax=max(1, matrix.max()),
        edgecolors="white",
        linewidth=0.4,
    )
    plot.tip(
        mesh,
        [
            f"seed {seed} ({seeds[seed]}) · layer {layer}\n{int(matrix[i, layer])} circuit heads"
            + (": " + ", ".join(h for h in heads[seed] if h.startswith(f"L{layer}H")) if matrix[i, layer] else "")
            for i, seed in enumerate(seeds)
            for layer in range(n_layers)
        ],
    )
    for (i, j), v in np.ndenumerate(matrix):
        if v:
            left.text(
                j + 0.5,
                i + 0.5,
                f"{v:.0f}",
                ha="center",
                va="center",
                fontsize=6.5,
                color="white" if v > matrix.max() / 2 else "black",
            )
    step = max(1, n_layers // 12)
    left.set_xticks(np.arange(0, n_layers, step) + 0.5, [str(k) for k in range(0, n_layers, step)])
    left.set_yticks(np.arange(len(seeds)) + 0.5, [f"seed {s}" for s in seeds])
    left.set_xlabel("layer")
    stones = data.milestones.set_index(["model", "milestone"])
    name = f"induction >= {c.timing_induction_count} heads at {c.thresholds.induction_threshold:g}x"
    complete = numbers["complete_tokens"]["per_seed"]
    formed = []
    for i, (seed, model) in enumerate(seeds.items()):
        stone = stones.loc[(model, name)] if (model, name) in stones.index else None
        if stone is not None and np.isfinite(stone.tokens) and stone.tokens > 0:
            start = stone.previous_tokens if stone.previous_tokens > 0 else stone.tokens / 3
            right.plot([start, stone.tokens], [i + 0.5, i + 0.5], color="C3", lw=5, alpha=0.3, solid_capstyle="butt")
            formed.append((i, seed, model, stone))
        if str(seed) in complete and complete[str(seed)] > 0:
            right.scatter([complete[str(seed)]], [i + 0.5], marker="x", color="k", s=20, zorder=3)
    if formed:
        points = right.scatter([f[3].tokens for f in formed], [f[0] + 0.5 for f in formed], color="C3", s=18, zorder=3)
        plot.tip(
            points,
            [
                f"seed {seed} ({model}): {name}\nfirst at {revision_label(stone.revision, stone.tokens)}; "
                f"after {stone.previous_revision or 'the start'}"
                for _, seed, model, stone in formed
            ],
        )
    median = numbers["formed_tokens"]["median"]
    if median:
        right.axvline(median, color="C3", ls="--", lw=0.9)
    shown = [x for line in right.get_lines() for x in np.atleast_1d(line.get_xdata()) if x > 0]
    shown += [x for points in right.collections for x, _ in points.get_offsets()]
    if shown and max(shown) < 10 * min(shown):  # within a decade: a linear axis keeps its labels
        right.xaxis.set_major_locator(MaxNLocator(5))
        right.xaxis.set_major_formatter(FuncFormatter(lambda value, _: tokens_label(value)))
        right.set_xlabel("training tokens")
    else:
        _token_axis(right)
    right.set_ylim(0, len(seeds))
    plot.figure = fig
    return plot


# --------------------------------------------------------------------------------------------
# F7: sink onset over depth.


def onset_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """F7: the first revision at which each layer holds a sink head, over depth (beside the heatmap)."""
    c = data.config
    row, numbers = finding(data, panel.name, "F7")
    plot = Plot(
        f"onset-{slug(panel.name)}",
        f"{panel.name}: sink onset over depth (F7)",
        (
            f"For each layer at or above the F1 floor (layers 0-{c.floor_layers - 1}, shaded), the first revision "
            f"(training order) at which it holds a sink head (first-token selectivity >= "
            f"{c.thresholds.sink_threshold:g}x); 'never' at the right. Red stars: the earliest layers, dotted red: "
            "their median layer; green band: the middle of the depth; dashed: the median onset. F7 "
            f"{row.status}: {row.statement}."
        ),
        beside=True,
    )
    onset = {int(layer): i for layer, i in numbers.get("onset", {}).items()}
    if not onset or "median_onset" not in numbers:
        plot.note = row.statement
        return plot
    n, n_layers = numbers["n_revisions"], numbers["n_layers"]
    earliest = set(numbers["earliest_layers"])
    fig = _figure(3.6, max(2.8, 0.2 * n_layers + 1.6))
    ax = fig.add_subplot()
    ax.axhspan(0, c.floor_layers, color="0.85", lw=0)
    ax.axhline(c.floor_layers, color="C2", ls="--", lw=1.4)
    low, high = numbers["middle"]
    ax.axhspan(low + 0.5, high + 0.5, color="C2", alpha=0.12, lw=0)  # layer l is drawn at l + 0.5
    ax.axhline(numbers["median_earliest_layer"] + 0.5, color="C3", ls=":", lw=1.2)
    layers = sorted(onset)
    x, y = np.array([onset[layer] for layer in layers], dtype=float), np.array(layers, dtype=float) + 0.5
    ax.plot(x, y, color="0.6", lw=0.8, zorder=1)
    tokens = dict(zip(panel.names, panel.tokens))
    for chosen, style in (
        ([layer for layer in layers if layer in earliest], {"marker": "*", "s": 90, "color": "C3"}),
        ([layer for layer in layers if layer not in earliest and onset[layer] < n], {"s": 22, "color": "k"}),
        ([layer for layer in layers if onset[layer] >= n], {"marker": "x", "s": 22, "color": "0.5"}),
    ):
        if not chosen:
            continue
        points = ax.scatter([onset[layer] for layer in chosen], [layer + 0.5 for layer in chosen], zorder=3, **style)
        plot.tip(
            points,
            [
                f"layer {layer}: "
                + (
                    f"first sink head at {revision_label(panel.names[onset[layer]], tokens[panel.names[onset[layer]]])}"
                    if onset[layer] < n
                    else "never holds a sink head"
                )
                for layer in chosen
            ],
        )
    ax.axvline(numbers["median_onset"], color="k", ls="--", lw=0.9)
    step = max(1, math.ceil((n + 1) / 12))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks + [n], [panel.names[i] for i in ticks] + ["never"], rotation=45, ha="right", fontsize=6.5)
    ax.set_xlim(-0.5, n + 0.5)
    ax.set_ylim(0, n_layers)
    every = max(1, n_layers // 16)
    ax.set_yticks(np.arange(0, n_layers, every) + 0.5, [str(layer) for layer in range(0, n_layers, every)])
    ax.set_xlabel("first revision with a sink head")
    ax.set_ylabel("layer")
    plot.figure = fig
    return plot


# --------------------------------------------------------------------------------------------
# F8: causal emergence.


def causal_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """F8: the final circuit's ablation differential and its interval over the revisions ablated,
    against the circuit's selectivity at every revision screened."""
    c = data.config
    row, numbers = finding(data, panel.name, "F8")
    circuit = numbers.get("circuit", "final:induction")
    plot = Plot(
        f"causal-{slug(panel.name)}",
        f"{panel.name}: when the final circuit becomes necessary (F8)",
        (
            f"Points (left axis): the differential of ablating {circuit} (the set's heads at the last revision, "
            "the same heads at each revision ablated), damage(circuit) - damage(matched-random), with its 95% "
            "bootstrap interval, in each ablation's deciding metric (top-1, or the loss where the clean top-1 is "
            "below 0.1: hover a point); red: necessary (interval above 0). Line (right axis, log): the median "
            "selectivity of those heads at every revision screened; dotted: the threshold. Red band: the bracket "
            "of the first necessary revision; blue band: the bracket of the induction milestone "
            f"(>= {c.timing_induction_count} heads at {c.thresholds.induction_threshold:g}x). x: revisions in "
            f"training order. F8 {row.status}: {row.statement}."
        ),
    )
    if not numbers.get("revisions"):
        plot.note = row.statement
        return plot
    n = len(panel.names)
    fig = _figure(6.4, 2.9)
    ax = fig.add_subplot()
    for key, color in (("necessary", "C3"), ("formed", "C0")):
        bracket = numbers.get(key)
        if bracket:
            ax.axvspan(bracket["previous_index"] + 0.02, bracket["index"], color=color, alpha=0.12, lw=0)
    x = np.asarray(numbers["index"], dtype=float)
    point = np.asarray(numbers["differential"], dtype=float)
    low, high = np.asarray(numbers["differential_low"]), np.asarray(numbers["differential_high"])
    necessary = np.array([v == "necessary" for v in numbers["verdicts"]])
    for chosen, color in ((necessary, "C3"), (~necessary, "0.4")):
        if chosen.any():
            ax.errorbar(
                x[chosen],
                point[chosen],
                yerr=[point[chosen] - low[chosen], high[chosen] - point[chosen]],
                fmt="o",
                color=color,
                capsize=3,
                ms=4,
                zorder=3,
            )
    points = ax.scatter(x, point, s=0.01, zorder=4)
    plot.tip(
        points,
        [
            f"{revision}: differential {d:+.3g} [{lo:+.3g}, {hi:+.3g}] ({metric}), {verdict}"
            for revision, d, lo, hi, metric, verdict in zip(
                numbers["revisions"], point, low, high, numbers["decided_by"], numbers["verdicts"]
            )
        ],
    )
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("differential (circuit - random)")
    column = SELECTIVITY_OF_SET.get(circuit.removeprefix("final:"))
    heads = [h for h in numbers.get("circuit_heads", []) if column]
    if heads:
        wide = panel.wide(column).reindex(columns=heads)
        twin = ax.twinx()
        median = wide.median(axis=1).clip(lower=1e-3).to_numpy(dtype=float)
        twin.plot(np.arange(n), median, color="C1", lw=1.2)
        twin.set_yscale("log")
        twin.set_ylabel(f"median {column} of the circuit", color="C1")
        if column == "sel_induction":
            twin.axhline(c.thresholds.induction_threshold, color="C1", ls=":", lw=1)
    step = max(1, math.ceil(n / 12))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [panel.names[i] for i in ticks], rotation=45, ha="right", fontsize=6.5)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_xlabel("revision (training order)")
    plot.figure = fig
    return plot


# --------------------------------------------------------------------------------------------
# Direct logit attribution of the induction heads, beside their selectivity.


def dla_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """Each induction head's direct logit attribution to the answer over training (beside the
    induction selectivity figure, for the same heads)."""
    heads, _ = trajectory_heads(panel, data.config)
    plot = Plot(
        f"dla-{slug(panel.name)}",
        f"{panel.name}: direct logit attribution of the induction heads",
        (
            "Each head's direct contribution to the answer B's logit at the query, averaged over the probe: its "
            "output through the output projection, the final norm frozen at the clean run and B's unembedding row "
            "(biases not attributed; before any final logit soft-cap; docs/definitions.md). Same heads and "
            "colours as the induction selectivity figure."
        ),
        beside=True,
    )
    if "dla" not in panel.heads or panel.heads["dla"].isna().all():
        plot.note = "no direct logit attribution stored with these screens (imported reference files hold none)"
        return plot
    axis = time_axis(panel)
    x = axis.x[axis.drawn]
    dla = panel.wide("dla")
    fig = _figure(4.2, 4)
    ax = fig.add_subplot()
    for j, head in enumerate(heads):
        y = dla[head].to_numpy(dtype=float)[axis.drawn]
        ax.plot(x, y, color=_color(j), lw=1.5, label=head)
        points = ax.scatter(x, y, color=_color(j), s=16, zorder=3)
        plot.tip(
            points,
            [
                f"{head} · {revision_label(n, t)}\nDLA {v:+.3f}"
                for n, t, v in zip(np.array(axis.names)[axis.drawn], panel.tokens[axis.drawn], y)
            ],
        )
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_ylabel("direct logit attribution to B")
    _use_time_axis(ax, axis)
    ax.legend(loc="best")
    plot.figure = fig
    return plot


# --------------------------------------------------------------------------------------------
# F9: the previous-token -> induction link.


def composition_plot(data: ReportData, panel: ModelTrajectory) -> Plot:
    """F9: the K-composition matrix of the final induction heads with every earlier head (left),
    and the strongest previous-token -> induction link over training, with the milestone (right)."""
    row, numbers = finding(data, panel.name, "F9")
    plot = Plot(
        f"composition-{slug(panel.name)}",
        f"{panel.name}: composition of the induction heads (F9)",
        (
            "Left: K-composition (Elhage et al. 2021, ||W_QK W_OV|| / (||W_QK|| ||W_OV||), from the weights) of "
            "each induction head at the last revision (rows) with every head of earlier layers (columns); blue, "
            "bold: previous-token heads; the number under a score is the change in the induction head's "
            "selectivity when that head alone is ablated, where measured. Rotary embeddings, query/key norms and "
            "input norms are not in these matrices: the scores ignore the rotation. Right: the strongest "
            "K-composition between a previous-token head and an induction head at each revision; shaded: the "
            "revisions that bracket the link. F9 "
            f"{row.status}: {row.statement}."
        ),
    )
    stored = ResultsDir(data.results_dir).read_tables(COMPOSITION)
    final = None if stored is None else stored[(stored.model == panel.name) & (stored.revision == panel.names[-1])]
    if final is None or not len(final):
        plot.note = row.statement if "revisions" not in numbers else "no induction head at the last revision"
        if "revisions" not in numbers:
            return plot
    fig = _figure(8.5, 3.4)
    left, right = fig.subplots(1, 2, width_ratios=[1.2, 1])
    if final is not None and len(final):
        receivers = list(dict.fromkeys(final.sort_values(["receiver_layer", "receiver_head"]).receiver))
        senders = list(dict.fromkeys(final.sort_values(["sender_layer", "sender_head"]).sender))
        k = final.pivot(index="receiver", columns="sender", values="k_comp").reindex(index=receivers, columns=senders)
        drop = final.pivot(index="receiver", columns="sender", values="drop").reindex(index=receivers, columns=senders)
        image = left.imshow(k.to_numpy(dtype=float), cmap="viridis", aspect="auto", vmin=0)
        fig.colorbar(image, ax=left, label="K-composition")
        previous = set(final.loc[final.sender_previous.astype(bool), "sender"])
        for i in range(len(receivers)):
            for j in range(len(senders)):
                value, lost = k.iat[i, j], drop.iat[i, j]
                text = f"{value:.2f}" + (f"\n{-lost:+.0f}x" if np.isfinite(lost) else "")
                color = "w" if value < np.nanmax(k.to_numpy(dtype=float)) / 2 else "k"
                left.text(j, i, text, ha="center", va="center", fontsize=6, color=color)
        left.set_xticks(range(len(senders)), senders, rotation=60, ha="right", fontsize=6.5)
        for tick, sender in zip(left.get_xticklabels(), senders):
            if sender in previous:
                tick.set_color("C0")
                tick.set_fontweight("bold")
        left.set_yticks(range(len(receivers)), receivers)
        left.set_xlabel("earlier head (writes)")
        left.set_ylabel("induction head (reads)")
        left.set_title(f"K-composition at {panel.names[-1]} (weights; rotary ignored)")
    else:
        left.set_axis_off()
    axis = time_axis(panel)
    strength = np.array([np.nan if v is None else v for v in numbers.get("strongest_k", [])], dtype=float)
    if len(strength) == len(axis.x):
        x, y = axis.x[axis.drawn], strength[axis.drawn]
        right.plot(x, y, color="C3", lw=1.5)
        points = right.scatter(x, y, color="C3", s=16, zorder=3)
        pairs = np.array(numbers["strongest_pair"], dtype=object)[axis.drawn]
        plot.tip(
            points,
            [
                f"{revision_label(n, t)}\n{p or 'no link'}" + (f" K {v:.3f}" if np.isfinite(v) else "")
                for n, t, p, v in zip(np.array(axis.names)[axis.drawn], panel.tokens[axis.drawn], pairs, y)
            ],
        )
        if numbers.get("revision"):
            at = _at(axis, numbers["revision"])
            before = _at(axis, numbers["previous_revision"]) if numbers.get("previous_revision") else at
            right.axvspan(before, at, color="C3", alpha=0.15, lw=0)
            right.axvline(at, color="C3", ls="--", lw=1)
        right.set_ylabel("strongest previous-token -> induction K-comp.", fontsize=7)
        _use_time_axis(right, axis)
    plot.figure = fig
    return plot


# --------------------------------------------------------------------------------------------
# The registry of figures, in page order.


@dataclass(frozen=True)
class FigureKind:
    """How to draw one figure: `draw(data)` once for the panel, `draw(data, family)` per seed family,
    or `draw(data, panel)` per model; `finding`: the finding it shows, if any."""

    draw: Callable[..., Plot]
    per: str = "model"  # "panel", "family" or "model"
    finding: str | None = None


FIGURES: Registry[FigureKind] = Registry("report figure")


def register_figure(code: str, draw: Callable[..., Plot], per: str = "model") -> FigureKind:
    """Register the figure of the finding `code`; it is drawn where the findings table holds it."""
    if per not in ("panel", "family", "model"):
        raise ValueError(f"per must be panel, family or model (got {per!r})")
    return FIGURES.add(code, FigureKind(draw, per, code))


FIGURES.add("sink-fraction", FigureKind(sink_fraction_plot, "panel"))
register_figure("F3", milestones_plot, "panel")
FIGURES.add("circuits", FigureKind(family_circuits_plot, "family"))
register_figure("F1", sink_layers_plot)
register_figure("F7", onset_plot)
FIGURES.add("labels", FigureKind(labels_plot))
FIGURES.add("induction", FigureKind(induction_plot))
FIGURES.add("dla", FigureKind(dla_plot))
register_figure("F9", composition_plot)
register_figure("F5", spectral_plot)
register_figure("F4", recall_plot)
register_figure("F8", causal_plot)


def _drawn(data: ReportData, per: str) -> list[FigureKind]:
    held = set(data.findings.finding)
    kinds = [FIGURES.get(key) for key in FIGURES]
    return [k for k in kinds if k.per == per and (k.finding is None or k.finding in held)]


def panel_plots(data: ReportData) -> list[Plot]:
    """The panel-wide figures, then each seed family's."""
    return [kind.draw(data) for kind in _drawn(data, "panel")] + [
        kind.draw(data, family) for family in data.families for kind in _drawn(data, "family")
    ]


def model_plots(data: ReportData, panel: ModelTrajectory) -> list[Plot]:
    return [kind.draw(data, panel) for kind in _drawn(data, "model")]
