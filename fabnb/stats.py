"""Statistics that need no LLM, in one place.

So far: the Wilson score interval for a proportion, with bounds that always contain
the estimate (statsmodels' formula can land 1e-16 past it at 0 of n or n of n).

Examples
--------
>>> wilson_interval(7, 7)[1]
1.0
>>> lo, hi = wilson_interval(0, 7)
>>> lo, round(hi, 3)
(0.0, 0.354)
"""

from __future__ import annotations

import math

__all__ = ["wilson_interval"]


def wilson_interval(successes: int, n: int, ci: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``successes / n``, clipped to contain the estimate.

    Wilson (1927), *J. Am. Stat. Assoc.* 22: 209-212; computed by statsmodels'
    ``proportion_confint(method="wilson")``. Worked example (Newcombe 1998, *Stat. Med.*
    17: 857-872, Table I): 81 of 263 gives 0.2553 to 0.3662.

    Parameters
    ----------
    successes, n : int
        Counts, ``0 <= successes <= n``.
    ci : float
        The confidence level.

    Returns
    -------
    (low, high)
        Both NaN when ``n`` is 0. Otherwise ``0 <= low <= successes / n <= high <= 1``.
    """
    from statsmodels.stats.proportion import proportion_confint

    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"a proportion needs 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return math.nan, math.nan
    rate = successes / n
    lo, hi = proportion_confint(successes, n, alpha=1 - ci, method="wilson")
    return float(min(max(lo, 0.0), rate)), float(max(min(hi, 1.0), rate))
