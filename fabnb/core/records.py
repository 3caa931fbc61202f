"""Append-only JSONL files that survive a crash: the storage under ratings, curation and RAG results.

Each record is one line, written in ``O_APPEND`` mode under an exclusive lock of the file
and fsynced before the call returns: two processes appending to one file cannot
interleave inside a line, and a killed process keeps every record written before it
died. A write the disk cannot take (full, over quota) is taken back whole and raised as
:class:`StoreError` with the file and its free space: a record is on disk whole or not at
all. Reading skips a line cut off by a crash and warns once (:class:`CutRecordWarning`),
naming the file and the line; the next append starts on a fresh line, so nothing after it
is lost, and the cut line itself is left where it is.

:func:`hold` is the lock of a whole run: one writer process per output folder or store.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from .errors import FabnbError
from .schema import RENAMED_MODELS, RESULT_COLUMNS, RESULT_KEYS

__all__ = ['CutRecordWarning', 'HeldError', 'ResultsStore', 'StageRun', 'StoreError', 'append_jsonl', 'cell_key',
           'cut_records', 'held_by', 'hold', 'read_jsonl', 'warn_cut']


class StoreError(FabnbError, OSError):
    """A record could not be written (a full disk, a quota); nothing of it is left in the file."""


class HeldError(FabnbError):
    """Another live process holds the folder or store this one was asked to write."""


class CutRecordWarning(UserWarning):
    """A store holds a line that is cut off or not a record; it is skipped (its cell is asked again), not deleted."""


def _loads(raw: bytes):
    """One stored line's JSON: orjson first (it reads a store 2-3x faster, the results viewer's cold open), json
    for what orjson refuses and json takes (NaN, integers past 64 bits) and for the message of a cut line."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


_warned: set = set()  # (file, line): each cut line is reported once per process


@dataclass
class StageRun:
    """What one stage did to its store: cells done now, skipped (already stored), failed, deferred (a ``limit``).

    The answer grid (:class:`fabnb.rag.GridRun`, where ``asked`` reads ``done``) and the judge
    (:class:`fabnb.judge.JudgeRun`, where ``scored`` reads ``done``) return one.

    Attributes
    ----------
    done : int
        Cells sent this run (failed ones included).
    skipped : int
        Cells already in the store.
    failed : int
    seconds : float
    failures : DataFrame
        The failed cells with their cause.
    deferred : int
        Cells left for a later run by ``limit`` (a budget).

    Examples
    --------
    >>> StageRun(3, 1, 0, 2.04)
    StageRun(done=3, skipped=1, failed=0, seconds=2.0)
    """

    done: int
    skipped: int
    failed: int
    seconds: float
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    deferred: int = 0
    _done_name = "done"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self._done_name}={self.done}, skipped={self.skipped}, failed={self.failed}, "
                f"seconds={self.seconds:.1f}" + (f", deferred={self.deferred})" if self.deferred else ")"))


