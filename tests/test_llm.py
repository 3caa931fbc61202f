"""The LLM client against a scripted loopback server: cache, retries, concurrency, secrets."""

import json
import logging
import pickle
import sqlite3
import time

import pytest

from fabnb.models.llm import LLM, Failure, LLMError, ResponseCache, parse_json, request_key

from stub_openai import StubServer, completion, echo

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def cache(tmp_path):
    return ResponseCache(tmp_path / "llm.sqlite")


def test_identical_rerun_makes_no_request(cache):
    with StubServer() as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache)
        a = llm.complete("hello", temperature=0.3)
        b = llm.complete("hello", temperature=0.3)
        c = llm.complete("hello", temperature=0.4)  # another parameter: another call
        assert len(s.requests) == 2
    assert a.text == b.text == "echo: hello" and not a.cached and b.cached and not c.cached
    assert llm.usage_summary()["requests"] == 2 and llm.usage_summary()["cached"] == 1


@pytest.mark.parametrize("damage", ["random bytes", "an older schema"])
def test_an_unreadable_cache_is_moved_aside_with_a_warning_and_never_blocks_a_run(tmp_path, damage):
    """Once: every rerun died with sqlite3.DatabaseError ("file is not a database"), naming no file."""
    import os

    from fabnb.models.llm import CacheWarning

    path = tmp_path / "llm.sqlite"
    with StubServer() as s:
        LLM("m", s.base_url, SECRET, cache=ResponseCache(path)).complete("hello")
        if damage == "random bytes":
            for suffix in ("-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
            path.write_bytes(os.urandom(64 * 1024))
        else:
            db = sqlite3.connect(path)
            db.executescript("DROP TABLE responses; CREATE TABLE responses (key TEXT PRIMARY KEY, value TEXT);")
            db.close()
        with pytest.warns(CacheWarning, match=rf"the response cache {path} could not be read .* moved to {path}"
                                              r"\.unreadable-\d{8}T\d{6}"):
            cache = ResponseCache(path)
        assert LLM("m", s.base_url, SECRET, cache=cache).complete("hello").text == "echo: hello"
    aside = list(tmp_path.glob("llm.sqlite.unreadable-*"))
    assert aside and all(p.stat().st_size for p in aside if p.name.endswith(aside[0].name[-15:]))  # kept, not deleted
    assert len(ResponseCache(path)) == 1  # the fresh cache works and is kept


def test_a_locked_cache_is_not_taken_for_a_corrupt_one(tmp_path):
    path = tmp_path / "llm.sqlite"
    first = ResponseCache(path)
    first.put("k", {"a": 1}, {"b": 2})
    first.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")  # a live process of an older fabnb, in the middle of a write
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            ResponseCache(path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not list(tmp_path.glob("*.unreadable-*")) and ResponseCache(path).get("k") == {"b": 2}


def test_key_covers_base_url_model_messages_and_every_parameter():
    base = request_key("http://a/v1", "m", [{"role": "user", "content": "x"}], {"temperature": 0.5})
    assert base != request_key("http://b/v1", "m", [{"role": "user", "content": "x"}], {"temperature": 0.5})
    assert base != request_key("http://a/v1", "n", [{"role": "user", "content": "x"}], {"temperature": 0.5})
    assert base != request_key("http://a/v1", "m", [{"role": "user", "content": "y"}], {"temperature": 0.5})
    assert base != request_key("http://a/v1", "m", [{"role": "user", "content": "x"}], {"temperature": 0.5, "seed": 1})
    same = request_key("http://a/v1/", "m", [{"role": "user", "content": "x"}], {"temperature": 0.5, "stop": None})
    assert base == same


def test_retries_on_429_and_5xx_then_succeeds(cache):
    def flaky(request, n):
        if n == 1:
            return 429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}
        if n == 2:
            return 503, {"error": {"message": "busy"}}, {}
        return echo(request, n)

    with StubServer(flaky) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, backoff=0.01)
        assert llm.complete("hi").text == "echo: hi"
        assert len(s.requests) == 3


def test_client_errors_are_not_retried_and_name_the_cause(cache):
    with StubServer(lambda r, n: (400, {"error": {"message": "bad request"}}, {})) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, backoff=0.01)
        with pytest.raises(LLMError) as info:
            llm.complete("hi")
        assert len(s.requests) == 1
    assert info.value.cause == "http-400" and "bad request" in str(info.value)


