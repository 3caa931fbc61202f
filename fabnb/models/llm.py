"""One client for every LLM the kit talks to: any OpenAI-compatible endpoint.

OpenAI itself, vLLM, Ollama, llama.cpp, or a RAG product's OpenAI-compatible API,
configured explicitly or from the environment, and by default the embedded local
model (:mod:`fabnb.models.local`). What :class:`LLM` adds to the ``openai`` package:

- a **persistent response cache** (SQLite, one transaction per answer, WAL journal)
  keyed by base URL, model, messages and every sampling parameter, so an identical
  rerun makes no calls, and a killed run loses at most the calls in flight;
- **retries** with exponential backoff and jitter on 429, 5xx, timeouts and
  connection errors (``Retry-After`` honoured), and a per-call timeout;
- **bounded concurrency** for batches (:meth:`LLM.map`), with an error policy
  (``"raise"`` or ``"record"``) and a progress bar;
- **usage and cost** per call and summed (:attr:`LLM.usage`), given a price table;
- **logprobs** and top logprobs passed through when asked for.

The API key never appears in the cache, logs, reprs or exceptions.

Environment: ``FABNB_LLM_BASE_URL``, ``FABNB_LLM_API_KEY``, ``FABNB_LLM_MODEL``
(``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` are read as fallbacks), and
``FABNB_LLM_SCHEMA_STYLE=llama.cpp`` for a llama.cpp server (see ``schema_style``).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..core.errors import CausedError
from .cache import CacheWarning, ResponseCache, default_cache_path, request_key  # re-exported: their old home

__all__ = ["PARAMS", "LLM", "CacheWarning", "LLMError", "Completion", "Failure", "ResponseCache", "default_cache_path",
           "parse_json", "request_key"]

log = logging.getLogger("fabnb.models.llm")

#: Sampling parameters that are part of a call's identity (and its cache key).
PARAMS = ("temperature", "top_p", "max_tokens", "seed", "stop", "response_format", "logprobs", "top_logprobs",
          "frequency_penalty", "presence_penalty", "n")


class LLMError(CausedError, RuntimeError):
    """A call that failed after its retries; the message names the cause, never the key.

    Attributes
    ----------
    cause : str
        One of :data:`fabnb.core.errors.CAUSES` (``connection``, ``timeout``, ``http-503``, ``bad-body``, ...).
    status : int or None
        The HTTP status, where there was one.
    attempts : int or None
        How many requests were really sent for this call.

    The error is raised with no ``__cause__`` or ``__context__``: the client library's
    exception (whose text may echo a key back) is never attached to it.
    """

    def __init__(self, message: str, cause: str = "error", status: int | None = None, attempts: int | None = None):
        super().__init__(message, cause)
        self.status = status
        self.attempts = attempts


class _BadReply(CausedError):
    """A 200 reply that is not a chat completion; classified with the transport errors (never escapes)."""


@dataclass(frozen=True)
class Completion:
    """One answer.

    Attributes
    ----------
    text : str
    model : str
        The model the server says answered.
    finish_reason : str or None
    prompt_tokens, completion_tokens : int
    logprobs : list of dict or None
        ``[{"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}, ...]``.
    cached : bool
        Served from the cache (no request made).
    latency_s : float
        Wall time of the request (0 for cached answers).
    cost : float or None
        From the price table, where one was given.
    key : str
        The cache key (a SHA-256 of the request without the API key).
    batch : bool
        Answered through a provider's batch routes (:mod:`fabnb.models.batch`): billed at the batch price.
    """

    text: str
    model: str
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list | None = None
    cached: bool = False
    latency_s: float = 0.0
    cost: float | None = None
    key: str = ""
    batch: bool = False


@dataclass(frozen=True)
class Failure:
    """A call recorded as failed under ``error_policy="record"``."""

    error: str
    cause: str
    status: int | None = None
    key: str = ""
    attempts: int | None = None


#: The event loop :meth:`LLM.run` made (its id): the one loop whose async clients fabnb closes itself.
_MANAGED: contextvars.ContextVar = contextvars.ContextVar("fabnb_llm_managed_loop", default=None)


def _pool_limits(client_cls, concurrency: int):
    """Connection limits for ``concurrency`` calls in flight: openai's 1,000 connections, or more when asked.

    The Limits class is the one of the httpx package ``client_cls`` builds on (``httpx`` up to openai 2,
    ``httpx2`` after)."""
    import importlib

    base = next(c for c in client_cls.__mro__ if c.__name__ == "AsyncClient" and c.__module__.startswith("httpx"))
    httpx = importlib.import_module(base.__module__.split(".")[0])
    n = max(1000, int(concurrency))
    return httpx.Limits(max_connections=n, max_keepalive_connections=max(100, int(concurrency)))


def _price_keys(prices: dict | None) -> dict | None:
    """A price table in the kit's vocabulary (``input`` / ``output``); the old ``prompt`` / ``completion`` read too."""
    if not prices or not ({"prompt", "completion"} & set(prices)):
        return prices
    warnings.warn("LLM(prices=...) takes 'input' and 'output' (dollars per million tokens), as the experiment file "
                  "does; 'prompt' and 'completion' are read for now.", DeprecationWarning, stacklevel=3)
    renamed = {"prompt": "input", "completion": "output"}
    return {renamed.get(k, k): v for k, v in prices.items()}


@dataclass
class _Usage:
    records: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **record) -> None:
        with self.lock:
            self.records.append(record)


def _reset_not_timeout(exc: BaseException) -> bool:
    """Whether a "timeout" is a connection the server closed: httpx-aiohttp reports aiohttp's "Can not write
    request body" and "Server disconnected" (a kept-alive connection closed under the request) as
    httpx.ConnectTimeout, which openai calls APITimeoutError. The chain then holds a connection error, no timeout."""
    from aiohttp import ClientConnectionError  # openai[aiohttp]'s transport; ServerTimeoutError is a TimeoutError

    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return (any(isinstance(e, (OSError, ClientConnectionError)) for e in chain)
            and not any(isinstance(e, TimeoutError) for e in chain))


class LLM:
    """A chat model behind an OpenAI-compatible endpoint.

    Parameters
    ----------
    model : str
        Model name as the server knows it.
    base_url : str
        The endpoint (``.../v1``).
    api_key : str, optional
        Kept private: never in reprs, logs, caches or error messages.
    cache : bool, path or ResponseCache
        True: :func:`default_cache_path`; False/None: no cache.
    timeout : float
        Per-call timeout in seconds.
    max_retries : int
        Retries after the first attempt, on 429, 5xx, timeouts and connection errors.
    backoff : float
        First retry delay in seconds; doubles each retry, with up to 50% jitter, capped at 30 s.
    concurrency : int
        Calls in flight at once in :meth:`map` / :meth:`acomplete`.
    prices : dict, optional
        ``{"input": $ per 1M prompt tokens, "output": $ per 1M completion tokens}``, the
        vocabulary of :data:`fabnb.experiment.PRICES` (the older ``prompt`` / ``completion`` keys
        are read too, with a DeprecationWarning).
    defaults : dict, optional
        Sampling parameters applied to every call unless overridden.
    transport : {"aiohttp", "httpx"}
        The HTTP transport of asynchronous calls made through :meth:`run` (every stage's path):
        aiohttp (``openai.DefaultAioHttpClient``, the ``openai[aiohttp]`` extra) costs about
        half the CPU per call of httpx and is what lets one core keep hundreds of calls in
        flight (``benchmarks/bench_concurrency.py``). Synchronous calls, and asynchronous
        calls on an event loop of the caller's own (which fabnb cannot close), use httpx.
    schema_style : {"openai", "llama.cpp"}
        How a JSON schema travels. Callers write llama.cpp's shape,
        ``{"type": "json_object", "schema": S}``; with ``"openai"`` (the default) it is
        sent as OpenAI's ``{"type": "json_schema", "json_schema": {"name": ..., "schema": S}}``,
        which llama.cpp's server refuses and OpenAI requires.

    Examples
    --------
    >>> llm = LLM("my-model", "http://127.0.0.1:8000/v1", api_key="sk-secret", cache=False)
    >>> llm
    LLM(model='my-model', base_url='http://127.0.0.1:8000/v1', api_key=set, cache=None)
    """

    def __init__(self, model: str, base_url: str, api_key: str | None = None, *, cache=True,
                 timeout: float = 120.0, max_retries: int = 4, backoff: float = 1.0, concurrency: int = 8,
                 prices: dict | None = None, defaults: dict | None = None, schema_style: str = "openai",
                 transport: str = "aiohttp"):
        if schema_style not in ("openai", "llama.cpp"):
            raise ValueError(f"schema_style must be 'openai' or 'llama.cpp', not {schema_style!r}")
        if transport not in ("aiohttp", "httpx"):
            raise ValueError(f"transport must be 'aiohttp' or 'httpx', not {transport!r}")
        self.transport = transport
        self.schema_style = schema_style
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.__key = api_key or "not-needed"
        self._has_key = api_key is not None
        if cache is True or isinstance(cache, (str, Path)):
            cache = ResponseCache(default_cache_path() if cache is True else cache)
        # Not `cache or None`: an empty ResponseCache has len 0 and would read as false.
        self.cache: ResponseCache | None = cache if isinstance(cache, ResponseCache) else None
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.concurrency = concurrency
        self.prices = _price_keys(prices)
        self.defaults = dict(defaults or {})
        self._usage = _Usage()
        self._clients: dict = {}
        # A batch run's collecting pass (fabnb.models.batch.captured): a request the cache cannot answer is
        # appended here as (key, body) and ends with LLMError "captured" instead of being sent.
        self.capture: list | None = None

    @classmethod
    def from_env(cls, **kwargs) -> "LLM | None":
        """An LLM from ``FABNB_LLM_*`` (or ``OPENAI_*``) variables; None if no endpoint is configured."""
        base = os.environ.get("FABNB_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        key = os.environ.get("FABNB_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        model = os.environ.get("FABNB_LLM_MODEL")
        if not (base or key):
            return None
        if not model:
            raise LLMError("FABNB_LLM_MODEL is not set: name the model the endpoint serves.", "config")
        kwargs.setdefault("schema_style", os.environ.get("FABNB_LLM_SCHEMA_STYLE", "openai"))
        return cls(model, base or "https://api.openai.com/v1", key, **kwargs)

    def __repr__(self) -> str:
        return (f"LLM(model={self.model!r}, base_url={self.base_url!r}, api_key={'set' if self._has_key else 'none'}, "
                f"cache={str(self.cache.path) if self.cache else None!r})")

    def __getstate__(self):
        raise TypeError("an LLM holds a secret and is not picklable; pass its settings instead.")

    def settings(self) -> dict:
        """This client's constructor arguments, without the key: what a worker process needs to build its own.

        >>> LLM("m", "http://127.0.0.1:9/v1", api_key="sk-secret", cache=False).settings()["base_url"]
        'http://127.0.0.1:9/v1'
        """
        return {"model": self.model, "base_url": self.base_url, "cache": str(self.cache.path) if self.cache else False,
                "timeout": self.timeout, "max_retries": self.max_retries, "backoff": self.backoff,
                "concurrency": self.concurrency, "prices": self.prices, "defaults": dict(self.defaults),
                "schema_style": self.schema_style, "transport": self.transport}

    def _secret(self) -> str | None:
        # For a worker process's environment only (fabnb.judge.workers): never a file, an argument or a log.
        return self.__key if self._has_key else None

    def with_defaults(self, **params) -> "LLM":
        """The same endpoint, key, cache and usage log, with extra default sampling parameters.

        >>> LLM("m", "http://127.0.0.1:9/v1", cache=False).with_defaults(seed=2).defaults
        {'seed': 2}
        """
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)  # shares the key (name-mangled), cache, usage and clients
        other.defaults = {**self.defaults, **params}
        return other

    # ------------------------------------------------------------- what a subclass may change
    @property
    def cache_endpoint(self) -> str:
        """The endpoint's name in cache keys: the base URL (:class:`fabnb.models.local.EmbeddedLLM` names its model)."""
        return self.base_url

    @property
    def cache_model(self) -> str:
        """The model's name in cache keys: the name it is served under (the embedded model keeps an older one)."""
        return self.model

    def server_gone(self) -> LLMError | None:
        """After a failed connection: the error to end the call with when the server is known to be gone.

        An endpoint elsewhere is never known to be gone (None: retry as usual); the embedded
        model's client (:class:`fabnb.models.local.EmbeddedLLM`) asks its server process.
        """
        return None

    # ------------------------------------------------------------- internals
    def _sanitize(self, text: str) -> str:
        return text.replace(self.__key, "***") if self._has_key and len(self.__key) > 3 else text

    def _client(self, asynchronous: bool):
        import openai

        # One client per thread and kind: an async client is bound to the loop it was made in.
        loop = asyncio.get_running_loop() if asynchronous else None
        ident = (asynchronous, threading.get_ident(), id(loop) if asynchronous else 0)
        if ident not in self._clients:
            if not asynchronous:
                client = openai.OpenAI(api_key=self.__key, base_url=self.base_url, timeout=self.timeout,
                                       max_retries=0)
            else:
                # aiohttp only on a loop of run()'s, which closes its session when the loop ends; a session left
                # open on a caller's loop would warn "Unclosed client session" (httpx's pool closes itself).
                # The pool holds every call the semaphore lets through: at more than openai's 1,000 connections
                # in flight the calls past it would wait for a connection and time out without being sent.
                aio = openai.DefaultAioHttpClient
                http = (aio(timeout=self.timeout, limits=_pool_limits(aio, self.concurrency))
                        if self.transport == "aiohttp" and _MANAGED.get() == id(loop) else None)
                client = openai.AsyncOpenAI(api_key=self.__key, base_url=self.base_url, timeout=self.timeout,
                                            max_retries=0, http_client=http)
            self._clients[ident] = client
        return self._clients[ident]

    def _prepare(self, messages, params: dict):
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        unknown = set(params) - set(PARAMS) - {"extra_body"}
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; allowed: {list(PARAMS)}")
        merged = {**self.defaults, **params}
        fmt = merged.get("response_format")
        if self.schema_style == "openai" and isinstance(fmt, dict) and fmt.get("type") == "json_object" \
                and "schema" in fmt:
            merged["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "response", "schema": fmt["schema"]}}
        return messages, merged, request_key(self.cache_endpoint, self.cache_model, messages, merged)

    def _cost(self, prompt: int, completion: int) -> float | None:
        if not self.prices:
            return None
        return (prompt * self.prices.get("input", 0) + completion * self.prices.get("output", 0)) / 1e6

    def _body(self, messages, params: dict) -> dict:
        """The request body: the model, the messages and the parameters, ``extra_body`` merged in."""
        extra = params.get("extra_body") or {}
        return {"model": self.model, "messages": messages,
                **{k: v for k, v in params.items() if k != "extra_body"}, **extra}

    def _parse(self, response, key: str, latency: float) -> Completion:
        """The completion in a reply (the parsed JSON, read once); :class:`_BadReply` for any 200 reply that is not one.

        Replies come as plain JSON (``client.post(..., cast_to=object)``): openai's typed request transform and
        response models cost more CPU per call than the rest of a call, and nothing here reads them."""
        if isinstance(response, (str, bytes)):
            # The client returns the raw text when the content type is not JSON (an HTML error page, say).
            text = response.decode(errors="replace") if isinstance(response, bytes) else response
            raise _BadReply(f"the reply is not JSON (it starts {text.strip()[:60]!r})", "bad-body")
        if not isinstance(response, dict):
            raise _BadReply(f"the reply is a JSON {type(response).__name__}, not an object", "bad-response")
        if response.get("error"):
            error = response["error"]
            detail = error.get("message", error) if isinstance(error, dict) else error
            raise _BadReply(f"the reply holds an error object: {str(detail)[:200]}", "error-body")
        choices = response.get("choices")
        if not choices:
            raise _BadReply("the reply has no choices" if choices is None else "the reply's choices are empty",
                            "bad-response")
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise _BadReply("the reply's choices are not a list of objects", "bad-response")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise _BadReply("the reply's first choice has no message", "bad-response")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _BadReply(f"the reply's message content is a {type(content).__name__}, not text", "bad-response")
        logprobs = None
        lp = choice.get("logprobs")
        tokens = lp.get("content") if isinstance(lp, dict) else None
        if isinstance(tokens, list):
            try:
                logprobs = [{"token": t["token"], "logprob": t["logprob"],
                             "top_logprobs": [{"token": a["token"], "logprob": a["logprob"]}
                                              for a in (t.get("top_logprobs") or [])]} for t in tokens]
            except (KeyError, TypeError, AttributeError):
                raise _BadReply("the reply's logprobs are not token objects", "bad-response") from None
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        prompt = usage.get("prompt_tokens") or 0
        completion = usage.get("completion_tokens") or 0
        return Completion(text=content or "", model=response.get("model") or self.model,
                          finish_reason=choice.get("finish_reason"), prompt_tokens=prompt,
                          completion_tokens=completion, logprobs=logprobs, cached=False, latency_s=latency,
                          cost=self._cost(prompt, completion), key=key)

    def _failure(self, exc: BaseException, attempt: int) -> tuple[LLMError, float | None]:
        """The error for a failed attempt, and the delay before the next one (None: do not retry).

        Every way a request can fail comes through here: the transport, the HTTP status, and
        a 200 reply that is not a completion. ``attempt`` counts from 1 and is the true
        number of requests sent so far.
        """
        import openai

        status = getattr(exc, "status_code", None)
        if isinstance(exc, _BadReply):
            cause = exc.cause
        elif isinstance(exc, openai.APITimeoutError):
            cause = "connection" if _reset_not_timeout(exc) else "timeout"
        elif isinstance(exc, openai.APIConnectionError):
            cause = "connection"
        elif isinstance(exc, openai.RateLimitError):
            cause = "rate-limit"
        elif status is not None:
            cause = f"http-{status}"
        elif isinstance(exc, (ValueError, openai.APIResponseValidationError)):
            # json.JSONDecodeError from a body sent as JSON that is not (truncated, HTML).
            cause = "bad-body"
        else:
            raise exc  # a bug of ours, not a server fault: let it surface as it is
        if cause == "connection":
            # A process that died drops its connections: no retry storm against it.
            dead = self.server_gone()
            if dead is not None:
                dead.attempts = attempt
                return dead, None
        text = self._sanitize(str(exc))[:500]
        error = LLMError(f"{self.model} at {self.base_url}: {cause} after {attempt} attempt(s): {text}",
                         cause, status, attempt)
        retryable = cause in ("timeout", "connection", "rate-limit") or (status is not None and status >= 500)
        if not retryable or attempt > self.max_retries:
            return error, None
        delay = min(30.0, self.backoff * 2 ** (attempt - 1)) * (1 + 0.5 * random.random())
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after:
            try:
                delay = max(delay, min(60.0, float(retry_after)))
            except ValueError:
                pass
        log.info("retrying %s in %.1f s after %s", self.model, delay, cause)
        return error, delay

    def _from_cache(self, key: str, validate=None) -> Completion | None:
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        if hit is None:
            return None
        done = Completion(**{**hit, "cached": True, "latency_s": 0.0, "key": key})
        if validate is not None:
            try:
                validate(done)
            except Exception as exc:  # noqa: BLE001 - any refusal: the entry is forgotten and asked again
                # An entry written before validators existed (or under another check): never replayed.
                log.info("cache entry %s refused by its validator (%s); asking again", key[:12], exc)
                self.cache.delete(key)
                return None
        self._record(done)
        return done

    def _accept(self, key: str, messages, params: dict, done: Completion, validate=None) -> Completion:
        """Count the reply, then store it, but only once the caller's validator accepted it."""
        self._record(done)
        if validate is not None:
            validate(done)  # raises the caller's error; the reply is not cached, so a rerun asks again
        self._store(key, messages, params, done)
        return done

    def _store(self, key: str, messages, params: dict, done: Completion) -> None:
        """Keep a reply in the response cache under its request's key (what the next ask of it reads)."""
        if self.cache is not None:
            request = {"base_url": self.base_url, "model": self.model, "messages": messages, "params": params}
            self.cache.put(key, request, {k: v for k, v in asdict(done).items() if k not in ("cached", "key")})

    def _not_captured(self, key: str, messages, params: dict) -> None:
        """In a collecting pass, record the request and end the call (it is sent in a batch instead)."""
        if self.capture is not None:
            self.capture.append((key, self._body(messages, params)))
            raise LLMError(f"{self.model}: collected for a batch, not sent", "captured")

    def openai_client(self):
        """The ``openai.OpenAI`` client of this endpoint (its key inside, never shown): what the batch routes
        (:mod:`fabnb.models.batch`) go through."""
        return self._client(False)

    def store_reply(self, key: str, body: dict, reply: dict) -> Completion:
        """Keep a reply that came by another way than a call (a batch's output line) in the response cache under the
        request's ``key``, as a call would have: the next :meth:`complete` of that request reads it.

        Raises :class:`LLMError` (``bad-response``, ``bad-body``, ``error-body``) for a reply that is no chat
        completion; nothing is kept then.
        """
        try:
            done = replace(self._parse(reply, key, 0.0), batch=True)
        except _BadReply as exc:
            raise LLMError(f"{self.model}: a batch reply for {key[:12]} is not a completion: {exc}", exc.cause) \
                from None
        messages = body.get("messages", [])
        params = {k: v for k, v in body.items() if k not in ("model", "messages")}
        self._store(key, messages, params, done)
        return done

    def _record(self, done: Completion) -> None:
        self._usage.add(model=done.model, cached=done.cached, prompt_tokens=done.prompt_tokens,
                        completion_tokens=done.completion_tokens, latency_s=done.latency_s, cost=done.cost)

    # ---------------------------------------------------------------- calls
    def complete(self, messages, validate=None, **params) -> Completion:
        """One chat completion (sync), from the cache when the same request was answered before.

        Parameters
        ----------
        messages : str or list of dict
            A user prompt, or OpenAI chat messages.
        validate : callable, optional
            ``validate(completion)`` raises when the caller cannot use the reply (an empty
            answer, judge output that is not JSON). A refused reply is not cached, so a rerun
            asks again; a cached reply it refuses is dropped and asked again.
        **params
            Any of :data:`PARAMS`, and ``extra_body`` for server-specific fields.

        Raises
        ------
        LLMError
            After the retries, naming the cause (one of :data:`fabnb.core.errors.CAUSES`) and the
            true number of attempts, and never the key.
        """
        messages, params, key = self._prepare(messages, params)
        hit = self._from_cache(key, validate)
        if hit is not None:
            return hit
        self._not_captured(key, messages, params)
        attempt = 0
        while True:
            attempt += 1
            start = time.perf_counter()
            try:
                response = self._client(False).post("/chat/completions", body=self._body(messages, params),
                                                    cast_to=object)
                done = self._parse(response, key, time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - classified by _failure, which re-raises our own bugs
                error, delay = self._failure(exc, attempt)
            else:
                return self._accept(key, messages, params, done, validate)
            if delay is None:
                raise error  # outside the except block: no __context__ holding the client's exception
            time.sleep(delay)

    async def acomplete(self, messages, semaphore: asyncio.Semaphore | None = None, validate=None,
                        **params) -> Completion:
        """:meth:`complete`, asynchronously; ``semaphore`` bounds how many run at once."""
        messages, params, key = self._prepare(messages, params)
        hit = self._from_cache(key, validate)
        if hit is not None:
            return hit
        self._not_captured(key, messages, params)
        semaphore = semaphore or asyncio.Semaphore(self.concurrency)
        attempt = 0
        while True:
            attempt += 1
            async with semaphore:
                start = time.perf_counter()
                try:
                    response = await self._client(True).post("/chat/completions",
                                                             body=self._body(messages, params), cast_to=object)
                    done = self._parse(response, key, time.perf_counter() - start)
                except Exception as exc:  # noqa: BLE001
                    error, delay = self._failure(exc, attempt)
                else:
                    return self._accept(key, messages, params, done, validate)
            if delay is None:
                raise error
            await asyncio.sleep(delay)

    def map(self, requests, error_policy: str = "raise", progress: bool | str = False) -> list:
        """Run many calls at once, at most :attr:`concurrency` in flight, results in input order.

        Parameters
        ----------
        requests : iterable
            Each a prompt string, a message list, or a dict ``{"messages": ..., **params}``.
        error_policy : {"raise", "record"}
            ``"raise"`` re-raises the first failure after the batch settles;
            ``"record"`` returns a :class:`Failure` in that call's place.
        progress : bool or str
            Show a progress bar (a string is its label).

        Notes
        -----
        Works inside Jupyter: the batch runs on its own event loop in a worker thread.
        """
        if error_policy not in ("raise", "record"):
            raise ValueError(f"error_policy must be 'raise' or 'record', not {error_policy!r}")
        items = [r if isinstance(r, dict) else {"messages": r} for r in requests]

        async def run():
            semaphore = asyncio.Semaphore(self.concurrency)
            bar = None
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(items), desc=progress if isinstance(progress, str) else self.model)

            async def one(item):
                item = dict(item)
                messages = item.pop("messages")
                try:
                    return await self.acomplete(messages, semaphore, **item)
                except CausedError as exc:  # LLMError, or a validator's own error
                    return Failure(str(exc), exc.cause, getattr(exc, "status", None),
                                   attempts=getattr(exc, "attempts", None))
                finally:
                    if bar is not None:
                        bar.update(1)

            try:
                return await asyncio.gather(*(one(i) for i in items))
            finally:
                if bar is not None:
                    bar.close()

        if progress:  # the loop's thread draws the bar, which a tqdm lock a stop left held would hang
            from ..core.bars import release_bar_lock
            release_bar_lock()
        results = self.run(run)
        if error_policy == "raise":
            for r in results:
                if isinstance(r, Failure):
                    raise LLMError(r.error, r.cause, r.status, r.attempts)
        return results

    def run(self, coro_factory):
        """Run ``coro_factory()`` on an event loop of its own in a worker thread, and return its result.

        Works inside Jupyter (whose loop is already running). The async client made for
        that loop is closed when it ends, here rather than at garbage collection.
        """

        async def main():
            _MANAGED.set(id(asyncio.get_running_loop()))
            try:
                return await coro_factory()
            finally:
                client = self._clients.pop((True, threading.get_ident(), id(asyncio.get_running_loop())), None)
                if client is not None:
                    await client.close()

        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, main()).result()

    @property
    def usage(self):
        """Per-call usage as a DataFrame: model, cached, prompt_tokens, completion_tokens, latency_s, cost."""
        import pandas as pd

        with self._usage.lock:
            return pd.DataFrame(list(self._usage.records),
                                columns=["model", "cached", "prompt_tokens", "completion_tokens", "latency_s", "cost"])

    def usage_summary(self) -> dict:
        """Totals: calls, requests (not cached), cached, prompt and completion tokens, cost."""
        u = self.usage
        return {"calls": len(u), "requests": int((~u["cached"]).sum()) if len(u) else 0,
                "cached": int(u["cached"].sum()) if len(u) else 0,
                "prompt_tokens": int(u["prompt_tokens"].sum()), "completion_tokens": int(u["completion_tokens"].sum()),
                "cost": float(u["cost"].sum()) if self.prices else None}


def parse_json(text: str) -> dict | list:
    """The JSON object in a model's answer: bare, fenced in Markdown, or the first ``{...}`` span.


    Raises
    ------
    ValueError
        When there is no parsable JSON object, saying what was found.
    """
    candidates = [text.strip()]
    if "```" in text:
        for block in text.split("```")[1::2]:
            candidates.append(block.split("\n", 1)[1] if block.lstrip().startswith(("json", "JSON")) else block)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for c in candidates:
        try:
            # strict=False: a raw newline inside a string (grammar-constrained servers emit them) is kept, not fatal.
            return json.loads(c, strict=False)
        except (json.JSONDecodeError, ValueError):
            continue
    snippet = text.strip().replace("\n", " ")[:80]
    raise ValueError(f"no JSON object in the answer (starts {snippet!r})")
