"""Servers that fabnb starts as child processes: start, wait until ready, stop, reap, and free ports.

The embedded llama.cpp server (:class:`fabnb.models.local.LocalServer`) and the rating app's
Voilà (:func:`fabnb.qa.rating_app.serve_app`) both run through these few functions, so a child
is always stopped the same way: SIGTERM, a grace period, SIGKILL, and reaped (no zombie).
The commands that serve in the foreground stop their children on SIGTERM and SIGHUP as on
Ctrl-C (:func:`stop_on_signals`).

Examples
--------
>>> import sys
>>> proc = start_process([sys.executable, "-c", "import time; time.sleep(30)"])
>>> wait_ready(proc, lambda: True, timeout=5)
'ready'
>>> stop_process(proc), proc.poll() is not None
(True, True)
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

__all__ = ["answers_http", "answers_tcp", "free_port", "port_free", "start_process", "stop_on_signals", "stop_process",
           "wait_ready"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it).

    >>> port = free_port()
    >>> 1024 <= port <= 65535 and port_free(port)
    True
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound on ``host``."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _interruptible() -> None:
    """In the child, before exec: SIGINT back to its default. A process started in the background by a script
    (``jupyter lab &``) ignores SIGINT and its children inherit that, so JupyterLab's *Stop* (SIGINT) once left
    the run going to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interruptible_dying_with_parent() -> None:
    """:func:`_interruptible`, and on Linux SIGTERM when the parent dies (a killed kernel leaves no server)."""
    _interruptible()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_process(command: list[str], *, env: dict | None = None, cwd=None, stdout=None,
                  die_with_parent: bool = True) -> subprocess.Popen:
    """Start ``command`` as a child with no standard input (stdout and stderr together, to ``stdout``).

    The child takes SIGINT as a Python program does (``KeyboardInterrupt``) even when this process ignores it.
    With ``die_with_parent`` (Linux) the child gets SIGTERM when this process dies, even by SIGKILL.

    >>> proc = start_process([sys.executable, "-c", "pass"])
    >>> proc.wait(30)
    0
    """
    preexec = _interruptible_dying_with_parent if die_with_parent and sys.platform == "linux" else _interruptible
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT if stdout is not None else None,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                            preexec_fn=None if sys.platform == "win32" else preexec)


def wait_ready(proc: subprocess.Popen, ready, timeout: float, interval: float = 0.25) -> str:
    """Poll ``ready()`` until it is true: ``"ready"``, ``"exited"`` (the child ended first) or ``"timeout"``.

    >>> proc = start_process([sys.executable, "-c", "pass"])
    >>> wait_ready(proc, lambda: False, timeout=30)  # it ends before it is ever ready
    'exited'
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            return "exited"
        if ready():
            return "ready"
        if time.monotonic() > deadline:
            return "timeout"
        time.sleep(interval)


def stop_process(proc: subprocess.Popen | None, grace: float = 10.0) -> bool:
    """Stop a child: SIGTERM, then SIGKILL after ``grace`` seconds; always reaped. True if it was running.

    >>> proc = start_process([sys.executable, "-c", "import time; time.sleep(30)"])
    >>> stop_process(proc), stop_process(proc)  # the second finds it stopped already
    (True, False)
    """
    if proc is None or proc.poll() is not None:
        return False
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    return True


def answers_tcp(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``host:port``.

    >>> answers_tcp("127.0.0.1", free_port())  # nothing listens on a port just found free
    False
    """
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def answers_http(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def stop_on_signals(signals=("SIGTERM", "SIGHUP")):
    """Within this block, SIGTERM and SIGHUP end the program as Ctrl-C does (a ``KeyboardInterrupt``), so the
    ``finally`` that stops its children runs: a service manager or a CI job stops a server with SIGTERM.

    Only in the main thread (where Python runs signal handlers); elsewhere the block runs as it is.
    """
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for name in signals:
        number = getattr(signal, name, None)
        if number is not None:
            old[number] = signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in old.items():
            signal.signal(number, handler)
