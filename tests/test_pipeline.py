"""The whole chain on the embedded model and a tiny corpus.

corpus -> contexts -> QA -> RAG answers -> scores -> figures.
"""

import matplotlib
import pytest

matplotlib.use("Agg")

from fabnb.analysis import curves as analysis  # noqa: E402
from fabnb.analysis import plots
from fabnb.core.scores import check_scores  # noqa: E402
from fabnb.data.datasets import read_qa_files  # noqa: E402
from fabnb.judge import judge_results, score_store, to_score_frame  # noqa: E402
from fabnb.models.llm import ResponseCache  # noqa: E402
from fabnb.models.local import LocalServer  # noqa: E402
from fabnb.qa.generation import GenerationConfig, generate_qa, write_pairs  # noqa: E402
from fabnb.rag import RAGConfig, ReferenceRAG, ResultsStore, questions_frame, run_grid  # noqa: E402

from gen_helpers import small_contexts  # noqa: E402


@pytest.mark.model
def test_corpus_to_figures_end_to_end(tmp_path):
    chunks, contexts = small_contexts()  # six technical paragraphs -> chunks -> needle-in-haystack contexts
    with LocalServer(n_ctx=4096) as server:
        llm = server.llm(cache=ResponseCache(tmp_path / "llm.sqlite"), concurrency=1)
        run = generate_qa(contexts, llm, n=1, chunks=chunks, config=GenerationConfig(max_tokens=256, r_max=6))
        assert len(run.pairs) == 1, run.attempts[["failure", "message"]].to_string()
        write_pairs(run.pairs, tmp_path / "bench")
        qa = read_qa_files(tmp_path / "bench")
        assert qa.problems.empty and len(qa) == 1

        questions = questions_frame(qa.pairs)
        rag = ReferenceRAG(chunks, llm, retriever="bm25")
        answers = ResultsStore(tmp_path / "answers.jsonl")
        configs = [RAGConfig(k, output_k=0.0625) for k in (0.25, 0.5, 1)]
        grid = run_grid(rag, questions, configs, answers, progress=False)
        assert grid.failed == 0, grid.failures.to_string()

        scored = judge_results(answers.frame(), questions, llm, tmp_path / "scores.jsonl", metrics=["relevance"],
                               reason_chars=120, progress=False)
        assert scored.failed == 0, scored.failures.to_string()

    scores = to_score_frame(score_store(tmp_path / "scores.jsonl").frame())
    frame = check_scores(scores.drop(columns="n"), require_all_metrics=False)
    assert sorted(frame.context_k.unique()) == [0.25, 0.5, 1.0] and set(frame.metric) == {"relevance"}
    fits = analysis.fit_log_curves(frame, metric="relevance")
    assert len(fits) == 1 and fits.model.iloc[0] == rag.model
    ax = plots.plot_scaling(frame, metric="relevance")
    assert ax.get_lines() and ax.get_xlabel()
