"""The shared schema: FAB-Bench's field names, the six metrics, the score frame.

Every stage of fabnb speaks these names. The metric names are those of the
released FAB-Bench data (``primary_metric`` / ``secondary_metrics``), and the
score frame is the tidy long format that both the paper's published tables
(:mod:`fabnb.data.published`) and a user's own judged runs are stored in.
"""

from __future__ import annotations

__all__ = ['ALL_METRICS', 'AVERAGE', 'METRICS', 'METRIC_LABELS', 'MODES', 'QA_FIELDS', 'QUESTION_FORMATS',
           'RENAMED_MODELS', 'RESULT_COLUMNS', 'RESULT_KEYS', 'SCORE_KEYS', 'SCORE_RECORD_COLUMNS', 'SCORE_RECORD_KEYS',
           'SCORE_REQUIRED', 'TEST_TYPES']

#: The six diagnostic metrics of FAB-Bench Section 3.4, in the paper's table order.
METRICS: tuple[str, ...] = (
    "factuality",
    "depth",
    "completeness",
    "relevance",
    "context_utilization",
    "support_quality",
)

#: The per-configuration mean of the six metrics, as the paper's "Avg." column reports it.
AVERAGE = "average"

#: Every metric name a score frame may hold.
ALL_METRICS: tuple[str, ...] = METRICS + (AVERAGE,)

#: Human labels, as the paper's figures print them.
METRIC_LABELS: dict[str, str] = {
    "factuality": "Factuality",
    "depth": "Depth",
    "completeness": "Completeness",
    "relevance": "Relevance",
    "context_utilization": "Context Util.",
    "support_quality": "Support Quality",
    "average": "Average",
}

#: FAB-Bench's three test types and their id prefixes.
TEST_TYPES: dict[str, str] = {
    "robustness": "ROB",
    "multi_hop": "MULTI",
    "generation_quality": "GEN",
}

#: FAB-Bench's question formats.
QUESTION_FORMATS: tuple[str, ...] = ("OBJECTIVE", "SUBJECTIVE")

#: Fields of one FAB-Bench QA record (README of the release).
QA_FIELDS: tuple[str, ...] = (
    "test_id",
    "test_type",
    "question_format",
    "question",
    "gold_context_sources",
    "ground_truth_answer",
    "primary_metric",
    "secondary_metrics",
    "generation_metadata",
)

#: Columns every score frame must have.
SCORE_REQUIRED: tuple[str, ...] = ("model", "context_k", "metric", "score")

#: Optional columns a score frame may have; where present they are part of a row's key.
SCORE_KEYS: tuple[str, ...] = ("system", "model", "context_k", "output_k", "mode", "test_id")

#: The two dual-mode assessment modes of Appendix F.3.
MODES: dict[str, str] = {"A": "with_kb (system's own retrieval)", "B": "without_kb (gold context injected)"}

#: The key of one RAG answer in a results store (:class:`fabnb.core.records.ResultsStore`): one cell of the grid.
RESULT_KEYS: tuple[str, ...] = ("system", "model", "context_k", "mode", "test_id")

#: Model names that stores may hold from before a rename, and the name each is read as (the embedded model's
#: alias said "it", instruction-tuned, which the base model is not): a cell stored under the old name is done.
RENAMED_MODELS: dict[str, str] = {"gemma-3-270m-it-q4_k_m": "gemma-3-270m-q4_k_m"}
#: The columns of a results store's frame, in order.
RESULT_COLUMNS: list[str] = [*RESULT_KEYS, "output_tokens", "status", "cause", "error", "answer", "n_sources",
                             "sources_exposed", "sources", "gold_retrieved", "evidence_offset", "evidence_depth",
                             "context_tokens", "prompt_tokens",
                             "completion_tokens", "latency_s", "context_signal", "answer_words",
                             "answer_repetition", "answer_language", "batch", "ts"]

#: The key of one judge score in a score store (:func:`fabnb.judge.score_store`): an answer's key, the metric
#: and the replicate. Not :data:`SCORE_KEYS`, which are the optional key columns of a score frame.
SCORE_RECORD_KEYS: tuple[str, ...] = ("system", "model", "context_k", "mode", "test_id", "metric", "replicate")
#: The columns of a score store's frame, in order.
SCORE_RECORD_COLUMNS: list[str] = [*SCORE_RECORD_KEYS, "status", "score", "raw_score", "weighted_score", "scoring",
                                   "scoring_note", "reason", "variant", "context_basis", "judge_model",
                                   "rubric_version", "injection_flag", "truncated", "prompt_tokens",
                                   "completion_tokens", "cached", "batch", "cause", "error", "ts"]
