"""Batch mode in an experiment (fabnb.experiment.batching): the judge and the answers through a scripted server's
Files and Batches routes, the plan's two costs, the budget, a provider without the routes, and vLLM's run_batch
files through ``fabnb batch``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from stub_batches import BatchServer

from fabnb.experiment import Experiment, ExperimentError, plan, run_experiment, stores
from fabnb.experiment.progress import ProgressFile
from fabnb.models.batch import LEDGER, BatchError

from stub_openai import StubServer
from test_experiment import ROOT, judge_or_echo, judge_varied, quiet, write_file

BATCH_JUDGE = 'mode = "batch"\nbatch_poll = 0.01'
PRICED = '\n[prices.stub-judge2]\ninput = 0.5\noutput = 4.0\nbatch_input = 0.25\nbatch_output = 2.0\nsource = "test"\n'


def varied(request: dict, n: int):
    """Every answer its own (the echo), every judge score by its prompt (1 to 10)."""
    return judge_varied(request, n) if request.get("response_format") else judge_or_echo(request, n)


@pytest.fixture
def batches(monkeypatch, tmp_path):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with BatchServer(varied) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        yield server


def _judge_calls(server) -> list:
    return [r for r in server.online if r.get("response_format")]


def _scores(folder) -> pd.DataFrame:
    s = stores(folder)[1].frame()
    keys = ["system", "context_k", "mode", "test_id", "metric", "replicate"]
    return s.sort_values(keys).set_index(keys)[["status", "score", "raw_score", "reason", "prompt_tokens"]]


def test_a_judge_stage_of_960_calls_in_batch_mode_stores_what_online_stores(tmp_path, batches, monkeypatch):
    # 20 questions x 2 windows x 2 modes = 80 answers; x 6 metrics x 2 replicates = 960 judge calls.
    settings = dict(sample=20, metrics='"all"', extra_judge="replicates = 2\n" + BATCH_JUDGE)
    path = write_file(tmp_path, **settings)
    exp = Experiment.from_file(path)
    rendered = plan(exp).render()
    assert "batch: ref judge, 960 calls to stub-judge: unknown (no batch price" in rendered
    run = run_experiment(exp, progress=False, probe=False, echo=quiet)
    assert run.status == "finished" and run.tally.set_index("stage").loc["judge", "ok"] == 960
    assert _judge_calls(batches) == [] and batches.created == 1  # every judge reply came through the batch
    assert sum(b["request_counts"]["total"] for b in batches.batches.values()) == 960
    ledger = json.loads((exp.output / LEDGER).read_text())["batches"]
    assert [e["status"] for e in ledger.values()] == ["completed"]
    scored = stores(exp.output)[1].frame()
    assert scored["batch"].astype(bool).all()  # each score knows it was billed at the batch price
    # The same file online, into another folder with a cache of its own: the same scores, field for field.
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache-online"))
    (tmp_path / "online").mkdir()
    online_path = write_file(tmp_path / "online", **{**settings, "extra_judge": "replicates = 2"})
    online = run_experiment(Experiment.from_file(online_path), progress=False, probe=False, echo=quiet)
    assert len(_judge_calls(batches)) == 960 and online.status == "finished"
    pd.testing.assert_frame_equal(_scores(exp.output), _scores(online.output))
    # A later run of the batch file, online or not, asks nothing.
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    asked = len(batches.online)
    again = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert len(batches.online) == asked and batches.created == 1 and again.plan.table["todo"].sum() == 0


def test_the_answers_of_a_batch_mode_system_come_through_a_batch(tmp_path, batches):
    path = write_file(tmp_path, sample=3, windows="[1]", modes='["A", "B"]', metrics='["relevance"]',
                      extra_system='mode = "batch"', extra_judge="batch_poll = 0.01")
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    answers = stores(tmp_path / "out")[0].frame()
    assert run.status == "finished" and len(answers) == 6 and answers["batch"].all()
    assert [r for r in batches.online if not r.get("response_format")] == []  # no answer asked online
    assert len(_judge_calls(batches)) == 6 and batches.created == 1  # the judge stayed online
    assert run.tally.set_index("stage").loc["answers", "cost_usd"] == pytest.approx(
        run.tally.set_index("stage").loc["answers", "prompt_tokens"] * 1e-6
        + run.tally.set_index("stage").loc["answers", "completion_tokens"] * 2e-6)  # no batch price: online's


def test_a_batch_the_budget_cannot_pay_for_is_not_submitted(tmp_path, batches):
    path = write_file(tmp_path, sample=4, extra_judge=BATCH_JUDGE, budget="budget_usd = 0.05")
    text = path.read_text().replace('model = "stub-judge"', 'model = "stub-judge2"')
    # A batch price above the budget's reach (the rule, not a vendor's price): not submitted, asked online.
    path.write_text(text + PRICED.replace("batch_input = 0.25", "batch_input = 500"))
    said = []
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=said.append)
    assert batches.created == 0 and any("not submitted" in s for s in said)
    assert run.status in ("finished", "stopped-by-budget")


def test_the_batch_price_is_what_the_summary_counts_and_the_plan_shows_both(tmp_path, batches):
    path = write_file(tmp_path, sample=2, windows="[1]", modes='["A"]', metrics='["relevance"]',
                      extra_judge=BATCH_JUDGE)
    text = path.read_text().replace('model = "stub-judge"', 'model = "stub-judge2"')
    path.write_text(text + PRICED)
    exp = Experiment.from_file(path)
    p = plan(exp)
    judge = p.table.set_index("stage").loc["judge"]
    batch = (judge["prompt_tokens"] * 0.25 + judge["completion_tokens"] * 2.0) / 1e6
    assert f"at the batch price (online ${judge['cost_usd']:,.4f})" in p.render() and f"${batch:,.4f}" in p.render()
    assert "time: up to 24 h" in p.render()
    run = run_experiment(exp, progress=False, probe=False, echo=quiet)
    t = run.tally.set_index("stage").loc["judge"]
    assert t["cost_usd"] == pytest.approx((t["prompt_tokens"] * 0.25 + t["completion_tokens"] * 2.0) / 1e6)


def test_the_papers_plan_with_batch_judging_shows_both_costs(monkeypatch, tmp_path):
    for var in ("DEEPSEEK_BASE_URL", "GEMINI_BASE_URL", "QWEN_BASE_URL"):
        monkeypatch.setenv(var, "http://127.0.0.1:9/v1")
    for var in ("DEEPSEEK_API_KEY", "GEMINI_API_KEY", "QWEN_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(var, "sk-x")
    exp = Experiment.from_file(ROOT / "examples" / "paper.toml", output=tmp_path / "paper")
    assert exp.judging.mode == "batch"
    p = plan(exp)
    lines = [line for line in p.render().splitlines() if line.startswith("batch: ")]
    assert len(lines) == 3 and all("calls to gpt-4.1-mini" in line and "online $" in line for line in lines)
    judge = p.table[p.table["stage"] == "judge"]
    online = float(judge["cost_usd"].sum())
    batch = float(((judge["prompt_tokens"] * 0.20 + judge["completion_tokens"] * 0.80) / 1e6).sum())
    assert batch == pytest.approx(online / 2, rel=1e-6)
    print(f"paper.toml judge: online ${online:,.2f}, batch ${batch:,.2f}")


def test_a_provider_without_batch_routes_is_named_before_any_cell_is_sent(tmp_path, monkeypatch):
    def chat_only(request, n):
        if "messages" not in request:
            return 404, {"error": {"message": "File Not Found", "type": "not_found_error"}}, {}
        return varied(request, n)

    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with StubServer(chat_only) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        path = write_file(tmp_path, sample=2, extra_judge=BATCH_JUDGE)
        with pytest.raises(BatchError, match=r'\[judge\] mode = "batch" needs a provider with OpenAI'):
            run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
        assert [r for r in server.requests if "messages" in r] == []  # not one cell
        done = subprocess.run([sys.executable, "-m", "fabnb.cli", "run", str(path), "--no-probe", "--no-progress"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 2 and '[judge] mode = "batch"' in done.stderr


def test_batch_settings_are_checked(tmp_path):
    base = {"name": "x", "output": str(tmp_path / "o")}
    with pytest.raises(ExperimentError, match=r'\[judge\] mode = .later. must be "online" or "batch"'):
        Experiment.from_dict({**base, "judge": {"mode": "later"}, "systems": [{"name": "s", "model": "embedded"}]})
    with pytest.raises(ExperimentError, match="batch mode is for systems that call an OpenAI-compatible endpoint"):
        Experiment.from_dict({**base, "systems": [{"name": "s", "kind": "http", "base_url": "http://h/ask",
                                                   "mode": "batch", "settings": {"request": {"q": "{question}"},
                                                                                 "answer_path": "a"}}]})
    with pytest.raises(ExperimentError, match="give both"):
        Experiment.from_dict({**base, "systems": [{"name": "s", "model": "embedded"}],
                              "prices": {"m": {"input": 1, "output": 2, "batch_input": 0.5}}})


def test_fabnb_batch_export_then_import_a_run_batch_output_and_the_run_asks_no_judge_call(tmp_path, batches):
    path = write_file(tmp_path, sample=2, windows="[1]", modes='["A"]', metrics='["relevance", "depth"]')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "fabnb.cli", "run", str(path), "--no-probe", "--no-progress"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    # A second file on the same answers with a third metric: its judge stage has 2 cells x 1 metric to ask.
    path.write_text(path.read_text().replace('metrics = ["relevance", "depth"]',
                                             'metrics = ["relevance", "depth", "completeness"]'))
    requests = tmp_path / "requests.jsonl"
    done = subprocess.run([sys.executable, "-m", "fabnb.cli", "batch", "export", str(path), str(requests)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(lines) == 2 and all(line["url"] == "/v1/chat/completions" for line in lines)
    assert {line["body"]["model"] for line in lines} == {"stub-judge"}
    # vLLM's run_batch, by hand: each line answered as the scripted judge would, one line for another request.
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps({"id": f"vllm-{i}", "custom_id": line["custom_id"], "error": None,
                                           "response": {"status_code": 200, "request_id": f"r{i}",
                                                        "body": varied(line["body"], i)[1]}}) + "\n"
                               for i, line in enumerate(lines)))
    done = subprocess.run([sys.executable, "-m", "fabnb.cli", "batch", "import", str(path), str(results)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "stored 2 replies" in done.stdout, done.stdout + done.stderr[-2000:]
    before = len(_judge_calls(batches))
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert len(_judge_calls(batches)) == before and run.tally.set_index("stage").loc["judge", "ok"] == 6
    (tmp_path / "bad.jsonl").write_text("{}\nnot json\n")
    bad = [sys.executable, "-m", "fabnb.cli", "batch", "import", str(path), str(tmp_path / "bad.jsonl")]
    done = subprocess.run(bad, capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "bad.jsonl: line 2 is not JSON" in done.stderr


def test_the_progress_file_says_a_batch_stages_state(tmp_path):
    bar = ProgressFile(tmp_path, total=10, desc="answers")
    bar.batch_state("judge", "batch_7", "in_progress", 120, 960)
    seen = json.loads((tmp_path / "progress.json").read_text())
    assert seen["stage"] == "judge (batch in progress)" and (seen["done"], seen["total"]) == (120, 960)
    assert seen["batch"] == {"id": "batch_7", "status": "in_progress", "completed": 120, "total": 960}
    bar.start_stage("judge", 960, 960)
    assert json.loads((tmp_path / "progress.json").read_text())["batch"] is None


def test_fabnb_batch_cancel_stops_the_runs_open_batches_on_their_own_endpoint(tmp_path, batches, capsys):
    import signal
    import time

    from fabnb.cli import main

    path = write_file(tmp_path, sample=2, windows="[1]", modes='["A"]', metrics='["relevance", "depth"]',
                      extra_judge=BATCH_JUDGE)
    exp = Experiment.from_file(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    batches.hold_after = 2  # the judge's batch does 2 of its 4 lines, then waits
    run = subprocess.Popen([sys.executable, "-m", "fabnb.cli", "run", str(path), "--no-probe", "--no-progress"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        # Its batch recorded in the run folder (batches.json), 2 lines done: a batch killed before it was recorded
        # is the next run's to find by listing, not a cancel's.
        while not (batches.order and batches.batches[batches.order[0]]["request_counts"]["completed"] >= 2
                   and (exp.output / LEDGER).exists()):
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # killed while its batch is in flight
        run.wait()
    cancel = ["batch", "cancel", str(path)]
    assert main(cancel) == 0 and "cancelled 1 open batches" in capsys.readouterr().out
    (batch_id,) = batches.order
    assert batches.batches[batch_id]["status"] in ("cancelling", "cancelled")
    ledger = json.loads((exp.output / LEDGER).read_text())["batches"]
    assert [e["status"] for e in ledger.values()] == ["cancelling"]
    assert main(cancel) == 0 and "cancelled 0 open batches" in capsys.readouterr().out  # nothing cancelled twice
    # The rerun keeps the 2 lines the cancelled batch completed (billed) and sends only the other 2.
    again = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert again.status == "finished" and again.tally.set_index("stage").loc["judge", "ok"] == 4
    assert batches.created == 2 and len(batches.batches[batches.order[1]]["_lines"]) == 2
    # A batch the ledger says went to another endpoint is named, not cancelled through this one.
    digest = next(iter(ledger))
    (exp.output / LEDGER).write_text(json.dumps({"batches": {digest: {**ledger[digest], "status": "in_progress",
                                                                      "endpoint": "http://elsewhere/v1/"}}}))
    assert main(cancel) == 0 and "not cancelled: it went to http://elsewhere/v1/" in capsys.readouterr().out
    assert main(["batch", "import", str(path)]) == 2 and "give the file to read" in capsys.readouterr().err
