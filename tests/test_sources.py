"""Checkpoint sources: the hub through the real huggingface_hub client against a local server (discovery,
verified downloads, faults, offline cache), local directories and the organism layout."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from headtrace import sources
from headtrace.errors import HeadtraceError
from headtrace.panel import load_panel, run_panel
from headtrace.revisions import NameMap, parse_revision
from headtrace.sources import HubSource, LocalSource, RetryPolicy
from headtrace.store import read_results
from hub_server import OLMO_BRANCHES, PYTHIA_BRANCHES, FakeRepo, Fault
from models_zoo import tiny_model
from panel_helpers import OLMO, PYTHIA, SCREEN

FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05)


def served_hash(hub, repo_id: str, branch: str) -> str:
    """The checkpoint hash by its definition, from the bytes the server holds."""
    weights = hashlib.sha256(hub.repos[repo_id].files(branch)["model.safetensors"]).hexdigest()
    return hashlib.sha256(f"model.safetensors {weights}".encode()).hexdigest()


def fetch(source: HubSource, name: str):
    return source.fetch(parse_revision(name, 2_097_152))


def test_hub_discovery_lists_every_branch_with_tokens(cache):
    pythia = HubSource(PYTHIA).revisions()
    assert sorted(r.name for r in pythia) == sorted(PYTHIA_BRANCHES)
    assert {r.name: r.tokens for r in pythia}["step143000"] == 143000 * 2_097_152
    olmo = {r.name: r.tokens for r in HubSource(OLMO).revisions()}
    assert olmo["step1454000-tokens3048B"] == 3048e9 and olmo["main"] is None and len(olmo) == len(OLMO_BRANCHES)
    with pytest.raises(HeadtraceError, match="model 'EleutherAI/pythia-1x' was not found"):
        HubSource("EleutherAI/pythia-1x").revisions()


def test_hub_fetch_verifies_and_hashes_what_the_hub_serves(hub, cache):
    source = HubSource(PYTHIA, retry=FAST)
    one, two, four = (fetch(source, r) for r in ("step1", "step2", "step4"))
    assert one.checkpoint_hash == served_hash(hub, PYTHIA, "step1") == two.checkpoint_hash  # step2 = step1's files
    assert four.checkpoint_hash == served_hash(hub, PYTHIA, "step4") != one.checkpoint_hash
    assert (Path(four.path) / "model.safetensors").read_bytes() == hub.repos[PYTHIA].files("step4")["model.safetensors"]
    for checkpoint in (one, two, four):
        source.release(checkpoint)
    # Weights are gone; the small config and tokenizer files, shared between revisions, stay.
    assert not list(cache.rglob("snapshots/*/model.safetensors"))
    assert not [p for p in cache.rglob("blobs/*") if p.stat().st_size > 100_000]
    assert sum(p.stat().st_size for p in cache.rglob("blobs/*")) < 100_000


def test_a_release_never_deletes_the_blob_another_revision_just_linked(hub, cache, monkeypatch):
    """step2 serves step1's files, so both link one blob. A release of step1 (after its screen) whose
    scan for other links ran just before step2's prefetch linked the blob must not leave step2 without
    its weights; the release's scan is held open here until step2's fetch returns (or 2 s)."""
    source = HubSource(PYTHIA, retry=FAST)
    one = fetch(source, "step1")
    scanned, fetched = threading.Event(), threading.Event()
    scan = sources._linked_elsewhere

    def slow_scan(blob: Path) -> bool:
        linked = scan(blob)
        scanned.set()
        fetched.wait(timeout=2)
        return linked

    monkeypatch.setattr(sources, "_linked_elsewhere", slow_scan)
    release = threading.Thread(target=source.release, args=(one,))
    release.start()
    assert scanned.wait(timeout=30)
    two = fetch(source, "step2")
    fetched.set()
    release.join()
    weights = hub.repos[PYTHIA].files("step1")["model.safetensors"]
    assert (Path(two.path) / "model.safetensors").read_bytes() == weights


@pytest.mark.parametrize(
    "fault",
    [
        Fault("drop", after_bytes=200_000),  # huggingface_hub resumes the stream itself
        Fault("truncate", after_bytes=1000),  # a complete response that is too short
        Fault("corrupt"),  # right length, wrong sha256
        Fault("status", status=500, count=2),
        Fault("status", status=429, count=2),
    ],
    ids=lambda f: f"{f.kind}-{f.status}" if f.kind == "status" else f.kind,
)
def test_transient_faults_are_retried_and_the_file_is_intact(hub, cache, fault):
    fault.target = "*/resolve/step8/model.safetensors"
    hub.inject(fault)
    checkpoint = fetch(HubSource(PYTHIA, retry=FAST), "step8")
    assert fault.hits == fault.count
    assert checkpoint.checkpoint_hash == served_hash(hub, PYTHIA, "step8")
    assert len(hub.downloads("/step8/model.safetensors")) >= 1


@pytest.mark.parametrize("kind", ["truncate", "corrupt"])
def test_persistent_faults_end_in_one_clear_error_and_leave_no_file(hub, cache, kind):
    hub.inject(Fault(kind, target="*/resolve/step16/model.safetensors", count=-1, after_bytes=1000))
    before = len(hub.downloads("/step16/model.safetensors"))
    with pytest.raises(
        HeadtraceError,
        match=r"cannot download model\.safetensors of revision 'step16' of "
        r"EleutherAI/pythia-1b after 3 attempts .*re-run",
    ):
        fetch(HubSource(PYTHIA, retry=FAST), "step16")
    assert len(hub.downloads("/step16/model.safetensors")) - before == 3
    assert not [p for p in cache.rglob("blobs/*") if p.stat().st_size > 100_000]


def test_throttled_downloads_take_their_time(hub, cache):
    size = len(hub.repos[PYTHIA].files("step32")["model.safetensors"])
    hub.inject(Fault("throttle", target="*/resolve/step32/model.safetensors", bytes_per_s=size / 0.5))
    started = time.perf_counter()
    fetch(HubSource(PYTHIA), "step32")
    assert time.perf_counter() - started >= 0.45


def test_offline_mode_uses_the_cache_only(hub, cache, monkeypatch):
    source = HubSource(PYTHIA)
    fetch(source, "step64")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    requests = len(hub.requests)
    assert [r.name for r in source.revisions()] == ["step64"]
    assert fetch(source, "step64").checkpoint_hash == served_hash(hub, PYTHIA, "step64")
    with pytest.raises(
        HeadtraceError, match="HF_HUB_OFFLINE is set and EleutherAI/pythia-1b@step128 is not in the cache"
    ):
        fetch(source, "step128")
    assert len(hub.requests) == requests


def save_checkpoints(root: Path, names_and_seeds: dict[str, int]) -> None:
    for name, seed in names_and_seeds.items():
        tiny_model("llama", seed).save_pretrained(root / name)


def test_local_directory_tokens_from_names_and_weights_hashed(tmp_path):
    save_checkpoints(tmp_path, {"step100": 0, "step300": 1})
    shutil.copytree(tmp_path / "step100", tmp_path / "step200")  # the same weights under another name
    source = LocalSource(str(tmp_path), model="mine", names=NameMap(tokens_per_step=1000))
    revisions = source.revisions()
    assert [(r.name, r.tokens) for r in revisions] == [("step100", 1e5), ("step200", 2e5), ("step300", 3e5)]
    hashes = [source.fetch(r).checkpoint_hash for r in revisions]
    assert hashes[0] == hashes[1] != hashes[2]
    weights = hashlib.sha256((tmp_path / "step300" / "model.safetensors").read_bytes()).hexdigest()
    assert hashes[2] == hashlib.sha256(f"model.safetensors {weights}".encode()).hexdigest()
    source.release(source.fetch(revisions[0]))
    assert (tmp_path / "step100" / "model.safetensors").is_file()  # a user's directory is never touched


def test_organism_layout_reads_tokens_from_revisions_json(tmp_path):
    root = tmp_path / "organism"
    save_checkpoints(root, {"step000016": 0, "step000128": 1})
    entries = [
        {"revision": "step000128", "step": 128, "tokens": 65536.0},
        {"revision": "step000016", "step": 16, "tokens": 8192.0},
    ]
    (root / "revisions.json").write_text(json.dumps(entries))
    revisions = LocalSource(str(root), model="organism", organism=True).revisions()
    assert [(r.name, r.step, r.tokens) for r in revisions] == [
        ("step000016", 16, 8192.0),
        ("step000128", 128, 65536.0),
    ]

    panel = tmp_path / "organism.toml"
    panel.write_text(
        f'{SCREEN}\n[[models]]\nid = "organism"\nsource = "organism"\npath = "organism"\nrevisions = "all"\n'
    )
    run_panel(load_panel(panel), tmp_path / "out")
    runs = read_results(tmp_path / "out")[1]
    assert list(zip(runs.revision, runs.tokens)) == [("step000016", 8192.0), ("step000128", 65536.0)]
    assert set(runs.source) == {f"organism:{root}"}

    (root / "revisions.json").unlink()
    with pytest.raises(HeadtraceError, match="has no revisions.json: it is not a model organism's output"):
        LocalSource(str(root), model="organism", organism=True).revisions()


def test_a_connection_dropped_late_in_a_large_file_resumes_with_a_range_request(hub, cache):
    """huggingface_hub writes 10 MB chunks: a drop after the first one resumes from there, not from 0."""
    data = np.random.default_rng(0).bytes(12 << 20)
    hub.add(FakeRepo("test/large", {"main": lambda: {"config.json": b"{}", "pytorch_model.bin": data}}))
    hub.inject(Fault("drop", target="*/pytorch_model.bin", after_bytes=11 << 20))
    checkpoint = HubSource("test/large", retry=FAST).fetch(parse_revision("main"))
    assert (Path(checkpoint.path) / "pytorch_model.bin").read_bytes() == data
    ranges = [r["range"] for r in hub.downloads("/pytorch_model.bin")]
    assert ranges == [None, f"bytes={10 << 20}-"]
