"""The search for the demo's organism recipe: train candidate recipes (shape, corpus, optimiser),
screen them as they train with the demo's probe, ablate the final induction circuit against
matched-random heads, and print what each run shows against the demo's targets.

    python benchmarks/organism_search.py run CANDIDATE --seed 0 --threads 1 --out /tmp/search
    python benchmarks/organism_search.py table --out /tmp/search [--markdown FILE]
    python benchmarks/organism_search.py copying CANDIDATE /tmp/search/CANDIDATE-s0.pt

`run` writes OUT/CANDIDATE-s{seed}-t{threads}.json (the per-revision trajectory and the final
figures), OUT/CANDIDATE-s{seed}.pt (the final weights) and, every 250 steps, the training state that
`run --resume-from` goes on from (OUT/CANDIDATE-s{seed}-t{threads}.state.pt); `table` prints one
row per run found in OUT; `copying` shows where the saved weights copy (the probe's random background
or the corpus's).
Candidates are defined in CANDIDATES below; each is a set of overrides of a base recipe, so the
table records what each change did.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BOS, EOS, UNK = 0, 1, 2
N_SPECIALS = 3


# --------------------------------------------------------------------------------------------
# Candidates.


@dataclass(frozen=True)
class Candidate:
    # shape
    # dense (GPT-NeoX: parallel attention and MLP) | llama (sequential blocks) | gpt2 (sequential blocks,
    # learned absolute positions instead of rotary: the first position is known without BOS's token)
    arch: str = "dense"
    n_layers: int = 6
    n_heads: int = 6
    d_model: int = 192
    d_mlp: int = 384
    rotary_pct: float = 1.0
    # corpus
    corpus: str = "text"  # text | grammar | zipf (the tiny recipe's background) | classes | skip | words
    vocab_size: int = 512
    zipf_exponent: float = 0.5
    seq_len: int = 128  # BOS + 127
    # bos: every sequence starts with BOS (a fixed first token, found by layer 0 from its embedding);
    # none: a window of the stream, position 0 holds whatever token the grammar put there (Pythia's
    # packed training): with rotary positions only, layer 0 cannot tell position 0 from the others
    first_token: str = "bos"
    # share of sequences that are the probe's kind: uniform random tokens, the first half repeated
    # (keeps the synthetic induction probe inside the training distribution)
    repeat_sequences: float = 0.0
    # the probe kind's layout: "half" (the first half repeated: a fixed offset copies it) or "spans"
    # (random spans of 2-8 tokens copied to random places, about a third of the positions: only
    # induction copies it, in the probe's random background)
    repeat_kind: str = "half"
    # share of sequences of uniform random tokens with no copies: attention has nothing to find there,
    # so a head learns a no-op for contexts without its cue (Guo et al. 2024's dormant heads)
    noise_sequences: float = 0.0
    bos_share: float = 1.0  # first_token "bos": the share of sequences that start with BOS (the rest: stream windows)
    copy_share: float = 0.10  # share of positions inside copied spans (in a sequence with copies)
    copy_sequences: float = 1.0  # share of sequences with copies
    spans_per_sequence: float | None = None  # copied spans per sequence, on average (None: from copy_share)
    noise_copies: bool = False  # a copied span's source is first refilled with Zipf draws (no grammar predicts it)
    span_min: int = 6
    span_max: int = 16
    # grammar corpus
    n_topics: int = 16
    topic_size: int = 48
    order: int = 2  # the grammar's Markov order (2: next depends on the last two tokens)
    n_classes: int | None = None  # order 2 only: the earlier token enters by its class (id % n_classes)
    grammar_share: float = 0.5  # share of positions drawn from the grammar (else from the topic or Zipf)
    topics: bool = True  # grammar: the non-grammar positions come from a per-sequence topic (else Zipf)
    # recurring names instead of copied spans: `names` spans of `name_len` tokens, each written
    # `recurrences` times at random places (a later occurrence has several earlier ones to copy from)
    names: int = 0
    name_len: int = 2
    recurrences: int = 4
    # skip corpus: the next token is the bigram successor of the current one, or the skip successor of
    # the one before it (a previous-token head that carries the token's identity pays), or a Zipf draw
    p_bigram: float = 0.4
    p_skip: float = 0.3
    maps_are_permutations: bool = False  # skip corpus: next1/next2 are permutations (long deterministic chains)
    p_topic: float = 0.0  # skip corpus: share of positions drawn from the sequence's own topic (topic_size random ids)
    # skip corpus: with topic_sets, the topic is one of that many fixed disjoint id sets (embeddings learn
    # membership, so broad attention over the context pays at every topic draw), drawn without replacement
    # (a topic token recurs only where copied)
    topic_sets: int = 0
    topic_classes: int = 0  # skip corpus: the non-chain draws come from one class (id % topic_classes) per sequence
    switch: bool = False  # skip corpus: the p_bigram step uses next1 or next2 by the parity of x[i-2]
    switch_lags: int = 1  # skip corpus, switch: the parity of x[i-2] + ... + x[i-1-switch_lags]
    switch_rule: str = "parity"  # parity (of the sum) | majority (more than half of those tokens even)
    # skip corpus: with p_lag, x[i] = next1[x[i-k]] ("next1") or x[i-k] ("copy") for a lag k drawn from
    # `lags`: a fixed-offset head per lag pays at every position (local jobs for the early layers)
    p_lag: float = 0.0
    lags: tuple[int, ...] = (2, 3, 4, 5, 6, 7)
    lag_map: str = "next1"
    # skip corpus: a share of positions holding the sequence's filler, one random id per sequence (an
    # average over the context names it: a broad job for layer 0 at every position)
    p_filler: float = 0.0
    # words corpus: a lexicon of `n_words` words, each spelt as a start id (even) and word_min-1 to
    # word_max-1 continuation ids (odd), chained at the word level as the skip corpus chains ids
    n_words: int = 1024
    word_min: int = 2
    word_max: int = 4
    # text corpus: "topics" (pydoc_data.topics, the reference manual) | "stdlib" (the standard library's
    # own source, .py files outside the tests: code's local syntax keeps early heads busy everywhere,
    # and its identifiers recur within a file)
    text_source: str = "topics"
    # optimiser
    steps: int = 2000
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    init_std: float | None = None
    lr_schedule: str = "cosine"  # cosine (to 0.1 x lr at `steps`) | constant (after warm-up)

    @property
    def body(self) -> int:
        """Tokens after the first-token slot: the whole sequence when no BOS is placed."""
        return self.seq_len - 1 if self.first_token == "bos" else self.seq_len


T64 = {"seq_len": 64, "vocab_size": 256, "steps": 3000}
# the tiny recipe's shape and optimiser (3 x 4, d128, wd 0.01, batch 32) on its Zipf background
TOY3X4 = {
    **T64,
    "corpus": "zipf",
    "span_min": 8,
    "span_max": 30,
    "n_layers": 3,
    "n_heads": 4,
    "d_model": 128,
    "d_mlp": 256,
    "weight_decay": 0.01,
    "warmup_steps": 50,
    "batch_size": 32,
}
U1024 = {"zipf_exponent": 0.0, "vocab_size": 1024}
# chain80-6x6-rec4x3: a permutation chain at 80% of positions, uniform noise at 20%, one recurring
# 4-token name written 3 times per sequence (T = 64), constant learning rate
CHAIN80_6X6 = {
    **T64,
    **U1024,
    "corpus": "skip",
    "p_bigram": 0.8,
    "p_skip": 0.0,
    "maps_are_permutations": True,
    "names": 1,
    "name_len": 4,
    "recurrences": 3,
    "lr_schedule": "constant",
    "batch_size": 32,
    "steps": 3000,
}
# 10% of the sequences of the probe's kind, drawn as the probe is
CHAIN80_SPANS10 = {**CHAIN80_6X6, "repeat_sequences": 0.10, "repeat_kind": "spans"}
# the standard library's source as BOS-started windows, with 10% probe-kind sequences
CODE_SPANS10 = {
    **T64,
    "corpus": "text",
    "text_source": "stdlib",
    "vocab_size": 1024,
    "repeat_sequences": 0.10,
    "repeat_kind": "spans",
    "lr_schedule": "constant",
    "batch_size": 32,
    "steps": 3500,
}
CODE_T128 = {**CODE_SPANS10, "seq_len": 128, "batch_size": 16}
CODE_T128_WD05 = {**CODE_T128, "weight_decay": 0.5}
# the same as a stream (no fixed first token)
STREAM80_SPANS10 = {**CHAIN80_SPANS10, "first_token": "none"}
# grammar-6x6's corpus (topic and order-2 grammar, BOS) with probe-kind sequences (their share set per candidate)
GRAMMAR_SPANS = {"corpus": "grammar", "repeat_kind": "spans", "steps": 3500}
# the words corpus (2-4 sub-tokens a word unless a candidate says otherwise) in chain80-spans10's setting
WORDS80 = {**CHAIN80_SPANS10, "corpus": "words", "steps": 3500}
# the chain of ids over 512 ids at 65%, and the sequence's topic (one of 16 fixed sets of 32 ids) at 25%
ITOPIC25_V512 = {
    **CHAIN80_SPANS10,
    "vocab_size": 512,
    "p_bigram": 0.65,
    "p_topic": 0.25,
    "topic_sets": 16,
    "steps": 3500,
}
CANDIDATES: dict[str, dict] = {
    "text-6x6": {},
    "g2-d96": {
        **T64,
        "corpus": "grammar",
        "n_classes": 4,
        "copy_share": 0.15,
        "n_heads": 6,
        "d_model": 96,
        "span_min": 8,
        "span_max": 16,
    },
    "uni1024-d96-c10": {
        **T64,
        "corpus": "zipf",
        "zipf_exponent": 0.0,
        "vocab_size": 1024,
        "copy_share": 0.10,
        "d_model": 96,
        "span_min": 8,
        "span_max": 16,
    },
    "rep-d96": {
        **T64,
        "corpus": "zipf",
        "copy_sequences": 0.25,
        "copy_share": 0.4,
        "d_model": 96,
        "span_min": 8,
        "span_max": 30,
    },
    "toy-6x6": {**T64, "corpus": "zipf", "copy_share": 0.44, "span_min": 8, "span_max": 30},
    "zipf-6x6-c20": {**T64, "corpus": "zipf", "copy_share": 0.20, "span_min": 8, "span_max": 30},
    "tri-c10": {
        **T64,
        "corpus": "grammar",
        "n_classes": 4,
        "topics": False,
        "grammar_share": 0.8,
        "noise_copies": True,
        "copy_share": 0.10,
        "span_min": 8,
        "span_max": 16,
    },
    "toy-3x4-b16": {
        **T64,
        "corpus": "zipf",
        "copy_share": 0.44,
        "span_min": 8,
        "span_max": 30,
        "n_layers": 3,
        "n_heads": 4,
        "d_model": 128,
        "d_mlp": 256,
        "weight_decay": 0.01,
        "warmup_steps": 50,
    },
    "toy-3x4": {
        **T64,
        "corpus": "zipf",
        "copy_share": 0.44,
        "span_min": 8,
        "span_max": 30,
        "n_layers": 3,
        "n_heads": 4,
        "d_model": 128,
        "d_mlp": 256,
        "weight_decay": 0.01,
        "warmup_steps": 50,
        "batch_size": 32,
        "steps": 2000,
    },
    # How the copy density sets the induction transition, at the tiny recipe's shape and background.
    **{
        f"toy3x4-s{name}": {
            **T64,
            "corpus": "zipf",
            "spans_per_sequence": spans,
            "span_min": 8,
            "span_max": 30,
            "n_layers": 3,
            "n_heads": 4,
            "d_model": 128,
            "d_mlp": 256,
            "weight_decay": 0.01,
            "warmup_steps": 50,
            "batch_size": 32,
        }
        for name, spans in (("3", 3.0), ("1", 1.0), ("033", 0.33))
    },
    # the same 10% of copied positions with a reliable cue: a uniform 1024-token background repeats a
    # token by chance ~2 times a sequence (Zipf(0.5) over 253: ~13 times, against ~6 copied positions)
    "toy3x4-u1024-s033": {
        **T64,
        "corpus": "zipf",
        "zipf_exponent": 0.0,
        "vocab_size": 1024,
        "spans_per_sequence": 0.33,
        "span_min": 8,
        "span_max": 30,
        "n_layers": 3,
        "n_heads": 4,
        "d_model": 128,
        "d_mlp": 256,
        "weight_decay": 0.01,
        "warmup_steps": 50,
        "batch_size": 32,
    },
    # a reliable cue at 10%, with a larger learning rate, or a smaller batch (same tokens)
    "toy3x4-u1024-s033-lr1e2": {**TOY3X4, **U1024, "spans_per_sequence": 0.33, "lr": 1e-2},
    "toy3x4-u1024-s033-b8": {**TOY3X4, **U1024, "spans_per_sequence": 0.33, "batch_size": 8, "steps": 12000},
    # recurring names: ~10% of positions predictable by induction, each with several earlier copies
    "toy3x4-u1024-names": {**TOY3X4, **U1024, "names": 2, "name_len": 2, "recurrences": 4},
    # a quiet background: x[i] = next2[x[i-2]] (a permutation) at 98% of positions, so once a
    # previous-token head has learnt it the background's gradient is nearly silent and the copied
    # spans' (10%, of uniform noise) dominate Adam's normalised steps
    "toy3x4-quiet": {
        **TOY3X4,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.0,
        "p_skip": 0.98,
        "maps_are_permutations": True,
        "noise_copies": True,
        "spans_per_sequence": 0.33,
    },
    # the same 10% of copied positions, bunched: a quarter of the sequences copy as densely as the tiny recipe
    "toy3x4-burst": {
        **T64,
        "corpus": "zipf",
        "spans_per_sequence": 3.0,
        "copy_sequences": 0.29,
        "span_min": 8,
        "span_max": 30,
        "n_layers": 3,
        "n_heads": 4,
        "d_model": 128,
        "d_mlp": 256,
        "weight_decay": 0.01,
        "warmup_steps": 50,
        "batch_size": 32,
    },
    "skip-c10": {
        **T64,
        "corpus": "skip",
        "noise_copies": True,
        "copy_share": 0.10,
        "span_min": 8,
        "span_max": 16,
        "batch_size": 32,
    },
    "tri-c10-b32": {
        **T64,
        "corpus": "grammar",
        "n_classes": 4,
        "topics": False,
        "grammar_share": 0.8,
        "noise_copies": True,
        "copy_share": 0.10,
        "span_min": 8,
        "span_max": 16,
        "batch_size": 32,
    },
    "cls-c10-b32": {
        **T64,
        "corpus": "classes",
        "n_classes": 4,
        "grammar_share": 0.8,
        "copy_share": 0.10,
        "span_min": 8,
        "span_max": 16,
        "batch_size": 32,
    },
    "zipf-d96-c15": {**T64, "corpus": "zipf", "copy_share": 0.15, "d_model": 96, "span_min": 8, "span_max": 16},
    "zipf-64": {**T64, "corpus": "zipf", "span_min": 8, "span_max": 16},
    "markov3-64": {
        **T64,
        "corpus": "grammar",
        "order": 3,
        "grammar_share": 0.7,
        "topics": False,
        "span_min": 8,
        "span_max": 16,
    },
    "grammar-6x6": {"corpus": "grammar"},
    "text-6x6-wd0": {"weight_decay": 0.01},
    "text-6x6-lr1e3": {"lr": 1e-3},
    "text-6x8-h16": {"n_heads": 8, "d_model": 128, "d_mlp": 256},
    "text-6x6-v1024": {"vocab_size": 1024},
    "text-6x6-copy20": {"copy_share": 0.2},
    "grammar-6x6-o3": {"corpus": "grammar", "order": 3},
    # Recurring noise spans in a background the model learns exactly: every copied position is
    # predictable, the only irreducible loss is the span's first occurrence and first tokens.
    # quiet: x[i] = next2[x[i-2]] (previous-token heads needed); chain: x[i] = next1[x[i-1]] (no head needed)
    **{
        f"{bg}3x4-rec{length}x{times}": {
            **TOY3X4,
            **U1024,
            "corpus": "skip",
            "p_bigram": 0.98 if bg == "chain" else 0.0,
            "p_skip": 0.98 if bg == "quiet" else 0.0,
            "maps_are_permutations": True,
            "names": 1,
            "name_len": length,
            "recurrences": times,
            "lr_schedule": "constant",
            "steps": 4000,
        }
        for bg in ("quiet", "chain")
        for length, times in ((4, 3), (7, 2), (3, 4))
    },
    # the chain at the target shape; and a chain whose next token depends on the parity of the one
    # before the previous (a previous-token head is needed everywhere, still deterministic)
    "chain6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.98,
        "p_skip": 0.0,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    # the chain, a per-sequence topic of 8 ids at 30% of positions (broad attention pays), 2% noise
    "topic6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.68,
        "p_skip": 0.0,
        "p_topic": 0.30,
        "topic_size": 8,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    # the chain with more noise (the probe's random tokens are less out of distribution)
    **{
        f"chain{int(p * 100)}-3x4-rec4x3": {
            **TOY3X4,
            **U1024,
            "corpus": "skip",
            "p_bigram": p,
            "p_skip": 0.0,
            "maps_are_permutations": True,
            "names": 1,
            "name_len": 4,
            "recurrences": 3,
            "lr_schedule": "constant",
            "steps": 4000,
        }
        for p in (0.8, 0.5)
    },
    **{
        f"chain{int(p * 100)}-6x6-rec4x3": {
            **T64,
            **U1024,
            "corpus": "skip",
            "p_bigram": p,
            "p_skip": 0.0,
            "maps_are_permutations": True,
            "names": 1,
            "name_len": 4,
            "recurrences": 3,
            "lr_schedule": "constant",
            "batch_size": 32,
            "steps": 3000,
        }
        for p in (0.8, 0.7)
    },
    # 20% of positions from one class per sequence (ids = k mod 8): inferring the class takes broad attention
    "ctopic80-6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.8,
        "p_skip": 0.0,
        "topic_classes": 8,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    # the chain at T = 128 (the reference baseline: induction ceiling 108x), two names, batch 16 (same tokens)
    "chain80-6x6-t128": {
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.8,
        "p_skip": 0.0,
        "maps_are_permutations": True,
        "names": 2,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 16,
        "steps": 3000,
    },
    # chain80 whose chain step uses next1 or next2 by the parity of x[i-2]: a previous-token job for early layers
    "switch80-6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.8,
        "p_skip": 0.0,
        "switch": True,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    # the switch by the parity of x[i-2] + x[i-3] + x[i-4]: three previous-token jobs at every chain step
    "switch3-80-6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.8,
        "p_skip": 0.0,
        "switch": True,
        "switch_lags": 3,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    # the switch by the majority parity of x[i-2], x[i-3], x[i-4]: a local-average job at every chain step
    "major3-80-6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.8,
        "p_skip": 0.0,
        "switch": True,
        "switch_lags": 3,
        "switch_rule": "majority",
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    # chain80 on windows of a stream: no fixed first token, so layer 0 (rotary only) cannot find position 0
    "stream80-6x6-rec4x3": {**CHAIN80_6X6, "first_token": "none"},
    # the stream with a per-sequence class (broad attention pays: at position 0 a broad head reads only
    # itself, which later layers can find); and the stream with Gu et al.'s sink-growing weight decay
    "cstream80-6x6-rec4x3": {**CHAIN80_6X6, "first_token": "none", "topic_classes": 8},
    "stream80-wd05-6x6-rec4x3": {**CHAIN80_6X6, "first_token": "none", "weight_decay": 0.5},
    # 5% of the sequences of the probe's kind (the probe stays in distribution): with BOS, without it,
    # and with BOS at position 0 in half of the sequences
    "chain80-rep5-6x6-rec4x3": {**CHAIN80_6X6, "repeat_sequences": 0.05, "steps": 2500},
    "stream80-rep5-6x6-rec4x3": {**CHAIN80_6X6, "first_token": "none", "repeat_sequences": 0.05, "steps": 2500},
    "half80-rep5-6x6-rec4x3": {**CHAIN80_6X6, "bos_share": 0.5, "repeat_sequences": 0.05, "steps": 2500},
    # fifth round: BOS in 80% of the sequences; the stream at Gu et al.'s sink-growing learning rate
    "bos80-rep5-6x6-rec4x3": {**CHAIN80_6X6, "bos_share": 0.8, "repeat_sequences": 0.05, "steps": 2500},
    # sixth round: BOS in half of the sequences, trained twice as long, or at Gu et al.'s weight decay
    "half80-rep5-long-6x6-rec4x3": {**CHAIN80_6X6, "bos_share": 0.5, "repeat_sequences": 0.05, "steps": 5000},
    "half80-rep5-wd05-6x6-rec4x3": {
        **CHAIN80_6X6,
        "bos_share": 0.5,
        "repeat_sequences": 0.05,
        "steps": 2500,
        "weight_decay": 0.5,
    },
    # the stream (no fixed first token) for 6000 steps: do sinks come after the circuit, given data?
    "stream80-rep5-long-6x6-rec4x3": {**CHAIN80_6X6, "first_token": "none", "repeat_sequences": 0.05, "steps": 6000},
    # 15% probe-kind sequences: does copying keep paying, and the circuit stand, after the chain is learned?
    "stream80-rep15-6x6-rec4x3": {**CHAIN80_6X6, "first_token": "none", "repeat_sequences": 0.15, "steps": 3500},
    # chain 50%, 30% at fixed lags 2-7 (next1 of x[i-k], or a copy of it), noise 20%: local jobs for layers 0-1
    "lag30-rep5-6x6-rec4x3": {**CHAIN80_6X6, "p_bigram": 0.5, "p_lag": 0.3, "repeat_sequences": 0.05, "steps": 2500},
    "lagcopy30-rep5-6x6-rec4x3": {
        **CHAIN80_6X6,
        "p_bigram": 0.5,
        "p_lag": 0.3,
        "lag_map": "copy",
        "repeat_sequences": 0.05,
        "steps": 2500,
    },
    # seventh round: a fixed topic (one of 16 disjoint sets of 63 ids) at 25% or 40% of positions, so that
    # broad attention pays at every position from layer 0 on (grammar-6x6 kept layers 0-1 free that way),
    # with the chain and noise around it and the recurring name for copying
    **{
        f"topic{int(t * 100)}-6x6-rec4x3": {
            **CHAIN80_6X6,
            "p_bigram": 0.85 - t,
            "p_topic": t,
            "topic_sets": 16,
            "steps": 3000,
        }
        for t in (0.25, 0.40)
    },
    # the probe kind as the probe is: copies at random offsets in a random background (not a fixed period)
    "stream80-spans10-6x6-rec4x3": {
        **STREAM80_SPANS10,
        "steps": 3500,
    },
    # the stream with less noise: the chain fills 90% or 98% of positions, so heads fall idle sooner
    # (with BOS, the 98% chain gave 44-67% sinks by 2M tokens; the spans keep the probe's circuit)
    "stream90-spans10-6x6-rec4x3": {**STREAM80_SPANS10, "p_bigram": 0.9, "steps": 3500},
    "stream98-spans10-6x6-rec4x3": {**STREAM80_SPANS10, "p_bigram": 0.98, "steps": 3500},
    # BOS, and a job for every early head: a per-sequence bag of ids (a random topic of 32 or 24 ids, drawn
    # with replacement at 40% or 25% of positions). Predicting a topic draw pays for boosting every id seen
    # so far, a broad copy that uses the full rank of a layer's heads (grammar-6x6's topic kept layers 0-1
    # broad and free of sinks while layers 2-5 sank)
    "bag40-spans10-6x6-rec4x3": {
        **CHAIN80_SPANS10,
        "p_bigram": 0.5,
        "p_topic": 0.4,
        "topic_size": 32,
        "steps": 3500,
    },
    "bag25-spans10-6x6-rec4x3": {
        **CHAIN80_SPANS10,
        "p_bigram": 0.65,
        "p_topic": 0.25,
        "topic_size": 24,
        "steps": 3500,
    },
    # the stream at T = 128 (Barbero et al. 2025: longer contexts mix more, and sinks grow with length),
    # batch 16 (the same tokens a step), two names so that copies stay at about 10% of positions
    "stream80-t128-spans10-6x6-rec4x3": {
        **STREAM80_SPANS10,
        "seq_len": 128,
        "batch_size": 16,
        "names": 2,
        "steps": 4000,
    },
    # ninth round: Barbero et al. 2025 (sinks grow with context length) at T = 128 and 256, the same tokens a
    # step, with twice the probe-kind sequences (the longer context slowed induction at 10%)
    **{
        f"stream80-t{t}-spans20-6x6-rec4x3": {
            **STREAM80_SPANS10,
            "seq_len": t,
            "batch_size": 2048 // t,
            "names": t // 64,
            "repeat_sequences": 0.20,
            "steps": 3500,
        }
        for t in (128, 256)
    },
    "stream80-spans10-long-6x6-rec4x3": {
        **STREAM80_SPANS10,
        "steps": 6000,
    },
    # how far the stream's sinks go in 13000 steps (about 27M tokens): do they reach half the heads at all?
    "stream80-spans10-xlong-6x6-rec4x3": {**STREAM80_SPANS10, "steps": 13000},
    # rotary on a quarter of each head's dims, as Pythia (local attention is no longer the free default)
    "stream80-spans10-rot25-6x6-rec4x3": {
        **STREAM80_SPANS10,
        "rotary_pct": 0.25,
        "steps": 3500,
    },
    # Gu et al.'s sink levers on the stream with probe-kind spans: weight decay 0.3, learning rate 6e-3
    "stream80-spans10-wd03-6x6-rec4x3": {
        **STREAM80_SPANS10,
        "weight_decay": 0.3,
        "steps": 3500,
    },
    "stream80-spans10-lr6e3-6x6-rec4x3": {
        **STREAM80_SPANS10,
        "lr": 6e-3,
        "steps": 3500,
    },
    # the stream at 8 layers (Barbero et al. 2025: deeper models mix more, and sinks grow with depth)
    "stream80-spans10-8x6-rec4x3": {
        **STREAM80_SPANS10,
        "n_layers": 8,
        "steps": 3500,
    },
    "chain80-spans10-6x6-rec4x3": {**CHAIN80_SPANS10, "steps": 3000},
    # ninth round: the only BOS corpus whose layers 0-1 never sank (its topic keeps them broad), with the
    # probe-kind sequences that taught the stream its circuit (10% or 20%)
    "grammar-spans10-6x6": {**GRAMMAR_SPANS, "repeat_sequences": 0.10},
    **{
        f"grammar64-spans{round(share * 100)}-6x6": {
            **GRAMMAR_SPANS,
            "repeat_sequences": share,
            "seq_len": 64,
            "batch_size": 32,
        }
        for share in (0.10, 0.20)
    },
    # tenth round: words spelt in sub-tokens (BOS), so that the early layers have local work at every
    # position (finding the word's start and reading its spelling, as real models' first layers
    # detokenise) while the chain of words and the copies are learned as the chain of ids was
    **{
        f"words80-l{lo}{hi}-spans10-6x6-rec4x3": {**WORDS80, "word_min": lo, "word_max": hi}
        for lo, hi in ((2, 4), (1, 3))
    },
    # layer 0 sinks only after the circuit forms: without weight decay (Gu et al.: sinks grow with it), and
    # as a stream (no fixed first token; do the early layers' local work let later layers find position 0?)
    "words80-l24-wd0-spans10-6x6-rec4x3": {**WORDS80, "weight_decay": 0.0},
    "wstream80-l24-spans10-6x6-rec4x3": {**WORDS80, "first_token": "none"},
    # sequential blocks (Llama): layer 0's MLP reads layer 0's attention, so gathering a word's spelling
    # in layer 0 pays one layer sooner than in layer 1 (with parallel blocks it pays from layer 1 either way)
    "words80-l24-llama-spans10-6x6-rec4x3": {**WORDS80, "arch": "llama"},
    # eleventh round: learned absolute positions (GPT-2). With rotary only, BOS is the one place a
    # layer-0 head can find by itself; with a position embedding, layer 0 no longer needs it to
    # know where it is, and sequential blocks let layer 0's MLP read layer 0's attention
    "words80-l24-gpt2-spans10-6x6-rec4x3": {**WORDS80, "arch": "gpt2"},
    "chain80-gpt2-spans10-6x6-rec4x3": {**CHAIN80_SPANS10, "arch": "gpt2", "steps": 3500},
    # one filler id per sequence at 15% of positions (the chain at 75%, noise at 10%): naming it takes an
    # average over the whole context, a job at every position that layer 0 does from the embeddings alone
    "filler15-spans10-6x6-rec4x3": {**CHAIN80_SPANS10, "p_bigram": 0.75, "p_filler": 0.15, "steps": 3500},
    # a topic for layer 0 at every position (StreamingLLM: real models' layers 0-1 stay local with BOS,
    # having local work everywhere; here grammar-6x6's topic kept layers 0-1 free of sinks): the next
    # word is drawn from the sequence's topic (one of 16 fixed sets of 64 words) at 25%, the chain at 60%,
    # so attending over the words seen so far pays at every word start
    "wtopic25-spans10-6x6-rec4x3": {**WORDS80, "p_bigram": 0.6, "p_topic": 0.25, "topic_sets": 16},
    # the same on the chain of ids, with 512 ids so that a 65% chain is still learned (topic25-6x6's 60%
    # chain over 1021 ids was not)
    "itopic25-v512-spans10-6x6-rec4x3": ITOPIC25_V512,
    # the same at T = 128, where the probe uses the reference baseline (its layer-1 sink at T = 64 is a ratio
    # sink of the clean baseline), two names and 20% probe-kind sequences as in stream80-t128-spans20
    "itopic25-v512-t128-spans20-6x6-rec4x3": {
        **ITOPIC25_V512,
        "seq_len": 128,
        "batch_size": 16,
        "names": 2,
        "repeat_sequences": 0.20,
        "steps": 4000,
    },
    # twelfth round: natural text with BOS, the way real models keep layers 0-1 local (StreamingLLM): the
    # standard library's source (12 MB; identifiers recur within a file), BPE 1024, and 10% of the
    # sequences of the probe's kind; at T = 64 (clean baseline) and T = 128 (reference baseline)
    "code-spans10-6x6": CODE_SPANS10,
    "code-t128-spans10-6x6": CODE_T128,
    # how far its sinks go with data (the constant rate repeats the 3500-step run's first 3500 steps)
    "code-t128-long-spans10-6x6": {**CODE_T128, "steps": 8000},
    # a longer context (Barbero et al. 2025: sinks grow with it; the reference baseline's induction ceiling
    # is 238x at T = 256), the same tokens a step
    "code-t256-spans10-6x6": {**CODE_SPANS10, "seq_len": 256, "batch_size": 8, "steps": 6000},
    # Gu et al. 2025: sinks grow with weight decay and with the learning rate
    "code-t128-wd05-spans10-6x6": CODE_T128_WD05,
    "code-t128-lr1e2-spans10-6x6": {**CODE_T128, "lr": 1e-2},
    # how far weight decay 0.5's sinks go with data (its first 3500 steps are the 3500-step run's)
    "code-t128-wd05-long-spans10-6x6": {**CODE_T128_WD05, "steps": 8000},
    # idle heads: uniform random sequences for heads whose cue is absent (10% of sequences)
    "code-t128-noise10-spans10-6x6": {**CODE_T128, "noise_sequences": 0.10},
    # fourteenth round: a milder weight decay (0.5 put a layer-1 head on BOS for a few screens), and
    # weight decay 0.5 with two more middle layers (room for idle heads above layer 1)
    "code-t128-wd025-spans10-6x6": {**CODE_T128, "weight_decay": 0.25},
    # how far its sinks go with data (its first 3500 steps are the 3500-step run's)
    "code-t128-wd025-long-spans10-6x6": {**CODE_T128, "weight_decay": 0.25, "steps": 8000},
    "code-t128-wd05-spans10-8x6": {**CODE_T128_WD05, "n_layers": 8},
    # fifteenth round: a smaller BPE (512 ids) spells more words in pieces, more local work for layers
    # 0-1 (seed 1 of weight decay 0.25 parked 4 of layer 1's heads on BOS)
    "code-t128-wd025-v512-spans10-6x6": {**CODE_T128, "weight_decay": 0.25, "vocab_size": 512},
    # sixteenth round: weight decay 0.25 with more middle layers, for idle heads above layer 1 (8 x 6 at
    # 0.5 kept layers 0-1 free with 21% sinks)
    "code-t128-wd025-spans10-8x6": {**CODE_T128, "weight_decay": 0.25, "n_layers": 8},
    "code-t128-wd025-spans10-10x6": {**CODE_T128, "weight_decay": 0.25, "n_layers": 10},
    "stream80-rep5-lr1e2-6x6-rec4x3": {
        **CHAIN80_6X6,
        "first_token": "none",
        "repeat_sequences": 0.05,
        "lr": 1e-2,
        "steps": 2500,
    },
    # 50% chain, 30% skip successor of x[i-2] (previous-token heads pay), 20% noise
    "skip80-6x6-rec4x3": {
        **T64,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.5,
        "p_skip": 0.3,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "batch_size": 32,
        "steps": 3000,
    },
    "par3x4-rec4x3": {
        **TOY3X4,
        **U1024,
        "corpus": "skip",
        "p_bigram": 0.98,
        "p_skip": 0.0,
        "switch": True,
        "maps_are_permutations": True,
        "names": 1,
        "name_len": 4,
        "recurrences": 3,
        "lr_schedule": "constant",
        "steps": 4000,
    },
}


def candidate(name: str) -> Candidate:
    return Candidate(**CANDIDATES[name])


# --------------------------------------------------------------------------------------------
# Corpora: a batch is a pure function of (seed, step).


def text_documents(source: str) -> list[str]:
    """The documents of a text corpus, in a fixed order: the reference manual's topics, or the
    standard library's source as the code organism reads it."""
    if source == "topics":
        import pydoc_data.topics

        return [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]
    from headtrace.organism.corpus import text_documents as organism_documents

    return organism_documents(source)[1]


