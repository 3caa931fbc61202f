"""How the six metrics relate (Section 5): correlations with their intervals, attention dilution between two
windows, metric profiles and gaps at one operating point, and the check of reported averages.

Every function takes a score frame (see :mod:`fabnb.core.scores`) and returns a new tidy DataFrame; none mutates
its input.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd

from ..core.schema import AVERAGE, METRICS, SCORE_KEYS
from ..core.scores import ScoreError, at_window, metric_sweep

__all__ = ['MIN_CORRELATION_N', 'check_averages', 'compare_correlations', 'dilution', 'metric_correlations',
           'metric_gaps', 'metric_profile']

#: Observations a correlation needs before the report shows it: below 10, even r = 0.6 has a 95% interval
#: (Fisher z) that reaches below 0 (-0.05 to 0.89 at n = 10), so the coefficient says nothing about its sign.
MIN_CORRELATION_N = 10

# --------------------------------------------------------------------- correlations


def metric_correlations(
    scores: pd.DataFrame, method: str = "pearson", by: str | None = None, metrics=METRICS,
    min_n: int = MIN_CORRELATION_N,
) -> pd.DataFrame:
    """Correlations between metrics across configurations, with p-values and n.

    Each configuration (a distinct system, model, context, output, mode and
    question where those columns exist) is one observation of the six metrics.

    Parameters
    ----------
    method : {"pearson", "spearman"}
    by : str or None
        Column to compute separate tables for (e.g. ``"model"``); None pools all.
    min_n : int
        Observations a coefficient needs to be shown (:data:`MIN_CORRELATION_N`); below it
        ``enough`` is False (r is still computed from 3 up, for whoever wants it).

    Returns
    -------
    DataFrame
        group ("all" when pooled), metric_a, metric_b (each unordered pair once, in
        metric order), method, r, r_ci_low, r_ci_high (95%, Fisher z: :func:`fabnb.core.stats.fisher_z_interval`,
        unadjusted), p_value, n, enough (n >= ``min_n``), p_holm (Holm over the group's pairs, one family:
        :data:`fabnb.core.stats.FAMILY_METHOD`).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"model": "m", "context_k": [4, 4, 8, 8, 16, 16],
    ...                    "metric": ["depth", "relevance"] * 3, "score": [.1, .2, .2, .4, .3, .6]})
    >>> metric_correlations(df, metrics=["depth", "relevance"]).r.round(6).tolist()
    [1.0]
    """
    from scipy import stats

    from ..core.stats import adjust_pvalues, fisher_z_interval

    test = {"pearson": stats.pearsonr, "spearman": stats.spearmanr}.get(method)
    if test is None:
        raise ValueError(f"method must be 'pearson' or 'spearman', not {method!r}")
    keys = [c for c in SCORE_KEYS if c in scores.columns]
    chosen = scores[scores["metric"].isin(metrics)]
    if chosen.empty:
        raise ValueError(f"no scores of the metrics {list(metrics)} to correlate")
    wide = chosen.pivot_table(index=keys, columns="metric", values="score", aggfunc="first", dropna=False
                              ).reset_index()
    for m in metrics:  # a metric with no score at all: an empty column, so its pairs show n = 0
        if m not in wide.columns:
            wide[m] = np.nan
    groups = [("all", wide)] if by is None else list(wide.groupby(by, sort=False))
    rows = []
    for name, g in groups:
        for a, b in combinations(list(metrics), 2):
            pair = g[[a, b]].dropna()
            if len(pair) < 3 or pair[a].nunique() < 2 or pair[b].nunique() < 2:
                r, p = float("nan"), float("nan")
            else:
                r, p = test(pair[a], pair[b])
            lo, hi = fisher_z_interval(float(r), len(pair))
            rows.append({"group": name, "metric_a": a, "metric_b": b, "method": method,
                         "r": float(r), "r_ci_low": lo, "r_ci_high": hi, "p_value": float(p), "n": len(pair),
                         "enough": bool(len(pair) >= min_n and not math.isnan(float(r)))})
    out = pd.DataFrame(rows)
    # One table, one family: the pairs of a group (15 for six metrics) are adjusted together, Holm.
    out["p_holm"] = out.groupby("group", sort=False)["p_value"].transform(lambda p: adjust_pvalues(p.to_numpy(float)))
    return out


def compare_correlations(computed: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Put computed correlations beside published ones (e.g. Table 4), pair by pair.

    Parameters
    ----------
    computed : DataFrame
        From :func:`metric_correlations` (one group).
    published : DataFrame
        Columns metric_a, metric_b, r (any triangle; the diagonal is ignored).

    Returns
    -------
    DataFrame
        metric_a, metric_b, r_published, r_computed, difference (computed - published).
    """
    def key(df):
        return df.apply(lambda r: tuple(sorted((r["metric_a"], r["metric_b"]))), axis=1)

    pub = published[published["metric_a"] != published["metric_b"]].assign(pair=lambda d: key(d))
    com = computed.assign(pair=lambda d: key(d))
    out = com.merge(pub[["pair", "r"]].rename(columns={"r": "r_published"}), on="pair", how="outer")
    out = out.rename(columns={"r": "r_computed"})
    out["difference"] = out["r_computed"] - out["r_published"]
    return out[["metric_a", "metric_b", "r_published", "r_computed", "difference"]].reset_index(drop=True)


