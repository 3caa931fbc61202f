"""Adaptive generation: each equation pinned by hand, prompts, validation, Algorithm 1, resume."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fabnb.corpus.terms import KnowledgeBase
from fabnb.data.datasets import read_qa_files
from fabnb.models.llm import LLM, ResponseCache
from fabnb.qa import generation as G

from conftest import ROOT
from gen_helpers import qa_reply, small_contexts
from stub_openai import StubServer

# --------------------------------------------------------------- equations

@pytest.mark.parametrize("p,k,expected", [("high", 0, 0.0), ("high", 10, 0.2), ("medium", 16, 0.32),
                                          ("low", 40, 0.32), ("low", 100, 0.32)])
def test_eq5_progressive(p, k, expected):
    # (tau_max - tau_min) * min(k/20, 0.8): 0.4 * 0.5 = 0.2; 0.4 * 0.8 = 0.32 (capped)
    assert G.progressive_temperature(p, k) == pytest.approx(expected)


def test_eq7_eq8_boosts():
    assert [G.attempt_boost(a) for a in (0, 1, 3, 4)] == pytest.approx([0.0, 0.08, 0.24, 0.25])
    assert [G.similarity_boost(s) for s in (0, 2, 3, 9)] == pytest.approx([0.0, 0.10, 0.15, 0.15])


@pytest.mark.parametrize("p,k,c,a,s,expected", [
    ("high", 0, "parameters", 0, 0, 0.30),       # 0.4 + 0 - 0.10
    ("medium", 10, "processes", 1, 0, 0.70),     # 0.5 + 0.4*0.5 - 0.08 + 0.08
    ("low", 4, "manufacturing", 0, 2, 0.80),     # 0.6 + 0.4*0.2 + 0.02 + 0.10
    ("high", 20, "applications", 3, 3, 1.0),     # 0.4 + 0.32 + 0.05 + 0.24 + 0.15 = 1.16 -> 1.0
    ("high", 0, "parameters", 0, 0, 0.30),
    ("high", 0, None, 0, 0, 0.40),               # unknown category: no adjustment
])
def test_eq9_temperature(p, k, c, a, s, expected):
    assert G.adaptive_temperature(p, k, c, a, s) == pytest.approx(expected)


def test_eq9_lower_clip():
    # no combination of the paper's terms goes below 0.3, but the clip is part of Eq. 9
    G.CATEGORY_ADJUSTMENT["_test"] = -1.0
    try:
        assert G.adaptive_temperature("high", 0, "_test") == 0.1
    finally:
        del G.CATEGORY_ADJUSTMENT["_test"]


@pytest.mark.parametrize("tau,expected", [(0.3, 0.95), (0.4, 0.95), (0.41, 0.90), (0.7, 0.90), (0.71, 0.85)])
def test_eq10_top_p(tau, expected):
    assert G.nucleus_top_p(tau) == expected


@pytest.mark.parametrize("p,r,expected", [("high", 0, 0.70), ("medium", 0, 0.75), ("low", 0, 0.80),
                                          ("low", 3, 0.65), ("high", 4, 0.50), ("high", 7, 0.50)])
def test_eq11_eq12_threshold(p, r, expected):
    assert G.similarity_threshold(p, r) == pytest.approx(expected)


def test_eq13_weighted_jaccard_by_hand():
    kb = KnowledgeBase.default()
    q1 = "What is the etch rate of ALD on wafer"
    q2 = "What is the etch rate of CVD on wafer"
    # words: 9 each, 8 shared, union 10 -> 0.8; terms: {ALD, wafer} vs {CVD, wafer} -> 1/3
    assert G.weighted_similarity(q1, q2, kb) == pytest.approx(8 / 10 + 0.05 * (1 / 3))
    assert G.weighted_similarity(q1, q2, None) == pytest.approx(8 / 10)


def test_eq14_semantic_check_needs_five_questions():
    accepted = ["alpha beta gamma", "delta epsilon", "zeta eta theta", "iota kappa lambda"]
    four = G.uniqueness("alpha beta gamma delta", accepted, theta=0.99)
    assert four["unique"] and four["max_semantic"] != four["max_semantic"]  # NaN: not yet applied
    five = G.uniqueness("mu nu xi omicron", accepted + ["mu nu xi omicron pi"], theta=0.99)
    assert five["max_semantic"] > 0.5
    dup = G.uniqueness("mu nu xi omicron pi", accepted + ["mu nu xi omicron pi"], theta=0.5)
    assert not dup["unique"] and dup["reason"] == "too-similar"  # weighted 1.0 > 0.5
    near = "copper copper copper copper via fill"
    sem = G.uniqueness("copper copper copper copper copper via fill plating anneal", accepted + [near], theta=0.85)
    # word sets {copper, via, fill} of {.., plating, anneal}: 3/5 = 0.6 <= 0.85 passes Eq. 13;
    # term counts make the TF-IDF cosine ~0.947 > 0.85 + 0.05, which fails Eq. 14
    assert sem["max_weighted"] == pytest.approx(0.6) and sem["max_semantic"] > 0.9
    assert sem["reason"] == "semantic-duplicate"


# ------------------------------------------------------- format and prompts

def test_format_balance_and_rotation():
    formats = []
    for _ in range(20):
        plan = G.plan_format(formats, objective_target=0.5)
        formats.append((plan.question_format, plan.subtype))
    objective = [s for f, s in formats if f == "OBJECTIVE"]
    assert len(objective) == 10
    assert {s: objective.count(s) for s in set(objective)} == {"Calculation": 3, "Fill": 3, "Judge": 2, "Choice": 2}
    assert G.plan_format([("OBJECTIVE", "Fill")] * 3 + [("SUBJECTIVE", None)] * 4, 0.4).question_format == "SUBJECTIVE"
    mixed = [("OBJECTIVE", "Fill")] * 4 + [("SUBJECTIVE", None)] * 3  # r_obj = 4/7 >= 0.5
    assert G.plan_format(mixed, 0.5).archetype == G.ARCHETYPES[7 % 5]


def test_prompt_modules():
    plan = G.FormatPlan("OBJECTIVE", subtype="Fill")
    full = G.build_prompt("First part.\n\nSecond part.", "multi_hop", plan, enhanced=True, similarity_failures=3)
    text = full[1]["content"]
    assert "[Section 2]\nSecond part." in text and "starts with [Fill]" in text
    assert "scored mainly on completeness" in text and "DIVERSITY FOCUS: Previous 3" in text
    plain = G.build_prompt("First part.", "multi_hop", plan, enhanced=False, similarity_failures=3)[1]["content"]
    assert "DIVERSITY" not in plain and "scored mainly" not in plain and "[Fill]" in plain
    plan = G.FormatPlan("SUBJECTIVE", archetype=G.ARCHETYPES[0])
    two = G.build_prompt("x", "robustness", plan, similarity_failures=2)
    assert "DIVERSITY" not in two[1]["content"]  # only when s > 2


def test_an_objective_questions_length_limit_is_in_its_pattern():
    """llama.cpp's grammar converter reads a string's pattern and ignores its maxLength."""
    import re

    schema = G.qa_schema(G.FormatPlan("OBJECTIVE", subtype="Fill"), max_tokens=200)
    question = schema["properties"]["question"]
    limit = question["maxLength"]
    assert re.fullmatch(question["pattern"], "[Fill] " + "x" * (limit - 7))
    assert not re.fullmatch(question["pattern"], "[Fill] " + "x" * (limit - 6))


# ------------------------------------------------------------ validation

CTX = "The optimal window was between 600 V and 1200 V. Etch per cycle reached 5 angstrom."
FILL = G.FormatPlan("OBJECTIVE", subtype="Fill")


@pytest.mark.parametrize("text,kind", [
    ("no json here", "not-json"),
    ('{"question": "[Fill] The window is _____ V.", "answer": "600-1200"}', "missing-field"),
    ('{"question": 3, "answer": "x", "evidence": []}', "wrong-type"),
    ('{"question": "What is the optimal bias window?", "answer": "600", "evidence": ["The optimal window"]}',
     "bad-prefix"),
    ('{"question": "[Fill] The window is _____ V to _____ V.", "answer": "600 and 1200", '
     '"evidence": ["The window was invented by Zeus."]}', "evidence-not-in-context"),
    ('{"question": "[Fill] The window is _____ V to _____ V.", "answer": "700 and 1300", '
     '"evidence": ["The optimal window was between 600 V and 1200 V."]}', "answer-not-in-context"),
])
def test_invalid_outputs(text, kind):
    record, failure, message = G.validate(text, FILL, CTX)
    assert record is None and failure == kind and message


def test_valid_output_in_a_fence():
    text = ('Here you go:\n```json\n{"question": "[Fill] The optimal window is _____ V to _____ V.", '
            '"answer": "600 V and 1200 V", "evidence": ["the optimal  window was between 600 V and 1200 V"]}\n```')
    record, failure, _ = G.validate(text, FILL, CTX)
    assert failure == "" and record["answer"] == "600 V and 1200 V"


# ------------------------------------------------------------- the loop

def test_invalid_outputs_are_counted_and_retried_with_more_temperature(tmp_path):
    chunks, contexts = small_contexts()
    with StubServer(qa_reply(broken_first=2)) as s:
        llm = LLM("stub", s.base_url, cache=ResponseCache(tmp_path / "c.sqlite"), schema_style="llama.cpp")
        run = G.generate_qa(contexts, llm, n=3, chunks=chunks)
    a = run.attempts
    assert len(run.pairs) == 3
    first = a[a.context_id == a.context_id.iloc[0]]
    assert first.outcome.tolist() == ["failed", "failed", "accepted"]
    assert first.failure.tolist()[:2] == ["not-json", "not-json"]
    temps = first.temperature.tolist()
    assert temps[1] == pytest.approx(temps[0] + 0.08) and temps[2] == pytest.approx(temps[0] + 0.16)  # Eq. 7
    assert run.summary()["retries"] == 2 and run.summary()["failures"] == {"not-json": 2}
    body = s.requests[0]
    assert body["response_format"]["type"] == "json_object" and body["temperature"] == temps[0]


def test_pairs_are_fab_bench_records(tmp_path):
    chunks, contexts = small_contexts()
    with StubServer(qa_reply()) as s:
        run = G.generate_qa(contexts, LLM("stub", s.base_url, cache=False), n=4, chunks=chunks)
    G.write_pairs(run.pairs, tmp_path)
    back = read_qa_files(tmp_path / "QAs", on_error="raise")
    assert [p.test_id for p in back] == ["ROB_001", "ROB_002", "ROB_003", "ROB_004"]
    meta = back.pairs[0].generation_metadata
    for key in ("temperature_used", "top_p_used", "attempt", "similarity_failures", "similarity_threshold_used",
                "semiconductor_analysis"):
        assert key in meta
    src = back.pairs[0].gold_context_sources[0]
    assert src.doc_id.startswith("d") and src.evidence
    formats = run.frame().question_format.tolist()
    assert formats[:2] == ["OBJECTIVE", "OBJECTIVE"] or "SUBJECTIVE" in formats


def test_llm_errors_follow_the_policy(tmp_path):
    chunks, contexts = small_contexts()
    with StubServer(lambda r, n: (400, {"error": {"message": "no"}}, {})) as s:
        llm = LLM("stub", s.base_url, cache=False, max_retries=0)
        run = G.generate_qa(contexts, llm, n=1, config=G.GenerationConfig(r_max=2))
        assert run.attempts.failure.unique().tolist() == ["llm-error"] and not run.pairs
        with pytest.raises(Exception, match="http-400"):
            G.generate_qa(contexts, llm, n=1, error_policy="raise")


def test_ablation_groups_differ_as_table_8(tmp_path):
    assert not G.ABLATION_GROUPS["A"].adaptive_temperature and not G.ABLATION_GROUPS["A"].adaptive_threshold
    assert G.ABLATION_GROUPS["C"].fixed_temperature == 0.5 and G.ABLATION_GROUPS["B"].fixed_threshold == 0.65
    assert G.ABLATION_GROUPS["E"].enhanced_prompts and not G.ABLATION_GROUPS["D"].enhanced_prompts
    chunks, contexts = small_contexts()
    with StubServer(qa_reply()) as s:
        table = G.run_ablation(contexts, LLM("stub", s.base_url, cache=False), n=2, groups=("A", "E"))
    assert table.group.tolist() == ["A", "E"] and (table.pairs == 2).all()


RUNNER = textwrap.dedent("""
    import sys
    sys.path[:0] = [{tests!r}]
    from gen_helpers import small_contexts
    from fabnb.qa.generation import generate_qa
    from fabnb.models.llm import LLM, ResponseCache
    chunks, contexts = small_contexts()
    llm = LLM("stub", sys.argv[1], cache=ResponseCache(sys.argv[2]))
    generate_qa(contexts, llm, n=6, chunks=chunks)