def text_tokens(vocab_size: int, source: str = "topics") -> np.ndarray:
    """A text corpus BPE-tokenised, documents joined by EOS (the code organism's tokenizer)."""
    from headtrace.organism.corpus import bpe_tokens

    return bpe_tokens(text_documents(source), vocab_size).stream


class Grammar:
    """A synthetic language: per-sequence topic (a bag of content words, so broad attention pays),
    and a fixed global Markov chain of order `order` over the vocabulary (local attention pays)."""

    def __init__(self, c: Candidate, seed: int = 1234):
        rng = np.random.default_rng(seed)
        v = c.vocab_size - N_SPECIALS
        self.topics = np.stack([rng.choice(v, c.topic_size, replace=False) for _ in range(c.n_topics)]) + N_SPECIALS
        # successor of a context: a hash of the last `order` tokens -> one of 4 successors with fixed weights
        self.table = rng.integers(N_SPECIALS, c.vocab_size, size=(max(4096, (c.n_classes or 0) * c.vocab_size), 4))
        self.weights = np.array([0.55, 0.25, 0.12, 0.08])
        self.mult = rng.integers(1, 2**31 - 1, size=c.order)
        self.c = c

    def sequence(self, rng: np.random.Generator, length: int) -> np.ndarray:
        c = self.c
        if c.topics:
            topic = self.topics[rng.integers(c.n_topics)]
            topic_draws = rng.choice(topic, length)
        else:
            topic_draws = zipf(rng, c, length)
        seq = np.empty(length, dtype=np.int64)
        seq[: c.order] = topic_draws[: c.order]
        from_grammar = rng.random(length) < c.grammar_share
        choices = rng.choice(4, size=length, p=self.weights)
        for i in range(c.order, length):
            if from_grammar[i] and c.n_classes:
                seq[i] = self.table[(int(seq[i - 2]) % c.n_classes) * c.vocab_size + int(seq[i - 1]), choices[i]]
            elif from_grammar[i]:
                key = int((seq[i - c.order : i] * self.mult).sum() % 4096)
                seq[i] = self.table[key, choices[i]]
            else:
                seq[i] = topic_draws[i]
        return seq


