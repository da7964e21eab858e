"""Screens inside the training loop: watch circuits form while a model trains, without saving and
reloading checkpoints.

- `Watcher` serves any loop: `watch.step(model, step, tokens_seen)` after each optimiser step
  screens the live model at the chosen steps (a set lookup otherwise); `watch.screen(...)` screens
  now, whatever the schedule (the organism trainer screens where the loss falls).
- `HeadtraceCallback` does the same inside a Hugging Face `Trainer`, and logs the sink fraction,
  the best induction selectivity and top-1 through the Trainer's own `log`.

Each screen is one revision (`stepNNNNNN`, as the organism trainer names its checkpoints) of one
model in a results folder, in the shard format of panels, so `headtrace results`, `findings` and
`report` read it like any panel. A screen runs in eval mode under no-grad and puts back every
module's training flag and the RNG states (torch CPU and CUDA, Python, NumPy): training with a
watcher is bit-identical to training without one, and its tables are bit-identical to screening
the saved checkpoint of the same step.

The model is a Hugging Face causal LM, a TransformerLens model (`HookedTransformer`,
`TransformerBridge`) or an nnsight `LanguageModel` (interop.py). It is screened where it is, in its
dtype (the stored config records that device and dtype). Supported: one process on the CPU, a GPU or
MPS, in float32, bfloat16 or float16; DDP (the wrapped model's `.module` is screened on rank 0
alone; the other ranks wait at their next collective). FSDP and DeepSpeed ZeRO-3 shard the
parameters, so no rank holds the model: refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import sys
import time
import uuid
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from headtrace import __version__
from headtrace.errors import HeadtraceError
from headtrace.organism.config import REVISIONS_FILE, checkpoint_steps, revision_name
from headtrace.probes import PROBES, build_probe
from headtrace.schema import ScreenConfig
from headtrace.store import (
    COMPOSITION,
    MANIFEST_SCHEMA,
    RUNS,
    OutputLock,
    ResultsDir,
    atomic_folder,
    check_writable,
    check_written_by_us,
    manifest_shards,
    run_record,
    shard_name,
    slug,
    utc_now,
    write_json_atomic,
    write_manifest,
    writing_results,
)
from headtrace.trajectory import TrajectoryConfig, milestones, revision_table

if TYPE_CHECKING:
    import torch

    from headtrace.screen import ScreenResult

Revisions = str | Sequence[int] | None
_PART = re.compile(r"^(log|every):(\d+)$")
CHECKPOINTS = "checkpoints"  # OUT/checkpoints/<model>/: the checkpoints saved at milestones
_HOLDERS: dict[str, weakref.ref] = {}  # lock file -> the watcher of this process that holds it


# --------------------------------------------------------------------------------------------
# Which steps: the schedule.


@dataclass(frozen=True)
class Schedule:
    """The steps to screen: an explicit set, plus every `every` steps up to `last` (a modulo test:
    no list of those steps is ever built, whatever the run's length)."""

    steps: frozenset[int] = frozenset()
    every: int | None = None
    last: int | None = None  # the run's last step (None: unbounded)

    def due(self, step: int) -> bool:
        return step in self.steps or (
            self.every is not None and 0 < step and step % self.every == 0 and (self.last is None or step <= self.last)
        )


def schedule(revisions: Revisions, total_steps: int | None = None) -> Schedule:
    """The steps `revisions` names: "log:N" (about N log-spaced steps in [1, total_steps], with
    the first and the last, as the organism trainer spaces its checkpoints), "every:K", a list of
    steps, or several joined by commas ("log:12,every:250"); None or an empty list: none (only
    `Watcher.screen` calls)."""
    if revisions is None:
        return Schedule()
    if isinstance(revisions, (int, float)):
        raise HeadtraceError(f"revisions={revisions!r}: pass 'every:{revisions}', 'log:N' or a list of steps")
    if total_steps is not None and total_steps < 1:
        raise HeadtraceError(f"total_steps must be >= 1 (got {total_steps})")
    if not isinstance(revisions, str):
        steps = list(revisions)
        if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in steps):
            raise HeadtraceError(f"revisions lists steps, integers >= 0 (got {steps!r})")
        return Schedule(frozenset(int(s) for s in steps))
    steps, every = set(), None
    for part in (p.strip() for p in revisions.split(",")):
        match = _PART.match(part)
        if not match:
            raise HeadtraceError(
                f"unknown revisions '{part}'; use 'log:N', 'every:K', a list of steps, or several joined by commas"
            )
        kind, n = match[1], int(match[2])
        if n < 1:
            raise HeadtraceError(f"'{part}' selects nothing; use {kind}:N with N >= 1")
        if kind == "every":
            every = n
        elif total_steps is None:
            raise HeadtraceError(f"'{part}' spaces screens over the run: give total_steps (the Trainer's max_steps)")
        else:
            steps.update(checkpoint_steps(total_steps, n))
    return Schedule(frozenset(steps), every, total_steps)


