"""RAG-TESTER's study end to end: tests per document, an LLM x embedding grid, oracle verdicts, tables.

RAG-TESTER (the second system the kit reproduces) writes tests where RAG systems fail,
runs them against several RAG configurations and lets an LLM oracle judge the
answers. Its reviewer raised four objections; each is answered by a mechanism here,
not by prose:

1. the fair baseline (random tests plus the same share of negative-rejection tests)
   always runs beside the plain random one, and :func:`baseline_comparison` reports
   the strategies against both;
2. :func:`verdict_items` draws a stratified sample of verdicts for human raters (the
   rating widget with ``kind="verdict"``), and :func:`label_precision` gives the
   oracle's precision against their labels, with the raters' agreement;
3. every verdict records whether retrieval brought back the test's ground-truth
   passage; a failure without it is a *retrieval miss*, apart from an *answer failure*
   (:func:`fabnb.judge.oracle_results`, which can also judge against the passages
   actually retrieved);
4. configurations are compared on matched tests (McNemar's exact test, Holm-adjusted
   over all pairs) and every difference of failure rates gets a bootstrap interval
   over documents (:func:`fabnb.judge.bootstrap_group_diff`), never raw counts alone.

:func:`run_study` does it all and returns a :class:`Study` whose ``tables`` are tidy
frames (see :data:`TABLES`). What could not be used (an empty or off-topic generated
document, a PDF that fails, a configuration whose embedding model is missing, a test
whose expected answer is absent from its own passage, an answer or verdict that
failed) is listed in ``study.exclusions`` with the reason; the study goes on without it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import FabnbError
from ..core.files import write_whole
from ..core.stats import krippendorff_alpha
from ..corpus.collection import corpus_from_frame
from ..corpus.passages import CoverageTracker
from ..corpus.vectors import vectorize
from ..judge import (
    PAIR_COLUMNS,
    bootstrap_group_diff,
    compare_configurations,
    failure_table,
    oracle_precision,
    oracle_results,
    tests_as_questions,
    verdict_store,
)
from ..models.llm import LLM
from ..qa.testcases import (
    TEST_COLUMNS,
    TestSuite,
    complex_passage_tests,
    coverage_tests,
    fair_baseline_tests,
    negative_rejection_tests,
    random_tests,
)
from ..rag import RAGConfig, RAGError, ReferenceRAG, ResultsStore, make_retriever, run_grid

__all__ = ['EMBEDDINGS', 'EXCLUSION_COLUMNS', 'GENERATORS', 'Study', 'StudyError', 'TABLES', 'TEST_STRATEGIES',
           'baseline_comparison', 'build_configurations', 'combine_corpora', 'configuration_pairs', 'document_tests',
           'fair_baselines', 'generate_tests', 'generator_llms', 'item_ids', 'label_precision', 'number_tests',
           'run_study', 'strongest_configuration', 'study_tables', 'verdict_items', 'verdict_labels', 'yield_table']

#: RAG-TESTER's test generators, as the ``generator`` column names them.
GENERATORS = ("complex_passage", "negative_rejection", "coverage", "random", "fair_baseline")
#: The generators with a strategy (the others are baselines).
TEST_STRATEGIES = ("complex_passage", "negative_rejection", "coverage")
#: The embedding models of the default grid: two sparse, one dense (all-MiniLM-L6-v2, offline).
EMBEDDINGS = ("tfidf", "bm25", "minilm")
EXCLUSION_COLUMNS = ["stage", "item", "reason"]
#: The tables a :class:`Study` holds.
TABLES = ("failures_by_configuration", "failures_by_generator", "failures_by_configuration_and_generator",
          "strongest_configuration", "configuration_pairs", "baseline_comparison", "failures_by_origin",
          "origin_comparison", "yield_by_generator")


class StudyError(FabnbError, ValueError):
    """A study that cannot run as asked (the message says what to change)."""


# ------------------------------------------------------------------ corpus


def combine_corpora(parts: dict, n: int | None = None, seed: int = 0):
    """One corpus from several (e.g. ``{"generated": ..., "real": ...}``), remembering each document's origin.

    Parameters
    ----------
    parts : dict of str -> fabnb.corpus.collection.Corpus
        The origin label and its corpus.
    n : int, optional
        Take at most ``n`` documents of each origin, drawn at random (seeded).

    Returns
    -------
    (Corpus, dict)
        The combined corpus and ``doc_id -> origin``.

    Examples
    --------
    >>> import pandas as pd
    >>> from fabnb.corpus.collection import corpus_from_frame
    >>> generated = corpus_from_frame(pd.DataFrame({"doc_id": ["g1", "g2"], "text": ["one", "two"]}))
    >>> real = corpus_from_frame(pd.DataFrame({"doc_id": ["r1"], "text": ["three"]}))
    >>> corpus, origins = combine_corpora({"generated": generated, "real": real}, n=1)
    >>> corpus.documents["doc_id"].tolist(), origins
    (['g2', 'r1'], {'g2': 'generated', 'r1': 'real'})
    """

    frames, origins = [], {}
    for i, (origin, corpus) in enumerate(parts.items()):
        docs = corpus.documents
        if n is not None and len(docs) > n:
            docs = docs.sample(n, random_state=seed + i).sort_index()
        frames.append(docs)
        origins.update(dict.fromkeys(docs["doc_id"], origin))
    return corpus_from_frame(pd.concat(frames, ignore_index=True)), origins


# ------------------------------------------------------------------ tests


def generate_tests(chunks: pd.DataFrame, llm, n_per_generator: int = 1, *, n_complex: int | None = None,
                   n_negative: int | None = None, n_coverage: int | None = None, vectors=None, seed: int = 0,
                   tracker: CoverageTracker | None = None):
    """Every generator's tests, document by document, with one coverage tracker over the corpus.

    Each document gets ``n_complex`` complex-passage, ``n_negative`` negative-rejection and
    ``n_coverage`` coverage tests (RAG-TESTER's N_complex and N_test; each defaults to
    ``n_per_generator``), drawn from its own chunks (negative-rejection tests are checked
    absent from the whole corpus), and ``n_per_generator`` random-baseline tests. Every kept
    strategy test marks its passage in one tracker, so the coverage generator draws from
    chunks no complex-passage, negative or earlier coverage test touched while any remain
    (the baselines mark nothing: they must not steer the strategy). The fair baseline is as
    large as the random one and, over the corpus, carries the strategies' share of
    negative-rejection tests (spread over documents by largest remainder).

    Parameters
    ----------
    chunks : DataFrame
        chunk_id, doc_id, text, char_start, char_end (:func:`fabnb.corpus.collection.chunk_corpus`).
    llm : fabnb.models.llm.LLM
        The model that writes the tests.
    tracker : CoverageTracker, optional
        The corpus's tracker, to carry marks in (e.g. what retrieval returned in an earlier
        round, :func:`fabnb.rag.sources.mark_returned`); a new one by default.

    Returns
    -------
    fabnb.qa.testcases.TestSuite
        ``tests`` (:data:`fabnb.qa.testcases.TEST_COLUMNS`; ids ``<generator>-NNN`` over the
        corpus) and ``rejected`` (generator, source_chunk, reason; with source_doc).
    """

    vectors = vectors if vectors is not None else vectorize(chunks)
    tracker = tracker if tracker is not None else CoverageTracker(chunks)
    docs = list(dict.fromkeys(chunks["doc_id"]))
    counts = {"complex_passage": n_complex, "negative_rejection": n_negative, "coverage": n_coverage,
              "random": n_per_generator}
    counts = {g: n_per_generator if k is None else k for g, k in counts.items()}
    parts = [document_tests(chunks, doc, d, llm, counts, tracker, vectors=vectors, seed=seed)
             for d, doc in enumerate(docs)]
    parts += fair_baselines(chunks, parts, llm, n_per_generator, vectors=vectors, seed=seed)
    return number_tests(TestSuite.concat(parts))


def number_tests(suite):
    """Ids ``<generator>-NNN`` over the corpus, in the order of the suite's rows (a copy)."""
    tests = suite.tests.copy()
    tests["test_id"] = [f"{g}-{i + 1:03d}" for g, i in zip(tests["generator"], tests.groupby("generator").cumcount())]
    return TestSuite(tests, suite.rejected)


