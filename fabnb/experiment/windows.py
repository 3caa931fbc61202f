"""What a run's summary says of its context windows: why a curve bends.

Each section is drawn only when the run holds what it needs and says so otherwise (:func:`window_sections`):

- **Reference check of objective answers**: the judge-free check by window with Wilson intervals, beside the
  judged factuality on the same cells, and their agreement (:mod:`fabnb.analysis.objective`);
- **Retrieval by window**: gold-document recall (:func:`fabnb.analysis.retrieval.retrieval_by_window`);
- **Effective window**: NoLiMa's effective length (:func:`fabnb.analysis.curves.effective_window`);
- **Position of the gold passage**: the position sweep and where retrieval put the evidence
  (:mod:`fabnb.analysis.position`);
- **Retriever ablation**: systems that differ only in their retriever
  (:func:`fabnb.analysis.comparison.retriever_ablation`);
- **Scaling by test type**: each curve split by ROB / MULTI / GEN (:func:`fabnb.analysis.curves.scaling_by_type`).

Figures go to ``report/figures/`` of the run folder in ``[report] figures``' formats, linked from the summary and
shown by the results viewer with the report's own; the sections' tables also go to ``report/windows.json``, which
the results viewer draws under their headings (:mod:`fabnb.views.page`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.stats import shown_interval
from .config import Experiment

__all__ = ["summary_sections", "window_sections"]


def _figure(exp: Experiment, out: Path, name: str, caption: str, make) -> list[str]:
    """Draw ``make()`` (an Axes of a new figure) into ``report/figures/name.<format>`` (beside the report's own:
    the results viewer shows them all); the summary's link to it, or nothing when ``[report] figures`` is empty."""
    if not exp.report.figures:
        return []
    import matplotlib.pyplot as plt

    folder = out / "report" / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    fig = make().figure
    try:
        fig.tight_layout()
        for ext in exp.report.figures:
            fig.savefig(folder / f"{name}.{ext}", dpi=130, metadata={"Date": None} if ext == "svg" else None)
    finally:
        plt.close(fig)  # drawn for a file: a notebook does not show it again
    return [f"![{caption}](report/figures/{name}.{exp.report.figures[0]})", ""]


def _shown(frame: pd.DataFrame, mean: str = "mean", prefix: str = "ci_", method: str = "method") -> list[str]:
    """Each row's mean with the interval :func:`fabnb.core.stats.cell_means` chose, as the report prints it."""
    return [shown_interval(m, lo, hi, n, how) for m, lo, hi, n, how in
            zip(frame[mean], frame[f"{prefix}low"], frame[f"{prefix}high"], frame["n"], frame[method])]


class _Table(str):
    """A section's table as the summary prints it (markdown), keeping the frame it was made from, so that
    :func:`window_sections` can also hand the table to the results viewer (``report/windows.json``)."""

    frame: pd.DataFrame


def _table(frame: pd.DataFrame) -> _Table:
    shown = _Table(frame.to_markdown(index=False))
    shown.frame = frame
    return shown


def _viewer_tables(lines: list[str]) -> list[dict]:
    """Each table of ``lines`` under its nearest heading: ``{"title", "columns", "rows"}`` (one dict a row, NaN as
    None), what the results renderer draws."""
    import json

    tables, title = [], ""
    for line in lines:
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        elif isinstance(line, _Table):
            frame = line.frame.copy()
            frame.columns = [str(c) for c in frame.columns]
            rows = json.loads(frame.to_json(orient="records", force_ascii=False))
            tables.append({"title": title, "columns": list(frame.columns), "rows": rows})
    return tables


def _mean(value) -> str:
    return "- (none)" if pd.isna(value) else f"{value:.2f}"


def _rate(value, low, high, n) -> str:
    return "-" if pd.isna(value) else f"{value:.2f} [{low:.2f}, {high:.2f}] (n = {int(n):,})"


