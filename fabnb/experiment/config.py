"""The experiment file: one small spec per TOML table, each reading and checking its own table.

The file reads top to bottom as the tables do: the top level (name, output, seed, concurrency, budget_usd),
``[questions]`` (:class:`QuestionsSpec`), ``[corpus]`` (:class:`CorpusSpec`), ``[[systems]]`` (:class:`SystemSpec`),
``[contexts]`` (:class:`ContextsSpec`), ``[judge]`` (:class:`JudgeSpec`), ``[prices]`` and ``[report]``
(:class:`ReportSpec`). Each spec's ``from_table`` raises :class:`ExperimentError` naming the file, line and key.

Examples
--------
>>> ContextsSpec.from_table({"windows": [1, 2], "modes": ["A", "B"]}, "<dict>").windows
(1.0, 2.0)
>>> JudgeSpec.from_table({"metrics": ["relevance"], "replicates": 2}, "<dict>").metrics
('relevance',)
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import FabnbError
from ..judge.rubrics import RUBRIC_VERSION
from ..schema import METRICS, TEST_TYPES
from .prices import price_of

__all__ = ["RANGES", "SYSTEM_KINDS", "ContextsSpec", "CorpusSpec", "Endpoint", "Experiment", "ExperimentError",
           "JudgeSpec", "QuestionsSpec", "ReportSpec", "SystemKind", "SystemSpec", "adapter_settings",
           "prices_from_table"]


@dataclass(frozen=True)
class SystemKind:
    """One kind of system: the adapter class in :mod:`fabnb.rag` (None: the reference system), and whether its
    API gives back the retrieved context (the judge's rubrics without context are used where it does not)."""

    adapter: str | None
    exposes_context: bool


#: Every system kind an experiment file may name: the file check, the plan, the run and the docs read this.
SYSTEM_KINDS: dict[str, SystemKind] = {
    "reference": SystemKind(None, True),
    "anythingllm": SystemKind("AnythingLLM", True),
    "ragflow": SystemKind("RAGFlow", True),
    "maxkb": SystemKind("MaxKB", False),
    "metaso": SystemKind("Metaso", True),
    "http": SystemKind("HTTPAdapter", True),
}


def _retrievers() -> dict:
    """:data:`fabnb.rag.retrievers.RETRIEVERS` (imported when a file is checked, not when fabnb is)."""
    from ..rag.retrievers import RETRIEVERS

    return RETRIEVERS


def _check_retriever(name, where: str, text: str | None, label: str) -> str:
    """A retriever the file may name and this machine can run, or an error with what to do."""
    usable = [n for n, k in _retrievers().items() if k.in_files]
    line = _line_of(text, "retriever")
    if name not in usable:
        hint = (" (dense needs an embed function: use it from Python, or \"minilm\" for the offline dense model)"
                if name == "dense" else "")
        raise ExperimentError(f"{where}: {label} retriever = {name!r}{line} cannot be used in a file{hint}; "
                              f"allowed: {', '.join(usable)}.")
    missing = _retrievers()[name].missing()
    if missing:
        raise ExperimentError(f"{where}: {label} retriever = {name!r}{line} is not installed here; install it with "
                              f"{missing}, or choose one of {', '.join(n for n in usable if n != name)}.")
    return name

_ENDPOINT_KEYS = {"model": str, "base_url": str, "base_url_env": str, "api_key_env": str, "max_retries": int}
_SCHEMA: dict[str, dict] = {
    "": {"name": str, "output": str, "seed": int, "concurrency": int, "budget_usd": (int, float),
         "questions": dict, "corpus": dict, "systems": list, "contexts": dict, "judge": dict, "prices": dict,
         "report": dict},
    "questions": {"source": str, "sample": (int, str), "stratify": list, "test_types": list},
    "corpus": {"source": str, "chunk_size": int, "chunk_overlap": int},
    "contexts": {"windows": (list, str), "modes": list, "output_k": (int, float, str), "n_snippets": int,
                 "threshold": (int, float), "temperature": (int, float)},
    "systems": {"name": str, "kind": str, "retriever": str, "settings": dict, "timeout": (int, float),
                **_ENDPOINT_KEYS},
    "judge": {"metrics": (list, str), "replicates": int, "logprobs": bool, "reference_check": bool,
              "reason_chars": int, "max_answer_tokens": int, "concurrency": int, "temperature": (int, float),
              "n_ctx": int, "workers": int, **_ENDPOINT_KEYS},
    "prices": {"input": (int, float), "output": (int, float), "date": str, "source": str},
    "report": {"compare_published": bool, "figures": list, "bootstrap": int, "seed": int},
}


class ExperimentError(FabnbError, ValueError):
    """A problem with an experiment file or its output folder, found before any call is made."""


def _names(kinds) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join({int: "an integer", float: "a number", str: "a string", bool: "true/false",
                        list: "a list", dict: "a table"}[k] for k in kinds)


def _line_of(text: str | None, key: str) -> str:
    """' (line N)' of the first line that sets ``key``, for error messages; '' when not found."""
    if not text:
        return ""
    for n, line in enumerate(text.splitlines(), start=1):
        if re.match(rf'\s*"?{re.escape(key)}"?\s*=', line) or re.search(rf'[{{,]\s*"?{re.escape(key)}"?\s*=', line):
            return f" (line {n})"
    return ""


_FIGURE_FORMATS = ("png", "svg", "pdf")


_finite = math.isfinite


#: The allowed range of every numeric key, per table: (test, what is allowed). The file check applies it with the
#: file, the line and the key; docs/experiment.md's "Ranges" table is this table (a test compares them).
RANGES: dict[tuple[str, str], tuple] = {
    ("", "concurrency"): (lambda v: v >= 1, ">= 1"),
    ("", "budget_usd"): (lambda v: _finite(v) and v > 0, "> 0 and finite (dollars)"),
    ("corpus", "chunk_size"): (lambda v: v >= 1, ">= 1 (tokens)"),
    ("corpus", "chunk_overlap"): (lambda v: v >= 0, ">= 0 and < chunk_size (tokens)"),
    ("contexts", "windows"): (lambda v: _finite(v) and v > 0, "> 0 and finite (K tokens), no duplicates"),
    ("contexts", "output_k"): (lambda v: _finite(v) and v > 0, "> 0 and finite (K tokens), or \"schedule\""),
    ("contexts", "n_snippets"): (lambda v: v >= 1, ">= 1"),
    ("contexts", "threshold"): (_finite, "finite"),
    ("contexts", "temperature"): (lambda v: _finite(v) and v >= 0, ">= 0 and finite"),
    ("systems", "timeout"): (lambda v: _finite(v) and v > 0, "> 0 and finite (seconds)"),
    ("systems", "max_retries"): (lambda v: v >= 0, ">= 0"),
    ("judge", "replicates"): (lambda v: v >= 1, ">= 1"),
    ("judge", "reason_chars"): (lambda v: v >= 1, ">= 1 (characters)"),
    ("judge", "max_answer_tokens"): (lambda v: v >= 1, ">= 1 (tokens)"),
    ("judge", "concurrency"): (lambda v: v >= 1, ">= 1"),
    ("judge", "temperature"): (lambda v: _finite(v) and v >= 0, ">= 0 and finite"),
    ("judge", "n_ctx"): (lambda v: v >= 512, ">= 512 (tokens)"),
    ("judge", "max_retries"): (lambda v: v >= 0, ">= 0"),
    ("judge", "workers"): (lambda v: 1 <= v <= 64, "1 to 64 (processes)"),
    ("report", "bootstrap"): (lambda v: 100 <= v <= 100_000, "100 to 100,000 (bootstrap draws)"),
    ("prices", "input"): (lambda v: _finite(v) and v >= 0, ">= 0 and finite (dollars per million tokens)"),
    ("prices", "output"): (lambda v: _finite(v) and v >= 0, ">= 0 and finite (dollars per million tokens)"),
}


def _check_table(data: dict, section: str, where: str, text: str | None, label: str | None = None) -> None:
    allowed = _SCHEMA[section]
    label = label or (f"[{section}]" if section else "the top level")
    for key, value in data.items():
        if key not in allowed:
            hint = (" Keys are never written in the file: name the environment variable that holds it with "
                    "api_key_env." if key in ("api_key", "key", "token") else "")
            raise ExperimentError(f"{where}: unknown key {key!r} at {label}{_line_of(text, key)}; allowed: "
                                  f"{', '.join(sorted(allowed))}.{hint}")
        kinds = allowed[key]
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in (kinds if isinstance(
            kinds, tuple) else (kinds,)))
        if not ok:
            raise ExperimentError(f"{where}: {label} {key} = {value!r}{_line_of(text, key)} must be {_names(kinds)}.")
        _check_range(section, key, value, where, text, label)


