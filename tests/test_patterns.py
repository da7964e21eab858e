"""Kept attention patterns (`keep_patterns`) equal the rows of `output_attentions=True`, on every
route the screen reads attention on, and travel through the results folder."""

from __future__ import annotations

import numpy as np
import pytest
from models_zoo import tiny_model
from naive import full_patterns

from headtrace.models import ModelAdapter
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.schema import ScreenConfig
from headtrace.screen import screen
from headtrace.store import ResultsDir

SPEC = ProbeSpec(n_examples=12, seq_len=48)
CONFIG = ScreenConfig.of(n_examples=12, seq_len=48, batch_size=2, keep_patterns=3)


@pytest.fixture(scope="module")
def probe():
    return synthetic_induction(SPEC)


def check_patterns(model, probe, patterns):
    reference, _, _ = full_patterns(model, probe)  # [layers, n, heads, L, L]
    rows, positions = patterns["rows"], patterns["row_positions"]
    assert rows.dtype == np.float16 and rows.shape[0] == 3
    for slot, example in enumerate(patterns["examples"]):
        assert probe.induction[example] >= 0  # the first examples with an induction target
        span = positions[slot][positions[slot] >= 0]
        assert span[0] == probe.duplicate[example] and span[-1] == probe.query[example]
        expected = reference[:, example][:, :, span]  # [layers, heads, W, L]
        got = rows[slot, :, :, : len(span)].astype(np.float64)
        np.testing.assert_allclose(got, expected, atol=1e-3, rtol=2e-3)
        assert np.isnan(rows[slot, :, :, len(span) :]).all()
        np.testing.assert_array_equal(patterns["input_ids"][slot], probe.input_ids[example])
    assert len(set(patterns["examples"] // 2)) > 1  # the kept examples span micro-batches


@pytest.mark.parametrize(
    "arch, route, expected_route",
    [
        ("llama", "auto", "logsumexp"),  # grouped-query attention
        ("gpt_neox", "widened", "widened"),
        ("mistral", "auto", "widened"),  # sliding window, masked SDPA
        ("gemma2", "auto", "scores"),  # soft-capping
        ("gpt_neo", "auto", "module-weights"),
        ("falcon", "auto", "eager-weights"),
    ],
)
def test_kept_patterns_equal_output_attentions_rows(arch, route, expected_route, probe):
    model = tiny_model(arch)
    result = screen(ModelAdapter(model), probe, CONFIG, route=route)
    assert expected_route in result.run.attention_route[0]
    check_patterns(model, probe, result.patterns)


def test_a_transformer_lens_model_keeps_its_patterns(probe, tmp_path):
    from test_interop import hooked_transformer

    from headtrace.screen import screen_model

    hooked, model = hooked_transformer("gpt2", tmp_path / "tiny")
    result = screen_model(hooked, CONFIG, name="tiny")
    assert result.run.attention_route[0] == "transformer-lens"
    check_patterns(model, probe, result.patterns)


def test_patterns_are_stored_beside_the_shard_and_the_default_keeps_none(probe, tmp_path):
    model = tiny_model("llama")
    adapter = ModelAdapter(model)
    result = screen(adapter, probe, CONFIG, model_name="tiny", revision="step1")
    out = ResultsDir(tmp_path)
    out.write_shard(result.heads, result.run, result.patterns)
    stored = out.read_patterns("tiny", "step1")
    assert set(stored) == set(result.patterns)
    np.testing.assert_array_equal(stored["rows"], result.patterns["rows"])
    plain = screen(adapter, probe, CONFIG.replace(keep_patterns=0), model_name="tiny", revision="step1")
    assert plain.patterns is None
    out.write_shard(plain.heads, plain.run, plain.patterns)
    assert out.read_patterns("tiny", "step1") is None  # the earlier shard's patterns went with it


def test_keep_patterns_is_hashed_only_when_set():
    assert ScreenConfig().config_hash == ScreenConfig.of(keep_patterns=0).config_hash
    assert ScreenConfig().config_hash != ScreenConfig.of(keep_patterns=4).config_hash


def test_keep_patterns_is_checked():
    from headtrace.errors import HeadtraceError

    with pytest.raises(HeadtraceError, match="keep-patterns must be between 0 and n-examples"):
        ScreenConfig.of(n_examples=4, keep_patterns=5).validate()
