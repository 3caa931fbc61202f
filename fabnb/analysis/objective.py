"""The judge-free check beside the judged one: objective answers checked against the reference by window, with
intervals, next to the judge's factuality on the same cells, and how far the two agree.

:func:`fabnb.judge.reference.reference_scores` checks each answer of an objective question ([Choice], [Judge],
[Fill], [Calculation]) without an LLM. LongBench v2 keeps its whole evaluation multiple-choice for this reason: a
score no judge produced cannot carry a judge's bias. Here it is the check on the judge:

- :func:`reference_by_window`: the share of correct answers per system, window and mode, with its Wilson interval;
- :func:`reference_beside_judged`: that share and the judge's mean factuality on the same cells, side by side (the
  figure is :func:`fabnb.analysis.plots.plot_reference_check`);
- :func:`reference_agreement`: per system, the judge's verdict (factuality at or above a pass mark) against the
  check: agreement with its Wilson interval, Cohen's kappa, and the point-biserial correlation of the judge's score
  with correctness, with its Fisher interval.

Examples
--------
>>> ref = pd.DataFrame({"system": "s", "context_k": [4.0, 4.0, 8.0], "mode": "A", "test_id": ["q1", "q2", "q1"],
...                     "correct": [True, False, True]})
>>> reference_by_window(ref)[["context_k", "correct", "n", "rate"]].values.tolist()
[[4.0, 1.0, 2.0, 0.5], [8.0, 1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.stats import cell_means, fisher_z_interval, wilson_interval

__all__ = ["AGREEMENT_COLUMNS", "PASS_MARK", "reference_agreement", "reference_beside_judged",
           "reference_by_window"]

#: The judge's factuality that counts as "correct" when set against the check (the middle of the 0-1 scale).
PASS_MARK = 0.5
AGREEMENT_COLUMNS = ["system", "metric", "n", "agree", "agreement", "ci_low", "ci_high", "kappa", "r", "r_low",
                     "r_high", "judged_if_correct", "judged_if_wrong"]
_CELL = ["system", "context_k", "mode"]
_KEYS = ["system", "context_k", "mode", "test_id"]


def _checked(ref: pd.DataFrame) -> pd.DataFrame:
    """The cells the check could decide (``correct`` True or False), with a float window."""
    known = ref[ref["correct"].map(lambda v: isinstance(v, (bool, np.bool_)))]
    return known.assign(context_k=known["context_k"].astype(float), correct=known["correct"].astype(bool))


def reference_by_window(ref: pd.DataFrame) -> pd.DataFrame:
    """The share of objective answers the check finds correct, per system, window and mode, with its Wilson
    interval (cells the check cannot decide are left out).

    Parameters
    ----------
    ref : DataFrame
        :func:`fabnb.judge.reference.reference_scores` (system, context_k, mode, test_id, correct).

    Returns
    -------
    DataFrame
        system, context_k, mode, correct (how many), n, rate, ci_low, ci_high.
    """
    rows = []
    for key, g in _checked(ref).groupby(_CELL, sort=True):
        hits = int(g["correct"].sum())
        lo, hi = wilson_interval(hits, len(g))
        rows.append({**dict(zip(_CELL, key)), "correct": hits, "n": len(g), "rate": hits / len(g), "ci_low": lo,
                     "ci_high": hi})
    return pd.DataFrame(rows, columns=[*_CELL, "correct", "n", "rate", "ci_low", "ci_high"])


def _judged(scores: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The judge's mean score per cell (replicates averaged) for one metric."""
    s = scores[(scores["metric"] == metric) & (scores.get("status", "ok") == "ok")]
    s = s.assign(context_k=s["context_k"].astype(float), score=pd.to_numeric(s["score"], errors="coerce"))
    return s.groupby(_KEYS, as_index=False)["score"].mean()


