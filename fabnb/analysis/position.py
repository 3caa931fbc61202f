"""Where the gold evidence sat: the score against the evidence's depth in the window ("lost in the middle").

Two sources of depth, kept apart because they answer different questions:

- **the position sweep** (``[contexts] positions``, modes ``P0`` ... ``P100``): the gold passage placed at chosen
  depths among the window's other chunks, the same questions at every depth; a difference between depths is the
  position's effect (:func:`score_by_depth`, :func:`position_effect`);
- **where retrieval put it** (mode A of a system whose context the kit builds: ``evidence_depth`` of each answer
  cell, :func:`fabnb.rag.grid.evidence_position`): observed, not placed, so a depth band also differs in which
  questions land there (:func:`score_by_evidence_depth`).

Every mean has the interval :func:`fabnb.core.stats.cell_means` chooses for its n; a position effect is claimed only
under the kit's multiple-comparison policy (:data:`fabnb.core.stats.FAMILY_METHOD`), one family per table.

Examples
--------
>>> rows = [{"system": "s", "context_k": 8.0, "mode": f"P{d}", "test_id": f"q{i}", "metric": "factuality",
...          "score": float(d <= 50) * 0.8 + 0.1 + 0.01 * (i % 3)} for d in (0, 50, 100) for i in range(12)]
>>> effect = position_effect(pd.DataFrame(rows))
>>> effect[["best", "worst", "claimed"]].values.tolist()
[['0%', '100%', True]]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.stats import adjust_pvalues, cell_means

__all__ = ["DEPTH_BANDS", "EFFECT_COLUMNS", "position_effect", "score_by_depth",
           "score_by_evidence_depth"]

#: The bands of :func:`score_by_evidence_depth`: the observed relative depth in quarters.
DEPTH_BANDS = ("0-25%", "25-50%", "50-75%", "75-100%")
EFFECT_COLUMNS = ["system", "context_k", "metric", "depths", "n", "best", "worst", "spread", "statistic", "p_value",
                  "p_holm", "claimed", "test", "said"]
_CELL = ["system", "context_k", "metric"]


def _swept(scores: pd.DataFrame) -> pd.DataFrame:
    """The position sweep's rows, with ``depth`` in percent (from the mode, ``P25`` is 25)."""
    mode = scores["mode"].astype(str)
    rows = scores[mode.str.fullmatch(r"P\d{1,3}") & (scores.get("status", "ok") == "ok")]
    return rows.assign(depth=rows["mode"].str[1:].astype(int), context_k=rows["context_k"].astype(float),
                       score=pd.to_numeric(rows["score"], errors="coerce"))


def score_by_depth(scores: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The mean score at each depth of the position sweep, per system, window and metric, with its interval.

    Parameters
    ----------
    scores : DataFrame
        Judge scores (system, context_k, mode, test_id, metric, score; replicates are averaged per question
        first); the rows of modes ``P<percent>`` are read, others ignored.

    Returns
    -------
    DataFrame
        system, context_k, metric, depth (percent), mean, ci_low, ci_high, n (questions), method: the interval
        :func:`fabnb.core.stats.cell_means` chooses for n.

    Examples
    --------
    >>> s = pd.DataFrame({"system": "s", "context_k": 4.0, "mode": ["P0", "P0", "P100", "P100"],
    ...                   "test_id": ["q1", "q2", "q1", "q2"], "metric": "factuality", "score": [1.0, 0.8, 0.2, 0.4]})
    >>> t = score_by_depth(s)
    >>> t["depth"].tolist(), t["mean"].round(3).tolist(), t["n"].tolist()
    ([0, 100], [0.9, 0.3], [2, 2])
    """
    rows = _swept(scores)
    if rows.empty:
        return pd.DataFrame(columns=[*_CELL, "depth", "mean", "ci_low", "ci_high", "n", "method"])
    out = cell_means(rows, [*_CELL, "depth"], n_boot=n_boot, seed=seed, bounds=(0.0, 1.0))
    return out.drop(columns="n").rename(columns={"n_clusters": "n"})[[*_CELL, "depth", "mean", "ci_low", "ci_high",
                                                                       "n", "method"]]


def _test(wide: pd.DataFrame) -> tuple[float, float, str]:
    """The omnibus test that the depths differ, over the questions asked at every depth: Friedman's (three depths
    or more), the paired t test (two); ``(nan, 1.0, ...)`` when no question's score moves with the depth."""
    from scipy import stats

    values = wide.to_numpy(float)
    if not np.ptp(values, axis=1).any():  # every question scored alike at every depth: nothing to test
        return np.nan, 1.0, "none (no question's score moved)"
    if values.shape[1] == 2:
        t = stats.ttest_rel(values[:, 0], values[:, 1])
        return float(t.statistic), float(t.pvalue), "paired t"
    f = stats.friedmanchisquare(*values.T)
    return float(f.statistic), float(f.pvalue), "Friedman"


