"""The sources a system returned, one row per source per cell, placed in the corpus's chunks.

A results store keeps each cell's sources as the system gave them (a list of dicts: id,
doc_id, text, score). What RAG-TESTER's coverage feedback, its oracle's location check and
the long-context analyses need is the same thing: which chunks of *our* corpus each cell
brought back, in rank order. :func:`returned_sources` makes that record once;
:func:`mark_returned` feeds it to a :class:`fabnb.corpus.passages.CoverageTracker`.

A source is placed in a chunk by its id when the system uses the kit's chunk ids (the
reference systems do), else by its document and text: the chunk of the same document whose
words it quotes (:func:`fabnb.core.text.quoted_share`), or that quotes it. A framework's own
chunking rarely matches ours, so a source may overlap several chunks: it is placed in the
one whose text its opening comes nearest the start of. A source that cannot be placed keeps an empty
chunk_id.
"""

from __future__ import annotations

import pandas as pd

from ..core.schema import RESULT_KEYS
from ..core.text import word_tokens

__all__ = ["SOURCE_COLUMNS", "mark_returned", "returned_sources"]

#: The columns of :func:`returned_sources`.
SOURCE_COLUMNS = [*RESULT_KEYS, "rank", "source_id", "doc_id", "chunk_id", "page", "char_start", "char_end",
                  "score", "text"]
_PROBE_WORDS = 12  # words of a source's opening looked for in a chunk: enough to be unique, short enough to fit


def _placer(chunks: pd.DataFrame | None):
    """A function (source dict) -> chunk row (a dict) or None."""
    if chunks is None or chunks.empty:
        return lambda source: None
    by_id = {r["chunk_id"]: r for r in chunks.to_dict("records")}
    by_doc: dict = {}
    for r in by_id.values():
        by_doc.setdefault(str(r["doc_id"]), []).append((r, " ".join(word_tokens(str(r.get("text") or "")))))

    def place(source: dict):
        sid = source.get("id")
        if sid in by_id:
            return by_id[sid]
        words = word_tokens(str(source.get("text") or ""))
        if not words:
            return None
        candidates = by_doc.get(str(source.get("doc_id")), None)
        if candidates is None:  # a system that names documents its own way: look in every document
            candidates = [c for cs in by_doc.values() for c in cs]
        for k in (_PROBE_WORDS, 6):
            probe = " ".join(words[:k])
            # chunks overlap: of those holding the source's opening, the one it opens nearest the start of
            at = [(text.find(probe), i) for i, (_, text) in enumerate(candidates)]
            at = [(pos, i) for pos, i in at if pos >= 0]
            if at:
                return candidates[min(at)[1]][0]
            # the chunk may start inside the source: its opening then sits in the source's text
            source_text = " ".join(words)
            inside = [(source_text.find(" ".join(text.split()[:k])), i) for i, (_, text) in enumerate(candidates)
                      if text]
            inside = [(pos, i) for pos, i in inside if pos >= 0]
            if inside:
                return candidates[min(inside)[1]][0]
        return None

    return place


def returned_sources(results: pd.DataFrame, chunks: pd.DataFrame | None = None) -> pd.DataFrame:
    """The per-cell record of the sources a system returned.

    Parameters
    ----------
    results : DataFrame
        A results store's frame with its ``sources`` (``ResultsStore.frame()``); cells
        whose system exposes no sources (``sources`` None) give no rows.
    chunks : DataFrame, optional
        The corpus's chunks (chunk_id, doc_id, char_start, char_end, page, text), to place
        each source in one of them.

    Returns
    -------
    DataFrame
        :data:`SOURCE_COLUMNS`: the cell's keys (system, model, context_k, mode, test_id),
        rank (0 = first returned), source_id (the system's own id), doc_id, chunk_id (the
        kit's chunk it sits in; empty when it cannot be placed), page, char_start,
        char_end (of that chunk), score, text.

    Examples
    --------
    >>> chunks = pd.DataFrame({"chunk_id": ["d::0", "d::1"], "doc_id": "d", "char_start": [0, 40],
    ...                        "char_end": [40, 80], "page": float("nan"),
    ...                        "text": ["The etch removes five nanometres a cycle.", "Argon dilutes the plasma."]})
    >>> results = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": ["t1"],
    ...                         "sources": [[{"id": "x7", "doc_id": "d", "text": "argon dilutes the plasma"}]]})
    >>> returned_sources(results, chunks)[["test_id", "rank", "source_id", "chunk_id"]].values.tolist()
    [['t1', 0, 'x7', 'd::1']]
    """
    place = _placer(chunks)
    rows = []
    for r in results.to_dict("records"):
        sources = r.get("sources")
        if not isinstance(sources, (list, tuple)):
            continue
        for rank, s in enumerate(sources):
            if not isinstance(s, dict):
                continue
            chunk = place(s) or {}
            rows.append({**{k: r.get(k) for k in RESULT_KEYS}, "rank": rank, "source_id": s.get("id"),
                         "doc_id": chunk.get("doc_id", s.get("doc_id")), "chunk_id": chunk.get("chunk_id", ""),
                         "page": chunk.get("page", float("nan")), "char_start": chunk.get("char_start"),
                         "char_end": chunk.get("char_end"), "score": s.get("score"), "text": s.get("text")})
    return pd.DataFrame(rows, columns=SOURCE_COLUMNS)


def mark_returned(tracker, results: pd.DataFrame, chunks: pd.DataFrame | None = None) -> list[str]:
    """Mark in a coverage tracker every chunk a system's retrieval returned; the chunk ids marked.

    The coverage generator then draws from regions neither a test nor retrieval has touched
    (RAG-TESTER's coverage criterion, driven by what the system actually read).

    Examples
    --------
    >>> from fabnb.corpus.passages import CoverageTracker
    >>> chunks = pd.DataFrame({"chunk_id": ["d::0", "d::1"], "doc_id": "d", "char_start": [0, 40],
    ...                        "char_end": [40, 80], "text": ["one two three", "four five six"]})
    >>> tracker = CoverageTracker(chunks)
    >>> results = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": ["t1"],
    ...                         "sources": [[{"id": "d::0", "doc_id": "d", "text": "one two three"}]]})
    >>> mark_returned(tracker, results, chunks), tracker.untouched()
    (['d::0'], ['d::1'])
    """
    placed = returned_sources(results, chunks if chunks is not None else tracker.chunks)
    known = placed[placed["chunk_id"].isin(set(tracker.hits))]
    ids = known["chunk_id"].tolist()
    tracker.mark(ids)
    return list(dict.fromkeys(ids))
