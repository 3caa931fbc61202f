"""Curation sessions: decisions on disk at once, filters, near-duplicates, targets, FAB-Bench export."""

import json
import shutil

import pytest

from fabnb.corpus.terms import KnowledgeBase
from fabnb.data.datasets import read_qa_files
from fabnb.qa.curation import CurationSession, duplicate_groups, similarity_matrix
from fabnb.qa.generation import weighted_similarity
from fabnb.qa.rating import RatingError, RatingStore


@pytest.fixture
def candidates(tmp_path, fab_bench_dir):
    """12 real QA files, a near-copy of one of them, a broken JSON file and one missing a field."""
    folder = tmp_path / "candidates"
    folder.mkdir()
    files = sorted((fab_bench_dir / "QAs").rglob("*.json"))
    picked = [f for f in files if f.stem.startswith(("ROB_00", "MULTI_00"))][:12]
    for f in picked:
        shutil.copy(f, folder / f.name)
    record = json.loads(picked[0].read_text())
    record["test_id"] = record["test_id"] + "_copy"
    record["question"] = record["question"].replace(".", "?", 1) + " Explain briefly."
    (folder / "copy.json").write_text(json.dumps(record))
    (folder / "broken.json").write_text('{"test_id": "X", "question": ')
    record = json.loads(picked[1].read_text())
    del record["ground_truth_answer"]
    (folder / "missing.json").write_text(json.dumps(record))
    return folder, picked


def test_similarity_matches_eq13_pairwise():
    kb = KnowledgeBase.default()
    qs = ["What is the etch rate of ALD TiN?", "What is the ALD TiN etch rate at 300C?", "Describe EUV lithography."]
    m = similarity_matrix(qs, kb=kb).toarray()
    for i in range(3):
        for j in range(i + 1, 3):
            assert m[i, j] == pytest.approx(weighted_similarity(qs[i], qs[j], kb))
    assert duplicate_groups(qs, threshold=0.5, kb=kb).tolist() == [0, 0, 1]


def test_broken_files_are_listed_and_the_rest_load(candidates, tmp_path):
    folder, picked = candidates
    s = CurationSession(folder, tmp_path / "store", "cur")
    assert len(s.candidates) == 13
    assert sorted(p.split("/")[-1] for p in s.problems.path) == ["broken.json", "missing.json"]
    assert s.problems.message.str.contains("not valid JSON").any()
    assert s.problems.message.str.contains("ground_truth_answer").any()


def test_near_duplicates_are_grouped_and_shown_together(candidates, tmp_path):
    folder, picked = candidates
    s = CurationSession(folder, tmp_path / "store", "cur")
    original = json.loads(picked[0].read_text())["test_id"]
    assert s.item(original)["duplicates"] == [original + "_copy"]
    order = s.select()
    assert order.index(original + "_copy") == order.index(original) + 1


def test_decisions_are_on_disk_at_once_and_survive_a_new_session(candidates, tmp_path):
    folder, picked = candidates
    s = CurationSession(folder, tmp_path / "store", "cur")
    ids = s.select(test_type="robustness")
    s.keep(ids[0])
    s.drop(ids[1], reason="too easy")
    s.edit(ids[0], question="A sharper question?")
    lines = RatingStore(tmp_path / "store").path("cur").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[-1])["scores"] == {"status": "kept",
                                                                  "edits": {"question": "A sharper question?"}}
    again = CurationSession(folder, tmp_path / "store", "cur")  # a killed kernel, reopened
    st = again.status().set_index("test_id")
    assert st.loc[ids[0], "status"] == "kept" and st.loc[ids[0], "edited"]
    assert st.loc[ids[1], "status"] == "dropped" and st.loc[ids[1], "reason"] == "too easy"
    assert again.item(ids[0])["question"] == "A sharper question?"
    # rating records and curation records share a store without mixing
    assert RatingStore(tmp_path / "store").ratings().empty


def test_filters_targets_and_bad_edits(candidates, tmp_path):
    folder, _ = candidates
    s = CurationSession(folder, tmp_path / "store", "cur", targets={"robustness": 2, "multi_hop": 3})
    rob = s.select(test_type="robustness")
    assert rob and all(t.startswith("ROB") for t in rob)
    s.keep(rob[0])
    assert s.select(status="kept") == [rob[0]]
    assert set(s.select(status=["pending", "dropped"])) == set(s.candidates.test_id) - {rob[0]}
    p = s.progress().set_index("test_type")
    assert p.loc["robustness", ["target", "kept", "remaining"]].tolist() == [2, 1, 1]
    assert p.loc["generation_quality", "target"] == 0
    with pytest.raises(RatingError, match="cannot edit \\['test_type'\\]"):
        s.edit(rob[0], test_type="X")
    with pytest.raises(RatingError, match="non-empty"):
        s.edit(rob[0], question="  ")
    with pytest.raises(RatingError, match="not a candidate"):
        s.keep("NOPE")


def test_export_writes_fab_bench_files_with_edits(candidates, tmp_path):
    folder, _ = candidates
    s = CurationSession(folder, tmp_path / "store", "cur")
    ids = s.select()
    s.keep(ids[0])
    s.keep(ids[1])
    s.edit(ids[1], ground_truth_answer="Edited answer.")
    s.drop(ids[2])
    paths = s.export(tmp_path / "bench")
    back = read_qa_files(tmp_path / "bench")
    assert back.problems.empty and [p.test_id for p in back.pairs] == sorted(ids[:2])
    edited = {p.test_id: p for p in back.pairs}[ids[1]]
    assert edited.ground_truth_answer == "Edited answer."
    assert edited.generation_metadata["curation_edits"] == ["ground_truth_answer"]
    # every other field of the release record is kept as read
    original = {p.test_id: p for p in read_qa_files(folder).pairs}[ids[0]]
    assert json.loads([p for p in paths if ids[0] in p.name][0].read_text()) == original.record
