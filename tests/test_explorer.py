"""fabnb.views.explorer: filters, one cell in full, two configurations compared, export; driven without a browser."""

import json

import numpy as np
import pandas as pd
import pytest

from fabnb.core.schema import METRICS
from fabnb.views.explorer import Explorer

HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)"> \u202eevil'


def stores():
    """Two systems x windows 4 and 8 x three questions; every sixth score a judge failure; Q3 at 8K has no answer."""
    rng = np.random.default_rng(0)
    answers, scores = [], []
    for system in ("ref", "other"):
        for k in (4.0, 8.0):
            for i, tid in enumerate(("Q1", "Q2", "Q3")):
                key = {"system": system, "model": "m", "context_k": k, "mode": "A", "test_id": tid}
                if not (tid == "Q3" and k == 8.0 and system == "ref"):
                    answers.append({**key, "status": "ok", "answer": HOSTILE if tid == "Q2" else f"answer {tid}",
                                    "gold_retrieved": i != 1,
                                    "sources": [{"id": "c9", "doc_id": "D9", "text": "unrelated", "score": 0.9},
                                                {"id": "c1", "doc_id": f"D{i}", "text": "the evidence", "score": 0.5}]})
                for j, metric in enumerate(METRICS):
                    failed = (i * 6 + j) % 6 == 5 and k == 4.0
                    base = 0.8 if k == 4.0 else 0.5  # a drop from 4K to 8K
                    scores.append({**key, "metric": metric, "replicate": 0, "status": "error" if failed else "ok",
                                   "score": None if failed else base + rng.uniform(-0.05, 0.05),
                                   "raw_score": 7, "scoring": "integer", "reason": f"{metric} reason {HOSTILE}",
                                   "cause": "not-json" if failed else "", "error": "broken" if failed else ""})
    # An answer the judge never saw.
    answers.append({"system": "ref", "model": "m", "context_k": 16.0, "mode": "A", "test_id": "Q1", "status": "ok",
                    "answer": "late", "gold_retrieved": True, "sources": []})
    questions = pd.DataFrame({"test_id": ["Q1", "Q2", "Q3"], "test_type": ["robustness", "multi_hop", "robustness"],
                              "question_format": ["OBJECTIVE", "SUBJECTIVE", "SUBJECTIVE"],
                              "question": ["What etch rate?", "Why " + HOSTILE, "How thick?"],
                              "ground_truth_answer": ["5 nm/min", "Because.", "2 nm"],
                              "gold_context": ["evidence one", "evidence two", "evidence three"],
                              "gold_doc_ids": [("D0",), ("D1",), ("D2",)]})
    return pd.DataFrame(answers), pd.DataFrame(scores), questions


@pytest.fixture
def ex():
    answers, scores, questions = stores()
    reference = pd.DataFrame({"system": ["ref"], "model": ["m"], "context_k": [4.0], "mode": ["A"],
                              "test_id": ["Q1"], "subtype": ["Calculation"], "correct": [True], "expected": ["5"],
                              "found": ["5"], "note": ["number within 2%"]})
    return Explorer(answers, scores, questions, reference=reference, page_size=5)


def test_every_cell_is_a_row_and_none_is_dropped(ex):
    cells = ex.view()
    assert len(cells) == 2 * 2 * 3 + 1
    states = cells.set_index(["system", "context_k", "test_id"])["state"]
    assert states[("ref", 8.0, "Q3")] == "answer missing"  # scored, but not in the answer store
    assert states[("ref", 16.0, "Q1")] == "not judged"
    assert (states == "judged").sum() == 11
    assert set(cells.columns) >= set(METRICS) | {"average", "judge_failures", "test_type"}


def test_filters_combine_and_clear(ex):
    assert set(ex.filter(system="ref", context_k=[4, 8]).view()["system"]) == {"ref"}
    assert len(ex.view()) == 6
    assert ex.filter(test_type="multi_hop").view()["test_id"].unique().tolist() == ["Q2"]
    ex.filter(test_type=None, system=None, context_k=None)
    assert len(ex.filter(retrieval_miss=True).view()) == 4 and ex.view()["gold_retrieved"].eq(False).all()
    ex.filter(retrieval_miss=None, judge_failures=True)
    assert len(ex.view()) > 0 and ex.view()["judge_failures"].gt(0).all()
    ex.filter(judge_failures=None, metric="depth", score_max=0.6)
    assert ex.view()["depth"].le(0.6).all() and set(ex.view()["context_k"]) == {8.0}
    ex.filter(metric=None, score_max=None, text="ETCH RATE")
    assert ex.view()["test_id"].unique().tolist() == ["Q1"]
    ex.filter(text=None, state="not judged")
    assert ex.view()["context_k"].tolist() == [16.0]
    with pytest.raises(ValueError, match="unknown filter"):
        ex.filter(colour="red")
    with pytest.raises(ValueError, match="not scored here"):
        ex.filter(metric="fluency")


def test_sorting_and_pages_send_only_the_visible_rows(ex):
    rows = ex.sort("average", descending=True).page(0)
    assert len(rows) == 5 and rows[0]["average"] >= rows[-1]["average"]
    json.dumps(rows)  # plain JSON: NaN became None
    assert len(ex.page(2)) == 3 and ex.page(3) == []
    with pytest.raises(ValueError, match="cannot sort"):
        ex.sort("nonsense")


