"""What does watching cost? Trains the demo's organism with and without a `Watcher` and prints
the overhead on training wall time (target: under 10% at the demo's settings).

    python benchmarks/watch_overhead.py                      # log:24 over 2000 steps, the demo's probe
    python benchmarks/watch_overhead.py --schedule demo      # the demo's own ~40 screens (checkpoint steps)
    python benchmarks/watch_overhead.py --steps 300 --repeats 2

Both runs train the same organism bit for bit (same seed, one torch thread) and save only the final
checkpoint; the watched run also screens at the chosen steps (`--schedule log:N`: the watcher's
own schedule; `demo`: the steps the demo screens, log-spaced, every 250 and where the loss falls).
With `--repeats`, runs alternate (plain, watched, watched, plain, ...) so that a machine whose load
drifts biases neither, and the fastest of each kind counts. The overhead is the watched run's
extra wall time over the plain run's; `screens` is the time spent inside the watcher's screens
(measured directly, so less noisy on a shared machine). docs/organism.md records a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
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


def run(kind: str, args, scratch: Path) -> tuple[float, float, int]:
    """One training run: (wall s of the training loop, s inside screens, screens)."""
    shutil.rmtree(scratch, ignore_errors=True)
    chosen = organism(args.steps, args.schedule, args.seed)
    watch = None
    if kind == "watched":
        revisions = None if args.schedule == "demo" else args.schedule
        watch = Watcher(scratch / "results", "organism-dense", demo_screen(chosen.corpus, args.n_examples),
                        revisions=revisions, total_steps=args.steps)
    result = train(scratch / "organism", chosen, watch=watch, save="final")
    return result.wall_s, watch.screen_s if watch else 0.0, len(result.screened)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--schedule", default="log:24", help="log:N, every:K, or demo")
    parser.add_argument("--n-examples", type=int, default=256, help="probe sequences per screen (the demo's: 256)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the demo trains on 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()  # its bar at each saved checkpoint
    torch.set_num_threads(args.threads)
    scratch = Path(args.out or tempfile.mkdtemp(prefix="watch-overhead-"))
    order = [("plain", "watched") if i % 2 == 0 else ("watched", "plain") for i in range(args.repeats)]
    walls: dict[str, list[float]] = {"plain": [], "watched": []}
    screen_s, screens = [], 0
    for pair in order:
        for kind in pair:
            wall, inside, screens_here = run(kind, args, scratch / kind)
            walls[kind].append(wall)
            if kind == "watched":
                screen_s.append(inside)
                screens = screens_here
            print(f"{kind:8s} {wall:7.1f} s" + (f"  ({screens_here} screens, {inside:.1f} s inside them)"
                                               if kind == "watched" else ""), flush=True)
    plain, watched = min(walls["plain"]), min(walls["watched"])
    print(f"\n{args.steps} steps, {args.threads} thread(s), schedule {args.schedule}, {args.n_examples} probe "
          f"sequences: plain {plain:.1f} s, watched {watched:.1f} s ({screens} screens)")
    print(f"overhead: {watched / plain - 1:+.1%} of training wall time "
          f"(time inside screens: {min(screen_s) / plain:.1%}, {min(screen_s) / max(screens, 1):.2f} s per screen)")
    if args.out is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
