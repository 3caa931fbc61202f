"""The summary's sections on the windows (fabnb.experiment.windows) and the position sweep in an experiment file."""

from __future__ import annotations

import pandas as pd
import pytest

from fabnb.experiment import Experiment, ExperimentError, plan, run_experiment, stores

from stub_openai import StubServer
from test_experiment import judge_or_echo, quiet, write_file  # noqa: F401 - the scripted server's reply

SWEEP = '["A"]\npositions = [0, 50, 100]\nposition_sample = 2'


@pytest.fixture
def stub(monkeypatch, tmp_path):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
        yield server


def test_a_position_sweep_is_planned_asked_judged_and_reported_on_its_sample(tmp_path, stub):
    path = write_file(tmp_path, sample=4, modes=SWEEP, metrics='["relevance", "factuality"]',
                      report='figures = ["png"]')
    exp = Experiment.from_file(path)
    assert exp.modes == ("A", "P0", "P50", "P100")
    p = plan(exp, probe=False).table.set_index("stage")
    # 4 questions x 2 windows in mode A, and the sweep's 2 questions x 2 windows x 3 depths: the multiplication shown
    assert p.loc["answers", "calls"] == 4 * 2 + 2 * 2 * 3 and p.loc["judge", "calls"] == 20 * 2
    assert "position sweep: 2 questions x 3 depths (P0, P50, P100) x 2 windows = 12 answers per system" in \
        plan(exp, probe=False).render()
    run = run_experiment(exp, progress=False, probe=False, echo=quiet)
    t = run.tally.set_index("stage")
    assert run.status == "finished" and t.loc["answers", "planned"] == 20 and t.loc["answers", "ok"] == 20
    answers = stores(exp.output)[0].frame()
    swept = answers[answers["mode"].str.startswith("P")]
    sample = set(exp.asked_in("P0", exp.questions())["test_id"])
    assert swept["test_id"].nunique() == 2 and set(swept["test_id"]) == sample
    assert (swept[swept["mode"] == "P0"]["evidence_offset"] == 0).all()
    assert (swept[swept["mode"] == "P100"]["evidence_depth"] == 1.0).all()
    summary = (exp.output / "summary.md").read_text()
    section = summary.split("## Position of the gold passage")[1].split("\n## ")[0]
    assert "| 0%  " in section and "| 100%  " in section and "0.700, no spread (n = 2)" in section
    assert "not tested (needs two depths and 5 questions" in section  # two questions: no test, and it says so
    assert (exp.output / "report" / "figures" / "position.png").exists()
    assert "![Score against the gold passage's depth](report/figures/position.png)" in section
    # The one renderer (JupyterLab's viewer, fabnb explore, the static page) shows it with the report's figures.
    from fabnb.views.explorer import Explorer
    from fabnb.views.page import page_data

    shown = page_data(Explorer.from_folder(exp.output), exp.output).summary
    assert "position.png" in [f["name"] for f in shown["figures"]]
    # ... and the section's table, as the summary prints it (report/windows.json).
    table = next(t for t in shown["sections"] if t["title"].startswith("Position of the gold passage"))
    assert table["columns"] == ["system", "context_k", "0%", "50%", "100%"]
    assert table["rows"][0]["0%"] == "0.700, no spread (n = 2)"
    # The sweep's modes stay out of the curve analyses of mode A: report/ is mode A's.
    assert "(modes A)." in (exp.output / "report" / "report.md").read_text()
    recall = summary.split("## Retrieval by window")[1].split("\n## ")[0]
    assert "| A " in recall and "| P0 " not in recall  # a placed passage is not a retrieval
    before = len(stub.requests)
    again = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert len(stub.requests) == before and again.plan.table["todo"].sum() == 0


