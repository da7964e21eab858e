"""The organism's training data: seeded corpora in which induction pays off. Every sequence starts
with BOS (id 0); batches are a pure function of (seed, step), so the data order is deterministic
and two runs see the same tokens.

- `zipf` (the tiny organism): Zipf-distributed tokens (id n_specials is the most frequent, then
  falling as 1/rank^a), into which spans of the sequence itself are copied further on, with random
  lengths and random distances. A token inside a copied span is predictable only by finding its
  earlier occurrence and reading what followed it (induction); because the distance varies, no
  fixed positional offset can do the same.
- `stdlib` (the code organism): windows of the running Python's own standard library source (.py
  files outside test folders; PSF licence), BPE-tokenised by a tokenizer trained on it, with the
  same copied spans, sparser. Code gives heads local jobs everywhere (syntax, indentation,
  identifiers that recur within a file), so induction is one circuit among others. The text changes
  with the Python release: `text_provenance` records the version and the text's digest.

`probe_share` of the sequences are drawn as the synthetic induction probe is (uniform ids, short
spans copied), which keeps the probe inside the training distribution.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headtrace.errors import HeadtraceError

SPECIAL_TOKENS: tuple[str, ...] = ("<bos>", "<eos>", "<unk>")
BOS_ID = 0
EOS_ID = 1  # between documents of a text corpus
SOURCES: tuple[str, ...] = ("zipf", "stdlib")
# fields added after organisms were first saved: left out of to_dict at these values, so that an
# organism.json written before them still names the same organism
_LATER_FIELDS = {"source": "zipf", "copy_sequences": 1.0, "probe_share": 0.0}


@dataclass(frozen=True)
class CorpusConfig:
    """What the corpus looks like."""

    source: str = "zipf"  # zipf (synthetic) | stdlib (Python's standard library source, BPE)
    vocab_size: int = 256  # stdlib: the BPE tokenizer's vocabulary
    seq_len: int = 64  # including the BOS at position 0 (induction forms ~quadratically slower with length)
    zipf_exponent: float = 0.5
    span_min: int = 8  # copied span length, inclusive range: dense copying makes induction pay early
    span_max: int = 30
    spans_per_sequence: float = 3  # on average: the fraction is one more span with that probability
    copy_sequences: float = 1.0  # share of sequences with copied spans
    probe_share: float = 0.0  # share of sequences drawn as the synthetic induction probe is
    seed: int = 0

    @property
    def n_specials(self) -> int:
        return len(SPECIAL_TOKENS)

    def validate(self) -> None:
        if self.source not in SOURCES:
            raise HeadtraceError(f"unknown corpus source '{self.source}'; use one of: {', '.join(SOURCES)}")
        if not (0 <= self.probe_share <= 1 and 0 <= self.copy_sequences <= 1):
            raise HeadtraceError(f"probe_share and copy_sequences must be in [0, 1] (got {self})")
        if self.vocab_size < self.n_specials + 2:
            raise HeadtraceError(f"vocab size must be >= {self.n_specials + 2} (got {self.vocab_size})")
        if not 2 <= self.span_min <= self.span_max:
            raise HeadtraceError(f"need 2 <= span_min <= span_max (got {self.span_min}, {self.span_max})")
        if self.seq_len < 2 * self.span_max + 2:
            raise HeadtraceError(f"seq_len {self.seq_len} is too short for spans of {self.span_max} tokens")
        if self.zipf_exponent < 0 or self.spans_per_sequence < 0:
            raise HeadtraceError("zipf_exponent and spans_per_sequence must be >= 0")

    def to_dict(self) -> dict:
        fields = dataclasses.asdict(self)
        return {k: v for k, v in fields.items() if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}


def token_probabilities(config: CorpusConfig) -> np.ndarray:
    """P(id) over the vocabulary: 0 for special tokens, Zipf over the rest by id order."""
    ranks = np.arange(1, config.vocab_size - config.n_specials + 1, dtype=np.float64)
    weights = ranks**-config.zipf_exponent
    probs = np.zeros(config.vocab_size)
    probs[config.n_specials :] = weights / weights.sum()
    return probs


def copy_spans(seq: np.ndarray, rng: np.random.Generator, config: CorpusConfig) -> list[tuple[int, int, int]]:
    """Copy about `spans_per_sequence` spans of `seq` further on, in place (position 0, BOS, is never
    a source); returns (source, dest, length)."""
    whole = int(config.spans_per_sequence)
    extra = config.spans_per_sequence - whole
    spans = []
    for _ in range(whole + int(extra > 0 and rng.random() < extra)):
        length = int(rng.integers(config.span_min, config.span_max + 1))
        source = int(rng.integers(1, len(seq) - 2 * length + 1))
        dest = int(rng.integers(source + length, len(seq) - length + 1))
        seq[dest : dest + length] = seq[source : source + length]
        spans.append((source, dest, length))
    return spans


def probe_kind(rng: np.random.Generator, config: CorpusConfig) -> np.ndarray:
    """A sequence drawn as the synthetic probe is: BOS, uniform ids, with a span of 2-8 tokens copied
    further on for every 15 positions."""
    seq = np.empty(config.seq_len, dtype=np.int64)
    seq[0] = BOS_ID
    body = config.seq_len - 1
    seq[1:] = rng.integers(config.n_specials, config.vocab_size, size=body)
    for _ in range(max(1, round(body / 15))):
        length = int(rng.integers(2, 9))
        source = 1 + int(rng.integers(0, body - 2 * length + 1))
        dest = int(rng.integers(source + length, config.seq_len - length + 1))
        seq[dest : dest + length] = seq[source : source + length]
    return seq


def batch(config: CorpusConfig, step: int, batch_size: int) -> np.ndarray:
    """Training batch number `step`: int64 [batch_size, seq_len], BOS at position 0."""
    rng = np.random.default_rng([config.seed, step])
    if config.source == "zipf" and not config.probe_share and config.copy_sequences == 1:
        ids = rng.choice(config.vocab_size, size=(batch_size, config.seq_len), p=token_probabilities(config))
        ids[:, 0] = BOS_ID
        for seq in ids:
            copy_spans(seq, rng, config)
        return ids.astype(np.int64)
    rows = []
    for _ in range(batch_size):
        if config.probe_share and rng.random() < config.probe_share:
            rows.append(probe_kind(rng, config))
            continue
        seq = np.empty(config.seq_len, dtype=np.int64)
        seq[0] = BOS_ID
        if config.source == "zipf":
            seq[1:] = rng.choice(config.vocab_size, size=config.seq_len - 1, p=token_probabilities(config))
        else:
            stream = text_corpus(config.source, config.vocab_size).stream
            start = int(rng.integers(0, len(stream) - (config.seq_len - 1)))
            seq[1:] = stream[start : start + config.seq_len - 1]
        if rng.random() < config.copy_sequences:
            copy_spans(seq, rng, config)
        rows.append(seq)
    return np.stack(rows)


# --------------------------------------------------------------------------------------------
# Text corpora: documents, their provenance, a BPE tokenizer trained on them, the token stream.


def text_documents(source: str) -> tuple[list[Path], list[str]]:
    """The files of a text source and their texts, in a fixed order."""
    if source != "stdlib":
        raise HeadtraceError(f"'{source}' is not a text source; use stdlib")
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages"}
    files = sorted(f for f in root.rglob("*.py") if not skip & set(f.relative_to(root).parts[:-1]))
    return files, [f.read_text(encoding="utf-8", errors="replace") for f in files]


@functools.lru_cache(maxsize=2)
def text_provenance(source: str) -> dict:
    """Where a text source's documents come from: what, which Python, how many files, their digest."""
    files, texts = text_documents(source)
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
    return {
        "source": "the CPython standard library's source (.py files outside test folders)",
        "python": platform.python_version(),
        "files": len(files),
        "sha256": digest.hexdigest(),
        "licence": "PSF-2.0",
    }


@dataclass(frozen=True)
class TextCorpus:
    stream: np.ndarray  # int64 token ids, documents joined by EOS
    tokenizer_json: str  # the trained BPE tokenizer (`tokenizers` JSON)


@functools.lru_cache(maxsize=2)
def text_corpus(source: str, vocab_size: int) -> TextCorpus:
    """A text source BPE-tokenised by a tokenizer trained on it (about 10-20 s for the standard
    library's 12 MB on 2 cores; cached in the process)."""
    return bpe_tokens(text_documents(source)[1], vocab_size)


def bpe_tokens(texts: list[str], vocab_size: int) -> TextCorpus:
    """Texts tokenised by a byte-level BPE trained on them, each followed by EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # only text corpora need it

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    stream = []
    for encoding in tokenizer.encode_batch(texts):
        stream += encoding.ids + [EOS_ID]
    return TextCorpus(np.array(stream, dtype=np.int64), tokenizer.to_str())
