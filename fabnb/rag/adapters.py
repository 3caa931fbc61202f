"""Adapters for production RAG frameworks over HTTP: AnythingLLM, RAGFlow, MaxKB, Metaso, hayhooks, LightRAG, any JSON
API."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
import threading
import time
import uuid
import warnings
from urllib.parse import urlsplit

from ..corpus.terms import KnowledgeBase
from .config import (
    ANYTHINGLLM_DEFAULTS,
    CONTEXT_INDICATORS,
    PROMPT_OVERHEAD,
    RAGConfig,
    RAGError,
    count_tokens,
    truncate_tokens,
)
from .kinds import system_kind
from .system import Answer, check_budget, count_context

__all__ = ['AnythingLLM', 'HTTPAdapter', 'Hayhooks', 'LightRAG', 'MaxKB', 'Metaso', 'OpenWebUI', 'RAGFlow',
           'detect_context_use', 'get_path']

# ------------------------------------------------------------------ HTTP adapters


def get_path(data, path: str | None):
    """``data`` at a dotted path (``"choices.0.message.content"``); KeyError naming the missing step."""
    if path is None or path == "":
        return data
    for step in path.split("."):
        if isinstance(data, list) and step.lstrip("-").isdigit() and -len(data) <= int(step) < len(data):
            data = data[int(step)]
        elif isinstance(data, dict) and step in data:
            data = data[step]
        else:
            raise KeyError(f"response has no '{step}' at '{path}'")
    return data


def detect_context_use(answer: str, kb=None) -> dict:
    """Appendix F's heuristic context detection, for systems that expose no sources.

    Looks for phrases that cite a source (:data:`CONTEXT_INDICATORS`: "according to",
    "standard specifies", "SEMI", ...) and for domain terminology (the knowledge base's
    technical density, Eq. 1). It is a heuristic: it says an answer *looks* grounded.

    Returns
    -------
    dict
        indicators (list), technical_density, context_signal (0-1: half from indicators,
        saturating at 3; half from density, saturating at 0.2).

    Examples
    --------
    >>> detect_context_use("According to SEMI E10, the tool uptime ...")["indicators"]
    ['according to', 'semi ']
    """

    text = " " + answer.lower() + " "
    found = [p for p in CONTEXT_INDICATORS if p in text]
    density = (kb or KnowledgeBase.default()).analyse(answer).technical_density if answer.strip() else 0.0
    signal = 0.5 * min(1.0, len(found) / 3) + 0.5 * min(1.0, density / 0.2)
    return {"indicators": found, "technical_density": density, "context_signal": round(signal, 4)}


#: The docs of the settings every adapter takes from :class:`HTTPAdapter` (through ``**kwargs``).
_COMMON = {"model": "a label for the results store", "headers": "extra HTTP headers",
           "request": "the JSON body; its strings may hold {question}, {context_k}, {context_tokens}, {max_tokens}, "
                      "{n_snippets} or {threshold}",
           "answer_path": "dotted path of the answer in the response, e.g. \"choices.0.message.content\"",
           "sources_path": "dotted path of the list of sources (none: the API returns none)",
           "source_text": "the field of a source holding its text", "source_id": "the field of a source holding its id"}


@system_kind("http", "any JSON API over HTTP, by a request template and response paths", _COMMON)
class HTTPAdapter:
    """Any JSON-over-HTTP RAG API, configured by a request template and response paths.

    Parameters
    ----------
    name : str
    url : str
    request : dict
        The JSON body; every string in it may hold ``{question}``, ``{context_k}``, ``{context_tokens}`` (the
        window's context budget in tokens), ``{max_tokens}``, ``{n_snippets}`` or ``{threshold}``.
    answer_path : str
        Dotted path of the answer text in the response (``"choices.0.message.content"``).
    sources_path : str, optional
        Dotted path of the list of sources; None if the API exposes none.
    source_text : str, source_id : str
        Fields of one source holding its text and its id.
    api_key : str, optional
        Sent as ``Authorization: Bearer``; never in reprs, results or errors.
    model : str
        A label for the results store.
    timeout : float

    Examples
    --------
    >>> a = HTTPAdapter("my-rag", "http://127.0.0.1:9/ask", {"q": "{question}"}, "data.answer", api_key="sk-x")
    >>> a
    HTTPAdapter(name='my-rag', url='http://127.0.0.1:9/ask', api_key=set)
    """

    #: The header the key goes in, and its value around the key.
    AUTH: tuple[str, str] = ("Authorization", "Bearer {key}")
    #: The arguments of this class an adapter for one API fills itself (so not settings of its kind).
    FIXED: tuple[str, ...] = ()

    def __init__(self, name: str, url: str, request: dict, answer_path: str, sources_path: str | None = None,
                 source_text: str = "text", source_id: str = "id", api_key: str | None = None,
                 model: str = "", timeout: float = 120.0, headers: dict | None = None, kb=None):
        self.name, self.url, self.request = name, url, request
        self.answer_path, self.sources_path = answer_path, sources_path
        self.source_text, self.source_id = source_text, source_id
        self.model = model or name
        self.timeout = timeout
        self.sources_exposed = sources_path is not None
        self.__key = api_key
        self._headers = dict(headers or {})
        self._kb = kb
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self.url!r}, api_key={'set' if self.__key else None})"

    def __getstate__(self):
        raise TypeError(f"{type(self).__name__} holds an API key and is not pickled; build it again where needed.")

    def _sanitize(self, text: str) -> str:
        return text.replace(self.__key, "***") if self.__key and len(self.__key) > 3 else text

    def _connection(self, scheme: str, netloc: str, fresh: bool = False):

        # One keep-alive connection per thread and host: the standard library's client costs
        # a fraction of a millisecond a call, which matters with 32 calls in flight on 2 cores.
        conns = self._local.__dict__.setdefault("conns", {})
        if fresh or (scheme, netloc) not in conns:
            if (scheme, netloc) in conns:
                conns[(scheme, netloc)].close()
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conns[(scheme, netloc)] = cls(netloc, timeout=self.timeout)
        return conns[(scheme, netloc)]

    def body(self, question: str, config: RAGConfig) -> dict:
        """The request body for a question (placeholders filled)."""
        values = {"question": question, "context_k": config.context_k, "max_tokens": config.max_output_tokens,
                  "context_tokens": config.context_tokens,
                  "n_snippets": config.n_snippets, "threshold": config.threshold}

        def fill(x):
            if isinstance(x, str):
                if re.fullmatch(r"\{(\w+)\}", x) and x[1:-1] in values and x[1:-1] != "question":
                    return values[x[1:-1]]  # a lone placeholder keeps its type (numbers stay numbers)
                return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), x)
            if isinstance(x, dict):
                return {k: fill(v) for k, v in x.items()}
            if isinstance(x, list):
                return [fill(v) for v in x]
            return x

        return fill(self.request)

    def post(self, url: str, body: dict) -> dict:
        """POST JSON and return the decoded response; RAGError with a cause on any failure."""
        return self.send("POST", url, body)

    def send(self, method: str, url: str, body: dict | None = None) -> dict:
        """Send ``method`` (with ``body`` as JSON, if given) and return the decoded response; RAGError with a cause
        on any failure."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RAGError(f"{self.name}: {url!r} is not an http(s) URL.", "connection")
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self._headers}
        if self.__key:
            name, value = self.AUTH
            headers[name] = value.format(key=self.__key)
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        path = parts.path or "/"
        path += f"?{parts.query}" if parts.query else ""
        for attempt in range(2):  # a kept-alive connection the server closed is retried once, fresh
            conn = self._connection(parts.scheme, parts.netloc, fresh=attempt > 0)
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                status, raw = response.status, response.read()
                break
            except (TimeoutError, socket.timeout):
                conn.close()
                raise RAGError(f"{self.name}: no answer from {url} within {self.timeout} s.", "timeout") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                if attempt == 0:
                    continue
                error = exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                error = exc
            raise RAGError(f"{self.name}: cannot reach {url} ({type(error).__name__}: "
                           f"{self._sanitize(str(error))[:200]}); is the server running?", "connection") from None
        text = raw.decode("utf-8", errors="replace")
        if status >= 400:
            raise RAGError(f"{self.name}: {url} answered HTTP {status}: {self._sanitize(text)[:300]}",
                           f"http-{status}")
        try:
            return json.loads(text)
        except ValueError:
            raise RAGError(f"{self.name}: {url} answered something that is not JSON: "
                           f"{self._sanitize(text)[:200]!r}", "bad-response") from None

    def read_sources(self, data) -> list[dict] | None:
        """The sources of a decoded response (id, doc_id, text, score), by ``sources_path``; None when this API
        exposes none. An adapter whose API shapes its sources otherwise overrides this, not :meth:`parse`."""
        if self.sources_path is None:
            return None
        try:
            raw = get_path(data, self.sources_path)
        except KeyError:
            raw = []  # an answer without sources is an answer, with none retrieved
        raw = raw if isinstance(raw, list) else []
        return [{"id": str(s.get(self.source_id, i)), "doc_id": str(s.get("doc_id", s.get("title", ""))),
                 "text": str(s.get(self.source_text, "")), "score": s.get("score")}
                for i, s in enumerate(raw) if isinstance(s, dict)]

    def parse(self, data) -> Answer:
        """An :class:`Answer` from a decoded response, by the configured paths."""
        try:
            text = get_path(data, self.answer_path)
        except KeyError as exc:
            raise RAGError(f"{self.name}: {exc.args[0]}; the adapter's answer_path is '{self.answer_path}'.",
                           "bad-response") from None
        if not isinstance(text, str):
            raise RAGError(f"{self.name}: the answer at '{self.answer_path}' is {type(text).__name__}, not text.",
                           "bad-response")
        if not text.strip():
            raise RAGError(f"{self.name}: the answer is empty.", "empty-answer")
        sources = self.read_sources(data)
        usage = data.get("usage") if isinstance(data, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        answer = Answer(text, sources, 0.0, int(usage.get("prompt_tokens") or 0),
                        int(usage.get("completion_tokens") or 0))
        return answer if self.sources_exposed else self._without_sources(answer)

    def _without_sources(self, answer: Answer) -> Answer:
        """``answer`` marked as one that came without sources, with Appendix F's heuristic context signal."""
        answer.sources = None
        answer.context_signal = detect_context_use(answer.answer, self._kb)["context_signal"]
        return answer

    def message(self, question: str, config: RAGConfig, gold_context: str | None) -> str:
        """The text sent as the user's message: the question, or in mode B the gold context and the question."""
        if gold_context is None:
            return question
        q = check_budget(question, config)
        context, _ = truncate_tokens(gold_context, config.input_budget - q - PROMPT_OVERHEAD)
        return f"Use only this context to answer.\n\nContext:\n{context}\n\nQuestion: {question}"

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        if gold_context is None:  # with gold context, message() checks the budget as it fits the context
            check_budget(question, config)
        text = self.message(question, config, gold_context)
        start = time.perf_counter()
        answer = self.parse(self.post(self.url, self.body(text, config)))
        answer.latency_s = time.perf_counter() - start
        if gold_context is not None:
            answer.context_tokens = count_tokens(text) - count_tokens(question)
        return answer


#: What an adapter for one API fills itself: its request and where its answer and sources are.
_SHAPE = ("request", "answer_path", "sources_path", "source_text", "source_id")


def _openai_body(model: str, extra: dict | None = None) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "{question}"}], "stream": False,
            "max_tokens": "{max_tokens}", **(extra or {})}


