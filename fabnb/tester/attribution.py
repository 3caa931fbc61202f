"""Retrieval or generation: which half of a RAG system a failed test points at.

RAG-TESTER's failures come from how retrieval and generation interact; a developer still
needs to know where to look first. The rule, per system, window and test (our reading, the
same in the docs, the summary and the tables):

1. mode A (the system's own retrieval) passed: ``passed``;
2. a negative-rejection test failed: ``generation`` (nothing could be retrieved; the model
   answered anyway);
3. mode B (the test's own passage given as context) was run: it passed, ``retrieval`` (with
   the right passage the system answers); it failed too, ``generation``;
4. no mode B: the oracle's retrieval check decides: the test's passage was not among the
   sources (``passage_retrieved`` False, or, for a system that exposes no sources, the gold
   document not retrieved), ``retrieval``; it was, ``generation``;
5. otherwise ``undetermined`` (no sources and no mode B: the kit cannot tell).
"""

from __future__ import annotations

import pandas as pd

__all__ = ["ATTRIBUTIONS", "ATTRIBUTION_COLUMNS", "attribution", "attribution_table"]

#: The labels :func:`attribution` gives.
ATTRIBUTIONS = ("passed", "retrieval", "generation", "undetermined")
ATTRIBUTION_COLUMNS = ["system", "context_k", "test_id", "generator", "kind", "failed_a", "failed_b",
                       "passage_retrieved", "attribution"]


def _flag(value):
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else bool(value)


def attribution(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One label per system, window and test: passed, retrieval, generation or undetermined (the module's rule).

    Parameters
    ----------
    verdicts : DataFrame
        :data:`fabnb.judge.VERDICT_COLUMNS` (system, context_k, mode, test_id, kind, failed,
        passage_retrieved, gold_retrieved, status); only ``status == "ok"`` rows count.

    Returns
    -------
    DataFrame
        :data:`ATTRIBUTION_COLUMNS`, one row per mode-A verdict.

    Examples
    --------
    >>> v = pd.DataFrame({"system": "s", "context_k": 4.0, "mode": ["A", "B", "A", "A"],
    ...                   "test_id": ["t1", "t1", "t2", "t3"], "generator": "coverage", "kind": "positive",
    ...                   "failed": [True, False, True, False], "passage_retrieved": [True, None, True, True],
    ...                   "gold_retrieved": True, "status": "ok"})
    >>> attribution(v)[["test_id", "attribution"]].values.tolist()
    [['t1', 'retrieval'], ['t2', 'generation'], ['t3', 'passed']]
    """
    ok = verdicts[verdicts["status"] == "ok"]
    b = ok[ok["mode"] == "B"].set_index(["system", "context_k", "test_id"])["failed"]
    b = b[~b.index.duplicated()]
    rows = []
    for r in ok[ok["mode"] == "A"].to_dict("records"):
        failed_b = _flag(b.get((r["system"], r["context_k"], r["test_id"])))
        found = _flag(r.get("passage_retrieved"))
        if found is None:
            found = _flag(r.get("gold_retrieved"))
        if not r["failed"]:
            label = "passed"
        elif r.get("kind") == "negative":
            label = "generation"
        elif failed_b is not None:
            label = "generation" if failed_b else "retrieval"
        elif found is not None:
            label = "generation" if found else "retrieval"
        else:
            label = "undetermined"
        rows.append({"system": r["system"], "context_k": r["context_k"], "test_id": r["test_id"],
                     "generator": r.get("generator"), "kind": r.get("kind"), "failed_a": bool(r["failed"]),
                     "failed_b": failed_b, "passage_retrieved": found, "attribution": label})
    return pd.DataFrame(rows, columns=ATTRIBUTION_COLUMNS)


def attribution_table(labels: pd.DataFrame) -> pd.DataFrame:
    """Counts of each label per system and window, with the share of failures each half explains.

    Returns
    -------
    DataFrame
        system, context_k, tests, and a count and a ``<label>_share`` (of the failures) per
        label of :data:`ATTRIBUTIONS` but ``passed``.
    """
    rows = []
    for (system, k), g in labels.groupby(["system", "context_k"], sort=True):
        counts = g["attribution"].value_counts()
        failed = int(len(g) - counts.get("passed", 0))
        row = {"system": system, "context_k": k, "tests": len(g), "failed": failed}
        for label in ATTRIBUTIONS[1:]:
            row[label] = int(counts.get(label, 0))
            row[f"{label}_share"] = row[label] / failed if failed else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)
