"""fabnb.core.stats against published worked examples (the others: ICC and alpha in test_rating, Wilson in
test_properties, McNemar and PPI by hand in test_judge)."""

import numpy as np
import pandas as pd
import pytest

from fabnb.core.stats import mcnemar_paired, weighted_kappa, wilson_interval


def test_kappa_matches_cohens_textbook_example():
    """Two raters, 50 items, yes/no: 20 both yes, 15 both no, 5 and 10 disagreements: kappa = 0.4.

    (The standard worked example, e.g. Wikipedia's "Cohen's kappa"; with two categories the
    quadratic weights equal the unweighted kappa.)
    """
    a = [1] * 20 + [1] * 5 + [2] * 10 + [2] * 15
    b = [1] * 20 + [2] * 5 + [1] * 10 + [2] * 15
    assert weighted_kappa(a, b, scale=(1, 2)) == pytest.approx(0.4)
    assert np.isnan(weighted_kappa([1], [1]))  # fewer than two items


def test_mcnemar_exact_p_value_by_the_binomial():
    """6 discordant pairs, all one way: two-sided exact p = 2 x 0.5^6."""
    a = [True] * 6 + [False] * 4
    b = [False] * 6 + [False] * 4
    assert mcnemar_paired(a, b)["p_value"] == pytest.approx(2 * 0.5 ** 6)


def test_wilson_interval_of_newcombe_table_one():
    """Newcombe (1998), Table I: 81 of 263 gives 0.2553 to 0.3662 (the Wilson score method)."""
    assert [round(x, 4) for x in wilson_interval(81, 263)] == [0.2553, 0.3662]
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        wilson_interval(3, 2)


# ------------------------------------------------------------------ bootstrap over questions


def test_bootstrap_means_agree_with_the_normal_interval_on_a_large_sample():
    """For 400 questions of a known spread the percentile bootstrap is close to mean +/- 1.96 sd / sqrt(n)."""
    import pandas as pd

    from fabnb.core.stats import bootstrap_means

    rng = np.random.default_rng(3)
    values = rng.uniform(0, 1, 400)
    frame = pd.DataFrame({"metric": "depth", "test_id": [f"q{i}" for i in range(400)], "score": values})
    r = bootstrap_means(frame, ["metric"], n_boot=4000).iloc[0]
    half = 1.96 * values.std(ddof=1) / np.sqrt(400)
    assert r["mean"] == pytest.approx(values.mean())
    assert r["ci_low"] == pytest.approx(values.mean() - half, abs=0.15 * half)
    assert r["ci_high"] == pytest.approx(values.mean() + half, abs=0.15 * half)


def test_bootstrap_means_resample_questions_not_rows_and_are_seeded_per_cell():
    import pandas as pd

    from fabnb.core.stats import bootstrap_means

    # Replicates of one question move together: 3 questions x 4 replicates is 3 clusters, not 12 rows.
    frame = pd.DataFrame({"cell": "x", "test_id": np.repeat(["q1", "q2", "q3"], 4),
                          "score": np.repeat([0.2, 0.5, 0.9], 4) + np.tile([0, 0.01, -0.01, 0], 3)})
    r = bootstrap_means(frame, ["cell"], n_boot=1000).iloc[0]
    assert (r["n"], r["n_clusters"]) == (12, 3)
    rows = bootstrap_means(frame.assign(test_id=[f"r{i}" for i in range(12)]), ["cell"], n_boot=1000).iloc[0]
    assert r["ci_high"] - r["ci_low"] > 1.5 * (rows["ci_high"] - rows["ci_low"])  # rows would understate it
    # Seeded: the same twice, and a cell's interval does not move when another cell joins the frame.
    other = frame.assign(cell="y", score=frame["score"] / 2)
    again = bootstrap_means(pd.concat([other, frame]), ["cell"], n_boot=1000).set_index("cell").loc["x"]
    assert (again["ci_low"], again["ci_high"]) == (r["ci_low"], r["ci_high"])
    # Holes: a missing score is left out and counted; one question has a mean and no interval.
    holes = frame.assign(score=frame["score"].where(frame["test_id"] == "q1"))
    one = bootstrap_means(holes, ["cell"]).iloc[0]
    assert one["n"] == 4 and one["n_clusters"] == 1 and np.isnan(one["ci_low"]) and one["mean"] == pytest.approx(0.2)
    assert bootstrap_means(frame.head(0), ["cell"]).empty


