"""One system, model or mode against another: crossovers of two curves, the routing table (Section 8.2), the
cross-framework table (Table 5) and the dual-mode delta (Appendix F.3).

Every function takes a score frame (see :mod:`fabnb.core.scores`) and returns a new tidy DataFrame; none mutates
its input.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.schema import AVERAGE, METRICS, SCORE_KEYS
from ..core.scores import ScoreError, at_window, metric_sweep, require_models
from .curves import fit_log_curves, question_curves

__all__ = ['MODE_ATTRIBUTIONS', 'crossovers', 'dual_mode_attribution', 'dual_mode_delta', 'framework_table',
           'retriever_ablation', 'routing_table']


def crossovers(
    scores: pd.DataFrame, model_a: str, model_b: str, metric: str = AVERAGE, method: str = "observed",
    intervals: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Contexts at which two models' curves cross.

    Parameters
    ----------
    scores : DataFrame
        A score frame with one system and mode.
    model_a, model_b : str
        The two models.
    metric : str
        Metric of the curves.
    method : {"observed", "log_fit"}
        ``"observed"``: linear interpolation in ln(context) of the score difference
        between consecutive shared contexts where its sign changes. ``"log_fit"``:
        the intersection of the two fitted log curves (at most one), reported only
        if it lies inside the shared context range.
    intervals : DataFrame, optional
        :func:`fabnb.analysis.intervals.mean_intervals` of the same scores. With it, a crossing is ``separated`` only
        where the two curves' intervals separate on both sides: at some window below it the leader below is
        ahead by more than the intervals' overlap, and at some window above it the other one is.

    Returns
    -------
    DataFrame
        model_a, model_b, method, context_k, leader_below, leader_above, separated (None without
        ``intervals``). Empty if the curves do not cross.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"model": ["a"] * 2 + ["b"] * 2, "context_k": [4, 16] * 2,
    ...                    "metric": "average", "score": [0.6, 0.7, 0.5, 0.8]})
    >>> crossovers(df, "a", "b").context_k.round(3).tolist()
    [8.0]
    """
    require_models(scores, model_a, model_b)
    curves = metric_sweep(scores, metric)
    a = curves[curves["model"] == model_a].set_index("context_k")["score"]
    b = curves[curves["model"] == model_b].set_index("context_k")["score"]
    shared = a.index.intersection(b.index).sort_values()
    columns = ["model_a", "model_b", "method", "context_k", "leader_below", "leader_above", "separated"]
    if len(shared) < 2:
        raise ScoreError(f"{model_a!r} and {model_b!r} share {len(shared)} context(s); a crossover needs 2.")
    rows = []
    if method == "observed":
        d = (a[shared] - b[shared]).to_numpy()
        x = np.log(shared.to_numpy(float))
        for i in range(len(d) - 1):
            if d[i] == 0 or d[i] * d[i + 1] >= 0:
                continue
            xc = x[i] + d[i] / (d[i] - d[i + 1]) * (x[i + 1] - x[i])
            rows.append([model_a, model_b, method, math.exp(xc),
                         model_a if d[i] > 0 else model_b, model_a if d[i + 1] > 0 else model_b, None])
    elif method == "log_fit":
        fits = fit_log_curves(curves[curves["model"].isin([model_a, model_b])], metric).set_index("model")
        fa, fb = fits.loc[model_a], fits.loc[model_b]
        if fa["status"] == "fitted" and fb["status"] == "fitted" and fa["slope"] != fb["slope"]:
            xc = (fb["intercept"] - fa["intercept"]) / (fa["slope"] - fb["slope"])
            kc = math.exp(xc)
            if shared.min() <= kc <= shared.max():
                steeper_a = fa["slope"] > fb["slope"]
                rows.append([model_a, model_b, method, kc,
                             model_b if steeper_a else model_a, model_a if steeper_a else model_b, None])
    else:
        raise ValueError(f"method must be 'observed' or 'log_fit', not {method!r}")
    if intervals is not None:
        for row in rows:
            row[6] = _separated(intervals, metric, row[3], row[4], row[5], shared)
    return pd.DataFrame(rows, columns=columns)


def _separated(intervals: pd.DataFrame, metric: str, at_k: float, below: str, above: str, shared) -> bool:
    """Whether ``below`` is ahead beyond both intervals at some shared window under ``at_k``, and ``above`` at some
    window over it."""
    ci = intervals[intervals["metric"] == metric].set_index(["model", "context_k"])

    def ahead(lead: str, other: str, ks) -> bool:
        for k in ks:
            if (lead, k) in ci.index and (other, k) in ci.index:
                if ci.loc[(lead, k), "ci_low"] > ci.loc[(other, k), "ci_high"]:
                    return True
        return False

    ks = [float(k) for k in shared]
    return bool(ahead(below, above, [k for k in ks if k < at_k]) and ahead(above, below, [k for k in ks if k > at_k]))


