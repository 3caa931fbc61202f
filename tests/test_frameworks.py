"""fabnb.rag.frameworks: LlamaIndex, LangChain and Haystack pipelines in process, from an experiment file.

The unit tests build small pipelines of the frameworks' own classes (a factory of the user's kind) over a
scripted chat endpoint; the live test runs fabnb's default pipelines (MiniLM through each framework's
sentence-transformers integration) on the embedded model.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pandas as pd
import pytest

from fabnb.core.records import ResultsStore
from fabnb.experiment import Experiment, ExperimentError, run_experiment
from fabnb.rag import FRAMEWORKS, run_grid

from stub_openai import StubServer, completion

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

QUESTIONS = [{"test_id": "q1", "question": "What limits EUV resist sensitivity?", "gold_doc_ids": ["d1"],
              "gold_context": "EUV resists trade sensitivity against line-edge roughness."},
             {"test_id": "q2", "question": "zzz unrelated", "gold_doc_ids": ["d2"],
              "gold_context": "Wafers are sliced from an ingot."}]
DOCS = {"d1": "EUV resists trade sensitivity against line-edge roughness.",
        "d2": "Wafers are sliced from a silicon ingot with a wire saw."}


def _words(text: str) -> set:
    return set(text.lower().replace("?", "").split())


def _hits(question: str) -> list[tuple[str, str, str, float]]:
    """(chunk id, doc id, text, score) of the documents sharing a word with the question: none for q2."""
    out = []
    for doc_id, text in DOCS.items():
        shared = len(_words(question) & _words(text))
        if shared:
            out.append((f"chunk-{doc_id}", doc_id, text, shared / 10))
    return out


# ------------------------------------------------------------------ the user's own pipelines (factories)


def langchain_factory(setup):
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
    from langchain_openai import ChatOpenAI

    def retrieve(q):
        if "explode" in q:
            raise RuntimeError("the retriever broke")
        return [Document(id=i, page_content=t, metadata={"doc_id": d, "score": s}) for i, d, t, s in _hits(q)]

    llm = ChatOpenAI(model=setup.model, base_url=setup.base_url, api_key="x", max_retries=0)
    answer = RunnableLambda(lambda x: f"{x['question']} / {setup.context_tokens}") | llm | StrOutputParser()
    return RunnableParallel(context=RunnableLambda(retrieve), question=RunnablePassthrough()).assign(answer=answer)


def llamaindex_factory(setup):
    from llama_index.core.base.response.schema import Response
    from llama_index.core.query_engine import CustomQueryEngine
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model=setup.model, api_base=setup.base_url, api_key="x", is_chat_model=True, max_retries=0)

    class Engine(CustomQueryEngine):
        def custom_query(self, q):
            nodes = [NodeWithScore(node=TextNode(id_=i, text=t, metadata={"doc_id": d}), score=s)
                     for i, d, t, s in _hits(q)]
            return Response(str(llm.complete(q)), source_nodes=nodes)

    return Engine()


def haystack_factory(setup):
    from haystack import Document, Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import Secret

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"chunk-{d}", content=t, meta={"doc_id": d}) for d, t in DOCS.items()])
    p = Pipeline()
    p.add_component("retriever", InMemoryBM25Retriever(store, top_k=1))
    p.add_component("prompt_builder", ChatPromptBuilder(
        template=[ChatMessage.from_user("{% for d in documents %}{{d.content}}{% endfor %} {{query}}")],
        required_variables="*"))
    p.add_component("llm", OpenAIChatGenerator(api_key=Secret.from_token("x"), model=setup.model,
                                               api_base_url=setup.base_url, max_retries=0))
    p.connect("retriever", "prompt_builder.documents")
    p.connect("prompt_builder", "llm")
    return p


def raising_factory(setup):
    raise ValueError("no index at /data/index")


def wrong_kind_factory(setup):
    return "not a pipeline"


def _experiment(tmp_path, kind: str, factory: str, base_url: str, modes=("A",)) -> Experiment:
    sys.modules.setdefault("test_frameworks", sys.modules[__name__])
    (tmp_path / "e.toml").write_text(textwrap.dedent(f"""
        name = "fw"
        output = "out"
        [[systems]]
        name = "{kind}-app"
        kind = "{kind}"
        model = "stub"
        base_url = "{base_url}"
        settings = {{factory = "{factory}"}}
        [contexts]
        windows = [1, 2]
        modes = {json.dumps(list(modes))}
        [judge]
        model = "stub"
        base_url = "{base_url}"
        metrics = ["relevance"]
    """))
    return Experiment.from_file(tmp_path / "e.toml")


def _grid(exp: Experiment, store, questions=QUESTIONS):
    system = exp.systems[0].build(None, 2, pd.DataFrame({"doc_id": list(DOCS), "text": list(DOCS.values())}),
                                  {"chunk_size": 64, "chunk_overlap": 8})
    system.prepare(exp.configs())
    return system, run_grid(system, pd.DataFrame(questions), exp.configs(), store, modes=exp.modes, progress=False)


@pytest.mark.frameworks
@pytest.mark.parametrize("kind", ["langchain", "llamaindex", "haystack"])
def test_a_users_pipeline_records_its_own_contexts_and_none_retrieved_is_not_no_sources(tmp_path, kind):
    with StubServer(lambda r, n: (200, completion("an answer"), {})) as server:
        exp = _experiment(tmp_path, kind, f"test_frameworks:{kind}_factory", server.base_url, modes=("A", "B"))
        _, run = _grid(exp, tmp_path / "answers.jsonl")
    frame = ResultsStore(tmp_path / "answers.jsonl").frame()
    ok = frame[frame["status"] == "ok"]
    assert len(ok) == 8, frame[["test_id", "mode", "status", "error"]]
    a1 = ok[(ok["test_id"] == "q1") & (ok["mode"] == "A")]
    for sources in a1["sources"]:
        assert [s["id"] for s in sources] == ["chunk-d1"] and sources[0]["doc_id"] == "d1"  # the pipeline's own id
    assert a1["gold_retrieved"].all() and (a1["context_tokens"] > 0).all()
    if kind != "haystack":  # BM25 always returns its top document; the others find none for q2
        a2 = ok[(ok["test_id"] == "q2") & (ok["mode"] == "A")]
        assert (a2["n_sources"] == 0).all() and a2["sources_exposed"].all()  # none retrieved, sources exposed
    b = ok[ok["mode"] == "B"]
    assert all(s[0]["id"] == "gold" for s in b["sources"])


@pytest.mark.frameworks
def test_a_users_factory_is_handed_the_windows_budget_in_tokens(tmp_path):
    asked = []

    def reply(request, n):
        asked.append(request["messages"][-1]["content"])
        return 200, completion("ok"), {}

    with StubServer(reply) as server:
        exp = _experiment(tmp_path, "langchain", "test_frameworks:langchain_factory", server.base_url)
        system, _ = _grid(exp, tmp_path / "answers.jsonl", QUESTIONS[:1])
    budgets = sorted(int(text.rsplit("/ ", 1)[1]) for text in asked)
    expected = sorted(system.setup_for(c).context_tokens for c in exp.configs())
    assert budgets == expected and budgets[0] < budgets[1], budgets


@pytest.mark.frameworks
def test_a_framework_exception_in_a_cell_is_recorded_the_run_goes_on_and_a_rerun_asks_it_again(tmp_path):
    questions = [*QUESTIONS[:1], {"test_id": "q3", "question": "explode EUV", "gold_context": "x"}]
    with StubServer(lambda r, n: (200, completion("an answer"), {})) as server:
        exp = _experiment(tmp_path, "langchain", "test_frameworks:langchain_factory", server.base_url)
        _, run = _grid(exp, tmp_path / "answers.jsonl", questions)
        frame = ResultsStore(tmp_path / "answers.jsonl").frame()
        bad = frame[frame["test_id"] == "q3"]
        assert (bad["status"] == "error").all() and len(bad) == 2
        assert "the retriever broke" in bad["error"].iloc[0] and bad["cause"].iloc[0] == "framework-RuntimeError"
        assert (frame[frame["test_id"] == "q1"]["status"] == "ok").all()
        _, again = _grid(exp, tmp_path / "answers.jsonl", questions)
    assert again.asked == 2 and again.skipped == 2  # only the failed cells are asked again


@pytest.mark.frameworks
def test_an_endpoint_down_behind_a_framework_gets_the_kits_cause(tmp_path):
    with StubServer() as server:
        url = server.base_url
    exp = _experiment(tmp_path, "llamaindex", "test_frameworks:llamaindex_factory", url)
    _grid(exp, tmp_path / "answers.jsonl", QUESTIONS[:1])
    frame = ResultsStore(tmp_path / "answers.jsonl").frame()
    assert (frame["cause"] == "connection").all(), frame[["cause", "error"]]


@pytest.mark.frameworks
@pytest.mark.parametrize("factory, words", [
    ("no_such_module_here:build", ["no_such_module_here", "cannot be imported", "FrameworkSetup", "query engine"]),
    ("test_frameworks:missing", ["has no callable 'missing'"]),
    ("test_frameworks:raising_factory", ["raised ValueError", "no index at /data/index", "Nothing was asked"]),
    ("test_frameworks:wrong_kind_factory", ["returned str", "expected a LlamaIndex query engine"]),
    ("just_a_name", ["package.module:function"]),
])
def test_a_bad_factory_is_named_with_its_module_and_what_was_expected_before_any_call(tmp_path, factory, words):
    with StubServer() as server:
        exp = _experiment(tmp_path, "llamaindex", factory, server.base_url)
        with pytest.raises(ExperimentError) as err:
            run_experiment(exp, progress=False, probe=False, echo=lambda *a: None)
        assert not [r for r in server.requests if "messages" in r]  # nothing was asked
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert not (exp.output / "answers.jsonl").exists() or not (exp.output / "answers.jsonl").read_text()


def test_a_framework_that_is_not_installed_is_refused_in_the_file_check_with_the_install_command(tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setattr(type(FRAMEWORKS["haystack"]), "missing", lambda self: f'pip install "fabnb[{self.extra}]"')
    (tmp_path / "e.toml").write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "h"\nkind = "haystack"\n'
                                     'model = "embedded"\n')
    with pytest.raises(ExperimentError) as err:
        Experiment.from_file(tmp_path / "e.toml")
    text = str(err.value)
    assert "line 5" in text and 'pip install "fabnb[haystack]"' in text and "\n" not in text


def test_framework_kinds_need_a_model_and_take_only_a_factory(tmp_path):
    for body, words in [('kind = "langchain"\n', ["needs model"]),
                        ('kind = "langchain"\nmodel = "embedded"\nsettings = {retriever = "x"}\n',
                         ["not langchain settings", "factory"])]:
        (tmp_path / "e.toml").write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\n' + body)
        with pytest.raises(ExperimentError) as err:
            Experiment.from_file(tmp_path / "e.toml")
        assert all(w in str(err.value) for w in words), str(err.value)


def test_a_window_too_small_for_a_default_pipelines_chunks_is_refused_and_a_factory_is_not(tmp_path):
    """examples/frameworks.toml once shipped windows = [0.5] with 128-token chunks: a 64-token budget, and
    Haystack's default pipeline sent no context while the reference system sent 250 tokens."""
    head = ('name = "x"\noutput = "o"\n[corpus]\nchunk_size = 128\nchunk_overlap = 16\n'
            '[contexts]\nwindows = WINDOWS\noutput_k = 0.125\n')
    system = '[[systems]]\nname = "lc"\nkind = "langchain"\nmodel = "embedded"\n'
    (tmp_path / "e.toml").write_text(head.replace("WINDOWS", "[0.5, 1]") + system)
    with pytest.raises(ExperimentError) as err:
        Experiment.from_file(tmp_path / "e.toml")
    text = str(err.value)
    assert "line 7" in text and "['lc']" in text and "0.5K gives 64" in text and "1.0K" not in text, text
    assert "chunk_size = 128" in text and "wider window" in text
    (tmp_path / "e.toml").write_text(head.replace("WINDOWS", "[1]") + system)
    assert Experiment.from_file(tmp_path / "e.toml").windows == (1.0,)
    (tmp_path / "e.toml").write_text(head.replace("WINDOWS", "[0.5]") + system + 'settings = {factory = "m:f"}\n')
    assert Experiment.from_file(tmp_path / "e.toml").windows == (0.5,)  # a user's factory chunks as it likes


