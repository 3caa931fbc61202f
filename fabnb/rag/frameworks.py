"""RAG frameworks in process: a LlamaIndex query engine, a LangChain runnable or a Haystack pipeline as a
:class:`~fabnb.rag.RAGSystem` (FAB-Bench §3.5 and §6), with the framework's own retrieval.

Two ways in, the same for each framework in :data:`FRAMEWORKS`:

- **your own pipeline**: a *factory*, ``"package.module:function"`` or a callable, given a
  :class:`FrameworkSetup` (the corpus, the endpoint fabnb resolved, and the context budget in tokens) and
  returning the query engine, runnable or pipeline you built. It is called once per context window.
- **a default pipeline** built by fabnb from the corpus with the framework's own splitter, its
  sentence-transformers integration over the kit's offline all-MiniLM-L6-v2 (the ``dense`` extra), its
  in-memory vector store and retriever, and its OpenAI-compatible chat model pointed at the endpoint. It
  retrieves deep and fills the context budget as the reference system does (:func:`pick_context`, best first).

Each answer records the contexts the framework retrieved (its own node or document ids, ``doc_id`` from the
document's metadata, text and score) and the context tokens sent. Mode B (gold context) asks the same
endpoint with the reference system's prompt: it measures the model with the gold passage, retrieval aside.

Examples
--------
A factory that is not importable is named with what was expected, before any call:

>>> load_factory("no_such_module:build", "llamaindex")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
fabnb.rag.config.RAGError: factory 'no_such_module:build': module 'no_such_module' cannot be imported (...); ...
"""

# No ``from __future__ import annotations``: Haystack reads a component's run() annotations as types.
import dataclasses
import importlib
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from ..core.tokens import count_tokens
from ..models.llm import LLMError
from .config import PROMPT_OVERHEAD, QUESTION_TOKENS, SYSTEM_PROMPT, RAGConfig, RAGError
from .kinds import Setting, SystemKind, add_kind
from .retrievers import minilm_path, pick_context
from .system import Answer, answer_from_context, check_budget, count_context

__all__ = ["FRAMEWORKS", "QUESTION_TOKENS", "SERVE_ENV", "Framework", "FrameworkRAG", "FrameworkSetup",
           "ServedPipeline", "load_factory"]


@dataclass(frozen=True)
class FrameworkSetup:
    """What a pipeline factory is given: the corpus, the endpoint, and the context window's budget.

    Attributes
    ----------
    documents : DataFrame
        The experiment's corpus, one row per document: ``doc_id``, ``text`` (and ``title``, ``source`` if known).
    base_url, model : str
        The OpenAI-compatible endpoint fabnb resolved (the embedded model's server for ``model = "embedded"``).
    api_key : str or None
        Never shown in the repr.
    context_tokens : int
        Tokens of retrieved context the pipeline may send: the window, less the output budget, the prompt's
        overhead and :data:`QUESTION_TOKENS`.
    max_output_tokens : int
    temperature : float
    n_snippets : int or None
        At most this many retrieved chunks (``[contexts] n_snippets``).
    threshold : float
        Minimum similarity of a chunk used (``[contexts] threshold``).
    chunk_size, chunk_overlap : int
        ``[corpus]``'s chunking, in tokens, for the framework's own splitter.
    """

    documents: pd.DataFrame = field(repr=False)
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    context_tokens: int = 2048
    max_output_tokens: int = 512
    temperature: float = 0.0
    n_snippets: int | None = None
    threshold: float = 0.0
    chunk_size: int = 512
    chunk_overlap: int = 128
    timeout: float = 120.0

    @property
    def window_tokens(self) -> int:
        """The whole window in tokens (what a framework's model should be told its context window is)."""
        return self.context_tokens + self.max_output_tokens + PROMPT_OVERHEAD + QUESTION_TOKENS

    def depth(self, n_chunks: int) -> int:
        """How many chunks to retrieve so that the budget can be filled: twice what fits, at least 8."""
        return max(1, min(n_chunks, max(8, 2 * math.ceil(self.context_tokens / max(1, self.chunk_size)))))

    def fill(self, texts: list[str], scores: list) -> list[int]:
        """The positions of the retrieved chunks (best first) that go into the prompt, as the reference system
        picks them (:func:`pick_context`)."""
        scores = [float(s) if s is not None else 0.0 for s in scores]
        return pick_context(scores, [count_tokens(t) for t in texts], self.context_tokens, self.n_snippets,
                            self.threshold)


