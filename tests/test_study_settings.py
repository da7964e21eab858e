"""The study's precision and PR sample as options: `pr_examples` in the screen, a `dtype` per panel model."""

from __future__ import annotations

import numpy as np
import pytest

from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter
from headtrace.panel import load_panel, run_panel
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.schema import ScreenConfig
from headtrace.screen import screen
from headtrace.store import read_results
from models_zoo import tiny_model

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_pr_examples_takes_pr_from_the_first_examples_only():
    """PR from the first 8 of 16 examples equals the PR of a screen of those 8 examples alone
    (the synthetic batch's first sequences do not depend on n), and differs from all 16's."""
    small = synthetic_induction(ProbeSpec(n_examples=8, seq_len=64))
    full = synthetic_induction(ProbeSpec(n_examples=16, seq_len=64))
    assert np.array_equal(full.input_ids[:8], small.input_ids)
    adapter = ModelAdapter(tiny_model("gpt_neox", 0))
    subset = screen(adapter, full, ScreenConfig.of(n_examples=16, seq_len=64, pr_examples=8, batch_size=5)).heads
    alone = screen(adapter, small, ScreenConfig.of(n_examples=8, seq_len=64)).heads
    every = screen(adapter, full, ScreenConfig.of(n_examples=16, seq_len=64)).heads
    np.testing.assert_allclose(subset.pr, alone.pr, rtol=1e-6)
    np.testing.assert_allclose(subset.pr_cov, alone.pr_cov, rtol=1e-6)
    assert not np.allclose(subset.pr, every.pr, rtol=1e-3)
    np.testing.assert_allclose(subset.sel_induction, every.sel_induction, rtol=1e-9)  # selectivity: every example


def test_pr_examples_is_hashed_and_checked():
    assert ScreenConfig.of(pr_examples=500).config_hash != ScreenConfig().config_hash
    assert ScreenConfig.of(pr_examples=500).config_hash != ScreenConfig.of(pr_examples=499).config_hash
    with pytest.raises(HeadtraceError, match=r"pr-examples must be between 1 and n-examples \(2000\)"):
        ScreenConfig.of(pr_examples=2001).validate()


def test_study_panel_files_parse_with_their_settings():
    """panels/xu2026.toml: headtrace's defaults; panels/xu2026-study.toml: the study's precision and PR sample."""
    default = load_panel(ROOT / "panels" / "xu2026.toml")
    study = load_panel(ROOT / "panels" / "xu2026-study.toml")
    assert {m.id: default.screen_for(m.id).dtype for m in default.models} == dict.fromkeys(
        ["EleutherAI/pythia-1b", "allenai/OLMo-1B-0724-hf", "allenai/OLMoE-1B-7B-0924"], "float32"
    )
    assert default.screen.pr_examples is None
    assert {m.id: study.screen_for(m.id).dtype for m in study.models} == {
        "EleutherAI/pythia-1b": "float32",
        "allenai/OLMo-1B-0724-hf": "float16",
        "allenai/OLMoE-1B-7B-0924": "float16",
    }
    assert study.screen.pr_examples == 500 and study.screen.probe.n_examples == 2000
    assert [m.revisions for m in study.models] == [m.revisions for m in default.models]
    assert (
        study.expectations
        == default.expectations
        == {
            "EleutherAI/pythia-1b": {"F2": "gradual"},
            "allenai/OLMo-1B-0724-hf": {"F2": "sharp"},
            "allenai/OLMoE-1B-7B-0924": {"F2": "gradual"},
        }
    )


def test_a_panel_model_screens_in_its_own_dtype(tmp_path):
    for model, seed in (("a", 0), ("b", 1)):
        for step in ("step1", "step2"):
            tiny_model("llama", seed).save_pretrained(tmp_path / model / step)
    panel = tmp_path / "p.toml"
    panel.write_text(
        'name = "p"\n[screen]\nn_examples = 8\nseq_len = 48\npr_examples = 4\n'
        '[[models]]\nid = "a"\nsource = "local"\npath = "a"\nrevisions = "all"\ntokens_per_step = 1000\n'
        '[[models]]\nid = "b"\nsource = "local"\npath = "b"\nrevisions = "all"\ntokens_per_step = 1000\n'
        'dtype = "bfloat16"\n'
    )
    spec = load_panel(panel)
    result = run_panel(spec, tmp_path / "out")
    assert len(result.written) == 4
    _, runs = read_results(tmp_path / "out")
    assert dict(zip(runs.model, runs.dtype)) == {"a": "float32", "b": "bfloat16"}
    assert set(runs.loc[runs.model == "b", "config_hash"]) == {spec.screen_for("b").config_hash}
    assert '"pr_examples": 4' in runs.config_json.iloc[0]
    assert run_panel(spec, tmp_path / "out").skipped and not run_panel(spec, tmp_path / "out").written
    panel.write_text(panel.read_text().replace('dtype = "bfloat16"', 'dtype = "half"'))
    with pytest.raises(HeadtraceError, match=r"p\.toml:18: dtype = 'half' is not one of: float32, bfloat16, float16"):
        load_panel(panel)
