"""The report of an experiment folder: ``summary.md`` (every mean with its coverage), ``coverage.csv``,
``reference.csv`` and ``report/`` (:func:`fabnb.analysis.reproduction.reproduce` on the run's own scores)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from .. import __version__
from .config import Experiment, gold_documents
from .output import failures, now, stored, tally
from .windows import window_sections

__all__ = ["COVERAGE_COLUMNS", "FEW_QUESTIONS", "ReportFiles", "caveats", "coverage", "question_scores",
           "scores_by_question", "write_report"]

COVERAGE_COLUMNS = ["system", "context_k", "mode", "metric", "score", "ci_low", "ci_high", "n", "planned",
                    "flagged", "score_unflagged", "shown"]
#: Fewer planned questions than this and the summary's caveats say the intervals are wide.
FEW_QUESTIONS = 30


def coverage(exp: Experiment, questions: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Mean score per system, window, mode and metric, with its interval and how many cells it covers of those planned.

    Parameters
    ----------
    scores : DataFrame
        A score store's frame (status, score, the keys); with a ``flags`` column
        (:func:`fabnb.judge.judge_flags`) the flagged scores are counted and a mean without them is given.

    Returns
    -------
    DataFrame
        system, context_k, mode, metric, score (mean of the ok scores, None if none), ci_low, ci_high
        (95% over questions, chosen by :func:`fabnb.core.stats.cell_means`: Student's t below 100 questions, the
        percentile bootstrap with the experiment's ``[report] bootstrap`` and ``seed`` from there; None for fewer
        than two questions or a constant sample, which shows "no spread"), n (ok scores),
        planned (questions x replicates), flagged (ok scores with a sanity flag), score_unflagged
        (the mean without them), shown (``0.812 [0.790, 0.833] (n = 1,184 / 1,200)``).

    Examples
    --------
    >>> exp = Experiment.from_dict({"name": "demo", "output": "out", "contexts": {"windows": [1]},
    ...                             "systems": [{"name": "s", "model": "embedded"}],
    ...                             "judge": {"metrics": ["relevance"]}})
    >>> scores = pd.DataFrame({"system": ["s", "s"], "context_k": [1.0, 1.0], "mode": ["A", "A"],
    ...                        "test_id": ["q1", "q2"], "metric": ["relevance"] * 2, "score": [0.5, 0.7],
    ...                        "status": ["ok", "ok"]})
    >>> coverage(exp, pd.DataFrame({"test_id": ["q1", "q2", "q3"]}), scores)["shown"].tolist()
    ['0.600 [0.000, 1.000] (n = 2 / 3)']
    >>> coverage(exp, pd.DataFrame({"test_id": ["q1", "q2", "q3"]}), scores.head(1))["shown"].tolist()
    ['0.500, no interval (n = 1 / 3)']
    """
    from ..core.stats import cell_means

    planned_in = {m: len(exp.asked_in(m, questions)) * exp.replicates for m in exp.modes}
    cell = ["system", "context_k", "mode", "metric"]
    ok = scores[scores["status"] == "ok"] if len(scores) else scores
    if len(ok):
        ok = ok.assign(context_k=ok["context_k"].astype(float), score=ok["score"].astype(float))
        means = cell_means(ok, cell, n_boot=exp.report.bootstrap, seed=exp.report.seed,
                           bounds=(0.0, 1.0)).set_index(cell)
        flagged = ok["flags"].fillna("").astype(bool) if "flags" in ok.columns else pd.Series(False, index=ok.index)
        counts = flagged.groupby([ok[c] for c in cell]).sum()
        clean = ok[~flagged].groupby(cell)["score"].mean()
    rows = []
    for spec in exp.systems:
        for k in exp.windows:
            for mode in exp.modes:
                for metric in exp.metrics:
                    key = (spec.name, float(k), mode, metric)
                    row = means.loc[key] if len(ok) and key in means.index else None
                    mean = None if row is None else float(row["mean"])
                    n = 0 if row is None else int(row["n"])
                    lo, hi = (None, None) if row is None or pd.isna(row["ci_low"]) else (row["ci_low"], row["ci_high"])
                    n_flagged = int(counts.get(key, 0)) if len(ok) else 0
                    spread = "no spread" if row is not None and row["method"] == "no spread" else "no interval"
                    shown = "-" if mean is None else f"{mean:.3f}" + (
                        f" [{lo:.3f}, {hi:.3f}]" if lo is not None else f", {spread}")
                    rows.append({"system": spec.name, "context_k": k, "mode": mode, "metric": metric, "score": mean,
                                 "ci_low": lo, "ci_high": hi, "n": n, "planned": planned_in[mode],
                                 "flagged": n_flagged,
                                 "score_unflagged": float(clean[key]) if len(ok) and key in clean.index else None,
                                 "shown": shown + f" (n = {n:,} / {planned_in[mode]:,})"})
    return pd.DataFrame(rows, columns=COVERAGE_COLUMNS)


