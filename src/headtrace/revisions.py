"""Revision naming schemes: which checkpoints exist and how many tokens each had seen.

Only this module knows naming schemes: Pythia's `stepN` branches (2,097,152 tokens per step),
the `stepN-tokensXB` names of OLMo and OLMoE, and `stepN` with a tokens-per-step the user gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headtrace.errors import HeadtraceError

PYTHIA_TOKENS_PER_STEP = 2_097_152
PYTHIA_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512) + tuple(range(1000, 143001, 1000))

_STEP_TOKENS = re.compile(r"^step(\d+)-tokens(\d+(?:\.\d+)?)([KMBT]?)$")
_STEP = re.compile(r"^step(\d+)$")
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

