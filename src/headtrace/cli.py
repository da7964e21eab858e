"""The `headtrace` command line. Each command is a thin layer over the stage module it names.

Importing this module loads neither torch nor transformers: the analysis commands (`results`,
`findings`, `report`, `import-reference`) and usage errors start at once; the commands that load a
model import them when they run."""

from __future__ import annotations

import functools
import inspect
import io
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from headtrace import __version__
from headtrace.errors import EXIT_INTERRUPTED, HeadtraceError, WorkFailed

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="When did each attention circuit form? Screen attention heads across training checkpoints.",
)
console = Console(stderr=True)
out_console = Console()


def _print_version(value: bool) -> None:
    if value:
        out_console.print(f"headtrace {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """When did each attention circuit form? Screen attention heads across training checkpoints."""


def _quiet_transformers() -> None:
    """Silence transformers' warnings and its own progress bars (rich draws ours); huggingface_hub's
    download bars, which transformers' switch also turns off, are turned back on."""
    import huggingface_hub
    import transformers
    from transformers import modeling_gguf_pytorch_utils

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    huggingface_hub.utils.enable_progress_bars()
    # The GGUF reader draws a plain tqdm bar; transformers' own tqdm obeys the switch above.
    modeling_gguf_pytorch_utils.tqdm = transformers.utils.logging.tqdm


@contextmanager
def on_interrupt(kept: str, again: str = "resume with") -> Iterator[None]:
    """Ctrl-C ends in one line: what was kept and the command that resumes; exit code 130."""
    try:
        yield
    except KeyboardInterrupt:
        command = shlex.join(["headtrace", *sys.argv[1:]])
        console.print(f"interrupted: {escape(kept)}; {again}: {escape(command)}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None


@contextmanager
def progress_bars(*descriptions: str, waiting: str | None = None) -> Iterator[list[Callable[[int, int], None]]]:
    """Rich progress bars (one display), each appearing with its first update; yields a
    callback(advance, total) per description. Until the first update, `waiting` (e.g. "load the
    model") shows as a pulsing bar with its elapsed time, so a long load never looks stuck."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        pending = [bar.add_task(escape(waiting), total=None)] if waiting else []

        def updater(description: str) -> Callable[[int, int], None]:
            tasks: list = []

            def update(advance: int, total: int) -> None:
                if not tasks:
                    while pending:
                        bar.remove_task(pending.pop())
                    tasks.append(bar.add_task(escape(description), total=total))
                bar.advance(tasks[0], advance)

            return update

        yield [updater(d) for d in descriptions]


@contextmanager
def progress_bar(description: str, waiting: str | None = None) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar that appears with the first update; yields callback(advance, total)."""
    with progress_bars(description, waiting=waiting) as (update,):
        yield update


STRONGEST = 10  # heads the screen's summary lists by default


def times(value: float) -> str:
    """A selectivity, compact: 0.3x, 47.7x, 198x, 6.4e6x."""
    if value != value:  # NaN: not measured
        return "-"
    if value < 100:
        return f"{value:.1f}x"
    if value < 10_000:
        return f"{value:.0f}x"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}x"


def fitted_table(
    title: str, columns: dict[str, dict], rows: list[list[str]], drop: Sequence[str] = (), **options
) -> Table:
    """A table that fits the terminal without cutting a cell short. While its cells, each on one line,
    are wider than the terminal, the columns named in `drop` go, in that order (the caption says
    which); then cells wrap at spaces, and where a cell would still be cut short, every cell folds.
    `columns`: each column's `Table.add_column` options (`no_wrap`: a cell that stays on one line)."""
    names, dropped = list(columns), []

    def build(fold: bool = False) -> Table:
        table = Table(title=title, **options)
        kept = [i for i, name in enumerate(names) if name not in dropped]
        for i in kept:
            table.add_column(names[i], **columns[names[i]] | ({"no_wrap": False, "overflow": "fold"} if fold else {}))
        for row in rows:
            table.add_row(*(row[i] for i in kept))
        if dropped:
            table.caption = f"not shown at {out_console.width} columns: {', '.join(dropped)}"
        return table

    unbounded = out_console.options.update_width(1_000_000)
    table = build()
    while Measurement.get(out_console, unbounded, table).maximum > out_console.width and len(dropped) < len(drop):
        dropped.append(drop[len(dropped)])
        table = build()
    trial = Console(file=io.StringIO(), width=out_console.width, color_system=None)
    trial.print(table)
    return build(fold=True) if "…" in trial.file.getvalue() else table  # rich ends a cut cell with an ellipsis


def print_screen_summary(result, all_heads: bool = False) -> None:
    """A summary that fits a terminal: the strongest labelled heads (every one with `all_heads`),
    the label counts, the circuits, the sink fraction, capability and, where the run record has
    them, the probe's selectivity ceilings (with a warning where a threshold is near one)."""
    import json

    from headtrace.schema import ScreenConfig, ceiling_text

    summary = result.summary()
    run = result.run.iloc[0]
    heads = result.heads
    labelled = heads.loc[heads.label != "unclassified"].sort_values("best_selectivity", ascending=False)
    shown = labelled if all_heads else labelled.head(STRONGEST)
    title = f"{escape(_label(run.model, run.revision))}: " + (
        f"all {len(labelled)} labelled heads"
        if all_heads or len(shown) == len(labelled)
        else f"the {len(shown)} strongest of {len(labelled)} labelled heads (--all: every one)"
    )
    columns = {
        name: {"justify": "left" if name in ("head", "label") else "right", "no_wrap": True}
        for name in ("head", "label", "induction", "previous", "first-token", "sink score", "PR")
    }
    rows = [
        [
            row.head_id,
            row.label,
            times(row.sel_induction),
            times(row.sel_previous),
            times(row.sel_first),
            f"{row.sink_score:.3f}",
            f"{row.pr:.2f}",
        ]
        for row in shown.itertuples()
    ]
    table = fitted_table(title, columns, rows, drop=("PR", "sink score"), title_justify="left")
    if len(shown):
        out_console.print(table)
    counts = labelled.label.value_counts()
    previous = list(heads.loc[heads.previous_circuit, "head_id"])
    lines = [
        f"labels (>= {_threshold(run, 'label_threshold', 30)}x): "
        + (", ".join(f"{label} {count}" for label, count in counts.items()) or "none")
        + f"; {len(heads) - len(labelled)} of {len(heads)} heads unclassified",
        f"induction circuit (>= {_threshold(run, 'induction_threshold', 50)}x): "
        f"{_heads_text(summary['induction_circuit'])}",
        f"previous-token circuit (>= {_threshold(run, 'previous_threshold', 100)}x): {_heads_text(previous)}",
        f"sink heads (first-token >= {_threshold(run, 'sink_threshold', 30)}x): "
        f"{int(run.n_sink_heads)}/{len(heads)} = {summary['sink_fraction']:.1%}",
        f"top-1 at the query: {summary['top1']:.3f}   top-5: {run.top5:.3f}   loss: {run.loss:.3f}   "
        f"({int(run.n_valid)}/{int(run.n_examples)} valid examples, {run.wall_s:.1f} s)",
    ]
    ceilings = {
        c.removeprefix("ceiling_"): run[c] for c in result.run.columns if c.startswith("ceiling_") and run[c] == run[c]
    }  # NaN: no ceiling for that class
    if ceilings:
        lines.append(
            f"selectivity ceilings of this probe ({run.get('baseline', 'reference')} baseline): "
            + ", ".join(f"{cls} {ceiling_text(value)}" for cls, value in ceilings.items())
        )
    out_console.print("\n".join(lines), highlight=False)
    if ceilings:
        warn_ceilings(ScreenConfig.of(**json.loads(run.config_json)), ceilings)
    if summary["underflow_heads"]:
        out_console.print(
            f"[yellow]warning:[/] {summary['underflow_heads']} heads have a baseline below 1e-8 or the smallest "
            f"normal {run.dtype} number: their selectivities are floor ratios, not measurements (column "
            "baseline_underflow)" + ("; screen in float32" if run.dtype != "float32" else "")
        )


def warn_ceilings(config, ceilings: dict[str, float] | None) -> None:
    """Warn where a threshold sits above half of its class's selectivity ceiling."""
    from headtrace.schema import ceiling_warnings

    for message in ceiling_warnings(config, ceilings) if ceilings else ():
        console.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False)


