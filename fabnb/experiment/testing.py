"""RAG-TESTER from the experiment file: ``[tests]`` turns a run into tests, answers, oracle verdicts and tables.

An experiment with a ``[tests]`` table (:class:`fabnb.experiment.config.TestsSpec`) asks no
FAB-Bench questions. Its stages, each stored as it is made and resumed after a kill:

1. **tests**: the tester model writes RAG-TESTER's tests from ``[corpus]``, document by
   document (complex-passage, negative-rejection, coverage; the random and fair baselines),
   one coverage tracker over the corpus; each document's tests are one record of
   ``tests.jsonl``, so a killed run writes only the documents still missing;
2. **answers**: every ``[[systems]]`` entry, of any kind the registry has, answers every test at
   every window and mode (``answers.jsonl``; Appendix E's request for a source location and span
   added to each question when ``ask_location``); ``rounds`` more coverage rounds then draw from the
   chunks neither a test nor the systems' retrieval touched, and are answered in turn;
3. **oracle**: RAG-TESTER's oracle on the ``[judge]`` endpoint judges each answer (``verdicts.jsonl``);
4. **report**: the study's tables (:data:`fabnb.tester.study.TABLES`), coverage adequacy and the
   retrieval-or-generation attribution in ``report/tests/``, and ``summary.md``.

The plan counts each stage's calls (a test costs up to three tries of the tester), the budget
stops a stage before a call could pass it, and the runs sidebar reads the same manifest and
progress file as for FAB-Bench runs.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import __version__
from ..core.records import ResultsStore
from .config import Experiment
from .output import ExperimentRun, json_records, now, record_failure, spent, write_manifest
from .planning import PLAN_COLUMNS, ConfirmationNeeded, Plan, prepare_systems
from .prices import cost_of, price_of, price_text
from .progress import progress_bar

__all__ = ["TABLES_FOLDER", "TESTS_STORE", "VERDICTS_STORE", "corpus_for_tests", "plan_tests", "run_tests",
           "stored_tests", "suite_failures", "suite_tables", "suite_tally", "tested_configurations",
           "write_tests_report"]

TESTS_STORE = "tests.jsonl"
VERDICTS_STORE = "verdicts.jsonl"
#: Where the study's tables go, inside the run's folder.
TABLES_FOLDER = Path("report") / "tests"
_PART_COLUMNS = ["part", "doc_id", "tests", "rejected", "status", "prompt_tokens", "completion_tokens"]
_TRIES = 3  # a generator tries up to three passages per test it keeps (fabnb.qa.testcases)
_GEN_PROMPT, _GEN_REPLY = 700, 200  # tokens of a test-writing call: a chunk and the instructions; the JSON
_ORACLE_PROMPT, _ORACLE_REPLY = 600, 120
_ANSWER_REPLY = 256


def _store(out: Path) -> ResultsStore:
    return ResultsStore(out / TESTS_STORE, keys=("part",), columns=_PART_COLUMNS)


def corpus_for_tests(exp: Experiment):
    """The corpus the tests are written from (``[tests] documents`` of them, drawn with the seed) and its chunks."""
    corpus = exp.whole_corpus()
    n = exp.tests.documents
    if n is not None and n < len(corpus.documents):
        corpus = corpus.select(set(corpus.documents.sample(n=n, random_state=exp.seed)["doc_id"]))
    return corpus, exp.chunk(corpus)


def _counts(exp: Experiment) -> dict:
    t = exp.tests
    return {"complex_passage": t.n_complex, "negative_rejection": t.n_negative, "coverage": t.n_coverage,
            "random": t.n_baseline}


def _suite(records: list[dict]):
    from ..qa.testcases import TestSuite

    return TestSuite.from_records([t for r in records for t in r["tests"]], [x for r in records for x in r["rejected"]])


def _tokens(llm) -> tuple[int, int]:
    """The tester's tokens so far, of calls the cache did not serve."""
    u = llm.usage
    paid = u[~u["cached"].astype(bool)] if len(u) else u
    return int(paid["prompt_tokens"].sum()), int(paid["completion_tokens"].sum())