def _check_range(section: str, key: str, value, where: str, text: str | None, label: str) -> None:
    """Refuse a number outside :data:`RANGES` (each number of a list, for a list), naming the file, line and key."""
    if (section, key) not in RANGES:
        return
    test, allowed = RANGES[(section, key)]
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not test(v):
            raise ExperimentError(f"{where}: {label} {key} = {value!r}{_line_of(text, key)} is out of range: it "
                                  f"must be {allowed}.")


def _no_duplicates(values, key: str, label: str, where: str, text: str | None) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ExperimentError(f"{where}: {label} {key} = {list(values)!r}{_line_of(text, key)} lists {seen[0]!r} "
                              "twice; each cell would be stored twice. List each value once.")


def _path(value: str, base: Path) -> str:
    """A path of the file, relative to the file's folder."""
    return str(Path(value) if Path(value).is_absolute() else Path(os.path.normpath(base / value)))


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible model endpoint, named by environment variables (or ``model = "embedded"``).

    The key is read from ``api_key_env`` when the LLM is made, never stored here.

    Examples
    --------
    >>> Endpoint("gpt-4o-mini", base_url="https://api.openai.com/v1").identity()
    'https://api.openai.com/v1 gpt-4o-mini'
    """

    model: str
    base_url: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    max_retries: int = 4

    @classmethod
    def from_table(cls, data: dict, where: str, label: str, need_model: bool = True) -> "Endpoint":
        """The endpoint keys of a ``[[systems]]`` or ``[judge]`` table (checked by that table)."""
        model = data.get("model")
        if need_model and not model:
            raise ExperimentError(f"{where}: {label} needs model = \"embedded\" (the embedded local model) or the "
                                  "model name the endpoint serves, with base_url or base_url_env.")
        ep = cls(model or "", data.get("base_url"), data.get("base_url_env"), data.get("api_key_env"),
                 int(data.get("max_retries", 4)))
        if model and not ep.embedded and not (ep.base_url or ep.base_url_env):
            raise ExperimentError(f"{where}: {label} (model {model!r}) needs base_url or base_url_env (the name of "
                                  "an environment variable holding the endpoint's URL).")
        return ep

    @property
    def embedded(self) -> bool:
        return self.model == "embedded"

    def url(self) -> str | None:
        if self.embedded:
            return None
        return os.environ.get(self.base_url_env) if self.base_url_env else self.base_url

    def identity(self) -> str:
        """What names this endpoint in a cell's signature: 'embedded' or the base URL and model."""
        return "embedded" if self.embedded else f"{self.url()} {self.model}"

    def missing_env(self) -> list[str]:
        return [v for v in (self.base_url_env, self.api_key_env) if v and not os.environ.get(v)]

    def llm(self, *, concurrency: int = 8, n_ctx: int = 8192, logprobs: bool = False, timeout: float = 120.0):
        """The :class:`fabnb.llm.LLM` (the embedded model's shared server for ``"embedded"``)."""
        from ..llm import LLM

        if self.embedded:
            from ..local import shared_server

            return shared_server(logits_all=logprobs, n_ctx=n_ctx).llm()
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return LLM(self.model, self.url(), key, concurrency=concurrency, timeout=timeout,
                   max_retries=self.max_retries, schema_style=os.environ.get("FABNB_LLM_SCHEMA_STYLE", "openai"))