def test_timeout_is_retried_then_reported(cache):
    with StubServer(delay=0.5) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, timeout=0.1, max_retries=2, backoff=0.01)
        with pytest.raises(LLMError, match="timeout after 3 attempt"):
            llm.complete("slow")


def test_secret_never_leaks(cache, caplog):
    caplog.set_level(logging.DEBUG)
    with StubServer(lambda r, n: (500, {"error": {"message": f"echoing your key {SECRET}"}}, {})) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, max_retries=1, backoff=0.01)
        with pytest.raises(LLMError) as info:
            llm.complete("hi")
        assert s.headers[0]["authorization"] == f"Bearer {SECRET}"  # it was sent to the server ...
    assert SECRET not in str(info.value) and "***" in str(info.value)  # ... and nowhere else
    assert SECRET not in repr(llm) and SECRET not in caplog.text
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(llm)
    with StubServer() as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache)
        llm.complete("stored")
    raw = sqlite3.connect(cache.path).execute("SELECT request, response FROM responses").fetchall()
    assert raw and SECRET not in json.dumps(raw)


def test_map_bounds_concurrency_and_keeps_order(cache):
    with StubServer(delay=0.2) as s:
        llm = LLM("m", s.base_url, cache=cache, concurrency=4)
        start = time.perf_counter()
        out = llm.map([f"q{i}" for i in range(8)])
        elapsed = time.perf_counter() - start
    assert [c.text for c in out] == [f"echo: q{i}" for i in range(8)]
    assert elapsed >= 0.39  # 8 calls, 4 at a time, 0.2 s each: at least two rounds


def test_map_error_policy(cache):
    def half(request, n):
        if "bad" in request["messages"][-1]["content"]:
            return 400, {"error": {"message": "nope"}}, {}
        return echo(request, n)

    with StubServer(half) as s:
        llm = LLM("m", s.base_url, cache=cache)
        out = llm.map(["ok", "bad", "ok2"], error_policy="record")
        assert isinstance(out[1], Failure) and out[1].cause == "http-400" and out[2].text == "echo: ok2"
        with pytest.raises(LLMError, match="nope"):
            llm.map(["bad"])


def test_logprobs_and_cost_pass_through(cache):
    lp = [{"token": "7", "logprob": -0.1, "top_logprobs": [{"token": "7", "logprob": -0.1},
                                                          {"token": "8", "logprob": -2.4}]}]
    reply = completion("7", logprobs=lp, prompt_tokens=1000, completion_tokens=500)
    with StubServer(lambda r, n: (200, reply, {})) as s:
        llm = LLM("m", s.base_url, cache=cache, prices={"input": 2.0, "output": 8.0})
        done = llm.complete("score?", logprobs=True, top_logprobs=2)
        assert s.requests[0]["logprobs"] is True and s.requests[0]["top_logprobs"] == 2
    assert done.logprobs[0]["top_logprobs"][1] == {"token": "8", "logprob": -2.4}
    assert done.cost == pytest.approx((1000 * 2 + 500 * 8) / 1e6)
    again = llm.complete("score?", logprobs=True, top_logprobs=2)
    assert again.cached and again.logprobs == done.logprobs


def test_unknown_parameter_is_refused():
    llm = LLM("m", "http://127.0.0.1:9/v1", cache=False)
    with pytest.raises(ValueError, match="unknown parameter"):
        llm.complete("x", temprature=0.1)


