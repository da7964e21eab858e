"""What a screen measures and how its tables are labelled: the screen config and its hash, the
thresholds, the labels and head ids. Torch-free, so that the analysis (trajectory, reference,
report) reads results without loading torch or transformers."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.probes import (BASELINES, CLASS_KEYS, CLASSES, SELECTIVITY_FLOOR,  # noqa: F401 (re-exported)
                              SyntheticInductionSpec, clean_baseline, selectivity_ceilings, synthetic_induction)

SCHEMA_VERSION = 1


def head_id(layer: int, head: int) -> str:
    """TransformerLens-style head name: L{layer}H{head}, 0-indexed."""
    return f"L{layer}H{head}"


@dataclass(frozen=True)
class ScreenConfig:
    """What a screen measures and how; `config_hash` covers every field that changes results."""

    n_examples: int = 2000
    seq_len: int = 256
    seed: int = 42
    id_low: int = 100
    id_high: int = 10000
    prepend_bos: bool = False
    probe: str = "synthetic"  # synthetic | natural
    texts: str | None = None  # natural probe: a .txt (blank-line separated) or .jsonl ("text") file
    baseline: str = "reference"  # reference | clean (docs/definitions.md, "The baseline and its ceiling")
    dtype: str = "float32"
    pr_examples: int | None = None  # PR from the first N examples only (the study: 500); None: all of them
    device: str = "cpu"
    batch_size: int = 16
    label_threshold: float = 30.0
    induction_threshold: float = 50.0
    previous_threshold: float = 100.0
    sink_threshold: float = 30.0
    gu_sink_epsilon: float = 0.3

    # Fields that do not change results (up to float rounding): left out of the hash.
    _NOT_HASHED = ("batch_size",)
    # Fields added since results were first written, hashed only away from their default, so that
    # existing results keep their hash.
    _HASHED_WHEN_SET = {"baseline": "reference", "pr_examples": None}

    def validate(self) -> None:
        if self.n_examples < 1:
            raise HeadtraceError(f"n-examples must be >= 1 (got {self.n_examples})")
        if self.batch_size < 1:
            raise HeadtraceError(f"batch-size must be >= 1 (got {self.batch_size})")
        if self.probe not in ("synthetic", "natural"):
            raise HeadtraceError(f"unknown probe '{self.probe}'; use synthetic or natural")
        if self.pr_examples is not None and not 1 <= self.pr_examples <= self.n_examples:
            raise HeadtraceError(f"pr-examples must be between 1 and n-examples ({self.n_examples}) "
                                 f"(got {self.pr_examples})")
        if self.probe == "natural" and not self.texts:
            raise HeadtraceError("the natural probe needs --texts FILE (a .txt or .jsonl corpus)")
        if self.baseline not in BASELINES:
            raise HeadtraceError(f"unknown baseline '{self.baseline}'; use {' or '.join(BASELINES)}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def config_hash(self) -> str:
        fields = {k: v for k, v in self.to_dict().items()
                  if k not in self._NOT_HASHED and self._HASHED_WHEN_SET.get(k, object()) != v}
        if self.texts:
            fields["texts"] = _file_digest(self.texts)
        payload = json.dumps({"schema": SCHEMA_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def synthetic_spec(config: ScreenConfig, bos_token_id: int | None = None) -> SyntheticInductionSpec:
    """The synthetic batch a config describes (BOS prepended when `bos_token_id` is given)."""
    return SyntheticInductionSpec(n_examples=config.n_examples, seq_len=config.seq_len, seed=config.seed,
                                  id_low=config.id_low, id_high=config.id_high, bos_token_id=bos_token_id)


def _file_digest(path: str) -> str:
    """SHA-256 of a file, read in chunks (hashlib.file_digest needs Python 3.11)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise HeadtraceError(f"cannot read texts file '{path}': {exc.strerror}") from None
    return digest.hexdigest()


# The thresholds that decide a class's membership: the label applies to every class.
THRESHOLD_CLASSES: dict[str, tuple[str, ...]] = {
    "induction_threshold": ("induction",),
    "previous_threshold": ("previous",),
    "sink_threshold": ("first",),
    "label_threshold": tuple(CLASS_KEYS.values()),
}


def ceiling_warnings(config: ScreenConfig, ceilings: dict[str, float]) -> list[str]:
    """A warning for each threshold above half of its class's selectivity ceiling (probes.selectivity_ceilings):
    there, heads near the ceiling cross the threshold or not by rounding noise."""
    warnings = []
    for threshold, keys in THRESHOLD_CLASSES.items():
        value = getattr(config, threshold)
        for key in keys:
            if value > ceilings[key] / 2:
                warnings.append(
                    f"the {threshold.replace('_', ' ')} {value:g}x is above half of this probe's {key} ceiling "
                    f"({ceilings[key]:.1f}x, the score of a head with all its attention on the target): heads near "
                    "the ceiling cross it by chance; use --baseline clean or a longer --seq-len")
    return warnings


def planned_ceilings(config: ScreenConfig) -> dict[str, float] | None:
    """The ceilings of a config's synthetic probe, known before any model loads (positions do not
    depend on the BOS id); None for the natural probe, whose positions need the tokenizer."""
    if config.probe != "synthetic":
        return None
    probe = synthetic_induction(synthetic_spec(config, 0 if config.prepend_bos else None))
    return selectivity_ceilings(clean_baseline(probe) if config.baseline == "clean" else probe)


def ceiling_text(value: float) -> str:
    """A ceiling for people: its value, or 'unbounded' where the target is never in the baseline
    (only the selectivity floor bounds the ratio there)."""
    return "unbounded" if value >= 1e6 else f"{value:.1f}x"


def add_labels(table: pd.DataFrame, config: ScreenConfig) -> None:
    """Best class, label and all-head screen memberships from the selectivity columns (in place).

    previous_circuit is the reference's shipped circuit: best class previous-token and previous-token
    selectivity >= the threshold; previous_any drops the best-class condition (docs/definitions.md)."""
    sel = table[[f"sel_{CLASS_KEYS[c]}" for c in CLASSES]].to_numpy()
    filled = np.where(np.isnan(sel), -np.inf, sel)
    best = filled.argmax(axis=1)  # first maximum: ties keep the table order
    best_value = filled[np.arange(len(sel)), best]
    table["best_class"] = np.array(CLASSES, dtype=object)[best]
    table["best_selectivity"] = np.where(np.isfinite(best_value), best_value, np.nan)
    table["label"] = np.where(best_value >= config.label_threshold, table["best_class"], "unclassified")
    table["induction_circuit"] = table["sel_induction"] >= config.induction_threshold
    table["previous_any"] = table["sel_previous"] >= config.previous_threshold
    table["previous_circuit"] = table["previous_any"] & (table["best_class"] == "previous-token")
    table["sink"] = table["sel_first"] >= config.sink_threshold
