"""The streamed screen equals a naive screen from full attention patterns, on every architecture."""

import numpy as np
import pytest
import torch

from headtrace.models import ModelAdapter
from headtrace.probes import CHANNELS, ProbeSpec, synthetic_induction
from headtrace.screen import ScreenConfig, screen
from models_zoo import BUILDERS, tiny_model
from naive import naive_screen

SPEC = ProbeSpec(n_examples=24, seq_len=64)
# The architectures added later are checked on a shorter probe (still three windows long): the suite stays short.
SHORT = ProbeSpec(n_examples=12, seq_len=48)
FIRST = ("gpt_neox", "olmo", "olmoe", "llama", "mistral", "qwen2", "gpt2")
# The routes each architecture's attention is read on (screen.py), at this probe's length.
ROUTES = {arch: "logsumexp" for arch in BUILDERS} | {
    "mistral": "widened",
    "mixtral": "widened",  # every layer slides over 16 < 64 tokens: masked SDPA
    "olmo3": "logsumexp+widened",
    "gemma3_text": "logsumexp+widened",  # a global layer, a sliding one
    "gemma2": "scores",
    "gpt_oss": "scores",  # soft-capping, learned sinks: from the scores
    "bloom": "module-weights",
    "gpt_neo": "module-weights",  # no attention interface
}


@pytest.fixture(scope="module")
def probe():
    return synthetic_induction(SPEC)


@pytest.fixture(scope="module")
def short_probe():
    return synthetic_induction(SHORT)


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_screen_matches_full_attention_reference(arch, probe, short_probe):
    check_against_reference(arch, probe if arch in FIRST else short_probe)


@pytest.mark.parametrize("arch", ["gpt_neox", "llama"])
def test_widened_values_route_matches_reference(arch, probe, monkeypatch):
    """The route CUDA and MPS take (values widened by the target channels), run on the CPU."""
    import headtrace.screen

    taken = []
    widened = headtrace.screen._attention_with_widened_values
    monkeypatch.setattr(
        headtrace.screen, "_attention_with_widened_values", lambda *a, **k: taken.append(1) or widened(*a, **k)
    )
    check_against_reference(arch, probe, route="widened")
    assert taken


def check_against_reference(arch, probe, route="auto"):
    model = tiny_model(arch)
    result = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=5), route=route)
    ref = naive_screen(model, probe)
    heads = result.heads
    layout = ModelAdapter(model).layout
    shape = (layout.n_layers, layout.n_heads)
    for name in CHANNELS:
        got = heads[f"mean_{name}"].to_numpy().reshape(shape)
        np.testing.assert_allclose(got, ref[name], rtol=1e-5, atol=1e-7, err_msg=f"{arch} {name}")
    for name in ("induction", "duplicate", "previous", "first", "self", "local", "null"):
        expected = ref[name] / np.maximum(ref["baseline"], 1e-8)
        np.testing.assert_allclose(heads[f"sel_{name}"].to_numpy().reshape(shape), expected, rtol=1e-5)
    np.testing.assert_allclose(heads.sink_score.to_numpy().reshape(shape), ref["sink_score"], rtol=1e-5, atol=1e-7)
    learned = heads.learned_sink_mass.to_numpy().reshape(shape)
    if any(name.endswith(".sinks") for name, _ in model.named_parameters()):
        # 1 - (sum of the pattern's row) loses digits to cancellation where the sink takes little.
        np.testing.assert_allclose(learned, ref["learned_sink_mass"], rtol=1e-5, atol=1e-6)
        assert learned.max() > 0.1  # the sinks matter in this model
    else:
        assert np.isnan(learned).all()
    np.testing.assert_allclose(heads.pr.to_numpy().reshape(shape), ref["pr"], rtol=1e-5)
    np.testing.assert_allclose(heads.pr_cov.to_numpy().reshape(shape), ref["pr_cov"], rtol=1e-4)
    run = result.run.iloc[0]
    assert run.attention_route == ROUTES[arch] if route == "auto" else run.attention_route.startswith(route)
    for metric in ("top1", "top5", "loss", "mean_logit_answer"):
        np.testing.assert_allclose(run[metric], ref[metric], rtol=1e-5, atol=1e-6)
    # Attention is far from uniform in these models, so the comparison is not trivial.
    assert heads.best_selectivity.max() > 3


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_per_head_outputs_reconstruct_projection(arch, short_probe):
    """Per-head slices of the projection input, pushed through their weight columns, sum to its output."""
    model = tiny_model(arch)
    adapter = ModelAdapter(model)
    layout = adapter.layout
    captured = {}
    proj = adapter.out_proj[-1]
    handle = proj.register_forward_hook(lambda m, a, out: captured.update(x=a[0], y=out))
    with torch.no_grad():
        model(torch.as_tensor(short_probe.input_ids[:3]))
    handle.remove()
    x = captured["x"].view(*captured["x"].shape[:-1], layout.n_heads, layout.head_dim)
    weight = proj.weight if isinstance(proj, torch.nn.Linear) else proj.weight.T  # Conv1D stores [in, out]
    per_head = [
        x[..., h, :] @ weight[:, h * layout.head_dim : (h + 1) * layout.head_dim].T for h in range(layout.n_heads)
    ]
    bias = proj.bias if proj.bias is not None else 0.0
    torch.testing.assert_close(sum(per_head) + bias, captured["y"], rtol=1e-4, atol=1e-5)


def test_batch_size_does_not_change_results(probe):
    model = tiny_model("llama")
    a = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=1)).heads
    b = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=24)).heads
    numeric = a.select_dtypes("number").columns
    np.testing.assert_allclose(a[numeric].to_numpy(), b[numeric].to_numpy(), rtol=1e-5, atol=1e-8)
    assert (a.label == b.label).all()


def test_two_runs_are_bit_identical(probe):
    model = tiny_model("gpt_neox")
    a = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=7))
    b = screen(ModelAdapter(model), probe, ScreenConfig.of(batch_size=7))
    assert a.heads.equals(b.heads)
    metrics = ["top1", "top5", "loss", "mean_logit_answer", "config_hash"]
    assert a.run[metrics].equals(b.run[metrics])


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2", "olmoe"])
def test_last_layer_runs_at_the_query_only(arch, probe):
    """Past its attention, the last layer's output projection and MLP see one row per example;
    every other layer sees all rows (the results above stay equal to the reference)."""
    adapter = ModelAdapter(tiny_model(arch))
    rows: dict[str, set[int]] = {}

    def record(name):
        return lambda _module, args, _output: rows.setdefault(name, set()).add(args[0].shape[1])

    modules = {
        "proj first": adapter.out_proj[0],
        "proj last": adapter.out_proj[-1],
        "mlp first": adapter.mlp[0],
        "mlp last": adapter.mlp[-1],
    }
    handles = [module.register_forward_hook(record(name)) for name, module in modules.items()]
    screen(adapter, probe, ScreenConfig.of(batch_size=8))
    for handle in handles:
        handle.remove()
    length = probe.seq_len
    assert rows == {"proj first": {length}, "proj last": {1}, "mlp first": {length}, "mlp last": {1}}
