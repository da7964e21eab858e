"""What determines a trained organism, and the layout of its checkpoint folder. Torch-free: panel
files, the watcher and the checkpoint sources read these without loading the trainer.

    OUT/step000001/ ... OUT/step000600/   one Hugging Face checkpoint per saved step (`revision_name`)
    OUT/revisions.json                    [{"revision": "step000128", "step": 128, "tokens": ...}]
    OUT/organism.json                     recipe, corpus, training settings, seed
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from headtrace.errors import HeadtraceError
from headtrace.organism.corpus import CorpusConfig
from headtrace.organism.recipes import Recipe, recipe

ORGANISM_FILE = "organism.json"
REVISIONS_FILE = "revisions.json"  # a folder of checkpoints with this listing is a LocalSource (sources.py)
LR_SCHEDULES: tuple[str, ...] = ("cosine", "constant")
# fields added after organisms were first saved: left out of to_dict at these values (as corpus.py does)
_LATER_FIELDS = {"lr_schedule": "cosine"}


@dataclass(frozen=True)
class TrainConfig:
    """How the organism is trained."""

    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    lr_schedule: str = "cosine"  # after warmup: cosine (to 10% of lr at the last step) | constant
    grad_clip: float = 1.0
    n_checkpoints: int = 12  # log-spaced over the run
    checkpoint_every: int | None = 250  # also save every K steps (the plateau after the transition)
    # Also save whenever the smoothed training loss fell this much since the last save: checkpoints
    # gather where the model changes (the induction transition), wherever a seed puts it.
    checkpoint_loss_drop: float | None = 0.1
    seed: int = 0

    def validate(self) -> None:
        if self.steps < 1:
            raise HeadtraceError(f"steps must be >= 1 (got {self.steps})")
        if self.lr_schedule not in LR_SCHEDULES:
            raise HeadtraceError(f"unknown lr_schedule '{self.lr_schedule}'; use one of: {', '.join(LR_SCHEDULES)}")
        if self.batch_size < 1 or self.n_checkpoints < 1 or self.lr <= 0:
            raise HeadtraceError("batch_size, n_checkpoints and lr must be positive")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise HeadtraceError(f"checkpoint_every must be >= 1 (got {self.checkpoint_every})")
        if self.checkpoint_loss_drop is not None and self.checkpoint_loss_drop <= 0:
            raise HeadtraceError(f"checkpoint_loss_drop must be > 0 (got {self.checkpoint_loss_drop})")

    def checkpoint_steps(self) -> list[int]:
        """The steps saved on schedule: `n_checkpoints` log-spaced ones, plus every `checkpoint_every`
        steps (saves on a loss drop come on top, see `LossDropSaves`)."""
        every = range(self.checkpoint_every, self.steps + 1, self.checkpoint_every) if self.checkpoint_every else ()
        return sorted({*checkpoint_steps(self.steps, self.n_checkpoints), *every})

    def to_dict(self) -> dict:
        fields = dataclasses.asdict(self)
        return {k: v for k, v in fields.items() if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}


@dataclass(frozen=True)
class Organism:
    """Everything that determines a trained organism (written to organism.json)."""

    recipe: Recipe = Recipe()
    corpus: CorpusConfig = CorpusConfig()
    train: TrainConfig = TrainConfig()

    def to_dict(self) -> dict:
        return {
            "recipe": self.recipe.to_dict(),
            "corpus": self.corpus.to_dict(),
            "train": self.train.to_dict(),
            "seed": self.train.seed,
        }

    def validate(self) -> None:
        self.recipe.validate()
        self.corpus.validate()
        self.train.validate()


PRESETS: tuple[str, ...] = ("tiny", "code")


def preset(name: str = "tiny", arch: str = "dense", seed: int = 0, steps: int | None = None) -> Organism:
    """A named organism (docs/organism.md), seeded: `tiny`, 3 x 4 on the synthetic Zipf corpus (the
    demo's, minutes on a CPU); `code`, 6 x 6 on the standard library's source at T = 128 with 10% of
    positions in copied spans and 10% probe-kind sequences (half an hour or more on a 2-core CPU)."""
    if name not in PRESETS:
        raise HeadtraceError(f"unknown organism '{name}'; use one of: {', '.join(PRESETS)}")
    if name == "tiny":
        shape, corpus, train = recipe(arch), CorpusConfig(seed=seed), TrainConfig(seed=seed)
    else:
        d_mlp = 192 if arch == "moe" else 384  # the MoE's experts narrower, as in the tiny recipe
        shape = recipe(arch, n_layers=6, n_heads=6, d_model=192, d_mlp=d_mlp)
        corpus = CorpusConfig(
            source="stdlib",
            vocab_size=1024,
            seq_len=128,
            span_min=6,
            span_max=16,
            spans_per_sequence=0.10 * 127 / 11,  # 10% of the 127 positions after BOS, in spans of 11 on average
            probe_share=0.10,
            seed=seed,
        )
        train = TrainConfig(
            steps=3500, batch_size=16, warmup_steps=100, weight_decay=0.25, lr_schedule="constant", seed=seed
        )
    if steps is not None:
        train = dataclasses.replace(train, steps=steps)
    return Organism(recipe=shape, corpus=corpus, train=train)


def checkpoint_steps(steps: int, n: int) -> list[int]:
    """About n log-spaced steps in [1, steps], always including 1 and the last."""
    if n <= 1:
        return [steps]
    spaced = np.unique(np.round(np.geomspace(1, steps, n)).astype(int))
    return sorted({1, steps, *spaced.tolist()})


CAUSAL_REVISIONS = 8  # F8: the checkpoints kept for the final circuit's ablation (a panel's log:8)


def causal_steps(config: TrainConfig, n: int = CAUSAL_REVISIONS) -> list[int]:
    """`n` of the scheduled checkpoint steps, log-spaced from the first to the last (each target in
    log(step) takes the nearest step): what a trainer with a watcher keeps so F8 can run on them."""
    planned = config.checkpoint_steps()
    chosen = {planned[-1]}
    for target in np.geomspace(planned[0], planned[-1], n):
        chosen.add(min(planned, key=lambda s: (abs(math.log(s) - math.log(target)), s)))
    return sorted(chosen)


def revision_name(step: int, total_steps: int | None = None) -> str:
    """`step000128`: a checkpoint's name, six digits or as many as the run's last step needs, so that
    names sort in training order (the organism trainer and the watcher name their revisions alike)."""
    width = max(6, len(str(total_steps or 0)))
    return f"step{step:0{width}d}"
