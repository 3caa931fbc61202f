"""RAG-TESTER's claims, checked against its own published numbers, and objection 1 answered from a run.

Each claim of RAG-TESTER's abstract and results (as its review reads them) is recomputed from
:func:`fabnb.data.published.rag_tester`: the arithmetic a reader can redo (6.6% from 21,633
and 20,293; 72,000 from 24 configurations of 3,000 tests; the false-discovery rate from the
precision). A claim whose per-configuration table was not published (20 of 24, the best
configuration's 17%, real PDFs' +64.4%) is ``not checkable``, and says so; a run of one's own
checks the same claims on its own data (the tables of a ``[tests]`` run).

The verdicts are those of :mod:`fabnb.analysis.claims`: ``reproduced``, ``not reproduced``,
``not checkable``.

Examples
--------
>>> table = check_tester_claims()
>>> table.set_index("claim_id").loc["gain", ["claimed", "computed", "verdict"]].tolist()
['6.6%', '6.60%', 'reproduced']
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.stats import wilson_interval
from ..data import published

__all__ = ["TESTER_CLAIM_COLUMNS", "check_tester_claims", "objection_one"]

TESTER_CLAIM_COLUMNS = ["claim_id", "section", "claim", "claimed", "computed", "basis", "verdict"]


def _value(t: pd.Series, name: str) -> float:
    return float(t.loc[name, "value"])


def check_tester_claims(numbers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every RAG-TESTER claim with its recomputation, basis and verdict.

    Parameters
    ----------
    numbers : DataFrame, optional
        :func:`fabnb.data.published.rag_tester` (the default), or the same quantities of another source.

    Returns
    -------
    DataFrame
        :data:`TESTER_CLAIM_COLUMNS`.
    """
    t = (published.rag_tester() if numbers is None else numbers).set_index("quantity")
    v = lambda name: _value(t, name)  # noqa: E731 - a short reader for the table below
    gain = (v("failures_rag_tester") / v("failures_baseline") - 1) * 100
    openai_over_baseline = (v("openai_failures_rag_tester") / v("openai_failures_baseline") - 1) * 100
    openai_of_own = (v("openai_failures_rag_tester") - v("openai_failures_baseline")) / v(
        "openai_failures_rag_tester") * 100
    true_positives = round(v("oracle_precision") / 100 * v("oracle_panel_cases"))
    lo, hi = wilson_interval(true_positives, int(v("oracle_panel_cases")))
    rows = [
        ("executions", "Abstract", "72,000 test executions", "72,000",
         f"{v('configurations') * v('tests_per_configuration'):,.0f}",
         "24 configurations x 3,000 tests; the same tests in every configuration, so not 72,000 independent "
         "observations (objection 4)", abs(v("configurations") * v("tests_per_configuration")
                                              - v("executions")) < 0.5),
        ("gain", "Abstract", "6.6% more failures than the baseline", "6.6%", f"{gain:.2f}%",
         "21,633 / 20,293 - 1, relative to the baseline", abs(gain - v("gain_over_baseline")) < 0.05),
        ("openai_gain_over_baseline", "Review, comment 1", "+19.68% for the OpenAI models, read as more failures "
         "than the baseline", "19.68%", f"{openai_over_baseline:.2f}%",
         "8,880 / 7,132 - 1, relative to the baseline", abs(openai_over_baseline - v("openai_gain_review")) < 0.005),
        ("openai_gain_of_own_count", "Review, comment 1", "+19.68% for the OpenAI models, read as a share of "
         "RAG-TESTER's own count", "19.68%", f"{openai_of_own:.2f}%",
         "(8,880 - 7,132) / 8,880: the base the number has", abs(openai_of_own - v("openai_gain_review")) < 0.005),
        ("oracle_fdr", "Section 6.4", "precision 80.6%, false-discovery rate 19.4%", "19.4%",
         f"{100 - v('oracle_precision'):.1f}%", "1 - precision",
         abs(100 - v("oracle_precision") - v("oracle_false_discovery_rate")) < 0.05),
        ("oracle_precision_count", "Sections 5.2, 6.4", "80.6% of 382 panel-labelled verdicts", "80.6%",
         f"{true_positives / v('oracle_panel_cases') * 100:.1f}% ({true_positives} of "
         f"{v('oracle_panel_cases'):.0f}; 95% Wilson {lo * 100:.1f}-{hi * 100:.1f}%)",
         "a whole number of agreeing verdicts that gives the rate; its interval, which the paper does not give",
         abs(true_positives / v("oracle_panel_cases") * 100 - v("oracle_precision")) < 0.05),
        ("configurations_better", "Abstract", "better than the baseline in 20 of 24 configurations", "20 of 24", "",
         "per-configuration counts (Tables 6-7) are not transcribed; a [tests] run checks it on its own "
         "configurations (failures_by_configuration_and_generator)", None),
        ("best_configuration", "Section 6.1", "the strongest configuration still fails about 17%", "17%", "",
         "not in the published totals; a [tests] run's strongest_configuration table gives its own", None),
        ("real_vs_generated", "Section 6.3", "real PDFs provoke 64.4% more failures than generated ones", "64.4%",
         "", "per-origin counts are not transcribed; run_study's origin_comparison checks it on one's own corpora",
         None),
    ]
    return pd.DataFrame([{"claim_id": i, "section": sec, "claim": c, "claimed": cl, "computed": co, "basis": b,
                          "verdict": "not checkable" if ok is None else "reproduced" if ok else "not reproduced"}
                         for i, sec, c, cl, co, b, ok in rows], columns=TESTER_CLAIM_COLUMNS)


def objection_one(baseline: pd.DataFrame) -> pd.DataFrame:
    """How much of the strategies' lead over random is the negative-rejection category, and how much the strategy.

    Parameters
    ----------
    baseline : DataFrame
        :func:`fabnb.tester.study.baseline_comparison` (comparison, diff, ci_low, ci_high).

    Returns
    -------
    DataFrame
        One row: lead_over_random, lead_over_fair (failure-rate differences), category_share (the part of the
        lead the fair baseline takes away: 1 - lead_over_fair / lead_over_random; NaN when there is no lead over
        random to share), and a ``reading``.

    Examples
    --------
    >>> b = pd.DataFrame({"comparison": ["strategies vs random", "strategies vs fair baseline"],
    ...                   "diff": [0.10, 0.04], "ci_low": [0.05, -0.01], "ci_high": [0.15, 0.09]})
    >>> round(objection_one(b)["category_share"].item(), 2)
    0.6
    """
    b = baseline.set_index("comparison")
    random_, fair = (float(b.loc[k, "diff"]) if k in b.index else np.nan
                     for k in ("strategies vs random", "strategies vs fair baseline"))
    share = 1 - fair / random_ if np.isfinite(random_) and random_ > 0 and np.isfinite(fair) else np.nan
    if not np.isfinite(share):
        reading = "no lead over the random baseline to share out (or too few verdicts)"
    else:
        excludes = "excludes" if float(b.loc["strategies vs fair baseline", "ci_low"]) > 0 else "includes"
        reading = (f"{share:.0%} of the lead over random goes with the negative-rejection category; what is left "
                   f"over the fair baseline is the strategy's own (its 95% interval {excludes} 0)")
    return pd.DataFrame([{"lead_over_random": random_, "lead_over_fair": fair, "category_share": share,
                          "reading": reading}])
