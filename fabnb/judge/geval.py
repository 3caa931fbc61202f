"""G-Eval through DeepEval (the only module that imports it): judge model, weighted scores, the score store."""

from __future__ import annotations

import asyncio
import math
import os
import re
import threading
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.bars import stage_bar
from ..core.records import ResultsStore, StageRun, hold
from ..core.schema import METRICS, SCORE_RECORD_COLUMNS, SCORE_RECORD_KEYS
from ..core.tokens import count_tokens, truncate_tokens
from ..models.llm import LLMError
from .rubrics import (
    BANDS,
    JUDGE_SCALE,
    RUBRIC_VERSION,
    RUBRICS,
    STEPS,
    JudgeError,
    injection_flags,
    read_judgement,
    rubric_variant,
)

__all__ = ['JudgeRun', 'geval_metric', 'judge_expert_agreement', 'judge_model', 'judge_results', 'logprobs_supported',
           'prompt_overhead', 'reason_score_schema', 'replicate_spread', 'score_answer',
           'score_one', 'score_store', 'to_score_frame', 'weighted_score']

# ------------------------------------------------------------------ DeepEval, behind this module


def _deepeval():
    """Import DeepEval with its telemetry and .env loading switched off."""
    os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
    os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
    os.environ.setdefault("DEEPEVAL_UPDATE_WARNING_OPT_IN", "0")
    import deepeval  # noqa: F401

    return deepeval


def reason_score_schema(reason_chars: int = 400) -> dict:
    """The JSON schema of a judge's reply: a reason (at most ``reason_chars``) and an integer score 0-10.

    The score is an enum: grammar-constrained servers (llama.cpp) enforce an enum, not
    minimum/maximum. The reason excludes quotes, backslashes and control characters; a
    grammar otherwise lets a raw newline into the string, which strict JSON parsers refuse.
    The length limit is in the pattern too: llama.cpp's converter reads the pattern and then
    ignores ``maxLength``, and a small judge would ramble to ``max_tokens`` and break the JSON.

    Examples
    --------
    >>> reason = reason_score_schema(120)["properties"]["reason"]
    >>> reason["maxLength"], reason["pattern"].endswith("{1,120}$")
    (120, True)
    """
    return {"type": "object",
            "properties": {"reason": {"type": "string", "maxLength": int(reason_chars),
                                      "pattern": '^[^"\\\\\\x00-\\x1f]{1,%d}$' % int(reason_chars)},
                           "score": {"type": "integer", "enum": list(range(JUDGE_SCALE[0], JUDGE_SCALE[1] + 1))}},
            "required": ["reason", "score"]}


def _chat_completion(done):
    """A fabnb Completion as the openai ChatCompletion object DeepEval reads logprobs from."""
    from openai.types.chat import ChatCompletion

    logprobs = None
    if done.logprobs:
        logprobs = {"content": [{"token": t["token"], "logprob": t["logprob"], "bytes": None,
                                 "top_logprobs": [{"token": a["token"], "logprob": a["logprob"], "bytes": None}
                                                  for a in t["top_logprobs"]]} for t in done.logprobs]}
    return ChatCompletion.model_validate({
        "id": done.key or "fabnb", "object": "chat.completion", "created": 0, "model": done.model,
        "choices": [{"index": 0, "finish_reason": done.finish_reason or "stop", "logprobs": logprobs,
                     "message": {"role": "assistant", "content": done.text}}],
        "usage": {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens,
                  "total_tokens": done.prompt_tokens + done.completion_tokens}})


_LOGPROBS: dict = {}
_LOGPROBS_LOCK = threading.Lock()


