"""How a panel's tasks run. A task is one (model, revision): fetch its checkpoint, screen it, write
one Parquet shard atomically, run the panel's ablation on it when asked (its own Parquet file, also
atomic), then release the downloaded files (unless they are to be kept).

- `run_local`: tasks in order in this process. While one revision is screened the next one
  downloads in a background thread (one ahead, so at most two revisions are on disk at once).
- `run_ray`: every task is a Ray task (GPUs per task configurable, fractional allowed; retried
  when a worker dies), writing its shard to the shared output directory. Overlap comes from Ray:
  with fractional GPUs, one task downloads while another screens on the same GPU.

Both yield a `TaskResult` per task as it ends, in completion order. A failed task does not stop
the others, except `DiskFull` and failures to write results, which stop the panel.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from headtrace.ablation import AblationConfig, ablate_checkpoint
from headtrace.errors import DiskFull, HeadtraceError
from headtrace.families import tag
from headtrace.models import load_model, load_tokenizer
from headtrace.revisions import Revision
from headtrace.screen import SCHEMA_VERSION, ScreenConfig, build_probe, screen
from headtrace.sources import ByteProgress, Checkpoint, CheckpointSource
from headtrace.store import shard_name, write_shard

ScreenProgress = Callable[[int, int], None]  # (examples just done, examples in total)


@dataclass(frozen=True)
class Task:
    """One (model, revision) of a panel."""

    source: CheckpointSource
    revision: Revision
    screen: bool = True  # screen and write the shard (False: it is already written with this config)
    ablate: bool = False  # then run the panel's ablation on it (reusing the stored screen)

    @property
    def label(self) -> str:
        return f"{self.source.name}@{self.revision.name}"

    @property
    def shard(self) -> str:
        return shard_name(self.source.name, self.revision.name)


@dataclass
class TaskResult:
    """How a task ended: its run record (one row, as written), or an error message."""

    task: Task
    run: dict | None = None  # None when the task only ablated
    error: str | None = None
    fatal: bool = False  # the panel cannot go on (disk full, results not writable)
    ablation: str | None = None  # the verdict, when the task ablated
    ablation_error: str | None = None  # the screen is written but its ablation could not run


class Reporter(Protocol):
    """What a progress display hears from an executor (called from worker threads too)."""

    def downloading(self, label: str) -> ByteProgress: ...

    def screening(self, label: str) -> ScreenProgress: ...

    def finished(self, result: TaskResult) -> None: ...

    def warn(self, message: str) -> None: ...


class QuietReporter:
    """No display (the Python API's default, and inside Ray workers)."""

    def downloading(self, label: str) -> ByteProgress:
        return lambda done, total: None

    def screening(self, label: str) -> ScreenProgress:
        return lambda advance, total: None

    def finished(self, result: TaskResult) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


@dataclass(frozen=True)
class TaskSettings:
    """What every task of a run shares."""

    config: ScreenConfig
    out: str
    keep_checkpoints: bool = False
    ablation: AblationConfig | None = None
    model_configs: tuple[tuple[str, ScreenConfig], ...] = ()  # per-model screen configs (a panel model's dtype)
    members: tuple[tuple[str, str, int], ...] = ()  # (model, family, seed) of seed families' members

    def config_for(self, model: str) -> ScreenConfig:
        return dict(self.model_configs).get(model, self.config)

    def member(self, model: str) -> tuple[str, int] | None:
        """A family member's (family, seed); None for a single model."""
        return next(((family, seed) for name, family, seed in self.members if name == model), None)


def fetch(task: Task, reporter: Reporter) -> Checkpoint | TaskResult:
    """The task's checkpoint on local disk, or the failure as a TaskResult."""
    try:
        return task.source.fetch(task.revision, reporter.downloading(task.label))
    except HeadtraceError as exc:
        return TaskResult(task, error=str(exc), fatal=isinstance(exc, DiskFull))


def complete(task: Task, checkpoint: Checkpoint, settings: TaskSettings, reporter: Reporter) -> TaskResult:
    """Screen a fetched checkpoint, write its shard, release its files (also when it failed)."""
    try:
        return _screen_and_write(task, checkpoint, settings, reporter)
    finally:
        if not settings.keep_checkpoints:
            task.source.release(checkpoint)


def _screen_and_write(
    task: Task, checkpoint: Checkpoint, settings: TaskSettings, reporter: Reporter
) -> TaskResult:
    config = settings.config_for(task.source.name)
    try:
        started = time.perf_counter()
        adapter = load_model(checkpoint.path, dtype=config.dtype, device=config.device)
        load_s = time.perf_counter() - started
        probe = build_probe(config, lambda: load_tokenizer(checkpoint.path))
    except HeadtraceError as exc:
        return TaskResult(task, error=str(exc), fatal=isinstance(exc, DiskFull))
    outcome = _screen(task, checkpoint, settings, reporter, adapter, probe, load_s) if task.screen else TaskResult(task)
    if task.ablate and settings.ablation is not None and not outcome.error:
        try:  # the circuit comes from the screen stored for this config (written just now, or before)
            result = ablate_checkpoint(task.source.name, task.revision.name, config, settings.ablation,
                                       out=settings.out, tokens=task.revision.tokens, adapter=adapter, probe=probe,
                                       progress=reporter.screening(f"{task.label} ablation"))
            outcome.ablation = result.verdict
        except HeadtraceError as exc:
            outcome.ablation_error = str(exc)
            outcome.fatal = isinstance(exc, DiskFull)
    return outcome


def _screen(task: Task, checkpoint: Checkpoint, settings: TaskSettings, reporter: Reporter, adapter, probe,
            load_s: float) -> TaskResult:
    config = settings.config_for(task.source.name)
    try:
        result = screen(
            adapter,
            probe,
            config,
            model_name=task.source.name,
            revision=task.revision.name,
            tokens=task.revision.tokens,
            progress=reporter.screening(task.label),
        )
    except HeadtraceError as exc:
        return TaskResult(task, error=str(exc), fatal=isinstance(exc, DiskFull))
    run = result.run.assign(
        source=checkpoint.source,
        checkpoint_hash=checkpoint.checkpoint_hash,
        downloaded_bytes=checkpoint.downloaded_bytes,
        fetch_s=checkpoint.fetch_s,
        load_s=load_s,
        schema_version=SCHEMA_VERSION,
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    heads, member = result.heads, settings.member(task.source.name)
    if member is not None:
        heads, run = tag(heads, *member), tag(run, *member)
    try:
        write_shard(settings.out, heads, run)
    except HeadtraceError as exc:  # the results directory itself failed: no point going on
        return TaskResult(task, error=str(exc), fatal=True)
    return TaskResult(task, run=run.iloc[0].to_dict())


def run_task(task: Task, settings: TaskSettings, reporter: Reporter | None = None) -> TaskResult:
    """Fetch, screen, write and release one task (what a Ray worker runs)."""
    reporter = reporter or QuietReporter()
    checkpoint = fetch(task, reporter)
    if isinstance(checkpoint, TaskResult):
        return checkpoint
    return complete(task, checkpoint, settings, reporter)


class _Prefetch:
    """Fetches one task's checkpoint in a daemon thread (a stopped panel never waits for a download)."""

    def __init__(self, task: Task, reporter: Reporter):
        self.task = task
        self._outcome: Checkpoint | TaskResult | None = None
        self._thread = threading.Thread(
            target=self._run, args=(reporter,), daemon=True, name=f"headtrace-fetch {task.label}"
        )
        self._thread.start()

    def _run(self, reporter: Reporter) -> None:
        self._outcome = fetch(self.task, reporter)

    def result(self) -> Checkpoint | TaskResult:
        self._thread.join()
        return self._outcome


def run_local(
    tasks: Sequence[Task], settings: TaskSettings, reporter: Reporter, prefetch: bool = True
) -> Iterator[TaskResult]:
    """Run tasks in order here; with `prefetch`, the next one downloads while this one is screened."""
    ahead = _Prefetch(tasks[0], reporter) if prefetch and tasks else None
    for index, task in enumerate(tasks):
        checkpoint = ahead.result() if ahead else fetch(task, reporter)
        upcoming = tasks[index + 1] if index + 1 < len(tasks) else None
        ahead = _Prefetch(upcoming, reporter) if prefetch and upcoming else None
        if isinstance(checkpoint, TaskResult):
            result = checkpoint
        else:
            result = complete(task, checkpoint, settings, reporter)
        reporter.finished(result)
        yield result


@dataclass(frozen=True)
class RayOptions:
    """Where and how Ray runs the tasks."""

    address: str | None = None  # None: start a local cluster for this run
    gpus_per_task: float | None = None  # None: 1 when screening on cuda, else 0
    cpus_per_task: float = 1.0
    max_retries: int = 3  # re-runs of a task whose worker died
    num_cpus: int | None = None  # size of a local cluster (default: all cores)


def run_ray(
    tasks: Sequence[Task], settings: TaskSettings, reporter: Reporter, options: RayOptions
) -> Iterator[TaskResult]:
    """Run every task as a Ray task; results arrive as tasks end. A Ray connection this process
    already has is used as it is; otherwise one is made (and closed at the end)."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        if options.address:
            ray.init(address=options.address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=options.num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False
            )
    gpus = options.gpus_per_task
    if gpus is None:
        gpus = 1.0 if settings.config.device.startswith("cuda") else 0.0
    remote = ray.remote(run_task).options(
        num_gpus=gpus, num_cpus=options.cpus_per_task, max_retries=options.max_retries
    )
    pending = {remote.remote(task, settings): task for task in tasks}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(done[0])
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                result = TaskResult(
                    task, error=f"Ray task failed after {options.max_retries} retries: {_ray_cause(exc)}"
                )
            reporter.finished(result)
            yield result
    finally:
        for ref in pending:
            ray.cancel(ref)
        if started_here:
            ray.shutdown()


def _ray_cause(exc: Exception) -> str:
    """What went wrong inside a Ray task (its own exception when Ray carries one), in one line."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
