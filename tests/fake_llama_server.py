"""A stand-in for ``python -m llama_cpp.server`` that crashes on purpose (tests only).

It takes llama-cpp-python's server flags, answers ``GET /v1/models``, and on the
N-th chat completion (``FAKE_LLAMA_DIE_AFTER``, default 1) dies the way
``FAKE_LLAMA_DIE`` says: ``sigill`` (an illegal instruction, as a native build on a
machine that refuses AVX-512 or AMX) or ``exit1``. Completions before that are answered.
"""

import argparse
import http.server
import json
import os
import signal
import sys

die = os.environ.get("FAKE_LLAMA_DIE", "sigill")
after = int(os.environ.get("FAKE_LLAMA_DIE_AFTER", "1"))
seen = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def _send(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def do_POST(self):
        global seen
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        seen += 1
        if seen >= after:
            print(f"fake llama server: dying ({die}) on completion {seen}", flush=True)
            if die == "sigill":
                signal.signal(signal.SIGILL, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGILL)
            sys.exit(1) if die != "exit1" else os._exit(1)
        self._send({"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    def log_message(self, *a):
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args, _ = parser.parse_known_args()
    print("fake llama server: listening", flush=True)
    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