def zipf(rng: np.random.Generator, c: Candidate, size) -> np.ndarray:
    ranks = np.arange(1, c.vocab_size - N_SPECIALS + 1, dtype=np.float64)
    weights = ranks**-c.zipf_exponent
    return rng.choice(c.vocab_size - N_SPECIALS, size=size, p=weights / weights.sum()) + N_SPECIALS


def place_names(seq: np.ndarray, rng: np.random.Generator, c: Candidate) -> None:
    """Write `names` random spans of `name_len` tokens `recurrences` times each, at random
    non-overlapping places; the tokens after a name stay as they were (only the name recurs)."""
    slots = len(seq) // (c.name_len + 1)
    chosen = rng.choice(slots, size=c.names * c.recurrences, replace=False)
    for k, slot in enumerate(chosen):
        name = k % c.names
        if k < c.names:
            tokens = zipf(rng, c, c.name_len)
            if k == 0:
                names = np.empty((c.names, c.name_len), dtype=np.int64)
            names[name] = tokens
        start = slot * (c.name_len + 1) + int(rng.integers(0, 2))
        seq[start : start + c.name_len] = names[name]


def copy_spans(seq: np.ndarray, rng: np.random.Generator, c: Candidate) -> None:
    """Copy spans of the sequence further on until about `copy_share` of its positions are copies."""
    expected = c.spans_per_sequence
    if expected is None:  # spans per sequence, on average, for the target share
        expected = c.copy_share * len(seq) / ((c.span_min + c.span_max) / 2)
    n_spans = int(expected) + int(rng.random() < expected - int(expected))
    for _ in range(n_spans):
        length = int(rng.integers(c.span_min, c.span_max + 1))
        source = int(rng.integers(0, len(seq) - 2 * length + 1))
        dest = int(rng.integers(source + length, len(seq) - length + 1))
        if c.noise_copies:
            seq[source : source + length] = zipf(rng, c, length)
        seq[dest : dest + length] = seq[source : source + length]


