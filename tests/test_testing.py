"""fabnb.experiment.testing: RAG-TESTER from the experiment file (``[tests]``), run by ``fabnb run``.

A scripted server writes the tests, answers as the reference system's model and as a LangChain pipeline's
(a factory of the user's kind over the same corpus), and judges as the oracle.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from fabnb.experiment import Experiment, ExperimentError, run_experiment

from stub_openai import StubServer, completion

ROOT = Path(__file__).resolve().parents[1]
CRITERIA = ("faithfulness", "relevance", "completeness", "clarity", "keyword_match")
DOCS = {
    "etch": "Plasma etching removes silicon with fluorine radicals. The etch rate of the process is 42 nm per minute "
            "at 300 watts. Chamber pressure stays at 20 mtorr during the main etch step. Endpoint detection uses "
            "optical emission at 704 nm. The wafer chuck is cooled with helium at 10 torr.",
    "resist": "Extreme ultraviolet resists absorb photons at 13.5 nm. The resist sensitivity is 20 mJ per square "
              "centimetre for the reference formulation. Line edge roughness stays below 2 nm. Post exposure bake "
              "runs at 110 C for 60 seconds. Development uses a 0.26 normal developer.",
}


def scripted(request: dict, n: int):
    """Tester, answerer and oracle in one: tests quote the passage's second sentence; answers echo the context's
    first line; the oracle passes an answer holding the expected answer's opening."""
    text = request["messages"][-1]["content"]
    model = request.get("model", "stub")
    if "PASSAGE:" in text:
        passage = text.split("PASSAGE:\n", 1)[1].rsplit("\n\nJSON:", 1)[0]
        if "does not give" in text:
            body = {"question": f"What is the zorblax ferronium index {n}?", "missing_detail": "zorblax ferronium"}
        else:
            sentences = re.split(r"(?<=[.!?])\s", passage.strip())
            s = sentences[min(1, len(sentences) - 1)]
            body = {"evidence": s, "question": f"What does the text say, case {n}?", "answer": s,
                    "keywords": s.split()[:1], "difficulty": "medium", "reasoning": "look it up"}
        return 200, completion(json.dumps(body), model=model, prompt_tokens=400, completion_tokens=60), {}
    if "Judge it on five criteria" in text:
        expected = text.split("Expected answer: ", 1)[1].split("\n\nAnswer to judge:")[0]
        answer = text.split("Answer to judge:\n", 1)[1]
        verdict = "true" if expected[:20] in answer else "false"
        return 200, completion(json.dumps({**dict.fromkeys(CRITERIA, verdict), "reason": "scripted"}), model=model,
                               prompt_tokens=500, completion_tokens=40), {}
    if "states_an_answer" in text:
        return 200, completion(json.dumps({"declines": "true", "states_an_answer": "false", "reason": "ok"}),
                               model=model), {}
    context = text.split("Context:\n", 1)[-1] if "Context:" in text else text
    return 200, completion(context.strip().split("\n")[0][:200] or "Insufficient information.", model=model,
                           prompt_tokens=300, completion_tokens=30), {}


def langchain_factory(setup):
    """The user's own LangChain pipeline: word-overlap retrieval over the corpus, the scripted chat model."""
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
    from langchain_openai import ChatOpenAI

    docs = setup.documents

    def retrieve(q):
        words = set(re.findall(r"[a-z]+", q.lower()))
        scored = sorted(((len(words & set(re.findall(r"[a-z]+", t.lower()))), d, t)
                         for d, t in zip(docs["doc_id"], docs["text"])), reverse=True)
        return [Document(id=f"lc-{d}", page_content=t, metadata={"doc_id": d, "score": s}) for s, d, t in scored[:1]]

    llm = ChatOpenAI(model=setup.model, base_url=setup.base_url, api_key="x", max_retries=0)
    prompt = RunnableLambda(lambda x: "Context:\n" + x["context"][0].page_content + "\n\n" + x["question"])
    return RunnableParallel(context=RunnableLambda(retrieve), question=RunnablePassthrough()).assign(
        answer=prompt | llm | StrOutputParser())


