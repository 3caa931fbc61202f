"""Expert rating: an append-only store that loses nothing, rating sessions, assignments of items to raters.

FAB-Bench's experts rated QA pairs on four dimensions (Appendix D; 1-5 scale). This
module is the plain-Python core that the rating widget is a thin view over:

- :class:`RatingStore`: one append-only JSONL file per rater. Every rating is
  written, flushed and fsynced the moment it is made, so a killed kernel loses at
  most the rating being typed; two raters write to two files (named by a readable
  slug and a hash of the exact name, so two names never share one). Reading skips
  (and reports) a line truncated by a crash; the rest loads. A record carries the
  fields it changes, and ratings merge field by field, the latest per field: two
  tabs of one rater keep every field either saved. Earlier records stay in the
  file as history.
- :class:`RatingSession`: one rater, a list of items, seeded order, blind mode
  (generation metadata and condition labels hidden), resume where the rater stopped.
- Assignments: items spread over raters with a planned overlap (:func:`assign`), one manifest per rater.

Agreement is :mod:`fabnb.qa.agreement`; the code-free app and its server :mod:`fabnb.qa.rating_app`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from itertools import combinations
from math import ceil, comb
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import FabnbError
from ..core.files import MAX_FILE_BYTES, FileRefused, read_text, write_whole
from ..core.records import append_jsonl, read_jsonl, warn_cut
from .access import MAX_RATER_NAME, rater_name_problem  # the one rule for names, kept there

__all__ = ['ANCHORS', 'ANSWER_DIMENSIONS', 'ANSWER_SCALE', 'ANCHORS_SOURCE', 'BLIND_FIELDS', 'DIMENSIONS',
           'MAX_COMMENT', 'MAX_RATER_NAME', 'RATING_COLUMNS', 'RATING_SCALE', 'RatingError', 'RatingSession',
           'RatingStore', 'SCHEMES', 'VERDICT_DIMENSIONS', 'assign', 'manifest_path', 'overlap', 'rater_key',
           'rating_items', 'read_rater_manifest', 'read_rating_file', 'write_manifests']

#: Appendix D's four dimensions and their one-line definitions (1-5 scale).
DIMENSIONS: dict[str, str] = {
    "accuracy": "Factual correctness of the answer, checked against the context.",
    "relevance": "Alignment of the question and answer with the context.",
    "difficulty": "Cognitive challenge: how much reading and reasoning it takes.",
    "diversity": "Novelty relative to the other questions.",
}
RATING_SCALE = (1, 5)
#: What the two ends of each dimension's scale mean, shown beside its buttons. The paper (Appendix D) names the
#: four dimensions and the 1-5 scale but gives no anchor text, so these are the kit's own words
#: (:data:`ANCHORS_SOURCE` says so on screen).
ANCHORS: dict[str, tuple[str, str]] = {
    "accuracy": ("the answer is wrong or not supported by the context", "fully correct and supported by it"),
    "relevance": ("question and answer are off the context's subject", "both are squarely about the context"),
    "difficulty": ("answered by reading one sentence", "needs several passages and reasoning over them"),
    "diversity": ("repeats another question of the set", "asks what no other question asks"),
    "failed": ("the answer passes the test", "the answer fails it (wrong, unfaithful, incomplete, or answers "
                                              "what it should refuse)"),
}
ANCHORS_SOURCE = "Scale ends in fabnb's words (the paper gives the dimensions and the 1-5 scale, not anchor text)."
#: RAG-TESTER's human check of an oracle verdict (the reviewer's objection 2): one binary label.
VERDICT_DIMENSIONS: dict[str, str] = {
    "failed": "1 if the answer fails the test (wrong, unfaithful, incomplete, or answers what it should refuse); "
              "0 if it passes.",
}
#: An expert's score of a judged answer (the judge-calibration loop, :mod:`fabnb.judge.calibration`): FAB-Bench's six
#: metrics on the judge's own 0-10 scale; the item shows the rubric bands of each metric for its question's type.
ANSWER_DIMENSIONS: dict[str, str] = {
    "factuality": "Are the answer's claims correct, against the reference answer and the context?",
    "depth": "How much analysis and technical detail does it show?",
    "completeness": "Does it address every key aspect of the question?",
    "relevance": "Does it answer this question, without wandering off?",
    "context_utilization": "How well does it use the context the system saw?",
    "support_quality": "Are its claims supported by evidence and reasoning?",
}
ANSWER_SCALE = (0, 10)
#: What each kind of record rates: its dimensions and their scale (inclusive).
SCHEMES: dict[str, tuple[dict, tuple[int, int]]] = {"rating": (DIMENSIONS, RATING_SCALE),
                                                     "verdict": (VERDICT_DIMENSIONS, (0, 1)),
                                                     "answer": (ANSWER_DIMENSIONS, ANSWER_SCALE)}
#: Fields hidden from a rater in blind mode.
BLIND_FIELDS = ("generation_metadata", "group", "condition", "model", "config", "source_chapter")
RATING_COLUMNS = ["rater", "item_id", "dimension", "score", "comment", "ts"]


class RatingError(FabnbError, ValueError):
    """A rating that cannot be stored as it is."""


#: The longest comment (in characters) the store takes; the page shows the limit and stops typing at it.
MAX_COMMENT = 10_000


def _safe_name(rater: str) -> str:
    """The file-name form of earlier versions of fabnb (kept to find their files): two names could share one."""
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in rater.strip())
    if not name or name.startswith("."):
        raise RatingError(f"rater name {rater!r} cannot name a file; use letters, digits, '-' or '_'.")
    return name


def rater_key(rater: str) -> str:
    """The name of a rater's files: a readable slug and a short hash of the exact name, so that two different
    names never share a file ("ana b" and "ana_b" differ).

    >>> rater_key("ana b"), rater_key("ana_b")
    ('ana_b-53b1fba9', 'ana_b-be89d6c9')
    """
    problem = rater_name_problem(rater)
    if problem:
        raise RatingError(problem)
    slug = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in rater.strip())[:40].strip("_") or "rater"
    return f"{slug}-{hashlib.sha256(rater.encode('utf-8')).hexdigest()[:8]}"


def _legacy_path(folder: Path, rater: str, suffix: str) -> Path | None:
    """The file earlier versions of fabnb named for this rater, when it exists."""
    try:
        path = folder / f"{_safe_name(rater)}{suffix}"
    except RatingError:
        return None
    return path if path.exists() else None


def manifest_path(folder: str | Path, rater: str) -> Path:
    """Where :func:`write_manifests` puts a rater's manifest, and where the app looks for it (the name of earlier
    versions when only that one exists)."""
    path = Path(folder) / f"{rater_key(rater)}.json"
    return path if path.exists() else _legacy_path(Path(folder), rater, ".json") or path


def _merge(records: list[dict]) -> dict:
    """item_id -> (scores, comment) of one rater's records in time order: the latest value per field.

    A record of this release carries the fields it changes (no ``comment`` key: the comment is unchanged); a record
    of an earlier release carries the item's whole rating, comment included, and reads the same."""
    out: dict = {}
    for r in records:
        scores, comment = out.get(r["item_id"], ({}, ""))
        out[r["item_id"]] = ({**scores, **r["scores"]}, r.get("comment", comment))
    return out


