"""The plan of an experiment: every call it makes, with tokens, cost and time, before anything is answered.

Prompts are counted with tiktoken from the real retrieval (reference systems), the gold
context (mode B) or the window (adapters); answers at the gold answer's length; judge
prompts from DeepEval's G-Eval template with each metric's rubric. Calls already in the
output folder's stores count as done. With ``probe``, one small call per endpoint
measures its speed and the model name it reports.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..core.errors import FabnbError
from ..core.records import cell_key
from ..core.schema import RESULT_KEYS, SCORE_RECORD_KEYS
from ..core.tokens import count_tokens
from ..judge.geval import prompt_overhead
from ..judge.rubrics import rubric_variant
from ..rag.system import prepare_system
from .config import Experiment, ExperimentError
from .output import stores
from .prices import cost_of, price_of, price_text

__all__ = ["CONFIRM_HOURS", "CONFIRM_USD", "ConfirmationNeeded", "PLAN_COLUMNS", "PROBES_FILE", "PROBE_COLUMNS",
           "Plan", "PlanInputs", "keep_probes", "kept_probes", "plan", "prepare_systems", "probe_endpoints"]

PLAN_COLUMNS = ["system", "model", "stage", "calls", "done", "todo", "prompt_tokens", "completion_tokens",
                "cost_usd", "price", "seconds"]
PROBE_COLUMNS = ["endpoint", "model_reported", "latency_s", "completion_tokens", "prompt_latency_s", "prompt_tokens",
                 "error", "s_per_completion_token", "s_per_prompt_token"]
#: The one confirmation threshold: a plan whose cost to do passes this many dollars (with no ``budget_usd``), or
#: whose time to do passes this many hours, does not start without a confirmation (``--yes``). An experiment file
#: overrides each with ``confirm_usd`` / ``confirm_hours``.
CONFIRM_USD = 50.0
CONFIRM_HOURS = 2.0
#: A probe frame's columns: :data:`PROBE_COLUMNS` and when each was measured (now, or the run it was kept from).
_MEASURED_COLUMNS = [*PROBE_COLUMNS, "measured"]
#: Where a run folder keeps its probes (:func:`keep_probes`): a rerun against the same endpoint sends none.
PROBES_FILE = "probes.json"
_PROBE_TEXT = " ".join(["A wafer is a thin slice of semiconductor used to make integrated circuits."] * 40)


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Plan:
    """What a run would do: calls, tokens, cost and time per system and stage.

    Attributes
    ----------
    table : DataFrame
        system, model, stage (answers / judge), calls (planned), done, todo, prompt_tokens,
        completion_tokens (estimated for the calls still to do), cost_usd (None: no known
        price), price (the price used and its source), seconds (None: not measured).
    probes : DataFrame
        endpoint, model_reported, latency_s, completion_tokens, prompt_latency_s, prompt_tokens,
        error, s_per_completion_token, s_per_prompt_token.
    n_questions : int
        The questions asked (for a ``[tests]`` run, the tests: ``unit``).
    max_call_cost : dict
        ``{(stage, system): dollars}`` of the dearest call a stage can make (None: no known price).
    """

    table: pd.DataFrame
    probes: pd.DataFrame
    n_questions: int
    max_call_cost: dict
    unit: str = "question"  # what n_questions counts ("test" for a [tests] run)
    note: str | None = None  # how the tokens were estimated, when not as for FAB-Bench questions
    said: tuple = ()  # lines the plan adds below its table (the position sweep's multiplication)

    @property
    def total_cost(self) -> float | None:
        costs = self.table["cost_usd"]
        return None if costs.isna().any() else float(costs.sum())

    @property
    def total_seconds(self) -> float | None:
        secs = self.table["seconds"]
        return None if secs.isna().any() else float(secs.sum())

    def stage_counts(self, stage: str) -> tuple[int, int]:
        """A stage's calls done and planned, as the plan counts them (what the bar, the sidebar and the CLI say)."""
        rows = self.table[self.table["stage"] == stage]
        return int(rows["done"].sum()), int(rows["calls"].sum())

    def calls_within(self, budget_usd: float, spent_usd: float, stage: str) -> int | None:
        """How many more calls of ``stage`` fit in what is left of ``budget_usd``, each counted at the dearest call
        the stage can make; None when none has a known price and the budget is not passed.

        >>> plan_ = Plan(pd.DataFrame(columns=PLAN_COLUMNS), pd.DataFrame(), 0, {("judge", "s"): 0.002})
        >>> plan_.calls_within(1.0, 0.99, "judge"), plan_.calls_within(1.0, 0.5, "answers")
        (5, None)
        """
        per_call = max([c or 0.0 for (s, _), c in self.max_call_cost.items() if s == stage] or [0.0])
        left = budget_usd - spent_usd
        if per_call <= 0:
            return None if left >= 0 else 0
        return max(0, math.floor(left / per_call))

    def confirmation(self, exp: Experiment, usd: float | None = None) -> str | None:
        """Why this plan must be confirmed before it starts, or None.

        A plan asks when its cost to do passes ``confirm_usd`` (default :data:`CONFIRM_USD`; ``usd``, JupyterLab's
        setting, overrides both), unless ``budget_usd`` is set (the run stops before the budget), or its time to do
        passes ``confirm_hours`` (default :data:`CONFIRM_HOURS`). An unknown cost or time asks nothing of its own.
        """
        usd = usd if usd is not None else CONFIRM_USD if exp.confirm_usd is None else exp.confirm_usd
        hours = CONFIRM_HOURS if exp.confirm_hours is None else exp.confirm_hours
        over = []
        cost, secs = self.total_cost, self.total_seconds
        if cost is not None and cost > usd and exp.budget_usd is None:
            over.append(f"costs about ${cost:,.2f}, over the ${usd:,.2f} that asks first")
        if secs is not None and secs > hours * 3600:
            over.append(f"takes about {_duration(secs)}, over the {hours:g} h that asks first")
        if not over:
            return None
        return (f"this plan ({int(self.table['todo'].sum()):,} calls to do) " + " and ".join(over) + ". Nothing "
                "was asked. Read the plan above; to go on, run it again with --yes (fabnb run FILE --yes, %fabnb "
                "run FILE --yes, or Run in JupyterLab and confirm), or set budget_usd to cap the spending, or raise "
                "confirm_usd / confirm_hours in the file.")

    def render(self) -> str:
        t = self.table.copy()
        t["cost_usd"] = [("unknown" if pd.isna(c) else f"${c:,.4f}") for c in t["cost_usd"]]
        unmeasured = "not probed" if self.probes.empty else "unknown"
        t["seconds"] = [(unmeasured if pd.isna(s) else _duration(s)) for s in t["seconds"]]
        for col in ("calls", "done", "todo", "prompt_tokens", "completion_tokens"):
            t[col] = [f"{int(v):,}" for v in t[col]]
        total = self.total_cost
        secs = self.table["seconds"]
        questions = f"{self.n_questions:,} {self.unit}{'' if self.n_questions == 1 else 's'}"
        lines = [f"plan: {questions}; {int(self.table['calls'].sum()):,} calls planned, "
                 f"{int(self.table['done'].sum()):,} done, {int(self.table['todo'].sum()):,} to do",
                 t.drop(columns=["price"]).to_string(index=False),
                 "cost to do: " + ("unknown (a model has no known price; add it under [prices])" if total is None
                                   else f"${total:,.4f}") + "; time to do: "
                 + (unmeasured if secs.isna().any() else _duration(float(secs.sum())))
                 + (f" ({self.note})" if self.note else
                    " (tokens: prompts counted with tiktoken from the real retrieval; answers at the length of the "
                    "gold answer, capped by the output budget; judge replies at the reason limit)")]
        if len(self.probes):
            lines.append("probes: " + "; ".join(
                f"{r.endpoint}: " + (f"error {r.error}" if r.error else
                                     f"{r.model_reported} wrote {r.completion_tokens} tokens in {r.latency_s:.2f} s"
                                     + (f", read {r.prompt_tokens} in {r.prompt_latency_s:.2f} s" if r.prompt_tokens
                                        else "")
                                     + (f" (kept from {r.measured})" if getattr(r, "kept", False) else ""))
                for r in self.probes.itertuples()))
        return "\n".join([*lines, *self.said])

    def __repr__(self) -> str:
        return self.render()


