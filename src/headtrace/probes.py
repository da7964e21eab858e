"""Probe batches: token ids plus, per example, the query position and every class's target positions.

The screen only reads a `Probe`, so any batch that names a query and its targets can be screened.
Two builders ship: the synthetic induction batch of the reference study (docs/definitions.md), reproduced
draw for draw, and a natural-text induction probe built from any corpus with the model's tokenizer.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from headtrace.errors import HeadtraceError
from headtrace.registry import Registry

# Selectivity classes in table order (ties in the best class keep this order).
CLASSES: tuple[str, ...] = ("induction", "duplicate-token", "previous-token", "first-token", "self", "local")
# Short names used in column names: sel_induction, mean_previous, ...
CLASS_KEYS: dict[str, str] = {
    "induction": "induction",
    "duplicate-token": "duplicate",
    "previous-token": "previous",
    "first-token": "first",
    "self": "self",
    "local": "local",
}
# Channels the screen measures at the query: the six classes, the baseline, and the F6 null target.
CHANNELS: tuple[str, ...] = tuple(CLASS_KEYS.values()) + ("baseline", "null")
LOCAL_OFFSETS: tuple[int, ...] = (2, 3, 4, 5)
BASELINE_SIZE = 50
BASELINE_SEED = 0
NULL_SEED = 1
SELECTIVITY_FLOOR = 1e-8  # baseline floor in the ratio, as in the reference
# reference: the study's fixed positions, which may hold an example's own class target (the default);
# clean: each example's baseline without its own induction and duplicate-token targets.
BASELINES: tuple[str, ...] = ("reference", "clean")


@dataclass(frozen=True)
class Probe:
    """A batch of n sequences of length L with per-example query and target positions.

    Position arrays use -1 for "undefined in this example" (an invalid induction example has no
    induction or duplicate target); `baseline` rows are padded with -1.
    """

    input_ids: np.ndarray  # [n, L] int64
    query: np.ndarray  # [n] position whose attention row is screened
    answer: np.ndarray  # [n] token id expected after the query (B), for capability
    induction: np.ndarray  # [n] key position of the token after the earlier occurrence (ab + 1)
    duplicate: np.ndarray  # [n] key position of the earlier occurrence of the query token (ab)
    local: np.ndarray  # [n, 4] q-2 .. q-5
    baseline: np.ndarray  # [n, K] non-special positions, -1 padded
    null: np.ndarray  # [n] one random non-special, non-target position (noise floor, F6)
    description: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def valid(self) -> np.ndarray:
        """Examples where the induction and duplicate targets are defined."""
        return self.induction >= 0

    @property
    def n_valid(self) -> int:
        return int(self.valid.sum())

    def target_positions(self) -> dict[str, np.ndarray]:
        """Single-position targets per class key ([n], -1 = undefined)."""
        return {
            "induction": self.induction,
            "duplicate": self.duplicate,
            "previous": self.query - 1,
            "first": np.zeros_like(self.query),
            "self": self.query,
            "null": self.null,
        }

    def class_targets(self) -> dict[str, np.ndarray]:
        """Each class's target positions per example, [n, k] with -1 = undefined (local has 4)."""
        single = self.target_positions()
        return {key: (self.local if key == "local" else single[key][:, None]) for key in CLASS_KEYS.values()}

    def channel_defined(self) -> np.ndarray:
        """[n, len(CHANNELS)] bool: whether each channel has a target in each example."""
        single = self.target_positions()
        cols = []
        for name in CHANNELS:
            if name in single:
                cols.append(single[name] >= 0)
            elif name == "local":
                cols.append((self.local >= 0).any(axis=1))
            else:
                cols.append((self.baseline >= 0).any(axis=1))
        return np.stack(cols, axis=1)

    def subset(self, rows: slice | np.ndarray) -> "Probe":
        return Probe(
            input_ids=self.input_ids[rows],
            query=self.query[rows],
            answer=self.answer[rows],
            induction=self.induction[rows],
            duplicate=self.duplicate[rows],
            local=self.local[rows],
            baseline=self.baseline[rows],
            null=self.null[rows],
            description=dict(self.description),
        )

    def check_vocab(self, vocab_size: int) -> None:
        """Fail clearly when the probe's ids do not fit the model's vocabulary."""
        top = int(self.input_ids.max())
        if top >= vocab_size:
            raise HeadtraceError(
                f"probe token ids reach {top} but the model's vocabulary has {vocab_size} entries; "
                f"pass --id-high {vocab_size} (a different batch, recorded in the config)"
            )