def _threshold(run, key: str, default: float) -> str:
    """A threshold of the screen's config, from the run record's config_json."""
    import json

    value = json.loads(run.config_json).get(key, default) if "config_json" in run else default
    return f"{value:g}"


def _heads_text(heads: list[str], limit: int = 12) -> str:
    if not heads:
        return "none"
    return ", ".join(heads[:limit]) + (f", ... ({len(heads)} heads)" if len(heads) > limit else "")


# Options that `screen` and `ablate` share, defined once.
MODEL = typer.Argument(..., help="Hub id, local directory, or .gguf file.")
REVISION = typer.Option(
    None, help="Hub revision (branch, tag or commit), or the checkpoint subfolder of a local folder of checkpoints."
)
TRUST_REMOTE_CODE = typer.Option(False, help="Let transformers run the model repository's own code.")
CACHE_DIR = typer.Option(None, help="Hub cache folder [HF_HUB_CACHE].")
NAME = typer.Option(None, help="The model's name in tables and file names [the hub id, or a local folder's name].")
# A map of revision names to tokens, for series no built-in scheme reads (docs/revisions.md).
TOKENS_PER_STEP = typer.Option(None, help="Tokens per training step, for a revision name that carries none.")
REVISION_PATTERN = typer.Option(
    None,
    help="Regular expression for revision names no built-in scheme knows: its "
    "group named step (or its only group) is the step, times --tokens-per-step.",
)
REVISION_TOKENS = typer.Option(
    None,
    help="Table of revisions with their tokens: .csv (columns revision, tokens, "
    "step) or .json (a list of {revision, step, tokens}).",
)


# The screen config's options (parameter -> its ScreenConfig field, type and option), shared by every
# command that screens; `with_screen_options` adds them to a command as one `config: ScreenConfig`.
SCREEN_OPTIONS: dict[str, tuple[str, type, object]] = {
    "n_examples": ("n_examples", int, typer.Option(2000, "--n-examples", "-n", help="Probe sequences.")),
    "seq_len": ("seq_len", int, typer.Option(256, help="Probe sequence length T.")),
    "batch_size": (
        "batch_size",
        int,
        typer.Option(16, "--batch-size", "-b", help="Micro-batch size (memory, not results)."),
    ),
    "device": ("device", str, typer.Option("cpu", help="auto (cuda, else mps, else cpu), cpu, cuda[:N] or mps.")),
    "dtype": (
        "dtype",
        str,
        typer.Option("float32", help="auto (the checkpoint's), float32|fp32, bfloat16|bf16 or float16|fp16."),
    ),
    "probe_seed": ("seed", int, typer.Option(42, "--seed", help="Probe seed.")),
    "id_low": ("id_low", int, typer.Option(100, help="Lowest filler token id.")),
    "id_high": ("id_high", int, typer.Option(10000, help="Filler ids are drawn below this.")),
    "prepend_bos": ("prepend_bos", bool, typer.Option(False, help="Prepend the tokenizer's BOS (first token = BOS).")),
    "probe": ("probe", str, typer.Option("synthetic", help="synthetic (reference batch) or natural (needs --texts).")),
    "texts": ("texts", Optional[Path], typer.Option(None, help="Corpus for the natural probe: .txt or .jsonl.")),
    "baseline": (
        "baseline",
        str,
        typer.Option(
            "reference",
            help="reference (the study's 50 positions) or clean "
            "(without each example's own targets: no selectivity ceiling; "
            "docs/definitions.md).",
        ),
    ),
    "keep_patterns": (
        "keep_patterns",
        int,
        typer.Option(
            0, help="Keep each head's attention rows on this many probe examples (`headtrace show`, the report)."
        ),
    ),
}


def with_screen_options(command: Callable) -> Callable:
    """Add the screen config's options to a command, which receives them as one validated `config`."""
    signature = inspect.signature(command)
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
        for name, (_, kind, option) in SCREEN_OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs):
        from headtrace.schema import ScreenConfig

        flat = {field: kwargs.pop(name) for name, (field, _, _) in SCREEN_OPTIONS.items()}
        flat["texts"] = str(flat["texts"]) if flat["texts"] else None
        config = ScreenConfig.of(**flat)
        config.validate()
        return command(config=config, **kwargs)

    own = [p for p in signature.parameters.values() if p.name != "config"]
    wrapper.__signature__ = signature.replace(parameters=own + added)
    return wrapper


def _default_name(model: str) -> str:
    """A hub id as it is; a local folder or file by its own name (not its absolute path)."""
    from headtrace.sources import is_local

    if not is_local(model):
        return model
    path = Path(model).expanduser().resolve()
    return path.stem if path.suffix == ".gguf" else path.name


def _label(model: str, revision: Optional[str]) -> str:
    return model + (f"@{revision}" if revision else "")