@system_kind("anythingllm", "AnythingLLM's workspace chat API",
             {**_COMMON, "workspace": "the workspace's slug", "mode": "\"query\" or \"chat\""})
class AnythingLLM(HTTPAdapter):
    """AnythingLLM's workspace chat API (``POST /api/v1/workspace/{slug}/chat``), sources with text.

    Read at Mintplex-Labs/anything-llm@72aabbd1 (v1.16.0+17): the endpoint answers ``chatSync``'s record
    (``server/utils/chats/apiChatHandler.js``): ``textResponse``, ``sources`` (the vector search's chunks, each the
    document's metadata with ``id``, ``title``, ``docSource``, ``text`` and ``score``, as ``curateSources`` in
    ``server/utils/vectorDbProviders/lance/index.js`` writes them), ``metrics`` (``prompt_tokens``,
    ``completion_tokens``), or ``type: "abort"`` with ``error``. Each question is sent with a session id of its own:
    API chats without one share one history, and AnythingLLM fills a short context window from the sources of
    earlier answers in it (``fillSourceWindow``), which would put one question's evidence into the next's prompt.
    The ``<document_metadata>`` header AnythingLLM writes at the head of each chunk is taken off its text.

    Retrieval knobs (topN, similarityThreshold) are workspace settings: :meth:`configure`
    sends them with ``POST /api/v1/workspace/{slug}/update``. The context window itself
    is the workspace model's token limit, set in AnythingLLM for each sweep point.
    """

    FIXED = _SHAPE  # the request and the response paths are this API's

    HEADER = re.compile(r"\A[^<\n]{0,64}?<document_metadata>\n.*?</document_metadata>\n\n", re.S)  # after a prefix

    def __init__(self, base_url: str, workspace: str, api_key: str | None = None, mode: str = "query",
                 model: str = "anythingllm", **kwargs):
        self.base_url = base_url.rstrip("/")
        self.workspace = workspace
        super().__init__("anythingllm", f"{self.base_url}/api/v1/workspace/{workspace}/chat",
                         {"message": "{question}", "mode": mode}, "textResponse", "sources",
                         source_text="text", source_id="id", api_key=api_key, model=model, **kwargs)

    def body(self, question: str, config: RAGConfig) -> dict:
        return {**super().body(question, config), "sessionId": f"fabnb-{uuid.uuid4().hex}"}

    def parse(self, data) -> Answer:
        if isinstance(data, dict) and (data.get("error") or data.get("type") == "abort"):
            raise RAGError(f"anythingllm: the workspace reported an error: {str(data.get('error'))[:200]}",
                           "bad-response")
        answer = super().parse(data)
        for s, raw in zip(answer.sources or [], get_path(data, "sources") or []):
            s["doc_id"] = str(raw.get("title") or raw.get("docSource") or s["doc_id"])
            s["score"] = raw.get("score", s["score"])
            s["text"] = self.HEADER.sub("", s["text"], count=1)
        metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
        answer.prompt_tokens = answer.prompt_tokens or int(metrics.get("prompt_tokens") or 0)
        answer.completion_tokens = answer.completion_tokens or int(metrics.get("completion_tokens") or 0)
        return answer

    def configure(self, config: RAGConfig) -> dict:
        """Set the workspace's snippets and threshold for a configuration; returns the server's answer."""
        body = {"topN": config.n_snippets or ANYTHINGLLM_DEFAULTS["n_snippets"],
                "similarityThreshold": config.threshold}
        return self.post(f"{self.base_url}/api/v1/workspace/{self.workspace}/update", body)


