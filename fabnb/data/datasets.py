"""The FAB-Bench benchmark as a dataset: 200 curated QA pairs and their evidence corpus.

Where the data comes from, in order:

1. ``path=`` given to :func:`load_fab_bench`;
2. the environment variable ``FABNB_FAB_BENCH_DIR`` (a local copy of the release,
   the folder holding ``QAs/``);
3. the user cache (``$FABNB_CACHE_DIR`` or ``~/.cache/fabnb``), where the public
   release is downloaded on first use at a pinned commit, checked file by file
   against SHA-256 hashes shipped with fabnb, and extracted without ever writing
   outside the cache.

The release is not part of fabnb; it is fetched from its own public repository.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

import pandas as pd

from ..core.errors import FabnbError
from ..core.files import MAX_FILE_BYTES, FileRefused, read_text
from ..core.paths import cache_dir
from ..core.schema import METRICS, QUESTION_FORMATS, TEST_TYPES
from ..corpus.collection import SECTION_COLUMNS, corpus_from_frame
from .plain import PLAIN_SUFFIXES, PlainError, plain_records

__all__ = ['DatasetError', 'FAB_BENCH_COMMIT', 'FAB_BENCH_REPOSITORY', 'GoldSource', 'MAX_ARCHIVE_BYTES',
           'OBJECTIVE_PREFIXES', 'QAPair', 'QASet', 'QA_FRAME_COLUMNS', 'cache_dir', 'download_fab_bench',
           'evidence_corpus', 'evidence_frame', 'extract_release', 'fab_bench_dir', 'load_fab_bench', 'parse_qa',
           'qa_frame', 'read_qa_files', 'verify_fab_bench']

#: The release commit whose files fabnb's manifest pins.
FAB_BENCH_COMMIT = "43b212d6aef65010b48f1d01a36d850f6c885469"
FAB_BENCH_REPOSITORY = "FuturefabAI/FAB-Bench"
#: Upper bound on what an archive may unpack to (a guard against zip bombs).
MAX_ARCHIVE_BYTES = 200 * 1024 * 1024
#: Objective-question prefixes in the released data.
OBJECTIVE_PREFIXES: tuple[str, ...] = ("[Calculation]", "[Fill]", "[Judge]", "[Choice]")


class DatasetError(FabnbError, ValueError):
    """A dataset that cannot be found, fetched, verified or read."""


@dataclass(frozen=True)
class GoldSource:
    """One ground-truth evidence passage of a QA pair."""

    doc_id: str
    section_title: str
    evidence: str
    has_image: bool = False


@dataclass(frozen=True)
class QAPair:
    """One FAB-Bench QA pair, with the field names of the release."""

    test_id: str
    test_type: str
    question_format: str
    question: str
    gold_context_sources: tuple[GoldSource, ...]
    ground_truth_answer: str
    primary_metric: str
    secondary_metrics: tuple[str, ...]
    generation_metadata: dict = field(default_factory=dict, compare=False)
    source_chapter: str = ""
    description: str = ""
    #: The record as read, every field kept, so that a curated set is written back unchanged.
    record: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def objective_subtype(self) -> str | None:
        """``Calculation``, ``Fill``, ``Judge`` or ``Choice`` from the question prefix, else None."""
        for prefix in OBJECTIVE_PREFIXES:
            if self.question.startswith(prefix):
                return prefix.strip("[]")
        return None


def _expect(where: str, record: dict, name: str, kind, choices=None):
    if name not in record:
        raise DatasetError(f"{where}: missing field {name!r}. A FAB-Bench QA record needs test_id, test_type, "
                           "question_format, question, gold_context_sources, ground_truth_answer, primary_metric.")
    value = record[name]
    if not isinstance(value, kind):
        raise DatasetError(f"{where}: field {name!r} should be {getattr(kind, '__name__', kind)}, "
                           f"got {type(value).__name__} ({str(value)[:40]!r}).")
    if choices is not None and value not in choices:
        raise DatasetError(f"{where}: field {name!r} is {value!r}; expected one of {sorted(choices)}.")
    return value


def parse_qa(record: dict, where: str = "QA record") -> QAPair:
    """Check one QA record (a dict in the FAB-Bench schema) and make a :class:`QAPair`.

    Raises
    ------
    DatasetError
        Naming ``where`` and the field that is missing or mistyped.
    """
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(record).__name__}.")
    sources = []
    for i, s in enumerate(_expect(where, record, "gold_context_sources", list)):
        at = f"{where}, gold_context_sources[{i}]"
        if not isinstance(s, dict):
            raise DatasetError(f"{at}: expected an object.")
        sources.append(GoldSource(doc_id=str(_expect(at, s, "doc_id", (str, int))),
                                  section_title=str(s.get("section_title", "")),
                                  evidence=_expect(at, s, "evidence", str),
                                  has_image=bool(s.get("has_image", False))))
    secondary = record.get("secondary_metrics", [])
    if not isinstance(secondary, list) or not all(m in METRICS for m in secondary):
        raise DatasetError(f"{where}: field 'secondary_metrics' should be a list of {list(METRICS)}.")
    return QAPair(
        test_id=_expect(where, record, "test_id", str),
        test_type=_expect(where, record, "test_type", str, TEST_TYPES),
        question_format=_expect(where, record, "question_format", str, QUESTION_FORMATS),
        question=_expect(where, record, "question", str),
        gold_context_sources=tuple(sources),
        ground_truth_answer=_expect(where, record, "ground_truth_answer", str),
        primary_metric=_expect(where, record, "primary_metric", str, METRICS),
        secondary_metrics=tuple(secondary),
        generation_metadata=record.get("generation_metadata") or {},
        source_chapter=str(record.get("source_chapter", "")),
        description=str(record.get("test_description") or record.get("description") or ""),
        record=dict(record),
    )


@dataclass
class QASet:
    """QA pairs read from files, and the files that could not be read."""

    pairs: list[QAPair]
    problems: pd.DataFrame

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self):
        return iter(self.pairs)


def read_qa_files(paths, on_error: str = "warn") -> QASet:
    """Read FAB-Bench-format QA JSON files, or one's own questions in a CSV or JSON Lines file (a question a row:
    :mod:`fabnb.data.plain`); a broken file or row is listed, the rest load.

    Parameters
    ----------
    paths : iterable of paths, a folder (searched recursively for ``*.json`` other than
        ``_benchmark_summary.json``), or one file (``.json``, ``.csv`` or ``.jsonl``)
    on_error : {"warn", "raise"}
        ``"raise"`` reads every file, then raises one :class:`DatasetError` that names every
        bad file; ``"warn"`` keeps what loads and lists the rest in ``problems``.

    Returns
    -------
    QASet
        pairs in test_id order, and problems (path, message: what is wrong, without the path).
        A test_id seen twice is a problem.

    Examples
    --------
    >>> qa = read_qa_files(fab_bench_dir() / "QAs")
    >>> len(qa), qa.problems.empty
    (200, True)
    """
    if isinstance(paths, (str, Path)):
        if not Path(paths).exists():
            raise DatasetError(f"{paths}: no such file or folder of QA JSON files.")
        paths = (sorted(p for p in Path(paths).rglob("*.json") if not p.name.startswith("_"))
                 if Path(paths).is_dir() else [paths])
    pairs, problems, seen = [], [], {}
    for path in paths:
        path = Path(path)
        if path.suffix.lower() in PLAIN_SUFFIXES:  # one's own questions, a row each (fabnb.data.plain)
            _read_plain(path, pairs, problems, seen)
            continue
        try:
            try:
                record = json.loads(read_text(path, setting="QA file", max_bytes=MAX_FILE_BYTES["qa"]))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}: not valid JSON ({exc}).") from None
            except FileRefused as exc:  # not a regular file, too large, not UTF-8: said without the setting
                raise DatasetError(f"{path}: {exc.reason}") from None
            pair = parse_qa(record, str(path))
            if pair.test_id in seen:
                raise DatasetError(f"{path}: test_id {pair.test_id!r} already read from {seen[pair.test_id]}.")
        except DatasetError as exc:
            message = str(exc)
            # The path is its own column: say it once.
            message = message[len(f"{path}: "):] if message.startswith(f"{path}: ") else message
            problems.append({"path": str(path), "message": message})
            continue
        seen[pair.test_id] = path
        pairs.append(pair)
    if problems and on_error == "raise":
        listing = "\n".join(f"- {p['path']}: {p['message']}" for p in problems)
        raise DatasetError(f"{len(problems)} QA file(s) could not be read:\n{listing}")
    pairs.sort(key=lambda p: p.test_id)
    return QASet(pairs, pd.DataFrame(problems, columns=["path", "message"]))


def _read_plain(path: Path, pairs: list, problems: list, seen: dict) -> None:
    """The rows of a plain question file (CSV or JSONL) into ``pairs``; a file that cannot be read, or a row that
    does not check, into ``problems`` (its line named)."""
    try:
        records = plain_records(path)
    except PlainError as exc:
        message = str(exc).removeprefix(f"{path.name}: ").removeprefix(f"{path.name}, ")  # the path is its column
        problems.append({"path": str(path), "message": message})
        return
    for where, record in records:
        try:
            pair = parse_qa(record, where)
            if pair.test_id in seen:
                raise DatasetError(f"{where}: test_id {pair.test_id!r} already read from {seen[pair.test_id]}; "
                                   "give each row its own id.")
        except DatasetError as exc:
            problems.append({"path": str(path), "message": str(exc).removeprefix(f"{path.name}, ")})
            continue
        seen[pair.test_id] = where
        pairs.append(pair)


QA_FRAME_COLUMNS = ["test_id", "test_type", "question_format", "objective_subtype", "question", "ground_truth_answer",
                    "primary_metric", "secondary_metrics", "n_sources", "doc_ids", "precision_level",
                    "technical_density", "temperature_used"]


def qa_frame(pairs) -> pd.DataFrame:
    """One row per QA pair.

    Returns
    -------
    DataFrame
        test_id, test_type, question_format, objective_subtype, question,
        ground_truth_answer, primary_metric, secondary_metrics (tuple), n_sources,
        doc_ids (tuple), precision_level, technical_density, temperature_used
        (the last three from generation_metadata, where present).

    Examples
    --------
    >>> qa_frame(load_fab_bench()).loc[0, ["test_id", "test_type", "question_format"]].tolist()
    ['GEN_001', 'generation_quality', 'OBJECTIVE']
    """
    rows = []
    for p in pairs:
        meta = p.generation_metadata or {}
        analysis = meta.get("semiconductor_analysis") or {}
        rows.append({
            "test_id": p.test_id, "test_type": p.test_type, "question_format": p.question_format,
            "objective_subtype": p.objective_subtype, "question": p.question,
            "ground_truth_answer": p.ground_truth_answer, "primary_metric": p.primary_metric,
            "secondary_metrics": p.secondary_metrics, "n_sources": len(p.gold_context_sources),
            "doc_ids": tuple(dict.fromkeys(s.doc_id for s in p.gold_context_sources)),
            "precision_level": analysis.get("precision_level"),
            "technical_density": analysis.get("technical_density"),
            "temperature_used": meta.get("temperature_used"),
        })
    return pd.DataFrame(rows, columns=QA_FRAME_COLUMNS)


def evidence_frame(pairs) -> pd.DataFrame:
    """Every gold evidence passage, one row per (QA pair, passage).

    Returns
    -------
    DataFrame
        test_id, source (index within the pair), doc_id, section_title, evidence, has_image.

    Examples
    --------
    >>> ev = evidence_frame(load_fab_bench())
    >>> list(ev.columns), len(ev) >= 200
    (['test_id', 'source', 'doc_id', 'section_title', 'evidence', 'has_image'], True)
    """
    rows = [{"test_id": p.test_id, "source": i, "doc_id": s.doc_id, "section_title": s.section_title,
             "evidence": s.evidence, "has_image": s.has_image}
            for p in pairs for i, s in enumerate(p.gold_context_sources)]
    return pd.DataFrame(rows)


def evidence_corpus(pairs):
    """The evidence corpus: one document per ``doc_id``, made of its distinct passages.

    Passages keep their first-seen order; each becomes a section (its
    ``section_title``) of the document, separated by blank lines. On the released
    benchmark this gives 127 documents and 341 distinct passages.

    Returns
    -------
    fabnb.corpus.collection.Corpus

    Examples
    --------
    >>> corpus = evidence_corpus(load_fab_bench())
    >>> len(corpus.documents), len(corpus.sections)
    (127, 341)
    """

    ev = evidence_frame(pairs).drop_duplicates(["doc_id", "evidence"])
    docs, sections = [], []
    for doc_id, g in ev.groupby("doc_id", sort=False):
        parts, pos = [], 0
        for i, row in enumerate(g.itertuples()):
            sections.append({"doc_id": doc_id, "section": i, "title": row.section_title,
                             "char_start": pos, "char_end": pos + len(row.evidence)})
            parts.append(row.evidence)
            pos += len(row.evidence) + 2
        docs.append({"doc_id": doc_id, "path": "", "format": "fab-bench-evidence", "text": "\n\n".join(parts)})
    return corpus_from_frame(pd.DataFrame(docs), pd.DataFrame(sections, columns=SECTION_COLUMNS))


# -------------------------------------------------------- where the data lives


def _manifest() -> pd.DataFrame:
    with resources.files("fabnb.data.published").joinpath("fab_bench_manifest.csv").open(encoding="utf-8") as fh:
        return pd.read_csv(fh)


def verify_fab_bench(root: str | Path) -> None:
    """Check that ``root/QAs`` holds exactly the pinned release: every file, unaltered, and nothing else.

    Raises
    ------
    DatasetError
        Naming every missing, altered or extra file at once.
    """
    root = Path(root)
    manifest = _manifest()
    problems = []
    for row in manifest.itertuples():
        path = root / row.path
        if not path.is_file():
            problems.append(f"{row.path}: missing")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != row.sha256:
            problems.append(f"{row.path}: SHA-256 {digest[:12]}... differs from the release's {row.sha256[:12]}... "
                            "(altered, or from another commit)")
    known = set(manifest["path"])
    if (root / "QAs").is_dir():
        for path in sorted((root / "QAs").rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in known:
                problems.append(f"{rel}: not part of the release (an extra file would be read as QA data)")
    if problems:
        listing = "\n".join(f"- {p}" for p in problems)
        raise DatasetError(f"{root} is not the pinned FAB-Bench release ({FAB_BENCH_COMMIT[:12]}):\n{listing}\n"
                           "Remove the extra files, or fetch the release again (delete the folder; "
                           "fabnb downloads and verifies it), or load a folder of your own with "
                           "read_qa_files(path), which checks no hashes.")


def _safe_member(name: str) -> PurePosixPath | None:
    """The member's path below the archive's top folder, or None if it must not be extracted."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or (path.parts and ":" in path.parts[0]):
        return None
    return PurePosixPath(*path.parts[1:]) if len(path.parts) > 1 else None