def _reference_section(exp: Experiment, out: Path, answers: pd.DataFrame, questions: pd.DataFrame,
                       scores: pd.DataFrame) -> list[str]:
    """``reference.csv``; the check's share correct by window with its interval, beside the judged factuality on
    the same cells, and their agreement per system."""
    from ..analysis.objective import reference_agreement, reference_beside_judged, reference_by_window
    from ..analysis.plots import plot_reference_check
    from ..judge import reference_scores

    if not (exp.reference_check and len(answers)):
        return []
    ok = answers[answers["status"] == "ok"]
    ref = reference_scores(ok, questions) if len(ok) else pd.DataFrame()
    ref.to_csv(out / "reference.csv", index=False)
    if not len(ref):
        return []
    by_window = reference_by_window(ref)
    shown = by_window.assign(correct=[_rate(r, lo, hi, n) for r, lo, hi, n in zip(
        by_window["rate"], by_window["ci_low"], by_window["ci_high"], by_window["n"])])
    lines = ["## Reference check of objective answers (not G-Eval)", "",
             "The share of objective answers the judge-free check finds correct, with its Wilson 95% interval "
             "(`reference.csv` has every cell).", "",
             _table(shown[["system", "context_k", "mode", "correct"]]), ""]
    if "factuality" not in exp.metrics or scores.empty:
        return lines + ["The judged factuality is not in this run's metrics: nothing to set the check beside.", ""]
    beside = reference_beside_judged(ref, scores, n_boot=exp.report.bootstrap, seed=exp.report.seed)
    agreement = reference_agreement(ref, scores)
    if beside.empty:
        return lines
    table = beside.assign(
        check=[_rate(r, lo, hi, n) for r, lo, hi, n in zip(beside["rate"], beside["rate_low"], beside["rate_high"],
                                                            beside["n"])],
        judged=_shown(beside, "judged", "judged_", "judged_method"))
    lines += ["### Beside the judged factuality (the same cells)", "",
              _table(table[["system", "context_k", "mode", "check", "judged"]]), ""]
    lines += _figure(exp, out, "reference_check", "The judge-free check beside the judged factuality",
                     lambda: plot_reference_check(beside))
    said = [f"- **{r.system}**: the judge passes (factuality >= 0.5) what the check finds correct in {r.agree:,} of "
            f"{r.n:,} cells ({r.agreement:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}]); Cohen's kappa "
            f"{'-' if pd.isna(r.kappa) else f'{r.kappa:.2f}'}; point-biserial r "
            + ("- (no spread)" if pd.isna(r.r) else f"{r.r:.2f}" + ("" if pd.isna(r.r_low) else
                                                                   f" [{r.r_low:.2f}, {r.r_high:.2f}]"))
            + f"; the judge's mean factuality {_mean(r.judged_if_correct)} on correct answers and "
            f"{_mean(r.judged_if_wrong)} on wrong ones"
            for r in agreement.itertuples()]
    return lines + ["### The judge against the check", "", *said, ""]


def _retrieval_section(answers: pd.DataFrame) -> list[str]:
    """Gold-document recall per system, window and mode, when a system's context is known."""
    from ..analysis.retrieval import retrieval_by_window

    table = retrieval_by_window(answers) if len(answers) and "gold_retrieved" in answers else pd.DataFrame()
    if table.empty or table["recall"].isna().all():
        return []
    shown = table.assign(recall=[f"{r:.2f} [{lo:.2f}, {hi:.2f}] (n = {n - u:,})" if n > u else "no sources"
                                 for r, lo, hi, n, u in zip(table["recall"], table["ci_low"], table["ci_high"],
                                                            table["cells"], table["no_sources"])])
    return ["## Retrieval by window (gold-document recall, Wilson 95%)", "",
            "The share of answered cells whose context held a gold document; cells of a system without sources are "
            "counted apart.", "", _table(shown.drop(columns=["ci_low", "ci_high"])), ""]


