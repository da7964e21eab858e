"""Checkpoint sources: where a revision's files come from, behind one interface.

A source lists its revisions (`revisions()`), brings one to local disk (`fetch()` -> `Checkpoint`,
a directory `load_model` reads) and removes what it downloaded (`release()`).

- `HubSource`: a Hugging Face Hub repository, one branch per revision. Files go through
  huggingface_hub into its cache, so HF_HOME / HF_HUB_CACHE, HF_ENDPOINT and HF_HUB_OFFLINE apply
  (read when a call is made, not only when huggingface_hub was imported). Only the config,
  tokenizer files and one weight format are fetched (safetensors when the branch has them).
  Every file is checked against the hub's own hashes (LFS sha256, git blob sha1); transient
  failures are retried with exponential backoff, then reported as one clear error.
- `LocalSource`: a directory holding one Hugging Face-format subfolder per revision. A
  `revisions.json` there (a list of {"revision", "step", "tokens"}) gives token counts; the model
  organism's trainer writes one, and `organism=True` requires it. Nothing local is ever deleted.

Both read revision names with the model's naming (revisions.py: a user's `NameMap` over the
built-in scheme of the model's repository); the hub's commits make `main` an alias of the branch
at the same commit.

A checkpoint's hash is the sha256 of its weight files' names and sha256 digests, so identical
weights published under two revisions (Pythia issue #205) show up as equal hashes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol

from filelock import FileLock

from headtrace.errors import DiskFull, HeadtraceError, HubUnreachable
from headtrace.organism.config import REVISIONS_FILE
from headtrace.registry import Registry
from headtrace.revisions import NameMap, Revision, catalog, naming_for, select, training_key

ByteProgress = Callable[[int, int], None]  # (bytes done so far, bytes in total) for one revision

_METADATA_SUFFIXES = (".json", ".txt", ".model", ".tiktoken")
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_PERMANENT_ERRNOS = _DISK_ERRNOS | {errno.EACCES, errno.EPERM, errno.EROFS}


@dataclass(frozen=True)
class Checkpoint:
    """One revision on local disk, ready for `load_model(path)`."""

    source: str  # e.g. "hub:EleutherAI/pythia-1b", "local:/data/run"
    revision: Revision
    path: str
    checkpoint_hash: str
    downloaded_bytes: int = 0
    fetch_s: float = 0.0
    owned: tuple[str, ...] = ()  # weight files this fetch created: the only ones `release` deletes


class CheckpointSource(Protocol):
    """What every source offers (HubSource, LocalSource); sources are picklable, for Ray workers."""

    name: str  # the model's name in result tables

    def describe(self) -> str: ...

    def revisions(self) -> list[Revision]: ...

    def fetch(self, revision: Revision, progress: ByteProgress | None = None) -> Checkpoint: ...

    def release(self, checkpoint: Checkpoint) -> None: ...


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently transient download failures are retried (exponential backoff)."""

    attempts: int = 6
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0


def weight_files(names: list[str]) -> list[str]:
    """The files holding one checkpoint's weights: safetensors when present, else PyTorch .bin."""
    top_level = [n for n in names if "/" not in n]
    for suffix in _WEIGHT_SUFFIXES:
        chosen = sorted(n for n in top_level if n.endswith(suffix))
        if chosen:
            return chosen
    return []


