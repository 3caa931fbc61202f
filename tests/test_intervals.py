"""fabnb.intervals: cell means with bootstrap intervals over questions, and the paired B - A gap."""

import pytest

from fabnb.intervals import mean_intervals, mode_gap
from fabnb.schema import METRICS
from fabnb.scores import ScoreError

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