# ---------------------------------------------------------------- attention dilution


def dilution(scores: pd.DataFrame, from_k: float, to_k: float, metrics=METRICS + (AVERAGE,),
             per_question: pd.DataFrame | None = None, *, ci: float = 0.95, n_boot: int | None = None,
             seed: int | None = None) -> pd.DataFrame:
    """Per model and metric change between two context windows (Section 5.4, Figure 6).

    The paper reports these changes two ways: Section 5.4's text as relative
    percent (Gemini relevance -6.1%), Figure 6's caption as percentage points of
    the 0-1 score (-5.4%). Both are given.

    Returns
    -------
    DataFrame
        model, metric, from_k, to_k, score_from, score_to, delta (score units),
        delta_points (delta x 100, percentage points), relative_pct
        (100 x delta / score_from). Models lacking either context are left out.
        With ``per_question`` scores (a ``test_id`` column) also the paired change over the questions scored at
        both windows (:func:`fabnb.core.stats.paired_differences`; one family, the table's rows): n, delta_ci_low,
        delta_ci_high (at ci_level, Bonferroni), p_value, p_holm, ci_level, claimed.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"model": "m", "context_k": [28, 32], "metric": "relevance",
    ...                    "score": [0.890, 0.836]})
    >>> d = dilution(df, 28, 32, metrics=["relevance"])
    >>> round(d.delta_points.item(), 1), round(d.relative_pct.item(), 1)
    (-5.4, -6.1)
    """
    rows = []
    for metric in metrics:
        curves = metric_sweep(scores, metric)
        for model, g in curves.groupby("model", sort=False):
            s = g.set_index("context_k")["score"]
            if from_k not in s.index or to_k not in s.index:
                continue
            a, b = s[from_k], s[to_k]
            rows.append({"model": model, "metric": metric, "from_k": from_k, "to_k": to_k,
                         "score_from": a, "score_to": b, "delta": b - a, "delta_points": 100 * (b - a),
                         "relative_pct": 100 * (b - a) / a if a else float("nan")})
    if not rows:
        raise ScoreError(f"no model has scores at both {from_k:g}K and {to_k:g}K.")
    out = pd.DataFrame(rows)
    if per_question is None:
        return out
    from .curves import question_curves

    two = per_question[per_question["context_k"].isin([from_k, to_k])]
    diffs = []
    for row in out[["model", "metric"]].itertuples(index=False):
        q = question_curves(two, row.metric, row.model)
        if from_k in q.columns and to_k in q.columns:
            diffs.append(pd.DataFrame({"model": row.model, "metric": row.metric, "test_id": q.index,
                                       "d": (q[to_k] - q[from_k]).to_numpy(float)}))
    return out.merge(_paired(diffs, ["model", "metric"], [], "delta", ci, n_boot, seed), on=["model", "metric"],
                     how="left")


def _paired(diffs: list, by: list, family: list, name: str, ci: float, n_boot, seed) -> pd.DataFrame:
    """The per-question differences judged under the kit's policy, their columns named after ``name``."""
    from ..core.stats import N_BOOT, SEED, paired_differences

    cols = [*by, "n", f"{name}_ci_low", f"{name}_ci_high", "p_value", "p_holm", "ci_level", "claimed"]
    if not diffs:
        return pd.DataFrame(columns=cols)
    judged = paired_differences(pd.concat(diffs, ignore_index=True), by, family, ci=ci,
                                n_boot=N_BOOT if n_boot is None else n_boot, seed=SEED if seed is None else seed)
    return judged.rename(columns={"ci_low": f"{name}_ci_low", "ci_high": f"{name}_ci_high"})[cols]


# ------------------------------------------------------------------ metric profiles


def metric_profile(scores: pd.DataFrame, context_k: float | None = None, by: str = "model") -> pd.DataFrame:
    """The six metrics side by side at one operating point, with balance statistics.

    Parameters
    ----------
    context_k : float or None
        The context window; None uses rows without a context (e.g. Table 5).
    by : str
        Column naming the profiles (``"model"`` or ``"system"``).

    Returns
    -------
    DataFrame
        One row per ``by`` value: the six metric columns, average (mean of the six),
        best_metric, worst_metric, range (max - min), std (population).
    """
    rows = at_window(scores[scores["metric"].isin(METRICS)], context_k)
    if rows.empty:
        where = "without a context" if context_k is None else f"at {context_k:g}K"
        raise ScoreError(f"no metric scores {where}.")
    # The mean: a per-question frame has one row per question (the published tables, one row per cell).
    wide = rows.pivot_table(index=by, columns="metric", values="score", aggfunc="mean", sort=False)
    wide = wide.reindex(columns=list(METRICS))
    out = wide.copy()
    out["average"] = wide.mean(axis=1)
    out["best_metric"] = wide.idxmax(axis=1)
    out["worst_metric"] = wide.idxmin(axis=1)
    out["range"] = wide.max(axis=1) - wide.min(axis=1)
    out["std"] = wide.std(axis=1, ddof=0)
    return out.reset_index()


