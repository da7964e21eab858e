"""`headtrace demo`: train the default organism, screening it as it trains; ablate the final
checkpoint as a panel, compute the findings and write the report (`run_demo`). With `causal`
(`headtrace demo --causal`), the trainer also keeps the checkpoints of F8's subset (config.causal_steps) and the panel
ablates the final induction circuit at each of them (`final:induction`, F8). Everything is local
and offline; a second run reuses what is done (the organism when its settings match, shards when
the screen config matches).

    OUT/organisms/dense/     the trained organism (checkpoints, revisions.json, organism.json)
    OUT/demo.toml            the panel: re-run it with `headtrace run OUT/demo.toml --out OUT/results`
    OUT/results/             shards, manifest, findings.md, report/index.html
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from headtrace.errors import HeadtraceError
from headtrace.findings import write_findings
from headtrace.organism.config import CAUSAL_REVISIONS, Organism, causal_steps, preset
from headtrace.organism.corpus import CorpusConfig
from headtrace.panel import load_panel, run_panel
from headtrace.report import build_report
from headtrace.schema import ScreenConfig
from headtrace.store import ResultsDir, check_writable
from headtrace.watch import Watcher

ORGANISMS = "organisms"
PANEL_FILE = "demo.toml"
RESULTS = "results"


def demo_organisms(
    compare: bool = False, steps: int | None = None, seed: int = 0, organism: str = "tiny"
) -> dict[str, Organism]:
    """The demo's organisms by model name: the named organism's dense one, plus an MoE on the same data."""
    archs = ("dense", "moe") if compare else ("dense",)
    return {f"organism-{arch}": preset(organism, arch=arch, seed=seed, steps=steps) for arch in archs}


def ablation_draws(organism: str) -> int:
    """Matched-random draws of the demo's ablation: 20 where layers have room for them (6 heads)."""
    return 10 if organism == "tiny" else 20


def demo_screen(corpus: CorpusConfig, n_examples: int = 256) -> ScreenConfig:
    """A small synthetic-induction screen that fits the organism: ids inside its vocabulary (above
    the special tokens), BOS prepended so position 0 is BOS and the length is the training length.
    The baseline is the reference one from T = 127, where its induction ceiling (108x) is twice the
    50x threshold; below, the clean one (at T = 63 the ceiling is 62.7x: docs/definitions.md, "The
    baseline and its ceiling"). The attention of 4 examples is kept for the report's head view."""
    return ScreenConfig.of(
        n_examples=n_examples,
        seq_len=corpus.seq_len - 1,
        id_low=corpus.n_specials,
        id_high=corpus.vocab_size,
        prepend_bos=True,
        batch_size=64,
        baseline="reference" if corpus.seq_len - 1 >= 127 else "clean",
        keep_patterns=min(4, n_examples),
    )


def panel_toml(
    name: str,
    screen: ScreenConfig,
    models: dict[str, str],
    ablation_draws: int = 0,
    causal: bool = False,
    revisions: str = "all",
) -> str:
    """A panel file screening every checkpoint of each organism (model name -> path, relative);
    with `ablation_draws`, the final checkpoint's induction circuit is ablated against that many
    matched-random head sets; with `causal` too, the final circuit at each of the ablation's
    `revisions` (F8: `final:induction`)."""
    defaults = ScreenConfig().to_dict()
    lines = [f'name = "{name}"', "", "[screen]"]
    for key, value in screen.to_dict().items():
        if value != defaults[key]:
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}")
    for model, path in models.items():
        lines += ["", "[[models]]", f'id = "{model}"', 'source = "organism"', f'path = "{path}"', 'revisions = "all"']
    if ablation_draws:
        circuit, where = ("final:induction", revisions) if causal else ("induction", "final")
        lines += ["", "[ablation]", f'circuit = "{circuit}"', f"draws = {ablation_draws}", f'revisions = "{where}"']
    return "\n".join(lines) + "\n"


FAMILY = "organism-dense"  # `headtrace demo --seeds N`: the family's name; members organism-dense-s{seed}


