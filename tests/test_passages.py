import pandas as pd
import pytest

from fabnb.corpus.passages import CoverageTracker, flesch_reading_ease, random_passages, rank_by_complexity, syllables


def test_flesch_by_hand():
    # 2 sentences, 9 words, 10 syllables
    assert flesch_reading_ease("The cat sat on the mat. It was happy.") == pytest.approx(
        206.835 - 1.015 * 9 / 2 - 84.6 * 10 / 9)
    assert syllables("lithography") == 3
    assert pd.isna(flesch_reading_ease("  ... "))


def test_complexity_ranking_puts_hard_text_first():
    chunks = pd.DataFrame({"chunk_id": ["easy", "hard", "short"], "doc_id": "d", "text": [
        "The cat sat on the mat. It was a good day. We had fun in the sun. " * 3,
        "Heteroepitaxial polycrystalline semiconductor characterization necessitates "
        "comprehensive electromigration investigations, particularly concerning interconnect reliability. " * 3,
        "Too short."]})
    ranked = rank_by_complexity(chunks)
    assert ranked.chunk_id.tolist() == ["hard", "easy"]
    assert ranked.flesch_reading_ease.iloc[0] < 0 < ranked.flesch_reading_ease.iloc[1]


def test_coverage_hands_out_untouched_first():
    chunks = pd.DataFrame({"chunk_id": list("abcd"), "doc_id": ["x", "x", "y", "y"],
                           "char_start": [0, 40, 0, 40], "char_end": [50, 90, 50, 90]})
    t = CoverageTracker(chunks, order=["d", "c"])
    assert t.next(2) == ["d", "c"]
    assert t.mark_span("x", 45, 48) == ["a", "b"]
    t.mark(["d"])
    assert t.untouched() == ["c"] and t.next(2) == ["c", "d"]
    assert t.coverage() == 0.75
    with pytest.raises(KeyError, match="unknown chunk 'z'"):
        t.mark(["z"])


def test_random_baseline_is_seeded_and_without_replacement(evidence_chunks):
    chunks, _ = evidence_chunks
    a, b = random_passages(chunks, 30, seed=4), random_passages(chunks, 30, seed=4)
    assert a.chunk_id.tolist() == b.chunk_id.tolist() and a.chunk_id.is_unique
    assert random_passages(chunks, 30, seed=5).chunk_id.tolist() != a.chunk_id.tolist()
