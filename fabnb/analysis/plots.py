"""Plots of score frames: one function per figure kind of the FAB-Bench paper.

Every function takes ``ax=None`` (a new figure is made when None), draws on it and
returns the Axes. None calls ``show()`` or ``savefig()``: that is the caller's.

=======================  ====================================================
function                 paper figure
=======================  ====================================================
:func:`plot_scaling`     Figure 3: score against context, with fitted curves
:func:`plot_breakdown`   Figures 4, 5: the six metrics at one context
:func:`plot_deltas`      Figure 6: metric changes between two contexts
:func:`plot_frameworks`  Figure 7: cross-framework comparison
:func:`plot_radar`       Figure 8: six-metric radar for one case
:func:`plot_correlations`  Table 4 as a heatmap
:func:`plot_mode_gap`    Appendix F.3: mode B - mode A per context, with intervals
:func:`plot_generation`  Algorithm 1's temperature and threshold per attempt
:func:`plot_failures`    RAG-TESTER: failure rates by configuration or generator
:func:`plot_position`    score against the gold passage's depth (the position sweep)
:func:`plot_reference_check`  the judge-free check beside judged factuality by window
=======================  ====================================================
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.schema import AVERAGE, METRIC_LABELS, METRICS
from ..core.scores import at_window, metric_sweep
from .curves import MIN_FIT_WINDOWS, fit_log_curves, fit_logistic_curves, predict_log_curve, predict_logistic_curve

__all__ = ['plot_breakdown', 'plot_correlations', 'plot_deltas', 'plot_failures', 'plot_frameworks',
           'plot_generation', 'plot_history', 'plot_mode_gap', 'plot_position', 'plot_radar', 'plot_reference_check',
           'plot_scaling']


def _axes(ax, polar: bool = False, size=(7, 4.5)):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax
    fig = plt.figure(figsize=size)
    return fig.add_subplot(projection="polar" if polar else None)


def _context_axis(ax, contexts, logx: bool, ylabel: str, title: str) -> None:
    """The context-window x axis (ticks at the windows measured), the y label, the title and a light grid."""
    if logx:
        ax.set_xscale("log", base=2)
    ticks = sorted(pd.unique(contexts))
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{k:g}" for k in ticks], fontsize=8)
    ax.set_xlabel("Context window (K tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)


def _palette(n: int):
    import seaborn as sns

    return sns.color_palette("colorblind", n)


def plot_scaling(
    scores: pd.DataFrame,
    metric: str = AVERAGE,
    models=None,
    fit: str | None = "log",
    ax=None,
    logx: bool = False,
    intervals: pd.DataFrame | None = None,
    min_windows: int = MIN_FIT_WINDOWS,
):
    """Score against context window per model, with a fitted curve (Figure 3).

    Parameters
    ----------
    scores : DataFrame
        A score frame with one system and mode.
    metric : str
        The metric on the y axis.
    models : list of str, optional
        Which models, in legend order; default all.
    fit : {"log", "logistic", None}
        Curve drawn through the points (:func:`fabnb.analysis.curves.fit_log_curves`
        or :func:`fabnb.analysis.curves.fit_logistic_curves`); its R² goes in the legend.
    logx : bool
        Log-scale the context axis.
    intervals : DataFrame, optional
        :func:`fabnb.analysis.intervals.mean_intervals` of the same scores: each point gets its 95% interval as an
        error bar.
    min_windows : int
        A curve is drawn through a model's points only from this many windows (default
        :data:`fabnb.analysis.curves.MIN_FIT_WINDOWS`, as the report); below, the points are joined and the legend
        says the curve was not fitted, with no R².

    Returns
    -------
    matplotlib.axes.Axes
    """
    ax = _axes(ax)
    curves = metric_sweep(scores, metric)
    models = list(models) if models is not None else list(dict.fromkeys(curves["model"]))
    curves = curves[curves["model"].isin(models)]
    fits = None
    if fit == "log":
        fits = fit_log_curves(curves, metric).set_index("model")
    elif fit == "logistic":
        fits = fit_logistic_curves(curves, metric).set_index("model")
    elif fit is not None:
        raise ValueError(f"fit must be 'log', 'logistic' or None, not {fit!r}")
    for color, model in zip(_palette(len(models)), models):
        g = curves[curves["model"] == model]
        label = model
        ax.plot(g["context_k"], g["score"], "o", color=color, ms=5)
        if intervals is not None:
            ci = intervals[(intervals["model"] == model) & (intervals["metric"] == metric)].set_index("context_k")
            ci = ci.reindex(g["context_k"].to_numpy())
            low = (g["score"].to_numpy() - ci["ci_low"].to_numpy()).clip(0)
            high = (ci["ci_high"].to_numpy() - g["score"].to_numpy()).clip(0)
            ax.errorbar(g["context_k"], g["score"], yerr=np.nan_to_num(np.vstack([low, high])), fmt="none",
                        ecolor=color, elinewidth=1.0, capsize=3, alpha=0.8)
        enough = g["context_k"].nunique() >= min_windows
        if fits is not None and enough and fits.loc[model, "status"] == "fitted":
            grid = np.geomspace(g["context_k"].min(), g["context_k"].max(), 200)
            predict = predict_log_curve if fit == "log" else predict_logistic_curve
            ax.plot(grid, predict(fits.loc[model], grid), "-", color=color, lw=1.6)
            label = f"{model} ({fit} fit R²={fits.loc[model, 'r_squared']:.3f})"
        else:
            ax.plot(g["context_k"], g["score"], "-", color=color, lw=1.0, alpha=0.6)
            if fits is not None and not enough:
                label = f"{model} (not fitted: {g['context_k'].nunique()} of {min_windows} windows)"
        ax.plot([], [], "o-", color=color, label=label)
    _context_axis(ax, curves["context_k"], logx, f"{METRIC_LABELS[metric]} score (0-1)",
                  f"{METRIC_LABELS[metric]} score across context windows")
    ax.legend(fontsize=8, loc="lower right")
    return ax


def _judged(names) -> list[str]:
    """The metrics of :data:`METRICS` (in its order) among ``names``: those a run judged."""
    names = set(names)
    return [m for m in METRICS if m in names]


def _grouped_bars(ax, wide: pd.DataFrame, title: str, ylabel: str = "Score (0-1)", low=None, high=None):
    """Bars of the judged metrics (hue, in the paper's order) for each row of ``wide`` (groups); with ``low`` and
    ``high`` (frames shaped like ``wide``), each bar gets its interval as an error bar. A metric no row has a score
    for is not drawn (a run that judged two metrics once got four empty bars)."""
    metrics = _judged(wide.columns)
    width = 0.8 / max(1, len(metrics))
    wide = wide.reindex(columns=metrics)
    x = np.arange(len(wide))
    colors = dict(zip(METRICS, _palette(len(METRICS))))  # each metric keeps its colour whatever else was judged
    for i, metric in enumerate(metrics):
        color = colors[metric]
        values = wide[metric].to_numpy(float)
        err = None
        if low is not None and high is not None:
            lo = low.reindex(index=wide.index, columns=metrics)[metric].to_numpy(float)
            hi = high.reindex(index=wide.index, columns=metrics)[metric].to_numpy(float)
            err = np.nan_to_num(np.vstack([(values - lo).clip(0), (hi - values).clip(0)]))
        bars = ax.bar(x - 0.4 + width * (i + 0.5), values, width, color=color, label=METRIC_LABELS[metric],
                      yerr=err, error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "0.3"})
        ax.bar_label(bars, fmt="%.2f", fontsize=6, rotation=90, padding=2)
    ax.set_xticks(x)
    ax.set_xticklabels(wide.index, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    values = wide.to_numpy(float)
    low = float(np.nanmin(values)) if np.isfinite(values).any() else 0.0
    ax.set_ylim(max(0.0, low - 0.15) if low > 0.5 else 0.0, 1.05)
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return ax


def plot_breakdown(scores: pd.DataFrame, context_k: float, models=None, ax=None, intervals=None):
    """The six metrics of each model at one context window (Figures 4 and 5).

    Parameters
    ----------
    intervals : DataFrame, optional
        :func:`fabnb.analysis.intervals.mean_intervals` of the same scores: each bar gets its 95% interval.

    Returns
    -------
    matplotlib.axes.Axes
    """
    ax = _axes(ax, size=(8, 4.5))
    rows = scores[(scores["context_k"] == context_k) & scores["metric"].isin(METRICS)]
    if models is not None:
        rows = rows[rows["model"].isin(models)]
    if rows.empty:
        raise ValueError(f"no metric scores at {context_k:g}K; contexts present: "
                         f"{sorted(scores['context_k'].dropna().unique())}")
    wide = rows.pivot_table(index="model", columns="metric", values="score", aggfunc="first", sort=False)
    if models is not None:
        wide = wide.reindex(models)
    low = high = None
    if intervals is not None:
        at = intervals[intervals["context_k"] == context_k]
        low, high = (at.pivot_table(index="model", columns="metric", values=v, aggfunc="first") for v in
                     ("ci_low", "ci_high"))
    return _grouped_bars(ax, wide, f"Metric breakdown at {context_k:g}K context", low=low, high=high)


def plot_frameworks(scores: pd.DataFrame, by: str = "system", ax=None, context_k: float | None = None):
    """The six metrics of each RAG framework at its one operating point (Figure 7).

    Uses rows without a context window (Table 5 style), or those at ``context_k`` (a live run's window); the rows
    of one bar (a per-question frame's questions) are averaged.

    Returns
    -------
    matplotlib.axes.Axes
    """
    rows = at_window(scores[scores["metric"].isin(METRICS)], context_k)
    if rows.empty:
        raise ValueError("no rows without a context window: plot_frameworks shows one operating point per system."
                         if context_k is None else f"no rows at {context_k:g}K; pick a window the scores hold.")
    ax = _axes(ax, size=(8, 4.5))
    wide = rows.pivot_table(index=by, columns="metric", values="score", aggfunc="mean", sort=False)
    if "model" in rows.columns and by != "model":
        models = rows.drop_duplicates(by).set_index(by)["model"]
        wide.index = [f"{s}\n({models[s]})" for s in wide.index]
    return _grouped_bars(ax, wide, "Cross-framework RAG performance")


def plot_deltas(deltas: pd.DataFrame, value: str = "delta", ax=None, models=None):
    """Heatmap of per-metric changes between two contexts (Figure 6).

    Parameters
    ----------
    deltas : DataFrame
        From :func:`fabnb.analysis.metrics.dilution`. With its ``claimed`` column (per-question scores), only
        claimed changes are coloured and the scale spans them; the others are grey with their value printed, so
        noise neither takes a colour nor stretches the scale.
    value : {"delta", "delta_points", "relative_pct"}
        Score units (as Figure 6), percentage points, or relative percent (as the
        text of Section 5.4).

    Returns
    -------
    matplotlib.axes.Axes
    """
    import seaborn as sns

    units = {"delta": ("Performance change (Δ score)", ".3f"),
             "delta_points": ("Change (percentage points)", ".1f"),
             "relative_pct": ("Relative change (%)", ".1f")}
    if value not in units:
        raise ValueError(f"value must be one of {list(units)}, not {value!r}")
    ax = _axes(ax, size=(8, 3.2))
    d = deltas[deltas["metric"].isin(METRICS)]
    wide = d.pivot_table(index="model", columns="metric", values=value, aggfunc="first", sort=False)
    judged = _judged(d["metric"])  # a metric not judged gets no empty column (one judged, its NaN cells stay)
    wide = wide.reindex(columns=judged).rename(columns=METRIC_LABELS)
    if models is not None:
        wide = wide.reindex(models)
    noise = np.zeros(wide.shape, dtype=bool)
    if "claimed" in d.columns:
        claimed = d.pivot_table(index="model", columns="metric", values="claimed", aggfunc="first", sort=False)
        claimed = claimed.reindex(columns=judged).rename(columns=METRIC_LABELS).reindex(wide.index)
        noise = ~claimed.fillna(False).astype(bool).to_numpy()
    coloured = np.where(noise, np.nan, wide.to_numpy(float))
    lim = float(np.nanmax(np.abs(coloured))) if np.isfinite(coloured).any() else 0.0
    label, fmt = units[value]
    ax.set_facecolor("#e6e6e6")  # masked (within the noise) and missing cells show the axes' grey
    sns.heatmap(wide, ax=ax, cmap="RdYlGn", center=0, vmin=-(lim or 1.0), vmax=lim or 1.0, annot=True, fmt=fmt,
                linewidths=0.5, cbar_kws={"label": label}, mask=noise | wide.isna().to_numpy())
    for i, j in zip(*np.nonzero(noise & wide.notna().to_numpy())):
        ax.text(j + 0.5, i + 0.5, format(wide.iat[i, j], fmt), ha="center", va="center", color="#555555",
                fontsize="small")
    k0, k1 = d["from_k"].iloc[0], d["to_k"].iloc[0]
    ax.set_title(f"Metric-level change: {k0:g}K → {k1:g}K context window")
    ax.set_xlabel("")
    ax.set_ylabel("")
    return ax


def plot_radar(profile: pd.DataFrame, label: str = "model", ax=None, title: str | None = None):
    """Six-metric radar, one polygon per row (Figure 8).

    Parameters
    ----------
    profile : DataFrame
        One row per series, with the six metric columns (as from
        :func:`fabnb.analysis.metrics.metric_profile`) and a ``label`` column.
    ax : polar Axes, optional
        Must be polar (``fig.add_subplot(projection="polar")``).

    Returns
    -------
    matplotlib.projections.polar.PolarAxes
    """
    if ax is not None and getattr(ax, "name", "") != "polar":
        raise ValueError("plot_radar needs a polar Axes: create it with fig.add_subplot(projection='polar').")
    missing = [m for m in METRICS if m not in profile.columns]
    if missing:
        raise ValueError(f"profile lacks metric column(s) {missing}; pass one row per series with all six metrics.")
    ax = _axes(ax, polar=True, size=(5.5, 5.5))
    angles = np.linspace(0, 2 * np.pi, len(METRICS), endpoint=False)
    closed = np.append(angles, angles[0])
    for color, (_, row) in zip(_palette(len(profile)), profile.iterrows()):
        values = row[list(METRICS)].to_numpy(float)
        ax.plot(closed, np.append(values, values[0]), "-o", color=color, ms=3, label=str(row[label]))
        ax.fill(closed, np.append(values, values[0]), color=color, alpha=0.12)
    ax.set_xticks(angles)
    ax.set_xticklabels([METRIC_LABELS[m] for m in METRICS], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_yticks([0.2, 0.4, 0.6, 0.8, 1.0])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title or "Six-metric profile", pad=18)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(3, len(profile)))
    return ax


def plot_correlations(correlations: pd.DataFrame, value: str = "r", ax=None, title: str | None = None,
                      scale: str = "full"):
    """Lower-triangle heatmap of metric correlations (Table 4).

    Parameters
    ----------
    correlations : DataFrame
        Columns metric_a, metric_b and ``value`` (from
        :func:`fabnb.analysis.metrics.metric_correlations` or the published Table 4), and where present
        n and enough: a cell with too few observations reads "too few" with its n and is not coloured.
    scale : {"full", "paper"}
        ``"full"``: the whole range -1 to 1 on a diverging map centred at 0, for any scores.
        ``"paper"``: the paper's Table 4 styling (0.5 to 1, viridis), only for its own published
        table, whose coefficients all lie in that range; a value outside it would be clipped.

    Returns
    -------
    matplotlib.axes.Axes
    """
    import seaborn as sns

    if scale not in ("full", "paper"):
        raise ValueError(f"scale must be 'full' or 'paper', not {scale!r}")
    ax = _axes(ax, size=(5.5, 4.5))
    present = set(correlations["metric_a"]) | set(correlations["metric_b"])
    shown = [m for m in METRICS if m in present]  # a metric not judged gets no empty row and column
    labels = [METRIC_LABELS[m] for m in shown]
    order = {m: i for i, m in enumerate(shown)}
    values = np.full((len(shown), len(shown)), np.nan)
    np.fill_diagonal(values, 1.0)
    few = {}
    for r in correlations.to_dict("records"):
        i, j = order[r["metric_a"]], order[r["metric_b"]]
        if not bool(r.get("enough", True)) or pd.isna(r[value]):
            few[(max(i, j), min(i, j))] = r.get("n")
            continue
        values[i, j] = values[j, i] = r[value]
    grid = pd.DataFrame(values, index=labels, columns=labels)
    mask = np.triu(np.ones_like(grid, dtype=bool), k=1)
    style = ({"cmap": "RdBu_r", "vmin": -1.0, "vmax": 1.0, "center": 0.0} if scale == "full"
             else {"cmap": "viridis", "vmin": 0.5, "vmax": 1.0})
    sns.heatmap(grid, mask=mask, ax=ax, annot=True, fmt=".2f", linewidths=0.5, cbar_kws={"label": "correlation"},
                **style)
    for (i, j), n in few.items():  # not coloured: the cell stays blank, and says why
        ax.text(j + 0.5, i + 0.5, "too few" + ("" if n is None or pd.isna(n) else f"\nn = {int(n)}"),
                ha="center", va="center", fontsize=7, color="0.35")
    ax.set_title(title or "Inter-metric correlation")
    return ax


def plot_mode_gap(gap: pd.DataFrame, metric: str = AVERAGE, ax=None):
    """Mode B minus mode A against context per system, with each difference's 95% interval.

    Parameters
    ----------
    gap : DataFrame
        :func:`fabnb.analysis.intervals.mode_gap`: model, context_k, metric, delta, ci_low, ci_high.

    Returns
    -------
    matplotlib.axes.Axes
    """
    ax = _axes(ax)
    rows = gap[gap["metric"] == metric]
    models = list(dict.fromkeys(rows["model"]))
    for color, model in zip(_palette(len(models)), models):
        g = rows[rows["model"] == model].sort_values("context_k")
        err = np.vstack([(g["delta"] - g["ci_low"]).clip(lower=0), (g["ci_high"] - g["delta"]).clip(lower=0)])
        ax.errorbar(g["context_k"], g["delta"], yerr=np.nan_to_num(err), fmt="o-", color=color, capsize=3,
                    label=model)
    ax.axhline(0.0, color="0.4", lw=0.8)
    _context_axis(ax, rows["context_k"], True, f"{METRIC_LABELS[metric]}: mode B - mode A",
                  "Gold context injected (B) against own retrieval (A)")
    ax.legend(fontsize=8)
    return ax


def plot_generation(attempts: pd.DataFrame, ax=None):
    """Temperature and similarity threshold of every generation attempt, failures marked.

    Parameters
    ----------
    attempts : DataFrame
        ``GenerationRun.attempts`` from :func:`fabnb.qa.generation.generate_qa`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    ax = _axes(ax, size=(8, 3.8))
    x = np.arange(len(attempts))
    ax.plot(x, attempts["temperature"], "-", color="tab:red", lw=1.2, label="temperature τ (Eqs. 4-9)")
    ax.plot(x, attempts["threshold"], "-", color="tab:blue", lw=1.2, label="similarity threshold θ (Eqs. 11-12)")
    ok = attempts["outcome"].eq("accepted").to_numpy()
    ax.scatter(x[ok], attempts["temperature"][ok], color="tab:green", zorder=3, label="accepted")
    ax.scatter(x[~ok], attempts["temperature"][~ok], color="black", marker="x", zorder=3, label="failed attempt")
    starts = np.flatnonzero(attempts["context_id"].ne(attempts["context_id"].shift()).to_numpy())
    for s in starts[1:]:
        ax.axvline(s - 0.5, color="grey", lw=0.5, alpha=0.5)
    ax.set_xlabel("attempt (grey lines separate contexts)")
    ax.set_ylabel("value")
    ax.set_ylim(0, 1.05)
    ax.set_title("Adaptive generation: temperature and threshold per attempt")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ax.grid(alpha=0.3)
    return ax


def plot_failures(table: pd.DataFrame, by: str = "configuration", ax=None, title: str | None = None):
    """Failure rates with their 95% Wilson intervals, split into answer failures, retrieval misses
    and missed refusals (RAG-TESTER).

    Parameters
    ----------
    table : DataFrame
        From :func:`fabnb.judge.failure_table` (``by``, tests, failure_rate, ci_low, ci_high,
        answer_failures, retrieval_misses, refusals_missed).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import pandas as pd
    >>> from fabnb.judge.oracle import failure_table
    >>> verdicts = pd.DataFrame({"generator": ["coverage"] * 4 + ["random"] * 4, "status": "ok",
    ...                          "failed": [1, 1, 0, 1, 0, 0, 1, 0],
    ...                          "failure_type": ["answer failure", "retrieval miss", "", "answer failure",
    ...                                           "", "", "retrieval miss", ""]})
    >>> ax = plot_failures(failure_table(verdicts), by="generator")
    >>> [t.get_text() for t in ax.get_yticklabels()] or [t.get_text() for t in ax.get_xticklabels()]
    ['coverage (n=4)', 'random (n=4)']
    """
    t = table.dropna(subset=["failure_rate"]).reset_index(drop=True)
    ax = _axes(ax, size=(7, 0.5 * max(len(t), 3) + 1.5))
    y = np.arange(len(t))
    left = np.zeros(len(t))
    kinds = [("answer_failures", "answer failure", "tab:red"), ("retrieval_misses", "retrieval miss", "tab:orange"),
             ("refusals_missed", "refusal missed", "tab:purple")]
    for col, label, color in kinds:
        share = (t[col] / t["tests"].where(t["tests"] > 0)).fillna(0).to_numpy()
        ax.barh(y, share, left=left, color=color, alpha=0.75, label=label, height=0.6)
        left += share
    # Clipped at 0: a bound a rounding error past its rate (0 of n, n of n) must not break the plot.
    below = np.clip((t["failure_rate"] - t["ci_low"]).to_numpy(dtype=float), 0, None)
    above = np.clip((t["ci_high"] - t["failure_rate"]).to_numpy(dtype=float), 0, None)
    ax.errorbar(t["failure_rate"], y, xerr=[below, above], fmt="o", color="black", capsize=3,
                label="failure rate, 95% CI")
    ax.set_yticks(y, [f"{v} (n={n})" for v, n in zip(t[by], t["tests"])], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of tests failed")
    ax.set_title(title or f"RAG-TESTER failures by {by}")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return ax


def plot_history(table: pd.DataFrame, metric: str = AVERAGE, ax=None):
    """One metric's trend over a folder of runs, each run's pooled mean with its interval, a line per system
    (``fabnb history``). A run not comparable with the one before (other questions or another judge) is drawn
    hollow, after a dashed line: the trend does not run through it unmarked.

    Parameters
    ----------
    table : DataFrame
        From :func:`fabnb.experiment.history.run_history` (order, name, system, metric, mean, ci_low, ci_high,
        comparable).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> t = pd.DataFrame({"order": [0, 1, 2], "name": ["a", "b", "c"], "system": "s", "metric": "average",
    ...                   "mean": [0.5, 0.6, 0.55], "ci_low": [0.4, 0.5, 0.45], "ci_high": [0.6, 0.7, 0.65],
    ...                   "comparable": [True, True, False]})
    >>> ax = plot_history(t)
    >>> [t.get_text() for t in ax.get_xticklabels()], len(ax.lines) > 0
    (['0: a', '1: b', '2: c'], True)
    """
    t = table[table["metric"] == metric]
    if not len(t):
        raise ValueError(f"the history has no {metric!r} scores; metrics: {', '.join(sorted(set(table['metric'])))}")
    ax = _axes(ax)
    systems = sorted(t["system"].unique())
    for color, system in zip(_palette(len(systems)), systems):
        rows = t[t["system"] == system].sort_values("order")
        x, m = rows["order"].to_numpy(float), rows["mean"].to_numpy(float)
        below = np.clip(m - rows["ci_low"].to_numpy(float), 0, None)
        above = np.clip(rows["ci_high"].to_numpy(float) - m, 0, None)
        ax.errorbar(x, m, yerr=[np.nan_to_num(below), np.nan_to_num(above)], color=color, capsize=3, marker="o",
                    label=system)
        broken = ~rows["comparable"].to_numpy(bool)
        ax.scatter(x[broken], m[broken], s=80, facecolors="white", edgecolors=color, zorder=3)
    runs = t.drop_duplicates("order").sort_values("order")
    for order in runs.loc[~runs["comparable"].to_numpy(bool), "order"]:
        ax.axvline(order - 0.5, color="grey", ls="--", lw=0.8)
    ax.set_xticks(runs["order"], [f"{o}: {n}" for o, n in zip(runs["order"], runs["name"])], rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"{metric} (pooled over windows), with its interval")
    ax.set_title(f"History: {metric}, run after run (hollow: other questions or judge than the run before)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return ax


def plot_position(table: pd.DataFrame, metric: str | None = None, ax=None):
    """Score against the gold passage's depth, one line per system and window, with the intervals of
    :func:`fabnb.analysis.position.score_by_depth` (a point without one is drawn bare, never with a made-up bar).

    Returns the Axes.

    Examples
    --------
    >>> t = pd.DataFrame({"system": "s", "context_k": 8.0, "metric": "factuality", "depth": [0, 50, 100],
    ...                   "mean": [0.9, 0.6, 0.3], "ci_low": [0.8, 0.5, 0.2], "ci_high": [1.0, 0.7, 0.4], "n": 10})
    >>> ax = plot_position(t)
    >>> len(ax.lines) >= 1, ax.get_xlabel()
    (True, 'Depth of the gold passage in the window (%)')
    """
    ax = _axes(ax)
    metric = metric or (table["metric"].iloc[0] if len(table) else "")
    t = table[table["metric"] == metric]
    for (system, k), g in t.groupby(["system", "context_k"], sort=True):
        g = g.sort_values("depth")
        low = (g["mean"] - g["ci_low"]).fillna(0).clip(lower=0)
        high = (g["ci_high"] - g["mean"]).fillna(0).clip(lower=0)
        ax.errorbar(g["depth"], g["mean"], yerr=[low, high], marker="o", capsize=3, label=f"{system} {k:g}K")
    ax.set_xlabel("Depth of the gold passage in the window (%)")
    ax.set_ylabel(f"{metric} (0-1)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Score against where the gold passage sat")
    if len(t):
        ax.legend(fontsize=8)
    return ax


def plot_reference_check(table: pd.DataFrame, ax=None):
    """The judge-free check beside the judged factuality by window, one pair of lines per system and mode (solid:
    the share the check finds correct; dashed: the judge's mean factuality on the same cells), each with its
    interval from :func:`fabnb.analysis.objective.reference_beside_judged`.

    Returns the Axes.

    Examples
    --------
    >>> t = pd.DataFrame({"system": "s", "context_k": [4.0, 8.0], "mode": "A", "n": 20, "rate": [0.5, 0.6],
    ...                   "rate_low": [0.3, 0.4], "rate_high": [0.7, 0.8], "judged": [0.7, 0.7],
    ...                   "judged_low": [0.6, 0.6], "judged_high": [0.8, 0.8], "judged_method": "t"})
    >>> ax = plot_reference_check(t)
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['s A: reference check', 's A: judged factuality']
    """
    ax = _axes(ax)
    colors = _palette(max(1, table.groupby(["system", "mode"]).ngroups))
    for color, ((system, mode), g) in zip(colors, table.groupby(["system", "mode"], sort=True)):
        g = g.sort_values("context_k")
        for value, low, high, style, what in (("rate", "rate_low", "rate_high", "-", "reference check"),
                                              ("judged", "judged_low", "judged_high", "--", "judged factuality")):
            below = (g[value] - g[low]).fillna(0).clip(lower=0)
            above = (g[high] - g[value]).fillna(0).clip(lower=0)
            ax.errorbar(g["context_k"], g[value], yerr=[below, above], linestyle=style, marker="o", capsize=3,
                        color=color, label=f"{system} {mode}: {what}")
    _context_axis(ax, table["context_k"], True, "Share correct / mean score (0-1)",
                  "Judge-free check beside the judged factuality (objective questions)")
    ax.set_ylim(0, 1.05)
    if len(table):
        ax.legend(fontsize=8)
    return ax