def family_panel_toml(
    name: str,
    screen: ScreenConfig,
    seeds: list[int],
    steps: int | None = None,
    ablation_draws: int = 0,
    causal: bool = False,
    organism: str = "tiny",
) -> str:
    """A panel over a seed family of the demo's organism (organisms/dense-s{seed}), which `headtrace
    run` trains where missing (`train = true`), so the file alone reproduces the demo."""
    lines = [
        "",
        "[[models]]",
        f'id = "{FAMILY}-s{{seed}}"',
        f'family = "{FAMILY}"',
        'source = "organism"',
        f'path = "{ORGANISMS}/dense-s{{seed}}"',
        f"seeds = {list(seeds)}",
        "train = true",
        'revisions = "all"',
    ]
    settings = [f'preset = "{organism}"'] if organism != "tiny" else []
    if steps is not None:
        settings.append(f"steps = {steps}")
    if settings:
        lines.append(f"organism = {{ {', '.join(settings)} }}")
    lines += ["", "[composition]", 'revisions = "all"']  # the induction heads' composition, from the weights
    selection = f"log:{CAUSAL_REVISIONS}"  # the members save every checkpoint: F8 on log:8 of them
    return panel_toml(name, screen, {}, ablation_draws, causal, selection) + "\n".join(lines) + "\n"


@dataclass
class DemoPaths:
    out: Path

    @property
    def panel(self) -> Path:
        return self.out / PANEL_FILE

    @property
    def results(self) -> Path:
        return self.out / RESULTS

    def organism(self, model: str) -> Path:
        return self.out / ORGANISMS / model.removeprefix("organism-")


@dataclass(frozen=True)
class DemoCheck:
    """What the demo must show on every seed and machine, measured from its results folder
    (the demo test and benchmarks/organism_sweep.py assert the same properties)."""

    revisions: int
    induction_heads: int  # at the final revision, >= the induction threshold
    top1_first: float
    top1_final: float
    verdict: str  # the final revision's ablation of its induction circuit
    circuit_top1: float
    random_top1: float  # mean over the matched-random seeds
    shortfall: int  # heads missing from each matched-random set (the circuit's layers hold too few others)
    sinks_first: int
    sinks_final: int
    onset: int | None  # first revision where the best induction head exceeds 2x
    complete: int | None  # first revision from which every final-circuit head is >= the threshold

    @property
    def during_transition(self) -> int:
        """Checkpoints strictly between the onset and the complete circuit."""
        return -1 if self.onset is None or self.complete is None else self.complete - self.onset - 1

    @property
    def after_transition(self) -> int:
        return -1 if self.complete is None else self.revisions - 1 - self.complete

    def failures(self) -> list[str]:
        """The properties that do not hold (empty: the run shows everything the demo promises)."""
        checks = {
            f"{self.induction_heads} induction heads >= 50x at the end (need 2)": self.induction_heads >= 2,
            f"top-1 rose by {self.top1_final - self.top1_first:.2f} (need 0.5)": self.top1_final - self.top1_first
            >= 0.5,
            f"ablation verdict {self.verdict}": self.verdict == "necessary",
            f"circuit top-1 {self.circuit_top1:.2f} vs random {self.random_top1:.2f} (need <= half)": self.circuit_top1
            <= self.random_top1 / 2,
            f"{self.sinks_first} sinks at the first checkpoint (need 0)": self.sinks_first == 0,
            f"{self.sinks_final} sinks at the last (need > 0)": self.sinks_final > 0,
            f"{self.during_transition} checkpoints during the transition (need 4)": self.during_transition >= 4,
            f"{self.after_transition} checkpoints after it (need 3)": self.after_transition >= 3,
        }
        return [text for text, ok in checks.items() if not ok]


