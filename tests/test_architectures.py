"""Every architecture in docs/models.md: ablation against a hand-zeroed forward, the attention
variants measured beyond their windows, learned sinks, discovery of unlisted architectures and the
route recorded in the run record. The screen's equality with the naive reference on each
architecture is in test_screen_reference.py."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from models_zoo import BUILDERS, GQA, SLIDING_WINDOW, tiny_model
from naive import naive_screen, reference_stats, without_heads
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    BloomConfig,
    BloomForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from headtrace.ablation import Condition, run_conditions
from headtrace.errors import HeadtraceError
from headtrace.models import ARCHITECTURES, ArchitectureSpec, ModelAdapter, load_model, preflight
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.screen import ScreenConfig, screen

ROOT = Path(__file__).resolve().parents[1]
SHORT = ProbeSpec(n_examples=12, seq_len=48)  # three sliding windows long
# Layers that slide over SLIDING_WINDOW tokens in the tiny models.
SLIDING = {
    "mistral": (0, 1),
    "mixtral": (0, 1),
    "olmo3": (0,),
    "gemma2": (0,),
    "gemma3_text": (0,),
    "gpt_oss": (0,),
    "gpt_neo": (0,),
}


@pytest.fixture(scope="module")
def probe():
    return synthetic_induction(SHORT)


def test_every_registered_architecture_has_a_tiny_model_and_a_row_in_the_docs():
    table = (ROOT / "docs" / "models.md").read_text().split("## Architectures")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.MULTILINE))
    assert set(ARCHITECTURES) == set(BUILDERS) == documented


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_ablation_equals_a_hand_zeroed_forward(arch, probe):
    """Heads in both layers ablated, replayed from the first with two conditions stacked, against
    the plain forward with those heads' contributions taken out of the output projections."""
    model = tiny_model(arch)
    adapter = ModelAdapter(model)
    head_dim = adapter.layout.head_dim
    circuit = ((0, 1), (0, 3), (1, 2))
    by_layer = {0: [1, 3], 1: [2]}
    expected = reference_stats(
        model,
        probe,
        [(adapter.out_proj[l], without_heads(adapter.out_proj[l], heads, head_dim)) for l, heads in by_layer.items()],
    )
    single = reference_stats(model, probe, [(adapter.out_proj[1], without_heads(adapter.out_proj[1], [0], head_dim))])
    stats = run_conditions(
        adapter,
        probe,
        [Condition("clean", ()), Condition("circuit", circuit), Condition("single", ((1, 0),))],
        batch_size=5,
        stack=2,
    )
    np.testing.assert_allclose(stats[0], reference_stats(model, probe), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats[1], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats[2], single, rtol=1e-5, atol=1e-5)
    assert not np.allclose(stats[1], stats[0], atol=1e-4)  # the heads matter


@pytest.mark.parametrize("arch", sorted(SLIDING))
def test_sliding_layers_see_only_their_window_beyond_it(arch, probe):
    """At T = 48 > 16, a sliding layer's query row gives nothing to the first token nor to the
    induction target (at most position 24), and a global layer does."""
    heads = screen(ModelAdapter(tiny_model(arch)), probe, ScreenConfig.of(batch_size=6)).heads
    assert probe.seq_len > SLIDING_WINDOW and probe.induction.max() < probe.seq_len - SLIDING_WINDOW
    for layer in range(2):
        rows = heads[heads.layer == layer]
        far = rows[["mean_first", "mean_induction"]].to_numpy()
        if layer in SLIDING[arch]:
            assert (far == 0).all(), f"{arch} layer {layer} attends beyond its window"
        else:
            assert (far > 0).all()


def test_soft_capping_changes_what_gemma2_attends_to(probe):
    """The reference comparison of Gemma 2 tests its soft-capping: without it, the screen differs."""
    model = tiny_model("gemma2")
    capped = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=6)).heads
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=6)).heads
    assert not np.allclose(capped.mean_previous, uncapped.mean_previous, rtol=1e-2)


def test_learned_sink_mass_is_what_the_keys_leave(probe):
    """gpt-oss: the query row's attention to the keys and the mass on the learned sink sum to one;
    the sink's logit moves the mass, and heads that give more to the sink give less to the keys."""
    model = tiny_model("gpt_oss")
    heads = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=6)).heads
    ref = naive_screen(model, probe)
    np.testing.assert_allclose(
        heads.learned_sink_mass.to_numpy().reshape(2, 4), ref["learned_sink_mass"], rtol=1e-5, atol=1e-6
    )
    with torch.no_grad():
        model.model.layers[0].self_attn.sinks.sub_(20.0)  # a sink nobody attends to
    drained = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=6)).heads
    assert (drained.learned_sink_mass[:4] < 1e-6).all() and heads.learned_sink_mass[0] > 0.1
    assert (drained.mean_self[:4].to_numpy() > heads.mean_self[:4].to_numpy()).all()


