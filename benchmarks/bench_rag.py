"""RAG grid throughput: bounded concurrency against a fixed-delay server, and a resumed grid.

A loopback server in its own process answers every request after DELAY seconds in
MaxKB's (OpenAI-compatible) shape. A grid of N cells at concurrency c cannot finish
faster than N x DELAY / c; N is chosen so that this bound is SECONDS at c = 8 and 32.
The script reports the measured time, the fraction of that bound's throughput reached
(goal at c = 32: at least 90%), and the requests a second,
resumed run of the same grid makes (goal: 0).

Usage: python benchmarks/bench_rag.py [--delay 0.25] [--seconds 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd

from fabnb.rag import MaxKB, ResultsStore, run_grid

from common import add_smoke, apply_smoke, server_process  # benchmarks/common.py

SERVER = """
import sys, json, time
sys.path.insert(0, sys.argv[1])
from stub_openai import StubServer, completion
server = StubServer(lambda r, n: (200, {"n": n} if "count" in r else completion("ok"), {}), delay=float(sys.argv[2]))
with server:
    print(server.root, flush=True)
    sys.stdin.read()
"""


def requests_made(root: str) -> int:
    req = urllib.request.Request(root + "/count", data=b'{"count": 1}', headers={"Content-Type": "application/json"})
    import json

    return json.loads(urllib.request.urlopen(req).read())["n"] - 1  # minus this question


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="the bound at c = 8 and 32 (cells = seconds x c / delay)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per concurrency; the median is reported")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, delay=0.01, seconds=0.05, repeat=1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"server delay {args.delay} s in its own process")
    with server_process(SERVER, args.delay) as root:
        with tempfile.TemporaryDirectory() as tmp:
            for concurrency in (1, 8, 32):
                cells = int(args.seconds * concurrency / args.delay) if concurrency > 1 else 16
                qs = pd.DataFrame({"test_id": [f"Q{i:04d}" for i in range(cells)],
                                   "question": [f"question {i}?" for i in range(cells)]})
                times = []
                for r in range(args.repeat):
                    store = ResultsStore(Path(tmp) / f"c{concurrency}-{r}.jsonl")
                    system = MaxKB(root, model=f"c{concurrency}")
                    start = time.perf_counter()
                    run = run_grid(system, qs, [4], store, concurrency=concurrency, progress=False)
                    times.append(time.perf_counter() - start)
                took = statistics.median(times)
                bound = cells * args.delay / concurrency
                before = requests_made(root)
                start = time.perf_counter()
                again = run_grid(system, qs, [4], store, concurrency=concurrency, progress=False)
                resumed = time.perf_counter() - start
                extra = requests_made(root) - before - 1
                print(f"c={concurrency:>2}: {cells} cells in {took:.2f} s (median of {args.repeat}; "
                      f"{min(times):.2f}-{max(times):.2f}), bound {bound:.2f} s, "
                      f"{bound / took:.0%} of the bound's throughput, {run.failed} failed; "
                      f"resumed run: {again.asked} asked, {again.skipped} skipped, {extra} requests, {resumed:.2f} s")


if __name__ == "__main__":
    main()
