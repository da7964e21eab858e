"""The organism's training data: a seeded synthetic corpus in which induction pays off.

Every sequence starts with BOS (id 0). The rest is Zipf-distributed tokens (id n_specials is the
most frequent, then falling as 1/rank^a), into which spans of the sequence itself are copied
further on, with random lengths and random distances. A token inside a copied span is predictable
only by finding its earlier occurrence and reading what followed it (induction); because the
distance varies, no fixed positional offset can do the same. Batches are a pure function of
(seed, step), so the data order is deterministic and two runs see the same tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from headtrace.errors import HeadtraceError

SPECIAL_TOKENS: tuple[str, ...] = ("<bos>", "<eos>", "<unk>")
BOS_ID = 0


@dataclass(frozen=True)
class CorpusConfig:
    """What the synthetic corpus looks like."""

    vocab_size: int = 256
    seq_len: int = 64  # including the BOS at position 0 (induction forms ~quadratically slower with length)
    zipf_exponent: float = 0.5
    span_min: int = 8  # copied span length, inclusive range: dense copying makes induction pay early
    span_max: int = 30
    spans_per_sequence: int = 3
    seed: int = 0

    @property
    def n_specials(self) -> int:
        return len(SPECIAL_TOKENS)

    def validate(self) -> None:
        if self.vocab_size < self.n_specials + 2:
            raise HeadtraceError(f"vocab size must be >= {self.n_specials + 2} (got {self.vocab_size})")
        if not 2 <= self.span_min <= self.span_max:
            raise HeadtraceError(f"need 2 <= span_min <= span_max (got {self.span_min}, {self.span_max})")
        if self.seq_len < 2 * self.span_max + 2:
            raise HeadtraceError(f"seq_len {self.seq_len} is too short for spans of {self.span_max} tokens")
        if self.zipf_exponent < 0 or self.spans_per_sequence < 0:
            raise HeadtraceError("zipf_exponent and spans_per_sequence must be >= 0")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def token_probabilities(config: CorpusConfig) -> np.ndarray:
    """P(id) over the vocabulary: 0 for special tokens, Zipf over the rest by id order."""
    ranks = np.arange(1, config.vocab_size - config.n_specials + 1, dtype=np.float64)
    weights = ranks**-config.zipf_exponent
    probs = np.zeros(config.vocab_size)
    probs[config.n_specials :] = weights / weights.sum()
    return probs


def copy_spans(seq: np.ndarray, rng: np.random.Generator, config: CorpusConfig) -> list[tuple[int, int, int]]:
    """Copy `spans_per_sequence` spans of `seq` further on, in place; returns (source, dest, length)."""
    spans = []
    for _ in range(config.spans_per_sequence):
        length = int(rng.integers(config.span_min, config.span_max + 1))
        source = int(rng.integers(1, len(seq) - 2 * length + 1))
        dest = int(rng.integers(source + length, len(seq) - length + 1))
        seq[dest : dest + length] = seq[source : source + length]
        spans.append((source, dest, length))
    return spans


def batch(config: CorpusConfig, step: int, batch_size: int) -> np.ndarray:
    """Training batch number `step`: int64 [batch_size, seq_len], BOS at position 0."""
    rng = np.random.default_rng([config.seed, step])
    ids = rng.choice(config.vocab_size, size=(batch_size, config.seq_len), p=token_probabilities(config))
    ids[:, 0] = BOS_ID
    for seq in ids:
        copy_spans(seq, rng, config)
    return ids.astype(np.int64)