def document_tests(chunks: pd.DataFrame, doc: str, d: int, llm, counts: dict, tracker: CoverageTracker, *,
                   vectors=None, seed: int = 0):
    """One document's tests from every generator but the fair baseline, strategies marking ``tracker``.

    Parameters
    ----------
    chunks : DataFrame
        The whole corpus's chunks (negative tests are checked absent from all of it).
    doc, d : str, int
        The document and its place in the corpus (its seeds are ``seed + 100 * d``).
    counts : dict
        Tests per generator: complex_passage, negative_rejection, coverage, random.

    Returns
    -------
    fabnb.qa.testcases.TestSuite
        The document's tests (ids numbered later, :func:`number_tests`); ``rejected`` with source_doc.
    """
    vectors = vectors if vectors is not None else vectorize(chunks)
    own = chunks[chunks["doc_id"] == doc]
    s = seed + 100 * d
    parts = [complex_passage_tests(own, llm, counts["complex_passage"], seed=s, tracker=tracker),
             negative_rejection_tests(chunks, vectors, llm, counts["negative_rejection"], seed=s,
                                      pool=own["chunk_id"], tracker=tracker),
             coverage_tests(own, llm, counts["coverage"], tracker, seed=s),
             random_tests(own, llm, counts["random"], seed=s)]
    suite = TestSuite.concat(parts)
    suite.rejected["source_doc"] = doc
    return suite


