"""`headtrace ablate` end to end in a subprocess: table, differential line, shortfall, Parquet, one-line errors."""

import pandas as pd
import pytest

from test_cli_screen import checkpoint, headtrace  # noqa: F401 (fixture)


def test_ablate_prints_table_verdict_and_shortfall_and_writes_parquet(checkpoint, tmp_path):  # noqa: F811
    out = tmp_path / "results"
    proc = headtrace(
        "ablate",
        checkpoint,
        "--circuit",
        "L1H0,L1H1,L1H2",
        "-n",
        16,
        "--seq-len",
        64,
        "--seeds",
        3,
        "--n-bootstrap",
        100,
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    shown, said = " ".join(proc.stdout.split()), " ".join(proc.stderr.split())  # rich wraps at 80 columns
    for text in ("condition", "(mean)", "(95%)", "layers", "single", "differential (loss", "-> not shown"):
        assert text in shown
    assert "shortfall" in said and "2 head(s) fewer" in said
    table = pd.read_parquet(out / "ablations")
    assert list(table.condition) == ["clean", "circuit"] + ["random"] * 3 + ["layers"] + ["single"] * 3
    assert set(table.shortfall[table.condition == "random"]) == {2}


@pytest.mark.parametrize(
    "circuit, message",
    [
        ("L2H0", "head L2H0 does not exist in {ckpt}: valid heads are L0H0..L1H3 (2 layers x 4 heads)"),
        ("L1H0;L1H2", "bad head 'L1H0;L1H2'"),
        ("sink", "the sink circuit of {name} is empty"),
    ],
)
def test_bad_circuits_are_one_line_exit_2(checkpoint, circuit, message):  # noqa: F811
    proc = headtrace("ablate", checkpoint, "--circuit", circuit, "-n", 8, "--seq-len", 64, "--seeds", 2)
    assert proc.returncode == 2
    assert message.format(ckpt=checkpoint, name=checkpoint.name) in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


def test_pr_top_circuit_and_metric_override(checkpoint, tmp_path):  # noqa: F811
    """pr-top:K takes the K heads of highest time-integrated PR over the revisions stored in --out;
    --metric sets the deciding metric, and the table and report say which one decided."""
    import numpy as np

    from headtrace.store import ResultsDir

    out = tmp_path / "results"
    pr = np.full(8, 1.5)
    pr[[1, 6]] = [4.0, 9.0]  # L0H1 and L1H2 carry the most PR at both revisions
    for step in (1, 8):
        heads = pd.DataFrame(
            {
                "model": checkpoint.name,
                "revision": f"step{step}",
                "tokens": step * 1e6,
                "layer": np.repeat([0, 1], 4),
                "head": np.tile(range(4), 2),
                "pr": pr * step,
            }
        )
        heads["head_id"] = [f"L{l}H{h}" for l, h in zip(heads["layer"], heads["head"])]
        ResultsDir(out).write_shard(heads, heads[["model", "revision", "tokens"]].iloc[:1])
    proc = headtrace(
        "ablate",
        checkpoint,
        "--circuit",
        "pr-top:2",
        "--metric",
        "top1",
        "-n",
        16,
        "--seq-len",
        64,
        "--seeds",
        2,
        "--n-bootstrap",
        50,
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    shown = " ".join(proc.stdout.split())
    assert "top-1*" in shown and "* the deciding metric" in shown
    assert "deciding metric: top1 (set by --metric top1)" in shown
    assert "circuit: L0H1,L1H2, from time-integrated PR over 2 revisions" in shown
    table = pd.read_parquet(out / "ablations")
    assert set(table.decided_by) == {"top1"} and set(table.circuit) == {"pr-top:2"}
    proc = headtrace("ablate", checkpoint, "--circuit", "pr-top:2", "--metric", "accuracy", "-n", 8, "--seq-len", 64)
    assert proc.returncode == 2 and "unknown metric 'accuracy'" in proc.stderr and "Traceback" not in proc.stderr