# ------------------------------------------------------------------ reading each framework's answer


def _source(id_, doc_id, text, score) -> dict:
    return {"id": str(id_), "doc_id": "" if doc_id is None else str(doc_id), "text": str(text or ""),
            "score": None if score is None else float(score)}


def _read_llamaindex(engine, question: str) -> tuple[str, list[dict]]:
    response = engine.query(question)
    sources = [_source(n.node.node_id, n.node.metadata.get("doc_id", n.node.ref_doc_id), n.node.get_content(),
                       n.score) for n in (getattr(response, "source_nodes", None) or [])]
    return str(getattr(response, "response", "") or ""), sources


def _read_langchain(runnable, question: str) -> tuple[str, list[dict]]:
    out = runnable.invoke(question)
    if not isinstance(out, Mapping) or "answer" not in out or "context" not in out:
        raise RAGError(f"the runnable returned {type(out).__name__}"
                       + (f" with keys {sorted(out)}" if isinstance(out, Mapping) else "")
                       + "; expected a dict with 'answer' and 'context' (the retrieved Documents), e.g. "
                       "RunnableParallel(context=retriever, question=RunnablePassthrough()).assign(answer=...).",
                       "bad-response")
    answer = out["answer"]
    answer = getattr(answer, "content", answer)
    docs = out["context"] or []
    sources = [_source(getattr(d, "id", None) or d.metadata.get("id", i), d.metadata.get("doc_id",
                       d.metadata.get("source")), d.page_content, d.metadata.get("score")) for i, d in enumerate(docs)]
    return str(answer or ""), sources


_QUESTION_INPUTS = ("query", "question", "text")


def _run_haystack(pipeline, question: str) -> tuple[str, list]:
    """A Haystack pipeline's answer and the Documents it sent to the model (the last component that outputs
    documents: the budget, or the retriever)."""
    import networkx

    data, other = {}, []
    for component, sockets in pipeline.inputs().items():
        for socket, info in sockets.items():
            if socket in _QUESTION_INPUTS:
                data.setdefault(component, {})[socket] = question
            elif info.get("is_mandatory"):
                other.append(f"{component}.{socket}")
    if other or not data:
        raise RAGError(f"the pipeline's open inputs {other or '(none)'} cannot be given a question; fabnb gives the "
                       f"question to every open input named {', '.join(_QUESTION_INPUTS)}.", "bad-response")
    order = list(networkx.topological_sort(pipeline.graph))
    with_docs = [c for c in order if "documents" in pipeline.graph.nodes[c].get("output_sockets", {})]
    out = pipeline.run(data, include_outputs_from=set(with_docs))
    answer = ""
    for component in reversed(order):
        result = out.get(component) or {}
        if result.get("replies"):
            reply = result["replies"][0]
            answer = getattr(reply, "text", reply)
            break
        if result.get("answers"):
            answer = getattr(result["answers"][0], "data", result["answers"][0])
            break
    docs = next((out[c]["documents"] for c in reversed(with_docs) if c in out and "documents" in out[c]), [])
    return str(answer or ""), list(docs)


def _read_haystack(pipeline, question: str) -> tuple[str, list[dict]]:
    answer, docs = _run_haystack(pipeline, question)
    return answer, [_source(d.id, (d.meta or {}).get("doc_id"), d.content, d.score) for d in docs]


# ------------------------------------------------------------------ the default pipelines


_INDEXES: dict = {}
_INDEX_LOCK = threading.Lock()


def _index(kind: str, setup: FrameworkSetup, build: Callable):
    """The framework's index of the corpus, built once per process for a corpus and chunking."""
    docs = setup.documents
    key = (kind, tuple(docs["doc_id"]), int(docs["text"].str.len().sum()), setup.chunk_size, setup.chunk_overlap)
    with _INDEX_LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = build()
        return _INDEXES[key]