def logprobs_supported(llm, assume: bool | None = None) -> bool:
    """Whether the judge's server returns logprobs: one tiny probe per endpoint and model, remembered.

    A server that refuses them (llama.cpp started without ``logits_all``) answers with an
    error; probing once, without retries, keeps every later judge call from paying for
    that error and its retries. ``assume`` records the answer without a probe, for a server that is not up
    here (requests exported for vLLM's ``run_batch`` on another machine, which returns logprobs).
    """

    key = (llm.base_url, llm.model)
    with _LOGPROBS_LOCK:
        if assume is not None:
            _LOGPROBS[key] = bool(assume)
        if key not in _LOGPROBS:
            probe = llm.with_defaults()
            # Sent even in a batch run's collecting pass (one tiny call): whether logprobs come decides the requests.
            probe.max_retries, probe.cache, probe.capture = 0, None, None
            try:
                done = probe.complete("Say 1.", max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=2)
                _LOGPROBS[key] = bool(done.logprobs)
            except LLMError as exc:
                if exc.cause in ("connection", "timeout"):
                    raise
                _LOGPROBS[key] = False
        return _LOGPROBS[key]


class _JudgeCalls:
    """The judge model's methods: every call through the LLM layer (cache, retries), the reply checked before it is
    cached. :func:`_judge_model_class` puts them on a DeepEval model class."""

    def __init__(self, llm, logprobs, max_tokens, schema, temperature, reason_chars):
        self.llm, self.max_tokens, self.schema = llm, max_tokens, schema
        self.temperature, self.reason_chars = temperature, reason_chars
        self.refused_logprobs = bool(logprobs) and not logprobs_supported(llm)
        self.logprobs = bool(logprobs) and not self.refused_logprobs
        self.last = None
        self.refused = None  # the JudgeError of a reply the check refused (not cached)
        super().__init__(llm.model)

    def load_model(self):
        return self.llm

    def get_model_name(self):
        return self.llm.model

    def _params(self, top_logprobs: int | None):
        params = {"max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.schema:
            params["response_format"] = {"type": "json_object", "schema": reason_score_schema(self.reason_chars)}
        if self.logprobs and top_logprobs:
            params.update(logprobs=True, top_logprobs=min(int(top_logprobs), 20))
        return params

    def _check(self, done) -> None:
        # Runs before the reply is cached; DeepEval may wrap what it raises, so it is kept here too.
        try:
            read_judgement(done.text)
        except JudgeError as exc:
            self.refused = exc
            raise

    def generate(self, prompt: str, schema=None, **kwargs) -> str:
        self.last = self.llm.complete(prompt, validate=self._check, **self._params(None))
        return self.last.text

    async def a_generate(self, prompt: str, schema=None, **kwargs) -> str:
        self.last = await self.llm.acomplete(prompt, validate=self._check, **self._params(None))
        return self.last.text

    def generate_raw_response(self, prompt: str, top_logprobs: int = 20, **kwargs):
        self.last = self.llm.complete(prompt, validate=self._check, **self._params(top_logprobs))
        return _chat_completion(self.last), self.last.cost or 0.0

    async def a_generate_raw_response(self, prompt: str, top_logprobs: int = 20, **kwargs):
        self.last = await self.llm.acomplete(prompt, validate=self._check, **self._params(top_logprobs))
        return _chat_completion(self.last), self.last.cost or 0.0


def _compile_geval_templates() -> None:
    """Compile G-Eval's Jinja templates now, in this thread, before any judging starts.

    DeepEval compiles a template on its first use and caches it. Compiled from the judge's threads while another
    thread compiles too (an import), CPython 3.11.7 can fail with "SystemError: AST constructor recursion depth
    mismatch" (CPython gh-106905, fixed in 3.11.8): seen once in a few fast-lane runs of test_faults. A DeepEval that
    keeps its templates elsewhere simply compiles them on first use, as before.
    """
    try:
        from deepeval.templates.resolver import _registry, iter_base_template_methods

        for method, _ in iter_base_template_methods("metrics", "GEval"):
            for strict in (True, False):
                _registry.get_compiled("metrics", "GEval", method, strict)
    except Exception:  # noqa: BLE001 - another DeepEval layout: nothing to warm, nothing lost
        pass


@lru_cache(maxsize=1)
def _judge_model_class():
    # Defined once: DeepEval wraps every subclass's methods for tracing when the class is created.
    _deepeval()
    # What a judge call imports, imported now: judge_cells and score_one build this class before the event loop's
    # thread runs, so no first import happens there (beside an import in another thread, one hit CPython 3.11.7's
    # gh-106905 under pytest, which parses DeepEval's modules to rewrite them).
    import deepeval.metrics.g_eval  # noqa: F401
    import deepeval.test_case  # noqa: F401
    from deepeval.models import DeepEvalBaseLLM

    _compile_geval_templates()

    class JudgeModel(_JudgeCalls, DeepEvalBaseLLM):
        pass

    return JudgeModel


def judge_model(llm, logprobs: bool = True, max_tokens: int = 400, schema: bool = True, temperature: float = 0.0,
                reason_chars: int = 400):
    """A DeepEval model over any OpenAI-compatible :class:`fabnb.models.llm.LLM`.

    It implements ``generate_raw_response`` / ``a_generate_raw_response``, which is
    how DeepEval's G-Eval gets top logprobs for probability weighting from a model it
    does not know by name. Calls go through the LLM layer (cache, retries). With
    ``schema=True`` the judge's JSON (``{"reason", "score"}``) is constrained by a JSON
    schema, which small local models need. Logprobs are asked for only where the
    server gives them (:func:`logprobs_supported`). The last completion is in ``.last``.
    """
    return _judge_model_class()(llm, logprobs, max_tokens, schema, temperature, reason_chars)


def _without_example(text: str) -> str:
    return re.sub(r"-*\s*\*\*Example JSON:\*\*.*?\}\s*", "Write the reason first, then the score.\n\n", text,
                  flags=re.S)


@lru_cache(maxsize=1)
def _template():
    """DeepEval's G-Eval prompt without its example JSON, whose placeholder reason small judges copy verbatim."""
    from deepeval.metrics.g_eval.g_eval import GEvalTemplate

    class Template(GEvalTemplate):
        @staticmethod
        def generate_evaluation_results(**kwargs):
            return _without_example(GEvalTemplate.generate_evaluation_results(**kwargs))

    return Template


def _evaluation_prompt(**fields) -> str:
    """The text :func:`_template` gives for ``fields``, rendered from DeepEval's own template file with Jinja (as
    DeepEval renders it) where the installed DeepEval ships one, so that a plan counts the judge's prompt without
    importing DeepEval: that import is most of a dry run's time (4.0 of 8.9 s on a slow machine of this kind)."""
    import importlib.util

    spec = importlib.util.find_spec("deepeval")  # finds the package without running it
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    path = folder / "metrics" / "g_eval" / "templates" / "generate_evaluation_results.txt" if folder else None
    if path is None or not path.is_file():  # another DeepEval layout: ask DeepEval itself
        return _template().generate_evaluation_results(**fields)
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    try:
        return _without_example(env.from_string(path.read_text(encoding="utf-8")).render(**fields, _fragments={}))
    except jinja2.TemplateError:  # a template that wants what this call does not give: DeepEval's own rendering
        return _template().generate_evaluation_results(**fields)



def geval_metric(metric: str, variant: str, model):
    """The DeepEval G-Eval metric for one of the six metrics and one rubric variant."""
    _deepeval()
    from deepeval.metrics import GEval
    from deepeval.metrics.g_eval import Rubric
    from deepeval.test_case import SingleTurnParams

    if metric not in RUBRICS or variant not in RUBRICS[metric]:
        raise ValueError(f"no rubric {metric!r}/{variant!r}; metrics: {list(RUBRICS)}")
    P = SingleTurnParams
    params = [P.INPUT, P.ACTUAL_OUTPUT]
    if metric == "completeness" or (metric == "factuality" and variant == "without_context"):
        params.append(P.EXPECTED_OUTPUT)
    if variant == "with_context":
        params.append(P.RETRIEVAL_CONTEXT)
    rubric = [Rubric(score_range=band, expected_outcome=text) for band, text in zip(BANDS, RUBRICS[metric][variant])]
    return GEval(name=metric, evaluation_params=params, evaluation_steps=list(STEPS[metric]), rubric=rubric,
                 model=model, async_mode=True, _include_g_eval_suffix=False, evaluation_template=_template())


def _digit_probs(alternatives) -> dict:
    """token -> linear probability for the alternatives at one position (those >= 1%)."""
    out = {}
    for alt in alternatives:
        if alt["logprob"] >= math.log(0.01):
            out[alt["token"]] = out.get(alt["token"], 0.0) + math.exp(alt["logprob"])
    return out


def weighted_score(raw: int, logprobs) -> tuple[float, str] | None:
    """G-Eval's probability-weighted score from the judge's logprobs, and how it was found; None if it cannot be.

    DeepEval's rule: the last generated token equal to the raw score; its top
    alternatives that are decimal tokens with probability >= 1%; sum(s * p) / sum(p).
    Tokenizers that spell numbers digit by digit (Gemma, Llama) never emit a "10" token;
    for them the distribution over 0-10 is read from two positions: P(d) for a first
    digit d, and for "1" the next position's split between "0" (10) and the end (1).

    Examples
    --------
    >>> lp = lambda tok, alts: {"token": tok, "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in alts]}
    >>> weighted_score(7, [lp("7", [("7", .6), ("8", .3), ("6", .1)])])[0]
    7.2
    >>> round(weighted_score(10, [lp("1", [("1", .8), ("9", .2)]), lp("0", [("0", .75), ("}", .25)])])[0], 2)
    8.0
    """
    if not logprobs:
        return None
    for tok in reversed(logprobs):
        if tok["token"] == str(raw):
            probs = {int(t): p for t, p in _digit_probs(tok["top_logprobs"]).items() if t.isdecimal()}
            total = sum(probs.values())
            return (sum(s * p for s, p in probs.items()) / total if total else float(raw)), "single score token"
    if raw == 10:
        for i in range(len(logprobs) - 2, -1, -1):
            if logprobs[i]["token"] == "1" and logprobs[i + 1]["token"] == "0":
                first = {t: p for t, p in _digit_probs(logprobs[i]["top_logprobs"]).items() if t.isdecimal()}
                second = _digit_probs(logprobs[i + 1]["top_logprobs"])
                p0 = second.get("0", 0.0)
                p_end = sum(p for t, p in second.items() if not t.strip().isdecimal())
                dist = {int(t): p for t, p in first.items() if t != "1" and len(t) == 1}
                if "1" in first and p0 + p_end > 0:
                    dist[10] = first["1"] * p0 / (p0 + p_end)
                    dist[1] = first["1"] * p_end / (p0 + p_end)
                total = sum(dist.values())
                if total:
                    return sum(s * p for s, p in dist.items()) / total, "digit tokens '1', '0'"
    return None



async def score_answer(llm, metric: str, *, question: str, answer: str, expected: str = "",
                       question_format: str = "SUBJECTIVE", sources: list[str] | None = None,
                       logprobs: bool = True, max_answer_tokens: int = 3000, temperature: float = 0.0,
                       reason_chars: int = 400) -> dict:
    """One G-Eval score of one answer on one metric (async).

    Returns
    -------
    dict
        score (0-1), raw_score (0-10 integer), weighted_score (0-10 or None), scoring
        (``weighted`` / ``integer``), scoring_note, reason, variant, context_basis,
        judge_model, rubric_version, injection_flag, truncated, and the judge call's
        prompt_tokens, completion_tokens, cached and batch (the reply came through a batch: billed at the batch
        price; absent for an empty answer: no call).

    Raises
    ------
    JudgeError
        With cause ``not-json``, ``missing-field``, ``out-of-range`` or the LLM layer's cause.
    """

    flags = injection_flags(answer)
    answer, truncated = truncate_tokens(answer, max_answer_tokens)
    has_context = bool(sources)
    variant = rubric_variant(metric, question_format, has_context)
    basis = ("sources" if has_context else "heuristic (no sources exposed)") if metric == "context_utilization" \
        else ("sources" if has_context and metric == "factuality" else "answer")
    base = {"variant": variant, "context_basis": basis, "judge_model": llm.model, "rubric_version": RUBRIC_VERSION,
            "injection_flag": "; ".join(flags), "truncated": truncated}
    if not answer.strip():
        return {**base, "score": 0.0, "raw_score": 0, "weighted_score": None, "scoring": "rule",
                "scoring_note": "empty answer: scored 0 without a judge call", "reason": "The answer is empty."}
    _deepeval()
    from deepeval.test_case import LLMTestCase

    model = judge_model(llm, logprobs=logprobs, temperature=temperature, reason_chars=reason_chars)
    g = geval_metric(metric, variant, model)
    case = LLMTestCase(input=question, actual_output=answer, expected_output=expected or None,
                       retrieval_context=list(sources) if has_context else None)
    try:
        await g.a_measure(case, _show_indicator=False)
    except JudgeError:
        raise
    except LLMError as exc:
        raise JudgeError(str(exc), exc.cause) from None
    except (KeyError, ValueError, TypeError) as exc:  # before `Exception`, which would catch them first
        if model.refused is not None:  # DeepEval may wrap the check's error: the check's own verdict is the cause
            raise model.refused from None
        if isinstance(exc, KeyError):
            raise JudgeError(f"the judge's JSON lacks {exc}; it must hold reason and score.", "missing-field") \
                from None
        raise JudgeError(f"the judge's output is not the JSON asked for: {str(exc)[:200]}", "not-json") from None
    except Exception:  # noqa: BLE001 - DeepEval may wrap the check's error: the check's own verdict is the cause
        if model.refused is not None:
            raise model.refused from None
        raise
    done = model.last
    base.update(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens, cached=done.cached,
                batch=done.batch)
    raw, reason = read_judgement(done.text)
    found = weighted_score(int(raw), done.logprobs)
    if found is not None:
        weighted, how = found
        scoring, note = "weighted", f"probability-weighted over the top logprobs ({how})"
        score = (weighted - JUDGE_SCALE[0]) / (JUDGE_SCALE[1] - JUDGE_SCALE[0])
        if how != "single score token":
            note += "; DeepEval's single-token rule would give the integer here"
    else:
        weighted, scoring, score = None, "integer", float(g.score)
        note = ("the server does not return logprobs" if model.refused_logprobs else
                "the server returned no logprobs" if not done.logprobs else
                f"the score token {raw} is not among the judge's logprobs")
    return {**base, "score": float(score), "raw_score": int(raw), "weighted_score": weighted,
            "scoring": scoring, "scoring_note": note, "reason": reason}


def score_one(llm, metric: str, **kwargs) -> dict:
    """:func:`score_answer`, synchronously (for a notebook cell or a script).

    Examples
    --------
    It calls a judge model (here the embedded one; the suite runs it with the ``model`` tests).

    >>> from fabnb.models.local import default_llm
    >>> out = score_one(default_llm(logprobs=True), "depth", question="Why are wafers polished?",
    ...                 answer="So that lithography can focus on a flat surface.", logprobs=True)
    >>> 0.0 <= out["score"] <= 1.0, out["scoring"] in ("weighted", "integer")
    (True, True)
    """
    _judge_model_class()  # DeepEval imported and its templates compiled here, not in the loop's thread
    return llm.run(lambda: score_answer(llm, metric, **kwargs))


class JudgeRun(StageRun):
    """What :func:`judge_results` did: a :class:`fabnb.core.records.StageRun`; ``scored`` is its ``done``."""

    _done_name = "scored"

    @property
    def scored(self) -> int:
        return self.done


def score_store(path: str | Path) -> ResultsStore:
    """A store of judge scores: one record per (system, model, context, mode, question, metric, replicate).

    Examples
    --------
    >>> import tempfile
    >>> store = score_store(tempfile.mkdtemp() + "/scores.jsonl")
    >>> "replicate" in store.keys, store.frame().empty
    (True, True)
    """
    return ResultsStore(path, keys=SCORE_RECORD_KEYS, columns=SCORE_RECORD_COLUMNS)


def _cells_to_judge(ok: pd.DataFrame, metrics, replicates: int, store: ResultsStore) -> list[tuple]:
    """(answer row, metric, replicate, key) of every score the store does not hold yet."""
    done = store.done()
    cells = []
    # Metric by metric: consecutive judge prompts then share their long head (template, steps, rubric),
    # which a llama.cpp server keeps in its KV cache instead of reading it again.
    for metric in metrics:
        for rep in range(replicates):
            for r in ok.to_dict("records"):
                key = {**{k: r[k] for k in SCORE_RECORD_KEYS[:5]}, "metric": metric, "replicate": rep}
                if store.key(key) not in done:
                    cells.append((r, metric, rep, key))
    return cells


def judge_cells(cells: list[tuple], questions: dict, llm, store: ResultsStore, settings: dict, bar=None) -> list[dict]:
    """Score ``cells`` (from :func:`_cells_to_judge`) into ``store``, ``llm.concurrency`` at a time, on one event loop;
    the failed records. ``questions``: test_id -> the question's fields; ``settings``: :func:`score_answer`'s
    logprobs, temperature, reason_chars and max_answer_tokens. The caller holds the store."""
    failures = []

    async def one(sem, r, metric, rep, key):
        q = questions[r["test_id"]]
        sources = r.get("sources")
        sources = [s.get("text", "") for s in sources] if isinstance(sources, list) else None
        judge = llm if rep == 0 else llm.with_defaults(seed=rep)
        async with sem:
            try:
                out = await score_answer(judge, metric, question=q["question"], answer=str(r.get("answer") or ""),
                                         expected=str(q.get("ground_truth_answer", "")),
                                         question_format=str(q.get("question_format", "SUBJECTIVE")),
                                         sources=sources, **settings)
                record = {**key, "status": "ok", "cause": "", "error": "", **out}
            except JudgeError as exc:
                record = {**key, "status": "error", "cause": exc.cause, "error": str(exc)}
        record["ts"] = time.time()
        store.append(record)
        if bar is not None:
            bar.update(1)
        if record["status"] != "ok":
            failures.append(record)

    async def main():
        sem = asyncio.Semaphore(max(1, llm.concurrency))
        await asyncio.gather(*(one(sem, *cell) for cell in cells))

    _judge_model_class()  # DeepEval imported and its templates compiled here, not in the loop's thread
    with store.batched():  # every score written as it comes, fsynced every 0.2 s (records.ResultsStore.batched)
        llm.run(main)
    return failures


def worker_cells(spec: dict, llm) -> list[dict]:
    """A judge worker's part (:mod:`fabnb.judge.workers`): its cells into the store its spec names; the failures."""
    if spec.get("logprobs_supported") is not None:
        with _LOGPROBS_LOCK:
            _LOGPROBS[(llm.base_url, llm.model)] = bool(spec["logprobs_supported"])
    return judge_cells([tuple(c) for c in spec["cells"]], spec["questions"], llm, score_store(spec["store"]),
                       spec["settings"])


def judge_results(results: pd.DataFrame, questions: pd.DataFrame, llm, store, metrics=METRICS, replicates: int = 1,
                  logprobs: bool = True, temperature: float = 0.0, reason_chars: int = 400,
                  error_policy: str = "record", progress=True, max_answer_tokens: int = 3000,
                  limit: int | None = None, workers: int = 1) -> JudgeRun:
    """Score every answered cell of a RAG results frame on the six metrics, into a score store.

    Parameters
    ----------
    results : DataFrame
        ``fabnb.rag.ResultsStore(...).frame()``; only ``status == "ok"`` rows are judged.
    questions : DataFrame
        test_id, question, ground_truth_answer, question_format (:func:`fabnb.rag.questions_frame`).
    llm : fabnb.models.llm.LLM
        The judge. Its ``concurrency`` bounds the calls in flight.
    store : ResultsStore or path
        :func:`score_store`; a scored cell is not scored again.
    metrics : iterable of str
    replicates : int
        Score each cell this many times. A replicate > 0 is sent with a distinct seed, so it
        is a new judge call, not a cache hit; with ``temperature`` 0 replicates only show the
        server's own nondeterminism, so raise it to measure the judge's spread.
    logprobs : bool
        Ask for top logprobs (probability weighting); the score records whether it got them.
    temperature : float
    reason_chars : int
        Longest reason the judge may write (a small local judge is slow per token).
    error_policy : {"record", "raise"}
    progress : bool or progress bar
        True: a bar of its own; an object with ``update(n)`` (one bar over several stages, this
        one last) gets its total set to what is done plus these calls, is updated, and is left open.
    max_answer_tokens : int
        Longer answers are cut to this many tokens before judging (the score records
        ``truncated``); keeps judge prompts within a small judge server's context.
    limit : int, optional
        Make at most this many of the judge calls still to do (a budget's cut); the rest
        stay for the next run and are counted in ``JudgeRun.deferred``.
    workers : int
        Processes to spread the calls over (:mod:`fabnb.judge.workers`), each with an event loop of its own and
        ``llm.concurrency / workers`` calls in flight: past a few hundred calls in flight one core is the limit
        (``benchmarks/bench_concurrency.py``). The cells are dealt out before any is asked, so none is asked twice
        and ``limit`` counts them all; every worker appends to the one store this process holds.

    Returns
    -------
    JudgeRun
    """
    if error_policy not in ("record", "raise"):
        raise ValueError(f"error_policy must be 'record' or 'raise', not {error_policy!r}")
    unknown = set(metrics) - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metric(s) {sorted(unknown)}; the six are {list(METRICS)}")
    store = store if isinstance(store, ResultsStore) else score_store(store)
    qs = questions.set_index("test_id")
    missing = set(results["test_id"]) - set(qs.index)
    if missing:
        raise ValueError(f"results hold test_id(s) {sorted(missing)[:5]} that are not in questions.")
    with hold(store.path, "a judge run"):  # two processes on one store would pay each score twice
        ok = results[results["status"] == "ok"]
        cells = _cells_to_judge(ok, metrics, replicates, store)
        n_total = len(ok) * len(list(metrics)) * replicates
        deferred = 0
        if limit is not None and len(cells) > limit:
            cells, deferred = cells[:max(0, limit)], len(cells) - max(0, limit)
        start = time.perf_counter()
        # A shared bar learns only now how many answers came back to be judged.
        bar, own_bar = stage_bar(progress, len(cells), "judging", shared_total=True)
        settings = {"logprobs": logprobs, "temperature": temperature, "reason_chars": reason_chars,
                    "max_answer_tokens": max_answer_tokens}
        by_id = dict(zip(qs.index, qs.to_dict("records")))  # a dict lookup per cell, not a pandas .loc
        if workers > 1 and len(cells) >= 2 * workers:
            from .workers import judge_in_workers

            # The one logprobs probe of this judge, made here and told to the workers (each would make its own).
            probe = logprobs_supported(llm) if logprobs else None
            failures = judge_in_workers(cells, by_id, llm, store, settings, workers, bar, here=judge_cells,
                                        entry="fabnb.judge.geval:worker_cells", extra={"logprobs_supported": probe})
        else:
            failures = judge_cells(cells, by_id, llm, store, settings, bar)
        if own_bar:
            bar.close()
        if failures and error_policy == "raise":
            f = failures[0]
            raise JudgeError(f"{f['test_id']} / {f['metric']}: {f['error']}", f["cause"])
        cols = [*SCORE_RECORD_KEYS, "cause", "error"]
        return JudgeRun(len(cells), n_total - len(cells) - deferred, len(failures), time.perf_counter() - start,
                        pd.DataFrame(failures, columns=cols) if failures else pd.DataFrame(columns=cols), deferred)


def to_score_frame(scores: pd.DataFrame, by=("system", "model", "context_k", "mode", "metric")) -> pd.DataFrame:
    """Judge scores as the kit's score frame (``fabnb.core.scores``), ready for ``fabnb.analysis.curves`` and
    ``fabnb.analysis.plots``.

    Successful scores are averaged over questions and replicates per ``by``.

    Returns
    -------
    DataFrame
        The ``by`` columns, score (mean, 0-1), n (scores averaged).

    Examples
    --------
    >>> import pandas as pd
    >>> scores = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "metric": "depth",
    ...                        "test_id": ["q1", "q2", "q3"], "status": ["ok", "ok", "failed"],
    ...                        "score": [0.4, 0.8, None]})
    >>> to_score_frame(scores)[["metric", "score", "n"]].to_dict("records")
    [{'metric': 'depth', 'score': 0.6000000000000001, 'n': 2}]
    """
    ok = scores[scores["status"] == "ok"].copy()
    ok["score"] = ok["score"].astype(float)
    out = ok.groupby(list(by), dropna=False)["score"].agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "score", "size": "n"})