def checkpoint_hash(digests: dict[str, str]) -> str:
    """sha256 over sorted (weight file name, sha256 of its content) pairs."""
    text = "\n".join(f"{name} {digest}" for name, digest in sorted(digests.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def file_digest(path: str | Path, algorithm: str = "sha256", git_blob: bool = False) -> str:
    """A file's digest; `git_blob` hashes it as git does ("blob <size>\\0" + content)."""
    digest = hashlib.new(algorithm)
    if git_blob:
        digest.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


class _Reservation:
    """Space a download under way still needs: its size less the bytes it has written."""

    def __init__(self, size: int):
        self.size, self.written = size, 0

    @property
    def outstanding(self) -> int:
        return max(self.size - self.written, 0)


_RESERVED: list[_Reservation] = []  # downloads under way in this process (parallel files, prefetch)
_RESERVED_LOCK = threading.Lock()


def _require_space(directory: Path, needed: int, what: str) -> _Reservation:
    """Check that `needed` bytes fit beside what the downloads under way in this process still have
    to write, and reserve them (`_release_space` when the download ends)."""
    directory.mkdir(parents=True, exist_ok=True)
    with _RESERVED_LOCK:
        free = shutil.disk_usage(directory).free
        pending = sum(r.outstanding for r in _RESERVED)
        if needed + pending > free:
            others = f" (with {pending / 1e9:.2f} GB of downloads under way)" if pending else ""
            raise DiskFull(
                f"{what} needs {needed / 1e9:.2f} GB{others} but only {free / 1e9:.2f} GB are free in "
                f"'{directory}'; free space (or point HF_HOME at a larger disk) and re-run: finished "
                "revisions are kept"
            )
        reservation = _Reservation(needed)
        _RESERVED.append(reservation)
        return reservation


def _release_space(reservation: _Reservation) -> None:
    with _RESERVED_LOCK:
        if reservation in _RESERVED:
            _RESERVED.remove(reservation)


# --------------------------------------------------------------------------------------------
# The hub.


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    cache_dir: str
    offline: bool


def hub_settings() -> HubSettings:
    """HF_ENDPOINT, the hub cache (HF_HUB_CACHE, else HF_HOME/hub) and HF_HUB_OFFLINE, read now."""
    from huggingface_hub import constants  # loaded when the hub is asked

    env = os.environ
    cache = env.get("HF_HUB_CACHE") or (os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else None)
    offline = env.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"} or constants.is_offline_mode()
    return HubSettings(
        endpoint=env.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/"),
        cache_dir=os.path.expanduser(cache or constants.HF_HUB_CACHE),
        offline=offline,
    )


class _CorruptFile(Exception):
    """A downloaded file whose hash differs from the hub's."""


def _transient(exc: BaseException) -> bool:
    """Failures worth retrying: network, 5xx/429, incomplete or corrupt downloads; not 'not found'."""
    import httpx2  # loaded when the hub is asked
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, (RepositoryNotFoundError, RevisionNotFoundError, RemoteEntryNotFoundError, GatedRepoError)):
        return False
    if isinstance(exc, OSError) and exc.errno in _PERMANENT_ERRNOS:
        return False
    return isinstance(exc, (HfHubHTTPError, LocalEntryNotFoundError, httpx2.TransportError, OSError, _CorruptFile))


def _byte_counter(report: Callable[[int], None]) -> type:
    """A tqdm stand-in for huggingface_hub's `tqdm_class`: forwards byte counts, draws nothing."""

    class ByteCounter:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self) -> "ByteCounter":
            return self

        def __exit__(self, *exc) -> None:
            return None

        def update(self, n: int | float | None = 1) -> None:
            report(int(n or 0))

        def close(self) -> None:
            pass

    return ByteCounter