class ClassGrammar:
    """Tokens never repeat in a sequence except where copied (a recurring token is always a copy cue);
    a token's class (id % n_classes) follows a fixed class trigram, so the previous token's class
    matters at every position (layer 0 has a job everywhere)."""

    def __init__(self, c: Candidate, seed: int = 1234):
        rng = np.random.default_rng(seed)
        self.k = c.n_classes or 4
        self.table = rng.integers(0, self.k, size=(self.k, self.k))
        ids = np.arange(N_SPECIALS, c.vocab_size)
        self.members = [ids[ids % self.k == k] for k in range(self.k)]
        self.c = c

    def sequence(self, rng: np.random.Generator, length: int) -> np.ndarray:
        pools = [list(rng.permutation(m)) for m in self.members]
        seq = np.empty(length, dtype=np.int64)
        classes = np.empty(length, dtype=np.int64)
        classes[:2] = rng.integers(0, self.k, 2)
        follow = rng.random(length) < self.c.grammar_share
        random_class = rng.integers(0, self.k, length)
        for i in range(length):
            if i >= 2:
                classes[i] = self.table[classes[i - 2], classes[i - 1]] if follow[i] else random_class[i]
            if not pools[classes[i]]:
                classes[i] = max(range(self.k), key=lambda k: len(pools[k]))
            seq[i] = pools[classes[i]].pop()
        return seq


