"""The run of an experiment: answers, judge scores, the report, one function per stage, resumable at any point.

Every answer and score is on disk when it arrives (the stores); a rerun after a kill
skips them, asks again the cells that failed, and refuses a changed setting
(:func:`fabnb.experiment.check_output`). ``budget_usd`` stops a stage before a call could
pass it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from .. import __version__
from ..core.records import cut_records, hold
from ..judge.rubrics import RUBRIC_VERSION, rubric_hash
from .batching import prefill_answers, prefill_judge, refuse_without_routes
from .config import Experiment, ExperimentError
from .output import (
    ExperimentRun,
    check_output,
    failures,
    file_hash,
    json_records,
    now,
    planned,
    questions_hash,
    record_failure,
    spent,
    stored,
    stores,
    tally,
    versions,
    write_manifest,
)
from .planning import ConfirmationNeeded, Plan, PlanInputs, keep_probes, plan, prepare_systems
from .prices import price_of
from .progress import MARKER, ProgressFile, progress_bar, write_marker
from .report import write_report
from .testing import run_tests

__all__ = ["ConfirmationNeeded", "ExperimentRun", "run_experiment"]


def _budget_limit(exp: Experiment, stage: str, plan_: Plan, questions: pd.DataFrame) -> int | None:
    """How many more calls of a stage fit in the budget, each counted at its largest estimate."""
    if exp.budget_usd is None:
        return None
    return plan_.calls_within(exp.budget_usd, spent(tally(exp, questions)), stage)


def _start_manifest(exp: Experiment, old: dict | None, plan_: Plan, questions: pd.DataFrame) -> dict:
    """The manifest of this run, from the folder's old one (None for a new folder): signatures, versions, runs."""
    signatures = exp.signatures()
    if old is not None:  # keep the systems of earlier runs that this file no longer lists
        signatures["systems"] = {**old.get("signatures", {}).get("systems", {}), **signatures["systems"]}
    reported = {r.endpoint: r.model_reported for r in plan_.probes.itertuples() if r.model_reported}
    endpoints = {s.name: {"kind": s.kind, "model": s.model, "model_reported": reported.get(s.identity(), "")}
                 for s in exp.systems}
    endpoints["judge"] = {"model": exp.judge.model, "model_reported": reported.get(exp.judge.identity(), "")}
    return {"name": exp.name, "experiment_file": exp.source, "experiment_sha256": file_hash(exp),
            "fabnb": __version__, "versions": versions(), "rubric_version": RUBRIC_VERSION, "seed": exp.seed,
            "rubric_sha256": rubric_hash(), "questions_sha256": questions_hash(questions),
            "signatures": signatures, "question_ids": list(questions["test_id"]),
            # The prices this run was costed with (the file's [prices], else fabnb's table): a cell's cost in the
            # results views is its tokens at these.
            "prices": {m: p for m in {*(s.endpoint.model for s in exp.systems if s.uses_endpoint), exp.judge.model}
                       if (p := price_of(m, exp.prices)) is not None},
            "questions_source": exp.questions_source,
            "statistics": {"interval": "95% over questions, chosen by sample size (fabnb.core.stats.cell_means: "
                                       "Student's t below 100 questions, the percentile bootstrap from there)",
                           "bootstrap_draws": exp.report.bootstrap, "bootstrap_seed": exp.report.seed},
            "endpoints": {**(old or {}).get("endpoints", {}), **endpoints},
            "runs": (old or {}).get("runs", []) + [{"started": now(), "ended": None, "status": "running"}],
            "planned": json_records(plan_.table.drop(columns=["price"]))}


def _answer_stage(exp: Experiment, systems: list, questions: pd.DataFrame, plan_: Plan, bar, echo=print) -> bool:
    """Run the grid of answers into the answer store (the batch-mode systems' replies first, through the batch
    routes: :func:`fabnb.experiment.batching.prefill_answers`); False when the budget deferred cells."""
    from ..rag import run_grid

    prefill_answers(exp, systems, questions, echo, bar)
    a_store, _ = stores(exp.output)
    deferred = 0
    for modes, asked in exp.mode_groups(questions):  # a position sweep may ask a sample of the questions
        grid = run_grid(systems, asked, exp.configs(), a_store, modes=modes, concurrency=exp.concurrency,
                        progress=bar if bar is not None else False,
                        limit=_budget_limit(exp, "answers", plan_, questions))
        deferred += grid.deferred
    return not deferred