# --------------------------------------------------------------------------------------------
# The screen's footprint on training: none.


@contextlib.contextmanager
def training_state_kept(model: "torch.nn.Module") -> Iterator[None]:
    """Eval mode and no-grad for the block; afterwards every module's training flag and the RNG
    states (torch CPU, CUDA and MPS, Python, NumPy) are as they were, so training goes on exactly
    as it would have without the block."""
    import torch  # importing the watcher loads no torch

    modes = [(module, module.training) for module in model.modules()]
    python, numpy_state, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    mps = torch.mps.get_rng_state() if torch.backends.mps.is_available() else None
    try:
        model.eval()
        with torch.no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        if mps is not None:
            torch.mps.set_rng_state(mps)


def unwrapped(model: "torch.nn.Module") -> "torch.nn.Module":
    """The model inside DDP, DataParallel or torch.compile; FSDP and DeepSpeed ZeRO-3 are refused:
    their ranks hold shards of the parameters, and a screen needs the whole model."""
    import torch  # importing the watcher loads no torch

    while True:
        kind = type(model).__name__
        if kind in ("FullyShardedDataParallel", "FSDPModule") or "FSDP" in kind:
            raise _sharded_error("FSDP")
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile
            model = model._orig_mod
        else:
            break
    for param in model.parameters():
        if getattr(param, "ds_id", None) is not None and getattr(param, "ds_status", None) is not None:
            raise _sharded_error("DeepSpeed ZeRO-3")
        if type(param).__name__ == "DTensor" or type(getattr(param, "data", None)).__name__ == "DTensor":
            raise _sharded_error("FSDP")
        break
    return model


def _sharded_error(kind: str) -> HeadtraceError:
    return HeadtraceError(
        f"{kind} shards the parameters across ranks and the watcher screens a whole model: not "
        "supported; train with DDP (or one process), or screen saved checkpoints with `headtrace run`"
    )


class _BosOnly:
    """What the synthetic probe needs of a tokenizer: the BOS id (from the model's config)."""

    def __init__(self, bos_token_id: int | None):
        self.bos_token_id = bos_token_id


# --------------------------------------------------------------------------------------------
# The watcher.