def reference_beside_judged(ref: pd.DataFrame, scores: pd.DataFrame, metric: str = "factuality", *,
                            n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The check's share correct and the judge's mean ``metric`` on the same objective cells, per system, window
    and mode, each with its interval (Wilson for the share, :func:`fabnb.core.stats.cell_means` for the mean).

    Returns
    -------
    DataFrame
        system, context_k, mode, n, rate, rate_low, rate_high, judged, judged_low, judged_high, judged_method.

    Examples
    --------
    >>> ref = pd.DataFrame({"system": "s", "context_k": 4.0, "mode": "A", "test_id": ["q1", "q2"],
    ...                     "correct": [True, False]})
    >>> scores = ref[["system", "context_k", "mode", "test_id"]].assign(metric="factuality", score=[0.9, 0.3])
    >>> reference_beside_judged(ref, scores)[["n", "rate", "judged"]].round(2).values.tolist()
    [[2.0, 0.5, 0.6]]
    """
    columns = [*_CELL, "n", "rate", "rate_low", "rate_high", "judged", "judged_low", "judged_high", "judged_method"]
    both = _checked(ref)[_KEYS + ["correct"]].merge(_judged(scores, metric), on=_KEYS)
    if both.empty:
        return pd.DataFrame(columns=columns)
    rate = reference_by_window(both).rename(columns={"ci_low": "rate_low", "ci_high": "rate_high"})
    judged = cell_means(both, _CELL, n_boot=n_boot, seed=seed, bounds=(0.0, 1.0)).rename(
        columns={"mean": "judged", "ci_low": "judged_low", "ci_high": "judged_high", "method": "judged_method"})
    out = rate.merge(judged[[*_CELL, "judged", "judged_low", "judged_high", "judged_method"]], on=_CELL)
    return out[columns]


def reference_agreement(ref: pd.DataFrame, scores: pd.DataFrame, metric: str = "factuality",
                        pass_mark: float = PASS_MARK) -> pd.DataFrame:
    """How far the judge's ``metric`` agrees with the judge-free check, per system over its objective cells.

    The judge *passes* an answer whose mean score is at or above ``pass_mark``; agreement is the share of cells
    where pass and correct coincide (Wilson interval), kappa corrects it for chance (Cohen), and r is the
    point-biserial correlation of the judge's score with correctness (Fisher interval; NaN below four cells or
    without spread on either side).

    Returns
    -------
    DataFrame
        :data:`AGREEMENT_COLUMNS`: n, agree, agreement, ci_low, ci_high, kappa, r, r_low, r_high, and the judge's
        mean score on the answers the check finds correct and on those it finds wrong.

    Examples
    --------
    >>> ref = pd.DataFrame({"system": "s", "context_k": 4.0, "mode": "A", "test_id": [f"q{i}" for i in range(6)],
    ...                     "correct": [True, True, True, False, False, False]})
    >>> scores = ref[["system", "context_k", "mode", "test_id"]].assign(metric="factuality",
    ...                                                                 score=[0.9, 0.8, 0.4, 0.2, 0.1, 0.6])
    >>> row = reference_agreement(ref, scores).iloc[0]
    >>> int(row["agree"]), int(row["n"]), round(float(row["kappa"]), 3)
    (4, 6, 0.333)
    """
    from sklearn.metrics import cohen_kappa_score

    both = _checked(ref)[_KEYS + ["correct"]].merge(_judged(scores, metric), on=_KEYS).dropna(subset=["score"])
    rows = []
    for system, g in both.groupby("system", sort=True):
        passed, correct = g["score"] >= pass_mark, g["correct"]
        agree = int((passed == correct).sum())
        lo, hi = wilson_interval(agree, len(g))
        spread = g["score"].nunique() > 1 and correct.nunique() > 1
        r = float(np.corrcoef(g["score"], correct.astype(float))[0, 1]) if spread else np.nan
        r_lo, r_hi = fisher_z_interval(r, len(g))
        kappa = (float(cohen_kappa_score(passed, correct)) if passed.nunique() > 1 or correct.nunique() > 1
                 else np.nan)
        rows.append({"system": system, "metric": metric, "n": len(g), "agree": agree, "agreement": agree / len(g),
                     "ci_low": lo, "ci_high": hi, "kappa": kappa, "r": r, "r_low": r_lo, "r_high": r_hi,
                     "judged_if_correct": g.loc[correct, "score"].mean(),
                     "judged_if_wrong": g.loc[~correct, "score"].mean()})
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)
