"""``fabnb compare``: two runs paired question by question, the gate that fails only on evidence, and the CI recipe.

The runs are real ``fabnb run`` folders on the scripted server (tests/stub_openai.py), whose judge scores each
question by a seeded function of its text: the candidate's judge is told to score lower, or the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fabnb.cli import main
from fabnb.core.exits import EXIT
from fabnb.experiment.comparison import ComparisonError, compare_runs, compare_scores

from conftest import ROOT
from stub_openai import StubServer, completion
from test_experiment import write_file


def scripted_judge(shift: int = 0, noise: int = 0):
    """A scripted server: answers echo the prompt's length; the judge scores a question 3-8 by a hash of its
    prompt, plus ``shift`` (on 0-10), plus a seeded ``-noise..noise``: a candidate's judge scores ``shift / 10``
    lower or higher than the base's on average."""
    def reply(request: dict, n: int):
        content = request["messages"][-1]["content"]
        if request.get("response_format"):
            question = re.search(r"Input:\s*(.{0,200})", content, re.S)
            key = zlib.crc32((question.group(1) if question else content[:400]).encode())
            base = 3 + key % 6
            jitter = (zlib.crc32(f"{key}-{shift}".encode()) % (2 * noise + 1) - noise) if noise else 0
            score = max(0, min(10, base + shift + jitter))
            return 200, completion(json.dumps({"reason": "Scripted.", "score": score}), model=request["model"]), {}
        return 200, completion(f"An answer to a prompt of {len(content)} characters.", model=request["model"]), {}
    return reply


def run_folder(tmp_path: Path, name: str, monkeypatch, reply, **changes) -> Path:
    """A finished ``fabnb run`` (one window, mode A, one metric) on the scripted server; its output folder."""
    folder = tmp_path / name
    folder.mkdir()
    monkeypatch.setenv("FABNB_CACHE_DIR", str(folder / "cache"))  # each run's judge is its own: no shared replies
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    settings = {"windows": "[1]", "modes": '["A"]', "metrics": '["relevance"]', **changes}
    path = write_file(folder, **settings)
    if "system_name" in changes:
        path.write_text(path.read_text().replace('name = "ref"', f'name = "{changes["system_name"]}"'))
    with StubServer(reply) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        assert main(["run", str(path), "--no-probe", "--no-progress"]) == 0
    return folder / "out"


# --------------------------------------------------------------- the statistics, on frames


def frames(n: int, shift: float, seed: int, sd: float = 0.1):
    rng = np.random.default_rng(seed)
    q = [f"q{i}" for i in range(n)]
    base = pd.DataFrame({"system": "s", "context_k": 4.0, "mode": "A", "test_id": q, "metric": "average",
                         "score": rng.uniform(0.3, 0.8, n)})
    return base, base.assign(score=base["score"] + shift + rng.normal(0, sd, n))


def test_a_true_regression_of_a_tenth_at_fifty_questions_fails_the_gate():
    base, worse = frames(50, -0.1, seed=1)
    c = compare_scores(base, worse)
    assert c.verdict() == "regression" and c.primary["ci_high"].iloc[0] < -0.02
    assert c.exit_code(fail_on_regression=True) == EXIT["check_failed"] == 1
    assert c.exit_code() == 0  # without the flag a comparison is information


def test_a_tie_at_five_questions_is_inconclusive_never_a_regression_and_names_the_questions_that_would_settle_it():
    base, same = frames(5, 0.0, seed=3)
    c = compare_scores(base, same)
    assert c.verdict() == "inconclusive" and c.exit_code(fail_on_regression=True) == 0
    assert c.exit_code(fail_on_inconclusive=True) == EXIT["inconclusive"]
    needed = c.primary["questions_needed"].iloc[0]
    assert needed > 5 and f"about {int(needed)} paired questions would settle it" in c.summary()
    # Over 300 seeded ties at 5 questions the gate calls a regression at most as often as its one-sided level
    # (2.5%), with the simulation's error.
    calls = [compare_scores(*frames(5, 0.0, seed=s, sd=0.15)).verdict() for s in range(300)]
    assert calls.count("regression") / 300 <= 0.05


