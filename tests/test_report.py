"""`headtrace report`: the data behind each figure checked against independent counts, the files
written, and the page opened in a real headless chromium (no console errors, every figure drawn,
hover shows a head's numbers). Screenshots go to test-artifacts/."""

from __future__ import annotations

import html
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_panels import (
    ABLATED,
    PYTHIA,
    REFERENCE,
    TINY_PANEL,
    UNFINISHED,
    ablation_rows,
    reference_results,
    tiny_results,
)

from headtrace.cli import main
from headtrace.reference import import_reference
from headtrace.report import build_report
from headtrace.report.data import (
    ablation_summary,
    grid_revisions,
    label_grid,
    load,
    model_gaps,
    panel_gaps,
    sink_curve,
    sink_layer_matrix,
    timeline,
    trajectory_heads,
)
from headtrace.report.figures import LABEL_COLORS, Plot, labels_plot, milestone_labels
from headtrace.report.page import render
from headtrace.store import slug

STEPS = [1, 4, 16, 64, 256, 512, 3000, 10000, 38000, 143000]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
# Playwright starts every browser with a fresh temporary --user-data-dir and --headless.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def raw_screen(step: int) -> dict[str, dict[str, float]]:
    return json.loads((REFERENCE / f"screen_step{step}.json").read_text())["all_head_selectivity"]


def layer_head(key: str) -> tuple[int, int]:
    layer, head = key.split("_")
    return int(layer[1:]), int(head[1:])


