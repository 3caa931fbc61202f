"""RAG-TESTER generators against a scripted server: selection strategy, checks, bookkeeping."""

import json
import re

import pytest

from fabnb.corpus.passages import CoverageTracker, rank_by_complexity
from fabnb.models.llm import LLM
from fabnb.qa.testcases import (
    REFUSAL,
    absence_share,
    complex_passage_tests,
    coverage_tests,
    fair_baseline_tests,
    negative_rejection_tests,
    random_tests,
)

from stub_openai import StubServer, completion


def writer(request, n):
    """Quote the passage's first sentence; for negative prompts, ask for a detail chosen by the test."""
    prompt = request["messages"][-1]["content"]
    passage = prompt.split("PASSAGE:\n", 1)[1].rsplit("\n\nJSON:", 1)[0]
    if "does not give" in prompt:
        detail = "zorblax ferronium coefficient" if n % 2 else passage.split()[2] + " " + passage.split()[3]
        body = {"question": f"What is the {detail} in case {n}?", "missing_detail": detail}
        return 200, completion(json.dumps(body)), {}
    first = re.split(r"(?<=[.!?])\s", passage.strip())[0]
    return 200, completion(json.dumps({"evidence": first, "question": f"What does case {n} state about it?",
                                       "answer": first, "keywords": first.split()[:2]})), {}


@pytest.fixture(scope="module")
def stub():
    with StubServer(writer) as s:
        yield LLM("stub", s.base_url, cache=False)


def test_complex_passage_tests_take_the_hardest_chunks(evidence_chunks, stub):
    chunks, _ = evidence_chunks
    suite = complex_passage_tests(chunks, stub, 4)
    hardest = rank_by_complexity(chunks).chunk_id.tolist()[:4]
    assert suite.tests.source_chunk.tolist() == hardest
    assert (suite.tests.kind == "positive").all() and suite.tests.keywords.map(len).gt(0).all()


def test_negative_tests_are_kept_only_when_retrieval_finds_no_answer(evidence_chunks, stub):
    chunks, vectors = evidence_chunks
    suite = negative_rejection_tests(chunks, vectors, stub, 3, seed=1)
    assert len(suite) == 3 and (suite.tests.expected_answer == REFUSAL).all()
    assert (suite.tests.absence_max_share < 0.5).all()
    # the stub's other answers name words taken from the passage itself: retrieval finds them, so rejected
    assert suite.rejected.reason.str.startswith("not absent").any()


def test_absence_share_by_hand(evidence_chunks):
    chunks, vectors = evidence_chunks
    text = chunks.text.iloc[0]
    words = [w for w in re.findall(r"[a-z]{5,}", text.lower())][:3]
    assert absence_share(" ".join(words), text, vectors, chunks) == 1.0
    assert absence_share("zorblax ferronium", "zorblax ferronium", vectors, chunks) == 0.0


def test_coverage_tests_hand_out_untouched_chunks_and_mark_them(evidence_chunks, stub):
    chunks, _ = evidence_chunks
    tracker = CoverageTracker(chunks)
    first = coverage_tests(chunks, stub, 3, tracker)
    second = coverage_tests(chunks, stub, 3, tracker)
    assert not set(first.tests.source_chunk) & set(second.tests.source_chunk)
    assert tracker.coverage() == pytest.approx(6 / len(chunks))


def test_random_and_fair_baselines(evidence_chunks, stub):
    chunks, vectors = evidence_chunks
    plain = random_tests(chunks, stub, 4, seed=3)
    assert len(plain) == 4 and (plain.tests.kind == "positive").all()
    fair = fair_baseline_tests(chunks, vectors, stub, 4, negative_share=0.5, seed=3)
    assert fair.tests.kind.value_counts().to_dict() == {"positive": 2, "negative": 2}
    assert (fair.tests.generator == "fair_baseline").all() and fair.tests.test_id.is_unique


def test_bad_model_output_is_rejected_with_reason(evidence_chunks):
    chunks, _ = evidence_chunks
    with StubServer(lambda r, n: (200, completion('{"evidence": "made up", "question": "What is it, really?", '
                                                  '"answer": "x", "keywords": ["x"]}'), {})) as s:
        suite = random_tests(chunks, LLM("stub", s.base_url, cache=False), 2)
    assert len(suite) == 0 and suite.rejected.reason.str.startswith("evidence not in the passage").all()


