"""A checkpoint series before any weight is downloaded: revisions, tokens, sizes and duplicates.

`list_series` reads a model's revisions and, per revision, its weight files with their sha256 and
size: on the hub from the tree listing alone (the LFS oid is the file's sha256; no weight byte is
downloaded), cached by commit under the hub cache (`headtrace-listings/`), so a second listing asks
the hub for the refs only; in a local folder by hashing every weight file (every byte is read).

Duplicates, per model (`Duplicate.kind`):

- `identical`: all weight files equal another revision's (the same sha256 set); the copy with the
  fewest tokens is the one kept (as `store.identical_weights` picks);
- `equal_to_final`: identical to the final revision (most tokens, else highest step) although it is
  not the final one (Pythia issue #205);
- `shares_files`: some weight files, not all, equal another revision's (Pythia issue #206).

Names at the same commit as a revision (`main`) are aliases (revisions.catalog), not duplicates.
`neighbour_suspects` is the check after screening: a revision whose heads table is much closer to
a far revision than to both its neighbours (docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from headtrace.errors import HeadtraceError, HubUnreachable
from headtrace.revisions import Revision, catalog, log_spaced, naming_for, series, training_key
from headtrace.sources import (
    CheckpointSource,
    HubSettings,
    HubSource,
    LocalSource,
    checkpoint_hash,
    hub_settings,
    weight_files,
)
from headtrace.store import slug, training_order

Progress = Callable[[int, int], None]  # (advance, total): revisions listed, or bytes hashed
LISTINGS = "headtrace-listings"
LISTING_WORKERS = 8  # tree listings asked for at once
SUSPECT_RATIO = 0.5  # a revision this much closer to a far one than to its nearer neighbour is suspect


@dataclass(frozen=True)
class WeightFile:
    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Listed:
    """One revision's weight files, as the listing gives them."""

    revision: Revision
    files: tuple[WeightFile, ...]
    commit: str | None = None

    @property
    def name(self) -> str:
        return self.revision.name

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(f.sha256 for f in self.files)

    @property
    def checkpoint_hash(self) -> str:
        """The hash a fetch of this revision records (sources.checkpoint_hash)."""
        return checkpoint_hash({f.name: f.sha256 for f in self.files})


@dataclass(frozen=True)
class Duplicate:
    """A revision whose weight files (all, or some) equal another revision's."""

    revision: str
    kind: str  # identical | equal_to_final | shares_files
    of: str  # the revision it duplicates
    saved_bytes: int  # what downloading it again would cost for nothing
    shared_files: int
    files: int

    def text(self) -> str:
        saved = f"{self.saved_bytes / 1e9:.3g} GB" if self.saved_bytes >= 1e8 else f"{self.saved_bytes:,} bytes"
        if self.kind == "shares_files":
            shared = f"{self.shared_files} of {self.files} weight files"
            return f"{self.revision} shares {shared} with {self.of} ({saved} shared)"
        what = "equal to the final revision" if self.kind == "equal_to_final" else "identical to"
        return f"{self.revision} is {what} {self.of} ({saved} saved)"


@dataclass
class Series:
    """A model's revisions with their weight files, aliases and duplicates."""

    model: str
    source: str
    listed: list[Listed]  # in training order, aliases left out
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> the revision it is
    duplicates: list[Duplicate] = field(default_factory=list)
    final: str | None = None
    from_cache: bool = False  # the hub was unreachable: this is the offline cache's answer
    error: str = ""  # why the hub was not asked (with from_cache)

    def by_name(self) -> dict[str, Listed]:
        return {entry.name: entry for entry in self.listed}

    def log_selection(self, n: int) -> list[str]:
        """The revisions `log:N` selects (revisions.select)."""
        candidates = series([entry.revision for entry in self.listed])
        if not candidates:
            return []
        by = "tokens" if all(r.tokens is not None for r in candidates) else "step"
        return [r.name for r in log_spaced(candidates, n, by)]

    def rows(self) -> list[dict]:
        """The table: one row per revision (aliases and their target name each other)."""
        dups: dict[str, list[dict]] = {}
        for d in self.duplicates:
            dups.setdefault(d.revision, []).append(
                {"kind": d.kind, "of": d.of, "saved_bytes": d.saved_bytes, "shared_files": d.shared_files}
            )
        aliases: dict[str, list[str]] = {}
        for alias, target in self.aliases.items():
            aliases.setdefault(target, []).append(alias)
        return [
            {
                "revision": e.name,
                "step": e.revision.step,
                "tokens": e.revision.tokens,
                "commit": e.commit,
                "weight_bytes": e.size,
                "weight_files": len(e.files),
                "checkpoint_hash": e.checkpoint_hash,
                "final": e.name == self.final,
                "aliases": sorted(aliases.get(e.name, [])),
                "duplicates": dups.get(e.name, []),
            }
            for e in self.listed
        ]

    def to_json(self, log: int | None = None) -> dict:
        document = {
            "model": self.model,
            "source": self.source,
            "final": self.final,
            "revisions": self.rows(),
            "aliases": self.aliases,
            "duplicates": [asdict(d) for d in self.duplicates],
            "from_cache": self.from_cache,
        }
        if log is not None:
            document["log"] = {"n": log, "revisions": self.log_selection(log)}
        return document


