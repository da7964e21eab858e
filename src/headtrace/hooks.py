"""Model plumbing shared by the screen and the ablation: hooks on an adapter's modules, a swapped
attention function, micro-batches and capability at the query.

Everything here is scoped to a `with` block on one model: nothing is registered at import time, and
two models can run these side by side in two threads. One model serves one block of a kind at a time.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from headtrace.models import ModelAdapter


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
    reads them; a screen skips ~3/4 of the last layer's work this way."""

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
    a name it has no mask function for, so `fn` sees causal prefills with `attention_mask=None`."""
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
