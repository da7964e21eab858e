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
    the special tokens), BOS prepended so position 0 is BOS and the length is the training length."""
    return ScreenConfig(n_examples=n_examples, seq_len=corpus.seq_len - 1, id_low=corpus.n_specials,
                        id_high=corpus.vocab_size, prepend_bos=True, batch_size=64)


def panel_toml(name: str, screen: ScreenConfig, models: dict[str, str], ablation_seeds: int = 0) -> str:
    """A panel file screening every checkpoint of each organism (model name -> path, relative);
    with `ablation_seeds`, the final checkpoint's induction circuit is ablated against that many
    matched-random head sets."""
    defaults = ScreenConfig()
    lines = [f'name = "{name}"', "", "[screen]"]
    for key, value in screen.to_dict().items():
        if value != getattr(defaults, key):
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}")
    for model, path in models.items():
        lines += ["", "[[models]]", f'id = "{model}"', 'source = "organism"', f'path = "{path}"',
                  'revisions = "all"']
    if ablation_seeds:
        lines += ["", "[ablation]", 'circuit = "induction"', f"seeds = {ablation_seeds}", 'revisions = "final"']
    return "\n".join(lines) + "\n"


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