def scores_by_question(scores: pd.DataFrame) -> pd.DataFrame:
    """The ok scores averaged over replicates, one row per system, window, mode, question and metric; ``flagged``
    where the store has judge sanity flags (any of the question's scores raised one)."""
    from ..judge import to_score_frame

    by = ["system", "model", "context_k", "mode", "test_id", "metric"]
    if not len(scores):
        return pd.DataFrame(columns=[*by, "score"])
    out = to_score_frame(scores, by=by).drop(columns="n")
    if "flags" in scores.columns:
        ok = scores[scores["status"] == "ok"]
        marked = ok.assign(flagged=ok["flags"].fillna("").astype(str).str.len() > 0)
        out = out.merge(marked.groupby(by, dropna=False)["flagged"].any().reset_index(), on=by, how="left")
    return out


def question_scores(exp: Experiment, questions: pd.DataFrame | None = None) -> pd.DataFrame:
    """The experiment's judge scores as a per-question score frame, for :mod:`fabnb.analysis.curves` and
    :mod:`fabnb.analysis.intervals`.

    Returns
    -------
    DataFrame
        system, model, context_k, mode, test_id, metric, score: the ok scores of the planned cells, replicates
        averaged (no ``average`` rows: :func:`fabnb.core.scores.with_average` adds them); and flagged (any of the
        question's scores raised a judge sanity flag) once the judge has scored.

    Examples
    --------
    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp() + "/new", "questions": {"sample": 3},
    ...                             "contexts": {"windows": [1]}, "systems": [{"name": "local", "model": "embedded"}]})
    >>> questions = exp.questions()
    >>> scores = question_scores(exp, questions)  # the run's stores, read as they are (empty before a run)
    >>> list(scores.columns), len(scores)
    (['system', 'model', 'context_k', 'mode', 'test_id', 'metric', 'score'], 0)
    """
    questions = exp.questions() if questions is None else questions
    return scores_by_question(stored(exp, questions)[1])


def _analyses(exp: Experiment, out: Path, per_question: pd.DataFrame) -> str:
    """``report/`` from the per-question scores (both modes where both ran); '' when written, else why not."""
    from ..analysis.reproduction import reproduce
    from ..core.scores import ScoreError, check_scores, with_average

    if not len(per_question):
        return "No scores yet: the analyses come with the judge stage."
    frame = per_question.assign(model=per_question["system"])  # the analyses compare systems; a model may serve several
    if exp.compare_published:
        from ..data import published

        pub = published.scores()
        pub = pub[pub["context_k"].notna() & pub["model"].isin(published.PRIMARY_MODELS)]
        # The paper's cell means, as one "question" each: they get no interval, and say so.
        frame = pd.concat([frame, pub[["system", "model", "context_k", "output_k", "metric", "score"]].assign(
            mode="A", test_id="(published mean)", model=lambda f: f["model"] + " (paper)")], ignore_index=True)
    modes = "".join(sorted(set(frame["mode"])))
    try:
        # An experiment may judge fewer than six metrics; the average is then over those it judged.
        checked = with_average(check_scores(frame, f"the scores of {exp.name}", require_all_metrics=False))
        reproduce(out / "report", scores=checked, source=f"the judge scores of {exp.name} (modes {modes})",
                  figures=exp.report.figures, n_boot=exp.report.bootstrap, seed=exp.report.seed)
    except (ScoreError, ValueError, KeyError, IndexError) as exc:
        return f"The analyses need more scores than the stores hold yet ({type(exc).__name__}: {exc})."
    return ""


