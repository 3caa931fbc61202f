"""Coverage of the kit's 95% intervals on known truths: how often each interval holds the true value.

The generative model of issue 49: a judge's integer score on 0-10 is ``round(10 * mu + question offset + noise)``,
clipped to 0-10 and divided by 10, with the question offset and the noise each N(0, 1.5). Three truths: mu = 0.6
(the middle of the scale), mu = 0.9 (near the ceiling: many 10s) and a skewed one (a question offset drawn from a
shifted exponential, so most questions are easy and a few hard). For each, at 3, 5, 10, 30 and 100 questions,
RUNS simulated studies; printed, the share of them whose interval held the truth:

- a cell's mean (``fabnb.core.stats.cell_means``, what every report shows), and the percentile bootstrap alone
  (``bootstrap_means``, what the kit showed before issue 49);
- the paired mode B - A gap (``fabnb.analysis.intervals.mode_gap``): B's mu 0.05 above A's, the same questions;
- a system difference at one window (``fabnb.analysis.comparison.routing_table(per_question=)``: the leader minus the
  runner-up, paired; the truth signed by which system led): system b's mu 0.03 above a's;
- the slope on ln(context) of a curve (``classify_scaling``'s, per question, over 5 windows 1-16K; truth
  mu = 0.35 + 0.06 ln k; drawn at 95%: ``ci=0.90`` shared by a curve's two decisions) and a correlation's
  Fisher-z interval (``metric_correlations``: two metrics sharing the question offset, r about 0.5 in truth).

A second table gives the scaling labels' error rates (``classify_scaling``): on a flat truth, the share of studies
given a growth, decline or saturation label (target: at most 5%); on the log truth above, the share labelled
logarithmic growth (target: at least 80% at 30 questions).

The truth of a cell is the expected clipped, rounded score, computed by a large simulation (2 million draws). An
interval not drawn ("no spread", one question) counts as a miss. Targets: 93-97% from 10 questions, at least 90%
at 5 and at 3 (or no interval).

Usage: python benchmarks/bench_coverage.py [--runs 400] [--label-runs 200] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pandas as pd

from fabnb.analysis.comparison import routing_table
from fabnb.analysis.curves import classify_scaling
from fabnb.analysis.intervals import mode_gap
from fabnb.analysis.metrics import metric_correlations
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


WINDOWS = (1.0, 2.0, 4.0, 8.0, 16.0)


def log_mu(k: float) -> float:
    return 0.35 + 0.06 * np.log(k)


def curve(mu_of, n: int, rng) -> pd.DataFrame:
    """One study of one metric over WINDOWS: per-question scores of the generative model."""
    off = offsets("normal", n, rng)
    return pd.DataFrame([{"model": "m", "context_k": k, "metric": "depth", "test_id": f"q{q}", "score": v}
                         for k in WINDOWS for q, v in enumerate(scores(mu_of(k), off, rng))])


def true_slope() -> float:
    """The slope on ln k of the expected (clipped, rounded) scores: what the mean of per-question slopes estimates."""
    x = np.log(WINDOWS)
    y = np.array([truth(log_mu(k), "normal") for k in WINDOWS])
    return float(np.polyfit(x, y, 1)[0])


def correlated(n: int, rng) -> pd.DataFrame:
    """Two metrics sharing the question's offset (and each its own noise): r about 0.5."""
    off = offsets("normal", n, rng)
    return pd.DataFrame([{"model": "m", "context_k": 4.0, "test_id": f"q{q}", "metric": m, "score": v}
                         for m in ("depth", "relevance") for q, v in enumerate(scores(0.6, off, rng))])


def true_r() -> float:
    rng = np.random.default_rng(54321)
    off = offsets("normal", 1_000_000, rng)
    return float(np.corrcoef(scores(0.6, off, rng), scores(0.6, off, rng))[0, 1])