def _adapter_class(kind: str):
    from .. import rag

    return getattr(rag, SYSTEM_KINDS[kind].adapter)


_PROVIDED = {"self", "kwargs", "api_key", "base_url", "name", "url", "timeout", "kb"}  # from the table's own keys
_ANNOTATION_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list}


def adapter_settings(kind: str) -> dict[str, tuple]:
    """The ``settings`` keys of an adapter kind: name -> (types, required), read from the adapter's signature (and
    :class:`fabnb.rag.HTTPAdapter`'s, whose keys every adapter accepts). The file check and the docs read this.

    >>> sorted(n for n, (_, required) in adapter_settings("http").items() if required)
    ['answer_path', 'request']
    """
    import inspect

    from .. import rag

    out: dict[str, tuple] = {}
    for cls, own in ((rag.HTTPAdapter, kind == "http"), (_adapter_class(kind), True)):
        for name, p in inspect.signature(cls.__init__).parameters.items():
            if name in _PROVIDED or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            annotation = str(p.annotation).replace(" | None", "")
            out[name] = (_ANNOTATION_TYPES.get(annotation, object), own and p.default is inspect.Parameter.empty)
    return dict(sorted(out.items()))


def _check_settings(kind: str, settings: dict, where: str, text: str | None, label: str) -> None:
    """An adapter's settings: known keys, the required ones present, each of its type."""
    allowed = adapter_settings(kind)
    unknown = set(settings) - set(allowed)
    if unknown:
        raise ExperimentError(f"{where}: {label} settings {sorted(unknown)} are not {kind} settings; "
                              f"allowed: {', '.join(allowed)}.")
    missing = [n for n, (_, required) in allowed.items() if required and n not in settings]
    if missing:
        raise ExperimentError(f"{where}: {label} ({kind}){_line_of(text, 'kind')} needs settings "
                              + ", ".join(f"{n} ({_names(allowed[n][0])})" for n in missing)
                              + f", e.g. settings = {{{missing[0]} = ...}}; docs/experiment.md lists each kind's.")
    for name, value in settings.items():
        kinds = allowed[name][0]
        if kinds is not object and (not isinstance(value, kinds) or isinstance(value, bool) and kinds is not bool):
            raise ExperimentError(f"{where}: {label} settings.{name} = {value!r}{_line_of(text, name)} must be "
                                  f"{_names(kinds)}.")


