"""Reliability: a full disk, non-finite activations, mixed configs, and selectivities that do not
depend on how the batch is split. (Hub faults, kills and locks are in test_sources / test_panel_run.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter
from headtrace.panel import load_panel, run_panel
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.screen import ScreenConfig, screen
from headtrace.store import RUNS, read_results, ResultsDir
from models_zoo import tiny_model
from panel_helpers import REVISIONS, local_panel, save_checkpoints

ROOT = Path(__file__).resolve().parents[1]


def test_non_finite_activations_fail_their_revision_and_the_others_go_on(tmp_path):
    checkpoints = save_checkpoints(tmp_path / "ckpt", overflow="step2")
    adapter = ModelAdapter(tiny_model("gpt_neox", seed=1))
    with torch.no_grad():
        adapter.model.gpt_neox.layers[1].input_layernorm.weight.fill_(3e38)
    probe = synthetic_induction(ProbeSpec(n_examples=8, seq_len=64))
    with pytest.raises(HeadtraceError, match=r"^m@r produced NaN or inf activations from layer 1 on: .* float32"):
        screen(adapter, probe, ScreenConfig.of(n_examples=8, seq_len=64), model_name="m", revision="r")

    run = run_panel(load_panel(local_panel(tmp_path, checkpoints, REVISIONS)), tmp_path / "out")
    assert list(run.failed) == ["tiny/neox@step2"] and "NaN or inf activations" in run.failed["tiny/neox@step2"]
    assert sorted(read_results(tmp_path / "out")[1].revision) == ["step1", "step3"]


def test_a_full_disk_stops_the_panel_cleanly_and_keeps_earlier_shards(tmp_path):
    """A real full filesystem: a small tmpfs in a private mount namespace (unshare), filled by a file."""
    checkpoints = save_checkpoints(tmp_path / "ckpt")
    first = local_panel(tmp_path, checkpoints, REVISIONS[:1], name="first")
    full = local_panel(tmp_path, checkpoints, REVISIONS, name="full")
    out, saved = tmp_path / "out", tmp_path / "saved"
    out.mkdir()
    cli = f"{sys.executable} -m headtrace run"
    script = f"""
