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

:func:`vectorize_corpus` is the way out for a corpus whose chunks do not fit in one process: it chunks
and vectorizes on a ``dask.distributed`` cluster in one go, the chunk texts and term counts staying on
the workers; the client receives the chunk rows (without their texts, if asked) and the final sparse
matrix, assembled in one allocation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ['BLOCK_BYTES', 'ChunkVectors', 'STOP_WORDS', 'TOKEN_PATTERN', 'neighbours', 'vectorize',
           'vectorize_corpus']

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
    # The idf from the merged frequencies: each partition then counts, weighs and normalizes on its
    # worker, and only the final rows come back. The vectors equal the single-process path's, bit for
    # bit (tested).
    vocabulary, idf = _idf(df, len(texts), min_df)
    parts = bag.map_partitions(lambda part: [_weighted_counts(list(part), vocabulary, idf)]).compute()
    matrix = sp.vstack(parts, format="csr")
    del parts
    return ChunkVectors(chunks["chunk_id"].to_numpy(), chunks["doc_id"].to_numpy(), matrix, vocabulary,
                        idf.astype(np.float64))


def _idf(df: dict, n_texts: int, min_df: int) -> tuple[dict, np.ndarray]:
    """The vocabulary (sorted terms in at least ``min_df`` texts) and its idf, as scikit-learn's
    TfidfTransformer computes it (smooth, in the counts' float32)."""
    terms = sorted(t for t, n in df.items() if n >= min_df)
    if not terms:
        raise ValueError("no terms left to vectorize: the chunks hold only stop words or nothing.")
    vocabulary = {t: i for i, t in enumerate(terms)}
    idf = np.array([df[t] for t in terms], dtype=np.float32) + np.float32(1.0)
    return vocabulary, np.log(np.full_like(idf, n_texts + 1) / idf) + np.float32(1.0)


def _weighted_counts(texts: list, vocabulary: dict, idf: np.ndarray) -> sp.csr_matrix:
    """One partition's TF-IDF rows: counts times idf, L2-normalized (TfidfTransformer.transform's steps)."""
    from sklearn.preprocessing import normalize

    counts = _counter(vocabulary).transform(texts).tocsr()
    counts.data *= idf[counts.indices]
    return normalize(counts, norm="l2", copy=False)


def _chunk_part(records: list, size: int, overlap: int, name: str) -> pd.DataFrame:
    """One partition of documents as chunk rows (on a worker)."""
    from .collection import CHUNK_ROW_COLUMNS, chunk_records

    return pd.DataFrame(chunk_records(records, size, overlap, name), columns=CHUNK_ROW_COLUMNS)


def _part_frequencies(part: pd.DataFrame) -> dict:
    return _document_frequencies(part["text"].tolist())


def _part_rows(part: pd.DataFrame, vocabulary: dict, idf: np.ndarray, text: bool):
    """One partition's chunk rows (without text unless asked) and TF-IDF rows (on a worker)."""
    rows = _weighted_counts(part["text"].tolist(), vocabulary, idf)
    return (part if text else part.drop(columns="text")), rows


def _released_results(futures):
    """Each future's result as it comes, the future released after it (its data leaves the worker)."""
    for future in futures:
        yield future.result()
        future.release()


def _partitions(records: list, n: int) -> list:
    """``records`` (doc_id, text) cut into at most ``n`` runs of consecutive documents of about equal text."""
    ends = np.cumsum([len(t) for _, t in records])
    if not len(ends):
        return []
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n) / n, side="right")
    bounds = [0, *sorted(set(int(c) for c in cuts if 0 < c < len(records))), len(records)]
    return [records[a:b] for a, b in zip(bounds, bounds[1:])]


