"""Revision naming schemes: which checkpoints exist, how many tokens each had seen, which to screen.

Only this module knows naming schemes. A revision name gives a training step (its position in the
series) and, where it can be known, the tokens seen: written in the name (`stepN-tokensXB`), or
step x tokens-per-step. Names are read by, in order:

- the user's map (`NameMap`: a panel's `tokens_per_step`, `revision_pattern`, `revision_tokens`);
- the built-in scheme of the model's repository (`SCHEMES`, each taken from its model card:
  docs/revisions.md lists them with their cards);
- the common forms any series may use (`stepN`, `step-N`, `global_stepN`, `checkpoint-N`, ...).

A name with no step (`main`) is an alias of the revision it resolves to (by the card, or by the
hub: the same commit); otherwise it is left out of `all` and `log:N`, with a note. A revision
whose tokens cannot be known is still screened and ordered by its step. Some repositories hold
several runs (OLMo 2's stage-2 ingredients, DataDecide's seeds): the series is the main run, the
others are screened when named.

Selection for a panel: an explicit list (checked against the names that exist, with the closest
ones suggested), `all`, or `log:N`: N revisions log-spaced by tokens, by step where tokens are
not known for all of them.
"""

from __future__ import annotations

import csv
import difflib
import functools
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from headtrace.errors import HeadtraceError

PYTHIA_TOKENS_PER_STEP = 2_097_152
PYTHIA_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512) + tuple(range(1000, 143001, 1000))

_LOG = re.compile(r"^log:(\d+)$")
_UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_TOKENS = r"(?P<tokens>\d+(?:\.\d+)?)(?P<unit>[KMBT]?)"


@dataclass(frozen=True, order=True)
class Revision:
    """A checkpoint name with its training step and tokens seen (None where unknown).

    `run`: the training run within its repository when the repository holds several ('' for the
    series' own run). `alias_of`: the revision a step-less name (`main`) is the same checkpoint as."""

    tokens: float | None
    step: int | None
    name: str
    run: str = ""
    alias_of: str = ""


# --------------------------------------------------------------------------------------------
# Schemes.


@dataclass(frozen=True)
class Scheme:
    """The revision names of one public checkpoint series, as its model card gives them.

    `forms` are regular expressions matched against the whole name: group `step`, and optionally
    `tokens` + `unit` (tokens written in the name) and `run` (one of several runs in the
    repository). `stage_forms` are names whose step counts from a later training stage's start:
    they order their run, but give no tokens."""

    name: str
    repos: str  # the hub ids it applies to (a regular expression, case-insensitive)
    forms: tuple[str, ...] = ()
    stage_forms: tuple[str, ...] = ()
    tokens_per_step: float | None = None
    aliases: tuple[tuple[str, str], ...] = ()  # a name without a step -> the revision the card says it is
    main_run: str = ""  # the `run` value of the series' own run (DataDecide: "default")
    card: str = ""

    def applies_to(self, model: str) -> bool:
        return re.search(self.repos, model, re.IGNORECASE) is not None


_OLMO_STEP_TOKENS = rf"step(?P<step>\d+)-tokens{_TOKENS}"

