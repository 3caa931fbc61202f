"""The systems of an experiment: their endpoints and settings (:class:`Endpoint`, :class:`SystemSpec`), checked
against the registry of system kinds (:func:`fabnb.rag.kinds.system_kinds`), and how each is built into a
:class:`fabnb.rag.RAGSystem`.

Examples
--------
>>> SystemSpec.from_table({"name": "local", "kind": "reference", "model": "embedded"}, "<dict>", None, 0).model
'gemma-3-270m-q4_k_m'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pandas as pd

from ..core.values import line_of, type_names
from ..rag.kinds import SystemKind, system_kinds
from .fields import ExperimentError, check_table

__all__ = ["Endpoint", "SystemSpec", "grid_tables", "systems_from_tables"]


def _kind(name: str) -> SystemKind:
    return system_kinds()[name]


def _retrievers() -> dict:
    """:data:`fabnb.rag.retrievers.RETRIEVERS` (imported when a file is checked, not when fabnb is)."""
    from ..rag.retrievers import RETRIEVERS

    return RETRIEVERS


def _check_retriever(name, where: str, text: str | None, label: str) -> str:
    """A retriever the file may name and this machine can run, or an error with what to do."""
    usable = [n for n, k in _retrievers().items() if k.in_files]
    line = line_of(text, "retriever")
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

    def api_key(self) -> str | None:
        """The key, read from ``api_key_env`` now (never stored)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def llm(self, *, concurrency: int = 8, n_ctx: int = 8192, logprobs: bool = False, timeout: float = 120.0):
        """The :class:`fabnb.models.llm.LLM` (the embedded model's shared server for ``"embedded"``)."""
        from ..models.llm import LLM

        if self.embedded:
            from ..models.local import shared_server

            return shared_server(logits_all=logprobs, n_ctx=n_ctx).llm()
        return LLM(self.model, self.url(), self.api_key(), concurrency=concurrency, timeout=timeout,
                   max_retries=self.max_retries, schema_style=os.environ.get("FABNB_LLM_SCHEMA_STYLE", "openai"))


