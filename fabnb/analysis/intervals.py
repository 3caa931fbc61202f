"""Intervals over questions: each cell's mean with its interval, the paired B - A gap of dual mode, and Section 6's
difficulty ordering (harder metrics below factuality on every system).

The unit a benchmark samples is the question, so every interval here is over questions, chosen in one place by
the sample's size (:func:`fabnb.core.stats.cell_means`: Student's t on question means below 100 questions, the
percentile bootstrap from there; replicates of one question move together). Both functions
take a per-question score frame (:mod:`fabnb.core.scores` with a ``test_id`` column, e.g.
``fabnb.judge.to_score_frame(scores, by=(..., "test_id", "metric"))``) and return a new tidy frame.
``docs/statistics.md`` gives the methods and their sources.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from ..core.schema import SCORE_KEYS
from ..core.scores import ScoreError, with_average
from ..core.stats import N_BOOT, SEED, adjust_pvalues, cell_means, shown_interval
from .comparison import dual_mode_delta

__all__ = ["MIN_ORDER_QUESTIONS", "DifficultyOrder", "difficulty_order", "mean_intervals", "mode_gap"]

#: Questions a system needs before :func:`difficulty_order` says a metric scores lower than another on it. Below 6,
#: even a metric that scored lower on every question fails an exact two-sided sign test at 0.05 (0.0625 at 5,
#: 0.031 at 6).
MIN_ORDER_QUESTIONS = 6


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
    """Each cell's mean score with the interval its questions support (:func:`fabnb.core.stats.cell_means`: a t
    interval on question means below 100 questions, the percentile bootstrap from there, "no spread" for a constant
    sample).

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
    out = cell_means(per, by, n_boot=N_BOOT if n_boot is None else n_boot, seed=SEED if seed is None else seed,
                     ci=ci, bounds=(0.0, 1.0))
    out = out.drop(columns="n").rename(columns={"n_clusters": "n"})
    out["shown"] = [shown_interval(m, lo, hi, n, method) for m, lo, hi, n, method
                    in zip(out["mean"], out["ci_low"], out["ci_high"], out["n"], out["method"])]
    return out


