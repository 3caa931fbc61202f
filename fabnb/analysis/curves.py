"""Scaling curves (Section 4): log and S-curve fits, scaling labels, operating points, gain rates.

Crossovers, routing, framework tables and dual-mode deltas are in :mod:`fabnb.analysis.comparison`;
correlations, dilution and metric profiles in :mod:`fabnb.analysis.metrics`.

Every function takes a score frame (see :mod:`fabnb.core.scores`) and returns a new tidy
DataFrame; none mutates its input. They work the same on the paper's published
numbers (:func:`fabnb.data.published.scores`) and on a user's own judged runs.

Context is measured in K tokens (``context_k``). Curves are fitted against
``ln(context_k)``, the paper's "logarithmic" axis.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.schema import AVERAGE, METRICS, SCORE_KEYS
from ..core.scores import ScoreError, metric_sweep, require_models, with_average

__all__ = ['MIN_FIT_WINDOWS', 'PLATEAU_DELTA', 'classify_scaling', 'context_to_reach', 'effective_window',
           'fit_log_curves', 'fit_logistic_curves', 'gain_rates', 'metric_slopes', 'operating_points',
           'predict_log_curve', 'predict_logistic_curve', 'question_curves', 'scaling_by_type']

#: Windows a curve needs before the report fits it, labels its behaviour or reads operating points and crossovers
#: from it. A log curve has two parameters: with 5 windows its fit keeps 3 residual degrees of freedom (t = 3.18 for
#: a 95% interval, against 12.7 with 3 windows), and a straight line through pure noise reaches R² = 0.25 on average
#: (1 / (n - 1)) instead of 0.5 with 3. The paper fits 11 windows; its smallest sweep (Qwen-2.5-72B) has 6.
MIN_FIT_WINDOWS = 5

# --------------------------------------------------------------------------- curves


def _curves(scores: pd.DataFrame, metric: str, rows: list, needs: int, curve: str):
    """Per model with at least ``needs`` distinct contexts: ln(context_k), scores, and the identifying part of a fit's
    result row. A model with fewer gets its "not fitted" row in ``rows``, saying why, and is not yielded."""
    for model, g in metric_sweep(scores, metric).groupby("model", sort=False):
        x, row = np.log(g["context_k"].to_numpy(float)), {"model": model, "metric": metric, "n_points": len(g)}
        if len(np.unique(x)) < needs:
            rows.append({**row, "status": "not fitted", "reason": f"{len(np.unique(x))} distinct context point(s); "
                                                                  f"{curve} needs at least {needs}"})
            continue
        yield x, g["score"].to_numpy(float), row


def fit_log_curves(scores: pd.DataFrame, metric: str = AVERAGE, alpha: float = 0.05) -> pd.DataFrame:
    """Fit ``score = intercept + slope * ln(context_k)`` per model by OLS (statsmodels).

    Parameters
    ----------
    scores : DataFrame
        A score frame with one system and mode (see :func:`fabnb.core.scores.metric_sweep`).
    metric : str
        Which metric to fit; ``"average"`` is computed from the six if absent.
    alpha : float
        1 - confidence level of the parameter intervals.

    Returns
    -------
    DataFrame
        One row per model: model, metric, n_points, intercept, intercept_ci_low,
        intercept_ci_high, slope, slope_ci_low, slope_ci_high, r_squared, aic,
        status (``"fitted"`` or ``"not fitted"``) and reason (why not, else empty).
        ``aic`` is ``n ln(RSS/n) + 2k`` so it compares with :func:`fit_logistic_curves`.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> k = np.array([4, 8, 16, 32])
    >>> df = pd.DataFrame({"model": "m", "context_k": k, "metric": "average",
    ...                    "score": 0.2 + 0.1 * np.log(k)})
    >>> fit = fit_log_curves(df)
    >>> round(fit.slope.item(), 6), round(fit.r_squared.item(), 6)
    (0.1, 1.0)
    """
    # The two names, not statsmodels.api: that imports every statsmodels model (0.3 s here, in every run's report).
    from statsmodels.regression.linear_model import OLS
    from statsmodels.tools.tools import add_constant

    rows = []
    for x, y, row in _curves(scores, metric, rows, 3, "a log curve with a confidence interval"):
        res = OLS(y, add_constant(x)).fit()
        ci = res.conf_int(alpha)
        rss = float(np.sum(res.resid**2))
        rows.append({
            **row,
            "intercept": res.params[0], "intercept_ci_low": ci[0, 0], "intercept_ci_high": ci[0, 1],
            "slope": res.params[1], "slope_ci_low": ci[1, 0], "slope_ci_high": ci[1, 1],
            "r_squared": res.rsquared, "aic": _aic(rss, len(y), 2),
            "status": "fitted", "reason": "",
        })
    return _frame(rows, ["model", "metric", "n_points", "intercept", "intercept_ci_low",
                         "intercept_ci_high", "slope", "slope_ci_low", "slope_ci_high",
                         "r_squared", "aic", "status", "reason"])


def _logistic(x, lower, upper, rate, x0):
    # S-curve in ln(context): lower plateau, upper plateau, steepness, inflection (ln K).
    return lower + (upper - lower) / (1.0 + np.exp(-rate * (x - x0)))


def fit_logistic_curves(scores: pd.DataFrame, metric: str = AVERAGE) -> pd.DataFrame:
    """Fit a saturating S-curve of ``ln(context_k)`` per model (scipy least squares).

    ``score = lower + (upper - lower) / (1 + exp(-rate * (ln k - ln k0)))``, the
    alternative to the log curve for cold-start and saturating models.

    Returns
    -------
    DataFrame
        One row per model: model, metric, n_points, lower, upper, rate,
        inflection_k (``k0``, in K tokens), r_squared, aic, status, reason.
        Fewer than 5 distinct contexts (4 parameters) gives ``"not fitted"``.
    """
    from scipy.optimize import curve_fit

    rows = []
    for x, y, row in _curves(scores, metric, rows, 5, "the 4-parameter S-curve"):
        lo_x, hi_x = x.min(), x.max()
        p0 = [y.min(), y.max(), 2.0, float(np.median(x))]
        bounds = ([0.0, 0.0, 0.01, lo_x - 1.0], [1.0, 1.0, 50.0, hi_x + 1.0])
        try:
            params, _ = curve_fit(_logistic, x, y, p0=p0, bounds=bounds, maxfev=20000)
        except (RuntimeError, ValueError) as exc:
            rows.append({**row, "status": "not fitted", "reason": f"least squares did not converge: {exc}"})
            continue
        rss = float(np.sum((y - _logistic(x, *params)) ** 2))
        rows.append({
            **row, "lower": params[0], "upper": params[1], "rate": params[2],
            "inflection_k": math.exp(params[3]), "r_squared": _r2(y, rss),
            "aic": _aic(rss, len(y), 4), "status": "fitted", "reason": "",
        })
    return _frame(rows, ["model", "metric", "n_points", "lower", "upper", "rate", "inflection_k",
                         "r_squared", "aic", "status", "reason"])


def predict_log_curve(fit: pd.Series | dict, context_k) -> np.ndarray:
    """Evaluate a fitted log curve (a row of :func:`fit_log_curves`) at ``context_k``."""
    return fit["intercept"] + fit["slope"] * np.log(np.asarray(context_k, dtype=float))


def predict_logistic_curve(fit: pd.Series | dict, context_k) -> np.ndarray:
    """Evaluate a fitted S-curve (a row of :func:`fit_logistic_curves`) at ``context_k``."""
    x = np.log(np.asarray(context_k, dtype=float))
    return _logistic(x, fit["lower"], fit["upper"], fit["rate"], math.log(fit["inflection_k"]))


def _aic(rss: float, n: int, k: int) -> float:
    return n * math.log(max(rss, 1e-300) / n) + 2 * k


def _r2(y: np.ndarray, rss: float) -> float:
    tss = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - rss / tss if tss > 0 else float("nan")


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows).reindex(columns=columns)


# ----------------------------------------------------------------- operating points


def operating_points(scores: pd.DataFrame, metric: str = AVERAGE, fraction: float = 0.9) -> pd.DataFrame:
    """Where each model's curve starts, peaks, reaches a fraction of its peak, and ends.

    Parameters
    ----------
    scores : DataFrame
        A score frame with one system and mode.
    metric : str
        Metric of the curve.
    fraction : float
        The share of the peak asked for (Section 4.2 uses 90%).

    Returns
    -------
    DataFrame
        One row per model: model, metric, start_k, start_score, peak_k, peak_score,
        fraction, fraction_k (first observed context reaching ``fraction * peak``),
        fraction_interp_k (the same, interpolated linearly in ln context between the
        bracketing points), halfway_k (first observed context reaching the midpoint
        of start and peak: the *critical-mass threshold*), final_k, final_score,
        final_change_pct (final vs peak, relative %), monotonic (never decreases).

    Notes
    -----
    The paper names a "critical mass" (Gemini, ~12K) without defining it. fabnb
    defines it as the first context at which a model has covered half the way
    from its starting score to its peak; the S-curve inflection of
    :func:`fit_logistic_curves` is an alternative reported beside it.
    """
    rows = []
    for model, g in metric_sweep(scores, metric).groupby("model", sort=False):
        k = g["context_k"].to_numpy(float)
        y = g["score"].to_numpy(float)
        peak = int(np.argmax(y))
        target = fraction * y[peak]
        reach = int(np.argmax(y >= target - 1e-12))
        if reach == 0:
            interp = k[0]
        else:
            # Linear in ln(context) between the last point below and the first at/above the target.
            x0, x1, y0, y1 = math.log(k[reach - 1]), math.log(k[reach]), y[reach - 1], y[reach]
            interp = math.exp(x0 + (target - y0) / (y1 - y0) * (x1 - x0))
        halfway = y[0] + 0.5 * (y[peak] - y[0])
        rows.append({
            "model": model, "metric": metric,
            "start_k": k[0], "start_score": y[0], "peak_k": k[peak], "peak_score": y[peak],
            "fraction": fraction, "fraction_k": k[reach], "fraction_interp_k": interp,
            "halfway_k": k[int(np.argmax(y >= halfway - 1e-12))],
            "final_k": k[-1], "final_score": y[-1],
            "final_change_pct": 100.0 * (y[-1] - y[peak]) / y[peak],
            "monotonic": bool(np.all(np.diff(y) >= 0)),
        })
    return pd.DataFrame(rows)


def _point_label(k: np.ndarray, y: np.ndarray, log_r2: float, rule: dict) -> tuple[str, str, dict]:
    """The paper's Section 4.3 rule on one value per window (the published tables): label, deciding clause, and the
    point statistics."""
    peak = y.max()
    start_fraction = y[0] / peak if peak > 0 else float("nan")
    final_drop = 100.0 * (peak - y[-1]) / peak if peak > 0 else float("nan")
    earlier = np.flatnonzero(k <= k[-1] / 2.0 + 1e-9)
    gain = 100.0 * (y[-1] - y[earlier[-1]]) / peak if len(earlier) and peak > 0 else float("nan")
    stats = {"start_fraction": start_fraction, "final_drop_pct": final_drop, "last_doubling_gain_pct": gain}
    if start_fraction < rule["cold_start_fraction"]:
        return "cold-start", f"starts at {start_fraction:.0%} of its peak (< {rule['cold_start_fraction']:.0%})", stats
    if final_drop > rule["decline_pct"]:
        return "early saturation", f"ends {final_drop:.1f}% below its peak (> {rule['decline_pct']:g}%)", stats
    if not np.isnan(gain) and gain < rule["plateau_pct"]:
        return "early saturation", f"last doubling gained {gain:.1f}% of peak (< {rule['plateau_pct']:g}%)", stats
    if log_r2 >= rule["min_log_r2"]:
        return "logarithmic growth", f"no decline, log-curve R² = {log_r2:.3f} (>= {rule['min_log_r2']:g})", stats
    return "undetermined", f"no decline but log-curve R² = {log_r2:.3f} (< {rule['min_log_r2']:g})", stats


def question_curves(per_question: pd.DataFrame, metric: str, model) -> pd.DataFrame:
    """One model's per-question curves of ``metric``, for statistics paired over questions.

    Returns
    -------
    DataFrame
        Index test_id (the questions scored at every window; replicates averaged), one column per context_k in
        window order. ``metric="average"`` is computed from the six metrics when the frame has no average rows.

    Examples
    --------
    >>> per = pd.DataFrame({"model": "m", "context_k": [4.0, 8.0, 4.0, 8.0, 4.0], "metric": "depth",
    ...                     "test_id": ["q1", "q1", "q2", "q2", "q3"], "score": [.2, .4, .5, .7, .9]})
    >>> question_curves(per, "depth", "m").to_dict("index")
    {'q1': {4.0: 0.2, 8.0: 0.4}, 'q2': {4.0: 0.5, 8.0: 0.7}}
    """
    rows = per_question[(per_question["model"] == model) & per_question["context_k"].notna()]
    keys = [c for c in SCORE_KEYS if c in rows.columns] + ["metric"]
    rows = rows.assign(score=rows["score"].astype(float)).groupby(keys, dropna=False)["score"].mean().reset_index()
    if metric == AVERAGE and not (rows["metric"] == AVERAGE).any():
        rows = with_average(rows)
    wide = rows[rows["metric"] == metric].pivot_table(index="test_id", columns="context_k", values="score")
    return wide.sort_index(axis=1).dropna()


def _evidence(q: pd.DataFrame, ci: float, n_boot: int, seed: int) -> pd.DataFrame:
    """Per-question statistics of one curve with their intervals (:func:`fabnb.core.stats.cell_means`, over the
    questions): ``slope`` (each question's OLS slope on ln context: the curve's slope, clustered by question),
    ``whole`` (last window - first), ``last`` (last window - the largest window at most half of it: the last
    doubling), and one row per window (its mean)."""
    from ..core.stats import cell_means

    ks = q.columns.to_numpy(float)
    xc = np.log(ks) - np.log(ks).mean()
    values = q.to_numpy(float)
    half = ks[np.flatnonzero(ks <= ks[-1] / 2.0 + 1e-9)[-1]] if (ks <= ks[-1] / 2.0 + 1e-9).any() else ks[0]
    parts = {"slope": values @ xc / (xc @ xc), "whole": q[ks[-1]] - q[ks[0]], "last": q[ks[-1]] - q[half]}
    parts.update({f"window {k:g}": q[k] for k in ks})
    long = pd.concat([pd.DataFrame({"what": name, "test_id": q.index, "v": np.asarray(v, float)})
                      for name, v in parts.items()], ignore_index=True)
    return cell_means(long, ["what"], value="v", n_boot=n_boot, seed=seed, ci=ci).set_index("what")


def _inside(row: pd.Series, delta: float) -> bool:
    return bool(pd.notna(row["ci_low"]) and -delta <= row["ci_low"] and row["ci_high"] <= delta)


def _shown(row: pd.Series) -> str:
    if pd.isna(row["ci_low"]):
        return f"{row['mean']:+.3f} ({row['method']})"
    return f"{row['mean']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"


def _evidence_label(ev: pd.DataFrame, ks: np.ndarray, delta: float, cold_start_fraction: float) -> tuple[str, str]:
    """The label a curve's intervals carry, and the clause that decided it (see :func:`classify_scaling`)."""
    slope, whole, last = ev.loc["slope"], ev.loc["whole"], ev.loc["last"]
    first, windows = ev.loc[f"window {ks[0]:g}"], ev.loc[[f"window {k:g}" for k in ks]]
    peak = windows.loc[windows["mean"].idxmax()]
    if int(slope["n_clusters"]) < 2:
        return "undetermined", "one question scored at every window: no interval, so no label"
    bounded = pd.notna(first["ci_high"]) and pd.notna(peak["ci_low"])
    if bounded and first["ci_high"] < cold_start_fraction * peak["ci_low"]:
        return "cold-start", (f"the first window's interval ends at {first['ci_high']:.3f}, below "
                              f"{cold_start_fraction:.0%} of the peak's lower bound ({peak['ci_low']:.3f})")
    if pd.notna(last["ci_high"]) and last["ci_high"] < 0:
        return "decline", f"the last doubling lost {_shown(last)}, its interval below 0"
    if _inside(whole, delta):
        return "flat (no context effect)", f"the whole sweep's gain {_shown(whole)} lies inside ±{delta:g}"
    if pd.notna(slope["ci_low"]) and slope["ci_low"] > 0:
        if _inside(last, delta):
            return "early saturation", (f"grew (slope {_shown(slope)} above 0), then the last doubling's gain "
                                        f"{_shown(last)} lies inside ±{delta:g}")
        return "logarithmic growth", f"the slope per ln(context) {_shown(slope)} lies above 0"
    return "undetermined", (f"no interval decides: slope {_shown(slope)}, last doubling {_shown(last)}, whole "
                            f"sweep {_shown(whole)} (a plateau or flat curve needs its interval inside ±{delta:g})")


