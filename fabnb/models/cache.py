"""The response cache: every answer a client got, in one SQLite file, keyed by the request (:func:`request_key`).

One transaction per answer (WAL journal): a killed run loses at most the calls in flight, and an identical rerun
makes no call. :class:`fabnb.models.llm.LLM` reads and writes it; a batch's replies are put in it too
(:mod:`fabnb.models.batch`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from pathlib import Path

from ..core.paths import llm_cache_path

__all__ = ["CacheWarning", "ResponseCache", "default_cache_path", "request_key"]

def request_key(base_url: str, model: str, messages: list, params: dict) -> str:
    """The cache key of a request: SHA-256 of its canonical JSON (base URL, model, messages, parameters)."""
    body = {"base_url": base_url.rstrip("/"), "model": model, "messages": messages,
            "params": {k: params[k] for k in sorted(params) if params[k] is not None}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


_CACHE_COLUMNS = ("key", "request", "response", "created")


class CacheWarning(UserWarning):
    """The response cache could not be read and was moved aside; a fresh one is used."""


class ResponseCache:
    """A persistent cache of answers in one SQLite file.

    Every answer is committed in its own transaction as it arrives (WAL journal), so a
    killed process leaves every earlier answer readable and no half-written row (a power
    cut may take back the last few, which are then asked again). Safe to share between
    threads and processes.

    Parameters
    ----------
    path : path
        The SQLite file; its folder is created. A file SQLite cannot read (not a database, malformed, the
        table of another release) is moved aside with a timestamp and a :class:`CacheWarning`, and a new cache
        is started: the stores, not the cache, are the record of what was done.
    timeout : float
        Seconds to wait for another process's lock; a lock is a live process, never taken for corruption.
    """

    def __init__(self, path: str | Path, timeout: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._timeout = timeout  # how long to wait for another process's write lock
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            # "database is locked" is a live process sharing the cache (SQLite's locks die with their process):
            # that is waited for (timeout) or raised, never taken for corruption.
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            aside = self._move_aside()
            warnings.warn(f"the response cache {self.path} could not be read ({exc}); it was moved to {aside} "
                          "and a new cache started. Nothing stored is lost: the run's stores, not the cache, hold "
                          "what was done, so no stored cell is asked again.", CacheWarning, stacklevel=2)
            self._db = self._open()
        self._idle: list[sqlite3.Connection] = []  # read connections not in use

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=self._timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed row survives a killed process (what resume needs); only a
            # power cut may take the last few back, and those are asked again. FULL fsyncs every row.
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, request TEXT NOT NULL, "
                       "response TEXT NOT NULL, created REAL NOT NULL)")
            columns = [row[1] for row in db.execute("PRAGMA table_info(responses)")]
            if columns != list(_CACHE_COLUMNS):
                raise sqlite3.DatabaseError(f"its responses table has the columns {columns} of another fabnb "
                                            f"release, not {list(_CACHE_COLUMNS)}")
            db.execute("SELECT key FROM responses LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        return db

    def _move_aside(self) -> Path:
        """Rename the cache and its -wal and -shm files with a timestamp (never deleted); the new name."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = self.path.with_name(self.path.name + suffix)
            if src.exists():
                os.replace(src, aside.with_name(aside.name + suffix))
        return aside

    def get(self, key: str) -> dict | None:
        # Reads borrow a connection of their own: WAL readers wait neither for the writer nor for
        # each other. The pool grows to the number of threads reading at once, then is reused.
        with self._lock:
            db = self._idle.pop() if self._idle else None
        if db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, timeout=self._timeout, isolation_level=None)
        try:
            row = db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        finally:
            with self._lock:
                self._idle.append(db)
        return json.loads(row[0]) if row else None

    def delete(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM responses WHERE key = ?", (key,))

    def put(self, key: str, request: dict, response: dict) -> None:
        # Encoded before the lock: a prompt of 100 KB must not hold the other threads' writes.
        row = (key, json.dumps(request, ensure_ascii=False), json.dumps(response), time.time())
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)", row)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            for db in self._idle:
                db.close()
            self._idle.clear()
            self._db.close()

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"


def default_cache_path() -> Path:
    """``$FABNB_CACHE_DIR/llm.sqlite`` (default ``~/.cache/fabnb/llm.sqlite``)."""
    return llm_cache_path()
