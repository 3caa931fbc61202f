"""Retrieval by window: did the context a system built hold the gold evidence, and how much of it was on target.

Every answer cell records whether retrieval brought back a gold document (``gold_retrieved``) and, where the
system returns them, its sources (:func:`fabnb.rag.sources.returned_sources`). Two tables follow, per system,
window and mode, each rate with its Wilson 95% interval and its n:

- :func:`retrieval_by_window`: gold-document recall, the share of cells whose context held a gold document
  (cells whose system exposes no sources are counted apart, never as misses);
- :func:`citation_by_window`: citation precision (the share of returned sources that come from a gold document)
  and recall (the share of a question's gold documents among its sources), averaged over cells, as HELMET and
  ALCE score citations against gold passages.

Examples
--------
>>> answers = pd.DataFrame({"system": "s", "model": "m", "context_k": [4.0, 4.0, 8.0], "mode": "A",
...                         "test_id": ["q1", "q2", "q1"], "status": "ok", "gold_retrieved": [True, False, True]})
>>> table = retrieval_by_window(answers)
>>> table["context_k"].tolist(), table["gold_found"].tolist(), table["recall"].tolist()
([4.0, 8.0], [1, 1], [0.5, 1.0])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.stats import wilson_interval

__all__ = ["CITATION_COLUMNS", "RECALL_COLUMNS", "citation_by_window", "retrieval_by_window"]

RECALL_COLUMNS = ["system", "context_k", "mode", "cells", "no_sources", "gold_found", "recall", "ci_low", "ci_high"]
CITATION_COLUMNS = ["system", "context_k", "mode", "cells", "sources", "precision", "precision_low",
                    "precision_high", "recall", "recall_low", "recall_high"]
_BY = ["system", "context_k", "mode"]


def retrieval_by_window(answers: pd.DataFrame) -> pd.DataFrame:
    """Gold-document recall per system, window and mode, with its Wilson interval.

    Parameters
    ----------
    answers : DataFrame
        A results store's frame: system, context_k, mode, status, gold_retrieved (True / False; None or NaN for
        a system that exposes no sources, counted in ``no_sources`` and left out of the rate).

    Returns
    -------
    DataFrame
        :data:`RECALL_COLUMNS`: cells (answered), no_sources, gold_found, recall (gold_found over the cells with
        sources; NaN when none has), ci_low, ci_high.
    """
    ok = answers[answers["status"] == "ok"]
    rows = []
    for key, g in ok.groupby(_BY, sort=True):
        known = g["gold_retrieved"].map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v))
                                        else bool(v)).dropna()
        found = int(known.astype(bool).sum())
        lo, hi = wilson_interval(found, len(known))
        rows.append({**dict(zip(_BY, key)), "cells": len(g), "no_sources": len(g) - len(known),
                     "gold_found": found, "recall": found / len(known) if len(known) else np.nan,
                     "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=RECALL_COLUMNS)


def citation_by_window(returned: pd.DataFrame, questions: pd.DataFrame) -> pd.DataFrame:
    """Citation precision and recall against the gold documents, per system, window and mode.

    Parameters
    ----------
    returned : DataFrame
        :func:`fabnb.rag.sources.returned_sources` (one row per source per cell: the cell's keys, doc_id).
    questions : DataFrame
        test_id, gold_doc_ids (a list per question; questions without gold documents are left out).

    Returns
    -------
    DataFrame
        :data:`CITATION_COLUMNS`: cells, sources, precision (gold sources over all sources, pooled) and recall
        (gold documents cited over gold documents, pooled over cells), each with its Wilson interval.

    Examples
    --------
    >>> returned = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "q1",
    ...                          "doc_id": ["d1", "d9", "d9"]})
    >>> questions = pd.DataFrame({"test_id": ["q1"], "gold_doc_ids": [["d1", "d2"]]})
    >>> row = citation_by_window(returned, questions).iloc[0]
    >>> int(row["sources"]), round(float(row["precision"]), 3), float(row["recall"])
    (3, 0.333, 0.5)
    """
    gold = {t: set(ids or ()) for t, ids in zip(questions["test_id"], questions["gold_doc_ids"])}
    r = returned[returned["test_id"].map(lambda t: bool(gold.get(t)))]
    rows = []
    for key, g in r.groupby(_BY, sort=True):
        hits = sum(d in gold[t] for d, t in zip(g["doc_id"], g["test_id"]))
        cells = g.groupby("test_id")["doc_id"].agg(set)
        wanted = sum(len(gold[t]) for t in cells.index)
        cited = sum(len(gold[t] & docs) for t, docs in cells.items())
        p_lo, p_hi = wilson_interval(int(hits), len(g))
        r_lo, r_hi = wilson_interval(int(cited), int(wanted))
        rows.append({**dict(zip(_BY, key)), "cells": len(cells), "sources": len(g),
                     "precision": hits / len(g) if len(g) else np.nan, "precision_low": p_lo, "precision_high": p_hi,
                     "recall": cited / wanted if wanted else np.nan, "recall_low": r_lo, "recall_high": r_hi})
    return pd.DataFrame(rows, columns=CITATION_COLUMNS)