def test_identical_runs_are_no_regression_and_a_constant_drop_is_judged_by_its_sign():
    base, _ = frames(8, 0.0, seed=4)
    assert compare_scores(base, base).verdict() == "no regression"
    drop = base.assign(score=base["score"] - 0.1)
    assert compare_scores(drop.head(0), drop.head(0)).verdict() == "inconclusive"
    assert compare_scores(base, drop).verdict() == "regression"  # 8 of 8 worse: a sign test's p = 0.008
    assert compare_scores(base.head(3), drop.head(3)).verdict() == "inconclusive"  # 3 of 3: p = 0.25


def test_the_information_table_pairs_every_metric_and_window_under_the_family_policy():
    base, worse = frames(30, -0.1, seed=5)
    two = pd.concat([base, base.assign(context_k=8.0), base.assign(metric="depth")])
    cand = pd.concat([worse, base.assign(context_k=8.0), worse.assign(metric="depth")])
    c = compare_scores(two, cand, pass_threshold=0.5)
    t = c.table.set_index(["metric", "context_k"])
    assert len(t) == 3 and set(t["ci_level"]) == {1 - 0.05 / 3}
    assert bool(t.loc[("depth", 4.0), "claimed"]) and not bool(t.loc[("average", 8.0), "claimed"])
    assert t.loc[("average", 8.0), "method"] == "no spread" and {"pass_base", "mcnemar_p"} <= set(t.columns)
    assert c.items["d"].is_monotonic_increasing and len(c.items) == 60  # the primary metric's cells, worst first


# --------------------------------------------------------------- real runs, on the scripted server


def test_runs_on_the_scripted_server_gate_refuse_and_map(tmp_path, monkeypatch, capsys):
    base = run_folder(tmp_path, "base", monkeypatch, scripted_judge(), sample=50)
    worse = run_folder(tmp_path, "worse", monkeypatch, scripted_judge(shift=-1, noise=1), sample=50)
    assert main(["compare", str(base), str(worse), "--fail-on-regression", "--metric", "relevance"]) == 1
    out = capsys.readouterr().out
    assert "verdict: regression" in out and (worse / "compare.md").exists()
    data = json.loads((worse / "compare.json").read_text())
    assert data["verdict"] == "regression" and data["primary"][0]["n"] == 50
    assert -0.15 < data["primary"][0]["mean"] < -0.05
    assert "not calibrated against experts" in (worse / "compare.md").read_text()
    assert "## The judge against experts\n\nNot calibrated:" in (worse / "summary.md").read_text()
    assert main(["compare", str(base), str(worse), "--require-calibrated-judge"]) == EXIT["usage"]
    assert "calibration/calibration.json" in capsys.readouterr().err

    fewer = run_folder(tmp_path, "fewer", monkeypatch, scripted_judge(), sample=40)
    assert main(["compare", str(base), str(fewer)]) == EXIT["usage"]
    err = capsys.readouterr().err
    assert "cannot be paired: question ids: 50 questions, 10 not in candidate" in err and "--allow questions" in err
    assert main(["compare", str(base), str(fewer), "--allow", "questions"]) == 0
    assert json.loads((fewer / "compare.json").read_text())["primary"][0]["n"] == 40

    renamed = run_folder(tmp_path, "renamed", monkeypatch, scripted_judge(), sample=50, system_name="ref2")
    assert main(["compare", str(base), str(renamed)]) == EXIT["usage"]
    assert "--map ref=ref2" in capsys.readouterr().err
    assert main(["compare", str(base), str(renamed), "--map", "ref=ref2", "--fail-on-regression"]) == 0
    c = compare_runs(base, renamed, systems={"ref": "ref2"})
    assert c.verdict() == "no regression" and c.primary["system"].tolist() == ["ref2"]
    said = c.differences.set_index("what")
    assert said.loc["system name", "base"] == "ref" and said.loc["system name", "candidate"] == "ref2"
    assert float(c.primary["mean"].iloc[0]) == 0.0
    assert not any("endpoint" in w or "model" in w for w in said.index)  # another port is the same model
    with pytest.raises(ComparisonError, match="names 'nope' \\(base\\)"):
        compare_runs(base, renamed, systems={"nope": "ref2"})


