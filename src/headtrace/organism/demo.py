"""`headtrace demo`: train the default organism, screen every checkpoint as a panel, compute the
findings and write the report. Everything is local and offline; a second run reuses what is done
(the organism when its settings match, shards when the screen config matches).

    OUT/organisms/dense/     the trained organism (checkpoints, revisions.json, organism.json)
    OUT/demo.toml            the panel: re-run it with `headtrace run OUT/demo.toml --out OUT/results`
    OUT/results/             shards, manifest, findings.md, report/index.html
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from headtrace.organism.corpus import CorpusConfig
from headtrace.organism.recipes import recipe
from headtrace.organism.train import Organism, TrainConfig
from headtrace.screen import ScreenConfig

ORGANISMS = "organisms"
PANEL_FILE = "demo.toml"
RESULTS = "results"


def demo_organisms(compare: bool = False, steps: int | None = None, seed: int = 0) -> dict[str, Organism]:
    """The demo's organisms by model name: the default dense one, plus an MoE on the same data."""
    train = TrainConfig(seed=seed) if steps is None else TrainConfig(seed=seed, steps=steps)
    archs = ("dense", "moe") if compare else ("dense",)
    return {f"organism-{arch}": Organism(recipe=recipe(arch), corpus=CorpusConfig(seed=seed), train=train)
            for arch in archs}


def demo_screen(corpus: CorpusConfig, n_examples: int = 256) -> ScreenConfig:
    """A small synthetic-induction screen that fits the organism: ids inside its vocabulary (above
    the special tokens), BOS prepended so position 0 is BOS and the length is the training length.
    The baseline is clean: at this length the reference baseline's induction ceiling (62.7x) sits
    just above the 50x threshold (docs/definitions.md, "The baseline and its ceiling")."""
    return ScreenConfig.of(n_examples=n_examples, seq_len=corpus.seq_len - 1, id_low=corpus.n_specials,
                           id_high=corpus.vocab_size, prepend_bos=True, batch_size=64, baseline="clean")


def panel_toml(name: str, screen: ScreenConfig, models: dict[str, str], ablation_draws: int = 0) -> str:
    """A panel file screening every checkpoint of each organism (model name -> path, relative);
    with `ablation_draws`, the final checkpoint's induction circuit is ablated against that many
    matched-random head sets."""
    defaults = ScreenConfig().to_dict()
    lines = [f'name = "{name}"', "", "[screen]"]
    for key, value in screen.to_dict().items():
        if value != defaults[key]:
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}")
    for model, path in models.items():
        lines += ["", "[[models]]", f'id = "{model}"', 'source = "organism"', f'path = "{path}"',
                  'revisions = "all"']
    if ablation_draws:
        lines += ["", "[ablation]", 'circuit = "induction"', f"draws = {ablation_draws}", 'revisions = "final"']
    return "\n".join(lines) + "\n"


FAMILY = "organism-dense"  # `headtrace demo --seeds N`: the family's name; members organism-dense-s{seed}


def family_panel_toml(name: str, screen: ScreenConfig, seeds: list[int], steps: int | None = None,
                      ablation_draws: int = 0) -> str:
    """A panel over a seed family of the demo's organism (organisms/dense-s{seed}), which `headtrace
    run` trains where missing (`train = true`), so the file alone reproduces the demo."""
    lines = ["", "[[models]]", f'id = "{FAMILY}-s{{seed}}"', f'family = "{FAMILY}"', 'source = "organism"',
             f'path = "{ORGANISMS}/dense-s{{seed}}"', f"seeds = {list(seeds)}", "train = true", 'revisions = "all"']
    if steps is not None:
        lines.append(f"organism = {{ steps = {steps} }}")
    return panel_toml(name, screen, {}, ablation_draws) + "\n".join(lines) + "\n"


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
            f"top-1 rose by {self.top1_final - self.top1_first:.2f} (need 0.5)": self.top1_final - self.top1_first >= 0.5,
            f"ablation verdict {self.verdict}": self.verdict == "necessary",
            f"circuit top-1 {self.circuit_top1:.2f} vs random {self.random_top1:.2f} (need <= half)":
                self.circuit_top1 <= self.random_top1 / 2,
            f"{self.sinks_first} sinks at the first checkpoint (need 0)": self.sinks_first == 0,
            f"{self.sinks_final} sinks at the last (need > 0)": self.sinks_final > 0,
            f"{self.during_transition} checkpoints during the transition (need 4)": self.during_transition >= 4,
            f"{self.after_transition} checkpoints after it (need 3)": self.after_transition >= 3,
        }
        return [text for text, ok in checks.items() if not ok]


def check_demo(results: Path, model: str = "organism-dense", onset_selectivity: float = 2.0) -> DemoCheck:
    """Measure a demo run's `DemoCheck` from its stored screens and ablation."""
    from headtrace.store import ResultsDir

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
        revisions=len(order), induction_heads=len(final_circuit),
        top1_first=float(runs.top1.iloc[0]), top1_final=float(runs.top1.iloc[-1]),
        verdict=str(ablation.verdict.iloc[0]),
        circuit_top1=float(ablation.loc[ablation.condition == "circuit", "top1"].iloc[0]),
        random_top1=float(random.top1.mean()), shortfall=int(random.shortfall.max()),
        sinks_first=int(sinks.iloc[0]), sinks_final=int(sinks.iloc[-1]), onset=onset, complete=complete)

