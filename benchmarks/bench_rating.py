"""Rating store: time to open a session over 1,300 candidates, and per-rating save latency.

Every save is a real append + fsync to disk (the store's durability). Prints p50/p95/max
save latency over 300 ratings (goal: under 20 ms) and the time to open a session and
find where to resume (goal: under 1 s).

Usage: python benchmarks/bench_rating.py
"""

import os
import platform
import statistics
import tempfile
import time

import numpy as np
import pandas as pd

from fabnb.rating import RatingSession, RatingStore


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    items = pd.DataFrame({"item_id": [f"Q{i:04d}" for i in range(1300)], "question": "x" * 300,
                          "ground_truth_answer": "y" * 600, "generation_metadata": [{"t": 0.5}] * 1300})
    with tempfile.TemporaryDirectory() as tmp:
        store = RatingStore(tmp)
        session = RatingSession(items, "ana", store, seed=1)
        latencies = []
        for item in session.order[:300]:
            t = time.perf_counter()
            session.rate(item, accuracy=4, relevance=5, difficulty=3, diversity=2)
            latencies.append((time.perf_counter() - t) * 1000)
        p50, p95 = np.percentile(latencies, [50, 95])
        print(f"save latency over 300 ratings: p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {max(latencies):.2f} ms")
        opens = []
        for _ in range(5):
            t = time.perf_counter()
            resumed = RatingSession(items, "ana", RatingStore(tmp), seed=1)
            resumed.next_unrated()
            resumed.progress()
            opens.append(time.perf_counter() - t)
        print(f"open a session over 1,300 candidates with 300 ratings stored and resume: "
              f"median {statistics.median(opens) * 1000:.0f} ms over 5")


if __name__ == "__main__":
    main()
