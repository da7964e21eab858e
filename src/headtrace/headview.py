"""Looking at one head: its selectivities and labels over training, and, where the screen kept
them (`keep_patterns`), its attention on real probe examples. Torch-free.

The same view serves the terminal (`headtrace show`: `Head.text`), a notebook (`headtrace.open(DIR)`,
`result.head("L4H4")`: `_repr_html_`) and the report's head view (`report_data`, drawn by the
report's script)."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.probes import CLASS_KEYS, CLASSES
from headtrace.store import ResultsDir, training_order
from headtrace.trajectory import tokens_label

SELECTIVITIES = tuple(f"sel_{CLASS_KEYS[name]}" for name in CLASSES)  # the six, in table order
LABEL_COLORS = {
    "induction": "#d62728",
    "duplicate-token": "#ff9896",
    "previous-token": "#1f77b4",
    "first-token": "#6a3d9a",
    "self": "#2ca02c",
    "local": "#bcbd22",
    "unclassified": "#eeeeee",
}
# The marked positions of an example, as the views name them.
MARKS = ("first", "A", "B", "previous", "query")
HOW_TO_KEEP = (
    "no attention patterns are stored for it; screen with --keep-patterns 4 "
    "(keep_patterns = 4 in a panel's [screen], ScreenConfig(keep_patterns=4) in Python) to keep them"
)
HEAD_ID = re.compile(r"^L(\d+)H(\d+)$")
PatternLoader = Callable[[str, str], "dict[str, np.ndarray] | None"]


EXAMPLE_KEYS = ("examples", "input_ids", "query", "answer", "induction", "duplicate")


def query_rows(patterns: dict[str, np.ndarray]) -> np.ndarray:
    """[K, layers, heads, L]: every head's query row on each kept example (the last row of its
    window), float32."""
    last = (patterns["row_positions"] >= 0).sum(axis=1) - 1
    return np.stack([patterns["rows"][k, :, :, w] for k, w in enumerate(last)]).astype(np.float32)


def slim(patterns: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    """What the views read of stored patterns: the query rows (`query_rows`) and the kept
    examples' tokens and positions; the window rows are left behind."""
    if patterns is None:
        return None
    return {"query_rows": query_rows(patterns), **{key: patterns[key] for key in EXAMPLE_KEYS}}


def example_marks(patterns: dict[str, np.ndarray], slot: int) -> dict[str, int]:
    """The marked positions of kept example `slot` (-1 where the example has none)."""
    query = int(patterns["query"][slot])
    return {
        "first": 0,
        "A": int(patterns["duplicate"][slot]),
        "B": int(patterns["induction"][slot]),
        "previous": query - 1,
        "query": query,
    }


def _revision_text(revision: str, tokens: float) -> str:
    return f"{revision} ({tokens_label(tokens)})" if np.isfinite(tokens) else revision


