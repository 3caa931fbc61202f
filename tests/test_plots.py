import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from fabnb import analysis as A
from fabnb import plots, published


@pytest.fixture(autouse=True)
def no_show_no_save(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("plot functions must not show or save")
    monkeypatch.setattr(plt, "show", forbidden)
    monkeypatch.setattr(plt, "savefig", forbidden)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", forbidden)
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def sweeps():
    return published.context_sweeps()


def test_scaling_draws_points_and_fit_on_given_axes(sweeps):
    fig, ax = plt.subplots()
    out = plots.plot_scaling(sweeps, models=["Qwen-Plus"], ax=ax)
    assert out is ax
    lines = ax.get_lines()
    assert len(lines[0].get_xdata()) == 11  # the observed points
    assert len(lines[1].get_xdata()) == 200  # the fitted curve
    assert "R²=0.930" in ax.get_legend().get_texts()[0].get_text()


def test_scaling_without_enough_points_draws_no_fit():
    import pandas as pd
    df = pd.DataFrame({"model": "m", "context_k": [4.0, 8.0], "metric": "average", "score": [0.4, 0.5]})
    ax = plots.plot_scaling(df)
    assert "fit" not in ax.get_legend().get_texts()[0].get_text()


def test_breakdown_has_six_metrics_per_model(sweeps):
    ax = plots.plot_breakdown(sweeps, 4, models=list(published.PRIMARY_MODELS))
    assert len(ax.patches) == 18
    assert ax.get_title() == "Metric breakdown at 4K context"
    with pytest.raises(ValueError, match="no metric scores at 5K"):
        plots.plot_breakdown(sweeps, 5)


def test_deltas_heatmap_annotations_match_figure_6(sweeps):
    ax = plots.plot_deltas(A.dilution(sweeps, 28, 32), models=["Gemini-2.5-Flash"])
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["-0.032", "-0.043", "-0.042", "-0.054", "-0.018", "-0.051"]


def test_frameworks_and_radar_and_correlations():
    ax = plots.plot_frameworks(published.frameworks())
    assert len(ax.patches) == 18
    profile = A.metric_profile(published.context_sweeps(), 18)
    radar = plots.plot_radar(profile)
    assert radar.name == "polar" and len(radar.get_legend().get_texts()) == 3  # Qwen-2.5-72B has no 18K point
    fig, flat = plt.subplots()
    with pytest.raises(ValueError, match="polar Axes"):
        plots.plot_radar(profile, ax=flat)
    heat = plots.plot_correlations(published.correlations())
    assert "0.96" in [t.get_text() for t in heat.texts]


def test_generation_trajectory():
    import pandas as pd
    attempts = pd.DataFrame({"context_id": ["a", "a", "b"], "temperature": [0.4, 0.48, 0.3],
                             "threshold": [0.7, 0.65, 0.7], "outcome": ["failed", "accepted", "accepted"]})
    ax = plots.plot_generation(attempts)
    assert len(ax.collections) == 2 and len(ax.collections[1].get_offsets()) == 1  # one failure marked
    assert len(ax.get_lines()) == 3  # temperature, threshold, one context separator


def test_failures_stack_types_and_show_intervals():
    import pandas as pd
    table = pd.DataFrame({"configuration": ["a x bm25", "a x tfidf", "empty"], "tests": [10, 4, 0],
                          "failure_rate": [0.5, 0.25, float("nan")], "ci_low": [0.24, 0.05, float("nan")],
                          "ci_high": [0.76, 0.7, float("nan")], "answer_failures": [2, 1, 0],
                          "retrieval_misses": [2, 0, 0], "refusals_missed": [1, 0, 0]})
    fig, ax = plt.subplots()
    assert plots.plot_failures(table, ax=ax) is ax
    widths = [[p.get_width() for p in c] for c in ax.containers if hasattr(c, "patches")][:3]
    # shares of tests, per failure type; no row for "empty"
    assert sum(widths, []) == pytest.approx([0.2, 0.25, 0.2, 0.0, 0.1, 0.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a x bm25 (n=10)", "a x tfidf (n=4)"]