def test_the_setup_hides_the_key_and_fills_the_budget_best_first():
    from fabnb.rag import FrameworkSetup

    setup = FrameworkSetup(pd.DataFrame({"doc_id": ["d"], "text": ["t"]}), "http://h/v1", "m", "sk-secret-1",
                           context_tokens=40, threshold=0.2)
    assert "sk-secret" not in repr(setup)
    texts = ["word " * 20, "word " * 20, "word " * 5, "word " * 5]
    assert setup.fill(texts, [0.9, 0.8, 0.5, 0.1]) == [0, 2]  # the second does not fit; the last is under 0.2
    assert setup.depth(1000) == 8 and setup.depth(3) == 3


# ------------------------------------------------------------------ fabnb's default pipelines, live


def _live_part(tmp_path, systems_toml: str, others: int, windows=(0.75, 1.5), sample: int = 1):
    """The live tests' experiment (``sample`` FAB-Bench questions, two windows, 128-token chunks, on the embedded
    model), its questions, and the part of the evidence corpus they index: the questions' gold documents and the
    first ``others`` documents. benchmarks/bench_openwebui.py uses it too."""
    (tmp_path / "e.toml").write_text(textwrap.dedent("""
        name = "live"
        output = "out"
        [questions]
        sample = SAMPLE
        [corpus]
        chunk_size = 128
        chunk_overlap = 16
        [contexts]
        windows = WINDOWS
        output_k = 0.125
        [judge]
        model = "embedded"
    """).replace("WINDOWS", json.dumps(list(windows))).replace("SAMPLE", str(int(sample))) +
        textwrap.dedent(systems_toml))
    exp = Experiment.from_file(tmp_path / "e.toml")
    questions = exp.questions()
    corpus = exp.documents().documents
    gold = {d for ids in questions["gold_doc_ids"] for d in ids}
    documents = corpus[corpus["doc_id"].isin(gold) | corpus.index.isin(range(others))].reset_index(drop=True)
    return exp, questions, documents