set -u
mount -t tmpfs -o size=4m tmpfs {out}
{cli} {first} --out {out} 2>{tmp_path}/first.err; echo $? > {tmp_path}/first.rc
cp -a {out} {saved}-1
# fill the disk, leaving two pages
dd if=/dev/zero of={out}/filler bs=4096 2>/dev/null; truncate -s -8192 {out}/filler
{cli} {full} --out {out} 2>{tmp_path}/full.err; echo $? > {tmp_path}/full.rc
rm {out}/filler; cp -a {out} {saved}-2
{cli} {full} --out {out} 2>{tmp_path}/resumed.err; echo $? > {tmp_path}/resumed.rc
cp -a {out} {saved}-3
"""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "COLUMNS": "400",
    }
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount"]
    subprocess.run([*unshare, "bash", "-c", script], env=env, check=True, timeout=600)

    def text(name: str) -> str:
        return (tmp_path / name).read_text().strip()

    assert text("first.rc") == "0", text("first.err")
    assert text("full.rc") == "3"  # some work failed
    message = text("full.err").splitlines()[-1]
    assert message.startswith("error: ") and "No space left on device" in message and "re-run" in message
    assert "Traceback" not in text("full.err")
    shard = "tiny--neox@step1.parquet"
    for kind in ("heads", "runs"):  # the earlier shard is intact, nothing partial or temporary was left
        assert (saved.with_name("saved-1") / kind / shard).read_bytes() == (
            saved.with_name("saved-2") / kind / shard
        ).read_bytes()
    leftovers = [p.name for p in saved.with_name("saved-2").rglob("*") if p.is_file() and p.name.endswith(".tmp")]
    assert leftovers == []
    assert sorted(p.name for p in (saved.with_name("saved-2") / RUNS).iterdir()) == [shard]
    # With space again, the same command finishes the panel and keeps the earlier shard.
    assert text("resumed.rc") == "0", text("resumed.err")
    resumed = read_results(saved.with_name("saved-3"))[1]
    assert sorted(resumed.revision) == REVISIONS
    run_panel(load_panel(full), tmp_path / "uninterrupted")
    pd.testing.assert_frame_equal(
        read_results(saved.with_name("saved-3"))[0], read_results(tmp_path / "uninterrupted")[0], check_exact=True
    )


def test_a_model_screened_with_two_configs_is_refused(tmp_path):
    adapter = ModelAdapter(tiny_model("llama"))
    for revision, seed in (("step1", 1), ("step2", 2)):
        config = ScreenConfig.of(n_examples=8, seq_len=48, seed=seed)
        result = screen(
            adapter,
            synthetic_induction(ProbeSpec(n_examples=8, seq_len=48, seed=seed)),
            config,
            model_name="m",
            revision=revision,
        )
        ResultsDir(tmp_path).write_shard(result.heads, result.run)
    with pytest.raises(HeadtraceError, match=r"holds m screened with 2 different configs .*own results directory"):
        read_results(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "headtrace", "findings", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "findings.parquet").exists()


NEOX = ModelAdapter(tiny_model("gpt_neox", seed=3))
SPLIT_COLUMNS = [
    "mean_induction",
    "mean_previous",
    "mean_duplicate",
    "mean_first",
    "mean_self",
    "mean_local",
    "mean_baseline",
    "sel_induction",
    "sel_first",
    "sink_score",
    "pr",
]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 12), batch_size=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_selectivities_do_not_depend_on_the_micro_batch_split(n, batch_size, seed):
    probe = synthetic_induction(ProbeSpec(n_examples=n, seq_len=48, seed=seed))
    whole = screen(NEOX, probe, ScreenConfig.of(n_examples=n, seq_len=48, seed=seed, batch_size=n)).heads
    split = screen(NEOX, probe, ScreenConfig.of(n_examples=n, seq_len=48, seed=seed, batch_size=batch_size)).heads
    for column in SPLIT_COLUMNS:
        np.testing.assert_allclose(split[column], whole[column], rtol=1e-5, atol=1e-12, err_msg=column)
    assert list(split.label) == list(whole.label) or np.allclose(split.best_selectivity, 30.0, rtol=1e-4)


def test_heads_whose_baseline_underflows_are_flagged_in_the_table_and_the_summaries(tmp_path):
    """The hand-set previous-token head pays ~1e-30 to the baseline: its 1e8x is a floor, and says so."""
    from induction_model import ID_LOW, SEQ_LEN, VOCAB, induction_model

    induction_model().to(torch.float16).save_pretrained(tmp_path / "ckpt")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    screened = subprocess.run(
        [
            sys.executable,
            "-m",
            "headtrace",
            "screen",
            str(tmp_path / "ckpt"),
            "-n",
            "16",
            "--seq-len",
            str(SEQ_LEN),
            "--id-low",
            str(ID_LOW),
            "--id-high",
            str(VOCAB),
            "--dtype",
            "float16",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert screened.returncode == 0, screened.stderr
    assert "warning: 1 heads have a baseline below 1e-8" in screened.stdout and "screen in float32" in screened.stdout
    heads = pd.read_parquet(tmp_path / "out" / "heads")
    assert list(heads.loc[heads.baseline_underflow, "head_id"]) == ["L0H0"]
    assert pd.read_parquet(tmp_path / "out" / "runs").n_underflow_heads.item() == 1
    listed = subprocess.run(
        [sys.executable, "-m", "headtrace", "results", str(tmp_path / "out")], capture_output=True, text=True, env=env
    )
    assert listed.returncode == 0 and "underflow" in listed.stdout