def test_a_folder_that_is_not_a_run_and_another_judge_are_refused_by_name(tmp_path, monkeypatch, capsys):
    assert main(["compare", str(tmp_path), str(tmp_path)]) == EXIT["usage"]
    assert "holds no manifest.json" in capsys.readouterr().err
    base = run_folder(tmp_path, "base", monkeypatch, scripted_judge(), sample=5)
    other = run_folder(tmp_path, "other", monkeypatch, scripted_judge(),
                       sample=5, extra_judge="reason_chars = 300")
    with pytest.raises(ComparisonError, match="judge reason_chars: 400 -> 300.*--allow judge"):
        compare_runs(base, other)
    c = compare_runs(base, other, allow=("judge",))
    assert any("allowed: judge reason_chars differs" in n for n in c.notices)
    two = run_folder(tmp_path, "two", monkeypatch, scripted_judge(), sample=5, metrics='["relevance", "depth"]')
    c = compare_runs(base, two)
    assert set(c.table["metric"]) == {"average", "relevance"} and any("only the shared ones" in n for n in c.notices)
    manifest = json.loads((base / "manifest.json").read_text())
    assert len(manifest["questions_sha256"]) == 64 and len(manifest["rubric_sha256"]) == 64


# --------------------------------------------------------------- the CI recipe