def routing_table(scores: pd.DataFrame, metric: str = AVERAGE, models=None, per_question: pd.DataFrame | None = None,
                  *, ci: float = 0.95, n_boot: int | None = None, seed: int | None = None) -> pd.DataFrame:
    """The best model at each observed context, and the ranges each model wins.

    With ``per_question`` scores (a ``test_id`` column, the same models), a window has a winner only where the
    leader's paired difference from the runner-up, over the questions both answered, is claimed under the kit's
    multiple-comparison policy (:data:`fabnb.core.stats.FAMILY_METHOD`: Holm over the table's windows, p < 0.05);
    its interval is shown at the table's Bonferroni level. Elsewhere ``winner`` reads ``"within noise"`` and the
    range runs of the winners only.

    Returns
    -------
    DataFrame
        One row per context: context_k, best_model, best_score, runner_up, runner_up_score, margin, and range
        (``"from-toK"`` of the run of consecutive contexts the same model wins, the routing rule of Section 8.2).
        With ``per_question`` also: n (paired questions), margin_ci_low, margin_ci_high (at level ``ci_level``),
        p_value (paired t), p_holm, winner (the best model, or ``"within noise"``). Contexts where fewer than two
        of the models were measured are left out.

    Examples
    --------
    >>> per = pd.DataFrame({"model": ["a", "b"] * 6, "context_k": 4.0, "metric": "average",
    ...                     "test_id": [q for q in range(6) for _ in "ab"],
    ...                     "score": [0.61, 0.60, 0.55, 0.57, 0.70, 0.69, 0.40, 0.42, 0.66, 0.65, 0.5, 0.5]})
    >>> routing_table(per.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean(),
    ...               per_question=per)[["best_model", "winner"]].to_dict("records")
    [{'best_model': 'b', 'winner': 'within noise'}]
    """
    curves = metric_sweep(scores, metric)
    if models is not None:
        require_models(curves, *models)
        curves = curves[curves["model"].isin(models)]
    rows = []
    for k, g in curves.groupby("context_k"):
        if len(g) < 2:
            continue
        g = g.sort_values("score", ascending=False)
        rows.append({"context_k": k, "best_model": g["model"].iloc[0], "best_score": g["score"].iloc[0],
                     "runner_up": g["model"].iloc[1], "runner_up_score": g["score"].iloc[1],
                     "margin": g["score"].iloc[0] - g["score"].iloc[1]})
    table = pd.DataFrame(rows)
    if table.empty:
        return table.assign(range=[])
    leader = table["best_model"]
    if per_question is not None:
        table = _paired_margins(table, per_question, metric, ci, n_boot, seed)
        leader = table["winner"]
    run = (leader != leader.shift()).cumsum()
    bounds = table.groupby(run)["context_k"].agg(["min", "max"])
    table["range"] = [_span(bounds.loc[r, "min"], bounds.loc[r, "max"]) if w != "within noise" else ""
                      for r, w in zip(run, leader)]
    return table


def _paired_margins(table: pd.DataFrame, per_question: pd.DataFrame, metric: str, ci: float, n_boot, seed):
    """The routing table with each window's leader - runner-up paired over questions, and the winner it carries."""
    from ..core.stats import N_BOOT, SEED, family_level, paired_differences

    diffs = []
    for row in table.itertuples(index=False):
        both = [question_curves(per_question, metric, m).get(row.context_k) for m in (row.best_model, row.runner_up)]
        if any(b is None for b in both):
            continue
        d = both[0] - both[1]
        diffs.append(pd.DataFrame({"context_k": row.context_k, "test_id": d.index, "d": d.to_numpy(float)}))
    cols = ["context_k", "n", "margin_ci_low", "margin_ci_high", "p_value", "p_holm"]
    paired = (paired_differences(pd.concat(diffs), ["context_k"], ci=ci, n_boot=N_BOOT if n_boot is None else n_boot,
                                 seed=SEED if seed is None else seed, size=len(table))
              .rename(columns={"ci_low": "margin_ci_low", "ci_high": "margin_ci_high"})[cols]
              if diffs else pd.DataFrame(columns=cols))
    out = table.merge(paired, on="context_k", how="left")
    out["p_holm"] = out["p_holm"].astype(float)
    out["ci_level"] = family_level(ci, len(table))
    out["winner"] = np.where(out["p_holm"] < 0.05, out["best_model"], "within noise")
    return out


def _span(lo: float, hi: float) -> str:
    return f"{lo:g}K" if lo == hi else f"{lo:g}-{hi:g}K"