def metric_gaps(scores: pd.DataFrame, context_k: float | None = None, by: str = "model",
                per_question: pd.DataFrame | None = None, *, ci: float = 0.95, n_boot: int | None = None,
                seed: int | None = None) -> pd.DataFrame:
    """Gaps and ratios between every ordered pair of metrics at one operating point.

    Returns
    -------
    DataFrame
        <by>, metric_a, metric_b, score_a, score_b, gap (a - b), ratio (a / b),
        pct_higher (100 x (a - b) / b), as Section 5.5 states them ("79% higher",
        "a 2.3x ratio"). With ``per_question`` scores at ``context_k`` also the gap paired over the questions
        scored on both metrics (:func:`fabnb.core.stats.paired_differences`; a family per ``by`` value, its 15
        unordered pairs): n, gap_ci_low, gap_ci_high, p_value, p_holm, ci_level, claimed.

    Examples
    --------
    >>> per = pd.DataFrame({"model": "m", "context_k": 4.0, "test_id": [q for q in range(8) for _ in "ab"],
    ...                     "metric": ["factuality", "depth"] * 8,
    ...                     "score": [.9, .5, .8, .4, .9, .6, .7, .4, .8, .5, .9, .5, .8, .3, .9, .6]})
    >>> cells = per.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
    >>> gaps = metric_gaps(cells, 4.0, per_question=per)
    >>> gaps.query("metric_a == 'factuality' and metric_b == 'depth'")[["gap", "claimed"]].round(3).to_dict("records")
    [{'gap': 0.363, 'claimed': True}]
    """
    profile = metric_profile(scores, context_k, by)
    rows = []
    for _, p in profile.iterrows():
        for a in METRICS:
            for b in METRICS:
                if a != b:
                    rows.append({by: p[by], "metric_a": a, "metric_b": b, "score_a": p[a], "score_b": p[b],
                                 "gap": p[a] - p[b], "ratio": p[a] / p[b] if p[b] else float("nan"),
                                 "pct_higher": 100 * (p[a] - p[b]) / p[b] if p[b] else float("nan")})
    out = pd.DataFrame(rows)
    if per_question is None:
        return out
    # One test per unordered pair (a - b and b - a are the same question), shown on both rows.
    wide = at_window(per_question[per_question["metric"].isin(METRICS)], context_k).pivot_table(
        index=[by, "test_id"], columns="metric", values="score", aggfunc="mean")
    diffs = [pd.DataFrame({by: wide.index.get_level_values(by), "metric_a": a, "metric_b": b,
                           "test_id": wide.index.get_level_values("test_id"), "d": (wide[a] - wide[b]).to_numpy()})
             for a, b in combinations(METRICS, 2) if a in wide.columns and b in wide.columns]
    judged = _paired(diffs, [by, "metric_a", "metric_b"], [by], "gap", ci, n_boot, seed)
    mirror = judged.rename(columns={"metric_a": "metric_b", "metric_b": "metric_a", "gap_ci_low": "gap_ci_high",
                                    "gap_ci_high": "gap_ci_low"})
    mirror[["gap_ci_low", "gap_ci_high"]] = -mirror[["gap_ci_low", "gap_ci_high"]]
    both = pd.concat([judged, mirror], ignore_index=True)
    return out.merge(both, on=[by, "metric_a", "metric_b"], how="left")


def check_averages(scores: pd.DataFrame, tolerance: float = 0.001) -> pd.DataFrame:
    """Compare each reported ``average`` with the mean of the six metric scores.

    The default tolerance allows for the rounding of both the six printed
    metrics and the printed average to three decimals.

    Returns
    -------
    DataFrame
        The configuration keys, reported, recomputed, difference, consistent.
    """
    keys = [c for c in SCORE_KEYS if c in scores.columns]
    six = scores[scores["metric"].isin(METRICS)].groupby(keys, dropna=False)["score"].agg(["mean", "count"])
    rep = scores.loc[scores["metric"] == AVERAGE, keys + ["score"]].rename(columns={"score": "reported"})
    # merge (not join): pandas matches missing keys (a framework without a context) to each other.
    out = six.reset_index().merge(rep, on=keys, how="inner")
    out = out.rename(columns={"mean": "recomputed", "count": "n_metrics"})
    out["difference"] = out["reported"] - out["recomputed"]
    out["consistent"] = out["difference"].abs() <= tolerance + 1e-12
    return out