# --------------------------------------------------------------------------------------------
# Discovery.

FALCON = ArchitectureSpec(
    layers="transformer.h", attention="self_attention", out_proj="dense", final_norm="transformer.ln_f"
)


class RenamedConfig(LlamaConfig):
    """Llama under a model type headtrace registers nowhere."""

    model_type = "headtrace_test_renamed"


class RenamedForCausalLM(LlamaForCausalLM):
    config_class = RenamedConfig


class RenamedBloomConfig(BloomConfig):
    """BLOOM (attention modules that return their weights, no attention interface), renamed."""

    model_type = "headtrace_test_renamed_bloom"


class RenamedBloomForCausalLM(BloomForCausalLM):
    config_class = RenamedBloomConfig


AutoConfig.register(RenamedConfig.model_type, RenamedConfig)
AutoModelForCausalLM.register(RenamedConfig, RenamedForCausalLM)


def renamed(builder, config_class, source: str):
    """The tiny model `source` with its weights, under a renamed class and model type."""
    original = tiny_model(source)
    settings = {key: value for key, value in original.config.to_dict().items() if key != "model_type"}
    model = builder(config_class(**settings))
    model.load_state_dict(original.state_dict())
    if model._supports_sdpa:
        model.config._attn_implementation = "sdpa"
    return model.eval()


@pytest.mark.parametrize(
    "source, builder, config_class, route",
    [
        ("llama", RenamedForCausalLM, RenamedConfig, "logsumexp"),
        ("bloom", RenamedBloomForCausalLM, RenamedBloomConfig, "module-weights"),
        ("falcon", None, None, "eager-weights"),  # no attention interface, weights only under eager attention
    ],
)
def test_an_unlisted_architecture_is_discovered_and_screened_exactly(source, builder, config_class, route, probe):
    model = renamed(builder, config_class, source) if builder else tiny_model(source)
    assert model.config.model_type not in ARCHITECTURES
    adapter = ModelAdapter(model)
    layout = ARCHITECTURES.get(source, FALCON)
    assert adapter.layout_source == "discovered" and adapter.spec.describe() == layout.describe()
    result = screen(adapter, probe, ScreenConfig.of(batch_size=5))
    ref = naive_screen(model, probe)
    shape = (2, 4)
    for name in ("induction", "previous", "first", "self", "baseline"):
        np.testing.assert_allclose(
            result.heads[f"mean_{name}"].to_numpy().reshape(shape), ref[name], rtol=1e-5, atol=1e-7
        )
    np.testing.assert_allclose(result.heads.pr.to_numpy().reshape(shape), ref["pr"], rtol=1e-5)
    np.testing.assert_allclose(result.run.loss[0], ref["loss"], rtol=1e-5)
    run = result.run.iloc[0]
    assert run.attention_route == route and run.layout.endswith("(discovered)")
    assert layout.describe() in run.layout


def test_preflight_discovers_on_the_meta_device_before_any_weights(tmp_path):
    """Only a config on disk (no weights): the preflight finds the layout from a meta-device model."""
    RenamedConfig(**GQA).save_pretrained(tmp_path / "renamed")
    assert not list((tmp_path / "renamed").glob("*.safetensors"))
    _, layout = preflight(str(tmp_path / "renamed"), ScreenConfig.of(n_examples=4))
    assert (layout.n_layers, layout.n_heads, layout.n_kv_heads, layout.head_dim) == (2, 4, 2, 16)


def test_a_discovered_model_loads_and_says_so(tmp_path, probe):
    renamed(RenamedForCausalLM, RenamedConfig, "llama").save_pretrained(tmp_path / "renamed")
    adapter = load_model(str(tmp_path / "renamed"))
    assert adapter.layout_source == "discovered" and adapter.attention_route == "interface"


def test_a_layout_that_fails_its_forward_check_is_refused_in_one_line():
    """Discovery that picks the wrong projection (here: the MLP's, renamed to look like attention)
    is caught by the forward pass."""

    class Confusing(LlamaForCausalLM):
        config_class = RenamedConfig

        def __init__(self, config):
            super().__init__(config)
            for layer in self.model.layers:
                layer.self_attn.o_proj = torch.nn.Identity()  # no projection where one is expected
                layer.self_attn.dense = torch.nn.Linear(64, 64)  # a projection the attention never runs

    model = Confusing(RenamedConfig(**GQA)).eval()
    with pytest.raises(
        HeadtraceError,
        match=r"unsupported architecture 'headtrace_test_renamed' \(Confusing\): its "
        "output projections .* do not each run once",
    ) as error:
        ModelAdapter(model)
    assert "\n" not in str(error.value)