def clean_baseline(probe: Probe) -> Probe:
    """The probe with each example's baseline cleaned of that example's own class targets.

    Of the class targets only the induction (ab + 1) and duplicate-token (ab) ones can lie among the
    baseline positions (the others are special positions, never drawn). A kept position keeps its
    order; the removed ones become -1 padding, so an example's baseline has 48 to 50 positions."""
    own = np.stack([probe.induction, probe.duplicate], axis=1)  # [n, 2], -1 where undefined
    hit = (probe.baseline[:, :, None] == own[:, None, :]).any(axis=2) & (probe.baseline >= 0)
    kept = np.where(hit, -1, probe.baseline)
    kept = np.take_along_axis(kept, np.argsort(kept < 0, axis=1, kind="stable"), axis=1)
    return dataclasses.replace(probe, baseline=kept, description={**probe.description, "baseline": "clean"})


def selectivity_ceilings(probe: Probe) -> dict[str, float]:
    """Per class key, the largest selectivity the probe can give: the score of a head that puts all
    its attention on the class's target (spread evenly over local's four) wherever it is defined,
    and none on the baseline elsewhere, computed as the screen computes selectivity.

    With the reference baseline an example's induction or duplicate target is often one of the 50
    baseline positions; the ceiling is then 1 / (share of examples where it is / 50): 61.3x for
    induction at T = 63 plus BOS, 238x at T = 256. Targets never in the baseline (first token,
    previous, self, local, and every class under the clean baseline) are bounded only by the
    selectivity floor (1e8 for one target)."""
    positions = probe.baseline
    size = (positions >= 0).sum(axis=1)
    has_baseline = size > 0
    ceilings = {}
    for key, targets in probe.class_targets().items():
        defined = (targets >= 0).any(axis=1)
        share = np.where(targets >= 0, 1.0 / np.maximum((targets >= 0).sum(axis=1, keepdims=True), 1), 0.0)
        # Attention that lands on baseline positions, averaged over them, per example.
        in_baseline = ((positions[:, :, None] == targets[:, None, :]) & (positions[:, :, None] >= 0)).any(axis=1)
        on_baseline = (share * in_baseline).sum(axis=1) / np.maximum(size, 1)
        target_mean = float((share**2).sum(axis=1)[defined].mean()) if defined.any() else np.nan
        baseline_mean = float(on_baseline[has_baseline].mean()) if has_baseline.any() else 0.0
        ceilings[key] = target_mean / max(baseline_mean, SELECTIVITY_FLOOR)
    return ceilings


def special_positions(query: int) -> set[int]:
    """Positions never used as baseline or null: first token, query, previous token and local window."""
    return {0, query, query - 1} | {query - k for k in LOCAL_OFFSETS}


def baseline_positions(query: int, size: int = BASELINE_SIZE, seed: int = BASELINE_SEED) -> np.ndarray:
    """The reference baseline: `size` distinct positions drawn by repeated `randint(1, T-1)` from
    `RandomState(seed)`, skipping special ones (T = query + 1). Fewer if fewer exist."""
    available = set(range(1, query)) - special_positions(query)
    size = min(size, len(available))
    rng = np.random.RandomState(seed)
    chosen: list[int] = []
    while len(chosen) < size:
        pos = int(rng.randint(1, query))
        if pos not in chosen and pos in available:
            chosen.append(pos)
    return np.array(chosen, dtype=np.int64)


def _null_positions(query: np.ndarray, avoid: Sequence[np.ndarray], seed: int) -> np.ndarray:
    """One random non-special position per example that is none of its class targets."""
    rng = np.random.RandomState(seed)
    null = np.empty(len(query), dtype=np.int64)
    for i, q in enumerate(query):
        excluded = special_positions(int(q)) | {int(a[i]) for a in avoid}
        while True:
            pos = int(rng.randint(1, q))
            if pos not in excluded:
                null[i] = pos
                break
    return null


@dataclass(frozen=True)
class ProbeSpec:
    """Which batch a screen runs: the probe's kind, its size and token ids, and the baseline that
    selectivity divides by (docs/definitions.md)."""

    kind: str = "synthetic"  # synthetic (the reference's batch) | natural (induction in a text corpus)
    n_examples: int = 2000
    seq_len: int = 256  # synthetic: the sequence length before BOS; natural: the longest text kept
    seed: int = 42
    id_low: int = 100
    id_high: int = 10000
    prepend_bos: bool = False
    texts: str | None = None  # natural: a .txt (blank-line separated) or .jsonl ("text") file
    baseline: str = "reference"  # reference | clean (docs/definitions.md, "The baseline and its ceiling")

    def validate(self) -> None:
        kind = PROBES.get(self.kind)
        if self.n_examples < 1:
            raise HeadtraceError(f"n-examples must be >= 1 (got {self.n_examples})")
        if self.baseline not in BASELINES:
            raise HeadtraceError(f"unknown baseline '{self.baseline}'; use {' or '.join(BASELINES)}")
        kind.check(self)


