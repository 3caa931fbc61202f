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
from fabnb.rag import PAPER_CONTEXTS, PROMPT_OVERHEAD, SYSTEM_PROMPT, count_tokens

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
    """An experiment file on the scripted server: 4 questions, windows 1 and 2K, modes A and B, two metrics."""
    settings = {"sample": 4, "windows": "[1, 2]", "modes": '["A", "B"]', "retriever": "bm25",
                "metrics": '["relevance", "depth"]', "budget": "", "name": "stub-study", "extra_system": ""}
    settings.update(changes)
    text = textwrap.dedent(f"""\
        name = "{settings['name']}"
        output = "out"
        concurrency = 2
        {settings['budget']}

        [questions]
        sample = {settings['sample']}

        [corpus]
        chunk_size = 128
        chunk_overlap = 32

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

        [prices]
        stub-answerer = {{input = 1.0, output = 2.0, date = "2026-11-30", source = "test"}}
        stub-judge = {{input = 0.5, output = 4.0, date = "2026-11-30", source = "test"}}
        """)
    path = folder / "experiment.toml"
    path.write_text(text)
    return path


@pytest.fixture
def stub(monkeypatch, tmp_path):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        monkeypatch.setenv("FABNB_TEST_KEY", CANARY)
        yield server


def quiet(*args):
    pass


# --------------------------------------------------------------- the file


def test_a_minimal_file_reads_with_the_defaults(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nmodel = "embedded"\n'
                    '[contexts]\nwindows = "paper"\nmodes = ["A", "B"]\n')
    exp = Experiment.from_file(path)
    assert exp.windows == tuple(float(k) for k in PAPER_CONTEXTS) and exp.modes == ("A", "B")
    assert exp.output == tmp_path / "o" and exp.judge.embedded and len(exp.metrics) == 6
    assert exp.systems[0].kind == "reference" and exp.systems[0].retriever == "bm25"


@pytest.mark.parametrize("text, words", [
    ('name = "x"\noutput = "o"\nbudget = 3\n', ["unknown key 'budget'", "line 3", "budget_usd"]),
    ('name = "x"\noutput = "o"\n[contexts]\nwindow = [4]\n', ["unknown key 'window'", "[contexts]", "line 4",
                                                              "windows"]),
    ('name = "x"\noutput = "o"\n[judge]\nreplicates = "two"\n', ["replicates", "line 4", "an integer"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nkind = "langchain"\n', ["kind = 'langchain'", "line 5",
                                                                               "anythingllm"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nmodel = "m"\napi_key = "sk-1"\n',
     ["unknown key 'api_key'", "api_key_env", "never written in the file"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nmodel = "gpt-4o"\n', ["base_url_env"]),
    ('name = "x"\noutput = "o"\n[[systems]]\nname = "s"\nkind = "anythingllm"\nbase_url = "http://h"\n'
     'settings = {workspace = "w", topN = 4}\n', ["topN", "workspace"]),
    ('name = "x"\noutput = "o"\n[contexts]\nwindows = [4, -8]\n', ["windows", "positive"]),
    ('name = "x"\noutput = "o"\n[contexts]\nmodes = ["C"]\n', ["modes", "\"A\""]),
    ('name = "x"\noutput = "o"\n[judge]\nmetrics = ["fluency"]\n', ["metrics", "factuality"]),
    ('name = "x"\noutput = "o"\n[questions]\nsample = 0\n', ["sample", "positive"]),
    ('name = "x"\noutput = "o"\nbudget_usd = 5\n[[systems]]\nname = "s"\nmodel = "my-model"\nbase_url = "http://h"\n',
     ["budget_usd", "my-model", "[prices]"]),
    ('name = "x"\noutput = "o"\n[systems]\nname = "s"\n', ["systems", "a list"]),
    ('name = "x"\noutput = "o"\n[contexts\nwindows = [4]\n', ["not valid TOML", "line 3"]),
])
def test_bad_files_are_refused_naming_the_file_line_and_key(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text + ('' if "[[systems]]" in text or "[systems]" in text or "[contexts\n" in text
                            else '[[systems]]\nname = "s"\nmodel = "embedded"\n'))
    with pytest.raises(ExperimentError) as err:
        Experiment.from_file(path)
    message = str(err.value)
    assert str(path) in message
    for word in words:
        assert word in message, (word, message)


def test_an_unset_environment_variable_is_named_before_any_call(tmp_path, monkeypatch):
    monkeypatch.delenv("FABNB_TEST_URL", raising=False)
    monkeypatch.delenv("FABNB_TEST_KEY", raising=False)
    exp = Experiment.from_file(write_file(tmp_path))
    with pytest.raises(ExperimentError, match="FABNB_TEST_URL .for ref.*FABNB_TEST_KEY .for ref.*for judge"):
        run_experiment(exp, echo=quiet)
    assert not (tmp_path / "out").exists()


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
    exp = Experiment.from_file(write_file(tmp_path))
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
    assert "7 (n = 4 / 4)" not in summary and "0.700 (n = 4 / 4)" in summary
    assert (out / "report" / "report.md").exists() and list((out / "report" / "figures").glob("*.png"))
    assert pd.read_csv(out / "coverage.csv")["n"].eq(4).all()
    # The canary key: sent to the server, written nowhere.
    assert all(h.get("authorization") == f"Bearer {CANARY}" for h in stub.headers)
    for path in [*out.rglob("*"), *(tmp_path / "cache").rglob("*")]:
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in repr(run) and CANARY not in repr(exp)


def test_the_report_can_put_the_papers_models_beside_yours(tmp_path, stub):
    path = write_file(tmp_path, sample=2, windows="[4, 8, 16]", modes='["A"]', metrics='"all"')
    path.write_text(path.read_text() + "\n[report]\ncompare_published = true\n")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    fits = pd.read_csv(run.output / "report" / "tables" / "log_fits.csv")
    assert set(fits["model"]) == {"ref", "Gemini-2.5-Flash (paper)", "Qwen-Plus (paper)", "DeepSeek-v3.2-Exp (paper)"}
    assert "0.700 (n = 2 / 2)" in run.report.read_text()


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
        from fabnb.judge import score_store
        from fabnb.records import ResultsStore

        stored = len(ResultsStore(out / "answers.jsonl").done()) + len(score_store(out / "scores.jsonl").done())
        assert stored < 120 or stage == "reporting"
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
    assert "(n = " in (out / "summary.md").read_text() and (out / "report" / "report.md").exists()
    print(f"offline example: {seconds:.0f} s; judge {judge['ok']}/54 ok")
