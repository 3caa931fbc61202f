import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from fabnb.analysis import metrics as M
from fabnb.analysis import plots
from fabnb.data import published


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
    ax = plots.plot_scaling(df)  # the default min_windows is MIN_FIT_WINDOWS (5) since issue 49
    assert ax.get_legend().get_texts()[0].get_text() == "m (not fitted: 2 of 5 windows)"


def test_breakdown_has_six_metrics_per_model(sweeps):
    ax = plots.plot_breakdown(sweeps, 4, models=list(published.PRIMARY_MODELS))
    assert len(ax.patches) == 18
    assert ax.get_title() == "Metric breakdown at 4K context"
    with pytest.raises(ValueError, match="no metric scores at 5K"):
        plots.plot_breakdown(sweeps, 5)


def test_deltas_heatmap_annotations_match_figure_6(sweeps):
    ax = plots.plot_deltas(M.dilution(sweeps, 28, 32), models=["Gemini-2.5-Flash"])
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["-0.032", "-0.043", "-0.042", "-0.054", "-0.018", "-0.051"]


def test_a_dilution_heatmap_of_per_question_scores_colours_only_the_claimed_changes():
    """Issue 49: a colour scale centred on 0 that noise does not stretch; the unclaimed cells grey, value printed."""
    import numpy as np

    from fabnb.core.schema import METRICS

    rng = np.random.default_rng(3)
    rows = [{"model": "m", "context_k": k, "test_id": f"q{q}", "metric": metric,
             "score": float(np.clip(0.6 + (-0.2 if metric == "depth" and k == 32 else 0) + rng.normal(0, 0.05), 0, 1))}
            for q in range(12) for k in (16.0, 32.0) for metric in METRICS]
    per = pd.DataFrame(rows)
    cells = per.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
    deltas = M.dilution(cells, 16, 32, per_question=per)
    assert deltas.set_index("metric")["claimed"].to_dict()["depth"] is True
    six = deltas[deltas["metric"] != "average"]
    assert six["claimed"].sum() == 1  # five metrics unchanged in truth: none claimed (the average holds depth's)
    fig, ax = plt.subplots()
    plots.plot_deltas(deltas, ax=ax)
    mesh = ax.collections[0]
    coloured = np.ma.count(mesh.get_array())
    assert coloured == 1, coloured  # only the claimed cell takes a colour
    lo, hi = mesh.get_clim()
    depth = deltas.set_index("metric").loc["depth", "delta"]
    assert hi == pytest.approx(abs(depth)) and lo == pytest.approx(-abs(depth))  # the scale spans the claimed change
    assert len(ax.texts) == 6  # every value printed, the five within noise in grey
    plt.close(fig)


def test_frameworks_and_radar_and_correlations():
    ax = plots.plot_frameworks(published.frameworks())
    assert len(ax.patches) == 18
    live = published.frameworks().assign(context_k=1.0)  # a live run's window, one row per question
    live = pd.concat([live.assign(score=live["score"] - 0.1), live.assign(score=live["score"] + 0.1)])
    heights = sorted(round(p.get_height(), 6) for p in plots.plot_frameworks(live, context_k=1.0).patches)
    assert heights == sorted(round(p.get_height(), 6) for p in ax.patches)  # each bar the mean of its rows
    profile = M.metric_profile(published.context_sweeps(), 18)
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


def test_a_correlation_heatmap_of_user_scores_spans_minus_one_to_one_and_leaves_too_few_blank():
    """Observation 3 of issue 28: a -1.00 cell was drawn in the colour of 0.5 (the scale ran 0.5-1)."""
    import numpy as np
    import pandas as pd

    from fabnb.core.schema import METRICS

    pairs = [(a, b) for i, a in enumerate(METRICS) for b in METRICS[i + 1:]]
    corr = pd.DataFrame({"metric_a": [a for a, _ in pairs], "metric_b": [b for _, b in pairs],
                         "r": np.linspace(-1, 1, len(pairs)), "n": [12] * (len(pairs) - 1) + [3]})
    corr["enough"] = corr["n"] >= M.MIN_CORRELATION_N
    ax = plots.plot_correlations(corr)
    mesh = ax.collections[0]
    assert mesh.norm.vmin == -1.0 and mesh.norm.vmax == 1.0
    assert mesh.cmap(mesh.norm(-1.0)) != mesh.cmap(mesh.norm(0.5))  # -1 is no longer drawn as 0.5
    texts = [t.get_text() for t in ax.texts]
    assert "-1.00" in texts and "too few\nn = 3" in texts
    last = corr.iloc[-1]  # the too-few pair: its cell is masked (not coloured)
    i, j = sorted((METRICS.index(last["metric_a"]), METRICS.index(last["metric_b"])), reverse=True)
    assert np.ma.getmaskarray(mesh.get_array()).reshape(len(METRICS), len(METRICS))[i, j]
    paper = plots.plot_correlations(published.correlations(), scale="paper")
    assert paper.collections[0].norm.vmin == 0.5  # the paper's own table keeps the paper's styling


