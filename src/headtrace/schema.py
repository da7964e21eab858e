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
from headtrace.probes import CLASS_KEYS, CLASSES

SCHEMA_VERSION = 1
SELECTIVITY_FLOOR = 1e-8  # baseline floor in the ratio, as in the reference


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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def config_hash(self) -> str:
        fields = {k: v for k, v in self.to_dict().items() if k not in self._NOT_HASHED}
        if self.pr_examples is None:  # the default (every example): results hashed before the field existed match
            del fields["pr_examples"]
        if self.texts:
            fields["texts"] = _file_digest(self.texts)
        payload = json.dumps({"schema": SCHEMA_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


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
