"""Model plumbing shared by the screen and the ablation: hooks on an adapter's modules, a swapped
attention function (and attention computed from its scores, where SDPA cannot compute it),
micro-batches and capability at the query.

Everything here is scoped to a `with` block on one model: nothing is registered at import time, and
two models can run these side by side in two threads. One model serves one block of a kind at a time.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import torch
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


class ModelAdapter(Protocol):
    """What these hooks read of a `models.ModelAdapter`. hooks sits below models, which checks a
    discovered layout with them (docs/architecture.md), so it names the adapter by its parts."""

    model: torch.nn.Module
    layout: object  # models.HeadLayout: n_heads, head_dim
    out_proj: Sequence[torch.nn.Module]
    mlp: Sequence[torch.nn.Module] | None
    trim_last_layer: bool


@contextlib.contextmanager
def forward_pre_hooks(hooks: Iterable[tuple[torch.nn.Module, Callable]]) -> Iterator[None]:
    """Forward pre-hooks registered for the duration of the block."""
    handles = [module.register_forward_pre_hook(hook) for module, hook in hooks]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def forward_hooks(hooks: Iterable[tuple[torch.nn.Module, Callable]]) -> Iterator[None]:
    """Forward hooks (called with the module's output) registered for the duration of the block."""
    handles = [module.register_forward_hook(hook) for module, hook in hooks]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def head_output_hooks(adapter: ModelAdapter, fn: Callable[[int, torch.Tensor], torch.Tensor | None]) -> Iterator[None]:
    """Call fn(layer, per_head_outputs [b, L, heads, dim]) with each output projection's input.

    When fn returns a tensor of that shape, it replaces the input (how heads are ablated)."""
    layout = adapter.layout

    def make_hook(layer: int):
        def hook(_module, args):
            x = args[0]
            replacement = fn(layer, x.view(*x.shape[:-1], layout.n_heads, layout.head_dim))
            if replacement is not None:
                return (replacement.reshape(x.shape), *args[1:])
            return None

        return hook

    with forward_pre_hooks((proj, make_hook(l)) for l, proj in enumerate(adapter.out_proj)):
        yield


@contextlib.contextmanager
def last_layer_at_query_only(adapter: ModelAdapter, at_query: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Past its attention, the last layer matters at the query alone (head outputs for the PR, the
    residual for the logits): its output projection and MLP get the query rows only (`at_query`
    maps [b, L, d] to the current micro-batch's [b, d]), and the layer's residual additions
    broadcast them back. The other rows of the last layer's output are then wrong, and nothing
    reads them; a screen skips ~3/4 of the last layer's work this way. Where that does not hold
    (`adapter.trim_last_layer` false: a discovered layout that failed its check), nothing changes."""
    if not adapter.trim_last_layer:
        yield
        return

    def query_rows(_module, args):
        return (at_query(args[0])[:, None], *args[1:])

    with forward_pre_hooks((module, query_rows) for module in (adapter.out_proj[-1], adapter.mlp[-1])):
        yield


@contextlib.contextmanager
def attention_function(adapter: ModelAdapter, fn: Callable) -> Iterator[None]:
    """Route the model's attention through `fn` (transformers' attention-function signature) for the
    duration of the block.

    `fn` is registered in transformers' attention functions under a name of its own while the block
    runs, and the model's config names it; both are undone after. transformers builds no mask for
    a name it has no mask function for (and so checks nothing on the host), so `fn` sees causal
    prefills with `attention_mask=None`; a layer's sliding window comes as its `sliding_window`
    argument, and `with_window` turns it into the mask."""
    name = f"headtrace-{id(fn):x}"  # unique while `fn` lives, and it outlives the block
    config = adapter.model.config
    previous = config._attn_implementation
    ALL_ATTENTION_FUNCTIONS[name] = fn
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous
        del ALL_ATTENTION_FUNCTIONS[name]


def with_window(
    query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, kwargs: dict
) -> torch.Tensor | None:
    """The mask of a causal prefill: `attention_mask` as given, or, where none is given and the
    layer slides over fewer keys than there are (Mistral, Gemma, gpt-oss, OLMo 3), the boolean
    sliding-window mask [1, 1, L, L] transformers builds for it (True: attend to key j from query i
    iff i - window < j <= i). Built on the device from shapes alone: no host sync."""
    window = kwargs.get("sliding_window")
    q_len, k_len = query.shape[2], key.shape[2]
    if attention_mask is not None or window is None or k_len <= window:
        return attention_mask
    rows = torch.arange(k_len - q_len, k_len, device=query.device)[:, None]
    keys = torch.arange(k_len, device=query.device)[None, :]
    return ((keys <= rows) & (keys > rows - window))[None, None]


# Arguments of transformers' attention functions that change the scores, which SDPA ignores or rejects.
SCORE_MODIFIERS = ("softcap", "s_aux", "position_bias")


def needs_scores(kwargs: dict) -> bool:
    """Whether attention must be computed from its scores (`scores_attention`): logit soft-capping
    (Gemma 2), learned sinks (gpt-oss) or a position bias."""
    return any(kwargs.get(name) is not None for name in SCORE_MODIFIERS)


def scores_attention(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Attention as transformers' eager attention computes it, with float32 probabilities: scores
    scaled, soft-capped, biased and masked (no mask: causal), learned sink logits appended to each
    row before the softmax (gpt-oss) and dropped after. Give the mask `with_window` returns.

    Returns the output [b, L, heads, dim] (the attention function's), the probabilities
    [b, heads, L, L] and the sink's probability [b, heads, L] (None without sinks)."""
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query.float(), key.float().transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if position_bias is not None:
        scores = scores + position_bias.float()
    q_len, k_len = scores.shape[-2:]
    if attention_mask is None:
        rows = torch.arange(k_len - q_len, k_len, device=scores.device)[:, None]
        keys = torch.arange(k_len, device=scores.device)[None, :]
        scores = scores.masked_fill(keys > rows, float("-inf"))
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, float("-inf"))
    else:
        scores = scores + attention_mask.float()
    sink = None
    if s_aux is not None:
        sinks = s_aux.float().reshape(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        combined = torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)
        probs, sink = combined[..., :-1], combined[..., -1]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs.to(value.dtype), value).transpose(1, 2).contiguous()
    return out, probs, sink