def _judged_by_itself(exp: Experiment) -> list[str]:
    """The systems whose answering model is the judge's (the embedded model is one model wherever it serves)."""
    def name(endpoint, model: str) -> str:
        from ..models.local import MODEL_ALIAS

        return MODEL_ALIAS if endpoint.embedded else (model or "").strip().lower()

    judge = name(exp.judge, exp.judge.model or "")
    return [s.name for s in exp.systems if name(s.endpoint, s.model) == judge]


def caveats(exp: Experiment, questions: pd.DataFrame, scores: pd.DataFrame, cov: pd.DataFrame) -> list[str]:
    """What the data of this run cannot support, each with what would remove it (the summary's first section).

    Parameters
    ----------
    scores : DataFrame
        The score store's frame, with ``flags`` (:func:`fabnb.judge.judge_flags`) where computed.
    cov : DataFrame
        :func:`coverage` of the same scores.

    Returns
    -------
    list of str
        One sentence per caveat; empty when none applies.

    Examples
    --------
    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp() + "/new", "questions": {"sample": 3},
    ...                             "contexts": {"windows": [1]}, "systems": [{"name": "local", "model": "embedded"}]})
    >>> questions = exp.questions()
    >>> answers, scores = stored(exp, questions)  # the stores as they are: empty before a run
    >>> [c.split("**")[1] for c in caveats(exp, questions, scores, coverage(exp, questions, scores))]
    ['A toy judge', 'Few questions', 'One replicate', 'Self-preference', 'Too few windows to fit']
    """
    from ..analysis.curves import MIN_FIT_WINDOWS

    out = []
    if exp.judge.embedded:  # first: the embedded judge's scores look finished and mean little
        out.append("**A toy judge**: the judge is the embedded 270M model, there to show the kit works offline, not "
                   "to grade answers: it gives high scores to answers that repeat or miss the point, so no score here "
                   "says how good an answer is. A stronger judge (`[judge] model` and its endpoint) gives scores "
                   "worth reading; `fabnb rate --from RUN_DIR` checks any judge against experts.")
    n_q = len(questions)
    if n_q < FEW_QUESTIONS:
        width = (cov["ci_high"].astype(float) - cov["ci_low"].astype(float)).median() if len(cov) else float("nan")
        out.append(f"**Few questions**: {n_q} (fewer than {FEW_QUESTIONS}); the median 95% interval is "
                   + (f"{width:.2f} wide" if pd.notna(width) else "not drawn") + ", so close means do not differ. "
                   "More questions (`[questions] sample`) narrow it.")
    if exp.corpus.distractors is not None:
        gold = len(gold_documents(questions))
        out.append(f"**A part of the corpus**: the systems retrieved from the questions' {gold} gold documents and "
                   f"{exp.corpus.distractors} others (`[corpus] distractors`), so retrieval had fewer documents to "
                   "miss than over the whole corpus. Leave `distractors` out to index every document.")
    if exp.replicates == 1:
        out.append("**One replicate**: each answer was judged once, so the judge's own variance is not in the "
                   "intervals. `[judge] replicates = 3` measures it.")
    same = _judged_by_itself(exp)
    if same:
        out.append(f"**Self-preference**: the judge is the model that answered ({', '.join(same)}); a model tends "
                   "to rate its own answers higher (Zheng et al. 2023, *Judging LLM-as-a-judge*). A judge of another "
                   "family (`[judge] model`) removes this.")
    ok = scores[scores["status"] == "ok"] if len(scores) else scores
    weighted = float((ok["scoring"] == "weighted").mean()) if len(ok) and "scoring" in ok.columns else 0.0
    if len(ok) and weighted < 1.0:
        why = "`[judge] logprobs = false`" if not exp.logprobs else "the judge's server gave no logprobs"
        out.append(f"**Integer scores**: {1 - weighted:.0%} of the scores are plain integers ({why}), so scores tie "
                   "often and differences are coarse. A judge endpoint that returns top logprobs, with "
                   "`[judge] logprobs = true`, gives G-Eval's probability-weighted scores.")
    if len(ok) and "flags" in ok.columns:
        flagged = ok["flags"].fillna("").astype(bool)
        if flagged.any():
            out.append(f"**Flagged scores**: {flagged.mean():.0%} of the scores "
                       f"({int(flagged.sum()):,} of {len(ok):,}) raise a judge sanity flag (below); the means "
                       "without them are beside. Look at them in `fabnb explore` (filter: flagged), and consider a "
                       "stronger judge.")
    if len(exp.windows) < MIN_FIT_WINDOWS:
        out.append(f"**Too few windows to fit**: {len(exp.windows)} of {MIN_FIT_WINDOWS}; no log fit, behaviour "
                   f"label, operating point or crossover is given. `[contexts] windows` with {MIN_FIT_WINDOWS} or "
                   "more gives them.")
    return out


