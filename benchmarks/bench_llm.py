"""LLM layer throughput: bounded concurrency against a fixed-delay server, and a cached rerun.

A loopback OpenAI-compatible server answers every request after DELAY seconds. N
calls at concurrency c cannot finish faster than N x DELAY / c; the script reports
the measured time and its ratio to that bound (1.00 is perfect) at c = 1, 8, 32,
then reruns the same calls against the filled cache and reports the time (goal:
under 5% of the first run) and the requests that reached the server (goal: 0).

Usage: python benchmarks/bench_llm.py [--delay 0.25] [--calls 64]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fabnb.models.llm import LLM, ResponseCache  # noqa: E402

from common import add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)
from stub_openai import StubServer  # noqa: E402  (the scripted server of the test suite)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3, help="runs per concurrency; the median is reported")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, delay=0.01, calls=4, repeat=1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"server delay {args.delay} s, {args.calls} calls")
    with StubServer(delay=args.delay) as server, tempfile.TemporaryDirectory() as tmp:
        for concurrency in (1, 8, 32):
            calls = args.calls if concurrency > 1 else max(16, args.calls // 4)
            firsts = []
            for r in range(args.repeat):
                llm = LLM("stub", server.base_url, cache=ResponseCache(Path(tmp) / f"c{concurrency}-{r}.sqlite"),
                          concurrency=concurrency)
                prompts = [f"c{concurrency} r{r} q{i}" for i in range(calls)]
                start = time.perf_counter()
                llm.map(prompts)
                firsts.append(time.perf_counter() - start)
            first = statistics.median(firsts)
            bound = calls * args.delay / concurrency
            before = len(server.requests)
            start = time.perf_counter()
            again = llm.map(prompts)
            cached = time.perf_counter() - start
            reached = len(server.requests) - before
            assert all(c.cached for c in again)
            print(f"concurrency {concurrency:>2}: {calls} calls in {first:.2f} s (median of {args.repeat}), "
                  f"bound {bound:.2f} s, "
                  f"ratio {first / bound:.2f}; cached rerun {cached * 1000:.0f} ms "
                  f"({100 * cached / first:.1f}% of the first run), {reached} requests reached the server")


if __name__ == "__main__":
    main()