@dataclass(frozen=True)
class SystemSpec:
    """One system of the experiment (a ``[[systems]]`` table): the reference RAG over an endpoint, or a framework
    adapter."""

    name: str
    kind: str
    endpoint: Endpoint
    retriever: str = "bm25"
    settings: dict = field(default_factory=dict)
    timeout: float = 120.0

    @classmethod
    def from_table(cls, s, where: str, text: str | None, index: int) -> "SystemSpec":
        """The ``index``-th (0-based) ``[[systems]]`` table, checked."""
        label = f"[[systems]] #{index + 1}" + (f" ({s.get('name')!r})" if isinstance(s, dict) and s.get("name")
                                               else "")
        if not isinstance(s, dict):
            raise ExperimentError(f"{where}: {label} must be a table.")
        _check_table(s, "systems", where, text, label)
        if not s.get("name"):
            raise ExperimentError(f"{where}: {label} needs a name (it labels the system in every store).")
        kind = s.get("kind", "reference")
        if kind not in SYSTEM_KINDS:
            raise ExperimentError(f"{where}: {label} kind = {kind!r}{_line_of(text, 'kind')} is not a system "
                                  f"kind; allowed: {', '.join(SYSTEM_KINDS)}.")
        settings = s.get("settings", {})
        if kind == "reference":
            ep = Endpoint.from_table(s, where, label)
            if settings:
                raise ExperimentError(f"{where}: {label} is the reference system; settings are for adapters. "
                                      "Use retriever and the [contexts] knobs.")
            retriever = _check_retriever(s.get("retriever", "bm25"), where, text, label)
        else:
            ep = Endpoint.from_table(s, where, label, need_model=False)
            if not (ep.base_url or ep.base_url_env) and kind != "metaso":
                raise ExperimentError(f"{where}: {label} ({kind}) needs base_url or base_url_env.")
            _check_settings(kind, settings, where, text, label)
            retriever = ""
        return cls(s["name"], kind, ep, retriever, dict(settings), float(s.get("timeout", 120)))

    @property
    def model(self) -> str:
        """The model label the stores use: for the embedded model, the name its server serves it under (what the
        answers record), so that the plan, the stores and the manifest name it alike."""
        if self.kind == "reference" and self.endpoint.embedded:
            from ..local import MODEL_ALIAS

            return MODEL_ALIAS
        return self.endpoint.model or self.settings.get("model") or self.kind

    @property
    def exposes_context(self) -> bool:
        """Whether this system's answers come with the context it retrieved."""
        return SYSTEM_KINDS[self.kind].exposes_context

    def identity(self) -> str:
        """What names this system's endpoint in the probes: the endpoint's, or the adapter's name and kind."""
        return self.endpoint.identity() if self.kind == "reference" else f"{self.name} ({self.kind})"

    def signature(self, chunking: dict, output_k) -> dict:
        """What makes this system's answers what they are: a change here is refused on resume."""
        sig = {"kind": self.kind, "endpoint": self.endpoint.identity(), "output_k": output_k}
        if self.kind == "reference":
            sig.update(retriever=self.retriever, chunking=chunking)
        else:
            sig.update(settings=dict(sorted(self.settings.items())))
        return sig

    def build(self, chunks: pd.DataFrame | None, concurrency: int = 8):
        """The :class:`fabnb.rag.RAGSystem`; the reference system builds its retriever over ``chunks``."""
        from .. import rag

        if self.kind == "reference":
            return rag.ReferenceRAG(chunks, self.endpoint.llm(concurrency=concurrency, timeout=self.timeout),
                                    retriever=self.retriever, name=self.name)
        key = os.environ.get(self.endpoint.api_key_env) if self.endpoint.api_key_env else None
        url = self.endpoint.url()
        settings = dict(self.settings)
        if self.endpoint.model:
            settings.setdefault("model", self.endpoint.model)
        cls = _adapter_class(self.kind)
        if self.kind == "http":
            system = cls(self.name, url, api_key=key, timeout=self.timeout, **settings)
        else:
            system = cls(**({"base_url": url} if url else {}), api_key=key, timeout=self.timeout, **settings)
        system.name = self.name
        return system


@dataclass(frozen=True)
class QuestionsSpec:
    """``[questions]``: the QA pairs asked (the FAB-Bench release or a folder), a seeded stratified sample."""

    source: str = "fab-bench"
    sample: int | None = None
    stratify: tuple[str, ...] = ("test_type", "question_format")
    test_types: tuple[str, ...] = ()

    @classmethod
    def from_table(cls, q: dict, where: str, text: str | None = None, base: Path | None = None) -> "QuestionsSpec":
        _check_table(q, "questions", where, text)
        sample = q.get("sample", "all")
        if isinstance(sample, str) and sample != "all" or isinstance(sample, int) and sample < 1:
            raise ExperimentError(f"{where}: [questions] sample = {sample!r} must be \"all\" or a positive integer.")
        stratify = tuple(q.get("stratify", ["test_type", "question_format"]))
        if set(stratify) - {"test_type", "question_format", "objective_subtype"}:
            raise ExperimentError(f"{where}: [questions] stratify = {list(stratify)} may hold test_type, "
                                  "question_format and objective_subtype.")
        test_types = q.get("test_types", [])
        unknown = [t for t in test_types if t not in TEST_TYPES]
        if unknown:
            raise ExperimentError(f"{where}: [questions] test_types = {test_types!r}{_line_of(text, 'test_types')} "
                                  f"names {unknown[0]!r}, not a test type; allowed: {', '.join(TEST_TYPES)}.")
        source = q.get("source", "fab-bench")
        if source != "fab-bench":
            source = _path(source, base or Path.cwd())
        return cls(source, None if sample == "all" else int(sample), stratify, tuple(test_types))