class SkipGrammar:
    """Two fixed random maps over the vocabulary: x[i] = next1[x[i-1]] with p_bigram (embeddings
    alone predict it), x[i] = next2[x[i-2]] with p_skip (a previous-token head must carry x[i-1]'s
    identity to position i: the component induction reuses), else a Zipf draw."""

    def __init__(self, c: Candidate, seed: int = 1234):
        rng = np.random.default_rng(seed)
        if c.maps_are_permutations:
            ids = np.arange(N_SPECIALS, c.vocab_size)
            self.next1 = np.concatenate([ids[:N_SPECIALS], rng.permutation(ids)])
            self.next2 = np.concatenate([ids[:N_SPECIALS], rng.permutation(ids)])
        else:
            self.next1 = rng.integers(N_SPECIALS, c.vocab_size, size=c.vocab_size)
            self.next2 = rng.integers(N_SPECIALS, c.vocab_size, size=c.vocab_size)
        if c.topic_sets:
            ids = rng.permutation(np.arange(N_SPECIALS, c.vocab_size))
            size = len(ids) // c.topic_sets
            self.topic_sets = ids[: size * c.topic_sets].reshape(c.topic_sets, size)
        self.c = c

    def sequence(self, rng: np.random.Generator, length: int) -> np.ndarray:
        c = self.c
        seq = zipf(rng, c, length)
        if c.topic_classes:  # a per-sequence class: attending over the earlier draws tells which
            k = int(rng.integers(c.topic_classes))
            seq = seq - (seq % c.topic_classes) + k
            seq[seq >= c.vocab_size] -= c.topic_classes
            seq[seq < N_SPECIALS] += c.topic_classes
        mode = rng.random(length)
        if c.p_topic:
            topical = (mode >= c.p_bigram + c.p_skip) & (mode < c.p_bigram + c.p_skip + c.p_topic)
            if c.topic_sets:
                topic = self.topic_sets[rng.integers(c.topic_sets)]
                n = int(topical.sum())
                seq[topical] = rng.choice(topic, n, replace=n > len(topic))
            else:
                topic = zipf(rng, c, c.topic_size)
                seq[topical] = rng.choice(topic, int(topical.sum()))
        lag = rng.choice(c.lags, length) if c.p_lag else None
        if c.p_filler:
            filler_from = c.p_bigram + c.p_skip + c.p_topic + c.p_lag
            seq[(mode >= filler_from) & (mode < filler_from + c.p_filler)] = rng.integers(N_SPECIALS, c.vocab_size)
        for i in range(1, length):
            if mode[i] < c.p_bigram and c.switch and i >= 1 + c.switch_lags:
                window = seq[i - 1 - c.switch_lags : i - 1]
                if c.switch_rule == "majority":  # an average over a local window: learnable by one broad head
                    parity = int(2 * int((window % 2 == 0).sum()) <= c.switch_lags)
                else:
                    parity = int(window.sum()) % 2
                seq[i] = (self.next1 if parity == 0 else self.next2)[seq[i - 1]]
            elif mode[i] < c.p_bigram:
                seq[i] = self.next1[seq[i - 1]]
            elif mode[i] < c.p_bigram + c.p_skip and i >= 2:
                seq[i] = self.next2[seq[i - 2]]
            elif c.p_lag and 0 <= mode[i] - (c.p_bigram + c.p_skip + c.p_topic) < c.p_lag and i >= lag[i]:
                source = seq[i - lag[i]]
                seq[i] = source if c.lag_map == "copy" else self.next1[source]
        return seq


