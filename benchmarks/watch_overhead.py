"""What does watching cost? Trains the demo's organism with and without a `Watcher` and prints
the overhead on training wall time (target: under 10% at the demo's settings).

    python benchmarks/watch_overhead.py                      # log:24 over 2000 steps, the demo's probe
    python benchmarks/watch_overhead.py --schedule demo      # the demo's own ~40 screens (checkpoint steps)
    python benchmarks/watch_overhead.py --steps 300

Both runs train the same organism bit for bit (same seed, one torch thread) and save only the final
checkpoint; the watched run also screens at the chosen steps (`--schedule log:N`: the watcher's own
schedule; `demo`: the steps the demo screens, log-spaced, every 250 and where the loss falls).

On a shared machine the load drifts by more than the overhead between two runs made one after the
other, so the two runs train in lockstep: two threads take turns, one optimiser step (with its
screen, if any) at a time, and each run's clock counts only its own turns. Load changes then hit
both alike. `screens` is the time inside the watcher's screens, measured directly. docs/organism.md
records a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch
import transformers

from headtrace.organism import CorpusConfig, Organism, TrainConfig, recipe, train
from headtrace.organism.demo import demo_screen
from headtrace.watch import Watcher


def organism(steps: int, schedule: str, seed: int) -> Organism:
    """The demo's organism; with a log:N schedule, the trainer itself decides only the final step."""
    config = TrainConfig(steps=steps, seed=seed)
    if schedule != "demo":
        config = dataclasses.replace(config, n_checkpoints=1, checkpoint_every=None, checkpoint_loss_drop=None)
    return Organism(recipe=recipe("dense"), corpus=CorpusConfig(seed=seed), train=config)


class Lockstep:
    """Runs take turns, one step at a time; `elapsed[run]` counts only that run's turns."""

    def __init__(self, runs: list[str]):
        self.runs, self.turn, self.finished = runs, runs[0], set()
        self.condition = threading.Condition()
        self.elapsed = dict.fromkeys(runs, 0.0)
        self.since: dict[str, float] = {}

    def wait(self, run: str) -> None:
        with self.condition:
            self.condition.wait_for(lambda: self.turn == run)
        self.since[run] = time.perf_counter()

    def yield_turn(self, run: str, finished: bool = False) -> None:
        self.elapsed[run] += time.perf_counter() - self.since[run]
        with self.condition:
            if finished:
                self.finished.add(run)
            others = [r for r in self.runs if r not in self.finished]
            if others:
                self.turn = others[(others.index(run) + 1) % len(others)] if run in others else others[0]
            self.condition.notify_all()


def run(kind: str, args, scratch: Path, lockstep: Lockstep, outcome: dict) -> None:
    """One training run, taking turns with the other."""
    lockstep.wait(kind)
    try:
        chosen = organism(args.steps, args.schedule, args.seed)
        watch = None
        if kind == "watched":
            revisions = None if args.schedule == "demo" else args.schedule
            watch = Watcher(
                scratch / "results",
                "organism-dense",
                demo_screen(chosen.corpus, args.n_examples),
                revisions=revisions,
                total_steps=args.steps,
            )

        def on_step(step: int, total: int, loss: float) -> None:
            lockstep.yield_turn(kind)
            lockstep.wait(kind)

        result = train(scratch / "organism", chosen, on_step=on_step, watch=watch, save="final")
        outcome[kind] = (watch.screen_s if watch else 0.0, len(result.screened), result.losses[-1])
    finally:
        lockstep.yield_turn(kind, finished=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--schedule", default="log:24", help="log:N, every:K, or demo")
    parser.add_argument("--n-examples", type=int, default=256, help="probe sequences per screen (the demo's: 256)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the demo trains on 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()  # its bar at each saved checkpoint
    torch.set_num_threads(args.threads)
    scratch = Path(args.out or tempfile.mkdtemp(prefix="watch-overhead-"))
    shutil.rmtree(scratch, ignore_errors=True)
    lockstep, outcome = Lockstep(["plain", "watched"]), {}
    threads = [
        threading.Thread(target=run, args=(kind, args, scratch / kind, lockstep, outcome))
        for kind in ("plain", "watched")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if set(outcome) != {"plain", "watched"}:
        raise SystemExit("a training run failed (its traceback is above)")
    plain, watched = lockstep.elapsed["plain"], lockstep.elapsed["watched"]
    screen_s, screens, loss = outcome["watched"]
    assert loss == outcome["plain"][2], "watching changed training"
    print(
        f"{args.steps} steps, {args.threads} thread(s), schedule {args.schedule}, {args.n_examples} probe "
        f"sequences: plain {plain:.1f} s, watched {watched:.1f} s ({screens} screens, {screen_s:.1f} s inside them, "
        f"{screen_s / max(screens, 1):.2f} s each)"
    )
    print(f"overhead: {watched / plain - 1:+.1%} of training wall time (screens alone: {screen_s / plain:.1%})")
    if args.out is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
