"""The screen: every head classified in one streamed pass over a probe.

How a pass works. For the duration of a screen, the model's attention runs through an attention
function bound to that screen (`_ProbeAttention`, routed by hooks.attention_function): it wraps
SDPA and measures, for every head, the attention each query row pays to each target (the six
classes, the baseline and the null target) without ever materialising an attention pattern. On
the CPU, the fused flash kernel returns each row's log-sum-exp next to the output, and the
attention of the query row (and of every row to key 0) follows from one dot product per key.
Elsewhere (CUDA, MPS, masked attention, or `route="widened"`), the values are widened by one
channel per target holding the example's key weights for it, so that SDPA returns those
attentions next to the head outputs, at the cost of a few extra value dimensions. Where SDPA cannot
compute a layer's attention (logit soft-capping, learned sinks, a position bias:
hooks.needs_scores), it is computed from its scores and read from the probabilities ("scores").
Models whose attention does not call transformers' attention functions (BLOOM, GPT-Neo;
models.ATTENTION_ROUTES) are read from the attention weights their modules return ("module-
weights"), under eager attention where needed ("eager-weights"); TransformerLens models from their
`hook_pattern` and `hook_z` hooks ("transformer-lens"). The run record names the routes that ran.
The screen keeps only per-head sums: the query row for the classes, every row of the first-token
channel for Gu et al.'s sink score. A pre-hook on each output projection accumulates the Gram matrix
of the per-head outputs at the query for the participation ratio; past its attention, the last layer
runs at the query rows only, and logits are computed there alone. The loop over micro-batches moves
nothing between host and device and never waits on the device.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

from headtrace import __version__
from headtrace.attribution import DirectLogitAttribution
from headtrace.errors import HeadtraceError
from headtrace.hooks import (
    CapabilityAccumulator,
    accumulation_dtype,
    attention_function,
    forward_hooks,
    head_output_hooks,
    last_layer_at_query_only,
    micro_batches,
    needs_scores,
    plain_attention,
    scores_attention,
    with_window,
)
from headtrace.interop import as_adapter, native_model
from headtrace.models import (
    ModelAdapter,
    attention_weights,
    check_probe_fits,
    config_where_model_is,
    eager_attention,
    evaluating,
    load_model,
    load_tokenizer,
)
from headtrace.patterns import PatternKeeper
from headtrace.probes import CHANNELS, CLASS_KEYS, Probe, build_probe, selectivity_ceilings
from headtrace.schema import SCHEMA_VERSION  # noqa: F401 (re-exported)
from headtrace.schema import SELECTIVITY_FLOOR, ScreenConfig, add_labels, head_id
from headtrace.sources import checkpoint_location
from headtrace.spectral import GramAccumulator
from headtrace.store import ResultsDir, utc_now

# How the attention channels are read where SDPA computes a layer's attention: "logsumexp" from the
# CPU flash kernel (where it serves), "widened" from widened values (every device), "auto" the first
# where it works (module docstring). The other routes follow from the model and the layer.
ROUTES = ("auto", "logsumexp", "widened")


@dataclass
class ScreenResult:
    """A screen's two tidy tables: one row per head, and the run record (one row)."""

    heads: pd.DataFrame
    run: pd.DataFrame
    patterns: dict[str, np.ndarray] | None = None  # kept attention rows (`keep_patterns`; patterns.py)

    def summary(self) -> dict:
        run = self.run.iloc[0]
        circuit = self.heads.loc[self.heads.induction_circuit].sort_values("sel_induction", ascending=False)
        return {
            "induction_circuit": list(circuit.head_id),
            "sink_fraction": float(run.sink_fraction),
            "top1": float(run.top1),
            "underflow_heads": int(self.heads.baseline_underflow.sum()),
        }

    def _results(self):
        from headtrace.headview import Results  # the notebook view (torch-free)

        kept = {(str(self.run.model[0]), str(self.run.revision[0])): self.patterns}
        return Results(self.heads, self.run, lambda model, revision: kept.get((model, revision)))

    def head(self, head_id: str):
        """One head's view (headview.Head): selectivities, label, kept attention rows."""
        return self._results().head(head_id)

    def _repr_html_(self) -> str:
        return self._results()._repr_html_()


# --------------------------------------------------------------------------------------------
# The attention tap: SDPA with target channels appended to the values.