# The built-in schemes, most specific first; docs/revisions.md is the table with each card.
SCHEMES: tuple[Scheme, ...] = (
    Scheme(
        "PolyPythias",
        r"^EleutherAI/pythia-[\w.]+-(data-|weight-)?seed\d+$",
        (r"step(?P<step>\d+)",),
        tokens_per_step=PYTHIA_TOKENS_PER_STEP,
        card="https://huggingface.co/EleutherAI/pythia-160m-seed1",
    ),
    Scheme(
        "Pythia",
        r"^EleutherAI/pythia-",
        (r"step(?P<step>\d+)",),
        tokens_per_step=PYTHIA_TOKENS_PER_STEP,
        aliases=(("main", "step143000"),),
        card="https://huggingface.co/EleutherAI/pythia-1b",
    ),
    Scheme(
        "OLMo 2",
        r"^allenai/OLMo-2-\d{4}-\d+B$",
        (rf"(?:stage1-)?{_OLMO_STEP_TOKENS}",),
        stage_forms=(r"(?P<run>stage2-ingredient\d+)-step(?P<step>\d+)-tokens\d+B",),
        card="https://huggingface.co/allenai/OLMo-2-1124-7B",
    ),
    Scheme(
        "OLMoE",
        r"^allenai/OLMoE-1B-7B-\d{4}$",
        (_OLMO_STEP_TOKENS,),
        card="https://huggingface.co/allenai/OLMoE-1B-7B-0924",
    ),
    Scheme(
        "OLMo 1",
        r"^allenai/OLMo-(1B|7B|1\.7-7B)\b",
        (_OLMO_STEP_TOKENS,),
        card="https://huggingface.co/allenai/OLMo-7B",
    ),
    Scheme(
        "SmolLM2 135M",
        r"^HuggingFaceTB/SmolLM2-135M-intermediate-checkpoints$",
        (r"step-(?P<step>\d+)",),
        tokens_per_step=1_048_576,
        card="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-intermediate-checkpoints",
    ),
    Scheme(
        "SmolLM2 360M",
        r"^HuggingFaceTB/SmolLM2-360M-intermediate-checkpoints$",
        (r"step-(?P<step>\d+)",),
        card="https://huggingface.co/HuggingFaceTB/SmolLM2-360M-intermediate-checkpoints",
    ),
    Scheme(
        "SmolLM2 1.7B",
        r"^HuggingFaceTB/SmolLM2-1\.7B-intermediate-checkpoints$",
        (r"step-(?P<step>\d+)",),
        tokens_per_step=2_097_152,
        card="https://huggingface.co/HuggingFaceTB/SmolLM2-1.7B-intermediate-checkpoints",
    ),
    Scheme(
        "SmolLM3",
        r"^HuggingFaceTB/SmolLM3-3B-checkpoints$",
        (r"stage[1-3]-step-(?P<step>\d+)",),
        tokens_per_step=2_359_296,
        card="https://huggingface.co/HuggingFaceTB/SmolLM3-3B-checkpoints",
    ),
    Scheme(
        "LLM360 Amber",
        r"^LLM360/Amber$",
        (r"ckpt_(?P<step>\d+)",),
        aliases=(("main", "ckpt_359"),),
        card="https://huggingface.co/LLM360/Amber",
    ),
    Scheme(
        "Stanford CRFM GPT-2",
        r"^stanford-crfm/[a-z]+-gpt2-(small|medium)-x\d+$",
        (r"checkpoint-(?P<step>\d+)",),
        card="https://github.com/stanford-crfm/mistral#resources",
    ),
    Scheme(
        "BLOOM intermediate",
        r"^bigscience/bloom(-\w+)?-intermediate$",
        (r"global_step(?P<step>\d+)",),
        card="https://huggingface.co/bigscience/bloom-intermediate",
    ),
    Scheme(
        "DataDecide",
        r"^allenai/DataDecide-",
        (r"step(?P<step>\d+)-seed-(?P<run>[\w-]+)",),
        main_run="default",
        card="https://huggingface.co/allenai/DataDecide-dolma1_7-1B",
    ),
)

# Forms any series may use, after its own scheme's: the step, and tokens where the name carries them.
COMMON_FORMS: tuple[str, ...] = (
    _OLMO_STEP_TOKENS,
    r"(?:global_)?step[-_]?(?P<step>\d+)",
    r"checkpoint[-_](?P<step>\d+)",
    r"ckpt[-_]?(?P<step>\d+)",
    r"iter(?:ation)?[-_]?(?P<step>\d+)",
)


def scheme_for(model: str) -> Scheme | None:
    """The built-in scheme of a hub id (None for series headtrace does not know)."""
    return next((s for s in SCHEMES if s.applies_to(model)), None)


# --------------------------------------------------------------------------------------------
# A user's map of names to tokens.