""")


def test_killed_run_resumes_from_the_cache(tmp_path):
    cache = tmp_path / "resume.sqlite"
    script = tmp_path / "run.py"
    script.write_text(RUNNER.format(tests=str(ROOT / "tests")))
    with StubServer(qa_reply(broken_first=1), delay=0.4) as s:
        proc = subprocess.Popen([sys.executable, str(script), s.base_url, str(cache)])
        deadline = time.monotonic() + 60
        while len(s.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)  # midway: no chance to clean up
        proc.wait()
        before = list(s.requests)
        done_before = len(ResponseCache(cache))
        assert 1 <= done_before < 7
        s.delay = 0  # slow only for the kill to land midway
        llm = LLM("stub", s.base_url, cache=ResponseCache(cache))
        chunks, contexts = small_contexts()
        run = G.generate_qa(contexts, llm, n=6, chunks=chunks)
        after = s.requests[len(before):]
    with StubServer(qa_reply(broken_first=1)) as fresh:  # the same run, never interrupted
        reference = G.generate_qa(contexts, LLM("stub", fresh.base_url, cache=False), n=6, chunks=chunks)
    assert [p["question"] for p in run.pairs] == [p["question"] for p in reference.pairs]
    assert len(run.attempts) == len(reference.attempts)
    assert int(run.attempts.cached.sum()) == done_before  # every finished call was reused ...
    assert len(after) == len(run.attempts) - done_before  # ... and only the rest were asked
    finished = [json.dumps(b, sort_keys=True) for b in before[:done_before]]
    assert not set(finished) & {json.dumps(b, sort_keys=True) for b in after}


def test_each_attempt_is_told_on_the_bar_and_in_the_log(tmp_path, caplog):
    """Seen: QA generation on one's own corpus showed "QA pairs: 0/4" for 15 minutes with no per-attempt line, so
    slow could not be told from stuck."""
    import logging

    class Bar:
        n = total = 0
        lines: list = []

        def update(self, n=1):
            self.n += n

        def refresh(self):
            pass

        def set_postfix_str(self, text, refresh=True):
            self.lines.append(text)

    chunks, contexts = small_contexts()
    bar = Bar()
    with StubServer(qa_reply(broken_first=1)) as s, caplog.at_level(logging.INFO, logger="fabnb.qa.generation"):
        llm = LLM("stub", s.base_url, cache=ResponseCache(tmp_path / "c.sqlite"), schema_style="llama.cpp")
        run = G.generate_qa(contexts, llm, n=1, chunks=chunks, progress=bar)
    first = run.attempts.context_id.iloc[0]
    starts = [f"{first} attempt 1: asking", f"{first} attempt 1: rejected (not-json", f"{first} attempt 2: asking",
              f"{first} attempt 2: accepted"]
    assert len(bar.lines) == 4 and all(line.startswith(start) for line, start in zip(bar.lines, starts)), bar.lines
    assert all("temperature 0." in line for line in bar.lines)
    assert [r.getMessage() for r in caplog.records] == bar.lines
