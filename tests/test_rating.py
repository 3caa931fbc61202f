"""The rating store loses nothing; sessions; agreement statistics against known values."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from fabnb.core.stats import icc, krippendorff_alpha, weighted_kappa
from fabnb.qa.agreement import agreement, quality_table, rating_matrix
from fabnb.qa.rating import DIMENSIONS, RatingError, RatingSession, RatingStore

from conftest import ROOT, qa_folder

FULL = {"accuracy": 5, "relevance": 4, "difficulty": 3, "diversity": 2}


def test_out_of_range_and_unknown_dimensions_store_nothing(tmp_path):
    store = RatingStore(tmp_path)
    store.add("ana", "A", FULL)
    for bad, message in (({"accuracy": 6}, "accuracy = 6 is not a whole number from 1 to 5"),
                         ({"accuracy": 2.5}, "accuracy = 2.5"), ({"fluency": 3}, "unknown dimension")):
        with pytest.raises(RatingError, match=message):
            store.add("ana", "B", bad)
    assert store.ratings().item_id.unique().tolist() == ["A"]


def test_truncated_line_is_reported_and_the_rest_loads(tmp_path):
    store = RatingStore(tmp_path)
    store.add("ana", "A", FULL)
    with open(store.path("ana"), "ab") as fh:  # a crash in the middle of a write
        fh.write(b'{"kind": "rating", "rater": "ana", "item_id": "B", "sco')
    store.add("ana", "C", FULL)  # a later session appends after the broken line
    recs, problems = store.records()
    # only the half-written B is lost: C starts on a line of its own
    assert [r["item_id"] for r in recs] == ["A", "C"] and len(problems) == 1 and problems.line.item() == 2
    assert "unreadable line skipped" in problems.message.item()


def test_rating_twice_keeps_the_latest_and_the_history(tmp_path):
    store = RatingStore(tmp_path)
    store.add("ana", "A", FULL)
    store.add("ana", "A", {**FULL, "accuracy": 2})
    latest = store.ratings()
    assert latest[latest.dimension == "accuracy"].score.tolist() == [2]
    assert len(store.ratings(history=True)) == 8


WRITER = textwrap.dedent("""
    import sys
    from fabnb.qa.rating import RatingStore
    store = RatingStore(sys.argv[1])
    for i in range(int(sys.argv[3])):
        store.add(sys.argv[2], f"item{i}", {"accuracy": 1 + i % 5, "relevance": 3, "difficulty": 2, "diversity": 4})
