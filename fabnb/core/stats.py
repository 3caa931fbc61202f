"""Every statistic the kit computes that needs no LLM, in one place.

- agreement between raters: :func:`krippendorff_alpha`, :func:`icc`, :func:`weighted_kappa`
  (``fabnb.qa.agreement.agreement`` tabulates them per dimension with bootstrap intervals);
- judge reliability: :func:`ppi_mean` (prediction-powered inference);
- comparisons of matched binary outcomes: :func:`mcnemar_paired`, and bootstrap
  intervals over clusters (documents): :func:`bootstrap_group_diff`, :func:`bootstrap_rate_diff`;
- means over questions: :func:`cell_means`, the one place that chooses a mean's interval by its sample (a t
  interval on question means below :data:`BOOTSTRAP_FROM` questions, where the percentile bootstrap undercovers;
  :func:`bootstrap_means`, a seeded percentile bootstrap that resamples questions, from there on; "no spread" for a
  constant sample), paired where the values are per-question differences;
- many comparisons at once: :func:`adjust_pvalues` (Holm, Benjamini-Hochberg) and :func:`family_level` (the
  Bonferroni level a family's intervals are shown at), the one multiple-comparison policy (:data:`FAMILY_METHOD`);
- correlations: :func:`fisher_z_interval`;
- proportions: :func:`wilson_interval`, whose bounds always contain the estimate
  (statsmodels' formula can land 1e-16 past it at 0 of n or n of n).

Each cites its source; the tests check each against a published worked example.

Examples
--------
>>> wilson_interval(7, 7)[1]
1.0
>>> lo, hi = wilson_interval(0, 7)
>>> lo, round(hi, 3)
(0.0, 0.354)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["BOOTSTRAP_FROM", "FAMILY_METHOD", "adjust_pvalues", "bootstrap_group_diff", "bootstrap_means",
           "bootstrap_rate_diff", "cell_means", "family_level", "fisher_z_interval", "icc", "krippendorff_alpha",
           "mcnemar_paired", "paired_differences", "ppi_mean", "shown_interval", "weighted_kappa", "wilson_interval"]


def wilson_interval(successes: int, n: int, ci: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``successes / n``, clipped to contain the estimate.

    Wilson (1927), *J. Am. Stat. Assoc.* 22: 209-212; computed by statsmodels'
    ``proportion_confint(method="wilson")``. Worked example (Newcombe 1998, *Stat. Med.*
    17: 857-872, Table I): 81 of 263 gives 0.2553 to 0.3662.

    Parameters
    ----------
    successes, n : int
        Counts, ``0 <= successes <= n``.
    ci : float
        The confidence level.

    Returns
    -------
    (low, high)
        Both NaN when ``n`` is 0. Otherwise ``0 <= low <= successes / n <= high <= 1``.
    """
    from statsmodels.stats.proportion import proportion_confint

    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"a proportion needs 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return math.nan, math.nan
    rate = successes / n
    lo, hi = proportion_confint(successes, n, alpha=1 - ci, method="wilson")
    return float(min(max(lo, 0.0), rate)), float(max(min(hi, 1.0), rate))