@pytest.fixture(scope="module")
def pythia_dir(tmp_path_factory) -> Path:
    return reference_results(tmp_path_factory.mktemp("pythia"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return tiny_results(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def pythia(pythia_dir):
    return load(pythia_dir)


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load(tiny_dir)


# --------------------------------------------------------------------------------------------
# The data behind each figure.


def test_sink_layer_matrix_is_the_per_layer_count(pythia):
    matrix = sink_layer_matrix(pythia.panel(PYTHIA))
    assert list(matrix.columns) == [f"step{s}" for s in STEPS] and list(matrix.index) == list(range(16))
    for step in STEPS:
        expected = Counter(layer_head(k)[0] for k, v in raw_screen(step).items() if v["first-token"] >= 30)
        assert matrix[f"step{step}"].to_dict() == {layer: expected[layer] for layer in range(16)}
    assert matrix.loc[0:3].to_numpy().sum() == 0  # the F1 floor, and no sink head in layers 2-3 either


def test_sink_curve_is_sink_heads_over_all_heads(pythia):
    curve = sink_curve(pythia.panel(PYTHIA))
    counts = [sum(v["first-token"] >= 30 for v in raw_screen(s).values()) for s in STEPS]
    assert list(curve.screen_sink) == counts == [0] * 6 + [14, 38, 59, 74]
    assert list(curve.screen_sink_fraction) == pytest.approx([c / 128 for c in counts])


def test_label_grid_is_each_heads_best_class(pythia):
    panel = pythia.panel(PYTHIA)
    for step in STEPS:
        grid = label_grid(panel, f"step{step}")
        assert grid.shape == (16, 8)
        for key, values in raw_screen(step).items():
            best = max(values, key=values.get)
            assert grid.loc[layer_head(key)] == (best if values[best] >= 30 else "unclassified"), (step, key)


def test_label_grid_tips_follow_the_cells(pythia):
    """The page's hover texts are listed in the mesh's drawing order: row-major over (layer, head)."""
    plot = labels_plot(pythia, pythia.panel(PYTHIA))
    tips = next(t for t in plot.tips.values() if "step143000" in t[0])
    grid = label_grid(pythia.panel(PYTHIA), "step143000")
    for layer in range(16):
        for head in range(8):
            text = tips[layer * 8 + head]
            assert text.startswith(f"L{layer}H{head} · step143000") and f"label: {grid.loc[layer, head]}" in text
    assert "label: induction (181.6x)" in tips[4 * 8 + 4]


def test_grid_revisions_keep_first_and_last(pythia):
    panel = pythia.panel(PYTHIA)
    assert grid_revisions(panel) == [f"step{s}" for s in STEPS]
    assert grid_revisions(panel, 4) == ["step1", "step64", "step3000", "step143000"]


def test_trajectory_heads_final_circuit_or_strongest(pythia, tiny):
    assert trajectory_heads(pythia.panel(PYTHIA), pythia.config) == (["L4H4", "L7H1", "L7H0"], True)
    heads = pd.concat([pd.read_parquet(p) for p in (tiny.results_dir / "heads").glob("tiny--gpt-neox@seed[012]*")])
    strongest = heads.groupby("head_id").sel_induction.max().sort_values(ascending=False).index[:3]
    assert trajectory_heads(tiny.panel("tiny/gpt-neox"), tiny.config) == (list(strongest), False)


def test_timeline_brackets_and_labels(pythia):
    stones = timeline(pythia).set_index("milestone")
    assert set(stones.lane) == {"induction", "sink"}
    first = stones.loc["induction >= 3 heads at 50x"]
    assert (first.revision, first.previous_revision) == ("step3000", "step512")
    assert stones.loc["sink fraction >= 50%", "revision"] == "step143000"
    assert pd.isna(stones.loc["sink fraction >= 70%", "revision"])  # 57.8% at the last revision
    labels = milestone_labels(stones.reset_index().dropna(subset=["revision"]))
    assert dict(zip(labels.revision + " " + labels.unit, labels.label)) == {
        "step3000  heads": ">=3, 5 heads",
        "step3000 ": ">=10%",
        "step38000 ": ">=30%",
        "step143000 ": ">=50%",
    }


def test_ablation_summary_against_the_rows():
    rows = ablation_rows(*ABLATED, seeds=7)
    summary = ablation_summary(rows).iloc[0]
    seeds = rows.loc[rows.condition == "random", "loss"].to_numpy()
    assert summary.metric == "loss" and summary.circuit == rows.circuit.iloc[0]  # its name, not a number
    assert (summary.clean_value, summary.circuit_value, summary.layers_value) == (9.0, 9.4, 9.9)
    assert summary.random_mean == pytest.approx(seeds.mean())
    assert (summary.random_low, summary.random_high) == pytest.approx(tuple(np.percentile(seeds, [2.5, 97.5])))
    assert list(summary.singles) == [9.2, 9.2] and summary.single_heads == ["L1H0", "L1H2"]
    assert (summary.differential_low, summary.differential_high, summary.verdict) == (0.22, 0.38, "necessary")


def test_what_is_missing(pythia, tiny):
    assert any("no ablations" in gap for gap in panel_gaps(pythia))
    pythia_gaps = " ".join(model_gaps(pythia.panel(PYTHIA), pythia.config))
    assert "no capability" in pythia_gaps and "no null selectivity" in pythia_gaps
    assert "no participation" not in pythia_gaps
    gaps = " ".join(panel_gaps(tiny))
    assert f"{slug(UNFINISHED[0])}@{UNFINISHED[1]}" in gaps and "tiny/llama (1)" in gaps and "no ablations" not in gaps
    llama = " ".join(model_gaps(tiny.panel("tiny/llama"), tiny.config))
    assert "one revision (seed0)" in llama and "tokens unknown for seed0" in llama


def test_inline_svg_prefixes_ids_and_carries_tips(tmp_path):
    from matplotlib.figure import Figure

    plot = Plot("demo", "demo", "demo", figure=Figure(figsize=(2, 2)))
    ax = plot.figure.add_subplot()
    plot.tip(ax.pcolormesh(np.arange(6).reshape(2, 3)), [f"cell {i}" for i in range(6)])
    plot.tip(ax.scatter([0.5, 1.5], [0.5, 1.5]), ["a", "b"])
    svg = render(plot, tmp_path)
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert ids and all(i.startswith("demo-") for i in ids) and len(ids) == len(set(ids))
    references = re.findall(r"url\(#([^)]+)\)", svg) + re.findall(r'href="#([^"]+)"', svg)
    assert references and set(references) <= set(ids)
    assert 'data-tips="[&quot;cell 0&quot;, ' in svg
    assert (tmp_path / "demo.png").stat().st_size > 0 and (tmp_path / "demo.svg").read_text().startswith("<?xml")


# --------------------------------------------------------------------------------------------
# The report on disk and in a browser.


def drawn_keys(model: str, spectral: bool, onset: bool = False, dla: bool = False) -> set[str]:
    """The figures drawn for one model; `dla`: screened with the direct logit attribution (not the
    study's reference files)."""
    keys = {f"sink-layers-{slug(model)}", f"labels-{slug(model)}", f"induction-{slug(model)}"}
    keys |= {f"onset-{slug(model)}"} if onset else set()
    keys |= {f"dla-{slug(model)}"} if dla else set()
    return keys | ({f"spectral-{slug(model)}", f"recall-{slug(model)}"} if spectral else set())


@pytest.fixture(scope="module")
def pythia_report(pythia_dir) -> Path:
    stale = pythia_dir / "report" / "figures" / "gone.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"from an earlier report")
    return build_report(pythia_dir)


@pytest.fixture(scope="module")
def tiny_report(tiny_dir) -> Path:
    return build_report(tiny_dir, tiny_dir / "elsewhere")


def test_report_files(pythia_report, tiny_report, tiny_dir):
    figures = pythia_report.parent / "figures"
    expected = {"sink-fraction", "milestones"} | drawn_keys(PYTHIA, spectral=True, onset=True)
    assert {p.stem for p in figures.glob("*.png")} == {p.stem for p in figures.glob("*.svg")} == expected
    assert tiny_report == tiny_dir / "elsewhere" / "index.html"
    tiny_figures = {p.stem for p in (tiny_report.parent / "figures").glob("*.png")}
    assert tiny_figures == {"sink-fraction", "ablations"} | drawn_keys("tiny/gpt-neox", False, dla=True) | drawn_keys(
        "tiny/llama", False, dla=True
    )
    for page in (pythia_report, tiny_report):
        text = page.read_text()
        assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", text)  # nothing fetched
        assert "@import" not in text and "url(http" not in text


def test_the_report_draws_the_probes_ceiling(tiny_report, tiny_dir):
    """The tiny panel's probe (T = 64, reference baseline) caps induction near 62x: the induction
    figure draws that ceiling and the runs table lists it."""
    from headtrace.probes import selectivity_ceilings
    from headtrace.screen import ScreenConfig
    from headtrace.probes import build_probe

    ceiling = selectivity_ceilings(build_probe(ScreenConfig.of(n_examples=16, seq_len=64).probe, lambda: None))[
        "induction"
    ]
    text = html.unescape(tiny_report.read_text())
    assert f"the probe's ceiling ({ceiling:.0f}x)" in text
    assert "induction ceiling" in text and f"{ceiling:.1f}x" in text
    svg = (tiny_report.parent / "figures" / f"induction-{slug('tiny/gpt-neox')}.svg").read_text()
    assert "ceiling" in svg  # the legend entry of the drawn line


def test_cli_report_of_one_revision_and_bad_input(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    import_reference([REFERENCE / "screen_step3000.json"], results)
    monkeypatch.setattr(sys, "argv", ["headtrace", "report", str(results), "--out", str(tmp_path / "r")])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    text = (tmp_path / "r" / "index.html").read_text()
    assert "one revision (step3000)" in text and "Not drawn: one revision: a trajectory needs at least two" in text
    assert "report written" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["headtrace", "report", str(tmp_path / "empty")])
    with pytest.raises(SystemExit) as done:
        main()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert done.value.code == 2 and len(errors) == 1 and "no results" in errors[0]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run scripts/ensure-chromium.sh (make test does)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def open_page(browser, index: Path):
    """The page, loaded from disk, with every console error, page error and request recorded."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log = {"errors": [], "requests": []}
    page.on("console", lambda message: message.type == "error" and log["errors"].append(message.text))
    page.on("pageerror", lambda error: log["errors"].append(str(error)))
    page.on("request", lambda request: log["requests"].append(request.url))
    page.goto(index.as_uri(), wait_until="load")
    return page, log


FIGURE_STATE = """() => Array.from(document.querySelectorAll("figure.plot")).map((f) => {
  const svg = f.querySelector("svg");
  const box = (svg || f.querySelector(".gap")).getBoundingClientRect();
  return {id: f.id, width: box.width, height: box.height, drawn: !!svg,
          shapes: svg ? svg.querySelectorAll("path, use, text").length : 0,
          images: svg ? Array.from(svg.querySelectorAll("image")).map((i) => i.getBBox().width) : [],
          gap: f.querySelector(".gap") ? f.querySelector(".gap").textContent : null};
})"""

# The center of shape `index` of the tip group (in figure `figure`) whose first text contains `marker`.
SHAPE_CENTER = """([figure, marker, index]) => {
  const group = Array.from(document.querySelectorAll(`#${figure} [data-tips]`))
    .find((g) => JSON.parse(g.dataset.tips)[0].includes(marker));
  const shapes = Array.from(group.querySelectorAll("path, use")).filter((s) => !s.closest("defs"));
  shapes[index].scrollIntoView({block: "center"});
  const box = shapes[index].getBoundingClientRect();
  return {x: box.x + box.width / 2, y: box.y + box.height / 2, fill: getComputedStyle(shapes[index]).fill};
}"""


def hover(page, figure: str, marker: str, index: int) -> tuple[str, str]:
    """Move the mouse onto a shape; returns the tip's text and the shape's fill."""
    target = page.evaluate(SHAPE_CENTER, [figure, marker, index])
    page.mouse.move(target["x"], target["y"])
    tip = page.locator("#tip")
    assert tip.is_visible()
    return tip.inner_text(), target["fill"]


def check_page(page, log, index: Path, drawn: set[str], gaps: dict[str, str]) -> None:
    figures = {f["id"].removeprefix("fig-"): f for f in page.evaluate(FIGURE_STATE)}
    assert {k for k, f in figures.items() if f["drawn"]} == drawn
    for key, state in figures.items():
        assert state["width"] > 100 and state["height"] > 20, key
        if state["drawn"]:
            assert state["shapes"] > 30 and all(width > 0 for width in state["images"]), key
    assert {k: figures[k]["gap"] for k in gaps} == {k: f"Not drawn: {why}" for k, why in gaps.items()}
    assert page.evaluate("Array.from(document.images).every((i) => i.complete && i.naturalWidth > 0)")
    assert log["errors"] == []
    assert [url for url in log["requests"] if not url.startswith("data:")] == [index.as_uri()]


def test_pythia_report_in_chromium(browser, pythia_report):
    page, log = open_page(browser, pythia_report)
    drawn = {"sink-fraction", "milestones"} | drawn_keys(PYTHIA, spectral=True, onset=True)
    gaps = {
        "ablations": "no ablations in these results",
        f"dla-{slug(PYTHIA)}": "no direct logit attribution stored with these screens "
        "(imported reference files hold none)",
    }
    check_page(page, log, pythia_report, drawn, gaps)
    assert not page.locator("#tip").is_visible()
    labels = f"fig-labels-{slug(PYTHIA)}"
    text, fill = hover(page, labels, "step143000", 4 * 8 + 4)
    assert text.startswith("L4H4 · step143000 (299.9B)") and "label: induction (181.6x)" in text
    assert fill == "rgb(214, 39, 40)" == "rgb({}, {}, {})".format(*bytes.fromhex(LABEL_COLORS["induction"][1:]))
    text, _ = hover(page, labels, "step3000", 5 * 8 + 7)
    assert text.startswith("L5H7 · step3000") and "induction 164.4x" in text
    text, _ = hover(page, f"fig-induction-{slug(PYTHIA)}", "L7H0 ·", 9)
    assert text == "L7H0 · step143000 (299.9B)\ninduction 112.6x"
    text, _ = hover(page, f"fig-sink-layers-{slug(PYTHIA)}", "layer 0", 4 * 10 + 9)
    assert text == "layer 4 · step143000 (299.9B)\n8 of 8 heads are sink heads"
    assert page.locator("#findings td.status.holds").count() == 5  # F1, F3, F4, F5, F7
    # F7's onset over depth sits beside the sinks-per-layer heatmap, its rows at the heatmap's heights.
    heatmap, onset = (page.locator(f"#fig-{key}-{slug(PYTHIA)}").bounding_box() for key in ("sink-layers", "onset"))
    assert onset["x"] >= heatmap["x"] + heatmap["width"] and abs(onset["y"] - heatmap["y"]) < 1
    text, _ = hover(page, f"fig-onset-{slug(PYTHIA)}", "layer 6", 0)
    assert text == "layer 6: first sink head at step3000 (6.291B)"
    text, _ = hover(page, f"fig-onset-{slug(PYTHIA)}", "never", 1)
    assert text == "layer 3: never holds a sink head"
    page.mouse.move(1, 1)
    assert not page.locator("#tip").is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "report-pythia-1b.png", full_page=True)


def test_partial_tiny_panel_in_chromium(browser, tiny_report):
    page, log = open_page(browser, tiny_report)
    drawn = {"sink-fraction", "ablations"}
    drawn |= drawn_keys("tiny/gpt-neox", False, dla=True) | drawn_keys("tiny/llama", False, dla=True)
    gaps = {
        f"composition-{slug('tiny/llama')}": "no composition stored (watch with composition=True, or a "
        "[composition] section in the panel, writes DIR/composition/)",
        f"recall-{slug('tiny/gpt-neox')}": "no head at 50x at the last revision (seed2)",
        f"onset-{slug('tiny/gpt-neox')}": "no layer at or above the floor (layers 0-1 of 2)",
        f"spectral-{slug('tiny/llama')}": "one revision: a trajectory needs at least two",
    }
    check_page(page, log, tiny_report, drawn, gaps)
    missing = page.locator("#missing").inner_text()
    assert "one revision (seed0)" in missing and f"{slug(UNFINISHED[0])}@{UNFINISHED[1]}" in missing
    assert [page.locator(f"nav a[href='#model-{slug(m)}']").count() for m in TINY_PANEL] == [1, 1]
    text, _ = hover(page, "fig-ablations", "clean", 1)
    assert text.endswith("circuit: loss 9.4")
    text, _ = hover(page, f"fig-labels-{slug('tiny/llama')}", "L0H0", 3)
    assert text.startswith("L0H3 · seed0\nlabel: ")
    assert "Left out (tokens unknown): tiny/llama." in page.locator("#fig-sink-fraction").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "report-tiny-panel.png", full_page=True)