def test_from_env(monkeypatch):
    for v in ("FABNB_LLM_BASE_URL", "FABNB_LLM_API_KEY", "FABNB_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(v, raising=False)
    assert LLM.from_env(cache=False) is None
    monkeypatch.setenv("FABNB_LLM_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(LLMError, match="FABNB_LLM_MODEL is not set"):
        LLM.from_env(cache=False)
    monkeypatch.setenv("FABNB_LLM_MODEL", "x")
    monkeypatch.setenv("FABNB_LLM_API_KEY", SECRET)
    llm = LLM.from_env(cache=False)
    assert llm.model == "x" and SECRET not in repr(llm)


@pytest.mark.parametrize("text,expected", [
    ('{"a": 1}', {"a": 1}),
    ('Sure!\n```json\n{"a": 2}\n```', {"a": 2}),
    ('prefix {"a": 3} suffix', {"a": 3}),
])
def test_parse_json(text, expected):
    assert parse_json(text) == expected


def test_parse_json_says_what_it_found():
    with pytest.raises(ValueError, match="no JSON object in the answer \\(starts 'I cannot do"):
        parse_json("I cannot do that.")


def test_schema_travels_in_the_servers_dialect():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    with StubServer() as s:
        LLM("m", s.base_url, cache=False).complete("x", response_format={"type": "json_object", "schema": schema})
        LLM("m", s.base_url, cache=False, schema_style="llama.cpp").complete(
            "x", response_format={"type": "json_object", "schema": schema})
    openai_style = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    assert s.requests[0]["response_format"] == openai_style
    assert s.requests[1]["response_format"] == {"type": "json_object", "schema": schema}
    with pytest.raises(ValueError, match="schema_style"):
        LLM("m", "http://127.0.0.1:9/v1", cache=False, schema_style="anthropic")


def test_attempt_counts_are_true(cache):
    """A 401 is not retried: one request, and the message says one attempt (it said max_retries + 1)."""
    with StubServer(lambda r, n: (401, {"error": {"message": "bad key"}}, {})) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, max_retries=3, backoff=0.01)
        with pytest.raises(LLMError) as info:
            llm.complete("hi")
        assert len(s.requests) == 1
    assert info.value.attempts == 1 and "http-401 after 1 attempt(s)" in str(info.value)


@pytest.mark.parametrize("status,body,headers,cause", [
    (200, {"id": "x"}, {}, "bad-response"),
    (200, "<html><body>oops</body></html>", {"Content-Type": "text/html"}, "bad-body"),
    (200, "<html><body>oops</body></html>", {}, "bad-body"),
    (200, {"error": {"message": "overloaded"}}, {}, "error-body"),
])
def test_malformed_replies_are_recorded_by_map_never_raised_raw(cache, status, body, headers, cause):
    """These escaped as TypeError / AttributeError / JSONDecodeError and crashed the whole batch."""
    def reply(request, n):
        if "bad" in request["messages"][-1]["content"]:
            return status, body, headers
        return echo(request, n)

    with StubServer(reply) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, backoff=0.01)
        out = llm.map(["good", "bad", "good too"], error_policy="record")
        assert isinstance(out[1], Failure) and out[1].cause == cause and out[1].attempts == 1
        assert out[0].text == "echo: good" and out[2].text == "echo: good too"
        with pytest.raises(LLMError) as info:
            llm.map(["bad"], error_policy="raise")
        assert info.value.cause == cause
        assert len(cache) == 2  # only the two good replies were stored


def _chain(exc):
    """Every exception reachable from ``exc`` through __cause__ and __context__."""
    seen, todo = [], [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


@pytest.mark.parametrize("status", [401, 503])
def test_no_secret_anywhere_in_the_error_chain(cache, status):
    """The server echoes the key back; nothing reachable from the LLMError holds it."""
    import traceback

    def reply(request, n):
        return status, {"error": {"message": f"invalid key {SECRET} for this org"}}, {}

    with StubServer(reply) as s:
        llm = LLM("m", s.base_url, SECRET, cache=cache, max_retries=1, backoff=0.01)
        try:
            llm.complete("hi")
        except LLMError as exc:
            error = exc
    chain = _chain(error)
    assert len(chain) == 1, f"the client's exception is attached: {[type(e).__name__ for e in chain]}"
    texts = [str(error), repr(error), *map(str, error.args),
             "".join(traceback.format_exception(type(error), error, error.__traceback__))]
    for text in texts:
        assert SECRET not in text
    assert "***" in str(error)


# ------------------------------------------------------------------ the transport at high concurrency (issue 29)


def test_async_calls_go_over_aiohttp_with_a_pool_for_every_call_in_flight_and_close_their_session():
    import asyncio
    import gc
    import warnings

    with StubServer() as server:
        llm = LLM("stub", server.base_url, cache=False, concurrency=1100)

        async def transport():
            await llm.acomplete("hello")
            http = llm._client(True)._client
            return type(http).__name__, http._transport.limits.max_connections

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            name, pool = llm.run(transport)
            assert not llm._clients  # run() closed the client of its loop
            gc.collect()
        # openai 3 names it _InstalledAioHttpClient (over httpx2), openai 2 _DefaultAioHttpClient (httpx-aiohttp).
        assert name in ("_InstalledAioHttpClient", "_DefaultAioHttpClient") and pool >= 1100
        assert not [w for w in caught if "nclosed" in str(w.message)], [str(w.message) for w in caught]
        # A loop of the caller's own: fabnb cannot close a session there, so it uses httpx, whose pool needs no
        # close (aiohttp would warn "Unclosed client session").
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert asyncio.run(llm.acomplete("again")).text.startswith("echo")
            llm = None  # its clients go with it
            gc.collect()
        assert not [w for w in caught if "client session" in str(w.message) or "connector" in str(w.message)]
        plain = LLM("stub", server.base_url, cache=False, transport="httpx", concurrency=4)
        assert plain.run(lambda: _client_name(plain)) == "AsyncHttpxClientWrapper"
        assert plain.complete("sync").text.startswith("echo")  # sync calls: httpx
    with pytest.raises(ValueError, match="transport must be"):
        LLM("m", "http://127.0.0.1:9/v1", cache=False, transport="curl")


async def _client_name(llm):
    await llm.acomplete("hello")
    return type(llm._client(True)._client).__name__


def test_a_server_that_never_answers_at_256_in_flight_times_out_every_call_on_time():
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])  # accepted, never read, never answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        llm = LLM("stub", f"http://127.0.0.1:{listener.getsockname()[1]}/v1", cache=False, timeout=1.0,
                  max_retries=0, concurrency=256)
        start = time.perf_counter()
        out = llm.map([f"q{i}" for i in range(512)], error_policy="record")
        seconds = time.perf_counter() - start
    finally:
        listener.close()
        for s in held:
            s.close()
    assert all(isinstance(r, Failure) and r.cause == "timeout" and r.attempts == 1 for r in out)
    assert seconds < 30, seconds  # two rounds of 1 s timeouts; a call that hung would hold this for 120 s