def _effective_section(exp: Experiment, per_q: pd.DataFrame) -> list[str]:
    """Each system's effective window on the average of its judged metrics, per mode, from two windows on."""
    from ..analysis.curves import effective_window
    from ..core.scores import with_average

    if len(exp.windows) < 2 or per_q.empty:
        return []
    rows = []
    for (system, mode), g in with_average(per_q).groupby(["system", "mode"], sort=True):
        if g["context_k"].nunique() < 2:
            continue
        t = effective_window(g.assign(model=system), n_boot=exp.report.bootstrap, seed=exp.report.seed)
        rows += [{"system": system, "mode": mode, "effective window": "none" if pd.isna(r.effective_k) else
                  f"{r.effective_k:g}K", "range over questions": "" if pd.isna(r.low_k) else
                  f"{r.low_k:g}-{r.high_k:g}K", "ends": r.ends, "reference": f"{r.reference} {r.reference_score:.3f}",
                  "questions": r.n} for r in t.itertuples()]
    if not rows:
        return []
    return ["## Effective window (85% of the reference score, average of the judged metrics)", "",
            "NoLiMa's effective length: the last window of the first run that keeps 85% of the reference; the range "
            f"is over {exp.report.bootstrap:,} bootstrap draws of the questions (docs/statistics.md). The report's "
            "operating point is another question: the first window that reaches 90% of the curve's peak.", "",
            _table(pd.DataFrame(rows)), ""]


def _position_section(exp: Experiment, out: Path, answers: pd.DataFrame, per_q: pd.DataFrame) -> list[str]:
    """The position sweep's score by depth and its test; where retrieval put the evidence (mode A)."""
    from ..analysis.plots import plot_position
    from ..analysis.position import position_effect, score_by_depth, score_by_evidence_depth
    from ..core.scores import with_average

    lines = []
    scored = with_average(per_q) if len(per_q) else per_q
    average = scored[scored["metric"] == "average"] if len(scored) else scored
    if exp.contexts.positions and len(average):
        table = score_by_depth(average, n_boot=exp.report.bootstrap, seed=exp.report.seed)
        effect = position_effect(average)
        wide = table.assign(shown=_shown(table)).pivot_table(index=["system", "context_k"], columns="depth",
                                                             values="shown", aggfunc="first")
        wide.columns = [f"{c}%" for c in wide.columns]
        wide = wide.fillna("-")
        lines += ["## Position of the gold passage (the position sweep, average of the judged metrics)", "",
                  "The gold passage placed at each depth among the window's other chunks, the same questions at "
                  "every depth; a position effect is claimed only under Holm's correction over this table.", "",
                  _table(wide.reset_index()), "",
                  *[f"- **{r.system} {r.context_k:g}K**: {r.said}" for r in effect.itertuples()], ""]
        lines += _figure(exp, out, "position", "Score against the gold passage's depth",
                         lambda: plot_position(table, "average"))
    observed = score_by_evidence_depth(answers, average) if len(average) else pd.DataFrame()
    if len(observed):
        wide = observed.assign(shown=_shown(observed)).pivot_table(index=["system", "context_k"], columns="band",
                                                                    values="shown", aggfunc="first").fillna("-")
        lines += ["## Where retrieval put the gold evidence (mode A, observed)", "",
                  "Each band holds different questions: a difference between bands is not the position's effect "
                  "alone (the position sweep, `[contexts] positions`, places the same questions at each depth).", "",
                  _table(wide.reset_index()), ""]
    return lines


def _difference(d, low, high, claimed: bool, is_base: bool) -> str:
    if is_base:
        return "(base)"
    if pd.isna(d):
        return "- (no paired questions)"
    if pd.isna(low):
        return f"{d:+.3f}, no interval (no spread, or one question)"
    return f"{d:+.3f} [{low:+.3f}, {high:+.3f}]" + (" claimed" if claimed else "")


