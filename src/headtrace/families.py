"""Seed families: one panel entry trained with several seeds (docs/definitions.md, "Seed families").

A `[[models]]` entry with `seeds = [...]` and `{seed}` in its id (and, for local sources, its path)
expands into one member per seed (`expand`); `seed0` names a hub id for seed 0 (PolyPythias'
originals are `EleutherAI/pythia-{size}`), and organisms with `train = true` carry the organism to
train when their folder does not hold it yet (`organism_for`; panel.train_pending trains them). A
family's revision list or `log:N` is resolved over its members together, so every member targets
the same revisions; a revision a member lacks is a `Gap`: reported, left out of that revision's
statistics, never filled. `"all"` takes each member's own revisions (organisms save where their
own loss falls, so seeds differ).

Every shard of a member carries `family` and `seed` columns after `model` (schema.tag); a single
model's shards carry neither (its tables are exactly those of a single run). Findings are computed
per member as for any model, then summarised per family across its seeds (family_findings.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from headtrace.errors import HeadtraceError
from headtrace.organism.config import PRESETS, Organism, TrainConfig, preset
from headtrace.organism.corpus import CorpusConfig
from headtrace.organism.recipes import Recipe
from headtrace.revisions import Revision, select
from headtrace.store import ResultsDir

SEED = "{seed}"
VARY = ("both", "data", "weights")  # what a member's seed sets: data order and init, or one of them
Fail = Callable[[str | None, str], HeadtraceError]  # (key, message) -> an error naming the panel file and line


# --------------------------------------------------------------------------------------------
# Panel entries: expansion into members.


def default_family(template: str) -> str:
    """A family's name from its id template: the seed placeholder and a `-seed`/`-s` before it dropped
    ('EleutherAI/pythia-160m-seed{seed}' -> 'EleutherAI/pythia-160m')."""
    name = re.sub(r"[-_.]?(?:seed|s)?\{seed\}", "", template).strip("-_./")
    return name or template


def expand(values: dict, fail: Fail) -> list[dict]:
    """A validated `[[models]]` entry as one ModelSpec keyword set per member (itself when it has no
    `seeds`), each with `family`, `seed` and `organism` (what to train when its folder lacks it)."""
    entry = dict(values)
    seeds, seed0, family = entry.pop("seeds", None), entry.pop("seed0", None), entry.pop("family", None)
    train, settings = entry.pop("train", False), entry.pop("organism", None)
    source, path = entry.get("source", "hub"), entry.get("path")
    if train and source != "organism":
        raise fail("train", 'train = true trains model organisms: set source = "organism" and a path')
    if settings is not None and not train:
        raise fail("organism", "organism settings say what to train: add train = true")
    if seeds is None:
        for key, value in (("seed0", seed0), ("family", family)):
            if value is not None:
                raise fail(key, f"{key} belongs to a seed family: add seeds = [...] and {SEED} in id")
        for key, value in (("id", entry["id"]), ("path", path)):
            if value and SEED in value:
                raise fail(key, f"{key} holds {SEED} but the entry has no seeds: add seeds = [...]")
        organism = organism_for(settings or {}, None, fail) if train else None
        return [{**entry, "organism": organism}]
    if not seeds:
        raise fail("seeds", "seeds is empty: list the training seeds, e.g. seeds = [1, 2, 3]")
    if min(seeds) < 0:
        raise fail("seeds", f"seeds must be >= 0 (got {min(seeds)})")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise fail("seeds", f"seed {repeated[0]} is listed twice")
    template = entry["id"]
    if SEED not in template:
        raise fail("id", f"a seed family's id names each member: put {SEED} in it, e.g. '{template}-seed{SEED}'")
    if path is not None and SEED not in path:
        raise fail("path", f"every member needs its own folder: put {SEED} in path, e.g. 'organisms/dense-s{SEED}'")
    if seed0 is not None:
        if path is not None:
            raise fail("seed0", f"seed0 names the hub id of seed 0; for {source} folders put 0 in seeds")
        if 0 in seeds:
            raise fail("seed0", "seed 0 is both in seeds and named by seed0: drop one")
        if SEED in seed0:
            raise fail("seed0", f"seed0 is one model's id: no {SEED} in it")
    family = family or default_family(template)
    members = []
    for seed in ([0] if seed0 is not None else []) + list(seeds):
        model = seed0 if seed == 0 and seed0 is not None else template.replace(SEED, str(seed))
        member = {
            **entry,
            "id": model,
            "family": family,
            "seed": seed,
            "organism": organism_for(settings or {}, seed, fail) if train else None,
        }
        if path is not None:
            member["path"] = path.replace(SEED, str(seed))
        members.append(member)
    return members


def check_new_members(members: Sequence[dict], known: Iterable, fail: Fail) -> None:
    """Member ids unique in the panel, and a family declared by one entry only."""
    known = list(known)
    family = members[0].get("family")
    if family is not None and any(m.family == family for m in known):
        raise fail("family", f"family '{family}' is declared twice: give one of the entries another family = \"...\"")
    for member in members:
        if any(m.id == member["id"] for m in known):
            raise fail("id", f"model '{member['id']}' is listed twice")


def _organism_fields() -> dict[str, tuple[str, str]]:
    """Setting name -> (part of Organism, annotated type), the seed excepted (a member's seed sets it)."""
    return {
        f.name: (part, str(f.type))
        for part, cls in (("recipe", Recipe), ("corpus", CorpusConfig), ("train", TrainConfig))
        for f in dataclasses.fields(cls)
        if f.name != "seed"
    }


def _setting_ok(value, kind: str) -> bool:
    if isinstance(value, bool):
        return kind.startswith("bool")
    base = kind.split(" |")[0]
    return isinstance(value, {"int": int, "float": (int, float), "str": str}.get(base, ()))


def organism_for(settings: dict, seed: int | None, fail: Fail) -> Organism:
    """The organism a member trains: recipe, corpus and training settings from the entry's `organism`
    table over a named organism's (`preset`: tiny, the default, or code; organism/config.py), with the
    member's seed (`vary`: both, data or weights). 0 for an optional setting (checkpoint_every,
    checkpoint_loss_drop, ...) means none."""
    fields = _organism_fields()
    parts: dict[str, dict] = {"recipe": {}, "corpus": {}, "train": {}}
    vary, own_seed, name = settings.get("vary", "both"), settings.get("seed", 0), settings.get("preset", "tiny")
    for key, value in settings.items():
        if key == "preset":
            if name not in PRESETS:
                raise fail("organism", f"organism.preset = {name!r} is not one of: {', '.join(PRESETS)}")
            continue
        if key == "vary" or key == "seed":
            if seed is not None and key == "seed":
                raise fail("organism", "organism.seed is set by the family: each member trains with its seed")
            if seed is None and key == "vary":
                raise fail("organism", "organism.vary applies to a seed family: add seeds = [...]")
            if (key == "vary" and value not in VARY) or (
                key == "seed" and not (_setting_ok(value, "int") and value >= 0)
            ):
                raise fail(
                    "organism",
                    f"organism.{key} = {value!r} is not one of: "
                    + (", ".join(VARY) if key == "vary" else "integers >= 0"),
                )
            continue
        if key not in fields:
            hint = difflib.get_close_matches(key, list(fields), n=1)
            raise fail(
                "organism",
                f"unknown organism setting '{key}'"
                + (f"; did you mean '{hint[0]}'?" if hint else f"; allowed: {', '.join(fields)}, preset, vary"),
            )
        part, kind = fields[key]
        if not _setting_ok(value, kind):
            what = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
            raise fail("organism", f"organism.{key} must be {what[kind.split(' |')[0]]} (got {value!r})")
        parts[part][key] = None if value == 0 and "None" in kind else value
    seed = own_seed if seed is None else seed
    data_seed, init_seed = (seed if vary in ("both", "data") else 0), (seed if vary in ("both", "weights") else 0)
    try:
        base = preset(name, arch=parts["recipe"].pop("arch", "dense"))
        organism = Organism(
            recipe=dataclasses.replace(base.recipe, **parts["recipe"]),
            corpus=dataclasses.replace(base.corpus, **parts["corpus"], seed=data_seed),
            train=dataclasses.replace(base.train, **parts["train"], seed=init_seed),
        )
        organism.validate()
    except HeadtraceError as exc:
        raise fail("organism", f"organism settings: {exc}") from None
    return organism


# --------------------------------------------------------------------------------------------
# Planning: revisions resolved over a family; gaps.


@dataclass(frozen=True)
class Gap:
    """A revision of its family's selection that a member lacks: reported, left out of that revision's
    statistics, never filled."""

    family: str
    seed: int
    model: str
    revision: str
    tokens: float | None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def text(self) -> str:
        return (
            f"{self.model} (seed {self.seed} of {self.family}) has no revision {self.revision}: left out of "
            "that revision's statistics, not filled"
        )


def groups(models: Sequence) -> list[list]:
    """Models in panel order, a family's members together: [single], [member, member, ...], ..."""
    grouped: dict[str, list] = {}
    for model in models:
        grouped.setdefault(model.family or f"\0{model.id}", []).append(model)
    return list(grouped.values())


def select_members(
    group: Sequence, catalogs: Sequence[list[Revision]], where: str
) -> tuple[list[list[Revision]], list[Gap]]:
    """Each member's revisions, and what members lack. A single model selects from its own catalog;
    a family's list or `log:N` is resolved over the union of its members' revisions (a name no member
    has is an error naming the closest ones), then each member takes those it has."""
    selection = group[0].revisions
    if group[0].family is None or selection == "all":
        return [
            select(catalog, selection, where if len(group) == 1 else f"{where} ({m.id})")
            for m, catalog in zip(group, catalogs)
        ], []
    union = {r.name: r for catalog in catalogs for r in catalog}
    ordered = sorted(union.values(), key=lambda r: (r.tokens is None, r.tokens or 0.0, r.step or 0, r.name))
    wanted = select(ordered, selection, where)
    chosen, gaps = [], []
    for model, catalog in zip(group, catalogs):
        own = {r.name: r for r in catalog}
        chosen.append([own[r.name] for r in wanted if r.name in own])
        gaps += [Gap(model.family, model.seed, model.id, r.name, r.tokens) for r in wanted if r.name not in own]
    return chosen, gaps


def manifest_entry(models: Sequence, gaps: Sequence[Gap]) -> dict:
    """The manifest's record of a panel's families: members by seed, and what each lacks (nothing
    for a panel without families: its manifest stays as it was)."""
    families: dict[str, dict[str, str]] = {}
    for model in models:
        if model.family is not None:
            families.setdefault(model.family, {})[str(model.seed)] = model.id
    return {"families": families, "missing": [g.as_dict() for g in gaps]} if families else {}


def read_gaps(results_dir: str | Path) -> list[Gap]:
    """The gaps `headtrace run` recorded in DIR/manifest.json (none when it has no record)."""
    path = ResultsDir(results_dir).manifest
    try:
        entries = json.loads(path.read_text()).get("missing") or []
        return [Gap(**e) for e in entries]
    except (OSError, ValueError, TypeError, AttributeError):
        return []