# --------------------------------------------------------------------------------------------
# Duplicates.


def final_revision(revisions: Sequence[Revision]) -> Revision | None:
    """The series' final revision: most tokens, else highest step (the main run, no aliases)."""
    candidates = [r for r in revisions if not r.run and not r.alias_of]
    with_tokens = [r for r in candidates if r.tokens is not None]
    if with_tokens:
        return max(with_tokens, key=lambda r: (r.tokens, r.step or 0, r.name))
    with_step = [r for r in candidates if r.step is not None]
    return max(with_step, key=lambda r: (r.step, r.name)) if with_step else None


def find_duplicates(listed: Sequence[Listed], final: str | None) -> list[Duplicate]:
    """Every revision whose weight files equal another's, all (identical, equal_to_final) or some
    (shares_files), each named once with the revision it duplicates."""
    ordered = sorted((e for e in listed if e.files), key=lambda e: training_key(e.revision))
    found: list[Duplicate] = []
    first: dict[frozenset[str], Listed] = {}
    by_name = {e.name: e for e in ordered}
    for entry in ordered:
        kept = first.setdefault(entry.digests, entry)
        if kept is entry:
            continue
        found.append(Duplicate(entry.name, "identical", kept.name, entry.size, len(entry.files), len(entry.files)))
    final_entry = by_name.get(final or "")
    if final_entry is not None:  # #205: a branch serving the final weights (the earlier copy is the suspect)
        found = [d for d in found if not (d.revision == final and by_name[d.of].digests == final_entry.digests)]
        for entry in ordered:
            if entry is not final_entry and entry.digests == final_entry.digests:
                found.append(
                    Duplicate(entry.name, "equal_to_final", final, entry.size, len(entry.files), len(entry.files))
                )
    # Shared files, between one revision per set of weights (the final one where it is in the set).
    kept = {e.digests: e for e in ordered if e.digests not in first or first[e.digests] is e}
    if final_entry is not None:
        kept[final_entry.digests] = final_entry
    distinct = sorted(kept.values(), key=lambda e: training_key(e.revision))
    for i, a in enumerate(distinct):
        for b in distinct[i + 1 :]:
            shared = a.digests & b.digests
            if not shared:
                continue
            # The earlier one is the suspect when the later is final (#206), else the later one.
            suspect, other = (a, b) if b.name == final else (b, a)
            size = sum(f.size for f in suspect.files if f.sha256 in shared)
            found.append(Duplicate(suspect.name, "shares_files", other.name, size, len(shared), len(suspect.files)))
    order = {e.name: i for i, e in enumerate(ordered)}
    return sorted(found, key=lambda d: (order[d.revision], d.kind, order[d.of]))


def _series(model: str, source: str, revisions: list[Revision], listings: dict[str, Listed], cached: bool) -> Series:
    aliases = {r.name: r.alias_of for r in revisions if r.alias_of}
    listed = [listings[r.name] for r in revisions if not r.alias_of and r.name in listings]
    final = final_revision([e.revision for e in listed])
    final_name = final.name if final else None
    return Series(model, source, listed, aliases, find_duplicates(listed, final_name), final_name, cached)


# --------------------------------------------------------------------------------------------
# Listing.