#: The smallest change of a 0-1 score the scaling labels count as a context effect (half a point of the judge's
#: 0-10 scale): a plateau is a last doubling whose gain's interval lies inside ±PLATEAU_DELTA, a flat curve one whose
#: whole sweep's does (an equivalence test, Schuirmann 1987, with the family's interval). ``classify_scaling(delta=)``
#: sets another.
PLATEAU_DELTA = 0.05


def classify_scaling(
    scores: pd.DataFrame,
    metric: str = AVERAGE,
    *,
    cold_start_fraction: float = 0.60,
    decline_pct: float = 1.0,
    plateau_pct: float = 2.0,
    min_log_r2: float = 0.85,
    min_windows: int = MIN_FIT_WINDOWS,
    delta: float = PLATEAU_DELTA,
    ci: float = 0.95,
    n_boot: int | None = None,
    seed: int | None = None,
) -> pd.DataFrame:
    """Label each model's curve: by its intervals over questions where the scores are per question, by Section
    4.3's point rule on the published tables' cell means.

    **Per-question scores** (a ``test_id`` column): a label only with evidence, each statistic a mean over the
    questions scored at every window with its interval (:func:`fabnb.core.stats.cell_means`), at the family level
    of the table (:func:`fabnb.core.stats.family_level`, Bonferroni: ``ci`` shared by two decisions per curve
    labelled, its slope's and its last doubling's; 97.5% for one curve):

    1. **cold-start**: the first window's interval lies below ``cold_start_fraction`` (60%) of the peak window's;
    2. **decline**: the last doubling's gain (last window minus the largest window at most half of it) has its
       interval below 0;
    3. **flat (no context effect)**: the whole sweep's gain (last window minus first) has its interval inside
       ±``delta`` (:data:`PLATEAU_DELTA`, an equivalence test);
    4. **early saturation**: the slope on ln(context) (each question's, averaged) has its interval above 0, and the
       last doubling's gain lies inside ±``delta``;
    5. **logarithmic growth**: the slope's interval lies above 0 (and the last doubling did not plateau);
    6. **undetermined**: anything else, with the intervals in the rule.

    Simulated (benchmarks/bench_coverage.py, docs/statistics.md), a flat curve gets a growth, decline or
    saturation label in at most 3.5% of studies at any number of questions (at most 5% is the target).

    **One value per window** (the published tables, no ``test_id``): the paper's rule on points, in this order:
    cold-start if the first score is below ``cold_start_fraction`` of the peak; early saturation if the final score is
    more than ``decline_pct`` (1%) below the peak or the last doubling gained less than ``plateau_pct`` (2%) of it;
    logarithmic growth if the log curve's R² >= ``min_log_r2`` (0.85); else undetermined.

    A curve with fewer than ``min_windows`` contexts (:data:`MIN_FIT_WINDOWS`) gets no label:
    ``"not enough windows"``, its rule saying how many it has of how many a label needs.

    Returns
    -------
    DataFrame
        One row per model: model, metric, label, rule (the deciding clause), evidence (``"intervals"`` or
        ``"points"``), start_fraction, final_drop_pct, last_doubling_gain_pct, log_r2, logistic_r2,
        s_curve_preferred (the S-curve's AIC lower than the log curve's by more than 2); with per-question scores
        also n_questions, ci (the level of each interval), slope, slope_ci_low, slope_ci_high, last_gain,
        last_gain_ci_low, last_gain_ci_high, whole_gain, whole_gain_ci_low, whole_gain_ci_high.

    Examples
    --------
    >>> from fabnb.data.published import scores
    >>> labels = classify_scaling(scores())  # the sweeps of Tables 15-18
    >>> labels.set_index("model")["label"].to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'DeepSeek-v3.2-Exp': 'logarithmic growth', 'Gemini-2.5-Flash': 'cold-start',
     'Qwen-2.5-72B-Instruct': 'early saturation', 'Qwen-Plus': 'early saturation'}

    Per question, a curve flat in truth is not given a shape:

    >>> rng = np.random.default_rng(0)
    >>> flat = pd.DataFrame([{"model": "m", "context_k": k, "metric": "depth", "test_id": q,
    ...                       "score": 0.6 + rng.normal(0, 0.02) + 0.2 * (q % 2)}
    ...                      for q in range(40) for k in (1, 2, 4, 8, 16)])
    >>> classify_scaling(flat, "depth")["label"].item()
    'flat (no context effect)'
    """
    from ..core.stats import N_BOOT, SEED, family_level

    per_question = scores if "test_id" in scores.columns else None
    if per_question is not None:
        keys = [c for c in SCORE_KEYS if c in scores.columns and c != "test_id"] + ["metric"]
        means = scores.assign(score=scores["score"].astype(float)).groupby(keys, dropna=False)["score"].mean()
        scores = means.reset_index()
        if metric == AVERAGE and not (scores["metric"] == AVERAGE).any():
            scores = with_average(scores)
    curves = metric_sweep(scores, metric)
    log = fit_log_curves(curves, metric).set_index("model")
    logistic = fit_logistic_curves(curves, metric).set_index("model")
    needs = max(min_windows, 3)
    labelled = (curves.groupby("model", sort=False)["context_k"].nunique() >= needs).sum()
    # A flat curve has two ways to a wrong shape: its slope (growth, saturation) or its last doubling (decline); each
    # curve is two decisions of the family, so all of the table's wrong labels together stay under 1 - ci.
    level = family_level(ci, 2 * labelled)
    point_rule = {"cold_start_fraction": cold_start_fraction, "decline_pct": decline_pct, "plateau_pct": plateau_pct,
                  "min_log_r2": min_log_r2}
    rows = []
    for model, g in curves.groupby("model", sort=False):
        k, y = g["context_k"].to_numpy(float), g["score"].to_numpy(float)
        label, rule, point_stats = _point_label(k, y, log.loc[model, "r_squared"], point_rule)
        row = {"model": model, "metric": metric, "evidence": "points", **point_stats,
               "log_r2": log.loc[model, "r_squared"], "logistic_r2": logistic.loc[model, "r_squared"],
               "s_curve_preferred": bool(logistic.loc[model, "status"] == "fitted"
                                         and logistic.loc[model, "aic"] < log.loc[model, "aic"] - 2)}
        if per_question is not None:
            q = question_curves(per_question, metric, model)
            row.update(evidence="intervals", n_questions=len(q), ci=level)
            if len(q.columns) >= needs and len(q):
                ev = _evidence(q, level, N_BOOT if n_boot is None else n_boot, SEED if seed is None else seed)
                label, rule = _evidence_label(ev, q.columns.to_numpy(float), delta, cold_start_fraction)
                for name, col in (("slope", "slope"), ("last", "last_gain"), ("whole", "whole_gain")):
                    row.update({col: ev.loc[name, "mean"], f"{col}_ci_low": ev.loc[name, "ci_low"],
                                f"{col}_ci_high": ev.loc[name, "ci_high"]})
        if len(np.unique(k)) < needs:
            label, rule = "not enough windows", f"not enough windows to fit ({len(np.unique(k))} of {needs})"
        rows.append({**row, "label": label, "rule": rule})
    first = ["model", "metric", "label", "rule", "evidence"]
    out = pd.DataFrame(rows)
    return out[first + [c for c in out.columns if c not in first]] if len(out) else out