def append_jsonl(path: str | Path, record: dict, sync: bool = True) -> None:
    """Append one record as a line; it is in the file when this returns, and on disk too unless ``sync`` is False.

    Written means a killed process (kill -9) cannot lose it: the kernel holds it. ``sync`` (fsync) is what an
    operating-system crash or a power cut needs as well; :meth:`ResultsStore.batched` spaces it out.

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
        # The lock makes "look at the last byte, write, take back a short write" one step among the processes
        # appending to this file (two tabs of one rater, say): truncating is safe only while no one else appends.
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # A crash left half a line: start on a new one, or this record would be glued to it and lost.
            line = b"\n" + line
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"only {written} of {len(line)} bytes written")
            if sync:
                os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)  # the record whole or not at all; the records before it are untouched
            raise StoreError(f"{path}: could not write a record ({exc.strerror or exc}); "
                             f"{_free(path)} free on its disk. Nothing of this record is left in the file and every "
                             "earlier record is intact: free some space and run again, and only what is missing "
                             "is done.") from exc
    finally:
        os.close(fd)


def _free(path: str | Path) -> str:
    try:
        free = shutil.disk_usage(Path(path).parent).free
    except OSError:
        return "an unknown amount"
    return f"{free / 1e6:.1f} MB" if free >= 1e5 else f"{free} bytes"


def warn_cut(problems: list[dict], consequence: str) -> None:
    """Warn once per process about each cut or unreadable line (:func:`read_jsonl`'s problems): its file, its line,
    and ``consequence`` (what happens to the record it held). The line itself is left where it is."""
    for p in problems:
        if (p["file"], p["line"]) not in _warned:
            _warned.add((p["file"], p["line"]))
            warnings.warn(f"{p['file']}, line {p['line']}: a cut or unreadable record, skipped; {consequence}, and "
                          f"the line is left where it is ({p['message']})", CutRecordWarning, stacklevel=3)


def cut_records(folder: str | Path) -> list[tuple[str, int]]:
    """The cut or unreadable lines (file, line) this process has read in the stores under ``folder``, each
    reported once as a :class:`CutRecordWarning`; a run's summary counts them."""
    root = str(Path(folder))
    return sorted(key for key in _warned if key[0].startswith(root + os.sep))


@contextlib.contextmanager
def hold(path: str | Path, what: str):
    """Hold ``path`` (a folder, or a store file) for this process: a second holder is refused at once.

    The lock is the operating system's (``flock`` on ``<folder>/.fabnb.lock`` or ``<store>.lock``), held by the
    process: a killed run leaves no stale lock, and the next run takes it. The lock file keeps the holder's
    process id, which the refusal names.

    Raises
    ------
    HeldError
        Another process holds it; the message names the path, the holder and what to do.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with hold(folder, "a run"):
    ...     pass
    """
    path = Path(path)
    lock = path / ".fabnb.lock" if path.is_dir() else path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for attempt in range(5):  # a status probe (held_by) holds it for microseconds: not a second run
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt < 4:
                    time.sleep(0.02)
        else:
            holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
            raise HeldError(f"{path} is in use by {holder}: it is still running, and {what} here would ask and pay "
                            "for the same cells a second time. Wait for it to finish (or stop it), or write to "
                            "another folder.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} ({what})\n".encode(), 0)
        yield lock
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def held_by(path: str | Path) -> str | None:
    """Who holds ``path`` (:func:`hold`'s folder or store), as its lock file names them; None when nobody does.

    It reads the lock without waiting and takes nothing a holder could miss: a shared lock tried for an instant,
    never kept, on a lock file that exists already (a folder never held has none, and none is made).

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> held_by(folder) is None
    True
    >>> with hold(folder, "a run"):
    ...     held_by(folder) is None  # this process holds it: a shared lock from here is refused too
    False
    """
    path = Path(path)
    lock = path / ".fabnb.lock" if path.is_dir() else path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def read_jsonl(path: str | Path, required: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> tuple[list[dict],
                                                                                                list[dict]]:
    """The records of a JSONL file, and its unreadable lines.

    Parameters
    ----------
    required : tuple of str
        Fields a record must have; a line without them counts as unreadable.
    drop : tuple of str
        Fields left out as each line is read (a store's sources can be most of its size).

    Returns
    -------
    (records, problems)
        problems: dicts of file, line, message.
    """
    out, problems, need = [], [], set(required)
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if raw.isspace():  # not raw.strip(): that copies every line (a store's lines are up to ~20 KB)
                continue
            try:
                rec = _loads(raw)
                if not isinstance(rec, dict) or not need <= rec.keys():
                    raise ValueError(f"not a record with {', '.join(required) or 'fields'}")
            except ValueError as exc:
                problems.append({"file": str(path), "line": n,
                                 "message": f"unreadable line skipped ({str(exc)[:80]}); the other lines are loaded"})
                continue
            for name in drop:
                rec.pop(name, None)
            out.append(rec)
    return out, problems


def cell_key(record: dict, keys: tuple[str, ...]) -> tuple:
    """The cell a record belongs to: its ``keys`` fields, context sizes as floats, the rest as text.

    >>> cell_key({"system": "s", "context_k": 4, "test_id": "Q1"}, ("system", "context_k", "test_id"))
    ('s', 4.0, 'Q1')
    """
    return tuple(float(record[k]) if k == "context_k" else
                 RENAMED_MODELS.get(str(record[k]), str(record[k])) if k == "model" else str(record[k]) for k in keys)


class ResultsStore:
    """Records in one append-only JSONL file, one cell per key (RAG answers: system, model, context, mode, question).

    Every answer and every failure is appended (and fsynced) as it arrives. Reading
    keeps the latest record per cell; a line cut off by a crash is reported and skipped.
    The judging stage keeps its scores in the same kind of store, with a longer key.

    Parameters
    ----------
    path : path
        The ``.jsonl`` file (its folder is created).
    keys : tuple of str
        The fields that name a cell.
    columns : list of str, optional
        Column order of :meth:`frame` (default: :data:`RESULT_COLUMNS` for RAG answers).
    """

    def __init__(self, path: str | Path, keys: tuple[str, ...] = RESULT_KEYS, columns: list[str] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keys = tuple(keys)
        self.columns = columns or (RESULT_COLUMNS if self.keys == RESULT_KEYS else None)
        self._lock = threading.Lock()
        self._sync_every = 0.0  # seconds between fsyncs; 0: every record (see batched)
        self._synced = 0.0  # when the last fsync was
        self._unsynced = False

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    def key(self, record: dict) -> tuple:
        """The cell a record belongs to (:func:`cell_key` with this store's keys)."""
        return cell_key(record, self.keys)

    def append(self, record: dict) -> None:
        """Append ``record``: in the file when this returns (a kill -9 cannot lose it), and fsynced now, or within
        the interval of :meth:`batched` while one is open."""
        with self._lock:
            now = time.monotonic()
            sync = now - self._synced >= self._sync_every
            append_jsonl(self.path, record, sync=sync)
            if sync:
                self._synced, self._unsynced = now, False
            else:
                self._unsynced = True

    def sync(self) -> None:
        """fsync what :meth:`append` wrote since the last fsync (nothing to do when it is all on disk)."""
        with self._lock:
            if self._unsynced and self.path.exists():
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._synced, self._unsynced = time.monotonic(), False

    @contextlib.contextmanager
    def batched(self, every: float = 0.2):
        """Within the block, fsync at most every ``every`` seconds instead of after each record, and once at its end.

        Each record is still written to the file before :meth:`append` returns, so a killed process loses none
        of them; an operating-system crash or a power cut could lose the last ``every`` seconds. At hundreds of
        calls in flight one fsync per record costs more than the rest of the record's work (benchmarks/
        bench_concurrency.py)."""
        before = self._sync_every
        self._sync_every = float(every)
        try:
            yield self
        finally:
            self._sync_every = before
            self.sync()

    def records(self, drop: tuple[str, ...] = ()) -> tuple[list[dict], pd.DataFrame]:
        """Every record in file order (without the ``drop`` fields), and the unreadable lines (file, line, message)."""
        if not self.path.exists():
            return [], pd.DataFrame(columns=["file", "line", "message"])
        recs, problems = read_jsonl(self.path, required=self.keys, drop=drop)
        warn_cut(problems, "its cell is asked again")
        return recs, pd.DataFrame(problems, columns=["file", "line", "message"])

    def done(self) -> set:
        """Keys of cells answered successfully."""
        return {self.key(r) for r in self.records(drop=("sources", "answer", "reason"))[0] if r.get("status") == "ok"}

    def frame(self, history: bool = False, drop: tuple[str, ...] = ()) -> pd.DataFrame:
        """The records as a tidy frame, one row per cell unless ``history``.

        A successful record is never replaced by a later failure of the same cell. ``drop`` leaves
        fields out as the file is read (``("sources",)``: the retrieved texts, most of an answer
        store's size).
        """
        recs = self.records(drop=drop)[0]
        frame = pd.DataFrame(recs)
        if "model" in frame.columns:  # a model stored under a name it had before a rename reads as its name now
            frame["model"] = frame["model"].replace(RENAMED_MODELS)
        if self.columns is not None:
            frame = frame.reindex(columns=self.columns)
        if history or frame.empty:
            return frame
        frame["_ok"] = frame["status"].eq("ok")
        frame["_order"] = np.arange(len(frame))
        frame = frame.sort_values(["_ok", "_order"]).drop_duplicates(list(self.keys), keep="last")
        return frame.sort_values("_order").drop(columns=["_ok", "_order"]).reset_index(drop=True)