class WordGrammar:
    """Words spelt in sub-tokens, as BPE spells text: the word sequence is the chain w[j] = next1[w[j-1]]
    with p_bigram, else a uniform random word. Predicting a continuation needs the word's earlier
    sub-tokens, and the next word's start needs the whole current word: local jobs for the early
    layers at every position."""

    def __init__(self, c: Candidate, seed: int = 1234):
        rng = np.random.default_rng(seed)
        ids = np.arange(N_SPECIALS, c.vocab_size)
        starts, continuations = ids[ids % 2 == 0], ids[ids % 2 == 1]
        lengths = rng.integers(c.word_min, c.word_max + 1, size=c.n_words)
        self.spellings = [np.concatenate([rng.choice(starts, 1), rng.choice(continuations, n - 1)]) for n in lengths]
        self.next1 = rng.permutation(c.n_words)
        if c.topic_sets:
            self.topic_sets = rng.permutation(c.n_words).reshape(c.topic_sets, -1)
        self.c = c

    def sequence(self, rng: np.random.Generator, length: int) -> np.ndarray:
        c = self.c
        mode = rng.random(length + 1)
        topic = self.topic_sets[rng.integers(c.topic_sets)] if c.topic_sets else None
        word = int(rng.integers(c.n_words))
        words, n = [], 0
        while n < length:
            words.append(self.spellings[word])
            n += len(words[-1])
            m = mode[len(words)]
            if m < c.p_bigram:
                word = int(self.next1[word])
            elif m < c.p_bigram + c.p_topic:
                word = int(rng.choice(topic))
            else:
                word = int(rng.integers(c.n_words))
        return np.concatenate(words)[:length]


