"""The model organism: a small causal LM trained from scratch on the CPU, with log-spaced
checkpoints in which an induction circuit forms and attention sinks emerge (see train.py)."""

from headtrace.organism.corpus import BOS_ID, CorpusConfig
from headtrace.organism.recipes import ARCHS, Recipe, recipe
from headtrace.organism.train import Organism, TrainConfig, TrainResult, checkpoint_steps, train

__all__ = ["ARCHS", "BOS_ID", "CorpusConfig", "Organism", "Recipe", "TrainConfig", "TrainResult",
           "checkpoint_steps", "recipe", "train"]