def _check_synthetic(spec: ProbeSpec) -> None:
    if spec.seq_len < 2 * 21 + 2:
        raise HeadtraceError(f"seq-len must be >= 44 so the first pair fits in [20, T/2) (got {spec.seq_len})")
    if spec.id_high - spec.id_low < 2:
        raise HeadtraceError(f"id range [{spec.id_low}, {spec.id_high}) must hold at least 2 ids")
    if spec.id_low < 0:
        raise HeadtraceError(f"id-low must be >= 0 (got {spec.id_low})")


def synthetic_induction(spec: ProbeSpec = ProbeSpec(), bos_token_id: int | None = None) -> Probe:
    """Build the synthetic induction batch exactly as the reference does, draw for draw; with
    `bos_token_id`, that token is prepended (the sequence grows by one)."""
    spec.validate()
    n, T, lo, hi = spec.n_examples, spec.seq_len, spec.id_low, spec.id_high
    rng = np.random.RandomState(spec.seed)
    pool = np.arange(lo, hi)
    ids = np.empty((n, T), dtype=np.int64)
    answer = np.empty(n, dtype=np.int64)
    for i in range(n):
        seq = rng.randint(lo, hi, size=T)
        a, b = rng.choice(pool, 2, replace=False)
        ab = rng.randint(20, T // 2)
        seq[ab], seq[ab + 1] = a, b
        # Replace every other occurrence of A, then of B, scanning k = 0..T-1; one draw each, and
        # a replacement is not re-checked (it only changes its own position, so scan positions first).
        for token, keep in ((a, ab), (b, ab + 1)):
            for k in np.flatnonzero(seq == token):
                if k != keep:
                    seq[k] = rng.randint(lo, hi)
        seq[T - 1] = a
        ids[i] = seq
        answer[i] = b

    ab = _recover_ab(ids, answer, T - 1)
    offset = 0
    if bos_token_id is not None:
        ids = np.concatenate([np.full((n, 1), bos_token_id, dtype=np.int64), ids], axis=1)
        offset = 1
    query_pos = T - 1 + offset
    query = np.full(n, query_pos, dtype=np.int64)
    induction = np.where(ab >= 0, ab + 1 + offset, -1)
    duplicate = np.where(ab >= 0, ab + offset, -1)
    base = baseline_positions(query_pos)
    return Probe(
        input_ids=ids,
        query=query,
        answer=answer,
        induction=induction,
        duplicate=duplicate,
        local=np.tile(query_pos - np.array(LOCAL_OFFSETS, dtype=np.int64), (n, 1)),
        baseline=np.tile(base, (n, 1)),
        null=_null_positions(query, (induction, duplicate), NULL_SEED),
        description={"kind": "synthetic-induction", **dataclasses.asdict(spec), "bos_token_id": bos_token_id},
    )


def _recover_ab(ids: np.ndarray, answer: np.ndarray, query: int) -> np.ndarray:
    """Per example, ab = p - 1 for the unique p < query holding B with A at p - 1; else -1."""
    ab = np.full(len(ids), -1, dtype=np.int64)
    for i, (seq, b) in enumerate(zip(ids, answer)):
        hits = np.flatnonzero(seq[:query] == b)
        if len(hits) == 1 and hits[0] >= 1 and seq[hits[0] - 1] == seq[query]:
            ab[i] = hits[0] - 1
    return ab


def natural_text_induction(
    texts: Iterable[str],
    tokenizer,
    max_len: int = 256,
    min_gap: int = 20,
    max_examples: int | None = None,
    prepend_bos: bool = False,
) -> Probe:
    """An induction probe from real text.

    Per document (tokenized, truncated to `max_len`): the first token T, followed by S, that recurs
    at least `min_gap` tokens later. Query at T's latest recurrence, induction target at S,
    duplicate target at T's first position, answer S. Documents without such a token are skipped.
    Rows are right-padded with the tokenizer's pad (or EOS) id; causal attention never sees it.
    """
    rows: list[tuple[list[int], int, int]] = []  # (ids, first position of T, query)
    offset = 1 if prepend_bos else 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max_len - offset]
        if prepend_bos:
            if tokenizer.bos_token_id is None:
                raise HeadtraceError("the tokenizer has no BOS token; drop --prepend-bos")
            ids = [tokenizer.bos_token_id] + ids
        found = _first_recurring_pair(ids, min_gap, start=offset)
        if found is not None:
            rows.append((ids, *found))
        if max_examples is not None and len(rows) >= max_examples:
            break
    if not rows:
        raise HeadtraceError(
            f"no document holds a token that recurs at least {min_gap} tokens later; give longer texts"
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    length = max(len(ids) for ids, _, _ in rows)
    n = len(rows)
    input_ids = np.full((n, length), pad, dtype=np.int64)
    query = np.empty(n, dtype=np.int64)
    first_t = np.empty(n, dtype=np.int64)
    for i, (ids, t_pos, q) in enumerate(rows):
        input_ids[i, : len(ids)] = ids
        query[i], first_t[i] = q, t_pos
    induction = first_t + 1
    baseline = np.full((n, BASELINE_SIZE), -1, dtype=np.int64)
    for i, q in enumerate(query):
        base = baseline_positions(int(q))
        baseline[i, : len(base)] = base
    return Probe(
        input_ids=input_ids,
        query=query,
        answer=input_ids[np.arange(n), induction],
        induction=induction,
        duplicate=first_t,
        local=query[:, None] - np.array(LOCAL_OFFSETS, dtype=np.int64)[None, :],
        baseline=baseline,
        null=_null_positions(query, (induction, first_t), NULL_SEED),
        description={
            "kind": "natural-text-induction",
            "max_len": max_len,
            "min_gap": min_gap,
            "prepend_bos": prepend_bos,
            "n_documents_used": n,
        },
    )


def _first_recurring_pair(ids: list[int], min_gap: int, start: int) -> tuple[int, int] | None:
    """(first position of T, its latest recurrence) for the first T recurring >= min_gap later."""
    last_seen: dict[int, int] = {}
    for pos, token in enumerate(ids):
        last_seen[token] = pos
    for pos in range(start, len(ids) - 1):
        latest = last_seen[ids[pos]]
        if latest - pos >= min_gap and latest >= max(LOCAL_OFFSETS) + 2:
            return pos, latest
    return None


def read_texts(path: str) -> list[str]:
    """Documents from a .jsonl file (a "text" field per line) or a text file (blank-line separated)."""
    try:
        with open(path, encoding="utf-8") as handle:
            content = handle.read()
    except OSError as exc:
        raise HeadtraceError(f"cannot read texts file '{path}': {exc.strerror}") from None
    if path.endswith(".jsonl"):
        try:
            return [json.loads(line)["text"] for line in content.splitlines() if line.strip()]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise HeadtraceError(f"'{path}' is not JSON lines with a \"text\" field ({exc})") from None
    return [doc.strip() for doc in content.split("\n\n") if doc.strip()]


# --------------------------------------------------------------------------------------------
# The probe registry: `ProbeSpec.kind` names one of these (a panel's `probe = ...`, `--probe`).

TokenizerLoader = Callable[[], object]


@dataclass(frozen=True)
class ProbeKind:
    """How to build one kind of probe from a spec (the tokenizer is loaded only if `build` calls
    the loader), and what to check in the spec before any model loads."""

    build: Callable[[ProbeSpec, TokenizerLoader], Probe]
    check: Callable[[ProbeSpec], None] = lambda spec: None
    needs_tokenizer: bool = False  # its positions depend on the tokenizer (no ceilings before loading)


PROBES: Registry[ProbeKind] = Registry("probe")


def _build_synthetic(spec: ProbeSpec, tokenizer_loader: TokenizerLoader) -> Probe:
    bos = None
    if spec.prepend_bos:
        bos = tokenizer_loader().bos_token_id
        if bos is None:
            raise HeadtraceError("the tokenizer has no BOS token; drop --prepend-bos")
    return synthetic_induction(spec, bos)


def _build_natural(spec: ProbeSpec, tokenizer_loader: TokenizerLoader) -> Probe:
    return natural_text_induction(
        read_texts(spec.texts),
        tokenizer_loader(),
        max_len=spec.seq_len,
        max_examples=spec.n_examples,
        prepend_bos=spec.prepend_bos,
    )


def _check_natural(spec: ProbeSpec) -> None:
    if not spec.texts:
        raise HeadtraceError("the natural probe needs --texts FILE (a .txt or .jsonl corpus)")


PROBES.add("synthetic", ProbeKind(_build_synthetic, _check_synthetic))
PROBES.add("natural", ProbeKind(_build_natural, _check_natural, needs_tokenizer=True))


def build_probe(spec: ProbeSpec, tokenizer_loader: TokenizerLoader) -> Probe:
    """The probe a spec describes, with its baseline (the tokenizer is loaded only when needed)."""
    spec.validate()
    probe = PROBES.get(spec.kind).build(spec, tokenizer_loader)
    return clean_baseline(probe) if spec.baseline == "clean" else probe