@dataclass(frozen=True)
class NameMap:
    """A user's revision names -> tokens: `tokens_per_step` for any step whose tokens the name does
    not carry; `pattern`, a regular expression for names no scheme knows (its `step` group, or its
    only group, is the step); `table`, names with their steps and tokens (`read_table`)."""

    tokens_per_step: float | None = None
    pattern: str | None = None
    table: tuple[tuple[str, int | None, float | None], ...] = ()

    def __post_init__(self) -> None:
        if self.tokens_per_step is not None and not self.tokens_per_step > 0:
            raise HeadtraceError(f"tokens_per_step must be positive (got {self.tokens_per_step})")
        if self.pattern is not None:
            _step_pattern(self.pattern)

    @staticmethod
    def read_table(path: str | Path) -> tuple[tuple[str, int | None, float | None], ...]:
        """A table file of revisions: .json, a list of {"revision", "step", "tokens"} objects (the
        layout of a checkpoint folder's revisions.json), or .csv with those columns (step optional)."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise HeadtraceError(f"cannot read revision table '{path}': {exc.strerror or exc}") from None
        try:
            rows = json.loads(text) if path.suffix == ".json" else list(csv.DictReader(text.splitlines()))
            table = tuple(
                (str(row["revision"]), _optional(row.get("step"), int), _optional(row.get("tokens"), float))
                for row in rows
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise HeadtraceError(
                f'\'{path}\' is not a table of revisions: a .json list of {{"revision", "step", '
                f'"tokens"}} objects or a .csv with columns revision, tokens and step ({exc})'
            ) from None
        if not table:
            raise HeadtraceError(f"revision table '{path}' lists no revisions")
        return table


def _optional(value, kind: Callable):
    return None if value is None or value == "" else kind(value)


def _step_pattern(pattern: str) -> re.Pattern:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise HeadtraceError(f"revision_pattern '{pattern}' is not a regular expression ({exc})") from None
    if "step" not in compiled.groupindex and compiled.groups != 1:
        raise HeadtraceError(
            f"revision_pattern '{pattern}' must capture the step: one group, or a group named step, e.g. 'ckpt-(\\d+)'"
        )
    return compiled


# --------------------------------------------------------------------------------------------
# Reading names.


@dataclass(frozen=True)
class Naming:
    """How one model's revision names read: the user's map, then its scheme, then the common forms
    and the other schemes' forms (their steps only: their tokens per step belong to their series)."""

    scheme: Scheme | None = None
    user: NameMap = NameMap()

    def parse(self, name: str) -> Revision:
        for entry, step, tokens in self.user.table:
            if entry == name:
                return Revision(tokens=tokens, step=step, name=name)
        if self.user.pattern is not None:
            match = _step_pattern(self.user.pattern).fullmatch(name)
            value = (match["step"] if "step" in match.re.groupindex else match[1]) if match else None
            if value is not None and value.isdigit():
                per = self.user.tokens_per_step
                return Revision(tokens=None if per is None else float(int(value) * per), step=int(value), name=name)
        own = self.scheme or Scheme("", "")
        found = (
            _match(own.forms, name, self._tokens_per(own), own.main_run)
            or _match(own.stage_forms, name, None, own.main_run, stage=True)
            or _match(COMMON_FORMS, name, self.user.tokens_per_step)
        )
        for other in SCHEMES:
            if found is None and other is not self.scheme:
                found = _match(other.forms, name, self.user.tokens_per_step, other.main_run) or _match(
                    other.stage_forms, name, None, other.main_run, stage=True
                )
        return found or Revision(tokens=None, step=None, name=name)

    def _tokens_per(self, scheme: Scheme) -> float | None:
        return self.user.tokens_per_step or scheme.tokens_per_step

    @property
    def aliases(self) -> dict[str, str]:
        return dict(self.scheme.aliases) if self.scheme else {}


def _match(
    forms: Sequence[str], name: str, tokens_per_step: float | None, main_run: str = "", stage: bool = False
) -> Revision | None:
    for form in forms:
        match = re.fullmatch(form, name)
        if not match:
            continue
        step = int(match["step"])
        groups = match.re.groupindex
        if stage:
            tokens = None
        elif "tokens" in groups:
            tokens = float(match["tokens"]) * _UNITS[match["unit"]]
        else:
            tokens = None if tokens_per_step is None else float(step * tokens_per_step)
        run = match["run"] if "run" in groups else ""
        return Revision(tokens=tokens, step=step, name=name, run="" if run == main_run else run)
    return None


def naming_for(model: str, user: NameMap = NameMap()) -> Naming:
    """The reading of MODEL's revision names: the user's map over its built-in scheme, if any."""
    return Naming(scheme_for(model), user)


@functools.lru_cache(maxsize=65536)
def parse_revision(name: str, tokens_per_step: float | None = None) -> Revision:
    """Read step and tokens from a revision name by the common forms (and the steps of every built-in
    scheme's forms); `tokens_per_step` gives tokens where the name carries none. Unknown forms have
    no step and no tokens."""
    return Naming(user=NameMap(tokens_per_step)).parse(name)


def pythia_revisions() -> list[Revision]:
    """All 154 Pythia branches: step0, step1, 2, 4, ..., 512, then step1000 .. step143000."""
    return [parse_revision(f"step{s}", PYTHIA_TOKENS_PER_STEP) for s in PYTHIA_STEPS]


