"""Batch mode in an experiment: the answers of ``[[systems]] mode = "batch"`` and the scores of ``[judge] mode =
"batch"`` through the provider's Files and Batches routes, at its batch price (:mod:`fabnb.models.batch`).

Before a stage runs online, its batch pass runs the same stage once with the clients collecting (into a scratch
store that is then thrown away): every request the response cache cannot answer is recorded, not sent. Those
requests go out as batches and every reply is kept in the response cache; the online stage then finds them there.
A judge metric that needs two calls in turn (the second built from the first's reply) gets a second round.

The budget counts a batch at its largest cost (every prompt token and ``max_tokens`` of completion at the batch
price) before submitting it; a batch the budget cannot pay for is not submitted, and its cells go online, where
the budget stops the stage as it always does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from .config import Experiment
from .output import planned, spent, stores, tally
from .prices import batch_cost

__all__ = ["ROUNDS", "batch_requests", "cancel_batches", "collect_answers", "collect_judge", "export_stage",
           "import_stage", "prefill_answers", "prefill_judge", "refuse_without_routes"]

#: Collecting passes per stage: a judge call built from an earlier call's reply shows up only once that reply is in
#: the cache.
ROUNDS = 3


def batch_requests(captured_calls) -> dict:
    """The collected calls of :func:`fabnb.models.batch.captured` grouped by client: ``{llm: [(key, body), ...]}``
    (one client per endpoint and model)."""
    out: dict = {}
    for llm, key, body in captured_calls:
        out.setdefault(llm, []).append((key, body))
    return out


def _affordable(exp: Experiment, llm, requests: list, questions: pd.DataFrame, echo) -> bool:
    """Whether what is left of the budget pays for these requests at their largest batch cost (no budget: yes)."""
    if exp.budget_usd is None:
        return True
    cost = batch_cost(llm.model, exp.prices, requests)
    left = exp.budget_usd - spent(tally(exp, questions))
    if cost is None or cost > left:
        shown = "an unknown price" if cost is None else f"up to ${cost:,.4f}"
        echo(f"batch: {len(requests):,} requests to {llm.model} would cost {shown} at the batch price, more than the "
             f"${left:,.4f} left of the budget: not submitted (a stopped run's batch of them is cancelled and what it "
             "completed kept); the online stage asks the rest until the budget stops it.")
        return False
    return True


def _send(exp: Experiment, calls, questions: pd.DataFrame, stage: str, setting: str, echo, bar) -> int:
    """Submit and wait for the collected calls, per client; the replies stored."""
    from ..models.batch import run_batches

    stored = 0
    for llm, requests in batch_requests(calls).items():
        affordable = _affordable(exp, llm, requests, questions, echo)
        progress = None
        if bar is not None:
            def progress(batch_id, status, completed, total, _bar=bar):
                _bar.batch_state(stage, batch_id, status, completed, total)
        # Unaffordable: nothing new is submitted, and a stopped run's batches of these requests are cancelled and
        # read (what they completed is billed: it is kept and counted).
        run = run_batches(llm, requests, exp.output, stage=stage, poll_s=exp.judging.batch_poll, echo=echo,
                          retry=exp.judging.batch_retry, progress=progress, setting=setting, submit=affordable)
        stored += run.stored
        if run.left and affordable:
            echo(f"batch: {len(run.left):,} of {run.requests:,} {stage} requests were not answered by a batch "
                 f"({len(run.failed):,} with an error); the online stage asks them.")
    return stored


def refuse_without_routes(exp: Experiment, built: dict) -> None:
    """Before any cell is sent: every endpoint a stage is to batch through answers ``GET /batches``; else a
    :class:`fabnb.models.batch.BatchError` naming the setting (a provider without the routes, the embedded model)."""
    from ..models.batch import check_routes

    for spec in exp.systems:
        if spec.mode == "batch":
            check_routes(built[spec.name].llm.openai_client(), f"[[systems]] {spec.name} mode")
    if exp.judging.mode == "batch":
        judge = exp.judge.llm(concurrency=exp.judge_concurrency, n_ctx=exp.judge_n_ctx, logprobs=exp.logprobs)
        check_routes(judge.openai_client(), "[judge] mode")


def collect_answers(exp: Experiment, systems: list, questions: pd.DataFrame, names=None) -> list:
    """The answer calls the systems named (default: the batch-mode ones) would send for the cells the response cache
    cannot answer: the grid run once into a scratch store with their clients collecting. ``(llm, key, body)``
    each (:func:`fabnb.models.batch.captured`); ``systems`` are the built systems, each with its ``llm``."""
    from ..models.batch import captured
    from ..rag import ResultsStore, run_grid

    names = {s.name for s in exp.systems if s.mode == "batch"} if names is None else set(names)
    chosen = [s for s in systems if s.name in names]
    if not chosen:
        return []
    with tempfile.TemporaryDirectory(dir=exp.output, prefix=".batch-") as scratch, \
            captured(*{id(s.llm): s.llm for s in chosen}.values()) as calls:
        store = ResultsStore(Path(scratch) / "answers.jsonl")
        for modes, asked in exp.mode_groups(questions):
            run_grid(chosen, asked, exp.configs(), store, modes=modes, concurrency=exp.concurrency, progress=False)
    return calls


def collect_judge(exp: Experiment, questions: pd.DataFrame, judge) -> list:
    """The judge calls the stored answers of the plan would send for the scores the response cache cannot answer
    (the judge stage run once into a scratch store, in one process: a worker process's client would not collect)."""
    from ..judge import judge_results, score_store
    from ..models.batch import captured

    a_store, _ = stores(exp.output)
    answers, _ = planned(exp, questions, a_store.frame(), pd.DataFrame())
    if not len(answers):
        return []
    with tempfile.TemporaryDirectory(dir=exp.output, prefix=".batch-") as scratch, captured(judge) as calls:
        judge_results(answers, questions, judge, score_store(Path(scratch) / "scores.jsonl"), metrics=exp.metrics,
                      replicates=exp.replicates, logprobs=exp.logprobs, temperature=exp.judge_temperature,
                      reason_chars=exp.reason_chars, max_answer_tokens=exp.max_answer_tokens, progress=False,
                      workers=1)
    return calls


def _prefill(exp: Experiment, collect, questions: pd.DataFrame, stage: str, setting: str, echo, bar) -> int:
    """Collect, send and store, round after round (:data:`ROUNDS`), until a round stores nothing; the replies
    stored."""
    stored = 0
    for _ in range(ROUNDS):
        calls = collect()
        got = _send(exp, calls, questions, stage, setting, echo, bar) if calls else 0
        stored += got
        if not got:
            break
    return stored


def prefill_answers(exp: Experiment, systems: list, questions: pd.DataFrame, echo=print, bar=None) -> int:
    """The answers of the batch-mode systems into the response cache, before the online answer stage; the replies
    stored (0 without such systems)."""
    names = sorted(s.name for s in exp.systems if s.mode == "batch")
    if not names:
        return 0
    return _prefill(exp, lambda: collect_answers(exp, systems, questions), questions, "answers",
                    "[[systems]] " + ", ".join(names) + " mode", echo, bar)


def prefill_judge(exp: Experiment, questions: pd.DataFrame, judge, echo=print, bar=None) -> int:
    """The judge's scores of every stored answer into the response cache, before the online judge stage (with
    ``[judge] mode = "batch"``); the replies stored."""
    if exp.judging.mode != "batch":
        return 0
    return _prefill(exp, lambda: collect_judge(exp, questions, judge), questions, "judge", "[judge] mode", echo, bar)


def _stage_calls(exp: Experiment, stage: str, systems=None) -> list:
    """A stage's calls for export or import: ``answers`` (the reference-kind systems, or those named) or ``judge``
    (the stored answers'). The endpoints are not called: the judge is taken to return logprobs when asked."""
    from ..judge.geval import logprobs_supported
    from .planning import PlanInputs

    if stage not in ("answers", "judge"):
        raise ValueError(f"stage must be 'answers' or 'judge', not {stage!r}")
    exp.output.mkdir(parents=True, exist_ok=True)
    if stage == "judge":
        inputs = PlanInputs.read(exp)
        judge = exp.judge.llm(concurrency=exp.judge_concurrency, n_ctx=exp.judge_n_ctx, logprobs=exp.logprobs)
        logprobs_supported(judge, assume=exp.logprobs)
        return collect_judge(exp, inputs.questions, judge)
    names = list(systems or [s.name for s in exp.systems if s.kind == "reference"])
    inputs = PlanInputs.read(exp, build=True)
    return collect_answers(exp, [inputs.built[n] for n in names], inputs.questions, names)


def export_stage(exp: Experiment, stage: str, path: str | Path, systems=None) -> int:
    """``fabnb batch export``: a stage's missing calls as a batch input file (vLLM's ``run_batch --input-file``);
    the requests written."""
    from ..models.batch import export_requests

    return export_requests([(key, body) for _, key, body in _stage_calls(exp, stage, systems)], path)


def import_stage(exp: Experiment, stage: str, path: str | Path, systems=None):
    """``fabnb batch import``: a batch output file (vLLM's ``run_batch --output-file``) into the response cache
    under the experiment's endpoints, for the calls the stage is missing; a :class:`fabnb.models.batch.BatchRun`
    per client."""
    from ..models.batch import import_replies, read_output

    read_output(path)  # a broken file is named even when the stage misses nothing
    return [import_replies(llm, requests, path)
            for llm, requests in batch_requests(_stage_calls(exp, stage, systems)).items()]


def cancel_batches(exp: Experiment, echo=print) -> list:
    """``fabnb batch cancel``: cancel the open batches of the run folder (``batches.json``), each through the
    endpoint it went to (the judge's, or a system's that calls one); the ids cancelled. What they completed is billed
    and kept: the next run reads it, and asks the rest in a new batch or online.

    Examples
    --------
    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp(), "judge": {"model": "embedded"},
    ...                             "systems": [{"name": "local", "model": "embedded"}]})
    >>> cancel_batches(exp)  # nothing submitted from this folder
    []
    """
    from ..models.batch import cancel_open

    endpoints = [exp.judge] + [s.endpoint for s in exp.systems if s.uses_endpoint]
    # The embedded model has no batch routes (and would be started for nothing): its batches cannot exist.
    llms = {e.identity(): e.llm() for e in endpoints if not e.embedded and e.url()}
    return cancel_open(list(llms.values()), exp.output, echo=echo)
