"""A screen keeps its state to itself: screens of two models in two threads give the tables they give
one after the other, nothing stays registered with transformers, and the attention route is a
parameter of the call."""

from __future__ import annotations

import threading

import pandas as pd
import pytest
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import headtrace.screen
from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.screen import ScreenConfig, flash_cpu_with_logsumexp, screen
from models_zoo import tiny_model

TIMING = ["wall_s", "started_at"]
CONFIG = ScreenConfig.of(batch_size=4)


def registered() -> list[str]:
    return [name for name in ALL_ATTENTION_FUNCTIONS if name.startswith("headtrace")]


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.heads, b.heads, check_exact=True)
    pd.testing.assert_frame_equal(a.run.drop(columns=TIMING), b.run.drop(columns=TIMING), check_exact=True)


@pytest.mark.parametrize("route", ["logsumexp", "widened"])
def test_two_screens_in_two_threads_match_one_after_the_other(route):
    jobs = {
        "neox": (tiny_model("gpt_neox"), synthetic_induction(ProbeSpec(n_examples=12, seq_len=64))),
        "llama": (tiny_model("llama", seed=1), synthetic_induction(ProbeSpec(n_examples=10, seq_len=48, seed=3))),
    }
    alone = {name: screen(ModelAdapter(model), probe, CONFIG, route=route) for name, (model, probe) in jobs.items()}

    # Each screen waits after its first micro-batch until the other is mid-pass too.
    both_running = threading.Barrier(len(jobs), timeout=60)
    together, errors = {}, []

    def run(name: str) -> None:
        model, probe = jobs[name]
        waited = []

        def meet(_done: int, _total: int) -> None:
            if not waited:
                waited.append(both_running.wait())

        try:
            together[name] = screen(ModelAdapter(model), probe, CONFIG, progress=meet, route=route)
        except BaseException as exc:  # noqa: BLE001 (reported below, from the main thread)
            errors.append(exc)
            both_running.abort()

    threads = [threading.Thread(target=run, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for name in jobs:
        assert_same(together[name], alone[name])
    assert registered() == []


def test_nothing_stays_registered_and_the_model_is_restored():
    model = tiny_model("gpt2")
    probe = synthetic_induction(ProbeSpec(n_examples=6, seq_len=48))
    assert registered() == []
    screen(ModelAdapter(model), probe, CONFIG)
    assert registered() == [] and model.config._attn_implementation == "sdpa"

    def fail(_done: int, _total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        screen(ModelAdapter(model), probe, CONFIG, progress=fail)
    assert registered() == [] and model.config._attn_implementation == "sdpa"


def test_without_the_flash_op_auto_takes_widened_values(monkeypatch):
    model = tiny_model("llama")
    probe = synthetic_induction(ProbeSpec(n_examples=6, seq_len=48))
    widened = screen(ModelAdapter(model), probe, CONFIG, route="widened")
    monkeypatch.setattr(headtrace.screen, "flash_cpu_with_logsumexp", lambda: None)
    assert_same(screen(ModelAdapter(model), probe, CONFIG, route="auto"), widened)
    with pytest.raises(HeadtraceError, match="log-sum-exp"):
        screen(ModelAdapter(model), probe, CONFIG, route="logsumexp")
    with pytest.raises(ValueError, match="unknown route"):
        screen(ModelAdapter(model), probe, CONFIG, route="fast")


def test_the_flash_op_is_probed_once():
    assert flash_cpu_with_logsumexp() is flash_cpu_with_logsumexp()
    assert flash_cpu_with_logsumexp.cache_info().currsize == 1