def gain_rates(scores: pd.DataFrame, model: str, spans, metric: str = AVERAGE) -> pd.DataFrame:
    """Score gained over context spans, per K token and per doubling of context.

    Parameters
    ----------
    spans : list of (from_k, to_k)
        Observed contexts of the model.

    Returns
    -------
    DataFrame
        from_k, to_k, score_from, score_to, gain, gain_per_k, gain_per_doubling.
    """
    require_models(scores, model)
    curve = metric_sweep(scores, metric)
    curve = curve[curve["model"] == model].set_index("context_k")["score"]
    rows = []
    for lo, hi in spans:
        for k in (lo, hi):
            if k not in curve.index:
                raise ScoreError(f"{model!r} has no {metric} score at {k:g}K; it has {list(curve.index)}.")
        gain = curve[hi] - curve[lo]
        rows.append({"from_k": lo, "to_k": hi, "score_from": curve[lo], "score_to": curve[hi], "gain": gain,
                     "gain_per_k": gain / (hi - lo), "gain_per_doubling": gain / math.log2(hi / lo)})
    return pd.DataFrame(rows)


def metric_slopes(scores: pd.DataFrame, metrics=METRICS) -> pd.DataFrame:
    """Log-curve slope of every metric for every model, with spread across models.

    Returns
    -------
    DataFrame
        One row per metric: metric, mean_slope (mean over models of the slope of
        ``score ~ ln(context_k)``), slope_spread (standard deviation over models),
        mean_gain (mean over models of final minus first score), and one
        ``slope[<model>]`` column per model.
    """
    rows = []
    for metric in metrics:
        fits = fit_log_curves(scores, metric)
        fits = fits[fits["status"] == "fitted"]
        curves = metric_sweep(scores, metric)
        gains = curves.groupby("model")["score"].agg(lambda s: s.iloc[-1] - s.iloc[0])
        row = {"metric": metric, "mean_slope": fits["slope"].mean(), "slope_spread": fits["slope"].std(ddof=1),
               "mean_gain": gains.mean()}
        row.update({f"slope[{m}]": s for m, s in zip(fits["model"], fits["slope"])})
        rows.append(row)
    return pd.DataFrame(rows)