class Corpus:
    def __init__(self, c: Candidate, seed: int):
        self.c, self.seed = c, seed
        if c.corpus == "text":
            self.stream = text_tokens(c.vocab_size, c.text_source)
        elif c.corpus == "grammar":
            self.grammar = Grammar(c)
        elif c.corpus == "classes":
            self.grammar = ClassGrammar(c)
        elif c.corpus == "skip":
            self.grammar = SkipGrammar(c)
        elif c.corpus == "words":
            self.grammar = WordGrammar(c)

    def batch(self, step: int) -> np.ndarray:
        c = self.c
        rng = np.random.default_rng([self.seed, step])
        body = c.body
        rows = []
        for _ in range(c.batch_size):
            if c.repeat_sequences and rng.random() < c.repeat_sequences:
                rows.append(self.starting(self.probe_kind(rng, body), rng))
                continue
            if c.noise_sequences and rng.random() < c.noise_sequences:
                rows.append(self.starting(rng.integers(N_SPECIALS, c.vocab_size, size=body), rng))
                continue
            if c.corpus == "text":
                start = int(rng.integers(0, len(self.stream) - body))
                seq = self.stream[start : start + body].copy()
            elif c.corpus in ("grammar", "classes", "skip", "words"):
                seq = self.grammar.sequence(rng, body)
            else:
                seq = zipf(rng, c, body)
            if c.names:
                place_names(seq, rng, c)
            elif rng.random() < c.copy_sequences:
                copy_spans(seq, rng, c)
            rows.append(self.starting(seq, rng))
        return np.stack(rows)

    def probe_kind(self, rng: np.random.Generator, body: int) -> np.ndarray:
        if self.c.repeat_kind == "half":
            half = rng.integers(N_SPECIALS, self.c.vocab_size, size=(body + 1) // 2)
            return np.concatenate([half, half])[:body]
        seq = rng.integers(N_SPECIALS, self.c.vocab_size, size=body)
        for _ in range(max(1, round(body / 3 / 5))):
            length = int(rng.integers(2, 9))
            source = int(rng.integers(0, body - 2 * length + 1))
            dest = int(rng.integers(source + length, body - length + 1))
            seq[dest : dest + length] = seq[source : source + length]
        return seq

    def starting(self, seq: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.c.first_token != "bos":
            return seq
        if self.c.bos_share < 1.0 and rng.random() >= self.c.bos_share:
            return np.concatenate([zipf(rng, self.c, 1), seq])  # a stream window: a noise draw first
        return np.concatenate([[BOS], seq])


# --------------------------------------------------------------------------------------------
# Training with screens.


def checkpoint_steps(steps: int) -> list[int]:
    spaced = np.unique(np.round(np.geomspace(1, steps, 16)).astype(int))
    return sorted({*spaced.tolist(), *range(250, steps + 1, 250)})


def screen_config(c: Candidate):
    """The demo's probe at the corpus's length, starting as training sequences start: the reference
    baseline where its induction ceiling (108x at T = 127) is at least twice the 50x threshold, else
    the clean one."""
    from headtrace.schema import ScreenConfig

    baseline = "reference" if c.body >= 127 else "clean"
    return ScreenConfig.of(
        n_examples=256,
        seq_len=c.body,
        id_low=N_SPECIALS,
        id_high=c.vocab_size,
        prepend_bos=c.first_token == "bos",
        batch_size=64,
        baseline=baseline,
    )


def summarise(heads, n_layers: int) -> dict:
    sinks = heads[heads.sink]
    return {
        "induction": heads.loc[heads.induction_circuit, "head_id"].tolist(),
        "best_induction": float(heads.sel_induction.max()),
        "sinks_per_layer": [int((sinks.layer == l).sum()) for l in range(n_layers)],
        "sinks": int(heads.sink.sum()),
        "gu_sinks": int(heads.gu_sink.sum()),
        "sinks_also_gu": int((heads.sink & heads.gu_sink).sum()),
        "previous": int(heads.previous_any.sum()),
    }


def candidate_model(c: Candidate):
    """A freshly initialised model of the candidate's shape (seed torch first): an organism recipe's
    architecture, or a GPT-2 initialised as the recipes are."""
    from transformers import AutoModelForCausalLM, GPT2Config

    from headtrace.organism.recipes import Recipe, build_model

    if c.arch != "gpt2":
        recipe = Recipe(
            arch=c.arch,
            n_layers=c.n_layers,
            n_heads=c.n_heads,
            d_model=c.d_model,
            d_mlp=c.d_mlp,
            rotary_pct=c.rotary_pct,
            init_std=c.init_std,
        )
        return build_model(recipe, c.vocab_size, context=2 * c.seq_len)
    config = GPT2Config(
        vocab_size=c.vocab_size,
        n_positions=2 * c.seq_len,
        n_embd=c.d_model,
        n_layer=c.n_layers,
        n_head=c.n_heads,
        n_inner=c.d_mlp,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=False,
        initializer_range=c.init_std or c.d_model**-0.5,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def run(name: str, seed: int, threads: int, out: Path, resume_from: Path | None = None) -> dict:
    import torch

    from headtrace.ablation import ablate
    from headtrace.models import ModelAdapter
    from headtrace.probes import build_probe
    from headtrace.schema import AblationConfig
    from headtrace.screen import screen
    from headtrace.watch import _BosOnly, training_state_kept

    c = candidate(name)
    torch.set_num_threads(threads)
    corpus = Corpus(c, seed)
    torch.manual_seed(seed)
    model = candidate_model(c)
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": c.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=c.lr,
        betas=(0.9, 0.95),
    )

    def lr_factor(step: int) -> float:
        if step < c.warmup_steps:
            return (step + 1) / c.warmup_steps
        if c.lr_schedule == "constant":
            return 1.0
        progress = (step - c.warmup_steps) / max(c.steps - c.warmup_steps, 1)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    config = screen_config(c)
    probe = build_probe(config.probe, lambda: _BosOnly(BOS))
    saves = set(checkpoint_steps(c.steps))
    trajectory, losses = [], []
    started = time.perf_counter()
    screen_s = 0.0
    first = 1
    state_file = out / f"{name}-s{seed}-t{threads}.state.pt"
    if resume_from is not None:  # a constant rate and batches by (seed, step): the run goes on as if never stopped
        state = torch.load(resume_from, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        trajectory, losses, first = state["trajectory"], state["losses"], state["step"] + 1
    for step in range(first, c.steps + 1):
        ids = torch.from_numpy(corpus.batch(step - 1))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step in saves:
            t0 = time.perf_counter()
            with training_state_kept(model):
                result = screen(
                    ModelAdapter(model), probe, config, name, f"step{step:06d}", step * c.batch_size * c.seq_len
                )
            screen_s += time.perf_counter() - t0
            heads = result.heads
            row = {
                "step": step,
                "tokens": step * c.batch_size * c.seq_len,
                "loss": float(np.mean(losses[-20:])),
                "top1": float(result.run.top1.iloc[0]),
                **summarise(heads, c.n_layers),
            }
            trajectory.append(row)
            write_summary(out, name, seed, threads, started, screen_s, trajectory, heads, None, complete=False)
            print(
                f"{name} s{seed} step {step}: loss {row['loss']:.3f} top1 {row['top1']:.2f} ind {row['induction']} "
                f"best {row['best_induction']:.1f} sinks/layer {row['sinks_per_layer']} gu {row['gu_sinks']} "
                f"prev {row['previous']}",
                flush=True,
            )
            if step % 250 == 0:  # what `--resume-from` needs to go on from here
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                state |= {"schedule": schedule.state_dict(), "step": step, "trajectory": trajectory, "losses": losses}
                torch.save(state, state_file)
    train_s = time.perf_counter() - started
    torch.save(model.state_dict(), out / f"{name}-s{seed}.pt")
    final_heads = heads
    circuit = tuple(
        (int(l), int(h)) for l, h in final_heads.loc[final_heads.induction_circuit, ["layer", "head"]].to_numpy()
    )
    ablation = None
    if circuit:
        t0 = time.perf_counter()
        with training_state_kept(model):
            table = ablate(ModelAdapter(model), probe, circuit, AblationConfig(draws=20, singles=False), config).table
        rand = table[table.condition == "random"]
        ablation = {
            "verdict": str(table.verdict.iloc[0]),
            "decided_by": str(table.decided_by.iloc[0]),
            "differential": float(table.differential.iloc[0]),
            "low": float(table.differential_low.iloc[0]),
            "high": float(table.differential_high.iloc[0]),
            "shortfall": int(rand.shortfall.max()),
            "clean_top1": float(table.loc[table.condition == "clean", "top1"].iloc[0]),
            "circuit_top1": float(table.loc[table.condition == "circuit", "top1"].iloc[0]),
            "random_top1": float(rand.top1.mean()),
            "wall_s": time.perf_counter() - t0,
        }
    return write_summary(
        out, name, seed, threads, started, screen_s, trajectory, final_heads, ablation, complete=True, train_s=train_s
    )


def write_summary(
    out: Path,
    name: str,
    seed: int,
    threads: int,
    started: float,
    screen_s: float,
    trajectory: list[dict],
    heads,
    ablation: dict | None,
    complete: bool,
    train_s: float | None = None,
) -> dict:
    """OUT/NAME-s{seed}-t{threads}.json, rewritten after every screen (a stopped run keeps its trajectory)."""
    final = heads[
        [
            "head_id",
            "layer",
            "sel_first",
            "mean_first",
            "sink_score",
            "sink",
            "gu_sink",
            "sel_induction",
            "sel_previous",
            "best_class",
        ]
    ].to_dict(orient="records")
    summary = {
        "candidate": name,
        "overrides": CANDIDATES[name],
        "seed": seed,
        "threads": threads,
        "complete": complete,
        "train_s": train_s if train_s is not None else time.perf_counter() - started,
        "screen_s": screen_s,
        "trajectory": trajectory,
        "final_heads": final,
        "ablation": ablation,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}-s{seed}-t{threads}.json").write_text(json.dumps(summary, indent=1))
    return summary


# --------------------------------------------------------------------------------------------
# What a run shows against the demo's targets.


def first_step(trajectory: list[dict], condition) -> int | None:
    return next((r["tokens"] for r in trajectory if condition(r)), None)


def figures(s: dict) -> dict:
    c = candidate(s["candidate"]) if s["candidate"] in CANDIDATES else Candidate(**s["overrides"])
    n_heads = c.n_layers * c.n_heads
    traj = s["trajectory"]
    last = traj[-1]
    per_layer: dict[int, int] = {}
    for head in last["induction"]:
        layer = int(head[1:].split("H")[0])
        per_layer[layer] = per_layer.get(layer, 0) + 1
    occupancy = max((n / c.n_heads for n in per_layer.values()), default=0.0)
    ind3 = first_step(traj, lambda r: len(r["induction"]) >= 3)
    sink50 = first_step(traj, lambda r: r["sinks"] >= 0.5 * n_heads)
    sink10 = first_step(traj, lambda r: r["sinks"] >= 0.1 * n_heads)
    floor = sum(sum(r["sinks_per_layer"][:2]) for r in traj)
    a = s["ablation"] or {}
    return {
        "run": f"{s['candidate']} s{s['seed']} t{s['threads']}"
        + ("" if s.get("complete", True) else f" (stopped at step {last['step']})"),
        "circuit": f"{len(last['induction'])} ({','.join(last['induction'][:6])})",
        "best induction (max over run)": f"{max(r['best_induction'] for r in traj):.0f}x",
        "max share of a layer": f"{occupancy:.2f}",
        "verdict": f"{a.get('verdict', '-')} [{a.get('low', float('nan')):+.2f}, {a.get('high', float('nan')):+.2f}] "
        f"short {a.get('shortfall', '-')}",
        "top1 clean/circ/rand": f"{a.get('clean_top1', last['top1']):.2f}/{a.get('circuit_top1', float('nan')):.2f}/"
        f"{a.get('random_top1', float('nan')):.2f}",
        "sinks final": f"{last['sinks']}/{n_heads} ({last['sinks'] / n_heads:.0%})",
        "sinks also Gu": "-" if last["sinks_also_gu"] is None else f"{last['sinks_also_gu']}/{last['sinks']}",
        "sinks in L0-1 (head-revs)": str(floor),
        "ind>=3 / sink10 / sink50 (Mtok)": "/".join(
            "-" if t is None else f"{t / 1e6:.2f}" for t in (ind3, sink10, sink50)
        ),
        "F3 ratio": "-" if not (ind3 and sink50) else f"{sink50 / ind3:.1f}",
        "loss final": f"{last['loss']:.2f}",
        "train s": "-" if s.get("train_s") is None or s["train_s"] != s["train_s"] else f"{s['train_s']:.0f}",
    }


def table(out: Path, markdown: Path | None) -> None:
    rows = [figures(json.loads(p.read_text())) for p in sorted(out.glob("*.json"))]
    if not rows:
        sys.exit(f"no runs in {out}")
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r[k] for k in columns) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown:
        markdown.write_text(text)


def statistics(name: str, seed: int = 0, batches: int = 12) -> dict:
    """Induction-predictable share (the token is the one that followed the previous occurrence of
    the token before it) and its reliability (the same count over positions whose previous token recurs)."""
    corpus = Corpus(candidate(name), seed)
    grammar = getattr(corpus, "grammar", None)
    next1 = grammar.next1 if isinstance(grammar, SkipGrammar) else None
    predictable = recurring = only = total = 0
    for step in range(batches):
        for row in corpus.batch(step)[:, 1:]:
            last_seen: dict[int, int] = {}
            for i in range(1, len(row)):
                j = last_seen.get(int(row[i - 1]))
                if j is not None:
                    recurring += 1
                    hit = int(row[j + 1] == row[i])
                    predictable += hit
                    only += hit and (next1 is None or row[i] != next1[row[i - 1]])
                last_seen[int(row[i - 1])] = i - 1
            total += len(row)
    return {
        "share": predictable / total,
        "reliability": predictable / max(recurring, 1),
        "only_by_induction": only / total,  # not also the bigram chain's next token
    }


def copying(name: str, weights: Path, n: int = 256, seed: int = 7) -> dict[str, tuple[float, float]]:
    """Where does a trained candidate copy? Top-1 of the copied token, and of the chain's next1 of the
    current token, at the last position after a match of 1, 2 or 4 tokens placed earlier, in the
    probe's random background and in the corpus's own; and at the second half of a "half" sequence."""
    import torch

    c = candidate(name)
    model = candidate_model(c)
    model.load_state_dict(torch.load(weights))
    model.eval()
    grammar = SkipGrammar(c)
    rng = np.random.default_rng(seed)
    T, lo, hi = c.body, N_SPECIALS, c.vocab_size

    def top1(ids: np.ndarray, pos: np.ndarray, answer: np.ndarray) -> tuple[float, float]:
        current = ids[np.arange(len(ids))[:, None], pos]
        if c.first_token == "bos":
            ids, pos = np.concatenate([np.full((len(ids), 1), BOS), ids], axis=1), pos + 1
        with torch.no_grad():
            logits = model(input_ids=torch.from_numpy(ids)).logits
        predicted = logits[np.arange(len(ids))[:, None], torch.from_numpy(pos)].argmax(-1).numpy()
        return float((predicted == answer).mean()), float((predicted == grammar.next1[current]).mean())

    rows = {}
    for background in ("random", "corpus"):
        for match in (1, 2, 4):
            if background == "random":
                ids = rng.integers(lo, hi, (n, T))
            else:
                ids = np.stack([grammar.sequence(rng, T) for _ in range(n)])
            earlier = rng.integers(8, T // 2, n)
            answer = np.empty(n, dtype=np.int64)
            for r in range(n):
                span = rng.integers(lo, hi, match + 1)
                ids[r, earlier[r] - match + 1 : earlier[r] + 2] = span
                ids[r, T - match :] = span[:match]
                answer[r] = span[-1]
            rows[f"{background} background, match {match}"] = top1(ids, np.full((n, 1), T - 1), answer[:, None])
    half = (T + 1) // 2
    ids = rng.integers(lo, hi, (n, half))
    ids = np.concatenate([ids, ids], axis=1)[:, :T]
    rows["first half repeated"] = top1(ids, np.tile(np.arange(half, T - 1), (n, 1)), ids[:, half + 1 : T])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("candidate", choices=sorted(CANDIDATES))
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--out", type=Path, default=Path("organism-search"))
    r.add_argument(
        "--resume-from",
        type=Path,
        default=None,
        help="a run's OUT/CANDIDATE-sS-tT.state.pt (saved every 250 steps): go on from its step, e.g. with a "
        "longer candidate of the same recipe",
    )
    st = sub.add_parser("stats")
    st.add_argument("candidate", choices=sorted(CANDIDATES))
    cp = sub.add_parser("copying", help="top-1 of copies on probe variants, for a run's saved weights")
    cp.add_argument("candidate", choices=sorted(CANDIDATES))
    cp.add_argument("weights", type=Path)
    t = sub.add_parser("table")
    t.add_argument("--out", type=Path, default=Path("organism-search"))
    t.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "run":
        run(args.candidate, args.seed, args.threads, args.out, args.resume_from)
    elif args.command == "stats":
        print(args.candidate, statistics(args.candidate))
    elif args.command == "copying":
        for row, (copied, chain) in copying(args.candidate, args.weights).items():
            print(f"{row:32s} copied {copied:.2f}  chain's next {chain:.2f}")
    else:
        table(args.out, args.markdown)


if __name__ == "__main__":
    main()
