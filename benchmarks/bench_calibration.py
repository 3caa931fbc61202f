"""Judge calibration, simulated: how often the prediction-powered mean and the judge's own mean hold the truth.

Each simulated study: a population of cells with a true score t (whole numbers 2-8 of 10), a judge that scores
t + bias + (-1, 0 or +1) (clipped to 0-10), two experts who each score t + (-1, 0 or +1); a uniform sample of the
cells is rated by both experts. ``fabnb.judge.calibration.corrected_means`` gives the judge's own mean with its
interval and the prediction-powered one; ``judge_agreement`` the bias judge - experts with its interval. Printed:
the share of studies whose 95% interval held the true mean (t / 10 over the population) and the true bias, and the
intervals' mean widths, for each bias and sample size. Issue 50's claim: the corrected means cover the truth where
the judge's own do not.

Usage: python benchmarks/bench_calibration.py [--studies 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pandas as pd

from common import add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)


def one_study(rng, cells: int, n: int, bias: int):
    from fabnb.judge.calibration import corrected_means, judge_agreement

    t = rng.integers(2, 9, cells)
    judge = np.clip(t + bias + rng.integers(-1, 2, cells), 0, 10) / 10
    ids = [f"C{i}" for i in range(cells)]
    judged = pd.DataFrame({"item_id": ids, "metric": "depth", "score": judge})
    picked = np.sort(rng.choice(cells, n, replace=False))
    ratings = pd.DataFrame([{"rater": r, "item_id": ids[i], "dimension": "depth",
                             "score": int(np.clip(t[i] + rng.integers(-1, 2), 0, 10))}
                            for r in ("ana", "ben") for i in picked])
    sample = judged.iloc[picked]
    c = corrected_means(judged, sample, ratings, ["depth"]).iloc[0]
    a = judge_agreement(sample, ratings, ["depth"], n_boot=1).set_index("statistic").loc["bias"]
    truth, true_bias = t.mean() / 10, float((judge - t / 10).mean())
    return {"ppi": c["ci_low"] <= truth <= c["ci_high"], "own": c["judge_ci_low"] <= truth <= c["judge_ci_high"],
            "bias": a["ci_low"] <= true_bias <= a["ci_high"], "ppi_width": c["ci_high"] - c["ci_low"],
            "own_width": c["judge_ci_high"] - c["judge_ci_low"], "bias_width": a["ci_high"] - a["ci_low"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--cells", type=int, default=2000)
    add_smoke(parser)
    args = apply_smoke(parser.parse_args(), studies=5, cells=200)
    start = time.perf_counter()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{args.studies} studies per row, {args.cells:,} cells each, seeded")
    print("| judge bias (of 10) | rated cells | corrected mean holds the truth | judge's own mean holds it | "
          "bias interval holds it | widths: corrected, own, bias |")
    print("|---:|---:|---:|---:|---:|---|")
    for bias in (0, 2):
        for n in (50, 150):
            rng = np.random.default_rng(1000 * bias + n)
            rows = pd.DataFrame([one_study(rng, args.cells, n, bias) for _ in range(args.studies)])
            print(f"| {bias} | {n} | {rows['ppi'].mean():.1%} | {rows['own'].mean():.1%} | {rows['bias'].mean():.1%}"
                  f" | {rows['ppi_width'].mean():.3f}, {rows['own_width'].mean():.3f}, "
                  f"{rows['bias_width'].mean():.3f} |")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