@system_kind("ragflow", "RAGFlow's OpenAI-compatible chat endpoint",
             {**_COMMON, "chat_id": "the chat assistant's id"})
class RAGFlow(HTTPAdapter):
    """RAGFlow's OpenAI-compatible chat endpoint, the current path first, the deprecated one where it is missing.

    RAGFlow 1.0 serves ``/api/v1/openai/{chat_id}/chat/completions`` (``api/apps/restful_apis/openai_api.py``);
    releases before it serve ``/api/v1/chats_openai/{chat_id}/chat/completions`` (``api/apps/sdk/session.py``),
    deprecated in 0.27. The adapter asks the current path; an HTTP 404 there moves it to the deprecated path for
    good. Both answer ``stream: false`` with the OpenAI shape and, asked with ``extra_body.reference``, put the
    retrieved chunks as a list in ``choices[0].message.reference`` (``chunks_format``: id, content, document_id,
    document_name, dataset_id, positions, url, similarity, ...): they become the sources. An answer without
    them has none and, as Appendix F says, its attribution is inferred from the content.
    """

    FIXED = _SHAPE  # the request and the response paths are this API's

    PATHS = ("/api/v1/openai/{chat_id}/chat/completions", "/api/v1/chats_openai/{chat_id}/chat/completions")

    def __init__(self, base_url: str, chat_id: str, api_key: str | None = None, model: str = "model", **kwargs):
        self.urls = [base_url.rstrip("/") + p.format(chat_id=chat_id) for p in self.PATHS]
        super().__init__("ragflow", self.urls[0], _openai_body(model, {"extra_body": {"reference": True}}),
                         "choices.0.message.content", "choices.0.message.reference", source_text="content",
                         source_id="id", api_key=api_key, model=model, **kwargs)

    def post(self, url: str, body: dict) -> dict:
        try:
            return super().post(url, body)
        except RAGError as exc:
            if exc.cause != "http-404" or url != self.urls[0]:
                raise
        self.url = self.urls[1]  # a server before RAGFlow 1.0: the deprecated path from now on
        return super().post(self.url, body)

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        try:
            raw = get_path(data, "choices.0.message.reference")
        except KeyError:
            raw = None
        if isinstance(raw, dict):  # a reference object rather than its chunks: read its chunks
            raw = raw.get("chunks")
            answer.sources = [{"id": str(r.get("id", i)), "doc_id": "", "text": str(r.get("content", "")),
                               "score": None} for i, r in enumerate(raw or []) if isinstance(r, dict)]
        if not raw:  # no references returned: fall back to Appendix F's inference
            answer = self._without_sources(answer)
        else:
            for s, r in zip(answer.sources, [r for r in raw if isinstance(r, dict)]):
                s["doc_id"] = str(r.get("document_name") or r.get("document_id") or s["doc_id"])
                s["score"] = r.get("similarity", s["score"])
        return answer


