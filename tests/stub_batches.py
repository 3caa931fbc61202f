"""A scripted OpenAI-compatible server with the Files and Batches routes, for unit tests only.

Routes (under ``/v1``), in the shapes of OpenAI's API as the ``openai`` package reads them:

- ``POST /files`` (multipart: ``purpose``, ``file``), ``GET /files/{id}``, ``GET /files/{id}/content``;
- ``POST /batches`` (``input_file_id``, ``endpoint``, ``completion_window``, ``metadata``), ``GET /batches/{id}``,
  ``GET /batches`` (newest first, ``limit`` and ``after``; no metadata filter, as OpenAI's has none),
  ``POST /batches/{id}/cancel``;
- ``POST /chat/completions``: the online path, from the same script.

A batch is validated, then worked line by line in a thread of its own (``reply(body, n)`` as
:mod:`stub_openai`'s scripts, ``line_delay`` seconds a line), then finalized: an output file of the lines answered
200 and an error file of the others. ``expire_after = n`` lets the next batch complete ``n`` lines and then expire
(the rest get ``batch_expired`` in its error file); ``hold`` keeps batches in progress until it is cleared, and
``hold_after = n`` the next batch after ``n`` lines until it is cancelled. It counts
the batches created and the chat requests served online. Never a default of the kit.
"""

from __future__ import annotations

import email.parser
import email.policy
import http.server
import itertools
import json
import re
import threading
import time

from stub_openai import Served, completion

TERMINAL = ("completed", "failed", "expired", "cancelled")


def echo_reply(body: dict, n: int):
    return 200, completion("echo: " + body["messages"][-1]["content"][-200:], model=body.get("model", "stub")), {}


