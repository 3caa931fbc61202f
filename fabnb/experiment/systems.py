"""The systems of an experiment: the kinds a file may name (:data:`SYSTEM_KINDS`), their endpoints and settings
(:class:`Endpoint`, :class:`SystemSpec`), and how each is built into a :class:`fabnb.rag.RAGSystem`.

Examples
--------
>>> SystemSpec.from_table({"name": "local", "kind": "reference", "model": "embedded"}, "<dict>", None, 0).model
'gemma-3-270m-q4_k_m'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pandas as pd

from .fields import ExperimentError, _check_table, _line_of, _names

__all__ = ["SYSTEM_KINDS", "Endpoint", "SystemKind", "SystemSpec", "adapter_settings"]


@dataclass(frozen=True)
class SystemKind:
    """One kind of system: the adapter class in :mod:`fabnb.rag` (None: the reference system or a framework),
    whether its API gives back the retrieved context (the judge's rubrics without context are used where it does
    not), the in-process framework it runs (a key of :data:`fabnb.rag.frameworks.FRAMEWORKS`), and for a framework
    server that installs with fabnb, its ``(module, distribution, extra)``, which ``fabnb doctor`` checks."""

    adapter: str | None
    exposes_context: bool
    framework: str | None = None
    server: tuple[str, str, str] | None = None


#: Every system kind an experiment file may name: the file check, the plan, the run and the docs read this.
SYSTEM_KINDS: dict[str, SystemKind] = {
    "reference": SystemKind(None, True),
    "anythingllm": SystemKind("AnythingLLM", True),
    "ragflow": SystemKind("RAGFlow", True),
    "maxkb": SystemKind("MaxKB", True),
    "metaso": SystemKind("Metaso", True),
    "hayhooks": SystemKind("Hayhooks", True, server=("hayhooks", "hayhooks", "hayhooks")),
    "lightrag": SystemKind("LightRAG", True, server=("lightrag", "lightrag-hku", "lightrag")),
    "openwebui": SystemKind("OpenWebUI", True),  # a server of its own (7.4 GB): fabnb only talks to it
    "http": SystemKind("HTTPAdapter", True),
    "llamaindex": SystemKind(None, True, "llamaindex"),
    "langchain": SystemKind(None, True, "langchain"),
    "haystack": SystemKind(None, True, "haystack"),
}

#: The settings of an in-process framework system: the factory of your own pipeline (default: fabnb's).
FRAMEWORK_SETTINGS: dict[str, tuple] = {"factory": (str, False)}


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


def _adapter_class(kind: str):
    from .. import rag

    return getattr(rag, SYSTEM_KINDS[kind].adapter)


_PROVIDED = {"self", "kwargs", "api_key", "base_url", "name", "url", "timeout", "kb"}  # from the table's own keys
_ANNOTATION_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list}


def adapter_settings(kind: str) -> dict[str, tuple]:
    """The ``settings`` keys of an adapter kind: name -> (types, required), read from the adapter's signature (and
    :class:`fabnb.rag.HTTPAdapter`'s, less those the adapter fills itself, its ``FIXED``). The file check and the
    docs read this.

    >>> sorted(n for n, (_, required) in adapter_settings("http").items() if required)
    ['answer_path', 'request']
    """
    import inspect

    from .. import rag

    if SYSTEM_KINDS[kind].framework:
        return dict(FRAMEWORK_SETTINGS)
    out: dict[str, tuple] = {}
    adapter = _adapter_class(kind)
    for cls, own in ((rag.HTTPAdapter, kind == "http"), (adapter, True)):
        for name, p in inspect.signature(cls.__init__).parameters.items():
            fixed = cls is rag.HTTPAdapter and name in adapter.FIXED
            if name in _PROVIDED or fixed or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
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
        elif SYSTEM_KINDS[kind].framework:
            ep = Endpoint.from_table(s, where, label)
            _check_settings(kind, settings, where, text, label)
            _check_framework(kind, where, text, label)
            retriever = ""
        else:
            ep = Endpoint.from_table(s, where, label, need_model=False)
            if not (ep.base_url or ep.base_url_env) and kind != "metaso":
                raise ExperimentError(f"{where}: {label} ({kind}) needs base_url or base_url_env.")
            _check_settings(kind, settings, where, text, label)
            retriever = ""
        return cls(s["name"], kind, ep, retriever, dict(settings), float(s.get("timeout", 120)))

    @property
    def uses_endpoint(self) -> bool:
        """Whether the system answers through an OpenAI-compatible endpoint of the file (the reference system and
        the in-process frameworks): it is probed, priced and planned as that endpoint."""
        return self.kind == "reference" or bool(SYSTEM_KINDS[self.kind].framework)

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
        return SYSTEM_KINDS[self.kind].exposes_context

    def identity(self) -> str:
        """What names this system's endpoint in the probes: the endpoint's, or the adapter's name and kind."""
        return self.endpoint.identity() if self.uses_endpoint else f"{self.name} ({self.kind})"

    def signature(self, chunking: dict, output_k) -> dict:
        """What makes this system's answers what they are: a change here is refused on resume."""
        sig = {"kind": self.kind, "endpoint": self.endpoint.identity(), "output_k": output_k}
        if self.kind == "reference":
            sig.update(retriever=self.retriever, chunking=chunking)
        else:
            sig.update(settings=dict(sorted(self.settings.items())))
            if SYSTEM_KINDS[self.kind].framework:  # a default pipeline chunks the corpus as [corpus] says
                sig.update(chunking=chunking)
        return sig

    def build(self, chunks: pd.DataFrame | None, concurrency: int = 8, documents: pd.DataFrame | None = None,
              chunking: dict | None = None):
        """The :class:`fabnb.rag.RAGSystem`; the reference system builds its retriever over ``chunks``, a framework
        its pipeline over ``documents`` (a :class:`fabnb.corpus.collection.Corpus`, or a frame of ``doc_id``,
        ``text``) chunked as ``chunking`` says."""
        from .. import rag

        if self.kind == "reference":
            return rag.ReferenceRAG(chunks, self.endpoint.llm(concurrency=concurrency, timeout=self.timeout),
                                    retriever=self.retriever, name=self.name)
        if SYSTEM_KINDS[self.kind].framework:
            return self._framework(documents, chunking or {}, concurrency)
        key = self.endpoint.api_key()
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


def _systems(raw: list, where: str, text: str | None) -> tuple[SystemSpec, ...]:
    if not raw:
        raise ExperimentError(f"{where}: no [[systems]]; add at least one, e.g. [[systems]] name = \"local\", "
                              "kind = \"reference\", model = \"embedded\".")
    systems = tuple(SystemSpec.from_table(s, where, text, i) for i, s in enumerate(raw))
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise ExperimentError(f"{where}: system names must differ; {names} repeats one.")
    return systems


def _check_framework(kind: str, where: str, text: str | None, label: str) -> None:
    """A framework kind must be installed here: else one line with the install command."""
    from ..rag.frameworks import FRAMEWORKS

    missing = FRAMEWORKS[kind].missing()
    if missing:
        raise ExperimentError(f"{where}: {label} kind = {kind!r}{_line_of(text, 'kind')}: "
                              f"{FRAMEWORKS[kind].label} is not installed here; install it with: {missing}")