def krippendorff_alpha(matrix: pd.DataFrame | np.ndarray, level: str = "ordinal") -> float:
    """Krippendorff's alpha of a raters x items matrix; missing ratings (NaN) allowed.

    Krippendorff (2011), *Computing Krippendorff's Alpha-Reliability*, computed by the
    ``krippendorff`` package. NaN when fewer than two ratings or only one value.
    """
    import krippendorff

    data = np.asarray(matrix, dtype=float)
    if np.sum(~np.isnan(data)) < 2 or np.unique(data[~np.isnan(data)]).size < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def icc(matrix: pd.DataFrame | np.ndarray, kind: str = "ICC2") -> float:
    """Intraclass correlation (Shrout & Fleiss 1979) of a raters x items matrix.

    Items with a missing rating are dropped. ``ICC1``: one-way random; ``ICC2``:
    two-way random, absolute agreement; ``ICC3``: two-way mixed, consistency (single rater).

    Examples
    --------
    >>> import numpy as np
    >>> sf = np.array([[9, 6, 8, 7, 10, 6], [2, 1, 4, 1, 5, 2], [5, 3, 6, 2, 6, 4], [8, 2, 8, 6, 9, 7]])
    >>> [round(icc(sf, k), 2) for k in ("ICC1", "ICC2", "ICC3")]   # Shrout & Fleiss, Table 4
    [0.17, 0.29, 0.71]
    """
    x = np.asarray(matrix, dtype=float).T  # items x raters
    x = x[~np.isnan(x).any(axis=1)]
    n, k = x.shape
    if n < 2 or k < 2:
        return float("nan")
    grand = x.mean()
    ss_rows = k * np.sum((x.mean(axis=1) - grand) ** 2)
    ss_cols = n * np.sum((x.mean(axis=0) - grand) ** 2)
    ss_total = np.sum((x - grand) ** 2)
    ms_rows = ss_rows / (n - 1)
    ms_within = (ss_total - ss_rows) / (n * (k - 1))
    ms_cols = ss_cols / (k - 1)
    ms_error = (ss_total - ss_rows - ss_cols) / ((n - 1) * (k - 1))
    if kind == "ICC1":
        return float((ms_rows - ms_within) / (ms_rows + (k - 1) * ms_within))
    if kind == "ICC2":
        return float((ms_rows - ms_error) / (ms_rows + (k - 1) * ms_error + k * (ms_cols - ms_error) / n))
    if kind == "ICC3":
        return float((ms_rows - ms_error) / (ms_rows + (k - 1) * ms_error))
    raise ValueError(f"kind must be ICC1, ICC2 or ICC3, not {kind!r}")


def weighted_kappa(a, b, weights: str = "quadratic", scale: tuple[int, int] = (1, 5)) -> float:
    """Cohen's weighted kappa between two raters' scores on the same items (scikit-learn).

    Cohen (1968), *Psychol. Bull.* 70: 213-220. ``scale`` is the rating scale (Appendix D's
    1-5 by default); every level counts in the weights even when no rater used it.
    Items either rater left empty are dropped; fewer than two items left gives NaN.
    """
    from sklearn.metrics import cohen_kappa_score

    a, b = np.asarray(a), np.asarray(b)
    keep = ~(pd.isna(a) | pd.isna(b))
    if keep.sum() < 2:
        return float("nan")
    return float(cohen_kappa_score(a[keep].astype(int), b[keep].astype(int), weights=weights,
                                   labels=list(range(scale[0], scale[1] + 1))))


def ppi_mean(judge_all, judge_labeled, human_labeled, alpha: float = 0.05) -> dict:
    """A prediction-powered confidence interval for a mean score (Angelopoulos et al. 2023; as ARES uses it).

    Many judge scores (``judge_all``) and a few items with both a judge score and a
    human label: the estimate is mean(judge_all) + mean(human - judge) on the labelled
    items, and its variance adds both parts.

    Returns
    -------
    dict
        estimate, ci_low, ci_high, n_judged, n_labeled, judge_only (mean of judge scores),
        human_only (mean of labels) and their classical interval half-width.

    Examples
    --------
    >>> r = ppi_mean([0.8] * 100, [0.8, 0.8], [0.6, 0.7])
    >>> round(r["estimate"], 3)
    0.65
    """
    from scipy import stats

    f_all = np.asarray(judge_all, dtype=float)
    f_lab = np.asarray(judge_labeled, dtype=float)
    y = np.asarray(human_labeled, dtype=float)
    if len(f_lab) != len(y) or len(y) < 2:
        raise ValueError("need at least two labelled items, each with a judge score and a human label.")
    rect = y - f_lab
    est = f_all.mean() + rect.mean()
    se = math.sqrt(f_all.var(ddof=1) / len(f_all) + rect.var(ddof=1) / len(y))
    z = stats.norm.ppf(1 - alpha / 2)
    classical = z * y.std(ddof=1) / math.sqrt(len(y))
    return {"estimate": float(est), "ci_low": float(est - z * se), "ci_high": float(est + z * se),
            "n_judged": int(len(f_all)), "n_labeled": int(len(y)), "judge_only": float(f_all.mean()),
            "human_only": float(y.mean()), "human_only_halfwidth": float(classical)}