def _judge_scores(mu, offsets, rng):
    """Issue 49's generative model: round(10 mu + question offset + noise) on 0-10, offset and noise N(0, 1.5)."""
    return np.clip(np.round(10 * mu + offsets + rng.normal(0, 1.5, len(offsets))), 0, 10) / 10


def test_the_interval_chooser_holds_its_95_percent_at_five_questions_where_the_percentile_bootstrap_did_not():
    """A small seeded simulation of benchmarks/bench_coverage.py (which prints the full table): 300 studies of
    5 questions. Before issue 49 every report's interval was the percentile bootstrap, which covers about 81% here."""
    from fabnb.core.stats import bootstrap_means, cell_means

    rng = np.random.default_rng(49)
    truth = float(_judge_scores(0.6, rng.normal(0, 1.5, 1_000_000), rng).mean())
    gap_truth = float(_judge_scores(0.65, rng.normal(0, 1.5, 1_000_000), rng).mean()) - truth
    cells, gaps = [], []
    for run in range(300):
        offsets = rng.normal(0, 1.5, 5)
        a, b = _judge_scores(0.6, offsets, rng), _judge_scores(0.65, offsets, rng)
        ids = [f"q{i}" for i in range(5)]
        cells.append(pd.DataFrame({"run": run, "test_id": ids, "score": a}))
        gaps.append(pd.DataFrame({"run": run, "test_id": ids, "delta": b - a}))
    cells, gaps = pd.concat(cells), pd.concat(gaps)

    def coverage(frame, value):
        return float((frame["ci_low"].notna() & (frame["ci_low"] <= value) & (value <= frame["ci_high"])).mean())

    chosen = cell_means(cells, ["run"], n_boot=300, bounds=(0, 1))
    assert set(chosen["method"]) <= {"t", "no spread"}
    assert coverage(chosen, truth) >= 0.90
    assert coverage(cell_means(gaps, ["run"], value="delta", n_boot=300, bounds=(-1, 1)), gap_truth) >= 0.90  # paired
    assert coverage(bootstrap_means(cells, ["run"], n_boot=300), truth) < 0.88  # what the reports showed before


def test_a_constant_sample_has_no_spread_not_a_zero_width_interval():
    from fabnb.analysis.intervals import mean_intervals, mode_gap
    from fabnb.core.stats import cell_means

    same = pd.DataFrame({"model": "m", "context_k": 4.0, "metric": "depth", "test_id": [f"q{i}" for i in range(5)],
                         "score": 1.0})
    row = cell_means(same, ["metric"]).iloc[0]
    assert row["method"] == "no spread" and np.isnan(row["ci_low"]) and np.isnan(row["ci_high"])
    assert mean_intervals(same).set_index("metric").loc["depth", "shown"] == "1.000, no spread (n = 5)"
    paired = pd.concat([same.assign(mode="A", score=0.5), same.assign(mode="B", score=0.7)])
    gap = mode_gap(paired).set_index("metric").loc["depth"]
    assert gap["method"] == "no spread" and np.isnan(gap["ci_low"]) and abs(gap["delta"] - 0.2) < 1e-9
    many = pd.concat([same.assign(score=0.5 + 0.1 * (i % 2)) for i in range(20)]).assign(
        test_id=[f"q{i}" for i in range(100)])
    assert cell_means(many, ["metric"]).iloc[0]["method"] == "bootstrap"  # from BOOTSTRAP_FROM (100) questions


def test_the_one_multiple_comparison_policy_matches_statsmodels_and_keeps_untestable_rows_out():
    """Issue 49 item 6: Holm for decisions (FAMILY_METHOD), BH as the stated alternative, Bonferroni levels."""
    from statsmodels.stats.multitest import multipletests

    from fabnb.core.stats import FAMILY_METHOD, adjust_pvalues, family_level

    rng = np.random.default_rng(4)
    p = rng.uniform(0, 0.2, 15)
    for method in ("holm", "bh"):
        want = multipletests(p, method={"holm": "holm", "bh": "fdr_bh"}[method])[1]
        assert np.allclose(adjust_pvalues(p, method), want)
    with_nan = np.append(p, np.nan)
    assert np.allclose(adjust_pvalues(with_nan)[:15], multipletests(p, method="holm")[1])  # NaN not in the family
    assert np.isnan(adjust_pvalues(with_nan)[15]) and FAMILY_METHOD == "holm"
    assert family_level(0.95, 40) == pytest.approx(0.99875)
    with pytest.raises(ValueError, match="'holm' .* or 'bh'"):
        adjust_pvalues(p, "sidak")


