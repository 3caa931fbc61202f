"""The position sweep and where the gold evidence sat (fabnb.analysis.position, ReferenceRAG.ask_at)."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from fabnb.analysis.plots import plot_position
from fabnb.analysis.position import position_effect, score_by_depth, score_by_evidence_depth
from fabnb.judge import reference_scores
from fabnb.models.llm import LLM
from fabnb.rag import ANYTHINGLLM_DEFAULTS, RAGConfig, ReferenceRAG, ResultsStore, run_grid
from fabnb.rag.grid import ask_cell, evidence_position

from stub_openai import StubServer, completion

# Forty distractor chunks that share the questions' words (a retriever ranks them), each of one document.
CHUNKS = pd.DataFrame({"chunk_id": [f"d{i}::1" for i in range(40)], "doc_id": [f"d{i}" for i in range(40)],
                       "text": [f"Plasma etch note {i}: chamber pressure, bias power and etch rate interact in "
                                f"ways the process engineer tunes for the layer {i}." for i in range(40)]})
DEPTHS = (0, 25, 50, 75, 100)


def _questions(n: int = 16) -> pd.DataFrame:
    return pd.DataFrame({"test_id": [f"q{i}" for i in range(n)], "test_type": "robustness",
                         "question_format": "OBJECTIVE",
                         "question": [f"[Choice] Which etch rate holds for layer {i}? A) slow B) fast"
                                      for i in range(n)],
                         "ground_truth_answer": "The correct answer is B. Reasoning: the gold passage says so.",
                         "gold_context": [f"GOLD {i}: the etch rate of layer {i} is fast." for i in range(n)],
                         "gold_doc_ids": [("gold-doc",)] * n})


def _where_gold(request: dict) -> float:
    """The relative place of the gold passage in the prompt's context (0 first, 1 last)."""
    prompt = request["messages"][-1]["content"]
    context = prompt[len("Context:\n"):prompt.rindex("\n\nQuestion: ")]
    at = context.index("GOLD ")
    return at / max(1, len(context) - len(context[at:].split("\n\n")[0]))


def first_half(request: dict, n: int):
    """A scripted model that finds the gold passage only in the first half of its context."""
    return 200, completion("The answer is B." if _where_gold(request) <= 0.5 else "The answer is A."), {}


def blind_to_position(request: dict, n: int):
    """A scripted model right on about half the questions whatever the gold passage's place (by the question)."""
    question = request["messages"][-1]["content"].rsplit("Question: ", 1)[1]
    return 200, completion("The answer is B." if zlib.crc32(question.encode()) % 2 else "The answer is A."), {}


def _sweep(tmp_path, reply) -> pd.DataFrame:
    """Answer every question at every depth in two windows; score each cell by the judge-free reference check."""
    questions = _questions()
    with StubServer(reply) as server:
        rag = ReferenceRAG(CHUNKS, LLM("stub", server.base_url, cache=False), retriever="bm25")
        store = ResultsStore(tmp_path / "answers.jsonl")
        # No snippet cap or score threshold: the window fills with distractors, so every depth is its own place.
        run_grid([rag], questions, [RAGConfig(k) for k in (2, 4)], store,
                 modes=tuple(f"P{d}" for d in DEPTHS), concurrency=2, progress=False)
    answers = store.frame()
    assert (answers["status"] == "ok").all() and len(answers) == 2 * len(DEPTHS) * len(questions)
    checked = reference_scores(answers, questions)
    return checked.assign(metric="reference_check", score=checked["correct"].astype(float)), answers


def test_a_model_that_reads_only_the_first_half_shows_in_the_position_curve(tmp_path):
    scores, answers = _sweep(tmp_path, first_half)
    # The gold passage sat where the mode says: its recorded depth is the mode's, to a chunk's rounding.
    placed = answers.assign(want=answers["mode"].str[1:].astype(int) / 100)
    assert placed["evidence_depth"].notna().all()
    assert (placed["evidence_depth"] - placed["want"]).abs().max() <= 0.2
    assert (placed.loc[placed["want"] == 0, "evidence_offset"] == 0).all()
    table = score_by_depth(scores)
    at = table.set_index(["context_k", "depth"])["mean"]
    for k in (2.0, 4.0):
        assert at[(k, 0)] == 1.0 and at[(k, 100)] == 0.0
    assert table["n"].eq(16).all()
    effect = position_effect(scores)
    assert effect["claimed"].all() and effect["test"].eq("Friedman").all()
    assert set(effect["best"]) == {"0%"} and set(effect["worst"]) <= {"75%", "100%"}
    assert effect["said"].str.startswith("position matters").all()
    ax = plot_position(table)
    assert len(ax.lines) >= 2


