"""fabnb.stats against published worked examples (the others: ICC and alpha in test_rating, Wilson in
test_properties, McNemar and PPI by hand in test_judge)."""

import numpy as np
import pytest

from fabnb.stats import mcnemar_paired, weighted_kappa, wilson_interval


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
