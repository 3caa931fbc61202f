"""Each analysis function on small hand-made frames with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from fabnb.analysis import comparison as C
from fabnb.analysis import curves as A
from fabnb.analysis import metrics as M
from fabnb.analysis.intervals import mean_intervals
from fabnb.core.schema import METRICS
from fabnb.core.scores import ScoreError

from conftest import long_frame, per_question, six_metric_frame

K = [4, 8, 16, 32, 64]


def log_curve(a, b, ks=K):
    return {k: a + b * math.log(k) for k in ks}


# ------------------------------------------------------------------ curve fits

def test_log_fit_recovers_exact_parameters():
    fit = A.fit_log_curves(long_frame({"m": log_curve(0.2, 0.1)})).iloc[0]
    assert fit.status == "fitted"
    assert fit.intercept == pytest.approx(0.2)
    assert fit.slope == pytest.approx(0.1)
    assert fit.r_squared == pytest.approx(1.0)


def test_log_fit_interval_covers_truth_on_noisy_data():
    rng = np.random.default_rng(1)
    ks = [4, 6, 8, 12, 16, 24, 32, 48, 64]
    curve = {k: 0.3 + 0.08 * math.log(k) + rng.normal(0, 0.01) for k in ks}
    fit = A.fit_log_curves(long_frame({"m": curve})).iloc[0]
    assert fit.slope_ci_low < 0.08 < fit.slope_ci_high
    assert 0.9 < fit.r_squared < 1.0


def test_log_fit_says_why_it_cannot_fit():
    fit = A.fit_log_curves(long_frame({"one": {8: 0.5}, "two": {4: 0.4, 8: 0.6}})).set_index("model")
    assert fit.loc["one", "status"] == "not fitted"
    assert "1 distinct context point(s)" in fit.loc["one", "reason"]
    assert "2 distinct" in fit.loc["two", "reason"]
    assert np.isnan(fit.loc["two", "slope"])


def test_logistic_fit_recovers_inflection():
    ks = [2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128]
    x0 = math.log(12)
    curve = {k: 0.3 + 0.6 / (1 + math.exp(-3 * (math.log(k) - x0))) for k in ks}
    fit = A.fit_logistic_curves(long_frame({"s": curve})).iloc[0]
    assert fit.status == "fitted"
    assert fit.inflection_k == pytest.approx(12, rel=0.01)
    assert fit.lower == pytest.approx(0.3, abs=0.01) and fit.upper == pytest.approx(0.9, abs=0.01)
    pred = A.predict_logistic_curve(fit, [12])[0]
    assert pred == pytest.approx(0.6, abs=0.005)


def test_logistic_fit_needs_five_points():
    fit = A.fit_logistic_curves(long_frame({"m": log_curve(0.2, 0.1, [4, 8, 16, 32])})).iloc[0]
    assert fit.status == "not fitted" and "at least 5" in fit.reason


# ------------------------------------------------------------- operating points

def test_operating_points_by_hand():
    df = long_frame({"m": {4: 0.5, 8: 0.7, 16: 0.9, 32: 0.8}})
    p = A.operating_points(df).iloc[0]
    assert (p.peak_k, p.peak_score) == (16, 0.9)
    assert p.fraction_k == 16  # 90% of 0.9 = 0.81: first reached at 16K
    # linear in ln k between 8K (0.70) and 16K (0.90): 0.81 is 55% of the way: 8 * 2**0.55
    assert p.fraction_interp_k == pytest.approx(8 * 2 ** 0.55)
    assert p.halfway_k == 8  # midpoint of 0.5 and 0.9 is 0.7
    assert p.final_change_pct == pytest.approx(-100 / 9)
    assert not p.monotonic


def test_crossovers_observed_and_fitted():
    a = log_curve(0.2, 0.10, [4, 8, 16, 32, 64, 128])
    b = log_curve(0.4, 0.05, [4, 8, 16, 32, 64, 128])
    df = long_frame({"a": a, "b": b})
    fit = C.crossovers(df, "a", "b", method="log_fit").iloc[0]
    assert fit.context_k == pytest.approx(math.exp(4))  # 0.2 + 0.1x = 0.4 + 0.05x at x = 4
    assert (fit.leader_below, fit.leader_above) == ("b", "a")
    obs = C.crossovers(df, "a", "b").iloc[0]
    assert obs.context_k == pytest.approx(math.exp(4))  # exact: both lines are linear in ln k


def test_crossovers_none_and_unknown_model():
    df = long_frame({"a": {4: 0.5, 8: 0.6}, "b": {4: 0.4, 8: 0.5}})
    assert C.crossovers(df, "a", "b").empty
    with pytest.raises(ScoreError, match="unknown model 'c'"):
        C.crossovers(df, "a", "c")
    with pytest.raises(ValueError, match="method must be"):
        C.crossovers(df, "a", "b", method="spline")


def test_routing_table_ranges():
    df = long_frame({"a": {4: 0.6, 8: 0.7, 16: 0.72, 32: 0.74}, "b": {4: 0.5, 8: 0.6, 16: 0.8, 32: 0.85}})
    r = C.routing_table(df)
    assert list(r.best_model) == ["a", "a", "b", "b"]
    assert list(r.range) == ["4-8K", "4-8K", "16-32K", "16-32K"]
    assert r.margin.iloc[2] == pytest.approx(0.08)


def test_classify_scaling_rule():
    df = long_frame({
        "cold": {4: 0.30, 8: 0.45, 16: 0.70, 32: 0.85, 64: 0.86},
        "sat": {4: 0.70, 8: 0.78, 16: 0.84, 32: 0.86, 64: 0.82},
        "plateau": {4: 0.70, 8: 0.78, 16: 0.84, 32: 0.860, 64: 0.865},
        "log": log_curve(0.3, 0.1),
        "flat": {4: 0.5},
    })
    labels = A.classify_scaling(df).set_index("model").label.to_dict()
    assert labels == {"cold": "cold-start", "sat": "early saturation", "plateau": "early saturation",
                      "log": "logarithmic growth", "flat": "not enough windows"}


def test_gain_rates_per_k_and_per_doubling():
    df = long_frame({"m": {4: 0.4, 8: 0.5, 16: 0.7}})
    r = A.gain_rates(df, "m", [(4, 8), (4, 16)]).set_index("to_k")
    assert r.loc[8, "gain_per_k"] == pytest.approx(0.025)
    assert r.loc[16, "gain_per_doubling"] == pytest.approx(0.15)
    with pytest.raises(ScoreError, match="no average score at 12K"):
        A.gain_rates(df, "m", [(4, 12)])


def test_metric_slopes_and_context_to_reach():
    rows = []
    for i, metric in enumerate(METRICS):
        for model, scale in (("a", 1.0), ("b", 2.0)):
            for k, v in log_curve(0.1, 0.01 * (i + 1) * scale).items():
                rows.append({"model": model, "context_k": k, "metric": metric, "score": v})
    df = pd.DataFrame(rows)
    s = A.metric_slopes(df).set_index("metric")
    assert s.loc["support_quality", "mean_slope"] == pytest.approx(0.06 * 1.5)
    assert s.loc["depth", "slope_spread"] == pytest.approx(np.std([0.02, 0.04], ddof=1))
    reach = A.context_to_reach(df, 0.1 + 0.06 * math.log(16), ["support_quality"]).set_index("model")
    assert reach.loc["a", "context_k"] == 16 and reach.loc["b", "context_k"] == 4


# --------------------------------------------------------------- correlations

def test_correlations_perfect_and_grouped():
    rows = []
    for model, sign in (("up", 1), ("down", -1)):
        for j, k in enumerate([4, 8, 16, 32]):
            for i, metric in enumerate(METRICS):
                value = 0.5 + sign * 0.05 * j if metric != "depth" else 0.5 + 0.05 * j
                rows.append({"model": model, "context_k": k, "metric": metric, "score": value})
    df = pd.DataFrame(rows)
    by = M.metric_correlations(df, by="model")
    pair = by[(by.metric_a == "factuality") & (by.metric_b == "depth")].set_index("group").r
    assert pair["up"] == pytest.approx(1.0) and pair["down"] == pytest.approx(-1.0)
    assert len(by) == 2 * 15
    pooled = M.metric_correlations(df)
    assert (pooled.n == 8).all() and set(pooled.group) == {"all"}


def test_spearman_sees_monotone_nonlinear_as_one():
    rows = [{"model": "m", "context_k": k, "metric": metric, "score": v}
            for k, (x, y) in zip([1, 2, 3, 4, 5], [(0.1, 0.01), (0.2, 0.04), (0.3, 0.09), (0.4, 0.16), (0.5, 0.9)])
            for metric, v in (("depth", x), ("relevance", y))]
    df = pd.DataFrame(rows)
    sp = M.metric_correlations(df, "spearman", metrics=["depth", "relevance"]).r.item()
    pe = M.metric_correlations(df, "pearson", metrics=["depth", "relevance"]).r.item()
    assert sp == pytest.approx(1.0) and pe < 0.9


def test_compare_correlations_matches_pairs_in_any_order():
    computed = pd.DataFrame({"metric_a": ["factuality"], "metric_b": ["depth"], "r": [0.8]})
    published = pd.DataFrame({"metric_a": ["depth", "depth"], "metric_b": ["factuality", "depth"], "r": [0.96, 1.0]})
    out = M.compare_correlations(computed, published)
    assert len(out) == 1 and out.difference.item() == pytest.approx(-0.16)


# ----------------------------------------------------------- dilution, profiles

def test_dilution_both_units():
    df = long_frame({"m": {28: 0.80, 32: 0.76}, "n": {28: 0.5}}, "depth")
    d = M.dilution(df, 28, 32, metrics=["depth"]).iloc[0]
    assert d.delta == pytest.approx(-0.04)
    assert d.delta_points == pytest.approx(-4.0)
    assert d.relative_pct == pytest.approx(-5.0)
    with pytest.raises(ScoreError, match="no model has scores at both 28K and 64K"):
        M.dilution(df, 28, 64, metrics=["depth"])


def test_metric_profile_and_gaps():
    df = pd.DataFrame({"model": "m", "context_k": 4.0, "metric": list(METRICS),
                       "score": [0.6, 0.3, 0.4, 0.5, 0.9, 0.45]})
    p = M.metric_profile(df, 4).iloc[0]
    assert p.best_metric == "context_utilization" and p.worst_metric == "depth"
    assert p["range"] == pytest.approx(0.6)
    g = M.metric_gaps(df, 4)
    row = g[(g.metric_a == "context_utilization") & (g.metric_b == "support_quality")].iloc[0]
    assert row.ratio == pytest.approx(2.0) and row.pct_higher == pytest.approx(100.0)
    with pytest.raises(ScoreError, match="no metric scores at 8K"):
        M.metric_profile(df, 8)


def test_framework_table_and_average_check():
    rows = [{"system": s, "model": "x", "context_k": np.nan, "metric": m, "score": v}
            for s, base in (("S1", 0.5), ("S2", 0.6)) for m, v in zip(METRICS, [base] * 6)]
    rows += [{"system": "S1", "model": "x", "context_k": np.nan, "metric": "average", "score": 0.5},
             {"system": "S2", "model": "x", "context_k": np.nan, "metric": "average", "score": 0.65}]
    df = pd.DataFrame(rows)
    t = C.framework_table(df)
    assert t.loc["average (recomputed)", "S2"] == pytest.approx(0.6)
    assert t.loc["average (reported)", "S2"] == pytest.approx(0.65)
    checks = M.check_averages(df).set_index("system")
    assert bool(checks.loc["S1", "consistent"]) and not bool(checks.loc["S2", "consistent"])


def test_framework_table_and_profile_average_a_per_question_frame_at_a_window():
    """Once the tables took the first row of each cell: on a live run's per-question scores, one question."""
    rows = [{"system": s, "model": "x", "context_k": 1.0, "test_id": q, "metric": m, "score": v + base}
            for s, base in (("S1", 0.0), ("S2", 0.2)) for q, v in (("q1", 0.2), ("q2", 0.6)) for m in METRICS]
    df = pd.DataFrame(rows)
    t = C.framework_table(df, context_k=1.0)
    assert t.loc["depth", "S1"] == pytest.approx(0.4) and t.loc["average (recomputed)", "S2"] == pytest.approx(0.6)
    assert M.metric_profile(df, 1.0, by="system").set_index("system").loc["S2", "average"] == pytest.approx(0.6)
    with pytest.raises(ScoreError, match="no rows at 2K"):
        C.framework_table(df, context_k=2.0)


