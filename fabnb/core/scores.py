"""Score frames: read, check and reshape the tidy long format of every analysis.

A score frame has one row per (system, model, context, mode, question, metric) that
is present, and the columns of :data:`fabnb.core.schema.SCORE_REQUIRED`:

``model``
    model name (str)
``context_k``
    context window in thousands of tokens (float; empty for a framework without one)
``metric``
    one of :data:`fabnb.core.schema.ALL_METRICS`
``score``
    the score, normalized to [0, 1]

and optionally ``system`` (RAG framework), ``output_k`` (output-token limit, K),
``mode`` (A/B of the dual-mode assessment), ``test_id`` and ``source_table``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .errors import FabnbError
from .schema import ALL_METRICS, AVERAGE, METRICS, SCORE_KEYS, SCORE_REQUIRED

__all__ = ['ScoreError', 'at_window', 'check_scores', 'read_scores', 'require_models', 'metric_sweep', 'with_average']


class ScoreError(FabnbError, ValueError):
    """A score frame or file that cannot be analysed as it is."""


def _where(source: str, index, from_file: bool) -> str:
    # A CSV's line number is the frame's position + 2 (header on line 1).
    if from_file:
        return f"{source}, line {index + 2}"
    return f"{source}, row {index}"


def check_scores(
    scores: pd.DataFrame,
    source: str = "score frame",
    *,
    require_all_metrics: bool = True,
    from_file: bool = False,
) -> pd.DataFrame:
    """Check a score frame and return a clean copy with proper dtypes.

    Parameters
    ----------
    scores : DataFrame
        Columns ``model``, ``context_k``, ``metric``, ``score`` and optionally
        ``system``, ``output_k``, ``mode``, ``test_id``, ``source_table``.
    source : str
        Name used in error messages (a file path, or a description).
    require_all_metrics : bool
        Demand that every configuration that has any of the six metrics has all six.
    from_file : bool
        Report CSV line numbers instead of frame positions.

    Returns
    -------
    DataFrame
        A copy with ``context_k``, ``output_k`` and ``score`` as floats.

    Raises
    ------
    ScoreError
        Naming the file, row and column of the first problem found and what to do.

    Examples
    --------
    >>> import pandas as pd
    >>> from fabnb.core.scores import check_scores
    >>> df = pd.DataFrame({"model": ["m"], "context_k": [4], "metric": ["depth"], "score": ["x"]})
    >>> check_scores(df, require_all_metrics=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.core.scores.ScoreError: score frame, row 0, column 'score': 'x' is not a number. Scores are ...
    """
    missing = [c for c in SCORE_REQUIRED if c not in scores.columns]
    if missing:
        raise ScoreError(
            f"{source}: missing column(s) {missing}; found {list(scores.columns)}. "
            f"A score frame needs {list(SCORE_REQUIRED)} (long format: one row per metric)."
        )
    df = scores.copy().reset_index(drop=True)
    df["metric"] = df["metric"].astype(str).str.strip()
    for i, metric in df["metric"].items():
        if metric not in ALL_METRICS:
            raise ScoreError(
                f"{_where(source, i, from_file)}, column 'metric': unknown metric {metric!r}. "
                f"Expected one of {list(ALL_METRICS)}."
            )
    for i, model in df["model"].items():
        if pd.isna(model) or not str(model).strip():
            raise ScoreError(f"{_where(source, i, from_file)}, column 'model': empty model name.")
    for column, low, high in (("score", 0.0, 1.0), ("context_k", 0.0, None), ("output_k", 0.0, None)):
        if column in df.columns:
            df[column] = _numbers(df, column, low, high, source, from_file)
    if df["score"].isna().any():
        i = df.index[df["score"].isna()][0]
        raise ScoreError(f"{_where(source, i, from_file)}, column 'score': empty score.")
    keys = [c for c in SCORE_KEYS if c in df.columns] + ["metric"]
    dup = df.duplicated(subset=keys, keep=False)
    if dup.any():
        rows = [(_where(source, i, from_file)) for i in df.index[dup][:6]]
        raise ScoreError(
            f"{source}: duplicated configuration(s) on columns {keys}: {'; '.join(rows)}. "
            "Each configuration may score each metric once: aggregate repeated runs first, or add "
            "the column that tells them apart (e.g. 'test_id', 'mode')."
        )
    if require_all_metrics:
        _check_all_metrics(df, [c for c in keys if c != "metric"], source)
    return df


def _numbers(df: pd.DataFrame, column: str, low: float, high: float | None, source: str, from_file: bool) -> pd.Series:
    """A column as floats, refusing the first value that is not a number or is out of range (blanks stay NaN)."""
    numeric = pd.to_numeric(df[column], errors="coerce")
    for i in df.index[numeric.isna() & df[column].notna()]:
        value = df.at[i, column]
        if isinstance(value, str) and not value.strip():
            continue
        hint = ("Scores are normalized to [0, 1]" if column == "score" else
                "Contexts are in K tokens (e.g. 4, 32, 128)")
        raise ScoreError(
            f"{_where(source, i, from_file)}, column {column!r}: {value!r} is not a number. "
            f"{hint}; fix or remove this row."
        )
    bad = numeric[(numeric < low) | ((numeric > high) if high is not None else False)]
    for i, value in bad.items():
        rng = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ScoreError(f"{_where(source, i, from_file)}, column {column!r}: {value} is outside {rng}.")
    return numeric.astype(float)


def _check_all_metrics(df: pd.DataFrame, config: list[str], source: str) -> None:
    """Refuse the first configuration that has some of the six metrics but not all."""
    present = df[df["metric"].isin(METRICS)].groupby(config, dropna=False)["metric"].agg(set)
    for key, got in present.items():
        lacking = [m for m in METRICS if m not in got]
        if lacking:
            key = key if isinstance(key, tuple) else (key,)
            desc = ", ".join(f"{c}={v}" for c, v in zip(config, key))
            raise ScoreError(
                f"{source}: configuration ({desc}) lacks metric(s) {lacking}. Score all six "
                f"metrics {list(METRICS)}, or pass require_all_metrics=False."
            )


def read_scores(path: str | Path, **kwargs) -> pd.DataFrame:
    """Read a score CSV and check it with :func:`check_scores`.

    Errors name the file and the CSV line. Keyword arguments go to :func:`check_scores`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "scores.csv"
    >>> rows = ["model,context_k,metric,score", "m,4,depth,0.5", "m,8,depth,0.6"]
    >>> _ = path.write_text(chr(10).join(rows) + chr(10))
    >>> read_scores(path, require_all_metrics=False)["score"].tolist()  # one metric of the six, on purpose
    [0.5, 0.6]
    """
    path = Path(path)
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise ScoreError(f"{path}: no such file.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ScoreError(f"{path}: not a readable CSV ({exc}).") from None
    return check_scores(frame, str(path), from_file=True, **kwargs)


def with_average(scores: pd.DataFrame) -> pd.DataFrame:
    """Add an ``average`` row (mean of the six metrics) to configurations that lack one.

    Returns a new frame; reported averages already present are kept as they are. Where the frame has a ``flagged``
    column (judge sanity flags), an average is flagged when any score it averages is.

    >>> f = pd.DataFrame({"model": "m", "context_k": 4.0, "test_id": "q1", "metric": ["depth", "relevance"],
    ...                   "score": [1.0, 0.5], "flagged": [True, False]})
    >>> with_average(f).query("metric == 'average'")[["score", "flagged"]].to_dict("records")
    [{'score': 0.75, 'flagged': True}]
    """
    keys = [c for c in SCORE_KEYS if c in scores.columns]
    six = scores[scores["metric"].isin(METRICS)]
    if "flagged" in six.columns:  # an average of a flagged score is flagged: it moves with it
        six = six.assign(flagged=six["flagged"].fillna(False).astype(bool))
        mean = six.groupby(keys, dropna=False).agg(score=("score", "mean"), flagged=("flagged", "any")).reset_index()
    else:
        mean = six.groupby(keys, dropna=False)["score"].mean().reset_index()
    have = scores.loc[scores["metric"] == AVERAGE, keys].drop_duplicates()
    mean = mean.merge(have, on=keys, how="left", indicator=True)
    mean = mean[mean["_merge"] == "left_only"].drop(columns="_merge").assign(metric=AVERAGE)
    return pd.concat([scores, mean], ignore_index=True)


def at_window(scores: pd.DataFrame, context_k: float | None) -> pd.DataFrame:
    """The rows of one operating point: those without a context (Table 5) when ``context_k`` is None, else those
    at that window.

    >>> at_window(pd.DataFrame({"context_k": [None, 4.0, 8.0], "score": [0.1, 0.2, 0.3]}), 4)["score"].tolist()
    [0.2]
    """
    return scores[scores["context_k"].isna()] if context_k is None else scores[scores["context_k"] == context_k]


def metric_sweep(scores: pd.DataFrame, metric: str = AVERAGE) -> pd.DataFrame:
    """The context sweep of one metric: rows with a context, sorted by model and context.

    Raises
    ------
    ScoreError
        If a model has two rows at one context (several systems or modes mixed):
        filter the frame to one system and mode first.
    """
    if metric not in ALL_METRICS:
        raise ScoreError(f"unknown metric {metric!r}; expected one of {list(ALL_METRICS)}.")
    rows = scores[(scores["metric"] == metric) & scores["context_k"].notna()]
    if metric == AVERAGE and rows.empty:
        rows = with_average(scores)
        rows = rows[(rows["metric"] == AVERAGE) & rows["context_k"].notna()]
    dup = rows.duplicated(subset=["model", "context_k"], keep=False)
    if dup.any():
        first = rows[dup].iloc[0]
        raise ScoreError(
            f"model {first['model']!r} has several {metric} scores at {first['context_k']:g}K "
            "(several systems, modes or questions mixed). Filter to one system and mode, and "
            "aggregate questions, before fitting curves."
        )
    return rows.sort_values(["model", "context_k"]).reset_index(drop=True)


def require_models(scores: pd.DataFrame, *models: str) -> None:
    """Raise a clear error if a named model is not in the frame."""
    known = sorted(scores["model"].dropna().unique())
    for model in models:
        if model not in known:
            raise ScoreError(f"unknown model {model!r}; this frame has {known}.")