def list_series(
    source: CheckpointSource,
    progress: Progress | None = None,
    only: Sequence[str] | None = None,
    on_bytes: Progress | None = None,
) -> Series:
    """The series of a hub repository or local folder of checkpoints, from listings (hub) or hashes
    (local folder: every byte is read). `only`: list these revisions (and the final one) only."""
    if isinstance(source, HubSource):
        return _hub_series(source, progress, only)
    if isinstance(source, LocalSource):
        return _local_series(source, progress, only, on_bytes)
    raise HeadtraceError(f"{source.describe()}: listing its revisions is not supported for this source")


def _wanted(revisions: list[Revision], only: Sequence[str] | None) -> list[Revision]:
    if only is None:
        return revisions
    final = final_revision(revisions)
    names = set(only) | ({final.name} if final else set())
    return [r for r in revisions if r.name in names]


def _hub_series(source: HubSource, progress: Progress | None, only: Sequence[str] | None) -> Series:
    settings = hub_settings()
    folder = Path(settings.cache_dir) / LISTINGS / slug(source.repo_id)
    naming = naming_for(source.repo_id, source.names)
    refs, cached, error = None, settings.offline, None
    if not settings.offline:
        try:
            refs = _hub_refs(source, settings)
        except HubUnreachable as exc:
            if not (folder / "refs.json").is_file():
                raise
            cached, error = True, exc
    if refs is None:
        try:
            refs = json.loads((folder / "refs.json").read_text())
        except (OSError, ValueError):
            raise HeadtraceError(
                f"'{source.repo_id}' has no cached listing in '{folder}' for HF_HUB_OFFLINE: list it online "
                "once (`headtrace revisions`) or unset HF_HUB_OFFLINE"
            ) from None
    else:
        _write_json(folder / "refs.json", refs)
    revisions = _wanted(catalog(refs, naming, refs), only)
    todo = [r for r in revisions if not r.alias_of]
    if progress:
        progress(0, len(todo))

    def one(revision: Revision) -> Listed:
        listed = _hub_listing(source, settings, folder, revision, refs[revision.name], cached)
        if progress:
            progress(1, len(todo))
        return listed

    # One tree listing per revision (150+ for Pythia): a few at a time, each retried on its own.
    with ThreadPoolExecutor(max(1, min(LISTING_WORKERS, len(todo))), thread_name_prefix="headtrace-list") as pool:
        listings = dict(zip((r.name for r in todo), pool.map(one, todo)))
    result = _series(source.repo_id, source.describe(), revisions, listings, cached and not settings.offline)
    if result.from_cache:
        result.error = str(error)
    return result


def _hub_refs(source: HubSource, settings: HubSettings) -> dict[str, str]:
    from huggingface_hub import HfApi  # loaded when the hub is asked

    refs = source._call(
        lambda: HfApi(endpoint=settings.endpoint).list_repo_refs(source.repo_id),
        "list the revisions of",
        settings,
    )
    return {ref.name: ref.target_commit for ref in refs.branches + refs.tags}


def _hub_listing(
    source: HubSource, settings: HubSettings, folder: Path, revision: Revision, commit: str, offline: bool
) -> Listed:
    """One revision's weight files from its tree listing at its commit (cached by commit)."""
    path = folder / f"{commit}.json"
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        if offline:
            raise HeadtraceError(
                f"{source.repo_id}@{revision.name} has no cached listing in '{folder}'; list it online first"
            ) from None
        entries = _tree(source, settings, commit, revision.name)
        _write_json(path, entries)
    names = weight_files([e["path"] for e in entries])
    files = tuple(WeightFile(e["path"], e["sha256"], e["size"]) for e in entries if e["path"] in names)
    return Listed(revision, files, commit)


def _tree(source: HubSource, settings: HubSettings, commit: str, name: str) -> list[dict]:
    """The top-level files of a commit: path, size and sha256 (the LFS oid; git's blob id otherwise)."""
    from huggingface_hub import HfApi  # loaded when the hub is asked
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=settings.endpoint)
    files = source._call(
        lambda: [f for f in api.list_repo_tree(source.repo_id, revision=commit) if isinstance(f, RepoFile)],
        f"list the files of revision '{name}' of",
        settings,
    )
    return [
        {"path": f.path, "size": f.size, "sha256": f.lfs.sha256 if f.lfs else f"git-blob:{f.blob_id}"} for f in files
    ]