def _records(setup: FrameworkSetup) -> list[tuple[str, str, dict]]:
    """(doc_id, text, metadata) per document of the corpus. The metadata is the ``doc_id`` alone: LlamaIndex's
    splitter takes a node's metadata out of its chunk size, and a title and a path made its chunks under 50 tokens
    at ``chunk_size = 128`` (three times the nodes to embed)."""
    return [(str(r["doc_id"]), str(r["text"]), {"doc_id": str(r["doc_id"])})
            for r in setup.documents[["doc_id", "text"]].to_dict("records")]


_CLASSES: dict = {}


def _llamaindex_budget():
    if "llamaindex" not in _CLASSES:
        from llama_index.core.postprocessor.types import BaseNodePostprocessor

        class ContextBudget(BaseNodePostprocessor):
            """Keeps the retrieved nodes that fill the window's context budget, best first."""

            setup: object = None

            def _postprocess_nodes(self, nodes, query_bundle=None):
                keep = self.setup.fill([n.node.get_content() for n in nodes], [n.score for n in nodes])
                return [nodes[i] for i in keep]

        _CLASSES["llamaindex"] = ContextBudget
    return _CLASSES["llamaindex"]


def default_llamaindex(setup: FrameworkSetup):
    """LlamaIndex: ``SentenceSplitter`` chunks, ``HuggingFaceEmbedding`` (MiniLM), ``VectorStoreIndex``, a
    retriever deep enough to fill the budget, and ``OpenAILike`` answering once (``simple_summarize``)."""
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers import get_response_synthesizer
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.openai_like import OpenAILike

    def build():
        embed = HuggingFaceEmbedding(model_name=str(minilm_path()))
        docs = [Document(text=text, doc_id=doc_id, metadata=meta) for doc_id, text, meta in _records(setup)]
        splitter = SentenceSplitter(chunk_size=setup.chunk_size, chunk_overlap=setup.chunk_overlap)
        return VectorStoreIndex.from_documents(docs, embed_model=embed, transformations=[splitter])

    index = _index("llamaindex", setup, build)
    llm = OpenAILike(model=setup.model, api_base=setup.base_url, api_key=setup.api_key or "none",
                     is_chat_model=True, context_window=setup.window_tokens, max_tokens=setup.max_output_tokens,
                     temperature=setup.temperature, timeout=setup.timeout, max_retries=0)
    retriever = index.as_retriever(similarity_top_k=setup.depth(len(index.docstore.docs)))
    synthesizer = get_response_synthesizer(llm=llm, response_mode="simple_summarize")
    return RetrieverQueryEngine(retriever=retriever, response_synthesizer=synthesizer,
                                node_postprocessors=[_llamaindex_budget()(setup=setup)])


def default_langchain(setup: FrameworkSetup):
    """LangChain: ``RecursiveCharacterTextSplitter`` chunks (4 characters a token), ``HuggingFaceEmbeddings``
    (MiniLM), ``InMemoryVectorStore``, and an LCEL chain returning ``{"context", "question", "answer"}`` through
    ``ChatOpenAI``."""
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_openai import ChatOpenAI
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    def build():
        store = InMemoryVectorStore(HuggingFaceEmbeddings(model_name=str(minilm_path())))
        splitter = RecursiveCharacterTextSplitter(chunk_size=4 * setup.chunk_size,
                                                  chunk_overlap=4 * setup.chunk_overlap)
        chunks = splitter.split_documents([Document(page_content=t, metadata=m) for _, t, m in _records(setup)])
        store.add_documents(chunks)
        return store, len(chunks)

    store, n_chunks = _index("langchain", setup, build)

    def retrieve(question: str) -> list:
        hits = store.similarity_search_with_score(question, k=setup.depth(n_chunks))
        docs = [d.model_copy(update={"metadata": {**d.metadata, "score": float(s)}}) for d, s in hits]
        keep = setup.fill([d.page_content for d in docs], [d.metadata["score"] for d in docs])
        return [docs[i] for i in keep]

    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM_PROMPT), ("human", "Context:\n{context}\n\n"
                                                                           "Question: {question}\n\nAnswer:")])
    # llama.cpp's server reads max_tokens, which ChatOpenAI sends as max_completion_tokens: send both.
    llm = ChatOpenAI(model=setup.model, base_url=setup.base_url, api_key=setup.api_key or "none",
                     max_tokens=setup.max_output_tokens, temperature=setup.temperature, timeout=setup.timeout,
                     max_retries=0, extra_body={"max_tokens": setup.max_output_tokens})
    joined = RunnableLambda(lambda x: {"context": "\n\n".join(d.page_content for d in x["context"]),
                                       "question": x["question"]})
    return RunnableParallel(context=RunnableLambda(retrieve), question=RunnablePassthrough()).assign(
        answer=joined | prompt | llm | StrOutputParser())


