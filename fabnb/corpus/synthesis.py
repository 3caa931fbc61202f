"""Context synthesis: the three strategies of FAB-Bench Section 3.2.

Each strategy builds contexts out of chunks and records why: every member chunk's
role, document, token count and cosine to the context's anchor, so a reader (and
a test) can check the paper's similarity conditions.

- **needle-in-haystack** (robustness): a target chunk among distractors chosen to
  *minimise* cosine to it: ``c_d = argmin_c cos(v(target), v(c))``.
- **intra-document multi-topic** (generation quality): chunks of one document from
  at least two TF-IDF topic clusters, each pair separated by ``cos < 0.3``.
- **cross-document multi-hop** (multi-hop): a seed chunk, its most similar chunk
  in another document (``argmax``) kept only if ``cos > theta_link = 0.1``, plus
  distractors.

Every function returns a :class:`Contexts` record of two tidy frames, and the
candidates it rejected with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .vectors import ChunkVectors, neighbours

__all__ = ['CONTEXT_COLUMNS', 'Contexts', 'MEMBER_COLUMNS', 'CONTEXT_REJECT_COLUMNS', 'SYNTHESIS_STRATEGIES',
           'THETA_LINK', 'TOPIC_SEPARATION', 'multi_hop', 'multi_topic', 'needle_in_haystack', 'synthesize',
           'topic_clusters']

#: theta_link of Section 3.2 / Appendix B.4.
THETA_LINK = 0.1
#: Cluster separation of the multi-topic strategy.
TOPIC_SEPARATION = 0.3
SYNTHESIS_STRATEGIES = {"needle_in_haystack": "robustness", "multi_topic": "generation_quality",
                        "multi_hop": "multi_hop"}

CONTEXT_COLUMNS = ["context_id", "strategy", "test_type", "anchor_chunk", "doc_ids", "n_chunks", "n_tokens",
                   "target_offset", "target_depth", "text"]
MEMBER_COLUMNS = ["context_id", "position", "chunk_id", "doc_id", "role", "cluster", "cos_to_anchor", "n_tokens"]
CONTEXT_REJECT_COLUMNS = ["strategy", "anchor", "reason"]


@dataclass
class Contexts:
    """Synthesized contexts.

    Attributes
    ----------
    contexts : DataFrame
        context_id, strategy, test_type, anchor_chunk (target or seed; for
        multi-topic the first topic chunk), doc_ids (tuple), n_chunks, n_tokens, target_offset and target_depth
        (where a needle-in-haystack target sits: tokens before it, one per separator, and its relative depth, 0
        first and 1 last, as an answer cell's ``evidence_offset`` and ``evidence_depth`` say; None for the other
        strategies), text (member texts in position order, separated by blank lines).
    members : DataFrame
        context_id, position, chunk_id, doc_id, role (``target``, ``seed``,
        ``link``, ``topic`` or ``distractor``), cluster (multi-topic), cos_to_anchor,
        n_tokens.
    rejected : DataFrame
        strategy, anchor, reason: candidates that failed the paper's conditions.
    """

    contexts: pd.DataFrame
    members: pd.DataFrame
    rejected: pd.DataFrame

    def __len__(self) -> int:
        return len(self.contexts)

    def show(self, context_id: str) -> pd.DataFrame:
        """The members of one context with their text, in the order the context presents them."""
        m = self.members[self.members["context_id"] == context_id]
        return m.sort_values("position").reset_index(drop=True)

    @staticmethod
    def concat(parts) -> "Contexts":
        parts = list(parts)
        return Contexts(*(pd.concat([getattr(p, a) for p in parts], ignore_index=True)
                          for a in ("contexts", "members", "rejected")))


class _Builder:
    def __init__(self, chunks: pd.DataFrame, vectors: ChunkVectors, strategy: str):
        self.chunks = chunks.reset_index(drop=True)
        self.vectors = vectors
        self.strategy = strategy
        self.contexts, self.members, self.rejected = [], [], []
        if not np.array_equal(self.chunks["chunk_id"].to_numpy(), vectors.chunk_ids):
            raise ValueError("chunks and vectors disagree: pass the chunk frame the vectors were made from.")

    def reject(self, anchor, reason: str) -> None:
        self.rejected.append({"strategy": self.strategy, "anchor": anchor, "reason": reason})

    def add(self, anchor_row: int, members: list[tuple[int, str, object]], order: list[int]) -> None:
        """members: (row, role, cluster) with the anchor first; order: presentation order of members."""
        cid = f"{self.strategy}-{len(self.contexts):04d}"
        rows = [r for r, _, _ in members]
        cos = self.vectors.cosine([anchor_row], rows)[0]
        texts, tokens, roles = [], [], []
        for position, i in enumerate(order):
            row, role, cluster = members[i]
            c = self.chunks.iloc[row]
            tokens.append(int(c["n_tokens"]))
            roles.append(role)
            self.members.append({"context_id": cid, "position": position, "chunk_id": c["chunk_id"],
                                 "doc_id": c["doc_id"], "role": role, "cluster": cluster,
                                 "cos_to_anchor": float(cos[i]), "n_tokens": int(c["n_tokens"])})
            texts.append(c["text"])
        docs = tuple(dict.fromkeys(self.chunks.iloc[r]["doc_id"] for r in rows))
        offset = depth = None
        if "target" in roles and len(roles) > 1:  # the needle: where the answer's evidence sits among the distractors
            at = roles.index("target")
            offset = sum(tokens[:at]) + at
            depth = round(offset / (sum(tokens) + len(tokens) - 1 - tokens[at]), 4)
        self.contexts.append({"context_id": cid, "strategy": self.strategy,
                              "test_type": SYNTHESIS_STRATEGIES[self.strategy],
                              "anchor_chunk": self.chunks.iloc[anchor_row]["chunk_id"], "doc_ids": docs,
                              "n_chunks": len(rows), "n_tokens": int(self.chunks.iloc[rows]["n_tokens"].sum()),
                              "target_offset": offset, "target_depth": depth,
                              "text": "\n\n".join(texts)})

    def result(self) -> Contexts:
        return Contexts(pd.DataFrame(self.contexts, columns=CONTEXT_COLUMNS),
                        pd.DataFrame(self.members, columns=MEMBER_COLUMNS),
                        pd.DataFrame(self.rejected, columns=CONTEXT_REJECT_COLUMNS))


def _anchors(vectors: ChunkVectors, anchors, n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of the named anchor chunks, or ``n`` random rows."""
    if anchors is not None:
        known = set(vectors.chunk_ids)
        missing = [a for a in anchors if a not in known]
        if missing:
            raise KeyError(f"unknown chunk id(s) {missing[:5]}")
        return np.array([vectors.row(a) for a in anchors])
    return rng.permutation(len(vectors))[:n]