class Watcher:
    """Screens a model being trained, at chosen steps, into a results folder (module docstring).

    out: results folder; model_id: the model's name in the tables; config: the screen (its device
    and dtype are replaced by the model's); revisions: "log:N", "every:K", a list of steps, several
    joined by commas, or None (only `screen` calls); total_steps: the run's length (for "log:N"
    and wide step counts); save_at_milestones: save the checkpoint where a milestone of
    trajectory.py is first reached, into `checkpoint_dir` (default OUT/checkpoints/<model>/, a
    folder of checkpoints with revisions.json that `headtrace ablate --revision` and panels read);
    tokenizer: saved with those checkpoints, and the BOS id of the probe (default: the model's
    config); rank: this process's rank (default: torch.distributed's, else 0), only rank 0 screens.

    One watcher is one training run, with its own `run_id` (in the run records and the manifest).
    It holds the results folder's lock from its making to `close()` (the organism trainer and the
    Trainer callback close it when training ends, and so does `with Watcher(...) as watch:`), and
    keeps DIR/manifest.json as a panel does. Before its first write (`prepare`, or the first
    screen) it refuses a folder that holds this model's screens from another run; overwrite=True:
    that run's screens go first; resume=True: this run resumes that one from its checkpoint, its
    screens are kept and the new ones added.
    """

    def __init__(
        self,
        out: str | Path,
        model_id: str,
        config: ScreenConfig = ScreenConfig(),
        revisions: Revisions = "log:24",
        total_steps: int | None = None,
        *,
        save_at_milestones: bool = False,
        checkpoint_dir: str | Path | None = None,
        tokenizer=None,
        rank: int | None = None,
        overwrite: bool = False,
        resume: bool = False,
        composition: bool = False,
        causal_composition: bool = False,
    ):
        config.validate()
        if not model_id or not str(model_id).strip():
            raise HeadtraceError("model_id names the model in the tables: give a non-empty one")
        if PROBES.get(config.probe.kind).needs_tokenizer and tokenizer is None:
            raise HeadtraceError(f"the {config.probe.kind} probe needs a tokenizer: pass tokenizer= to the watcher")
        if overwrite and resume:
            raise HeadtraceError("overwrite=True replaces an earlier run's screens, resume=True keeps them: pass one")
        self.out = Path(out)
        self.results = ResultsDir(out)
        self.model_id = str(model_id)
        self.config = config
        self.revisions = revisions
        self.total_steps = total_steps
        self.schedule = schedule(revisions, total_steps)
        self.save_at_milestones = save_at_milestones
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else self.out / CHECKPOINTS / slug(self.model_id)
        self.tokenizer = tokenizer
        self.rank = _rank() if rank is None else rank
        self.overwrite, self.resume = overwrite, resume
        self.run_id = uuid.uuid4().hex[:16]
        self.started = False  # this run's writes began (`start`)
        self.closed = False
        self.screened: list[dict] = []  # {"revision", "step", "tokens"} per screen, in order
        self.milestones: dict[str, str] = {}  # milestone -> the revision that first reached it
        self.saved: list[dict] = []  # checkpoints saved at milestones (revisions.json entries)
        self.screen_s = 0.0  # wall time spent in screens and writing them
        self._probe = None
        self._resolved: ScreenConfig | None = None
        self._runs: list[pd.DataFrame] = []  # the folder's run records (with `shard`), for the manifest
        self._release = None
        # Composition of the induction heads at each screen (composition.py); with causal_composition,
        # also each earlier head's ablation drop at the revisions bracketing the induction onset and
        # at the last screen (a copy of the model at the previous screen is kept for that).
        self.composition = composition or causal_composition
        self.causal_composition = causal_composition
        self._previous: tuple | None = None  # (model copy, heads, revision, tokens) at the previous screen
        self._onset_seen = False
        if self.active:
            check_writable(self.out, "results folder")
            self._lock()

    @property
    def active(self) -> bool:
        """Whether this process screens (rank 0)."""
        return self.rank == 0

    def due(self, step: int) -> bool:
        """Whether `step` is scheduled (a set lookup and a modulo)."""
        return self.schedule.due(step)

    def step(self, model, step: int, tokens_seen: float | None = None) -> "ScreenResult | None":
        """Call after each optimiser step: screens when `step` is scheduled, else returns at once."""
        if not self.schedule.due(step) or not self.active:
            return None
        return self.screen(model, step, tokens_seen)

    def prepare(self, model) -> None:
        """Check the folder (another run's screens of this model), build the probe and check it
        against the model (vocabulary, context, BOS) and the config against the folder: call before
        training to fail before it starts."""
        if not self.active:
            return
        from headtrace.interop import as_adapter, native_model  # torch: importing the watcher loads none

        self.start()
        self._prepared(as_adapter(unwrapped(native_model(model))))

    def start(self, overwrite: bool | None = None, resume: bool | None = None) -> None:
        """Begin this run's writes (once; `prepare` and the first screen call it, the organism trainer
        with overwrite=True, as it trains from scratch): this model's screens from another run are
        refused, replaced (overwrite) or continued (resume), then the manifest is written."""
        if self.started or not self.active:
            return
        self._check_open()
        overwrite = self.overwrite if overwrite is None else overwrite
        resume = self.resume if resume is None else resume
        runs = self.results.existing_runs()
        check_written_by_us(self.results, runs, "results folder")
        mine = runs.loc[runs["model"] == self.model_id] if "model" in runs else runs.iloc[0:0]
        if len(mine):
            earlier = sorted({_run_id(r) for r in mine.get("run_id", pd.Series([None] * len(mine)))}, key=str)
            if overwrite:
                self._discard(list(mine["shard"]))
                runs = runs.loc[~runs["shard"].isin(mine["shard"])]
            elif resume and len(earlier) == 1 and earlier[0] is not None:
                self.run_id = earlier[0]
                self._resume_milestones()
            else:
                which = (
                    "several runs"
                    if len(earlier) > 1
                    else (
                        f"run {earlier[0]}"
                        if earlier[0] is not None
                        else "a run without a run id (a panel's, or older)"
                    )
                )
                ways = (
                    "pass overwrite=True to replace them, or another model_id"
                    if resume
                    else "pass overwrite=True to replace them, resume=True if this run resumes that one from its "
                    "checkpoint, or another model_id"
                )
                raise HeadtraceError(f"'{self.out}' holds {len(mine)} screens of {self.model_id} from {which}; {ways}")
        self._runs = [runs]
        self.started = True
        self._write_manifest()

    def close(self) -> None:
        """End this run: the manifest, then the folder's lock goes (a panel can run on the folder
        now). Again: nothing. The organism trainer and the Trainer callback call it."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.causal_composition and self._previous is not None:
                self._compose_previous(causal=True)  # the last screen: the final revision
            if self.started:
                self._write_manifest()
        finally:
            if self._release is not None:
                self._release()

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _lock(self) -> None:
        """The folder's lock, for as long as this run writes. A watcher of the same model that this
        process left open (a notebook cell run again) is closed first; any other holder refuses."""
        key = str(self.results.lock.absolute())
        previous = _HOLDERS.get(key)
        previous = previous() if previous is not None else None
        if previous is not None and previous.model_id == self.model_id:
            previous.close()
        with writing_results(self.out, "results folder"):
            self.out.mkdir(parents=True, exist_ok=True)
        lock = OutputLock(self.results, holder=f"a watcher of {self.model_id}", option="results folder")
        lock.__enter__()
        self._release = weakref.finalize(self, lock.release)  # also when the watcher is dropped unclosed
        _HOLDERS[key] = weakref.ref(self)

    def _check_open(self) -> None:
        if self.closed:
            raise HeadtraceError(f"this watcher of {self.model_id} is closed (its training ended); make a new one")

    def _discard(self, shards: list[str]) -> None:
        """An earlier run's shards of this model: their run records first (a shard without one is
        unfinished, and ignored), then their tables in every folder and that run's milestone
        checkpoints; nothing of this run is written before they are gone, so the folder never holds
        two runs of one model."""
        root = self.results.root
        with writing_results(root, "results folder"):
            for name in shards:
                (root / RUNS / name).unlink(missing_ok=True)
            for folder in (f for f in root.iterdir() if f.is_dir() and not f.name.startswith(".")):
                for name in shards:
                    (folder / name).unlink(missing_ok=True)
            shutil.rmtree(root / CHECKPOINTS / slug(self.model_id), ignore_errors=True)

    def _resume_milestones(self) -> None:
        """The milestone checkpoints the resumed run saved, so that it saves none twice."""
        with contextlib.suppress(OSError, ValueError):
            self.saved = json.loads((self.checkpoint_dir / REVISIONS_FILE).read_text())
            self.milestones = {m: e["revision"] for e in self.saved for m in e.get("milestones", [])}

    def _write_manifest(self) -> None:
        config = self._resolved or self.config
        frames = [f for f in self._runs if len(f)] or self._runs[:1]
        runs = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        revisions = (
            self.revisions
            if self.revisions is None or isinstance(self.revisions, str)
            else [int(s) for s in self.revisions]
        )
        write_manifest(
            self.results,
            {
                "schema": MANIFEST_SCHEMA,
                "headtrace_version": __version__,
                "updated_at": utc_now(),
                "watch": {
                    "model": self.model_id,
                    "run_id": self.run_id,
                    "revisions": revisions,
                    "total_steps": self.total_steps,
                },
                "config_hash": config.config_hash,
                "config": config.to_dict(),
                "shards": manifest_shards(runs),
            },
        )

    def _prepared(self, adapter) -> ScreenConfig:
        from headtrace.models import check_probe_fits, config_where_model_is  # torch: importing the watcher loads none

        config = config_where_model_is(self.config, adapter)
        if config != self._resolved:
            self._check_one_config(config)
            check_probe_fits(config, adapter.max_positions, adapter.vocab_size)
            bos = getattr(self.tokenizer, "bos_token_id", None) if self.tokenizer is not None else None
            if bos is None:
                bos = getattr(adapter.config, "bos_token_id", None)
            if config.probe.prepend_bos and bos is None:
                raise HeadtraceError(
                    "prepend_bos needs a BOS id: the model's config has none; pass tokenizer= to "
                    "the watcher, or prepend_bos=False"
                )
            self._probe = build_probe(config.probe, lambda: self.tokenizer or _BosOnly(bos))
            self._resolved = config
        return config

    def screen(self, model, step: int, tokens_seen: float | None = None) -> "ScreenResult | None":
        """Screen the model now (whatever the schedule) and write it as revision `stepNNNNNN`;
        returns the tables (None on ranks other than 0)."""
        if not self.active:
            return None
        self._check_open()
        # torch and the model code: importing the watcher loads none
        from headtrace.interop import as_adapter, native_model
        from headtrace.screen import ScreenResult, screen

        self.start()
        started = time.perf_counter()
        model = unwrapped(native_model(model))
        tokens = None if tokens_seen is None else float(tokens_seen)
        name = revision_name(step, self.total_steps)
        with training_state_kept(model):
            adapter = as_adapter(model)
            config = self._prepared(adapter)
            result = screen(adapter, self._probe, config, model_name=self.model_id, revision=name, tokens=tokens)
            run = run_record(result.run, "watch", step=int(step), run_id=self.run_id)
            self.results.write_shard(result.heads, run, result.patterns)
            if self.composition:
                self._compose(model, adapter, result.heads)
        self._runs.append(run.assign(shard=shard_name(self.model_id, name)))
        self._write_manifest()
        self.screened.append({"revision": name, "step": int(step), "tokens": tokens})
        if self.save_at_milestones:
            reached = self._new_milestones(result.heads, run)
            if reached:
                self._save(model, name, step, tokens, reached)
        self.screen_s += time.perf_counter() - started
        return ScreenResult(heads=result.heads, run=run, patterns=result.patterns)

    def _compose(self, model, adapter, heads: pd.DataFrame) -> None:
        """This screen's composition table; at the induction onset (the first screen with an
        induction-circuit head), the ablation drops here and at the previous screen."""
        import copy

        from headtrace.composition import circuit_heads, composition_table

        receivers = circuit_heads(heads)
        onset = self.causal_composition and bool(receivers) and not self._onset_seen
        if onset:
            self._onset_seen = True
            if self._previous is not None:
                self._compose_previous(causal=True, receivers=receivers)
        table = composition_table(adapter, heads, self._probe, self._resolved, causal=onset)
        if len(table):
            self.results.write_table(COMPOSITION, table)
        if self.causal_composition:
            self._previous = (copy.deepcopy(model), heads, onset)

    def _compose_previous(self, causal: bool, receivers: list | None = None) -> None:
        """The previous screen's composition table again, with the ablation drops of `receivers`
        (default: its own induction circuit); nothing when it has no receivers or has them already."""
        from headtrace.composition import composition_table
        from headtrace.interop import as_adapter

        model, heads, done = self._previous
        if done and receivers is None:
            return
        with training_state_kept(model):
            table = composition_table(as_adapter(model), heads, self._probe, self._resolved, causal, receivers)
        if len(table):
            self.results.write_table(COMPOSITION, table)
        self._previous = (model, heads, True)

    def has_screened(self, revisions: Iterable[str], run_id: str | None = None) -> bool:
        """Whether the results folder holds each of these revisions of this model, with this config,
        from the run `run_id` (None: one written before runs had ids)."""
        runs = self.results.existing_runs()
        if "model" not in runs:
            return not list(revisions)
        mine = runs.loc[runs["model"] == self.model_id].set_index("revision")
        return all(
            r in mine.index
            and mine.at[r, "config_hash"] == self.config.config_hash
            and _run_id(mine.at[r, "run_id"] if "run_id" in mine else None) == run_id
            for r in revisions
        )

    def _check_one_config(self, config: ScreenConfig) -> None:
        """Refuse, before training, a folder that holds this model screened with another config (a
        resumed run screens as it did)."""
        runs = self.results.existing_runs()
        hashes = set(runs.loc[runs.model == self.model_id, "config_hash"]) if "model" in runs else set()
        others = sorted(str(h) for h in hashes - {config.config_hash} if isinstance(h, str))
        if others:
            raise HeadtraceError(
                f"'{self.out}' holds {self.model_id} screened with another config ({', '.join(others)}); "
                "pick another results folder or model_id, or screen with that config"
            )

    def _new_milestones(self, heads: pd.DataFrame, run: pd.DataFrame) -> list[str]:
        """The milestones of trajectory.py reached at this revision and at none before it."""
        trajectory = TrajectoryConfig(thresholds=(self._resolved or self.config).thresholds)
        table = milestones(revision_table(heads, run, trajectory), trajectory)
        reached = [
            m for m, r in zip(table.milestone, table.revision) if isinstance(r, str) and m not in self.milestones
        ]
        revision = str(run.revision.iloc[0])
        self.milestones.update({m: revision for m in reached})
        return reached

    def _save(self, model, name: str, step: int, tokens: float | None, reached: list[str]) -> None:
        """The checkpoint, atomically, then the folder's revisions.json (the organism's layout)."""
        folder = self.checkpoint_dir
        folder.mkdir(parents=True, exist_ok=True)

        def write(checkpoint: Path) -> None:
            model.save_pretrained(checkpoint, safe_serialization=True)
            if self.tokenizer is not None and hasattr(self.tokenizer, "save_pretrained"):
                self.tokenizer.save_pretrained(checkpoint)

        atomic_folder(folder / name, write)
        self.saved = [e for e in self.saved if e["revision"] != name]
        self.saved.append({"revision": name, "step": int(step), "tokens": tokens, "milestones": reached})
        write_json_atomic(self.saved, folder / REVISIONS_FILE)


def _run_id(value) -> str | None:
    """A run record's run id; None for one written without (a panel's, or an older watcher's)."""
    return None if value is None or (isinstance(value, float) and value != value) or value is pd.NA else str(value)