class _LayerTap:
    """Per-layer accumulators, fed by the attention implementation during a screen."""

    def __init__(self, n_heads: int, device: torch.device, acc_dtype: torch.dtype):
        self.channel_sums = torch.zeros(n_heads, len(CHANNELS), device=device, dtype=acc_dtype)
        self.first_token_sums = torch.zeros(n_heads, device=device, dtype=acc_dtype)
        self.learned_sink_sums = torch.zeros(n_heads, device=device, dtype=acc_dtype)  # at the query row
        self.has_learned_sink = False


class _DeviceProbe:
    """The probe's token ids and compact target positions, moved to the device once per screen.

    Dense key weights are built per micro-batch on the device (`_Batch`), so the loop makes no
    host->device copies and the probe's footprint on the device stays O(n) in small integers."""

    def __init__(self, probe: Probe, device: torch.device, acc_dtype: torch.dtype):
        self.n, self.seq_len = probe.n, probe.seq_len

        def as_device(a, dtype=None) -> torch.Tensor:
            return torch.as_tensor(np.ascontiguousarray(a), device=device, dtype=dtype)

        self.input_ids = as_device(probe.input_ids)
        self.query = as_device(probe.query)
        self.answer = as_device(probe.answer)
        single = probe.target_positions()
        # Every channel's target positions, -1 padded to the widest channel: [n, C, K].
        width = max(probe.local.shape[1], probe.baseline.shape[1], 1)
        positions = np.full((probe.n, len(CHANNELS), width), -1, dtype=np.int64)
        for c, name in enumerate(CHANNELS):
            if name in single:
                positions[:, c, 0] = single[name]
        positions[:, CHANNELS.index("local"), : probe.local.shape[1]] = probe.local
        positions[:, CHANNELS.index("baseline"), : probe.baseline.shape[1]] = probe.baseline
        self.positions = as_device(positions)
        self.defined = as_device(probe.channel_defined(), acc_dtype)
        self.keeper: PatternKeeper | None = None  # keeps a few examples' attention rows (`keep_patterns`)


class _Batch:
    """The current micro-batch's per-example targets, built on the model's device without host syncs."""

    def __init__(self, probe: _DeviceProbe, rows: slice, acc_dtype: torch.dtype):
        device = probe.query.device
        length = probe.seq_len
        self.input_ids = probe.input_ids[rows]
        self.answer = probe.answer[rows]
        self.query = probe.query[rows]
        self.defined = probe.defined[rows]
        positions = probe.positions[rows]  # [b, C, K], -1 = none
        present = positions >= 0
        # A channel's weight is 1/count on each of its targets (the mean over them); undefined
        # targets land in a spare column that is dropped. Targets within a channel are distinct.
        weights = present.to(torch.float32) / present.sum(dim=2, keepdim=True).clamp(min=1).to(torch.float32)
        dense = torch.zeros(*positions.shape[:2], length + 1, device=device, dtype=torch.float32)
        dense.scatter_add_(2, torch.where(present, positions, length), weights)
        self.key_weights = dense[..., :length].transpose(1, 2)  # [b, L, C] float32
        self.keys_upto_query = torch.arange(length, device=device)[None, :] <= self.query[:, None]  # [b, L]
        rows_upto_query = self.keys_upto_query.to(acc_dtype)
        # Gu et al.: mean over every query row up to and including the probe's query.
        self.row_weights = rows_upto_query / rows_upto_query.sum(dim=1, keepdim=True)
        self.index = torch.arange(len(self.query), device=device)
        self.rows = rows
        self.pending: list[tuple] = []  # per layer, from `_attention_with_logsumexp`
        self.keeper = probe.keeper


