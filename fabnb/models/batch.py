"""Batch APIs: the same calls at about half the price, through OpenAI-compatible Files and Batches routes.

A stage in batch mode does not change how it asks: it runs once with its clients *collecting* (:func:`captured`:
a request the response cache cannot answer is recorded, not sent), the collected requests go to the provider as
batch files (:func:`run_batches`), and every reply is kept in the response cache under the request's key
(:meth:`fabnb.models.llm.LLM.store_reply`). The ordinary online stage then runs and finds its replies there, so
validation, failure causes and stores are those of an online run by construction; what no batch answered is asked
online (or in the next batch, ``retry="batch"``).

Exactly once: a batch file's lines are sorted by key, so the same missing cells make the same file and the same
SHA-256; the batch's id and that hash go to the run folder's ``batches.json`` as soon as the create call returns,
and the hash rides in the batch's ``metadata``. A run killed between create and record finds its batch by paging
through ``batches.list`` (it has no metadata filter); a rerun polls the batches it recorded instead of submitting
them again; an expired or cancelled batch keeps the lines it completed, and only the rest is submitted again.

Self-hosted: :func:`export_requests` writes the same lines for vLLM's ``run_batch`` (``--input-file``), and
:func:`import_replies` reads its ``--output-file`` into the cache.

Examples
--------
>>> lines = request_lines([("k2", {"model": "m", "messages": []}), ("k1", {"model": "m", "messages": []}),
...                        ("k2", {"model": "m", "messages": []})])
>>> [line["custom_id"] for line in lines], lines[0]["url"]
(['k1', 'k2'], '/v1/chat/completions')
>>> len(split_files(lines, max_lines=1))
2
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import CausedError

__all__ = ["BATCH_ENDPOINT", "BatchError", "BatchLedger", "BatchRun", "LEDGER", "MAX_BYTES", "MAX_LINES", "TERMINAL",
           "cancel_open", "captured", "check_routes", "export_requests", "file_hash", "find_batch", "import_replies",
           "read_output", "request_lines", "run_batches", "split_files"]

BATCH_ENDPOINT = "/v1/chat/completions"
#: OpenAI's limits on one batch's input file: 50,000 requests and 200 MB.
MAX_LINES = 50_000
MAX_BYTES = 200 * 1024 * 1024
#: The run folder's record of its batches (one entry per input file's hash).
LEDGER = "batches.json"
TERMINAL = ("completed", "failed", "expired", "cancelled")
_HASH_KEY = "fabnb_input_sha256"


class BatchError(CausedError):
    """A batch could not be submitted or read (cause ``config`` for a provider without the routes)."""


@contextlib.contextmanager
def captured(*llms):
    """Let ``llms`` collect instead of call: inside, a request their cache cannot answer is recorded and ends with
    :class:`fabnb.models.llm.LLMError` ``captured``. Yields the list of ``(llm, key, body)`` collected.

    Examples
    --------
    >>> from fabnb.models.llm import LLM, LLMError
    >>> llm = LLM("m", "http://127.0.0.1:9/v1", cache=False)
    >>> with captured(llm) as requests:
    ...     try:
    ...         llm.complete("2 + 2?", max_tokens=5)
    ...     except LLMError as exc:
    ...         cause = exc.cause
    >>> cause, len(requests), requests[0][2]["max_tokens"], llm.capture is None
    ('captured', 1, 5, True)
    """
    lists = [[] for _ in llms]
    for llm, got in zip(llms, lists):
        llm.capture = got
    out: list = []
    try:
        yield out
    finally:
        for llm, got in zip(llms, lists):
            llm.capture = None
            out.extend((llm, key, body) for key, body in got)


def request_lines(requests) -> list[dict]:
    """Batch input lines from ``(key, body)`` pairs: one per key (the first body), sorted by key, so the same
    requests always make the same file."""
    seen: dict[str, dict] = {}
    for key, body in requests:
        seen.setdefault(key, body)
    return [{"custom_id": k, "method": "POST", "url": BATCH_ENDPOINT, "body": seen[k]} for k in sorted(seen)]


def split_files(lines: list[dict], max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> list[bytes]:
    """The lines as JSONL files within the provider's limits (lines and bytes per file), in order."""
    files, part, size = [], [], 0
    for line in lines:
        data = (json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n").encode()
        if len(data) > max_bytes:
            raise BatchError(f"one request ({line['custom_id'][:12]}) is {len(data):,} bytes, over a batch file's "
                             f"{max_bytes:,}: answer it online.", "config")
        if part and (len(part) >= max_lines or size + len(data) > max_bytes):
            files.append(b"".join(part))
            part, size = [], 0
        part.append(data)
        size += len(data)
    if part:
        files.append(b"".join(part))
    return files


def file_hash(data: bytes) -> str:
    """SHA-256 of a batch input file: its identity in the ledger and in the batch's metadata."""
    return hashlib.sha256(data).hexdigest()


class BatchLedger:
    """``batches.json`` in a run folder: per input file's hash, the batch it went into and what became of it.

    Written whole or not at all after every change (a temporary file, then a rename).
    """

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / LEDGER
        self.entries: dict[str, dict] = {}
        if self.path.exists():
            self.entries = json.loads(self.path.read_text(encoding="utf-8")).get("batches", {})

    def get(self, digest: str) -> dict | None:
        return self.entries.get(digest)

    def put(self, digest: str, **values) -> dict:
        entry = {**self.entries.get(digest, {}), **values}
        self.entries[digest] = entry
        self.save()
        return entry

    def save(self) -> None:
        from ..core.files import write_whole

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(self.path, json.dumps({"batches": self.entries}, indent=2, sort_keys=True))


def check_routes(client, setting: str) -> None:
    """Refuse, before any cell is sent, a provider without the Batches routes, naming the setting that asked."""
    import openai

    try:
        client.batches.list(limit=1)
    except (openai.NotFoundError, openai.BadRequestError, openai.PermissionDeniedError,
            openai.UnprocessableEntityError) as exc:
        raise BatchError(f"{client.base_url} has no batch routes (GET /batches answered {exc.status_code}): "
                         f"{setting} = \"batch\" needs a provider with OpenAI's Files and Batches API. Set it to "
                         "\"online\", or use `fabnb batch export` and vLLM's run_batch.", "config") from None
    except openai.APIConnectionError as exc:
        raise BatchError(f"{client.base_url} could not be reached for its batch routes ({exc}); {setting} = "
                         "\"batch\" needs it.", "connection") from None


def find_batch(client, digest: str):
    """The newest batch whose metadata carries ``digest`` (paging through every batch: the list has no filter),
    or None."""
    for batch in client.batches.list(limit=100):  # the page iterator follows ``after`` to the end
        if (batch.metadata or {}).get(_HASH_KEY) == digest:
            return batch
    return None


@dataclass
class BatchRun:
    """What :func:`run_batches` did.

    Attributes
    ----------
    requests : int
        Distinct requests collected.
    submitted, adopted : list of str
        Batch ids created by this call; ids found in the ledger or by listing (a rerun's, a killed run's).
    stored : int
        Replies kept in the response cache.
    failed : dict
        custom_id -> why, for lines answered with an error or a non-completion.
    left : list of str
        Keys no batch answered (the online stage asks them).
    """

    requests: int = 0
    submitted: list = field(default_factory=list)
    adopted: list = field(default_factory=list)
    stored: int = 0
    failed: dict = field(default_factory=dict)
    left: list = field(default_factory=list)


def _read_lines(client, file_id: str | None) -> list[dict]:
    if not file_id:
        return []
    return _lines(client.files.content(file_id).text, f"the provider's file {file_id}")


def _lines(text: str, where: str) -> list[dict]:
    """The objects of a batch output text; :class:`BatchError` naming ``where`` and the line for one that is not."""
    from ..core.files import json_lines

    out = []
    for number, line, why in json_lines(text):
        if why:
            raise BatchError(f"{where}: line {number} is {why}; a batch output file has one JSON object per line, "
                             "as run_batch writes it.", "bad-body")
        out.append(line)
    return out


def _keep(llm, bodies: dict, lines, run: BatchRun, foreign: str | None = None) -> set:
    """Keep the replies of batch output lines in ``llm``'s cache; the keys answered. A line answered with an error
    is counted in ``run.failed`` with its reason; one for a request not in ``bodies`` is skipped, or counted failed
    with ``foreign`` as its reason."""
    done = set()
    for line in lines:
        key = line.get("custom_id")
        if key not in bodies:
            if foreign:
                run.failed[str(key)] = foreign
            continue
        response = line.get("response") or {}
        if response.get("status_code") == 200 and not line.get("error"):
            try:
                llm.store_reply(key, bodies[key], response.get("body"))
            except CausedError as exc:
                run.failed[key] = str(exc)
                continue
            done.add(key)
            run.stored += 1
        else:
            error = line.get("error") or (response.get("body") or {}).get("error") or {}
            run.failed[key] = (f"{response.get('status_code', '')} {error.get('code', '')} {error.get('message', '')}"
                               if isinstance(error, dict) else str(error))
    return done


def _submit(client, data: bytes, digest: str, stage: str, ledger: BatchLedger, echo) -> str:
    upload = client.files.create(file=(f"fabnb-{stage}-{digest[:12]}.jsonl", data), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint=BATCH_ENDPOINT, completion_window="24h",
                                  metadata={_HASH_KEY: digest, "fabnb_stage": stage})
    # Recorded before anything else: a kill from here on finds the batch in the ledger, and before it, by listing.
    n = data.count(b"\n")
    ledger.put(digest, batch_id=batch.id, stage=stage, lines=n, status=batch.status, submitted=time.time(),
               endpoint=str(client.base_url))
    echo(f"batch {batch.id}: {n:,} requests of {stage} submitted")
    return batch.id


def _batch_of(client, data: bytes, digest: str, stage: str, ledger: BatchLedger, echo, submit: bool,
              run: BatchRun) -> str | None:
    """The batch of one input file: the ledger's, else one found by listing (a run killed before recording it), else
    a new one (``submit``); without ``submit`` an open one is cancelled, and None is returned for none."""
    entry = ledger.get(digest)
    batch_id = entry.get("batch_id") if entry else None
    if batch_id is None:
        found = find_batch(client, digest)
        if found is not None:
            batch_id = found.id
            ledger.put(digest, batch_id=batch_id, stage=stage, lines=data.count(b"\n"), status=found.status,
                       submitted=found.created_at, found_by="listing", endpoint=str(client.base_url))
            echo(f"batch {batch_id}: found by its input's hash (submitted before a stop), not submitted again")
    if batch_id is None:
        if not submit:
            return None
        batch_id = _submit(client, data, digest, stage, ledger, echo)
        run.submitted.append(batch_id)
        return batch_id
    run.adopted.append(batch_id)
    if not submit and (ledger.get(digest) or {}).get("status") not in TERMINAL:
        _cancel(client, ledger, digest, batch_id, echo, "the budget cannot pay for it")
    return batch_id


def _cancel(client, ledger: BatchLedger, digest: str, batch_id: str, echo, why: str) -> bool:
    """Cancel one batch unless it has ended (asked of the provider: the ledger may be behind it), and record its
    status; whether it was cancelled. What it completed is billed, and read by the next run."""
    status = client.batches.retrieve(batch_id).status
    cancelled = status not in TERMINAL
    if cancelled:
        status = client.batches.cancel(batch_id).status
    ledger.put(digest, status=status)
    echo(f"batch {batch_id}: " + (f"cancelled ({why}); what it completed is billed, and kept" if cancelled
                                  else f"{status}, not cancelled"))
    return cancelled


def _poll(client, ids: list, ledger: BatchLedger, digests: dict, poll_s: float, echo, progress) -> dict:
    """Wait for every batch to end; their last state by id."""
    states, said = {}, {}
    open_ids = list(ids)
    while open_ids:
        for batch_id in list(open_ids):
            batch = client.batches.retrieve(batch_id)
            counts = batch.request_counts
            state = (batch.status, counts.completed if counts else 0, counts.total if counts else 0)
            if said.get(batch_id) != state:
                said[batch_id] = state
                ledger.put(digests[batch_id], status=batch.status)
                echo(f"batch {batch_id}: {batch.status} {state[1]:,}/{state[2]:,}")
                if progress is not None:
                    progress(batch_id, *state)
            if batch.status in TERMINAL:
                states[batch_id] = batch
                open_ids.remove(batch_id)
        if open_ids:
            time.sleep(poll_s)
    return states


def run_batches(llm, requests, folder: str | Path, *, stage: str, poll_s: float = 30.0, retry: str = "batch",
                rounds: int = 3, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES, echo=print,
                progress=None, setting: str = "mode", submit: bool = True) -> BatchRun:
    """Answer ``requests`` through ``llm``'s endpoint's batch routes and keep every reply in its response cache.

    Parameters
    ----------
    llm : fabnb.models.llm.LLM
        The endpoint (and cache) the requests belong to.
    requests : iterable of (key, body)
        From :func:`captured` (its ``llm`` entries).
    folder : path
        The run folder: ``batches.json`` goes there.
    stage : str
        A label for the files and the metadata (``answers``, ``judge``).
    retry : {"batch", "online"}
        Lines a batch did not answer (failed, expired, cancelled) go into the next batch, up to ``rounds`` in all;
        or are left to the online stage.
    progress : callable, optional
        ``progress(batch_id, status, completed, total)`` on every change.
    setting : str
        The setting that asked for batch mode, named when the provider has no batch routes.
    submit : bool
        False when the budget cannot pay for a batch: nothing is submitted, and the batches these requests are
        already in (a stopped run's) are cancelled, then read, so what they completed (and is billed) is kept.

    Returns
    -------
    BatchRun
    """
    if retry not in ("batch", "online"):
        raise ValueError(f"retry must be 'batch' or 'online', not {retry!r}")
    lines = request_lines(requests)
    bodies = {line["custom_id"]: line["body"] for line in lines}
    run = BatchRun(requests=len(lines))
    if not lines:
        return run
    client = llm.openai_client()
    check_routes(client, setting)
    ledger = BatchLedger(folder)
    answered: set = set()
    for round_ in range(rounds):
        todo = [line for line in lines if line["custom_id"] not in answered]
        if not todo:
            break
        ids, digests = [], {}
        for data in split_files(todo, max_lines, max_bytes):
            digest = file_hash(data)
            batch_id = _batch_of(client, data, digest, stage, ledger, echo, submit, run)
            if batch_id is not None:
                ids.append(batch_id)
                digests[batch_id] = digest
        for batch in _poll(client, ids, ledger, digests, poll_s, echo, progress).values():
            answered |= _keep(llm, bodies, _read_lines(client, batch.output_file_id)
                              + _read_lines(client, batch.error_file_id), run)
        if retry == "online" or not submit:
            break
    run.left = [k for k in bodies if k not in answered]
    for key in answered:
        run.failed.pop(key, None)
    return run


def cancel_open(llms, folder: str | Path, echo=print) -> list:
    """Cancel every batch of the ledger that has not ended, whatever its requests (a user's stop: ``fabnb batch
    cancel``), each through the one of ``llms`` whose endpoint it went to; the ids cancelled. What they completed is
    billed and is read by the next run (:func:`run_batches`). A batch that ended meanwhile is recorded as such and
    left; one sent to an endpoint none of ``llms`` has is named and left. A batch whose run was killed before it
    was recorded is not in the ledger: the next run finds it by listing (:func:`find_batch`).

    >>> import tempfile
    >>> cancel_open([], tempfile.mkdtemp())  # no batches.json: nothing to cancel
    []
    """
    clients = {str(client.base_url): client for client in (llm.openai_client() for llm in llms)}
    ledger = BatchLedger(folder)
    out = []
    for digest, entry in list(ledger.entries.items()):
        batch_id = entry.get("batch_id")
        if not batch_id or entry.get("status") in TERMINAL:
            continue
        client = clients.get(entry.get("endpoint"))
        if client is None:
            echo(f"batch {batch_id}: not cancelled: it went to {entry.get('endpoint') or 'an endpoint not recorded'}"
                 f", which is none of the experiment's ({', '.join(clients) or 'none'}); cancel it there")
            continue
        if _cancel(client, ledger, digest, batch_id, echo, "asked"):
            out.append(batch_id)
    return out


def export_requests(requests, path: str | Path) -> int:
    """Write the requests as a batch input file (vLLM's ``run_batch --input-file``); the lines written."""
    lines = request_lines(requests)
    Path(path).write_bytes(b"".join(split_files(lines, max_lines=len(lines) or 1, max_bytes=2 ** 62)))
    return len(lines)


def read_output(path: str | Path) -> list[dict]:
    """The lines of a batch output file; :class:`BatchError` naming the file and line for one that is not a JSON
    object.

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "out.jsonl"
    >>> _ = bad.write_text('{"custom_id": "a"}\\n[1]\\n')
    >>> read_output(bad)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.models.batch.BatchError: ...out.jsonl: line 2 is a list, not a JSON object; ...
    """
    return _lines(Path(path).read_text(encoding="utf-8"), str(path))


def import_replies(llm, requests, path: str | Path) -> BatchRun:
    """Read a batch output file (vLLM's ``run_batch --output-file``, or OpenAI's) into ``llm``'s response cache for
    the ``requests`` it answers; lines for other requests are counted as failed, never stored.

    Raises :class:`BatchError` naming the file and line for a line that is not JSON.
    """
    bodies = {line["custom_id"]: line["body"] for line in request_lines(requests)}
    run = BatchRun(requests=len(bodies))
    answered = _keep(llm, bodies, read_output(path), run, foreign="not a request of this stage (another "
                     "experiment's, or an endpoint or model other than this file's)")
    run.left = [k for k in bodies if k not in answered]
    return run