def test_a_server_that_closes_every_connection_after_its_reply_fails_no_call_it_answered(tmp_path):
    """No "Connection: close" header: the client learns of each close only when it reuses the connection."""
    served = set()  # the prompts whose whole reply was written

    def closing(request, n):
        def write(handler):
            data = json.dumps(completion("fine")).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
            served.add(request["messages"][-1]["content"])
            handler.close_connection = True
        return 200, write, {}

    with StubServer(closing) as server:
        llm = LLM("stub", server.base_url, cache=ResponseCache(tmp_path / "c.sqlite"), max_retries=1,
                  backoff=0.01, concurrency=32)
        prompts = [f"q{i}" for i in range(300)]
        first = llm.map(prompts, error_policy="record")
        failed = [r for r in first if isinstance(r, Failure)]
        assert all(r.cause == "connection" for r in failed), [r.error for r in failed]  # never a crash
        unanswered = {p for p, r in zip(prompts, first) if isinstance(r, Failure)}
        assert set(prompts) - unanswered <= served
        assert not served & unanswered  # no failed call was one it answered
        # Each failed call met a closed connection twice in a row; how often depends on the machine's load (0-3
        # idle, 4-8 seen with the suite on both cores), so the bound is loose: most calls get through.
        assert len(failed) <= 15
        before = len(server.requests)
        again = llm.map(prompts, error_policy="record")
        assert len(server.requests) - before <= len(failed)  # a rerun asks only what failed
        assert not any(isinstance(r, Failure) for r in again)


def test_a_connection_closed_as_the_request_went_out_is_a_connection_failure_not_a_timeout():
    """httpx-aiohttp reports aiohttp's "Can not write request body" (a kept-alive connection the server closed)
    as httpx.ConnectTimeout, so openai says APITimeoutError; it took no time and is a connection fault. Seen in
    the closing-server test above about once in 4,000 calls, which then failed CI."""
    import aiohttp
    import httpx
    import openai

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    def chain(*links):
        for outer, inner in zip(links, links[1:]):
            outer.__cause__ = inner
        return links[0]

    llm = LLM("stub", "http://127.0.0.1:9/v1", cache=None, max_retries=0)
    reset = chain(openai.APITimeoutError(request), httpx.ConnectTimeout("Can not write request body"),
                  aiohttp.ClientOSError(None, "Can not write request body"),
                  aiohttp.ClientConnectionResetError("Cannot write to closing transport"))
    assert llm._failure(reset, 1)[0].cause == "connection"
    dropped = chain(openai.APITimeoutError(request), httpx.ConnectTimeout("Server disconnected"),
                    aiohttp.ServerDisconnectedError("Server disconnected"))  # seen under load, once in 2,400 calls
    assert llm._failure(dropped, 1)[0].cause == "connection"
    waited = chain(openai.APITimeoutError(request), httpx.ReadTimeout("timed out"), TimeoutError("timed out"))
    assert llm._failure(waited, 1)[0].cause == "timeout"
    server_timeout = chain(openai.APITimeoutError(request), httpx.ReadTimeout("t"), aiohttp.ServerTimeoutError("t"))
    assert llm._failure(server_timeout, 1)[0].cause == "timeout"