def fair_baselines(chunks: pd.DataFrame, parts: list, llm, n: int, *, vectors=None, seed: int = 0) -> list:
    """The fair baseline of every document: ``n`` tests each, carrying over the corpus the strategies' share of
    negative-rejection tests in ``parts`` (spread over documents by largest remainder). One suite per document."""
    vectors = vectors if vectors is not None else vectorize(chunks)
    docs = list(dict.fromkeys(chunks["doc_id"]))
    tests = pd.concat([p.tests for p in parts], ignore_index=True) if parts else pd.DataFrame(columns=TEST_COLUMNS)
    strategies = tests[tests["generator"].isin(TEST_STRATEGIES)]
    share = float((strategies["kind"] == "negative").mean()) if len(strategies) else 0.0
    out = []
    for d, (doc, k) in enumerate(zip(docs, _spread(round(share * n * len(docs)), len(docs), n))):
        pool = chunks.loc[chunks["doc_id"] == doc, "chunk_id"]
        fair = fair_baseline_tests(chunks, vectors, llm, n, k / n if n else 0.0, seed=seed + 100 * d, pool=pool)
        fair.rejected["source_doc"] = doc
        out.append(fair)
    return out


def _spread(total: int, bins: int, cap: int) -> list[int]:
    """``total`` items over ``bins`` as evenly as possible, at most ``cap`` each (largest remainder)."""
    base, extra = divmod(min(total, bins * cap), bins)
    return [base + (1 if i < extra else 0) for i in range(bins)]


# ------------------------------------------------------------------ configurations


def generator_llms(embedded: bool = True) -> dict:
    """The answering models of the grid: the embedded model and, if configured, the endpoint.

    The endpoint is read from ``FABNB_LLM_*`` / ``OPENAI_*`` (:meth:`fabnb.models.llm.LLM.from_env`).

    Examples
    --------
    >>> import os
    >>> os.environ.get("FABNB_LLM_BASE_URL") is None  # no endpoint configured here
    True
    >>> list(generator_llms())  # the embedded model alone
    ['gemma-3-270m-q4_k_m']
    """

    llms = {}
    if embedded:
        from ..models.local import MODEL_ALIAS, shared_server

        llms[MODEL_ALIAS] = shared_server().llm()
    endpoint = LLM.from_env()
    if endpoint is not None:
        llms[endpoint.model] = endpoint
    if not llms:
        raise StudyError("no answering model: keep embedded=True or set FABNB_LLM_BASE_URL and FABNB_LLM_MODEL.")
    return llms


def build_configurations(chunks: pd.DataFrame, llms: dict, embeddings=EMBEDDINGS):
    """The LLM x embedding grid as reference RAG systems; a configuration that cannot be built is excluded.

    Parameters
    ----------
    llms : dict of name -> fabnb.models.llm.LLM
    embeddings : iterable of str or (name, Retriever)
        ``"tfidf"``, ``"bm25"``, ``"minilm"`` (all-MiniLM-L6-v2, the ``dense`` extra),
        ``"hybrid"``, or a ready retriever with its name.

    Returns
    -------
    (list of ReferenceRAG, DataFrame, DataFrame)
        The systems (named ``<llm> x <embedding>``), the grid (configuration, llm, model,
        embedding, status, reason) and the exclusions (stage, item, reason).
    """

    retrievers, grid, excluded = {}, [], []
    for emb in embeddings:
        name, spec = emb if isinstance(emb, tuple) else (emb, emb)
        try:
            retrievers[name] = make_retriever(chunks, spec) if isinstance(spec, str) else spec
        except (RAGError, ImportError, OSError, ValueError) as exc:
            retrievers[name] = exc
    systems = []
    for llm_name, llm in llms.items():
        for name, retriever in retrievers.items():
            config = f"{llm_name} x {name}"
            row = {"configuration": config, "llm": llm_name, "model": llm.model, "embedding": name}
            if isinstance(retriever, Exception):
                reason = f"embedding model unavailable: {retriever}"
                grid.append({**row, "status": "excluded", "reason": reason})
                excluded.append({"stage": "configuration", "item": config, "reason": reason})
                continue
            systems.append(ReferenceRAG(chunks, llm, retriever=retriever, name=config))
            grid.append({**row, "status": "ok", "reason": ""})
    return (systems, pd.DataFrame(grid, columns=["configuration", "llm", "model", "embedding", "status", "reason"]),
            pd.DataFrame(excluded, columns=EXCLUSION_COLUMNS))