def _keep(store: ResultsStore, part: str, doc: str, suite, spent: tuple[int, int] = (0, 0)) -> dict:
    record = {"part": part, "doc_id": doc, "tests": json_records(suite.tests), "rejected":
              json_records(suite.rejected), "status": "ok", "prompt_tokens": spent[0], "completion_tokens": spent[1]}
    store.append(record)
    return record


def _since(llm, before: tuple[int, int]) -> tuple[int, int]:
    now_ = _tokens(llm)
    return now_[0] - before[0], now_[1] - before[1]


def _mark_tests(tracker, suite) -> None:
    """Mark the strategies' passages of stored tests: the tracker as it stood when they were written."""
    from ..tester.study import TEST_STRATEGIES

    t = suite.tests
    tracker.mark(t.loc[t["generator"].isin(TEST_STRATEGIES), "source_chunk"].tolist())


class _AttemptLines:
    """Each test-writing attempt's line (``fabnb.qa.testcases``' log) on the run's bar, while the tests stage
    runs: a small tester takes seconds per test, and a bar at 0/2 for minutes says nothing."""

    def __init__(self, bar):
        import logging

        self.bar, self.logger = bar, logging.getLogger("fabnb.qa.testcases")
        self.handler = logging.Handler(logging.INFO)
        self.handler.emit = self._emit

    def _emit(self, record) -> None:
        shown = getattr(self.bar, "bar", None)
        if shown is not None and hasattr(shown, "set_postfix_str"):
            shown.set_postfix_str(record.getMessage()[:100], refresh=True)

    def __enter__(self):
        self.level = self.logger.level
        self.logger.setLevel(min(self.level or 20, 20))
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)


class _OverBudget(Exception):
    """The budget left cannot pay for the next document's tests at their dearest: the stage stops before it."""


def _afford(exp: Experiment, plan_: Plan, tries: int) -> None:
    limit = _limit(exp, plan_, "tests")
    if limit is not None and limit < tries:
        raise _OverBudget


def _write_tests(exp: Experiment, chunks: pd.DataFrame, tester, bar, plan_: Plan):
    """The first round's tests, from the store where written, else written now, one record per document; a
    document the budget cannot pay for at its dearest (three tries a test) is not begun (:class:`_OverBudget`)."""
    with _AttemptLines(bar):
        return _write_first_round(exp, chunks, tester, bar, plan_)


def _write_first_round(exp: Experiment, chunks: pd.DataFrame, tester, bar, plan_: Plan):
    from ..corpus.passages import CoverageTracker
    from ..corpus.vectors import vectorize
    from ..tester.study import document_tests, fair_baselines, number_tests

    store = _store(exp.output)
    have = {r["part"]: r for r in store.frame().to_dict("records")}
    tracker, vectors = CoverageTracker(chunks), vectorize(chunks)
    docs = list(dict.fromkeys(chunks["doc_id"]))
    records = []
    for d, doc in enumerate(docs):
        part = f"doc:{doc}"
        if part in have:
            records.append(have[part])
            _mark_tests(tracker, _suite([have[part]]))
        else:
            _afford(exp, plan_, sum(_counts(exp).values()) * _TRIES)
            before = _tokens(tester)
            suite = document_tests(chunks, doc, d, tester, _counts(exp), tracker, vectors=vectors, seed=exp.seed)
            records.append(_keep(store, part, doc, suite, _since(tester, before)))
        bar.update(1)
    if all(f"fair:{doc}" in have for doc in docs):
        fair = [have[f"fair:{doc}"] for doc in docs]
    else:
        _afford(exp, plan_, len(docs) * exp.tests.n_baseline * _TRIES)
        before = _tokens(tester)
        suites = fair_baselines(chunks, [_suite([r]) for r in records], tester, exp.tests.n_baseline,
                                vectors=vectors, seed=exp.seed)
        spent = _since(tester, before)  # the fair baselines' tokens, on the first document's record
        fair = [_keep(store, f"fair:{doc}", doc, s, spent if i == 0 else (0, 0))
                for i, (doc, s) in enumerate(zip(docs, suites))]
    bar.update(len(docs))
    return number_tests(_suite(records + fair)), tracker