# ------------------------------------------------------------------ probes


def _probe_llm(exp: Experiment, ep, judge: bool) -> dict:
    """Two small calls to an endpoint, after one that warms it up: one that writes ~30 tokens, one that reads ~600
    and writes one."""
    llm = ep.llm(n_ctx=exp.judge_n_ctx if judge else 8192, logprobs=exp.logprobs if judge else False)
    probe_llm = llm.with_defaults()
    probe_llm.cache = None  # a probe measures the server, never the cache
    probe_llm.complete("Say OK.", max_tokens=1)  # a server's first call pays one-time costs: not measured
    done = probe_llm.complete("Count from 1 to 30, separated by spaces.", max_tokens=48)
    read = probe_llm.complete(_PROBE_TEXT + "\nSay OK.", max_tokens=1)
    return {"model_reported": done.model, "latency_s": done.latency_s, "completion_tokens": done.completion_tokens,
            "prompt_latency_s": read.latency_s, "prompt_tokens": read.prompt_tokens}


def _probe_adapter(exp: Experiment, system) -> dict:
    """One question to an adapter: its latency and answer length."""
    from ..rag import RAGConfig

    start = time.perf_counter()
    ans = system.ask("What is a semiconductor wafer?", RAGConfig(min(exp.windows)))
    return {"model_reported": system.model, "latency_s": time.perf_counter() - start,
            "completion_tokens": ans.completion_tokens or count_tokens(ans.answer), "prompt_latency_s": 0.0,
            "prompt_tokens": 0}


