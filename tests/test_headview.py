"""Looking at one head: `headtrace show` in the terminal and the notebook views (`_repr_html_` of a
screen result, a results folder and a head), on the hand-built induction model, whose induction
head (L1H0) attends from the query to B."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from headview_results import KEPT, MODEL, PLAIN, headview_results
from induction_model import induction_model

import headtrace
from headtrace.screen import screen_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return headview_results(tmp_path_factory.mktemp("headview"))


def show(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headtrace", "show", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120"},
        timeout=120,
    )


def test_show_prints_the_top_positions_the_selectivities_and_the_trajectory(results):
    proc = show(str(results), "L1H0", "--model", MODEL)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("L1H0 of induction, at step200")
    assert "selectivity: induction " in text and "local " in text
    examples = [line for line in text.splitlines() if line.strip().startswith("example ")]
    assert len(examples) == 4
    for line in text.splitlines():  # the first position under each example is B, nearly all the attention
        if line.strip().startswith("example "):
            top = text.splitlines()[text.splitlines().index(line) + 1]
            assert top.rstrip().endswith("B") and float(top.split()[-2]) > 0.9
    assert "step100 (0.1M)" in text and "step200 (0.2M)" in text and "(* attention patterns stored)" in text
    earlier = show(str(results), "L1H0", "--model", MODEL, "--revision", "step100")
    assert earlier.returncode == 0 and "attention of the query row at step100" in earlier.stdout


def test_show_without_patterns_still_shows_the_head_and_says_how_to_keep_them(results):
    proc = show(str(results), "L0H0", "--model", PLAIN)
    assert proc.returncode == 0, proc.stderr
    assert "previous-token" in proc.stdout and "--keep-patterns 4" in proc.stdout
    assert "trajectory:" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["L1H0"], "holds 2 models (induction, plain); name one with --model"),
        (["L1H9", "--model", MODEL], "no head 'L1H9' in induction"),
        (["L1H0", "--model", "other"], "no model 'other'"),
        (["L1H0", "--model", MODEL, "--revision", "step7"], "no revision 'step7' of induction"),
    ],
)
def test_show_refuses_bad_input_in_one_line_with_exit_code_2(results, args, message):
    proc = show(str(results), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


class Parsed(HTMLParser):
    """The elements of an HTML fragment, as (tag, attributes), and its text."""

    def __init__(self, markup: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.open: list[str] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, **attrs) -> list[dict]:
        return [a for t, a in self.elements if t == tag and all(k in a for k in attrs)]


def test_a_results_folder_and_a_head_render_as_html_in_a_notebook(results):
    found = headtrace.open(results)
    assert set(found.heads.model) == {MODEL, PLAIN} and len(found.runs) == 3  # the pandas tables
    page = Parsed(found._repr_html_())
    cells = page.find("td", **{"data-head": True})
    assert len(cells) == 2 * 2 * 3  # each model's label grid: 2 layers x 3 heads
    induction_cell = [c for c in cells if c["data-head"] == "L1H0"][0]
    assert induction_cell["title"].startswith("L1H0: induction")
    text = "".join(page.text)
    assert "induction circuit at the last revision: L1H0" in text and "Head view of L1H0" in text
    head = Parsed(found.head("L1H0", model=MODEL)._repr_html_())
    revisions = [a["data-revision"] for a in head.find("div", **{"data-revision": True})]
    assert revisions == ["step100", "step200"]  # small multiples over revisions
    marked = [a["title"] for a in head.find("span", title=True) if "(B)" in a["title"]]
    assert len(marked) == 2 and float(marked[-1].split(": ")[1].split()[0]) > 0.9


def test_a_screen_result_renders_as_html_with_its_head_view(tmp_path):
    result = screen_model(induction_model(), KEPT, name="induction", revision="step200")
    page = Parsed(result._repr_html_())
    assert len(page.find("td", **{"data-head": True})) == 6
    assert "Head view of L1H0" in "".join(page.text)
    assert result.head("L1H0").top_positions("step200").mark[0] == "B"
    assert list(result.heads.columns)[:3] == ["model", "revision", "tokens"]  # the table as it was


def test_the_report_head_view_opens_on_a_click_in_the_label_grid(results, tmp_path):
    """In chromium: a click on L1H0's cell of the step200 grid draws its query row, B the most
    attended; the slider goes back to step100; no console error, no request beyond the page."""
    from test_report import SHAPE_CENTER, open_page

    from headtrace.report import build_report
    from headtrace.store import slug

    index = build_report(results, tmp_path / "report")
    assert index.stat().st_size < 5e6
    with contextlib.ExitStack() as stack:
        chromium = stack.enter_context(_chromium())
        page, log = open_page(chromium, index)
        assert page.locator(".hv-strip").count() == 0
        figure = f"fig-labels-{slug(MODEL)}"
        target = page.evaluate(SHAPE_CENTER, [figure, "L0H0 · step200", 3])  # layer 1, head 0 of 3
        page.mouse.click(target["x"], target["y"])
        strip = page.locator(f"#model-{slug(MODEL)} .hv-strip")
        assert strip.count() == 1 and strip.get_attribute("data-head") == "L1H0"
        assert strip.get_attribute("data-revision") == "step200"
        assert "L1H0 at step200" in page.locator(f"#model-{slug(MODEL)} .hv-title").inner_text()
        top = page.locator(f"#model-{slug(MODEL)} .hv-top").inner_text()
        assert top.startswith("most attended: ") and top.split(": ")[1].split(",")[0].split()[1] == "(B)"
        page.locator(f"#model-{slug(MODEL)} .hv-slider").fill("0")
        assert strip.get_attribute("data-revision") == "step100"
        assert "L1H0 at step100" in page.locator(f"#model-{slug(MODEL)} .hv-title").inner_text()
        page.locator(f"#model-{slug(MODEL)} .headview").screenshot(path=tmp_path / "headview.png")
        page.locator(f"#model-{slug(MODEL)} .hv-examples button").nth(2).click()
        assert "hv-on" in page.locator(f"#model-{slug(MODEL)} .hv-examples button").nth(2).get_attribute("class")
        assert "No attention patterns were kept" in page.locator(f"#model-{slug(PLAIN)} .headview").inner_text()
        assert log["errors"] == []
        assert [url for url in log["requests"] if not url.startswith("data:")] == [index.as_uri()]


@contextlib.contextmanager
def _chromium():
    from playwright.sync_api import sync_playwright
    from test_report import CHROMIUM, CHROMIUM_FLAGS

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()
