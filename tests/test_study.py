"""RAG-TESTER's study: each objection's mechanism on hand-made inputs with known answers, the whole study
against a scripted server, and (slow) against the embedded model."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from fabnb.corpus.collection import chunk_corpus, corpus_from_frame
from fabnb.judge import bootstrap_group_diff
from fabnb.models.llm import LLM
from fabnb.qa.rating import RatingSession, RatingStore
from fabnb.tester.study import (
    TABLES,
    StudyError,
    baseline_comparison,
    build_configurations,
    combine_corpora,
    configuration_pairs,
    label_precision,
    run_study,
    strongest_configuration,
    verdict_items,
    yield_table,
)
from fabnb.views.widgets import RatingPanel

from gen_helpers import notebook_parameters, notebook_turn
from stub_openai import StubServer, completion

CRITERIA = ("faithfulness", "relevance", "completeness", "clarity", "keyword_match")


def verdict_frame(rows):
    """(system, test_id, generator, failed, source_doc) tuples -> a verdict frame."""
    f = pd.DataFrame(rows, columns=["system", "test_id", "generator", "failed", "source_doc"])
    return f.assign(model="m", context_k=1.0, mode="A", status="ok", kind="positive", configuration=f["system"],
                    failure_type=np.where(f["failed"], "answer failure", ""))


# ------------------------------------------------------------ objection 4: paired tests, bootstrap over documents


def test_bootstrap_group_diff_paired_and_stratified_by_hand():
    f = pd.DataFrame({"g": ["x", "y"] * 6, "failed": [1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0],
                      "source_doc": np.repeat(["d1", "d2", "d3", "d4", "d5", "d6"], 2)})
    r = bootstrap_group_diff(f, "g", "x", "y", n_boot=500)
    assert (r["rate_a"], r["rate_b"], r["n_clusters"], r["resampling"]) == (5 / 6, 1 / 6, 6, "paired")
    assert r["diff"] == pytest.approx(4 / 6) and r["ci_low"] <= r["diff"] <= r["ci_high"]
    assert r["ci_high"] - r["ci_low"] > 0  # six documents: there is uncertainty
    # disjoint documents (generated vs real): each side resampled on its own
    g = pd.DataFrame({"origin": ["real"] * 4 + ["generated"] * 4, "failed": [1, 1, 1, 0, 0, 0, 1, 0],
                      "source_doc": ["r1", "r1", "r2", "r2", "g1", "g1", "g2", "g2"]})
    s = bootstrap_group_diff(g, "origin", "real", "generated", n_boot=500)
    assert s["resampling"] == "stratified" and s["diff"] == pytest.approx(0.5) and s["n_clusters"] == 4
    # one document per side can only give the point estimate back
    one = bootstrap_group_diff(g[g.source_doc.isin(["r1", "g1"])], "origin", "real", "generated", n_boot=100)
    assert one["ci_low"] == one["ci_high"] == pytest.approx(1.0)
    assert np.isnan(bootstrap_group_diff(g, "origin", "real", "nowhere")["diff"])


def test_configuration_pairs_of_a_single_configuration_is_empty_with_every_column():
    """On Binder the dense extra is absent, so notebook 08 has one configuration: its pairs cell must still run."""
    from fabnb.judge import PAIR_COLUMNS

    v = verdict_frame([("bm25", f"t{i}", "random", i < 2, "d0") for i in range(4)])
    pairs = configuration_pairs(v, pd.DataFrame({"test_id": [f"t{i}" for i in range(4)], "source_doc": "d0"}))
    assert pairs.empty and list(pairs.columns) == [*PAIR_COLUMNS, "p_holm"]


def test_configuration_pairs_use_matched_tests_and_holm():
    rows = []
    for i in range(12):
        doc = f"d{i % 4}"
        rows += [("bm25", f"t{i}", "random", i < 9, doc), ("tfidf", f"t{i}", "random", i < 3, doc),
                 ("minilm", f"t{i}", "random", i < 8, doc)]
    v = verdict_frame(rows)
    pairs = configuration_pairs(v, pd.DataFrame({"test_id": [f"t{i}" for i in range(12)],
                                                 "source_doc": [f"d{i % 4}" for i in range(12)]}), n_boot=300)
    assert len(pairs) == 3 and (pairs.p_holm >= pairs.p_value - 1e-12).all()
    bt = pairs[(pairs.a == "bm25") & (pairs.b == "tfidf")].iloc[0]
    assert (bt.n, bt.a_only, bt.b_only, bt.both, bt.n_clusters) == (12, 6, 0, 3, 4)
    assert bt.p_value == pytest.approx(2 * 0.5 ** 6)  # exact McNemar, 6 discordant pairs all one way
    from fabnb.judge import failure_table

    table = failure_table(v, by=("configuration",))
    best = strongest_configuration(table, pairs).iloc[0]
    assert best.configuration == "tfidf" and best.failure_rate == 0.25 and best.runner_up == "minilm"
    assert best.separable == bool(pairs[(pairs.a == "minilm") & (pairs.b == "tfidf")].p_holm.iloc[0] < 0.05)


# ------------------------------------------------------------ objection 1: the fair baseline beside the plain one


def test_baseline_comparison_reports_both_baselines():
    rows = []
    for d in range(4):
        doc = f"d{d}"
        rows += [("s", f"c{d}", "complex_passage", True, doc), ("s", f"n{d}", "negative_rejection", True, doc),
                 ("s", f"v{d}", "coverage", d < 2, doc), ("s", f"r{d}", "random", d < 1, doc),
                 ("s", f"f{d}", "fair_baseline", d < 3, doc)]
    table = baseline_comparison(verdict_frame(rows), n_boot=300).set_index("comparison")
    assert list(table.index) == ["strategies vs random", "strategies vs fair baseline",
                                 "positive strategies vs random"]
    assert table.loc["strategies vs random", "rate_a"] == pytest.approx(10 / 12)
    assert table.loc["strategies vs random", "diff"] == pytest.approx(10 / 12 - 1 / 4)
    assert table.loc["strategies vs fair baseline", "diff"] == pytest.approx(10 / 12 - 3 / 4)
    assert table.loc["positive strategies vs random", "rate_a"] == pytest.approx(6 / 8)
    assert (table.ci_low <= table["diff"]).all() and (table["diff"] <= table.ci_high).all()


def test_yield_counts_candidates_and_surplus_over_each_baseline():
    tests = pd.DataFrame({"test_id": ["c1", "c2", "r1", "f1"],
                          "generator": ["complex_passage", "complex_passage", "random", "fair_baseline"]})
    rejected = pd.DataFrame({"generator": ["complex_passage", "random", "random", "random"],
                             "source_chunk": "x", "reason": "r"})
    v = verdict_frame([("s", "c1", "complex_passage", True, "d1"), ("s", "c2", "complex_passage", True, "d2"),
                       ("s", "r1", "random", False, "d1"), ("s", "f1", "fair_baseline", True, "d2")])
    y = yield_table(v, tests, rejected, n_boot=200).set_index("generator")
    assert y.loc["complex_passage", ["candidates", "kept", "yield"]].tolist() == [3, 2, pytest.approx(2 / 3)]
    assert y.loc["random", ["candidates", "kept", "yield"]].tolist() == [4, 1, 0.25]
    assert y.loc["complex_passage", "surplus_vs_random"] == 1.0 and y.loc["complex_passage", "surplus_vs_fair"] == 0
    assert np.isnan(y.loc["random", "surplus_vs_random"]) and y.loc["coverage", "candidates"] == 0


# ------------------------------------------------------------ objection 2: human labels through the rating widget


def test_human_labels_from_the_rating_widget_give_oracle_precision(tmp_path):
    gens = ["complex_passage", "coverage", "random"]
    rows = [("s", f"t{i}", gens[i % 3], i % 2 == 0, f"d{i % 3}") for i in range(12)]
    v = verdict_frame(rows)
    tests = pd.DataFrame({"test_id": v.test_id, "question": "q?", "expected_answer": "e", "evidence": "ev",
                          "generator": v.generator})
    results = v[["system", "model", "context_k", "mode", "test_id"]].assign(
        answer="an answer", sources=[[{"text": "retrieved passage"}]] * 12)
    items = verdict_items(v, tests, results, n=8, seed=1)
    strata = v.groupby(["generator", "failed"]).size()
    assert len(items) >= len(strata) and items.item_id.is_unique  # every stratum is sampled
    assert set(zip(items.group, items.condition.str.endswith("failed"))) == set(strata.index)
    assert items.retrieved.eq("retrieved passage").all()

    store = RatingStore(tmp_path / "labels")
    truth = {}  # the humans: rater a says every oracle failure is real except on coverage; b agrees but one item
    for rater in ("a", "b"):
        session = RatingSession(items, rater, store, kind="verdict")
        panel = RatingPanel(session)
        assert [d["name"] for d in panel.dimensions] == ["failed"] and panel.scale == [0, 1]
        assert "condition" not in panel.item and "group" not in panel.item  # blind: the oracle's verdict is hidden
        for k in range(len(items)):
            item = items.set_index("item_id").loc[panel.item["item_id"]]
            oracle_failed = item.condition == "oracle: failed"
            label = int(oracle_failed and item.group != "coverage")
            if rater == "b" and k == 0:
                label = 1 - label
            truth.setdefault(panel.item["item_id"], []).append(label)
            panel.handle({"action": "rate", "dimension": "failed", "value": label})
            assert panel.error == "", panel.error
            panel.handle({"action": "next"})
        assert session.progress() == (len(items), len(items))
    panel.handle({"action": "rate", "dimension": "failed", "value": 3})  # outside 0-1: refused, nothing saved
    assert "not a whole number from 0 to 1" in panel.error
    assert store.ratings().empty  # verdict labels are not QA ratings

    r = label_precision(v, store)
    labelled = v.assign(item_id=[f"s|1K|A|{t}" for t in v.test_id]).set_index("item_id").loc[items.item_id]
    majority = {i: np.mean(x) for i, x in truth.items()}
    flagged = [i for i in items.item_id if labelled.loc[i, "failed"] and majority[i] != 0.5]
    expected = np.mean([majority[i] > 0.5 for i in flagged])
    assert r["precision"] == pytest.approx(expected) and r["n_flagged"] == len(flagged)
    assert (r["raters"], r["items_labelled"], r["items_multi"], r["ties"]) == (2, len(items), len(items), 1)
    assert r["rater_percent_agreement"] == pytest.approx((len(items) - 1) / len(items))
    assert 0 < r["rater_alpha"] < 1
    # the same labels give the precision per test type, with the panel's code (fabnb.tester.panel)
    from fabnb.tester.panel import precision_by_type
    from fabnb.tester.study import verdict_labels

    labels = verdict_labels(store)
    by_type = precision_by_type(labelled.reset_index(), labels[~labels["tie"]]).set_index("generator")
    assert by_type.loc["all", "flagged"] == len(flagged) and by_type.loc["all", "precision"] == pytest.approx(expected)
    assert by_type.loc["all", "fdr"] == pytest.approx(1 - expected)
    assert set(by_type.index) - {"all"} <= set(v.generator)


# ------------------------------------------------------------ objection 3: retrieval misses apart from answer failures


def test_verdicts_say_whether_the_ground_truth_passage_was_retrieved():
    from fabnb.judge import oracle_results

    tests = pd.DataFrame({"test_id": ["t1", "t2"], "generator": "random", "kind": "positive",
                          "question": ["q1", "q2"], "expected_answer": ["a", "a"], "keywords": [("k",)] * 2,
                          "source_chunk": "c", "source_doc": "d1",
                          "evidence": ["The etch removes five nanometres per cycle."] * 2})
    results = pd.DataFrame({"system": "s", "model": "m", "context_k": 1.0, "mode": "A", "test_id": ["t1", "t2"],
                            "status": "ok", "answer": ["wrong", "wrong"], "gold_retrieved": [True, True],
                            "sources": [[{"doc_id": "d1", "text": "Intro. The etch removes five nanometres per "
                                                                  "cycle. More."}],
                                        [{"doc_id": "d1", "text": "Another passage of the same document."}]]})
    bad = json.dumps({**dict.fromkeys(CRITERIA, "false"), "reason": "r"})
    with StubServer(lambda r, n: (200, completion(bad), {})) as s:
        v = oracle_results(results, tests, LLM("o", s.base_url, cache=False)).set_index("test_id")
        # the same document came back both times, but only t1's passage did: t2 is a retrieval miss
        assert v.passage_retrieved.tolist() == [True, False] and v.gold_retrieved.tolist() == [True, True]
        assert v.failure_type.tolist() == ["answer failure", "retrieval miss"]
        oracle_results(results, tests, LLM("o", s.base_url, cache=False), evidence="retrieved")
        prompts = [r["messages"][-1]["content"] for r in s.requests[-2:]]
    assert "Another passage of the same document." in prompts[1]  # judged against what was retrieved
    assert "five nanometres" not in prompts[1].split("Expected answer")[0].split("Evidence:")[1]


# ------------------------------------------------------------ the whole study against a scripted server


DOCS = {
    "gen-etch": "Plasma etching removes silicon with fluorine radicals. The etch rate of the process is 42 nm per "
                "minute at 300 watts. Chamber pressure stays at 20 mtorr during the main etch step. "
                "Endpoint detection uses optical emission at 704 nm.",
    "gen-resist": "Extreme ultraviolet resists absorb photons at 13.5 nm. The resist sensitivity is 20 mJ per "
                  "square centimetre for the reference formulation. Line edge roughness stays below 2 nm. "
                  "Post exposure bake runs at 110 C for 60 seconds.",
    "real-bond": "Direct wafer bonding joins two polished wafers without adhesive. Surface roughness must be "
                 "below 0.5 nm for bonding at room temperature. Annealing at 400 C raises the bond energy.",
}


def scripted(request, n):
    """Writes tests (one answer absent from its passage), answers with the context's first sentence,
    and fails answers that do not quote the expected answer."""
    text = request["messages"][-1]["content"]
    if "PASSAGE:" in text:
        passage = text.split("PASSAGE:\n", 1)[1].rsplit("\n\nJSON:", 1)[0]
        if "does not give" in text:
            return 200, completion(json.dumps({"question": f"What is the zorblax ferronium index {n}?",
                                               "missing_detail": "zorblax ferronium index"})), {}
        sentences = re.split(r"(?<=[.!?])\s", passage.strip())
        sentence = sentences[min(1, len(sentences) - 1)]
        answer = "Quantum chromodynamics governs it" if "Direct wafer bonding" in passage else sentence
        return 200, completion(json.dumps({"evidence": sentence, "question": f"What does the text say, case {n}?",
                                           "answer": answer, "keywords": sentence.split()[:1]})), {}
    if "Judge it on five criteria" in text:
        expected = text.split("Expected answer: ", 1)[1].split("\n\nAnswer to judge:")[0]
        answer = text.split("Answer to judge:\n", 1)[1]
        verdict = "true" if expected[:20] in answer else "false"
        return 200, completion(json.dumps({**dict.fromkeys(CRITERIA, verdict), "reason": "scripted"})), {}
    context = text.split("Context:\n", 1)[-1] if "Context:" in text else text
    return 200, completion(context.strip().split("\n")[0][:200] or "I cannot answer."), {}


def test_the_whole_study_on_a_scripted_server(tmp_path, monkeypatch):
    import fabnb.rag as rag
    import fabnb.rag.retrievers as retrievers

    corpus, origins = combine_corpora({
        "generated": corpus_from_frame(pd.DataFrame({"doc_id": ["gen-etch", "gen-resist"],
                                                     "text": [DOCS["gen-etch"], DOCS["gen-resist"]]})),
        "real": corpus_from_frame(pd.DataFrame({"doc_id": ["real-bond"], "text": [DOCS["real-bond"]]}))})
    assert origins == {"gen-etch": "generated", "gen-resist": "generated", "real-bond": "real"}
    chunks = chunk_corpus(corpus, size=36, overlap=6)

    def no_minilm(*args, **kwargs):
        raise rag.RAGError("the dense embedding model all-MiniLM-L6-v2 is not installed", "missing-embedding-model")

    # Patched where make_retriever looks it up; a miss would load the real model and the assertions below fail.
    monkeypatch.setattr(retrievers, "minilm_embedder", no_minilm)  # as if the dense extra were not installed
    documents_rejected = pd.DataFrame({"doc_id": ["gen-empty"], "reason": ["empty or too short (0 words)"]})
    with StubServer(scripted) as s:
        llms = {"stub-a": LLM("stub-a", s.base_url, cache=False), "stub-b": LLM("stub-b", s.base_url, cache=False)}
        study = run_study(chunks, llms, tmp_path / "study", origins=origins, embeddings=("tfidf", "bm25", "minilm"),
                          n_per_generator=1, exclusions=documents_rejected, n_boot=200)
        asked = len(s.requests)
        again = run_study(chunks, llms, tmp_path / "study", origins=origins, embeddings=("tfidf", "bm25", "minilm"),
                          n_per_generator=1, exclusions=documents_rejected, n_boot=200)
        assert len(s.requests) == asked  # tests, answers and verdicts all came back from the folder
        with pytest.raises(StudyError, match="another corpus"):
            run_study(chunks, llms, tmp_path / "study", origins=origins, n_per_generator=2)

    assert set(study.tables) == set(TABLES)
    assert study.configurations.status.value_counts().to_dict() == {"ok": 4, "excluded": 2}
    assert set(study.verdicts.configuration) == {"stub-a x tfidf", "stub-a x bm25", "stub-b x tfidf", "stub-b x bm25"}
    ex = study.exclusions
    assert set(ex.stage) >= {"document", "configuration", "test"}
    assert ex[ex.stage == "configuration"].reason.str.contains("not installed").all()
    assert ex.reason.str.startswith("expected answer absent from its source passage").any()
    assert set(study.tests.generator) == set(("complex_passage", "negative_rejection", "coverage", "random",
                                              "fair_baseline"))
    # the fair baseline carries negative tests in the strategies' share (1 in 3 per document here)
    fair = study.tests[study.tests.generator == "fair_baseline"]
    strategies = study.tests[study.tests.generator.isin(["complex_passage", "negative_rejection", "coverage"])]
    assert (fair.kind == "negative").sum() == round((strategies.kind == "negative").mean() * 3)
    t = study.tables
    assert len(t["failures_by_configuration"]) == 4 and t["failures_by_configuration"].tests.gt(0).all()
    assert set(t["failures_by_origin"].origin) == {"generated", "real"}
    assert t["origin_comparison"].iloc[0].resampling == "stratified"
    assert len(t["configuration_pairs"]) == 6 and t["strongest_configuration"].configuration.iloc[0] in \
        set(study.verdicts.configuration)
    assert set(t["baseline_comparison"].comparison) >= {"strategies vs random", "strategies vs fair baseline"}
    assert set(t["yield_by_generator"].generator) == set(study.tests.generator)
    # negative tests (refusal expected): the scripted answers quote the context, so they fail as missed refusals
    neg = study.verdicts[study.verdicts.kind == "negative"]
    assert len(neg) and (neg.failure_type == "refusal expected").all()
    pd.testing.assert_frame_equal(again.verdicts, study.verdicts)
    assert repr(study).startswith(f"Study({len(study.tests)} tests, 4 configurations")


def test_build_configurations_reports_what_is_missing(evidence_chunks):
    chunks, _ = evidence_chunks
    systems, grid, excluded = build_configurations(chunks.head(20), {"m": LLM("m", "http://127.0.0.1:9/v1")},
                                                   embeddings=("bm25", "word2vec"))
    assert [s.name for s in systems] == ["m x bm25"]
    assert excluded.iloc[0]["item"] == "m x word2vec" and "unknown retriever" in excluded.iloc[0].reason


def test_a_study_without_tests_or_models_says_what_to_do(tmp_path):
    with pytest.raises(StudyError, match="llms is empty"):
        run_study(pd.DataFrame(), {}, tmp_path)
    with pytest.raises(StudyError, match="chunk_corpus"):
        run_study(pd.DataFrame({"text": ["x"]}), {"m": None}, tmp_path)


# ------------------------------------------------------------ the whole study on the embedded model


@pytest.mark.model
def test_the_whole_study_on_the_embedded_model(tmp_path, fab_bench):
    """Notebook 08's study (its parameters cell, its calls) on the real Gemma 3 270M: generated PDFs and real
    FAB-Bench documents, BM25 and MiniLM. The replies go to the suite's response cache, so the notebook, run
    later in the suite, replays them: the model's work is done once and checked here in detail."""
    from fabnb.corpus.collection import load_corpus
    from fabnb.data.datasets import evidence_corpus
    from fabnb.models.local import default_llm
    from fabnb.qa.documents import DocumentSpec, write_documents
    from fabnb.qa.testcases import ANSWER_SUPPORT, answer_support
    from fabnb.tester.study import generator_llms

    nb = notebook_parameters("08_test_rag.ipynb")
    with notebook_turn("08_test_rag.ipynb"):  # never beside the notebook: the second replays the first's replies
        llm = default_llm()
        generated = write_documents([DocumentSpec(topic, words=nb["DOC_WORDS"], toc=True, citations=True)
                                     for topic in nb["TOPICS"]], llm, tmp_path / "documents", seed=nb["SEED"])
        assert len(generated.documents) + len(generated.rejected) == len(nb["TOPICS"])
        corpus, origins = combine_corpora({"generated": load_corpus(generated.documents.pdf_path.tolist()),
                                           "real": evidence_corpus(fab_bench)}, n=nb["N_REAL"], seed=nb["SEED"])
        chunks = chunk_corpus(corpus, size=nb["CHUNK_TOKENS"], overlap=nb["CHUNK_TOKENS"] // 4)
        study = run_study(chunks, generator_llms(), tmp_path / "study", origins=origins, embeddings=nb["EMBEDDINGS"],
                          tester=llm, oracle=llm, n_per_generator=nb["N_PER_GENERATOR"],
                          exclusions=generated.rejected, seed=nb["SEED"])
    n_configs = len(nb["EMBEDDINGS"])

    assert study.configurations.status.tolist() == ["ok"] * n_configs  # the dense model is installed and works
    assert set(study.configurations.embedding) == set(nb["EMBEDDINGS"]) >= {"bm25", "minilm"}
    assert set(study.tables) == set(TABLES) and all(isinstance(t, pd.DataFrame) for t in study.tables.values())
    by_config = study.tables["failures_by_configuration"]
    assert len(by_config) == n_configs and by_config.tests.eq(len(study.tests)).all()  # all answered and judged
    pairs = study.tables["configuration_pairs"]
    assert len(pairs) == n_configs * (n_configs - 1) // 2 and pairs.p_value.notna().all()
    assert study.tables["strongest_configuration"].configuration.iloc[0] in set(by_config.configuration)
    assert set(study.tables["yield_by_generator"].generator) == set(("complex_passage", "negative_rejection",
                                                                     "coverage", "random", "fair_baseline"))
    assert len(study.tables["baseline_comparison"]) == 3
    assert set(study.tables["failures_by_origin"].origin) <= set(origins.values())
    v = study.verdicts[study.verdicts.status == "ok"]
    assert (v.failed.astype(bool) == v.failure_type.ne("")).all()
    positive = v[v.kind == "positive"]
    assert positive.passage_retrieved.map(lambda x: isinstance(x, bool)).all()
    assert (positive.failure_type.isin(["", "answer failure", "retrieval miss"])).all()
    assert (v[v.kind == "negative"].failure_type.isin(["", "refusal expected"])).all()
    # every kept positive test's expected answer is in its own source passage; rejected candidates say why
    text = chunks.set_index("chunk_id").text
    kept = study.tests[study.tests.kind == "positive"]
    assert all(answer_support(a, text[c]) >= ANSWER_SUPPORT for a, c in zip(kept.expected_answer, kept.source_chunk))
    assert set(study.exclusions.stage) <= {"document", "configuration", "test", "answer", "verdict"}
    assert len(study.exclusions[study.exclusions.stage == "test"]) == len(study.rejected)
    assert study.exclusions.reason.str.len().gt(0).all()


def test_tables_when_every_verdict_failed_count_the_errors_and_invent_nothing():
    from fabnb.judge import VERDICT_COLUMNS
    from fabnb.tester.study import study_tables

    v = pd.DataFrame([{"system": "s", "model": "m", "context_k": 1.0, "mode": "A", "test_id": "t1",
                       "generator": "random", "status": "error", "cause": "not-json", "configuration": "s",
                       "llm": "l", "embedding": "bm25", "source_doc": "d", "origin": "real"}])
    v = v.reindex(columns=[*VERDICT_COLUMNS, "configuration", "llm", "embedding", "source_doc", "origin"])
    t = study_tables(v, pd.DataFrame({"test_id": ["t1"], "generator": ["random"], "source_doc": ["d"]}),
                     pd.DataFrame({"generator": []}), n_boot=10)
    assert set(t) == set(TABLES)
    row = t["failures_by_configuration"].iloc[0]
    assert (row.tests, row.judge_errors) == (0, 1) and np.isnan(row.failure_rate)
    assert t["strongest_configuration"].empty and t["baseline_comparison"]["diff"].isna().all()
