"""How a panel's tasks run. A task is one (model, revision): fetch its checkpoint, load it and build
the probe once, run its stages on it (stages.py: the screen writes the shard, then e.g. the
ablation), then release the downloaded files (unless they are to be kept).

- `run_local`: tasks in order in this process. While one revision is screened the next one
  downloads in a background thread (one ahead, so at most two revisions are on disk at once).
- `run_ray`: every task is a Ray task (GPUs per task configurable, fractional allowed; retried
  when a worker dies), writing its shard to the shared output directory. Overlap comes from Ray:
  with fractional GPUs, one task downloads while another screens on the same GPU.

Both yield a `TaskResult` per task as it ends, in completion order. A failed task does not stop
the others, except `DiskFull` and failures to write results, which stop the panel. `EXECUTORS`
finds one by name (`headtrace run --executor`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Sequence

from headtrace.errors import DiskFull, HeadtraceError, ResultsNotWritable
from headtrace.probes import build_probe
from headtrace.registry import Registry
from headtrace.revisions import Revision
from headtrace.schema import ScreenConfig
from headtrace.sources import ByteProgress, Checkpoint, CheckpointSource
from headtrace.stages import CheckpointContext, ScreenStage, Stage
from headtrace.store import ResultsDir, shard_name

ScreenProgress = Callable[[int, int], None]  # (examples just done, examples in total)


@dataclass(frozen=True)
class Task:
    """One (model, revision) of a panel."""

    source: CheckpointSource
    revision: Revision
    stages: tuple[str, ...] = ("screen",)  # the stages to run on it, in order (the others' results are stored)
    weights_warning: str | None = None  # what the listing says of its weights (series.py), for the run record

    @property
    def label(self) -> str:
        return f"{self.source.name}@{self.revision.name}"

    @property
    def shard(self) -> str:
        return shard_name(self.source.name, self.revision.name)


@dataclass
class TaskResult:
    """How a task ended: the screen's run record (one row, as written) or the error that stopped the
    task, and what each later stage said (its summary) or why it did not run."""

    task: Task
    run: dict | None = None  # None when the screen was already stored
    error: str | None = None
    fatal: bool = False  # the panel cannot go on (disk full, results not writable)
    stages: dict[str, str] = field(default_factory=dict)  # stage -> its summary (the ablation's verdict)
    stage_errors: dict[str, str] = field(default_factory=dict)  # stage -> why it did not run


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
    stages: tuple[Stage, ...] = (ScreenStage(),)  # every stage a task may name, by its name
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


def complete(
    task: Task, checkpoint: Checkpoint, settings: TaskSettings, reporter: Reporter, hold: bool = False
) -> TaskResult:
    """Run a fetched checkpoint's stages, then release its files (also when they failed). With `hold`,
    files of a task that ran to its end are left for the caller to `release`."""
    try:
        result = _run_stages(task, checkpoint, settings, reporter)
    except BaseException:
        release(task, checkpoint, settings)
        raise
    if not hold:
        release(task, checkpoint, settings)
    return result


def release(task: Task, checkpoint: Checkpoint, settings: TaskSettings) -> None:
    """Delete the checkpoint's downloaded files, unless the run keeps checkpoints."""
    if not settings.keep_checkpoints:
        task.source.release(checkpoint)


def _run_stages(task: Task, checkpoint: Checkpoint, settings: TaskSettings, reporter: Reporter) -> TaskResult:
    """Load the checkpoint and its probe once; run the task's stages in order. A failed screen ends
    the task; a later stage's failure is recorded and the next stage still runs."""
    from headtrace.models import load_model, load_tokenizer  # torch, when a task runs (planning loads none)

    config = settings.config_for(task.source.name)
    try:
        started = time.perf_counter()
        adapter = load_model(checkpoint.path, dtype=config.dtype, device=config.device)
        load_s = time.perf_counter() - started
        probe = build_probe(config.probe, lambda: load_tokenizer(checkpoint.path))
    except HeadtraceError as exc:
        return TaskResult(task, error=str(exc), fatal=isinstance(exc, DiskFull))
    context = CheckpointContext(
        model=task.source.name,
        revision=task.revision,
        adapter=adapter,
        probe=probe,
        config=config,
        results=ResultsDir(settings.out),
        source=checkpoint.source,
        checkpoint_hash=checkpoint.checkpoint_hash,
        downloaded_bytes=checkpoint.downloaded_bytes,
        fetch_s=checkpoint.fetch_s,
        load_s=load_s,
        member=settings.member(task.source.name),
        weights_warning=task.weights_warning,
        progress=lambda step: reporter.screening(f"{task.label} {step}".strip()),
    )
    stages = {stage.name: stage for stage in settings.stages}
    outcome = TaskResult(task)
    for name in task.stages:
        try:
            result = stages[name].run(context)
        except HeadtraceError as exc:
            if name == ScreenStage.name:  # without its screen, nothing else of this task can run
                return TaskResult(task, error=str(exc), fatal=isinstance(exc, (DiskFull, ResultsNotWritable)))
            outcome.stage_errors[name] = str(exc)
            outcome.fatal = outcome.fatal or isinstance(exc, DiskFull)
            continue
        if name == ScreenStage.name:
            outcome.run = result.record
        else:
            outcome.stages[name] = result.summary
    return outcome


