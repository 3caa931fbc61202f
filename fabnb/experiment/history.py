"""A folder of runs as a history: each metric's trend, run after run, with the interval its questions support
(``fabnb history FOLDER``).

Each run is pooled the way ``fabnb compare``'s gate reads it: per question, the mean over the run's windows and
modes, then the mean over questions with its interval (:func:`fabnb.analysis.intervals.mean_intervals`: a t
interval below 100 questions, the bootstrap from there). Runs are ordered by when they last ended. A trend is only
a trend where the runs asked the same questions of the same judge: each row says what changed since the run before
(:func:`fabnb.experiment.comparison.run_differences`), and a change of questions or judge is marked, not hidden.
Two runs are the least a history draws; fewer is said, not drawn.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.scores import AVERAGE
from .comparison import ComparisonError, read_run, run_differences

__all__ = ["HISTORY_COLUMNS", "history_markdown", "run_history", "run_folders"]

#: The columns of :func:`run_history`'s table, in order.
HISTORY_COLUMNS = ["order", "run", "name", "ended", "fabnb", "judge", "system", "metric", "mean", "ci_low",
                   "ci_high", "n", "method", "shown", "changed", "comparable"]


def run_folders(folder: str | Path) -> list[Path]:
    """The run folders under ``folder`` (itself included): those that hold a ``manifest.json`` and a
    ``scores.jsonl``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ComparisonError(f"{folder} is not a folder; name a folder that holds run folders (fabnb run's "
                              "outputs).")
    return sorted({m.parent for m in folder.rglob("manifest.json") if (m.parent / "scores.jsonl").exists()})


def _ended(manifest: dict) -> str:
    """When the folder's last run ended (or started, if it never ended), as the manifest records it."""
    runs = manifest.get("runs") or [{}]
    return str(runs[-1].get("ended") or runs[-1].get("started") or "")


def run_history(folders, *, ci: float = 0.95) -> pd.DataFrame:
    """Each run's pooled mean of each system and metric, with its interval, in the order the runs ended.

    Parameters
    ----------
    folders : path or list of paths
        A folder holding run folders (:func:`run_folders`), or the run folders themselves.
    ci : float
        The intervals' level.

    Returns
    -------
    DataFrame
        :data:`HISTORY_COLUMNS`: order (0 for the first run), run (its folder), name, ended, fabnb (version),
        judge (model), system, metric (the six and ``average``), mean, ci_low, ci_high, n (questions), method,
        shown, changed (what differs from the run before, ``; ``-joined, "" for none or the first run) and
        comparable (False where the questions or the judge changed since the run before).

    Raises
    ------
    ComparisonError
        Fewer than two runs with scores: no history to draw. The message names the folder.

    Examples
    --------
    >>> import tempfile
    >>> run_history(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.experiment.comparison.ComparisonError: ... holds 0 run folders with scores; a history needs two or more...
    """
    from ..analysis.intervals import mean_intervals

    paths = run_folders(folders) if isinstance(folders, (str, Path)) else [Path(f) for f in folders]
    if len(paths) < 2:
        raise ComparisonError(f"{folders} holds {len(paths)} run folders with scores; a history needs two or more "
                              "(fabnb run writes one per experiment output folder).")
    runs = []
    for path in paths:
        manifest, per = read_run(path)
        runs.append((_ended(manifest), str(path), manifest, per))
    runs.sort(key=lambda r: (r[0], r[1]))
    frames, before = [], None
    for order, (ended, path, manifest, per) in enumerate(runs):
        pooled = per.groupby(["system", "test_id", "metric"], as_index=False)["score"].mean()
        means = mean_intervals(pooled, ci=ci)
        changes = run_differences(before, manifest) if before is not None else None
        means = means.assign(
            order=order, run=path, name=manifest.get("name", Path(path).name), ended=ended,
            fabnb=manifest.get("fabnb"), judge=(manifest.get("endpoints", {}).get("judge") or {}).get("model"),
            changed="" if changes is None else "; ".join(changes["what"]),
            comparable=changes is None or not changes["kind"].isin(["questions", "judge"]).any())
        frames.append(means)
        before = manifest
    out = pd.concat(frames, ignore_index=True)
    out["metric"] = pd.Categorical(out["metric"], categories=[*dict.fromkeys(
        m for m in [*out["metric"].unique()] if m != AVERAGE), AVERAGE])
    return out.sort_values(["system", "metric", "order"], ignore_index=True)[HISTORY_COLUMNS].assign(
        metric=lambda f: f["metric"].astype(str))


def history_markdown(table: pd.DataFrame, metric: str = AVERAGE) -> str:
    """``history.md``: the trend of ``metric`` per system, one line per run, with what changed between runs.

    >>> t = pd.DataFrame({"order": [0, 1], "run": ["a", "b"], "name": "n", "ended": ["t0", "t1"], "fabnb": "0.1",
    ...                   "judge": "j", "system": "s", "metric": "average", "mean": [0.5, 0.6], "ci_low": [0.4, 0.5],
    ...                   "ci_high": [0.6, 0.7], "n": 20, "method": "t", "shown": ["0.500 [0.400, 0.600]",
    ...                   "0.600 [0.500, 0.700]"], "changed": ["", "fabnb version"], "comparable": True})
    >>> print(history_markdown(t).splitlines()[7])
    | 1 | b | t1 | 0.600 [0.500, 0.700] | 20 | fabnb version |
    """
    chosen = table[table["metric"] == metric]
    lines = [f"# History: {metric}, each run pooled over its windows and modes (mean [interval])", ""]
    for system, rows in chosen.groupby("system", sort=True):
        lines += [f"## {system}", "", "| run | folder | ended | score | questions | changed since the run before |",
                  "|---|---|---|---|---|---|"]
        for r in rows.itertuples(index=False):
            score = r.shown if r.comparable else f"{r.shown} (not comparable with the run before)"
            changed = r.changed if r.comparable else f"**{r.changed}**"
            lines.append(f"| {r.order} | {r.run} | {r.ended} | {score} | {r.n} | {changed} |")
        lines.append("")
    return "\n".join(lines)
