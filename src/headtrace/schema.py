"""What a screen measures and how its tables are labelled: the screen config and its hash, the
thresholds, the labels and head ids. Torch-free, so that the analysis (trajectory, reference,
report) reads results without loading torch or transformers."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.probes import BASELINES, SELECTIVITY_FLOOR  # noqa: F401 (re-exported)
from headtrace.probes import CLASS_KEYS, CLASSES, PROBES, ProbeSpec, build_probe, selectivity_ceilings

SCHEMA_VERSION = 1
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")  # what a screen computes in
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # lm-evaluation-harness's names


def head_id(layer: int, head: int) -> str:
    """TransformerLens-style head name: L{layer}H{head}, 0-indexed."""
    return f"L{layer}H{head}"


@dataclass(frozen=True)
class Thresholds:
    """The selectivity thresholds that decide labels and all-head memberships (docs/definitions.md)."""

    label_threshold: float = 30.0
    induction_threshold: float = 50.0
    previous_threshold: float = 100.0
    sink_threshold: float = 30.0
    gu_sink_epsilon: float = 0.3  # a head is a Gu et al. sink when its sink score exceeds this


@dataclass(frozen=True, init=False)
class ScreenConfig:
    """What a screen measures (a probe and thresholds) and how it computes; `config_hash` covers
    every field that changes results.

    Give its fields flat, by the names that panel files, CLI options and stored records use
    (`ScreenConfig(n_examples=500, seq_len=256, device="cuda")`; `probe="natural"` is the probe's
    kind), or its parts whole (`ScreenConfig(probe=ProbeSpec(...), thresholds=Thresholds(...))`),
    but not a part together with a flat field it holds."""

    probe: ProbeSpec = ProbeSpec()
    thresholds: Thresholds = Thresholds()
    dtype: str = "float32"
    pr_examples: int | None = None  # PR from the first N examples only (the study: 500); None: all of them
    device: str = "cpu"
    batch_size: int = 16
    keep_patterns: int = 0  # keep the attention rows of this many probe examples (headtrace.patterns)

    # Fields that do not change results (up to float rounding): left out of the hash.
    _NOT_HASHED = ("batch_size",)
    # Fields added since results were first written, hashed only away from their default, so that
    # existing results keep their hash.
    _HASHED_WHEN_SET = {"baseline": "reference", "pr_examples": None, "keep_patterns": 0}

    def __init__(self, probe: ProbeSpec | str | None = None, thresholds: Thresholds | None = None, **flat) -> None:
        if isinstance(probe, str):  # the flat spelling names the probe's kind
            flat["probe"], probe = probe, None
        given = {"probe": probe, "thresholds": thresholds}
        parts: dict[str, dict] = {"probe": {}, "thresholds": {}, "": {}}
        for name, value in flat.items():
            if name not in FLAT_FIELDS:
                raise HeadtraceError(f"unknown screen setting '{name}'; known: {', '.join(FLAT_FIELDS)}")
            part, field_name = FLAT_FIELDS[name]
            if part and given[part] is not None:
                kind = type(given[part]).__name__
                raise HeadtraceError(
                    f"{name}= is a field of {part}=: give it inside {part}={kind}(...) or "
                    f"drop {part}= and give every field flat, not both"
                )
            parts[part][field_name] = value
        object.__setattr__(self, "probe", probe if probe is not None else ProbeSpec(**parts["probe"]))
        object.__setattr__(
            self, "thresholds", thresholds if thresholds is not None else Thresholds(**parts["thresholds"])
        )
        for f in dataclasses.fields(self):
            if f.name not in given:
                object.__setattr__(self, f.name, parts[""].get(f.name, f.default))

    @classmethod
    def of(cls, **flat) -> "ScreenConfig":
        """A config from flat field names (the same as `ScreenConfig(**flat)`); an unknown name is an error."""
        return cls(**flat)

    def replace(self, **flat) -> "ScreenConfig":
        """This config with some flat fields changed."""
        return ScreenConfig.of(**{**self.to_dict(), **flat})

    def validate(self) -> None:
        self.probe.validate()
        if self.batch_size < 1:
            raise HeadtraceError(f"batch-size must be >= 1 (got {self.batch_size})")
        if self.pr_examples is not None and not 1 <= self.pr_examples <= self.probe.n_examples:
            raise HeadtraceError(
                f"pr-examples must be between 1 and n-examples ({self.probe.n_examples}) (got {self.pr_examples})"
            )
        if not 0 <= self.keep_patterns <= self.probe.n_examples:
            raise HeadtraceError(
                f"keep-patterns must be between 0 and n-examples ({self.probe.n_examples}) (got {self.keep_patterns})"
            )

    def to_dict(self) -> dict:
        """The flat fields (what the hash, the manifest and `config_json` store)."""
        return {
            name: getattr(getattr(self, part) if part else self, field_name)
            for name, (part, field_name) in FLAT_FIELDS.items()
        }

    @property
    def config_hash(self) -> str:
        fields = {
            k: v
            for k, v in self.to_dict().items()
            if k not in self._NOT_HASHED and self._HASHED_WHEN_SET.get(k, object()) != v
        }
        if self.probe.texts:
            fields["texts"] = _file_digest(self.probe.texts)
        payload = json.dumps({"schema": SCHEMA_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _flat_fields() -> dict[str, tuple[str, str, str]]:
    """Flat name -> (part of ScreenConfig, field there, annotation); the probe's `kind` is `probe`."""
    parts = {"probe": ProbeSpec, "thresholds": Thresholds, "": ScreenConfig}
    fields = {}
    for part, cls in parts.items():
        for f in dataclasses.fields(cls):
            if not (part == "" and f.name in parts):  # not the composed parts themselves
                fields["probe" if f.name == "kind" else f.name] = (part, f.name, str(f.type))
    return fields