def tokens_per_step_for(model: str) -> float | None:
    """The tokens-per-step of MODEL's built-in scheme; None when unknown or carried by the names."""
    scheme = scheme_for(model)
    return scheme.tokens_per_step if scheme else None


def training_key(revision: Revision) -> tuple:
    """The order of a catalog: the series' own run first, by tokens, then step (revisions without
    tokens after those with), then name."""
    return (
        revision.run != "",
        revision.run,
        revision.tokens is None,
        revision.tokens or 0.0,
        revision.step is None,
        revision.step or 0,
        revision.name,
    )


def catalog(
    names: Iterable[str], naming: Naming | float | None = None, commits: Mapping[str, str] | None = None
) -> list[Revision]:
    """Revisions from existing names (branches, tags, folders), in training order (`training_key`).

    A name with no step becomes an alias of the revision it is: the one its scheme's card names, or
    (`commits`: name -> commit, from the hub) a revision with a step at the same commit."""
    if not isinstance(naming, Naming):
        naming = Naming(user=NameMap(naming))
    revisions = {name: naming.parse(name) for name in set(names)}
    by_commit: dict[str, Revision] = {}
    for revision in sorted(revisions.values(), key=training_key):
        commit = (commits or {}).get(revision.name)
        if commit is not None and not revision.run and (revision.step is not None or revision.tokens is not None):
            by_commit[commit] = revision  # the main run's last at that commit
    for name, revision in list(revisions.items()):
        if revision.step is not None or revision.tokens is not None:
            continue
        target = by_commit.get((commits or {}).get(name, ""))
        if target is None and name in naming.aliases:
            target = revisions.get(naming.aliases[name]) or naming.parse(naming.aliases[name])
        if target is not None and (target.step is not None or target.tokens is not None):
            revisions[name] = replace(target, name=name, alias_of=target.name)
    return sorted(revisions.values(), key=training_key)


# --------------------------------------------------------------------------------------------
# Selection.


def closest(name: str, names: Sequence[str], n: int = 3) -> list[str]:
    """The existing names nearest to a mistyped one: `stepN-...` extensions first, then difflib's."""
    extensions = sorted((m for m in names if m.startswith(f"{name}-")), key=len)
    similar = difflib.get_close_matches(name, names, n=n, cutoff=0.5)
    return list(dict.fromkeys(extensions + similar))[:n]


def series(available: Sequence[Revision]) -> list[Revision]:
    """The revisions `all` and `log:N` choose from: the repository's own run, each checkpoint once (an
    alias only where the revision it names is not listed itself), every one with a step or tokens."""
    names = {r.name for r in available}
    return [
        r
        for r in available
        if not r.run and (r.step is not None or r.tokens is not None) and not (r.alias_of and r.alias_of in names)
    ]


def select(available: Sequence[Revision], selection: str | Sequence[str], where: str) -> list[Revision]:
    """The revisions a panel asks for, checked before any work starts.

    `selection` is a list of names (kept in the given order), `"all"` (`series`), or `"log:N"` (see
    `log_spaced`: by tokens when every revision of the series has them, else by step). `where` names
    the model in error messages; `selection_notes` says what was left out and why."""
    if isinstance(selection, str):
        match = _LOG.match(selection)
        if selection != "all" and not match:
            raise HeadtraceError(
                f"{where}: unknown revision selection '{selection}'; use a list of names, 'all' or 'log:N'"
            )
        candidates = series(available)
        if not candidates:
            example = ", ".join(r.name for r in available[:3]) or "none"
            raise HeadtraceError(
                f"{where}: '{selection}' found no revision with a step in its name (revisions: {example}); list "
                "the revisions by name, or map names to steps with revision_pattern or revision_tokens"
            )
        if selection == "all":
            return candidates
        return log_spaced(candidates, int(match.group(1)), _spacing(candidates))
    by_name = {r.name: r for r in available}
    names = [r.name for r in available]
    chosen = []
    for name in selection:
        if name not in by_name:
            hint = closest(name, names)
            raise HeadtraceError(
                f"{where}: revision '{name}' does not exist"
                + (f"; closest: {', '.join(hint)}" if hint else f" ({len(names)} revisions exist)")
            )
        chosen.append(by_name[name])
    duplicates = sorted({n for n in selection if list(selection).count(n) > 1})
    if duplicates:
        plural = "s" if len(duplicates) > 1 else ""
        raise HeadtraceError(f"{where}: revision{plural} {', '.join(duplicates)} listed twice")
    return chosen