def test_one_cell_in_full_with_the_gold_passage_marked_and_hostile_text_kept_as_text(ex):
    d = ex.detail({"system": "ref", "model": "m", "context_k": 4, "mode": "A", "test_id": "Q2"})
    assert d["question"] == "Why " + HOSTILE and d["answer"] == HOSTILE and d["expected"] == "Because."
    assert [s["rank"] for s in d["sources"]] == [1, 2] and [s["gold"] for s in d["sources"]] == [False, True]
    assert [s["metric"] for s in d["scores"]] == list(METRICS)
    failed = [s for s in d["scores"] if s["status"] == "error"]
    assert failed and failed[0]["error"] == "broken" and failed[0]["score"] is None
    assert d["scores"][0]["reason"].endswith(HOSTILE) and d["reference"] is None
    q1 = ex.detail({"system": "ref", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "Q1"})
    assert q1["reference"]["correct"] is True and q1["gold_evidence"] == "evidence one"
    missing = ex.detail({"system": "ref", "model": "m", "context_k": 8.0, "mode": "A", "test_id": "Q3"})
    assert missing["state"] == "answer missing" and missing["answer"] == "" and missing["scores"]


def test_two_windows_compared_question_by_question_sorted_by_the_largest_drop(ex):
    table = ex.compare({"system": "other", "context_k": 4}, {"system": "other", "context_k": 8})
    assert table["test_id"].tolist() and table["drop"].is_monotonic_decreasing
    assert table["drop"].gt(0.15).all()  # 0.8 -> 0.5 on every question
    assert (table["depth_diff"] == table["depth_b"] - table["depth_a"]).all()
    by_depth = ex.compare({"system": "other", "context_k": 4}, {"system": "other", "context_k": 8}, metric="depth")
    assert (by_depth["drop"] == by_depth["depth_a"] - by_depth["depth_b"]).all()
    with pytest.raises(ValueError, match="several configurations"):
        ex.compare({"context_k": 4}, {"context_k": 8})
    systems = ex.compare({"system": "ref", "context_k": 4}, {"system": "other", "context_k": 4})
    assert len(systems) == 3


def test_the_view_exports_as_csv(ex, tmp_path):
    path = ex.filter(system="other").sort("average").export(tmp_path / "view.csv")
    back = pd.read_csv(path)
    assert len(back) == 6 and back["system"].eq("other").all() and back["average"].is_monotonic_increasing


def test_empty_stores_give_an_empty_table():
    empty = Explorer(pd.DataFrame(), pd.DataFrame(), pd.DataFrame({"test_id": [], "question": []}))
    assert empty.view().empty and empty.page(0) == [] and "0 cells" in repr(empty)


def test_an_experiment_folder_opens_in_the_explorer(tmp_path, monkeypatch):
    from test_experiment import run_on_stub

    run = run_on_stub(tmp_path, monkeypatch, sample=2)
    ex = Explorer.from_folder(run.output)
    assert len(ex.view()) == 2 * 2 * 2 and ex.view()["state"].eq("judged").all()
    row = ex.page(0)[0]
    d = ex.detail(row)
    assert d["question"] and d["answer"].startswith("It depends") and len(d["scores"]) == 2
    with pytest.raises(FileNotFoundError, match="neither answers.jsonl nor scores.jsonl"):
        Explorer.from_folder(tmp_path / "nowhere")


# --------------------------------------------------------------- the widget, driven without a browser


def test_the_widget_sends_the_renderers_data_and_a_part_only_by_its_name(ex):
    """The notebook widget draws through the one renderer (widgets/results.js): the cells at once, a cell's texts
    when asked by the name of their part; a message of any other shape is refused in the widget."""
    from fabnb.views.widgets import ResultsExplorer

    w = ResultsExplorer(ex)
    sent = []
    w.send = sent.append
    columns = w.cells["columns"]
    assert len(w.cells["rows"]) == 13 and w.cells["metrics"] == list(METRICS)
    assert {"judge_failures", "gold_retrieved", "flags"} <= set(columns)
    assert "renderResults(" in w._esm and "export default" in w._esm
    flagged = [r for r in w.cells["rows"] if "empty_high" in r[columns.index("flags")]]
    assert flagged  # the judge sanity flags (issue 28) reach the page's filter
    w.handle({"action": "load", "name": "detail-0000"})
    assert w.error == "" and sent[-1]["name"] == "detail-0000" and len(sent[-1]["value"]) == 13
    opened = dict(zip(columns, w.cells["rows"][0]))
    assert sent[-1]["value"][0]["answer"] == ex.detail({**opened, "model": "m"})["answer"]
    w.handle({"action": "load", "name": "questions"})
    assert sent[-1]["value"]["Q1"]["gold_evidence"] == "evidence one"
    for bad in ({"action": "load", "name": "../secrets"}, {"action": "load", "name": "detail-0001"},
                {"action": "load", "name": ["detail-0000"]}, {"action": "open"}):
        w.handle(bad)
        assert w.error and len(sent) == 2, bad
    w.set_state({"cells": {"rows": []}})
    assert "may not set cells" in w.error and len(w.cells["rows"]) == 13
