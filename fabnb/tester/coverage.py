"""RAG-TESTER's coverage criterion: rounds of coverage tests fed by retrieval, and how much of the corpus was touched.

The generators share one :class:`fabnb.corpus.passages.CoverageTracker` over the corpus
(:func:`fabnb.tester.study.generate_tests`); :func:`coverage_round` adds tests from the chunks
neither a test nor the systems' retrieval has touched (fed by :func:`fabnb.rag.sources.mark_returned`),
and :func:`coverage_table` is the coverage-adequacy table: chunks and documents touched by
generation and by retrieval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..corpus.passages import CoverageTracker
from ..qa.testcases import TestSuite, coverage_tests

__all__ = ["coverage_round", "coverage_table"]


def coverage_round(chunks: pd.DataFrame, llm, n: int, tracker: CoverageTracker, round_: int, *, seed: int = 0):
    """One more round of coverage tests, ``n`` per document, after the tracker has been fed what retrieval returned.

    RAG-TESTER's coverage criterion, driven by the system: generate, run, mark the chunks the
    system's retrieval returned (:func:`fabnb.rag.sources.mark_returned`), repeat. A fixed number
    of rounds keeps the plan priceable.

    Returns
    -------
    fabnb.qa.testcases.TestSuite
        Coverage tests with ids ``coverage-r<round>-NNN``.
    """
    parts = []
    for d, (doc, own) in enumerate(chunks.groupby("doc_id", sort=False)):
        suite = coverage_tests(own, llm, n, tracker, seed=seed + 100 * d + 7919 * round_)
        suite.rejected["source_doc"] = doc
        parts.append(suite)
    suite = TestSuite.concat(parts)
    suite.tests["test_id"] = [f"coverage-r{round_}-{i + 1:03d}" for i in range(len(suite.tests))]
    return suite


def coverage_table(tests: pd.DataFrame, chunks: pd.DataFrame, returned: pd.DataFrame | None = None) -> pd.DataFrame:
    """Coverage adequacy: how much of the corpus the tests' passages and the systems' retrieval touched.

    Parameters
    ----------
    tests : DataFrame
        ``TestSuite.tests`` (source_chunk, source_doc, generator).
    chunks : DataFrame
        The corpus's chunks.
    returned : DataFrame, optional
        :func:`fabnb.rag.sources.returned_sources` of the answers (system, chunk_id, doc_id).

    Returns
    -------
    DataFrame
        One row per what: ``generation`` (all tests' passages), one per generator, and
        ``retrieval: <system>`` per system and ``retrieval: any``; with chunks, chunks_touched,
        chunk_coverage, documents, documents_touched, document_coverage.

    Examples
    --------
    >>> chunks = pd.DataFrame({"chunk_id": ["a::0", "a::1", "b::0", "b::1"], "doc_id": ["a", "a", "b", "b"]})
    >>> tests = pd.DataFrame({"generator": ["coverage", "random"], "source_chunk": ["a::0", "a::0"],
    ...                       "source_doc": ["a", "a"]})
    >>> table = coverage_table(tests, chunks).set_index("what")
    >>> table.loc["generation", ["chunk_coverage", "document_coverage"]].tolist()
    [0.25, 0.5]
    """
    n_chunks, n_docs = chunks["chunk_id"].nunique(), chunks["doc_id"].nunique()
    doc_of = chunks.set_index("chunk_id")["doc_id"]

    def row(what: str, ids) -> dict:
        ids = {i for i in ids if i in doc_of.index}
        docs = set(doc_of.loc[list(ids)]) if ids else set()
        return {"what": what, "chunks": n_chunks, "chunks_touched": len(ids),
                "chunk_coverage": len(ids) / n_chunks if n_chunks else np.nan, "documents": n_docs,
                "documents_touched": len(docs), "document_coverage": len(docs) / n_docs if n_docs else np.nan}

    rows = [row("generation", tests["source_chunk"])]
    rows += [row(f"generation: {g}", t["source_chunk"]) for g, t in tests.groupby("generator", sort=False)]
    if returned is not None and len(returned):
        rows += [row(f"retrieval: {sys}", r["chunk_id"]) for sys, r in returned.groupby("system", sort=True)]
        rows.append(row("retrieval: any", returned["chunk_id"]))
    return pd.DataFrame(rows)
