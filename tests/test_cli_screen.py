"""`headtrace screen` end to end in a subprocess: table, Parquet output, one-line errors."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from transformers import MambaConfig, MambaForCausalLM

from models_zoo import tiny_model


def headtrace(*args, cwd=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # an unknown hub id must fail without waiting on a network
    return subprocess.run(
        [sys.executable, "-m", "headtrace", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env=env,
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny-neox"
    tiny_model("gpt_neox").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def mamba(tmp_path_factory):
    """A causal LM without attention (a state-space model): nothing for headtrace to screen."""
    path = tmp_path_factory.mktemp("ckpt") / "tiny-mamba"
    MambaForCausalLM(MambaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2)).save_pretrained(path)
    return path


def test_screen_writes_tables(checkpoint, tmp_path):
    out = tmp_path / "results"
    proc = headtrace("screen", checkpoint, "-n", 16, "--seq-len", 64, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "induction circuit (>= 50x)" in proc.stdout and "top-1" in proc.stdout
    heads = pd.read_parquet(out / "heads")
    runs = pd.read_parquet(out / "runs")
    assert len(heads) == 8 and list(heads.head_id[:2]) == ["L0H0", "L0H1"]
    assert runs.n_examples.item() == 16 and runs.seq_len.item() == 64


@pytest.mark.parametrize(
    "args, message",
    [
        (["screen", "/no/such/dir"], "does not exist"),
        (["screen", "nobody/no-such-model"], "cannot load model 'nobody/no-such-model'"),
        (["screen", "{mamba}", "-n", "2"], "unsupported architecture 'mamba' (MambaForCausalLM): no attention module"),
        (["screen", "{ckpt}", "-n", "0"], "n-examples must be >= 1"),
        (["screen", "{ckpt}", "-b", "0"], "batch-size must be >= 1"),
        (["screen", "{ckpt}", "--seq-len", "1024", "-n", "2"], "exceeds the model's context of 512"),
        (["screen", "{ckpt}", "--id-high", "20000", "-n", "2"], "vocabulary has 10240"),
        (["screen", "{ckpt}", "--dtype", "float64"], "unknown dtype"),
        (["screen", "{ckpt}", "--device", "cuda:0"], "no CUDA GPU"),
    ],
)
def test_bad_input_is_one_line_exit_2(checkpoint, mamba, args, message, tmp_path):
    proc = headtrace(*[a.format(ckpt=checkpoint, mamba=mamba) for a in args], "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "out").exists()


def test_screen_prints_the_ceilings_and_warns_near_one(checkpoint, tmp_path):
    """At T = 64 the reference baseline caps induction near 53x for these 16 examples: the 50x
    threshold is above half of it, and the screen says so; the clean baseline lifts every ceiling."""
    proc = headtrace("screen", checkpoint, "-n", 16, "--seq-len", 64)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "selectivity ceilings of this probe (reference baseline): induction 53.3x" in said
    warning = " ".join(proc.stderr.split())
    assert "warning: the induction threshold 50x is above half of this probe's induction ceiling (53.3x" in warning
    clean = headtrace("screen", checkpoint, "-n", 16, "--seq-len", 64, "--baseline", "clean")
    assert clean.returncode == 0 and "induction unbounded" in " ".join(clean.stdout.split())
    assert "warning: the induction threshold" not in clean.stderr
