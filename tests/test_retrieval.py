"""fabnb.analysis.retrieval: gold-document recall and citation precision and recall by window (issue 52)."""

import pandas as pd
import pytest

from fabnb.analysis.retrieval import citation_by_window, retrieval_by_window


def test_recall_by_window_counts_systems_without_sources_apart():
    answers = pd.DataFrame({"system": ["ref"] * 4 + ["app"] * 2, "model": "m",
                            "context_k": [4.0, 4.0, 8.0, 8.0, 4.0, 4.0], "mode": "A",
                            "test_id": ["q1", "q2", "q1", "q2", "q1", "q2"], "status": ["ok"] * 5 + ["error"],
                            "gold_retrieved": [True, False, True, True, None, None]})
    t = retrieval_by_window(answers).set_index(["system", "context_k"])
    assert t.loc[("ref", 4.0), "recall"] == 0.5 and t.loc[("ref", 8.0), "recall"] == 1.0
    assert t.loc[("ref", 4.0), "ci_low"] < 0.5 < t.loc[("ref", 4.0), "ci_high"]
    app = t.loc[("app", 4.0)]
    assert (app.cells, app.no_sources) == (1, 1) and pd.isna(app.recall)  # unknown is not a miss


def test_citation_precision_and_recall_against_the_gold_documents():
    returned = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A",
                             "test_id": ["q1", "q1", "q2", "q2", "q3"], "doc_id": ["d1", "x", "d3", "d4", "x"]})
    questions = pd.DataFrame({"test_id": ["q1", "q2", "q3"], "gold_doc_ids": [["d1"], ["d3", "d4", "d5"], []]})
    row = citation_by_window(returned, questions).iloc[0]
    assert (row.cells, row.sources) == (2, 4)  # q3 has no gold documents: left out
    assert row.precision == pytest.approx(3 / 4) and row.recall == pytest.approx(3 / 4)
    assert row.precision_low < row.precision < row.precision_high