@system_kind("maxkb", "a MaxKB application's OpenAI-compatible endpoint", _COMMON)
class MaxKB(HTTPAdapter):
    """MaxKB's OpenAI-compatible application endpoint, with the sources read from the conversation record.

    ``base_url`` is the application's API base (``http://host:8080/chat/api/{application_id}``, as MaxKB shows
    it); the key is the application's API key. The answer comes from ``POST {base_url}/chat/completions``. MaxKB
    2.x (read at 1Panel-dev/MaxKB@121614fb, v2.1.0+10) puts the conversation's ``chat_id`` in ``choices[0]`` and
    the record's id in ``id`` (``apps/common/handle/impl/response/openai_to_response.py``); the adapter then reads
    ``GET /chat/api/historical_conversation/{chat_id}/record/{id}``, whose ``data.paragraph_list`` (id,
    document_id, document_name, content, similarity, ...) is what the application retrieved
    (``apps/application/serializers/application_chat_record.py``, ``reset_chat_record``). MaxKB sends that list
    only when the application's access settings show sources ("show source"); without it, or from a server that
    gives no ``chat_id`` (MaxKB 1.x), the answer has no sources and carries Appendix F's heuristic context signal
    (:func:`detect_context_use`), and a warning says once why.
    """

    FIXED = _SHAPE  # the request and the response paths are this API's

    RECORD = "/historical_conversation/{chat_id}/record/{record_id}"

    def __init__(self, base_url: str, api_key: str | None = None, model: str = "maxkb", **kwargs):
        base = base_url.rstrip("/")
        super().__init__("maxkb", f"{base}/chat/completions", _openai_body(model), "choices.0.message.content", None,
                         api_key=api_key, model=model, **kwargs)
        self.record_url = base.rsplit("/", 1)[0] + self.RECORD  # /chat/api/{application_id} -> /chat/api
        self.sources_exposed = True  # when the application shows its sources; else each answer says it has none
        self._warned = False

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        answer = super().ask(question, config, gold_context)  # its latency is the answer's, not the record's
        answer.sources, why = self._sources(self._local.last)
        if answer.sources is None:
            answer.context_signal = detect_context_use(answer.answer, self._kb)["context_signal"]
            if not self._warned:
                self._warned = True
                warnings.warn(f"maxkb: {why}; its answers carry Appendix F's heuristic context signal instead of "
                              "sources.", stacklevel=2)
        return answer

    def post(self, url: str, body: dict) -> dict:
        self._local.last = super().post(url, body)  # this thread's ask() reads the record it names
        return self._local.last

    def _sources(self, data) -> tuple[list | None, str]:
        """The record's paragraphs as sources, or None and why there are none."""
        try:
            chat_id, record_id = get_path(data, "choices.0.chat_id"), get_path(data, "id")
        except KeyError:
            return None, "the server gave no chat_id with the answer (MaxKB before 2.0?), so its record is not read"
        try:
            record = self.send("GET", self.record_url.format(chat_id=chat_id, record_id=record_id))
        except RAGError as exc:
            return None, f"the conversation record could not be read ({exc})"
        data = record.get("data") if isinstance(record, dict) else None
        paragraphs = data.get("paragraph_list") if isinstance(data, dict) else None
        if not isinstance(paragraphs, list):
            return None, ("the conversation record lists no paragraphs: turn on 'show source' in the application's "
                          "access settings for the retrieved passages")
        return [{"id": str(p.get("id", i)), "doc_id": str(p.get("document_name") or p.get("document_id") or ""),
                 "text": str(p.get("content", "")), "score": p.get("similarity")}
                for i, p in enumerate(paragraphs) if isinstance(p, dict)], ""


