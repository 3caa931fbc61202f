"""Agreement between raters, per dimension: Krippendorff's alpha (ordinal, missing ratings allowed), ICC (Shrout &
Fleiss), quadratic-weighted kappa for two raters, each with a bootstrap confidence interval over items; and the
summary tables shaped like Tables 8 and 9.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.stats import icc, krippendorff_alpha, weighted_kappa
from .rating import DIMENSIONS, RatingError

__all__ = ["agreement", "quality_table", "rating_matrix"]


def rating_matrix(ratings: pd.DataFrame, dimension: str) -> pd.DataFrame:
    """Raters x items matrix of one dimension (NaN where a rater did not rate an item)."""
    r = ratings[ratings["dimension"] == dimension]
    return r.pivot_table(index="rater", columns="item_id", values="score", aggfunc="last")


def agreement(ratings: pd.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95, dimensions=None,
              scale: tuple[int, int] = (1, 5)) -> pd.DataFrame:
    """Agreement per dimension with bootstrap confidence intervals (items resampled).

    ``dimensions``: which to measure (default Appendix D's four); ``scale``: the scores' range, for the weighted
    kappa (0-10 for experts' scores of answers, :mod:`fabnb.judge.calibration`).

    Returns
    -------
    DataFrame
        dimension, statistic (``alpha_ordinal``, ``ICC2``, and ``kappa_quadratic`` for
        exactly two raters), value, ci_low, ci_high, n_items, n_raters.

    Examples
    --------
    >>> import pandas as pd
    >>> ratings = pd.DataFrame({"rater": ["ana"] * 6 + ["ben"] * 6, "item_id": [f"q{i}" for i in range(6)] * 2,
    ...                         "dimension": "accuracy", "score": [5, 4, 2, 3, 5, 1, 5, 4, 3, 3, 4, 1]})
    >>> a = agreement(ratings, n_boot=200)
    >>> a[["statistic", "n_items", "n_raters"]].values.tolist()  # doctest: +NORMALIZE_WHITESPACE
    [['alpha_ordinal', 6, 2], ['ICC2', 6, 2], ['kappa_quadratic', 6, 2]]
    >>> bool((a["value"] > 0.7).all())
    True
    """
    rng = np.random.default_rng(seed)
    rows = []
    for dim in (DIMENSIONS if dimensions is None else dimensions):
        m = rating_matrix(ratings, dim)
        if m.empty:
            continue
        stats = {"alpha_ordinal": lambda x: krippendorff_alpha(x), "ICC2": lambda x: icc(x, "ICC2")}
        if m.shape[0] == 2:
            stats["kappa_quadratic"] = lambda x: weighted_kappa(x[0], x[1], scale=scale)
        data = m.to_numpy(dtype=float)
        for name, fn in stats.items():
            value = fn(data)
            boots = []
            for _ in range(n_boot):
                cols = rng.integers(0, data.shape[1], data.shape[1])
                boots.append(fn(data[:, cols]))
            boots = np.array([b for b in boots if not np.isnan(b)])
            lo, hi = (np.quantile(boots, [(1 - ci) / 2, 1 - (1 - ci) / 2]) if len(boots) else (np.nan, np.nan))
            rows.append({"dimension": dim, "statistic": name, "value": value, "ci_low": float(lo),
                         "ci_high": float(hi), "n_items": data.shape[1], "n_raters": data.shape[0]})
    return pd.DataFrame(rows)


def quality_table(ratings: pd.DataFrame, items: pd.DataFrame, by: str) -> pd.DataFrame:
    """Mean score per dimension by a column of the items: Table 8 (``by="group"``) or 9 (``"test_type"``).

    Returns
    -------
    DataFrame
        One row per ``by`` value: the four dimensions' means, n_items, n_ratings.

    Examples
    --------
    >>> import pandas as pd
    >>> ratings = pd.DataFrame({"rater": ["ana"] * 6 + ["ben"] * 6, "item_id": [f"q{i}" for i in range(6)] * 2,
    ...                         "dimension": "accuracy", "score": [5, 4, 2, 3, 5, 1, 5, 4, 3, 3, 4, 1]})
    >>> items = pd.DataFrame({"item_id": [f"q{i}" for i in range(6)],
    ...                       "test_type": ["robustness"] * 3 + ["multi_hop"] * 3})
    >>> quality_table(ratings, items, by="test_type")[["test_type", "accuracy", "n_items"]].values.tolist()
    [['multi_hop', 2.8333333333333335, 3], ['robustness', 3.8333333333333335, 3]]
    """
    if by not in items.columns:
        raise RatingError(f"items have no column {by!r}; columns: {list(items.columns)}")
    merged = ratings.merge(items[["item_id", by]], on="item_id", how="inner")
    table = merged.pivot_table(index=by, columns="dimension", values="score", aggfunc="mean")
    table = table.reindex(columns=[d for d in DIMENSIONS if d in table.columns])
    table["n_items"] = merged.groupby(by)["item_id"].nunique()
    table["n_ratings"] = merged[merged["dimension"] == "accuracy"].groupby(by).size()
    return table.reset_index()