def vectorize_corpus(corpus, size: int = 512, overlap: int = 128, *, tokenizer_name: str = "cl100k_base",
                     min_df: int = 1, npartitions: int | None = None, text: bool = True):
    """Chunk and vectorize ``corpus`` on the running ``dask.distributed`` cluster, the chunk texts and
    term counts staying on the workers.

    The same chunks as :func:`fabnb.corpus.collection.chunk_corpus` and the same vectors as :func:`vectorize`
    (bit for bit), for a corpus too large for one process (347M tokens peak at 4.8 GB there). Each
    partition of documents is chunked on a worker and kept there; the workers' document frequencies
    are merged in the client into the vocabulary and idf; each worker then weighs its own chunks. Only
    the chunk rows and the final TF-IDF rows come back, and the rows are copied into one sparse matrix
    as they arrive, so the client never holds the parts and the whole at once.

    Parameters
    ----------
    corpus : fabnb.corpus.collection.Corpus
    size, overlap, tokenizer_name
        As :func:`fabnb.corpus.collection.chunk_corpus`.
    min_df : int
        As :func:`vectorize`.
    npartitions : int, optional
        Partitions of documents (default: 4 per worker thread).
    text : bool
        ``False`` leaves the chunks' text on the workers (the largest part of the chunks: about 1.3
        characters per corpus character at 512/128); a chunk's text is
        ``corpus.document(doc_id).text[char_start:char_end]``.

    Returns
    -------
    (DataFrame, ChunkVectors)
        The chunks (:data:`fabnb.corpus.collection.CHUNK_COLUMNS`, without ``text`` when ``text=False``) and
        their vectors.

    Raises
    ------
    fabnb.corpus.collection.CorpusError
        No ``dask.distributed`` client is running.

    Examples
    --------
    >>> import warnings
    >>> from dask.distributed import Client
    >>> from fabnb.data.datasets import evidence_corpus, load_fab_bench
    >>> with Client(processes=False, n_workers=1, dashboard_address=None), warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # short documents: one chunk each, and a warning
    ...     chunks, vectors = vectorize_corpus(evidence_corpus(load_fab_bench()), size=128, overlap=32)
    >>> len(chunks), vectors.matrix.shape[0]
    (654, 654)
    """
    from .collection import CorpusError, finish_chunks, tokenizer

    try:
        from distributed import as_completed, get_client
        client = get_client()
    except (ImportError, ValueError):
        raise CorpusError("vectorize_corpus runs on a dask.distributed cluster and none is running: start one "
                          "first (from dask.distributed import Client; client = Client()), with the dask "
                          "extra installed: pip install 'fabnb[dask]'.") from None
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be in [0, size); got size={size}, overlap={overlap}.")
    tokenizer(tokenizer_name)  # fail early, with the offline hint
    records = list(zip(corpus.documents["doc_id"], corpus.documents["text"]))
    n = npartitions or 4 * sum(client.nthreads().values()) or 1
    # Each partition goes to the cluster as its own piece of data, one at a time (so the client holds one
    # serialized partition at most, not a copy of the corpus), and the task graph holds no text.
    parts = [client.submit(_chunk_part, client.scatter([part], hash=False)[0], size, overlap, tokenizer_name,
                           pure=False) for part in _partitions(records, n)]
    del records
    df = _merge(_released_results(as_completed([client.submit(_part_frequencies, part) for part in parts])))
    n_chunks = sum(client.gather([client.submit(len, part) for part in parts]))
    vocabulary, idf = _idf(df, n_chunks, min_df)
    del df
    shared = client.scatter([vocabulary, idf], broadcast=True, hash=False)
    rows = [client.submit(_part_rows, part, *shared, text) for part in parts]
    del parts  # the chunk texts leave the workers' memory as their rows are made
    nnz = sum(client.gather([client.submit(lambda r: r[1].nnz, r) for r in rows]))
    data, indices = np.empty(nnz, dtype=np.float32), np.empty(nnz, dtype=np.int32)
    indptr, frames, at, row = np.zeros(n_chunks + 1, dtype=np.int64), [], 0, 0
    for frame, m in _released_results(rows):  # in order, one part in the client at a time
        data[at:at + m.nnz], indices[at:at + m.nnz] = m.data, m.indices
        indptr[row + 1:row + m.shape[0] + 1] = m.indptr[1:] + at
        at, row = at + m.nnz, row + m.shape[0]
        frames.append(frame)
        del frame, m
    chunks = pd.concat(frames, ignore_index=True)  # never empty: _idf has refused a corpus with no terms
    del frames
    chunks = finish_chunks(chunks, corpus, size, tokenizer_name)
    matrix = sp.csr_matrix((data, indices, indptr), shape=(n_chunks, len(vocabulary)))
    return chunks, ChunkVectors(chunks["chunk_id"].to_numpy(), chunks["doc_id"].to_numpy(), matrix, vocabulary,
                                idf.astype(np.float64))


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