# ------------------------------------------------------------------ comparisons


def _judged(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The verdicts the oracle gave (judge errors left out), ``failed`` as bool."""
    return verdicts[verdicts["status"] == "ok"].assign(failed=lambda f: f["failed"].astype(bool))


def configuration_pairs(verdicts: pd.DataFrame, tests: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Every pair of configurations on their matched tests: McNemar's exact test (Holm-adjusted) and a
    bootstrap interval over documents.

    Returns
    -------
    DataFrame
        :func:`fabnb.judge.compare_configurations`' columns plus p_holm.
    """
    from ..core.stats import adjust_pvalues

    systems = sorted(verdicts["system"].dropna().unique())
    rows = [compare_configurations(verdicts, a, b, tests=tests, n_boot=n_boot, seed=seed)
            for a, b in combinations(systems, 2)]
    if not rows:  # fewer than two configurations: nothing to compare, the same columns
        return pd.DataFrame(columns=[*PAIR_COLUMNS, "p_holm"])
    out = pd.concat(rows, ignore_index=True)
    out["p_holm"] = adjust_pvalues(out["p_value"].to_numpy(dtype=float), "holm")  # the kit's one policy
    return out


def baseline_comparison(verdicts: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The strategies' failure rate against the plain random baseline and against the fair baseline
    (objection 1), and the positive strategies alone against random.

    If the strategies' lead over random shrinks against the fair baseline, part of it came
    from negative-rejection tests rather than from passage selection.

    Returns
    -------
    DataFrame
        comparison, then :func:`fabnb.judge.bootstrap_group_diff`'s fields.
    """
    ok = _judged(verdicts)
    rows = [("strategies vs random", list(TEST_STRATEGIES), ["random"]),
            ("strategies vs fair baseline", list(TEST_STRATEGIES), ["fair_baseline"]),
            ("positive strategies vs random", ["complex_passage", "coverage"], ["random"])]
    return pd.DataFrame([{"comparison": name, **bootstrap_group_diff(ok, "generator", a, b, n_boot=n_boot,
                                                                       seed=seed)}
                         for name, a, b in rows])


def yield_table(verdicts: pd.DataFrame, tests: pd.DataFrame, rejected: pd.DataFrame, n_boot: int = 2000,
                seed: int = 0) -> pd.DataFrame:
    """Per generator: how many candidates became tests, how many verdicts failed, and the surplus
    failure rate over each baseline (bootstrap interval over documents).

    Returns
    -------
    DataFrame
        generator, candidates, kept, yield (kept / candidates), verdicts, failed,
        failure_rate, surplus_vs_random (+ _low / _high), surplus_vs_fair (+ _low / _high).
    """
    ok = _judged(verdicts)
    rows = []
    for g in GENERATORS:
        kept = int((tests["generator"] == g).sum())
        cand = kept + int((rejected["generator"] == g).sum())
        mine = ok[ok["generator"] == g]
        row = {"generator": g, "candidates": cand, "kept": kept, "yield": kept / cand if cand else np.nan,
               "verdicts": len(mine), "failed": int(mine["failed"].sum()),
               "failure_rate": float(mine["failed"].mean()) if len(mine) else np.nan}
        for base, col in (("random", "surplus_vs_random"), ("fair_baseline", "surplus_vs_fair")):
            d = bootstrap_group_diff(ok, "generator", g, base, n_boot=n_boot, seed=seed) if g != base else {}
            row[col], row[f"{col}_low"], row[f"{col}_high"] = (d.get("diff", np.nan), d.get("ci_low", np.nan),
                                                               d.get("ci_high", np.nan))
        rows.append(row)
    return pd.DataFrame(rows)


def strongest_configuration(failures: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """The configuration with the lowest failure rate, and whether the runner-up is distinguishable.

    Returns
    -------
    DataFrame
        One row: configuration, tests, failure_rate, ci_low, ci_high, runner_up,
        runner_up_rate, p_value (McNemar against the runner-up), separable (p_holm < 0.05).
    """
    ranked = failures.dropna(subset=["failure_rate"]).sort_values(["failure_rate", "ci_high"])
    if ranked.empty:
        return pd.DataFrame(columns=["configuration", "tests", "failure_rate", "ci_low", "ci_high", "runner_up",
                                     "runner_up_rate", "p_value", "separable"])
    best = ranked.iloc[0]
    row = {k: best[k] for k in ("configuration", "tests", "failure_rate", "ci_low", "ci_high")}
    row.update(runner_up=None, runner_up_rate=np.nan, p_value=np.nan, separable=None)
    if len(ranked) > 1:
        second = ranked.iloc[1]
        row.update(runner_up=second["configuration"], runner_up_rate=second["failure_rate"])
        hit = pairs[((pairs["a"] == best["configuration"]) & (pairs["b"] == second["configuration"]))
                    | ((pairs["b"] == best["configuration"]) & (pairs["a"] == second["configuration"]))]
        if len(hit):
            row.update(p_value=hit["p_value"].iloc[0], separable=bool(hit["p_holm"].iloc[0] < 0.05))
    return pd.DataFrame([row])


def study_tables(verdicts: pd.DataFrame, tests: pd.DataFrame, rejected: pd.DataFrame, n_boot: int = 2000,
                 seed: int = 0) -> dict:
    """Every table of :data:`TABLES` from verdicts that carry configuration, source_doc and origin."""

    by_config = failure_table(verdicts, by=("configuration", "llm", "embedding"))
    pairs = configuration_pairs(verdicts, tests, n_boot=n_boot, seed=seed)
    ok = _judged(verdicts)
    origins = sorted(ok["origin"].dropna().unique())
    origin_row = (bootstrap_group_diff(ok, "origin", "real", "generated", n_boot=n_boot, seed=seed)
                  if {"real", "generated"} <= set(origins) else
                  {"a": "real", "b": "generated", "diff": np.nan, "resampling": "none"})
    return {
        "failures_by_configuration": by_config,
        "failures_by_generator": failure_table(verdicts, by=("generator",)),
        "failures_by_configuration_and_generator": failure_table(verdicts, by=("configuration", "generator")),
        "strongest_configuration": strongest_configuration(by_config, pairs),
        "configuration_pairs": pairs,
        "baseline_comparison": baseline_comparison(verdicts, n_boot=n_boot, seed=seed),
        "failures_by_origin": failure_table(verdicts, by=("origin",)),
        "origin_comparison": pd.DataFrame([origin_row]),
        "yield_by_generator": yield_table(verdicts, tests, rejected, n_boot=n_boot, seed=seed),
    }


# ------------------------------------------------------------------ human labels (objection 2)


def item_ids(verdicts: pd.DataFrame) -> pd.Series:
    """One rating-item id per verdict: ``<system>|<context>K|<mode>|<test_id>``."""
    return (verdicts["system"].astype(str) + "|" + verdicts["context_k"].map("{:g}K".format) + "|"
            + verdicts["mode"].astype(str) + "|" + verdicts["test_id"].astype(str))


def verdict_items(verdicts: pd.DataFrame, tests: pd.DataFrame, results: pd.DataFrame, n: int = 30, *,
                  strata=("generator", "failed"), seed: int = 0) -> pd.DataFrame:
    """A stratified sample of oracle verdicts as items for human raters (``RatingSession(kind="verdict")``).

    Every stratum (by default generator x oracle outcome) gets at least one item, the
    rest in proportion to its size. Raters see the question, the expected answer, the
    ground-truth evidence, the passages retrieved and the answer; never the oracle's
    verdict.

    Returns
    -------
    DataFrame
        item_id, question, expected_answer, evidence, retrieved, answer, plus the strata
        columns (hidden from raters in blind mode as ``group`` / ``condition``).

    Examples
    --------
    >>> verdicts = pd.DataFrame({"system": "s", "context_k": 1.0, "mode": "A", "test_id": ["t1", "t2", "t3", "t4"],
    ...                          "generator": ["coverage", "coverage", "random", "random"], "status": "ok",
    ...                          "failed": [True, False, True, False]})
    >>> tests = pd.DataFrame({"test_id": ["t1", "t2", "t3", "t4"], "question": ["q1?", "q2?", "q3?", "q4?"],
    ...                       "expected_answer": ["a1", "a2", "a3", "a4"]})
    >>> results = verdicts[["system", "context_k", "mode", "test_id"]].assign(
    ...     answer=["x1", "x2", "x3", "x4"], sources=[[{"text": "passage one"}], [], [], []])
    >>> items = verdict_items(verdicts, tests, results, n=4)  # every stratum gets one at least
    >>> sorted(items["item_id"]), items.loc[items["item_id"] == "s|1K|A|t1", "retrieved"].item()
    (['s|1K|A|t1', 's|1K|A|t2', 's|1K|A|t3', 's|1K|A|t4'], 'passage one')
    """
    ok = _judged(verdicts)
    if ok.empty:
        raise StudyError("there are no verdicts to sample; run the oracle first.")
    ok["item_id"] = item_ids(ok)
    sizes = ok.groupby(list(strata), dropna=False).size()
    n = min(n, len(ok))
    want = np.maximum(1, np.floor(sizes / sizes.sum() * max(n - len(sizes), 0)).astype(int))
    want = np.minimum(want, sizes)
    rng = np.random.default_rng(seed)
    picked = []
    for key, g in ok.groupby(list(strata), dropna=False):
        k = int(want.loc[key])
        picked.append(g.iloc[rng.permutation(len(g))[:k]])
    sample = pd.concat(picked).sample(frac=1, random_state=seed)
    t = tests.set_index("test_id")
    expected = "expected_answer" if "expected_answer" in t.columns else "ground_truth_answer"
    res = results.assign(item_id=item_ids(results)).set_index("item_id")
    retrieved = [("\n---\n".join(str(s.get("text", ""))[:600] for s in res.loc[i, "sources"])
                  if i in res.index and isinstance(res.loc[i, "sources"], list) else "") for i in sample["item_id"]]
    return pd.DataFrame({
        "item_id": sample["item_id"].to_numpy(),
        "question": t.loc[sample["test_id"], "question"].to_numpy(),
        "expected_answer": t.loc[sample["test_id"], expected].to_numpy(),
        "evidence": t.loc[sample["test_id"], "evidence"].fillna("").to_numpy() if "evidence" in t else "",
        "retrieved": retrieved,
        "answer": [str(res.loc[i, "answer"]) if i in res.index else "" for i in sample["item_id"]],
        "group": sample["generator"].to_numpy(),
        "condition": sample["failed"].map({True: "oracle: failed", False: "oracle: passed"}).to_numpy(),
    }).reset_index(drop=True)


def _label_matrix(store) -> pd.DataFrame:
    labels = store.ratings(kind="verdict")
    labels = labels[labels["dimension"] == "failed"]
    return labels.pivot_table(index="rater", columns="item_id", values="score", aggfunc="last")


def verdict_labels(store) -> pd.DataFrame:
    """The raters' majority label of each verdict item in a rating store (``kind="verdict"``).

    Returns
    -------
    DataFrame
        item_id, failed (the majority: True when more than half said failed), tie (an even split: no label),
        raters. :func:`fabnb.tester.panel.precision_by_type` takes it as the labels (ties left out).
    """
    matrix = _label_matrix(store)
    mean = matrix.mean()
    return pd.DataFrame({"item_id": mean.index, "failed": mean.to_numpy() > 0.5, "tie": mean.to_numpy() == 0.5,
                         "raters": matrix.notna().sum().to_numpy()})


def label_precision(verdicts: pd.DataFrame, store) -> dict:
    """The oracle's precision against human labels in a rating store (``kind="verdict"``), with rater agreement.

    Each labelled item's human label is the raters' majority (an exact tie is left
    out and counted). Agreement between raters is Krippendorff's alpha (nominal) over
    all raters and the share of rater pairs that agree, on items with two or more labels.

    Returns
    -------
    dict
        :func:`fabnb.judge.oracle_precision`'s fields (precision of "failed", its Wilson
        interval, recall, oracle-human agreement, n, n_flagged), plus raters,
        items_labelled, items_multi (labelled by 2+ raters), ties, rater_alpha,
        rater_percent_agreement.

    Examples
    --------
    >>> verdicts = pd.DataFrame({"system": "s", "context_k": 1.0, "mode": "A", "test_id": ["t1", "t2", "t3", "t4"],
    ...                          "generator": ["coverage", "coverage", "random", "random"], "status": "ok",
    ...                          "failed": [True, False, True, False]})
    >>> import tempfile
    >>> from fabnb.qa.rating import RatingStore
    >>> store = RatingStore(tempfile.mkdtemp())
    >>> for rater, labels in {"ana": [1, 0, 1, 1], "ben": [1, 0, 1, 0]}.items():  # t4: a tie, left out
    ...     for item, label in zip(item_ids(verdicts), labels):
    ...         _ = store.add(rater, item, {"failed": label}, kind="verdict")
    >>> r = label_precision(verdicts, store)
    >>> r["precision"], r["n"], r["ties"], r["rater_percent_agreement"]
    (1.0, 3, 1, 0.75)
    """

    matrix = _label_matrix(store)
    counts = matrix.notna().sum()
    multi = matrix.loc[:, counts >= 2]
    pair_agree = []
    for item in multi.columns:
        v = multi[item].dropna().to_numpy()
        pair_agree += [float(x == y) for x, y in combinations(v, 2)]
    human = verdict_labels(store)
    ok = _judged(verdicts).assign(item_id=item_ids)
    result = oracle_precision(ok, human[~human["tie"]], on="item_id")
    return {**result, "raters": int(len(matrix.index)), "items_labelled": int(len(matrix.columns)),
            "items_multi": int(multi.shape[1]), "ties": int(human["tie"].sum()),
            "rater_alpha": krippendorff_alpha(multi, level="nominal") if multi.shape[1] else float("nan"),
            "rater_percent_agreement": float(np.mean(pair_agree)) if pair_agree else float("nan")}


# ------------------------------------------------------------------ the study


@dataclass
class Study:
    """What :func:`run_study` produced.

    Attributes
    ----------
    tests, rejected : DataFrame
        The test suite and the candidates rejected (generator, source_chunk, reason, source_doc).
    results : DataFrame
        Every answer (:data:`fabnb.rag.RESULT_COLUMNS`).
    verdicts : DataFrame
        :data:`fabnb.judge.VERDICT_COLUMNS` plus configuration, llm, embedding, source_doc, origin.
    configurations : DataFrame
        configuration, llm, model, embedding, status, reason.
    exclusions : DataFrame
        stage (document, configuration, test, answer, verdict), item, reason.
    tables : dict of str -> DataFrame
        :data:`TABLES`.
    """

    tests: pd.DataFrame
    rejected: pd.DataFrame
    results: pd.DataFrame
    verdicts: pd.DataFrame
    configurations: pd.DataFrame
    exclusions: pd.DataFrame
    tables: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        ok = self.verdicts[self.verdicts["status"] == "ok"]
        return (f"Study({len(self.tests)} tests, {int((self.configurations['status'] == 'ok').sum())} configurations, "
                f"{len(ok)} verdicts, {int(ok['failed'].astype(bool).sum())} failures, "
                f"{len(self.exclusions)} exclusions)")


def _fingerprint(chunks: pd.DataFrame, tester_model: str, n: int, seed: int) -> str:
    h = hashlib.sha256()
    for part in (tester_model, str(n), str(seed), *chunks["chunk_id"].astype(str), *chunks["text"].str[:64]):
        h.update(part.encode("utf-8", "replace") + b"\0")
    return h.hexdigest()[:16]


def _load_or_generate_tests(folder: Path, chunks, tester, n, seed):

    path = folder / "tests.json"
    key = _fingerprint(chunks, tester.model, n, seed)
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("fingerprint") != key:
            raise StudyError(f"{path} holds tests of a study with another corpus, test model, size or seed; use a new "
                             "folder for this study, or delete that one to start over.")
        return TestSuite.from_records(saved["tests"], saved["rejected"])
    suite = generate_tests(chunks, tester, n, seed=seed)
    # whole or not at all: a killed run leaves either no tests or all of them
    write_whole(path, json.dumps({"fingerprint": key, "tests": suite.tests.to_dict("records"),
                                  "rejected": suite.rejected.to_dict("records")}, default=str))
    return suite


def run_study(chunks: pd.DataFrame, llms: dict, folder: str | Path, *, origins: dict | None = None,
              embeddings=EMBEDDINGS, tester=None, oracle=None, n_per_generator: int = 1, config=None,
              evidence: str = "expected", exclusions: pd.DataFrame | None = None, concurrency: int = 1,
              n_boot: int = 2000, seed: int = 0, progress: bool = False) -> Study:
    """RAG-TESTER's study: tests per document, every LLM x embedding configuration, oracle verdicts, tables.

    Everything is stored under ``folder`` as it is made (``tests.json``, ``results.jsonl``,
    ``verdicts.jsonl``): a rerun on the same folder asks nothing already answered or judged.

    Parameters
    ----------
    chunks : DataFrame
        chunk_id, doc_id, text, char_start, char_end.
    llms : dict of name -> fabnb.models.llm.LLM
        The answering models (:func:`generator_llms`).
    folder : path
    origins : dict, optional
        doc_id -> origin (``"generated"`` / ``"real"``, from :func:`combine_corpora`);
        documents not in it count as ``"real"``.
    embeddings : iterable
        See :func:`build_configurations`.
    tester, oracle : fabnb.models.llm.LLM, optional
        The model that writes tests and the oracle's judge; both default to the first of ``llms``.
    n_per_generator : int
        Tests per generator per document.
    config : fabnb.rag.RAGConfig, optional
        Context budget of every configuration (default 1K tokens, 64 output tokens: sized
        for the embedded model).
    evidence : {"expected", "retrieved"}
        What the oracle judges faithfulness against (:func:`fabnb.judge.oracle_results`).
    exclusions : DataFrame, optional
        Earlier exclusions to carry into the report, e.g. ``GeneratedDocuments.rejected``
        (doc_id, reason), listed as stage ``document``.

    Returns
    -------
    Study
    """

    if not llms:
        raise StudyError("llms is empty: pass at least one answering model, e.g. generator_llms().")
    missing = {"chunk_id", "doc_id", "text", "char_start", "char_end"} - set(chunks.columns)
    if missing:
        raise StudyError(f"chunks lack column(s) {sorted(missing)}; make them with "
                         "fabnb.corpus.collection.chunk_corpus.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    first = next(iter(llms.values()))
    tester, oracle = tester or first, oracle or first
    config = config or RAGConfig(1, output_k=0.0625)
    origins = origins or {}

    excluded = []
    if exclusions is not None and len(exclusions):
        excluded += [{"stage": "document", "item": r.get("doc_id", r.get("item", "")), "reason": r["reason"]}
                     for r in exclusions.to_dict("records")]
    suite = _load_or_generate_tests(folder, chunks, tester, n_per_generator, seed)
    excluded += [{"stage": "test", "item": f"{r['generator']} / {r['source_chunk']}", "reason": r["reason"]}
                 for r in suite.rejected.to_dict("records")]
    systems, grid, bad_configs = build_configurations(chunks, llms, embeddings)
    excluded += bad_configs.to_dict("records")
    if suite.tests.empty:
        raise StudyError(f"no test survived generation ({len(suite.rejected)} candidates rejected; see "
                         "study.rejected reasons); try more tests per generator or a stronger test model.")
    if not systems:
        raise StudyError("no configuration could be built: " + "; ".join(grid["reason"]))

    store = ResultsStore(folder / "results.jsonl")
    run_grid(systems, tests_as_questions(suite.tests), [config], store, concurrency=concurrency, progress=progress)
    results = store.frame()
    results = results[results["test_id"].isin(suite.tests["test_id"])
                      & results["system"].isin([s.name for s in systems])].reset_index(drop=True)
    excluded += [{"stage": "answer", "item": f"{r['system']} / {r['test_id']}", "reason": f"{r['cause']}: {r['error']}"}
                 for r in results[results["status"] != "ok"].to_dict("records")]

    verdicts = oracle_results(results, suite.tests, oracle, evidence=evidence,
                              store=verdict_store(folder / "verdicts.jsonl"))
    excluded += [{"stage": "verdict", "item": f"{r['system']} / {r['test_id']}",
                  "reason": f"{r['cause']}: {r['reason']}"}
                 for r in verdicts[verdicts["status"] != "ok"].to_dict("records")]
    cfg = grid.set_index("configuration")
    source = suite.tests.set_index("test_id")["source_doc"]
    verdicts = verdicts.assign(configuration=verdicts["system"], llm=verdicts["system"].map(cfg["llm"]),
                               embedding=verdicts["system"].map(cfg["embedding"]),
                               source_doc=verdicts["test_id"].map(source))
    verdicts["origin"] = verdicts["source_doc"].map(lambda d: origins.get(d, "real"))
    tables = study_tables(verdicts, suite.tests, suite.rejected, n_boot=n_boot, seed=seed)
    return Study(suite.tests, suite.rejected, results, verdicts, grid,
                 pd.DataFrame(excluded, columns=EXCLUSION_COLUMNS), tables)
