"""Append-only JSONL files that survive a crash: the storage under ratings, curation and RAG results.

Each record is one line, written with one ``write()`` in ``O_APPEND`` mode and fsynced
before the call returns: two processes appending to one file cannot interleave inside
a line, and a killed process keeps every record written before it died. Reading skips
(and reports) a line cut off by a crash; the next append starts on a fresh line, so
nothing after it is lost.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one record as a line; it is on disk when this returns.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.jsonl"
    >>> append_jsonl(p, {"a": 1}); read_jsonl(p)
    ([{'a': 1}], [])
    """
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # A crash left half a line: start on a new one, or this record would be glued to it and lost.
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> tuple[list[dict], list[dict]]:
    """The records of a JSONL file, and its unreadable lines.

    Parameters
    ----------
    required : tuple of str
        Fields a record must have; a line without them counts as unreadable.

    Returns
    -------
    (records, problems)
        problems: dicts of file, line, message.
    """
    out, problems = [], []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict) or any(k not in rec for k in required):
                    raise ValueError(f"not a record with {', '.join(required) or 'fields'}")
            except ValueError as exc:
                problems.append({"file": str(path), "line": n,
                                 "message": f"unreadable line skipped ({str(exc)[:80]}); the other lines are loaded"})
                continue
            out.append(rec)
    return out, problems