def _check_settings(kind: SystemKind, settings: dict, where: str, text: str | None, label: str) -> None:
    """A kind's settings: known keys, the required ones present, each of its type and range."""
    allowed = kind.settings
    unknown = set(settings) - set(allowed)
    if unknown:
        raise ExperimentError(f"{where}: {label} settings {sorted(unknown)} are not {kind.name} settings; "
                              f"allowed: {', '.join(allowed) or 'none'}.")
    missing = [n for n, s in allowed.items() if s.required and n not in settings]
    if missing:
        raise ExperimentError(f"{where}: {label} ({kind.name}){line_of(text, 'kind')} needs settings "
                              + ", ".join(f"{n} ({type_names(allowed[n].types)})" for n in missing)
                              + f", e.g. settings = {{{missing[0]} = ...}}; docs/experiment.md lists each kind's.")
    for name, value in settings.items():
        problem = allowed[name].problem(value)
        if problem:
            raise ExperimentError(f"{where}: {label} settings.{name} = {value!r}{line_of(text, name)} {problem}.")


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
    mode: str = "online"  # "batch": its answers through the endpoint's batch routes (fabnb.experiment.batching)

    @classmethod
    def from_table(cls, s, where: str, text: str | None, index: int) -> "SystemSpec":
        """The ``index``-th (0-based) ``[[systems]]`` table, checked."""
        label = f"[[systems]] #{index + 1}" + (f" ({s.get('name')!r})" if isinstance(s, dict) and s.get("name")
                                               else "")
        if not isinstance(s, dict):
            raise ExperimentError(f"{where}: {label} must be a table.")
        check_table(s, "systems", where, text, label)
        if not s.get("name"):
            raise ExperimentError(f"{where}: {label} needs a name (it labels the system in every store).")
        name, kinds = s.get("kind", "reference"), system_kinds()
        if name not in kinds:
            raise ExperimentError(f"{where}: {label} kind = {name!r}{line_of(text, 'kind')} is not a system "
                                  f"kind; allowed: {', '.join(kinds)}.")
        kind, settings = kinds[name], s.get("settings", {})
        ep = Endpoint.from_table(s, where, label, need_model=kind.uses_endpoint)
        retriever = ""
        if kind.reference:
            if settings:
                raise ExperimentError(f"{where}: {label} is the reference system; settings are for adapters. "
                                      "Use retriever and the [contexts] knobs.")
            retriever = _check_retriever(s.get("retriever", "bm25"), where, text, label)
        else:
            _check_settings(kind, settings, where, text, label)
        missing = kind.missing()
        if missing:
            raise ExperimentError(f"{where}: {label} kind = {name!r}{line_of(text, 'kind')} is not installed "
                                  f"here; install it with: {missing}")
        if not kind.uses_endpoint and kind.needs_url and not (ep.base_url or ep.base_url_env):
            raise ExperimentError(f"{where}: {label} ({name}) needs base_url or base_url_env.")
        mode = s.get("mode", "online")
        if mode not in ("online", "batch"):
            raise ExperimentError(f"{where}: {label} mode = {mode!r}{line_of(text, 'mode')} must be \"online\" or "
                                  "\"batch\" (the endpoint's batch routes, at its batch price).")
        if mode == "batch" and not kind.reference:
            raise ExperimentError(f"{where}: {label} mode = \"batch\"{line_of(text, 'mode')}: batch mode is for "
                                  "systems that call an OpenAI-compatible endpoint directly (kind \"reference\"); a "
                                  f"{name} system builds its own calls. Remove mode (its judge can still be batched).")
        return cls(s["name"], name, ep, retriever, dict(settings), float(s.get("timeout", 120)), mode)

    @property
    def uses_endpoint(self) -> bool:
        """Whether the system answers through an OpenAI-compatible endpoint of the file (the reference system and
        the in-process frameworks): it is probed, priced and planned as that endpoint."""
        return _kind(self.kind).uses_endpoint

    @property
    def framework(self) -> str | None:
        """The in-process framework this system runs (a key of :data:`fabnb.rag.frameworks.FRAMEWORKS`), or None."""
        return _kind(self.kind).framework

    @property
    def model(self) -> str:
        """The model label the stores use: for the embedded model, the name its server serves it under (what the
        answers record), so that the plan, the stores and the manifest name it alike."""
        if self.uses_endpoint and self.endpoint.embedded:
            from ..models.local import MODEL_ALIAS

            return MODEL_ALIAS
        return self.endpoint.model or self.settings.get("model") or self.kind

    @property
    def exposes_context(self) -> bool:
        """Whether this system's answers come with the context it retrieved."""
        return _kind(self.kind).exposes_context

    def identity(self) -> str:
        """What names this system's endpoint in the probes: the endpoint's, or the adapter's name and kind."""
        return self.endpoint.identity() if self.uses_endpoint else f"{self.name} ({self.kind})"

    def signature(self, chunking: dict, output_k) -> dict:
        """What makes this system's answers what they are: a change here is refused on resume."""
        sig = {"kind": self.kind, "endpoint": self.endpoint.identity(), "output_k": output_k}
        if _kind(self.kind).reference:
            sig.update(retriever=self.retriever, chunking=chunking)
        else:
            sig.update(settings=dict(sorted(self.settings.items())))
            if self.framework:  # a default pipeline chunks the corpus as [corpus] says
                sig.update(chunking=chunking)
        return sig

    def build(self, chunks: pd.DataFrame | None, concurrency: int = 8, documents: pd.DataFrame | None = None,
              chunking: dict | None = None):
        """The :class:`fabnb.rag.RAGSystem`; the reference system builds its retriever over ``chunks``, a framework
        its pipeline over ``documents`` (a :class:`fabnb.corpus.collection.Corpus`, or a frame of ``doc_id``,
        ``text``) chunked as ``chunking`` says."""
        from .. import rag

        kind = _kind(self.kind)
        if kind.reference:
            return rag.ReferenceRAG(chunks, self.endpoint.llm(concurrency=concurrency, timeout=self.timeout),
                                    retriever=self.retriever, name=self.name)
        if kind.framework:
            return self._framework(documents, chunking or {}, concurrency)
        settings = dict(self.settings)
        if self.endpoint.model:
            settings.setdefault("model", self.endpoint.model)
        return kind.build(self.name, self.endpoint.url(), self.endpoint.api_key(), self.timeout, settings)

    def _framework(self, documents: pd.DataFrame | None, chunking: dict, concurrency: int):
        from ..rag import RAGError
        from ..rag.frameworks import FrameworkRAG, FrameworkSetup

        if documents is None:
            raise ExperimentError(f"{self.name} ({self.kind}): no corpus documents were given to build it from.")
        llm = self.endpoint.llm(concurrency=concurrency, timeout=self.timeout)  # the embedded server's URL, too
        setup = FrameworkSetup(getattr(documents, "documents", documents), llm.base_url, llm.model,
                               self.endpoint.api_key(),
                               chunk_size=int(chunking.get("chunk_size", 512)),
                               chunk_overlap=int(chunking.get("chunk_overlap", 128)), timeout=self.timeout)
        try:
            return FrameworkRAG(self.kind, setup, llm, factory=self.settings.get("factory"), name=self.name)
        except RAGError as exc:
            raise ExperimentError(f"[[systems]] {self.name!r} ({self.kind}): {exc}") from None


