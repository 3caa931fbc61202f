"""Judging: the six G-Eval metrics through DeepEval, a no-LLM reference scorer, the RAG-TESTER oracle.

FAB-Bench §3.4 and Appendix E score every answer on six metrics with DeepEval's
G-Eval, 0-10 rubrics normalised to 0-1, each rubric in two variants (objective /
subjective questions; with / without retrieval context). Its module
:mod:`~fabnb.judge.geval` is the only place fabnb talks to DeepEval; its telemetry and ``.env`` loading are switched off
before it is imported.

- :func:`judge_results` scores a RAG results store (:mod:`fabnb.rag`) into a score
  store, one record per (system, model, context, mode, question, metric, replicate),
  written as each score arrives; an interrupted run resumes without re-scoring a cell.
  Judge calls go through :class:`fabnb.models.llm.LLM` (cache, bounded concurrency, retries).
- Probability weighting as G-Eval defines it: with top logprobs from the judge's
  server, the score is the probability-weighted mean over the score tokens; without,
  the plain integer. :class:`JudgeModel` gives DeepEval the raw responses it needs for
  that from any OpenAI-compatible server. Every score records its ``scoring`` mode,
  the judge model and :data:`RUBRIC_VERSION`.
- For systems that expose no sources, context utilization uses Appendix E's
  "manual setup" rubric (heuristic inference, Appendix F.2) and says so in ``context_basis``.
- :func:`reference_check`: a judge-free check of objective answers ([Choice], [Judge],
  [Fill], [Calculation]) against the reference. It is not G-Eval and never named so.
- :func:`oracle_verdict`: RAG-TESTER's oracle (five criteria, true / partially / false;
  fail when the mean is below 0.5 or faithfulness is false; negative-rejection tests
  pass only on a refusal).
- Reliability: replicate spread, prediction-powered confidence intervals (as ARES),
  judge-expert agreement, oracle precision, McNemar tests and bootstrap intervals.

The package, by subject: :mod:`~fabnb.judge.rubrics` (rubrics, scale, the reply check),
:mod:`~fabnb.judge.geval` (DeepEval, ``judge_results``), :mod:`~fabnb.judge.workers` (its calls over worker
processes), :mod:`~fabnb.judge.reference`
(no LLM), :mod:`~fabnb.judge.sanity` (flags on scores not to take at face value, no LLM) and
:mod:`~fabnb.judge.oracle` (RAG-TESTER's oracle and verdict tables). The
statistics live in :mod:`fabnb.core.stats` and are re-exported here under their old names.
"""

# Compact re-exports: one statement per module, several names per line.
# isort: off
from __future__ import annotations
from ..core.stats import bootstrap_group_diff, bootstrap_rate_diff, mcnemar_paired, ppi_mean
from .geval import (JudgeRun, geval_metric, judge_expert_agreement, judge_model, judge_results, logprobs_supported,
                    reason_score_schema, replicate_spread, score_answer, score_one, score_store, to_score_frame,
                    weighted_score)
from .oracle import (FAILURE_KINDS, LOCATION_REQUEST, ORACLE_CRITERIA, ORACLE_SCHEMA, PAIR_COLUMNS, PASS_THRESHOLD,
                     REFUSAL_PATTERNS, VERDICT_COLUMNS, VERDICT_KEYS, VERDICT_VALUES, compare_configurations,
                     failure_kind, failure_table, hedged_value, is_refusal, location_check, oracle_precision,
                     oracle_prompt, oracle_results, oracle_rule, oracle_verdict, passage_retrieved, read_verdicts,
                     reported_location, tests_as_questions, verdict_scores, verdict_store)
from .reference import answer_key, reference_check, reference_scores
from .rubrics import (BANDS, INJECTION_PATTERNS, PLACEHOLDER_REASONS, RUBRIC_VERSION, RUBRICS, JUDGE_SCALE, STEPS,
                      JudgeError, injection_flags, read_judgement, rubric_frame, rubric_variant)
from .sanity import FLAGS, judge_flags
# isort: on

__all__ = ['BANDS', 'FAILURE_KINDS', 'FLAGS', 'INJECTION_PATTERNS', 'JUDGE_SCALE', 'JudgeError', 'JudgeRun',
           'LOCATION_REQUEST', 'ORACLE_CRITERIA', 'ORACLE_SCHEMA', 'PAIR_COLUMNS', 'PASS_THRESHOLD',
           'PLACEHOLDER_REASONS', 'REFUSAL_PATTERNS', 'RUBRICS', 'RUBRIC_VERSION', 'STEPS', 'VERDICT_COLUMNS',
           'VERDICT_KEYS', 'VERDICT_VALUES', 'answer_key', 'bootstrap_group_diff', 'bootstrap_rate_diff',
           'compare_configurations', 'failure_kind', 'failure_table', 'geval_metric', 'hedged_value',
           'injection_flags', 'is_refusal', 'judge_expert_agreement', 'judge_flags', 'judge_model', 'judge_results',
           'location_check', 'logprobs_supported', 'mcnemar_paired', 'oracle_precision', 'oracle_prompt',
           'oracle_results', 'oracle_rule', 'oracle_verdict', 'passage_retrieved', 'ppi_mean', 'read_judgement',
           'read_verdicts', 'reason_score_schema', 'reference_check', 'reference_scores', 'replicate_spread',
           'reported_location', 'rubric_frame', 'rubric_variant', 'score_answer', 'score_one', 'score_store',
           'tests_as_questions', 'to_score_frame', 'verdict_scores', 'verdict_store', 'weighted_score']
