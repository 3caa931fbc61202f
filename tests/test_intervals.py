"""fabnb.analysis.intervals: cell means with bootstrap intervals over questions, and the paired B - A gap."""

import numpy as np
import pandas as pd
import pytest

from fabnb.analysis.intervals import MIN_ORDER_QUESTIONS, difficulty_order, mean_intervals, mode_gap
from fabnb.core.schema import METRICS
from fabnb.core.scores import ScoreError
from fabnb.data import published

from conftest import per_question


def test_mean_intervals_contain_each_mean_and_say_when_there_is_none():
    per = per_question(modes=("A",))
    ci = mean_intervals(per, n_boot=500)
    assert len(ci) == 3 * (len(METRICS) + 1) and (ci["n"] == 12).all()
    assert ((ci["ci_low"] <= ci["mean"]) & (ci["mean"] <= ci["ci_high"])).all()
    one = mean_intervals(per[per["test_id"] == "q0"], n_boot=500)
    assert one["shown"].str.endswith("no interval (n = 1)").all()
    with pytest.raises(ScoreError, match="test_id"):
        mean_intervals(per.drop(columns="test_id"))


def test_mode_gap_pairs_the_same_questions_and_gives_a_paired_interval():
    per = per_question()
    per = per[~((per["mode"] == "B") & (per["test_id"] == "q0"))]  # q0 has no B: it is not paired
    gap = mode_gap(per, n_boot=500).set_index(["context_k", "metric"])
    row = gap.loc[(8.0, "average")]
    assert row["n"] == 11 and row["delta"] == pytest.approx(row["score_b"] - row["score_a"])
    assert row["ci_low"] > 0.1 and row["b_better"] > 0.8  # B is 0.2 better by construction
    by_hand = per[per["test_id"] != "q0"]
    a = by_hand[(by_hand["mode"] == "A") & (by_hand["context_k"] == 8.0) & (by_hand["metric"] == "depth")]
    b = by_hand[(by_hand["mode"] == "B") & (by_hand["context_k"] == 8.0) & (by_hand["metric"] == "depth")]
    assert gap.loc[(8.0, "depth"), "delta"] == pytest.approx(b["score"].mean() - a["score"].mean())


def _order_frame(n: int, gaps: dict, seed: int = 0) -> pd.DataFrame:
    """Per-question factuality, depth and support_quality of systems whose harder metrics sit ``gaps`` off
    factuality, with noise sd 0.05."""
    rng = np.random.default_rng(seed)
    rows = []
    for system, gap in gaps.items():
        for q in range(n):
            fact = 0.6 + rng.normal(0, 0.1)
            for metric, off in (("factuality", 0.0), ("depth", gap), ("support_quality", gap)):
                rows.append({"system": system, "model": "m", "context_k": 1.0, "mode": "A", "test_id": f"q{q}",
                             "metric": metric, "score": float(fact + off + rng.normal(0, 0.05))})
    return pd.DataFrame(rows)


def test_difficulty_order_holds_only_where_every_gap_is_below_zero_on_enough_questions():
    order = difficulty_order(_order_frame(20, {"a": -0.2, "b": -0.15}), n_boot=500)
    assert order.verdict == "holds" and (order.table["verdict"] == "lower").all()
    assert (order.table["n"] == 20).all() and (order.table["ci_high"] < 0).all()
    row = order.table.set_index(["system", "metric"]).loc[("a", "depth")]
    assert row["gap"] == pytest.approx(row["score"] - row["score_than"]) and row["lower_share"] > 0.9
    against = difficulty_order(_order_frame(20, {"a": -0.2, "b": 0.2}), n_boot=500)
    assert against.verdict == "does not hold" and "higher than factuality on b" in against.why
    noisy = difficulty_order(_order_frame(20, {"a": -0.2, "b": 0.0}), n_boot=500)
    assert noisy.verdict == "cannot tell" and "spans 0" in noisy.why


def test_difficulty_order_says_cannot_tell_below_its_minimum_of_questions_however_clear_the_gap():
    few = difficulty_order(_order_frame(MIN_ORDER_QUESTIONS - 1, {"a": -0.4}), n_boot=500)
    assert (few.table["ci_high"] < 0).all()  # the bootstrap alone would call it
    assert few.verdict == "cannot tell" and f"fewer than {MIN_ORDER_QUESTIONS}" in few.why
    assert difficulty_order(_order_frame(MIN_ORDER_QUESTIONS, {"a": -0.4}), n_boot=500).verdict == "holds"


def test_difficulty_order_on_table_5_is_of_point_estimates_and_says_so():
    order = difficulty_order(published.frameworks())
    assert order.verdict == "holds" and "point estimates" in order.why
    assert order.table["n"].isna().all() and order.table["basis"].str.startswith("point estimates").all()
    assert order.table.set_index(["system", "metric"]).loc[("RAGFlow", "depth"), "gap"] == pytest.approx(-0.125)
    with pytest.raises(ScoreError, match="no support_quality"):
        difficulty_order(published.frameworks().query("metric != 'support_quality'"))
