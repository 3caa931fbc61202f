"""The three strategies: recorded roles satisfy the paper's similarity conditions."""

import numpy as np
import pytest

from fabnb.corpus.synthesis import THETA_LINK, TOPIC_SEPARATION, multi_hop, multi_topic, needle_in_haystack, synthesize


def _rows(v, ids):
    return [v.row(c) for c in ids]


def test_needle_distractors_are_the_least_similar(evidence_chunks):
    chunks, v = evidence_chunks
    ctx = needle_in_haystack(chunks, v, n=8, n_distractors=4, seed=3)
    assert len(ctx) == 8 and ctx.rejected.empty
    for cid, m in ctx.members.groupby("context_id"):
        target = m[m.role == "target"].chunk_id.item()
        t = v.row(target)
        sims = v.cosine([t], np.arange(len(v)))[0]
        sims[t] = np.inf
        fourth_lowest = np.sort(sims)[3]
        got = v.cosine([t], _rows(v, m[m.role == "distractor"].chunk_id))[0]
        assert (got <= fourth_lowest + 1e-9).all()  # argmin: no other chunk is less similar
        assert np.allclose(got, m[m.role == "distractor"].cos_to_anchor)
        assert sorted(m.position) == list(range(5))
    assert ctx.members.groupby("context_id").apply(lambda m: m[m.role == "target"].position.item()).nunique() > 1
    # Where the needle sits (issue 52): the tokens of the members before it, one per separator, and its depth.
    for row in ctx.contexts.itertuples():
        m = ctx.show(row.context_id)
        at = int(m.index[m.role == "target"][0])
        assert row.target_offset == int(m.n_tokens[:at].sum()) + at
        assert row.target_depth == round(row.target_offset / (m.n_tokens.sum() + len(m) - 1 - m.n_tokens[at]), 4)
    assert ctx.contexts["target_depth"].between(0, 1).all() and ctx.contexts["target_depth"].nunique() > 1


def test_multi_topic_chunks_are_separated_and_from_one_document(evidence_chunks):
    chunks, v = evidence_chunks
    ctx = multi_topic(chunks, v, n=6, seed=1)
    assert len(ctx) >= 3
    for cid, m in ctx.members.groupby("context_id"):
        assert m.doc_id.nunique() == 1 and len(m) >= 2
        assert m.cluster.nunique() == len(m)
        sims = v.cosine(_rows(v, m.chunk_id), _rows(v, m.chunk_id))
        off = sims[~np.eye(len(m), dtype=bool)]
        assert (off < TOPIC_SEPARATION).all()
    assert ctx.rejected.reason.str.contains("topic cluster|chunk").all()


def test_multi_hop_links_cross_documents_above_theta(evidence_chunks):
    chunks, v = evidence_chunks
    ctx = multi_hop(chunks, v, n=8, seed=2)
    assert len(ctx) == 8
    for cid, m in ctx.members.groupby("context_id"):
        seed = v.row(m[m.role == "seed"].chunk_id.item())
        link = v.row(m[m.role == "link"].chunk_id.item())
        assert v.doc_ids[seed] != v.doc_ids[link]
        cos = v.cosine([seed], [link])[0, 0]
        assert cos > THETA_LINK
        other = v.cosine([seed], np.flatnonzero(v.doc_ids != v.doc_ids[seed]))[0]
        assert cos == pytest.approx(other.max(), abs=1e-6)  # argmax over other documents
        dis = m[m.role == "distractor"]
        assert not set(dis.doc_id) & {v.doc_ids[seed], v.doc_ids[link]}


def test_multi_hop_rejects_weak_links_with_the_cosine(evidence_chunks):
    chunks, v = evidence_chunks
    ctx = multi_hop(chunks, v, n=5, theta_link=0.99, seed=0)
    assert len(ctx) == 0
    assert ctx.rejected.reason.str.contains(r"cos 0\.\d{3} <= theta_link 0.99").all()


def test_contexts_record_tokens_text_and_sources(evidence_chunks):
    chunks, v = evidence_chunks
    ctx = synthesize(chunks, v, "multi_hop", n=2)
    row = ctx.contexts.iloc[0]
    members = ctx.show(row.context_id)
    assert row.n_tokens == members.n_tokens.sum()
    assert set(row.doc_ids) == set(members.doc_id) and row.test_type == "multi_hop"
    texts = chunks.set_index("chunk_id").loc[members.chunk_id, "text"]
    assert row.text == "\n\n".join(texts)
    with pytest.raises(ValueError, match="unknown strategy"):
        synthesize(chunks, v, "random")
