"""A checkpoint series before downloading it (`headtrace revisions`, series.py): every revision's
weight files from the hub's listing alone, through the real huggingface_hub client against the
local hub server, with duplicates of each kind; a local folder hashed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from headtrace.cli import app
from headtrace import panel as panel_module
from headtrace.errors import EXIT_FAILED, EXIT_USAGE, HeadtraceError
from headtrace.panel import dry_run, load_panel, run_panel
from headtrace.revisions import parse_revision
from headtrace.series import SUSPECT_RATIO, distance, list_series
from headtrace.sources import HubSource, LocalSource
from headtrace.store import read_results
from hub_server import FakeRepo, Fault, HubServer
from panel_helpers import SCREEN, SERIES, TIMING_COLUMNS, panel_file, point_hub_env, series_repo, sharded


@pytest.fixture(scope="module")
def series_hub():
    with HubServer([series_repo()]) as server:
        yield server


@pytest.fixture
def hf(series_hub, tmp_path, monkeypatch):
    return point_hub_env(monkeypatch, series_hub.url, tmp_path / "hf")


def invoke(*args: str):
    return CliRunner().invoke(app, ["revisions", *args], env={"COLUMNS": "200"})


def test_revisions_names_each_duplicate_from_the_listing_alone(series_hub, hf):
    before = len(series_hub.requests)
    result = invoke(SERIES, "--json", "--log", "3")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    rows = {row["revision"]: row for row in document["revisions"]}
    assert list(rows) == ["step0", "step1", "step2", "step3", "step4", "step5"]
    assert document["final"] == "step5" and document["aliases"] == {"main": "step5"}
    assert rows["step5"]["aliases"] == ["main"]
    # Sizes and file counts as the server holds them (three shards each).
    files = {n: d for n, d in sharded(2).items() if n.endswith(".safetensors")}
    assert rows["step2"]["weight_files"] == 3 and rows["step2"]["weight_bytes"] == sum(map(len, files.values()))
    found = {(d["revision"], d["kind"], d["of"]): d for d in document["duplicates"]}
    assert set(found) == {
        ("step1", "identical", "step0"),
        ("step3", "shares_files", "step5"),
        ("step4", "equal_to_final", "step5"),
    }
    first = min(files)
    assert found[("step3", "shares_files", "step5")]["saved_bytes"] == len(sharded(5)[first])
    assert found[("step1", "identical", "step0")]["saved_bytes"] == rows["step0"]["weight_bytes"]
    assert document["log"]["revisions"] == ["step0", "step1", "step5"]  # by step: no tokens per step known
    new = series_hub.requests[before:]
    assert not [r for r in new if "/resolve/" in r["path"]], "no file was downloaded"
    assert sum("/tree/" in r["path"] for r in new) == 6  # one listing per revision; main is an alias
    # Listings are cached by commit: a second run asks for the refs only.
    before = len(series_hub.requests)
    again = invoke(SERIES, "--json", "--log", "3")
    assert json.loads(again.stdout)["duplicates"] == document["duplicates"]
    assert [r["path"] for r in series_hub.requests[before:]] == [f"/api/models/{SERIES}/refs"]


def test_the_text_table_marks_final_aliases_duplicates_and_prints_the_selection(hf):
    result = invoke(SERIES, "--log", "3", "--tokens-per-step", "1000")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "step5 (final)" in out and "main" in out
    assert "step1 is identical to step0" in out
    assert "step3 shares 1 of 3 weight files with step5" in out
    assert "step4 is equal to the final revision step5" in out
    assert 'revisions = ["step0", "step1", "step5"]' in out


def test_unknown_model_and_unreachable_hub_end_in_one_line(series_hub, hf, monkeypatch):
    result = invoke("test/nothing-here")
    assert isinstance(result.exception, HeadtraceError) and result.exception.exit_code == EXIT_USAGE
    assert "model 'test/nothing-here' was not found" in str(result.exception)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    result = invoke(SERIES, "--attempts", "1")
    assert result.exception.exit_code == EXIT_FAILED and "(no cached listing" in str(result.exception)
    monkeypatch.setenv("HF_ENDPOINT", series_hub.url)
    assert invoke(SERIES).exit_code == 0
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    result = invoke(SERIES, "--attempts", "1")
    assert result.exception.exit_code == EXIT_FAILED and "offline cache's answer" in str(result.exception)
    assert "step4 is equal to the final revision step5" in result.stdout
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the cache answers, and that is no failure
    assert invoke(SERIES).exit_code == 0


def test_a_local_folder_is_hashed_and_gives_the_same_answer(series_hub, hf, tmp_path):
    root = tmp_path / "run"
    repo = series_hub.repos[SERIES]
    for branch in ["step0", "step1", "step2", "step3", "step4", "step5"]:
        (root / branch).mkdir(parents=True)
        for name, data in repo.files(branch).items():
            (root / branch / name).write_bytes(data)
    local = list_series(LocalSource(str(root), model="run"))
    hub = list_series(HubSource(SERIES))
    assert [(d.revision, d.kind, d.of) for d in local.duplicates] == [
        (d.revision, d.kind, d.of) for d in hub.duplicates
    ]
    assert [e.checkpoint_hash for e in local.listed] == [e.checkpoint_hash for e in hub.listed]
    result = invoke(str(root))
    assert result.exit_code == 0 and "reads every byte" in result.output
    shutil.rmtree(root)
    root.mkdir()
    result = invoke(str(root))
    assert result.exception.exit_code == EXIT_USAGE and "holds no checkpoint folders" in str(result.exception)


def sha_of_download(hub, request) -> str:
    """The sha256 of the file a logged resolve GET served."""
    branch, name = request["path"].split("/resolve/")[1].split("/", 1)
    return hashlib.sha256(hub.repos[SERIES].files(branch)[name]).hexdigest()


def test_a_panel_downloads_each_distinct_weight_file_once_and_takes_identical_tables(
    series_hub, hf, tmp_path, monkeypatch
):
    panel = load_panel(panel_file(tmp_path, {SERIES: "all"}))
    before = len(series_hub.requests)
    rows = {r.revision: r for r in dry_run(panel, tmp_path / "out")}
    assert not [r for r in series_hub.requests[before:] if "/resolve/" in r["path"]], "a dry run downloads nothing"
    assert {n: r.action for n, r in rows.items()} == {
        "step0": "download",
        "step1": "same weights",
        "step2": "download",
        "step3": "download",
        "step4": "download",
        "step5": "same weights",
    }
    assert rows["step0"].bytes == sum(len(d) for n, d in sharded(0).items() if n.endswith(".safetensors"))
    assert "equal to the final revision step5" in rows["step4"].why and "shares 1 of 3" in rows["step3"].why

    printed = CliRunner().invoke(
        app, ["run", str(panel.path), "--dry-run", "--out", str(tmp_path / "out")], env={"COLUMNS": "200"}
    )
    assert printed.exit_code == 0 and "4 revisions to download (22.1 MB), 2 with the same weights" in printed.stdout
    assert not (tmp_path / "out").exists()

    # step4's download starts late, after step3's screen: step3's files wait for it in the cache.
    fetch = HubSource.fetch

    def late(source, revision, progress=None):
        if revision.name == "step4":
            time.sleep(2)
        return fetch(source, revision, progress)

    monkeypatch.setattr(HubSource, "fetch", late)
    before = len(series_hub.requests)
    outcome = run_panel(panel, tmp_path / "out")
    weights = [r for r in series_hub.requests[before:] if r["method"] == "GET" and r["path"].endswith(".safetensors")]
    shas = [sha_of_download(series_hub, r) for r in weights]
    assert len(shas) == len(set(shas)) == 11  # 4 revisions screened; step3 and step4 share one file
    assert (
        sorted(outcome.copied)
        == sorted(outcome.copies)
        == [
            "test--series@step1.parquet",
            "test--series@step5.parquet",
        ]
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {(e["revision"], e["same_weights_as"]) for e in manifest["same_weights"]} == {
        ("step1", "step0"),
        ("step5", "step4"),
    }
    assert {e["revision"] for e in manifest["weights_warnings"]} == {"step3", "step4"}
    heads, runs = read_results(tmp_path / "out")
    marked = dict(zip(runs.revision, runs.same_weights_as))
    assert marked["step1"] == "step0" and marked["step5"] == "step4" and pd.isna(marked["step2"])
    warned = dict(zip(runs.revision, runs.weights_warning))
    assert "shares 1 of 3" in warned["step3"] and "equal to the final" in warned["step4"] and pd.isna(warned["step2"])

    listing = CliRunner().invoke(app, ["results", str(tmp_path / "out")], env={"COLUMNS": "250"})
    assert "2 revisions have a weights warning" in listing.output and "shares 1 of 3" in listing.output
    from headtrace.report import build_report

    page = build_report(tmp_path / "out").read_text()
    assert 'id="warnings"' in page and "equal to the final revision step5" in page
    assert "weights warning: step4 is equal to the final" in page  # the triangle's hover text

    # The same panel downloading and screening everything gives the same tables.
    monkeypatch.setattr(panel_module, "weights_plan", lambda tasks, keep=(): panel_module.WeightsPlan())
    run_panel(panel, tmp_path / "everything")
    full_heads, full_runs = read_results(tmp_path / "everything")
    pd.testing.assert_frame_equal(heads, full_heads, check_exact=True)
    ignore = [*TIMING_COLUMNS, "same_weights_as", "weights_warning"]
    pd.testing.assert_frame_equal(
        runs.drop(columns=ignore, errors="ignore"), full_runs.drop(columns=ignore, errors="ignore"), check_exact=True
    )


def interpolated_series(root, planted: int | None = None, n: int = 7) -> None:
    """Checkpoints step0..step{n-1} whose weights move linearly from one random tiny model to another;
    `planted` serves (almost) the final weights instead, re-saved under a new hash (Pythia #108)."""
    import torch

    from models_zoo import tiny_model

    start, end = tiny_model("gpt_neox", 0), tiny_model("gpt_neox", 1)
    ends = (start.state_dict(), end.state_dict())
    for k in range(n):
        t = 0.99 if k == planted else k / (n - 1)
        model = tiny_model("gpt_neox", 0)
        with torch.no_grad():
            model.load_state_dict({name: (1 - t) * ends[0][name] + t * ends[1][name] for name in ends[0]})
        model.save_pretrained(root / f"step{k}")


def test_the_neighbour_check_flags_a_planted_branch_and_nothing_on_an_honest_series(tmp_path):
    interpolated_series(tmp_path / "honest")
    interpolated_series(tmp_path / "planted", planted=3)
    models = "".join(
        f'[[models]]\nid = "tiny/{name}"\nsource = "local"\npath = "{name}"\n'
        'tokens_per_step = 1000\nrevisions = "all"\n'
        for name in ("honest", "planted")
    )
    (tmp_path / "p.toml").write_text(f'name = "p"\n{SCREEN}\n{models}')
    outcome = run_panel(load_panel(tmp_path / "p.toml"), tmp_path / "out")
    assert [(s.model, s.revision, s.closer_to) for s in outcome.suspects] == [("tiny/planted", "step3", "step6")]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [(s["model"], s["revision"]) for s in manifest["suspects"]] == [("tiny/planted", "step3")]
    heads, runs = read_results(tmp_path / "out")
    assert len(runs) == 14, "the check never drops data"
    suspect = outcome.suspects[0]
    assert suspect.distance < SUSPECT_RATIO * suspect.neighbour_distance
    # The distance by its definition, computed independently.
    a, b = (heads[(heads.model == "tiny/planted") & (heads.revision == r)] for r in ("step3", "step6"))
    keep = ~(a.baseline_underflow.to_numpy() | b.baseline_underflow.to_numpy())
    columns = [c for c in heads.columns if c.startswith("sel_")]
    logs = [np.log10(np.clip(t[columns].to_numpy(float), 1e-12, None))[keep] for t in (a, b)]
    assert distance(a, b) == pytest.approx(np.abs(logs[0] - logs[1]).mean())


# --------------------------------------------------------------------------------------------
# Parallel downloads of one revision's weight files.


def fetch_into(home, monkeypatch, max_workers: int, name: str = "step2", progress=None):
    monkeypatch.setenv("HF_HOME", str(home))
    return HubSource(SERIES, max_workers=max_workers).fetch(parse_revision(name), progress)


def test_parallel_downloads_give_the_same_files_and_hashes_as_sequential_ones(series_hub, hf, tmp_path, monkeypatch):
    series_hub.clear_faults()
    series_hub.inject(Fault("throttle", target="*/resolve/step2/*.safetensors", count=-1, bytes_per_s=20e6))
    one = fetch_into(tmp_path / "one", monkeypatch, 1)
    seen, threads = [], set()

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        threads.add(threading.current_thread().name)

    four = fetch_into(tmp_path / "four", monkeypatch, 4, progress=progress)
    series_hub.clear_faults()
    assert four.checkpoint_hash == one.checkpoint_hash
    served = series_hub.repos[SERIES].files("step2")
    for checkpoint in (one, four):
        assert {p.name: p.read_bytes() for p in Path(checkpoint.path).iterdir()} == served
    assert len({t for t in threads if t.startswith("headtrace-download")}) >= 2, "the weight files came side by side"
    total = sum(map(len, served.values()))
    assert seen[-1] == (total, total) and all(0 <= d <= total for d, _ in seen)
    assert four.downloaded_bytes == one.downloaded_bytes == total


def test_the_free_space_check_counts_the_downloads_under_way(series_hub, hf, tmp_path):
    """A real 4 MiB tmpfs as the hub cache: two 2.6 MB shards do not fit side by side, and the second
    is refused before it starts, naming the download under way."""
    out = tmp_path / "small"
    out.mkdir()
    code = (
        "from headtrace.sources import HubSource; from headtrace.revisions import parse_revision\n"
        "from headtrace.errors import DiskFull\n"
        f"try:\n    HubSource('{SERIES}', max_workers=4).fetch(parse_revision('step2'))\n"
        "except DiskFull as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "HF_HOME": str(out), "PYTHONPATH": os.pathsep.join(sys.path)}
    script = f'mount -t tmpfs -o size=4m tmpfs {out} && {sys.executable} -c "$CODE"'
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount"]
    proc = subprocess.run(
        [*unshare, "bash", "-c", script], env={**env, "CODE": code}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "downloads under way" in proc.stdout and "GB are free" in proc.stdout, proc.stdout + proc.stderr


def test_a_kill_mid_download_resumes_without_corrupt_files(series_hub, hf, tmp_path):
    """Two 12 MB weight files side by side, killed once each has written its first 10 MB chunk (huggingface_hub
    writes 10 MB at a time): a fetch afterwards completes both, verified, and every blob is whole. (This
    huggingface_hub downloads into a file unique to its process, so a new process starts a file over,
    and removes the killed one's part-written files; a dropped connection within one fetch resumes with
    a range request: test_sources.py.)"""
    rng = np.random.default_rng(1)
    files = {f"pytorch_model-0000{i}-of-00002.bin": rng.bytes(12 << 20) for i in (1, 2)}
    series_hub.add(FakeRepo("test/large", {"main": lambda: {"config.json": b"{}", **files}}))
    series_hub.clear_faults()
    series_hub.inject(
        Fault("throttle", target="*/resolve/main/*.bin", count=-1, bytes_per_s=6e6, shared_bytes_per_s=8e6)
    )
    code = (
        "from headtrace.sources import HubSource; from headtrace.revisions import parse_revision\n"
        "HubSource('test/large', max_workers=4).fetch(parse_revision('main'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-c", code], env=env)
    blobs = hf / "models--test--large" / "blobs"
    deadline, partial = time.monotonic() + 60, []
    while time.monotonic() < deadline and len(partial) < 2:  # until both files are part-written
        partial = [p for p in blobs.glob("*.incomplete") if p.stat().st_size >= 10 << 20] if blobs.is_dir() else []
        time.sleep(0.05)
    process.kill()
    process.wait()
    series_hub.clear_faults()
    assert len(partial) == 2, "the kill came mid-download"
    checkpoint = HubSource("test/large").fetch(parse_revision("main"))
    assert {p.name: p.read_bytes() for p in Path(checkpoint.path).iterdir()} == {"config.json": b"{}", **files}
    for blob in blobs.iterdir():  # every blob whole: an LFS blob is named by its sha256
        if len(blob.name) == 64:
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert not list(blobs.glob("*.incomplete")), "what the killed process part-wrote is gone"


def test_the_run_section_sets_max_workers_for_hub_sources(tmp_path):
    path = panel_file(tmp_path, {SERIES: ["step0"]})
    assert load_panel(path).max_workers == 4
    path.write_text(path.read_text() + "\n[run]\nmax_workers = 2\n")
    panel = load_panel(path)
    assert panel.max_workers == 2 and panel.models[0].checkpoint_source(panel.retry, 2).max_workers == 2
    path.write_text(path.read_text().replace("max_workers = 2", "max_workers = 0"))
    with pytest.raises(HeadtraceError, match=r"panel.toml:\d+: max_workers must be >= 1"):
        load_panel(path)


def test_offline_a_panel_plans_with_the_cached_listing_or_without_one(series_hub, hf, tmp_path, monkeypatch):
    for name in ("step0", "step1"):  # the offline cache knows these two revisions
        HubSource(SERIES).fetch(parse_revision(name))
    panel = load_panel(panel_file(tmp_path, {SERIES: ["step0", "step1"]}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    weights = panel_module.weights_plan(panel_module.plan(panel))
    assert not weights.copies and "planned without the hub's listing" in weights.notes[0]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    list_series(HubSource(SERIES))  # listed once online: cached by commit
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    requests = len(series_hub.requests)
    weights = panel_module.weights_plan(panel_module.plan(panel))
    assert weights.copies == {"test--series@step1.parquet": "test--series@step0.parquet"} and not weights.notes
    assert len(series_hub.requests) == requests