def check_demo(results: Path, model: str = "organism-dense", onset_selectivity: float = 2.0) -> DemoCheck:
    """Measure a demo run's `DemoCheck` from its stored screens and ablation."""
    heads, runs = ResultsDir(results).read()
    heads, runs = heads[heads.model == model], runs[runs.model == model].reset_index(drop=True)
    order = list(runs.revision)  # training order

    def per_revision(column: str) -> pd.DataFrame:
        return heads.pivot(index="revision", columns="head_id", values=column).reindex(order)

    members = per_revision("induction_circuit").astype(bool)  # >= the threshold the screen used
    final_circuit = members.columns[members.iloc[-1]]
    best = per_revision("sel_induction").max(axis=1).to_numpy()
    onset = next((i for i, value in enumerate(best) if value > onset_selectivity), None)
    complete_from = members[final_circuit].all(axis=1).to_numpy()
    complete = next((i for i in range(len(order)) if len(final_circuit) and complete_from[i:].all()), None)
    sinks = heads.groupby("revision").sink.sum().reindex(order)
    ablations = ResultsDir(results).read_ablations()
    ablation = ablations[(ablations.model == model) & (ablations.revision == order[-1])]
    random = ablation[ablation.condition == "random"]
    return DemoCheck(
        revisions=len(order),
        induction_heads=len(final_circuit),
        top1_first=float(runs.top1.iloc[0]),
        top1_final=float(runs.top1.iloc[-1]),
        verdict=str(ablation.verdict.iloc[0]),
        circuit_top1=float(ablation.loc[ablation.condition == "circuit", "top1"].iloc[0]),
        random_top1=float(random.top1.mean()),
        shortfall=int(random.shortfall.max()),
        sinks_first=int(sinks.iloc[0]),
        sinks_final=int(sinks.iloc[-1]),
        onset=onset,
        complete=complete,
    )


# --------------------------------------------------------------------------------------------
# The pipeline.

# (organism, folder, model id, watcher or None, steps to keep): train it there, screening it into the
# watcher's folder and saving the final checkpoint and the kept steps
Train = Callable[[Organism, Path, str, Watcher | None, Sequence[int]], object]
RunPanel = Callable[[Path, Path], object]  # (panel file, results folder): run it, training `train = true` entries


def train_quietly(organism: Organism, folder: Path, model: str, watch: Watcher | None = None, keep: Sequence[int] = ()):
    """`organism.train` without a display (the command line draws its progress bars instead)."""
    from headtrace.organism.trainer import train  # torch, when the demo trains

    return train(folder, organism, watch=watch, keep=keep)


@dataclass
class DemoOutcome:
    paths: DemoPaths
    findings: pd.DataFrame  # findings.parquet
    report: Path  # the report's page


def run_demo(
    out: str | Path,
    train: Train = train_quietly,
    run: RunPanel | None = None,
    *,
    compare: bool = False,
    steps: int | None = None,
    n_examples: int = 256,
    seed: int = 0,
    seeds: int | None = None,
    causal: bool = False,
    organism: str = "tiny",
) -> DemoOutcome:
    """The demo, end to end, into OUT (module docstring): each organism trained with a watcher that
    screens it at its checkpoint steps (only the final checkpoint is saved), then the panel of its
    saved checkpoint (the ablation), the findings and the report. `seeds`: N organisms (seeds SEED ..
    SEED+N-1) as one seed family, which the panel trains (`train = true`) and screens. `organism`:
    the named organism (organism/config.py: tiny or code). `run` runs a panel file (default:
    `run_panel`, training with `train`)."""
    if seeds is not None and compare:
        raise HeadtraceError("--seeds and --compare do not combine; run them one at a time")
    paths = DemoPaths(Path(out))
    organisms = demo_organisms(compare=compare, steps=steps, seed=seed, organism=organism)
    draws = ablation_draws(organism)
    screen = demo_screen(next(iter(organisms.values())).corpus, n_examples)
    screen.validate()  # before training: a bad setting must not cost the minutes of training
    for organism in organisms.values():
        organism.validate()
    check_writable(paths.out)
    if run is None:

        def run(panel: Path, results: Path):
            return run_panel(
                load_panel(panel), results, train_one=lambda o, folder, model: train(o, folder, model, None, ())
            )

    if seeds is None:
        for model, organism in organisms.items():  # screened at its checkpoint steps; only the final one is saved
            keep = causal_steps(organism.train) if causal else ()
            watch = Watcher(paths.results, model, screen, revisions=None, causal_composition=True)
            train(organism, paths.organism(model), model, watch, keep)
        models = {m: str(paths.organism(m).relative_to(paths.out)) for m in organisms}
        paths.panel.write_text(panel_toml("demo", screen, models, ablation_draws=draws, causal=causal))
    else:
        paths.out.mkdir(parents=True, exist_ok=True)
        paths.panel.write_text(
            family_panel_toml(
                "demo", screen, list(range(seed, seed + seeds)), steps, draws, causal=causal, organism=organism
            )
        )
    run(paths.panel, paths.results)
    return DemoOutcome(paths, write_findings(paths.results), build_report(paths.results))