class _ProbeAttention:
    """One screen's attention function: SDPA plus the per-target attention channels (module
    docstring), added to this screen's taps. Modules that are no layer's attention, and any call
    outside a micro-batch, get plain attention (hooks.plain_attention). `routes` collects the
    routes that ran (for the run record)."""

    def __init__(self, adapter: ModelAdapter, taps: list[_LayerTap], flash: Callable | None):
        self.layer_of_attention = adapter.layer_of_attention
        self.taps = taps
        self.flash = flash  # the CPU flash op returning log-sum-exps (`_logsumexp_op`); None: widened values only
        self.batch: _Batch | None = None
        self.routes: set[str] = set()

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        layer = self.layer_of_attention.get(id(module))
        if layer is None or self.batch is None:
            return plain_attention(module, query, key, value, attention_mask, **kwargs)
        tap = self.taps[layer]
        if kwargs.get("scaling") is None:
            kwargs["scaling"] = query.shape[-1] ** -0.5
        attention_mask = with_window(query, key, attention_mask, kwargs)
        if needs_scores(kwargs):
            self.routes.add("scores")
            out, probs, sink = scores_attention(module, query, key, value, attention_mask, **kwargs)
            measure_probabilities(probs, sink, tap, self.batch)
            if self.batch.keeper is not None:
                self.batch.keeper.take(layer, self.batch.rows, probs)
            return out, None
        if self.batch.keeper is not None:  # the routes below compute no probabilities
            self.batch.keeper.take_from_scores(
                layer, self.batch.rows, module, query, key, value, attention_mask, kwargs
            )
        if self.flash is not None and _plain_causal_cpu(module, query, key, attention_mask, kwargs):
            self.routes.add("logsumexp")
            return _attention_with_logsumexp(self.flash, module, query, key, value, kwargs["scaling"], tap, self.batch)
        self.routes.add("widened")
        return _attention_with_widened_values(module, query, key, value, attention_mask, kwargs, tap, self.batch)

    def weights_hook(self, layer: int) -> Callable:
        """A forward hook on layer `layer`'s attention module that reads the attention weights it returns."""

        def hook(_module, _args, output):
            if self.batch is None:
                return
            weights = attention_weights(output, self.batch.input_ids.shape[1])
            if weights is None:
                raise HeadtraceError(
                    f"layer {layer}'s attention module returned no attention weights during the screen"
                )
            measure_probabilities(weights.float(), None, self.taps[layer], self.batch)
            if self.batch.keeper is not None:
                self.batch.keeper.take(layer, self.batch.rows, weights)

        return hook

    def at_query(self, hidden: torch.Tensor) -> torch.Tensor:
        """[b, L, ...] -> [b, ...]: each example's query row in the current micro-batch."""
        return hidden[self.batch.index, self.batch.query]


def measure_probabilities(probs: torch.Tensor, sink: torch.Tensor | None, tap: _LayerTap, batch: _Batch) -> None:
    """Add a layer's attention probabilities [b, heads, L, L] (float32) to its tap: the query row's
    attention to each target, every row's attention to key 0, and the query row's probability of
    the learned sink (`sink` [b, heads, L], gpt-oss) where the model has one."""
    acc = tap.channel_sums.dtype
    row = probs[batch.index, :, batch.query]  # [b, heads, L]
    at_query = torch.einsum("bhl,blc->bhc", row, batch.key_weights).to(acc)
    tap.channel_sums += torch.einsum("bhc,bc->hc", at_query, batch.defined)
    tap.first_token_sums += torch.einsum("bhl,bl->h", probs[..., 0].to(acc), batch.row_weights)
    if sink is not None:
        tap.learned_sink_sums += sink[batch.index, :, batch.query].to(acc).sum(dim=0)
        tap.has_learned_sink = True


@functools.cache
def flash_cpu_with_logsumexp() -> Callable | None:
    """The CPU flash-attention op, when it returns what the log-sum-exp route reads; else None.

    `aten::_scaled_dot_product_flash_attention_for_cpu` is private to torch, so it is checked once,
    on a tiny causal input: called as the route calls it, it must return (output [B, H, T, D],
    log-sum-exp [B, H, T]) with the log-sum-exp of the scaled, causally masked scores."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None:
        return None
    x = torch.linspace(-1.0, 1.0, 24).view(1, 2, 3, 4)  # no random draw: the global RNG stays untouched
    try:
        with torch.no_grad():
            result = op(x, x, x, 0.0, True, scale=0.5)
    except (RuntimeError, TypeError):
        return None
    if not (
        isinstance(result, tuple) and len(result) == 2 and result[0].shape == x.shape and result[1].shape == x.shape[:3]
    ):
        return None
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    expected = (x @ x.transpose(-1, -2) * 0.5).masked_fill(~causal, float("-inf")).logsumexp(dim=-1)
    return op if torch.allclose(result[1].float(), expected, atol=1e-5) else None


def _logsumexp_op(route: str) -> Callable | None:
    """The op the log-sum-exp route calls for `route`, or None when the screen takes widened values only."""
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}; use one of {', '.join(ROUTES)}")
    if route == "widened":
        return None
    op = flash_cpu_with_logsumexp()
    if op is None and route == "logsumexp":
        raise HeadtraceError(
            f"torch {torch.__version__}'s CPU flash-attention kernel does not return log-sum-exps "
            "here; screen with route='auto' or 'widened'"
        )
    return op


def _plain_causal_cpu(module, query, key, attention_mask, kwargs) -> bool:
    """A causal prefill without mask, bias, dropout or softcap, on the CPU: the flash kernel's case."""
    return (
        query.device.type == "cpu"
        and attention_mask is None
        and query.shape[2] == key.shape[2] > 1
        and query.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and (kwargs.get("is_causal") if kwargs.get("is_causal") is not None else getattr(module, "is_causal", True))
        and not kwargs.get("dropout")
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
    )