@dataclass
class Head:
    """One head of one model over the stored revisions: its rows of the heads table (training
    order) and its query rows on the kept examples where patterns were stored."""

    model: str
    head_id: str
    layer: int
    head: int
    trajectory: pd.DataFrame
    patterns: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # revision -> `slim` arrays
    shape: tuple[int, int] = (0, 0)  # (layers, heads) of the model

    def at(self, revision: str | None = None) -> pd.Series:
        """The head's row at `revision` (default: the last)."""
        if revision is None:
            return self.trajectory.iloc[-1]
        found = self.trajectory.loc[self.trajectory.revision == revision]
        if found.empty:
            known = ", ".join(self.trajectory.revision)
            raise HeadtraceError(f"no revision '{revision}' of {self.model}; known: {known}")
        return found.iloc[0]

    def rows(self, revision: str) -> np.ndarray | None:
        """[K, L] query rows at `revision`, or None where no patterns were stored."""
        stored = self.patterns.get(revision)
        return None if stored is None else stored["query_rows"][:, self.layer, self.head]

    def pattern_revision(self, revision: str | None = None) -> str | None:
        """The revision whose patterns are shown: `revision` when stored there, else the last one stored."""
        if revision is not None:
            return revision if revision in self.patterns else None
        stored = [r for r in self.trajectory.revision if r in self.patterns]
        return stored[-1] if stored else None

    def top_positions(self, revision: str, slot: int = 0, k: int = 5) -> pd.DataFrame:
        """The query row's k most attended positions on kept example `slot` (those of 0.001 or more),
        with their tokens and marks."""
        stored = self.patterns[revision]
        row = stored["query_rows"][slot, self.layer, self.head]
        marks = example_marks(stored, slot)
        valid = np.flatnonzero(np.isfinite(row))
        order = valid[np.argsort(-row[valid], kind="stable")][:k]
        order = order[: max(1, int((row[order] >= 0.001).sum()))]  # not the positions it ignores
        named = {pos: name for name, pos in marks.items() if pos >= 0}
        return pd.DataFrame(
            {
                "position": order,
                "token": stored["input_ids"][slot][order],
                "attention": row[order].astype(np.float64),
                "mark": [named.get(int(p), "") for p in order],
            }
        )

    # The terminal.

    def text(self, revision: str | None = None) -> str:
        """What `headtrace show` prints: the head at a revision, its top attended positions on the
        kept examples, its six selectivities and its trajectory."""
        row = self.at(revision)
        label = row.label if row.label == "unclassified" else f"{row.label} ({row.best_selectivity:.1f}x)"
        lines = [
            f"{self.head_id} of {self.model}, at {_revision_text(row.revision, row.tokens)}: {label}",
            "selectivity: " + ", ".join(f"{n} {row[c]:.1f}x" for n, c in zip(CLASSES, SELECTIVITIES)),
            "",
        ]
        shown = self.pattern_revision(revision)
        if shown is None:
            where = f"at {revision}" if revision is not None and self.patterns else ""
            lines.append(f"attention: {where + ': ' if where else ''}{HOW_TO_KEEP}")
        else:
            stored = self.patterns[shown]
            lines.append(f"attention of the query row at {shown} ({len(stored['examples'])} kept examples):")
            for slot, example in enumerate(stored["examples"]):
                marks = example_marks(stored, slot)
                where = ", ".join(f"{name} {pos}" for name, pos in marks.items() if pos >= 0)
                lines.append(f"  example {int(example)} ({where}):")
                for top in self.top_positions(shown, slot).itertuples():
                    mark = f"  {top.mark}" if top.mark else ""
                    lines.append(f"    position {top.position:>4}  token {top.token:>7}  {top.attention:6.3f}{mark}")
        lines += ["", "trajectory:"]
        header = f"  {'revision':<22} {'label':<16}" + "".join(f"{CLASS_KEYS[n][:9]:>10}" for n in CLASSES)
        lines.append(header)
        for r in self.trajectory.itertuples():
            values = "".join(f"{getattr(r, c):>9.1f}x" for c in SELECTIVITIES)
            kept = " *" if r.revision in self.patterns else ""
            lines.append(f"  {_revision_text(r.revision, r.tokens):<22} {r.label:<16}{values}{kept}")
        if self.patterns:
            lines.append("  (* attention patterns stored)")
        return "\n".join(lines)

    # A notebook.

    def _repr_html_(self) -> str:
        return f'<div class="headtrace-head">{head_html(self)}</div>'


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def strip_html(row: np.ndarray, ids: np.ndarray, marks: dict[str, int]) -> str:
    """One query row as a strip of tokens up to the query, each shaded by its attention (relative
    to the row's largest), the marked positions outlined and named."""
    query = marks["query"]
    top = float(np.nanmax(row[: query + 1])) or 1.0
    named = {pos: name for name, pos in marks.items() if pos >= 0}
    cells = []
    for pos in range(query + 1):
        value = float(row[pos])
        mark = named.get(pos)
        style = f"background:rgba(214,39,40,{value / top:.3f});padding:1px 2px;margin:1px;display:inline-block"
        if mark:
            style += ";outline:2px solid #1f77b4"
        title = f"position {pos}, token {int(ids[pos])}: {value:.3f}" + (f" ({mark})" if mark else "")
        text = f"{int(ids[pos])}" + (f"<sup>{_e(mark)}</sup>" if mark else "")
        cells.append(f'<span title="{_e(title)}" style="{style}">{text}</span>')
    return '<div style="font:11px monospace;line-height:1.9">' + "".join(cells) + "</div>"


