"""Benchmark: one revision's weight files downloaded one by one (max_workers=1) against side by side
(max_workers=4), through the real huggingface_hub client from the fake hub (tests/hub_server.py, in
its own process), with every file verified against the hub's sha256 as always.

    PYTHONPATH=src python benchmarks/parallel_downloads.py [--shards 8] [--shard-mb 8] [--repeats 2]

Links: `localhost` (no throttle); `stream-capped` (each stream at --stream-mbps, the whole link at
--link-mbps: a server or CDN that limits each connection below the link); `link-bound` (the link
no faster than one stream: parallel streams can only share it); `per-request` (each stream capped,
no shared cap: what the server's throttle did before it had one, 4 streams getting 4x the
bandwidth). Each row prints the best of --repeats for both settings (alternating, fresh cache) and
their ratio.
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

ROOT = Path(__file__).resolve().parents[1]
REPO = "bench/sharded"


def serve(shards: int, shard_mb: float) -> None:
    """The child process: a hub with one revision of `shards` random weight files."""
    import threading

    import numpy as np

    from hub_server import FakeRepo, HubServer

    rng = np.random.default_rng(0)
    files = {"config.json": b"{}"}
    files |= {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": rng.bytes(int(shard_mb * 1e6)) for i in range(shards)}
    server = HubServer([FakeRepo(REPO, {"main": lambda: files})]).start()
    print(f"HF_ENDPOINT={server.url}", flush=True)
    threading.Event().wait()


def control(url: str, method: str, payload: dict | None = None) -> None:
    data = None if payload is None else json.dumps(payload).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/_control/faults", data=data, method=method)).read()


def fetch_seconds(max_workers: int) -> float:
    from headtrace.revisions import parse_revision
    from headtrace.sources import HubSource

    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf-")
    started = time.perf_counter()
    checkpoint = HubSource(REPO, max_workers=max_workers).fetch(parse_revision("main"))
    seconds = time.perf_counter() - started
    HubSource(REPO).release(checkpoint)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mb", type=float, default=8.0)
    parser.add_argument("--stream-mbps", type=float, default=10.0, help="MB/s of one stream when capped")
    parser.add_argument("--link-mbps", type=float, default=40.0, help="MB/s of the whole link (stream-capped)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.shards, args.shard_mb)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--shards", str(args.shards), "--shard-mb", str(args.shard_mb)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = child.stdout.readline().strip().split("=", 1)[1]
    os.environ["HF_ENDPOINT"] = url
    stream, link = args.stream_mbps * 1e6, args.link_mbps * 1e6
    links = {
        "localhost": None,
        "stream-capped": {"bytes_per_s": stream, "shared_bytes_per_s": link},
        "link-bound": {"bytes_per_s": stream, "shared_bytes_per_s": stream},
        "per-request": {"bytes_per_s": stream},
    }
    total = args.shards * args.shard_mb
    print(f"{args.shards} weight files of {args.shard_mb:g} MB ({total:g} MB), best of {args.repeats}")
    print(f"{'link':<14} {'throttle':<34} {'1 worker s':>10} {'4 workers s':>11} {'ratio':>6}")
    try:
        for name, throttle in links.items():
            control(url, "DELETE")
            if throttle:
                control(url, "POST", {"kind": "throttle", "target": "*.safetensors", "count": -1, **throttle})
            times: dict[int, list[float]] = {1: [], 4: []}
            for _ in range(args.repeats):
                for workers in (1, 4):
                    times[workers].append(fetch_seconds(workers))
            one, four = min(times[1]), min(times[4])
            described = (
                "none"
                if not throttle
                else f"{throttle['bytes_per_s'] / 1e6:g} MB/s per stream"
                + (f", {throttle['shared_bytes_per_s'] / 1e6:g} MB/s link" if "shared_bytes_per_s" in throttle else "")
            )
            print(f"{name:<14} {described:<34} {one:>10.2f} {four:>11.2f} {one / four:>5.2f}x", flush=True)
    finally:
        child.terminate()


if __name__ == "__main__":
    main()
