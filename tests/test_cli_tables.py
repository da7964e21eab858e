"""The CLI's tables fit the terminal: at 80 and 120 columns no head id, model, revision or column name
is cut short; numbers are compact; a short terminal drops the screen's PR, then its sink score,
before anything is cut."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from headtrace.cli import out_console, print_ablation, print_screen_summary, times
from headtrace.reference import import_reference
from headtrace.schema import AblationConfig, ScreenConfig
from test_cli_screen import checkpoint  # noqa: F401 (the fixture)

REFERENCE = Path(__file__).parent / "data" / "reference" / "pythia-1b"
SCREEN_COLUMNS = ["head", "label", "induction", "previous", "first-token", "sink score", "PR"]


def printed(monkeypatch, width: int, show) -> str:
    """What `show()` prints on the CLI's console in a terminal of `width` columns."""
    monkeypatch.setattr(out_console, "_width", None)  # the width then follows COLUMNS (rich sets it when it starts)
    monkeypatch.setenv("COLUMNS", str(width))
    with out_console.capture() as captured:
        show()
    text = captured.get()
    assert "…" not in text and max(map(len, text.splitlines())) <= width  # nothing cut short, nothing overflows
    return text


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a printed table, cell by cell."""
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]


def header(text: str) -> str:
    """The header row(s) of a printed table, joined."""
    return " ".join(line for line in text.splitlines() if line.startswith("┃"))


@pytest.mark.parametrize(
    "value, shown",
    [
        (0.31, "0.3x"),
        (47.74, "47.7x"),
        (198.4, "198x"),
        (4586.0, "4586x"),
        (605747.9, "6.1e5x"),
        (6439551.0, "6.4e6x"),
        (math.nan, "-"),
    ],
)
def test_selectivities_are_compact(value, shown):
    assert times(value) == shown


@pytest.fixture(scope="module")
def smollm2_like():
    """A real screen of a small Llama whose heads are then given SmolLM2-135M's ids and magnitudes:
    two-digit layers and selectivities in the millions (what `headtrace screen` printed cut at 80 columns)."""
    from headtrace.models import ModelAdapter
    from headtrace.probes import synthetic_induction
    from headtrace.screen import screen

    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=10240,
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            max_position_embeddings=128,
        )
    )
    config = ScreenConfig(n_examples=8, seq_len=64, label_threshold=0.0)  # every head gets a label
    result = screen(
        ModelAdapter(model.eval()),
        synthetic_induction(config.probe),
        config,
        model_name="SmolLM2-135M-Instruct.Q4_1",
        revision=None,
    )
    heads = result.heads
    heads["head_id"] = [f"L{layer + 16}H{head + 5}" for layer, head in zip(heads.layer, heads["head"])]
    big = {"sel_first": 6439551.0, "sel_previous": 605747.9, "pr": 13.03, "best_selectivity": 6439551.0}
    for column, value in big.items():
        heads.loc[0, column] = value
    heads.loc[1:, "best_selectivity"] = range(len(heads) - 1, 0, -1)
    heads.loc[:3, "label"] = ["first-token", "previous-token", "duplicate-token", "induction"]
    return result


@pytest.mark.parametrize("width, dropped", [(120, []), (80, ["PR"]), (72, ["PR", "sink score"])])
def test_the_screen_summary_keeps_every_head_id_and_drops_pr_then_the_sink_score(
    smollm2_like, monkeypatch, width, dropped
):
    text = printed(monkeypatch, width, lambda: print_screen_summary(smollm2_like))
    heads = smollm2_like.heads.sort_values("best_selectivity", ascending=False).head(10)
    rows = table_rows(text)
    assert [row[0] for row in rows] == list(heads.head_id)
    assert [row[1] for row in rows] == list(heads.label)
    shown = [c for c in SCREEN_COLUMNS if c not in dropped]
    assert [name.strip() for name in header(text).split("┃")[1:-1]] == shown
    assert all(len(row) == len(shown) for row in rows)
    assert rows[0][2:5] == [times(heads.sel_induction.iloc[0]), "6.1e5x", "6.4e6x"]
    assert "6439551" not in text and "605747" not in text
    caption = " ".join(line.strip() for line in text.splitlines() if "not shown" in line)
    assert caption == (f"not shown at {width} columns: {', '.join(dropped)}" if dropped else "")


@pytest.mark.parametrize("width", [80, 120])
def test_the_screen_command_reads_the_width_from_columns(checkpoint, width):  # noqa: F811
    proc = subprocess.run(
        [sys.executable, "-m", "headtrace", "screen", str(checkpoint), "-n", "16", "--seq-len", "64"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": str(width)},
    )
    assert proc.returncode == 0, proc.stderr
    # The ceilings line wraps at the width COLUMNS gives.
    assert "…" not in proc.stdout and width - 20 < max(map(len, proc.stdout.splitlines())) <= width


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "results"
    import_reference(sorted(REFERENCE.glob("*.json")), out)
    return out


@pytest.mark.parametrize("width", [80, 120])
def test_the_results_table_keeps_revisions_and_head_ids_whole(imported, monkeypatch, width):
    from headtrace.cli import results

    text = printed(monkeypatch, width, lambda: results(imported, save=None, follow=False, interval=1.0, timeout=None))
    table = pd.read_parquet(imported / "runs").sort_values("tokens")
    rows = table_rows(text)
    assert [row[0] for row in rows if row[0]] == list(table.revision)
    assert "EleutherAI/pythia-1b" in text  # one model: the title names it
    said = " ".join(text.split())
    for revision in table.revision:  # the induction circuit's head ids, whole, wrapped between ids
        circuit = pd.read_parquet(imported / "heads", filters=[("revision", "==", revision)])
        for head in circuit.loc[circuit.induction_circuit, "head_id"].head(4):
            assert re.search(rf"[( ]{head}[,)]", said)
    columns = header(text)
    for name in ("revision", "tokens", "top-1", "induction", "sink"):
        assert name in columns
    assert ("underflow" in columns) == (width == 120)  # empty columns go first at 80 columns


def test_the_findings_table_names_a_single_model_once_and_keeps_the_finding_names(imported, monkeypatch):
    from headtrace.cli import findings

    text = printed(monkeypatch, 80, lambda: findings(imported, None, None, None, None))
    assert "findings:" in text and "(EleutherAI/pythia-1b)" in text
    assert [name.strip() for name in header(text).split("┃")[1:-1]] == ["finding", "status", "statement"]
    first = " ".join(row[0] for row in table_rows(text) if row[0])  # a name wraps between its words
    for finding in ("F1 floor", "F2 shape", "F3 timing", "F4 early identification", "F5 spectral lead"):
        assert finding in first


@pytest.mark.parametrize("width", [80, 120])
def test_the_ablation_table_keeps_each_head_id_whole(checkpoint, monkeypatch, width):  # noqa: F811
    from headtrace.ablation import ablate_checkpoint

    result = ablate_checkpoint(
        str(checkpoint),
        screen_config=ScreenConfig(n_examples=16, seq_len=64),
        config=AblationConfig(circuit="L1H0,L1H1,L1H2", draws=3, n_bootstrap=50),
    )
    text = printed(monkeypatch, width, lambda: print_ablation(result))
    cells = " ".join(" ".join(row[1] for row in table_rows(text)).split())
    for head in ("L1H0", "L1H1", "L1H2", "L1H3"):
        assert re.search(rf"\b{head}\b", cells)
    for name in ("condition", "heads", "top-1", "top-5", "loss", "logit"):
        assert name in header(text)


@pytest.mark.parametrize("width", [80, 120])
def test_the_demo_prints_one_line_per_finding(imported, tmp_path, monkeypatch, width):
    """The demo's summary: a model's (or a seed family's) name, then a line per finding that the
    terminal's width cuts rather than wraps."""
    from headtrace.cli import _print_finding_lines
    from headtrace.family_findings import family_rows
    from headtrace.findings import write_findings
    from test_families import FAMILY, planted_results

    monkeypatch.setattr(out_console, "_width", None)
    monkeypatch.setenv("COLUMNS", str(width))
    for folder, name in [(imported, "EleutherAI/pythia-1b"), (planted_results(tmp_path / "family"), FAMILY)]:
        table = write_findings(folder)
        rows = family_rows(table) if name == FAMILY else table
        with out_console.capture() as captured:
            _print_finding_lines(table)
        lines = captured.get().splitlines()
        assert lines[0] == name and len(lines) == 1 + len(rows)
        assert max(map(len, lines)) <= width and any(line.endswith("…") for line in lines)
        for line, row in zip(lines[1:], rows.itertuples()):
            assert line.startswith(f"  {row.finding} {row.title}: {row.status} - ")