def head_html(head: Head) -> str:
    """A head as HTML: its numbers at the last revision, its query row on the first kept example at
    every revision with stored patterns (small multiples) and its trajectory table."""
    row = head.at()
    parts = [
        f"<h4>{_e(head.head_id)} of {_e(head.model)}: {_e(row.label)}</h4>",
        "<p>selectivity at "
        + _e(_revision_text(row.revision, row.tokens))
        + ": "
        + ", ".join(f"{_e(n)} {row[c]:.1f}x" for n, c in zip(CLASSES, SELECTIVITIES))
        + "</p>",
    ]
    stored = [r for r in head.trajectory.revision if r in head.patterns]
    if not stored:
        parts.append(f"<p>Attention: {_e(HOW_TO_KEEP)}.</p>")
    else:
        first = head.patterns[stored[0]]
        marks = example_marks(first, 0)
        parts.append(
            f"<p>Query row on probe example {int(first['examples'][0])} at each revision: shade = attention "
            "(relative to the row's largest); outlined: "
            + ", ".join(f"{n} ({p})" for n, p in marks.items() if p >= 0)
            + ".</p>"
        )
        for revision in stored:
            rows = head.rows(revision)
            ids = head.patterns[revision]["input_ids"][0]
            parts.append(
                f'<div class="headtrace-revision" data-revision="{_e(revision)}"><b>{_e(revision)}</b>'
                f"{strip_html(rows[0], ids, example_marks(head.patterns[revision], 0))}</div>"
            )
    table = head.trajectory[["revision", "tokens", "label", *SELECTIVITIES]].copy()
    parts.append(table.to_html(index=False, float_format=lambda v: f"{v:.3g}", classes="headtrace-trajectory"))
    return "".join(parts)


def grid_html(heads: pd.DataFrame, shape: tuple[int, int]) -> str:
    """The label grid of one revision as an HTML table: layers as rows (0 on top), heads as columns."""
    n_layers, n_heads = shape
    labels = {(int(r.layer), int(r.head)): r for r in heads.itertuples()}
    rows = ["<tr><th></th>" + "".join(f"<th>H{h}</th>" for h in range(n_heads)) + "</tr>"]
    for layer in range(n_layers):
        cells = []
        for h in range(n_heads):
            r = labels.get((layer, h))
            label = r.label if r is not None else "unclassified"
            title = f"L{layer}H{h}: {label}" + (f" ({r.best_selectivity:.1f}x)" if r is not None else "")
            cells.append(
                f'<td title="{_e(title)}" data-head="L{layer}H{h}" '
                f'style="background:{LABEL_COLORS[label]};width:18px;height:14px"></td>'
            )
        rows.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    legend = " ".join(
        f'<span style="background:{c};padding:0 6px;margin-right:4px">&nbsp;</span>{_e(n)}'
        for n, c in LABEL_COLORS.items()
    )
    return f'<table class="headtrace-grid">{"".join(rows)}</table><p style="font-size:11px">{legend}</p>'


class Results:
    """Screen results for a notebook: the heads and runs tables (pandas, as `headtrace.store`
    reads them), each model's last label grid, and any head (`head("L4H4")`) with its patterns."""

    def __init__(self, heads: pd.DataFrame, runs: pd.DataFrame, patterns: PatternLoader, where: str = ""):
        self.heads = training_order(heads, ("layer", "head"))
        self.runs = training_order(runs)
        self.read_patterns = patterns  # (model, revision) -> stored arrays or None
        self.where = where

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(self.runs.model))

    def head(self, head_id: str, model: str | None = None) -> Head:
        """One head over the stored revisions; `model` is needed where several models are stored."""
        models = self.models
        if model is None:
            if len(models) > 1:
                raise HeadtraceError(
                    f"'{self.where or 'the results'}' holds {len(models)} models ({', '.join(models)}); "
                    "name one with --model (model= in Python)"
                )
            model = models[0]
        elif model not in models:
            raise HeadtraceError(f"no model '{model}' in {self.where or 'the results'}; known: {', '.join(models)}")
        match = HEAD_ID.match(head_id.strip())
        heads = self.heads.loc[self.heads.model == model]
        shape = (int(heads.layer.max()) + 1, int(heads["head"].max()) + 1)
        if not match or not (int(match[1]) < shape[0] and int(match[2]) < shape[1]):
            raise HeadtraceError(
                f"no head '{head_id}' in {model}: write L<layer>H<head> with layer < {shape[0]} and head < {shape[1]}"
            )
        layer, index = int(match[1]), int(match[2])
        trajectory = heads.loc[(heads.layer == layer) & (heads["head"] == index)].reset_index(drop=True)
        patterns = {}
        for revision in trajectory.revision:
            stored = slim(self.read_patterns(model, revision))
            if stored is not None:
                patterns[revision] = stored
        return Head(model, f"L{layer}H{index}", layer, index, trajectory, patterns, shape)

    def _featured(self, model: str) -> str | None:
        """The head a notebook shows first: the strongest induction-circuit head at the last
        revision, else the strongest labelled one, else none."""
        heads = self.heads.loc[self.heads.model == model]
        last = heads.loc[heads.revision == heads.revision.iloc[-1]]
        circuit = last.loc[last.induction_circuit].sort_values("sel_induction", ascending=False)
        labelled = last.loc[last.label != "unclassified"].sort_values("best_selectivity", ascending=False)
        chosen = circuit if not circuit.empty else labelled
        return None if chosen.empty else str(chosen.head_id.iloc[0])

    def _repr_html_(self) -> str:
        parts = [
            f"<div class='headtrace-results'><h3>headtrace results{': ' + _e(self.where) if self.where else ''}</h3>"
        ]
        for model in self.models:
            runs = self.runs.loc[self.runs.model == model]
            heads = self.heads.loc[self.heads.model == model]
            last = runs.iloc[-1]
            final = heads.loc[heads.revision == last.revision]
            circuit = list(final.loc[final.induction_circuit].sort_values("sel_induction", ascending=False).head_id)
            shape = (int(heads.layer.max()) + 1, int(heads["head"].max()) + 1)
            parts.append(
                f"<h4>{_e(model)}</h4><ul class='headtrace-summary'>"
                f"<li>{len(runs)} revision(s), last {_e(_revision_text(last.revision, last.tokens))}</li>"
                f"<li>{shape[0]} layers x {shape[1]} heads</li>"
                f"<li>induction circuit at the last revision: {_e(', '.join(circuit) or 'none')}</li>"
                f"<li>top-1 {float(last.top1):.3f}, sink fraction {float(last.sink_fraction):.3f}</li></ul>"
                f"<p>Head labels at {_e(last.revision)} (hover a cell):</p>{grid_html(final, shape)}"
            )
            featured = self._featured(model)
            if featured is not None:
                parts.append(
                    f"<p>Head view of {_e(featured)} (any head: <code>.head(&quot;L0H0&quot;)</code>):</p>"
                    + head_html(self.head(featured, model))
                )
        parts.append("<p>Tables: <code>.heads</code>, <code>.runs</code> (pandas).</p></div>")
        return "".join(parts)