def context_to_reach(scores: pd.DataFrame, threshold: float, metrics=METRICS) -> pd.DataFrame:
    """First observed context at which each model's metric reaches ``threshold``.

    Returns
    -------
    DataFrame
        model, metric, threshold, context_k (NaN if never reached).
    """
    rows = []
    for metric in metrics:
        for model, g in metric_sweep(scores, metric).groupby("model", sort=False):
            hit = g[g["score"] >= threshold - 1e-12]
            rows.append({"model": model, "metric": metric, "threshold": threshold,
                         "context_k": hit["context_k"].iloc[0] if len(hit) else float("nan")})
    return pd.DataFrame(rows)


def _effective(k: np.ndarray, y: np.ndarray, share: float) -> tuple[float, str, float, str]:
    """One curve's (reference score, its name, effective window, how it ends); windows ascending."""
    short = float(np.nanmax(y[:2]))
    peak = int(np.nanargmax(y))
    if y[peak] > short and peak >= 2:  # a cold start: its short windows are low by definition
        reference, named = float(y[peak]), f"peak ({k[peak]:g}K)"
    else:
        reference, named = short, "best short window"
    above = y >= share * reference - 1e-12
    if not above.any():
        return reference, named, float("nan"), "below from the first window"
    first = int(np.argmax(above))
    run = first
    while run + 1 < len(k) and above[run + 1]:
        run += 1
    ends = "beyond the sweep" if run == len(k) - 1 else f"falls below at {k[run + 1]:g}K"
    return reference, named, float(k[run]), ends


