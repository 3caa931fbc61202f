"""Coverage of the kit's 95% intervals on known truths: how often each interval holds the true value.

The generative model of issue 49: a judge's integer score on 0-10 is ``round(10 * mu + question offset + noise)``,
clipped to 0-10 and divided by 10, with the question offset and the noise each N(0, 1.5). Three truths: mu = 0.6
(the middle of the scale), mu = 0.9 (near the ceiling: many 10s) and a skewed one (a question offset drawn from a
shifted exponential, so most questions are easy and a few hard). For each, at 3, 5, 10, 30 and 100 questions,
RUNS simulated studies; printed, the share of them whose interval held the truth:

- a cell's mean (``fabnb.core.stats.cell_means``, what every report shows), and the percentile bootstrap alone
  (``bootstrap_means``, what the kit showed before issue 49);
- the paired mode B - A gap (``fabnb.analysis.intervals.mode_gap``): B's mu 0.05 above A's, the same questions.

The truth of a cell is the expected clipped, rounded score, computed by a large simulation (2 million draws). An
interval not drawn ("no spread", one question) counts as a miss. Targets: 93-97% from 10 questions, at least 90%
at 5 and at 3 (or no interval).

Usage: python benchmarks/bench_coverage.py [--runs 400] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pandas as pd

from fabnb.analysis.intervals import mode_gap
from fabnb.core.stats import bootstrap_means, cell_means

from common import add_smoke, apply_smoke  # benchmarks/common.py

SIZES = (3, 5, 10, 30, 100)
SD = 1.5


def offsets(kind: str, n: int, rng) -> np.ndarray:
    """Question offsets (in score points): normal, or skewed (most questions easy, a few much harder)."""
    if kind == "skewed":
        return SD * (1.0 - rng.exponential(1.0, n))
    return rng.normal(0.0, SD, n)


def scores(mu: float, off: np.ndarray, rng) -> np.ndarray:
    return np.clip(np.round(10 * mu + off + rng.normal(0.0, SD, len(off))), 0, 10) / 10


def truth(mu: float, kind: str) -> float:
    rng = np.random.default_rng(12345)
    return float(scores(mu, offsets(kind, 2_000_000, rng), rng).mean())


def covered(frame: pd.DataFrame, value: float, low: str = "ci_low", high: str = "ci_high") -> float:
    ok = frame[low].notna() & (frame[low] <= value + 1e-12) & (value - 1e-12 <= frame[high])
    return float(ok.mean())


def study(mu: float, kind: str, n: int, runs: int, n_boot: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rows, gaps = [], []
    for run in range(runs):
        off = offsets(kind, n, rng)
        a, b = scores(mu, off, rng), scores(mu + 0.05, off, rng)
        ids = [f"q{i}" for i in range(n)]
        rows.append(pd.DataFrame({"run": run, "test_id": ids, "score": a}))
        gaps.append(pd.DataFrame({"run": run, "model": "m", "context_k": 4.0, "metric": "depth",
                                  "test_id": ids * 2, "mode": ["A"] * n + ["B"] * n,
                                  "score": np.concatenate([a, b])}))
    cells = pd.concat(rows)
    chosen = cell_means(cells, ["run"], n_boot=n_boot, bounds=(0.0, 1.0))
    percentile = bootstrap_means(cells, ["run"], n_boot=n_boot)
    paired = pd.concat([mode_gap(g.drop(columns="run"), n_boot=n_boot).query("metric == 'depth'")
                        for g in gaps])
    true_a, true_gap = truth(mu, kind), truth(mu + 0.05, kind) - truth(mu, kind)
    return {"truth": kind if kind != "normal" else f"mu {mu}", "questions": n,
            "cell mean (cell_means)": covered(chosen, true_a),
            "cell mean (percentile bootstrap)": covered(percentile, true_a),
            "paired B - A (mode_gap)": covered(paired, true_gap),
            "methods": ", ".join(sorted(set(chosen["method"])))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--n-boot", type=int, default=1000)
    add_smoke(parser)
    args = apply_smoke(parser.parse_args(), runs=20, n_boot=200)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; {args.runs} simulated studies per row, {args.n_boot} bootstrap draws")
    start = time.perf_counter()
    truths = [(0.6, "normal"), (0.9, "normal"), (0.6, "skewed")]
    sizes = (3, 10) if args.smoke else SIZES
    rows = [study(mu, kind, n, args.runs, args.n_boot, seed=1000 * i + n)
            for i, (mu, kind) in enumerate(truths) for n in sizes]
    table = pd.DataFrame(rows)
    for c in ("cell mean (cell_means)", "cell mean (percentile bootstrap)", "paired B - A (mode_gap)"):
        table[c] = table[c].map("{:.1%}".format)
    print(table.to_markdown(index=False))
    print(f"took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
