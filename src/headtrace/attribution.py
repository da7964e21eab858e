"""Direct logit attribution at the query (docs/definitions.md): how much each head's output, on its
own, pushes the logit of the answer token B.

A head's output at the query (its slice of the output projection's input, times that slice of the
projection's weight; no bias) is sent through the final norm frozen at the clean run (the example's
own scale, and the centring where the norm centres), then through the unembedding row of B and the
linear scalings of the logits (Granite's, Cohere's). A final soft-cap (Gemma 2) is not applied: the
attribution is to the logit before the cap. The screen reduces it inside its hooks to one mean per
head over the probe; only the query rows of the current micro-batch are held.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import nn

from headtrace.models import logit_scale, projection_matrix

_PROBE_SCALE = 64.0  # the norm's probes: large enough that its epsilon does not matter, exact in bf16


@dataclass
class FrozenNorm:
    """A norm's linear part at frozen statistics: y = gain * scale * (x - mean(x) if centres else x) + bias."""

    gain: torch.Tensor  # [d] float32
    bias: torch.Tensor  # [d] float32
    centres: bool

    @classmethod
    def of(cls, norm: nn.Module, width: int, device: torch.device, dtype: torch.dtype) -> "FrozenNorm":
        """Read gain, bias and centring off any elementwise norm (LayerNorm, RMSNorm, Gemma's
        1 + weight, a non-parametric one, none) by calling it on probes of known statistics: an
        alternating +-a vector has mean 0 and mean square a^2, and a norm that centres ignores a
        constant added to its input."""
        alternating = torch.ones(width, device=device, dtype=torch.float32)
        alternating[1::2] = -1.0
        if width % 2:  # an odd width: the last entry 0 keeps the mean at 0
            alternating[-1] = 0.0
        probe = _PROBE_SCALE * alternating
        with torch.no_grad():
            up, down, shifted = (norm(x.to(dtype)[None]).float()[0] for x in (probe, -probe, probe + _PROBE_SCALE))
        rms = float(probe.pow(2).mean().sqrt())
        bias = (up + down) / 2
        gain = torch.where(alternating != 0, (up - down) / 2 * rms / probe.masked_fill(probe == 0, 1.0), 0.0)
        centres = bool(torch.allclose(up, shifted, rtol=1e-3, atol=1e-3 * float(up.abs().max()) + 1e-6))
        return cls(gain=gain, bias=bias, centres=centres)

    def centred(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=-1, keepdim=True) if self.centres else x

    def scale(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's frozen scale [b], from the norm's input x [b, d] and output y [b, d]: the least-
        squares fit of y - bias = scale * gain * centred(x) (exact where the norm is this form)."""
        basis = self.gain * self.centred(x.float())
        return ((y.float() - self.bias) * basis).sum(-1) / (basis * basis).sum(-1).clamp(min=1e-30)


class DirectLogitAttribution:
    """Per-head sums of the direct logit attribution to the answer at the query, fed by the screen:
    `keep` each layer's per-head outputs at the query, then `add` the micro-batch's answers once the
    forward has reached the final norm (`final_residual` records its input and output there)."""

    def __init__(self, adapter, acc_dtype: torch.dtype):
        layout, device = adapter.layout, adapter.device
        if adapter.attention_route == "transformer-lens":
            model = adapter.model
            self.norm, self.hooked = model.ln_final, False  # its input and output come from TransformerLens hooks
            unembedding = model.W_U.T  # [V, d]
            # W_O [layers, heads, head_dim, d] -> per layer [d, heads * head_dim]
            self.out = [w.reshape(-1, w.shape[-1]).T.float() for w in model.W_O.detach()]
            self.scalar = 1.0
            self.frozen = FrozenNorm.of(self.norm, unembedding.shape[1], device, adapter.dtype)
        else:
            self.norm = adapter.final_norm
            self.hooked = any(module is self.norm for module in adapter.model.modules())
            unembedding = adapter.model.get_output_embeddings().weight  # [V, d]
            width = unembedding.shape[1]
            self.frozen = (
                FrozenNorm.of(self.norm, width, device, adapter.dtype)
                if self.hooked
                else FrozenNorm(torch.ones(width, device=device), torch.zeros(width, device=device), centres=False)
            )
            self.scalar = logit_scale(adapter.config)
            # Output projections as [d, heads * head_dim] in float32, once per screen.
            self.out = [projection_matrix(proj).float() for proj in adapter.out_proj]
        self.unembedding = unembedding.detach()
        self.n_heads, self.head_dim = layout.n_heads, layout.head_dim
        self.sums = torch.zeros(layout.n_layers, layout.n_heads, device=device, dtype=acc_dtype)
        self.count = 0
        self.outputs: dict[int, torch.Tensor] = {}
        self.residual: tuple[torch.Tensor, torch.Tensor] | None = None

    def keep(self, layer: int, at_query: torch.Tensor) -> None:
        """A layer's per-head outputs at the query [b, heads, head_dim] for the current micro-batch."""
        self.outputs[layer] = at_query

    @contextlib.contextmanager
    def final_residual(self, at_query: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
        """Record the final norm's input and output at the query rows while the block runs."""
        if not self.hooked:
            yield
            return

        def record(_module, args, output):
            self.residual = (at_query(args[0]), at_query(output))

        handle = self.norm.register_forward_hook(record)
        try:
            yield
        finally:
            handle.remove()

    def add(self, answer: torch.Tensor, hidden_at_query: torch.Tensor) -> None:
        """Add a micro-batch: `hidden_at_query` [b, d] is the final hidden state at the query (used
        as both sides of the norm where the model has no final norm to hook)."""
        x, y = self.residual if self.residual is not None else (hidden_at_query, hidden_at_query)
        scale = self.frozen.scale(x, y) if self.residual is not None else torch.ones_like(x[:, 0], dtype=torch.float32)
        read = self.frozen.centred(self.unembedding[answer].float() * self.frozen.gain) * self.scalar  # [b, d]
        for layer, outputs in self.outputs.items():
            per_channel = (read @ self.out[layer]).view(-1, self.n_heads, self.head_dim)  # [b, heads, hd]
            dla = (outputs.float() * per_channel).sum(-1) * scale[:, None]
            self.sums[layer] += dla.to(self.sums.dtype).sum(0)
        self.count += len(answer)
        self.outputs, self.residual = {}, None

    def means(self) -> torch.Tensor:
        """[layers, heads]: the mean over the probe (NaN when nothing was added)."""
        return self.sums / self.count if self.count else torch.full_like(self.sums, float("nan"))