@dataclass(frozen=True)
class CorpusSpec:
    """``[corpus]``: the documents the reference systems retrieve from, and how they are chunked."""

    source: str = "fab-bench-evidence"
    chunk_size: int = 512
    chunk_overlap: int = 128

    @classmethod
    def from_table(cls, corpus: dict, where: str, text: str | None = None, base: Path | None = None) -> "CorpusSpec":
        _check_table(corpus, "corpus", where, text)
        size, overlap = int(corpus.get("chunk_size", 512)), int(corpus.get("chunk_overlap", 128))
        if overlap >= size:
            raise ExperimentError(f"{where}: [corpus] chunk_overlap = {overlap}{_line_of(text, 'chunk_overlap')} "
                                  f"must be smaller than chunk_size = {size}: each chunk must move the window on.")
        source = corpus.get("source", "fab-bench-evidence")
        if source != "fab-bench-evidence":
            source = _path(source, base or Path.cwd())
            _check_corpus_folder(source, where, text)
        return cls(source, size, overlap)

    def signature(self) -> dict:
        return {"source": self.source, "size": self.chunk_size, "overlap": self.chunk_overlap}


def _check_corpus_folder(source: str, where: str, text: str | None) -> None:
    """A corpus source must be a folder (or a file) holding at least one readable document."""
    from ..corpus import FORMATS as DOCUMENT_SUFFIXES

    path = Path(source)
    line = _line_of(text, "source")
    if not path.exists():
        raise ExperimentError(f"{where}: [corpus] source = {source!r}{line} does not exist; name a folder of "
                              f"documents ({', '.join(DOCUMENT_SUFFIXES)}).")
    files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    if not any(p.suffix.lower() in DOCUMENT_SUFFIXES and p.stat().st_size > 0 for p in files):  # stops at the first
        raise ExperimentError(f"{where}: [corpus] source = {source!r}{line} holds no readable document (files "
                              f"ending {', '.join(DOCUMENT_SUFFIXES)}, not empty).")


@dataclass(frozen=True)
class ContextsSpec:
    """``[contexts]``: the context windows (K tokens), the modes (A: own retrieval, B: gold context), the output
    budget and the retrieval knobs."""

    windows: tuple[float, ...] = (4.0,)
    modes: tuple[str, ...] = ("A",)
    output_k: float | str = "schedule"
    n_snippets: int | None = None
    threshold: float = 0.0
    temperature: float = 0.0

    @classmethod
    def from_table(cls, ctx: dict, where: str, text: str | None = None) -> "ContextsSpec":
        _check_table(ctx, "contexts", where, text)
        windows = ctx.get("windows", [4])
        if windows == "paper":
            from ..rag import PAPER_CONTEXTS

            windows = list(PAPER_CONTEXTS)
        if isinstance(windows, str) or not windows or not all(
                isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in windows):
            raise ExperimentError(f"{where}: [contexts] windows = {windows!r}{_line_of(text, 'windows')} must be "
                                  "\"paper\" or a list of positive window sizes in K tokens, e.g. [4, 8, 16].")
        _no_duplicates([float(w) for w in windows], "windows", "[contexts]", where, text)
        modes = tuple(ctx.get("modes", ["A"]))
        if not modes or set(modes) - {"A", "B"}:
            raise ExperimentError(f"{where}: [contexts] modes = {list(modes)!r} must be a non-empty list of \"A\" "
                                  "(the system's own retrieval) and \"B\" (gold context).")
        _no_duplicates(list(modes), "modes", "[contexts]", where, text)
        output_k = ctx.get("output_k", "schedule")
        if isinstance(output_k, str) and output_k != "schedule":
            raise ExperimentError(f"{where}: [contexts] output_k = {output_k!r} must be \"schedule\" (the paper's "
                                  "1K/2K/4K) or a number of K tokens.")
        return cls(tuple(float(w) for w in windows), modes,
                   output_k if isinstance(output_k, str) else float(output_k), ctx.get("n_snippets"),
                   float(ctx.get("threshold", 0.0)), float(ctx.get("temperature", 0.0)))

    def configs(self) -> list:
        """One :class:`fabnb.rag.RAGConfig` per window."""
        from ..rag import RAGConfig

        out_k = None if self.output_k == "schedule" else float(self.output_k)
        return [RAGConfig(w, n_snippets=self.n_snippets, threshold=self.threshold, output_k=out_k,
                          temperature=self.temperature) for w in self.windows]


