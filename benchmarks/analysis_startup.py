"""Wall time and peak memory of the analysis commands and of a usage error, each in a fresh process.

These commands read results and never load a model, so they must not import torch or transformers
(goal: under 1.5 s and 150 MB each). Runs on the study's Pythia-1B reference results in tests/data:

    python benchmarks/analysis_startup.py [--repeats 3]

Prints, per command: the median wall time, the peak resident memory (the process's own ru_maxrss)
and whether torch or transformers were imported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "reference" / "pythia-1b"
# Runs the command as `headtrace` does, then reports which heavy modules it imported.
WRAPPER = """
import sys
from headtrace.cli import main
try:
    main()
finally:
    print("HEAVY=" + ",".join(m for m in ("torch", "transformers") if m in sys.modules), file=sys.stderr)
"""


def measure(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, heavy modules imported) of one command in a fresh process."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    stderr = process.stderr.read()
    _, _, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    heavy = next((line[6:] for line in stderr.splitlines() if line.startswith("HEAVY=")), "?")
    return wall, usage.ru_maxrss / 1024, heavy or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    files = [str(p) for p in sorted(REFERENCE.glob("*.json"))]
    with tempfile.TemporaryDirectory() as tmp:
        results = str(Path(tmp) / "results")
        commands = {
            "import-reference": lambda i: ["import-reference", *files, "-o", f"{tmp}/imported-{i}"],
            "results": lambda i: ["results", results],
            "findings": lambda i: ["findings", results],
            "report": lambda i: ["report", results, "-o", f"{tmp}/report-{i}"],
            "usage error": lambda i: ["screen", "--no-such-option"],
            "--version": lambda i: ["--version"],
        }
        subprocess.run(
            [sys.executable, "-m", "headtrace", "import-reference", *files, "-o", results],
            check=True,
            capture_output=True,
        )
        print(f"{'command':<18}{'wall s (median)':>16}{'peak RSS MB':>13}  torch/transformers imported")
        for name, args in commands.items():
            runs = [measure(args(i)) for i in range(repeats)]
            wall = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            print(f"{name:<18}{wall:>16.2f}{rss:>13.0f}  {runs[-1][2]}")


if __name__ == "__main__":
    main()
