"""Which earlier heads an induction head reads from (docs/definitions.md, "Composition").

From the weights alone (Elhage et al. 2021): with W_QK = W_Q^T W_K (the score is x_q^T W_QK x_k)
and W_OV = W_O W_V, the K-, Q- and V-composition of a receiving head with a sending head of an
earlier layer are ||M W_OV(sender)||_F / (||M||_F ||W_OV(sender)||_F) for M = W_QK, W_QK^T and
W_OV of the receiver. Grouped-query heads use their key/value group's W_K and W_V. Rotary
embeddings, query/key norms and the layers' input norms are not part of these matrices: the
scores ignore them.

On the probe (`causal`): the receiver's induction selectivity with each earlier head ablated
alone (its output at every position set to zero), one screen pass per ablated head.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter, projection_matrix
from headtrace.probes import Probe
from headtrace.schema import ScreenConfig, head_id
from headtrace.screen import screen

SCORES = ("k_comp", "q_comp", "v_comp")


@dataclass
class HeadWeights:
    """One layer's per-head matrices, float64: W_Q [heads, hd, d], W_K and W_V [kv heads, hd, d],
    W_O [heads, d, hd]."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor

    def group(self, head: int) -> int:
        """The key/value head that query head `head` reads (grouped-query attention)."""
        return head // (self.q.shape[0] // self.k.shape[0])


def _rows(module: nn.Module) -> torch.Tensor:
    return projection_matrix(module).detach().double()  # [out, in]


def layer_weights(adapter: ModelAdapter, layer: int) -> HeadWeights:
    """W_Q, W_K, W_V, W_O of a layer's heads, read from its attention module's projections."""
    layout = adapter.layout
    if not hasattr(adapter, "attention"):
        raise HeadtraceError(
            "composition reads the projection weights of a Hugging Face model's attention modules; "
            f"{adapter.model_type} has none to read (screen its Hugging Face model)"
        )
    attn = adapter.attention[layer]
    h, kv, hd = layout.n_heads, layout.n_kv_heads, layout.head_dim
    if all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj")):
        q, k, v = (_rows(getattr(attn, name)) for name in ("q_proj", "k_proj", "v_proj"))
    elif hasattr(attn, "qkv_proj"):  # Phi-3: [q; k; v] stacked
        q, k, v = torch.split(_rows(attn.qkv_proj), [h * hd, kv * hd, kv * hd])
    elif hasattr(attn, "c_attn"):  # GPT-2: [q; k; v] stacked (Conv1D)
        q, k, v = torch.split(_rows(attn.c_attn), [h * hd, kv * hd, kv * hd])
    elif hasattr(attn, "query_key_value"):  # GPT-NeoX, BLOOM: q, k, v interleaved per head
        fused = _rows(attn.query_key_value).view(h, 3, hd, -1)
        q, k, v = (fused[:, i].reshape(h * hd, -1) for i in range(3))
    else:
        raise HeadtraceError(
            f"composition: cannot find the query, key and value projections of {adapter.model_type}'s "
            "attention (q_proj/k_proj/v_proj, qkv_proj, c_attn or query_key_value)"
        )
    o = _rows(adapter.out_proj[layer])  # [d, heads * hd]
    return HeadWeights(
        q=q.reshape(h, hd, -1),
        k=k.reshape(kv, hd, -1),
        v=v.reshape(kv, hd, -1),
        o=o.reshape(o.shape[0], h, hd).permute(1, 0, 2),
    )


@dataclass
class _Factors:
    """One layer's per-head matrices with the query/key/value heads matched (grouped-query heads get
    their group's W_K, W_V), and the R factors of their QR factorisations, batched over heads."""

    q: torch.Tensor  # [heads, hd, d]
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor  # [heads, d, hd]
    rq: torch.Tensor  # [heads, hd, hd]: W_Q^T = U R
    rk: torch.Tensor
    rv: torch.Tensor
    ro: torch.Tensor  # W_O = U R

    @classmethod
    def of(cls, w: HeadWeights) -> "_Factors":
        groups = torch.tensor([w.group(h) for h in range(w.q.shape[0])])
        k, v = w.k[groups], w.v[groups]

        def r(m: torch.Tensor) -> torch.Tensor:
            return torch.linalg.qr(m, mode="r").R

        return cls(w.q, k, v, w.o, r(w.q.mT), r(k.mT), r(v.mT), r(w.o))


