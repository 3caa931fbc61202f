"""TF-IDF vectors of chunks and cosine neighbours (FAB-Bench Section 3.2).

Vectors are scikit-learn's TF-IDF (smooth idf, L2-normalised rows, English stop
words), kept sparse. Neighbour searches multiply the sparse corpus by one dense
block of query rows at a time, the block sized so that it stays under
:data:`BLOCK_BYTES` (256 MB) at any corpus size: memory never grows with
``n_chunks x n_chunks``.

:func:`vectorize` runs in one process or, with ``scheduler="dask"``, counts
terms per partition on Dask and merges the document frequencies; the workers
then count, weigh and normalize their partitions, and only the final rows come
back. The vocabulary, idf and vectors come out the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ['BLOCK_BYTES', 'ChunkVectors', 'STOP_WORDS', 'TOKEN_PATTERN', 'neighbours', 'vectorize']

STOP_WORDS = "english"
TOKEN_PATTERN = r"(?u)\b\w\w+\b"


@dataclass
class ChunkVectors:
    """TF-IDF vectors of chunks.

    Attributes
    ----------
    chunk_ids, doc_ids : ndarray
        Row labels.
    matrix : scipy.sparse.csr_matrix
        One L2-normalised row per chunk (float32).
    vocabulary : dict
        term -> column.
    idf : ndarray
        Inverse document frequency per column.
    """

    chunk_ids: np.ndarray
    doc_ids: np.ndarray
    matrix: sp.csr_matrix
    vocabulary: dict
    idf: np.ndarray

    def __len__(self) -> int:
        return self.matrix.shape[0]

    @cached_property
    def doc_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(an integer code per row, the document id of each code): ``pd.factorize(doc_ids)``, once."""
        return pd.factorize(self.doc_ids)

    def row(self, chunk_id: str) -> int:
        """Row index of a chunk id."""
        hits = np.flatnonzero(self.chunk_ids == chunk_id)
        if not len(hits):
            raise KeyError(f"no chunk {chunk_id!r}")
        return int(hits[0])

    def transform(self, texts) -> sp.csr_matrix:
        """Vectors of new texts (questions, queries) in this vocabulary."""
        counts = _counter(self.vocabulary).transform(list(texts))
        return _weigh(counts, self.idf)

    def cosine(self, a, b) -> np.ndarray:
        """Cosine between rows ``a`` and rows ``b`` (arrays of row indices) as a dense array."""
        return (self.matrix[np.atleast_1d(a)] @ self.matrix[np.atleast_1d(b)].T).toarray()


def _counter(vocabulary=None):
    from sklearn.feature_extraction.text import CountVectorizer

    return CountVectorizer(stop_words=STOP_WORDS, token_pattern=TOKEN_PATTERN, vocabulary=vocabulary,
                           dtype=np.float32)


def _document_frequencies(texts) -> dict:
    """term -> number of texts containing it (one partition)."""
    if not len(texts):
        return {}
    try:
        counts = _counter().fit(texts)
    except ValueError:  # only stop words
        return {}
    matrix = counts.transform(texts)
    df = np.bincount(matrix.indices, minlength=matrix.shape[1])
    return dict(zip(counts.get_feature_names_out(), df.tolist()))