@app.command()
@with_screen_options
def screen(
    config,
    model: str = MODEL,
    revision: Optional[str] = REVISION,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write Parquet results into this directory."),
    name: Optional[str] = NAME,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    cache_dir: Optional[Path] = CACHE_DIR,
    all_heads: bool = typer.Option(False, "--all", help="Print every labelled head, not only the strongest."),
    tokens_per_step: Optional[float] = TOKENS_PER_STEP,
    revision_pattern: Optional[str] = REVISION_PATTERN,
    revision_tokens: Optional[Path] = REVISION_TOKENS,
) -> None:
    """Screen one checkpoint: classify every head in one streamed pass."""
    from headtrace.models import preflight
    from headtrace.revisions import NameMap
    from headtrace.screen import screen_checkpoint
    from headtrace.sources import checkpoint_location
    from headtrace.store import check_writable

    _quiet_transformers()
    names = NameMap(tokens_per_step, revision_pattern, NameMap.read_table(revision_tokens) if revision_tokens else ())
    location, hub_revision, tokens = checkpoint_location(model, revision, names)
    cache = str(cache_dir) if cache_dir else None
    with console.status(f"checking {escape(model)}"):
        config, _ = preflight(location, config, hub_revision, trust_remote_code, cache)
    if out:
        check_writable(out)
    name = name or _default_name(model)
    with (
        on_interrupt("nothing was written", again="run it again"),
        progress_bar(f"screen {name}", waiting=f"load {_label(name, revision)}") as advance,
    ):
        result = screen_checkpoint(
            model,
            revision=revision,
            config=config,
            out=str(out) if out else None,
            progress=advance,
            name=name,
            trust_remote_code=trust_remote_code,
            cache_dir=cache,
            tokens=tokens,
        )
    print_screen_summary(result, all_heads)
    if out:
        console.print(f"results written to {out}/", highlight=False, markup=False)