def _haystack_budget():
    if "haystack" not in _CLASSES:
        from haystack import Document, component

        @component
        class ContextBudget:
            """Keeps the retrieved documents that fill the window's context budget, best first."""

            def __init__(self, setup):
                self.setup = setup

            @component.output_types(documents=list[Document])
            def run(self, documents: list[Document]):
                keep = self.setup.fill([d.content or "" for d in documents], [d.score for d in documents])
                return {"documents": [documents[i] for i in keep]}

        _CLASSES["haystack"] = ContextBudget
    return _CLASSES["haystack"]


def default_haystack(setup: FrameworkSetup):
    """Haystack: ``DocumentSplitter`` chunks (by word, 0.75 words a token), the sentence-transformers
    integration's embedders (MiniLM), ``InMemoryEmbeddingRetriever``, a budget component, ``ChatPromptBuilder``
    and ``OpenAIChatGenerator``."""
    import os

    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # else it looks up a telemetry host
    from haystack import Document, Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.preprocessors import DocumentSplitter
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import Secret
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
        SentenceTransformersTextEmbedder,
    )

    def build():
        store = InMemoryDocumentStore()
        splitter = DocumentSplitter(split_by="word", split_length=max(1, int(0.75 * setup.chunk_size)),
                                    split_overlap=int(0.75 * setup.chunk_overlap))
        embedder = SentenceTransformersDocumentEmbedder(model=str(minilm_path()), progress_bar=False)
        embedder.warm_up()
        docs = splitter.run([Document(content=t, meta=m) for _, t, m in _records(setup)])["documents"]
        store.write_documents(embedder.run(docs)["documents"])
        return store

    store = _index("haystack", setup, build)
    # One per pipeline (Haystack refuses a component in two); the model itself is loaded once and shared.
    text_embedder = SentenceTransformersTextEmbedder(model=str(minilm_path()), progress_bar=False)
    text_embedder.warm_up()
    template = [ChatMessage.from_system(SYSTEM_PROMPT), ChatMessage.from_user(
        "Context:\n{% for d in documents %}{{ d.content }}\n\n{% endfor %}Question: {{ question }}\n\nAnswer:")]
    pipeline = Pipeline()
    pipeline.add_component("embedder", text_embedder)
    pipeline.add_component("retriever", InMemoryEmbeddingRetriever(store, top_k=setup.depth(store.count_documents())))
    pipeline.add_component("budget", _haystack_budget()(setup))
    pipeline.add_component("prompt_builder", ChatPromptBuilder(template=template, required_variables="*"))
    pipeline.add_component("llm", OpenAIChatGenerator(
        api_key=Secret.from_token(setup.api_key or "none"), model=setup.model, api_base_url=setup.base_url,
        timeout=setup.timeout, max_retries=0,
        generation_kwargs={"max_tokens": setup.max_output_tokens, "temperature": setup.temperature}))
    pipeline.connect("embedder.embedding", "retriever.query_embedding")
    pipeline.connect("retriever.documents", "budget.documents")
    pipeline.connect("budget.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "llm.messages")
    return pipeline


# ------------------------------------------------------------------ a default pipeline served


#: The environment a served pipeline reads (:meth:`ServedPipeline.from_env`), as hayhooks starts it.
SERVE_ENV = {"FABNB_SERVE_CORPUS": "the corpus folder (what fabnb.corpus.collection.load_corpus reads)",
             "FABNB_SERVE_BASE_URL": "the OpenAI-compatible endpoint's URL (http://host:port/v1)",
             "FABNB_SERVE_MODEL": "the model name it serves",
             "FABNB_SERVE_API_KEY_ENV": "optional: the name of the variable that holds its key",
             "FABNB_SERVE_CHUNK_SIZE": "optional: tokens per chunk (512)",
             "FABNB_SERVE_CHUNK_OVERLAP": "optional: tokens of overlap (128)",
             "FABNB_SERVE_FACTORY": "optional: your pipeline's factory, package.module:function"}


class ServedPipeline:
    """A Haystack pipeline (fabnb's default, or your factory's) behind a framework server: the hayhooks wrapper
    ``examples/hayhooks/fabnb_haystack/pipeline_wrapper.py`` answers each ``POST /fabnb_haystack/run`` with
    :meth:`run`, which :class:`fabnb.rag.Hayhooks` reads.

    One pipeline per context budget, made when first asked for and kept (the corpus is indexed once), so a sweep
    across windows through the server sends what each window holds.

    Parameters
    ----------
    setup : FrameworkSetup
        The corpus and the endpoint; its budget is replaced per call.
    factory : str or callable, optional
        Default: :func:`default_haystack`.
    """

    def __init__(self, setup: FrameworkSetup, factory=None):
        self.setup = setup
        self.factory = load_factory(factory, "haystack") if isinstance(factory, str) else factory or default_haystack
        name = factory if isinstance(factory, str) else getattr(self.factory, "__qualname__", repr(self.factory))
        self._pipelines = _Pipelines(self.factory, name, FRAMEWORKS["haystack"], "the served pipeline")

    @classmethod
    def from_env(cls, environ: Mapping | None = None) -> "ServedPipeline":
        """The served pipeline :data:`SERVE_ENV` names; :class:`RAGError` naming a variable that is missing or
        wrong."""
        import os

        from ..corpus.collection import load_corpus

        env = os.environ if environ is None else environ
        missing = [k for k in ("FABNB_SERVE_CORPUS", "FABNB_SERVE_BASE_URL", "FABNB_SERVE_MODEL") if not env.get(k)]
        if missing:
            raise RAGError("a served pipeline needs " + "; ".join(f"{k} ({SERVE_ENV[k]})" for k in missing)
                           + " in the server's environment.", "bad-factory")
        key_env = env.get("FABNB_SERVE_API_KEY_ENV")
        try:
            sizes = [int(env.get(k, d))
                     for k, d in (("FABNB_SERVE_CHUNK_SIZE", 512), ("FABNB_SERVE_CHUNK_OVERLAP", 128))]
        except ValueError:
            raise RAGError("FABNB_SERVE_CHUNK_SIZE and FABNB_SERVE_CHUNK_OVERLAP must be whole numbers of tokens.",
                           "bad-factory") from None
        corpus = load_corpus(env["FABNB_SERVE_CORPUS"])
        setup = FrameworkSetup(corpus.documents, env["FABNB_SERVE_BASE_URL"], env["FABNB_SERVE_MODEL"],
                               env.get(key_env) if key_env else None, chunk_size=sizes[0], chunk_overlap=sizes[1])
        return cls(setup, env.get("FABNB_SERVE_FACTORY") or None)

    def pipeline(self, context_tokens: int, max_tokens: int):
        """The pipeline of one budget, made once."""
        return self._pipelines.get(dataclasses.replace(self.setup, context_tokens=int(context_tokens),
                                                       max_output_tokens=int(max_tokens)))

    def run(self, question: str, context_tokens: int = 2048, max_tokens: int = 512) -> dict:
        """``{"answer", "documents", "context_tokens"}``: the answer, the Documents sent to the model as Haystack
        writes them (``id``, ``content``, ``score``, ``meta``; no embedding), and their tokens."""
        answer, docs = _run_haystack(self.pipeline(context_tokens, max_tokens), question)
        documents = [{"id": d.id, "content": d.content or "", "score": d.score, "meta": dict(d.meta or {})}
                     for d in docs]
        return {"answer": answer, "documents": documents,
                "context_tokens": count_context(d["content"] for d in documents)}


# ------------------------------------------------------------------ the registry


def _is_haystack_pipeline(obj) -> bool:
    return type(obj).__module__.startswith("haystack") and hasattr(obj, "run") and hasattr(obj, "inputs")


@dataclass(frozen=True)
class Framework:
    """One framework: what to import, the extra that installs it, what a factory must return, how its answer
    and contexts are read, and its default pipeline."""

    label: str
    requires: tuple[str, ...]
    extra: str
    package: str
    expects: str
    accepts: Callable = field(repr=False)
    read: Callable = field(repr=False)
    default: Callable = field(repr=False)

    def missing(self) -> str | None:
        """The install command when the framework is not installed here, else None."""
        import importlib.util

        for module in self.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return f'pip install "fabnb[{self.extra}]"'
        return None


#: Every in-process framework: the experiment file's kinds, the checks, the doctor and the docs read this.
FRAMEWORKS: dict[str, Framework] = {
    "llamaindex": Framework("LlamaIndex", ("llama_index.core", "llama_index.llms.openai_like",
                                           "llama_index.embeddings.huggingface"), "llamaindex", "llama-index-core",
                            "a LlamaIndex query engine (an object with .query(question) returning a Response)",
                            lambda obj: callable(getattr(obj, "query", None)), _read_llamaindex, default_llamaindex),
    "langchain": Framework("LangChain", ("langchain_core", "langchain_openai", "langchain_huggingface",
                                         "langchain_text_splitters"), "langchain", "langchain-core",
                           "a LangChain runnable whose .invoke(question) returns {'answer', 'context'}",
                           lambda obj: callable(getattr(obj, "invoke", None)), _read_langchain, default_langchain),
    "haystack": Framework("Haystack", ("haystack", "haystack_integrations.components.embedders.sentence_transformers"),
                          "haystack", "haystack-ai", "a Haystack Pipeline (haystack.Pipeline)", _is_haystack_pipeline,
                          _read_haystack, default_haystack),
}

for _kind, _fw in FRAMEWORKS.items():  # each framework is a system kind of the file, its pipeline a setting
    add_kind(SystemKind(_kind, f"a {_fw.label} pipeline in process over the file's model (fabnb's default, or yours)",
                        {"factory": Setting("factory", str, False, None, "\"package.module:function\" making your "
                                            f"own pipeline from a FrameworkSetup: {_fw.expects}")},
                        framework=_kind, module=__name__,
                        check_installed=lambda fw=_fw: fw.missing()))  # looked up when asked: installed since?
del _kind, _fw


def framework(kind: str) -> Framework:
    """The :class:`Framework` of ``kind``, installed, or :class:`RAGError` with the install command."""
    if kind not in FRAMEWORKS:
        raise RAGError(f"{kind!r} is not a framework; allowed: {', '.join(FRAMEWORKS)}.", "bad-framework")
    fw = FRAMEWORKS[kind]
    missing = fw.missing()
    if missing:
        raise RAGError(f"{fw.label} is not installed here; install it with: {missing}", "missing-framework")
    return fw


def load_factory(spec: str, kind: str) -> Callable:
    """The callable named ``"package.module:function"``, or :class:`RAGError` naming the factory, the module
    and what was expected."""
    fw = FRAMEWORKS[kind]
    module_name, _, attr = str(spec).partition(":")
    hint = f"expected \"package.module:function\", a function that takes a FrameworkSetup and returns {fw.expects}."
    if not module_name or not attr:
        raise RAGError(f"factory {spec!r} is not of the form \"package.module:function\"; {hint}", "bad-factory")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a user's module may fail in any way; it is named
        raise RAGError(f"factory {spec!r}: module {module_name!r} cannot be imported ({type(exc).__name__}: "
                       f"{exc}); {hint} Is its folder on PYTHONPATH?", "bad-factory") from None
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise RAGError(f"factory {spec!r}: module {module_name!r} has no callable {attr!r}; {hint}", "bad-factory")
    return target


def _endpoint_cause(exc: Exception) -> str:
    """The kit's causes for an endpoint failure raised from inside a framework (openai's exceptions)."""
    name = type(exc).__name__
    if name == "APITimeoutError" or isinstance(exc, TimeoutError):
        return "timeout"
    if name == "APIConnectionError" or isinstance(exc, ConnectionError):
        return "connection"
    status = getattr(exc, "status_code", None)
    return f"http-{status}" if isinstance(status, int) else f"framework-{name}"


class _Pipelines:
    """A factory's pipelines, one per budget: made when first asked for, checked, and kept (a corpus is indexed
    once). ``owner`` names who asks in the errors (a system, or the served pipeline)."""

    def __init__(self, factory: Callable, factory_name: str, fw: Framework, owner: str):
        self.factory, self.factory_name, self.framework, self.owner = factory, factory_name, fw, owner
        self._made: dict = {}
        self._lock = threading.Lock()

    def get(self, setup: FrameworkSetup):
        key = (setup.context_tokens, setup.max_output_tokens, setup.temperature, setup.n_snippets, setup.threshold)
        with self._lock:
            if key not in self._made:
                try:
                    made = self.factory(setup)
                except RAGError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a user's factory may fail in any way; it is named
                    raise RAGError(f"{self.owner}: factory {self.factory_name!r} raised {type(exc).__name__}: "
                                   f"{exc}", "bad-factory") from None
                if not self.framework.accepts(made):
                    raise RAGError(f"{self.owner}: factory {self.factory_name!r} returned {type(made).__name__}; "
                                   f"expected {self.framework.expects}.", "bad-factory")
                self._made[key] = made
            return self._made[key]


class FrameworkRAG:
    """A framework pipeline as a :class:`~fabnb.rag.RAGSystem`.

    Parameters
    ----------
    kind : str
        A key of :data:`FRAMEWORKS`: ``"llamaindex"``, ``"langchain"`` or ``"haystack"``.
    setup : FrameworkSetup
        The corpus and endpoint; the window's budget is set per configuration.
    llm : fabnb.models.llm.LLM
        The same endpoint, for mode B (gold context) and the model label.
    factory : str or callable, optional
        Your pipeline's factory (``"package.module:function"``); default: the framework's default pipeline.
    name : str, optional
    """

    sources_exposed = True

    def __init__(self, kind: str, setup: FrameworkSetup, llm, factory=None, name: str | None = None):
        self.kind, self.framework = kind, framework(kind)
        if isinstance(factory, str):
            self.factory, self.factory_name = load_factory(factory, kind), factory
        elif factory is not None:
            self.factory, self.factory_name = factory, getattr(factory, "__qualname__", repr(factory))
        else:
            self.factory, self.factory_name = self.framework.default, f"{self.framework.label} default"
        self.setup, self.llm, self.model = setup, llm, llm.model
        self.name = name or kind
        self._pipelines = _Pipelines(self.factory, self.factory_name, self.framework, self.name)

    def __repr__(self) -> str:
        return (f"FrameworkRAG(name={self.name!r}, kind={self.kind!r}, factory={self.factory_name!r}, "
                f"model={self.model!r})")

    def setup_for(self, config: RAGConfig) -> FrameworkSetup:
        """The :class:`FrameworkSetup` of one configuration (its context budget in tokens)."""
        return dataclasses.replace(self.setup, context_tokens=config.context_tokens,
                                   max_output_tokens=config.max_output_tokens,
                                   temperature=config.temperature, n_snippets=config.n_snippets,
                                   threshold=config.threshold)

    def pipeline(self, config: RAGConfig):
        """The pipeline of one configuration, made by the factory once and checked."""
        return self._pipelines.get(self.setup_for(config))

    def prepare(self, configs) -> None:
        """Makes and checks every configuration's pipeline before any question is asked."""
        for config in configs:
            self.pipeline(config)

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        if gold_context is not None:
            return answer_from_context(self.llm, question, gold_context, config)
        if check_budget(question, config) > QUESTION_TOKENS:
            raise RAGError(f"the question has more than the {QUESTION_TOKENS} tokens a framework pipeline keeps "
                           "for it; shorten it or ask it through the reference system.", "over-budget")
        pipeline = self.pipeline(config)
        start = time.perf_counter()
        try:
            text, sources = self.framework.read(pipeline, question)
        except (RAGError, LLMError):
            raise
        except Exception as exc:  # noqa: BLE001 - a framework's failure is recorded with its cause; the run goes on
            raise RAGError(f"{self.name} ({self.framework.label}): {type(exc).__name__}: {str(exc)[:300]}",
                           _endpoint_cause(exc)) from None
        if not text.strip():
            raise RAGError(f"{self.name} ({self.framework.label}) returned an empty answer.", "empty-answer")
        context_tokens = count_context(s["text"] for s in sources or [])
        return Answer(text, sources, time.perf_counter() - start, 0, 0, context_tokens)