def extra(n: int, runs: int, n_boot: int, seed: int, slope: float, r: float, diff: float) -> dict:
    """Coverage of a system difference, a slope and a correlation at ``n`` questions."""
    rng = np.random.default_rng(seed)
    hit = {"system a - b (routing_table)": 0, "slope (classify_scaling at 95%)": 0, "r (Fisher z)": 0}
    for _ in range(runs):
        off = offsets("normal", n, rng)
        pair = pd.DataFrame([{"model": s, "context_k": 4.0, "metric": "depth", "test_id": f"q{q}", "score": v}
                             for s, mu in (("a", 0.6), ("b", 0.63)) for q, v in enumerate(scores(mu, off, rng))])
        means = pair.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
        row = routing_table(means, "depth", per_question=pair, n_boot=n_boot).iloc[0]
        signed = diff if row["best_model"] == "b" else -diff
        hit["system a - b (routing_table)"] += bool(row["margin_ci_low"] <= signed <= row["margin_ci_high"])
        # ci=0.90: one curve is two decisions, so its slope's interval is drawn at 1 - 0.10 / 2 = 95%
        label = classify_scaling(curve(log_mu, n, rng), "depth", ci=0.90, n_boot=n_boot).iloc[0]
        hit["slope (classify_scaling at 95%)"] += bool(label.get("slope_ci_low", np.nan) <= slope
                                                <= label.get("slope_ci_high", np.nan))
        c = metric_correlations(correlated(n, rng), metrics=["depth", "relevance"], min_n=0).iloc[0]
        hit["r (Fisher z)"] += bool(c["r_ci_low"] <= r <= c["r_ci_high"])
    out = {k: v / runs for k, v in hit.items()}
    if n < 4:  # Fisher z needs 4 observations: the kit draws no interval, as the target allows at 3 questions
        out["r (Fisher z)"] = "no interval"
    return out


def labels(n: int, runs: int, n_boot: int, seed: int) -> dict:
    """Error rates of the scaling labels at ``n`` questions."""
    rng = np.random.default_rng(seed)
    shaped = grown = 0
    for _ in range(runs):
        flat = classify_scaling(curve(lambda k: 0.6, n, rng), "depth", n_boot=n_boot)["label"].item()
        shaped += flat not in ("undetermined", "flat (no context effect)")
        grown += classify_scaling(curve(log_mu, n, rng), "depth", n_boot=n_boot)["label"].item() == \
            "logarithmic growth"
    return {"questions": n, "flat truth: growth, decline or saturation label": shaped / runs,
            "log truth: labelled logarithmic growth": grown / runs}


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
    parser.add_argument("--label-runs", type=int, default=200, help="simulated studies per row of the labels table")
    add_smoke(parser)
    args = apply_smoke(parser.parse_args(), runs=8, n_boot=100, label_runs=4)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; {args.runs} simulated studies per row, {args.n_boot} bootstrap draws")
    start = time.perf_counter()
    truths = [(0.6, "normal"), (0.9, "normal"), (0.6, "skewed")]
    sizes = (3, 10) if args.smoke else SIZES
    rows = [study(mu, kind, n, args.runs, args.n_boot, seed=1000 * i + n)
            for i, (mu, kind) in enumerate(truths) for n in sizes]
    table = pd.DataFrame(rows)
    slope, r, diff = true_slope(), true_r(), truth(0.63, "normal") - truth(0.6, "normal")
    more = pd.DataFrame([{"truth": "mu 0.6", "questions": n,
                          **extra(n, args.runs, args.n_boot, 7000 + n, slope, r, diff)} for n in sizes])
    table = table.merge(more, on=["truth", "questions"], how="left")
    for c in table.columns[2:]:
        if c != "methods":
            table[c] = table[c].map(lambda v: v if isinstance(v, str) else "" if pd.isna(v) else f"{v:.1%}")
    print(table.to_markdown(index=False))
    print(f"\ntruths: slope {slope:.4f} per ln(context), r {r:.3f}, system difference {diff:.4f}\n")
    label_sizes = (5, 10) if args.smoke else (5, 10, 30, 100)
    rates = pd.DataFrame([labels(n, args.label_runs, args.n_boot, 9000 + n) for n in label_sizes])
    for c in rates.columns[1:]:
        rates[c] = rates[c].map("{:.1%}".format)
    print(f"scaling labels, {args.label_runs} studies per row (5 windows, 1-16K; plateau delta 0.05):")
    print(rates.to_markdown(index=False))
    print(f"took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
