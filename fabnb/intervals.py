"""Intervals over questions: each cell's mean with its bootstrap interval, and the paired B - A gap of dual mode.

The unit a benchmark samples is the question, so every interval here resamples questions
(:func:`fabnb.stats.bootstrap_means`; replicates of one question move together). Both functions
take a per-question score frame (:mod:`fabnb.scores` with a ``test_id`` column, e.g.
``fabnb.judge.to_score_frame(scores, by=(..., "test_id", "metric"))``) and return a new tidy frame.
``docs/statistics.md`` gives the methods and their sources.
"""

from __future__ import annotations

import pandas as pd

from .analysis import dual_mode_delta
from .schema import SCORE_KEYS
from .scores import ScoreError, with_average
from .stats import N_BOOT, SEED, bootstrap_means

__all__ = ["mean_intervals", "mode_gap"]


def _per_question(scores: pd.DataFrame) -> pd.DataFrame:
    """Per-question scores (replicates averaged) with an ``average`` row per question where it is missing."""
    keys = [c for c in SCORE_KEYS if c in scores.columns] + ["metric"]
    if "test_id" not in keys:
        raise ScoreError("intervals over questions need per-question scores (a 'test_id' column); "
                         "fabnb.judge.to_score_frame(scores, by=(..., 'test_id', 'metric')) gives them.")
    means = scores.assign(score=scores["score"].astype(float)).groupby(keys, dropna=False)["score"].mean()
    return with_average(means.reset_index())


def mean_intervals(scores: pd.DataFrame, *, n_boot: int | None = None, seed: int | None = None,
                   ci: float = 0.95) -> pd.DataFrame:
    """Each cell's mean score with a bootstrap interval over its questions (:func:`fabnb.bootstrap_means`).

    Parameters
    ----------
    scores : DataFrame
        A per-question score frame (with ``test_id``; replicates, where several rows share a question,
        are averaged first). The ``average`` is made per question where absent.

    Returns
    -------
    DataFrame
        The frame's key columns without test_id, metric, mean, ci_low, ci_high, n (questions), and
        shown (``"0.712 [0.650, 0.770]"``, or ``"0.700, no interval (n = 1)"``).

    Examples
    --------
    >>> df = pd.DataFrame({"model": "m", "context_k": 4.0, "metric": "depth", "test_id": ["a", "b", "c"],
    ...                    "score": [0.5, 0.6, 0.7]})
    >>> mean_intervals(df, n_boot=200).query("metric == 'depth'")["n"].tolist()
    [3]
    """
    per = _per_question(scores)
    by = [c for c in SCORE_KEYS if c in per.columns and c != "test_id"] + ["metric"]
    out = bootstrap_means(per, by, n_boot=N_BOOT if n_boot is None else n_boot,
                                seed=SEED if seed is None else seed, ci=ci)
    out = out.drop(columns="n").rename(columns={"n_clusters": "n"})
    out["shown"] = [_shown(m, lo, hi, n) for m, lo, hi, n in zip(out["mean"], out["ci_low"], out["ci_high"], out["n"])]
    return out


def _shown(mean, lo, hi, n) -> str:
    if pd.isna(mean):
        return "-"
    if pd.isna(lo):
        return f"{mean:.3f}, no interval (n = {int(n)})"
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def mode_gap(scores: pd.DataFrame, *, n_boot: int | None = None, seed: int | None = None,
             ci: float = 0.95) -> pd.DataFrame:
    """Mode B minus mode A per cell: the mean paired difference over the same questions, with its interval.

    Mode B injects the gold context, mode A lets the system retrieve (Appendix F.3): B - A is what
    retrieval costs. Only questions answered and scored in both modes count (paired); the interval is
    a bootstrap over those questions (:func:`fabnb.bootstrap_means` of the per-question differences).

    Parameters
    ----------
    scores : DataFrame
        A per-question score frame with ``mode`` (A/B) and ``test_id``.

    Returns
    -------
    DataFrame
        The key columns without mode and test_id, metric, n (paired questions), score_a, score_b,
        delta (mean of B - A), ci_low, ci_high, b_better (share of questions where B scored higher),
        ties (share where equal).

    Examples
    --------
    >>> df = pd.DataFrame({"model": "m", "context_k": 4.0, "metric": "depth", "test_id": ["a", "a", "b", "b"],
    ...                    "mode": ["A", "B"] * 2, "score": [0.4, 0.9, 0.5, 0.5]})
    >>> r = mode_gap(df, n_boot=200).query("metric == 'depth'").iloc[0]
    >>> int(r["n"]), float(r["delta"]), float(r["b_better"]), float(r["ties"])
    (2, 0.25, 0.5, 0.5)
    """
    per = dual_mode_delta(_per_question(scores))
    per = per[per["paired"]]
    by = [c for c in SCORE_KEYS if c in per.columns and c not in ("mode", "test_id")] + ["metric"]
    columns = [*by, "n", "score_a", "score_b", "delta", "ci_low", "ci_high", "b_better", "ties"]
    if per.empty:
        return pd.DataFrame(columns=columns)
    boot = bootstrap_means(per, by, value="delta", n_boot=N_BOOT if n_boot is None else n_boot,
                                 seed=SEED if seed is None else seed, ci=ci)
    sides = per.assign(b_better=per["delta"] > 1e-12, ties=per["delta"].abs() <= 1e-12).groupby(
        by, dropna=False).agg(score_a=("score_a", "mean"), score_b=("score_b", "mean"),
                              b_better=("b_better", "mean"), ties=("ties", "mean")).reset_index()
    out = boot.rename(columns={"mean": "delta"}).drop(columns="n").rename(columns={"n_clusters": "n"})
    return out.merge(sides, on=by, how="left")[columns]
