
import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from fabnb.corpus.collection import chunk_corpus
from fabnb.corpus.vectors import neighbours, vectorize
from fabnb.data.datasets import evidence_corpus


def test_vectors_equal_scikit_learn(evidence_chunks):
    chunks, v = evidence_chunks
    ref = TfidfVectorizer(stop_words="english", dtype=np.float32).fit(chunks.text)
    assert abs(ref.transform(chunks.text) - v.matrix).max() < 1e-6
    assert list(ref.get_feature_names_out()) == sorted(v.vocabulary, key=v.vocabulary.get)


def test_neighbours_match_brute_force(evidence_chunks):
    chunks, v = evidence_chunks
    dense = (v.matrix @ v.matrix.T).toarray()  # fine for a few hundred chunks; the code never does this
    rows = [0, 17, 200]
    near = neighbours(v, rows, k=3, other_documents=True, block=2)
    for q in rows:
        scores = dense[q].copy()
        scores[v.doc_ids == v.doc_ids[q]] = -np.inf
        best = np.argsort(-scores, kind="stable")[:3]
        got = near[near["query"] == q]
        assert np.allclose(got.cosine, scores[best], atol=1e-6)
        assert not (got.doc_id == v.doc_ids[q]).any()


def test_a_memory_bounded_block_gives_the_same_neighbours(evidence_chunks, monkeypatch):
    # At 904,000 chunks a 256-row block of float32 scores would take 925 MB: the block shrinks to fit
    # BLOCK_BYTES. Here a bound of 3 rows' worth must give exactly what larger blocks give.
    from fabnb.corpus import vectors as vectors_module

    _, v = evidence_chunks
    rows = np.arange(0, len(v), 37)
    full = neighbours(v, rows, k=4, other_documents=True, exclude_documents={v.doc_ids[3]}, block=256)
    monkeypatch.setattr(vectors_module, "BLOCK_BYTES", 3 * 4 * max(v.matrix.shape))
    calls = []
    real = type(v.matrix).__matmul__
    monkeypatch.setattr(type(v.matrix), "__matmul__", lambda a, b: calls.append(b.shape[1]) or real(a, b))
    small = neighbours(v, rows, k=4, other_documents=True, exclude_documents={v.doc_ids[3]})
    assert max(calls) == 3 and len(calls) == -(-len(rows) // 3)
    pd.testing.assert_frame_equal(small, full)
    assert len(full) == 4 * len(rows) and v.doc_ids[3] not in set(full.doc_id)


def test_farthest_are_minimal_and_exclusions_hold(evidence_chunks):
    chunks, v = evidence_chunks
    far = neighbours(v, [5], k=4, farthest=True, exclude_documents={v.doc_ids[0]})
    sims = v.cosine([5], np.arange(len(v)))[0]
    sims[5] = np.inf
    sims[v.doc_ids == v.doc_ids[0]] = np.inf
    assert np.allclose(far.cosine, np.sort(sims)[:4], atol=1e-6)
    assert v.doc_ids[0] not in set(far.doc_id)


def test_transform_queries(evidence_chunks):
    chunks, v = evidence_chunks
    q = v.transform([chunks.text.iloc[3]])
    assert abs((q @ v.matrix[3].T).toarray()[0, 0] - 1.0) < 1e-5


@pytest.fixture(scope="module")
def dask_cluster():
    """A 2-worker LocalCluster, as the corpus stage meets it (its tests hush dask's warnings): started once for the
    module, since starting its worker processes is most of a dask test's time."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture
def dask_client(dask_cluster):
    """A client of the module's cluster, one per test and closed after it: a test of this module checks what
    happens when no client is connected."""
    from dask.distributed import Client

    with Client(dask_cluster) as client:
        yield client


@pytest.mark.filterwarnings("ignore")
def test_dask_gives_the_same_chunks_and_vectors(fab_bench, dask_client):
    corpus = evidence_corpus(fab_bench)
    single = chunk_corpus(corpus, size=128, overlap=32)
    distributed = chunk_corpus(corpus, size=128, overlap=32, scheduler="dask", npartitions=5)
    vd = vectorize(distributed, scheduler="dask", npartitions=7)
    pd.testing.assert_frame_equal(single, distributed)
    vs = vectorize(single)
    assert vs.vocabulary == vd.vocabulary
    assert abs(vs.matrix - vd.matrix).max() == 0 and np.array_equal(vs.idf, vd.idf)
    a = neighbours(vs, range(0, len(vs), 25), k=3, other_documents=True)
    b = neighbours(vd, range(0, len(vd), 25), k=3, other_documents=True)
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.filterwarnings("ignore")
def test_vectorize_corpus_on_dask_gives_the_same_chunks_and_vectors_and_can_leave_the_texts(fab_bench, dask_client):
    """The way out for a corpus that does not fit: chunking and TF-IDF on the workers, the same results."""
    from fabnb.corpus.vectors import _partitions, vectorize_corpus

    corpus = evidence_corpus(fab_bench)
    single = chunk_corpus(corpus, size=128, overlap=32)
    chunks, vd = vectorize_corpus(corpus, size=128, overlap=32, npartitions=5)
    bare, vb = vectorize_corpus(corpus, size=128, overlap=32, npartitions=3, text=False)
    pd.testing.assert_frame_equal(single, chunks)
    pd.testing.assert_frame_equal(single.drop(columns="text"), bare)
    vs = vectorize(single)
    for v in (vd, vb):
        assert v.vocabulary == vs.vocabulary and np.array_equal(v.idf, vs.idf)
        assert v.matrix.dtype == np.float32 and v.matrix.has_canonical_format
        assert abs(vs.matrix - v.matrix).max() == 0 and np.array_equal(v.chunk_ids, vs.chunk_ids)
    # a chunk's text, where the bare rows leave it: its document's text between its offsets
    docs = corpus.documents.set_index("doc_id").text
    row = bare.iloc[len(bare) // 2]
    assert docs[row.doc_id][row.char_start:row.char_end] == single.text.iloc[len(bare) // 2]
    # partitions: consecutive documents, none empty, of about equal text
    records = [(f"d{i}", "x" * (i % 7 + 1)) for i in range(50)]
    parts = _partitions(records, 4)
    assert [r for p in parts for r in p] == records and len(parts) == 4 and all(parts)
    assert _partitions(records[:2], 8) == [records[:1], records[1:2]] and _partitions([], 3) == []


def test_vectorize_corpus_without_a_cluster_says_how_to_start_one(fab_bench):
    from fabnb.corpus.collection import CorpusError
    from fabnb.corpus.vectors import vectorize_corpus

    with pytest.raises(CorpusError, match=r"none is running: start one first .*Client\(\)"):
        vectorize_corpus(evidence_corpus(fab_bench))


def test_only_stop_words_is_a_clear_error():
    with pytest.raises(ValueError, match="only stop words"):
        vectorize(pd.DataFrame({"chunk_id": ["a"], "doc_id": ["d"], "text": ["the and of"]}))
