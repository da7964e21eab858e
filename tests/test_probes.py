"""Probe builders: the synthetic batch reproduces the reference batch (docs/definitions.md) draw for draw;
natural-text probes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headtrace.errors import HeadtraceError
from headtrace.probes import (
    BASELINE_SIZE,
    CHANNELS,
    ProbeSpec,
    baseline_positions,
    natural_text_induction,
    special_positions,
    synthetic_induction,
)


def transcribed_reference(n, T, seed=42, lo=100, hi=10000):
    """The reference batch (docs/definitions.md) transcribed literally, one draw at a time."""
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        seq = rng.randint(lo, hi, size=T)
        a, b = rng.choice(np.arange(lo, hi), 2, replace=False)
        ab = rng.randint(20, T // 2)
        seq[ab] = a
        seq[ab + 1] = b
        for k in range(T):
            if seq[k] == a and k != ab:
                seq[k] = rng.randint(lo, hi)
        for k in range(T):
            if seq[k] == b and k != ab + 1:
                seq[k] = rng.randint(lo, hi)
        seq[T - 1] = a
        out.append(seq)
    return np.array(out)


def test_synthetic_batch_matches_transcribed_reference():
    probe = synthetic_induction(ProbeSpec(n_examples=300, seq_len=256))
    np.testing.assert_array_equal(probe.input_ids, transcribed_reference(300, 256))
    assert probe.n_valid == 300  # as in the reference screen files (n_examples_valid == n_examples)


def test_reference_baseline_positions():
    """50 distinct positions from RandomState(0) randint(1, 255), skipping the special ones."""
    rng = np.random.RandomState(0)
    expected = []
    while len(expected) < 50:
        p = rng.randint(1, 255)
        if p not in expected and p not in {0, 255, 254, 253, 252, 251, 250}:
            expected.append(p)
    np.testing.assert_array_equal(baseline_positions(255), expected)
    probe = synthetic_induction(ProbeSpec(n_examples=3, seq_len=256))
    assert (probe.baseline == np.array(expected)).all()


def test_prepend_bos_shifts_every_position():
    plain = synthetic_induction(ProbeSpec(n_examples=20, seq_len=64))
    bos = synthetic_induction(ProbeSpec(n_examples=20, seq_len=64), bos_token_id=7)
    assert (bos.input_ids[:, 0] == 7).all()
    np.testing.assert_array_equal(bos.input_ids[:, 1:], plain.input_ids)
    np.testing.assert_array_equal(bos.query, plain.query + 1)
    np.testing.assert_array_equal(bos.induction, plain.induction + 1)
    assert (bos.input_ids[np.arange(20), bos.induction] == bos.answer).all()


def test_bad_sizes_fail_clearly():
    with pytest.raises(HeadtraceError, match="n-examples"):
        synthetic_induction(ProbeSpec(n_examples=0))
    with pytest.raises(HeadtraceError, match="seq-len"):
        synthetic_induction(ProbeSpec(seq_len=30))
    probe = synthetic_induction(ProbeSpec(n_examples=2, seq_len=64))
    with pytest.raises(HeadtraceError, match="--id-high 5000"):
        probe.check_vocab(5000)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    T=st.integers(44, 160),
    seed=st.integers(0, 2**31 - 1),
    lo=st.integers(0, 50),
    width=st.integers(2, 400),
)
def test_valid_examples_have_the_induction_structure(n, T, seed, lo, width):
    """For any size, seed and id range: valid examples have A at ab, B at ab+1, A at the query and
    no other B before the query; invalid ones are excluded from induction and duplicate."""
    probe = synthetic_induction(ProbeSpec(n_examples=n, seq_len=T, seed=seed, id_low=lo, id_high=lo + width))
    q = T - 1
    for i in range(n):
        seq = probe.input_ids[i]
        if probe.valid[i]:
            ab = probe.duplicate[i]
            assert probe.induction[i] == ab + 1
            assert seq[ab] == seq[q] and seq[ab + 1] == probe.answer[i]
            assert np.flatnonzero(seq[:q] == probe.answer[i]).tolist() == [ab + 1]
        else:
            assert probe.induction[i] == -1 and probe.duplicate[i] == -1
    defined = probe.channel_defined()
    assert defined[:, CHANNELS.index("induction")].sum() == probe.n_valid
    assert defined[:, CHANNELS.index("duplicate")].sum() == probe.n_valid
    special = special_positions(q)
    assert not set(probe.baseline[0].tolist()) & special
    assert all(p not in special for p in probe.null)


@settings(max_examples=25, deadline=None)
@given(T=st.integers(44, 400))
def test_baseline_never_special(T):
    base = baseline_positions(T - 1)
    assert len(base) == min(BASELINE_SIZE, T - 7) and len(set(base)) == len(base)
    assert not set(base.tolist()) & special_positions(T - 1)


class WordTokenizer:
    """A whitespace tokenizer with a fixed vocabulary: enough to build a natural-text probe."""

    bos_token_id, eos_token_id, pad_token_id = 1, 2, 0

    def __init__(self):
        self.vocab = {}

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab) + 3) for w in text.split()]}


def test_natural_text_probe_targets():
    words = [f"w{i}" for i in range(40)]
    doc = " ".join(words[:10] + words[10:30] + words[:3] + words[30:35] + words[:2])
    tok = WordTokenizer()
    probe = natural_text_induction([doc, "too short to recur"], tok, max_len=64)
    assert probe.n == 1
    ids = probe.input_ids[0]
    t = ids[0]
    q = probe.query[0]
    assert ids[q] == t and probe.duplicate[0] == 0 and probe.induction[0] == 1
    assert q == max(np.flatnonzero(ids == t)) and q >= 20
    assert probe.answer[0] == ids[1]
    with pytest.raises(HeadtraceError, match="recurs"):
        natural_text_induction(["a b c"], WordTokenizer())