class RatingStore:
    """Append-only rating files in a folder, one per rater.

    Parameters
    ----------
    folder : path
        Created if missing. Each rater's ratings go to ``<folder>/<rater>.jsonl``.

    Examples
    --------
    >>> import tempfile
    >>> store = RatingStore(tempfile.mkdtemp())
    >>> _ = store.add("ana", "ROB_001", {"accuracy": 5, "relevance": 4, "difficulty": 2, "diversity": 3})
    >>> store.ratings().groupby("dimension").score.first().to_dict()
    {'accuracy': 5, 'difficulty': 2, 'diversity': 3, 'relevance': 4}
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"RatingStore({str(self.folder)!r}, raters={self.raters()})"

    def path(self, rater: str) -> Path:
        """The file this rater's records are written to (:func:`rater_key`)."""
        return self.folder / f"{rater_key(rater)}.jsonl"

    def _files(self, rater: str) -> list[Path]:
        """Every file that may hold this rater's records: theirs, and the one earlier versions of fabnb named."""
        legacy = _legacy_path(self.folder, rater, ".jsonl")
        return [self.path(rater)] + ([legacy] if legacy else [])

    def raters(self) -> list[str]:
        """The raters with a record in the folder, by the name each record carries."""
        return sorted({r["rater"] for path in self.folder.glob("*.jsonl") for r in read_rating_file(path)[0]
                       if isinstance(r.get("rater"), str)})

    def add(self, rater: str, item_id: str, scores: dict, comment: str | None = None, kind: str = "rating") -> dict:
        """Check and append one record of the fields it changes; it is on disk (fsynced) when this returns.

        ``comment=None`` leaves the item's comment as it is; a text replaces it.

        Raises
        ------
        RatingError
            For an unknown dimension or a score outside the kind's scale (:data:`SCHEMES`;
            1-5 for ``"rating"``, 0-1 for ``"verdict"``), naming them; nothing is written.
        """
        if kind in SCHEMES:
            dims, (low, high) = SCHEMES[kind]
            unknown = set(scores) - set(dims)
            if unknown:
                raise RatingError(f"unknown dimension(s) {sorted(unknown)}; rate {list(dims)}.")
            for dim, value in scores.items():
                if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not low <= value <= high:
                    raise RatingError(f"{item_id}: {dim} = {value!r} is not a whole number from {low} to "
                                      f"{high}; nothing was saved.")
        record = {"kind": kind, "rater": rater, "item_id": str(item_id),
                  "scores": {k: int(v) if kind in SCHEMES else v for k, v in scores.items()}, "ts": time.time()}
        if comment is not None:
            if len(str(comment)) > MAX_COMMENT:
                raise RatingError(f"{item_id}: a comment of {len(str(comment)):,} characters is over the "
                                  f"{MAX_COMMENT:,} a comment may hold; shorten it. Nothing was saved.")
            record["comment"] = str(comment)
        self._append(rater, record)  # its path is rater_key(rater): the one rule for names, refused before writing
        return record

    def records(self, kind: str = "rating") -> tuple[list[dict], pd.DataFrame]:
        """Every record of a kind, in time order, and the lines that could not be read.

        Returns
        -------
        (records, problems)
            problems: file, line, message (a line cut off by a crash, broken JSON).
        """
        out, problems = [], []
        for path in sorted(self.folder.glob("*.jsonl")):
            recs, bad = read_rating_file(path)
            out += [r for r in recs if r.get("kind", "rating") == kind]
            problems += bad
        warn_cut(problems, "the rating it held is not counted (rate that item again)")
        # In time order (stable: file order breaks ties), so "the latest wins" holds across a rater's files.
        out.sort(key=lambda r: r.get("ts", 0.0) if isinstance(r.get("ts"), (int, float)) else 0.0)
        return out, pd.DataFrame(problems, columns=["file", "line", "message"])

    def read(self, rater: str, kind: str = "rating") -> list[dict]:
        """One rater's records of a kind, in time order (unreadable lines skipped)."""
        recs = [r for path in self._files(rater) if path.exists() for r in read_rating_file(path)[0]
                if r.get("kind", "rating") == kind and r.get("rater", rater) == rater]
        return sorted(recs, key=lambda r: r.get("ts", 0.0))

    def ratings(self, history: bool = False, kind: str = "rating") -> pd.DataFrame:
        """Ratings (or, with ``kind="verdict"``, verdict labels) as a tidy frame:
        rater, item_id, dimension, score, comment, ts.

        With ``history=False``, each rater's latest value of each field of an item (the comment too): records
        from two tabs of one rater merge, and no saved field is lost. ``ts`` is when that field was set.
        """
        recs = sorted(self.records(kind)[0], key=lambda r: r.get("ts", 0.0))
        rows = [{"rater": r["rater"], "item_id": r["item_id"], "dimension": d, "score": int(s),
                 "comment": r.get("comment", ""), "ts": r["ts"]} for r in recs for d, s in r["scores"].items()]
        frame = pd.DataFrame(rows, columns=RATING_COLUMNS)
        if not history and len(frame):
            frame = frame.drop_duplicates(["rater", "item_id", "dimension"], keep="last")
            comments = {}
            for r in recs:
                if "comment" in r:
                    comments[(r["rater"], r["item_id"])] = r["comment"]
            frame["comment"] = [comments.get(k, "") for k in zip(frame["rater"], frame["item_id"])]
            frame = frame.sort_values(["rater", "item_id", "ts"], kind="stable").reset_index(drop=True)
        return frame

    def export(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``ratings.csv`` (tidy, latest ratings) and ``codebook.csv`` (dimensions, scale, columns)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        ratings = folder / "ratings.csv"
        self.ratings().to_csv(ratings, index=False)
        codebook = folder / "codebook.csv"
        rows = [{"name": d, "kind": "dimension", "meaning": m, "values": f"integer {RATING_SCALE[0]}-{RATING_SCALE[1]}"}
                for d, m in DIMENSIONS.items()]
        rows += [{"name": "rater", "kind": "column", "meaning": "who rated", "values": "text"},
                 {"name": "item_id", "kind": "column", "meaning": "the QA pair's test_id", "values": "text"},
                 {"name": "ts", "kind": "column", "meaning": "when (Unix seconds)", "values": "number"}]
        pd.DataFrame(rows).to_csv(codebook, index=False)
        return ratings, codebook

    def import_file(self, path: str | Path) -> int:
        """Add another rater's JSONL file (or CSV export) to this store; returns the ratings added.

        Records already present (same rater, item and time) are not added twice.
        """
        path = Path(path)
        have = {(r["rater"], r["item_id"], r["ts"]) for r in self.records()[0]}
        if path.suffix == ".csv":
            frame = pd.read_csv(path)
            incoming = [{"rater": str(r), "item_id": str(i), "ts": float(t), "comment": str(g["comment"].iloc[0]),
                         "scores": dict(zip(g["dimension"], g["score"].astype(int)))}
                        for (r, i, t), g in frame.fillna({"comment": ""}).groupby(["rater", "item_id", "ts"])]
        else:
            incoming = [r for r in read_rating_file(path)[0] if r.get("kind", "rating") == "rating"]
        added = 0
        for rec in incoming:
            if (rec["rater"], rec["item_id"], rec["ts"]) in have:
                continue
            self._append(rec["rater"], {"kind": "rating", **{k: v for k, v in rec.items() if k != "kind"}})
            added += 1
        return added

    def _append(self, rater: str, record: dict) -> None:
        append_jsonl(self.path(rater), record)


def read_rating_file(path: Path) -> tuple[list[dict], list[dict]]:
    """Rating records of one JSONL file, and its unreadable lines (file, line, message)."""
    return read_jsonl(path, required=("item_id", "scores"))


def rating_items(pairs) -> pd.DataFrame:
    """QA pairs as rating items.

    Returns
    -------
    DataFrame
        item_id (the test_id), test_type, question_format, question, ground_truth_answer,
        evidence (list of {doc_id, section_title, evidence}), generation_metadata, source_chapter.

    Examples
    --------
    >>> from fabnb.data.datasets import load_fab_bench
    >>> items = rating_items(load_fab_bench())
    >>> len(items), items.loc[0, "item_id"]
    (200, 'GEN_001')
    """
    rows = [{"item_id": p.test_id, "test_type": p.test_type, "question_format": p.question_format,
             "question": p.question, "ground_truth_answer": p.ground_truth_answer,
             "evidence": [{"doc_id": s.doc_id, "section_title": s.section_title, "evidence": s.evidence}
                          for s in p.gold_context_sources],
             "generation_metadata": p.generation_metadata, "source_chapter": p.source_chapter} for p in pairs]
    return pd.DataFrame(rows, columns=["item_id", "test_type", "question_format", "question", "ground_truth_answer",
                                       "evidence", "generation_metadata", "source_chapter"])


@dataclass
class RatingSession:
    """One rater working through a list of items.

    Parameters
    ----------
    items : DataFrame
        One row per item with an ``item_id`` column (for QA pairs, their ``test_id``).
    rater : str
    store : RatingStore
    seed : int
        The order the rater sees is a seeded shuffle: the same rater and seed, the same order.
    blind : bool
        Hide :data:`BLIND_FIELDS` (generation metadata, condition labels).
    kind : {"rating", "verdict", "answer"}
        What is rated (:data:`SCHEMES`): QA pairs on Appendix D's dimensions, oracle verdicts with one binary
        label, or judged answers on the six metrics (0-10).
    dimensions : sequence of str, optional
        Only these of the kind's dimensions (a calibration study rates the metrics its lead chose).
    manifest : path or dict, optional
        This rater's assignment (:func:`write_manifests`): only its items are shown. Its
        rater must be ``rater``.
    """

    items: pd.DataFrame
    rater: str
    store: RatingStore
    seed: int = 0
    blind: bool = True
    kind: str = "rating"
    manifest: str | Path | dict | None = None
    dimensions: tuple | None = None

    def __post_init__(self):
        if self.manifest is not None:
            m = self.manifest if isinstance(self.manifest, dict) else read_rater_manifest(self.manifest)
            if m.get("rater") != self.rater:
                raise RatingError(f"the manifest is for {m.get('rater')!r}, not {self.rater!r}; open your own.")
            unknown = sorted(set(m["items"]) - set(self.items["item_id"]))
            if unknown:
                raise RatingError(f"the manifest names item(s) {unknown[:5]} that are not in the item list.")
            self.items = self.items[self.items["item_id"].isin(set(m["items"]))].reset_index(drop=True)
        if self.kind not in SCHEMES:
            raise RatingError(f"kind must be one of {list(SCHEMES)}, not {self.kind!r}.")
        chosen = self.dimensions
        self.dimensions, self.scale = SCHEMES[self.kind]
        if chosen:
            unknown = sorted(set(chosen) - set(self.dimensions))
            if unknown:
                raise RatingError(f"dimensions {unknown} are not of kind {self.kind!r}; choose from "
                                  f"{list(self.dimensions)}.")
            self.dimensions = {d: self.dimensions[d] for d in self.dimensions if d in set(chosen)}
        if "item_id" not in self.items.columns:
            raise RatingError("items need an 'item_id' column (e.g. items.rename(columns={'test_id': 'item_id'})).")
        dup = self.items["item_id"][self.items["item_id"].duplicated()]
        if len(dup):
            raise RatingError(f"item ids {sorted(set(dup))[:5]} appear twice in the item list.")
        order = np.random.default_rng(self.seed).permutation(len(self.items))
        self.order = self.items["item_id"].to_numpy()[order].tolist()
        self._positions = {item: i for i, item in enumerate(self.order)}
        self._rows = self.items.set_index("item_id", drop=False)
        rater_key(self.rater)  # an unusable name is refused before anything is read or written
        self._latest = {}
        self.refresh()

    def refresh(self) -> None:
        """Read this rater's records again (another tab or machine of the same rater may have added some)."""
        self._latest = _merge(self.store.read(self.rater, self.kind))

    def view(self, item_id: str) -> dict:
        """What the rater sees of an item (blind fields removed in blind mode)."""
        if item_id not in self._positions:
            raise KeyError(f"no item {item_id!r} in this session")
        data = self._rows.loc[item_id].to_dict()
        return {k: v for k, v in data.items() if not (self.blind and k in BLIND_FIELDS)}

    def rated(self) -> dict:
        """item_id -> the latest scores of this rater."""
        return {i: dict(sc) for i, (sc, _) in self._latest.items() if sc}

    def latest(self, item_id: str) -> tuple[dict, str]:
        """This rater's latest (scores, comment) for an item; ({}, "") if never rated."""
        scores, comment = self._latest.get(item_id, ({}, ""))
        return dict(scores), comment

    def rate(self, item_id: str, comment: str | None = None, **scores) -> dict:
        """Store the fields given for an item, at once (on disk, fsynced, when this returns).

        The record carries only these fields (``comment=None``: the comment unchanged), so what another tab of
        this rater saved is kept: the rating is the latest value of each field.
        """
        if item_id not in self._positions:
            raise RatingError(f"{item_id!r} is not an item of this session.")
        unknown = sorted(set(scores) - set(self.dimensions))
        if unknown:
            raise RatingError(f"{item_id}: unknown dimension(s) {unknown} in this session; rate "
                              f"{list(self.dimensions)}. Nothing was saved.")
        record = self.store.add(self.rater, item_id, scores, comment, kind=self.kind)
        old_scores, old_comment = self._latest.get(item_id, ({}, ""))
        self._latest[item_id] = ({**old_scores, **record["scores"]}, record.get("comment", old_comment))
        return record

    def next_unrated(self) -> str | None:
        """Where to resume: the first item in this rater's order without a complete rating."""
        done = self.rated()
        for item in self.order:
            if set(done.get(item, {})) != set(self.dimensions):
                return item
        return None

    def progress(self) -> tuple[int, int]:
        """(items completely rated, items)."""
        done = self.rated()
        return sum(1 for i in self.order if set(done.get(i, {})) == set(self.dimensions)), len(self.order)


# ------------------------------------------------------------------- assignments


def assign(items, raters, per_item: int = 2, seed: int = 0) -> pd.DataFrame:
    """Spread items over raters with a planned overlap, so that agreement can be measured.

    Every item gets ``per_item`` distinct raters, every pair of raters shares at least
    one item, and rater loads differ by at most one. Which items are shared is a seeded
    shuffle. Pairs are covered first (for ``per_item=2``, one item per pair of raters),
    then the remaining items go to the raters with the lightest load.

    Parameters
    ----------
    items : DataFrame or sequence
        A frame with ``item_id`` (as :func:`rating_items` makes), or the ids themselves.
    raters : sequence of str
        Two or more distinct names.
    per_item : int
        Raters per item, from 2 to ``len(raters)``.
    seed : int

    Returns
    -------
    DataFrame
        item_id, rater: one row per assignment, in item order.

    Raises
    ------
    RatingError
        With too few items to give every pair of raters a shared item (the minimum is
        named), more raters per item than raters, or fewer than two raters.

    Examples
    --------
    >>> a = assign([f"Q{i}" for i in range(7)], ["ana", "ben", "cy"], per_item=2)
    >>> bool(a.groupby("item_id").size().eq(2).all()), a.rater.value_counts().tolist()
    (True, [5, 5, 4])
    >>> sorted(overlap(a).shared_items)
    [2, 2, 3]
    """
    ids = list(items["item_id"]) if isinstance(items, pd.DataFrame) else list(items)
    raters = list(raters)
    if len(set(raters)) != len(raters) or len(raters) < 2:
        raise RatingError(f"assign needs two or more distinct raters, got {raters}.")
    if not 2 <= per_item <= len(raters):
        raise RatingError(f"per_item must be from 2 (so that raters overlap) to the number of raters "
                          f"({len(raters)}), not {per_item}.")
    if len(set(ids)) != len(ids):
        raise RatingError("item ids appear twice in the item list.")
    minimum = ceil(comb(len(raters), 2) / comb(per_item, 2))
    if len(ids) < minimum:
        raise RatingError(f"{len(ids)} item(s) cannot give each of the {comb(len(raters), 2)} pairs of "
                          f"{len(raters)} raters a shared item with {per_item} raters per item: at least "
                          f"{minimum} items are needed. Add items, or use fewer raters.")
    rng = np.random.default_rng(seed)
    order = [ids[i] for i in rng.permutation(len(ids))]
    load = {r: 0 for r in raters}
    uncovered = set(combinations(raters, 2))
    rows = []
    for item in order:
        if uncovered:
            # Cover the most uncovered pairs, the lightest raters first among equals.
            group = max(combinations(sorted(raters, key=lambda r: (load[r], raters.index(r))), per_item),
                        key=lambda g: sum(p in uncovered or p[::-1] in uncovered for p in combinations(g, 2)))
        else:
            ranked = sorted(raters, key=lambda r: (load[r], rng.random()))
            group = tuple(ranked[:per_item])
        for pair in combinations(group, 2):
            uncovered.discard(pair)
            uncovered.discard(pair[::-1])
        for r in group:
            load[r] += 1
            rows.append({"item_id": item, "rater": r})
    if uncovered or max(load.values()) - min(load.values()) > 1:
        raise RatingError(f"could not spread {len(ids)} items over {len(raters)} raters with {per_item} per item so "
                          f"that loads differ by at most one and every pair overlaps (loads {load}); add items.")
    position = {item: i for i, item in enumerate(ids)}
    frame = pd.DataFrame(rows, columns=["item_id", "rater"])
    return frame.sort_values(["item_id"], key=lambda s: s.map(position), kind="stable").reset_index(drop=True)


def write_manifests(assignments: pd.DataFrame, folder: str | Path) -> list[Path]:
    """One manifest per rater (``<folder>/<rater>.json``: rater and item ids), for :class:`RatingSession`.

    Examples
    --------
    >>> import tempfile
    >>> from fabnb.data.datasets import load_fab_bench
    >>> plan = assign(rating_items(load_fab_bench()).head(6), ["ana", "ben", "cy"], per_item=2, seed=0)
    >>> paths = write_manifests(plan, tempfile.mkdtemp())
    >>> [read_rater_manifest(p)["rater"] for p in paths], len(read_rater_manifest(paths[0])["items"])
    (['ana', 'ben', 'cy'], 4)
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rater, group in assignments.groupby("rater", sort=True):
        path = manifest_path(folder, rater)
        write_whole(path, json.dumps({"rater": rater, "items": group["item_id"].tolist()}, indent=1))
        paths.append(path)
    return paths


def read_rater_manifest(path: str | Path) -> dict:
    """A rater's manifest: ``{"rater": name, "items": [item ids]}``, checked."""
    path = Path(path)
    try:
        data = json.loads(read_text(path, setting="rater manifest", max_bytes=MAX_FILE_BYTES["manifest"]))
    except FileRefused as exc:
        raise RatingError(f"{path}: not a readable manifest ({exc.reason}); write it with write_manifests().") from None
    except ValueError as exc:
        raise RatingError(f"{path}: not a readable manifest ({exc}); write it with write_manifests().") from None
    if not isinstance(data, dict) or not isinstance(data.get("rater"), str) or not isinstance(data.get("items"), list):
        raise RatingError(f"{path}: a manifest holds 'rater' (text) and 'items' (a list of item ids).")
    return data


def overlap(ratings: pd.DataFrame) -> pd.DataFrame:
    """Which rater pairs share items, and how many: from ratings or from :func:`assign`'s frame.

    Returns
    -------
    DataFrame
        rater_a, rater_b, shared_items (0 where a pair shares none), one row per pair.

    Examples
    --------
    >>> import pandas as pd
    >>> plan = pd.DataFrame({"item_id": ["q1", "q1", "q2", "q2", "q3", "q3"],
    ...                      "rater": ["ana", "ben", "ana", "cy", "ben", "cy"]})
    >>> overlap(plan).values.tolist()
    [['ana', 'ben', 1], ['ana', 'cy', 1], ['ben', 'cy', 1]]
    """
    if not {"rater", "item_id"} <= set(ratings.columns):
        raise RatingError("overlap needs 'rater' and 'item_id' columns (a ratings frame or assign()'s frame).")
    sets = {r: set(g["item_id"]) for r, g in ratings.groupby("rater", sort=True)}
    rows = [{"rater_a": a, "rater_b": b, "shared_items": len(sets[a] & sets[b])} for a, b in combinations(sets, 2)]
    return pd.DataFrame(rows, columns=["rater_a", "rater_b", "shared_items"])
