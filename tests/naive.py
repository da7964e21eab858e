"""An independent, naive reference screen: full attention patterns from `output_attentions=True`
(eager attention, whole batch at once) and numpy SVD of the full per-head outputs."""

from __future__ import annotations

import numpy as np
import torch

from headtrace.probes import Probe


def full_patterns(model, probe: Probe):
    """Attention patterns [layers, n, heads, L, L] and output-projection inputs [layers, n, L, width]."""
    from headtrace.models import ModelAdapter

    adapter = ModelAdapter(model)
    captured = {}
    hooks = [
        proj.register_forward_pre_hook(lambda m, a, l=l: captured.__setitem__(l, a[0].detach().clone()))
        for l, proj in enumerate(adapter.out_proj)
    ]
    previous = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = model(torch.as_tensor(probe.input_ids), output_attentions=True)
    finally:
        model.config._attn_implementation = previous
        for h in hooks:
            h.remove()
    patterns = torch.stack(out.attentions).double().numpy()
    outputs = torch.stack([captured[l] for l in range(len(captured))]).double().numpy()
    return patterns, outputs, out.logits.double().numpy()


def naive_screen(model, probe: Probe) -> dict[str, np.ndarray]:
    """Means per channel [layers, heads], Gu sink score and both PRs, straight from the definitions."""
    patterns, outputs, logits = full_patterns(model, probe)
    n_layers, n, n_heads, L, _ = patterns.shape
    rows = patterns[:, np.arange(n), :, probe.query, :]  # [n, layers, heads, L] (advanced index first)
    rows = np.moveaxis(rows, 0, 1)  # [layers, n, heads, L]
    res = {}
    valid = probe.induction >= 0

    def mean_at(pos, mask=None):
        vals = np.stack([rows[:, i, :, pos[i]] for i in range(n)], axis=1)  # [layers, n, heads]
        if mask is not None:
            vals = vals[:, mask]
        return vals.mean(axis=1)

    res["induction"] = mean_at(probe.induction, valid)
    res["duplicate"] = mean_at(probe.duplicate, valid)
    res["previous"] = mean_at(probe.query - 1)
    res["first"] = mean_at(np.zeros(n, dtype=int))
    res["self"] = mean_at(probe.query)
    res["local"] = np.mean([mean_at(probe.local[:, k]) for k in range(probe.local.shape[1])], axis=0)
    res["null"] = mean_at(probe.null)
    res["baseline"] = np.stack(
        [rows[:, i][:, :, probe.baseline[i][probe.baseline[i] >= 0]].mean(axis=-1) for i in range(n)], axis=1
    ).mean(axis=1)
    # Learned sinks (gpt-oss): what the query row's attention to the keys leaves to the sink.
    res["learned_sink_mass"] = 1.0 - rows.sum(axis=-1).mean(axis=1)
    # Gu et al.: attention to key 0, averaged over query rows 0..q.
    res["sink_score"] = np.stack(
        [patterns[:, i, :, : probe.query[i] + 1, 0].mean(axis=-1) for i in range(n)], axis=1
    ).mean(axis=1)
    head_dim = outputs.shape[-1] // n_heads
    at_query = outputs[:, np.arange(n), probe.query].reshape(n_layers, n, n_heads, head_dim)
    pr = np.zeros((n_layers, n_heads))
    pr_cov = np.zeros((n_layers, n_heads))
    for l in range(n_layers):
        for h in range(n_heads):
            x = at_query[l, :, h]
            s = np.linalg.svd(x, compute_uv=False)
            p = s**2 / (s**2).sum()
            p = p[p > 0]
            pr[l, h] = np.exp(-(p * np.log(p)).sum())
            lam = np.linalg.eigvalsh(np.cov(x, rowvar=False)) if n > 1 else np.zeros(1)
            lam = np.clip(lam, 0, None)
            pr_cov[l, h] = lam.sum() ** 2 / (lam**2).sum()
    res["pr"], res["pr_cov"] = pr, pr_cov
    q_logits = logits[np.arange(n), probe.query]
    answer_logit = q_logits[np.arange(n), probe.answer]
    rank = (q_logits > answer_logit[:, None]).sum(axis=1)
    lse = np.log(np.exp(q_logits - q_logits.max(1, keepdims=True)).sum(1)) + q_logits.max(1)
    res["top1"] = float((rank < 1).mean())
    res["top5"] = float((rank < 5).mean())
    res["loss"] = float((lse - answer_logit).mean())
    res["mean_logit_answer"] = float(answer_logit.mean())
    res["outputs"] = outputs
    return res


def reference_stats(model, probe: Probe, hooks=()) -> np.ndarray:
    """Per-example capability [n, 4] (hooks.CapabilityAccumulator's columns) from the plain
    transformers forward (full logits), with optional forward hooks [(module, hook)]."""
    from headtrace.hooks import CapabilityAccumulator

    handles = [module.register_forward_hook(fn) for module, fn in hooks]
    try:
        with torch.inference_mode():
            logits = model(torch.as_tensor(probe.input_ids)).logits
    finally:
        for handle in handles:
            handle.remove()
    rows = logits[torch.arange(probe.n), torch.as_tensor(probe.query)]
    return CapabilityAccumulator.per_example(rows, torch.as_tensor(probe.answer)).numpy()


def without_heads(proj, heads: list[int], head_dim: int):
    """A forward hook on an output projection that takes the given heads' contributions out of its
    output: the projection of their per-head outputs, subtracted (the same as zeroing them)."""

    def hook(_module, args, output):
        weight = proj.weight.T if isinstance(proj, torch.nn.Linear) else proj.weight  # Conv1D stores [in, out]
        cols = torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in heads])
        return output - args[0][..., cols] @ weight[cols]

    return hook