def _train_with_progress(organism, out: Path, label: str, threads: int = 1, watch=None, keep=()):
    """Train one organism with a progress bar; Ctrl-C keeps the finished checkpoints and says so.
    With `watch` (a headtrace.watch.Watcher), its checkpoint steps are screened as it trains.

    The tiny organism trains fastest on one thread, most of all on a busy machine, the code organism
    on two; other thread counts round differently (a stand-in for another machine's kernels)."""
    import json

    import torch

    from headtrace.organism import train
    from headtrace.organism.config import REVISIONS_FILE

    _quiet_transformers()  # its "Writing model shards" bar at every checkpoint would bury ours
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(f"train {label}", total=organism.train.steps, loss="-")

        def on_step(step: int, total: int, loss: float) -> None:
            bar.update(task, completed=step, loss=f"{loss:.3f}")

        try:
            result = train(out, organism, on_step=on_step, watch=watch, keep=keep)
        except KeyboardInterrupt:
            bar.stop()
            listed = out / REVISIONS_FILE
            kept = len(json.loads(listed.read_text())) if listed.is_file() else 0
            screened = f"; {len(watch.screened)} screens in {escape(str(watch.out))}/" if watch is not None else ""
            console.print(
                f"interrupted: {kept} finished checkpoints in {escape(str(out))}/ are usable (listed in "
                f"{REVISIONS_FILE}){screened}; train again with the same settings to start over",
                highlight=False,
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            torch.set_num_threads(previous_threads)
    if result.reused:
        console.print(
            f"{escape(str(out))}/ already holds this organism ({len(result.checkpoints)} checkpoints): reused",
            highlight=False,
        )
    else:
        screened = (
            f", {len(result.screened)} revisions screened during training ({watch.screen_s:.0f} s)"
            if watch is not None
            else ""
        )
        console.print(
            f"trained {label} in {result.wall_s:.0f} s: {len(result.checkpoints)} checkpoints in "
            f"{escape(str(out))}/{screened} "
            f"(final loss {sum(result.losses[-20:]) / len(result.losses[-20:]):.3f})",
            highlight=False,
        )
    return result


ORGANISM_HELP = (
    "tiny (3 x 4, synthetic Zipf corpus, minutes) or code (6 x 6, the standard library's source, half an hour or more)."
)


@app.command("train-organism")
def train_organism(
    organism_name: str = typer.Option("tiny", "--organism", help=ORGANISM_HELP),
    arch: str = typer.Option("dense", help="dense (GPT-NeoX style), llama, or moe (OLMoE style)."),
    steps: Optional[int] = typer.Option(None, help="Training steps (default: the recipe's)."),
    seed: int = typer.Option(0, help="Seed of the initialisation and the data."),
    threads: int = typer.Option(1, min=1, help="Torch threads for training (tiny: 1 is fastest; code: 2)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output directory (default: organisms/ARCH)."),
) -> None:
    """Train a model organism from scratch on the CPU, saving log-spaced Hugging Face checkpoints."""
    from headtrace.organism import ARCHS, preset

    if arch not in ARCHS:
        raise HeadtraceError(f"unknown arch '{arch}'; use one of: {', '.join(ARCHS)}")
    organism = preset(organism_name, arch=arch, seed=seed, steps=steps)
    organism.validate()
    out = out or Path("organisms") / arch
    _train_with_progress(organism, out, arch, threads)
    console.print(
        f'screen it: write a panel with source = "organism", path = "{escape(str(out))}", then headtrace run PANEL',
        highlight=False,
    )


@app.command()
def demo(
    out: Path = typer.Option(
        Path("demo-output"), "--out", "-o", help="Where the organisms, panel, results and report go."
    ),
    organism: str = typer.Option("tiny", help=ORGANISM_HELP),
    compare: bool = typer.Option(False, help="Also train an MoE (OLMoE-style) organism on the same data."),
    steps: Optional[int] = typer.Option(None, help="Training steps (default: the recipe's)."),
    n_examples: int = typer.Option(256, "--n-examples", "-n", help="Probe sequences per checkpoint."),
    seed: int = typer.Option(0, help="Seed of the organisms' initialisation and data."),
    threads: int = typer.Option(1, min=1, help="Torch threads for training."),
    seeds: Optional[int] = typer.Option(
        None,
        "--seeds",
        min=1,
        help="Train N organisms (seeds SEED .. SEED+N-1) as "
        "one seed family and report each finding across seeds; about N times the "
        "plain demo's time (e.g. --seeds 3).",
    ),
    causal: bool = typer.Option(
        False,
        "--causal",
        help="Also F8, causal emergence: keep 8 log-spaced checkpoints and ablate the final induction circuit "
        "at each (about 1 minute more; docs/organism.md).",
    ),
) -> None:
    """Watch circuits form, offline: train the organism, screening it as it trains; ablate the final
    checkpoint, write the report."""
    import time

    from headtrace.organism.demo import run_demo

    started = time.perf_counter()

    def train(organism, folder: Path, model: str, watch=None, keep=()):
        return _train_with_progress(organism, folder, model, threads, watch=watch, keep=keep)

    def run_panel_file(panel: Path, results: Path) -> None:
        _run_panel_file(panel, results, threads=threads)

    outcome = run_demo(
        out,
        train,
        run_panel_file,
        compare=compare,
        steps=steps,
        n_examples=n_examples,
        seed=seed,
        seeds=seeds,
        causal=causal,
        organism=organism,
    )
    paths = outcome.paths
    _print_finding_lines(outcome.findings)
    console.print(f"findings: {escape(str(paths.results / 'findings.md'))}", highlight=False)
    console.print(
        f"[bold]demo finished in {time.perf_counter() - started:.0f} s.[/] Open the report: "
        f"[bold]{escape(str(outcome.report.resolve()))}[/]\nre-screen with: headtrace run "
        f"{escape(str(paths.panel))} --out {escape(str(paths.results))}",
        highlight=False,
    )


def _print_finding_lines(table) -> None:
    """The demo's summary: per model (per family with --seeds, across its seeds) one line per finding,
    its statement cut at the terminal's width; findings.md and the report hold them whole."""
    from headtrace.family_findings import family_rows, model_rows

    rows, key = family_rows(table), "family"
    if rows.empty:
        rows, key = model_rows(table), "model"
    for name, group in rows.groupby(key, sort=False):
        out_console.print(f"[bold]{escape(name)}[/]", highlight=False)
        for row in group.itertuples():
            out_console.print(
                f"  {escape(row.finding)} {escape(row.title)}: {_status(row.status)} - {escape(row.statement)}",
                no_wrap=True,
                overflow="ellipsis",
                highlight=False,
            )


def print_ablation(result) -> None:
    """The conditions' metrics (the matched-random draws as mean and 2.5-97.5 percentile range, as
    the report shows them), the deciding metric, the differential and the verdict."""
    import json

    from headtrace.ablation import MIN_TOP1
    from headtrace.schema import random_draws_summary

    table = result.table
    first = table.iloc[0]
    title = escape(f"{first.model} {first.revision}".strip() + f": ablating {first.circuit} ({first['mode']})")
    metrics = ("top1", "top5", "loss", "mean_logit_answer")
    names = [
        name + ("*" if metric == first.decided_by else "")
        for name, metric in zip(("top-1", "top-5", "loss", "logit"), metrics)
    ]
    # Numbers stay whole; the heads wrap between ids.
    columns = {"condition": {}, "heads": {}, **{name: {"justify": "right", "no_wrap": True} for name in names}}
    rows: list[list[str]] = []

    def add(label: str, heads: str, values) -> None:
        rows.append([label, heads.replace(",", ", "), *values])

    for row in table.itertuples():
        if row.condition == "random":
            continue
        add(row.condition, row.heads or "-", [f"{getattr(row, m):.3f}" for m in metrics])
        if row.condition == "circuit":
            random = table[table.condition == "random"]
            heads = f"{len(random)} draws, {int(random.n_ablated.iloc[0])} heads each"
            summaries = [random_draws_summary(random[m]) for m in metrics]
            add("random (mean)", heads, [f"{mean:.3f}" for mean, _, _ in summaries])
            add("random (95%)", "", [f"{low:.3f}-{high:.3f}" for _, low, high in summaries])
    shown = fitted_table(title, columns, rows)
    shown.caption = "* the deciding metric; 95%: the draws' 2.5-97.5 percentiles"
    out_console.print(shown)
    shortfall = int(table.shortfall.max())
    if shortfall:
        console.print(
            f"[bold yellow]shortfall:[/] the circuit's layers hold too few other heads: each matched-random "
            f"set has {shortfall} head(s) fewer than the circuit (column shortfall), which favours "
            "'necessary'",
            highlight=False,
        )
    style = "green" if first.verdict == "necessary" else "yellow"
    chosen = json.loads(first.config_json).get("metric", "auto")
    why = (
        f"set by --metric {chosen}"
        if chosen != "auto"
        else f"clean top-1 {table.top1.iloc[0]:.3f} {'>=' if first.decided_by == 'top1' else '<'} {MIN_TOP1:g}"
    )
    out_console.print(f"deciding metric: {first.decided_by} ({why})", highlight=False)
    out_console.print(
        f"differential ({first.decided_by}; damage(circuit) - damage(random)): {first.differential:+.4f} "
        f"[{first.differential_low:+.4f}, {first.differential_high:+.4f}] (95% bootstrap over examples and draws) "
        f"-> [{style}]{first.verdict}[/]   (circuit: {first.circuit_heads}, from {result.circuit_source}; "
        f"{int(first.n_examples)} examples, {result.wall_s:.1f} s)",
        highlight=False,
    )


@app.command()
@with_screen_options
def ablate(
    config,
    model: str = MODEL,
    circuit: str = typer.Option(
        ...,
        help="induction, previous-token (best class previous-token, >= 100x), "
        "previous-token-any (>= 100x), sink (the screen's all-head sets); final:<set> (that set "
        "at the model's last revision screened in --out: F8, causal emergence); pr-top:K (the K "
        "heads of highest time-integrated PR over the revisions in --out); or heads like "
        "L2H11,L4H12.",
    ),
    revision: Optional[str] = REVISION,
    draws: int = typer.Option(
        20,
        "--draws",
        "--seeds",
        help="Matched-random head sets (same layers, same count per layer), each drawn with its own seed.",
    ),
    mode: str = typer.Option("zero", help="zero, or mean (the head's mean output over the probe)."),
    seed: int = typer.Option(0, "--ablation-seed", help="Seed of the random draws and the bootstrap."),
    n_bootstrap: int = typer.Option(2000, help="Bootstrap resamples for the differential's interval."),
    singles: bool = typer.Option(True, help="Also ablate each circuit head alone."),
    metric: str = typer.Option(
        "auto", help="Deciding metric: top1 or loss [auto: top1 when the clean top-1 is >= 0.1, else loss]."
    ),
    stack: int = typer.Option(8, help="Conditions per forward pass (memory, not results)."),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="Results directory: reads a stored screen from it and writes ablations/<model>@<revision>.parquet.",
    ),
    name: Optional[str] = NAME,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    cache_dir: Optional[Path] = CACHE_DIR,
) -> None:
    """Ablate a circuit against matched-random heads: is the circuit necessary?"""
    from headtrace.ablation import AblationConfig, ablate_checkpoint
    from headtrace.models import preflight
    from headtrace.schema import parse_circuit
    from headtrace.sources import checkpoint_location
    from headtrace.store import ResultsDir, check_writable

    _quiet_transformers()
    ablation = AblationConfig(
        circuit=circuit,
        draws=draws,
        mode=mode,
        seed=seed,
        n_bootstrap=n_bootstrap,
        singles=singles,
        stack=stack,
        metric=metric,
    )
    ablation.validate()
    name = name or _default_name(model)
    spec = parse_circuit(circuit)
    if spec.final:  # the final circuit comes from --out: read it before any model loads
        if out is None:
            raise HeadtraceError(
                f"--circuit {circuit} takes the set at {name}'s last revision screened in a results folder: "
                "pass --out DIR"
            )
        ResultsDir(out).final_circuit(name, spec.head_set)
    location, hub_revision, _ = checkpoint_location(model, revision)
    cache = str(cache_dir) if cache_dir else None
    with console.status(f"checking {escape(model)}"):
        config, _ = preflight(location, config, hub_revision, trust_remote_code, cache, circuit=circuit)
    if out:
        check_writable(out)
    with (
        on_interrupt("nothing was written", again="run it again"),
        progress_bars(f"screen {name}", "ablate", waiting=f"load {_label(name, revision)}") as (screening, ablating),
    ):
        result = ablate_checkpoint(
            model,
            revision,
            config,
            ablation,
            out=out,
            screen_progress=screening,
            progress=ablating,
            name=name,
            trust_remote_code=trust_remote_code,
            cache_dir=cache,
        )
    print_ablation(result)
    if out:
        console.print(f"results written to {out}/ablations/", highlight=False, markup=False)