def test_figures_of_per_question_scores_carry_their_intervals():
    import numpy as np
    import pandas as pd
    from matplotlib.container import ErrorbarContainer

    from fabnb.analysis.intervals import mean_intervals
    from fabnb.core.schema import METRICS

    rng = np.random.default_rng(1)
    per = pd.DataFrame([{"model": "s", "context_k": k, "test_id": f"q{i}", "metric": m, "score": rng.uniform()}
                        for k in (1.0, 2.0) for i in range(5) for m in METRICS])
    ci = mean_intervals(per, n_boot=100)
    cells = per.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
    bars = plots.plot_breakdown(cells, 1.0, intervals=ci)
    assert sum(isinstance(c, ErrorbarContainer) for c in bars.containers) == len(METRICS)
    curve = plots.plot_scaling(cells, metric="depth", intervals=ci)
    (errors,) = [c for c in curve.containers if isinstance(c, ErrorbarContainer)]
    segments = errors.lines[2][0].get_segments()
    depth = ci[(ci["metric"] == "depth")].sort_values("context_k")
    assert [round(s[0][1], 6) for s in segments] == [round(v, 6) for v in depth["ci_low"]]
    assert [round(s[1][1], 6) for s in segments] == [round(v, 6) for v in depth["ci_high"]]


def test_a_curve_of_three_windows_is_not_fitted_and_prints_no_r_squared():
    """Issue 49 item 8: a 3-window log fit printed its R² in the legend; a fit needs MIN_FIT_WINDOWS windows."""
    from fabnb.analysis.curves import MIN_FIT_WINDOWS

    df = pd.DataFrame({"model": "m", "context_k": [4.0, 8.0, 16.0], "metric": "average", "score": [0.5, 0.6, 0.65]})
    labels = [t.get_text() for t in plots.plot_scaling(df).get_legend().get_texts()]
    assert labels == [f"m (not fitted: 3 of {MIN_FIT_WINDOWS} windows)"] and not any("R²" in t for t in labels)


def test_a_run_that_judged_two_metrics_draws_two():
    """Seen: the viewer drew all six metrics when two were judged (four empty bars, empty heatmap rows)."""
    scores = pd.DataFrame({"model": ["m", "m", "n", "n"], "context_k": 4.0,
                           "metric": ["relevance", "depth", "relevance", "depth"], "score": [0.5, 0.6, 0.7, 0.8]})
    ax = plots.plot_breakdown(scores, 4)
    assert len(ax.patches) == 4 and [t.get_text() for t in ax.get_legend().get_texts()] == ["Depth", "Relevance"]
    deltas = pd.DataFrame({"model": "m", "metric": ["relevance", "depth"], "delta": [-0.01, 0.02], "from_k": 4.0,
                           "to_k": 8.0})
    heat = plots.plot_deltas(deltas)
    assert [t.get_text() for t in heat.get_xticklabels()] == ["Depth", "Relevance"]  # the paper's order
    corr = pd.DataFrame({"metric_a": ["relevance"], "metric_b": ["depth"], "r": [0.4], "n": [12], "enough": [True]})
    grid = plots.plot_correlations(corr)
    assert [t.get_text() for t in grid.get_yticklabels()] == ["Depth", "Relevance"]
    # A metric judged whose changes are all undefined (a relative change from 0) keeps its column, blank.
    undefined = deltas.assign(relative_pct=float("nan"), claimed=[False, False])
    blank = plots.plot_deltas(undefined, value="relative_pct")
    assert [t.get_text() for t in blank.get_xticklabels()] == ["Depth", "Relevance"]
    claimed = deltas.assign(claimed=[True, False])
    assert [t.get_text() for t in plots.plot_deltas(claimed).get_xticklabels()] == ["Depth", "Relevance"]