def _attention_with_logsumexp(
    flash: Callable, module, query, key, value, scaling: float, tap: _LayerTap, batch: _Batch
):
    """The fused CPU kernel returns each row's log-sum-exp next to the output: with it, the query
    row's attention (for the classes) and every row's attention to key 0 (for the sink score) cost
    one dot product per key or row, and the head outputs are exactly SDPA's. The scores wait in
    `batch.pending` and are reduced for all layers at once (`_reduce_pending`): few large ops
    instead of many small ones per layer."""
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    out, lse = flash(query, key, value, 0.0, True, scale=scaling)
    keys = key.float()
    q_row = query[batch.index, :, batch.query].float()  # [b, heads, d]
    row_scores = torch.matmul(keys, q_row[..., None])[..., 0]  # [b, heads, L]: the query row
    first_scores = torch.matmul(query.float(), keys[:, :, 0, :, None])[..., 0]  # [b, heads, L]: key 0, every row
    batch.pending.append((tap, row_scores, first_scores, lse, scaling))
    return out.transpose(1, 2).contiguous(), None


def _reduce_pending(batch: _Batch) -> None:
    """Attention from scores and log-sum-exps, for every layer of the micro-batch in one go."""
    if not batch.pending:
        return
    taps, row_scores, first_scores, lses, scales = zip(*batch.pending)
    batch.pending = []

    def scaled(scores):  # [layers, b, heads, L]
        if len(set(scales)) == 1:
            return torch.stack(scores) * scales[0]
        return torch.stack([s * scale for s, scale in zip(scores, scales)])

    lse = torch.stack(lses).float()  # [layers, b, heads, L]
    n_layers, b, n_heads, _ = lse.shape
    lse_row = lse.gather(3, batch.query.view(1, b, 1, 1).expand(n_layers, b, n_heads, 1))
    probs = torch.exp(scaled(row_scores) - lse_row).masked_fill(~batch.keys_upto_query[None, :, None, :], 0.0)
    acc = taps[0].channel_sums.dtype
    at_query = torch.einsum("ybhl,blc->ybhc", probs, batch.key_weights).to(acc)
    channel_sums = torch.einsum("ybhc,bc->yhc", at_query, batch.defined)
    first = torch.exp(scaled(first_scores) - lse).to(acc)
    first_sums = torch.einsum("ybhl,bl->yh", first, batch.row_weights)
    for layer, tap in enumerate(taps):
        tap.channel_sums += channel_sums[layer]
        tap.first_token_sums += first_sums[layer]


def _attention_with_widened_values(module, query, key, value, attention_mask, kwargs, tap, batch):
    """The values widened by one channel per target (the key weights): SDPA's output then holds
    the attention each row pays to each target. Queries and keys are zero-padded to the same
    width, which leaves every score unchanged (the scale stays that of the true head dim) and keeps
    SDPA on a fused kernel: with unequal q/k and v head dims, SDPA falls back to its math path."""
    b, kv_heads, length, dim = value.shape
    n_channels = len(CHANNELS)
    width = max(query.shape[-1], dim + n_channels)
    widened = value.new_empty(b, kv_heads, length, width)
    widened[..., :dim] = value
    widened[..., dim : dim + n_channels] = batch.key_weights[:, None].to(value.dtype)
    widened[..., dim + n_channels :] = 0
    pad = torch.nn.functional.pad
    query = pad(query, (0, width - query.shape[-1]))
    key = pad(key, (0, width - key.shape[-1]))
    out, _ = sdpa_attention_forward(module, query, key, widened, attention_mask, **kwargs)
    channels = out[..., dim : dim + n_channels]  # [b, L, heads, C]
    at_query = channels[batch.index, batch.query].to(tap.channel_sums.dtype)  # [b, heads, C]
    tap.channel_sums += torch.einsum("bhc,bc->hc", at_query, batch.defined)
    first = channels[..., CHANNELS.index("first")].to(tap.first_token_sums.dtype)  # [b, L, heads]
    tap.first_token_sums += torch.einsum("blh,bl->h", first, batch.row_weights)
    return out[..., :dim], None