def effective_window(scores: pd.DataFrame, metric: str = AVERAGE, share: float = 0.85, *, n_boot: int = 1000,
                     seed: int = 0) -> pd.DataFrame:
    """The largest window a system can really use: where its score stays at ``share`` of a reference score.

    NoLiMa's effective length, per model: the reference is the best score of the two shortest windows (its
    base score), or the peak for a cold-start curve (one that rises past them; its short windows are low by
    definition); the effective window is the last window of the first run of windows at or above
    ``share`` x the reference. Its uncertainty is the range of that window over bootstrap draws of the questions
    (2.5th to 97.5th percentile), so a fall inside the noise shows as a wide range, not a point.

    Parameters
    ----------
    scores : DataFrame
        A score frame with one system and mode and one row per question (model, context_k, test_id, metric,
        score); questions are the resampled unit.
    share : float
        NoLiMa's 0.85 by default.

    Returns
    -------
    DataFrame
        model, metric, share, reference (its name), reference_score, effective_k, ends ("beyond the sweep",
        "falls below at ...K", or "below from the first window"), low_k, high_k (the bootstrap range), n
        (questions), draws.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> rows = [{"model": "m", "context_k": k, "test_id": f"q{i}", "metric": "average",
    ...          "score": (0.8 if k <= 16 else 0.4) + rng.normal(0, 0.05)} for k in (4, 8, 16, 32) for i in range(40)]
    >>> row = effective_window(pd.DataFrame(rows)).iloc[0]
    >>> float(row["effective_k"]), row["ends"], (float(row["low_k"]), float(row["high_k"]))
    (16.0, 'falls below at 32K', (16.0, 16.0))
    """
    if not 0 < share <= 1:
        raise ValueError(f"share is a fraction of the reference score, in (0, 1]; got {share!r}.")
    rows = scores[(scores["metric"] == metric) & scores["context_k"].notna()]
    out = []
    rng = np.random.default_rng(seed)
    for model, g in rows.groupby("model", sort=False):
        wide = g.pivot_table(index="test_id", columns="context_k", values="score", aggfunc="mean").sort_index(axis=1)
        k = wide.columns.to_numpy(float)
        if len(k) < 2:
            raise ScoreError(f"{model!r} has {len(k)} window(s) of {metric}; an effective window needs two or more.")
        ref, named, eff, ends = _effective(k, wide.mean().to_numpy(float), share)
        values = wide.to_numpy(float)
        draws = []
        for _ in range(n_boot):
            pick = values[rng.integers(0, len(values), len(values))]
            with np.errstate(all="ignore"):
                draws.append(_effective(k, np.nanmean(pick, axis=0), share)[2])
        draws = np.array(draws, float)
        found = draws[~np.isnan(draws)]
        low, high = (np.percentile(found, [2.5, 97.5]) if len(found) else (np.nan, np.nan))
        out.append({"model": model, "metric": metric, "share": share, "reference": named, "reference_score": ref,
                    "effective_k": eff, "ends": ends, "low_k": float(low), "high_k": float(high),
                    "n": len(values), "draws": n_boot})
    return pd.DataFrame(out)