def test_the_ci_recipe_runs_main_then_a_pull_request_and_writes_compare_md(tmp_path):
    """examples/ci/compare.sh as the GitHub workflow calls it: once on main (it keeps the base), once on a pull
    request (it compares and writes the job summary)."""
    recipe = ROOT / "examples" / "ci" / "compare.sh"
    workflow = (ROOT / "examples" / "ci" / "fabnb-compare.yml").read_text()
    assert "examples/ci/compare.sh" in workflow and "FABNB_CACHE_DIR" in workflow
    write_file(tmp_path, windows="[1]", modes='["A"]', metrics='["relevance"]', sample=5)
    summary = tmp_path / "summary.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FABNB_TEST_KEY": "sk-test", "FABNB_EXPERIMENT":
           str(tmp_path / "experiment.toml"), "FABNB_BASE": str(tmp_path / "base-run"),
           "FABNB_CANDIDATE": str(tmp_path / "pr-run"), "FABNB_CACHE_DIR": str(tmp_path / "cache"),
           "GITHUB_STEP_SUMMARY": str(summary), "FABNB": f"{sys.executable} -m fabnb.cli"}
    with StubServer(scripted_judge()) as server:
        env["FABNB_TEST_URL"] = server.base_url
        first = subprocess.run(["bash", str(recipe), "base"], env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        assert (tmp_path / "base-run" / "manifest.json").exists() and not summary.exists()
        second = subprocess.run(["bash", str(recipe), "candidate"], env=env, capture_output=True, text=True,
                                timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    md = (tmp_path / "pr-run" / "compare.md").read_text()
    assert md.startswith("# fabnb compare: ") and "## Gate" in md and summary.read_text() == md


# --------------------------------------------------------------- the static page

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script><b>bold</b>'


def hostile_answers(request: dict, n: int, judge=scripted_judge()):
    """The scripted judge, with every answer carrying HTML that would run if shown as HTML."""
    status, body, headers = judge(request, n)
    if not request.get("response_format"):
        body = completion(HOSTILE + " and an answer.", model=request["model"])
    return status, body, headers


def test_export_writes_a_page_of_script_files_and_refuses_a_folder_that_is_not_a_run(tmp_path, monkeypatch, capsys):
    run = run_folder(tmp_path, "run", monkeypatch, hostile_answers, sample=6, windows="[1, 2]")
    assert main(["export", str(run), "--html", str(tmp_path / "page")]) == 0
    data = tmp_path / "page" / "data"
    assert sorted(p.name for p in data.iterdir()) == ["cells.js", "detail-0000.js", "questions.js", "summary.js"]
    cells = json.loads(re.match(r'FABNB\.add\("cells", (.*)\);\n$', (data / "cells.js").read_text(), re.S).group(1))
    assert len(cells["rows"]) == 12 and cells["metrics"] == ["relevance"]
    assert json.dumps(HOSTILE)[1:-1] in (data / "detail-0000.js").read_text()  # as it is: the page shows it as text
    assert "fetch(" not in (tmp_path / "page" / "index.html").read_text()
    from fabnb.core.records import hold

    with hold(tmp_path / "page", "another export"):  # two exports into one folder: the second is refused
        assert main(["export", str(run), "--html", str(tmp_path / "page")]) == EXIT["usage"]
    assert "in use by process" in capsys.readouterr().err and (data / "cells.js").exists()
    assert main(["export", str(tmp_path), "--html", str(tmp_path / "p2")]) == EXIT["usage"]
    assert "holds neither answers.jsonl nor scores.jsonl" in capsys.readouterr().err


def cells_column(page, name: str) -> list[str]:
    """The shown rows' values of one column of the page's cells table."""
    at = page.locator("table.cells th").all_inner_texts()
    index = [t.split(" ")[0] for t in at].index(name) + 1
    return page.locator(f"table.cells tr.fabnb-row td:nth-child({index})").all_inner_texts()


@pytest.mark.browser
def test_the_static_page_opens_from_file_filters_and_keeps_hostile_text_as_text(tmp_path, monkeypatch):
    from playwright.sync_api import sync_playwright

    from test_browser import _chromium

    base = run_folder(tmp_path, "base", monkeypatch, scripted_judge(), sample=6, windows="[1, 2]")
    lower = scripted_judge(shift=-1, noise=1)
    run = run_folder(tmp_path, "run", monkeypatch, lambda r, n: hostile_answers(r, n, lower), sample=6,
                     windows="[1, 2]")
    assert main(["compare", str(base), str(run)]) == 0
    compared = json.loads((run / "compare.json").read_text())
    worst = compared["items"][0]
    assert worst["d"] < 0
    from fabnb.views.page import export_page

    index = export_page(run, tmp_path / "page", page_cells=5)  # three detail files for twelve cells
    at_2k = sorted(s for s in pd.read_json(run / "scores.jsonl", lines=True).query("context_k == 2")["score"])
    cut = (at_2k[0] + at_2k[-1]) / 2
    assert at_2k[0] < cut < at_2k[-1]
    expected = sum(s >= cut for s in at_2k)
    with sync_playwright() as pw:
        browser = _chromium(pw)
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(index.as_uri())
            page.wait_for_selector("body[data-ready]", timeout=30_000)
            assert page.locator(".count").inner_text().startswith("12 of 12 cells")
            assert page.locator(".verdict").inner_text() == f"verdict: {compared['verdict']}"
            page.locator("tr.fabnb-item").first.click()  # the worst item opens its cell
            page.wait_for_selector("[data-part=detail] .answer", timeout=10_000)
            assert page.locator(".count").inner_text().startswith("1 of 12 cells")
            assert worst["test_id"] in page.locator("[data-part=detail] h3").first.inner_text()
            page.select_option("[data-filter=mode]", "")
            page.fill("[data-filter=text]", "")
            page.select_option("[data-filter=context_k]", "2")
            assert page.locator(".count").inner_text().startswith("6 of 12 cells")
            page.fill("[data-filter=min]", str(cut))
            assert page.locator(".count").inner_text().startswith(f"{expected} of 12 cells")
            assert page.locator("tr.fabnb-row").count() == expected
            page.fill("[data-filter=min]", "")
            page.locator("tr.fabnb-row").last.click()  # its details are in the last file
            page.wait_for_selector("[data-part=detail] .answer", timeout=10_000)
            assert HOSTILE in page.locator("[data-part=detail] .answer").inner_text()
            call = page.locator("[data-part=detail] .call").inner_text()  # the answer's latency, tokens and cost
            assert " s · " in call and "prompt +" in call and " · $0.0000" in call, call  # at the file's [prices]
            assert page.locator("[data-part=detail] img, [data-part=detail] b, [data-part=detail] script").count() == 0
            assert page.evaluate("window.pwned") is None
            assert page.locator("[data-part=detail] .question").inner_text()  # cells.js; the gold: questions.js
            assert page.locator("[data-part=detail] .gold-evidence").count() == 1
            # Sort by a heading (missing values last), then download what is shown as CSV, made in the page.
            page.select_option("[data-filter=context_k]", "")
            column = cells_column(page, "average")
            page.locator("th[data-column=average]").click()
            ascending = [float(v) for v in cells_column(page, "average") if v != "-"]
            assert ascending == sorted(ascending) and len(ascending) > 1
            page.locator("th[data-column=average]").click()
            assert [float(v) for v in cells_column(page, "average") if v != "-"] == sorted(ascending, reverse=True)
            assert sorted(column) == sorted(cells_column(page, "average"))
            with page.expect_download() as info:
                page.locator("button", has_text="download CSV").click()
            table = pd.read_csv(info.value.path())
            assert len(table) == 12 and list(table.columns[:5]) == ["system", "model", "context_k", "mode", "test_id"]
            assert table["average"].dropna().tolist() == sorted(ascending, reverse=True)
            # Two configurations, question by question; a pair opens a's cell.
            page.locator("[data-part=pair] button", has_text="compare").click()
            pairs = page.locator("table.pairs tr.fabnb-item")
            assert pairs.count() == 6
            pairs.first.click()
            assert page.locator(".count").inner_text().startswith("1 of 12 cells")
            # A cell by the page's address, as JupyterLab's viewer opens an item of a comparison.
            key = "|".join(str(worst[k]) for k in ("system", "context_k", "mode", "test_id"))
            page.goto(index.as_uri() + "#cell=" + urllib.parse.quote(key))
            page.wait_for_selector("[data-part=detail] .answer", timeout=10_000)
            assert worst["test_id"] in page.locator("[data-part=detail] h3").first.inner_text()
        finally:
            browser.close()
    assert all(u.startswith(("file://", "blob:file://")) for u in browser.requests), browser.requests
    assert any(u.endswith("detail-0002.js") for u in browser.requests)


@pytest.mark.browser
def test_the_paper_scale_page_opens_from_file_filters_and_asks_no_other_host(tmp_path, monkeypatch):
    """The stores of benchmarks/bench_explorer.py (8,800 cells, 52,800 scores), one answer made hostile, exported
    and opened from file:// under the fixture that records every request; the times are bench_page.py's."""
    from playwright.sync_api import sync_playwright

    from fabnb.views.page import export_page

    from test_browser import _chromium

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from bench_explorer import write_stores

    run = tmp_path / "run"
    write_stores(run)
    answers = run / "answers.jsonl"
    with answers.open() as f:
        first = json.loads(f.readline())
        rest = f.read()
    answers.write_text(json.dumps({**first, "answer": HOSTILE}) + "\n" + rest)
    ids = json.loads((run / "manifest.json").read_text())["question_ids"]
    questions = pd.DataFrame({"test_id": ids, "question": [f"question {t}" for t in ids]})
    index = export_page(run, tmp_path / "page", questions=questions)
    with sync_playwright() as pw:
        browser = _chromium(pw)
        try:
            page = browser.new_page()
            page.goto(index.as_uri())
            page.wait_for_selector("body[data-ready]", timeout=60_000)
            assert page.locator(".count").inner_text().startswith("8800 of 8800 cells")
            page.select_option("[data-filter=system]", "system-2")
            assert page.locator(".count").inner_text().startswith("2200 of 8800 cells")
            page.select_option("[data-filter=system]", "")
            page.fill("[data-filter=text]", "Q000")
            assert page.locator(".count").inner_text().startswith("44 of 8800 cells")
            page.locator("tr.fabnb-row").first.click()  # system-0, 4K, Q000: the hostile answer
            page.wait_for_selector("[data-part=detail] .answer", timeout=30_000)
            assert page.locator("[data-part=detail] .answer").inner_text() == HOSTILE
            assert page.evaluate("window.pwned") is None and page.locator("[data-part=detail] img").count() == 0
        finally:
            browser.close()
    assert browser.requests and all(u.startswith("file://") for u in browser.requests)


def test_a_cells_detail_has_its_answers_latency_tokens_and_cost_at_the_runs_prices(tmp_path, monkeypatch):
    """Seen: the viewer showed no per-cell latency or cost."""
    from fabnb.views.explorer import Explorer
    from fabnb.views.page import page_data

    key = {"system": "s", "model": "gpt-4o-mini", "context_k": 4.0, "mode": "A", "test_id": "Q1"}
    answers = pd.DataFrame([{**key, "status": "ok", "answer": "42", "latency_s": 1.5, "prompt_tokens": 1000,
                             "completion_tokens": 100}])
    scores = pd.DataFrame([{**key, "metric": "depth", "replicate": 0, "status": "ok", "score": 0.7, "reason": "."}])
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "x", "prices": {
        "gpt-4o-mini": {"input": 1.0, "output": 10.0, "source": "the run's file"}}}))
    data = page_data(Explorer(answers, scores, pd.DataFrame({"test_id": ["Q1"], "question": ["?"]})), tmp_path)
    call = data.part("detail-0000")[0]["call"]
    assert call == {"latency_s": 1.5, "prompt_tokens": 1000, "completion_tokens": 100,
                    "cost_usd": pytest.approx((1000 * 1.0 + 100 * 10.0) / 1e6)}
    # JupyterLab's viewer writes each detail file when a cell asks for it (detail_file): the same cost there.
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "answers.jsonl").write_text(answers.to_json(orient="records", lines=True))
    (tmp_path / "scores.jsonl").write_text(scores.to_json(orient="records", lines=True))
    from fabnb.views.page import _read_script, detail_file, fresh_page

    explorer = Explorer(answers, scores, pd.DataFrame({"test_id": ["Q1"], "question": ["?"]}))
    fresh_page(tmp_path, details=False, explorer=explorer)
    lazy = _read_script(detail_file(tmp_path, "detail-0000", explorer))
    assert lazy[0]["call"] == call