def needle_in_haystack(chunks: pd.DataFrame, vectors: ChunkVectors, n: int = 10, n_distractors: int = 4,
                       anchors=None, seed: int = 0) -> Contexts:
    """Targets hidden among their least similar chunks.

    Parameters
    ----------
    chunks, vectors : the chunk frame and its :func:`fabnb.corpus.vectors.vectorize` vectors
    n : int
        Contexts to build (random targets) unless ``anchors`` names the target chunk ids.
    n_distractors : int
        Distractors per target, the chunks of lowest cosine to it (ties broken at random).
    seed : int
        Seeds target choice, tie-breaking and where the target sits among the distractors.

    Examples
    --------
    >>> import warnings
    >>> from fabnb.corpus.collection import chunk_corpus
    >>> from fabnb.corpus.vectors import vectorize
    >>> from fabnb.data.datasets import evidence_corpus, load_fab_bench
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # short documents: one chunk each
    ...     chunks = chunk_corpus(evidence_corpus(load_fab_bench()), size=128, overlap=32)
    >>> contexts = needle_in_haystack(chunks, vectorize(chunks), n=2)
    >>> len(contexts.contexts), contexts.contexts["n_chunks"].tolist()
    (2, [5, 5])
    """
    rng = np.random.default_rng(seed)
    b = _Builder(chunks, vectors, "needle_in_haystack")
    for target in _anchors(vectors, anchors, n, rng):
        far = neighbours(vectors, [target], k=n_distractors, farthest=True, rng=rng)
        if len(far) < n_distractors:
            b.reject(b.chunks.iloc[target]["chunk_id"], f"only {len(far)} other chunks; need {n_distractors}")
            continue
        members = [(int(target), "target", None)] + [(int(r), "distractor", None) for r in far["row"]]
        order = list(range(1, len(members)))
        order.insert(int(rng.integers(0, len(members))), 0)
        b.add(int(target), members, order)
    return b.result()


def topic_clusters(vectors: ChunkVectors, rows, separation: float = TOPIC_SEPARATION) -> np.ndarray:
    """Cluster labels of chunk ``rows`` (one document) by average-linkage on cosine distance.

    Clusters merge while their average cosine similarity is at least ``separation``.
    """
    from sklearn.cluster import AgglomerativeClustering

    rows = np.asarray(rows)
    if len(rows) < 2:
        return np.zeros(len(rows), dtype=int)
    distance = 1.0 - np.clip(vectors.cosine(rows, rows), 0.0, 1.0)
    model = AgglomerativeClustering(n_clusters=None, metric="precomputed", linkage="average",
                                    distance_threshold=1.0 - separation)
    return model.fit_predict(distance)