def test_the_coverage_generator_never_picks_a_touched_chunk_while_untouched_ones_remain(evidence_chunks, stub):
    """Issue 51, as seen: coverage took the first 3n chunks of a document in corpus order, whatever other
    generators had used, and each document had a tracker of its own."""
    chunks, vectors = evidence_chunks
    tracker = CoverageTracker(chunks)
    complex_ = complex_passage_tests(chunks, stub, 3, tracker=tracker)
    negative = negative_rejection_tests(chunks, vectors, stub, 2, seed=1, tracker=tracker)
    touched = set(complex_.tests.source_chunk) | set(negative.tests.source_chunk)
    assert touched and {c for c, h in tracker.hits.items() if h} == touched  # the other generators marked theirs
    # the first chunks in corpus order are what the old generator took: touch them so the draw must skip them
    first = chunks.chunk_id.tolist()[:4]
    tracker.mark(first)
    touched |= set(first)
    picked = []
    for call in range(6):
        before = set(tracker.untouched())
        suite = coverage_tests(chunks, stub, 1, tracker, seed=call)
        picked += suite.tests.source_chunk.tolist()
        assert set(suite.tests.source_chunk) <= before  # only chunks untouched when it drew them
    assert len(picked) >= 4 and not set(picked) & touched and len(picked) == len(set(picked))
    # once every chunk is touched it draws the least-touched, and still never repeats within a call
    tracker.mark(tracker.untouched())
    again = coverage_tests(chunks, stub, 2, tracker)
    assert len(again) == 2 and again.tests.source_chunk.is_unique


def test_retrieval_feedback_changes_what_the_coverage_generator_picks(evidence_chunks, stub):
    import pandas as pd

    from fabnb.rag.sources import mark_returned

    chunks, _ = evidence_chunks
    plain = coverage_tests(chunks, stub, 2, CoverageTracker(chunks))
    fed = CoverageTracker(chunks)
    # a framework's sources: its own ids, its own chunk boundaries (a source starts inside our chunk)
    sources = [{"id": f"node-{i}", "doc_id": row.doc_id, "text": " ".join(row.text.split()[3:40])}
               for i, row in enumerate(chunks.head(3).itertuples())]
    answers = pd.DataFrame({"system": "llamaindex", "model": "m", "context_k": 4.0, "mode": "A", "test_id": ["t1"],
                            "sources": [sources]})
    assert mark_returned(fed, answers, chunks) == chunks.chunk_id.tolist()[:3]
    after = coverage_tests(chunks, stub, 2, fed)
    assert plain.tests.source_chunk.tolist() == chunks.chunk_id.tolist()[:2]
    assert not set(after.tests.source_chunk) & set(chunks.chunk_id.tolist()[:3])
    assert after.tests.source_chunk.tolist() != plain.tests.source_chunk.tolist()


def test_tests_carry_appendix_d_fields(evidence_chunks, stub):
    chunks, vectors = evidence_chunks
    suite = random_tests(chunks, stub, 2, seed=3)
    t = suite.tests
    assert t.source_location.str.startswith(tuple(chunks.doc_id)).all()
    # the evidence placed in its document: the span lies inside its chunk
    span = t.merge(chunks, left_on="source_chunk", right_on="chunk_id")
    assert ((span.span_start >= span.char_start) & (span.span_end <= span.char_end + 5)).all()
    negative = negative_rejection_tests(chunks, vectors, stub, 1, seed=1)
    assert (negative.tests.source_location == "unknown").all()


def test_each_attempt_is_told_as_it_happens(evidence_chunks, stub, caplog):
    import logging

    chunks, _ = evidence_chunks
    with caplog.at_level(logging.INFO, logger="fabnb.qa.testcases"):
        suite = random_tests(chunks, stub, 2, seed=3)
    lines = [r.getMessage() for r in caplog.records if r.name == "fabnb.qa.testcases"]
    kept = suite.tests.source_chunk.tolist()
    assert f"random {kept[0]}: asking" in lines and f"random {kept[0]}: kept" in lines
    assert lines.index(f"random {kept[0]}: asking") < lines.index(f"random {kept[0]}: kept")