def test_dual_mode_attribution_labels_each_question_by_its_rule():
    """Issue 51, as seen: B - A was computed, but nothing labelled a question a retrieval or a generation failure
    (the rule was prose in notebook 06)."""
    import pandas as pd

    from fabnb.analysis.comparison import dual_mode_attribution, dual_mode_delta

    scores = pd.DataFrame({"model": "m", "context_k": 4.0, "metric": "average",
                           "test_id": ["r", "r", "g", "g", "n", "n", "x", "x", "u"],
                           "mode": ["A", "B", "A", "B", "A", "B", "A", "B", "A"],
                           "score": [0.2, 0.8, 0.3, 0.35, 0.9, 0.85, 0.45, 0.52, 0.4]})
    out = dual_mode_attribution(dual_mode_delta(scores)).set_index("test_id")["attribution"]
    assert out.to_dict() == {"r": "retrieval", "g": "generation", "n": "neither", "x": "mixed", "u": "unpaired"}
    wider = dual_mode_attribution(dual_mode_delta(scores), margin=0.05).set_index("test_id")["attribution"]
    assert wider["x"] == "retrieval"  # the margin is a setting: the same gap passes a lower one


def test_the_retriever_ablation_claims_a_real_difference_and_not_a_tie():
    from fabnb.analysis.comparison import retriever_ablation

    rng = np.random.default_rng(3)
    base = {f"q{i}": rng.uniform(0.3, 0.7) for i in range(30)}
    rows = [{"system": s, "context_k": k, "test_id": q, "metric": "depth",
             "score": min(1.0, v + (0.15 if s == "dense" else 0.0) + rng.normal(0, 0.05))}
            for s in ("sparse", "dense", "same") for k in (4.0, 8.0) for q, v in base.items()]
    t = retriever_ablation(pd.DataFrame(rows), {"sparse": "bm25", "dense": "minilm", "same": "tfidf"},
                           metric="depth").set_index(["system", "context_k"])
    assert t.loc[("dense", 4.0), "claimed"] and t.loc[("dense", 8.0), "claimed"]
    assert not t.loc[("same", 4.0), "claimed"] and not t.loc[("same", 8.0), "claimed"]
    assert np.isnan(t.loc[("sparse", 4.0), "diff"]) and t.loc[("dense", 4.0), "diff"] == pytest.approx(0.15, abs=0.05)
    assert retriever_ablation(pd.DataFrame(rows), {"dense": "minilm"}, metric="depth").empty  # no base: no table