def stored_tests(exp: Experiment | Path | str):
    """Every test a run's folder holds (``exp.output``, or the folder itself), numbered as the run numbered them
    (a document's, the fair baselines', then each coverage round's); an empty suite for a folder without tests."""
    from ..qa.testcases import TestSuite
    from ..tester.study import number_tests

    folder = exp.output if isinstance(exp, Experiment) else Path(exp)
    records = _store(folder).frame().to_dict("records") if (folder / TESTS_STORE).exists() else []
    first = [r for r in records if not str(r["part"]).startswith("round:")]
    rounds = [r for r in records if str(r["part"]).startswith("round:")]
    return TestSuite.concat([number_tests(_suite(first)), _suite(rounds)])


def _round_tests(exp: Experiment, chunks, tester, tracker, round_: int, answers: pd.DataFrame, bar, plan_: Plan):
    """Round ``round_`` of coverage tests, after marking what the systems' retrieval returned."""
    from ..rag.sources import mark_returned
    from ..tester.coverage import coverage_round

    store = _store(exp.output)
    have = {r["part"]: r for r in store.frame().to_dict("records")}
    mark_returned(tracker, answers[answers["mode"] == "A"], chunks)
    part = f"round:{round_}"
    if part in have:
        suite = _suite([have[part]])
        _mark_tests(tracker, suite)
    else:
        _afford(exp, plan_, chunks["doc_id"].nunique() * exp.tests.n_coverage * _TRIES)
        before = _tokens(tester)
        suite = coverage_round(chunks, tester, exp.tests.n_coverage, tracker, round_, seed=exp.seed)
        _keep(store, part, "", suite, _since(tester, before))
    bar.update(1)
    return suite