def framework_table(scores: pd.DataFrame, by: str = "system", context_k: float | None = None) -> pd.DataFrame:
    """Cross-framework table in the shape of Table 5, with averages checked.

    Parameters
    ----------
    by : str
        The column naming the frameworks.
    context_k : float or None
        The operating point: None uses rows without a context (Table 5), a number the rows at that window (a
        live run's). Rows of one cell (questions of a per-question frame) are averaged.

    Returns
    -------
    DataFrame
        Index: the six metrics, then ``average (reported)`` (if the frame has
        ``average`` rows) and ``average (recomputed)``; one column per system.

    Examples
    --------
    >>> from fabnb.data.published import frameworks
    >>> framework_table(frameworks()).loc["average (recomputed)"].round(3).to_dict()  # Table 5
    {'RAGFlow': 0.545, 'MaxKB': 0.574, 'Metaso': 0.666}
    """
    rows = at_window(scores, context_k)
    if rows.empty:
        raise ScoreError("no rows without a context: a framework table needs one operating point per system."
                         if context_k is None else f"no rows at {context_k:g}K; pick a window the scores hold.")
    wide = rows.pivot_table(index="metric", columns=by, values="score", aggfunc="mean", sort=False)
    table = wide.reindex(list(METRICS))
    recomputed = table.mean(axis=0).rename("average (recomputed)")
    parts = [table]
    if AVERAGE in wide.index:
        parts.append(wide.loc[[AVERAGE]].rename(index={AVERAGE: "average (reported)"}))
    parts.append(recomputed.to_frame().T)
    out = pd.concat(parts)
    out.columns.name = by
    return out


# ---------------------------------------------------------------------- dual mode


def dual_mode_delta(results: pd.DataFrame) -> pd.DataFrame:
    """Per question and metric difference between mode B and mode A (Appendix F.3).

    Mode A (``with_kb``) asks the system with its own retrieval; mode B
    (``without_kb``) injects the gold context. A large positive delta points at
    retrieval; low scores in both modes point at generation.

    Parameters
    ----------
    results : DataFrame
        A score frame with a ``mode`` column holding ``"A"``/``"B"`` (or
        ``"with_kb"``/``"without_kb"``).

    Returns
    -------
    DataFrame
        The key columns (without mode), metric, score_a, score_b, delta (B - A),
        paired (False where one mode is missing; delta is then NaN).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"model": "m", "context_k": 8, "test_id": "ROB_001", "metric": "factuality",
    ...                    "mode": ["A", "B"], "score": [0.4, 0.9]})
    >>> dual_mode_delta(df).delta.round(3).tolist()
    [0.5]
    """
    if "mode" not in results.columns:
        raise ScoreError("dual-mode results need a 'mode' column with values A/B (or with_kb/without_kb).")
    names = {"A": "A", "B": "B", "with_kb": "A", "without_kb": "B"}
    modes = results["mode"].map(names)
    if modes.isna().any():
        bad = results.loc[modes.isna(), "mode"].iloc[0]
        raise ScoreError(f"unknown mode {bad!r}; expected one of {sorted(names)}.")
    keys = [c for c in SCORE_KEYS if c in results.columns and c != "mode"] + ["metric"]
    wide = results.assign(mode=modes).pivot_table(index=keys, columns="mode", values="score",
                                                  aggfunc="first", dropna=False)
    wide = wide.reindex(columns=["A", "B"]).rename(columns={"A": "score_a", "B": "score_b"}).reset_index()
    wide.columns.name = None
    wide["delta"] = wide["score_b"] - wide["score_a"]
    wide["paired"] = wide["score_a"].notna() & wide["score_b"].notna()
    return wide


#: The labels :func:`dual_mode_attribution` gives.
MODE_ATTRIBUTIONS = ("retrieval", "generation", "neither", "mixed", "unpaired")


