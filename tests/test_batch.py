"""Batch mode (fabnb.models.batch) against a scripted server with the Files and Batches routes, driven through the
``openai`` package's own clients."""

from __future__ import annotations

import json

import openai
import pytest
from stub_batches import BatchServer, echo_reply

from fabnb.models.batch import (
    LEDGER,
    BatchError,
    BatchLedger,
    captured,
    export_requests,
    file_hash,
    import_replies,
    request_lines,
    run_batches,
    split_files,
)
from fabnb.models.llm import LLM, LLMError

from stub_openai import StubServer, completion


def _collect(llm, prompts, **params):
    """The requests a stage of these prompts would send (each ends 'captured')."""
    with captured(llm) as got:
        for p in prompts:
            with pytest.raises(LLMError, match="collected for a batch"):
                llm.complete(p, **params)
    return [(key, body) for _, key, body in got]


def test_the_scripted_server_speaks_the_openai_packages_files_and_batches(tmp_path):
    with BatchServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-x", max_retries=0)
        line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
        f = client.files.create(file=("in.jsonl", (json.dumps(line) + "\n").encode()), purpose="batch")
        assert isinstance(f, openai.types.FileObject) and f.purpose == "batch" and f.bytes > 0
        b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  metadata={"k": "v"})
        assert isinstance(b, openai.types.Batch) and b.metadata == {"k": "v"}
        while (b := client.batches.retrieve(b.id)).status != "completed":
            pass
        assert b.request_counts.completed == 1 and b.output_file_id and not b.error_file_id
        out = json.loads(client.files.content(b.output_file_id).text)
        assert out["custom_id"] == "a" and out["response"]["status_code"] == 200
        assert out["response"]["body"]["choices"][0]["message"]["content"] == "echo: hi"
        assert [x.id for x in client.batches.list(limit=1)] == [b.id]


def test_a_judge_stage_of_960_calls_in_batch_mode_stores_what_the_online_path_would(tmp_path):
    prompts = [f"Judge answer {i}: is it grounded? Reply with JSON." for i in range(960)]
    params = {"max_tokens": 40, "temperature": 0.0, "logprobs": True, "top_logprobs": 5}
    with BatchServer() as server:
        llm = LLM("judge", server.base_url, cache=tmp_path / "cache.sqlite", max_retries=0)
        requests = _collect(llm, prompts, **params)
        assert len(requests) == 960 and server.online == []  # collected, nothing sent
        run = run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, echo=lambda *a: None,
                          max_lines=400)
        assert (run.requests, run.stored, run.left, len(run.submitted)) == (960, 960, [], 3)  # 400 + 400 + 160
        assert server.created == 3 and server.online == []
        batched = [llm.complete(p, **params) for p in prompts]
        assert server.online == [] and all(c.cached for c in batched)  # the online rerun asks nothing
        # The same requests online, against a fresh cache: the same texts, tokens and logprob fields.
        online = LLM("judge", server.base_url, cache=False, max_retries=0)
        for p, b in zip(prompts[:20], batched):
            o = online.complete(p, **params)
            assert (o.text, o.prompt_tokens, o.completion_tokens) == (b.text, b.prompt_tokens, b.completion_tokens)
        body = server.batches[server.order[0]]["_lines"][0]["body"]
        assert body["logprobs"] is True and body["top_logprobs"] == 5  # asked as online
    ledger = json.loads((tmp_path / LEDGER).read_text())["batches"]
    assert len(ledger) == 3 and {e["status"] for e in ledger.values()} == {"completed"}