def test_fisher_z_interval_is_the_textbook_one_and_correlations_carry_it():
    from fabnb.analysis.metrics import metric_correlations
    from fabnb.core.stats import fisher_z_interval

    lo, hi = fisher_z_interval(0.5, 28)  # z = 0.549 ± 1.96 / 5 -> tanh
    assert (round(lo, 3), round(hi, 3)) == (0.156, 0.736)
    assert all(np.isnan(fisher_z_interval(0.5, 3)))
    rng = np.random.default_rng(0)
    rows = [{"model": "m", "context_k": float(k), "test_id": f"q{q}", "metric": m, "score": float(rng.uniform())}
            for k in (1, 2) for q in range(10) for m in ("depth", "relevance", "factuality")]
    corr = metric_correlations(pd.DataFrame(rows), metrics=["depth", "relevance", "factuality"])
    assert (corr["r_ci_low"] < corr["r"]).all() and (corr["r"] < corr["r_ci_high"]).all()
    assert (corr["p_holm"] >= corr["p_value"]).all() and len(corr) == 3


def test_mode_gap_claims_a_gap_only_under_holm_over_its_table():
    """Five rows of a true gap of zero and one clear gap: only the clear one is claimed."""
    from fabnb.analysis.intervals import mode_gap

    rng = np.random.default_rng(1)
    rows = []
    for k in (1, 2, 4, 8, 16, 32):
        for q in range(12):
            a = float(rng.uniform(0.3, 0.7))
            b = a + (0.3 if k == 32 else 0.0) + float(rng.normal(0, 0.05))
            rows += [{"model": "m", "context_k": float(k), "metric": "depth", "test_id": f"q{q}", "mode": md,
                      "score": v} for md, v in (("A", a), ("B", min(b, 1.0)))]
    gap = mode_gap(pd.DataFrame(rows), n_boot=200).query("metric == 'depth'").set_index("context_k")
    assert gap.loc[32.0, "claimed"] and gap.loc[32.0, "p_holm"] < 0.05
    assert not gap.drop(index=32.0)["claimed"].any()
    assert (gap["p_holm"] >= gap["p_value"] - 1e-12).all()


def test_paired_differences_are_the_paired_t_test_holm_within_each_family_at_the_bonferroni_level():
    """Issue 49: one function judges every system-vs-system, window-vs-window or metric-vs-metric difference."""
    from scipy import stats as st
    from statsmodels.stats.multitest import multipletests

    from fabnb.core.stats import paired_differences

    rng = np.random.default_rng(7)
    rows = [{"model": m, "metric": k, "test_id": q, "d": rng.normal(shift, 0.1)}
            for m, shift in (("a", 0.0), ("b", 0.15)) for k in ("x", "y", "z") for q in range(12)]
    diffs = pd.DataFrame(rows)
    out = paired_differences(diffs, ["model", "metric"], ["model"]).set_index(["model", "metric"])
    for model in ("a", "b"):
        part = diffs[diffs["model"] == model]
        p = [st.ttest_1samp(part[part["metric"] == k]["d"], 0).pvalue for k in ("x", "y", "z")]
        assert np.allclose(out.loc[model, "p_value"].to_numpy(float), p)
        assert np.allclose(out.loc[model, "p_holm"].to_numpy(float), multipletests(p, method="holm")[1])
    assert np.allclose(out["ci_level"], 1 - 0.05 / 3) and (out["n"] == 12).all()
    assert not out.loc["a", "claimed"].any() and out.loc["b", "claimed"].all()
    t = st.t.ppf(1 - 0.05 / 6, 11)  # the interval at the family's level: t at 1 - 0.05 / (2 * 3)
    x = diffs[(diffs["model"] == "b") & (diffs["metric"] == "x")]["d"]
    half = t * x.std(ddof=1) / np.sqrt(12)
    assert out.loc[("b", "x"), "ci_low"] == pytest.approx(x.mean() - half)