def _flag_section(scores: pd.DataFrame) -> list[str]:
    """Flagged scores per system and window, by flag (where any)."""
    from ..judge.sanity import FLAGS

    ok = scores[scores["status"] == "ok"] if len(scores) else scores
    if not len(ok) or "flags" not in ok.columns or not ok["flags"].fillna("").astype(bool).any():
        return []
    rows = []
    for (system, k), g in ok.groupby(["system", "context_k"]):
        flags = g["flags"].fillna("")
        rows.append({"system": system, "context_k": k, "scores": len(g), "flagged": int(flags.astype(bool).sum()),
                     **{name: int(flags.str.contains(name, regex=False).sum()) for name in FLAGS}})
    meaning = "; ".join(f"`{name}`: {text}" for name, text in FLAGS.items())
    return ["## Judge sanity flags", "", "Scores a reader should not take at face value, found without an LLM "
            f"(fabnb.judge.sanity; docs/statistics.md): {meaning}.", "", pd.DataFrame(rows).to_markdown(index=False),
            ""]


def _calibration_section(out: Path) -> list[str]:
    """The judge against experts (:mod:`fabnb.judge.calibration`): its calibration, or that there is none."""
    from ..judge.calibration import CalibrationError, markdown, read_calibration

    try:
        return markdown(read_calibration(out), out)
    except CalibrationError as exc:
        return ["## The judge against experts", "", str(exc), ""]


def _gap_section(exp: Experiment, per_question: pd.DataFrame) -> list[str]:
    """Mode B - mode A per system and window (where both modes ran)."""
    from ..analysis.intervals import mode_gap

    if not len(per_question) or not {"A", "B"} <= set(per_question["mode"]):
        return []
    gap = mode_gap(per_question, n_boot=exp.report.bootstrap, seed=exp.report.seed)
    gap = gap[gap["metric"] == "average"]
    if gap.empty:
        return []
    def signed(v) -> str:
        return f"{round(float(v), 3) + 0.0:+.3f}"  # + 0.0: no "-0.000"

    shown = pd.DataFrame({
        "system": gap["system"], "context_k": gap["context_k"].map("{:g}".format), "n": gap["n"].astype(str),
        "A": gap["score_a"].map("{:.3f}".format), "B": gap["score_b"].map("{:.3f}".format),
        "B - A [95%]": [signed(d) + (f" [{signed(lo)}, {signed(hi)}]" if pd.notna(lo) else ", no interval")
                        for d, lo, hi in zip(gap["delta"], gap["ci_low"], gap["ci_high"])],
        "B better": gap["b_better"].map("{:.0%}".format), "ties": gap["ties"].map("{:.0%}".format),
        "claimed": gap["claimed"].map({True: "yes", False: "no"})})
    return ["## Mode B - mode A (gold context against own retrieval)", "",
            "The mean over the questions scored in both modes of B - A (average of the judged metrics), with a "
            "paired 95% interval over those questions (unadjusted), and the share of them where B scored higher. "
            f"The {len(gap)} rows are one family: a gap is claimed where its Holm-adjusted paired p is below 0.05 "
            "(docs/statistics.md, multiple comparisons). Every metric: report/tables/mode_gap.csv.", "",
            shown.to_markdown(index=False, disable_numparse=True), ""]


