"""The report of an experiment folder: ``summary.md`` (every mean with its coverage), ``coverage.csv``,
``reference.csv`` and ``report/`` (:func:`fabnb.report.reproduce` on the run's own scores)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import __version__
from .config import Experiment
from .output import failures, now, stored, tally

__all__ = ["COVERAGE_COLUMNS", "coverage", "write_report"]

COVERAGE_COLUMNS = ["system", "context_k", "mode", "metric", "score", "n", "planned", "shown"]


def coverage(exp: Experiment, questions: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Mean score per system, window, mode and metric, with how many cells it covers of those planned.

    Returns
    -------
    DataFrame
        system, context_k, mode, metric, score (mean of the ok scores, None if none),
        n (ok scores), planned (questions x replicates), shown (``0.812 (n = 1,184 / 1,200)``).

    Examples
    --------
    >>> exp = Experiment.from_dict({"name": "demo", "output": "out", "contexts": {"windows": [1]},
    ...                             "systems": [{"name": "s", "model": "embedded"}],
    ...                             "judge": {"metrics": ["relevance"]}})
    >>> scores = pd.DataFrame({"system": ["s", "s"], "context_k": [1.0, 1.0], "mode": ["A", "A"],
    ...                        "metric": ["relevance"] * 2, "score": [0.5, 0.7], "status": ["ok", "ok"]})
    >>> coverage(exp, pd.DataFrame({"test_id": ["q1", "q2", "q3"]}), scores)["shown"].tolist()
    ['0.600 (n = 2 / 3)']
    """
    planned = len(questions) * exp.replicates
    rows = []
    ok = scores[scores["status"] == "ok"] if len(scores) else scores
    for spec in exp.systems:
        for k in exp.windows:
            for mode in exp.modes:
                for metric in exp.metrics:
                    cell = ok[(ok["system"] == spec.name) & (ok["context_k"].astype(float) == k)
                              & (ok["mode"] == mode) & (ok["metric"] == metric)] if len(ok) else ok
                    mean = float(cell["score"].astype(float).mean()) if len(cell) else None
                    rows.append({"system": spec.name, "context_k": k, "mode": mode, "metric": metric, "score": mean,
                                 "n": len(cell), "planned": planned,
                                 "shown": ("-" if mean is None else f"{mean:.3f}")
                                 + f" (n = {len(cell):,} / {planned:,})"})
    return pd.DataFrame(rows, columns=COVERAGE_COLUMNS)


def _reference_section(exp: Experiment, out: Path, answers: pd.DataFrame, questions: pd.DataFrame) -> list[str]:
    """``reference.csv`` and its summary lines: the no-LLM check of objective answers."""
    from ..judge import reference_scores

    if not (exp.reference_check and len(answers)):
        return []
    ok = answers[answers["status"] == "ok"]
    ref = reference_scores(ok, questions) if len(ok) else pd.DataFrame()
    ref.to_csv(out / "reference.csv", index=False)
    if not len(ref):
        return []
    agg = ref.groupby(["system", "context_k", "mode"])["correct"].agg(["mean", "size"]).reset_index()
    return ["## Reference check of objective answers (not G-Eval)", "",
            agg.rename(columns={"mean": "correct", "size": "n"}).to_markdown(index=False), ""]


def _analyses(exp: Experiment, out: Path, scores: pd.DataFrame) -> str:
    """``report/`` from the scores of one mode; '' when written, else why not."""
    from ..judge import to_score_frame
    from ..report import reproduce
    from ..scores import ScoreError, check_scores, with_average

    frame = to_score_frame(scores) if len(scores) else pd.DataFrame()
    if not len(frame):
        return "No scores yet: the analyses come with the judge stage."
    mode = "A" if "A" in set(frame["mode"]) else "B"
    frame = frame[frame["mode"] == mode].drop(columns=["n"])
    frame["model"] = frame["system"]  # the analyses compare systems; a model may serve several
    if exp.compare_published:
        from .. import published

        pub = published.scores()
        pub = pub[pub["context_k"].notna() & pub["model"].isin(published.PRIMARY_MODELS)]
        frame = pd.concat([frame, pub[["system", "model", "context_k", "output_k", "metric", "score"]].assign(
            mode="A", model=lambda f: f["model"] + " (paper)")], ignore_index=True)
    try:
        # An experiment may judge fewer than six metrics; the average is then over those it judged.
        checked = with_average(check_scores(frame, f"the scores of {exp.name}", require_all_metrics=False))
        reproduce(out / "report", scores=checked, source=f"the judge scores of {exp.name} (mode {mode})",
                  figures=exp.report.figures)
    except (ScoreError, ValueError, KeyError, IndexError) as exc:
        return f"The analyses need more scores than the stores hold yet ({type(exc).__name__}: {exc})."
    return ""


def write_report(exp: Experiment, questions: pd.DataFrame | None = None, held: tuple | None = None) -> Path:
    """``summary.md`` (plan against done, failures, cost, every mean with its coverage), ``reference.csv`` and
    ``report/`` (:func:`fabnb.report.reproduce` on these scores), from the stores as they are.

    ``held``: the stores' frames (:func:`fabnb.experiment.stored`) when the caller has read them already.
    Returns the path of ``summary.md``.
    """
    return _write_report(exp, questions, held)[0]


def _write_report(exp: Experiment, questions: pd.DataFrame | None, held: tuple | None) -> tuple[Path, bool]:
    """:func:`write_report`, and whether it wrote ``report/`` (the analyses need enough scores)."""
    questions = exp.questions() if questions is None else questions
    out = exp.output
    answers, scores = held if held is not None else stored(exp, questions)
    cov = coverage(exp, questions, scores)
    cov.to_csv(out / "coverage.csv", index=False)
    t = tally(exp, questions, (answers, scores))
    failed = failures(exp, questions, (answers, scores))
    lines = [f"# {exp.name}", "", f"Made by fabnb {__version__} from `{exp.source}` at {now()}.", "",
             "## Calls", "", t.to_markdown(index=False), ""]
    if len(failed):
        lines += ["## Failed cells (a rerun asks them again)", "", failed.to_markdown(index=False), ""]
    lines += _reference_section(exp, out, answers, questions)
    wide = cov.pivot_table(index=["system", "context_k", "mode"], columns="metric", values="shown", aggfunc="first")
    lines += ["## Scores (mean, with the cells it covers of those planned)", "",
              wide.reset_index().to_markdown(index=False), ""]
    note = _analyses(exp, out, scores)
    lines += ["## Analyses", "", note or "Fits, behaviour labels, operating points, crossovers, correlations, "
              "dilution deltas, profiles and figures: [report/report.md](report/report.md).", ""]
    (out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return out / "summary.md", not note
