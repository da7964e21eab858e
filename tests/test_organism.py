"""The model organism: its corpus, a deterministic trainer whose checkpoints a panel screens end to
end, Ctrl-C safety, the train-organism CLI, and (slow) the demo: the default recipe forms an induction
circuit that ablation confirms."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from headtrace.errors import HeadtraceError
from headtrace.models import load_model, load_tokenizer
from headtrace.organism import BOS_ID, CorpusConfig, Organism, TrainConfig, checkpoint_steps, recipe, train
from headtrace.organism.corpus import batch, copy_spans, token_probabilities
from headtrace.organism.demo import check_demo, demo_screen, panel_toml
from headtrace.schema import THRESHOLD_CLASSES
from headtrace.panel import load_panel, run_panel
from headtrace.store import read_results, ResultsDir

TINY_CORPUS = CorpusConfig(vocab_size=64, seq_len=64, span_min=4, span_max=12, spans_per_sequence=2)


def tiny(arch: str = "dense", steps: int = 6, seed: int = 0) -> Organism:
    return Organism(
        recipe=recipe(arch, n_layers=2, n_heads=2, d_model=32, d_mlp=64),
        corpus=TINY_CORPUS,
        train=TrainConfig(
            steps=steps, batch_size=4, n_checkpoints=4, checkpoint_every=None, checkpoint_loss_drop=None, seed=seed
        ),
    )


# ----------------------------------------------------------------------------------------------
# The corpus.


def test_every_sequence_starts_with_bos_and_specials_appear_nowhere_else():
    ids = batch(CorpusConfig(), step=3, batch_size=16)
    assert ids.shape == (16, CorpusConfig().seq_len) and ids.dtype == np.int64
    assert (ids[:, 0] == BOS_ID).all()
    assert ids[:, 1:].min() >= CorpusConfig().n_specials and ids.max() < CorpusConfig().vocab_size


def test_token_frequencies_follow_zipf():
    config = CorpusConfig(seed=1)
    ids = np.concatenate([batch(config, step, 64)[:, 1:].ravel() for step in range(8)])
    counts = np.bincount(ids, minlength=config.vocab_size)[config.n_specials :]
    ranks = np.arange(1, len(counts) + 1)
    top = counts > 50  # enough counts for a stable slope
    slope = np.polyfit(np.log(ranks[top]), np.log(counts[top]), 1)[0]
    assert abs(slope + config.zipf_exponent) < 0.1, slope
    probs = token_probabilities(config)
    assert probs[: config.n_specials].sum() == 0 and abs(probs.sum() - 1) < 1e-12


def test_spans_are_copied_at_varying_offsets():
    config = CorpusConfig()
    rng = np.random.default_rng(0)
    offsets = []
    for _ in range(200):
        seq = rng.integers(config.n_specials, config.vocab_size, size=config.seq_len)
        for source, dest, length in copy_spans(seq, rng, config):
            offsets.append(dest - source)
            assert config.span_min <= length <= config.span_max and dest >= source + length
            assert dest + length <= config.seq_len and source >= 1
    assert len(set(offsets)) > 25  # no fixed positional offset copies the spans
    # In the batches themselves: the token after a repeated 4-gram recurs after its first occurrence.
    ids = batch(config, step=0, batch_size=32)
    gaps = set()
    for seq in ids:
        seen = {}
        for p in range(1, config.seq_len - 4):
            key = tuple(seq[p : p + 4])
            if key in seen and p - seen[key] >= 4:
                gaps.add(p - seen[key])
            seen.setdefault(key, p)
    assert len(gaps) > 15


def test_checkpoint_steps_are_log_spaced_from_one_to_the_last():
    steps = checkpoint_steps(1200, 12)
    assert steps[0] == 1 and steps[-1] == 1200 and steps == sorted(set(steps))
    ratios = np.diff(np.log(steps[3:]))
    assert ratios.max() < 2 * ratios.min() + 0.1
    assert checkpoint_steps(5, 1) == [5] and checkpoint_steps(1, 12) == [1]


# ----------------------------------------------------------------------------------------------
# Training: layout, determinism, panels, Ctrl-C.


def weights(folder: Path) -> bytes:
    return (folder / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("organism") / "dense"
    train(out, tiny())
    return out


def test_training_writes_loadable_checkpoints_and_listings(trained):
    listed = json.loads((trained / "revisions.json").read_text())
    assert [e["step"] for e in listed] == checkpoint_steps(6, 4)
    assert all(e["tokens"] == e["step"] * 4 * 64 for e in listed)
    assert sorted(p.name for p in trained.iterdir() if p.is_dir()) == [e["revision"] for e in listed]
    meta = json.loads((trained / "organism.json").read_text())
    assert meta["complete"] and meta["organism"] == tiny().to_dict() and meta["organism"]["seed"] == 0
    final = trained / listed[-1]["revision"]
    adapter = load_model(str(final))
    assert adapter.model_type == "gpt_neox" and adapter.layout.n_heads == 2
    tokenizer = load_tokenizer(str(final))
    assert tokenizer.bos_token_id == BOS_ID and tokenizer("t5 t9", add_special_tokens=False)["input_ids"] == [5, 9]
    assert not [p for p in trained.iterdir() if p.name.startswith(".")]


def test_organism_json_records_the_arithmetic_and_another_thread_count_is_not_reused(trained, tmp_path):
    threads = torch.get_num_threads()
    meta = json.loads((trained / "organism.json").read_text())
    assert meta["arithmetic"] == {"torch": torch.__version__, "threads": threads}
    out = tmp_path / "copy"
    shutil.copytree(trained, out)
    torch.set_num_threads(threads + 1)
    try:
        refused = rf"trained with {threads} torch thread\(s\).*pass --threads {threads}"
        with pytest.raises(HeadtraceError, match=refused):
            train(out, tiny())
    finally:
        torch.set_num_threads(threads)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in trained.iterdir())
    assert train(out, tiny()).reused


def test_same_seed_gives_bit_identical_checkpoints_and_another_seed_does_not(trained, tmp_path):
    again = train(tmp_path / "again", tiny())
    train(tmp_path / "other", tiny(seed=1))
    for entry in again.checkpoints:
        assert weights(tmp_path / "again" / entry["revision"]) == weights(trained / entry["revision"])
    assert weights(tmp_path / "other" / "step000006") != weights(trained / "step000006")


def test_a_finished_organism_is_reused_and_a_foreign_directory_refused(trained, tmp_path):
    before = weights(trained / "step000006")
    assert train(trained, tiny()).reused and weights(trained / "step000006") == before
    with pytest.raises(HeadtraceError, match="not empty"):
        train(trained, tiny(seed=3))


@pytest.mark.parametrize("arch, model_type", [("llama", "llama"), ("moe", "olmoe")])
def test_other_architectures_train_and_load(arch, model_type, tmp_path):
    result = train(tmp_path / arch, tiny(arch, steps=2))
    adapter = load_model(str(tmp_path / arch / result.checkpoints[-1]["revision"]))
    assert adapter.model_type == model_type and np.isfinite(result.losses).all()


def test_a_panel_screens_the_organism_end_to_end(trained, tmp_path):
    screen = demo_screen(TINY_CORPUS, n_examples=8)
    (tmp_path / "organisms").mkdir()
    (tmp_path / "organisms" / "dense").symlink_to(trained)
    panel_path = tmp_path / "demo.toml"
    panel_path.write_text(panel_toml("organism-test", screen, {"organism-dense": "organisms/dense"}))
    panel = load_panel(panel_path)
    assert panel.screen == screen and panel.models[0].source == "organism"
    run = run_panel(panel, tmp_path / "results")
    assert not run.failed and len(run.computed) == 4
    heads, runs = read_results(tmp_path / "results")
    listed = json.loads((trained / "revisions.json").read_text())
    assert sorted(runs.revision) == [e["revision"] for e in listed]
    assert dict(zip(runs.revision, runs.tokens)) == {e["revision"]: e["tokens"] for e in listed}
    assert len(heads) == 4 * 4 and (runs.seq_len == 64).all()  # 63 probe tokens + BOS
    assert run_panel(panel, tmp_path / "results").skipped  # resumable like any panel


def test_checkpoints_gather_where_the_smoothed_loss_falls(tmp_path):
    """Saves on schedule (log-spaced, every K) plus wherever the loss's moving average fell by the
    configured drop since the last save, recomputed here from the recorded losses."""
    organism = dataclasses.replace(
        tiny(steps=40),
        train=TrainConfig(
            steps=40, batch_size=4, n_checkpoints=3, checkpoint_every=15, checkpoint_loss_drop=0.02, lr=1e-2
        ),
    )
    result = train(tmp_path / "org", organism)
    scheduled = set(checkpoint_steps(40, 3)) | {15, 30}
    expected, smoothed, at_save = [], None, None
    for step, loss in enumerate(result.losses, start=1):
        smoothed = loss if smoothed is None else smoothed + 0.1 * (loss - smoothed)
        at_save = smoothed if at_save is None else at_save
        if at_save - smoothed >= 0.02 or step in scheduled:
            expected.append(step)
            at_save = smoothed
    saved = [e["step"] for e in result.checkpoints]
    assert saved == expected and len(saved) > len(scheduled)  # the loss fell: extra checkpoints


def test_ctrl_c_keeps_exactly_the_finished_checkpoints(tmp_path):
    out = tmp_path / "interrupted"

    def interrupt(step: int, total: int, loss: float) -> None:
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(out, tiny(steps=12), on_step=interrupt)
    listed = json.loads((out / "revisions.json").read_text())
    done = [s for s in checkpoint_steps(12, 4) if s <= 4]
    assert [e["step"] for e in listed] == done
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [e["revision"] for e in listed]
    for entry in listed:
        load_model(str(out / entry["revision"]))
    assert not json.loads((out / "organism.json").read_text())["complete"]
    # Training again with the same settings starts over and finishes.
    assert train(out, tiny(steps=12)).checkpoints[-1]["step"] == 12


# ----------------------------------------------------------------------------------------------
# The command line.


def headtrace(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "headtrace", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_train_organism_cli(tmp_path):
    proc = headtrace("train-organism", "--steps", 2, "--out", tmp_path / "org")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads((tmp_path / "org" / "revisions.json").read_text())
    assert [e["step"] for e in listed] == [1, 2]
    assert "2 checkpoints" in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "0"], "steps must be >= 1"),
        (["--arch", "transformer-xl"], "unknown arch 'transformer-xl'"),
        (["--organism", "huge"], "unknown organism 'huge'; use one of: tiny, code"),
    ],
)
def test_train_organism_bad_input_is_one_line_exit_2(args, message, tmp_path):
    proc = headtrace("train-organism", *args, "--out", tmp_path / "org")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "org").exists()


# ----------------------------------------------------------------------------------------------
# The default recipe forms the circuits the demo shows.


@pytest.mark.slow
def test_the_demo_forms_an_induction_circuit_that_ablation_confirms(tmp_path):
    """`headtrace demo` as `make demo` runs it: train the organism, screen every checkpoint, ablate
    the final circuit, compute the findings and write the report. The properties are those that held
    on every run of benchmarks/organism_sweep.py (5 seeds x 1 and 2 threads, docs/organism.md), which
    covers other seeds and thread counts; the suite runs the demo once."""
    proc = subprocess.run(
        [sys.executable, "-m", "headtrace", "demo", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = tmp_path / "results"
    assert "Open the report" in proc.stderr and (results / "report" / "index.html").is_file()
    assert (results / "findings.md").is_file()
    findings = pd.read_parquet(results / "findings.parquet")
    assert [line.split(":")[0].strip() for line in proc.stdout.splitlines()[1:]] == [
        f"{row.finding} {row.title}" for row in findings.itertuples()
    ]  # one line per finding, no trajectory table
    check = check_demo(results)
    assert not check.failures(), check
    heads, runs = read_results(results)
    final = heads[heads.revision == runs.revision.iloc[-1]]
    ablation = ResultsDir(results).read_ablations().set_index("condition")
    assert ablation.revision.iloc[0] == runs.revision.iloc[-1]
    assert ablation.loc["circuit", "heads"] == ",".join(final.loc[final.induction_circuit, "head_id"])
    # The demo's probe leaves every threshold far below its class's ceiling.
    config = json.loads(runs.config_json.iloc[0])
    for threshold, keys in THRESHOLD_CLASSES.items():
        assert all(runs[f"ceiling_{key}"].min() >= 5 * config[threshold] for key in keys)
