"""The FAB-Bench paper's published numbers, transcribed from its tables.

Each CSV beside this module is a table of arXiv 2605.26476 (FAB-Bench), every row
tagged with its ``source_table``. Scores use the tidy long format of
:mod:`fabnb.core.scores`, so every analysis runs on these and on a user's own runs alike.

========================  ==================================================
function                  tables
========================  ==================================================
:func:`scores`            17, 18, 19, 20 (context sweeps), 5 (frameworks)
:func:`cross_model`       21 (averages at key contexts)
:func:`correlations`      4 (inter-metric Pearson r, lower triangle)
:func:`knowledge_base`    1 (categories, term counts, weights)
:func:`expert_ratings`    2 and 9 (expert quality by question type)
:func:`ablation`          8 (generation ablation groups A-E)
:func:`case_study`        6 (MULTI_069 responses)
:func:`rag_tester`        RAG-TESTER's published numbers (abstract, Sections
                          3.3-6.4, as its review reads them)
========================  ==================================================

Examples
--------
>>> from fabnb.data import published
>>> s = published.scores()
>>> s[(s.model == "DeepSeek-v3.2-Exp") & (s.context_k == 4) & (s.metric == "average")].score.item()
0.619
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

from ...core.scores import check_scores

__all__ = ['EXTENDED_MODEL', 'PRIMARY_MODELS', 'ablation', 'case_study', 'context_sweeps', 'correlations',
           'cross_model', 'expert_ratings', 'frameworks', 'knowledge_base', 'rag_tester', 'scores']

#: The three primary models of the context-scaling study (Section 4), in the paper's order.
PRIMARY_MODELS: tuple[str, ...] = ("Gemini-2.5-Flash", "Qwen-Plus", "DeepSeek-v3.2-Exp")
#: The extended-context model (Table 20).
EXTENDED_MODEL = "Qwen-2.5-72B-Instruct"


def _read(name: str) -> pd.DataFrame:
    with resources.files(__name__).joinpath(name).open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh)


def scores() -> pd.DataFrame:
    """Tables 17-20 and 5 as a score frame.

    Columns: source_table, system, model, context_k, output_k, metric, score.
    Table 5 rows (RAGFlow, MaxKB, Metaso) have no context_k/output_k.
    """

    return check_scores(_read("scores.csv"), "fabnb/data/published/scores.csv", from_file=True)


def context_sweeps() -> pd.DataFrame:
    """The AnythingLLM context sweeps only (Tables 17-20)."""
    s = scores()
    return s[s["context_k"].notna()].reset_index(drop=True)


def frameworks() -> pd.DataFrame:
    """The cross-framework scores only (Table 5)."""
    s = scores()
    return s[s["source_table"] == 5].reset_index(drop=True)


def cross_model() -> pd.DataFrame:
    """Table 21. Columns: source_table, model, context_k, average."""
    return _read("cross_model.csv")


def correlations() -> pd.DataFrame:
    """Table 4. Columns: source_table, metric_a, metric_b, r (lower triangle with diagonal)."""
    return _read("metric_correlations.csv")


def knowledge_base() -> pd.DataFrame:
    """Table 1. Columns: source_table, category, label, example_terms, n_terms, weight."""
    return _read("knowledge_base_categories.csv")


def expert_ratings() -> pd.DataFrame:
    """Tables 2 and 9. Columns: source_table, test_type, label, accuracy, relevance, difficulty, diversity."""
    return _read("expert_ratings_by_type.csv")


def ablation() -> pd.DataFrame:
    """Table 8. Columns: source_table, group, label, configuration, accuracy, relevance,
    difficulty, diversity, retries, time_s."""
    return _read("ablation.csv")


def case_study() -> pd.DataFrame:
    """Table 6. Columns: source_table, test_id, context_k, model, voltage_range, direction,
    etch_rate, synergy, factuality."""
    return _read("case_study.csv")


def rag_tester() -> pd.DataFrame:
    """RAG-TESTER's published numbers, each with its base and where it is stated.

    Columns: quantity, value, unit, base (what a percentage is relative to), source, note.

    >>> t = rag_tester().set_index("quantity")
    >>> int(t.loc["failures_rag_tester", "value"]), t.loc["gain_over_baseline", "base"]
    (21633, "relative to the baseline's failures")
    """
    return _read("rag_tester.csv")