def run_task(task: Task, settings: TaskSettings, reporter: Reporter | None = None) -> TaskResult:
    """Fetch, screen, write and release one task (what a Ray worker runs)."""
    reporter = reporter or QuietReporter()
    checkpoint = fetch(task, reporter)
    if isinstance(checkpoint, TaskResult):
        return checkpoint
    return complete(task, checkpoint, settings, reporter)


class _Prefetch:
    """Fetches one task's checkpoint in a daemon thread. A stopped panel does not wait for it:
    `abandon` releases its files, at once if the download is done or else when it ends (files
    the user keeps are kept; a process that exits first leaves only the hub's partial download)."""

    def __init__(self, task: Task, reporter: Reporter, keep: bool):
        self.task, self.keep = task, keep
        self._outcome: Checkpoint | TaskResult | None = None
        self._abandoned = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, args=(reporter,), daemon=True, name=f"headtrace-fetch {task.label}"
        )
        self._thread.start()

    def _run(self, reporter: Reporter) -> None:
        outcome = fetch(self.task, reporter)
        with self._lock:
            self._outcome, abandoned = outcome, self._abandoned
        if abandoned:
            self._release(outcome)

    def result(self) -> Checkpoint | TaskResult:
        self._thread.join()
        return self._outcome

    def abandon(self) -> None:
        with self._lock:
            self._abandoned, outcome = True, self._outcome
        if outcome is not None:
            self._release(outcome)

    def _release(self, outcome: Checkpoint | TaskResult) -> None:
        if isinstance(outcome, Checkpoint) and not self.keep:
            self.task.source.release(outcome)


@dataclass(frozen=True)
class RayOptions:
    """Where and how Ray runs the tasks."""

    address: str | None = None  # None: start a local cluster for this run
    gpus_per_task: float | None = None  # None: 1 when screening on cuda, else 0
    cpus_per_task: float = 1.0
    max_retries: int = 3  # re-runs of a task whose worker died
    num_cpus: int | None = None  # size of a local cluster (default: all cores)


@dataclass(frozen=True)
class ExecutionOptions:
    """How an executor runs a panel's tasks (each executor reads its own fields)."""

    prefetch: bool = True  # local: download the next revision while this one is screened
    ray: RayOptions = RayOptions()  # ray: where and how


def run_local(
    tasks: Sequence[Task], settings: TaskSettings, reporter: Reporter, options: ExecutionOptions = ExecutionOptions()
) -> Iterator[TaskResult]:
    """Run tasks in order here; with `prefetch`, the next one downloads while this one is screened."""
    keep = settings.keep_checkpoints
    ahead = _Prefetch(tasks[0], reporter, keep) if options.prefetch and tasks else None
    # A screened checkpoint's files stay until the next download ends: weight files the two revisions
    # share are found in the cache, not downloaded again.
    held: tuple[Task, Checkpoint] | None = None
    try:
        for index, task in enumerate(tasks):
            checkpoint = ahead.result() if ahead else fetch(task, reporter)
            if held is not None:
                release(*held, settings)
                held = None
            upcoming = tasks[index + 1] if index + 1 < len(tasks) else None
            ahead = _Prefetch(upcoming, reporter, keep) if options.prefetch and upcoming else None
            if isinstance(checkpoint, TaskResult):
                result = checkpoint
            else:
                result = complete(task, checkpoint, settings, reporter, hold=ahead is not None)
                held = (task, checkpoint) if ahead is not None else None
            reporter.finished(result)
            yield result
    finally:  # the panel stopped early (a fatal error, Ctrl-C): the next download is not kept
        if held is not None:
            release(*held, settings)
        if ahead is not None:
            ahead.abandon()


def run_ray(
    tasks: Sequence[Task], settings: TaskSettings, reporter: Reporter, options: ExecutionOptions = ExecutionOptions()
) -> Iterator[TaskResult]:
    """Run every task as a Ray task; results arrive as tasks end. A Ray connection this process
    already has is used as it is; otherwise one is made (and closed at the end)."""
    import ray  # only for --executor ray

    options = options.ray

    started_here = not ray.is_initialized()
    if started_here:
        if options.address:
            ray.init(address=options.address, log_to_driver=False)
        else:
            ray.init(num_cpus=options.num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False)
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


Executor = Callable[[Sequence[Task], TaskSettings, Reporter, ExecutionOptions], Iterator[TaskResult]]
EXECUTORS: Registry[Executor] = Registry("executor")
EXECUTORS.add("local", run_local)
EXECUTORS.add("ray", run_ray)