@dataclass(frozen=True)
class JudgeSpec:
    """``[judge]``: the judge's endpoint, the G-Eval metrics, replicates, logprob weighting and limits."""

    endpoint: Endpoint = Endpoint("embedded")
    metrics: tuple[str, ...] = METRICS
    replicates: int = 1
    logprobs: bool = True
    reference_check: bool = True
    reason_chars: int = 400
    max_answer_tokens: int = 3000
    concurrency: int = 8
    temperature: float = 0.0
    n_ctx: int = 8192
    workers: int = 1  # processes the judge's calls are spread over (fabnb.judge.workers)

    @classmethod
    def from_table(cls, j: dict, where: str, text: str | None = None) -> "JudgeSpec":
        _check_table(j, "judge", where, text)
        endpoint = Endpoint.from_table({"model": "embedded", **j} if "model" not in j else j, where, "[judge]")
        metrics = j.get("metrics", "all")
        metrics = METRICS if metrics == "all" else tuple(metrics)
        if isinstance(metrics, str) or not metrics or set(metrics) - set(METRICS):
            raise ExperimentError(f"{where}: [judge] metrics = {j.get('metrics')!r} must be \"all\" or a list of "
                                  f"{', '.join(METRICS)}.")
        _no_duplicates(list(metrics), "metrics", "[judge]", where, text)
        if int(j.get("workers", 1)) > 1 and endpoint.embedded:  # one slot: more processes only queue at it
            raise ExperimentError(f"{where}: [judge] workers{_line_of(text, 'workers')}: the embedded model answers "
                                  "one call at a time. Remove workers, or judge with a server (model, base_url_env).")
        g = j.get
        return cls(endpoint, metrics, int(g("replicates", 1)), bool(g("logprobs", True)),
                   bool(g("reference_check", True)), int(g("reason_chars", 400)), int(g("max_answer_tokens", 3000)),
                   int(g("concurrency", 8)), float(g("temperature", 0.0)), int(g("n_ctx", 8192)), int(g("workers", 1)))

    def signature(self) -> dict:
        """What makes a score what it is: a change here is refused on resume."""
        return {"endpoint": self.endpoint.identity(), "rubric_version": RUBRIC_VERSION, "logprobs": self.logprobs,
                "reason_chars": self.reason_chars, "max_answer_tokens": self.max_answer_tokens,
                "temperature": self.temperature}


@dataclass(frozen=True)
class ReportSpec:
    """``[report]``: what the report adds to the run's own scores."""

    compare_published: bool = False
    figures: tuple = ("png", "svg")  # the formats of report/figures/; () draws none
    bootstrap: int = 2000  # draws of every interval (fabnb.stats.N_BOOT)
    seed: int = 0  # their seed (fabnb.stats.SEED)

    @classmethod
    def from_table(cls, r: dict, where: str, text: str | None = None) -> "ReportSpec":
        _check_table(r, "report", where, text)
        figures = r.get("figures", ["png", "svg"])
        if not isinstance(figures, list) or not all(f in _FIGURE_FORMATS for f in figures):
            raise ExperimentError(f"{where}: [report] figures{_line_of(text, 'figures')} must be a list of "
                                  f"{', '.join(map(repr, _FIGURE_FORMATS))} (or [] for no figures), not {figures!r}.")
        return cls(bool(r.get("compare_published", False)), tuple(dict.fromkeys(figures)),
                   int(r.get("bootstrap", 2000)), int(r.get("seed", 0)))


def prices_from_table(table: dict, where: str, text: str | None = None) -> dict:
    """``[prices]``: ``{model: {input, output, date, source}}`` in dollars per million tokens."""
    prices = {}
    for model, p in table.items():
        if not isinstance(p, dict) or "input" not in p or "output" not in p:
            raise ExperimentError(f"{where}: [prices] {model!r}{_line_of(text, model)} must be a table with input "
                                  "and output (dollars per million tokens), and date and source.")
        _check_table(p, "prices", where, text, f"[prices.{model}]")
        for key in ("input", "output"):
            _check_range("prices", key, p[key], where, text, f"[prices.{model}]")
        prices[model] = {"input": float(p["input"]), "output": float(p["output"]),
                         "date": p.get("date", ""), "source": p.get("source", where)}
    return prices


def _alias(table: str, key: str) -> property:
    """A read-only attribute of the experiment that reads one key of one of its table specs."""
    return property(lambda self: getattr(getattr(self, table), key), doc=f"``{table}.{key}`` (kept for existing code).")