# --------------------------------------------------------------------------------------------
# The pass.


def screen(
    adapter: ModelAdapter,
    probe: Probe,
    config: ScreenConfig = ScreenConfig(),
    model_name: str = "",
    revision: str | None = None,
    tokens: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    route: str = "auto",
) -> ScreenResult:
    """Screen every head of `adapter`'s model on `probe` in one streamed pass.

    `adapter` is a models.ModelAdapter (a Hugging Face model) or an interop.TransformerLensAdapter.
    `route` (one of ROUTES) picks how attention is read where SDPA computes it; every route gives
    the same tables up to rounding. A model serves one screen at a time; different models can be
    screened in threads."""
    config.validate()
    flash = _logsumexp_op(route)
    probe.check_vocab(adapter.vocab_size)
    if adapter.max_positions is not None and probe.seq_len > adapter.max_positions:
        raise HeadtraceError(
            f"probe length {probe.seq_len} exceeds the model's context of {adapter.max_positions} tokens; "
            f"pass --seq-len {adapter.max_positions} or less"
        )
    layout, device = adapter.layout, adapter.device
    acc_dtype = accumulation_dtype(device)
    taps = [_LayerTap(layout.n_heads, device, acc_dtype) for _ in range(layout.n_layers)]
    grams = [GramAccumulator(layout.n_heads, layout.head_dim, device, acc_dtype) for _ in range(layout.n_layers)]
    capability = CapabilityAccumulator(device, acc_dtype)
    pr_limit = config.pr_examples or probe.n  # PR from the first pr_examples examples (docs/definitions.md)
    device_probe = _DeviceProbe(probe, device, acc_dtype)
    if config.keep_patterns:
        device_probe.keeper = PatternKeeper(probe, config.keep_patterns, layout.n_layers, layout.n_heads)
    started = time.time()
    t0 = time.perf_counter()

    dla = DirectLogitAttribution(adapter, acc_dtype)
    if adapter.attention_route == "transformer-lens":
        routes = _stream_transformer_lens(
            adapter, device_probe, config.batch_size, taps, grams, capability, acc_dtype, progress, pr_limit, dla
        )
    else:
        routes = _screen_pass(
            adapter, device_probe, config.batch_size, taps, grams, capability, acc_dtype, progress, pr_limit, flash, dla
        )

    check_finite_activations(taps, grams, capability, f"{model_name}@{revision}" if revision else model_name)
    wall = time.perf_counter() - t0
    heads = _head_table(adapter, probe, config, taps, grams, model_name, revision, tokens, dla)
    run = _run_record(
        adapter,
        probe,
        config,
        heads,
        capability.result(),
        model_name,
        revision,
        tokens,
        wall,
        started,
        "+".join(sorted(routes)),
    )
    patterns = device_probe.keeper.arrays() if device_probe.keeper else None
    return ScreenResult(heads=heads, run=run, patterns=patterns)


def _screen_pass(
    adapter: ModelAdapter,
    probe: _DeviceProbe,
    batch_size: int,
    taps,
    grams,
    capability,
    acc_dtype,
    progress,
    pr_limit: int,
    flash: Callable | None,
    dla: DirectLogitAttribution,
) -> set[str]:
    """A Hugging Face model's pass: its attention read on its route (models.ATTENTION_ROUTES), the
    head outputs at each output projection's input; returns the routes that ran."""
    active = _ProbeAttention(adapter, taps, flash)
    reading = adapter.attention_route
    if reading == "interface":
        attention = attention_function(adapter, active)
    else:
        weights = forward_hooks((attn, active.weights_hook(l)) for l, attn in enumerate(adapter.attention))
        attention = _both(eager_attention(adapter.model), weights) if reading == "eager" else weights
        active.routes.add("eager-weights" if reading == "eager" else "module-weights")

    def keep_query_outputs(layer: int, heads: torch.Tensor) -> None:
        batch = active.batch
        dla.keep(layer, heads[batch.index, batch.query])
        take = min(batch.rows.stop, pr_limit) - batch.rows.start
        if take > 0:
            grams[layer].add(heads[batch.index[:take], batch.query[:take]])

    with torch.inference_mode(), attention:
        # Nested in this order, the Gram matrices see every row before the last layer is trimmed.
        with head_output_hooks(adapter, keep_query_outputs), last_layer_at_query_only(adapter, active.at_query):
            with dla.final_residual(active.at_query):
                _stream(adapter, probe, batch_size, active, capability, acc_dtype, progress, dla)
        active.batch = None
    return active.routes


