"""The model organism: a small causal LM trained from scratch on the CPU, with log-spaced
checkpoints in which an induction circuit forms and attention sinks emerge (see trainer.py).

Importing it loads no torch: the settings are torch-free (config.py); `train` and `TrainResult`
load the trainer on first use."""

import importlib

from headtrace.organism.config import PRESETS, Organism, TrainConfig, checkpoint_steps, preset
from headtrace.organism.corpus import BOS_ID, CorpusConfig
from headtrace.organism.recipes import ARCHS, Recipe, recipe

_TRAINER = ("TrainResult", "train")  # from headtrace.organism.trainer, which imports torch
__all__ = [
    "ARCHS",
    "BOS_ID",
    "CorpusConfig",
    "Organism",
    "PRESETS",
    "Recipe",
    "TrainConfig",
    "TrainResult",
    "checkpoint_steps",
    "preset",
    "recipe",
    "train",
]


def __getattr__(name: str):
    if name in _TRAINER:
        value = getattr(importlib.import_module("headtrace.organism.trainer"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'headtrace.organism' has no attribute {name!r}")