def kept_probes(folder: Path) -> pd.DataFrame:
    """The probes kept in a run folder (:data:`PROBES_FILE`): :data:`PROBE_COLUMNS` and ``measured`` (when), one
    row per endpoint identity; empty when there is none, or it cannot be read (then the endpoints are probed)."""
    import json

    from ..core.files import FileRefused, read_text

    try:
        data = json.loads(read_text(Path(folder) / PROBES_FILE, setting="the kept probes", max_bytes=1024 * 1024))
    except (FileRefused, ValueError):
        data = None
    rows = data.get("probes") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return pd.DataFrame(columns=_MEASURED_COLUMNS)
    frame = pd.DataFrame([r for r in rows if isinstance(r, dict) and isinstance(r.get("endpoint"), str)],
                         columns=_MEASURED_COLUMNS)
    return frame.drop_duplicates("endpoint", keep="last").reset_index(drop=True)


def keep_probes(folder: Path, probes: pd.DataFrame) -> None:
    """Keep the probes that answered in the run folder, beside those kept before (a newer one replaces an older
    one of the same endpoint identity). A failed probe is not kept: the next run probes that endpoint again."""
    from .output import json_records, write_json

    if not len(probes):  # not probed (--no-probe), or nothing to do
        return
    fresh = probes[~probes["error"].astype(bool) & ~probes["kept"].astype(bool)].drop(columns="kept")
    if not len(fresh):
        return
    merged = pd.concat([kept_probes(folder), fresh], ignore_index=True).drop_duplicates("endpoint", keep="last")
    write_json(Path(folder) / PROBES_FILE, {"probes": json_records(merged.reset_index(drop=True))}, indent=1)