class ReportFiles(NamedTuple):
    """What :func:`write_report` wrote: ``summary.md``'s path, and whether ``report/`` (the analyses) was written
    beside it (they need enough scores)."""

    summary: Path
    analyses: bool


def write_report(exp: Experiment, questions: pd.DataFrame | None = None, held: tuple | None = None) -> ReportFiles:
    """``summary.md`` (caveats, plan against done, failures, cost, every mean with its interval and coverage, judge
    sanity flags, mode B - A), ``reference.csv`` and ``report/`` (:func:`fabnb.analysis.reproduction.reproduce` on
    these scores), from the stores as they are.

    ``held``: the stores' frames (:func:`fabnb.experiment.stored`) when the caller has read them already.
    Returns :class:`ReportFiles`.
    """
    from ..judge.sanity import judge_flags

    questions = exp.questions() if questions is None else questions
    out = exp.output
    answers, scores = held if held is not None else stored(exp, questions)
    scores = judge_flags(scores, answers, questions)  # computed on reading: stores of any version get them
    cov = coverage(exp, questions, scores)
    cov.to_csv(out / "coverage.csv", index=False)
    t = tally(exp, questions, (answers, scores))
    failed = failures(exp, questions, (answers, scores))
    lines = [f"# {exp.name}", "", f"Made by fabnb {__version__} from `{exp.source}` at {now()}.", ""]
    warned = caveats(exp, questions, scores, cov)
    if warned:
        lines += ["## Caveats", "", *[f"- {c}" for c in warned], ""]
    lines += ["## Calls", "", t.to_markdown(index=False), ""]
    if len(failed):
        lines += ["## Failed cells (a rerun asks them again)", "", failed.to_markdown(index=False), ""]
    per_question = scores_by_question(scores)  # one frame for the window sections, the B - A table and report/
    lines += window_sections(exp, out, answers, questions, per_question)
    wide = cov.pivot_table(index=["system", "context_k", "mode"], columns="metric", values="shown", aggfunc="first")
    lines += ["## Scores (mean [95% interval], with the cells it covers of those planned)", "",
              f"Intervals: over questions, Student's t on the question means below 100 questions, from there the "
              f"percentile bootstrap, {exp.report.bootstrap:,} draws, seed "
              f"{exp.report.seed} (`[report] bootstrap`, `seed`).", "",
              wide.reset_index().to_markdown(index=False), ""]
    if cov["flagged"].sum():
        clean = cov.assign(shown=[("-" if pd.isna(v) else f"{v:.3f}") + f" ({f:,} left out)"
                                  for v, f in zip(cov["score_unflagged"], cov["flagged"])])
        lines += ["### Means with the flagged scores left out", "",
                  clean.pivot_table(index=["system", "context_k", "mode"], columns="metric", values="shown",
                                    aggfunc="first").reset_index().to_markdown(index=False), ""]
    lines += _flag_section(scores)
    lines += _calibration_section(out)
    main = per_question[per_question["mode"].isin(exp.contexts.modes)] if len(per_question) else per_question
    lines += _gap_section(exp, main)
    note = _analyses(exp, out, main)  # the position sweep's modes have their own section
    lines += ["## Analyses", "", note or "Fits, behaviour labels, operating points, crossovers, correlations, "
              "dilution deltas, profiles and figures: [report/report.md](report/report.md).", ""]
    (out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return ReportFiles(out / "summary.md", not note)