def mode_gap(scores: pd.DataFrame, *, n_boot: int | None = None, seed: int | None = None,
             ci: float = 0.95) -> pd.DataFrame:
    """Mode B minus mode A per cell: the mean paired difference over the same questions, with its interval.

    Mode B injects the gold context, mode A lets the system retrieve (Appendix F.3): B - A is what
    retrieval costs. Only questions answered and scored in both modes count (paired); the interval is
    paired, over those questions (:func:`fabnb.core.stats.cell_means` of the per-question differences).

    Parameters
    ----------
    scores : DataFrame
        A per-question score frame with ``mode`` (A/B) and ``test_id``.

    Returns
    -------
    DataFrame
        The key columns without mode and test_id, metric, n (paired questions), score_a, score_b,
        delta (mean of B - A), ci_low, ci_high (unadjusted, at ``ci``), method, b_better (share of questions where B
        scored higher), ties (share where equal), p_value (paired t), p_holm (Holm over the rows of the same metric:
        one table, one family, :data:`fabnb.core.stats.FAMILY_METHOD`), claimed (p_holm < 0.05: the gap the
        report states).

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
    columns = [*by, "n", "score_a", "score_b", "delta", "ci_low", "ci_high", "method", "b_better", "ties", "p_value",
               "p_holm", "claimed"]
    if per.empty:
        return pd.DataFrame(columns=columns)
    boot = cell_means(per, by, value="delta", n_boot=N_BOOT if n_boot is None else n_boot,
                      seed=SEED if seed is None else seed, ci=ci, bounds=(-1.0, 1.0))
    sides = per.assign(b_better=per["delta"] > 1e-12, ties=per["delta"].abs() <= 1e-12).groupby(
        by, dropna=False).agg(score_a=("score_a", "mean"), score_b=("score_b", "mean"),
                              b_better=("b_better", "mean"), ties=("ties", "mean")).reset_index()
    out = boot.rename(columns={"mean": "delta"}).drop(columns="n").rename(columns={"n_clusters": "n"})
    out = out.merge(sides, on=by, how="left")
    out["p_holm"] = out.groupby("metric")["p_value"].transform(lambda p: adjust_pvalues(p.to_numpy(float)))
    out["claimed"] = out["p_holm"] < 0.05
    return out[columns]


@dataclass(frozen=True)
class DifficultyOrder:
    """What :func:`difficulty_order` found: its table, a verdict over every system, and why.

    Attributes
    ----------
    table : DataFrame
        One row per system and harder metric (see :func:`difficulty_order`).
    verdict : str
        ``"holds"`` (every harder metric lower on every system), ``"does not hold"`` (one scored higher, or not
        lower on point estimates), or ``"cannot tell"`` (too few questions, or an interval that spans 0).
    why : str
        The sentence behind the verdict, naming the system and metric it turns on.
    """

    table: pd.DataFrame
    verdict: str
    why: str

    def __repr__(self) -> str:
        return f"DifficultyOrder({self.verdict}: {self.why})\n{self.table.to_string(index=False)}"

    def _repr_html_(self) -> str:
        return f"<p><b>{html.escape(self.verdict)}</b>: {html.escape(self.why)}</p>" + self.table.to_html(index=False)


def difficulty_order(scores: pd.DataFrame, *, harder=("depth", "support_quality"), than: str = "factuality",
                     by: str = "system", n_boot: int | None = None, seed: int | None = None,
                     ci: float = 0.95) -> DifficultyOrder:
    """Section 6's "consistent difficulty ordering": do the ``harder`` metrics score below ``than`` on every system?

    On per-question scores (a ``test_id`` column) each system's gap is paired: per question, the harder metric's
    score minus ``than``'s, averaged, with a bootstrap interval over the questions scored on both
    (:func:`fabnb.core.stats.cell_means`). A gap counts as lower only when its interval lies below 0 and it rests on
    :data:`MIN_ORDER_QUESTIONS` questions or more; "higher" when its interval lies above 0; else "cannot tell".
    On one mean per system (the paper's Table 5, no ``test_id``) the gap is of the means and the verdict of point
    estimates, and the table says so.

    Parameters
    ----------
    scores : DataFrame
        A score frame (:mod:`fabnb.core.scores`): ``by``, metric, score, and test_id for per-question scores. Rows of
        one system and question (replicates, or windows and modes when the frame holds several: select one
        first) are averaged.
    harder : sequence of str
        The metrics expected to score lower (the paper: depth and support quality).
    than : str
        The metric they are compared with (the paper: factuality).

    Returns
    -------
    DifficultyOrder
        ``table``: <by>, metric, than, n (questions on both; NaN for point estimates), score, score_than, gap
        (mean of metric - than), ci_low, ci_high, lower_share (share of questions where the metric scored lower),
        verdict ("lower", "higher", "not lower", "cannot tell"), basis.

    Examples
    --------
    >>> rows = [{"system": "s", "test_id": f"q{i}", "metric": m, "score": v}
    ...         for i in range(8) for m, v in (("factuality", 0.8), ("depth", 0.5), ("support_quality", 0.6))]
    >>> order = difficulty_order(pd.DataFrame(rows), n_boot=200)
    >>> order.verdict, order.table["verdict"].tolist()
    ('holds', ['lower', 'lower'])
    >>> difficulty_order(pd.DataFrame(rows[:9]), n_boot=200).verdict   # 3 questions
    'cannot tell'
    """
    harder = list(harder)
    columns = [by, "metric", "than", "n", "score", "score_than", "gap", "ci_low", "ci_high", "lower_share",
               "verdict", "basis"]
    missing = [m for m in [*harder, than] if m not in set(scores["metric"])]
    if missing:
        raise ScoreError(f"difficulty_order compares {', '.join(harder)} with {than}; the scores have no "
                         f"{', '.join(missing)}. Judge those metrics (`[judge] metrics`) or name others.")
    keys = [by, "test_id"] if "test_id" in scores.columns else [by]
    means = (scores[scores["metric"].isin([*harder, than])].assign(score=lambda f: f["score"].astype(float))
             .groupby([*keys, "metric"], dropna=False)["score"].mean().unstack("metric"))
    rows = []
    for metric in harder:
        pair = means[[metric, than]].dropna().rename(columns={metric: "score", than: "score_than"})
        pair = pair.assign(gap=pair["score"] - pair["score_than"], metric=metric).reset_index()
        if "test_id" not in keys:
            for r in pair.itertuples():
                rows.append({by: getattr(r, by), "metric": metric, "than": than, "n": float("nan"),
                             "score": r.score, "score_than": r.score_than, "gap": r.gap, "ci_low": float("nan"),
                             "ci_high": float("nan"), "lower_share": float("nan"),
                             "verdict": "lower" if r.gap < 0 else "not lower",
                             "basis": "point estimates (no per-question scores, no interval)"})
            continue
        if pair.empty:
            continue
        boot = cell_means(pair, [by, "metric"], value="gap", n_boot=N_BOOT if n_boot is None else n_boot,
                          seed=SEED if seed is None else seed, ci=ci, bounds=(-1.0, 1.0))
        sides = pair.assign(lower=pair["gap"] < -1e-12).groupby(by, dropna=False).agg(
            score=("score", "mean"), score_than=("score_than", "mean"), lower_share=("lower", "mean"))
        for r in boot.itertuples():
            n = int(r.n_clusters)
            # "no spread": every question's gap is the same; with MIN_ORDER_QUESTIONS of them, all on one side of 0,
            # the exact sign test decides (p = 2 ** (1 - n) <= 0.031), as the interval would otherwise
            low, high = (r.mean, r.mean) if r.method == "no spread" else (r.ci_low, r.ci_high)
            if n >= MIN_ORDER_QUESTIONS and high < 0:
                verdict = "lower"
            elif n >= MIN_ORDER_QUESTIONS and low > 0:
                verdict = "higher"
            else:
                verdict = "cannot tell"
            side = sides.loc[getattr(r, by)]
            rows.append({by: getattr(r, by), "metric": metric, "than": than, "n": n, "score": side["score"],
                         "score_than": side["score_than"], "gap": r.mean, "ci_low": r.ci_low, "ci_high": r.ci_high,
                         "lower_share": side["lower_share"], "verdict": verdict,
                         "basis": f"paired {r.method} interval over questions ({ci:.0%})"})
    table = pd.DataFrame(rows, columns=columns)
    if table.empty:
        return DifficultyOrder(table, "cannot tell", f"no {by} has scores of both {harder[0]} and {than}.")
    against = table[table["verdict"].isin(["higher", "not lower"])]
    unsure = table[table["verdict"] == "cannot tell"]
    if len(against):
        r = against.iloc[0]
        return DifficultyOrder(table, "does not hold", f"{r['metric']} is {r['verdict']} than {than} on "
                               f"{r[by]} (gap {r['gap']:+.3f}).")
    if len(unsure):
        r = unsure.iloc[0]
        few = r["n"] < MIN_ORDER_QUESTIONS
        reason = (f"{int(r['n'])} question(s), fewer than {MIN_ORDER_QUESTIONS}" if few else
                  f"its {ci:.0%} interval [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] spans 0")
        return DifficultyOrder(table, "cannot tell", f"{r['metric']} - {than} on {r[by]}: {reason}. More questions "
                               f"(`[questions] sample`) settle it; {len(unsure)} of {len(table)} gaps are open.")
    basis = "on point estimates" if table["n"].isna().all() else "each gap's interval below 0"
    return DifficultyOrder(table, "holds", f"{' and '.join(harder)} score below {than} on all {table[by].nunique()} "
                           f"{by}s ({basis}).")