def _spacing(candidates: Sequence[Revision]) -> str:
    """`log:N` spaces by tokens where every revision has them, else by step where every one has it."""
    if all(r.tokens is not None for r in candidates):
        return "tokens"
    return "step" if all(r.step is not None for r in candidates) else "tokens"


def selection_notes(
    available: Sequence[Revision], chosen: Sequence[Revision], selection: str | Sequence[str], where: str
) -> list[str]:
    """What a selection left out or cannot measure, one line each (nothing is left out silently)."""
    notes = []
    if isinstance(selection, str):
        candidates = series(available)
        stepless = [r.name for r in available if r.step is None and r.tokens is None]
        if stepless:
            notes.append(
                f"{where}: {_count(stepless, 'revision')} without a step in the name left out of "
                f"'{selection}' ({_names(stepless)}): name them in revisions to screen them, or map names "
                "to steps with revision_pattern or revision_tokens"
            )
        runs = sorted({r.run for r in available if r.run})
        if runs:
            others = [r for r in available if r.run]
            notes.append(
                f"{where}: {_count(others, 'revision')} of other runs in this repository ({_names(runs)}) "
                f"left out of '{selection}': name a run's revisions to screen it"
            )
        if selection != "all" and _spacing(candidates) == "step":
            notes.append(
                f"{where}: '{selection}' is spaced by step: tokens are unknown for "
                f"{sum(r.tokens is None for r in candidates)} of {len(candidates)} revisions"
            )
        elif selection != "all" and any(r.tokens is None for r in candidates):
            unknown = [r.name for r in candidates if r.tokens is None]
            notes.append(
                f"{where}: {_count(unknown, 'revision')} without tokens left out of '{selection}' "
                f"({_names(unknown)}): it is spaced by tokens"
            )
    unknown = [r.name for r in chosen if r.tokens is None]
    if unknown:
        notes.append(
            f"{where}: tokens unknown for {_count(unknown, 'revision')} ({_names(unknown)}): screened "
            "and ordered by step; findings that need tokens say 'not measurable' (map names to tokens "
            "with tokens_per_step, revision_pattern or revision_tokens)"
        )
    return notes


def _count(items: Sequence, noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"


def _names(names: Sequence[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def log_selection(revisions: Sequence[Revision], n: int) -> list[Revision]:
    """`log:N` over these revisions: by tokens where every one has them, else by step (`log_spaced`)."""
    return log_spaced(revisions, n, _spacing(revisions))


def log_count(selection: str) -> int | None:
    """N of a `log:N` selection; None for any other text."""
    match = _LOG.match(selection)
    return int(match.group(1)) if match else None


def log_spaced(revisions: Sequence[Revision], n: int, by: str = "tokens") -> list[Revision]:
    """N revisions spread evenly in log(tokens) (or log(step), `by="step"`), always including the first
    and the last.

    Revisions without that value are left out. A revision at zero (the initialisation) counts as the
    first and the others are spread from the smallest positive value. Each target in log space
    takes the nearest revision not taken yet, so exactly min(N, available) distinct revisions come
    back, in order."""
    if n < 1:
        raise HeadtraceError(f"log:{n} selects nothing; use log:N with N >= 1")

    def value(r: Revision) -> float | None:
        return r.tokens if by == "tokens" else r.step

    ordered = sorted((r for r in revisions if value(r) is not None), key=lambda r: (value(r), r.step or 0, r.name))
    if n >= len(ordered):
        return ordered
    first, last = ordered[0], ordered[-1]
    if n == 1:
        return [last]
    chosen = {first, last}
    positive = [r for r in ordered if value(r) > 0]
    low = math.log(value(positive[0]) if value(first) == 0 else value(first))
    high = math.log(value(last))
    interior = n - 2
    start = 1 if value(first) == 0 else 0  # the initialisation takes the first slot outside log space
    span = interior + 1 - start
    for k in range(interior):
        target = low + (high - low) * (k + 1 - start) / span
        candidates = [r for r in positive if r not in chosen]
        chosen.add(min(candidates, key=lambda r: (abs(math.log(value(r)) - target), value(r))))
    return sorted(chosen, key=lambda r: (value(r), r.step or 0, r.name))