def test_killed_after_submit_and_before_record_the_rerun_finds_the_batch(tmp_path, monkeypatch):
    prompts = [f"q{i}" for i in range(30)]
    with BatchServer() as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        requests = _collect(llm, prompts)
        # 200 other batches first: the listing pages (100 a page here) before it reaches ours.
        client = openai.OpenAI(base_url=server.base_url, api_key="x")
        dummy = client.files.create(file=("d.jsonl", b""), purpose="batch")
        for _ in range(150):
            client.batches.create(input_file_id=dummy.id, endpoint="/v1/chat/completions", completion_window="24h")

        def die(self):
            raise KeyboardInterrupt("killed between create and record")

        monkeypatch.setattr(BatchLedger, "save", die)
        with pytest.raises(KeyboardInterrupt):
            run_batches(llm, requests, tmp_path, stage="answers", poll_s=0.01, echo=lambda *a: None)
        monkeypatch.undo()
        assert server.created == 151 and not (tmp_path / LEDGER).exists()
        for _ in range(60):  # newer batches after ours: it is not on the listing's first page
            client.batches.create(input_file_id=dummy.id, endpoint="/v1/chat/completions", completion_window="24h")
        said = []
        run = run_batches(llm, requests, tmp_path, stage="answers", poll_s=0.01, echo=said.append)
        assert server.created == 211 and run.submitted == [] and len(run.adopted) == 1  # nothing submitted twice
        assert run.stored == 30 and any("found by its input's hash" in s for s in said)
        assert server.list_calls >= 3  # it paged


def test_killed_while_polling_the_rerun_polls_and_submits_nothing(tmp_path):
    with BatchServer(line_delay=0.001) as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        requests = _collect(llm, [f"q{i}" for i in range(20)])
        server.hold.set()
        seen = []

        def killed(batch_id, status, completed, total):
            seen.append(status)
            if status == "in_progress":
                raise KeyboardInterrupt("killed while polling")

        with pytest.raises(KeyboardInterrupt):
            run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, echo=lambda *a: None, progress=killed)
        entry = next(iter(json.loads((tmp_path / LEDGER).read_text())["batches"].values()))
        assert entry["status"] in ("validating", "in_progress") and server.created == 1
        server.hold.clear()
        run = run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, echo=lambda *a: None)
        assert server.created == 1 and run.adopted == [entry["batch_id"]] and run.stored == 20


def test_an_expired_batch_keeps_what_it_did_and_only_the_rest_is_resubmitted(tmp_path):
    with BatchServer() as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        requests = _collect(llm, [f"q{i}" for i in range(40)])
        server.expire_after = 20
        run = run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, echo=lambda *a: None)
        first, second = (server.batches[i] for i in server.order)
        assert first["status"] == "expired" and first["request_counts"]["completed"] == 20
        assert second["request_counts"]["total"] == 20  # only the rest
        done_first = {line["custom_id"] for line in first["_lines"][:20]}
        assert not done_first & {line["custom_id"] for line in second["_lines"]}
        assert run.stored == 40 and run.left == [] and run.failed == {}


def test_a_batch_the_budget_cannot_pay_for_is_cancelled_and_what_it_completed_is_kept(tmp_path):
    with BatchServer() as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        requests = _collect(llm, [f"q{i}" for i in range(20)])
        server.hold_after = 5

        def killed(batch_id, status, completed, total):
            if completed >= 5:
                raise KeyboardInterrupt("stopped while polling")

        with pytest.raises(KeyboardInterrupt):
            run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, echo=lambda *a: None, progress=killed)
        said = []
        run = run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, echo=said.append, submit=False)
        first = server.batches[server.order[0]]
        assert server.created == 1 and first["status"] == "cancelled" and any("cancelled" in s for s in said)
        assert run.stored == 5 and len(run.left) == 15  # the 5 it completed (billed) are kept; the rest go online
        others = _collect(llm, [f"other {i}" for i in range(3)])
        nothing = run_batches(llm, others, tmp_path, stage="judge", poll_s=0.01, echo=lambda *a: None, submit=False)
        assert server.created == 1 and nothing.stored == 0 and len(nothing.left) == 3  # not submitted


def test_with_retry_online_what_a_batch_left_is_asked_online(tmp_path):
    with BatchServer() as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        prompts = [f"q{i}" for i in range(10)]
        requests = _collect(llm, prompts)
        server.expire_after = 6
        run = run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, retry="online", echo=lambda *a: None)
        assert server.created == 1 and run.stored == 6 and len(run.left) == 4
        assert all("batch_expired" in why for why in run.failed.values()) and len(run.failed) == 4
        for p in prompts:
            llm.complete(p)
        assert len(server.online) == 4  # only what the batch left