def _write_json(path: Path, document) -> None:
    """A cache file, written whole or not at all (a failure to write only costs a later listing)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(document))
        tmp.replace(path)
    except OSError:
        pass


def _local_series(
    source: LocalSource, progress: Progress | None, only: Sequence[str] | None, on_bytes: Progress | None
) -> Series:
    revisions = _wanted(source.revisions(), only)
    root = Path(source.root)
    weights = {}
    for revision in revisions:
        folder = root / revision.name
        names = weight_files([p.name for p in folder.iterdir() if p.is_file()]) if folder.is_dir() else []
        weights[revision.name] = [(n, (folder / n).stat().st_size) for n in names]
    total = sum(size for files in weights.values() for _, size in files)
    if on_bytes:
        on_bytes(0, total)
    listings = {}
    if progress:
        progress(0, len(revisions))
    for revision in revisions:
        files = []
        for name, size in weights[revision.name]:
            digest = hashlib.sha256()
            with open(root / revision.name / name, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
                    if on_bytes:
                        on_bytes(len(block), total)
            files.append(WeightFile(name, digest.hexdigest(), size))
        listings[revision.name] = Listed(revision, tuple(files))
        if progress:
            progress(1, len(revisions))
    return _series(source.model, source.describe(), revisions, listings, False)


# --------------------------------------------------------------------------------------------
# The neighbour check, after screening.


def _log_selectivities(heads: pd.DataFrame) -> pd.DataFrame:
    columns = sorted(c for c in heads.columns if c.startswith("sel_"))
    table = heads.set_index(["layer", "head"])
    values = np.log10(np.clip(table[columns].to_numpy(dtype=float), 1e-12, None))
    frame = pd.DataFrame(values, index=table.index, columns=columns)
    return frame[~table["baseline_underflow"].to_numpy(dtype=bool)]


def distance(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """Mean |difference of log10 selectivities| over the heads (and sel_* columns) neither table
    marks as baseline underflow; NaN when there are none."""
    la, lb = _log_selectivities(a), _log_selectivities(b)
    common = la.index.intersection(lb.index)
    if not len(common):
        return float("nan")
    return float(np.nanmean(np.abs(la.loc[common].to_numpy() - lb.loc[common].to_numpy())))


@dataclass(frozen=True)
class Suspect:
    """A revision whose heads are much closer to a far revision than to its neighbours."""

    model: str
    revision: str
    closer_to: str
    distance: float  # to `closer_to`
    neighbour_distance: float  # to the nearer of its two neighbours

    def text(self) -> str:
        return (
            f"{self.model}@{self.revision} is closer to {self.closer_to} ({self.distance:.3g}) than to its "
            f"neighbours ({self.neighbour_distance:.3g}): a mis-served branch? (docs/reliability.md)"
        )


def neighbour_suspects(heads: pd.DataFrame, runs: pd.DataFrame, ratio: float = SUSPECT_RATIO) -> list[Suspect]:
    """Per model, in training order: revision i is suspect when, for a revision j that is not one of
    its neighbours (i-1, i+1), distance(i, j) < ratio x min(distance(i, i-1), distance(i, i+1)).
    Revisions with the same weights as another (`same_weights_as`) are left out; never drops data."""
    found = []
    for model, group in runs.groupby("model", sort=False):
        if "same_weights_as" in group:
            group = group[group.same_weights_as.isna()]
        names = list(training_order(group).revision)
        tables = {name: heads[(heads.model == model) & (heads.revision == name)] for name in names}
        for i in range(1, len(names) - 1):
            near = min(
                distance(tables[names[i]], tables[names[i - 1]]), distance(tables[names[i]], tables[names[i + 1]])
            )
            if not near > 0:
                continue
            far = [
                (distance(tables[names[i]], tables[names[j]]), names[j]) for j in range(len(names)) if abs(j - i) > 1
            ]
            far = [(d, n) for d, n in far if d == d]
            if far:
                closest, name = min(far)
                if closest < ratio * near:
                    found.append(Suspect(str(model), names[i], name, closest, near))
    return found