class _Handler(http.server.BaseHTTPRequestHandler):
    """The routes; the scripted state is the HTTP server's ``stub``."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def _send(self, status: int, payload, content_type: str = "application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def do_GET(self):
        path, _, query = self.path.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        if m := re.fullmatch(r"/v1/files/([\w-]+)/content", path):
            f = self.server.stub.files.get(m.group(1))
            return self._send(200, f["data"], "application/octet-stream") if f else self._missing()
        if m := re.fullmatch(r"/v1/files/([\w-]+)", path):
            f = self.server.stub.files.get(m.group(1))
            return self._send(200, self.server.stub._file_object(f)) if f else self._missing()
        if m := re.fullmatch(r"/v1/batches/([\w-]+)", path):
            b = self.server.stub.batches.get(m.group(1))
            return self._send(200, self.server.stub._public(b)) if b else self._missing()
        if path == "/v1/batches":
            return self._send(200, self.server.stub._list(int(params.get("limit", 20)), params.get("after")))
        return self._missing()

    def do_POST(self):
        path = self.path.partition("?")[0]
        if path == "/v1/files":
            return self._send(200, self.server.stub._upload(self.headers.get("Content-Type", ""), self._body()))
        if path == "/v1/batches":
            status, payload = self.server.stub._create(json.loads(self._body() or b"{}"))
            return self._send(status, payload)
        if m := re.fullmatch(r"/v1/batches/([\w-]+)/cancel", path):
            self._body()
            b = self.server.stub.batches.get(m.group(1))
            if not b:
                return self._missing()
            self.server.stub._cancel(b)
            return self._send(200, self.server.stub._public(b))
        if path == "/v1/chat/completions":
            body = json.loads(self._body() or b"{}")
            with self.server.stub._lock:
                self.server.stub.online.append(body)
                self.server.stub._n += 1
                n = self.server.stub._n
            status, payload, _ = self.server.stub.reply(body, n)
            return self._send(status, payload)
        self._body()
        return self._missing()

    def _missing(self):
        self._send(404, {"error": {"message": f"no route {self.command} {self.path}", "type":
                                   "invalid_request_error", "code": "not_found"}})

    def log_message(self, *args):
        pass


class BatchServer(Served):
    """``with BatchServer(reply) as s: openai.OpenAI(base_url=s.base_url, api_key="x")``."""

    def __init__(self, reply=echo_reply, line_delay: float = 0.0, page_size_cap: int = 100):
        self.reply, self.line_delay, self.page_size_cap = reply, line_delay, page_size_cap
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.order: list[str] = []  # batch ids, oldest first
        self.online: list[dict] = []  # chat requests served online
        self.list_calls = 0
        self.expire_after: int | None = None
        self.hold_after: int | None = None  # the next batch works this many lines, then waits (until cancelled)
        self.hold = threading.Event()  # set: batches wait in progress
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._n = 0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.stub = self
        self.httpd.daemon_threads = True

    # ------------------------------------------------------------------ files
    def _file_object(self, f: dict) -> dict:
        return {"id": f["id"], "object": "file", "bytes": len(f["data"]), "created_at": f["created_at"],
                "filename": f["filename"], "purpose": f["purpose"], "status": "processed"}

    def _new_file(self, data: bytes, filename: str, purpose: str) -> dict:
        f = {"id": f"file-{next(self._ids)}", "data": data, "filename": filename, "purpose": purpose,
             "created_at": int(time.time())}
        self.files[f["id"]] = f
        return f

    def _upload(self, content_type: str, raw: bytes) -> dict:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        fields = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        part = fields["file"]
        return self._file_object(self._new_file(part.get_payload(decode=True), part.get_filename() or "upload",
                                                fields["purpose"].get_content().strip()))

    # ------------------------------------------------------------------ batches
    def _public(self, b: dict) -> dict:
        return {k: v for k, v in b.items() if not k.startswith("_")}

    def _list(self, limit: int, after: str | None) -> dict:
        self.list_calls += 1
        newest = self.order[::-1]
        start = newest.index(after) + 1 if after in newest else 0
        page = newest[start:start + min(limit, self.page_size_cap)]
        return {"object": "list", "data": [self._public(self.batches[i]) for i in page],
                "first_id": page[0] if page else None, "last_id": page[-1] if page else None,
                "has_more": start + len(page) < len(newest)}

    def _create(self, req: dict) -> tuple[int, dict]:
        f = self.files.get(req.get("input_file_id"))
        if f is None or f["purpose"] != "batch":
            return 400, {"error": {"message": "input_file_id must name a file uploaded with purpose batch"}}
        if req.get("endpoint") != "/v1/chat/completions" or req.get("completion_window") != "24h":
            return 400, {"error": {"message": "endpoint must be /v1/chat/completions, completion_window 24h"}}
        lines = [json.loads(line) for line in f["data"].decode().splitlines() if line.strip()]
        ids = [line["custom_id"] for line in lines]
        if len(set(ids)) != len(ids) or any(line.get("url") != req["endpoint"] or line.get("method") != "POST"
                                            for line in lines):
            return 400, {"error": {"message": "custom_id must be unique; every line POST to the batch's endpoint"}}
        now = int(time.time())
        b = {"id": f"batch_{next(self._ids)}", "object": "batch", "endpoint": req["endpoint"],
             "input_file_id": f["id"], "completion_window": "24h", "status": "validating", "created_at": now,
             "expires_at": now + 86_400, "metadata": req.get("metadata"), "output_file_id": None,
             "error_file_id": None, "errors": None,
             "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
             "_lines": lines, "_expire_after": self.expire_after, "_hold_after": self.hold_after,
             "_cancel": threading.Event()}
        self.expire_after = self.hold_after = None
        with self._lock:
            self.batches[b["id"]] = b
            self.order.append(b["id"])
        threading.Thread(target=self._work, args=(b,), daemon=True).start()
        return 200, self._public(b)

    def _cancel(self, b: dict) -> None:
        if b["status"] not in TERMINAL:
            b["status"] = "cancelling"
            b["cancelling_at"] = int(time.time())
            b["_cancel"].set()

    def _work(self, b: dict) -> None:
        b["status"], b["in_progress_at"] = "in_progress", int(time.time())
        out, errors = [], []
        ended = "completed"
        for i, line in enumerate(b["_lines"]):
            while (self.hold.is_set() or (b["_hold_after"] is not None and i >= b["_hold_after"])) \
                    and not b["_cancel"].is_set():
                time.sleep(0.01)
            if b["_cancel"].is_set():
                ended = "cancelled"
            elif b["_expire_after"] is not None and i >= b["_expire_after"]:
                ended = "expired"
            if ended != "completed":
                errors += [{"id": f"batch_req_{b['id']}_{j}", "custom_id": rest["custom_id"], "response": None,
                            "error": {"code": f"batch_{ended}", "message": f"This request was not run: the batch "
                                      f"was {ended}."}} for j, rest in enumerate(b["_lines"][i:], i)]
                break
            with self._lock:
                self._n += 1
                n = self._n
            status, payload, _ = self.reply(line["body"], n)
            record = {"id": f"batch_req_{b['id']}_{i}", "custom_id": line["custom_id"],
                      "response": {"status_code": status, "request_id": f"req_{i}", "body": payload}, "error": None}
            (out if status == 200 else errors).append(record)
            b["request_counts"]["completed" if status == 200 else "failed"] += 1
            if self.line_delay:
                time.sleep(self.line_delay)
        b["status"], b["finalizing_at"] = "finalizing", int(time.time())
        for records, field in ((out, "output_file_id"), (errors, "error_file_id")):
            if records:
                data = "".join(json.dumps(r) + "\n" for r in records).encode()
                b[field] = self._new_file(data, f"{b['id']}_{field}.jsonl", "batch_output")["id"]
        b["status"], b[f"{ended}_at"] = ended, int(time.time())

    # ------------------------------------------------------------------ life
    @property
    def created(self) -> int:
        return len(self.order)

    def __exit__(self, *exc) -> None:
        self.hold.clear()  # a held batch's worker ends
        super().__exit__(*exc)