def _weigh(counts: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    from sklearn.preprocessing import normalize

    return normalize(sp.csr_matrix(counts.multiply(idf.astype(np.float32)[None, :])), norm="l2", copy=False)


def _merge(dicts) -> dict:
    total: dict = {}
    for d in dicts:
        for term, n in d.items():
            total[term] = total.get(term, 0) + n
    return total


def vectorize(chunks: pd.DataFrame, min_df: int = 1, scheduler: str | None = None,
              npartitions: int | None = None) -> ChunkVectors:
    """TF-IDF vectors of ``chunks`` (a frame with chunk_id, doc_id, text).

    Parameters
    ----------
    min_df : int
        Drop terms in fewer chunks than this.
    scheduler : None or "dask"
        Count document frequencies and build rows per Dask partition.

    Examples
    --------
    >>> import pandas as pd
    >>> ch = pd.DataFrame({"chunk_id": ["a", "b"], "doc_id": ["d", "e"],
    ...                    "text": ["plasma etching of silicon", "silicon wafer bonding"]})
    >>> v = vectorize(ch)
    >>> round(float(v.cosine([0], [1])[0, 0]), 3) > 0
    True
    """
    texts = chunks["text"].tolist()
    if scheduler is None:
        # One pass: scikit-learn's own TfidfVectorizer (the same tokens, stop words, smooth idf and L2 rows).
        from sklearn.feature_extraction.text import TfidfVectorizer

        model = TfidfVectorizer(stop_words=STOP_WORDS, token_pattern=TOKEN_PATTERN, min_df=min_df, dtype=np.float32)
        try:
            matrix = model.fit_transform(texts)
        except ValueError:  # an empty vocabulary: only stop words, or nothing
            raise ValueError("no terms left to vectorize: the chunks hold only stop words or nothing.") from None
        return ChunkVectors(chunks["chunk_id"].to_numpy(), chunks["doc_id"].to_numpy(), matrix.tocsr(),
                            {t: int(i) for t, i in model.vocabulary_.items()}, model.idf_.astype(np.float64))
    if scheduler == "dask":
        import dask.bag as db

        n = npartitions or min(len(texts), 8) or 1
        bag = db.from_sequence(texts, npartitions=n)
        df = _merge(bag.map_partitions(lambda part: [_document_frequencies(list(part))]).compute())
    else:
        raise ValueError(f"scheduler must be None or 'dask', not {scheduler!r}")
    terms = sorted(t for t, n in df.items() if n >= min_df)
    if not terms:
        raise ValueError("no terms left to vectorize: the chunks hold only stop words or nothing.")
    vocabulary = {t: i for i, t in enumerate(terms)}
    # The idf from the merged frequencies, as scikit-learn's TfidfTransformer computes it (smooth, in
    # the counts' float32): each partition then counts, weighs and normalizes on its worker, and only
    # the final rows come back. The vectors equal the single-process path's, bit for bit (tested).
    idf = np.array([df[t] for t in terms], dtype=np.float32) + np.float32(1.0)
    idf = np.log(np.full_like(idf, len(texts) + 1) / idf) + np.float32(1.0)
    parts = bag.map_partitions(lambda part: [_weighted_counts(list(part), vocabulary, idf)]).compute()
    matrix = sp.vstack(parts, format="csr")
    del parts
    return ChunkVectors(chunks["chunk_id"].to_numpy(), chunks["doc_id"].to_numpy(), matrix, vocabulary,
                        idf.astype(np.float64))


def _weighted_counts(texts: list, vocabulary: dict, idf: np.ndarray) -> sp.csr_matrix:
    """One partition's TF-IDF rows: counts times idf, L2-normalized (TfidfTransformer.transform's steps)."""
    from sklearn.preprocessing import normalize

    counts = _counter(vocabulary).transform(texts).tocsr()
    counts.data *= idf[counts.indices]
    return normalize(counts, norm="l2", copy=False)


#: A neighbour search's dense blocks (query rows x chunks, and query rows x terms, float32) stay under
#: this many bytes each.
BLOCK_BYTES = 256 * 2 ** 20


def neighbours(
    vectors: ChunkVectors,
    rows,
    k: int = 5,
    *,
    other_documents: bool = False,
    exclude_documents=None,
    farthest: bool = False,
    rng: np.random.Generator | None = None,
    block: int = 32,
) -> pd.DataFrame:
    """The ``k`` nearest (or farthest) chunks to each query row, by cosine.

    Parameters
    ----------
    rows : array of int
        Query rows of ``vectors``.
    k : int
        How many per query.
    other_documents : bool
        Only consider chunks from documents other than the query's (multi-hop links).
    exclude_documents : iterable of str, optional
        Documents never to return.
    farthest : bool
        Lowest cosine first (needle-in-haystack distractors). Ties, common at
        cosine 0, are broken by ``rng`` (seeded) so distractors vary.
    block : int
        Query rows per product, at most; fewer when a block's dense scores (rows x chunks)
        or dense queries (rows x terms) would pass :data:`BLOCK_BYTES` (256 MB), so memory
        stays bounded at any corpus size.

    Returns
    -------
    DataFrame
        query (row), query_chunk, rank (0 = best), row, chunk_id, doc_id, cosine.
    """
    rows = np.atleast_1d(np.asarray(rows, dtype=int))
    n, n_terms = vectors.matrix.shape
    block = max(1, min(block, BLOCK_BYTES // (4 * max(n, n_terms, 1))))
    # Documents as integer codes: a query's document is compared with every chunk's as integers.
    codes, labels = vectors.doc_codes
    excluded = np.isin(codes, np.flatnonzero(np.isin(labels, list(exclude_documents)))) \
        if exclude_documents is not None else None
    tiebreak = (rng or np.random.default_rng(0)).random(n) * 1e-6 if farthest else None
    kk = min(k, n)
    queries, ranks, found, cosines = [], [], [], []
    for b0 in range(0, len(rows), block):
        q = rows[b0:b0 + block]
        # The sparse corpus times a dense block of queries: no sparse intermediate of rows x chunks,
        # and no transposed copy of the corpus (which `matrix[q] @ matrix.T` makes on every call).
        sims = vectors.matrix @ vectors.matrix[q].T.toarray()  # chunks x queries, float32
        for i, query in enumerate(q):
            cos = sims[:, i]
            scores = tiebreak - cos if farthest else cos.copy()
            scores[query] = -np.inf
            if other_documents:
                scores[codes == codes[query]] = -np.inf
            if excluded is not None:
                scores[excluded] = -np.inf
            top = np.argpartition(-scores, kk - 1)[:kk] if kk < n else np.arange(n)
            order = top[np.argsort(-scores[top], kind="stable")]
            order = order[np.isfinite(scores[order])][:k]
            queries += [query] * len(order)
            ranks += range(len(order))
            found += order.tolist()
            cosines += cos[order].tolist()
    queries, found = np.asarray(queries, dtype=int), np.asarray(found, dtype=int)
    return pd.DataFrame({"query": queries, "query_chunk": vectors.chunk_ids[queries], "rank": ranks, "row": found,
                         "chunk_id": vectors.chunk_ids[found], "doc_id": vectors.doc_ids[found],
                         "cosine": np.asarray(cosines, dtype=float)},
                        columns=["query", "query_chunk", "rank", "row", "chunk_id", "doc_id", "cosine"])
