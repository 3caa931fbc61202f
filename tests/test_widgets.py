"""Widgets driven without a browser: actions in, store on disk, state out; front-end files safe."""

import re
from pathlib import Path

import pandas as pd
import pytest

from fabnb.corpus.collection import CorpusSession
from fabnb.qa.curation import CurationSession
from fabnb.qa.rating import RatingSession, RatingStore, rating_items
from fabnb.views.widgets import CorpusInspector, QACurator, RatingPanel

from conftest import qa_folder

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=1">'
WIDGETS = Path(__file__).resolve().parents[1] / "widgets"


@pytest.fixture
def items(fab_bench):
    frame = rating_items(fab_bench.pairs[:6])
    frame.loc[0, "question"] = HOSTILE + frame.loc[0, "question"]
    return frame


def test_rating_panel_saves_each_score_before_saying_saved(items, tmp_path):
    store = RatingStore(tmp_path)
    panel = RatingPanel(RatingSession(items, "ana", store, seed=3))
    first = panel.item["item_id"]
    panel.handle({"action": "rate", "dimension": "accuracy", "value": 4})
    assert panel.saved.startswith(f"saved {first}") and panel.error == ""
    assert store.ratings().query("dimension == 'accuracy'").score.tolist() == [4]  # on disk already
    for dim, v in (("relevance", 5), ("difficulty", 2), ("diversity", 3)):
        panel.handle({"action": "rate", "dimension": dim, "value": v})
    panel.handle({"action": "comment", "text": "clear"})
    assert panel.done == 1 and panel.scores == {"accuracy": 4, "relevance": 5, "difficulty": 2, "diversity": 3}
    panel.handle({"action": "next"})
    assert panel.position == 1 and panel.scores == {}
    panel.handle({"action": "rate", "dimension": "accuracy", "value": 9})
    assert "not a whole number from 1 to 5" in panel.error and panel.scores == {}
    panel.handle({"action": "explode"})
    assert "unknown action" in panel.error
    # a new kernel: the panel opens on the first unrated item, with the first item's rating intact
    again = RatingPanel(RatingSession(items, "ana", store, seed=3))
    assert again.position == 1 and again.done == 1
    again.handle({"action": "prev"})
    assert again.scores["relevance"] == 5 and again.comment == "clear"


def test_rating_panel_blind_mode_and_hostile_text_is_data(items, tmp_path):
    panel = RatingPanel(RatingSession(items, "ana", RatingStore(tmp_path), blind=True))
    for _ in range(len(items)):
        assert "generation_metadata" not in panel.item and "source_chapter" not in panel.item
        if panel.item["item_id"] == items.item_id[0]:
            assert panel.item["question"].startswith(HOSTILE)  # passed through as text, untouched
        panel.handle({"action": "next"})
    seen = RatingPanel(RatingSession(items, "bo", RatingStore(tmp_path), blind=False))
    assert "generation_metadata" in seen.item


def test_rating_panel_download_sends_this_raters_csv(items, tmp_path, monkeypatch):
    store = RatingStore(tmp_path)
    store.add("other", items.item_id[0], {"accuracy": 1})
    panel = RatingPanel(RatingSession(items, "ana", store))
    panel.handle({"action": "rate", "dimension": "difficulty", "value": 2})
    sent = []
    monkeypatch.setattr(panel, "send", sent.append)
    panel.handle({"action": "download"})
    assert sent[0]["filename"] == "ratings-ana.csv"
    lines = sent[0]["content"].splitlines()
    assert lines[0].startswith("rater,item_id,dimension,score") and len(lines) == 2 and ",difficulty,2," in lines[1]