def _rank() -> int:
    """This process's rank under torch.distributed (0 when it is not initialised)."""
    if "torch" not in sys.modules:
        return int(os.environ.get("RANK", "0"))
    import torch.distributed  # torch is loaded already (checked above)

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


# --------------------------------------------------------------------------------------------
# The Hugging Face Trainer callback (built on first use: importing this module needs no transformers).


def _metrics(result: "ScreenResult") -> dict[str, float]:
    """The scalars logged per screen."""
    run = result.run.iloc[0]
    return {
        "headtrace/sink_fraction": float(run.sink_fraction),
        "headtrace/best_induction": float(result.heads.sel_induction.max()),
        "headtrace/top1": float(run.top1),
    }


def _calling_trainer():
    """The Trainer whose loop called this callback (callbacks are not handed it), or None."""
    from transformers import Trainer  # importing the watcher loads no transformers

    frame = sys._getframe(2)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


def _sharding(trainer) -> str | None:
    """What shards the model a Trainer trains (FSDP, DeepSpeed ZeRO-3), if anything."""
    if trainer is None:
        return None
    if getattr(trainer, "is_fsdp_enabled", False):
        return "FSDP"
    if getattr(trainer, "is_deepspeed_enabled", False):
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled  # as above

        return "DeepSpeed ZeRO-3" if is_deepspeed_zero3_enabled() else None
    return None