def mcnemar_paired(a, b) -> dict:
    """McNemar's exact test on matched binary outcomes (e.g. failed under configuration A and B, same tests).

    Returns
    -------
    dict
        n, a_only (A failed, B did not), b_only, both, neither, statistic, p_value, rate_a, rate_b.

    Examples
    --------
    >>> r = mcnemar_paired([1, 1, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0])  # failed under A, under B, same six tests
    >>> r["a_only"], r["b_only"], round(r["p_value"], 3)
    (3, 0, 0.25)
    """
    from statsmodels.stats.contingency_tables import mcnemar

    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError("a and b must be the same tests, in the same order.")
    table = [[int(np.sum(a & b)), int(np.sum(a & ~b))], [int(np.sum(~a & b)), int(np.sum(~a & ~b))]]
    res = mcnemar(table, exact=True)
    return {"n": int(len(a)), "a_only": table[0][1], "b_only": table[1][0], "both": table[0][0],
            "neither": table[1][1], "statistic": float(res.statistic), "p_value": float(res.pvalue),
            "rate_a": float(a.mean()) if len(a) else np.nan, "rate_b": float(b.mean()) if len(b) else np.nan}



def bootstrap_group_diff(frame: pd.DataFrame, group: str, a, b, *, value: str = "failed",
                         cluster: str = "source_doc", n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> dict:
    """Difference of failure rates between two groups of tests, with a bootstrap interval over documents.

    Documents, not tests, are resampled. When both groups have tests on the same
    documents (generators, configurations, matched tests) the documents are resampled
    once for both (paired by document); when their documents are disjoint (generated
    against real documents) each group's documents are resampled on their own (stratified).

    Parameters
    ----------
    frame : DataFrame
        One row per verdict: ``group``, ``value`` (bool) and ``cluster``.
    a, b : value or list of values of ``group``

    Returns
    -------
    dict
        a, b, n_a, n_b, rate_a, rate_b, diff (rate_a - rate_b), ci_low, ci_high,
        n_clusters, resampling ("paired" or "stratified").

    Examples
    --------
    >>> f = pd.DataFrame({"g": ["x", "y"] * 4, "failed": [1, 0, 1, 0, 1, 1, 0, 0],
    ...                   "source_doc": ["d1", "d1", "d2", "d2", "d3", "d3", "d4", "d4"]})
    >>> r = bootstrap_group_diff(f, "g", "x", "y", n_boot=200)
    >>> r["rate_a"], r["rate_b"], r["diff"], r["resampling"]
    (0.75, 0.25, 0.5, 'paired')
    """
    def members(v):
        many = isinstance(v, (list, tuple, set))
        return (frame[group].isin(list(v)) if many else frame[group] == v), ("+".join(map(str, v)) if many else v)

    (in_a, name_a), (in_b, name_b) = members(a), members(b)
    fa, fb = frame[in_a], frame[in_b]
    out = {"a": name_a, "b": name_b, "n_a": len(fa), "n_b": len(fb)}
    nan = dict.fromkeys(("rate_a", "rate_b", "diff", "ci_low", "ci_high"), np.nan)
    if fa.empty or fb.empty:
        return {**out, **nan, "n_clusters": 0, "resampling": "none"}
    sa = fa.groupby(cluster)[value].agg(["sum", "size"]).astype(float)
    sb = fb.groupby(cluster)[value].agg(["sum", "size"]).astype(float)
    rate_a, rate_b = sa["sum"].sum() / sa["size"].sum(), sb["sum"].sum() / sb["size"].sum()
    rng = np.random.default_rng(seed)
    paired = bool(set(sa.index) & set(sb.index))
    if paired:
        both = pd.concat([sa.add_suffix("_a"), sb.add_suffix("_b")], axis=1).fillna(0.0).to_numpy()
        s = both[rng.integers(0, len(both), size=(n_boot, len(both)))].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            boots = s[:, 0] / s[:, 1] - s[:, 2] / s[:, 3]
        n_clusters = len(both)
    else:
        xa, xb = sa.to_numpy(), sb.to_numpy()
        ra = xa[rng.integers(0, len(xa), size=(n_boot, len(xa)))].sum(axis=1)
        rb = xb[rng.integers(0, len(xb), size=(n_boot, len(xb)))].sum(axis=1)
        boots = ra[:, 0] / ra[:, 1] - rb[:, 0] / rb[:, 1]
        n_clusters = len(xa) + len(xb)
    boots = boots[np.isfinite(boots)]
    lo, hi = np.quantile(boots, [(1 - ci) / 2, 1 - (1 - ci) / 2]) if len(boots) else (np.nan, np.nan)
    return {**out, "rate_a": float(rate_a), "rate_b": float(rate_b), "diff": float(rate_a - rate_b),
            "ci_low": float(lo), "ci_high": float(hi), "n_clusters": n_clusters,
            "resampling": "paired" if paired else "stratified"}


def bootstrap_rate_diff(frame: pd.DataFrame, a: str, b: str, cluster: str = "doc_id", n_boot: int = 2000,
                        seed: int = 0, ci: float = 0.95) -> dict:
    """Bootstrap CI of the difference of two failure rates, resampling clusters (documents), not tests.

    Parameters
    ----------
    frame : DataFrame
        One row per matched test: ``cluster`` and the two boolean columns ``a`` and ``b``.

    Returns
    -------
    dict
        diff (rate_a - rate_b), ci_low, ci_high, n_clusters.
    """
    sides = [pd.DataFrame({cluster: frame[cluster].to_numpy(), "_side": side,
                           "_failed": frame[col].astype(bool).to_numpy()}) for side, col in (("a", a), ("b", b))]
    long = pd.concat(sides, ignore_index=True)
    r = bootstrap_group_diff(long, "_side", "a", "b", value="_failed", cluster=cluster, n_boot=n_boot, seed=seed, ci=ci)
    return {k: r[k] for k in ("diff", "ci_low", "ci_high", "n_clusters")}


#: Bootstrap draws and seed of every interval the report gives, unless an experiment's ``[report]`` says otherwise.
N_BOOT = 2000
SEED = 0


def _stable_seed(seed: int, key) -> list[int]:
    # One generator per group, seeded by the group's key: a group's interval does not move when other groups
    # come or go (a new window, a failed cell healed elsewhere).
    import zlib

    return [int(seed), zlib.crc32(repr(key).encode("utf-8"))]


def bootstrap_means(frame: pd.DataFrame, by, value: str = "score", cluster: str = "test_id", *,
                    n_boot: int = N_BOOT, seed: int = SEED, ci: float = 0.95) -> pd.DataFrame:
    """Mean of ``value`` per group with a percentile bootstrap interval over clusters (questions).

    Questions are the unit a benchmark samples, so questions are resampled, not rows: with
    replicates (several judge runs of one answer) a question's rows are drawn together, and
    the mean is over every row drawn (Efron & Tibshirani 1993, *An Introduction to the
    Bootstrap*, ch. 13; the cluster bootstrap of Field & Welsh 2007, *J. R. Stat. Soc. B*
    69: 369-390). Missing values are left out and counted: the mean is of what is there.

    Parameters
    ----------
    frame : DataFrame
        One row per score: the ``by`` columns, ``value`` and ``cluster``.
    by : list of str
        The columns of a cell (system, context_k, mode, metric, ...).
    n_boot, seed, ci
        Draws, seed (each group's generator is seeded by ``seed`` and the group's key, so an
        interval is the same whatever other groups the frame holds) and confidence level.

    Returns
    -------
    DataFrame
        The ``by`` columns, mean, ci_low, ci_high, n (values averaged), n_clusters. The
        interval is NaN where there is one cluster (no interval can be drawn from one question).

    Examples
    --------
    >>> f = pd.DataFrame({"metric": "depth", "test_id": ["q1", "q2", "q3", "q4"], "score": [0.2, 0.4, 0.6, 0.8]})
    >>> r = bootstrap_means(f, ["metric"], n_boot=500).iloc[0]
    >>> float(round(r["mean"], 3)), bool(r["ci_low"] < r["mean"] < r["ci_high"]), int(r["n_clusters"])
    (0.5, True, 4)
    >>> bootstrap_means(f.head(1), ["metric"])[["mean", "ci_low", "n_clusters"]].to_dict("records")
    [{'mean': 0.2, 'ci_low': nan, 'n_clusters': 1}]
    """
    by = list(by)
    columns = [*by, "mean", "ci_low", "ci_high", "n", "n_clusters"]
    if n_boot < 1 or not 0 < ci < 1:
        raise ValueError(f"bootstrap_means needs n_boot >= 1 and 0 < ci < 1, got n_boot={n_boot}, ci={ci}")
    present = frame[by + [cluster, value]].copy()
    present[value] = pd.to_numeric(present[value], errors="coerce")
    present = present[present[value].notna()]
    if present.empty:
        return pd.DataFrame(columns=columns)
    per = present.groupby([*by, cluster], dropna=False, sort=True)[value].agg(["sum", "size"]).reset_index()
    rows = []
    q = [(1 - ci) / 2, 1 - (1 - ci) / 2]
    for key, g in per.groupby(by, dropna=False, sort=True) if by else [((), per)]:
        sums, sizes = g["sum"].to_numpy(float), g["size"].to_numpy(float)
        mean = sums.sum() / sizes.sum()
        lo = hi = np.nan
        if len(g) > 1:
            idx = np.random.default_rng(_stable_seed(seed, key)).integers(0, len(g), size=(n_boot, len(g)))
            boots = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
            lo, hi = np.quantile(boots, q)
            lo, hi = min(lo, mean), max(hi, mean)  # a percentile interval can miss a skewed mean by rounding
        key = key if isinstance(key, tuple) else (key,)
        rows.append([*key, float(mean), float(lo), float(hi), int(sizes.sum()), len(g)])
    return pd.DataFrame(rows, columns=columns)


#: From this many questions a cell's interval is the percentile bootstrap over questions; below it, a Student t
#: interval on the question means. Simulated on the generative model of benchmarks/bench_coverage.py, the percentile
#: bootstrap covered 71% at 3 questions, 80% at 5 and 87-91% at 10 (nominal 95%), and on the paired B - A gap still
#: 90% at 30; the t interval 91-97% at every size up to 100 (docs/statistics.md has the table).
BOOTSTRAP_FROM = 100


def _t_interval(values: np.ndarray, ci: float) -> tuple[float, float]:
    """Student's t interval of the mean of ``values`` (one per question)."""
    from scipy.stats import t

    n = len(values)
    half = t.ppf(1 - (1 - ci) / 2, n - 1) * values.std(ddof=1) / math.sqrt(n)
    return float(values.mean() - half), float(values.mean() + half)


def _t_p_value(values: np.ndarray) -> float:
    """Two-sided p of Student's one-sample t test of mean 0 (a paired test when the values are differences); NaN
    for fewer than 2 values or no spread (t is undefined)."""
    from scipy.stats import t

    if len(values) < 2 or np.ptp(values) == 0:
        return float("nan")
    stat = values.mean() / (values.std(ddof=1) / math.sqrt(len(values)))
    return float(2 * t.sf(abs(stat), len(values) - 1))


def cell_means(frame: pd.DataFrame, by, value: str = "score", cluster: str = "test_id", *, n_boot: int = N_BOOT,
               seed: int = SEED, ci: float = 0.95, bounds: tuple[float, float] | None = None) -> pd.DataFrame:
    """Mean of ``value`` per group with the interval its sample supports: the one place that chooses it.

    - one question: no interval;
    - every question's mean the same (a constant sample): no interval, ``method`` "no spread" (a zero-width
      interval would claim a certainty no sample of this size carries);
    - fewer than :data:`BOOTSTRAP_FROM` questions: Student's t on the question means (replicates averaged per
      question first), centred on the cell's mean;
    - from there on: the percentile bootstrap over questions (:func:`bootstrap_means`).

    Per-question differences (mode B - A, system a - b on the same questions) go in as ``value``: the interval is
    then paired. ``bounds`` clips an interval to what the value can be (``(0, 1)`` for a score, ``(-1, 1)`` for a
    difference of scores).

    Returns
    -------
    DataFrame
        The ``by`` columns, mean, ci_low, ci_high, n (values averaged), n_clusters, method (``t``, ``bootstrap``,
        ``no spread`` or ``one question``), p_value (Student's t test of mean 0 over the question means: for
        differences, the paired test a decision under :func:`adjust_pvalues` uses; NaN without spread).

    Examples
    --------
    >>> f = pd.DataFrame({"cell": "x", "test_id": ["q1", "q2", "q3", "q4", "q5"], "score": [0.2, 0.4, 0.6, 0.8, 0.5]})
    >>> r = cell_means(f, ["cell"], bounds=(0, 1)).iloc[0]
    >>> r["method"], float(round(r["ci_low"], 3)), float(round(r["ci_high"], 3))
    ('t', 0.222, 0.778)
    >>> cell_means(f.assign(score=1.0), ["cell"])[["mean", "ci_low", "method"]].to_dict("records")
    [{'mean': 1.0, 'ci_low': nan, 'method': 'no spread'}]
    """
    by = list(by)
    boot = bootstrap_means(frame, by, value, cluster, n_boot=n_boot, seed=seed, ci=ci)
    if boot.empty:
        return boot.assign(method=pd.Series(dtype=str))
    present = frame[by + [cluster, value]].copy()
    present[value] = pd.to_numeric(present[value], errors="coerce")
    per_question = present[present[value].notna()].groupby([*by, cluster], dropna=False, sort=True)[value].mean()
    groups = per_question.groupby(level=list(range(len(by))), dropna=False, sort=True) if by else [((), per_question)]
    methods, lows, highs, p_values = [], [], [], []
    for (key, q), row in zip(groups, boot.itertuples(index=False)):
        values = q.to_numpy(float)
        lo, hi, method = row.ci_low, row.ci_high, "bootstrap"
        p_values.append(_t_p_value(values))
        if len(values) < 2:
            lo = hi = np.nan
            method = "one question"
        elif np.ptp(values) == 0:
            lo = hi = np.nan
            method = "no spread"
        elif len(values) < BOOTSTRAP_FROM:
            t_lo, t_hi = _t_interval(values, ci)
            shift = row.mean - values.mean()  # the cell's mean counts every replicate; the t interval is per question
            lo, hi, method = t_lo + shift, t_hi + shift, "t"
        if bounds is not None and not np.isnan(lo):
            lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
        methods.append(method)
        lows.append(float(lo))
        highs.append(float(hi))
    return boot.assign(ci_low=lows, ci_high=highs, method=methods, p_value=p_values)


def shown_interval(mean, lo, hi, n, method: str = "") -> str:
    """A mean with its interval as a report prints it: ``"0.712 [0.650, 0.770]"``, ``"1.000, no spread (n = 5)"``,
    ``"0.700, no interval (n = 1)"``, or ``"-"``.

    >>> shown_interval(1.0, float("nan"), float("nan"), 5, "no spread")
    '1.000, no spread (n = 5)'
    """
    if pd.isna(mean):
        return "-"
    if pd.isna(lo):
        why = "no spread" if method == "no spread" else "no interval"
        return f"{mean:.3f}, {why} (n = {int(n)})"
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


# ------------------------------------------------------------------------------------ multiple comparisons

#: The kit's multiple-comparison policy. A *family* is one table of a report (every B - A row, every pair of
#: metrics' correlations, every window's winner, every curve's label). A difference is *claimed* when its
#: Holm-adjusted p-value is below 0.05 (Holm 1979, *Scand. J. Statist.* 6: 65-70: the family-wise error held at 5%
#: under any dependence); its interval is shown at the Bonferroni level of the family (:func:`family_level`), so an
#: interval that excludes 0 and a claim agree in the common case. ``"bh"`` (Benjamini & Hochberg 1995, *J. R. Stat.
#: Soc. B* 57: 289-300: the false discovery rate held at 5%) is the alternative where a table is a screen, not a
#: verdict; a report that uses it says so.
FAMILY_METHOD = "holm"


def adjust_pvalues(p, method: str = FAMILY_METHOD) -> np.ndarray:
    """Family-adjusted p-values: Holm's step-down (family-wise error) or Benjamini-Hochberg's step-up (false
    discovery rate). NaN p-values (no test possible) stay NaN and do not count in the family.

    Examples
    --------
    >>> adjust_pvalues([0.01, 0.04, 0.03, float("nan")]).round(3).tolist()
    [0.03, 0.06, 0.06, nan]
    >>> adjust_pvalues([0.01, 0.04, 0.03], "bh").round(3).tolist()
    [0.03, 0.04, 0.04]
    """
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if not m:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    ranked = p[order]
    if method == "holm":
        adjusted = np.maximum.accumulate((m - np.arange(m)) * ranked)
    elif method == "bh":
        adjusted = np.minimum.accumulate((m / np.arange(m, 0, -1) * ranked[::-1]))[::-1]
    else:
        raise ValueError(f"adjust_pvalues(method={method!r}): use 'holm' (family-wise error) or 'bh' (false "
                         "discovery rate).")
    out[order] = np.minimum(adjusted, 1.0)
    return out


def family_level(ci: float, m: int) -> float:
    """The confidence level of each of ``m`` intervals shown together so that all hold at once with probability
    ``ci`` or more (Bonferroni): ``1 - (1 - ci) / m``.

    >>> round(family_level(0.95, 10), 4)
    0.995
    """
    return 1.0 - (1.0 - ci) / max(int(m), 1)


def paired_differences(diffs: pd.DataFrame, by, family=(), value: str = "d", cluster: str = "test_id", *,
                       ci: float = 0.95, n_boot: int = N_BOOT, seed: int = SEED, size: int = 0) -> pd.DataFrame:
    """Per-question differences (one system, window or metric minus another, on the same questions) judged under
    the kit's policy: each group's mean difference with its interval at its family's level, the paired t test,
    the family's Holm p and whether the difference is claimed.

    Parameters
    ----------
    diffs : DataFrame
        The ``by`` columns, ``cluster`` (the question) and ``value`` (the difference, -1 to 1).
    by : list of str
        One row of the result per group.
    family : list of str
        The columns of ``by`` that name a family (a table's rows that share them are adjusted together); empty: the
        whole table is one family.
    size : int
        The family's size where its table has more rows than groups with differences (a routing window without
        paired questions still counts in the Bonferroni level); the groups judged when larger.

    Returns
    -------
    DataFrame
        The ``by`` columns, mean, ci_low, ci_high (at ``ci_level``: Bonferroni over the family,
        :func:`family_level`), n (questions), method, p_value (paired t), p_holm (:func:`adjust_pvalues`),
        ci_level, claimed (p_holm < 1 - ``ci``).

    Examples
    --------
    >>> d = pd.DataFrame({"metric": ["a"] * 6 + ["b"] * 6, "test_id": list(range(6)) * 2,
    ...                   "d": [.10, .12, .08, .11, .09, .10, .05, -.04, .02, -.03, .01, 0.0]})
    >>> paired_differences(d, ["metric"])[["metric", "n", "claimed"]].to_dict("records")
    [{'metric': 'a', 'n': 6, 'claimed': True}, {'metric': 'b', 'n': 6, 'claimed': False}]
    """
    by, family = list(by), list(family)
    columns = [*by, "mean", "ci_low", "ci_high", "n", "method", "p_value", "p_holm", "ci_level", "claimed"]
    present = diffs[diffs[value].notna()]
    if present.empty:
        return pd.DataFrame(columns=columns)
    parts = []
    for _, part in (present.groupby(family, sort=False, dropna=False) if family else [((), present)]):
        m = max(len(part.groupby(by, dropna=False)), size)
        level = family_level(ci, m)
        out = cell_means(part, by, value=value, cluster=cluster, n_boot=n_boot, seed=seed, ci=level,
                         bounds=(-1.0, 1.0)).drop(columns="n").rename(columns={"n_clusters": "n"})
        out["p_holm"] = adjust_pvalues(out["p_value"].to_numpy(float))
        out["ci_level"] = level
        parts.append(out)
    out = pd.concat(parts, ignore_index=True)
    out["claimed"] = out["p_holm"] < 1.0 - ci
    return out[columns]


def fisher_z_interval(r: float, n: int, ci: float = 0.95) -> tuple[float, float]:
    """Interval of a correlation coefficient by Fisher's z transform: ``tanh(atanh(r) ± z / sqrt(n - 3))``
    (Fisher 1921, *Metron* 1: 3-32). NaN below 4 observations or for NaN r; ``|r| = 1`` gives ``(r, r)`` clipped.

    Examples
    --------
    >>> [round(v, 2) for v in fisher_z_interval(0.6, 10)]
    [-0.05, 0.89]
    """
    from scipy.stats import norm

    if n is None or n < 4 or r is None or not np.isfinite(r):
        return float("nan"), float("nan")
    z = math.atanh(min(max(float(r), -1 + 1e-12), 1 - 1e-12))
    half = norm.ppf(1 - (1 - ci) / 2) / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)
