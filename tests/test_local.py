"""Integration: the embedded llama.cpp server on loopback, with the real Gemma 3 270M model."""

import json
import math

import pytest

from fabnb.generation import GenerationConfig, generate_qa, quoted_share
from fabnb.llm import LLMError, ResponseCache
from fabnb.local import LocalServer

from gen_helpers import small_contexts


@pytest.fixture(scope="module")
def server():
    """Started with logits_all, which logprobs need; every call on it is several times slower."""
    with LocalServer(n_ctx=4096, logits_all=True) as s:
        yield s


@pytest.fixture(scope="module")
def fast_server():
    with LocalServer(n_ctx=4096) as s:
        yield s


def test_server_answers_with_usage_and_logprobs(server, tmp_path):
    llm = server.llm(cache=ResponseCache(tmp_path / "c.sqlite"))
    done = llm.complete("The capital of France is", max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    assert done.text and done.prompt_tokens > 0 and 0 < done.completion_tokens <= 8
    first = done.logprobs[0]
    assert len(first["top_logprobs"]) == 3 and first["logprob"] <= 0
    assert math.isclose(first["logprob"], max(t["logprob"] for t in first["top_logprobs"]), abs_tol=1e-3)
    again = llm.complete("The capital of France is", max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    assert again.cached and again.text == done.text


def test_schema_constrained_output_is_valid_json(fast_server):
    schema = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["verdict"]}
    llm = fast_server.llm(cache=False)
    done = llm.complete("Write a long story about a wafer fab.", max_tokens=20, temperature=0.9,
                        response_format={"type": "json_object", "schema": schema})
    assert json.loads(done.text)["verdict"] in ("yes", "no")


def test_generation_on_the_real_model_counts_and_retries_failures(fast_server, tmp_path):
    chunks, contexts = small_contexts()
    llm = fast_server.llm(cache=ResponseCache(tmp_path / "gen.sqlite"))
    run = generate_qa(contexts, llm, n=2, chunks=chunks, config=GenerationConfig(max_tokens=256, r_max=4))
    a = run.attempts
    assert len(run.pairs) >= 1, run.attempts[["failure", "message"]].to_string()
    failed = a[a.outcome == "failed"]
    assert len(failed) >= 1 and failed.failure.ne("").all()  # the small model fails, and it is counted
    for _, g in a.groupby("context_id"):
        assert g.temperature.is_monotonic_increasing  # Eq. 7: each failure raises tau
    pair = run.pairs[0]
    assert pair["generation_metadata"]["model"] == llm.model
    evidence = pair["gold_context_sources"][0]["evidence"]
    assert max(quoted_share(evidence, c) for c in chunks.text) >= 0.8  # quoted from the corpus
    rerun = generate_qa(contexts, llm, n=2, chunks=chunks, config=GenerationConfig(max_tokens=256, r_max=4))
    assert rerun.attempts.cached.all() and [p["question"] for p in rerun.pairs] == [p["question"] for p in run.pairs]


def test_a_broken_model_file_fails_with_the_servers_words(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF not really")
    with pytest.raises(LLMError, match="exited with code"):
        LocalServer(model=bad, startup_timeout=60).start()