def probe_endpoints(exp: Experiment, built: dict, only=None, kept: pd.DataFrame | None = None) -> pd.DataFrame:
    """One small call per endpoint (``built``: the systems by name): what model the server reports, and its speed.

    Parameters
    ----------
    only : set of str, optional
        The endpoint identities to measure (those with calls still to do); None: every endpoint.
    kept : DataFrame, optional
        :func:`kept_probes` of the run folder: an endpoint found there is not called again; its kept row is used
        (``measured`` says when).

    Returns
    -------
    DataFrame
        :data:`PROBE_COLUMNS` and ``measured`` (the time of the measurement: now, or when it was kept); a failed
        probe has its cause in ``error`` and NaN speeds.
    """
    import datetime as dt

    rows, seen = [], set()
    kept = kept if kept is not None else pd.DataFrame(columns=_MEASURED_COLUMNS)
    known = {r["endpoint"]: r for r in kept.to_dict("records")}
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    targets = [(s.endpoint, s, built.get(s.name)) for s in exp.systems] + [(exp.judge, None, None)]
    for ep, spec, system in targets:
        ident = ep.identity() if spec is None else spec.identity()
        if ident in seen or (only is not None and ident not in only):
            continue
        seen.add(ident)
        if ident in known:  # measured on an earlier run of this folder, against the same endpoint
            rows.append({k: known[ident].get(k) for k in PROBE_COLUMNS[:-2]}
                        | {"measured": known[ident]["measured"], "kept": True})
            continue
        try:
            if spec is None or spec.uses_endpoint:
                row = _probe_llm(exp, ep, judge=spec is None)
            else:
                row = _probe_adapter(exp, system)
            rows.append({"endpoint": ident, **row, "error": "", "measured": now, "kept": False})
        except FabnbError as exc:
            rows.append({"endpoint": ident, "model_reported": "", "latency_s": float("nan"), "completion_tokens": 0,
                         "prompt_latency_s": float("nan"), "prompt_tokens": 0,
                         "error": f"{getattr(exc, 'cause', 'error')}: {str(exc)[:160]}", "measured": now,
                         "kept": False})
    frame = pd.DataFrame(rows, columns=[*PROBE_COLUMNS[:-2], "measured", "kept"])
    frame["error"] = frame["error"].fillna("").astype(str)
    frame["s_per_completion_token"] = frame["latency_s"] / frame["completion_tokens"].where(
        frame["completion_tokens"] > 0)
    frame["s_per_prompt_token"] = (frame["prompt_latency_s"] / frame["prompt_tokens"].where(
        frame["prompt_tokens"] > 0)).fillna(0.0)
    return frame


# ------------------------------------------------------------------ token estimates


def _retrieved(exp: Experiment, questions: pd.DataFrame, chunks, top_budget: int, built: dict | None = None) -> dict:
    """Per (retriever, test_id): the scores and token counts of the hits, deep enough for the largest window.

    A built reference system's own retriever is used where there is one (a dense index is not embedded twice)."""
    from ..rag import make_retriever

    retrievers, hits = {}, {}
    for spec in exp.systems:
        if spec.kind != "reference" or "A" not in exp.modes:
            continue
        if spec.retriever not in retrievers:
            own = getattr((built or {}).get(spec.name), "retriever", None)
            retrievers[spec.retriever] = own if own is not None else make_retriever(chunks, spec.retriever)
        r = retrievers[spec.retriever]
        for q in questions.itertuples():
            if (spec.retriever, q.test_id) not in hits:
                h = r.search(q.question)
                keep = (h["n_tokens"] + 4).cumsum() <= 2 * top_budget + 4096
                h = h[keep | (h.index < 1)]
                hits[(spec.retriever, q.test_id)] = (h["score"].tolist(), h["n_tokens"].tolist())
    return hits


def _answer_estimates(exp: Experiment, questions: pd.DataFrame, chunks, configs, built: dict | None = None
                      ) -> pd.DataFrame:
    """Per (system, window, mode, question): prompt, context and completion tokens of the answer call.

    Returns
    -------
    DataFrame
        system, context_k, mode, test_id, prompt_tokens, context_tokens (None: an adapter's own
        retrieval, unknown before it answers), completion_tokens, max_completion_tokens.
    """
    from ..rag import PROMPT_OVERHEAD, SYSTEM_PROMPT, pick_context

    q_tokens = {r.test_id: count_tokens(r.question) for r in questions.itertuples()}
    gold_tokens = {r.test_id: count_tokens(r.gold_context or "") for r in questions.itertuples()}
    answer_tokens = {r.test_id: count_tokens(r.ground_truth_answer or "") for r in questions.itertuples()}
    fixed = count_tokens(SYSTEM_PROMPT) + 12  # the prompt's headings and the chat template's own tokens
    hits = _retrieved(exp, questions, chunks, max(c.input_budget for c in configs), built)
    rows = []
    for spec in exp.systems:
        for c in configs:
            for mode in exp.modes:
                for q in exp.asked_in(mode, questions).itertuples():
                    tid = q.test_id
                    room = max(0, c.input_budget - q_tokens[tid] - PROMPT_OVERHEAD)
                    if mode[0] == "P":  # a position sweep fills the window with the gold passage and distractors
                        context = room
                    elif mode == "B":
                        context = min(gold_tokens[tid], room)
                    elif spec.kind == "reference":
                        scores, tokens = hits[(spec.retriever, tid)]
                        # The reference system's own choice (ReferenceRAG uses the same pick_context).
                        context = sum(tokens[i] + 2 for i in pick_context(scores, tokens, room, c.n_snippets,
                                                                            c.threshold))
                    else:
                        context = room  # an adapter's retrieval is unknown until it answers: at most the window
                    rows.append({"system": spec.name, "context_k": c.context_k, "mode": mode, "test_id": tid,
                                 "prompt_tokens": fixed + q_tokens[tid] + context,
                                 "context_tokens": context if (mode != "A" or spec.kind == "reference") else None,
                                 "completion_tokens": min(c.max_output_tokens, max(1, answer_tokens[tid])),
                                 "max_completion_tokens": c.max_output_tokens})
    return pd.DataFrame(rows)