def multi_topic(chunks: pd.DataFrame, vectors: ChunkVectors, n: int = 10, n_topics: int = 2,
                separation: float = TOPIC_SEPARATION, documents=None, seed: int = 0) -> Contexts:
    """Chunks of one document from distinct topic clusters, pairwise ``cos < separation``.

    For each document (random order, or ``documents``), its chunks are clustered
    (:func:`topic_clusters`); from the largest clusters down, each cluster's medoid
    is taken if its cosine to every chunk already taken is below ``separation``,
    until ``n_topics`` chunks are taken. A document without ``n_topics`` such
    clusters is rejected with the reason.

    Examples
    --------
    >>> import warnings
    >>> from fabnb.corpus.collection import chunk_corpus
    >>> from fabnb.corpus.vectors import vectorize
    >>> from fabnb.data.datasets import evidence_corpus, load_fab_bench
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # short documents: one chunk each
    ...     chunks = chunk_corpus(evidence_corpus(load_fab_bench()), size=128, overlap=32)
    >>> contexts = multi_topic(chunks, vectorize(chunks), n=2)
    >>> len(contexts.contexts), contexts.contexts["n_chunks"].tolist()
    (2, [2, 2])
    """
    rng = np.random.default_rng(seed)
    b = _Builder(chunks, vectors, "multi_topic")
    doc_ids = b.chunks["doc_id"].to_numpy()
    docs = list(documents) if documents is not None else list(rng.permutation(pd.unique(doc_ids)))
    for doc in docs:
        if len(b.contexts) >= n and documents is None:
            break
        rows = np.flatnonzero(doc_ids == doc)
        if len(rows) < n_topics:
            b.reject(doc, f"{len(rows)} chunk(s); {n_topics} topics need at least {n_topics}")
            continue
        labels = topic_clusters(vectors, rows, separation)
        sims = vectors.cosine(rows, rows)
        picked: list[tuple[int, int]] = []
        for label in pd.Series(labels).value_counts().index:
            idx = np.flatnonzero(labels == label)
            medoid = idx[np.argmax(sims[np.ix_(idx, idx)].mean(axis=1))]
            if all(sims[medoid, p] < separation for p, _ in picked):
                picked.append((int(medoid), int(label)))
            if len(picked) == n_topics:
                break
        if len(picked) < n_topics:
            b.reject(doc, f"{len(set(labels))} topic cluster(s), {len(picked)} separated by cos < {separation}; "
                          f"need {n_topics}")
            continue
        members = [(int(rows[i]), "topic", label) for i, label in picked]
        b.add(members[0][0], members, list(range(len(members))))
    return b.result()


def multi_hop(chunks: pd.DataFrame, vectors: ChunkVectors, n: int = 10, n_distractors: int = 2,
              theta_link: float = THETA_LINK, anchors=None, seed: int = 0) -> Contexts:
    """Seed, its best link in another document (if ``cos > theta_link``), and distractors.

    Distractors are the chunks least similar to the seed, from documents other
    than the seed's and the link's. A seed whose best link is not above
    ``theta_link`` is rejected with the cosine found.

    Examples
    --------
    >>> import warnings
    >>> from fabnb.corpus.collection import chunk_corpus
    >>> from fabnb.corpus.vectors import vectorize
    >>> from fabnb.data.datasets import evidence_corpus, load_fab_bench
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # short documents: one chunk each
    ...     chunks = chunk_corpus(evidence_corpus(load_fab_bench()), size=128, overlap=32)
    >>> contexts = multi_hop(chunks, vectorize(chunks), n=2)
    >>> len(contexts.contexts), contexts.contexts["n_chunks"].tolist()
    (2, [4, 4])
    """
    rng = np.random.default_rng(seed)
    b = _Builder(chunks, vectors, "multi_hop")
    wanted = n
    candidates = _anchors(vectors, anchors, len(vectors) if anchors is None else n, rng)
    for s in candidates:
        if anchors is None and len(b.contexts) >= wanted:
            break
        seed_id = b.chunks.iloc[s]["chunk_id"]
        link = neighbours(vectors, [s], k=1, other_documents=True)
        if link.empty:
            b.reject(seed_id, "no chunk in another document")
            continue
        cos = float(link["cosine"].iloc[0])
        if not cos > theta_link:
            b.reject(seed_id, f"best cross-document link has cos {cos:.3f} <= theta_link {theta_link}")
            continue
        lrow = int(link["row"].iloc[0])
        far = neighbours(vectors, [s], k=n_distractors, farthest=True, rng=rng,
                         exclude_documents={b.chunks.iloc[s]["doc_id"], b.chunks.iloc[lrow]["doc_id"]})
        members = [(int(s), "seed", None), (lrow, "link", None)] + [(int(r), "distractor", None) for r in far["row"]]
        order = list(rng.permutation(len(members)))
        b.add(int(s), members, order)
    return b.result()


def synthesize(chunks: pd.DataFrame, vectors: ChunkVectors, strategy: str, n: int = 10, seed: int = 0,
               **options) -> Contexts:
    """Build ``n`` contexts with one strategy by name (``needle_in_haystack``, ``multi_topic``, ``multi_hop``)."""
    functions = {"needle_in_haystack": needle_in_haystack, "multi_topic": multi_topic, "multi_hop": multi_hop}
    if strategy not in functions:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {list(functions)}")
    return functions[strategy](chunks, vectors, n=n, seed=seed, **options)