def _judge_stage(exp: Experiment, questions: pd.DataFrame, plan_: Plan, bar, echo=print) -> bool:
    """Judge every stored answer of the plan into the score store (with ``[judge] mode = "batch"`` the replies come
    first through the batch routes: :func:`fabnb.experiment.batching.prefill_judge`); False when the budget
    deferred cells."""
    from ..judge import judge_results

    judge = exp.judge.llm(concurrency=exp.judge_concurrency, n_ctx=exp.judge_n_ctx, logprobs=exp.logprobs)
    prefill_judge(exp, questions, judge, echo, bar)
    if bar is not None:
        bar.start_stage("judge", *plan_.stage_counts("judge"))
    a_store, s_store = stores(exp.output)
    # The answers with their sources are the largest object of the run: they live only in this function.
    answers, _ = planned(exp, questions, a_store.frame(), pd.DataFrame())
    if not len(answers):
        return True
    run = judge_results(answers, questions, judge, s_store, metrics=exp.metrics, replicates=exp.replicates,
                        logprobs=exp.logprobs, temperature=exp.judge_temperature, reason_chars=exp.reason_chars,
                        max_answer_tokens=exp.max_answer_tokens, progress=bar if bar is not None else False,
                        limit=_budget_limit(exp, "judge", plan_, questions), workers=exp.judging.workers)
    return not run.deferred


def run_experiment(exp: Experiment | str | Path, *, dry_run: bool = False, probe: bool = True,
                   progress: bool = True, echo=print, endpoint_moved=(), yes: bool = False) -> ExperimentRun:
    """Run (or, with ``dry_run``, plan) an experiment into its output folder.

    Stages: answers (:func:`fabnb.rag.run_grid`), judge scores
    (:func:`fabnb.judge.judge_results`), reference checks for objective questions, then
    the report. With ``[tests]`` the stages are RAG-TESTER's instead: tests, answers, oracle
    verdicts and the study's tables (:mod:`fabnb.experiment.testing`). Every answer and
    score is on disk when it arrives; a rerun after a kill skips them, asks again the cells
    that failed, and refuses a changed setting (:func:`fabnb.experiment.check_output`).
    ``budget_usd`` stops a stage before a call could pass it.

    Parameters
    ----------
    exp : Experiment or path of a TOML file
    dry_run : bool
        Print the plan; make no answer, write nothing.
    probe : bool
        Measure each endpoint with one small call (the plan's time column).
    progress : bool
        One progress bar over the stages, with done/total and an ETA.
    echo : callable
        Where the plan and the summary lines go (``print``).
    endpoint_moved : iterable of str
        Systems (or ``"judge"``) whose server moved to a new address but is the same server (the same model):
        the folder's cells stay theirs, and the move is recorded in the manifest.
    yes : bool
        Start a plan above the confirmation threshold (:meth:`Plan.confirmation`: $50 or 2 h by default);
        without it such a plan raises :class:`ConfirmationNeeded` before any call.

    Returns
    -------
    ExperimentRun

    Examples
    --------
    A dry run plans and writes nothing (``fabnb run FILE --dry-run``):

    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp() + "/new",
    ...                             "questions": {"sample": 1}, "contexts": {"windows": [1]},
    ...                             "systems": [{"name": "local", "model": "embedded"}]})
    >>> run = run_experiment(exp, dry_run=True, probe=False, echo=lambda text: None)
    >>> run.status, int(run.plan.table["todo"].sum()), exp.output.exists()
    ('dry-run', 7, False)
    """
    exp = Experiment.from_file(exp) if isinstance(exp, (str, Path)) else exp
    exp.check_environment()
    opts = _Options(dry_run, probe, progress, echo, tuple(endpoint_moved), yes)
    if dry_run:
        return _run(exp, opts)
    try:
        exp.output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExperimentError(f"{exp.source}: output = {str(exp.output)!r} cannot be made a folder "
                              f"({exc.strerror or exc}); name a folder you can write to.") from None
    with hold(exp.output, f"the experiment {exp.name!r}"):  # one run per folder: a second is refused at once
        marked = not (exp.output / MARKER).exists()
        if marked:
            # Seen by the runs sidebar from its first second, not after the questions, the chunking, the model's
            # start and the plan (10-20 s); a folder with a marker keeps it until check_output has passed.
            write_marker(exp.output, exp.name, exp.source)
        try:
            return _run(exp, opts)
        except BaseException:
            if marked and not (exp.output / "manifest.json").exists():
                (exp.output / MARKER).unlink(missing_ok=True)  # refused before it began: no run to list
            raise