def _status(status: str) -> str:
    """A finding's status in its colour; a family's ('holds in 8/9') in its leading outcome's."""
    style = STATUS_STYLE.get(status.split(" in ")[0])
    return f"[{style}]{escape(status)}[/]" if style else escape(status)


STATUS_STYLE = {
    "holds": "green",
    "does not hold": "yellow",
    "not measurable": "dim",
    "sharp": "cyan",
    "gradual": "cyan",
    "as expected": "green",
    "differs": "yellow",
    "before formation": "cyan",  # F8's orders
    "with formation": "cyan",
    "after formation": "cyan",
    "cannot be ordered on this grid": "dim",
}


@app.command()
def findings(
    results: Path = typer.Argument(..., help="Results directory (from screen, run or import-reference)."),
    sharp_share: Optional[float] = typer.Option(
        None, help="F2: sharp when the largest adjacent-revision jump is >= this share of the total rise [0.5]."
    ),
    early_share: Optional[float] = typer.Option(
        None, help="F4: early when recall reaches 2/3 within this share of training tokens [0.1]."
    ),
    pr_rise_fraction: Optional[float] = typer.Option(
        None, help="F5: PR is elevated at this fraction of its largest rise above its running minimum [0.5]."
    ),
    panel: Optional[Path] = typer.Option(
        None,
        help='Panel file whose models state expected results (expect = { F2 = "gradual" }); kept in '
        "RESULTS/expect.json for later calls and the report.",
    ),
) -> None:
    """Findings per model (F1-F9 and any installed) and per seed family; writes findings.parquet and findings.md."""
    from headtrace.findings import write_findings
    from headtrace.trajectory import TrajectoryConfig

    expect = None
    if panel is not None:
        from headtrace.panel import load_panel

        expect = load_panel(panel).expectations
    options = {"sharp_share": sharp_share, "early_share": early_share, "pr_rise_fraction": pr_rise_fraction}
    with console.status(f"computing the findings of {escape(str(results))}"):
        table = write_findings(results, TrajectoryConfig(**{k: v for k, v in options.items() if v is not None}), expect)
    models = [row.model if isinstance(row.model, str) else f"{row.family} (across seeds)" for row in table.itertuples()]
    single = len(set(models)) == 1  # then the title names the model, and the statements have its column's width
    shown = Table(
        title=f"findings: {escape(str(results))}" + (f" ({escape(models[0])})" if single else ""), show_lines=True
    )
    # The statements take what the other columns leave, and wrap.
    if not single:
        shown.add_column("model", overflow="fold", ratio=1)
    shown.add_column("finding", max_width=16)
    shown.add_column("status", no_wrap=True)
    shown.add_column("statement", overflow="fold", ratio=3)
    for model, row in zip(models, table.itertuples()):
        cells = [escape(f"{row.finding} {row.title}"), _status(row.status), escape(row.statement)]
        shown.add_row(*([] if single else [escape(model)]), *cells)
    out_console.print(shown)
    console.print(f"written: {results / 'findings.parquet'}, {results / 'findings.md'}", highlight=False, markup=False)


@app.command("import-reference")
def import_reference(
    files: list[Path] = typer.Argument(..., help="Reference screen_*.json files and pr_trajectory.json files."),
    out: Path = typer.Option(..., "--out", "-o", help="Results directory to write the shards into."),
) -> None:
    """Import the reference implementation's JSON results as a headtrace results directory."""
    import pandas as pd

    from headtrace.reference import import_reference as convert
    from headtrace.reference import provenance

    def warn(message: str) -> None:
        console.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)

    with console.status(f"importing {len(files)} reference files"):
        written = convert(files, out, warn)
    runs = pd.concat([pd.read_parquet(path) for path in written], ignore_index=True)
    for line in provenance(runs):
        console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"imported {len(written)} revisions into {out}/; next: headtrace findings {out}", highlight=False, markup=False
    )


@app.command()
def report(
    results: Path = typer.Argument(..., help="Results directory (from screen, run or import-reference)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Report folder [RESULTS/report]."),
) -> None:
    """One self-contained HTML page of the panel's trajectories and findings, plus each figure as PNG and SVG."""
    from headtrace.report import build_report

    with console.status(f"drawing the report of {escape(str(results))}"):
        page = build_report(results, out)
    console.print(
        f"report written: {page} (figures as PNG and SVG in {page.parent / 'figures'}/)", highlight=False, markup=False
    )


def _bytes_text(size: float) -> str:
    from rich.filesize import decimal

    return decimal(int(size))


