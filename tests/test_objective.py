"""The judge-free check beside the judged one (fabnb.analysis.objective)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fabnb.analysis.objective import reference_agreement, reference_beside_judged, reference_by_window
from fabnb.core.stats import wilson_interval


def _cells(correct, judged, k=4.0):
    ref = pd.DataFrame({"system": "s", "context_k": k, "mode": "A", "test_id": [f"q{i}" for i in range(len(correct))],
                        "correct": correct})
    scores = ref[["system", "context_k", "mode", "test_id"]].assign(metric="factuality", score=judged)
    return ref, scores


def test_a_judge_that_follows_the_check_agrees_and_one_that_ignores_it_does_not():
    rng = np.random.default_rng(0)
    correct = [bool(v) for v in rng.integers(0, 2, 60)]
    ref, follows = _cells(correct, [0.9 if c else 0.1 for c in correct])
    row = reference_agreement(ref, follows).iloc[0]
    assert row["agree"] == 60 and row["kappa"] == 1.0 and row["r"] > 0.99
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_interval(60, 60))
    _, ignores = _cells(correct, list(rng.uniform(0, 1, 60)))
    blind = reference_agreement(ref, ignores).iloc[0]
    assert abs(blind["kappa"]) < 0.3 and blind["r_low"] < 0 < blind["r_high"]  # no agreement the data can show


def test_undecided_cells_stay_out_and_each_window_has_its_interval():
    ref = pd.DataFrame({"system": "s", "context_k": [4.0, 4.0, 4.0, 8.0], "mode": "A",
                        "test_id": ["q1", "q2", "q3", "q1"], "correct": [True, None, False, True]})
    t = reference_by_window(ref).set_index("context_k")
    assert t.loc[4.0, "n"] == 2 and t.loc[4.0, "rate"] == 0.5 and t.loc[8.0, "n"] == 1
    assert (t.loc[4.0, "ci_low"], t.loc[4.0, "ci_high"]) == pytest.approx(wilson_interval(1, 2))
    scores = ref[["system", "context_k", "mode", "test_id"]].assign(metric="factuality", score=[0.8, 0.9, 0.2, 0.7])
    beside = reference_beside_judged(ref, scores).set_index("context_k")
    assert beside.loc[4.0, "judged"] == pytest.approx(0.5)  # the judged mean over the same two decided cells
    assert beside.loc[8.0, "judged_method"] == "one question"
