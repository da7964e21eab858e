"""Revision naming schemes: which checkpoints exist, how many tokens each had seen, which to screen.

Only this module knows naming schemes: Pythia's `stepN` branches (2,097,152 tokens per step),
the `stepN-tokensXB` names of OLMo and OLMoE, and `stepN` with a tokens-per-step the user gives.
It also selects revisions for a panel: an explicit list (checked against the names that exist,
with the closest ones suggested) or `log:N`, N revisions log-spaced by tokens.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from headtrace.errors import HeadtraceError

PYTHIA_TOKENS_PER_STEP = 2_097_152
PYTHIA_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512) + tuple(range(1000, 143001, 1000))

_STEP_TOKENS = re.compile(r"^step(\d+)-tokens(\d+(?:\.\d+)?)([KMBT]?)$")
_STEP = re.compile(r"^step(\d+)$")
_LOG = re.compile(r"^log:(\d+)$")
_UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


@dataclass(frozen=True, order=True)
class Revision:
    """A checkpoint name with its training step and tokens seen (None where unknown)."""

    tokens: float | None
    step: int | None
    name: str


def parse_revision(name: str, tokens_per_step: float | None = None) -> Revision:
    """Read step and tokens from a revision name.

    `stepN-tokensXB` carries its own tokens; `stepN` needs `tokens_per_step` (Pythia's is
    PYTHIA_TOKENS_PER_STEP); anything else has unknown step and tokens."""
    match = _STEP_TOKENS.match(name)
    if match:
        step, amount, unit = match.groups()
        return Revision(tokens=float(amount) * _UNITS[unit], step=int(step), name=name)
    match = _STEP.match(name)
    if match:
        step = int(match.group(1))
        return Revision(tokens=None if tokens_per_step is None else float(step * tokens_per_step), step=step, name=name)
    return Revision(tokens=None, step=None, name=name)


def pythia_revisions() -> list[Revision]:
    """All 154 Pythia branches: step0, step1, 2, 4, ..., 512, then step1000 .. step143000."""
    return [parse_revision(f"step{s}", PYTHIA_TOKENS_PER_STEP) for s in PYTHIA_STEPS]


def tokens_per_step_for(model: str) -> float | None:
    """The tokens-per-step of known `stepN` schemes (Pythia); None when the name carries tokens."""
    return PYTHIA_TOKENS_PER_STEP if "pythia" in model.lower() else None


def catalog(names: Iterable[str], tokens_per_step: float | None = None) -> list[Revision]:
    """Revisions from existing names (branches, folders), ordered by tokens then step; unknown last."""
    revisions = {parse_revision(name, tokens_per_step) for name in names}
    return sorted(revisions, key=lambda r: (r.tokens is None, r.tokens or 0.0, r.step or 0, r.name))


def closest(name: str, names: Sequence[str], n: int = 3) -> list[str]:
    """The existing names nearest to a mistyped one: `stepN-...` extensions first, then difflib's."""
    extensions = sorted((m for m in names if m.startswith(f"{name}-")), key=len)
    similar = difflib.get_close_matches(name, names, n=n, cutoff=0.5)
    return list(dict.fromkeys(extensions + similar))[:n]


def select(available: Sequence[Revision], selection: str | Sequence[str], where: str) -> list[Revision]:
    """The revisions a panel asks for, checked before any work starts.

    `selection` is a list of names (kept in the given order), `"all"` (every revision with known
    tokens), or `"log:N"` (see `log_spaced`). `where` names the model in error messages."""
    if isinstance(selection, str):
        with_tokens = [r for r in available if r.tokens is not None]
        if selection == "all":
            return _require_tokens(with_tokens, available, where, selection)
        match = _LOG.match(selection)
        if not match:
            raise HeadtraceError(
                f"{where}: unknown revision selection '{selection}'; use a list of names, 'all' or 'log:N'"
            )
        return log_spaced(_require_tokens(with_tokens, available, where, selection), int(match.group(1)))
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


def _require_tokens(
    with_tokens: list[Revision], available: Sequence[Revision], where: str, selection: str
) -> list[Revision]:
    if not with_tokens:
        example = available[0].name if available else "stepN"
        raise HeadtraceError(
            f"{where}: '{selection}' needs token counts but no revision name carries them (e.g. "
            f"'{example}'); set tokens_per_step for stepN names, or list the revisions explicitly"
        )
    return with_tokens


def log_spaced(revisions: Sequence[Revision], n: int) -> list[Revision]:
    """N revisions spread evenly in log(tokens), always including the first and the last.

    Revisions of unknown tokens are left out. A revision with zero tokens (the initialisation)
    counts as the first and the others are spread from the smallest positive count. Each target in
    log space takes the nearest revision not taken yet, so exactly min(N, available) distinct
    revisions come back, ordered by tokens."""
    if n < 1:
        raise HeadtraceError(f"log:{n} selects nothing; use log:N with N >= 1")
    known = (r for r in revisions if r.tokens is not None)
    ordered = sorted(known, key=lambda r: (r.tokens, r.step or 0, r.name))
    if n >= len(ordered):
        return ordered
    first, last = ordered[0], ordered[-1]
    if n == 1:
        return [last]
    chosen = {first, last}
    positive = [r for r in ordered if r.tokens > 0]
    low = math.log(positive[0].tokens if first.tokens == 0 else first.tokens)
    high = math.log(last.tokens)
    interior = n - 2
    start = 1 if first.tokens == 0 else 0  # the initialisation takes the first slot outside log space
    span = interior + 1 - start
    for k in range(interior):
        target = low + (high - low) * (k + 1 - start) / span
        candidates = [r for r in positive if r not in chosen]
        chosen.add(min(candidates, key=lambda r: (abs(math.log(r.tokens) - target), r.tokens)))
    return sorted(chosen, key=lambda r: (r.tokens, r.step or 0, r.name))