def test_a_model_blind_to_position_gives_a_flat_curve_and_no_claim(tmp_path):
    scores, _ = _sweep(tmp_path, blind_to_position)
    table = score_by_depth(scores)
    spread = table.groupby("context_k")["mean"].agg(lambda m: m.max() - m.min())
    assert (spread == 0).all()  # the same questions right at every depth
    effect = position_effect(scores)
    assert not effect["claimed"].any() and effect["said"].str.startswith("no position effect").all()


def test_too_few_questions_are_not_tested():
    rows = [{"system": "s", "context_k": 4.0, "mode": f"P{d}", "test_id": f"q{i}", "metric": "m",
             "score": float(d == 0)} for d in (0, 100) for i in range(3)]
    effect = position_effect(pd.DataFrame(rows)).iloc[0]
    assert not effect["claimed"] and effect["said"].startswith("not tested") and effect["best"] == ""


def test_evidence_position_of_the_reference_system_in_mode_a():
    with StubServer() as server:
        rag = ReferenceRAG(CHUNKS, LLM("stub", server.base_url, cache=False), retriever="bm25")
        question = {"test_id": "q1", "question": "What etch rate for layer 7?", "gold_doc_ids": ("d7",)}
        cell = ask_cell(rag, question, RAGConfig(2, **ANYTHINGLLM_DEFAULTS), "A")
        ids = [s["doc_id"] for s in cell["sources"]]
        assert "d7" in ids  # bm25 ranks its own layer first
        before = ids.index("d7")
        tokens = [rag.retriever.chunks.set_index("doc_id").loc[d, "n_tokens"] for d in ids]
        assert cell["evidence_offset"] == sum(tokens[:before]) + before
        missing = ask_cell(rag, {**question, "gold_doc_ids": ("nowhere",)}, RAGConfig(2, **ANYTHINGLLM_DEFAULTS), "A")
        assert missing["gold_retrieved"] is False and missing["evidence_depth"] is None
        b = ask_cell(rag, {**question, "gold_context": "GOLD"}, RAGConfig(2, **ANYTHINGLLM_DEFAULTS), "B")
        assert b["evidence_depth"] is None  # mode B is the gold context alone: no place to say


def test_a_system_that_builds_its_own_context_is_refused_a_position():
    class Own:
        name, model, sources_exposed = "own", "m", True

        def ask(self, question, config, gold_context=None):
            raise AssertionError("not asked")

    cell = ask_cell(Own(), {"test_id": "q", "question": "q?", "gold_context": "g"}, RAGConfig(2), "P50")
    assert cell["status"] == "error" and cell["cause"] == "no-position-sweep"
    with pytest.raises(ValueError, match="P0'-'P100"):
        ask_cell(Own(), {"test_id": "q", "question": "q?"}, RAGConfig(2), "C")


def test_evidence_position_rules():
    assert evidence_position([{"doc_id": "a"}], [10], ["b"]) == (None, None)
    assert evidence_position([{"doc_id": "a"}], None, ["a"]) == (None, None)  # a system's own context: unknown
    assert evidence_position([{"doc_id": "gold"}, {"doc_id": "x"}], [5, 5], ()) == (0, 0.0)
    assert evidence_position([{"doc_id": "x"}, {"doc_id": "gold"}], [5, 5], ()) == (6, 1.0)
    assert evidence_position([{"doc_id": "gold"}], [5], ()) == (0, None)  # alone: first and last at once


def test_score_by_evidence_depth_keeps_unknown_cells_out():
    a = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": ["q1", "q2", "q3"],
                      "status": "ok", "gold_retrieved": [True, None, False], "evidence_depth": [0.3, None, None]})
    s = a[["system", "context_k", "mode", "test_id"]].assign(metric="factuality", score=[0.9, 0.5, 0.1])
    t = score_by_evidence_depth(a, s)
    assert t["band"].tolist() == ["25-50%", "absent"] and t["n"].tolist() == [1, 1]
    assert np.isnan(t["ci_low"]).all()  # one question a band: no interval is drawn