@dataclass(frozen=True)
class _Options:
    """The caller's choices for one run (:func:`run_experiment`'s keywords)."""

    dry_run: bool
    probe: bool
    progress: bool
    echo: Callable
    moved: tuple
    yes: bool


def _run(exp: Experiment, opts: _Options) -> ExperimentRun:
    """Check the folder, read and build once, plan; then, unless a dry run, check and start the stages."""
    old = check_output(exp, opts.moved)
    if exp.tests is not None:  # RAG-TESTER: tests written from the corpus, not FAB-Bench questions
        return run_tests(exp, opts, old)
    inputs = _inputs(exp, build=opts.probe or not opts.dry_run)
    if not opts.dry_run:
        prepare_systems(exp, inputs.built)
    plan_ = plan(exp, probe=opts.probe, inputs=inputs)
    opts.echo(plan_.render())
    if opts.dry_run:
        return ExperimentRun(exp.output, plan_, tally(exp, inputs.questions), "dry-run",
                             failures(exp, inputs.questions))
    _refuse_dead_endpoints(exp, plan_)
    refuse_without_routes(exp, inputs.built)
    reason = None if opts.yes else plan_.confirmation(exp)
    if reason:
        raise ConfirmationNeeded(f"{exp.source}: {reason}")
    manifest = _open_output(exp, old, opts.moved, plan_, inputs.questions)
    return _stages(exp, inputs, plan_, manifest, opts)


def _inputs(exp: Experiment, build: bool) -> PlanInputs:
    """The questions, the chunked corpus and (to probe or run) the built systems, read once for plan and run.

    Building a system starts nothing but the embedded server; a dry run without probes starts nothing at all."""
    return PlanInputs.read(exp, build)


def _refuse_dead_endpoints(exp: Experiment, plan_: Plan) -> None:
    """Fail fast: a dead endpoint would fail every one of its cells, slowly, after its retries."""
    down = plan_.probes[plan_.probes["error"].astype(bool)] if len(plan_.probes) else plan_.probes
    if len(down):
        raise ExperimentError(f"{exp.source}: " + "; ".join(f"{r.endpoint} did not answer its probe ({r.error})"
                                                           for r in down.itertuples())
                              + ". Nothing was asked. Start the server or fix base_url / base_url_env and the key, "
                              "then run again (--no-probe skips the probe and records each failed cell instead).")


def _open_output(exp: Experiment, old: dict | None, moved: tuple, plan_: Plan, questions: pd.DataFrame) -> dict:
    """Write this run's manifest, the folder's marker and the kept probes; the manifest, which the stages update."""
    out = exp.output
    out.mkdir(parents=True, exist_ok=True)
    manifest = _start_manifest(exp, old, plan_, questions)
    if moved and old is not None:
        before, after = old.get("signatures", {}), exp.signatures()
        manifest["runs"][-1]["endpoint_moved"] = {n: {"from": _endpoint_of(before, n), "to": _endpoint_of(after, n)}
                                                  for n in moved}
    write_manifest(out, manifest)
    write_marker(out, exp.name, exp.source)
    keep_probes(out, plan_.probes)  # a rerun against the same endpoints reads these rates and sends no probe
    return manifest


def _save(exp: Experiment, manifest: dict, questions: pd.DataFrame, status: str,
          held: tuple | None = None) -> pd.DataFrame:
    """Record ``status`` and the stores' counts in the manifest, write it; the tally."""
    t = tally(exp, questions, held)
    manifest["runs"][-1].update(ended=now(), status=status)
    _tally_into(manifest, exp, t)
    write_manifest(exp.output, manifest)
    return t