def test_a_position_sweep_needs_systems_whose_context_fabnb_builds(tmp_path):
    with pytest.raises(ExperimentError, match="positions.*build their own"):
        Experiment.from_dict({"name": "x", "output": str(tmp_path / "o"), "contexts": {"positions": [0, 100]},
                              "systems": [{"name": "s", "kind": "http", "base_url": "http://h/ask",
                                           "settings": {"request": {"q": "{question}"}, "answer_path": "answer"}}]})
    with pytest.raises(ExperimentError, match=r"positions = \[0, 150\] is out of range.*0 first, 100 last"):
        Experiment.from_dict({"name": "x", "output": "o", "contexts": {"positions": [0, 150]},
                              "systems": [{"name": "s", "model": "embedded"}]})
    with pytest.raises(ExperimentError, match="positions.* with \\[tests\\]"):
        Experiment.from_dict({"name": "x", "output": "o", "contexts": {"positions": [0, 100]}, "tests": {},
                              "corpus": {"source": "fab-bench-evidence"},
                              "systems": [{"name": "s", "model": "embedded"}]})
    with pytest.raises(ExperimentError, match="position_sample.*with positions set"):
        Experiment.from_dict({"name": "x", "output": "o", "contexts": {"position_sample": 3},
                              "systems": [{"name": "s", "model": "embedded"}]})


def test_the_reference_check_has_intervals_and_sits_beside_the_judged_factuality(tmp_path, stub):
    path = write_file(tmp_path, sample=12, windows="[1]", modes='["B"]', metrics='["factuality"]')
    exp = Experiment.from_file(path)
    run_experiment(exp, progress=False, probe=False, echo=quiet)
    ref = pd.read_csv(exp.output / "reference.csv")
    assert len(ref), "the sample has objective questions"
    summary = (exp.output / "summary.md").read_text()
    section = summary.split("## Reference check of objective answers")[1].split("\n## ")[0]
    assert "(n = " in section and "[" in section  # every share with its interval and n
    beside = section.split("### Beside the judged factuality")[1]
    assert "0.700" in beside  # the scripted judge's 7 of 10 on every cell, with no spread said as such
    judge = section.split("### The judge against the check")[1]
    assert "the judge passes (factuality >= 0.5)" in judge and "Cohen's kappa" in judge and "nan" not in judge


def test_scaling_by_type_labels_each_types_curve_and_draws_those_with_enough_questions(tmp_path):
    """Future work (3): a type that grows with the window and one that does not are told apart, each with its fit
    and effective window; a type below the questions a curve needs is named, not drawn."""
    import numpy as np

    from fabnb.experiment.windows import window_sections

    rng = np.random.default_rng(0)
    types = ["robustness", "multi_hop"] * 20 + ["generation_quality"] * 3
    questions = pd.DataFrame({"test_id": [f"q{i}" for i in range(len(types))], "test_type": types})
    rows = [{"system": "s", "model": "m", "context_k": float(k), "mode": "A", "test_id": f"q{i}", "metric": "depth",
             "score": 0.55 + (0.08 * np.log2(k) if t == "multi_hop" else 0.0) + rng.normal(0, 0.02)}
            for k in (1, 2, 4, 8, 16) for i, t in enumerate(types)]
    exp = Experiment.from_dict({"name": "d", "output": str(tmp_path), "contexts": {"windows": [1, 2, 4, 8, 16]},
                                "systems": [{"name": "s", "model": "embedded"}], "report": {"figures": ["png"]}})
    lines = "\n".join(window_sections(exp, tmp_path, pd.DataFrame(), questions, pd.DataFrame(rows)))
    section = lines.split("## Scaling by test type")[1]
    table = {line.split("|")[3].strip(): line for line in section.splitlines() if line.startswith("| s ")}
    assert "logarithmic growth" in table["multi_hop"] and "flat (no context effect)" in table["robustness"]
    few = table["generation_quality"]
    assert "too few questions" in few and few.split("|")[4].strip() == "3"
    assert "16K (beyond the sweep)" in table["robustness"]
    assert (tmp_path / "report" / "figures" / "scaling_by_type.png").exists()