@app.command("revisions")
def revisions_command(
    model: str = typer.Argument(..., help="Hub id, or a local folder with one checkpoint subfolder per revision."),
    log: int = typer.Option(10, "--log", min=1, help="Print the panel-ready log:N selection for this N."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON (stdout) instead."),
    tokens_per_step: Optional[float] = typer.Option(
        None, help="Tokens per training step, for names headtrace cannot read tokens from."
    ),
    attempts: int = typer.Option(6, min=1, help="Tries per hub request before the hub counts as unreachable."),
) -> None:
    """List a checkpoint series before downloading it: steps, tokens, weight sizes, duplicates."""
    import json

    from headtrace.errors import HubUnreachable
    from headtrace.revisions import NameMap
    from headtrace.series import list_series
    from headtrace.sources import HubSource, LocalSource, RetryPolicy, is_local

    names = NameMap(tokens_per_step=tokens_per_step)
    if is_local(model):
        folder = Path(model).expanduser()
        from headtrace.organism.config import REVISIONS_FILE

        source = LocalSource(str(folder), model=model, names=names, organism=(folder / REVISIONS_FILE).is_file())
        console.print(
            f"{escape(model)} is a local folder: its weights are hashed, which reads every byte", highlight=False
        )
        with progress_bars("hash the weight files", waiting="list the revisions") as (hashed,):
            found = list_series(source, on_bytes=hashed)
    else:
        source = HubSource(model, names, RetryPolicy(attempts=attempts))
        with progress_bar(f"list the revisions of {model}", waiting="ask the hub for the refs") as listed:
            try:
                found = list_series(source, progress=listed)
            except HubUnreachable as exc:
                raise HubUnreachable(f"{exc} (no cached listing of {model} to show)") from None
    if not found.listed:
        raise HeadtraceError(f"'{model}' has no revisions with weight files")
    if as_json:
        out_console.print_json(json.dumps(found.to_json(log)))
    else:
        _print_series(found, log)
    if found.from_cache:
        raise HubUnreachable(f"{found.error}; the listing above is the offline cache's answer")


def _print_series(found, log: int) -> None:
    """`headtrace revisions`: the table, the duplicates and the panel-ready selection."""
    aliases: dict[str, list[str]] = {}
    for alias, target in found.aliases.items():
        aliases.setdefault(target, []).append(alias)
    marks: dict[str, list[str]] = {}
    for dup in found.duplicates:
        short = {"identical": "= {}", "equal_to_final": "= final {}", "shares_files": "shares files with {}"}
        marks.setdefault(dup.revision, []).append(short[dup.kind].format(dup.of))
    right = {"justify": "right", "no_wrap": True}
    columns = {
        "revision": {"overflow": "fold"},
        "step": right,
        "tokens": right,
        "weights": right,
        "files": right,
        "aliases": {"overflow": "fold"},
        "duplicates": {"overflow": "fold"},
    }
    rows = [
        [
            escape(e.name) + (" (final)" if e.name == found.final else ""),
            "" if e.revision.step is None else str(e.revision.step),
            "" if e.revision.tokens is None else _tokens_text(e.revision.tokens),
            _bytes_text(e.size),
            str(len(e.files)),
            escape(", ".join(sorted(aliases.get(e.name, [])))),
            escape("; ".join(marks.get(e.name, []))),
        ]
        for e in found.listed
    ]
    total = sum(e.size for e in found.listed)
    title = f"{escape(found.model)}: {len(found.listed)} revisions, {_bytes_text(total)} of weights"
    out_console.print(fitted_table(title, columns, rows, drop=["aliases", "duplicates", "step"]))
    for dup in found.duplicates:
        color = "yellow" if dup.kind == "identical" else "bold red"
        out_console.print(f"[{color}]duplicate:[/] {escape(dup.text())}", highlight=False)
    selection = found.log_selection(log)
    out_console.print(
        f"# log:{log} of {escape(found.model)}\nrevisions = [" + ", ".join(f'"{escape(n)}"' for n in selection) + "]",
        highlight=False,
        soft_wrap=True,
    )


class RunProgress:
    """The `run` command's live display: the panel, the task being screened, the download under way."""

    def __init__(self, progress: Progress, name: str, threads: int = 1):
        self.progress, self.name, self.threads = progress, name, threads
        # Listing revisions asks the hub (retried when it fails): a pulsing bar until the plan stands.
        self.planning = progress.add_task(f"list the revisions of {escape(name)}", total=None, info="")

    def train(self, organism, folder: Path, model: str):
        """Train an organism the panel asks for (`train = true`) with its own bar, this display paused."""
        live = self.progress.live
        kept, live.transient = live.transient, True  # stopped, it leaves nothing behind
        self.progress.update(self.planning, visible=False)
        self.progress.stop()
        try:
            return _train_with_progress(organism, folder, model, self.threads)
        finally:
            self.progress.start()
            self.progress.update(self.planning, visible=True)
            live.transient = kept

    def start(self, plan) -> None:
        self.progress.remove_task(self.planning)
        if plan.stale_lock:
            console.print(f"took over the lock of a run that died (pid {plan.stale_lock.get('pid')})", markup=False)
        done, todo = len(plan.skipped), len(plan.computed) + len(plan.recomputed)
        console.print(
            f"{escape(self.name)}: {len(plan.planned)} revisions, {done} already done, {todo} to screen"
            + (f" ({len(plan.recomputed)} written with another config)" if plan.recomputed else "")
            + (
                f", {len(plan.copies)} with the same weights as another (tables taken, nothing downloaded)"
                if plan.copies
                else ""
            )
            + "".join(
                f", {len(t.todo)} to run {name}" + (f" ({len(t.kept)} done)" if t.kept else "")
                for name, t in plan.stages.items()
                if t.todo or t.kept
            )
        )
        for gap in plan.missing:
            console.print(f"[yellow]missing:[/] {escape(gap.text())}", highlight=False)
        for note in plan.notes:
            console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
        for shard, warning in plan.warnings.items():
            console.print(f"[bold red]weights warning:[/] {escape(warning)}", highlight=False)
        self.done, self.total = done + len(plan.copies), len(plan.planned)
        self.panel = self.progress.add_task(
            f"panel {self.name}", total=self.total, completed=done, info=f"{done}/{self.total} revisions"
        )
        self.screen = self.progress.add_task("screen", total=None, visible=False, info="")
        self.download = self.progress.add_task("download", total=None, visible=False, info="")

    def downloading(self, label: str):
        from rich.filesize import decimal

        self.progress.reset(self.download, description=f"download {label}", total=None, visible=True, info="")

        def update(done: int, total: int) -> None:
            info = f"{decimal(done)}/{decimal(total)}"
            self.progress.update(self.download, completed=done, total=total, info=info)

        return update

    def screening(self, label: str):
        self.progress.reset(self.screen, description=f"screen {label}", total=None, visible=True, info="")
        done = 0

        def update(advance: int, total: int) -> None:
            nonlocal done
            done += advance
            self.progress.update(self.screen, completed=done, total=total, info=f"{done}/{total} examples")

        return update

    def finished(self, result) -> None:
        self.done += "screen" in result.task.stages  # a revision whose screen was kept counted as done at the start
        self.progress.update(self.panel, completed=self.done, info=f"{self.done}/{self.total} revisions")
        if result.error:
            message = f"[red]failed[/] {escape(result.task.label)}: {escape(result.error)}"
            self.progress.console.print(message, highlight=False)

    def warn(self, message: str) -> None:
        self.progress.console.print(f"[bold red]WARNING:[/] {escape(message)}", highlight=False)


@app.command()
def run(
    panel: Path = typer.Argument(..., help="Panel file (TOML): models, revisions, screen config."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Results directory (default: results/<panel name>)."),
    executor: str = typer.Option("local", help="local (this process) or ray."),
    address: Optional[str] = typer.Option(None, help="Ray cluster to attach to (default: start one here)."),
    keep_checkpoints: bool = typer.Option(False, help="Keep downloaded checkpoints in the hub cache."),
    prefetch: bool = typer.Option(True, help="Download the next revision while screening (local executor)."),
    gpus_per_task: Optional[float] = typer.Option(
        None, help="Ray: GPUs per task, fractions allowed (default: 1 on cuda, else 0)."
    ),
    cpus_per_task: float = typer.Option(1.0, help="Ray: CPUs per task."),
    max_retries: int = typer.Option(3, help="Ray: re-runs of a task whose worker died."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan (downloads, bytes, what is skipped and why); download nothing."
    ),
    max_workers: Optional[int] = typer.Option(
        None, min=1, help="Weight files of one revision downloaded side by side (default: the panel's [run], 4)."
    ),
) -> None:
    """Screen every (model, revision) of a panel; re-running resumes where it stopped."""
    from headtrace.executors import RayOptions

    if dry_run:
        _print_dry_run(panel, out)
        return

    ray = RayOptions(address=address, gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task, max_retries=max_retries)
    _run_panel_file(
        panel,
        out,
        executor=executor,
        keep_checkpoints=keep_checkpoints,
        prefetch=prefetch,
        ray=ray,
        max_workers=max_workers,
    )


def _print_dry_run(panel: Path, out: Optional[Path]) -> None:
    """`run --dry-run`: the plan from the listings, one row per (model, revision)."""
    from headtrace.panel import dry_run, load_panel

    spec = load_panel(panel)
    out = out or Path("results") / spec.name
    with console.status(f"list the revisions of {escape(spec.name)}'s models"):
        rows = dry_run(spec, out)
    unknown = any(r.bytes is None for r in rows if r.action == "download")
    columns = {
        "model": {"overflow": "fold"},
        "revision": {"overflow": "fold"},
        "action": {},
        "weights": {"justify": "right"},
        "why": {"overflow": "fold"},
    }
    table_rows = [
        [
            escape(r.model),
            escape(r.revision),
            r.action,
            "?" if r.bytes is None else (_bytes_text(r.bytes) if r.bytes else ""),
            escape(r.why),
        ]
        for r in rows
    ]
    downloads = [r for r in rows if r.action == "download"]
    total = sum(r.bytes or 0 for r in downloads)
    title = (
        f"{escape(spec.name)}: {len(downloads)} revisions to download ({_bytes_text(total)}"
        + (" and sizes unknown before fetching" if unknown else "")
        + f"), {sum(r.action == 'same weights' for r in rows)} with the same weights as another, "
        f"{sum(r.action == 'kept' for r in rows)} already screened in {escape(str(out))}"
    )
    out_console.print(fitted_table(title, columns, table_rows, drop=["why"]))
    console.print("dry run: nothing was downloaded, trained or written", highlight=False)


def _run_panel_file(
    panel: Path,
    out: Optional[Path],
    executor: str = "local",
    keep_checkpoints: bool = False,
    prefetch: bool = True,
    ray=None,
    threads: int = 1,
    max_workers: Optional[int] = None,
) -> None:
    """`headtrace run` (the demo runs its panel file through it too); `threads`: torch threads of the
    organisms it trains (`train = true`)."""
    from headtrace.executors import RayOptions
    from headtrace.panel import load_panel, run_panel
    from headtrace.schema import planned_ceilings

    _quiet_transformers()
    spec = load_panel(panel)
    if max_workers is not None:
        import dataclasses

        spec = dataclasses.replace(spec, max_workers=max_workers)
    out = out or Path("results") / spec.name
    warn_ceilings(spec.screen, planned_ceilings(spec.screen))
    kept = f"finished revisions in {out}/ are kept and a re-run skips them"
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with on_interrupt(kept), Progress(*columns, console=console) as progress:
        display = RunProgress(progress, spec.name, threads)
        result = run_panel(
            spec,
            out,
            executor=executor,
            keep_checkpoints=keep_checkpoints,
            prefetch=prefetch,
            ray=ray or RayOptions(),
            reporter=display,
            on_start=display.start,
            train_one=display.train,
        )
    for model, revision, same in result.identical:
        console.print(
            f"[bold red]WARNING: identical weights:[/] {escape(model)} {escape(revision)} has the same "
            f"weight files as {escape(same)}; the source may serve the wrong checkpoint for one of them "
            "(cf. Pythia issue #205)",
            highlight=False,
        )
    for suspect in result.suspects:
        console.print(f"[bold red]WARNING: suspect:[/] {escape(suspect.text())}", highlight=False)
    console.print(
        f"results in {out}/ ({len(result.written)} screened, {len(result.skipped)} kept"
        + (f", {len(result.copied)} taken from identical weights" if result.copied else "")
        + "".join(f", {len(t.done)} {name} done" for name, t in result.stages.items() if t.done)
        + f"); summary: headtrace results {out}",
        highlight=False,
        markup=False,
    )
    for name, tally in result.stages.items():
        for label, error in tally.failed.items():
            console.print(f"[bold yellow]{name} not run[/] for {escape(label)}: {escape(error)}", highlight=False)
    if result.stopped_by:
        raise WorkFailed(
            f"the panel stopped at {result.stopped_by} (re-run the same command once "
            "that is fixed: finished revisions are kept)"
        )
    failed = [
        f"{len(result.failed)} of {len(result.planned)} revisions failed ({', '.join(result.failed)})"
        if result.failed
        else ""
    ]
    failed += [f"{name} did not run for {', '.join(t.failed)}" for name, t in result.stages.items() if t.failed]
    if any(failed):
        raise WorkFailed(
            "; ".join(f for f in failed if f) + "; fix the cause and re-run the same command: "
            "finished revisions are kept"
        )


def _tokens_text(tokens: float) -> str:
    """Tokens as the findings and the report write them (empty when unknown)."""
    from headtrace.trajectory import tokens_label

    return tokens_label(tokens) if tokens == tokens else ""


def _revision_cells(model: str, revision: str, heads, row) -> list[str]:
    """One revision's summary: model, revision, tokens, top-1, induction heads, sink heads, underflow."""
    circuit = list(heads.loc[heads.induction_circuit, "head_id"])
    shown = ", ".join(circuit[:4]) + (", ..." if len(circuit) > 4 else "")
    top1 = "-" if row.top1 != row.top1 else f"{row.top1:.3f}"  # NaN: not measured (imported reference results)
    return [
        escape(model),
        escape(revision),
        _tokens_text(row.tokens),
        top1,
        f"{len(circuit)} ({shown})" if circuit else "0",
        f"{int(heads.sink.sum())}/{len(heads)} = {heads.sink.mean():.1%}",
        str(int(heads.baseline_underflow.sum())),
    ]


@app.command()
def show(
    results: Path = typer.Argument(..., help="Results directory."),
    head: str = typer.Argument(..., help="The head, as L<layer>H<head> (e.g. L4H4)."),
    model: Optional[str] = typer.Option(None, help="The model, where the folder holds several."),
    revision: Optional[str] = typer.Option(None, help="The revision whose attention is shown [the last one stored]."),
) -> None:
    """One head: its top attended positions on the kept probe examples, its six selectivities and its trajectory."""
    from headtrace.headview import open_results

    found = open_results(results).head(head, model)
    if revision is not None:
        found.at(revision)  # an unknown revision is an error
    out_console.print(found.text(revision), highlight=False, markup=False, soft_wrap=True)


@app.command()
def results(
    out: Path = typer.Argument(..., help="Results directory written by `headtrace run` or `screen --out`."),
    save: Optional[Path] = typer.Option(
        None, help="Also save the one-table view: .parquet, .csv or .json (the extension names the format)."
    ),
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="Then keep watching: print each revision as it is "
        "screened (a training run's HeadtraceCallback or Watcher, or a panel); Ctrl-C ends.",
    ),
    interval: float = typer.Option(1.0, min=0.01, help="--follow: seconds between looks at the runs folder."),
    timeout: Optional[float] = typer.Option(None, min=0, help="--follow: stop after this many seconds (exit 0)."),
) -> None:
    """Load a results directory into one table and print a summary per model and revision."""
    from headtrace.store import check_save_path, load_results, save_table, weight_flags

    if save and follow:
        raise HeadtraceError("--save writes the table once: run it without --follow")
    if save:
        check_save_path(save)
    if follow:
        _follow(out, interval, timeout)
        return
    table = load_results(out)
    runs = table.drop_duplicates(["model", "revision"])
    single = runs.model.nunique() == 1  # then the title names the model
    title = (
        f"{escape(str(out))}: {len(runs)} revisions"
        + (f" of {escape(runs.model.iloc[0])}" if single else "")
        + (f", {len(table)} heads")
    )
    right = {"justify": "right", "no_wrap": True}
    columns = {
        "model": {"overflow": "fold"},
        "revision": {"overflow": "fold"},
        "tokens": right,
        "top-1": right,
        "induction heads": {},
        "sink heads": {},
        "underflow": right,
        "same weights as": {"overflow": "fold"},
        "weights warning": {"overflow": "fold"},
    }
    flags = weight_flags(out, runs)
    rows = [
        [
            *_revision_cells(model, revision, heads, heads.iloc[0]),
            escape(same) if isinstance(same, str) else "",
            escape(flags.get((model, revision), "")),
        ]
        for (model, revision), heads in table.groupby(["model", "revision"], sort=False)
        for same in [heads.same_weights_as.iloc[0]]
    ]
    if single:
        del columns["model"]
        rows = [row[1:] for row in rows]
    # Columns with nothing to say go first when the terminal is narrow.
    empty = [
        name
        for name, nothing in (
            ("weights warning", not flags),
            ("same weights as", runs.same_weights_as.isna().all()),
            ("underflow", not table.baseline_underflow.any()),
        )
        if nothing
    ]
    out_console.print(fitted_table(title, columns, rows, drop=empty))
    if runs.same_weights_as.notna().any():
        console.print(
            "[bold red]WARNING:[/] some revisions have identical weight files (column "
            "same_weights_as): the source may serve the wrong checkpoint for them"
        )
    if flags:
        console.print(
            f"[bold red]WARNING:[/] {len(flags)} revisions have a weights warning (column weights warning): "
            "weight files shared with another revision, equal to the final one, or heads closer to a far "
            "revision than to their neighbours (docs/reliability.md)"
        )
    if save:
        save_table(table, save)
        console.print(f"saved {len(table)} rows to {save}", highlight=False, markup=False)


def _follow(out: Path, interval: float, timeout: Optional[float]) -> None:
    """`results --follow`: one line per revision, the finished ones first, then each new one as its
    run record appears (written last, so its heads table is complete)."""
    from headtrace.store import HEADS, RUNS, new_shards, read_table

    shown: set[str] = set()

    def show(name: str) -> None:
        try:
            run = read_table(out / RUNS / name).iloc[0]
            heads = read_table(out / HEADS / name)
        except (HeadtraceError, FileNotFoundError) as exc:
            console.print(f"[yellow]skipped[/] {escape(name)}: {escape(str(exc))}", highlight=False)
        else:
            cells = _revision_cells(str(run.model), str(run.revision), heads, run)
            out_console.print(
                "  ".join(
                    [
                        cells[0],
                        cells[1],
                        f"tokens {cells[2] or '-'}",
                        f"top-1 {cells[3]}",
                        f"induction heads {cells[4]}",
                        f"sinks {cells[5]}",
                    ]
                ),
                highlight=False,
            )
        shown.add(name)

    try:
        for looks, fresh in enumerate(new_shards(out, interval, timeout)):
            for name in fresh:
                show(name)
            if not looks:
                console.print(
                    f"following {escape(str(out))}/ ({len(shown) or 'no'} revisions yet; Ctrl-C ends)", highlight=False
                )
    except KeyboardInterrupt:
        console.print(f"stopped following {escape(str(out))}/ ({len(shown)} revisions)", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    console.print(f"stopped following {escape(str(out))}/ ({len(shown)} revisions)", highlight=False)


def main() -> None:
    """Entry point: every failure ends in one line on stderr, never a traceback; the exit code says
    which kind (headtrace.errors): 2 bad input or usage (click's usage errors too), 3 some work
    failed, 130 interrupted."""
    try:
        app()
    except HeadtraceError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