@contextlib.contextmanager
def _both(first, second):
    with first, second:
        yield


def _stream(
    adapter,
    probe: _DeviceProbe,
    batch_size: int,
    active: _ProbeAttention,
    capability: CapabilityAccumulator,
    acc_dtype: torch.dtype,
    progress: Callable[[int, int], None] | None,
    dla: DirectLogitAttribution,
) -> None:
    """The loop over micro-batches: device work only, no host syncs (tests/test_screen_sync.py)."""
    for rows in micro_batches(probe.n, batch_size):
        active.batch = _Batch(probe, rows, acc_dtype)
        hidden = adapter.hidden_states(active.batch.input_ids)
        _reduce_pending(active.batch)
        capability.add(adapter.logits_at(hidden, active.batch.query), active.batch.answer)
        dla.add(active.batch.answer, active.at_query(hidden))
        if progress is not None:
            progress(rows.stop - rows.start, probe.n)


def _stream_transformer_lens(
    adapter, probe: _DeviceProbe, batch_size: int, taps, grams, capability, acc_dtype, progress, pr_limit: int, dla
) -> set[str]:
    """A TransformerLens model's pass: each layer's `hook_pattern` (attention probabilities) and
    `hook_z` (per-head outputs) are reduced inside the hook, layer by layer; no cache is kept."""
    current: list[_Batch] = []
    fired: set[tuple[str, int]] = set()

    def pattern_hook(layer: int):
        def hook(pattern, hook=None):
            fired.add(("hook_pattern", layer))
            measure_probabilities(pattern.float(), None, taps[layer], current[-1])
            if current[-1].keeper is not None:
                current[-1].keeper.take(layer, current[-1].rows, pattern)

        return hook

    def z_hook(layer: int):
        def hook(z, hook=None):
            fired.add(("hook_z", layer))
            batch = current[-1]
            dla.keep(layer, z[batch.index, batch.query])
            take = min(batch.rows.stop, pr_limit) - batch.rows.start
            if take > 0:
                grams[layer].add(z[batch.index[:take], batch.query[:take]])

        return hook

    n_layers = adapter.layout.n_layers
    fwd_hooks = [(f"blocks.{l}.attn.hook_pattern", pattern_hook(l)) for l in range(n_layers)]
    fwd_hooks += [(f"blocks.{l}.attn.hook_z", z_hook(l)) for l in range(n_layers)]
    residual: list[torch.Tensor] = []  # the final residual stream at the query (for the DLA)

    def residual_hook(x, hook=None):
        batch = current[-1]
        residual[:] = [x[batch.index, batch.query]]

    last = f"blocks.{n_layers - 1}.hook_resid_post"
    if last in getattr(adapter.model, "hook_dict", {}):
        fwd_hooks.append((last, residual_hook))
    with torch.inference_mode():
        for rows in micro_batches(probe.n, batch_size):
            current[:] = [_Batch(probe, rows, acc_dtype)]
            batch = current[-1]
            logits = adapter.model.run_with_hooks(batch.input_ids, fwd_hooks=fwd_hooks)
            if rows.start == 0:
                missing = [
                    f"blocks.{l}.attn.{name}"
                    for name in ("hook_pattern", "hook_z")
                    for l in range(n_layers)
                    if (name, l) not in fired
                ]
                if missing:
                    raise HeadtraceError(
                        f"TransformerLens did not call {missing[0]} (and {len(missing) - 1} more "
                        "hooks): the screen reads attention there; run the model with eager attention"
                    )
            capability.add(logits[batch.index, batch.query].float(), batch.answer)
            if residual:  # the final norm's output, recomputed from its input
                x = residual.pop()
                dla.residual = (x, dla.norm(x[:, None])[:, 0])
                dla.add(batch.answer, None)
            if progress is not None:
                progress(rows.stop - rows.start, probe.n)
    return {"transformer-lens"}


