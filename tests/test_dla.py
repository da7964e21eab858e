"""Direct logit attribution (attribution.py) against the head-removal difference: each head's
contribution taken out of the final residual stream only, the logits recomputed under the final
norm frozen at the clean run, and the change in the answer's logit, averaged over the probe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from models_zoo import tiny_model

from headtrace.models import ModelAdapter
from headtrace.probes import ProbeSpec, synthetic_induction
from headtrace.screen import ScreenConfig, screen

# RMSNorm with GQA (logsumexp route), LayerNorm and Conv1D, Gemma's 1 + weight with soft-caps (scores
# route), a non-parametric LayerNorm, logits divided (Granite), the module-weights routes (BLOOM, GPT-Neo),
# sliding windows (widened values: a mask), learned sinks (scores), Falcon (discovered, eager weights).
ARCHS = ("llama", "gpt2", "gemma2", "olmo", "granite", "bloom", "gpt_neo", "gpt_neox", "mistral", "gpt_oss", "falcon")


@pytest.fixture(scope="module")
def probe():
    return synthetic_induction(ProbeSpec(n_examples=10, seq_len=48))


def frozen_norm(norm: torch.nn.Module, x: torch.Tensor):
    """The final norm as a function of its input, its statistics taken from x [n, d] (float64)."""
    name = type(norm).__name__
    weight = getattr(norm, "weight", None)
    bias = getattr(norm, "bias", None)
    w = torch.ones(x.shape[1], dtype=torch.float64) if weight is None else weight.double()
    if "Gemma" in name:
        w = 1.0 + w
    if "RMSNorm" in name:
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return lambda v: v * scale * w
    eps = getattr(norm, "eps", 1e-5)  # nn.LayerNorm, OLMo's parameter-free LayerNorm (1e-5)
    scale = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    b = 0.0 if bias is None else bias.double()
    return lambda v: (v - v.mean(-1, keepdim=True)) * scale * w + b


def removal_differences(model, adapter: ModelAdapter, probe) -> np.ndarray:
    """[layers, heads]: the mean drop of the answer's logit when a head's output is taken out of the
    final residual stream alone, under the frozen final norm, before any soft-cap."""
    inputs, residual = {}, []
    hooks = [
        proj.register_forward_pre_hook(lambda m, a, l=l: inputs.__setitem__(l, a[0]))
        for l, proj in enumerate(adapter.out_proj)
    ]
    hooks.append(adapter.final_norm.register_forward_pre_hook(lambda m, a: residual.append(a[0])))
    with torch.no_grad():
        model(torch.as_tensor(probe.input_ids))
    for h in hooks:
        h.remove()
    rows = torch.arange(probe.n), torch.as_tensor(probe.query)
    x = residual[0][rows].double()
    norm = frozen_norm(adapter.final_norm, x)
    unembed = model.get_output_embeddings().weight.double()[torch.as_tensor(probe.answer)]  # [n, d]
    divide = getattr(model.config, "logits_scaling", None) or 1.0

    def answer_logit(residual_stream):
        return (norm(residual_stream) * unembed).sum(-1) / divide

    clean = answer_logit(x)
    layout = adapter.layout
    out = np.zeros((layout.n_layers, layout.n_heads))
    for layer, proj in enumerate(adapter.out_proj):
        weight = (proj.weight.T if isinstance(proj, torch.nn.Linear) else proj.weight).double()  # [in, out]
        z = inputs[layer][rows].double()
        for head in range(layout.n_heads):
            cols = slice(head * layout.head_dim, (head + 1) * layout.head_dim)
            contribution = z[:, cols] @ weight[cols]
            out[layer, head] = (clean - answer_logit(x - contribution)).mean().item()
    return out


@pytest.mark.parametrize("arch, route", [(arch, "auto") for arch in ARCHS] + [("llama", "widened")])
def test_dla_is_the_head_removal_difference(arch, route, probe):
    model = tiny_model(arch)
    adapter = ModelAdapter(model)
    with torch.no_grad():  # a final norm with a gain and a shift of its own, so both are read
        torch.manual_seed(1)
        for name in ("weight", "bias"):
            param = getattr(adapter.final_norm, name, None)
            if isinstance(param, torch.nn.Parameter):
                param.add_(0.5 * torch.randn_like(param))
    result = screen(adapter, probe, ScreenConfig.of(batch_size=4), route=route)
    heads = result.heads
    expected = removal_differences(model, adapter, probe)
    dla = heads.dla.to_numpy().reshape(expected.shape)
    error, size = np.abs(dla - expected).max(), np.abs(expected).max()
    assert error <= 1e-4 and error <= 1e-3 * size, (error, size)  # within 1e-4, and far below the values
    assert route == "auto" or result.run.attention_route.iloc[0] == route