""")


def test_two_raters_at_once_and_a_killed_writer(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "s"), name, "200"])
             for name in ("ana", "ben")]
    assert [p.wait(60) for p in procs] == [0, 0]
    store = RatingStore(tmp_path / "s")
    counts = store.ratings().groupby("rater").item_id.nunique().to_dict()
    assert counts == {"ana": 200, "ben": 200} and store.records()[1].empty
    # a writer killed mid-run keeps every rating it had returned from
    killed = subprocess.Popen([sys.executable, str(script), str(tmp_path / "k"), "cem", "100000"])
    import time
    time.sleep(1.5)
    killed.kill()
    killed.wait()
    recs, problems = RatingStore(tmp_path / "k").records()
    assert len(recs) > 10 and len(problems) <= 1


def test_export_codebook_and_import(tmp_path):
    a = RatingStore(tmp_path / "a")
    a.add("ana", "A", FULL, comment="clear, but easy")
    ratings, codebook = a.export(tmp_path / "out")
    frame = pd.read_csv(ratings)
    assert set(frame.columns) == {"rater", "item_id", "dimension", "score", "comment", "ts"} and len(frame) == 4
    assert set(DIMENSIONS) <= set(pd.read_csv(codebook).name)
    b = RatingStore(tmp_path / "b")
    b.add("ben", "A", FULL)
    assert b.import_file(a.path("ana")) == 1 and b.import_file(a.path("ana")) == 0
    assert b.import_file(ratings) == 0  # the CSV export holds the same rating
    assert sorted(b.ratings().rater.unique()) == ["ana", "ben"]


def test_session_order_blind_mode_and_resume(tmp_path):
    items = pd.DataFrame({"item_id": [f"Q{i}" for i in range(6)], "question": "q", "group": list("AABBCC"),
                          "generation_metadata": [{"temperature_used": 0.5}] * 6})
    store = RatingStore(tmp_path)
    s1 = RatingSession(items, "ana", store, seed=7)
    again, other = RatingSession(items, "ana", store, seed=7), RatingSession(items, "ana", store, seed=8)
    assert s1.order == again.order != other.order
    view = s1.view("Q0")
    assert "generation_metadata" not in view and "group" not in view and view["question"] == "q"
    assert "group" in RatingSession(items, "ana", store, blind=False).view("Q0")
    first = s1.next_unrated()
    s1.rate(first, **FULL)
    s1.rate(s1.order[1], accuracy=4)  # incomplete: still to do
    resumed = RatingSession(items, "ana", RatingStore(tmp_path), seed=7)  # a new kernel
    assert resumed.next_unrated() == s1.order[1] and resumed.progress() == (1, 6)
    with pytest.raises(RatingError, match="not an item of this session"):
        s1.rate("Z9", **FULL)


def test_krippendorff_on_the_textbook_example():
    # Krippendorff (2011), 4 coders x 12 units with missing values: nominal 0.743, interval 0.849
    data = np.array([[1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
                     [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
                     [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
                     [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan]])
    assert krippendorff_alpha(data, "nominal") == pytest.approx(0.743, abs=0.001)
    assert krippendorff_alpha(data, "interval") == pytest.approx(0.849, abs=0.001)
    assert 0.7 < krippendorff_alpha(data, "ordinal") < 1


def test_kappa_and_icc_limits():
    a = [1, 2, 3, 4, 5, 3, 2]
    assert weighted_kappa(a, a) == pytest.approx(1.0)
    assert weighted_kappa(a, [5, 4, 3, 2, 1, 3, 4]) < 0
    assert icc(np.array([a, a]), "ICC2") == pytest.approx(1.0)


def test_agreement_and_quality_tables(tmp_path):
    rng = np.random.default_rng(0)
    store = RatingStore(tmp_path)
    truth = rng.integers(1, 6, 30)
    for rater, noise in (("ana", 0), ("ben", 1)):
        for i, t in enumerate(truth):
            v = int(np.clip(t + (rng.integers(-noise, noise + 1) if noise else 0), 1, 5))
            store.add(rater, f"Q{i}", {d: v for d in DIMENSIONS})
    table = agreement(store.ratings(), n_boot=200)
    row = table[(table.dimension == "accuracy") & (table.statistic == "kappa_quadratic")].iloc[0]
    assert 0.5 < row.value < 1 and row.ci_low <= row.value <= row.ci_high and row.n_raters == 2
    assert set(table.statistic) == {"alpha_ordinal", "ICC2", "kappa_quadratic"}
    items = pd.DataFrame({"item_id": [f"Q{i}" for i in range(30)], "test_type": ["robustness", "multi_hop"] * 15})
    q = quality_table(store.ratings(), items, "test_type").set_index("test_type")
    merged = store.ratings().merge(items, on="item_id")
    expected = merged.query("dimension == 'accuracy' and test_type == 'robustness'").score.mean()
    assert q.loc["robustness", "accuracy"] == pytest.approx(expected) and q.loc["robustness", "n_items"] == 15
    assert rating_matrix(store.ratings(), "accuracy").shape == (2, 30)


# ------------------------------------------------------------------- assignments with overlap


@pytest.mark.parametrize("n_items,raters,per_item", [(3, 3, 2), (10, 3, 2), (45, 10, 2), (20, 5, 3), (7, 4, 4),
                                                     (200, 6, 2)])
def test_assign_covers_every_pair_with_balanced_loads(n_items, raters, per_item):
    from fabnb.qa.rating import assign, overlap

    names = [f"r{i}" for i in range(raters)]
    a = assign([f"Q{i}" for i in range(n_items)], names, per_item=per_item, seed=1)
    per = a.groupby("item_id")["rater"].agg(list)
    assert len(per) == n_items and all(len(set(r)) == len(r) == per_item for r in per)
    loads = a.rater.value_counts().reindex(names, fill_value=0)
    assert loads.max() - loads.min() <= 1 and loads.sum() == n_items * per_item
    pairs = overlap(a)
    assert len(pairs) == raters * (raters - 1) // 2 and (pairs.shared_items >= 1).all()
    assert a.equals(assign([f"Q{i}" for i in range(n_items)], names, per_item=per_item, seed=1))  # seeded


def test_assign_refuses_what_cannot_be_done():
    from fabnb.qa.rating import assign

    with pytest.raises(RatingError, match="at least 10 items are needed"):
        assign([f"Q{i}" for i in range(9)], [f"r{i}" for i in range(5)], per_item=2)
    with pytest.raises(RatingError, match="per_item must be from 2"):
        assign(["a", "b", "c"], ["x", "y"], per_item=3)
    with pytest.raises(RatingError, match="two or more distinct raters"):
        assign(["a"], ["x", "x"])


def test_a_session_takes_a_manifest_and_overlap_reads_ratings(tmp_path):
    from fabnb.qa.rating import assign, overlap, write_manifests

    items = pd.DataFrame({"item_id": [f"Q{i}" for i in range(6)], "question": "q"})
    paths = write_manifests(assign(items, ["ana", "ben", "cy"], per_item=2, seed=0), tmp_path / "manifests")
    assert sorted(p.name.split("-")[0] for p in paths) == ["ana", "ben", "cy"]
    mine = {json.loads(p.read_text())["rater"]: p for p in paths}
    store = RatingStore(tmp_path / "ratings")
    for name in ("ana", "ben", "cy"):
        session = RatingSession(items, name, store, manifest=mine[name])
        assert len(session.order) == 4
        for item in session.order:
            session.rate(item, accuracy=4, relevance=4, difficulty=3, diversity=3)
    shared = overlap(store.ratings())
    assert (shared.shared_items >= 1).all() and shared.shared_items.sum() == 6
    with pytest.raises(RatingError, match="the manifest is for 'ana', not 'ben'"):
        RatingSession(items, "ben", store, manifest=mine["ana"])


def test_the_rating_app_asks_a_name_and_honours_manifests(tmp_path, fab_bench_dir):
    from fabnb.qa.rating import assign, write_manifests
    from fabnb.qa.rating_app import RatingApp

    qa = qa_folder(fab_bench_dir, tmp_path / "qa", 6)
    (qa / "broken.json").write_text("{not json")
    app = RatingApp.from_folders(qa, tmp_path / "ratings")
    assert len(app.items) == 6 and len(app.problems) == 1  # the broken file is listed, the rest loads
    for bad in ("", "   ", None):
        with pytest.raises(RatingError, match="enter your name"):
            app.start(bad)
    with pytest.raises(RatingError, match="300 characters is too long"):
        app.start("a" * 300)
    session = app.start(" ana ")
    assert session.rater == "ana" and session.progress() == (0, 6)
    session.rate(session.order[0], **FULL)
    assert app.progress().to_dict("records") == [{"rater": "ana", "rated": 1, "items": 6}]

    # With manifests: each rater sees only their items; a name without one is refused, naming who has one.
    write_manifests(assign(app.items, ["ben", "chen", "dana"], per_item=2), tmp_path / "manifests")
    app = RatingApp.from_folders(qa, tmp_path / "ratings", tmp_path / "manifests")
    assert app.start("ben").progress() == (0, 4)
    with pytest.raises(RatingError, match=r"no assignment for 'eve'.*ben, chen, dana"):
        app.start("eve")
    from fabnb.views.widgets import RatingAppView

    view = RatingAppView(app)  # the refusal under the name box wraps (issue 54 item 9: its fix was off-screen)
    assert view.enter("eve") is None and "ben, chen, dana" in view.message.value
    assert "white-space: normal" in view.message.value and "overflow-wrap: anywhere" in view.message.value
    assert app.progress().set_index("rater")["items"].to_dict() == {"ana": 6, "ben": 4, "chen": 4, "dana": 4}
    with pytest.raises(RatingError, match="no such folder of manifests"):
        RatingApp.from_folders(qa, tmp_path / "ratings", tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RatingError, match="no QA pair could be read"):
        RatingApp.from_folders(empty, tmp_path / "ratings")


def test_the_app_notebook_in_the_repository_is_the_one_the_cli_serves(tmp_path):
    from fabnb.qa.rating_app import app_notebook

    assert (ROOT / "apps" / "rate.ipynb").read_text() == app_notebook(tmp_path / "rate.ipynb").read_text()


def test_fabnb_rate_prints_progress_and_refuses_a_missing_folder(tmp_path, fab_bench_dir):
    qa = qa_folder(fab_bench_dir, tmp_path / "qa", 3)
    store = RatingStore(tmp_path / "ratings")
    from fabnb.data.datasets import read_qa_files

    store.add("ana", read_qa_files(qa).pairs[0].test_id, FULL)
    run = subprocess.run([sys.executable, "-m", "fabnb.cli", "rate", "--qa", str(qa), "--ratings",
                          str(tmp_path / "ratings")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "3 items" in run.stdout and run.stdout.split("\n")[2].split() == ["ana", "1", "3"]
    run = subprocess.run([sys.executable, "-m", "fabnb.cli", "rate", "--serve", "--qa", str(qa), "--ratings",
                          str(tmp_path / "r"), "--manifests", str(tmp_path / "nowhere")], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "nowhere: no such folder of manifests" in run.stderr


def test_two_tabs_of_one_rater_keep_every_saved_field(tmp_path):
    """Tab A sets accuracy, tab B relevance, tab A difficulty: all three are the rating (B's once was lost)."""
    from fabnb.views.widgets import RatingPanel

    items = pd.DataFrame({"item_id": ["q1", "q2"], "question": ["Why?", "How?"]})
    store = RatingStore(tmp_path)
    tab_a = RatingPanel(RatingSession(items, "ana", store))
    tab_b = RatingPanel(RatingSession(items, "ana", RatingStore(tmp_path)))
    assert tab_a.item["item_id"] == tab_b.item["item_id"]
    tab_a.handle({"action": "rate", "dimension": "accuracy", "value": 4})
    tab_b.handle({"action": "rate", "dimension": "relevance", "value": 2})
    tab_a.handle({"action": "rate", "dimension": "difficulty", "value": 5})
    latest = store.ratings().set_index("dimension")["score"].to_dict()
    assert latest == {"accuracy": 4, "relevance": 2, "difficulty": 5}
    assert tab_a.scores == latest  # the tab shows what the other one saved, once it saves
    tab_b.handle({"action": "comment", "text": "clear question"})
    tab_a.handle({"action": "rate", "dimension": "accuracy", "value": 3})
    final = store.ratings()
    assert final.set_index("dimension")["score"].to_dict()["accuracy"] == 3
    assert final["comment"].eq("clear question").all()  # a score saved later leaves the comment alone


def test_rater_names_never_share_a_file_and_long_names_are_refused(tmp_path):
    from fabnb.qa.rating import MAX_RATER_NAME, rater_key

    store = RatingStore(tmp_path)
    store.add("ana b", "q1", {"accuracy": 5})
    store.add("ana_b", "q1", {"accuracy": 1})
    assert len(list(tmp_path.glob("*.jsonl"))) == 2 and rater_key("ana b") != rater_key("ana_b")
    by = store.ratings().set_index("rater")["score"].to_dict()
    assert by == {"ana b": 5, "ana_b": 1} and store.raters() == ["ana b", "ana_b"]
    assert [r["scores"] for r in store.read("ana b")] == [{"accuracy": 5}]
    for bad in ("x" * (MAX_RATER_NAME + 1), "y" * 300):
        with pytest.raises(RatingError, match=f"at most {MAX_RATER_NAME}"):
            store.add(bad, "q1", {"accuracy": 3})
    assert len(list(tmp_path.glob("*.jsonl"))) == 2


def test_a_folder_written_by_the_previous_release_still_reads(tmp_path):
    """Files named as before (``ana.jsonl``, ``ana.json``), whole-item records: found, read, and continued."""
    from fabnb.qa.rating_app import RatingApp

    (tmp_path / "ratings").mkdir()
    old = {"kind": "rating", "rater": "ana", "item_id": "q1", "comment": "ok",
           "scores": {"accuracy": 4, "relevance": 3, "difficulty": 2, "diversity": 5}, "ts": 1000.0}
    (tmp_path / "ratings" / "ana.jsonl").write_text(json.dumps(old) + "\n")
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "ana.json").write_text(json.dumps({"rater": "ana", "items": ["q1", "q2"]}))
    items = pd.DataFrame({"item_id": ["q1", "q2", "q3"], "question": "q"})
    app = RatingApp(items, RatingStore(tmp_path / "ratings"), manifests=tmp_path / "manifests")
    session = app.start("ana")
    assert session.progress() == (1, 2) and session.latest("q1") == (old["scores"], "ok")
    session.rate("q1", accuracy=1)
    rating = RatingStore(tmp_path / "ratings").ratings().set_index("dimension")
    assert rating["score"].to_dict() == {**old["scores"], "accuracy": 1} and rating["comment"].eq("ok").all()
    assert app.progress().to_dict("records") == [{"rater": "ana", "rated": 1, "items": 2}]