# ------------------------------------------------------------------ reliability and comparisons


def replicate_spread(scores: pd.DataFrame) -> pd.DataFrame:
    """Per metric, how much replicate judge runs of the same cell disagree.

    Returns
    -------
    DataFrame
        metric, cells, replicates, mean_sd (mean over cells of the SD across replicates,
        0-1 scale), max_range, raw_mean (integer scores / 10), weighted_mean (weighted
        scores / 10 where the judge gave logprobs), share_weighted.
    """
    ok = scores[scores["status"] == "ok"].copy()
    cell = ["system", "model", "context_k", "mode", "test_id", "metric"]
    g = ok.groupby(cell)["score"]
    per = pd.DataFrame({"sd": g.std(ddof=1), "range": g.max() - g.min(), "n": g.size()}).reset_index()
    out = per.groupby("metric").agg(cells=("n", "size"), replicates=("n", "max"), mean_sd=("sd", "mean"),
                                    max_range=("range", "max"))
    out["raw_mean"] = ok.groupby("metric")["raw_score"].mean() / 10
    out["weighted_mean"] = ok.groupby("metric")["weighted_score"].mean() / 10
    out["share_weighted"] = ok.groupby("metric")["scoring"].apply(lambda s: (s == "weighted").mean())
    return out.reset_index()