def _stages(exp: Experiment, inputs: PlanInputs, plan_: Plan, manifest: dict, opts: _Options) -> ExperimentRun:
    """Answers, judge scores and the report, the manifest saved after each; a stop or a failure is recorded."""
    questions = inputs.questions
    bar = progress_bar(exp.output, plan_.stage_counts("answers"), opts.progress)
    try:
        finished = _answer_stage(exp, [inputs.built[s.name] for s in exp.systems], questions, plan_, bar, opts.echo)
        _save(exp, manifest, questions, "running")
        finished = finished and _judge_stage(exp, questions, plan_, bar, opts.echo)
        bar.close("reporting")
        status = "finished" if finished else "stopped-by-budget"
        held = stored(exp, questions)  # read once for the report, the manifest and the summary
        _save(exp, manifest, questions, "reporting", held)
        report = write_report(exp, questions, held)
        t = _save(exp, manifest, questions, status, held)
    except BaseException as exc:  # a full disk, a bug, Ctrl-C: the manifest says so, never "running" for ever
        _record_end(exp, manifest, questions, bar, exc, opts.echo)
        raise
    failed = failures(exp, questions, held)
    opts.echo(_summary_line(exp, t, failed, status, report.analyses))
    return ExperimentRun(exp.output, plan_, t, status, failed, report.summary)


def _record_end(exp: Experiment, manifest: dict, questions: pd.DataFrame, bar: ProgressFile, exc: BaseException,
                echo) -> None:
    """Ctrl-C, the kernel's stop button, SIGTERM from fabnb's JupyterLab extension: ``stopped``, a stop a rerun
    resumes; anything else ``failed``, with its cause."""
    status = "stopped" if isinstance(exc, KeyboardInterrupt) else "failed"
    manifest["runs"][-1].update(ended=now(), status=status, cause=f"{type(exc).__name__}: {exc}"[:500])
    try:  # the counts and the money as stored, for the sidebar and `fabnb run --dry-run` alike
        _tally_into(manifest, exp, tally(exp, questions))
    except Exception:  # noqa: BLE001 - a store that cannot be read now must not hide why the run ended
        pass
    bar.close(status)
    record_failure(exp.output, manifest, echo)


def _tally_into(manifest: dict, exp: Experiment, t: pd.DataFrame) -> None:
    """The manifest's stage counts and money spent, from :func:`tally`."""
    manifest["stages"] = json_records(t)
    manifest["spent_usd"] = None if t["cost_usd"].isna().any() and exp.budget_usd is None else spent(t)


def _endpoint_of(signatures: dict, name: str) -> str | None:
    """The endpoint a manifest's signatures record for a system, or for ``"judge"``."""
    sig = signatures.get("judge", {}) if name == "judge" else signatures.get("systems", {}).get(name, {})
    return sig.get("endpoint")


def _summary_line(exp: Experiment, t: pd.DataFrame, failed: pd.DataFrame, status: str,
                  wrote_analyses: bool = True) -> str:
    lines = [f"{status}: " + "; ".join(f"{r.system} {r.stage} {r.ok:,}/{r.planned:,} ok"
                                       + (f", {r.failed:,} failed" if r.failed else "") for r in t.itertuples())]
    if len(failed):
        lines.append("failed cells by cause (a rerun asks them again): " + "; ".join(
            f"{r.system} {r.stage} {r.cause}: {r.cells}" for r in failed.itertuples()))
    cut = cut_records(exp.output)
    if cut:
        lines.append(f"{len(cut)} cut or unreadable record(s) skipped, their cells asked again: " + "; ".join(
            f"{Path(f).name} line {n}" for f, n in cut[:5]) + ("; ..." if len(cut) > 5 else ""))
    lines.append(f"spent: ${spent(t):,.4f}" + (" (some models have no known price)" if t["cost_usd"].isna().any()
                                               else "")
                 + (f" of a ${exp.budget_usd:,.2f} budget" if exp.budget_usd is not None else ""))
    lines.append(f"wrote {exp.output / 'summary.md'}" + (f" and {exp.output / 'report'}" if wrote_analyses else
                                                          " (no analyses yet: too few scores for report/)"))
    return "\n".join(lines)