def _as_questions(exp: Experiment, tests: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """The tests as grid questions. A negative test's mode-B context is the passage it was written from: on its
    topic, without its answer, so the system must still decline."""
    from ..judge import LOCATION_REQUEST, tests_as_questions

    q = tests_as_questions(tests)
    text = chunks.set_index("chunk_id")["text"]
    negative = (tests["kind"] == "negative").to_numpy()
    q.loc[negative, "gold_context"] = tests.loc[negative, "source_chunk"].map(text).fillna("").to_numpy()
    if exp.tests.ask_location:
        q["question"] = q["question"] + LOCATION_REQUEST
    return q


def tested_configurations(exp: Experiment) -> dict:
    """``system -> (llm, embedding)`` as the study's tables name a configuration: the system's model and its
    retriever (its kind for a system that retrieves on its own)."""
    return {s.name: (s.model, s.retriever if s.kind == "reference" else s.kind) for s in exp.systems}


# ------------------------------------------------------------------ plan and tally


def _n_docs(exp: Experiment, chunks: pd.DataFrame | None) -> int:
    return int(chunks["doc_id"].nunique()) if chunks is not None else int(exp.tests.documents or 0)


def plan_tests(exp: Experiment, chunks: pd.DataFrame, tests: pd.DataFrame | None = None,
               rounds_left: int | None = None) -> Plan:
    """Calls, tokens and cost of each stage of a ``[tests]`` run.

    Before the tests exist, their number is what ``[tests]`` asks (per document, every generator);
    once written, it is what was kept, with ``rounds_left`` coverage rounds still to write (the
    file's ``rounds`` by default). The tester's calls count up to three tries per test. Answers
    and verdicts stored count as done.

    Returns
    -------
    Plan
        One row for the tester, one answers and one oracle row per system.
    """
    docs = _n_docs(exp, chunks)
    per_doc = exp.tests.n_complex + exp.tests.n_negative + exp.tests.n_coverage + 2 * exp.tests.n_baseline
    rounds_left = exp.tests.rounds if rounds_left is None else rounds_left
    n_tests = (len(tests) if tests is not None else docs * per_doc) + docs * exp.tests.n_coverage * rounds_left
    cells = len(exp.windows) * len(exp.modes)
    answers, verdicts = _stored(exp)
    parts = _store(exp.output).frame()["part"].astype(str).tolist() if (exp.output / TESTS_STORE).exists() else []
    rows, max_call = [], {}
    tester = exp.tests.endpoint.model
    gen_calls = 2 * docs + exp.tests.rounds  # the parts stored: a document's tests, its fair baseline, each round
    done = {k: sum(1 for p in parts if p.startswith(k)) for k in ("doc:", "fair:", "round:")}
    t = exp.tests
    todo_tries = _TRIES * (max(0, docs - done["doc:"]) * (t.n_complex + t.n_negative + t.n_coverage + t.n_baseline)
                           + max(0, docs - done["fair:"]) * t.n_baseline
                           + max(0, t.rounds - done["round:"]) * docs * t.n_coverage)
    rows.append(_row(exp, "tester", tester, "tests", gen_calls, min(len(parts), gen_calls), todo_tries,
                     _GEN_PROMPT, _GEN_REPLY, max_call))
    configs = exp.configs()  # a prompt holds at most the window's input budget; a reply at most 256 tokens
    prompt = int(sum(c.input_budget for c in configs) / len(configs))
    reply = int(sum(min(c.max_output_tokens, _ANSWER_REPLY) for c in configs) / len(configs))
    dearest = (max(c.input_budget for c in configs), max(min(c.max_output_tokens, _ANSWER_REPLY) for c in configs))
    for spec in exp.systems:
        a = answers[(answers["system"] == spec.name) & (answers["status"] == "ok")] if len(answers) else answers
        v = verdicts[(verdicts["system"] == spec.name) & (verdicts["status"] == "ok")] if len(verdicts) else verdicts
        rows.append(_row(exp, spec.name, spec.endpoint.model if spec.uses_endpoint else spec.model, "answers",
                         n_tests * cells, len(a), max(0, n_tests * cells - len(a)), prompt, reply, max_call,
                         priced=spec.uses_endpoint, dearest=dearest))
        rows.append(_row(exp, spec.name, exp.judge.model, "oracle", n_tests * cells, len(v),
                         max(0, n_tests * cells - len(v)), _ORACLE_PROMPT, _ORACLE_REPLY, max_call))
    note = (f"tests: the tester's calls are counted in documents, {_GEN_PROMPT} prompt and {_GEN_REPLY} reply tokens a "
            "try, up to three tries a test kept; answers: the window's input budget, up to 256 reply tokens; oracle: "
            f"{_ORACLE_PROMPT} and {_ORACLE_REPLY}; the tests' number is what [tests] asks until they are written")
    return Plan(pd.DataFrame(rows, columns=PLAN_COLUMNS), pd.DataFrame(), n_tests, max_call, unit="test", note=note)


def _row(exp, system, model, stage, calls, done, todo_calls, prompt, reply, max_call, priced=True,
         dearest=None) -> dict:
    price = price_of(model if priced else "", exp.prices)
    p_tok, c_tok = todo_calls * prompt, todo_calls * reply
    if priced:  # the budget counts each call at the dearest a call of the stage can be
        max_call[(stage, system)] = cost_of(model, exp.prices, *(dearest or (prompt, reply)))
    return {"system": system, "model": model, "stage": stage, "calls": calls, "done": done,
            "todo": max(0, calls - done), "prompt_tokens": p_tok, "completion_tokens": c_tok,
            "cost_usd": cost_of(model, exp.prices, p_tok, c_tok) if priced else None, "price": price_text(price),
            "seconds": None}


def _stored(exp: Experiment) -> tuple[pd.DataFrame, pd.DataFrame]:
    from ..core.schema import RESULT_COLUMNS
    from ..judge import VERDICT_COLUMNS, verdict_store

    if not exp.output.exists():
        return pd.DataFrame(columns=RESULT_COLUMNS), pd.DataFrame(columns=VERDICT_COLUMNS)
    answers = ResultsStore(exp.output / "answers.jsonl").frame(drop=("sources",))
    verdicts = verdict_store(exp.output / VERDICTS_STORE).frame()
    names = [s.name for s in exp.systems]
    def keep(f: pd.DataFrame) -> pd.DataFrame:
        if not len(f):
            return f
        return f[f["system"].isin(names) & f["mode"].isin(exp.modes)
                 & f["context_k"].astype(float).isin(exp.windows)].reset_index(drop=True)

    return keep(answers), keep(verdicts)


def suite_tally(exp: Experiment) -> pd.DataFrame:
    """What the stores hold, per system and stage (tests, answers, oracle): :data:`fabnb.experiment.TALLY_COLUMNS`."""
    from .output import TALLY_COLUMNS, column_sum

    answers, verdicts = _stored(exp)
    parts = _store(exp.output).frame() if exp.output.exists() else pd.DataFrame()
    pt, ct = column_sum(parts, "prompt_tokens"), column_sum(parts, "completion_tokens")
    rows = [{"system": "tester", "stage": "tests", "planned": 2 * _n_docs(exp, None) or len(parts),
             "ok": len(parts), "failed": 0, "prompt_tokens": pt, "completion_tokens": ct,
             "cost_usd": cost_of(exp.tests.endpoint.model, exp.prices, pt, ct)}]
    for spec in exp.systems:
        for stage, frame, model, priced in (("answers", answers, spec.endpoint.model, spec.uses_endpoint),
                                            ("oracle", verdicts, exp.judge.model, True)):
            f = frame[frame["system"] == spec.name] if len(frame) else frame
            ok = f[f["status"] == "ok"] if len(f) else f
            paid = f[f["cached"].astype("boolean").fillna(False) == False] if "cached" in f and len(f) else f  # noqa: E712
            pt, ct = column_sum(paid, "prompt_tokens"), column_sum(paid, "completion_tokens")
            rows.append({"system": spec.name, "stage": stage, "planned": len(f), "ok": len(ok),
                         "failed": len(f) - len(ok), "prompt_tokens": pt, "completion_tokens": ct,
                         "cost_usd": cost_of(model, exp.prices, pt, ct) if priced else None})
    return pd.DataFrame(rows, columns=TALLY_COLUMNS)


def suite_failures(exp: Experiment) -> pd.DataFrame:
    """Failed cells of a ``[tests]`` run by system, stage (answers, oracle) and cause; a rerun asks them again.

    Returns
    -------
    DataFrame
        :data:`fabnb.experiment.FAILURE_COLUMNS`: system, stage, cause, cells.
    """
    from .output import FAILURE_COLUMNS

    frames = []
    for stage, frame in zip(("answers", "oracle"), _stored(exp)):
        bad = frame[frame["status"] != "ok"] if len(frame) else frame
        if len(bad):
            frames.append(bad.groupby(["system", "cause"]).size().rename("cells").reset_index().assign(stage=stage))
    return pd.concat(frames, ignore_index=True)[FAILURE_COLUMNS] if frames else pd.DataFrame(columns=FAILURE_COLUMNS)


def _limit(exp: Experiment, plan_: Plan, stage: str) -> int | None:
    """Calls of a stage that fit in what is left of the budget, each at its dearest estimate."""
    if exp.budget_usd is None:
        return None
    return plan_.calls_within(exp.budget_usd, spent(suite_tally(exp)), stage)


# ------------------------------------------------------------------ the run


def run_tests(exp: Experiment, opts, old: dict | None):
    """Plan, then run the stages of a ``[tests]`` experiment into its folder (``fabnb run`` calls it).

    ``opts``: :func:`fabnb.experiment.run_experiment`'s options; ``old``: the folder's manifest (None: new).
    Returns :class:`fabnb.experiment.ExperimentRun`.
    """

    corpus, chunks = corpus_for_tests(exp)
    plan_ = plan_tests(exp, chunks)
    opts.echo(plan_.render())
    if opts.dry_run:
        return ExperimentRun(exp.output, plan_, suite_tally(exp), "dry-run", suite_failures(exp))
    reason = None if opts.yes else plan_.confirmation(exp)
    if reason:
        raise ConfirmationNeeded(f"{exp.source}: {reason}")
    chunking = {"chunk_size": exp.chunk_size, "chunk_overlap": exp.chunk_overlap}
    built = {s.name: s.build(chunks, exp.concurrency, corpus, chunking) for s in exp.systems}
    prepare_systems(exp, built)
    manifest = _manifest(exp, old, plan_)
    write_manifest(exp.output, manifest)
    bar = progress_bar(exp.output, (0, 2 * _n_docs(exp, chunks)), opts.progress)
    bar.start_stage("tests", 0, 2 * _n_docs(exp, chunks) + exp.tests.rounds)
    try:
        status = _stages(exp, chunks, list(built.values()), plan_, bar, manifest)
        bar.close("reporting")
        _save(exp, manifest, "reporting")
        summary = _report(exp, chunks)
        t = _save(exp, manifest, status)
    except BaseException as exc:
        manifest["runs"][-1].update(ended=now(), status="stopped" if isinstance(exc, KeyboardInterrupt) else
                                    "failed", cause=f"{type(exc).__name__}: {exc}"[:500])
        manifest["stages"] = json_records(suite_tally(exp))
        bar.close(manifest["runs"][-1]["status"])
        record_failure(exp.output, manifest, opts.echo)
        raise
    said = "; ".join(f"{r.system} {r.stage} {r.ok:,} ok" + (f", {r.failed:,} failed" if r.failed else "")
                     for r in t.itertuples())
    failed = suite_failures(exp)
    causes = ("\nfailed cells by cause (a rerun asks them again): " + "; ".join(
        f"{r.system} {r.stage} {r.cause}: {r.cells}" for r in failed.itertuples())) if len(failed) else ""
    opts.echo(f"{status}: {said}{causes}\nwrote {summary} and {exp.output / TABLES_FOLDER}")
    return ExperimentRun(exp.output, plan_, t, status, failed, summary)


def _manifest(exp: Experiment, old: dict | None, plan_: Plan) -> dict:
    from .output import file_hash, versions

    return {"name": exp.name, "experiment_file": exp.source, "experiment_sha256": file_hash(exp),
            "fabnb": __version__, "versions": versions(), "seed": exp.seed, "kind": "tests",
            "signatures": exp.signatures(),
            "prices": {m: p for m in exp.models() if (p := price_of(m, exp.prices)) is not None},
            "endpoints": {s.name: {"kind": s.kind, "model": s.model} for s in exp.systems},
            "runs": (old or {}).get("runs", []) + [{"started": now(), "ended": None, "status": "running"}],
            "planned": json_records(plan_.table.drop(columns=["price"]))}


def _save(exp: Experiment, manifest: dict, status: str) -> pd.DataFrame:
    t = suite_tally(exp)
    manifest["runs"][-1].update(ended=now(), status=status)
    manifest["stages"] = json_records(t)
    manifest["spent_usd"] = spent(t)
    write_manifest(exp.output, manifest)
    return t


def _replan(exp: Experiment, chunks, tests: pd.DataFrame, rounds_left: int, manifest: dict) -> Plan:
    """The plan once tests are written (their real number), kept in the manifest: what the sidebar counts to."""
    plan_ = plan_tests(exp, chunks, tests, rounds_left)
    manifest["planned"] = json_records(plan_.table.drop(columns=["price"]))
    write_manifest(exp.output, manifest)
    return plan_


def _stages(exp: Experiment, chunks, systems: list, plan_: Plan, bar, manifest: dict) -> str:
    """Tests, answers (and the coverage rounds), oracle verdicts; ``finished`` or ``stopped-by-budget``."""
    from ..judge import oracle_results, verdict_store
    from ..qa.testcases import TestSuite
    from ..rag import run_grid

    tester = exp.tests.endpoint.llm(concurrency=exp.concurrency)
    try:
        suite, tracker = _write_tests(exp, chunks, tester, bar, plan_)
    except _OverBudget:
        return "stopped-by-budget"
    plan_ = _replan(exp, chunks, suite.tests, exp.tests.rounds, manifest)
    a_store = ResultsStore(exp.output / "answers.jsonl")

    def answer(tests: pd.DataFrame) -> bool:
        bar.start_stage("answers", *plan_.stage_counts("answers"))
        grid = run_grid(systems, _as_questions(exp, tests, chunks), exp.configs(), a_store, modes=exp.modes,
                        concurrency=exp.concurrency, progress=bar, limit=_limit(exp, plan_, "answers"))
        return not grid.deferred

    finished = answer(suite.tests)
    for r in range(1, exp.tests.rounds + 1):
        bar.start_stage("tests", 2 * _n_docs(exp, chunks) + r - 1, 2 * _n_docs(exp, chunks) + exp.tests.rounds)
        try:
            more = _round_tests(exp, chunks, tester, tracker, r, a_store.frame(), bar, plan_)
        except _OverBudget:
            return "stopped-by-budget"
        suite = TestSuite.concat([suite, more])
        plan_ = _replan(exp, chunks, suite.tests, exp.tests.rounds - r, manifest)
        finished = answer(suite.tests) and finished
    if not finished:
        return "stopped-by-budget"
    judge = exp.judge.llm(concurrency=exp.judge_concurrency, n_ctx=exp.judge_n_ctx)
    answers = a_store.frame()
    answers = answers[answers["test_id"].isin(suite.tests["test_id"])
                      & answers["system"].isin([s.name for s in systems])].reset_index(drop=True)
    bar.start_stage("oracle", *plan_.stage_counts("oracle"))
    store = verdict_store(exp.output / VERDICTS_STORE)
    answers, deferred = _within_budget(exp, plan_, answers, store)
    oracle_results(answers, suite.tests, judge, evidence=exp.tests.evidence, threshold=exp.tests.threshold,
                   store=store, progress=bar)
    return "stopped-by-budget" if deferred else "finished"


def _within_budget(exp: Experiment, plan_: Plan, answers: pd.DataFrame, store) -> tuple[pd.DataFrame, int]:
    """The answers to judge now: those judged already, and as many more as the budget pays for at the dearest
    verdict; and how many wait for a rerun with more budget."""
    limit = _limit(exp, plan_, "oracle")
    if limit is None:
        return answers, 0
    done = store.done()
    judged = [store.key(r) in done or r.get("status") != "ok" for r in answers.to_dict("records")]
    todo = [i for i, j in enumerate(judged) if not j]
    keep = [i for i, j in enumerate(judged) if j] + todo[:limit]
    return answers.iloc[sorted(keep)].reset_index(drop=True), max(0, len(todo) - limit)


def _report(exp: Experiment, chunks: pd.DataFrame) -> Path:
    return write_tests_report(exp, chunks)


# ------------------------------------------------------------------ tables and summary


def _configuration(exp: Experiment, verdicts: pd.DataFrame) -> pd.Series:
    """A configuration per verdict: the system, and its window and mode when the file has several."""
    name = verdicts["system"].astype(str)
    if len(exp.windows) > 1 or len(exp.modes) > 1:
        name = name + " @ " + verdicts["context_k"].map("{:g}K".format) + " " + verdicts["mode"].astype(str)
    return name


def suite_tables(exp: Experiment, chunks: pd.DataFrame) -> dict:
    """Every table of a ``[tests]`` run's folder: the study's (:data:`fabnb.tester.study.TABLES`), ``coverage``
    (:func:`fabnb.tester.coverage.coverage_table`), ``attribution`` and ``attribution_by_configuration``
    (:mod:`fabnb.tester.attribution`), ``failure_kinds`` (the abstract's failure types per configuration) and
    ``tests`` (the suite)."""
    from ..judge import verdict_store
    from ..rag.sources import returned_sources
    from ..tester.attribution import attribution, attribution_table
    from ..tester.coverage import coverage_table
    from ..tester.study import study_tables

    suite = stored_tests(exp)
    verdicts = verdict_store(exp.output / VERDICTS_STORE).frame()
    verdicts = verdicts[verdicts["test_id"].isin(suite.tests["test_id"])
                        & verdicts["system"].isin([s.name for s in exp.systems])].reset_index(drop=True)
    configs = tested_configurations(exp)
    source = suite.tests.set_index("test_id")["source_doc"]
    named = verdicts.assign(configuration=_configuration(exp, verdicts),
                            llm=verdicts["system"].map(lambda s: configs[s][0]),
                            embedding=verdicts["system"].map(lambda s: configs[s][1]),
                            source_doc=verdicts["test_id"].map(source), origin="real")
    tables = study_tables(named.assign(system=named["configuration"]), suite.tests, suite.rejected,
                          n_boot=exp.report.bootstrap, seed=exp.report.seed) if len(named) else {}
    answers = ResultsStore(exp.output / "answers.jsonl").frame()
    answers = answers[answers["test_id"].isin(suite.tests["test_id"])] if len(answers) else answers
    tables["coverage"] = coverage_table(suite.tests, chunks, returned_sources(answers, chunks))
    labels = attribution(verdicts) if len(verdicts) else pd.DataFrame()
    tables["attribution"] = labels
    tables["attribution_by_configuration"] = attribution_table(labels) if len(labels) else pd.DataFrame()
    ok = named[named["status"] == "ok"]
    tables["failure_kinds"] = (ok[ok["failure_kind"].fillna("") != ""].groupby(["configuration", "failure_kind"])
                               .size().rename("failures").reset_index() if len(ok) else pd.DataFrame())
    if "baseline_comparison" in tables:
        from ..tester.claims import objection_one

        tables["objection_one"] = objection_one(tables["baseline_comparison"])
    tables["tests"] = suite.tests
    return tables


def write_tests_report(exp: Experiment, chunks: pd.DataFrame) -> Path:
    """``report/tests/<table>.csv`` and ``summary.md`` of a ``[tests]`` run, from the stores as they are."""
    tables = suite_tables(exp, chunks)
    folder = exp.output / TABLES_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(folder / f"{name}.csv", index=False)
    t = suite_tally(exp)
    n_tests = len(tables["tests"])
    lines = [f"# {exp.name}: RAG-TESTER", "", f"Made by fabnb {__version__} from `{exp.source}` at {now()}.", "",
             "## Caveats", ""]
    if n_tests < 30:
        lines.append(f"- {n_tests} tests: every failure rate has a wide interval and no comparison below is "
                     "likely to separate configurations; write more tests per document ([tests] n_*) or use more "
                     "documents.")
    lines += ["- The oracle's verdicts are an LLM's; its precision is not measured in this run. Measure it with "
              "a panel of LLMs (fabnb.tester.panel) or expert labels (the rating app, kind \"verdict\") before "
              "reading single verdicts.", "",
              "## Calls", "", t.to_markdown(index=False), ""]
    for name, title in (("failures_by_configuration", "Failures by configuration (Wilson 95% intervals)"),
                        ("strongest_configuration", "The strongest configuration"),
                        ("failures_by_generator", "Failures by generator"),
                        ("baseline_comparison", "Strategies against the baselines (objection 1)"),
                        ("objection_one", "How much of the lead is the negative-rejection category"),
                        ("failure_kinds", "Failure types (the abstract's, our reading: docs/stages.md)"),
                        ("attribution_by_configuration", "Retrieval or generation (rule: docs/stages.md)"),
                        ("coverage", "Coverage adequacy: chunks and documents touched")):
        frame = tables.get(name)
        if frame is not None and len(frame):
            lines += [f"## {title}", "", frame.to_markdown(index=False, floatfmt=".3f"), ""]
    path = exp.output / "summary.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