FLAT_FIELDS: dict[str, tuple[str, str]] = {name: (part, f) for name, (part, f, _) in _flat_fields().items()}
FLAT_TYPES: dict[str, str] = {name: kind for name, (_, _, kind) in _flat_fields().items()}  # panel files check these


def _file_digest(path: str) -> str:
    """SHA-256 of a file (the natural probe's texts: the hash follows their content, not their name)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        raise HeadtraceError(f"cannot read texts file '{path}': {exc.strerror}") from None


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
        value = getattr(config.thresholds, threshold)
        for key in keys:
            if value > ceilings[key] / 2:
                warnings.append(
                    f"the {threshold.replace('_', ' ')} {value:g}x is above half of this probe's {key} ceiling "
                    f"({ceilings[key]:.1f}x, the score of a head with all its attention on the target): heads near "
                    "the ceiling cross it by chance; use --baseline clean or a longer --seq-len"
                )
    return warnings


def planned_ceilings(config: ScreenConfig) -> dict[str, float] | None:
    """The ceilings of a config's probe, known before any model loads where its positions do not
    depend on the tokenizer (the synthetic probe's do not depend on the BOS id); else None."""
    if PROBES.get(config.probe.kind).needs_tokenizer:
        return None
    return selectivity_ceilings(build_probe(config.probe, lambda: SimpleNamespace(bos_token_id=0)))


def ceiling_text(value: float) -> str:
    """A ceiling for people: its value, or 'unbounded' where the target is never in the baseline
    (only the selectivity floor bounds the ratio there)."""
    return "unbounded" if value >= 1e6 else f"{value:.1f}x"


def add_labels(table: pd.DataFrame, thresholds: Thresholds) -> None:
    """Best class, label and all-head screen memberships from the selectivity columns (in place).

    previous_circuit is the reference's shipped circuit: best class previous-token and previous-token
    selectivity >= the threshold; previous_any drops the best-class condition (docs/definitions.md)."""
    sel = table[[f"sel_{CLASS_KEYS[c]}" for c in CLASSES]].to_numpy()
    filled = np.where(np.isnan(sel), -np.inf, sel)
    best = filled.argmax(axis=1)  # first maximum: ties keep the table order
    best_value = filled[np.arange(len(sel)), best]
    table["best_class"] = np.array(CLASSES, dtype=object)[best]
    table["best_selectivity"] = np.where(np.isfinite(best_value), best_value, np.nan)
    table["label"] = np.where(best_value >= thresholds.label_threshold, table["best_class"], "unclassified")
    table["induction_circuit"] = table["sel_induction"] >= thresholds.induction_threshold
    table["previous_any"] = table["sel_previous"] >= thresholds.previous_threshold
    table["previous_circuit"] = table["previous_any"] & (table["best_class"] == "previous-token")
    table["sink"] = table["sel_first"] >= thresholds.sink_threshold


# --------------------------------------------------------------------------------------------
# Ablation: what to ablate and how (run by ablation.py; planned by panel.py without torch).

Head = tuple[int, int]  # (layer, head)

# The screen's all-head sets that an ablation can target, by name -> the heads table's column
# (add_labels). previous-token is the reference's shipped circuit (best class previous-token and
# >= 100x); previous-token-any is every head at >= 100x; sinks are a set of heads, not a circuit.
HEAD_SETS = {
    "induction": "induction_circuit",
    "previous-token": "previous_circuit",
    "previous-token-any": "previous_any",
    "sink": "sink",
}
_PR_TOP = re.compile(r"^pr-top:(\d+)$")  # the K heads of highest time-integrated PR over a panel's revisions
FINAL = "final:"  # final:<set>: a head set taken at the model's last revision, ablated at other revisions (F8)
_HEAD = re.compile(r"^L(\d+)H(\d+)$")
ABLATION_MODES = ("zero", "mean")
DECIDING_METRICS = ("auto", "top1", "loss")  # auto: top1 when the clean top-1 is high enough, else loss


@dataclass(frozen=True)
class CircuitSpec:
    """What `--circuit` names: one of the screen's head sets (at the revision ablated, or with `final`
    at the model's last revision), the top K heads by integrated PR, or heads."""

    head_set: str | None = None
    pr_top: int | None = None
    heads: tuple[Head, ...] = ()
    final: bool = False  # final:<set>: the set's heads at the model's last revision in the results folder


def parse_circuit(text: str) -> CircuitSpec:
    """Read a circuit's name: a HEAD_SETS name, pr-top:K, or a head list like 'L2H11,L4H12' (its
    syntax only: `check_heads_exist` checks the heads once the model's size is known)."""
    name = text.strip()
    if name in HEAD_SETS:
        return CircuitSpec(head_set=name)
    if name.startswith(FINAL):
        head_set = name.removeprefix(FINAL).strip()
        if head_set not in HEAD_SETS:
            raise HeadtraceError(
                f"{name}: final:<set> takes one of the screen's head sets: {', '.join(FINAL + s for s in HEAD_SETS)}"
            )
        return CircuitSpec(head_set=head_set, final=True)
    if match := _PR_TOP.match(name):
        if int(match[1]) < 1:
            raise HeadtraceError(f"{name}: K must be >= 1, e.g. pr-top:5")
        return CircuitSpec(pr_top=int(match[1]))
    names = [t.strip() for t in name.split(",") if t.strip()]
    if not names:
        raise HeadtraceError(f"the circuit is empty: give {', '.join(HEAD_SETS)}, pr-top:K or heads like L2H11,L4H12")
    heads = set()
    for head in names:
        match = _HEAD.match(head)
        if not match:
            raise HeadtraceError(
                f"bad head '{head}' in circuit '{text}': write heads as L<layer>H<head> "
                f"(e.g. L2H11,L4H12) or use one of {', '.join(HEAD_SETS)}, pr-top:K"
            )
        heads.add((int(match[1]), int(match[2])))
    return CircuitSpec(heads=tuple(sorted(heads)))


def heads_in_set(heads: pd.DataFrame, head_set: str) -> tuple[Head, ...]:
    """The heads of one of the screen's head sets (HEAD_SETS) in a heads table, sorted."""
    chosen = heads.loc[heads[HEAD_SETS[head_set]].astype(bool)]
    return tuple(sorted((int(l), int(h)) for l, h in zip(chosen["layer"], chosen["head"])))


def check_heads_exist(heads: tuple[Head, ...], n_layers: int, n_heads: int, model: str = "the model") -> None:
    """Every head must exist in a model of n_layers x n_heads."""
    for layer, head in heads:
        if layer >= n_layers or head >= n_heads:
            raise HeadtraceError(
                f"head {head_id(layer, head)} does not exist in {model}: valid heads are "
                f"L0H0..L{n_layers - 1}H{n_heads - 1} ({n_layers} layers x {n_heads} heads)"
            )


@dataclass(frozen=True)
class AblationConfig:
    """What an ablation does; `config_hash` (with the screen's) covers every field that changes results."""

    circuit: str = "induction"  # a HEAD_SETS name | final:<set> | pr-top:K | a head list "L2H11,L4H12"
    draws: int = 20  # matched-random head sets, each drawn with its own seed
    mode: str = "zero"  # zero | mean
    seed: int = 0  # base seed of the random draws and the bootstrap
    n_bootstrap: int = 2000
    singles: bool = True  # also ablate each circuit head alone
    stack: int = 8  # conditions per forward (memory, not results)
    cache_mb: int = 2048  # keep the clean pass's residual stream when it fits (speed, not results)
    metric: str = "auto"  # the deciding metric: auto | top1 | loss

    _NOT_HASHED = ("stack", "cache_mb")
    _STORED_NAMES = {"draws": "seeds"}  # the name a field had when stored results were first hashed

    def validate(self) -> None:
        if self.mode not in ABLATION_MODES:
            raise HeadtraceError(f"unknown ablation mode '{self.mode}'; use zero or mean")
        if self.draws < 1:
            raise HeadtraceError(f"draws must be >= 1 (got {self.draws})")
        if self.n_bootstrap < 1:
            raise HeadtraceError(f"n-bootstrap must be >= 1 (got {self.n_bootstrap})")
        if self.stack < 1:
            raise HeadtraceError(f"stack must be >= 1 (got {self.stack})")
        if self.metric not in DECIDING_METRICS:
            raise HeadtraceError(f"unknown metric '{self.metric}'; use top1 or loss (or auto)")
        parse_circuit(self.circuit)

    def to_dict(self) -> dict:
        """The hashed fields; metric only when set, so ablations stored before it existed keep their hash."""
        return {
            self._STORED_NAMES.get(k, k): v
            for k, v in dataclasses.asdict(self).items()
            if k not in self._NOT_HASHED and not (k == "metric" and v == "auto")
        }

    def config_hash(self, screen: ScreenConfig, final_heads: tuple[Head, ...] | None = None) -> str:
        """`final_heads`: a final:<set> circuit's heads, hashed too, so that a new last revision whose
        set differs runs the ablation again."""
        document = {"ablation": self.to_dict(), "screen": screen.config_hash}
        if final_heads is not None:
            document["final_heads"] = [list(head) for head in sorted(final_heads)]
        payload = json.dumps(document, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def random_draws_summary(values: np.ndarray) -> tuple[float, float, float]:
    """A metric over the matched-random draws as the CLI and the report show it: mean, and the
    2.5-97.5 percentile range (NaN when there are no draws)."""
    values = np.asarray(values, dtype=float)
    if not len(values):
        return np.nan, np.nan, np.nan
    low, high = np.percentile(values, [2.5, 97.5])
    return float(values.mean()), float(low), float(high)


def tag(frame: pd.DataFrame, family: str, seed: int) -> pd.DataFrame:
    """A shard table with its seed family member's `family` and `seed` columns right after `model`."""
    at = frame.columns.get_loc("model") + 1
    tagged = frame.copy()
    tagged.insert(at, "family", family)
    tagged.insert(at + 1, "seed", np.int64(seed))
    return tagged