def plain_attention(module, query, key, value, attention_mask, **kwargs):
    """An attention function for calls nothing measures: SDPA, or attention from its scores where
    SDPA would be wrong (`needs_scores`)."""
    attention_mask = with_window(query, key, attention_mask, kwargs)
    if needs_scores(kwargs):
        return scores_attention(module, query, key, value, attention_mask, **kwargs)[0], None
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


class CapabilityAccumulator:
    """Top-1, top-5, cross-entropy and mean logit of the answer token, summed over examples."""

    def __init__(self, device: torch.device, acc_dtype: torch.dtype):
        self.sums = torch.zeros(4, device=device, dtype=acc_dtype)
        self.count = 0

    METRICS = ("top1", "top5", "loss", "mean_logit_answer")

    @staticmethod
    def per_example(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        """[b, 4]: hit at 1, hit at 5, cross-entropy, logit of the answer (the columns of METRICS)."""
        logits = logits.float()
        answer_logit = logits.gather(1, answer[:, None])[:, 0]
        rank = (logits > answer_logit[:, None]).sum(dim=1)
        loss = torch.logsumexp(logits, dim=1) - answer_logit
        return torch.stack([(rank < 1).float(), (rank < 5).float(), loss, answer_logit], dim=1)

    def add(self, logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        """Add a micro-batch; returns its per-example statistics."""
        stats = self.per_example(logits, answer)
        self.sums += stats.to(self.sums.dtype).sum(dim=0)
        self.count += len(answer)
        return stats

    def result(self) -> dict[str, float]:
        return dict(zip(self.METRICS, (self.sums / max(self.count, 1)).tolist()))


def accumulation_dtype(device: torch.device) -> torch.dtype:
    """float64 sums, except on MPS, which has no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


def micro_batches(n: int, batch_size: int) -> list[slice]:
    return [slice(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