def scaling_by_type(scores: pd.DataFrame, questions: pd.DataFrame, metric: str = AVERAGE, *, min_questions: int = 10,
                    n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The paper's future work (3), per-category scaling: each model's curve split by the question's test type
    (robustness, multi-hop, generation quality), labelled, fitted and given its effective window.

    Each type's curve goes through :func:`classify_scaling` (labels only with evidence, the whole table one
    family), :func:`fit_log_curves` and :func:`effective_window`; a type with fewer than ``min_questions``
    questions scored gets no label, fit or window, and says so (the split multiplies the noise of each curve).

    Parameters
    ----------
    scores : DataFrame
        Per-question scores of one mode (model, context_k, test_id, metric, score).
    questions : DataFrame
        test_id, test_type.

    Returns
    -------
    DataFrame
        model, test_type, n_questions, label, rule, slope (of the log fit), slope_ci_low, slope_ci_high, r_squared,
        effective_k, ends.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> q = pd.DataFrame({"test_id": [f"q{i}" for i in range(40)], "test_type": ["robustness", "multi_hop"] * 20})
    >>> rows = [{"model": "m", "context_k": k, "test_id": f"q{i}", "metric": "depth",
    ...          "score": 0.55 + (0.08 * np.log2(k) if i % 2 else 0.0) + rng.normal(0, 0.02)}
    ...         for k in (1, 2, 4, 8, 16) for i in range(40)]
    >>> t = scaling_by_type(pd.DataFrame(rows), q, "depth")
    >>> t.set_index("test_type")["label"].to_dict()
    {'multi_hop': 'logarithmic growth', 'robustness': 'flat (no context effect)'}
    """
    if metric == AVERAGE and not (scores["metric"] == AVERAGE).any():
        scores = with_average(scores)  # before the merge: the average is per question, over its metrics
    typed = scores[scores["metric"] == metric].merge(questions[["test_id", "test_type"]], on="test_id", how="inner")
    columns = ["model", "test_type", "n_questions", "label", "rule", "slope", "slope_ci_low", "slope_ci_high",
               "r_squared", "effective_k", "ends"]
    counts = typed.groupby(["model", "test_type"])["test_id"].nunique()
    enough = [key for key, n in counts.items() if n >= min_questions]
    rows = [{"model": m, "test_type": t, "n_questions": int(n), "label": "too few questions",
             "rule": f"{n} questions of this type, {min_questions} needed for a curve of its own"}
            for (m, t), n in counts.items() if n < min_questions]
    if enough:
        sep = " | "  # a curve per (model, type): the functions below take one model column
        part = typed.set_index(["model", "test_type"]).loc[enough].reset_index()
        part = part.assign(model=part["model"].astype(str) + sep + part["test_type"].astype(str))
        labels = classify_scaling(part, metric, n_boot=n_boot, seed=seed).set_index("model")
        means = part.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
        fits = fit_log_curves(means, metric).set_index("model")
        effective = (effective_window(part, metric, n_boot=0, seed=seed).set_index("model")
                     if part["context_k"].nunique() >= 2 else pd.DataFrame())
        for curve in labels.index:
            model, test_type = curve.split(sep, 1)
            rows.append({"model": model, "test_type": test_type, "n_questions": int(counts[(model, test_type)]),
                         "label": labels.loc[curve, "label"], "rule": labels.loc[curve, "rule"],
                         **{c: fits.loc[curve, c] for c in ("slope", "slope_ci_low", "slope_ci_high", "r_squared")},
                         "effective_k": effective.loc[curve, "effective_k"] if curve in effective.index else np.nan,
                         "ends": effective.loc[curve, "ends"] if curve in effective.index else ""})
    return pd.DataFrame(rows, columns=columns).sort_values(["model", "test_type"], ignore_index=True)
