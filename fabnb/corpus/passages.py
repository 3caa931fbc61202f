"""Passage selection for RAG-TESTER-style test generation.

RAG-TESTER aims its tests at (1) the hardest passages to read, (2) information
absent from the corpus, and (3) regions no earlier test touched. This module
supplies (1) and (3) over a chunk frame, and the strategy-free random baseline
the paper compares against:

- :func:`readability`: Flesch Reading Ease per chunk (lower is harder);
- :func:`rank_by_complexity`: chunks from least to most readable;
- :class:`CoverageTracker`: which chunks earlier tests touched; hands out untouched ones first;
- :func:`random_passages`: the baseline, chunks drawn uniformly at random.

Flesch Reading Ease = 206.835 - 1.015 (words / sentences) - 84.6 (syllables / words).
Syllables are counted with the hyphenation dictionary of ``pyphen`` (hyphenation
points + 1, at least 1 per word), which ships with the package and needs no download.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

__all__ = ['CoverageTracker', 'flesch_reading_ease', 'random_passages', 'rank_by_complexity', 'readability',
           'syllables']

_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|\n\s*\n")
_WORDS = re.compile(r"[A-Za-z]+(?:['’-][A-Za-z]+)*|\d+(?:[.,]\d+)*")


@lru_cache(maxsize=1)
def _dictionary():
    import pyphen

    return pyphen.Pyphen(lang="en_US")


@lru_cache(maxsize=65536)
def syllables(word: str) -> int:
    """Syllables in a word, by hyphenation points (numbers count one per digit group).

    Examples
    --------
    >>> syllables("semiconductor"), syllables("the"), syllables("2025")
    (4, 1, 1)
    """
    if not word[:1].isalpha():
        return 1
    return max(1, len(_dictionary().positions(word.lower())) + 1)


def flesch_reading_ease(text: str) -> float:
    """Flesch Reading Ease of a text; NaN when it has no words.

    Examples
    --------
    >>> # 9 words, 2 sentences, 10 syllables: 206.835 - 1.015 * 4.5 - 84.6 * 10 / 9
    >>> round(flesch_reading_ease("The cat sat on the mat. It was happy."), 2)
    108.27
    """
    words = _WORDS.findall(text)
    if not words:
        return float("nan")
    sentences = max(1, len([s for s in _SENTENCE_END.split(text) if _WORDS.search(s)]))
    syl = sum(syllables(w) for w in words)
    return 206.835 - 1.015 * (len(words) / sentences) - 84.6 * (syl / len(words))


def readability(chunks: pd.DataFrame) -> pd.DataFrame:
    """Flesch Reading Ease of every chunk.

    Returns
    -------
    DataFrame
        chunk_id, doc_id, flesch_reading_ease, n_words.
    """
    return pd.DataFrame({
        "chunk_id": chunks["chunk_id"].to_numpy(),
        "doc_id": chunks["doc_id"].to_numpy(),
        "flesch_reading_ease": [flesch_reading_ease(t) for t in chunks["text"]],
        "n_words": [len(_WORDS.findall(t)) for t in chunks["text"]],
    })


def rank_by_complexity(chunks: pd.DataFrame, min_words: int = 20) -> pd.DataFrame:
    """Chunks from least readable (most complex) to most, as RAG-TESTER's LOW_FLESCH selection.

    Chunks with fewer than ``min_words`` words are left out (a table caption is not a
    hard passage). Ties keep corpus order.

    Returns
    -------
    DataFrame
        :func:`readability` columns plus complexity_rank (0 = hardest).
    """
    r = readability(chunks)
    r = r[r["n_words"] >= min_words].sort_values("flesch_reading_ease", kind="stable").reset_index(drop=True)
    r["complexity_rank"] = np.arange(len(r))
    return r


def random_passages(chunks: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """The strategy-free baseline: ``n`` chunks drawn uniformly without replacement."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(chunks), size=min(n, len(chunks)), replace=False)
    return chunks.iloc[rows][["chunk_id", "doc_id", "text"]].reset_index(drop=True)


class CoverageTracker:
    """Which chunks (regions of the corpus) earlier tests touched.

    Parameters
    ----------
    chunks : DataFrame
        The chunk frame (chunk_id, doc_id, char_start, char_end).
    order : DataFrame or list, optional
        Preference among untouched chunks: a frame with ``chunk_id`` (e.g.
        :func:`rank_by_complexity`) or a list of ids; default corpus order.

    Examples
    --------
    >>> import pandas as pd
    >>> ch = pd.DataFrame({"chunk_id": ["a::0", "a::1", "b::0"], "doc_id": ["a", "a", "b"],
    ...                    "char_start": [0, 50, 0], "char_end": [60, 100, 40]})
    >>> t = CoverageTracker(ch)
    >>> t.mark(["a::0"])
    >>> t.next(2)
    ['a::1', 'b::0']
    >>> round(t.coverage(), 3)
    0.333
    """

    def __init__(self, chunks: pd.DataFrame, order=None):
        self.chunks = chunks[["chunk_id", "doc_id", "char_start", "char_end"]].reset_index(drop=True)
        ids = self.chunks["chunk_id"].tolist()
        if order is None:
            self.order = ids
        else:
            preferred = list(order["chunk_id"]) if isinstance(order, pd.DataFrame) else list(order)
            known = set(ids)
            self.order = [c for c in preferred if c in known] + [c for c in ids if c not in set(preferred)]
        self.hits: dict[str, int] = {c: 0 for c in ids}

    def mark(self, chunk_ids) -> None:
        """Record that a test used these chunks (its source passage, or what retrieval returned)."""
        for c in chunk_ids:
            if c not in self.hits:
                raise KeyError(f"unknown chunk {c!r}")
            self.hits[c] += 1

    def mark_span(self, doc_id: str, char_start: int, char_end: int) -> list[str]:
        """Mark every chunk overlapping a character span of a document; returns their ids."""
        c = self.chunks
        hit = c[(c["doc_id"] == doc_id) & (c["char_start"] < char_end) & (c["char_end"] > char_start)]
        self.mark(hit["chunk_id"])
        return hit["chunk_id"].tolist()

    def untouched(self) -> list[str]:
        """Untouched chunks, in preference order."""
        return [c for c in self.order if self.hits[c] == 0]

    def next(self, n: int = 1) -> list[str]:
        """The next ``n`` chunks to test: untouched first, then least-touched (preference order)."""
        ranked = sorted(self.order, key=lambda c: self.hits[c])  # stable: keeps preference order
        return ranked[:n]

    def coverage(self) -> float:
        """Share of chunks touched at least once."""
        return sum(1 for v in self.hits.values() if v) / max(len(self.hits), 1)

    def to_frame(self) -> pd.DataFrame:
        """chunk_id, doc_id, hits, per chunk."""
        return self.chunks[["chunk_id", "doc_id"]].assign(hits=[self.hits[c] for c in self.chunks["chunk_id"]])