def test_dual_mode_delta_pairs_and_flags():
    df = pd.DataFrame({"model": "m", "context_k": 8.0, "test_id": ["q1", "q1", "q2"], "metric": "factuality",
                       "mode": ["with_kb", "without_kb", "A"], "score": [0.2, 0.7, 0.5]})
    out = C.dual_mode_delta(df).set_index("test_id")
    assert out.loc["q1", "delta"] == pytest.approx(0.5) and out.loc["q1", "paired"]
    assert not out.loc["q2", "paired"] and np.isnan(out.loc["q2", "delta"])
    with pytest.raises(ScoreError, match="unknown mode 'C'"):
        C.dual_mode_delta(df.assign(mode="C"))


def test_functions_do_not_mutate_input():
    df = six_metric_frame()
    before = df.copy()
    for call in (A.fit_log_curves, A.operating_points, M.metric_correlations, lambda d: M.dilution(d, 4, 32),
                 lambda d: M.metric_profile(d, 4), A.classify_scaling, C.routing_table):
        call(df)
    pd.testing.assert_frame_equal(df, before)



# ------------------------------------------------------------- small data: labels, correlations, crossovers


def test_three_windows_give_no_label_and_correlations_from_three_points_are_too_few():
    """Observations 3 and 4 of issue 28: r = +/-1.00 and 'early saturation' from three windows."""
    df = long_frame({"m": {1: 0.60, 2: 0.70, 4: 0.69}})
    assert A.classify_scaling(df).iloc[0]["label"] == "not enough windows"
    assert A.classify_scaling(df, min_windows=3).iloc[0]["label"] == "early saturation"  # what it said before
    corr = M.metric_correlations(per_question(modes=("A",)).groupby(
        ["model", "context_k", "metric"], as_index=False)["score"].mean())
    assert (corr["n"] == 3).all() and not corr["enough"].any()
    assert M.metric_correlations(per_question(modes=("A",)))["enough"].all()  # 36 per-question rows are enough


