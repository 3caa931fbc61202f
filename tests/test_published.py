"""The transcription of the paper's tables: counts, shapes and spot values."""

import pytest

from fabnb.core.schema import ALL_METRICS
from fabnb.data import published


def test_scores_cover_tables_17_to_20_and_5():
    s = published.scores()
    per_table = s.drop_duplicates(["source_table", "model", "context_k", "system"]).groupby("source_table").size()
    assert per_table.to_dict() == {5: 3, 17: 11, 18: 11, 19: 11, 20: 6}
    assert set(s.metric) == set(ALL_METRICS)
    assert len(s) == (39 + 3) * 7


@pytest.mark.parametrize("model,k,out,metric,value", [
    ("DeepSeek-v3.2-Exp", 4, 1, "factuality", 0.626),
    ("Qwen-Plus", 18, 4, "factuality", 0.732),
    ("Gemini-2.5-Flash", 10, 2, "support_quality", 0.622),
    ("Qwen-2.5-72B-Instruct", 128, 8, "average", 0.805),
])
def test_spot_values(model, k, out, metric, value):
    s = published.scores()
    row = s[(s.model == model) & (s.context_k == k) & (s.metric == metric)]
    assert row.output_k.item() == out
    assert row.score.item() == value


def test_small_tables():
    assert published.knowledge_base().n_terms.sum() == 431
    assert list(published.knowledge_base().weight) == [1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1]
    assert len(published.correlations()) == 21
    assert published.ablation().set_index("group").loc["C", "retries"] == 47
    assert published.case_study().set_index("model").loc["Qwen-Plus", "factuality"] == 0.11
    assert set(published.expert_ratings().source_table) == {2, 9}
    assert len(published.cross_model()) == 15


def test_every_row_tagged_with_its_source_table():
    for frame in (published.scores(), published.correlations(), published.knowledge_base(),
                  published.expert_ratings(), published.ablation(), published.case_study(), published.cross_model()):
        assert frame["source_table"].notna().all()