def write_tests_file(folder: Path, extra_tests: str = "", budget: str = "") -> Path:
    corpus = folder / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (corpus / f"{name}.txt").write_text(text)
    sys.modules.setdefault("test_testing", sys.modules[__name__])
    path = folder / "tests.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "tester"
        output = "out"
        concurrency = 2
        {budget}

        [corpus]
        source = "corpus"
        chunk_size = 40
        chunk_overlap = 8

        [[systems]]
        name = "ref"
        retriever = "bm25"
        model = "stub-answerer"
        base_url_env = "FABNB_TEST_URL"
        max_retries = 0

        [[systems]]
        name = "lc"
        kind = "langchain"
        model = "stub-answerer"
        base_url_env = "FABNB_TEST_URL"
        max_retries = 0
        settings = {{factory = "test_testing:langchain_factory"}}

        [contexts]
        windows = [1]
        modes = ["A", "B"]

        [judge]
        model = "stub-oracle"
        base_url_env = "FABNB_TEST_URL"
        logprobs = false
        max_retries = 0

        [tests]
        model = "stub-tester"
        base_url_env = "FABNB_TEST_URL"
        max_retries = 0
        n_complex = 1
        n_negative = 1
        n_coverage = 2
        {extra_tests}

        [prices]
        stub-answerer = {{input = 1.0, output = 2.0, date = "2026-12-01", source = "test"}}
        stub-oracle = {{input = 0.5, output = 4.0, date = "2026-12-01", source = "test"}}
        stub-tester = {{input = 0.5, output = 4.0, date = "2026-12-01", source = "test"}}
        """))
    return path


def quiet(*args):
    pass


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    with StubServer(scripted) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        yield server


def test_fabnb_run_with_tests_writes_the_studys_tables_for_a_reference_and_a_framework_system(tmp_path, env):
    path = write_tests_file(tmp_path, extra_tests="rounds = 1")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    out = tmp_path / "out"
    assert run.status == "finished" and run.failures.empty
    tables = out / "report" / "tests"
    for name in ("failures_by_configuration", "configuration_pairs", "baseline_comparison", "yield_by_generator",
                 "coverage", "attribution", "attribution_by_configuration", "failure_kinds", "tests"):
        assert (tables / f"{name}.csv").exists(), name
    by_config = pd.read_csv(tables / "failures_by_configuration.csv")
    assert set(by_config.configuration) == {"ref @ 1K A", "ref @ 1K B", "lc @ 1K A", "lc @ 1K B"}
    assert set(by_config.embedding) == {"bm25", "langchain"} and by_config.tests.gt(0).all()
    tests = pd.read_csv(tables / "tests.csv")
    assert {"complex_passage", "negative_rejection", "coverage", "random", "fair_baseline"} <= set(tests.generator)
    assert tests.test_id.str.startswith("coverage-r1-").any()  # the round fed by retrieval
    assert tests.test_id.is_unique and (tests.source_location.dropna() != "").all()
    coverage = pd.read_csv(tables / "coverage.csv").set_index("what")
    assert {"generation", "retrieval: ref", "retrieval: lc", "retrieval: any"} <= set(coverage.index)
    attribution = pd.read_csv(tables / "attribution.csv")
    assert set(attribution.attribution) <= {"passed", "retrieval", "generation", "undetermined"}
    # the framework's sources were placed in the kit's chunks: the per-cell record the coverage reads
    assert coverage.loc["retrieval: lc", "chunks_touched"] > 0
    summary = (out / "summary.md").read_text()
    assert "Failures by configuration" in summary and "Coverage adequacy" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "tests" and {r["stage"] for r in manifest["planned"]} == {"tests", "answers", "oracle"}
    assert manifest["runs"][-1]["status"] == "finished"
    # the sidebar counts to the tests written, and every stage is done
    from fabnb.experiment.progress import run_status

    status = run_status(out)
    assert [s["stage"] for s in status["stages"]] == ["tests", "answers", "oracle"]
    assert all(s["state"] == "done" for s in status["stages"]), status["stages"]
    answers = next(s for s in status["stages"] if s["stage"] == "answers")
    assert answers["planned"] == len(tests) * 2 * 2  # two systems, modes A and B
    # the one renderer shows the run: the tests as questions, the oracle's verdicts as its two scores
    from fabnb.views.explorer import Explorer
    from fabnb.views.page import export_page

    explorer = Explorer.from_folder(out)
    assert explorer.metrics == ["oracle_pass", "oracle_mean"] and len(explorer.cells) == len(tests) * 4
    detail = explorer.detail(explorer.cells.iloc[0])
    assert detail["question"] and {s["metric"] for s in detail["scores"]} == {"oracle_pass", "oracle_mean"}
    failed_a = explorer.cells[(explorer.cells["mode"] == "A") & (explorer.cells["oracle_pass"] == 0)]
    reasons = [s["reason"] for i in range(len(failed_a)) for s in explorer.detail(failed_a.iloc[i])["scores"]]
    assert reasons and all("retrieval's failure" in r or "generation's failure" in r for r in reasons)
    assert (export_page(out, tmp_path / "page")).exists()
    # a second run asks nothing
    asked = len(env.requests)
    again = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert again.status == "finished" and len(env.requests) == asked
    # the questions carried Appendix E's request for a location and span
    assert any("Span:" in r["messages"][-1]["content"] for r in env.requests if "Context:" in
               r["messages"][-1]["content"])


def test_a_changed_tests_table_is_refused_on_resume_and_tests_with_questions_are_refused(tmp_path, env):
    path = write_tests_file(tmp_path)
    run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    path.write_text(path.read_text().replace("n_coverage = 2", "n_coverage = 3"))
    with pytest.raises(ExperimentError, match="tests.n_coverage: 2 -> 3"):
        run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    path.write_text(path.read_text() + "\n[questions]\nsample = 2\n")
    with pytest.raises(ExperimentError, match=r"\[tests\].*\[questions\]"):
        Experiment.from_file(path)


def test_the_dry_run_plans_every_stage_and_asks_nothing(tmp_path, env):
    run = run_experiment(Experiment.from_file(write_tests_file(tmp_path)), dry_run=True, probe=False, echo=quiet)
    t = run.plan.table.set_index(["system", "stage"])
    assert run.status == "dry-run" and not env.requests and not (tmp_path / "out").exists()
    # 2 documents x (1 + 1 + 2 + 2 baselines) tests, 1 window x 2 modes
    assert t.loc[("ref", "answers"), "calls"] == 2 * 6 * 2 and t.loc[("lc", "oracle"), "calls"] == 2 * 6 * 2
    assert t.loc[("tester", "tests"), "cost_usd"] > 0


STAGE_FILES = {"tests": "tests.jsonl", "answers": "answers.jsonl", "oracle": "verdicts.jsonl"}


@pytest.mark.parametrize("stage", ["tests", "answers", "oracle"])
def test_a_tests_run_killed_at_each_stage_resumes_asking_only_what_is_missing(tmp_path, monkeypatch, stage):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    path = write_tests_file(tmp_path)
    out = tmp_path / "out"
    with StubServer(scripted, delay=0.05) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
        script = ("import sys, test_testing; from fabnb.cli import main; sys.exit(main(sys.argv[1:]))")
        proc = subprocess.Popen([sys.executable, "-c", script, "run", str(path), "--no-probe", "--no-progress"],
                                env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        target = out / STAGE_FILES[stage]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not (
                target.exists() and len(target.read_text().splitlines()) >= 1):
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert target.exists(), proc.stderr.read().decode()[-2000:]
        stored = {name: len(Path(out / f).read_text().splitlines()) if (out / f).exists() else 0
                  for name, f in STAGE_FILES.items()}
        server.delay = 0
        cache_free = list(server.requests)
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
        resumed = server.requests[len(cache_free):]
    assert run.status == "finished"
    verdicts = pd.read_csv(out / "report" / "tests" / "attribution.csv")
    assert len(verdicts) > 0
    # what was stored before the kill is not asked again: no oracle prompt for a stored verdict, no tester prompt
    # for a stored document
    tests = pd.read_csv(out / "report" / "tests" / "tests.csv")
    if stored["tests"] >= 1:
        first_doc = json.loads((out / "tests.jsonl").read_text().splitlines()[0])["doc_id"]
        first_text = DOCS[first_doc][:40]
        assert not any("PASSAGE:" in r["messages"][-1]["content"] and first_text in r["messages"][-1]["content"]
                       for r in resumed)
    answers_total = len(tests) * 2 * 2
    assert sum(1 for r in resumed if "Judge it on five criteria" in r["messages"][-1]["content"]) \
        <= answers_total - stored["oracle"]


@pytest.mark.model
@pytest.mark.frameworks
def test_notebook_14s_run_end_to_end_on_the_embedded_model(tmp_path):
    """Notebook 14's run as its cells make it, on the real model: ``fabnb run`` of its experiment file against a
    LlamaIndex pipeline and the HTTP service (examples/http_rag.py) on loopback, one document, one test per
    generator, the embedded model as tester, answerer and oracle. The model's replies go to the suite's response
    cache, and the notebook, run in its turn, replays them (one model run for the two)."""
    from fabnb.core.process import answers_tcp, free_port, start_process, stop_process, wait_ready

    from gen_helpers import notebook_parameters, notebook_turn

    nb = notebook_parameters("14_test_your_system.ipynb")
    notebooks = ROOT / "notebooks"
    out = tmp_path / "tests-systems"
    with notebook_turn("14_test_your_system.ipynb"):
        port = free_port()
        service = start_process([sys.executable, str(notebooks / nb["HTTP_APP"]), "--port", str(port)],
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert wait_ready(service, lambda: answers_tcp("127.0.0.1", port), timeout=600) == "ready"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "fabnb.cli", "run", str(notebooks / nb["EXPERIMENT"]),
                                   "--out", str(out), "--no-progress"], capture_output=True, text=True, timeout=1500,
                                  env={**os.environ, "PYTHONPATH": str(ROOT),
                                       "MY_RAG_URL": f"http://127.0.0.1:{port}/ask"})
            seconds = time.perf_counter() - start
        finally:
            stop_process(service)
    # 3: finished with failed cells (a small oracle breaks its JSON now and then), listed and asked again on rerun
    assert done.returncode in (0, 3), done.stderr[-3000:]
    assert (done.returncode == 3) == ("failed cells by cause" in done.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runs"][-1]["status"] == "finished"
    stages = {(s["system"], s["stage"]): s for s in manifest["stages"]}
    assert stages[("tester", "tests")]["ok"] == 2  # the document's tests and its fair baseline
    tests = pd.read_csv(out / "report" / "tests" / "tests.csv")
    for system in ("llamaindex", "my-http-rag"):
        answers = stages[(system, "answers")]
        assert answers["ok"] + answers["failed"] == len(tests) and answers["ok"] > 0, (system, answers)
        assert stages[(system, "oracle")]["ok"] > 0
    returned = pd.read_csv(out / "report" / "tests" / "coverage.csv").set_index("what")
    assert returned.loc["retrieval: my-http-rag", "chunks_touched"] > 0  # its sources placed in the kit's chunks
    summary = (out / "summary.md").read_text()
    assert "tests: every failure rate has a wide interval" in summary
    print(f"notebook 14's run: {seconds:.0f} s; {len(tests)} tests")


def test_the_smallest_tests_example_plans_without_a_call():
    run = run_experiment(Experiment.from_file(ROOT / "examples" / "tests.toml"), dry_run=True, probe=False,
                         echo=quiet)
    t = run.plan.table.set_index(["system", "stage"])
    assert run.status == "dry-run" and t.loc[("tester", "tests"), "calls"] == 2
    assert t.loc[("local-bm25", "answers"), "calls"] == 5 * 2  # 1 + 1 + 1 tests and 2 baselines, modes A and B


def test_a_grid_of_llms_and_retrievers_kept_to_the_pairs_allowed(tmp_path, env):
    path = write_tests_file(tmp_path, extra_tests=textwrap.dedent("""\
        retrievers = ["bm25", "tfidf", "hybrid"]
        llms = [{name = "a", model = "stub-answerer", base_url_env = "FABNB_TEST_URL", max_retries = 0},
                {name = "b", model = "stub-b", base_url_env = "FABNB_TEST_URL", max_retries = 0}]
        pairs = [["a", "bm25"], ["a", "hybrid"], ["b", "tfidf"]]
        """))
    exp = Experiment.from_file(path)
    assert [s.name for s in exp.systems] == ["ref", "lc", "a x bm25", "a x hybrid", "b x tfidf"]
    assert [s.retriever for s in exp.systems[2:]] == ["bm25", "hybrid", "tfidf"]
    run = run_experiment(exp, progress=False, probe=False, echo=quiet)
    by_config = pd.read_csv(tmp_path / "out" / "report" / "tests" / "failures_by_configuration.csv")
    grid = by_config[by_config.configuration.str.startswith(("a x", "b x"))]
    assert set(zip(grid.llm, grid.embedding)) >= {("stub-answerer", "bm25"), ("stub-answerer", "hybrid"),
                                                  ("stub-b", "tfidf")}
    assert run.status == "finished"
    path.write_text(path.read_text().replace('["b", "tfidf"]', '["b", "word2vec"]'))
    with pytest.raises(ExperimentError, match=r"pairs .* names \['b', 'word2vec'\]"):
        Experiment.from_file(path)


def test_the_papers_grid_template_plans_24_configurations(monkeypatch):
    """examples/rag_tester_paper.toml, RAG-TESTER's 8-LLM shape with 24 pairs allowed: read and planned, not run."""
    for var in ("OPENAI", "LLAMA32", "LLAMA31", "MISTRAL", "QWEN", "GEMMA"):
        monkeypatch.setenv(f"{var}_BASE_URL", "http://127.0.0.1:9/v1")
        monkeypatch.setenv(f"{var}_API_KEY", "sk-test")
    exp = Experiment.from_file(ROOT / "examples" / "rag_tester_paper.toml")
    assert len(exp.systems) == 24 and len({s.endpoint.model for s in exp.systems}) == 8
    assert exp.tests.n_complex + exp.tests.n_negative + exp.tests.n_coverage == 50