@system_kind("hayhooks", "a Haystack pipeline served by hayhooks",
             {**_COMMON, "pipeline": "the served pipeline's name",
              "doc_id_field": "the meta field holding a source's document id"},
             server=("hayhooks", "hayhooks", "hayhooks"))
class Hayhooks(HTTPAdapter):
    """A Haystack pipeline served by hayhooks: ``POST {base_url}/{pipeline}/run``, sources from what it returns.

    hayhooks (read at deepset-ai/hayhooks 2.1.0, ``server/utils/deploy_utils.py``) serves a wrapper's ``run_api``
    at ``/{pipeline}/run``: the request body holds ``run_api``'s parameters (fields it does not take are ignored),
    the response is ``{"result": <what run_api returned>}``. fabnb sends ``question``, ``context_tokens`` (the
    window's context budget, :attr:`fabnb.rag.RAGConfig.context_tokens`) and ``max_tokens``. The default paths
    read what a wrapper returning ``{"answer": ..., "documents": [...]}`` gives, the documents as Haystack writes
    them (``id``, ``content``, ``score``, ``meta``), as fabnb's own wrapper does
    (``examples/hayhooks/fabnb_haystack``, :class:`fabnb.rag.frameworks.ServedPipeline`); the source's document
    id is ``meta[doc_id_field]`` (or ``meta.file_path``). Another shape: give ``answer_path`` and
    ``sources_path`` (None: the pipeline returns no sources, and its answers carry Appendix F's signal).
    """

    FIXED = ("request",)  # the body is what hayhooks passes to run_api; the paths are settings

    def __init__(self, base_url: str, pipeline: str, api_key: str | None = None, answer_path: str = "result.answer",
                 sources_path: str | None = "result.documents", doc_id_field: str = "doc_id",
                 model: str = "hayhooks", **kwargs):
        kwargs.setdefault("source_text", "content")
        kwargs.setdefault("source_id", "id")
        super().__init__("hayhooks", f"{base_url.rstrip('/')}/{pipeline}/run",
                         {"question": "{question}", "context_tokens": "{context_tokens}", "max_tokens": "{max_tokens}"},
                         answer_path, sources_path, api_key=api_key, model=model, **kwargs)
        self.doc_id_field = doc_id_field

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        raw = get_path(data, self.sources_path) if answer.sources else []
        for s, r in zip(answer.sources or [], [r for r in raw if isinstance(r, dict)]):
            meta = r.get("meta") if isinstance(r.get("meta"), dict) else {}
            s["doc_id"] = str(meta.get(self.doc_id_field) or meta.get("file_path") or s["doc_id"])
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(result, dict) and isinstance(result.get("context_tokens"), int):
            answer.context_tokens = result["context_tokens"]
        elif answer.sources:
            answer.context_tokens = count_context(s["text"] for s in answer.sources)
        return answer


