"""Attention patterns kept during a screen (`keep_patterns = K`): per head, the attention rows of
the probe's first K induction examples, from the first A (the earlier occurrence of the query
token) to the query, every key, in float16. Reduced inside the attention call on every route: a
route that materialises probabilities hands them over, the others (the CPU log-sum-exp and the
widened values) compute the K examples' probabilities from their scores. Nothing else of the batch
is kept; the rows stay on the device until the pass ends (no host sync in the loop)."""

from __future__ import annotations

import numpy as np
import torch

from headtrace.hooks import scores_attention
from headtrace.probes import Probe


def kept_examples(probe: Probe, k: int) -> np.ndarray:
    """The first k examples with an induction target (then others, where too few have one)."""
    order = np.concatenate([np.flatnonzero(probe.valid), np.flatnonzero(~probe.valid)])
    return np.sort(order[:k])


class PatternKeeper:
    """The rows kept for one screen: `take` per layer and micro-batch, `arrays` after the pass."""

    def __init__(self, probe: Probe, k: int, n_layers: int, n_heads: int):
        self.examples = kept_examples(probe, k)
        self.query = probe.query[self.examples]
        self.first = np.where(probe.duplicate[self.examples] >= 0, probe.duplicate[self.examples], self.query)
        self.probe = probe
        self.n_layers, self.n_heads = n_layers, n_heads
        self.kept: dict[tuple[int, int], torch.Tensor] = {}  # (slot, layer) -> [heads, W_slot, L] float16

    def in_batch(self, rows: slice) -> list[tuple[int, int]]:
        """(row in the micro-batch, slot) of the kept examples in `rows`."""
        return [(int(e) - rows.start, s) for s, e in enumerate(self.examples) if rows.start <= e < rows.stop]

    def take(self, layer: int, rows: slice, probs: torch.Tensor) -> None:
        """Keep the window rows of a layer's probabilities [b, heads, L, L] for the kept examples in `rows`."""
        for i, slot in self.in_batch(rows):
            window = probs[i, :, int(self.first[slot]) : int(self.query[slot]) + 1]
            self.kept[(slot, layer)] = window.to(torch.float16).clone()

    def take_from_scores(self, layer: int, rows: slice, module, query, key, value, attention_mask, kwargs) -> None:
        """Keep the window rows where the route computes no probabilities: the kept examples'
        attention from their scores (hooks.scores_attention), one example at a time."""
        for i, _slot in self.in_batch(rows):
            mask = attention_mask
            if mask is not None and mask.shape[0] > 1:
                mask = mask[i : i + 1]
            one = slice(i, i + 1)
            _, probs, _ = scores_attention(module, query[one], key[one], value[one], mask, **kwargs)
            self.take(layer, slice(rows.start + i, rows.start + i + 1), probs)

    def arrays(self) -> dict[str, np.ndarray]:
        """What the results folder stores (store.ResultsDir.write_shard): the rows [K, layers,
        heads, W, L] float16 (NaN past an example's window), their positions [K, W] (-1 past it),
        and the examples' tokens and positions."""
        k, length = len(self.examples), self.probe.seq_len
        width = int((self.query - self.first).max()) + 1 if k else 0
        rows = np.full((k, self.n_layers, self.n_heads, width, length), np.nan, dtype=np.float16)
        positions = np.full((k, width), -1, dtype=np.int32)
        for slot in range(k):
            span = np.arange(self.first[slot], self.query[slot] + 1)
            positions[slot, : len(span)] = span
            for layer in range(self.n_layers):
                rows[slot, layer, :, : len(span)] = self.kept[(slot, layer)].float().cpu().numpy()
        p = self.probe
        return {
            "rows": rows,
            "row_positions": positions,
            "examples": self.examples.astype(np.int64),
            "input_ids": p.input_ids[self.examples],
            "query": self.query.astype(np.int64),
            "answer": p.answer[self.examples],
            "induction": p.induction[self.examples],
            "duplicate": p.duplicate[self.examples],
        }