def open_results(results_dir: str | Path) -> Results:
    """A results folder for a notebook (exported as `headtrace.open`)."""
    store = ResultsDir(results_dir)
    heads, runs = store.read()
    return Results(heads, runs, store.read_patterns, str(results_dir))


# --------------------------------------------------------------------------------------------
# The report's head view: the patterns of the heads worth a look, packed small.


def _packed(row: np.ndarray, query: int) -> list:
    """A query row up to the query as [largest value, base64 of uint8 shares of it] (what the
    report's script decodes): a 256-token row takes ~350 characters."""
    values = np.nan_to_num(row[: query + 1].astype(np.float64))
    top = float(values.max()) or 1.0
    quantised = np.round(values / top * 255).astype(np.uint8)
    return [round(top, 4), base64.b64encode(quantised.tobytes()).decode()]


def _number(value) -> float | None:
    """A selectivity for JSON: rounded, None where unknown."""
    return round(float(value), 2) if np.isfinite(value) else None


def report_data(results: Results, model: str) -> dict | None:
    """One model's head view data for the report: every head labelled or in a circuit at some
    revision, its label and six selectivities per revision and its packed query rows where
    patterns were stored; the kept examples' tokens and marks. None without stored patterns."""
    heads = results.heads.loc[results.heads.model == model]
    revisions = list(dict.fromkeys(heads.revision))
    stored = {r: slim(results.read_patterns(model, r)) for r in revisions}
    stored = {r: p for r, p in stored.items() if p is not None}
    if not stored:
        return None
    worth = heads.loc[(heads.label != "unclassified") | heads.induction_circuit | heads.previous_circuit]
    first = next(iter(stored.values()))
    examples = [
        {
            "example": int(e),
            "ids": first["input_ids"][s][: int(first["query"][s]) + 1].tolist(),
            **example_marks(first, s),
        }
        for s, e in enumerate(first["examples"])
    ]
    tokens = dict(zip(results.runs.loc[results.runs.model == model].revision, results.runs.tokens))
    view = {"model": model, "revisions": [], "examples": examples, "heads": {}}
    view["revisions"] = [{"name": r, "label": _revision_text(r, tokens.get(r, np.nan))} for r in revisions]
    for head_id, rows in worth.groupby("head_id", sort=False):
        layer, index = int(rows.layer.iloc[0]), int(rows["head"].iloc[0])
        everywhere = heads.loc[heads.head_id == head_id].set_index("revision")
        view["heads"][head_id] = {
            "labels": [str(everywhere.label.get(r, "")) for r in revisions],
            "sel": [[_number(everywhere[c].get(r, np.nan)) for c in SELECTIVITIES] for r in revisions],
            "rows": {
                r: [_packed(q, int(p["query"][s])) for s, q in enumerate(p["query_rows"][:, layer, index])]
                for r, p in stored.items()
            },
        }
    return view