@dataclass(frozen=True)
class HubSource:
    """A model repository on the Hugging Face Hub (or a mirror at HF_ENDPOINT)."""

    repo_id: str
    names: NameMap = NameMap()
    retry: RetryPolicy = RetryPolicy()
    max_workers: int = 4  # weight files of one revision downloaded side by side

    @property
    def name(self) -> str:
        return self.repo_id

    def describe(self) -> str:
        return f"hub:{self.repo_id}"

    def revisions(self) -> list[Revision]:
        """Branches and tags of the repository (offline: the refs in the local cache)."""
        settings = hub_settings()
        naming = naming_for(self.repo_id, self.names)
        if settings.offline:
            commits = self._cached_refs(settings)
            return catalog(commits, naming, commits)
        from huggingface_hub import HfApi  # loaded when the hub is asked

        refs = self._call(
            lambda: HfApi(endpoint=settings.endpoint).list_repo_refs(self.repo_id),
            "list the revisions of",
            settings,
        )
        commits = {ref.name: ref.target_commit for ref in refs.branches + refs.tags}
        return catalog(commits, naming, commits)

    def _cached_refs(self, settings: HubSettings) -> dict[str, str]:
        """The refs in the local cache, each with its commit."""
        from huggingface_hub import scan_cache_dir  # loaded when the hub is asked

        cache = Path(settings.cache_dir)
        repos = scan_cache_dir(cache).repos if cache.is_dir() else ()
        refs = {
            ref: rev.commit_hash
            for repo in repos
            if repo.repo_id == self.repo_id and repo.repo_type == "model"
            for rev in repo.revisions
            for ref in rev.refs
        }
        if not refs:
            raise HeadtraceError(
                f"HF_HUB_OFFLINE is set and '{self.repo_id}' has no revisions in the cache "
                f"'{cache}'; download them online first or unset HF_HUB_OFFLINE"
            )
        return refs

    def fetch(self, revision: Revision, progress: ByteProgress | None = None) -> Checkpoint:
        """Download (or find in the cache) the revision's config, tokenizer and weight files, verified."""
        settings = hub_settings()
        started = time.perf_counter()
        if settings.offline:
            return self._fetch_cached(revision, settings, started)
        from huggingface_hub import HfApi  # loaded when the hub is asked
        from huggingface_hub.hf_api import RepoFile

        api = HfApi(endpoint=settings.endpoint)
        entries = self._call(
            lambda: {
                f.path: f
                for f in api.list_repo_tree(self.repo_id, revision=revision.name, recursive=True)
                if isinstance(f, RepoFile)
            },
            f"list the files of revision '{revision.name}' of",
            settings,
        )
        weights = weight_files(list(entries))
        if not weights:
            raise HeadtraceError(
                f"{self.repo_id}@{revision.name} has no .safetensors or .bin weights; pick another revision"
            )
        wanted = [
            e
            for name, e in entries.items()
            if name in weights or ("/" not in name and name.endswith(_METADATA_SUFFIXES))
        ]
        total = sum(e.size for e in wanted)
        done = 0
        lock = threading.Lock()

        def advance(n: int) -> None:
            nonlocal done
            with lock:
                done += n
                if progress is not None:
                    progress(done, total)

        def one(entry) -> tuple[str, int | None]:
            return self._download(entry, revision, settings, advance)

        # Small files first, one by one; the weight files side by side (each verified as it lands).
        small = [e for e in wanted if e.path not in weights]
        large = [e for e in wanted if e.path in weights]
        fetched = [one(e) for e in small]
        workers = max(1, min(self.max_workers, len(large)))
        if workers == 1:
            fetched += [one(e) for e in large]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="headtrace-download") as pool:
                futures = [pool.submit(one, e) for e in large]
                try:
                    fetched += [f.result() for f in futures]
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
        paths, owned, downloaded, digests = [], [], 0, {}
        for entry, (path, transferred) in zip(small + large, fetched):
            paths.append(path)
            if transferred is not None:
                downloaded += transferred
                # Only weights are released: config and tokenizer blobs are small and often shared
                # by several revisions, which tasks running side by side (Ray) may be loading.
                if entry.path in weights:
                    owned.append(path)
            if entry.path in weights:
                digests[entry.path] = entry.lfs.sha256 if entry.lfs else file_digest(path)
        return Checkpoint(
            source=self.describe(),
            revision=revision,
            path=os.path.dirname(paths[0]),
            checkpoint_hash=checkpoint_hash(digests),
            downloaded_bytes=downloaded,
            fetch_s=time.perf_counter() - started,
            owned=tuple(owned),
        )

    def _fetch_cached(self, revision: Revision, settings: HubSettings, started: float) -> Checkpoint:
        from huggingface_hub import snapshot_download  # loaded when the hub is asked
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            path = snapshot_download(
                self.repo_id, revision=revision.name, cache_dir=settings.cache_dir, local_files_only=True
            )
        except LocalEntryNotFoundError:
            raise HeadtraceError(
                f"HF_HUB_OFFLINE is set and {self.repo_id}@{revision.name} is not in the cache "
                f"'{settings.cache_dir}'; download it online first or unset HF_HUB_OFFLINE"
            ) from None
        return _local_checkpoint(self.describe(), revision, Path(path), started)

    def _download(
        self, entry, revision: Revision, settings: HubSettings, advance: Callable[[int], None]
    ) -> tuple[str, int | None]:
        """One file into the cache, verified; returns its path and the bytes transferred (None: it was
        already in the cache before this call, so it is not ours to delete)."""
        from huggingface_hub import hf_hub_download, try_to_load_from_cache  # loaded when the hub is asked

        cached = try_to_load_from_cache(self.repo_id, entry.path, cache_dir=settings.cache_dir, revision=revision.name)
        if isinstance(cached, str) and self._verified(cached, entry):
            advance(entry.size)
            return cached, None
        _remove_orphans(Path(settings.cache_dir), self.repo_id, entry.lfs.sha256 if entry.lfs else entry.blob_id)
        space = _require_space(Path(settings.cache_dir), entry.size, f"{self.repo_id}@{revision.name}/{entry.path}")

        def attempt() -> tuple[str, int]:
            counted = 0
            space.written = 0

            def count(n: int) -> None:
                nonlocal counted
                counted += n
                space.written += n
                advance(n)

            try:
                path = hf_hub_download(
                    self.repo_id,
                    entry.path,
                    revision=revision.name,
                    cache_dir=settings.cache_dir,
                    endpoint=settings.endpoint,
                    tqdm_class=_byte_counter(count),
                )
                _confirm_linked(path)
            except BaseException:
                advance(-counted)
                raise
            if not self._verified(path, entry):
                advance(-counted)
                _remove_cached(path, corrupt=True)
                raise _CorruptFile(f"{entry.path} does not match the hub's hash")
            advance(entry.size - counted)  # a blob already in the cache is linked, not transferred
            return path, counted

        try:
            return self._call(attempt, f"download {entry.path} of revision '{revision.name}' of", settings)
        finally:
            _release_space(space)

    @staticmethod
    def _verified(path: str, entry) -> bool:
        if entry.lfs is not None:
            return file_digest(path) == entry.lfs.sha256
        return file_digest(path, "sha1", git_blob=True) == entry.blob_id

    def _call(self, fn: Callable, what: str, settings: HubSettings):
        """Run a hub call, retrying transient failures with backoff; failures become HeadtraceErrors."""
        import tenacity  # loaded with the first hub call

        policy = self.retry
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(policy.attempts),
            wait=tenacity.wait_exponential(multiplier=policy.backoff_s, max=policy.max_backoff_s),
            retry=tenacity.retry_if_exception(_transient),
            reraise=True,
        )
        try:
            return retrying(fn)
        except Exception as exc:
            raise self._explain(exc, what, settings) from None

    def _explain(self, exc: Exception, what: str, settings: HubSettings) -> Exception:
        from huggingface_hub.errors import (  # loaded when the hub is asked
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        if isinstance(exc, GatedRepoError):
            return HeadtraceError(
                f"'{self.repo_id}' is gated: accept its terms on the hub and log in (`hf auth login`)"
            )
        if isinstance(exc, RepositoryNotFoundError):
            return HeadtraceError(
                f"model '{self.repo_id}' was not found at {settings.endpoint} (a typo, or a private "
                "repo: log in with `hf auth login`)"
            )
        if isinstance(exc, RevisionNotFoundError):
            return HeadtraceError(f"cannot {what} {self.repo_id}: no such revision on the hub")
        if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
            return DiskFull(
                f"no space left to {what} {self.repo_id} in '{settings.cache_dir}'; free space and "
                "re-run: finished revisions are kept"
            )
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if _transient(exc):
            return HubUnreachable(
                f"cannot {what} {self.repo_id} after {self.retry.attempts} attempts ({first_line}); "
                f"check the connection to {settings.endpoint} and re-run: finished revisions are kept"
            )
        if isinstance(exc, HfHubHTTPError):
            return HeadtraceError(f"cannot {what} {self.repo_id}: {first_line}")
        return exc

    def release(self, checkpoint: Checkpoint) -> None:
        """Delete the cache files `fetch` downloaded (never files that were already cached)."""
        for path in checkpoint.owned:
            _remove_cached(path)
        snapshot = Path(checkpoint.path)
        if checkpoint.owned and snapshot.is_dir() and not any(snapshot.iterdir()):
            snapshot.rmdir()


def _remove_cached(pointer: str, corrupt: bool = False) -> None:
    """Remove a snapshot file and its blob, unless the blob is sound and another snapshot links to it."""
    path = Path(pointer)
    if not path.is_symlink():  # without symlinks the snapshot file is the copy
        path.unlink(missing_ok=True)
        return
    blob = path.resolve()
    with _blob_lock(blob):
        path.unlink(missing_ok=True)
        if corrupt or not _linked_elsewhere(blob):
            blob.unlink(missing_ok=True)


def _remove_orphans(cache_dir: Path, repo_id: str, etag: str) -> None:
    """Delete what a killed process part-wrote of this blob. huggingface_hub writes each download into
    a file of its own process (`blobs/<etag>.<id>.incomplete`) while it holds `.locks/<repo>/<etag>.lock`:
    when that lock is free, no live process is writing them."""
    from filelock import Timeout
    from huggingface_hub.file_download import repo_folder_name  # loaded when the hub is asked

    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    blobs = cache_dir / folder / "blobs"
    orphans = list(blobs.glob(f"{etag}.*.incomplete")) if blobs.is_dir() else []
    if not orphans:
        return
    lock = FileLock(cache_dir / ".locks" / folder / f"{etag}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return
    try:
        for path in orphans:
            path.unlink(missing_ok=True)
    finally:
        lock.release()


def _linked_elsewhere(blob: Path) -> bool:
    """Whether any snapshot (another revision with the same file) links to the blob."""
    return any(p.is_symlink() and p.resolve() == blob for p in (blob.parent.parent / "snapshots").rglob("*"))


def _confirm_linked(pointer: str) -> None:
    """Fail (a retried OSError) when the blob a fresh snapshot link points to was deleted meanwhile.

    Revisions with identical files share one blob. A release that scanned for links just before this
    link was made deletes the blob that this fetch has just linked (and may even have verified);
    checked under the release's lock, the link is either seen by that scan or found dangling here."""
    path = Path(pointer)
    if path.is_symlink():
        with _blob_lock(path.resolve()):
            if not path.exists():
                raise FileNotFoundError(errno.ENOENT, "a release removed the file while it was linked", pointer)


def _blob_lock(blob: Path) -> FileLock:
    """The cross-process lock (one per cached repo, among huggingface_hub's own locks) under which a
    release decides to delete a blob and a fetch confirms its link to one."""
    repo = blob.parent.parent
    locks = repo.parent / ".locks" / repo.name
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(locks / "headtrace-release.lock")


# --------------------------------------------------------------------------------------------
# Local directories and the model organism.


@dataclass(frozen=True)
class LocalSource:
    """A directory with one Hugging Face-format subfolder per revision (e.g. `step000128/`).

    Tokens come from `revisions.json` when present, else from the folder names (revisions.py);
    `organism=True` marks the organism trainer's output, which must carry `revisions.json`."""

    root: str
    model: str
    names: NameMap = NameMap()
    organism: bool = False

    @property
    def name(self) -> str:
        return self.model

    def describe(self) -> str:
        return f"{'organism' if self.organism else 'local'}:{self.root}"

    def revisions(self) -> list[Revision]:
        root = Path(self.root)
        if not root.is_dir():
            raise HeadtraceError(f"checkpoint directory '{root}' does not exist")
        listed = root / REVISIONS_FILE
        if listed.is_file():
            return self._listed(listed)
        if self.organism:
            raise HeadtraceError(
                f"'{root}' has no {REVISIONS_FILE}: it is not a model organism's output; train one "
                'with `headtrace train-organism --out DIR` or use source = "local"'
            )
        names = [p.name for p in root.iterdir() if (p / "config.json").is_file()]
        if not names:
            raise HeadtraceError(f"'{root}' holds no checkpoint folders (subfolders with a config.json)")
        return catalog(names, naming_for(self.model, self.names))

    def _listed(self, listed: Path) -> list[Revision]:
        try:
            entries = json.loads(listed.read_text())
            revisions = [
                Revision(
                    tokens=None if e.get("tokens") is None else float(e["tokens"]),
                    step=None if e.get("step") is None else int(e["step"]),
                    name=str(e["revision"]),
                )
                for e in entries
            ]
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise HeadtraceError(
                f'\'{listed}\' is not a list of {{"revision", "step", "tokens"}} objects ({exc})'
            ) from None
        return sorted(revisions, key=training_key)

    def fetch(self, revision: Revision, progress: ByteProgress | None = None) -> Checkpoint:
        folder = Path(self.root) / revision.name
        if not (folder / "config.json").is_file():
            raise HeadtraceError(f"'{folder}' is not a checkpoint folder (no config.json)")
        return _local_checkpoint(self.describe(), revision, folder, time.perf_counter())

    def release(self, checkpoint: Checkpoint) -> None:
        """Nothing to do: a user's directory is never modified."""


def _local_checkpoint(source: str, revision: Revision, folder: Path, started: float) -> Checkpoint:
    weights = weight_files([p.name for p in folder.iterdir() if p.is_file()])
    if not weights:
        raise HeadtraceError(f"'{folder}' has no .safetensors or .bin weight files")
    check_safetensors(folder / name for name in weights)
    digests = {name: file_digest(folder / name) for name in weights}
    return Checkpoint(
        source=source,
        revision=revision,
        path=str(folder),
        checkpoint_hash=checkpoint_hash(digests),
        fetch_s=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------------------------
# The source registry: a panel model's `source = ...` names one of these.


@dataclass(frozen=True)
class SourceKind:
    """How a panel model's entry becomes a checkpoint source: `make(id, path, names, retry)` (names: the
    entry's map of revision names to tokens)."""

    make: Callable[[str, str | None, NameMap, RetryPolicy], CheckpointSource]
    needs_path: bool = True  # the entry must give `path` (a local folder); False: it must not


SOURCES: Registry[SourceKind] = Registry("source")
SOURCES.add("hub", SourceKind(lambda id, path, names, retry: HubSource(id, names, retry), needs_path=False))
SOURCES.add("local", SourceKind(lambda id, path, names, retry: LocalSource(path, id, names)))
SOURCES.add("organism", SourceKind(lambda id, path, names, retry: LocalSource(path, id, names, organism=True)))


def is_local(model: str) -> bool:
    """Whether MODEL names a local folder or .gguf file rather than a hub id."""
    return model.endswith(".gguf") or model.startswith((".", "/", "~")) or Path(model).exists()


def checkpoint_location(
    model: str, revision: str | None, names: NameMap = NameMap()
) -> tuple[str, str | None, float | None]:
    """Where MODEL at REVISION loads from: (location, hub revision, tokens seen).

    A hub id passes through, with the tokens its revision name gives (`names` over the repository's
    scheme; None where unknown). A local checkpoint (a folder with a config.json, a .gguf file) has no
    revisions: a revision would only label its result wrongly, so it is refused. A folder of
    checkpoints (an organism's output, or one subfolder per revision) serves its subfolders."""
    if revision is None:
        return model, revision, None
    if not is_local(model):
        return model, revision, catalog([revision], naming_for(model, names))[0].tokens
    folder = Path(model).expanduser()
    if folder.is_dir() and not (folder / "config.json").is_file():
        source = LocalSource(str(folder), model=model, names=names, organism=(folder / REVISIONS_FILE).is_file())
        [found] = select(source.revisions(), [revision], model)
        return str(folder / found.name), None, found.tokens
    kind = "GGUF file" if model.endswith(".gguf") else "checkpoint folder"
    raise HeadtraceError(
        f"--revision {revision} does not apply to '{model}': a local {kind} holds one checkpoint and no "
        "revisions; drop --revision (a folder with one checkpoint subfolder per revision serves revisions)"
    )


def check_safetensors(paths: Iterable[Path]) -> None:
    """A truncated or garbage .safetensors file fails here, named, before a model is built from it
    (its header is read and checked against the file's size; the tensors are not read)."""
    from safetensors import SafetensorError, safe_open  # loaded when a local weight file is checked

    for path in paths:
        if path.suffix != ".safetensors":
            continue
        try:
            with safe_open(path, framework="numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            raise HeadtraceError(
                f"cannot read weights file '{path}': {str(exc).strip().splitlines()[0]}; it is "
                "truncated or corrupt: re-download or re-save it"
            ) from None