def test_failed_lines_are_named_and_bad_replies_are_not_cached(tmp_path):
    def picky(body, n):
        text = body["messages"][-1]["content"]
        if text == "q1":
            return 400, {"error": {"message": "bad request", "code": "invalid"}}, {}
        if text == "q2":
            return 200, {"choices": []}, {}
        return echo_reply(body, n)

    with BatchServer(picky) as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        requests = _collect(llm, ["q0", "q1", "q2"])
        run = run_batches(llm, requests, tmp_path, stage="judge", poll_s=0.01, retry="online", echo=lambda *a: None)
        assert run.stored == 1 and len(run.failed) == 2 and len(run.left) == 2
        assert any("invalid" in why for why in run.failed.values())
        assert any("choices are empty" in why for why in run.failed.values())


def test_a_provider_without_batch_routes_is_named_before_any_cell_is_sent(tmp_path):
    def chat_only(body, n):
        if "messages" not in body:
            return 404, {"error": {"message": "Not Found"}}, {}
        return 200, completion("x"), {}

    with StubServer(chat_only) as server:
        llm = LLM("m", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        requests = _collect(llm, ["q0"])
        with pytest.raises(BatchError, match=r'\[judge\] mode = "batch" needs a provider') as err:
            run_batches(llm, requests, tmp_path, stage="judge", echo=lambda *a: None, setting="[judge] mode")
        assert err.value.cause == "config"
        assert [p for p in server.paths if "chat" in p] == [] and not (tmp_path / LEDGER).exists()


def test_files_split_at_the_providers_limits_and_hash_the_same_for_the_same_requests():
    lines = request_lines([(f"k{i:03d}", {"model": "m", "messages": [{"role": "user", "content": "x" * 100}]})
                           for i in range(10)])
    by_lines = split_files(lines, max_lines=4)
    assert [f.count(b"\n") for f in by_lines] == [4, 4, 2]
    one = len(by_lines[0]) // 4
    by_bytes = split_files(lines, max_bytes=3 * one)
    assert all(len(f) <= 3 * one for f in by_bytes) and sum(f.count(b"\n") for f in by_bytes) == 10
    again = request_lines(reversed([(line["custom_id"], line["body"]) for line in lines]))
    assert [file_hash(f) for f in split_files(again, max_lines=4)] == [file_hash(f) for f in by_lines]
    with pytest.raises(BatchError, match="over a batch file's"):
        split_files(lines, max_bytes=10)


def test_export_for_run_batch_and_import_a_hand_written_output_file(tmp_path):
    with StubServer() as server:
        llm = LLM("served-name", server.base_url, cache=tmp_path / "c.sqlite", max_retries=0)
        prompts = ["What is CMP?", "What is ALD?"]
        requests = _collect(llm, prompts, max_tokens=16)
        n = export_requests(requests, tmp_path / "requests.jsonl")
        written = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
        assert n == 2 and {w["url"] for w in written} == {"/v1/chat/completions"}
        assert written[0]["body"]["model"] == "served-name" and written[0]["body"]["max_tokens"] == 16
        # What vLLM's run_batch writes: one object per line, the chat completion under response.body.
        out = tmp_path / "results.jsonl"
        out.write_text("".join(json.dumps({
            "id": f"vllm-{i}", "custom_id": w["custom_id"], "error": None,
            "response": {"status_code": 200, "request_id": f"vllm-batch-{i}",
                         "body": completion(f"answer {i}", model="served-name")}}) + "\n"
            for i, w in enumerate(written)) + json.dumps({"id": "x", "custom_id": "someone-elses", "error": None,
                                                          "response": {"status_code": 200, "body": {}}}) + "\n")
        run = import_replies(llm, requests, out)
        assert run.stored == 2 and list(run.failed) == ["someone-elses"] and run.left == []
        texts = [llm.complete(p, max_tokens=16).text for p in prompts]
        assert server.requests == [] and sorted(texts) == ["answer 0", "answer 1"]  # an online rerun asks nothing
        (tmp_path / "broken.jsonl").write_text('{"custom_id": 1}\nnot json\n')
        with pytest.raises(BatchError, match=r"broken.jsonl: line 2 is not JSON"):
            import_replies(llm, requests, tmp_path / "broken.jsonl")