def _ablation_section(exp: Experiment, out: Path, per_q: pd.DataFrame) -> list[str]:
    """Systems of the reference kind on one model that differ only in their retriever, against bm25 (or the
    first retriever listed)."""
    from ..analysis.comparison import retriever_ablation
    from ..analysis.plots import plot_scaling
    from ..core.scores import with_average

    refs = [s for s in exp.systems if s.kind == "reference"]
    groups: dict = {}
    for s in refs:
        groups.setdefault(s.model, []).append(s)
    lines = []
    for model, specs in groups.items():
        named = {s.name: s.retriever for s in specs}
        if len(set(named.values())) < 2 or per_q.empty:
            continue
        base = "bm25" if "bm25" in named.values() else specs[0].retriever
        bases = [name for name, r in named.items() if r == base]
        for mode in exp.contexts.modes:
            part = per_q[per_q["mode"] == mode]
            table = retriever_ablation(part, named, base, n_boot=exp.report.bootstrap, seed=exp.report.seed)
            if table.empty:
                continue
            table = table.assign(score=_shown(table),
                                 difference=[_difference(d, lo, hi, c, name in bases) for d, lo, hi, c, name in
                                             zip(table["diff"], table["diff_low"], table["diff_high"],
                                                 table["claimed"], table["system"])])
            lines += [f"## Retriever ablation ({model}, mode {mode}, average of the judged metrics)", "",
                      f"The same questions and windows through each retriever; the difference is from {base} on the "
                      "same questions, claimed under Holm's correction over the table.", "",
                      _table(table[["retriever", "system", "context_k", "score", "difference"]]), ""]
            curves = with_average(part[part["system"].isin(list(named))])
            curves = curves.assign(model=curves["system"].map(named))
            lines += _figure(exp, out, f"retrievers_{mode}", f"Score by window per retriever, mode {mode}",
                             lambda c=curves: plot_scaling(c.groupby(["model", "context_k", "metric"],
                                                                    as_index=False)["score"].mean()))
    return lines


def _type_section(exp: Experiment, out: Path, per_q: pd.DataFrame, questions: pd.DataFrame) -> list[str]:
    """Each system's curve per test type (the average of its judged metrics), per mode; the figure draws the curves
    with enough questions."""
    from ..analysis.curves import scaling_by_type
    from ..analysis.plots import plot_scaling
    from ..core.scores import with_average

    if len(exp.windows) < 2 or per_q.empty or "test_type" not in questions:
        return []
    parts = []
    for mode in exp.contexts.modes:
        part = per_q[per_q["mode"] == mode]
        if len(part):
            t = scaling_by_type(part.assign(model=part["system"]), questions, n_boot=exp.report.bootstrap,
                                seed=exp.report.seed)
            parts.append(t.assign(mode=mode))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if table.empty:
        return []
    table["slope"] = [("-" if pd.isna(s) else f"{s:+.3f} [{lo:+.3f}, {hi:+.3f}]") for s, lo, hi in
                      zip(table["slope"], table["slope_ci_low"], table["slope_ci_high"])]
    table["effective"] = [("-" if pd.isna(k) else f"{k:g}K") + (f" ({e})" if isinstance(e, str) and e else "")
                          for k, e in zip(table["effective_k"], table["ends"])]
    lines = ["## Scaling by test type (average of the judged metrics)", "",
             "Each curve split by the question's test type: a label only with evidence (the table one family), "
             "none below the questions a curve needs.", "",
             _table(table.rename(columns={"model": "system"})[["system", "mode", "test_type", "n_questions", "label",
                                                               "slope", "effective"]]), ""]
    drawn = table[table["label"] != "too few questions"]
    if drawn.empty:
        return lines
    typed = with_average(per_q).merge(questions[["test_id", "test_type"]], on="test_id")
    typed = typed[(typed["metric"] == "average") & typed["mode"].isin(drawn["mode"])]
    typed = typed.assign(model=typed["system"] + " | " + typed["test_type"] + " (" + typed["mode"] + ")")
    keep = set(drawn["model"] + " | " + drawn["test_type"] + " (" + drawn["mode"] + ")")
    curves = typed[typed["model"].isin(keep)].groupby(["model", "context_k", "metric"], as_index=False)["score"].mean()
    return lines + _figure(exp, out, "scaling_by_type", "Score by window per test type",
                           lambda: plot_scaling(curves))