def test_the_budget_stops_a_tests_run_before_a_call_could_pass_it_and_a_rerun_goes_on(tmp_path, env):
    # a document's tests at their dearest (15 tries at $0.00115) cost more than the whole budget: nothing begins
    path = write_tests_file(tmp_path, budget="budget_usd = 0.01")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert run.status == "stopped-by-budget" and not env.requests
    # enough for the tests and part of the rest: it stops again, inside the budget
    path.write_text(path.read_text().replace("budget_usd = 0.01", "budget_usd = 0.06"))
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    spent = float(pd.to_numeric(run.tally["cost_usd"], errors="coerce").fillna(0).sum())
    assert run.status == "stopped-by-budget" and 0 < spent <= 0.06
    asked = len(env.requests)
    path.write_text(path.read_text().replace("budget_usd = 0.06", "budget_usd = 5.0"))
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert run.status == "finished"
    prompts = [r["messages"][-1]["content"] for r in env.requests[asked:]]
    assert not any("PASSAGE:" in p for p in prompts)  # the tests written under the first budget were kept


def test_failed_cells_give_exit_status_3_and_a_rerun_asks_only_them(tmp_path, monkeypatch, capsys):
    from fabnb.cli import main

    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    broken = {"on": True}

    def flaky(request, n):
        text = request["messages"][-1]["content"]
        if broken["on"] and "Context:" in text and "zorblax" in text:  # answers to the negative tests
            return 500, {"error": {"message": "scripted outage"}}, {}
        return scripted(request, n)

    path = write_tests_file(tmp_path)
    with StubServer(flaky) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        assert main(["run", str(path), "--no-probe", "--no-progress"]) == 3
        said = capsys.readouterr().out
        assert "failed cells by cause (a rerun asks them again)" in said and "ref answers http-500: 4" in said
        broken["on"] = False
        before = len(server.requests)
        assert main(["run", str(path), "--no-probe", "--no-progress"]) == 0
        again = [r["messages"][-1]["content"] for r in server.requests[before:]]
    assert again and all("zorblax" in t for t in again if "Context:" in t)  # only the failed answers


def test_fabnb_compare_says_what_to_do_with_a_tests_run(tmp_path, env):
    from fabnb.experiment.comparison import ComparisonError, compare_runs

    run_experiment(Experiment.from_file(write_tests_file(tmp_path)), progress=False, probe=False, echo=quiet)
    with pytest.raises(ComparisonError, match="is a RAG-TESTER run.*configuration_pairs.csv"):
        compare_runs(tmp_path / "out", tmp_path / "out")