@system_kind("lightrag", "the LightRAG server",
             {**_COMMON, "mode": "\"naive\", \"local\", \"global\", \"hybrid\" or \"mix\"",
              "chunk_size": "the server's CHUNK_SIZE in tokens"},
             ranges={"chunk_size": (1, 32_768)}, server=("lightrag", "lightrag-hku", "lightrag"))
class LightRAG(HTTPAdapter):
    """The LightRAG server: the answer from ``POST {base_url}/query``, the chunks it was built on as sources.

    Read at HKUDS/LightRAG 1.5.7 (``lightrag/api/routers/query_routes.py``): ``/query`` takes ``query``, ``mode``,
    ``chunk_top_k`` and ``max_total_tokens`` (the whole prompt's budget: LightRAG takes its own system prompt, the
    query and 200 tokens of buffer off it and fills the rest with chunks) and, asked with ``include_references``
    and ``include_chunk_content``, answers ``{"response", "references": [{"reference_id", "file_path",
    "content": [chunk texts]}]}``. Those texts are the sources (``doc_id`` their ``file_path``: the document's own
    name, as it was inserted). ``/query`` gives no chunk ids and groups the chunks by file; ``/query/data`` (the same
    retrieval, without the answer) lists them in retrieval order with their ``chunk_id``, so the adapter asks it
    after ``/query`` and, where it names the same chunks, stores them in that order under the ids LightRAG keeps
    them by (LightRAG caches a mode's keyword extraction, so both retrieve alike). Where ``/query/data`` is
    missing or names other chunks, the sources are ``/query``'s, each with the id ``{file_path}#{n}``. LightRAG
    returns no similarity scores.

    fabnb sends ``max_total_tokens`` = the window's input budget (:attr:`fabnb.rag.RAGConfig.input_budget`) and
    ``chunk_top_k`` deep enough to fill it with chunks of the server's ``CHUNK_SIZE`` (``chunk_size``, LightRAG's
    default 1200 tokens). ``mode = "naive"`` (vector search over chunks) works with any model; the graph modes
    (``local``, ``global``, ``hybrid``, ``mix``) need one that extracts entities well.
    """

    FIXED = _SHAPE  # the request and the response paths are this API's

    AUTH = ("X-API-Key", "{key}")  # LightRAG reads a bearer token as a login token and refuses an API key there

    def __init__(self, base_url: str, api_key: str | None = None, mode: str = "naive", chunk_size: int = 1200,
                 model: str = "lightrag", **kwargs):
        self.base_url = base_url.rstrip("/")
        self.mode, self.chunk_size = mode, chunk_size
        super().__init__("lightrag", f"{self.base_url}/query",
                         {"query": "{question}", "mode": mode, "include_references": True,
                          "include_chunk_content": True},
                         "response", "references", api_key=api_key, model=model, **kwargs)

    def body(self, question: str, config: RAGConfig) -> dict:
        depth = min(1000, max(1, -(-config.input_budget // max(1, self.chunk_size)) * 2))  # LightRAG's MAX_QUERY_TOP_K
        return {**super().body(question, config), "max_total_tokens": config.input_budget, "chunk_top_k": depth}

    def read_sources(self, data) -> list[dict]:
        sources = []
        refs = data.get("references") if isinstance(data, dict) else None
        for ref in refs if isinstance(refs, list) else []:
            texts = ref.get("content") if isinstance(ref, dict) else None
            for n, text in enumerate(texts if isinstance(texts, list) else []):
                path = str(ref.get("file_path") or "")
                sources.append({"id": f"{path}#{n}", "doc_id": path, "text": str(text), "score": None})
        return sources

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        answer.context_tokens = count_context(s["text"] for s in answer.sources)
        return answer

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        answer = super().ask(question, config, gold_context)
        if gold_context is None and answer.sources:
            try:
                chunks = get_path(self.post(f"{self.base_url}/query/data", self.body(question, config)), "data.chunks")
            except (RAGError, KeyError):
                chunks = []  # a server without /query/data: the sources keep their {file_path}#{n} ids
            chunks = [{"id": str(c.get("chunk_id") or ""), "doc_id": str(c.get("file_path") or ""),
                       "text": str(c.get("content") or ""), "score": None}
                      for c in chunks if isinstance(c, dict)] if isinstance(chunks, list) else []
            key = sorted((s["doc_id"], s["text"]) for s in answer.sources)
            if all(c["id"] for c in chunks) and sorted((c["doc_id"], c["text"]) for c in chunks) == key:
                answer.sources = chunks  # the same chunks, in retrieval order (/query groups them by file)
        return answer


@system_kind("openwebui", "Open WebUI over a knowledge collection (a server of its own: fabnb only talks to it)",
             {**_COMMON, "collection": "the knowledge collection's id"})
class OpenWebUI(HTTPAdapter):
    """Open WebUI's chat completions over a knowledge collection, the chunks it retrieved as sources.

    Read at open-webui 0.12.4: ``POST {base_url}/api/chat/completions`` with ``stream: false`` and ``files: [{"type":
    "collection", "id": collection}]`` retrieves from the knowledge collection (``get_sources_from_items`` in
    ``open_webui/retrieval/utils.py``) and answers the OpenAI body with ``sources`` beside it
    (``merge_events_into_response`` in ``open_webui/utils/middleware.py``): one entry per collection, with
    ``document`` (the chunk texts), ``metadata`` (per chunk: ``file_id``, ``name``, ``source``, ...) and
    ``distances`` (relevance, higher is closer). Each chunk becomes a source whose id is ``{file_id}#{digest}``:
    the file Open WebUI keeps and the first 16 hex digits of the chunk text's SHA-256. Its vector store ids are
    random per insert and never returned, and ``start_index`` cannot locate a chunk: adding a file to a knowledge
    collection splits its chunks again, so every chunk there says 0 (seen live on 0.12.4). The ``doc_id`` is the
    file's name without a ``.txt`` or ``.md`` suffix: upload each document as ``{doc_id}.txt`` so the
    retrieval-side metrics find the gold ones.

    Open WebUI retrieves a fixed number of chunks (its ``RAG_TOP_K``, "Top K" in the admin settings) whatever the
    window: set it deep enough for the largest window; fabnb records the context tokens it actually got. Set
    ``ENABLE_RETRIEVAL_QUERY_GENERATION=false`` on the server, or its model rewrites each question before
    retrieval. The key is a user's API key or session token (``Authorization: Bearer``).
    """

    FIXED = _SHAPE  # the request and the response paths are this API's

    def __init__(self, base_url: str, collection: str, api_key: str | None = None, model: str = "model", **kwargs):
        self.collection = collection
        super().__init__("openwebui", f"{base_url.rstrip('/')}/api/chat/completions",
                         _openai_body(model, {"files": [{"type": "collection", "id": collection}]}),
                         "choices.0.message.content", "sources", api_key=api_key, model=model, **kwargs)

    def read_sources(self, data) -> list[dict]:
        sources = []
        for entry in data.get("sources") or [] if isinstance(data, dict) else []:
            if not isinstance(entry, dict):
                continue
            texts, metas, scores = (entry.get(k) if isinstance(entry.get(k), list) else []
                                    for k in ("document", "metadata", "distances"))
            for n, text in enumerate(texts):
                meta = metas[n] if n < len(metas) and isinstance(metas[n], dict) else {}
                file_id = str(meta.get("file_id") or (entry.get("source") or {}).get("id") or "")
                name = str(meta.get("name") or meta.get("source") or file_id)
                digest = hashlib.sha256(str(text).encode()).hexdigest()[:16]
                sources.append({"id": f"{file_id}#{digest}", "doc_id": re.sub(r"\.(txt|md)$", "", name),
                                "text": str(text), "score": scores[n] if n < len(scores) else None})
        return sources

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        answer.context_tokens = count_context(s["text"] for s in answer.sources)
        return answer


@system_kind("metaso", "Metaso's chat API (its own model; no base_url needed)",
             {**_COMMON, "references_path": "dotted path of the references"})
class Metaso(HTTPAdapter):
    """Metaso's chat API, OpenAI-shaped, with structured references.

    The references are read from ``references_path`` (default ``"citations"``, a list
    of ``{"title", "link", "snippet"}``); pass another path if your API version puts
    them elsewhere. Metaso's model cannot be reconfigured (Appendix F.1), so it takes
    part in cross-framework runs only.
    """

    FIXED = _SHAPE  # the request and the response paths are this API's

    def __init__(self, base_url: str = "https://metaso.cn/api/v1", api_key: str | None = None, model: str = "fast",
                 references_path: str = "citations", **kwargs):
        super().__init__("metaso", f"{base_url.rstrip('/')}/chat/completions", _openai_body(model),
                         "choices.0.message.content", references_path, source_text="snippet", source_id="link",
                         api_key=api_key, model=model, **kwargs)

    def parse(self, data) -> Answer:
        answer = super().parse(data)
        for s in answer.sources or []:
            s["doc_id"] = s["doc_id"] or s["id"]
        return answer