def test_a_cut_line_in_a_raters_file_is_reported_once_naming_the_file_and_line(tmp_path):
    from fabnb.core.records import CutRecordWarning

    store = RatingStore(tmp_path)
    store.add("ana", "q1", {"accuracy": 4})
    path = store.path("ana")
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "rating", "rater": "ana", "item_id": "q2", "sco')  # a power cut
    with pytest.warns(CutRecordWarning, match=rf"{path}, line 2: a cut or unreadable record, skipped; the rating"):
        assert store.ratings()["item_id"].tolist() == ["q1"]
    store.add("ana", "q2", {"accuracy": 2})
    assert sorted(store.ratings()["item_id"]) == ["q1", "q2"] and b'"sco\n' in path.read_bytes()


@pytest.mark.parametrize("name, words", [
    ("../../etc", "path separator"), ("a/b", "path separator"), ("a\\b", "path separator"),
    ("x" * 300, "at most 80"), ("ana\tlima", "control character"), ("ana\nlima", "control character"),
])
def test_one_rule_for_rater_names_in_the_store_and_raters(tmp_path, name, words):
    """Issue 46 item 9: --raters took '../../etc', 'a/b', 300 characters and names with a tab or newline (which
    broke links.tsv: after a restart that rater got a new token and the link already sent stopped working)."""
    from fabnb.qa.access import AccessError, issue_links

    with pytest.raises(RatingError, match=words):
        RatingStore(tmp_path / "r").add(name, "GEN_001", {"accuracy": 3})
    with pytest.raises(AccessError, match=f"--raters: .*{words}.*Nothing was written"):
        issue_links(["ana", name], "http://127.0.0.2:8866/", tmp_path / "access")
    assert not (tmp_path / "access" / "links.tsv").exists() and not list(tmp_path.rglob("*.jsonl"))


def test_comments_are_capped_and_a_longer_one_is_refused_with_nothing_saved(tmp_path):
    from fabnb.qa.rating import MAX_COMMENT

    store = RatingStore(tmp_path)
    store.add("ana", "GEN_001", {"accuracy": 3}, comment="x" * MAX_COMMENT)
    with pytest.raises(RatingError, match="2,000,000 characters is over the 10,000"):
        store.add("ana", "GEN_001", {"accuracy": 4}, comment="y" * 2_000_000)
    frame = store.ratings()
    assert frame["score"].tolist() == [3] and frame["comment"].str.len().tolist() == [MAX_COMMENT]