def test_a_crossover_inside_the_noise_is_not_separated():
    rows = []
    for model, curve in (("a", [0.70, 0.62, 0.50]), ("b", [0.50, 0.60, 0.70])):
        for k, mean in zip((4, 8, 16), curve):
            for q, noise in enumerate((-0.02, 0.0, 0.02)):
                rows.append({"model": model, "context_k": float(k), "test_id": f"q{q}", "metric": "average",
                             "score": mean + noise})
    per = pd.DataFrame(rows)
    cells = per.groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
    ci = mean_intervals(per, n_boot=500)
    cross = C.crossovers(cells, "a", "b", intervals=ci)
    assert len(cross) == 1 and bool(cross["separated"].iloc[0])
    wide = per.assign(score=per["score"] + per["test_id"].map({"q0": -0.3, "q1": 0.0, "q2": 0.3}))
    assert not C.crossovers(cells, "a", "b", intervals=mean_intervals(wide, n_boot=500))["separated"].iloc[0]
    assert C.crossovers(cells, "a", "b")["separated"].isna().all()


def test_the_effective_window_of_a_scripted_fall_is_found_within_one_step_and_a_cold_start_uses_its_peak():
    """Issue 52: NoLiMa's effective length, with its reference said and its uncertainty over questions."""
    import numpy as np
    import pandas as pd

    from fabnb.analysis.curves import effective_window

    rng = np.random.default_rng(1)
    windows = (4, 8, 12, 16, 24, 32)

    def frame(model, curve):
        return pd.DataFrame([{"model": model, "context_k": k, "test_id": f"q{i}", "metric": "average",
                              "score": float(np.clip(curve(k) + rng.normal(0, 0.08), 0, 1))}
                             for k in windows for i in range(60)])

    falls = frame("falls", lambda k: 0.8 if k <= 12 else 0.5)  # loses what it had past 12K
    cold = frame("cold", lambda k: min(0.2 + 0.05 * k, 0.8))  # low at short windows, up to its peak
    flat = frame("flat", lambda k: 0.7)
    out = effective_window(pd.concat([falls, cold, flat]), n_boot=300).set_index("model")
    assert out.loc["falls", "effective_k"] == 12 and out.loc["falls", "ends"] == "falls below at 16K"
    assert out.loc["falls", "reference"] == "best short window"
    assert out.loc["cold", "reference"].startswith("peak") and out.loc["cold", "ends"] == "beyond the sweep"
    assert out.loc["flat", "effective_k"] == 32 and out.loc["flat", "ends"] == "beyond the sweep"
    assert out.loc["falls", "low_k"] <= 12 <= out.loc["falls", "high_k"]
    # few, noisy questions: the range widens instead of a point being claimed
    noisy = effective_window(frame("few", lambda k: 0.8 if k <= 12 else 0.65).groupby("context_k").head(4),
                             n_boot=300).iloc[0]
    assert noisy["high_k"] - noisy["low_k"] >= 4