def _build_callback():
    from transformers import TrainerCallback  # importing the watcher loads no transformers

    class HeadtraceCallback(TrainerCallback):
        """Screens the model a `Trainer` trains, at chosen steps, into a results folder.

        `Trainer(..., callbacks=[HeadtraceCallback(out="results/", revisions="log:24", config=ScreenConfig(...))])`

        revisions: "log:N" (over the run's max_steps), "every:K", a list of steps (0: before
        training), or several joined by commas. model_id: the model's name in the tables
        (default: the name of the Trainer's output_dir). tokens_per_step: tokens per optimiser
        step, where the Trainer does not count them (`include_num_input_tokens_seen`); else
        tokens are unknown. save_at_milestones, checkpoint_dir, overwrite, resume: as `Watcher`'s
        (the tokenizer is the Trainer's processing_class; resume=True with the Trainer's
        `resume_from_checkpoint`). log_metrics: log the sink fraction, the best induction
        selectivity and top-1 through the Trainer's `log`. A screen that fails (disk full, a
        diverged model) warns and training goes on. The results folder is locked from the start
        of training to its end.
        """

        def __init__(
            self,
            out: str | Path = "results",
            revisions: Revisions = "log:24",
            config: ScreenConfig = ScreenConfig(),
            model_id: str | None = None,
            save_at_milestones: bool = False,
            checkpoint_dir: str | Path | None = None,
            tokens_per_step: float | None = None,
            log_metrics: bool = True,
            overwrite: bool = False,
            resume: bool = False,
        ):
            config.validate()
            schedule(revisions, 1)  # the syntax, before training (max_steps comes with it); O(1) for "every:K"
            if tokens_per_step is not None and tokens_per_step <= 0:
                raise HeadtraceError(f"tokens_per_step must be positive (got {tokens_per_step})")
            if overwrite and resume:
                raise HeadtraceError(
                    "overwrite=True replaces an earlier run's screens, resume=True keeps them: pass one"
                )
            check_writable(out, "results folder")
            self.out, self.revisions, self.config = Path(out), revisions, config
            self.model_id, self.save_at_milestones, self.checkpoint_dir = model_id, save_at_milestones, checkpoint_dir
            self.tokens_per_step, self.log_metrics = tokens_per_step, log_metrics
            self.overwrite, self.resume = overwrite, resume
            self.watcher: Watcher | None = None
            self._trainer = None

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
            trainer = _calling_trainer()
            self._trainer = weakref.ref(trainer) if trainer is not None else None
            sharded = _sharding(trainer)
            if sharded:
                raise _sharded_error(sharded)
            tokenizer = processing_class if hasattr(processing_class, "bos_token_id") else None
            if self.watcher is not None:
                self.watcher.close()  # a run before this one that did not end
            self.watcher = Watcher(
                self.out,
                self.model_id or Path(args.output_dir or "model").name,
                self.config,
                self.revisions,
                total_steps=state.max_steps if state.max_steps > 0 else None,
                save_at_milestones=self.save_at_milestones,
                checkpoint_dir=self.checkpoint_dir,
                tokenizer=tokenizer,
                rank=0 if state.is_world_process_zero else 1,
                overwrite=self.overwrite,
                resume=self.resume,
            )
            try:
                self.watcher.prepare(model)
            except BaseException:
                self.watcher.close()  # training does not start: the folder is free again
                raise
            if self.watcher.due(state.global_step) and state.global_step == 0:
                self._screen(args, state, model)

        def on_train_end(self, args, state, control, **kwargs):
            if self.watcher is not None:
                self.watcher.close()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if self.watcher is not None and self.watcher.active and self.watcher.due(state.global_step):
                self._screen(args, state, model)

        def _tokens(self, args, state) -> float | None:
            if (
                getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False)
                and state.num_input_tokens_seen
            ):
                return float(state.num_input_tokens_seen)
            return None if self.tokens_per_step is None else float(self.tokens_per_step * state.global_step)

        def _screen(self, args, state, model) -> None:
            try:
                result = self.watcher.screen(model, state.global_step, self._tokens(args, state))
            except HeadtraceError as exc:
                warnings.warn(
                    f"headtrace: the screen at step {state.global_step} failed, training goes on: {exc}", stacklevel=2
                )
                return
            if result is None or not self.log_metrics:
                return
            trainer = self._trainer() if self._trainer is not None else None
            if trainer is not None:
                trainer.log(_metrics(result))
            else:
                state.log_history.append({**_metrics(result), "step": state.global_step})

    HeadtraceCallback.__module__, HeadtraceCallback.__qualname__ = __name__, "HeadtraceCallback"
    return HeadtraceCallback


def __getattr__(name: str):
    if name == "HeadtraceCallback":
        globals()[name] = _build_callback()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
