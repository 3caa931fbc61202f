"""The judge against experts (fabnb.judge.calibration): a sample of a run's judged answers, scored by two raters
through the rating app's model, agreement that shows a known bias, and corrected means that cover the truth.

The run is a folder of stores as ``fabnb run`` writes them, made by a scripted judge whose bias is known: each cell
has a true score t (0-10), the experts score t plus -1, 0 or +1, the judge scores t + 2 plus -1, 0 or +1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fabnb.cli import main
from fabnb.core.exits import EXIT
from fabnb.judge.calibration import (
    CalibrationError,
    answer_items,
    calibrate,
    cell_item_id,
    draw_sample,
    judged_cells,
    read_calibration,
    write_study,
)
from fabnb.qa.rating import RatingError, RatingStore
from fabnb.qa.rating_app import RatingApp
from fabnb.views.widgets import RatingPanel

KEYS = ["system", "model", "context_k", "mode", "test_id"]


def biased_run(folder: Path, seed: int = 0, questions: int = 40, bias: int = 2, verbose: bool = False,
               own: str = "") -> pd.DataFrame:
    """A run folder of 3 systems x 2 windows x ``questions`` cells judged on depth by a judge ``bias`` points
    (of 10) above the truth (``verbose``: answers of 0-59 extra words, and 3 more points for the longer half;
    ``own``: this system shares the judge's model, and gets 3 more points); returns the truth per cell."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    truth = []
    with open(folder / "answers.jsonl", "w") as a, open(folder / "scores.jsonl", "w") as s:
        for system in ("s1", "s2", "s3"):
            for k in (4.0, 8.0):
                for i in range(questions):
                    key = {"system": system, "model": "m", "context_k": k, "mode": "A", "test_id": f"Q{i:03d}"}
                    t = int(rng.integers(2, 9))
                    extra = int(rng.integers(0, 60)) if verbose else 0
                    favour = (3 if extra >= 30 else 0) + (3 if system == own else 0)
                    raw = int(np.clip(t + bias + rng.integers(-1, 2) + favour, 0, 10))
                    a.write(json.dumps({**key, "status": "ok", "answer": f"An answer of quality {t}." + " more" * extra,
                                        "sources": [{"doc_id": "D1", "text": "A passage."}]}) + "\n")
                    s.write(json.dumps({**key, "metric": "depth", "replicate": 0, "status": "ok",
                                        "score": raw / 10, "raw_score": raw, "reason": "Scripted."}) + "\n")
                    truth.append({**key, "t": t})
    ids = [f"Q{i:03d}" for i in range(questions)]
    endpoints = {s: {"model": "judge-model" if s == own else f"model-{s}"} for s in ("s1", "s2", "s3")}
    (folder / "manifest.json").write_text(json.dumps({"name": "biased", "question_ids": ids,
                                                      "endpoints": {**endpoints, "judge": {"model": "judge-model"}}}))
    return pd.DataFrame(truth)


def questions_of(truth: pd.DataFrame) -> pd.DataFrame:
    ids = sorted(set(truth["test_id"]))
    return pd.DataFrame({"test_id": ids, "question": [f"What of {i}?" for i in ids], "ground_truth_answer": "x",
                         "test_type": ["robustness", "multi_hop"] * (len(ids) // 2), "question_format": "SUBJECTIVE"})


def study(folder: Path, truth: pd.DataFrame, n: int, design: str = "uniform", seed: int = 3) -> pd.DataFrame:
    from fabnb.core.records import ResultsStore
    from fabnb.judge import score_store

    scores = score_store(folder / "scores.jsonl").frame()
    questions = questions_of(truth)
    sample = draw_sample(scores, n, seed=seed, design=design, questions=questions)
    items = answer_items(ResultsStore(folder / "answers.jsonl").frame(), questions, sample, ["depth"])
    write_study(folder, sample, items, ["ana", "ben"], ["depth"], seed=seed,
                population=judged_cells(scores, questions))
    return sample


def rate_as_experts(folder: Path, truth: pd.DataFrame, raters=("ana", "ben"), stop_after: dict | None = None,
                    seed: int = 7) -> None:
    """Each rater scores their assigned answers through the app's model: the truth plus -1, 0 or +1."""
    rng = np.random.default_rng(seed)
    t = {cell_item_id(k): v for *k, v in truth[[*KEYS, "t"]].itertuples(index=False, name=None)}
    app = RatingApp.from_study(folder)
    for rater in raters:
        session = app.start(rater)
        for i, item in enumerate(session.order):
            if stop_after and i >= stop_after.get(rater, len(session.order)):
                break
            session.rate(item, depth=int(np.clip(t[item] + rng.integers(-1, 2), 0, 10)))


def test_the_loop_shows_a_known_bias_and_the_corrected_mean_covers_the_truth_where_the_judges_does_not(tmp_path):
    run = tmp_path / "run"
    truth = biased_run(run)
    sample = study(run, truth, 60)
    assert len(sample) == 60 and set(sample["weight"]) == {240 / 60}
    rate_as_experts(run, truth)
    result = calibrate(run, n_boot=300)
    agree = pd.DataFrame(result["agreement"]).set_index("statistic")
    judge_scores = pd.read_json(run / "scores.jsonl", lines=True)["raw_score"]
    true_bias = float((judge_scores.to_numpy() - truth["t"].to_numpy()).mean() / 10)
    assert agree.at["bias", "ci_low"] <= true_bias <= agree.at["bias", "ci_high"] and agree.at["bias", "ci_low"] > 0.1
    assert agree.at["spearman", "value"] > 0.5 and agree.at["alpha_ordinal", "n_raters"] == 2
    corrected = pd.DataFrame(result["corrected_means"]).iloc[0]
    truth_mean = truth["t"].mean() / 10
    assert corrected["ci_low"] <= truth_mean <= corrected["ci_high"]
    assert not corrected["judge_ci_low"] <= truth_mean <= corrected["judge_ci_high"]  # the judge's own misses it
    assert corrected["n_cells"] == 240 and corrected["n_rated"] == 60
    assert result["usable_alone"] is False and "bias interval" in result["verdicts"]["depth"]["why"]
    assert read_calibration(run)["usable_alone"] is False
    md = (run / "calibration" / "calibration.md").read_text()
    assert "- **depth**: not to be used alone (the bias interval" in md and "Prediction-powered means" in md
    from fabnb.views.page import export_page

    page = export_page(run, tmp_path / "page", questions=questions_of(truth))
    assert '"usable_alone": false' in (page.parent / "data" / "summary.js").read_text()
    from fabnb.jupyter.api import Results

    said = Results(tmp_path).summary("run")["notes"]  # what JupyterLab's results viewer shows above the scores
    assert said[-1].startswith("The judge against experts on depth (60 answers, ana, ben): not to be used alone")


def test_bad_scores_a_second_score_a_rater_who_leaves_and_a_run_that_grew(tmp_path):
    run = tmp_path / "run"
    truth = biased_run(run, questions=20)
    study(run, truth, 30)
    session = RatingApp.from_study(run).start("ana")
    first = session.order[0]
    with pytest.raises(RatingError, match="depth = 11 is not a whole number from 0 to 10; nothing was saved"):
        session.rate(first, depth=11)
    with pytest.raises(RatingError, match=r"unknown dimension\(s\) \['factuality'\] in this session; rate \['depth'\]"):
        session.rate(first, factuality=5)  # a metric the study did not choose
    session.rate(first, depth=3)
    session.rate(first, depth=6)  # a second score of one answer: the latest wins
    rated = RatingStore(run / "calibration" / "ratings").ratings(kind="answer")
    assert rated.query("item_id == @first")["score"].tolist() == [6]
    # ben leaves half-way: his answers count where he scored them, the rest rest on ana's alone.
    rate_as_experts(run, truth, stop_after={"ben": 10})
    with open(run / "scores.jsonl", "a") as s:  # the run grows after the draw: a new window
        s.write(json.dumps({"system": "s1", "model": "m", "context_k": 16.0, "mode": "A", "test_id": "Q000",
                            "metric": "depth", "replicate": 0, "status": "ok", "score": 0.9}) + "\n")
    result = calibrate(run, n_boot=100)
    assert result["cells_judged_after_the_draw"] == 1 and result["corrected_means"][0]["n_cells"] == 120
    assert result["n_rated"] == 30
    with pytest.raises(CalibrationError, match="already holds ratings by ana, ben"):
        study(run, truth, 10)
    from fabnb.core.records import HeldError, hold

    fresh = tmp_path / "fresh"
    fresh_truth = biased_run(fresh, questions=10)
    (fresh / "calibration").mkdir()
    with hold(fresh / "calibration", "another draw"), pytest.raises(HeldError, match="in use by process"):
        study(fresh, fresh_truth, 6)  # two draws at once: the second is refused, the first's files stay whole


def test_a_stratified_sample_balances_strata_with_weights_and_refuses_corrected_means(tmp_path):
    run = tmp_path / "run"
    truth = biased_run(run, questions=20)
    sample = study(run, truth, 36, design="stratified")
    counts = sample.groupby("stratum").size()
    assert counts.max() - counts.min() <= 1 or (sample.groupby("stratum")["weight"].min() >= 1).all()
    cells = judged_cells(pd.read_json(run / "scores.jsonl", lines=True).assign(status="ok"), questions_of(truth))
    assert abs(sample["weight"].sum() - len(cells)) / len(cells) < 0.35  # the weights stand for the population
    rate_as_experts(run, truth)
    result = calibrate(run, n_boot=100)
    assert result["corrected_means"] is None and result["design"] == "stratified"


def test_the_panel_shows_the_answer_and_rubric_blind_and_scores_ten_with_a_key(tmp_path):
    run = tmp_path / "run"
    truth = biased_run(run, questions=10)
    study(run, truth, 6)
    panel = RatingPanel(RatingApp.from_study(run).start("ana"))
    assert panel.scale == list(range(0, 11)) and [d["name"] for d in panel.dimensions] == ["depth"]
    shown = panel.item
    assert shown["answer"].startswith("An answer of quality") and "depth (subjective)" in shown["rubric"]
    assert not {"system", "model", "score", "raw_score"} & set(shown) and "s1" not in json.dumps(shown)
    panel.handle({"action": "rate", "dimension": "depth", "value": 10})
    assert RatingStore(run / "calibration" / "ratings").ratings(kind="answer")["score"].tolist() == [10]


def test_fabnb_rate_from_draws_the_study_and_compare_reads_its_calibration(tmp_path, capsys):
    run = tmp_path / "run"
    truth = biased_run(run, questions=10)
    assert main(["rate", "--from", str(run), "--sample", "12", "--raters", "ana"]) == EXIT["usage"]
    assert "two or more raters" in capsys.readouterr().err
    assert main(["rate", "--from", str(run), "--sample", "12", "--raters", "ana,ben", "--metrics", "nope"]) == 2
    assert "metrics ['nope'] were not judged" in capsys.readouterr().err
    assert main(["rate", "--from", str(run), "--sample", "12", "--raters", "ana,ben"]) == 0
    assert "drew 12 of the run's judged answers" in capsys.readouterr().out
    assert len(pd.read_csv(run / "calibration" / "sample.csv")) == 12
    assert RatingApp.from_study(run).raters_with_manifest() == ["ana", "ben"]
    assert main(["rate", "--from", str(run)]) == 0
    assert "no answer scored yet" in capsys.readouterr().out
    rate_as_experts(run, truth)
    assert main(["rate", "--from", str(run)]) == 0
    out = capsys.readouterr().out
    assert "ana" in out and "depth                bias" in out and "depth: not alone (the bias interval" in out
    assert read_calibration(run)["n_rated"] == 12
    from fabnb.experiment.comparison import _calibration_notices

    assert _calibration_notices(run, run, False) == [
        "the judge of the base and the candidate run was calibrated and is outside the gate "
        "(calibration/calibration.json): read its differences beside the experts' corrected means."]


@pytest.mark.browser
def test_an_expert_scores_answers_in_the_served_app_in_a_real_browser(tmp_path):
    """``fabnb rate --serve --from RUN_DIR``: the name, then the answers, scored 10 (key t) and 7; hostile
    question text stays text; the scores are on disk as kind "answer"."""
    from playwright.sync_api import sync_playwright

    from test_browser import HOSTILE, _chromium, _fabnb_rate_serve, _rate_in_app

    run = tmp_path / "run"
    truth = biased_run(run, questions=6)
    from fabnb.core.records import ResultsStore
    from fabnb.judge import score_store

    questions = questions_of(truth).assign(question=lambda f: HOSTILE + f["question"])
    scores = score_store(run / "scores.jsonl").frame()
    sample = draw_sample(scores, 4, seed=2, questions=questions)
    items = answer_items(ResultsStore(run / "answers.jsonl").frame(), questions, sample, ["depth"])
    write_study(run, sample, items, ["ana", "ben"], ["depth"], population=judged_cells(scores, questions))
    with _fabnb_rate_serve(tmp_path, "--from", str(run)) as line:
        url = line.split("Rating app: ", 1)[1].split()[0]
        with sync_playwright() as pw:
            browser = _chromium(pw)
            try:
                rated = _rate_in_app(browser.new_page(), url, "ana", ["t", "7"])
            finally:
                browser.close()
    stored = RatingStore(run / "calibration" / "ratings").ratings(kind="answer").set_index("item_id")["score"]
    assert stored.to_dict() == {rated[0]: 10, rated[1]: 7}


def test_verbosity_shows_a_judge_that_favours_long_answers_beside_experts_who_do_not(tmp_path):
    run = tmp_path / "run"
    truth = biased_run(run, questions=30, verbose=True, bias=0)
    study(run, truth, 80)
    rate_as_experts(run, truth)
    v = pd.DataFrame(calibrate(run, n_boot=50)["verbosity"]).set_index("scorer")
    assert v.at["judge", "ci_low"] > 0.3 and v.at["experts", "ci_low"] < 0 < v.at["experts", "ci_high"]
    assert v.at["judge", "n_items"] == 80


def test_self_preference_shows_a_judge_that_favours_its_own_models_answers(tmp_path):
    run = tmp_path / "run"
    truth = biased_run(run, questions=30, bias=0, own="s2")
    study(run, truth, 90)
    rate_as_experts(run, truth)
    result = calibrate(run, n_boot=50)
    assert result["judged_by_itself"] == ["s2"]
    p = result["self_preference"][0]
    assert p["n_own"] + p["n_other"] == 90 and p["ci_low"] > 0.15 and p["bias_own"] > p["bias_other"]
    assert "Self-preference: the bias on the answers of s2" in (run / "calibration" / "calibration.md").read_text()
    plain = tmp_path / "plain"
    plain_truth = biased_run(plain, questions=10)
    study(plain, plain_truth, 12)
    rate_as_experts(plain, plain_truth)
    assert calibrate(plain, n_boot=20)["self_preference"] is None  # no system shares the judge's model