@pytest.mark.frameworks
@pytest.mark.model
def test_the_default_pipelines_answer_fab_bench_questions_on_the_embedded_model_with_their_own_ids(tmp_path,
                                                                                                 fab_bench_dir):
    from fabnb.rag import frameworks

    systems_toml = "".join(f"""
        [[systems]]
        name = "{name}"
        kind = "{kind}"
        model = "embedded"
    """ for name, kind in (("li", "llamaindex"), ("lc", "langchain"), ("hs", "haystack")))
    # Each framework embeds this part with MiniLM on the CPU (the whole corpus took 50-60 s per framework here).
    exp, questions, documents = _live_part(tmp_path, systems_toml, others=8)
    chunking = {"chunk_size": exp.chunk_size, "chunk_overlap": exp.chunk_overlap}
    systems = [s.build(None, 1, documents, chunking) for s in exp.systems]
    run = run_grid(systems, questions, exp.configs(), tmp_path / "answers.jsonl", progress=False,
                   concurrency=1)
    frame = ResultsStore(tmp_path / "answers.jsonl").frame()
    assert run.failed == 0 and len(frame) == 3 * 2, frame[["system", "status", "error"]]
    own = {}
    for (kind, *_), index in frameworks._INDEXES.items():
        if kind == "llamaindex":
            own[kind] = set(index.docstore.docs)
        elif kind == "langchain":
            own[kind] = set(index[0].store)
        else:
            own[kind] = {d.id for d in index.filter_documents()}
    corpus_ids = set(documents["doc_id"])
    for name, kind in (("li", "llamaindex"), ("lc", "langchain"), ("hs", "haystack")):
        rows = frame[frame["system"] == name]
        assert rows["answer"].str.strip().astype(bool).all()
        for sources in rows["sources"]:
            assert sources and {s["id"] for s in sources} <= own[kind], name  # ids the pipeline's documents carry
            assert {s["doc_id"] for s in sources} <= corpus_ids
        by_window = rows.groupby("context_k")["context_tokens"].mean()
        assert by_window[1.5] > by_window[0.75] > 0, (name, by_window)  # a wider window sends more context


