"""Is the demo's organism robust, not lucky? Runs `headtrace demo` over training seeds and torch
thread counts (another thread count rounds differently: a stand-in for another machine's kernels)
and checks every run against what the demo promises (`headtrace.organism.demo.DemoCheck`).

    python benchmarks/organism_sweep.py --seeds 0 1 2 3 4 --threads 1 2 --jobs 2 --out /tmp/organism-sweep

Prints one row per run, the range over runs and every property that failed; exits 1 if any did.
`--markdown FILE` also writes the table (docs/organism.md records one). Runs already in --out are
reused (the demo resumes), so a second call only re-checks.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from headtrace.organism.demo import DemoCheck, check_demo

COLUMNS = (
    "seed",
    "threads",
    "revisions",
    "heads >= 50x",
    "top-1 first -> final",
    "verdict",
    "circuit / random top-1",
    "random shortfall",
    "sinks first -> final",
    "during / after transition",
    "failed",
)


def run_one(seed: int, threads: int, out: Path) -> tuple[DemoCheck, float]:
    """One demo run (training included); its check and wall time."""
    folder = out / f"seed{seed}-threads{threads}"
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "headtrace",
            "demo",
            "--seed",
            str(seed),
            "--threads",
            str(threads),
            "--out",
            str(folder),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(f"demo seed {seed} threads {threads} failed:\n{proc.stderr[-3000:]}")
    return check_demo(folder / "results"), time.perf_counter() - started


def row(seed: int, threads: int, check: DemoCheck) -> list[str]:
    return [
        str(seed),
        str(threads),
        str(check.revisions),
        str(check.induction_heads),
        f"{check.top1_first:.2f} -> {check.top1_final:.2f}",
        check.verdict,
        f"{check.circuit_top1:.2f} / {check.random_top1:.2f}",
        str(check.shortfall),
        f"{check.sinks_first} -> {check.sinks_final}",
        f"{check.during_transition} / {check.after_transition}",
        "; ".join(check.failures()) or "-",
    ]


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="demo runs at once")
    parser.add_argument("--out", type=Path, default=Path("organism-sweep"))
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    grid = list(itertools.product(args.seeds, args.threads))
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: run_one(*job, args.out), grid))
    rows = [row(seed, threads, check) for (seed, threads), (check, _) in zip(grid, results)]
    table = Table(title=f"the demo over {len(args.seeds)} seeds x threads {args.threads}")
    for column in COLUMNS:
        table.add_column(column)
    for r in rows:
        table.add_row(*r)
    console = Console(width=200)
    console.print(table)
    checks = [check for check, _ in results]
    console.print(
        f"range over runs: heads >= 50x {min(c.induction_heads for c in checks)}-"
        f"{max(c.induction_heads for c in checks)}; final top-1 {min(c.top1_final for c in checks):.2f}-"
        f"{max(c.top1_final for c in checks):.2f}; circuit top-1 {min(c.circuit_top1 for c in checks):.2f}-"
        f"{max(c.circuit_top1 for c in checks):.2f} against random {min(c.random_top1 for c in checks):.2f}-"
        f"{max(c.random_top1 for c in checks):.2f}; wall per run (training included unless reused) "
        f"{min(w for _, w in results):.0f}-{max(w for _, w in results):.0f} s"
    )
    if args.markdown:
        args.markdown.write_text(markdown(rows))
    failed = sum(bool(c.failures()) for c in checks)
    console.print(f"{len(checks) - failed} of {len(checks)} runs show everything the demo promises")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