@dataclass(frozen=True)
class Experiment:
    """An experiment: what to ask, whom, at which windows and modes, how to judge, where to write.

    Build it with :meth:`from_file` (TOML) or :meth:`from_dict` (the same keys); ``examples/offline.toml`` has every
    key with its meaning. Each TOML table is a spec of its own (``exp.contexts``, ``exp.question_set``, ``exp.corpus``,
    ``exp.judging``, ``exp.report``); the flat names of earlier releases (``exp.windows``, ...) read them.

    Examples
    --------
    >>> exp = Experiment.from_dict({"name": "demo", "output": "out", "contexts": {"windows": [2, 4]},
    ...                             "systems": [{"name": "local", "model": "embedded"}]})
    >>> exp.contexts.windows == exp.windows == (2.0, 4.0), exp.judge.model
    (True, 'embedded')
    """

    name: str
    output: Path
    systems: tuple[SystemSpec, ...]
    contexts: ContextsSpec = ContextsSpec()
    question_set: QuestionsSpec = QuestionsSpec()
    corpus: CorpusSpec = CorpusSpec()
    judging: JudgeSpec = JudgeSpec()
    report: ReportSpec = ReportSpec()
    prices: dict = field(default_factory=dict)
    budget_usd: float | None = None
    concurrency: int = 4
    seed: int = 0
    source_text: str = field(default="", repr=False, compare=False)
    source: str = "<dict>"

    windows = _alias("contexts", "windows")
    modes = _alias("contexts", "modes")
    output_k = _alias("contexts", "output_k")
    n_snippets = _alias("contexts", "n_snippets")
    threshold = _alias("contexts", "threshold")
    temperature = _alias("contexts", "temperature")
    questions_source = _alias("question_set", "source")
    sample = _alias("question_set", "sample")
    stratify = _alias("question_set", "stratify")
    test_types = _alias("question_set", "test_types")
    corpus_source = _alias("corpus", "source")
    chunk_size = _alias("corpus", "chunk_size")
    chunk_overlap = _alias("corpus", "chunk_overlap")
    judge = _alias("judging", "endpoint")
    metrics = _alias("judging", "metrics")
    replicates = _alias("judging", "replicates")
    logprobs = _alias("judging", "logprobs")
    reference_check = _alias("judging", "reference_check")
    reason_chars = _alias("judging", "reason_chars")
    max_answer_tokens = _alias("judging", "max_answer_tokens")
    judge_concurrency = _alias("judging", "concurrency")
    judge_temperature = _alias("judging", "temperature")
    judge_n_ctx = _alias("judging", "n_ctx")
    compare_published = _alias("report", "compare_published")

    # ------------------------------------------------------------ reading
    @classmethod
    def from_file(cls, path: str | Path, output: str | Path | None = None) -> "Experiment":
        """Read a TOML experiment file; relative paths in it are relative to the file.

        Raises :class:`ExperimentError` naming the file, the line and the key.
        """
        import tomllib

        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ExperimentError(f"cannot read the experiment file {path}: {exc.strerror}.") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExperimentError(f"{path}: not valid TOML: {exc}. Fix the line it names.") from None
        return cls.from_dict(data, source=str(path), text=text, base=path.parent, output=output)

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>", text: str | None = None, base: Path | None = None,
                  output: str | Path | None = None) -> "Experiment":
        """The same keys as the TOML file, as a dict (``base``: the folder relative paths start from)."""
        where = source
        _check_table(data, "", where, text)
        for section in ("questions", "corpus", "contexts", "judge", "report"):  # key errors first, as the file reads
            _check_table(data.get(section, {}), section, where, text)
        base = Path(base) if base is not None else Path.cwd()
        exp = cls(name=_name(data, where), output=_output(data, where, base, output, text),
                  systems=_systems(data.get("systems", []), where, text),
                  contexts=ContextsSpec.from_table(data.get("contexts", {}), where, text),
                  question_set=QuestionsSpec.from_table(data.get("questions", {}), where, text, base),
                  corpus=CorpusSpec.from_table(data.get("corpus", {}), where, text, base),
                  judging=JudgeSpec.from_table(data.get("judge", {"model": "embedded"}), where, text),
                  report=ReportSpec.from_table(data.get("report", {}), where, text),
                  prices=prices_from_table(data.get("prices", {}), where, text),
                  budget_usd=None if data.get("budget_usd") is None else float(data["budget_usd"]),
                  concurrency=int(data.get("concurrency", 4)), seed=int(data.get("seed", 0)),
                  source_text=text or "", source=source)
        if exp.budget_usd is not None:
            unknown = [m for m in exp.models() if price_of(m, exp.prices) is None]
            if unknown:
                raise ExperimentError(f"{where}: budget_usd is set but no price is known for {unknown}; add them under "
                                      "[prices] as {input = ..., output = ..., date = ..., source = ...}.")
        return exp

    def __repr__(self) -> str:
        return (f"Experiment(name={self.name!r}, systems={[s.name for s in self.systems]}, "
                f"windows={list(self.windows)}, "
                f"modes={list(self.modes)}, metrics={len(self.metrics)}, output={str(self.output)!r})")

    # ------------------------------------------------------------ what it needs
    def models(self) -> list[str]:
        """The priced models: each reference system's and the judge's."""
        ms = [s.endpoint.model for s in self.systems if s.kind == "reference"] + [self.judge.model]
        return list(dict.fromkeys(ms))

    def check_environment(self) -> None:
        """Raise :class:`ExperimentError` naming every environment variable the file names that is not set."""
        missing = [(s.name, v) for s in self.systems for v in s.endpoint.missing_env()]
        missing += [("judge", v) for v in self.judge.missing_env()]
        if missing:
            said = "; ".join(f"{v} (for {who}) is {'empty' if v in os.environ else 'not set'}" for who, v in missing)
            raise ExperimentError(f"{self.source}: environment variable(s) not usable: {said}. Export them before "
                                  "the run (keys never go in the file); a server that needs no key needs no "
                                  "api_key_env: leave the key out.")

    def configs(self) -> list:
        """One :class:`fabnb.rag.RAGConfig` per window."""
        return self.contexts.configs()

    def pairs(self):
        from ..datasets import load_fab_bench, read_qa_files

        if self.questions_source == "fab-bench":
            return list(load_fab_bench())
        qa = read_qa_files(self.questions_source, on_error="raise")
        if not len(qa):
            raise ExperimentError(f"{self.source}: [questions] source {self.questions_source} holds no QA files.")
        return list(qa)

    def questions(self) -> pd.DataFrame:
        """The questions of the run: test_id, test_type, question_format, objective_subtype, question,
        ground_truth_answer, gold_context, gold_doc_ids (a seeded stratified sample when ``sample`` is set)."""
        from ..rag import questions_frame

        pairs = self.pairs()
        frame = questions_frame(pairs)
        frame.insert(3, "objective_subtype", [p.objective_subtype for p in pairs])
        if self.test_types:
            frame = frame[frame["test_type"].isin(self.test_types)]
        if self.sample is not None and self.sample < len(frame):
            # Shuffle with the seed, then deal one question per stratum in turn: every stratum is represented
            # before any gets a second question.
            shuffled = frame.sample(frac=1.0, random_state=self.seed)
            rank = shuffled.groupby(list(self.stratify), sort=False).cumcount()
            frame = shuffled.assign(_rank=rank).sort_values("_rank", kind="stable").head(self.sample)
            frame = frame.drop(columns="_rank").sort_values("test_id")
        return frame.reset_index(drop=True)

    def chunks(self) -> pd.DataFrame | None:
        """The chunked corpus for reference systems (None when every system is an adapter)."""
        if all(s.kind != "reference" for s in self.systems):
            return None
        import warnings

        from ..corpus import chunk_corpus, load_corpus
        from ..datasets import evidence_corpus, load_fab_bench

        if self.corpus_source == "fab-bench-evidence":
            corpus = evidence_corpus(list(load_fab_bench()))
        else:
            corpus = load_corpus(self.corpus_source)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return chunk_corpus(corpus, size=self.chunk_size, overlap=self.chunk_overlap)

    def signatures(self) -> dict:
        systems = {s.name: s.signature(self.corpus.signature(), self.output_k) for s in self.systems}
        knobs = {"n_snippets": self.n_snippets, "threshold": self.threshold, "temperature": self.temperature}
        return {"systems": systems, "retrieval": knobs, "judge": self.judging.signature()}


