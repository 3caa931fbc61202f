"""fabnb.tester's claims, panel and attribution, and RAG-TESTER's published numbers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fabnb.data import published
from fabnb.models.llm import LLM
from fabnb.tester.attribution import attribution, attribution_table
from fabnb.tester.claims import check_tester_claims, objection_one
from fabnb.tester.panel import panel_labels, precision_by_type

from stub_openai import StubServer, completion


def test_rag_testers_published_numbers_are_data_with_their_base_and_source():
    t = published.rag_tester().set_index("quantity")
    assert t.loc["executions", "value"] == 72000 and t.loc["configurations", "value"] == 24
    assert (t.loc["failures_rag_tester", "value"], t.loc["failures_baseline", "value"]) == (21633, 20293)
    assert (t.loc["openai_failures_rag_tester", "value"], t.loc["openai_failures_baseline", "value"]) == (8880, 7132)
    assert t.loc["oracle_precision", "value"] == 80.6 and t.loc["oracle_panel_cases", "value"] == 382
    assert t.loc["real_vs_generated_failures", "value"] == 64.4 and t.loc["configurations_better", "value"] == 20
    assert t["source"].notna().all() and t["base"].notna().sum() >= 10


def test_rag_testers_claims_are_checked_with_their_verdicts_and_bases():
    c = check_tester_claims().set_index("claim_id")
    assert c.loc["gain", "verdict"] == "reproduced" and c.loc["gain", "computed"] == "6.60%"
    # the review's +19.68% is relative to RAG-TESTER's own count; relative to the baseline it is +24.5%
    assert c.loc["openai_gain_over_baseline", "verdict"] == "not reproduced"
    assert c.loc["openai_gain_over_baseline", "computed"] == "24.51%"
    assert c.loc["openai_gain_of_own_count", "verdict"] == "reproduced"
    assert c.loc["oracle_fdr", "verdict"] == "reproduced" and "308 of 382" in c.loc["oracle_precision_count",
                                                                                     "computed"]
    assert (c.loc[["configurations_better", "best_configuration", "real_vs_generated"], "verdict"]
            == "not checkable").all()
    # a number that does not add up is caught: the check can fail
    wrong = published.rag_tester().replace({"value": {20293: 21000}})
    assert check_tester_claims(wrong).set_index("claim_id").loc["gain", "verdict"] == "not reproduced"


def test_the_reproduce_report_carries_rag_testers_claims(tmp_path):
    from fabnb.analysis.reproduction import reproduce

    run = reproduce(tmp_path / "r", figures=())
    text = run.report_md.read_text()
    assert "RAG-TESTER's numbers against each other" in text and "openai_gain_of_own_count" in text
    assert (tmp_path / "r" / "tables" / "tester_claims.csv").exists()


def test_objection_one_splits_the_lead_between_category_and_strategy():
    b = pd.DataFrame({"comparison": ["strategies vs random", "strategies vs fair baseline"], "diff": [0.2, 0.05],
                      "ci_low": [0.1, 0.01], "ci_high": [0.3, 0.09]})
    row = objection_one(b).iloc[0]
    assert row.category_share == pytest.approx(0.75) and "excludes 0" in row.reading
    none = objection_one(b.assign(diff=[0.0, 0.0]))
    assert none["category_share"].isna().all() and "no lead" in none.reading.item()


def test_attribution_follows_its_rule_for_each_case():
    v = pd.DataFrame({"system": "s", "context_k": 4.0,
                      "mode": ["A", "B", "A", "B", "A", "A", "A", "A"],
                      "test_id": ["b-pass", "b-pass", "b-fail", "b-fail", "no-b-miss", "neg", "none", "ok"],
                      "generator": "coverage", "kind": ["positive"] * 5 + ["negative", "positive", "positive"],
                      "failed": [True, False, True, True, True, True, True, False],
                      "passage_retrieved": [True, None, True, None, False, None, None, True],
                      "gold_retrieved": [True, True, True, True, True, None, None, True], "status": "ok"})
    a = attribution(v).set_index("test_id")["attribution"]
    assert a.to_dict() == {"b-pass": "retrieval", "b-fail": "generation", "no-b-miss": "retrieval",
                           "neg": "generation", "none": "undetermined", "ok": "passed"}
    t = attribution_table(attribution(v)).iloc[0]
    assert (t.tests, t.failed, t.retrieval, t.generation) == (6, 5, 2, 2)


def test_the_oracles_precision_by_a_panel_majority_per_test_type():
    items = pd.DataFrame({"item_id": ["i1", "i2", "i3", "i4"], "question": ["q1?", "q2?", "q3?", "q4?"],
                          "expected_answer": "a", "evidence": "e", "answer": ["x", "y", "z", "w"]})
    votes = {"m1": {"q1?": True, "q2?": True, "q3?": False, "q4?": True},
             "m2": {"q1?": True, "q2?": False, "q3?": False, "q4?": True},
             "m3": {"q1?": False, "q2?": False, "q3?": True, "q4?": True}}

    def reply(request, n):
        text = request["messages"][-1]["content"]
        question = text.split("Question: ", 1)[1].split("\n", 1)[0]
        return 200, completion(json.dumps({"failed": str(votes[request["model"]][question]).lower(),
                                           "reason": "r"})), {}

    with StubServer(reply) as s:
        panel = {m: LLM(m, s.base_url, cache=False) for m in votes}
        labels = panel_labels(items, panel)
    assert labels.set_index("item_id")["failed"].to_dict() == {"i1": True, "i2": False, "i3": False, "i4": True}
    assert labels.votes.eq(3).all() and not labels.tie.any()
    assert 0 < labels.attrs["pair_agreement"] < 1
    verdicts = pd.DataFrame({"item_id": ["i1", "i2", "i3", "i4"], "generator": ["coverage", "coverage", "random",
                                                                                "random"],
                             "failed": [True, True, True, False]})
    p = precision_by_type(verdicts, labels).set_index("generator")
    assert p.loc["coverage", "precision"] == 0.5 and p.loc["random", "precision"] == 0.0
    assert p.loc["all", "flagged"] == 3 and p.loc["all", "fdr"] == pytest.approx(2 / 3)
    assert p.loc["all", "ci_low"] < p.loc["all", "precision"] < p.loc["all", "ci_high"]
