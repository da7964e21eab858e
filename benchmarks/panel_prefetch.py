"""Benchmark: a panel's wall time with prefetch (the next revision downloads while one is screened)
against without, on the fake hub (tests/hub_server.py, in its own process) throttled so that
downloading a revision takes about as long as screening it.

    PYTHONPATH=src python benchmarks/panel_prefetch.py [--revisions 6] [--n-examples 96]

D = total download time and C = total compute time (load, screen, write) of the sequential run.
Without prefetch the panel takes about D + C; with it, about max(D, C) plus one revision's
download that nothing overlaps. The script prints both wall times (best of --repeats, the two
modes alternating) and their ratios to max(D, C). The screen runs on one thread: on a GPU machine
compute takes no CPU from the download, and here the download side needs a core of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REPO = "EleutherAI/pythia-1b"


def start_hub() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "hub_server.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return process, process.stdout.readline().strip().split("=", 1)[1]


def control(url: str, method: str, payload: dict | None = None) -> None:
    data = None if payload is None else json.dumps(payload).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/_control/faults", data=data, method=method)).read()


def run(panel_path: Path, out: Path, prefetch: bool) -> tuple[float, pd.DataFrame]:
    from headtrace.panel import load_panel, run_panel
    from headtrace.store import read_results

    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf-")
    started = time.perf_counter()
    run_panel(load_panel(panel_path), out, prefetch=prefetch)
    return time.perf_counter() - started, read_results(out)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", type=int, default=6)
    parser.add_argument("--n-examples", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    hub, url = start_hub()
    os.environ["HF_ENDPOINT"] = url
    try:
        work = Path(tempfile.mkdtemp(prefix="prefetch-"))
        revisions = [f"step{1000 * (k + 1)}" for k in range(args.revisions)]
        for revision in revisions:  # the server builds checkpoints on first use: not part of any timing
            urllib.request.urlopen(f"{url}/api/models/{REPO}/tree/{revision}").read()
        names = ", ".join(f'"{r}"' for r in revisions)
        panel = work / "panel.toml"
        panel.write_text(
            f"[screen]\nn_examples = {args.n_examples}\nseq_len = 128\n\n"
            f'[[models]]\nid = "{REPO}"\nrevisions = [{names}]\n'
        )

        # Warm up (imports, first model load), then calibrate on two unthrottled revisions: compute c and the
        # download's fixed cost o per revision; throttle so that a download takes o + size / rate = c.
        one, two = (work / f"panel{k}.toml" for k in (1, 2))
        one.write_text(panel.read_text().replace(f"[{names}]", f'["{revisions[0]}"]'))
        two.write_text(panel.read_text().replace(f"[{names}]", f'["{revisions[0]}", "{revisions[1]}"]'))
        run(one, work / "warm-up", prefetch=False)
        wall, runs = run(two, work / "calibration", prefetch=False)
        overhead = float(runs.fetch_s.mean())
        compute = (wall - float(runs.fetch_s.sum())) / len(runs)
        size = float(runs.downloaded_bytes.iloc[0])
        rate = size / max(compute - overhead, 0.1 * compute)
        control(
            url,
            "POST",
            {"kind": "throttle", "target": "*/model.safetensors", "count": -1, "bytes_per_s": rate},
        )

        walls: dict[bool, list[float]] = {False: [], True: []}
        for repeat in range(args.repeats):
            for prefetch in (False, True):
                wall, runs = run(panel, work / f"{prefetch}-{repeat}", prefetch=prefetch)
                walls[prefetch].append(wall)
                if not prefetch and wall == min(walls[False]):
                    download = float(runs.fetch_s.sum())
                    compute_total = wall - download
        sequential, overlapped = min(walls[False]), min(walls[True])
        bound = max(download, compute_total)
        print(
            f"{args.revisions} revisions of {size / 1e6:.1f} MB, throttled to {rate / 1e6:.1f} MB/s; "
            f"n_examples={args.n_examples}, seq_len=128, {os.cpu_count()} CPUs"
        )
        print(
            f"download D = {download:.2f} s, compute C = {compute_total:.2f} s (best sequential run); "
            f"walls without {' '.join(f'{w:.1f}' for w in walls[False])} s, "
            f"with {' '.join(f'{w:.1f}' for w in walls[True])} s"
        )
        print(f"without prefetch: {sequential:.2f} s = {sequential / bound:.2f} x max(D, C)")
        print(f"with prefetch:    {overlapped:.2f} s = {overlapped / bound:.2f} x max(D, C)")
        print(f"speed-up: {sequential / overlapped:.2f}x")
    finally:
        hub.kill()


if __name__ == "__main__":
    main()
