"""What the benchmarks share: a scripted server in a process of its own, and the smoke mode.

Every script takes ``--smoke``: the same code path at tiny sizes, a few seconds, so that the suite runs each one
(``tests/test_benchmarks.py``) and a benchmark that breaks fails CI. Its figures mean nothing; full mode prints
the figures the docs quote."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"

SMOKE_HELP = "the same code path at tiny sizes, in seconds (the suite runs it); its figures mean nothing"


def add_smoke(parser) -> None:
    """The ``--smoke`` flag of a script's parser."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def apply_smoke(args, **tiny):
    """``args`` with ``tiny``'s values in smoke mode (as they are otherwise); says so once."""
    if getattr(args, "smoke", False):
        for name, value in tiny.items():
            setattr(args, name, value)
        print("smoke mode: tiny sizes, the figures mean nothing", flush=True)
    return args


@contextlib.contextmanager
def server_process(script: str, delay: float):
    """Run ``script`` (a StubServer that prints its URL, then waits on stdin) in its own process.

    The script gets the tests folder (for ``stub_openai``) and ``delay`` as arguments;
    the URL it prints is yielded, and closing its stdin stops it. A server in its own
    process keeps its threads off the measured client's interpreter lock.
    """
    server = subprocess.Popen([sys.executable, "-c", script, str(TESTS), str(delay)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        yield server.stdout.readline().strip()
    finally:
        server.stdin.close()
        server.wait(timeout=10)


#: A G-Eval judge server for :func:`server_process`: ``{"reason", "score": 7}`` with top logprobs when asked.
JUDGE_SERVER = """
import sys, json, math
sys.path.insert(0, sys.argv[1])
from stub_openai import StubServer, completion
def lp(tok, alts):
    return {"token": tok, "logprob": math.log(dict(alts)[tok]), "bytes": None,
            "top_logprobs": [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in alts]}
def reply(req, n):
    toks = [lp("7", [("7", .6), ("8", .3), ("6", .1)])] if req.get("logprobs") else None
    return 200, completion(json.dumps({"reason": "specific and grounded", "score": 7}), logprobs=toks), {}
with StubServer(reply, delay=float(sys.argv[2])) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""