def _name(data: dict, where: str) -> str:
    if not data.get("name"):
        raise ExperimentError(f"{where}: name = \"...\" is required (it marks the output folder as this "
                              "experiment's).")
    return str(data["name"])


def _output(data: dict, where: str, base: Path, output, text: str | None = None) -> Path:
    # An output given here (``fabnb run --out``) is relative to where the command runs; the file's own
    # ``output`` is relative to the file.
    out = Path(output).absolute() if output is not None else data.get("output")
    if out is None:
        raise ExperimentError(f"{where}: output = \"folder\" is required (answers, scores and the report go "
                              "there).")
    out = Path(out) if Path(out).is_absolute() else Path(os.path.normpath(base / out))
    if out.exists() and not out.is_dir():
        raise ExperimentError(f"{where}: output = {str(out)!r}{_line_of(text, 'output')} is a file, not a folder; "
                              "name a new or empty folder (the file is not touched).")
    return out


def _systems(raw: list, where: str, text: str | None) -> tuple[SystemSpec, ...]:
    if not raw:
        raise ExperimentError(f"{where}: no [[systems]]; add at least one, e.g. [[systems]] name = \"local\", "
                              "kind = \"reference\", model = \"embedded\".")
    systems = tuple(SystemSpec.from_table(s, where, text, i) for i, s in enumerate(raw))
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise ExperimentError(f"{where}: system names must differ; {names} repeats one.")
    return systems
