"""Questions x systems x context configurations x modes, into a results store, resumable (``run_grid``)."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import pandas as pd

from ..core.bars import stage_bar
from ..core.records import ResultsStore, StageRun, hold
from ..core.schema import RESULT_KEYS
from ..core.text import word_measures
from .config import RAGConfig, RAGError
from .system import RAGSystem, ReferenceRAG

__all__ = ['GridRun', 'ask_cell', 'evidence_position', 'mode_pairs', 'position_depth', 'position_mode',
           'questions_frame', 'retrieval_table', 'run_grid']

# ------------------------------------------------------------------ results store and the grid


def questions_frame(pairs) -> pd.DataFrame:
    """QA pairs as grid questions.

    Returns
    -------
    DataFrame
        test_id, test_type, question_format, question, ground_truth_answer,
        gold_context (the evidence passages joined), gold_doc_ids (tuple).

    Examples
    --------
    >>> from fabnb.data.datasets import load_fab_bench
    >>> q = questions_frame(load_fab_bench())
    >>> len(q), q.loc[0, "gold_context"] != ""
    (200, True)
    """
    rows = [{"test_id": p.test_id, "test_type": p.test_type, "question_format": p.question_format,
             "question": p.question, "ground_truth_answer": p.ground_truth_answer,
             "gold_context": "\n\n".join(s.evidence for s in p.gold_context_sources),
             "gold_doc_ids": tuple(dict.fromkeys(s.doc_id for s in p.gold_context_sources))} for p in pairs]
    return pd.DataFrame(rows, columns=["test_id", "test_type", "question_format", "question", "ground_truth_answer",
                                       "gold_context", "gold_doc_ids"])



def _gold_retrieved(sources, gold_doc_ids) -> bool | None:
    if sources is None or not gold_doc_ids:
        return None
    return any(s.get("doc_id") in set(gold_doc_ids) for s in sources)


def position_mode(depth: float) -> str:
    """The mode of a position-sweep cell: the gold passage placed at ``depth`` (a share, 0 to 1) of the window.

    >>> position_mode(0.5), position_depth("P50"), position_depth("A")
    ('P50', 0.5, None)
    """
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"a position is a share of the window, 0 (first) to 1 (last); got {depth!r}.")
    return f"P{round(depth * 100):d}"


def position_depth(mode: str) -> float | None:
    """The depth (0 to 1) of a position-sweep mode (``"P25"`` is 0.25); None for modes A and B."""
    if isinstance(mode, str) and mode[:1] == "P" and mode[1:].isdigit() and int(mode[1:]) <= 100:
        return int(mode[1:]) / 100
    return None


def evidence_position(sources, source_tokens, gold_doc_ids) -> tuple[int | None, float | None]:
    """Where the gold evidence sat in a context the kit built: the tokens before the first gold source (counting
    one per separator) and its relative depth (0 = first, 1 = nothing after it; None when it is the only source,
    first and last at once); ``(None, None)`` when the context holds no gold source or its sources' tokens are
    unknown (a system that builds its own context).

    >>> evidence_position([{"doc_id": "d9"}, {"doc_id": "d1"}, {"doc_id": "d8"}], [100, 50, 100], ["d1"])
    (101, 0.5)
    """
    if not sources or source_tokens is None or len(source_tokens) != len(sources):
        return None, None
    gold = set(gold_doc_ids or ()) | {"gold"}
    at = next((i for i, s in enumerate(sources) if s.get("doc_id") in gold), None)
    if at is None:
        return None, None
    offset = sum(source_tokens[:at]) + at
    rest = sum(source_tokens) + len(source_tokens) - 1 - source_tokens[at]
    return offset, round(offset / rest, 4) if len(sources) > 1 and rest > 0 else None


def ask_cell(system, question: dict, config: RAGConfig, mode: str) -> dict:
    """Ask one cell and return its result record (status ``ok`` or ``error`` with its cause).

    Modes: ``A`` (the system's own retrieval), ``B`` (the gold context), ``P<percent>`` (the gold passage placed
    at that depth among the window's other chunks, :meth:`fabnb.rag.ReferenceRAG.ask_at`). Where the kit built
    the context, the record says where the gold evidence sat (``evidence_offset``, ``evidence_depth``:
    :func:`evidence_position`).
    """
    record = {"system": system.name, "model": system.model, "context_k": float(config.context_k), "mode": mode,
              "test_id": question["test_id"], "output_tokens": config.max_output_tokens, "ts": time.time()}
    depth = position_depth(mode)
    if mode not in ("A", "B") and depth is None:
        raise ValueError(f"mode must be 'A' (system retrieval), 'B' (gold context) or 'P0'-'P100' (the gold "
                         f"passage at that depth), not {mode!r}")
    gold = question.get("gold_context") if mode != "A" else None
    if mode != "A" and not gold:
        return {**record, "status": "error", "cause": "no-gold-context",
                "error": f"{question['test_id']} has no gold_context for mode {mode}."}
    if depth is not None and not hasattr(system, "ask_at"):
        return {**record, "status": "error", "cause": "no-position-sweep",
                "error": f"{system.name} builds its own context: only a system whose context fabnb builds (the "
                         "reference kind) can place the gold passage at a depth."}
    try:
        if depth is None:
            a = system.ask(question["question"], config, gold_context=gold)
        else:
            a = system.ask_at(question["question"], config, gold, depth, question.get("gold_doc_ids") or ())
    except RAGError as exc:
        return {**record, "status": "error", "cause": exc.cause, "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - an adapter bug must not stop the grid; it is recorded
        return {**record, "status": "error", "cause": type(exc).__name__, "error": str(exc)[:500]}
    return {**record, "status": "ok", "cause": "", "error": "", "answer": a.answer,
            "n_sources": None if a.sources is None else len(a.sources),
            "sources_exposed": a.sources is not None, "sources": a.sources,
            "gold_retrieved": _gold_retrieved(a.sources, question.get("gold_doc_ids")) if mode == "A" else None,
            **dict(zip(("evidence_offset", "evidence_depth"),
                       evidence_position(a.sources, getattr(a, "source_tokens", None), question.get("gold_doc_ids"))
                       if mode != "B" else (None, None))),
            "context_tokens": a.context_tokens, "prompt_tokens": a.prompt_tokens,
            "completion_tokens": a.completion_tokens, "latency_s": round(a.latency_s, 4),
            "context_signal": a.context_signal, **_measures(a.answer), "batch": bool(getattr(a, "batch", False)),
            "ts": time.time()}


def _measures(answer) -> dict:
    """What the judge's sanity flags read of an answer, stored with it so a results view need not tokenize it."""
    from ..core.language import sure_language

    words, repetition = word_measures(answer if isinstance(answer, str) else "")
    return {"answer_words": words, "answer_repetition": repetition, "answer_language": sure_language(answer)}


class GridRun(StageRun):
    """What :func:`run_grid` did: cells asked, skipped (already done), failed, deferred (``limit``), the time taken.

    A :class:`fabnb.core.records.StageRun`; ``asked`` is its ``done``.
    """

    _done_name = "asked"

    @property
    def asked(self) -> int:
        return self.done


def run_grid(systems, questions: pd.DataFrame, configs, store: ResultsStore | str | Path, modes=("A",),
             concurrency: int = 4, error_policy: str = "record", progress=True, limit: int | None = None) -> GridRun:
    """Ask every (system, configuration, mode, question) cell not yet answered, into a results store.

    Parameters
    ----------
    systems : RAGSystem or list of them
        Each has ``name`` and ``model``; one system per model (e.g. one ReferenceRAG per LLM).
    questions : DataFrame
        test_id, question, and for mode B gold_context (:func:`questions_frame`).
    configs : list of RAGConfig (or of context sizes in K tokens)
    store : ResultsStore or path
    modes : tuple of {"A", "B", "P0" ... "P100"}
    concurrency : int
        Cells in flight at once (threads; the work is waiting on servers).
    error_policy : {"record", "raise"}
        ``"record"`` stores a failed cell with its cause and goes on (it is asked again on
        the next run); ``"raise"`` stores it, stops asking, and raises :class:`RAGError`.
    progress : bool or progress bar
        True: a bar of its own; an object with ``update(n)`` (a tqdm bar shared by several
        stages, as :func:`fabnb.experiment.run_experiment` does) is updated and left open.
    limit : int, optional
        Ask at most this many of the cells still to do (a budget's cut); the rest stay for
        the next run and are counted in ``GridRun.deferred``.

    Returns
    -------
    GridRun

    Examples
    --------
    Any object with ``name``, ``model``, ``sources_exposed`` and ``ask`` is a system:

    >>> import tempfile
    >>> from fabnb.rag import Answer
    >>> class Echo:
    ...     name, model, sources_exposed = "echo", "none", False
    ...     def ask(self, question, config, gold_context=None):
    ...         return Answer(f"At {config.context_k:g}K you asked: {question}")
    >>> questions = pd.DataFrame({"test_id": ["q1", "q2"], "question": ["Why?", "How?"]})
    >>> store = tempfile.mkdtemp() + "/answers.jsonl"
    >>> run = run_grid([Echo()], questions, [1, 2], store, progress=False)
    >>> run.asked, run.failed, run_grid([Echo()], questions, [1, 2], store, progress=False).skipped
    (4, 0, 4)
    """

    if error_policy not in ("record", "raise"):
        raise ValueError(f"error_policy must be 'record' or 'raise', not {error_policy!r}")
    systems = [systems] if isinstance(systems, RAGSystem) else list(systems)
    configs = [c if isinstance(c, RAGConfig) else RAGConfig(float(c)) for c in configs]
    missing = {"test_id", "question"} - set(questions.columns)
    if missing:
        raise ValueError(f"questions lack column(s) {sorted(missing)}; make them with fabnb.rag.questions_frame.")
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    with hold(store.path, "a RAG grid"):  # two processes on one store would ask each cell twice
        cells = [(s, q, c, m) for s in systems for c in configs for m in modes for q in questions.to_dict("records")]
        todo = _cells_to_ask(cells, store)
        deferred = max(0, len(todo) - max(0, limit)) if limit is not None else 0
        todo = todo[:len(todo) - deferred]
        bar, own_bar = stage_bar(progress, len(todo), "RAG grid")
        start = time.perf_counter()
        failures, stop = _ask_cells(todo, store, concurrency, bar, stop_on_failure=error_policy == "raise")
        if own_bar:
            bar.close()
    if stop is not None:
        raise RAGError(f"{stop['system']} / {stop['model']} / {stop['context_k']}K / mode {stop['mode']} / "
                       f"{stop['test_id']}: {stop['error']}", stop["cause"])
    cols = [*RESULT_KEYS, "cause", "error"]
    return GridRun(len(todo), len(cells) - len(todo) - deferred, len(failures), time.perf_counter() - start,
                   pd.DataFrame(failures, columns=cols) if failures else pd.DataFrame(columns=cols), deferred)


def _cells_to_ask(cells: list, store: ResultsStore) -> list:
    """The cells (system, question, config, mode) the store has no answer for, in grid order."""
    done = store.done()
    return [cell for cell in cells if store.key({"system": cell[0].name, "model": cell[0].model, "mode": cell[3],
                                                 "context_k": cell[2].context_k, "test_id": cell[1]["test_id"]})
            not in done]


def _ask_cells(todo: list, store: ResultsStore, concurrency: int, bar, stop_on_failure: bool) -> tuple[list, dict]:
    """Ask the cells with ``concurrency`` in flight, each record appended to the store as it arrives (a kill loses
    at most the cells in flight); the failed records, and the first of them when ``stop_on_failure`` stopped
    the asking (else None).

    A stop (Ctrl-C, SIGINT, the sidebar's *Stop*) asks nothing more and keeps the answers in flight as they land
    (:func:`_finish_in_flight`); a second stop abandons them."""
    failures, stop, pending = [], None, iter(todo)
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    running: set = set()
    landed: list = []  # answered, not yet stored: a stop between the two still stores them
    abandoned = False

    def take(future) -> None:
        record = future.result()
        if record["status"] != "ok":
            failures.append(record)
        store.append(record)
        if bar is not None:
            bar.update(1)

    try:
        running = {pool.submit(ask_cell, *cell) for cell in itertools.islice(pending, max(1, concurrency))}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            landed = list(finished)
            while landed:
                future = landed[-1]
                record = future.result()
                if record["status"] != "ok":
                    stop = stop or (record if stop_on_failure else None)
                cell = next(pending, None) if stop is None else None
                if cell is not None:  # keep the slot busy while this answer is written
                    running.add(pool.submit(ask_cell, *cell))
                take(landed.pop())
    except KeyboardInterrupt:
        abandoned = not _finish_in_flight(running | set(landed), take, bar)
        raise
    finally:
        # An abandoned call's thread is left to end on its own; the CLI leaves without waiting for it.
        pool.shutdown(wait=not abandoned, cancel_futures=True)
    return failures, stop


def _finish_in_flight(running: set, take, bar) -> bool:
    """After a stop: wait for the calls in flight, each stored as it lands, saying how many are left (the bar's
    ``stopping``, which the runs sidebar shows); False when a second stop abandoned the rest."""
    say = getattr(bar, "stopping", None)
    if say is None and hasattr(bar, "set_postfix_str"):  # a notebook's own tqdm bar
        say = lambda n: bar.set_postfix_str(f"stopping: {n} call(s) in flight; stop again to abandon them")  # noqa: E731
    try:
        while running:
            if say is not None:
                say(len(running))
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                take(future)
    except KeyboardInterrupt:
        return False
    return True


def mode_pairs(results: pd.DataFrame) -> pd.DataFrame:
    """Mode A and mode B answers side by side, one row per (system, model, context_k, test_id).

    Returns
    -------
    DataFrame
        system, model, context_k, test_id, answer_A, answer_B, status_A, status_B, gold_retrieved_A.
        Score both with the judging stage, then ``score_B - score_A`` is Appendix F.3's delta.

    Examples
    --------
    >>> results = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": ["A", "B"],
    ...                         "test_id": "q1", "status": "ok", "answer": ["own retrieval", "gold context"],
    ...                         "gold_retrieved": [False, None]})
    >>> mode_pairs(results)[["test_id", "answer_A", "answer_B", "gold_retrieved_A"]].values.tolist()
    [['q1', 'own retrieval', 'gold context', False]]
    """
    keys = ["system", "model", "context_k", "test_id"]
    a = results[results["mode"] == "A"].set_index(keys)[["answer", "status", "gold_retrieved"]]
    b = results[results["mode"] == "B"].set_index(keys)[["answer", "status"]]
    out = a.add_suffix("_A").join(b.add_suffix("_B"), how="inner").reset_index()
    return out[[*keys, "answer_A", "answer_B", "status_A", "status_B", "gold_retrieved_A"]]


def retrieval_table(system: ReferenceRAG, question: str, configs) -> pd.DataFrame:
    """What the reference system would put into the prompt for one question at several budgets.

    Returns
    -------
    DataFrame
        context_k, rank, chunk_id, doc_id, score, n_tokens, used_tokens (running total).

    Examples
    --------
    >>> import types
    >>> chunks = pd.DataFrame({"chunk_id": ["c1", "c2", "c3"], "doc_id": ["d1", "d2", "d3"],
    ...                        "text": ["EUV resists trade sensitivity against line-edge roughness.",
    ...                                 "Wafers are sliced from a silicon ingot.",
    ...                                 "Resist sensitivity sets the EUV dose."]})
    >>> system = ReferenceRAG(chunks, types.SimpleNamespace(model="m"))  # retrieval asks no model
    >>> table = retrieval_table(system, "What limits EUV resist sensitivity?", [0.25])
    >>> table[["rank", "chunk_id", "used_tokens"]].values.tolist()
    [[0, 'c3', 9], [1, 'c1', 21]]
    """
    frames = []
    for c in configs:
        c = c if isinstance(c, RAGConfig) else RAGConfig(float(c))
        used = system.retrieve(question, c).drop(columns="text")
        used.insert(0, "context_k", c.context_k)
        used["used_tokens"] = used["n_tokens"].cumsum()
        frames.append(used)
    return pd.concat(frames, ignore_index=True)