def systems_from_tables(raw: list, where: str, text: str | None) -> tuple[SystemSpec, ...]:
    if not raw:
        raise ExperimentError(f"{where}: no [[systems]]; add at least one, e.g. [[systems]] name = \"local\", "
                              "kind = \"reference\", model = \"embedded\".")
    systems = tuple(SystemSpec.from_table(s, where, text, i) for i, s in enumerate(raw))
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise ExperimentError(f"{where}: system names must differ; {names} repeats one.")
    return systems


def grid_tables(tests: dict, where: str, text: str | None) -> list[dict]:
    """The ``[[systems]]`` tables a ``[tests]`` grid stands for: every answering LLM of ``llms`` with every retriever
    of ``retrievers`` (``"all"``: every retriever kind a file may name that is installed here), as reference
    systems named ``<llm> x <retriever>``, kept to the ``pairs`` allowed when the file lists them (RAG-TESTER ran
    the 24 compatible pairs of 8 LLMs and 6 embedding models).

    Examples
    --------
    >>> tables = grid_tables({"llms": [{"name": "a", "model": "embedded"}, {"name": "b", "model": "embedded"}],
    ...                       "retrievers": ["bm25", "tfidf"], "pairs": [["a", "bm25"], ["b", "tfidf"]]}, "e", None)
    >>> [t["name"] for t in tables]
    ['a x bm25', 'b x tfidf']
    """
    llms = tests.get("llms") or []
    if not llms:
        return []
    if not all(isinstance(m, dict) and m.get("name") for m in llms):
        raise ExperimentError(f"{where}: [tests] llms{line_of(text, 'llms')} must be a list of tables, each with a "
                              "name and its endpoint keys (model, base_url or base_url_env, api_key_env).")
    retrievers = tests.get("retrievers", "all")
    if retrievers == "all":
        retrievers = [n for n, k in _retrievers().items() if k.in_files and not k.missing()]
    elif not isinstance(retrievers, list) or not retrievers:
        raise ExperimentError(f"{where}: [tests] retrievers{line_of(text, 'retrievers')} must be \"all\" or a list "
                              f"of {', '.join(n for n, k in _retrievers().items() if k.in_files)}.")
    names = [m["name"] for m in llms]
    pairs = tests.get("pairs")
    if pairs is not None:
        bad = [p for p in pairs if not (isinstance(p, list) and len(p) == 2 and p[0] in names and p[1] in retrievers)]
        if bad:
            raise ExperimentError(f"{where}: [tests] pairs{line_of(text, 'pairs')} names {bad[0]!r}, not an [llm, "
                                  f"retriever] pair of llms {names} and retrievers {retrievers}.")
        allowed = {tuple(p) for p in pairs}
    else:
        allowed = {(m, r) for m in names for r in retrievers}
    endpoint_keys = ("model", "base_url", "base_url_env", "api_key_env", "max_retries")
    return [{"name": f"{m['name']} x {r}", "kind": "reference", "retriever": r,
             **{k: m[k] for k in endpoint_keys if k in m}}
            for m in llms for r in retrievers if (m["name"], r) in allowed]
