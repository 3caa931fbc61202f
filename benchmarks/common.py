"""What the benchmarks share: a scripted server in a process of its own."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


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