def dual_mode_attribution(delta: pd.DataFrame, margin: float = 0.1, low: float = 0.5) -> pd.DataFrame:
    """Appendix F.3's reading of the dual mode as a label per question: retrieval or generation failure.

    The rule (Appendix F.3's prose, made exact; ``margin`` and ``low`` are settings, not findings):

    - ``retrieval``: mode B (gold context) beats mode A by at least ``margin``: the system answers
      once it has the right passage;
    - ``generation``: both modes score below ``low`` and B does not beat A by ``margin``: the gold
      passage does not help;
    - ``neither``: mode A scores ``low`` or more and B does not beat it by ``margin``;
    - ``mixed``: A below ``low``, B at or above it, yet within ``margin`` (a gap too small to say);
    - ``unpaired``: one mode is missing.

    Parameters
    ----------
    delta : DataFrame
        :func:`dual_mode_delta` (score_a, score_b, delta, paired, the keys and metric).

    Returns
    -------
    DataFrame
        ``delta`` with ``attribution`` (one of :data:`MODE_ATTRIBUTIONS`).

    Examples
    --------
    >>> d = pd.DataFrame({"test_id": ["q1", "q2", "q3", "q4"], "metric": "average",
    ...                   "score_a": [0.3, 0.2, 0.8, None], "score_b": [0.9, 0.25, 0.82, 0.7]})
    >>> d["delta"], d["paired"] = d.score_b - d.score_a, d.score_a.notna() & d.score_b.notna()
    >>> dual_mode_attribution(d)["attribution"].tolist()
    ['retrieval', 'generation', 'neither', 'unpaired']
    """
    if not 0 <= margin <= 1 or not 0 <= low <= 1:
        raise ValueError(f"margin and low are scores from 0 to 1 (got margin={margin!r}, low={low!r}).")
    a, b, d = delta["score_a"], delta["score_b"], delta["delta"]
    label = np.select([~delta["paired"].astype(bool), d >= margin, (a < low) & (b < low), a >= low],
                      ["unpaired", "retrieval", "generation", "neither"], "mixed")
    return delta.assign(attribution=label)


def retriever_ablation(scores: pd.DataFrame, retrievers: dict, base: str = "bm25", metric: str = AVERAGE, *,
                       n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The paper's future work (2), a retriever ablation: systems that differ only in their retriever (sparse,
    dense, hybrid) on the same questions and windows, each window's mean with its interval and its paired
    difference from the ``base`` retriever's system, claimed under the kit's policy (the table one family).

    Parameters
    ----------
    scores : DataFrame
        Per-question scores of one mode (system, context_k, test_id, metric, score).
    retrievers : dict
        system name -> retriever name (``tfidf``, ``bm25``, ``minilm``, ``hybrid``); systems not named are left out.
    base : str
        The retriever the others are set against.

    Returns
    -------
    DataFrame
        system, retriever, context_k, mean, ci_low, ci_high, n, method (the interval's, as
        :func:`fabnb.core.stats.cell_means` chose it), diff (minus the base system on the same questions; NaN for
        the base), diff_low, diff_high, p_holm, claimed.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> rows = [{"system": s, "context_k": k, "test_id": f"q{i}", "metric": "depth",
    ...          "score": 0.5 + (0.2 if s == "dense" else 0.0) + rng.normal(0, 0.05)}
    ...         for s in ("sparse", "dense") for k in (4, 8) for i in range(20)]
    >>> t = retriever_ablation(pd.DataFrame(rows), {"sparse": "bm25", "dense": "minilm"}, metric="depth")
    >>> t[t["retriever"] == "minilm"][["context_k", "claimed"]].values.tolist()
    [[4.0, True], [8.0, True]]
    """
    from ..core.scores import with_average
    from ..core.stats import cell_means, paired_differences

    columns = ["system", "retriever", "context_k", "mean", "ci_low", "ci_high", "n", "method", "diff", "diff_low",
               "diff_high", "p_holm", "claimed"]
    s = scores[scores["system"].isin(list(retrievers))]
    if metric == AVERAGE and not (s["metric"] == AVERAGE).any():
        s = with_average(s)
    s = s[s["metric"] == metric].assign(context_k=lambda f: f["context_k"].astype(float),
                                        score=lambda f: f["score"].astype(float))
    bases = [name for name, r in retrievers.items() if r == base]
    if s.empty or not bases:
        return pd.DataFrame(columns=columns)
    per_q = s.groupby(["system", "context_k", "test_id"], as_index=False)["score"].mean()
    means = cell_means(per_q, ["system", "context_k"], n_boot=n_boot, seed=seed, bounds=(0.0, 1.0))
    means = means.drop(columns="n").rename(columns={"n_clusters": "n"})
    wide = per_q.pivot_table(index=["context_k", "test_id"], columns="system", values="score")
    diffs = pd.concat([(wide[name] - wide[bases[0]]).rename("d").reset_index().assign(system=name)
                       for name in wide.columns if name != bases[0]], ignore_index=True) if wide.shape[1] > 1 else None
    out = means.assign(retriever=means["system"].map(retrievers))
    if diffs is not None:
        judged = paired_differences(diffs, ["system", "context_k"], n_boot=n_boot, seed=seed)
        judged = judged.rename(columns={"mean": "diff", "ci_low": "diff_low", "ci_high": "diff_high"})
        out = out.merge(judged[["system", "context_k", "diff", "diff_low", "diff_high", "p_holm", "claimed"]],
                        on=["system", "context_k"], how="left")
    out = out.reindex(columns=columns)
    out["claimed"] = out["claimed"].astype("boolean").fillna(False).astype(bool)
    return out.sort_values(["context_k", "system"], ignore_index=True)
