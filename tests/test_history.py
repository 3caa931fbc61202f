"""``fabnb history``: a folder of runs as each metric's trend with intervals (issue 53 item 6)."""

from __future__ import annotations

import pandas as pd
import pytest
from test_comparison import run_folder, scripted_judge

from fabnb.cli import main
from fabnb.core.exits import EXIT
from fabnb.experiment.comparison import ComparisonError
from fabnb.experiment.history import HISTORY_COLUMNS, run_history


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Three scripted runs, one after the other: a base, a worse judge on the same questions, then other
    questions."""
    (tmp_path / "runs").mkdir()
    run_folder(tmp_path / "runs", "a", monkeypatch, scripted_judge(), sample=6)
    run_folder(tmp_path / "runs", "b", monkeypatch, scripted_judge(shift=-2), sample=6)
    run_folder(tmp_path / "runs", "c", monkeypatch, scripted_judge(), sample=4)
    return tmp_path / "runs"


def test_the_history_orders_runs_pools_them_and_marks_a_change_of_questions(runs, capsys):
    table = run_history(runs)
    assert list(table.columns) == HISTORY_COLUMNS
    assert sorted(set(table["metric"])) == ["average", "relevance"] and len(table) == 6
    average = table[table["metric"] == "average"].set_index("order")
    assert [r.split("/")[-2] for r in average["run"]] == ["a", "b", "c"]  # in the order they ended
    assert average.loc[1, "mean"] == pytest.approx(average.loc[0, "mean"] - 0.2, abs=0.05)  # the judge's shift
    assert (average["n"].tolist() == [6, 6, 4]) and (average["ci_low"] < average["mean"]).all()
    assert average["comparable"].tolist() == [True, True, False] and average.loc[0, "changed"] == ""
    assert "question ids" in average.loc[2, "changed"]

    assert main(["history", str(runs)]) == EXIT["ok"]
    said = capsys.readouterr().out
    assert "(not comparable with the run before)" in said and "**question ids" in said
    assert (runs / "history.png").stat().st_size > 5000
    assert pd.read_csv(runs / "history.csv").shape == table.shape
    assert main(["history", str(runs), "--metric", "fluency"]) == EXIT["usage"]
    assert "--metric 'fluency' is not scored in these runs" in capsys.readouterr().err


def test_one_run_is_no_history_and_is_said_so(runs, capsys):
    with pytest.raises(ComparisonError, match="holds 1 run folders with scores; a history needs two or more"):
        run_history(runs / "a")
    assert main(["history", str(runs / "a")]) == EXIT["usage"]
    assert not (runs / "a" / "history.png").exists()
