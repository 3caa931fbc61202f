"""Curation: from generated candidates to a benchmark, one keep / drop / edit at a time.

FAB-Bench's authors curated about 1,300 generated candidates down to 200 pairs
(59 robustness, 90 multi-hop, 51 generation quality). :class:`CurationSession` is the
plain-Python model the QA curator widget is a view over:

- candidates come from any FAB-Bench-format QA files; a broken file is listed in
  ``problems`` and the rest load;
- filters by test type, question format, precision level and status;
- near-duplicate groups by the generation stage's similarity measure (Eq. 13), so
  that near-copies are judged side by side;
- target counts per test type with progress toward them;
- every decision is appended to the curator's file in a :class:`~fabnb.qa.rating.RatingStore`
  the moment it is made (``kind="curation"``), so a killed kernel loses nothing;
- export of the kept set, edits applied, in the FAB-Bench format.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.schema import TEST_TYPES
from ..core.text import word_tokens
from ..data.datasets import qa_frame, read_qa_files
from .generation import ALPHA, write_pairs
from .rating import RatingError, RatingStore

__all__ = ['CurationSession', 'DUPLICATE_THRESHOLD', 'EDITABLE', 'PAPER_TARGETS', 'CURATION_STATUSES',
           'duplicate_groups', 'similarity_matrix']

#: FAB-Bench's released counts per test type.
PAPER_TARGETS: dict[str, int] = {"robustness": 59, "multi_hop": 90, "generation_quality": 51}
CURATION_STATUSES = ("pending", "kept", "dropped")
#: Fields a curator may edit; the rest of a record is written back as it was read.
EDITABLE = ("question", "ground_truth_answer", "question_format", "primary_metric", "description")
#: Default Eq. 13 similarity above which two questions count as near-duplicates.
DUPLICATE_THRESHOLD = 0.6


def similarity_matrix(questions, kb=None, alpha: float = ALPHA):
    """Eq. 13 between every pair of questions, as a sparse matrix (upper triangle, zero diagonal).

    ``Jaccard(words) + alpha * Jaccard(knowledge-base terms)``, computed with sparse
    set intersections so that 1,300 questions take a fraction of a second.

    Examples
    --------
    >>> m = similarity_matrix(["etch rate of ALD", "etch rate of CVD", "gate oxide"])
    >>> float(round(m[0, 1], 2)), float(m[0, 2])
    (0.6, 0.0)
    """
    from scipy import sparse
    from sklearn.feature_extraction.text import CountVectorizer

    def jaccard_matrix(token_lists):
        if not any(token_lists):
            return sparse.csr_matrix((len(token_lists), len(token_lists)))
        x = CountVectorizer(analyzer=lambda toks: toks, binary=True).fit_transform(token_lists).astype(np.float64)
        inter = sparse.triu(x @ x.T, k=1).tocoo()
        size = np.asarray(x.sum(axis=1)).ravel()
        union = size[inter.row] + size[inter.col] - inter.data
        return sparse.csr_matrix((inter.data / union, (inter.row, inter.col)), shape=inter.shape)

    questions = list(questions)
    sim = jaccard_matrix([sorted(set(word_tokens(q))) for q in questions])
    if kb is not None and alpha:
        sim = sim + alpha * jaccard_matrix([sorted(set(kb.find(q)["term"])) for q in questions])
    return sim


def duplicate_groups(questions, threshold: float = DUPLICATE_THRESHOLD, kb=None, alpha: float = ALPHA) -> np.ndarray:
    """A group number per question: questions linked by similarity >= threshold share one.

    Groups are the connected components of the near-duplicate graph, numbered in the
    order of their first question.

    Examples
    --------
    >>> duplicate_groups(["etch rate of ALD", "etch rate of CVD", "gate oxide"], threshold=0.5).tolist()
    [0, 0, 1]
    """
    from scipy.sparse.csgraph import connected_components

    sim = similarity_matrix(questions, kb, alpha)
    _, labels = connected_components(sim >= threshold, directed=False)
    _, first = np.unique(labels, return_index=True)
    renumber = np.empty(labels.max() + 1 if len(labels) else 0, dtype=int)
    renumber[labels[np.sort(first)]] = np.arange(len(first))
    return renumber[labels] if len(labels) else labels


class CurationSession:
    """One curator deciding over a set of candidate QA pairs.

    Parameters
    ----------
    source : folder or iterable of QA JSON files, or a :class:`~fabnb.data.datasets.QASet`
    store : RatingStore or folder
        Decisions go to ``<store>/<curator key>.jsonl`` (:func:`fabnb.qa.rating.rater_key`) as ``kind="curation"``
        records.
    curator : str
    targets : dict, optional
        Wanted kept pairs per test type; default :data:`PAPER_TARGETS`.
    threshold : float
        Near-duplicate threshold on Eq. 13 similarity.
    kb : KnowledgeBase, optional
        Adds the term part of Eq. 13 to the similarity.

    Attributes
    ----------
    candidates : DataFrame
        :func:`fabnb.data.datasets.qa_frame` columns plus dup_group, dup_size.
    problems : DataFrame
        path, message: the QA files that could not be read.

    Examples
    --------
    It reads the FAB-Bench release (a download on first use).

    >>> import tempfile
    >>> from fabnb.data.datasets import load_fab_bench
    >>> s = CurationSession(load_fab_bench(), tempfile.mkdtemp(), "me")
    >>> s.keep("ROB_001")
    {'status': 'kept', 'edits': {}, 'reason': ''}
    >>> s.progress().set_index("test_type").loc["robustness", ["kept", "pending"]].tolist()
    [1, 58]
    """

    def __init__(self, source, store, curator: str, targets: dict | None = None,
                 threshold: float = DUPLICATE_THRESHOLD, kb=None):
        qaset = source if hasattr(source, "pairs") else read_qa_files(source)
        self.pairs = {p.test_id: p for p in qaset.pairs}
        self.problems = qaset.problems
        self.store = store if isinstance(store, RatingStore) else RatingStore(store)
        self.curator = curator
        self.store.path(curator)  # checks the name can name a file
        self.targets = dict(PAPER_TARGETS if targets is None else targets)
        frame = qa_frame(qaset.pairs)
        groups = duplicate_groups(frame["question"], threshold, kb)
        frame["dup_group"] = groups
        frame["dup_size"] = pd.Series(groups).map(pd.Series(groups).value_counts()).to_numpy()
        self.candidates = frame
        self._rows = frame.set_index("test_id", drop=False)
        self._groups = frame.groupby("dup_group")["test_id"].agg(list).to_dict()
        self._types = dict(zip(frame["test_id"], frame["test_type"]))
        self._state = self._load_state()

    def __repr__(self) -> str:
        kept = sum(s["status"] == "kept" for s in self._state.values())
        return f"CurationSession({len(self.candidates)} candidates, {kept} kept, curator={self.curator!r})"

    def _load_state(self) -> dict:
        state = {}
        records, _ = self.store.records("curation")
        for r in records:  # file order: the latest decision on an item wins
            if r.get("rater") == self.curator and r["item_id"] in self.pairs:
                state[r["item_id"]] = {"status": r["scores"].get("status", "pending"),
                                       "edits": dict(r["scores"].get("edits", {})), "reason": r.get("comment", "")}
        return state

    def _decide(self, test_id: str, status: str | None = None, edits: dict | None = None, reason: str | None = None):
        if test_id not in self.pairs:
            raise RatingError(f"{test_id!r} is not a candidate of this session.")
        current = self._state.get(test_id, {"status": "pending", "edits": {}, "reason": ""})
        new = {"status": status or current["status"], "edits": {**current["edits"], **(edits or {})},
               "reason": current["reason"] if reason is None else reason}
        # The whole current state of the item in one record: reading back needs only the latest.
        self.store.add(self.curator, test_id, {"status": new["status"], "edits": new["edits"]},
                       comment=new["reason"], kind="curation")
        self._state[test_id] = new
        return new

    def keep(self, test_id: str) -> dict:
        """Keep a candidate (written to the store before this returns)."""
        return self._decide(test_id, "kept")

    def drop(self, test_id: str, reason: str = "") -> dict:
        """Drop a candidate, with an optional reason."""
        return self._decide(test_id, "dropped", reason=reason)

    def reset(self, test_id: str) -> dict:
        """Back to pending; edits stay."""
        return self._decide(test_id, "pending")

    def edit(self, test_id: str, **fields) -> dict:
        """Change editable fields (:data:`EDITABLE`) of a candidate; the original file is untouched."""
        bad = set(fields) - set(EDITABLE)
        if bad:
            raise RatingError(f"cannot edit {sorted(bad)}; editable fields are {list(EDITABLE)}.")
        for name, value in fields.items():
            if not isinstance(value, str) or not value.strip():
                raise RatingError(f"{test_id}: {name} must be non-empty text; nothing was saved.")
        if "question_format" in fields and fields["question_format"] not in ("OBJECTIVE", "SUBJECTIVE"):
            raise RatingError(f"{test_id}: question_format must be OBJECTIVE or SUBJECTIVE.")
        return self._decide(test_id, edits=fields)

    def item(self, test_id: str) -> dict:
        """A candidate as the curator sees it: fields with edits applied, status, reason, evidence, duplicates."""
        pair = self.pairs[test_id]
        row = self._rows.loc[test_id]
        state = self._state.get(test_id, {"status": "pending", "edits": {}, "reason": ""})
        out = {"test_id": test_id, "test_type": pair.test_type, "question_format": pair.question_format,
               "question": pair.question, "ground_truth_answer": pair.ground_truth_answer,
               "primary_metric": pair.primary_metric, "description": pair.description,
               "precision_level": row["precision_level"], **state["edits"],
               "status": state["status"], "reason": state["reason"], "edited": sorted(state["edits"]),
               "evidence": [{"doc_id": s.doc_id, "section_title": s.section_title, "evidence": s.evidence}
                            for s in pair.gold_context_sources]}
        out["duplicates"] = [t for t in self._groups[row["dup_group"]] if t != test_id]
        return out

    def status(self) -> pd.DataFrame:
        """test_id, test_type, question_format, precision_level, dup_group, status, edited, reason."""
        cols = ["test_id", "test_type", "question_format", "precision_level", "dup_group", "dup_size"]
        out = self.candidates[cols].copy()
        out["status"] = [self._state.get(t, {}).get("status", "pending") for t in out["test_id"]]
        out["edited"] = [bool(self._state.get(t, {}).get("edits")) for t in out["test_id"]]
        out["reason"] = [self._state.get(t, {}).get("reason", "") for t in out["test_id"]]
        return out

    def select(self, test_type=None, question_format=None, precision_level=None, status=None) -> list[str]:
        """Test ids that pass the filters (None: any), near-duplicate groups kept together.

        Each filter takes one value or a list of values.
        """
        s = self.status()
        for name, wanted in (("test_type", test_type), ("question_format", question_format),
                             ("precision_level", precision_level), ("status", status)):
            if wanted is not None:
                wanted = [wanted] if isinstance(wanted, str) else list(wanted)
                s = s[s[name].isin(wanted)]
        return s.sort_values(["dup_group", "test_id"], kind="stable")["test_id"].tolist()

    def progress(self) -> pd.DataFrame:
        """Per test type: target, kept, dropped, pending, remaining (target - kept, at least 0)."""
        # Counted from the in-memory state, not a pivot: the curator calls this after every decision.
        counts = {}
        for test_id, test_type in self._types.items():
            status = self._state.get(test_id, {}).get("status", "pending")
            counts.setdefault(test_type, dict.fromkeys(CURATION_STATUSES, 0))[status] += 1
        types = list(dict.fromkeys([*TEST_TYPES, *counts]))
        out = pd.DataFrame([{"test_type": t, "target": int(self.targets.get(t, 0)),
                             **counts.get(t, dict.fromkeys(CURATION_STATUSES, 0))} for t in types])
        out["remaining"] = (out["target"] - out["kept"]).clip(lower=0)
        return out[["test_type", "target", "kept", "dropped", "pending", "remaining"]]

    def export(self, folder: str | Path) -> list[Path]:
        """Write the kept pairs, edits applied, as FAB-Bench JSON files under ``<folder>/QAs/``.

        Every field of the original record is kept; an edited pair records what changed
        in ``generation_metadata["curation_edits"]``.
        """
        Path(folder).mkdir(parents=True, exist_ok=True)
        records = []
        for test_id, state in sorted(self._state.items()):
            if state["status"] != "kept":
                continue
            record = {**self.pairs[test_id].record, **state["edits"]}
            if state["edits"]:
                meta = dict(record.get("generation_metadata") or {})
                meta["curation_edits"] = sorted(state["edits"])
                record["generation_metadata"] = meta
            records.append(record)
        return write_pairs(records, folder)