def extract_release(archive: bytes, target: Path) -> int:
    """Extract the ``QAs/`` folder of a release archive into ``target``, safely.

    Members with absolute paths, ``..``, drive letters or backslashes, symbolic
    links, anything outside ``QAs/``, and archives that would unpack to more than
    :data:`MAX_ARCHIVE_BYTES` are refused; nothing is written outside ``target``.

    Returns
    -------
    int
        The number of files written.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(archive))
    except zipfile.BadZipFile:
        raise DatasetError("the downloaded release is not a zip archive.") from None
    members, total = [], 0
    for info in zf.infolist():
        rel = _safe_member(info.filename)
        is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
        if rel is None or is_link:
            if rel is None and info.filename.count("/") <= 1 and info.is_dir():
                continue  # the archive's own top folder
            raise DatasetError(f"the release archive holds a member that would escape the cache: "
                               f"{info.filename!r}; refusing to extract it.")
        if not rel.parts or rel.parts[0] != "QAs" or info.is_dir():
            continue
        total += info.file_size
        if total > MAX_ARCHIVE_BYTES:
            raise DatasetError(f"the release archive unpacks to more than {MAX_ARCHIVE_BYTES} bytes; refusing it.")
        members.append((info, rel))
    target = target.resolve()
    for info, rel in members:
        dest = (target / Path(*rel.parts)).resolve()
        if target not in dest.parents:
            raise DatasetError(f"member {info.filename!r} resolves outside the cache; refusing it.")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with zf.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise DatasetError(f"the release archive is corrupt at {info.filename!r} ({exc}); "
                               "download it again.") from None
    return len(members)


def download_fab_bench(target: Path | None = None, url: str | None = None, timeout: float = 60.0) -> Path:
    """Download the pinned FAB-Bench release into the cache, verify it, and return its folder.

    Parameters
    ----------
    target : path, optional
        Default ``cache_dir() / "fab-bench" / FAB_BENCH_COMMIT``.
    url : str, optional
        The archive; default ``$FABNB_FAB_BENCH_URL`` or the repository's archive at the pinned commit.

    Notes
    -----
    The archive is extracted into a temporary folder inside the cache, verified,
    and only then moved into place, so an interrupted download leaves nothing half-made.
    """

    target = Path(target) if target else cache_dir() / "fab-bench" / FAB_BENCH_COMMIT
    url = url or os.environ.get("FABNB_FAB_BENCH_URL") or \
        f"https://github.com/{FAB_BENCH_REPOSITORY}/archive/{FAB_BENCH_COMMIT}.zip"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            archive = response.read(MAX_ARCHIVE_BYTES + 1)
    except OSError as exc:
        raise DatasetError(f"could not download FAB-Bench from {url} ({exc}). Without network, point "
                           "FABNB_FAB_BENCH_DIR at a local copy of the release.") from None
    if len(archive) > MAX_ARCHIVE_BYTES:
        raise DatasetError(f"{url}: the download exceeds {MAX_ARCHIVE_BYTES} bytes; refusing it.")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        extract_release(archive, staging)
        verify_fab_bench(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def fab_bench_dir(path: str | Path | None = None, download: bool = True) -> Path:
    """The folder holding the release's ``QAs/``: ``path``, ``$FABNB_FAB_BENCH_DIR``, or the cache.

    Examples
    --------
    >>> (fab_bench_dir() / "QAs").is_dir()  # the suite reads a local copy; else the cache, downloaded once
    True
    """
    for candidate, origin in ((path, "path="), (os.environ.get("FABNB_FAB_BENCH_DIR"), "FABNB_FAB_BENCH_DIR")):
        if candidate:
            root = Path(candidate)
            if not (root / "QAs").is_dir():
                raise DatasetError(f"{origin} {root} has no QAs/ folder; point it at the folder that holds QAs/.")
            return root
    cached = cache_dir() / "fab-bench" / FAB_BENCH_COMMIT
    if (cached / "QAs").is_dir():
        return cached
    if not download:
        raise DatasetError(f"FAB-Bench is not in the cache ({cached}); call download_fab_bench().")
    return download_fab_bench(cached)


def load_fab_bench(path: str | Path | None = None, verify: bool = True) -> QASet:
    """The 200 curated FAB-Bench QA pairs.

    Parameters
    ----------
    path : path, optional
        A local copy of the release (the folder holding ``QAs/``).
    verify : bool
        Check every file against the pinned release's SHA-256 first.

    Examples
    --------
    The first call downloads and verifies the release (the test suite reads a local copy).

    >>> qa = load_fab_bench()
    >>> qa_frame(qa).test_type.value_counts().to_dict()
    {'multi_hop': 90, 'robustness': 59, 'generation_quality': 51}
    """
    root = fab_bench_dir(path)
    if verify:
        verify_fab_bench(root)
    return read_qa_files(root / "QAs", on_error="raise")
