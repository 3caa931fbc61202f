import pandas as pd
import pytest

from fabnb.core.schema import METRICS
from fabnb.core.scores import ScoreError, check_scores, metric_sweep, read_scores, require_models, with_average

from conftest import long_frame


def test_clean_frame_gets_float_dtypes_and_is_a_copy(six):
    six["score"] = six["score"].astype(str)
    out = check_scores(six)
    assert out["score"].dtype == float
    assert six["score"].dtype == object or str(six["score"].dtype).startswith("str")  # input untouched


def test_missing_column_names_what_is_needed():
    with pytest.raises(ScoreError, match=r"missing column\(s\) \['score'\]"):
        check_scores(pd.DataFrame({"model": ["m"], "context_k": [4], "metric": ["depth"]}))


def test_unknown_metric_names_file_line_and_column(tmp_path, six):
    six.loc[5, "metric"] = "fluency"
    path = tmp_path / "runs.csv"
    six.to_csv(path, index=False)
    with pytest.raises(ScoreError, match=r"runs.csv, line 7, column 'metric': unknown metric 'fluency'"):
        read_scores(path)


def test_non_numeric_score_names_row_and_value(six):
    six = six.astype({"score": object})
    six.loc[3, "score"] = "n/a"
    with pytest.raises(ScoreError, match=r"row 3, column 'score': 'n/a' is not a number"):
        check_scores(six)


def test_score_outside_unit_interval(six):
    six.loc[2, "score"] = 7.5
    with pytest.raises(ScoreError, match=r"row 2, column 'score': 7.5 is outside \[0.0, 1.0\]"):
        check_scores(six)


def test_duplicated_configuration_lists_rows(six):
    dup = pd.concat([six, six.iloc[[0]]], ignore_index=True)
    with pytest.raises(ScoreError, match=r"duplicated configuration.*row 0; .*row 48"):
        check_scores(dup)


def test_missing_metric_names_the_configuration(six):
    gone = six[~((six.model == "b") & (six.context_k == 8) & (six.metric == "relevance"))]
    with pytest.raises(ScoreError, match=r"model=b, context_k=8.0.*lacks metric\(s\) \['relevance'\]"):
        check_scores(gone)
    assert len(check_scores(gone, require_all_metrics=False)) == len(gone)


def test_unreadable_and_missing_files(tmp_path):
    with pytest.raises(ScoreError, match="no such file"):
        read_scores(tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ScoreError, match="empty.csv: not a readable CSV"):
        read_scores(empty)


def test_with_average_adds_mean_of_six_only_where_missing(six):
    out = with_average(six)
    avg = out[(out.metric == "average") & (out.model == "a") & (out.context_k == 4)].score.item()
    expect = six[(six.model == "a") & (six.context_k == 4)].score.mean()
    assert avg == pytest.approx(expect)
    again = with_average(out)
    assert len(again) == len(out)


def test_sweep_computes_average_and_refuses_mixed_systems(six):
    s = metric_sweep(six)
    assert list(s.context_k[s.model == "a"]) == [4, 8, 16, 32]
    mixed = pd.concat([six, six.assign(system="T")], ignore_index=True)
    with pytest.raises(ScoreError, match="Filter to one system"):
        metric_sweep(mixed, "depth")


def test_require_models_lists_known_models():
    df = long_frame({"x": {4: 0.5}})
    with pytest.raises(ScoreError, match=r"unknown model 'y'; this frame has \['x'\]"):
        require_models(df, "y")


def test_all_metric_names_are_fab_bench_names():
    assert METRICS == ("factuality", "depth", "completeness", "relevance", "context_utilization", "support_quality")
