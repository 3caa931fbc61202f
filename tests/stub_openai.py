"""A scripted OpenAI-compatible server on loopback, for unit tests and benchmarks only.

It answers ``POST /v1/chat/completions`` after a fixed delay, from a script:
a callable ``reply(request_json, n) -> (status, body_dict_or_text, headers)`` or,
by default, an echo of the last user message. It counts the requests it got.
A body may also be a callable ``body(handler)`` that writes the raw reply itself
(a truncated body, a reset connection, a slow drip: see ``tests/test_faults.py``);
a ``Content-Type`` in ``headers`` replaces the JSON one.
Never a default of the kit: notebooks and the CLI use a real model.
"""

from __future__ import annotations

import http.server
import json
import threading
import time


def completion(text: str, model: str = "stub", logprobs=None, prompt_tokens: int = 10,
               completion_tokens: int = 5) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def echo(request: dict, n: int):
    return 200, completion("echo: " + request["messages"][-1]["content"]), {}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # must be set before listen(): a class attribute, not after construction


class Served:
    """What the scripted servers share: their ``httpd`` on loopback, served in a thread inside ``with``."""

    httpd: http.server.HTTPServer

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        # A short poll: shutdown() waits up to one poll interval (0.5 s by default) on every exit.
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class StubServer(Served):
    """``with StubServer(reply, delay=0.1) as s: LLM("stub", s.base_url)``."""

    def __init__(self, reply=echo, delay: float = 0.0):
        self.reply, self.delay = reply, delay
        self.requests: list[dict] = []
        self.served: list[dict] = []  # requests whose whole reply was written (a finished call)
        self.headers: list[dict] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without this, Nagle's algorithm and
            # delayed ACKs hold every response ~40 ms on loopback.
            disable_nagle_algorithm = True

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if len(raw) < length:  # the client died mid-request (a killed run): nothing was asked
                    self.close_connection = True
                    return
                body = json.loads(raw or b"{}")
                with stub._lock:
                    stub.requests.append(body)
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                    stub.paths.append(self.path)
                    n = len(stub.requests)
                if stub.delay:
                    time.sleep(stub.delay)
                status, payload, headers = stub.reply(body, n)
                if callable(payload):
                    payload(self)
                    return
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                if "Content-Type" not in headers:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                with stub._lock:
                    stub.served.append(body)

            do_GET = do_POST  # a GET has no body: the reply sees {} and reads the path from stub.paths

            def log_message(self, *args):
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>``, for APIs whose paths do not start at /v1."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"