def composition_scores(adapter: ModelAdapter, receivers: list[tuple[int, int]]) -> pd.DataFrame:
    """K-, Q- and V-composition of each receiving head with every head of the earlier layers, one
    row per (receiver, sender). Computed from [hd, hd] factors: with W_Q^T = U_q R_q (QR) and
    likewise for the others, ||W_Q^T W_K W_O' W_V'||_F = ||R_q (W_K W_O') R_v'^T||_F, exactly."""
    needed = {l for l, _ in receivers} | set(range(max((l for l, _ in receivers), default=0)))
    factors = {layer: _Factors.of(layer_weights(adapter, layer)) for layer in sorted(needed)}
    norm = torch.linalg.matrix_norm
    sender_norm = {layer: norm(f.ro @ f.rv.mT) for layer, f in factors.items()}  # ||W_OV|| per head
    rows = []
    for layer, head in receivers:
        r = factors[layer]
        rq, rk, rv, ro = r.rq[head], r.rk[head], r.rv[head], r.ro[head]
        qk_norm, ov_norm = norm(rq @ rk.T), norm(ro @ rv.T)
        for s_layer in range(layer):
            s = factors[s_layer]
            right = s.rv.mT  # [heads, hd, hd]
            scores = {
                "k_comp": norm(rq @ (r.k[head] @ s.o) @ right) / (qk_norm * sender_norm[s_layer]),
                "q_comp": norm(rk @ (r.q[head] @ s.o) @ right) / (qk_norm * sender_norm[s_layer]),
                "v_comp": norm(ro @ (r.v[head] @ s.o) @ right) / (ov_norm * sender_norm[s_layer]),
            }
            values = {name: score.tolist() for name, score in scores.items()}
            for s_head in range(s.q.shape[0]):
                rows.append(
                    {
                        "receiver": head_id(layer, head),
                        "receiver_layer": layer,
                        "receiver_head": head,
                        "sender": head_id(s_layer, s_head),
                        "sender_layer": s_layer,
                        "sender_head": s_head,
                        **{name: values[name][s_head] for name in SCORES},
                    }
                )
    return pd.DataFrame(rows, columns=[*_PAIR_COLUMNS, *SCORES])


_PAIR_COLUMNS = ("receiver", "receiver_layer", "receiver_head", "sender", "sender_layer", "sender_head")


@contextlib.contextmanager
def _zeroed(adapter: ModelAdapter, layer: int, head: int):
    """Head (layer, head)'s output set to zero at every position while the block runs."""
    dim = adapter.layout.head_dim
    cols = slice(head * dim, (head + 1) * dim)

    def hook(_module, args):
        x = args[0].clone()
        x[..., cols] = 0
        return (x, *args[1:])

    handle = adapter.out_proj[layer].register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def ablation_drops(
    adapter: ModelAdapter, probe: Probe, config: ScreenConfig, receivers: list[tuple[int, int]]
) -> pd.DataFrame:
    """Each receiver's induction selectivity with each head of the earlier layers ablated alone:
    one screen pass per head of the layers below the deepest receiver. `drop` is the clean
    selectivity minus the ablated one (positive: the receiver needs that head)."""
    if not receivers:
        return pd.DataFrame(columns=[*_PAIR_COLUMNS, "sel_clean", "sel_ablated", "drop"])
    n_heads = adapter.layout.n_heads
    ids = [head_id(l, h) for l, h in receivers]

    def selectivity() -> pd.Series:
        heads = screen(adapter, probe, config).heads
        return heads.set_index("head_id").sel_induction.reindex(ids)

    clean = selectivity()
    rows = []
    for s_layer in range(max(l for l, _ in receivers)):
        for s_head in range(n_heads):
            with _zeroed(adapter, s_layer, s_head):
                ablated = selectivity()
            for (layer, head), rid in zip(receivers, ids):
                if s_layer < layer:
                    rows.append(
                        {
                            "receiver": rid,
                            "receiver_layer": layer,
                            "receiver_head": head,
                            "sender": head_id(s_layer, s_head),
                            "sender_layer": s_layer,
                            "sender_head": s_head,
                            "sel_clean": float(clean[rid]),
                            "sel_ablated": float(ablated[rid]),
                            "drop": float(clean[rid] - ablated[rid]),
                        }
                    )
    return pd.DataFrame(rows)


def circuit_heads(heads: pd.DataFrame) -> list[tuple[int, int]]:
    """The (layer, head) of a screen's induction-circuit heads."""
    circuit = heads[heads.induction_circuit.astype(bool)]
    return [(int(l), int(h)) for l, h in zip(circuit["layer"], circuit["head"])]


def composition_table(
    adapter: ModelAdapter,
    heads: pd.DataFrame,
    probe: Probe | None = None,
    config: ScreenConfig | None = None,
    causal: bool = False,
    receivers: list[tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """One (model, revision)'s composition table: the scores of each induction-circuit head of
    `heads` (its screen; or `receivers`) with every head of earlier layers, the senders' labels, and
    with `causal` the ablation drops (NaN without)."""
    if receivers is None:
        receivers = circuit_heads(heads)
    with torch.no_grad():
        table = composition_scores(adapter, receivers)
    if causal:
        drops = ablation_drops(adapter, probe, config, receivers)
        table = table.merge(drops[["receiver", "sender", "sel_clean", "sel_ablated", "drop"]], how="left")
    else:
        table = table.assign(sel_clean=np.nan, sel_ablated=np.nan, drop=np.nan)
    first = heads.iloc[0]
    labels = heads.set_index("head_id")
    table.insert(0, "model", first.model)
    table.insert(1, "revision", first.revision)
    table.insert(2, "tokens", float(first.tokens))
    table["sender_label"] = labels.label.reindex(table.sender).to_numpy()
    table["sender_previous"] = labels.previous_any.reindex(table.sender).to_numpy().astype(bool)
    table["causal"] = causal
    return table