def _comm_update(widget, state: dict) -> None:
    """What the kernel does with a comm_msg ``update`` that arrives over its websocket from the page."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state}}})


def test_a_rater_cannot_read_another_raters_ratings_by_renaming_herself(items, tmp_path, monkeypatch):
    """Issue 46 item 1: the page sets ``rater`` to another name over the websocket, then asks for the download."""
    store = RatingStore(tmp_path)
    store.add("ben", items.item_id[0], {"accuracy": 1}, comment="ben's private note")
    panel = RatingPanel(RatingSession(items, "ana", store))
    panel.handle({"action": "rate", "dimension": "difficulty", "value": 2})
    sent = []
    monkeypatch.setattr(panel, "send", sent.append)
    _comm_update(panel, {"rater": "ben"})
    assert panel.rater == "ana" and "may not set rater" in panel.error
    panel.handle({"action": "download"})
    assert sent[0]["filename"] == "ratings-ana.csv"
    assert "ben" not in sent[0]["content"] and ",difficulty,2," in sent[0]["content"]
    _comm_update(panel, {"rater": "ana"})  # the page echoing what it was sent is not an error
    assert panel.rater == "ana"


def test_no_view_takes_state_from_the_page(items, tmp_path):
    """Every view keeps its state in the kernel: a crafted update of any synced trait is refused."""
    panel = RatingPanel(RatingSession(items, "ana", RatingStore(tmp_path)))
    before = panel.get_state()
    _comm_update(panel, {"position": 1, "total": 99, "item": {"question": "forged"}, "blind": False})
    after = panel.get_state()
    assert {k: after[k] for k in ("position", "total", "item", "blind")} == \
        {k: before[k] for k in ("position", "total", "item", "blind")}
    assert "blind, item, position, total" in panel.error


def test_curator_keyboard_actions_write_decisions(fab_bench_dir, tmp_path):
    qa = fab_bench_dir / "QAs"
    files = sorted(qa.rglob("ROB_00*.json"))[:5] + sorted(qa.rglob("GEN_00*.json"))[:3]
    session = CurationSession(files, tmp_path / "store", "cur")
    view = QACurator(session, export_to=tmp_path / "out")
    first = view.item["test_id"]
    view.handle({"action": "keep"})
    assert view.position == 1 and session.status().set_index("test_id").loc[first, "status"] == "kept"
    view.handle({"action": "drop", "reason": "vague"})
    view.handle({"action": "filter", "name": "test_type", "value": "robustness"})
    assert len(view.ids) == 5 and view.item["test_type"] == "robustness"
    view.handle({"action": "edit", "field": "question", "value": "Rewritten?"})
    assert view.item["question"] == "Rewritten?" and view.item["edited"] == ["question"]
    view.handle({"action": "filter", "name": "status", "value": "kept"})
    assert view.ids == []  # filters combine: no robustness pair is kept
    view.handle({"action": "filter", "name": "test_type", "value": ""})
    assert view.ids == [first]
    view.handle({"action": "export"})
    assert "exported 1 kept pairs" in view.saved and len(list((tmp_path / "out").rglob("*.json"))) == 1
    gen = [p for p in view.progress if p["test_type"] == "generation_quality"][0]  # GEN_ ids come first
    assert gen == {"test_type": "generation_quality", "target": 51, "kept": 1, "dropped": 1, "pending": 1,
                   "remaining": 50}
    view.handle({"action": "filter", "name": "test_type", "value": "multi_hop"})
    assert view.item == {} and view.ids == []  # no multi-hop candidate at all
    view.handle({"action": "keep"})
    assert "filters match nothing" in view.error


def test_corpus_inspector_search_and_segments(evidence_chunks):
    chunks, _ = evidence_chunks
    chunks = chunks.copy()
    chunks.loc[0, "text"] = HOSTILE + " EUV lithography " + chunks.loc[0, "text"]
    session = CorpusSession(chunks)
    view = CorpusInspector(session)
    assert view.chunk["chunk_id"] == chunks.chunk_id[0]
    assert "".join(s["text"] for s in view.chunk["segments"]) == chunks.text[0]  # text comes back exactly
    assert any(s["term"] and s["category"] for s in view.chunk["segments"])
    view.handle({"action": "search", "query": "plasma"})
    assert view.results and all("plasma" in session.chunk(r["chunk_id"])["text"].lower() for r in view.results)
    view.handle({"action": "chunk", "chunk_id": view.results[0]["chunk_id"]})
    assert view.doc_id == session.chunk(view.results[0]["chunk_id"])["doc_id"]
    view.handle({"action": "chunk", "chunk_id": "nope"})
    assert "no chunk 'nope'" in view.error
    docs = session.documents()
    assert docs.n_chunks.sum() == len(chunks) and {"high", "medium", "low"} <= set(docs.columns)
    assert session.stats.precision_level.isin(["high", "medium", "low"]).all()


def test_corpus_session_lists_contexts_of_a_chunk(evidence_chunks):
    from fabnb.corpus.synthesis import multi_hop

    chunks, vectors = evidence_chunks
    contexts = multi_hop(chunks, vectors, n=3, seed=0)
    session = CorpusSession(chunks, contexts=contexts)
    member = contexts.members.iloc[0]
    found = session.contexts_of(member.chunk_id)
    assert member.context_id in found.context_id.tolist() and found.strategy.eq("multi_hop").all()


@pytest.mark.parametrize("name", ["rating", "curation", "corpus"])
def test_front_end_files_show_text_as_text_and_fetch_nothing(name):
    js = re.sub(r"^\s*//.*$", "", (WIDGETS / f"{name}.js").read_text(), flags=re.M)  # code, not comments
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", js)
    assert not re.search(r"\bimport\b|fetch\(|https?://", js)  # offline: no imports, no CDN, no requests
    css = (WIDGETS / f"{name}.css").read_text()
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules = [r.strip() for r in re.findall(r"(?:^|[{}])\s*([^{}]+)\{", css)]
    # anywidget CSS is global: every rule stays scoped (an @media block's rules too).
    assert rules and all(r.startswith((f".fabnb-{name}", "@media ")) for r in rules), rules


KILLED = """
import os, signal, sys
import pandas as pd
from fabnb.qa.rating import RatingSession, RatingStore
from fabnb.views.widgets import RatingPanel
items = pd.DataFrame({"item_id": ["a", "b", "c"], "question": ["q1", "q2", "q3"]})
panel = RatingPanel(RatingSession(items, "ana", RatingStore(sys.argv[1]), seed=0))
panel.handle({"action": "rate", "dimension": "accuracy", "value": 5})
panel.handle({"action": "rate", "dimension": "relevance", "value": 4})
panel.handle({"action": "next"})
panel.handle({"action": "rate", "dimension": "accuracy", "value": 2})
print(panel.session.order, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies mid-session, with the comment box still being typed in
"""


def test_a_killed_kernel_keeps_every_score_already_given(tmp_path):
    import ast
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    order = ast.literal_eval(done.stdout.strip())
    r = RatingStore(tmp_path).ratings().pivot_table(index="item_id", columns="dimension", values="score")
    assert r.loc[order[0]].dropna().to_dict() == {"accuracy": 5, "relevance": 4}
    assert r.loc[order[1]].dropna().to_dict() == {"accuracy": 2}
    again = RatingPanel(RatingSession(pd.DataFrame({"item_id": ["a", "b", "c"], "question": ["q1", "q2", "q3"]}),
                                      "ana", RatingStore(tmp_path), seed=0))
    assert again.item["item_id"] == order[0] and again.scores == {"accuracy": 5, "relevance": 4}  # resumes there


def test_rating_panel_shows_a_bad_goto_as_an_error(items, tmp_path):
    panel = RatingPanel(RatingSession(items, "ana", RatingStore(tmp_path)))
    for bad in (None, "2", 1.5, True, [3]):
        panel.handle({"action": "goto", "position": bad})  # never raised into the kernel
        assert "goto needs a whole-number position" in panel.error and panel.position == 0
    panel.handle({"action": "goto", "position": 2})
    assert panel.position == 2 and panel.error == ""
    panel.handle({"action": "rate", "dimension": "accuracy", "value": None})
    assert panel.error
    panel.handle("not a dict")
    assert "unknown action" in panel.error


@pytest.mark.parametrize("name", ["rating.js", "curation.js", "corpus.js"])
def test_front_end_cleanup_removes_every_listener(name):
    """Each model.on(...) in render has its model.off(...) in the cleanup that render returns."""
    js = (WIDGETS / name).read_text()
    ons = re.findall(r"model\.on\(([^,]+),\s*(\w+)\)", js)
    offs = re.findall(r"model\.off\(([^,]+),\s*(\w+)\)", js)
    assert ons and sorted(ons) == sorted(offs), (ons, offs)
    cleanup = js[js.rindex("return () =>"):]
    assert all(f"model.off({event}, {handler})" in cleanup for event, handler in offs)


def test_rating_app_view_asks_a_name_then_shows_only_the_panel(tmp_path, fab_bench_dir, monkeypatch):
    import ipywidgets

    from fabnb.qa.rating_app import RatingApp
    from fabnb.views.widgets import RatingAppView, rating_app

    qa = qa_folder(fab_bench_dir, tmp_path / "qa", 3)
    view = RatingAppView(RatingApp.from_folders(qa, tmp_path / "ratings"))
    assert view.enter("  ") is None and "enter your name" in view.message.value
    view.name.value = "a" * 300  # once an uncaught OSError (file name too long) and a blank page
    assert view.panel is None and "too long: use at most 80" in view.message.value
    assert not list(tmp_path.rglob("*.jsonl"))
    view.name.value = "ana"  # Enter in the box
    assert isinstance(view.panel, RatingPanel) and view.widget.children == (view.panel,)
    assert view.enter("ben") is view.panel  # a second Enter (or the button) does not start another session
    view.panel.handle({"action": "rate", "dimension": "accuracy", "value": 3})
    assert RatingStore(tmp_path / "ratings").ratings().rater.tolist() == ["ana"]

    # A refusal that quotes the name shows it escaped: text, never markup.
    from fabnb.qa.rating import assign, write_manifests

    write_manifests(assign(view.app.items, ["ben", "chen"], per_item=2), tmp_path / "manifests")
    gated = RatingAppView(RatingApp.from_folders(qa, tmp_path / "ratings", tmp_path / "manifests"))
    # (issue 46 item 9: the name rule now refuses it first, for its '/'; the refusal still quotes it as text)
    assert gated.enter(HOSTILE) is None and "holds a path separator" in gated.message.value
    assert "<script>" not in gated.message.value and "&lt;script&gt;" in gated.message.value
    assert gated.enter("zoe") is None and "no assignment for" in gated.message.value

    # From the environment, as Voilà's kernel gets it; a folder that cannot be used gives a page that says so.
    monkeypatch.setenv("FABNB_QA_DIR", str(qa))
    monkeypatch.setenv("FABNB_RATINGS_DIR", str(tmp_path / "env-ratings"))
    monkeypatch.setenv("FABNB_MANIFESTS_DIR", str(tmp_path / "nowhere"))
    page = rating_app()
    assert isinstance(page, ipywidgets.Label) and "nowhere: no such folder of manifests" in page.value
    monkeypatch.delenv("FABNB_MANIFESTS_DIR")
    page = rating_app()
    assert isinstance(page, RatingAppView) and len(page.app.items) == 3
    assert page.app.store.folder == tmp_path / "env-ratings"


def test_download_links_are_relative_to_the_notebook_folder(tmp_path, monkeypatch):
    """Once the href was the zip's absolute path on disk: Jupyter answered 404."""
    import zipfile

    from fabnb.views.widgets import download_link

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "outputs" / "run").mkdir(parents=True)
    (work / "outputs" / "run" / "a.csv").write_text("x\n")
    (elsewhere / "ratings").mkdir(parents=True)
    (elsewhere / "ratings" / "ana.jsonl").write_text("{}\n")
    (elsewhere / "one.csv").write_text("y\n")
    monkeypatch.chdir(work)
    inside = download_link(work / "outputs" / "run")
    assert inside.path == "outputs/run.zip" and zipfile.ZipFile(work / inside.path).namelist() == ["a.csv"]
    outside = download_link(elsewhere / "ratings")  # outside Jupyter's root: brought in first
    assert outside.path == "downloads/ratings.zip" and (work / outside.path).exists()
    assert download_link(elsewhere / "one.csv").path == "downloads/one.csv"
    assert "href='outputs/run.zip'" in inside._repr_html_()


def test_each_dimension_says_what_its_ends_mean(items, tmp_path):
    from fabnb.qa.rating import ANCHORS, DIMENSIONS

    panel = RatingPanel(RatingSession(items, "ana", RatingStore(tmp_path)))
    shown = {d["name"]: (d["low"], d["high"]) for d in panel.dimensions}
    assert set(shown) == set(DIMENSIONS) and all(low and high for low, high in shown.values())
    assert shown == {d: ANCHORS[d] for d in DIMENSIONS} and "fabnb's words" in panel.anchors_source