def check_finite_activations(
    taps: list[_LayerTap], grams: list[GramAccumulator], capability: CapabilityAccumulator, name: str
) -> None:
    """NaN or inf reached the accumulators: fail the checkpoint with the first layer it came from.

    Checked once after the pass, so the loop never waits on the device."""
    finite = [
        bool(
            torch.isfinite(t.channel_sums).all()
            and torch.isfinite(t.first_token_sums).all()
            and torch.isfinite(g.gram).all()
        )
        for t, g in zip(taps, grams)
    ]
    if all(finite) and bool(torch.isfinite(capability.sums).all()):
        return
    where = f"from layer {finite.index(False)} on" if not all(finite) else "in the logits"
    raise HeadtraceError(
        f"{name or 'the model'} produced NaN or inf activations {where}: the checkpoint is corrupt, diverged "
        "or overflows in this dtype; screen it in float32, or drop this revision"
    )


def _head_table(adapter, probe, config, taps, grams, model_name, revision, tokens, dla) -> pd.DataFrame:
    layout = adapter.layout
    counts = probe.channel_defined().sum(axis=0).astype(np.float64)  # examples per channel
    sums = np.stack([tap.channel_sums.double().cpu().numpy() for tap in taps])  # [layers, heads, C]
    means = sums / np.maximum(counts, 1)[None, None, :]
    means[..., counts == 0] = np.nan
    sink_score = np.stack([tap.first_token_sums.double().cpu().numpy() for tap in taps]) / probe.n
    pr = np.stack([np.stack(g.participation_ratios(), axis=-1) for g in grams])  # [layers, heads, 2]

    layer_idx, head_idx = np.meshgrid(np.arange(layout.n_layers), np.arange(layout.n_heads), indexing="ij")
    table = pd.DataFrame(
        {
            "model": model_name,
            "revision": revision or "",
            "tokens": np.float64(np.nan if tokens is None else tokens),
            "layer": layer_idx.ravel().astype(np.int32),
            "head": head_idx.ravel().astype(np.int32),
            "head_id": [head_id(l, h) for l, h in zip(layer_idx.ravel(), head_idx.ravel())],
        }
    )
    for c, name in enumerate(CHANNELS):
        table[f"mean_{name}"] = means[..., c].ravel()
    baseline = table["mean_baseline"].to_numpy()
    denominator = np.maximum(baseline, SELECTIVITY_FLOOR)
    for name in list(CLASS_KEYS.values()) + ["null"]:
        table[f"sel_{name}"] = table[f"mean_{name}"].to_numpy() / denominator
    add_labels(table, config.thresholds)
    table["sink_score"] = sink_score.ravel()
    # The query row's probability of the learned sink (gpt-oss), beside its attention to the first token.
    learned = np.stack([tap.learned_sink_sums.double().cpu().numpy() for tap in taps]) / probe.n
    table["learned_sink_mass"] = learned.ravel() if any(tap.has_learned_sink for tap in taps) else np.nan
    table["gu_sink"] = table["sink_score"] > config.thresholds.gu_sink_epsilon
    table["pr"] = pr[..., 0].ravel()
    table["pr_cov"] = pr[..., 1].ravel()
    # Direct logit attribution to the answer at the query, before any final soft-cap (attribution.py).
    table["dla"] = dla.means().double().cpu().numpy().ravel()
    # The baseline lost precision (or flushed to zero) in the compute dtype: its ratios are unreliable.
    tiny = torch.finfo(adapter.dtype).tiny
    table["baseline_underflow"] = baseline < max(tiny, SELECTIVITY_FLOOR)
    return table


def _versions() -> dict[str, str]:
    import transformers  # loaded with the model: importing this module loads only torch

    return {
        "headtrace_version": __version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }


def _run_record(
    adapter, probe, config, heads, capability, model_name, revision, tokens, wall, started, routes: str
) -> pd.DataFrame:
    layout = adapter.layout
    record = {
        "model": model_name,
        "revision": revision or "",
        "tokens": np.nan if tokens is None else float(tokens),
        "architecture": adapter.model_type,
        "layout": adapter.layout_description,
        "attention_route": routes,
        "n_layers": layout.n_layers,
        "n_heads": layout.n_heads,
        "n_kv_heads": layout.n_kv_heads,
        "head_dim": layout.head_dim,
        "probe": probe.description.get("kind", "custom"),
        "n_examples": probe.n,
        "n_valid": probe.n_valid,
        "seq_len": probe.seq_len,
        "dtype": str(adapter.dtype).removeprefix("torch."),
        "device": str(adapter.device),
        **capability,
        "n_induction_heads": int(heads.induction_circuit.sum()),
        "n_previous_heads": int(heads.previous_circuit.sum()),
        "n_sink_heads": int(heads.sink.sum()),
        "sink_fraction": float(heads.sink.mean()),
        "gu_sink_fraction": float(heads.gu_sink.mean()),
        "n_underflow_heads": int(heads.baseline_underflow.sum()),
        "baseline": config.probe.baseline,
        **{f"ceiling_{key}": value for key, value in selectivity_ceilings(probe).items()},
        "config_hash": config.config_hash,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
        "wall_s": wall,
        "started_at": utc_now(started),
        **_versions(),
    }
    return pd.DataFrame([record])