def _judge_estimates(exp: Experiment, questions: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """Per answer cell and metric: the judge prompt's tokens, before any answer exists.

    Returns
    -------
    DataFrame
        system, context_k, mode, test_id, metric, prompt_tokens, max_prompt_tokens, completion_tokens, calls
        (tokens summed over the replicates).
    """
    q = questions.set_index("test_id")
    q_tokens = {t: count_tokens(r.question) + count_tokens(r.ground_truth_answer or "") for t, r in q.iterrows()}
    exposes = {s.name: s.exposes_context for s in exp.systems}
    rows = []
    reply = exp.reason_chars // 3 + 16  # a reason of that many characters, the score and the JSON around them
    for a in answers.itertuples():
        fmt = q.loc[a.test_id, "question_format"]
        has_context = a.mode != "A" or exposes[a.system]
        answer = min(a.completion_tokens, exp.max_answer_tokens)
        answer_max = min(a.max_completion_tokens, exp.max_answer_tokens)
        context = a.context_tokens if a.context_tokens is not None and not pd.isna(a.context_tokens) else 0
        for metric in exp.metrics:
            variant = rubric_variant(metric, fmt, has_context)
            prompt = prompt_overhead(metric, variant) + q_tokens[a.test_id]
            ctx = context if variant == "with_context" else 0
            rows.append({"system": a.system, "context_k": a.context_k, "mode": a.mode, "test_id": a.test_id,
                         "metric": metric, "prompt_tokens": (prompt + answer + ctx) * exp.replicates,
                         "max_prompt_tokens": prompt + answer_max + (a.prompt_tokens if variant == "with_context"
                                                                     else 0),
                         "completion_tokens": reply * exp.replicates, "calls": exp.replicates})
    return pd.DataFrame(rows)


def _seconds(prompt_tokens: float, completion_tokens: float, rate: tuple | None, concurrency: int) -> float | None:
    """Time of the calls from the probes' seconds per prompt token and per completion token (0 with nothing to do:
    such an endpoint is not probed)."""
    if not prompt_tokens and not completion_tokens:
        return 0.0
    if rate is None or any(pd.isna(r) for r in rate):
        return None
    per_prompt, per_completion = rate
    return (float(prompt_tokens) * per_prompt + float(completion_tokens) * per_completion) / max(1, concurrency)


# ------------------------------------------------------------------ the plan


def _mark_done(exp: Experiment, answers: pd.DataFrame, judged: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The estimates with ``done`` (answers) and ``done_calls`` (judge replicates) from the folder's stores."""
    # A folder that does not exist yet holds nothing done (and a dry run must not create it).
    a_store, s_store = stores(exp.output) if exp.output.exists() else (None, None)
    a_done, s_done = (a_store.done(), s_store.done()) if a_store else (set(), set())
    models = {s.name: s.model for s in exp.systems}
    answers = answers.assign(done=[cell_key({"system": r.system, "model": models[r.system], "context_k": r.context_k,
                                             "mode": r.mode, "test_id": r.test_id}, RESULT_KEYS) in a_done
                                   for r in answers.itertuples()])
    judged = judged.assign(done_calls=[
        sum(cell_key({"system": r.system, "model": models[r.system], "context_k": r.context_k, "mode": r.mode,
                      "test_id": r.test_id, "metric": r.metric, "replicate": rep}, SCORE_RECORD_KEYS) in s_done
            for rep in range(exp.replicates)) for r in judged.itertuples()])
    return answers, judged


def _answer_row(exp: Experiment, spec, answers: pd.DataFrame, speed: dict, max_call: dict) -> dict:
    a = answers[answers["system"] == spec.name]
    todo = a[~a["done"]]
    model = spec.endpoint.model if spec.uses_endpoint else spec.model
    price = price_of(model if spec.uses_endpoint else "", exp.prices)
    conc = 1 if spec.endpoint.embedded else exp.concurrency
    p_tok, c_tok = todo["prompt_tokens"].sum(), todo["completion_tokens"].sum()
    if spec.uses_endpoint:
        max_call[("answers", spec.name)] = cost_of(model, exp.prices, a["prompt_tokens"].max() if len(a) else 0,
                                                   a["max_completion_tokens"].max() if len(a) else 0)
    return {"system": spec.name, "model": spec.model, "stage": "answers", "calls": len(a),
            "done": int(a["done"].sum()), "todo": len(todo), "prompt_tokens": int(p_tok),
            "completion_tokens": int(c_tok),
            "cost_usd": cost_of(model, exp.prices, p_tok, c_tok) if spec.uses_endpoint else None,
            "price": price_text(price), "seconds": _seconds(p_tok, c_tok, speed.get(spec.identity()), conc)}


def _judge_row(exp: Experiment, spec, judged: pd.DataFrame, speed: dict, max_call: dict) -> dict:
    j = judged[judged["system"] == spec.name]
    undone = j["calls"] - j["done_calls"]
    share = (undone / j["calls"]).where(j["calls"] > 0, 0)
    p_tok, c_tok = float((j["prompt_tokens"] * share).sum()), float((j["completion_tokens"] * share).sum())
    conc = 1 if exp.judge.embedded else exp.judge_concurrency
    max_call[("judge", spec.name)] = cost_of(exp.judge.model, exp.prices, j["max_prompt_tokens"].max() if len(j) else 0,
                                             exp.reason_chars // 3 + 16)
    return {"system": spec.name, "model": exp.judge.model, "stage": "judge", "calls": int(j["calls"].sum()),
            "done": int(j["done_calls"].sum()), "todo": int(undone.sum()), "prompt_tokens": int(p_tok),
            "completion_tokens": int(c_tok), "cost_usd": cost_of(exp.judge.model, exp.prices, p_tok, c_tok),
            "price": price_text(price_of(exp.judge.model, exp.prices)),
            "seconds": _seconds(p_tok, c_tok, speed.get(exp.judge.identity()), conc)}


def _endpoints_to_do(exp: Experiment, answers: pd.DataFrame, judged: pd.DataFrame) -> set:
    """The endpoint identities that still have calls to make: only they are worth a probe."""
    todo = {spec.identity() for spec in exp.systems if (~answers.loc[answers["system"] == spec.name, "done"]).any()}
    if ((judged["calls"] - judged["done_calls"]) > 0).any():
        todo.add(exp.judge.identity())
    return todo


@dataclass
class PlanInputs:
    """What a plan reads that a run has at hand already: the questions, the chunked corpus and, for the probes, the
    built systems by name (:func:`fabnb.experiment.run_experiment` passes its own, so nothing is read twice)."""

    questions: pd.DataFrame
    chunks: pd.DataFrame
    built: dict = field(default_factory=dict)

    @classmethod
    def read(cls, exp: Experiment, build: bool = False) -> "PlanInputs":
        """The questions and chunks of ``exp``, read as :func:`plan` reads them without a run; with ``build``, the
        systems built too (building starts nothing but the embedded server)."""
        questions = exp.questions()
        documents = exp.documents(questions)
        inputs = cls(questions, exp.chunks(documents))
        if build:
            chunking = {"chunk_size": exp.chunk_size, "chunk_overlap": exp.chunk_overlap}
            inputs.built = {s.name: s.build(inputs.chunks, exp.concurrency, documents, chunking) for s in exp.systems}
        return inputs


def plan(exp: Experiment, probe: bool = False, inputs: PlanInputs | None = None) -> Plan:
    """Count every call the experiment makes, and estimate its tokens, cost and time.

    Calls already in the output folder's stores count as done. Prompts are counted from
    the real retrieval for the reference system (the chunks each window takes), the gold
    context for mode B, and the window for adapters (their retrieval is unknown before
    they answer). Answers are estimated at the length of the question's gold answer,
    capped by the window's output budget; judge prompts from DeepEval's G-Eval template
    with each metric's rubric, the question, the gold answer, that answer estimate and,
    for rubrics that read the context, the context. With ``probe`` one small call per
    endpoint measures its speed and the model name it reports; without, the probes a run of
    this folder kept give the time of their endpoints (no call is made).

    Returns
    -------
    Plan
        ``table`` has one row per system and stage: system, model, stage, calls, done,
        todo, prompt_tokens, completion_tokens, cost_usd, price, seconds.

    Examples
    --------
    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp() + "/new",
    ...                             "questions": {"sample": 2}, "contexts": {"windows": [1, 2]},
    ...                             "systems": [{"name": "local", "model": "embedded"}],
    ...                             "judge": {"metrics": ["relevance", "depth"]}})
    >>> plan(exp).table[["system", "stage", "calls", "done", "todo"]]
      system    stage  calls  done  todo
    0  local  answers      4     0     4
    1  local    judge      8     0     8
    """
    inputs = inputs if inputs is not None else PlanInputs.read(exp)
    questions = inputs.questions
    answers = _answer_estimates(exp, questions, inputs.chunks, exp.configs(), inputs.built)
    answers, judged = _mark_done(exp, answers, _judge_estimates(exp, questions, answers))
    kept, to_do = kept_probes(exp.output), _endpoints_to_do(exp, answers, judged)
    if not probe:  # no call, yet the time of every endpoint a run of this folder measured (its kept probes)
        to_do &= set(kept["endpoint"])
    probes = (probe_endpoints(exp, inputs.built, only=to_do, kept=kept) if probe or to_do
              else pd.DataFrame(columns=_MEASURED_COLUMNS))
    speed = {r.endpoint: (r.s_per_prompt_token, r.s_per_completion_token) for r in probes.itertuples()}
    rows, max_call = [], {}
    for spec in exp.systems:
        rows.append(_answer_row(exp, spec, answers, speed, max_call))
        rows.append(_judge_row(exp, spec, judged, speed, max_call))
    table = pd.DataFrame(rows, columns=PLAN_COLUMNS)
    return Plan(table, probes, len(questions), max_call, said=_sweep_said(exp, questions) + _batch_said(exp, table))


def _batch_said(exp: Experiment, table: pd.DataFrame) -> tuple:
    """Each batch stage's cost at the batch price beside its online cost (the table's), and its time: the
    provider's window, not an ETA from probes."""
    batched = {s.name for s in exp.systems if s.mode == "batch"}
    lines = []
    for r in table.itertuples():
        if not ((r.stage == "answers" and r.system in batched) or (r.stage == "judge" and exp.judging.mode == "batch")):
            continue
        dollars = cost_of(r.model, exp.prices, r.prompt_tokens, r.completion_tokens, batch=True)
        batch = ("unknown (no batch price for this model: add batch_input and batch_output under [prices])"
                 if dollars is None else f"${dollars:,.4f}")
        online = "unknown" if pd.isna(r.cost_usd) else f"${r.cost_usd:,.4f}"
        lines.append(f"batch: {r.system} {r.stage}, {r.todo:,} calls to {r.model}: {batch} at the batch price "
                     f"(online {online}); time: up to 24 h, the provider's batch window (not an estimate from probes)")
    return tuple(lines)


def _sweep_said(exp: Experiment, questions: pd.DataFrame) -> tuple:
    """The position sweep's multiplication, said under the plan's table (none without a sweep)."""
    swept = exp.contexts.position_modes
    if not swept:
        return ()
    n = len(exp.asked_in(swept[0], questions))
    per_system = n * len(swept) * len(exp.windows)
    return (f"position sweep: {n:,} questions x {len(swept)} depths ({', '.join(swept)}) x {len(exp.windows)} "
            f"windows = {per_system:,} answers per system, each judged like every answer "
            + ("(position_sample)" if exp.contexts.position_sample else "(every question with gold context)"),)


class ConfirmationNeeded(ExperimentError):
    """A plan above the confirmation threshold, started without ``yes``: nothing was asked."""


def prepare_systems(exp: Experiment, built: dict) -> None:
    """Let each system get ready for the windows before any question is asked (a framework calls its factory and
    checks its pipelines); a refusal names the file and asks nothing."""
    configs = exp.configs()
    for system in built.values():
        try:
            prepare_system(system, configs)
        except FabnbError as exc:
            raise ExperimentError(f"{exp.source}: {exc} Nothing was asked.") from None