def position_effect(scores: pd.DataFrame, *, min_questions: int = 5, alpha: float = 0.05) -> pd.DataFrame:
    """Does the score depend on where the gold passage sat? One row per system, window and metric of the sweep.

    The questions asked at every depth are compared across depths (Friedman's test; the paired t test for two
    depths); the p-values of the table are Holm-adjusted as one family, and an effect is *claimed* only below
    ``alpha``. Fewer than ``min_questions`` such questions and the row says so instead of testing. ``best`` and
    ``worst`` name the depths of the highest and lowest mean: with no claim they are not a finding.

    Returns
    -------
    DataFrame
        :data:`EFFECT_COLUMNS`: depths (how many), n (questions at every depth), best, worst, spread (best mean -
        worst mean), statistic, p_value, p_holm, claimed, test, said (the sentence a report prints).

    Examples
    --------
    >>> rows = [{"system": "s", "context_k": 4.0, "mode": f"P{d}", "test_id": f"q{i}", "metric": "factuality",
    ...          "score": 0.5 + 0.05 * (i % 4)} for d in (0, 50, 100) for i in range(8)]
    >>> position_effect(pd.DataFrame(rows))["said"].item()
    "no position effect this sample can show (none (no question's score moved), Holm p = 1, n = 8)"
    """
    rows = _swept(scores)
    out = []
    for key, g in rows.groupby(_CELL, sort=True):
        wide = g.pivot_table(index="test_id", columns="depth", values="score", aggfunc="mean").dropna()
        means = wide.mean()
        row = {**dict(zip(_CELL, key)), "depths": wide.shape[1], "n": len(wide), "best": "", "worst": "",
               "spread": np.nan, "statistic": np.nan, "p_value": np.nan, "test": ""}
        if wide.shape[1] < 2 or len(wide) < min_questions:
            row["test"] = f"not tested (needs two depths and {min_questions} questions asked at every depth)"
        else:
            row.update(best=f"{means.idxmax():d}%", worst=f"{means.idxmin():d}%",
                       spread=float(means.max() - means.min()))
            row["statistic"], row["p_value"], row["test"] = _test(wide)
        out.append(row)
    table = pd.DataFrame(out, columns=[c for c in EFFECT_COLUMNS if c not in ("p_holm", "claimed", "said")])
    table["p_holm"] = adjust_pvalues(table["p_value"].to_numpy(float)) if len(table) else []
    table["claimed"] = table["p_holm"] < alpha
    table["said"] = [_said(r, alpha) for r in table.itertuples()]
    return table[EFFECT_COLUMNS]


def _said(r, alpha: float) -> str:
    if not r.best:
        return r.test
    if r.claimed:
        return (f"position matters: best at {r.best}, worst at {r.worst} ({r.spread:.3f} apart; {r.test}, "
                f"Holm p = {r.p_holm:.3g}, n = {r.n})")
    return f"no position effect this sample can show ({r.test}, Holm p = {r.p_holm:.3g}, n = {r.n})"


def score_by_evidence_depth(answers: pd.DataFrame, scores: pd.DataFrame, *, n_boot: int = 2000,
                            seed: int = 0) -> pd.DataFrame:
    """The mean score by where retrieval put the gold evidence (mode A), in quarters of the window, and where it
    brought none ("absent"). Observed, not placed: each band holds different questions (see the module's note).

    Parameters
    ----------
    answers : DataFrame
        Answer cells: the results keys, gold_retrieved and evidence_depth (NaN where the kit did not build the
        context; those cells are left out).
    scores : DataFrame
        Judge scores of the same cells (system, context_k, mode, test_id, metric, score).

    Returns
    -------
    DataFrame
        system, context_k, metric, band (:data:`DEPTH_BANDS` or "absent"), mean, ci_low, ci_high, n, method.

    Examples
    --------
    >>> a = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": ["q1", "q2", "q3"],
    ...                   "status": "ok", "gold_retrieved": [True, True, False], "evidence_depth": [0.1, 0.9, None]})
    >>> s = a[["system", "context_k", "mode", "test_id"]].assign(metric="factuality", score=[0.9, 0.5, 0.1])
    >>> score_by_evidence_depth(a, s)[["band", "mean"]].values.tolist()
    [['0-25%', 0.9], ['75-100%', 0.5], ['absent', 0.1]]
    """
    columns = [*_CELL, "band", "mean", "ci_low", "ci_high", "n", "method"]
    if "evidence_depth" not in answers or answers.empty:
        return pd.DataFrame(columns=columns)
    a = answers[(answers["mode"] == "A") & (answers["status"] == "ok")]
    depth = pd.to_numeric(a["evidence_depth"], errors="coerce")
    known = depth.notna() | (a["gold_retrieved"] == False)  # noqa: E712 - absent is a known place; None is not
    band = pd.cut(depth, [-0.001, 0.25, 0.5, 0.75, 1.0], labels=list(DEPTH_BANDS)).astype(object)
    a = a[known].assign(band=band[known].where(depth[known].notna(), "absent"))
    keys = ["system", "context_k", "mode", "test_id"]
    merged = scores.assign(context_k=scores["context_k"].astype(float)).merge(
        a[keys + ["band"]].assign(context_k=a["context_k"].astype(float)), on=keys)
    if merged.empty:
        return pd.DataFrame(columns=columns)
    merged["score"] = pd.to_numeric(merged["score"], errors="coerce")
    out = cell_means(merged, [*_CELL, "band"], n_boot=n_boot, seed=seed, bounds=(0.0, 1.0))
    return out.drop(columns="n").rename(columns={"n_clusters": "n"})[columns]
