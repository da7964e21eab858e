"""The screen's loop over micro-batches never waits on the device and never copies from the host.

On a GPU, a host sync inside the loop (`.item()`, `.cpu()`, `bool(tensor)`, ...) stalls the pipeline
once per micro-batch, and a host->device copy (`torch.as_tensor(numpy_array, device=...)`) does too.
These tests run on the CPU, where nothing stalls, so they watch for the calls themselves: every
tensor-to-Python conversion and every tensor made from host data is recorded while `_stream` (the
loop) runs. The benchmark's `--device cuda` run adds torch.cuda.set_sync_debug_mode("error").
"""

from __future__ import annotations

import contextlib
import traceback

import numpy as np
import pytest
import torch

import headtrace.screen
from headtrace.models import ModelAdapter
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.screen import ScreenConfig, screen
from models_zoo import tiny_model

# Tensor methods that hand a value to Python (a device->host sync on a GPU).
TO_HOST = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__")
# Functions that make a tensor from host data (a host->device copy when given a device).
FROM_HOST = ("as_tensor", "tensor", "from_numpy")


@contextlib.contextmanager
def watch_host_traffic(calls: list[str]):
    """Record (name and caller) every host sync or host->device copy made inside the block."""
    saved = {}

    def wrap(owner, name):
        original = getattr(owner, name)
        saved[(owner, name)] = original

        def recorder(*args, **kwargs):
            calls.append(f"{name} from {traceback.format_stack(limit=3)[0].strip()}")
            return original(*args, **kwargs)

        setattr(owner, name, recorder)

    try:
        for name in TO_HOST:
            wrap(torch.Tensor, name)
        for name in FROM_HOST:
            wrap(torch, name)
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


@pytest.fixture
def loop_calls(monkeypatch):
    """Host traffic seen while the screen's loop runs (and only then)."""
    calls: list[str] = []
    stream = headtrace.screen._stream

    def watched(*args, **kwargs):
        with watch_host_traffic(calls):
            stream(*args, **kwargs)

    monkeypatch.setattr(headtrace.screen, "_stream", watched)
    return calls


@pytest.mark.parametrize(
    "arch, route, keep",
    [(a, r, 0) for a in ("gpt_neox", "llama") for r in ("logsumexp", "widened")]
    + [("llama", r, 3) for r in ("logsumexp", "widened")],  # kept patterns stay on the device until the pass ends
)
def test_loop_has_no_host_sync_nor_host_copy(arch, route, keep, loop_calls):
    probe = synthetic_induction(ProbeSpec(n_examples=10, seq_len=64))
    progress = []
    result = screen(
        ModelAdapter(tiny_model(arch)),
        probe,
        ScreenConfig.of(batch_size=4, keep_patterns=keep),
        progress=lambda done, total: progress.append(done),
        route=route,
    )
    assert progress == [4, 4, 2]  # the loop ran, over three micro-batches
    assert np.isfinite(result.heads.sel_induction).all()
    assert loop_calls == [], "host traffic inside the screen's loop:\n" + "\n".join(loop_calls)


def test_the_watch_sees_syncs_and_copies():
    """The guard can fail: each kind of forbidden call is recorded."""
    calls: list[str] = []
    x = torch.ones(3)
    with watch_host_traffic(calls):
        x.sum().item()
        bool(x.any())
        x.cpu()
        x.tolist()
        torch.as_tensor(np.zeros(2))
    names = [c.split(" ")[0] for c in calls]
    assert names == ["item", "__bool__", "cpu", "tolist", "as_tensor"]
