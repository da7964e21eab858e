"""Panels end to end against a local server speaking the hub's protocol, with the real huggingface_hub client:
discovery, log-spaced selection, download, screen, shards, resume, cache hygiene, locks, results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter
from headtrace.panel import OutputLock, load_panel, run_panel
from headtrace.store import LOCK, MANIFEST, ResultsDir, load_results, read_results
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.screen import screen
from hub_server import Fault
from models_zoo import tiny_model
from panel_helpers import (
    OLMO,
    PYTHIA,
    SCREEN,
    assert_same_tables,
    panel_file,
    seed_of,
)

ROOT = Path(__file__).resolve().parents[1]


def cached_weights(cache: Path) -> list[str]:
    """Weight files present in the hub cache (blobs over 100 kB; the tiny configs are smaller)."""
    return sorted(p.name for p in cache.rglob("blobs/*") if p.stat().st_size > 100_000)


def test_panel_discovers_selects_downloads_screens_and_stores(hub, cache, tmp_path):
    panel = load_panel(panel_file(tmp_path, {OLMO: "log:3", PYTHIA: ["step1", "step2", "step4"]}))
    run = run_panel(panel, tmp_path / "out")

    # log:3 over the OLMo branches: the first, the last, and the one nearest to their geometric mean
    # (sqrt(2B x 3048B) = 78B: 117B is nearer than 52B in log space); `main` carries no tokens.
    olmo = [t.revision.name for t in run.planned if t.source.name == OLMO]
    assert olmo == ["step1000-tokens2B", "step56000-tokens117B", "step1454000-tokens3048B"]
    heads, runs = read_results(tmp_path / "out")
    assert len(runs) == 6 and not run.failed
    tokens = dict(zip(runs.revision, runs.tokens))
    assert tokens["step4"] == 4 * 2_097_152 and tokens["step56000-tokens117B"] == 117e9

    # Each shard holds the screen of exactly the checkpoint the hub serves on that branch.
    config = panel.screen
    probe = synthetic_induction(ProbeSpec(n_examples=16, seq_len=64))
    for model, revision, arch in [(OLMO, "step56000-tokens117B", "olmo"), (PYTHIA, "step4", "gpt_neox")]:
        direct = screen(
            ModelAdapter(tiny_model(arch, seed_of(model, revision))),
            probe,
            config,
            model_name=model,
            revision=revision,
            tokens=tokens[revision],
        ).heads
        stored = heads[(heads.model == model) & (heads.revision == revision)].reset_index(drop=True)
        pd.testing.assert_frame_equal(stored, direct, check_exact=True)

    # step2 serves step1's files: flagged in the result, the manifest and the one-table view.
    assert run.identical == [(PYTHIA, "step2", "step1")]
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    flagged = {s["revision"]: s["same_weights_as"] for s in manifest["shards"]}
    assert flagged["step2"] == "step1" and flagged["step4"] is None
    assert set(load_results(tmp_path / "out").query("same_weights_as == 'step1'").revision) == {"step2"}
    # Downloads were removed once their shards were written.
    assert cached_weights(cache) == []


def test_rerun_skips_finished_shards_and_a_changed_config_recomputes(cache, tmp_path):
    path = panel_file(tmp_path, {PYTHIA: ["step8", "step16"]})
    run_panel(load_panel(path), tmp_path / "out")
    shards = sorted((tmp_path / "out" / "runs").glob("*.parquet"))
    stamps = [p.stat().st_mtime_ns for p in shards]

    again = run_panel(load_panel(path), tmp_path / "out")
    assert len(again.skipped) == 2 and not again.computed and not again.recomputed
    assert [p.stat().st_mtime_ns for p in shards] == stamps

    changed = panel_file(tmp_path, {PYTHIA: ["step8", "step16"]}, screen="[screen]\nn_examples = 12\nseq_len = 64\n")
    redone = run_panel(load_panel(changed), tmp_path / "out")
    assert len(redone.recomputed) == 2 and not redone.skipped
    assert set(read_results(tmp_path / "out")[1].n_examples) == {12}


def test_only_files_this_run_downloaded_are_removed(hub, cache, tmp_path):
    from huggingface_hub import hf_hub_download

    users = hf_hub_download(PYTHIA, "model.safetensors", revision="step32", endpoint=hub.url, cache_dir=cache)
    run_panel(load_panel(panel_file(tmp_path, {PYTHIA: ["step32", "step64"]})), tmp_path / "out")
    assert Path(users).is_file()  # the user's cached step32 stays
    assert cached_weights(cache) == [Path(os.path.realpath(users)).name]

    run_panel(load_panel(panel_file(tmp_path, {PYTHIA: ["step128"]})), tmp_path / "kept", keep_checkpoints=True)
    assert len(cached_weights(cache)) == 2


def test_unknown_revision_fails_before_any_download(hub, cache, tmp_path):
    path = panel_file(tmp_path, {PYTHIA: ["step1", "step3001"]})
    before = len(hub.downloads())
    with pytest.raises(
        HeadtraceError,
        match=r"panel\.toml:\d+: EleutherAI/pythia-1b: revision 'step3001' does not "
        r"exist; closest: step3000",
    ):
        run_panel(load_panel(path), tmp_path / "out")
    assert len(hub.downloads()) == before and not (tmp_path / "out").exists()


def test_results_from_a_newer_headtrace_are_refused(cache, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"schema": 1, "headtrace_version": "99.0"}))
    with pytest.raises(HeadtraceError, match="written by headtrace 99.0.*newer than this"):
        run_panel(load_panel(panel_file(tmp_path, {PYTHIA: ["step1"]})), out)


def test_a_live_lock_refuses_and_a_dead_runs_lock_is_taken_over(cache, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    panel = load_panel(panel_file(tmp_path, {PYTHIA: ["step1"]}))
    with OutputLock(ResultsDir(out)):
        with pytest.raises(HeadtraceError, match=rf"in use by another `headtrace run` \(pid {os.getpid()} on"):
            run_panel(panel, out)
    (out / LOCK).write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": "then"}))
    assert run_panel(panel, out).stale_lock["pid"] == 999999


def test_results_command_and_the_layout_read_by_pyarrow_and_duckdb(cache, tmp_path):
    import duckdb
    import pyarrow.dataset as ds
    from typer.testing import CliRunner

    from headtrace.cli import app

    out = tmp_path / "out"
    run_panel(load_panel(panel_file(tmp_path, {PYTHIA: ["step1", "step2"]})), out)
    table = load_results(out)
    result = CliRunner().invoke(app, ["results", str(out), "--save", str(tmp_path / "all.csv")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "step2" in result.output and "identical weight files" in result.output
    assert len(pd.read_csv(tmp_path / "all.csv")) == len(table) == 2 * 8

    # The folders are datasets as they stand: no loader needed.
    heads = ds.dataset(out / "heads", format="parquet").to_table().to_pandas()
    assert len(heads) == len(table) and set(heads.revision) == {"step1", "step2"}
    top1 = duckdb.sql(f"SELECT revision, top1 FROM '{out}/runs/*.parquet' ORDER BY revision").fetchall()
    assert top1 == [
        (r, t)
        for r, t in table.drop_duplicates("revision")
        .sort_values("revision")[["revision", "top1"]]
        .itertuples(index=False)
    ]


def test_killed_panel_resumes_without_recomputing_or_partial_shards(hub, cache, tmp_path, monkeypatch):
    revisions = ["step256", "step512", "step1000"]
    path = panel_file(tmp_path, {PYTHIA: revisions})
    out = tmp_path / "out"
    throttle = hub.inject(Fault("throttle", target="*/model.safetensors", count=-1, bytes_per_s=4e6))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "headtrace", "run", str(path), "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((out / "runs").glob("*.parquet")):
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the panel wrote no shard in time"
            time.sleep(0.05)
        # While it runs, a second run on the same directory refuses.
        with pytest.raises(HeadtraceError, match=rf"pid {process.pid}"):
            run_panel(load_panel(path), out)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        process.kill()
        hub.faults.remove(throttle)

    finished = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.parquet")}
    assert 1 <= len(finished) < len(revisions)
    assert all((out / "heads" / name).is_file() for name in finished)  # no run record without its heads
    resumed = run_panel(load_panel(path), out)
    assert resumed.stale_lock["pid"] == process.pid
    assert sorted(resumed.skipped) == sorted(finished)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.parquet") if p.name in finished} == finished

    run_panel(load_panel(path), tmp_path / "uninterrupted")
    assert_same_tables(read_results(out), read_results(tmp_path / "uninterrupted"))


def test_a_corrupt_checkpoint_fails_its_revision_only_and_never_makes_a_shard(hub, cache, tmp_path):
    corrupt = hub.inject(Fault("corrupt", target="*/resolve/step4000/model.safetensors", count=-1))
    impatient = SCREEN + "[download]\nattempts = 2\nbackoff_s = 0.01\n"
    try:
        run = run_panel(
            load_panel(panel_file(tmp_path, {PYTHIA: ["step4000", "step5000"]}, screen=impatient)),
            tmp_path / "out",
        )
    finally:
        hub.faults.remove(corrupt)
    assert list(run.failed) == [f"{PYTHIA}@step4000"]
    assert "after 2 attempts (model.safetensors does not match the hub's hash)" in run.failed[f"{PYTHIA}@step4000"]
    assert [p.name for p in (tmp_path / "out" / "runs").glob("*.parquet")] == ["EleutherAI--pythia-1b@step5000.parquet"]
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["failed"][0]["task"] == f"{PYTHIA}@step4000"


def test_a_panel_that_stops_early_releases_the_download_it_prefetched(hub, cache, tmp_path):
    """The panel stops after its first task (as on a fatal error); the next revision, downloading in
    the background, is deleted once its download ends: nothing is left in the cache."""
    from headtrace.executors import ExecutionOptions, QuietReporter, TaskSettings, run_local
    from headtrace.panel import plan

    panel = load_panel(panel_file(tmp_path, {PYTHIA: ["step1", "step4"]}))
    tasks = plan(panel)
    running = run_local(
        tasks,
        TaskSettings(config=panel.screen, out=str(tmp_path / "out")),
        QuietReporter(),
        ExecutionOptions(prefetch=True),
    )
    assert not next(running).error
    running.close()  # what the panel's loop does when it breaks
    deadline = time.monotonic() + 30
    while cached_weights(cache) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cached_weights(cache) == []