# ------------------------------------------------------------------ a framework server, live: hayhooks


def _ask_server(spec: dict, exp, questions, tmp_path):
    """One ``[[systems]]`` entry, built as the runner builds it, asks the live part's question at each window."""
    system = Experiment.from_dict({"name": "x", "output": "o", "systems": [spec]}).systems[0].build(None)
    return run_grid([system], questions, exp.configs(), tmp_path / "answers.jsonl", progress=False, concurrency=1)


def _answers_over_windows(run, tmp_path, log):
    """The stored answers of :func:`_ask_server`'s run: both windows answered, each with an answer, and the
    server's context growing with the window."""
    frame = ResultsStore(tmp_path / "answers.jsonl").frame()
    assert run.failed == 0 and len(frame) == 2, (frame[["status", "error"]], log.read_text()[-3000:])
    assert frame["answer"].str.strip().astype(bool).all()
    by_window = frame.groupby("context_k")["context_tokens"].mean()
    assert by_window.iloc[1] > by_window.iloc[0] > 0, by_window  # the server filled each window's budget
    return frame


@pytest.mark.frameworks
@pytest.mark.model
def test_hayhooks_serves_fabnbs_haystack_pipeline_and_the_store_holds_the_servers_own_ids(tmp_path, fab_bench_dir):
    """A real hayhooks server (started here on loopback, stopped at the end) serves
    examples/hayhooks/fabnb_haystack over part of the FAB-Bench corpus on the embedded model; a ``kind =
    "hayhooks"`` system asks it one question at two windows."""
    from pathlib import Path

    from haystack import Document
    from haystack.components.preprocessors import DocumentSplitter

    from fabnb.core.process import answers_http, free_port, start_process, stop_process, wait_ready
    from fabnb.experiment import Endpoint

    root = Path(__file__).resolve().parents[1]
    exp, questions, documents = _live_part(tmp_path, """
        [[systems]]
        name = "local"
        kind = "reference"
        model = "embedded"
    """, others=16)
    (tmp_path / "corpus").mkdir()
    with open(tmp_path / "corpus" / "docs.jsonl", "w") as f:
        for r in documents[["doc_id", "text"]].to_dict("records"):
            f.write(json.dumps(r) + "\n")
    llm = Endpoint("embedded").llm()
    port = free_port()
    env = {**os.environ, "FABNB_SERVE_CORPUS": str(tmp_path / "corpus"), "FABNB_SERVE_BASE_URL": llm.base_url,
           "FABNB_SERVE_MODEL": llm.model, "FABNB_SERVE_CHUNK_SIZE": "128", "FABNB_SERVE_CHUNK_OVERLAP": "16",
           "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    log = open(tmp_path / "hayhooks.log", "wb")
    proc = start_process([str(Path(sys.executable).with_name("hayhooks")), "run", "--host", "127.0.0.1", "--port",
                          str(port), "--pipelines-dir", str(root / "examples" / "hayhooks")],
                         env=env, cwd=tmp_path, stdout=log)
    try:
        state = wait_ready(proc, lambda: answers_http(f"http://127.0.0.1:{port}/status"), timeout=120)
        assert state == "ready", (tmp_path / "hayhooks.log").read_text()[-3000:]
        run = _ask_server({"name": "hh", "kind": "hayhooks", "base_url": f"http://127.0.0.1:{port}",
                           "settings": {"pipeline": "fabnb_haystack"}}, exp, questions, tmp_path)
    finally:
        stop_process(proc)
        log.close()
    frame = _answers_over_windows(run, tmp_path, tmp_path / "hayhooks.log")
    # The ids the server's documents carry: Haystack ids its chunks by content and metadata, so the same splitter
    # over the same documents gives them here.
    splitter = DocumentSplitter(split_by="word", split_length=int(0.75 * 128), split_overlap=int(0.75 * 16))
    own = {d.id for d in splitter.run([Document(content=r["text"], meta={"doc_id": r["doc_id"]})
                                       for r in documents[["doc_id", "text"]].to_dict("records")])["documents"]}
    for sources in frame["sources"]:
        assert sources and {s["id"] for s in sources} <= own
        assert {s["doc_id"] for s in sources} <= set(documents["doc_id"])


# ------------------------------------------------------------------ a framework server, live: LightRAG


def _lightrag_side_server():
    """What the embedded model cannot do for LightRAG, on loopback: ``/v1/embeddings`` by MiniLM (real vectors,
    float or base64 as asked), and the entity-extraction role's chat, scripted to report no entities (the
    embedded 270M model would take minutes per chunk to write garbage entities; naive mode never reads them)."""
    import base64

    import numpy as np

    from fabnb.rag import minilm_embedder

    embed = minilm_embedder()

    def reply(request, n):
        if "input" in request:
            texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
            vectors = np.asarray(embed(texts), dtype=np.float32)
            data = [{"object": "embedding", "index": i,
                     "embedding": base64.b64encode(v.tobytes()).decode() if request.get("encoding_format") ==
                     "base64" else v.tolist()} for i, v in enumerate(vectors)]
            return 200, {"object": "list", "data": data, "model": request.get("model", "minilm"),
                         "usage": {"prompt_tokens": 0, "total_tokens": 0}}, {}
        return 200, completion("<|COMPLETE|>"), {}

    return StubServer(reply)


@pytest.mark.frameworks
@pytest.mark.model
def test_a_lightrag_server_answers_on_the_embedded_model_and_the_store_holds_its_own_chunk_ids(tmp_path,
                                                                                                fab_bench_dir):
    """A real ``lightrag-server`` (started here on loopback, stopped at the end) answers with the embedded model
    (its query role) over part of the FAB-Bench corpus inserted through its API; a ``kind = "lightrag"`` system
    asks one question at two windows, and the stored source ids are the chunk ids LightRAG keeps."""
    import urllib.request
    from pathlib import Path

    import llama_index.core

    from fabnb.core.process import answers_http, free_port, start_process, stop_process, wait_ready
    from fabnb.experiment import Endpoint

    exp, questions, documents = _live_part(tmp_path, """
        [[systems]]
        name = "local"
        kind = "reference"
        model = "embedded"
    """, others=8, windows=(2, 3))  # LightRAG's own prompt and buffer take about 950 tokens of each
    llm = Endpoint("embedded").llm()
    port = free_port()
    work = tmp_path / "lightrag"
    with _lightrag_side_server() as side:
        env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port), "WORKING_DIR": str(work / "store"),
               "INPUT_DIR": str(work / "inputs"), "LLM_BINDING": "openai", "LLM_BINDING_HOST": llm.base_url,
               "LLM_MODEL": llm.model, "LLM_BINDING_API_KEY": "none", "OPENAI_LLM_MAX_TOKENS": "128",
               "EXTRACT_LLM_BINDING": "openai", "EXTRACT_LLM_BINDING_HOST": side.base_url,
               "EXTRACT_LLM_MODEL": "scripted", "EXTRACT_LLM_BINDING_API_KEY": "none",
               "EMBEDDING_BINDING": "openai", "EMBEDDING_BINDING_HOST": side.base_url,
               "EMBEDDING_MODEL": "all-MiniLM-L6-v2", "EMBEDDING_DIM": "384", "EMBEDDING_BINDING_API_KEY": "none",
               "CHUNK_SIZE": "128", "CHUNK_OVERLAP_SIZE": "16", "MAX_ASYNC": "1", "WORKERS": "1",
               "TIKTOKEN_CACHE_DIR": str(Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"),
               "ENABLE_LLM_CACHE_FOR_EXTRACT": "false", "HF_HUB_OFFLINE": "1", "LOG_LEVEL": "WARNING"}
        log = open(tmp_path / "lightrag.log", "wb")
        server = f"http://127.0.0.1:{port}"
        proc = start_process([str(Path(sys.executable).with_name("lightrag-server"))], env=env, cwd=tmp_path,
                             stdout=log)
        try:
            state = wait_ready(proc, lambda: answers_http(f"{server}/health"), timeout=180)
            assert state == "ready", (tmp_path / "lightrag.log").read_text()[-3000:]
            body = json.dumps({"texts": list(documents["text"]), "file_sources": list(documents["doc_id"])})
            request = urllib.request.Request(f"{server}/documents/texts", body.encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as r:
                track = json.load(r)["track_id"]
            for _ in range(600):
                with urllib.request.urlopen(f"{server}/documents/track_status/{track}", timeout=10) as r:
                    # 1.5.7 names the states by their enum ("DocStatus.PROCESSED"), later versions by value
                    summary = {k.split(".")[-1].lower(): v for k, v in json.load(r)["status_summary"].items()}
                if sum(summary.values()) == len(documents) and set(summary) <= {"processed", "failed"}:
                    break
                time.sleep(0.5)
            assert summary == {"processed": len(documents)}, (summary, (tmp_path / "lightrag.log").read_text()[-3000:])
            run = _ask_server({"name": "lr", "kind": "lightrag", "base_url": server,
                               "settings": {"chunk_size": 128}}, exp, questions, tmp_path)
        finally:
            stop_process(proc)
            log.close()
    frame = _answers_over_windows(run, tmp_path, tmp_path / "lightrag.log")
    stored = json.loads((work / "store" / "kv_store_text_chunks.json").read_text())  # LightRAG's own chunks
    for sources in frame["sources"]:
        assert sources and {s["id"] for s in sources} <= set(stored)
        assert {s["doc_id"] for s in sources} <= set(documents["doc_id"])
        assert all(stored[s["id"]]["content"] == s["text"] for s in sources)