def judge_expert_agreement(judge: pd.DataFrame, expert: pd.DataFrame, on=("test_id",)) -> pd.DataFrame:
    """Agreement between judge scores and expert labels of the same items, per metric.

    Parameters
    ----------
    judge, expert : DataFrame
        Each with the ``on`` columns, metric, score (any scale; compared by rank and, after
        scaling both to 0-1, by mean absolute difference).

    Returns
    -------
    DataFrame
        metric, n, spearman, pearson, mean_abs_diff (0-1 scale).
    """
    from scipy import stats

    on = list(on)
    j = judge.groupby([*on, "metric"])["score"].mean().rename("judge")
    e = expert.groupby([*on, "metric"])["score"].mean().rename("expert")
    both = pd.concat([j, e], axis=1, join="inner").reset_index()
    rows = []
    for metric, g in both.groupby("metric"):
        scaled = [(x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else x * 0 for x in (g.judge, g.expert)]
        rows.append({"metric": metric, "n": len(g),
                     "spearman": stats.spearmanr(g.judge, g.expert)[0] if len(g) > 2 else np.nan,
                     "pearson": stats.pearsonr(g.judge, g.expert)[0] if len(g) > 2 else np.nan,
                     "mean_abs_diff": float(np.mean(np.abs(scaled[0] - scaled[1])))})
    return pd.DataFrame(rows, columns=["metric", "n", "spearman", "pearson", "mean_abs_diff"])


@lru_cache(maxsize=None)
def prompt_overhead(metric: str, variant: str) -> int:
    """Tokens of the judge's prompt around the case: DeepEval's G-Eval template with this metric's steps and rubric
    (what a plan counts for each judge call, without importing DeepEval).

    >>> 100 < prompt_overhead("factuality", "with_context") < 3000
    True
    """

    steps = "\n".join(f"{i}. {s}" for i, s in enumerate(STEPS[metric], start=1))
    rubric = "\n".join(f"{lo}-{hi}: {t}" for (lo, hi), t in zip(BANDS, RUBRICS[metric][variant]))
    try:
        text = _evaluation_prompt(evaluation_steps=steps, test_case_content="", parameters="", rubric=rubric,
                                 score_range=(0, 10), _additional_context=None, multimodal=False)
    except TypeError:  # another DeepEval version: count the parts we know
        text = steps + "\n" + rubric + "\n" * 40
    return count_tokens(text) + 16  # the field labels DeepEval adds around each part