def window_sections(exp: Experiment, out: Path, answers: pd.DataFrame, questions: pd.DataFrame,
                    per_question: pd.DataFrame) -> list[str]:
    """The summary's sections on the windows (the module's list), in order, as markdown lines; their figures in
    ``report/figures`` and their tables in ``report/windows.json`` (``{"sections": [{"title", "columns", "rows"}]}``,
    for the results viewer), both under ``out``.

    Parameters
    ----------
    answers : DataFrame
        The run's answer cells (the stores' frame without sources).
    questions : DataFrame
        The run's questions (test_id, question, ground_truth_answer, test_type, ...).
    per_question : DataFrame
        :func:`fabnb.experiment.report.scores_by_question` of the run's scores.

    Examples
    --------
    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp(), "contexts": {"windows": [1]},
    ...                             "systems": [{"name": "local", "model": "embedded"}]})
    >>> window_sections(exp, exp.output, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())  # no answers yet
    []
    """
    import json

    main = per_question[per_question["mode"].isin(exp.contexts.modes)] if len(per_question) else per_question
    lines = _reference_section(exp, out, answers, questions, per_question)
    lines += _retrieval_section(answers[answers["mode"].isin(exp.contexts.modes)] if len(answers) else answers)
    lines += _effective_section(exp, main)
    lines += _position_section(exp, out, answers, per_question)
    lines += _ablation_section(exp, out, main)
    lines += _type_section(exp, out, main, questions)
    # The same tables for the results viewer (fabnb.views.page reads them), rewritten with every summary.
    (out / "report").mkdir(parents=True, exist_ok=True)
    (out / "report" / "windows.json").write_text(json.dumps({"sections": _viewer_tables(lines)}, indent=1,
                                                            ensure_ascii=False), encoding="utf-8")
    return [str(line) for line in lines]


def summary_sections(summary: str | Path, *titles: str, missing: str = "say") -> str:
    """The sections of a run's ``summary.md`` whose ``##`` heading starts with one of ``titles``, in the file's
    order, for a notebook to show; a title the summary lacks is said (``missing="say"``), or raises
    :class:`FileNotFoundError` naming it (``missing="raise"``: a notebook run by the suite fails on it). Figure links
    are made relative to the working folder, so they show where the notebook runs.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "summary.md"
    >>> _ = path.write_text("# run\\n\\n## Calls\\n\\nt\\n\\n## Effective window (85%)\\n\\nrows\\n")
    >>> print(summary_sections(path, "Effective window", "Position"))
    ## Effective window (85%)
    <BLANKLINE>
    rows
    <BLANKLINE>
    *Not in this summary: Position (the run holds too little for it, or it was not asked for).*
    <BLANKLINE>
    >>> summary_sections(path, "Position", missing="raise")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: ... has no section 'Position': the run holds too little for it, or it was not asked for.
    """
    import os
    import re

    summary = Path(summary)
    text = summary.read_text(encoding="utf-8")
    here = os.path.relpath(summary.parent)
    parts = re.split(r"(?m)^(?=## )", text)
    shown = [p for p in parts if p.startswith("## ") and any(p[3:].startswith(t) for t in titles)]
    absent = [t for t in titles if not any(p[3:].startswith(t) for p in shown)]
    if absent and missing == "raise":
        raise FileNotFoundError(f"{summary} has no section {', '.join(map(repr, absent))}: the run holds too little "
                                "for it, or it was not asked for.")
    out = "".join(shown).replace("](report/figures/", f"]({here}/report/figures/")
    if absent:
        out += (f"\n*Not in this summary: {', '.join(absent)} (the run holds too little for it, or it was not asked "
                "for).*")
    return out.strip() + "\n" if out.strip() else ""