# --------------------------------------------------------------------------------------------
# One checkpoint, end to end: what `headtrace screen` and a notebook call.


def screen_checkpoint(
    model: str,
    revision: str | None = None,
    config: ScreenConfig = ScreenConfig(),
    out: str | None = None,
    tokens: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    name: str | None = None,
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
) -> ScreenResult:
    """Load MODEL (hub id, directory or .gguf) at `revision`, screen it, optionally write Parquet to `out`.

    `revision` of a local folder of checkpoints names its subfolder (sources.checkpoint_location);
    the tables label the result `name` (default: MODEL).

    >>> result = screen_checkpoint("EleutherAI/pythia-160m", revision="step3000")  # doctest: +SKIP
    >>> result.heads.query("induction_circuit")[["head_id", "sel_induction"]]     # doctest: +SKIP
    """
    config.validate()
    location, hub_revision, found_tokens = checkpoint_location(model, revision)
    adapter = load_model(
        location,
        revision=hub_revision,
        dtype=config.dtype,
        device=config.device,
        trust_remote_code=trust_remote_code,
        cache_dir=cache_dir,
    )
    probe = build_probe(config.probe, lambda: load_tokenizer(location, hub_revision, trust_remote_code, cache_dir))
    result = screen(
        adapter,
        probe,
        config,
        model_name=name or model,
        revision=revision,
        tokens=found_tokens if tokens is None else tokens,
        progress=progress,
    )
    if out is not None:
        ResultsDir(out).write_shard(result.heads, result.run, result.patterns)
    return result


# --------------------------------------------------------------------------------------------
# A model already loaded: what a notebook with a Hugging Face, TransformerLens or nnsight model calls.


def screen_model(
    model,
    config: ScreenConfig = ScreenConfig(),
    name: str | None = None,
    *,
    revision: str | None = None,
    tokens: float | None = None,
    tokenizer=None,
    out: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScreenResult:
    """Screen a model that is already loaded, where it is and in its dtype (the stored config
    records them): a Hugging Face causal LM, a TransformerLens `HookedTransformer` or
    `TransformerBridge`, or an nnsight `LanguageModel` (interop.py). Optionally write Parquet to
    `out`; the tables label the result `name` (default: the model's own name).

    The model runs in eval mode under no-grad for the screen; its training flags and the global
    RNG are as they were after. `tokenizer` (default: the model's own, else its config's BOS id)
    serves probes that need one.

    >>> result = screen_model(hooked_transformer, ScreenConfig.of(n_examples=256), name="pythia-160m")  # doctest: +SKIP
    """
    config.validate()
    adapter = as_adapter(model)
    config = config_where_model_is(config, adapter)
    check_probe_fits(config, adapter.max_positions, adapter.vocab_size)
    tokenizer = tokenizer or getattr(model, "tokenizer", None) or getattr(native_model(model), "tokenizer", None)
    bos = getattr(adapter.config, "bos_token_id", None)
    probe = build_probe(config.probe, lambda: tokenizer or _BosOnly(bos))
    name = name or _model_name(adapter)
    with evaluating(adapter.model):
        result = screen(adapter, probe, config, model_name=name, revision=revision, tokens=tokens, progress=progress)
    if out is not None:
        ResultsDir(out).write_shard(result.heads, result.run, result.patterns)
    return result


@dataclass
class _BosOnly:
    """What the synthetic probe needs of a tokenizer: the BOS id."""

    bos_token_id: int | None


def _model_name(adapter) -> str:
    config = adapter.model.config if hasattr(adapter.model, "config") else None
    named = getattr(config, "name_or_path", "") or getattr(getattr(adapter.model, "cfg", None), "model_name", "")
    return str(named or adapter.model_type)
