"""A real browser (Debian's chromium, driven by Playwright) rates items in a real JupyterLab.

The test starts JupyterLab on 127.0.0.1, opens the rating notebook (05_rate_pairs),
runs it, rates one item with the keyboard and one with the mouse, downloads the
ratings, and then reads the store on disk. The QA items carry hostile HTML in their
questions: it must show as text and never run. ``.ci/run`` installs chromium from the
OS packages; without it this test fails (it is not skipped).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fabnb.qa.rating import RatingStore

from conftest import ROOT, qa_folder

pytestmark = pytest.mark.browser

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script> '
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _hostile_qa(fab_bench_dir: Path, folder: Path) -> Path:
    """Three released QA files with hostile HTML before each question."""
    return qa_folder(fab_bench_dir, folder, 3, "ROB_00*.json", HOSTILE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _jupyterlab(work: Path, env: dict, log_path: Path, app: str = "lab"):
    """JupyterLab (``app="notebook"``: Notebook 7) on loopback serving ``work``; yields its base URL and token, then
    stops it and its kernels."""
    port, token = _free_port(), "fabnb-browser-test"
    expose = ["--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
              "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"] if app == "lab" else \
        ["--JupyterNotebookApp.expose_app_in_browser=True"]
    env = {**os.environ, **env, "JUPYTER_CONFIG_DIR": str(work.parent / "jupyter-config"),
           "JUPYTER_RUNTIME_DIR": str(work.parent / "jupyter-runtime")}
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", app, "--no-browser", "--allow-root", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", f"--ServerApp.root_dir={work}",
         "--ServerApp.port_retries=0", *expose],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + log_path.read_text()[-3000:]) from None
                time.sleep(0.5)
        yield base, token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its kernels
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _open_and_run(page, url: str):
    """Open a notebook in JupyterLab, wait for its kernel, run every cell."""
    page.goto(url)
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget "
                           "&& window.jupyterapp.shell.currentWidget.sessionContext", timeout=90_000)
    page.wait_for_function("window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel "
                           "&& window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                           ".connectionStatus === 'connected'", timeout=90_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


LOCAL_HOSTS = ("127.0.0.1", "127.0.0.2", "localhost", "[::1]")


class LocalOnlyBrowser:
    """Debian's chromium, every page of it watched: each request is recorded (``requests``), one to a host that
    is not this machine is aborted and remembered, and :meth:`close` fails the test naming it. The rating app,
    the explorer and JupyterLab must work with nothing fetched from elsewhere (Voilà's lab template once linked
    Font Awesome from a CDN, so every expert's browser contacted a third party)."""

    def __init__(self, browser):
        self.browser, self.requests, self.elsewhere = browser, [], []

    def _watch(self, context):
        def route(r):
            from urllib.parse import urlsplit

            url = r.request.url
            self.requests.append(url)
            host = urlsplit(url).hostname or ""
            local = host in LOCAL_HOSTS or f"[{host}]" in LOCAL_HOSTS
            if urlsplit(url).scheme in ("data", "blob", "about", "file") or local:  # file://: this machine
                r.continue_()
            else:
                self.elsewhere.append(url)
                r.abort()

        context.route("**/*", route)
        return context

    def new_context(self, **kwargs):
        return self._watch(self.browser.new_context(**kwargs))

    def new_page(self, **kwargs):
        page = self.new_context(**kwargs).new_page()
        return page

    def close(self):
        self.browser.close()
        assert not self.elsewhere, f"the page asked hosts other than this machine: {sorted(set(self.elsewhere))}"


def _chromium(pw) -> LocalOnlyBrowser:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH: .ci/run installs Debian's chromium (apt-get install chromium)"
    return LocalOnlyBrowser(pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True))


def test_the_browser_fails_a_test_whose_page_asks_another_host():
    """The fixture itself: a page that loads an image from elsewhere is failed at close, naming the address."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = _chromium(pw)
        page = browser.new_page()
        page.set_content('<img src="https://cdn.example.invalid/icon.png"><p>hi</p>')
        page.wait_for_timeout(500)
        with pytest.raises(AssertionError, match="cdn.example.invalid/icon.png"):
            browser.close()
    assert browser.requests == ["https://cdn.example.invalid/icon.png"]


def _one_cell_notebook(work: Path, name: str, source: str) -> str:
    """A notebook of one code cell in ``work`` (created); returns its file name."""
    import nbformat

    work.mkdir(exist_ok=True)
    kernel = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)], metadata=kernel), work / name)
    return name


@pytest.fixture
def lab(tmp_path, fab_bench_dir):
    """JupyterLab on loopback over a folder with the rating notebook and three hostile QA files."""
    qa = _hostile_qa(fab_bench_dir, tmp_path / "qa")
    work = tmp_path / "lab"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "05_rate_pairs.ipynb", work)
    env = {"FABNB_QA_DIR": str(qa), "FABNB_RATINGS_DIR": str(tmp_path / "ratings"), "FABNB_RATER": "browser"}
    with _jupyterlab(work, env, tmp_path / "lab.log") as (base, token):
        yield {"url": f"{base}/lab/tree/05_rate_pairs.ipynb?token={token}", "store": tmp_path / "ratings",
               "log": tmp_path / "lab.log", "downloads": tmp_path / "downloads"}


def test_rating_notebook_in_a_real_browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = _chromium(pw)
        try:
            page = browser.new_page(accept_downloads=True)
            _open_and_run(page, lab["url"])
            panel = page.locator(".fabnb-rating")
            panel.wait_for(state="visible", timeout=120_000)

            # Hostile text is shown as text: no element made from it, no script run.
            question = panel.locator(".fabnb-question")
            assert question.text_content().startswith(HOSTILE.strip().split(" ")[0])
            assert panel.locator("img, script").count() == 0
            assert page.evaluate("window.pwned") is None

            # Keyboard: 4 5 2 3 rate the four dimensions in turn, then n moves on.
            first = panel.locator(".fabnb-id").text_content().split(" · ")[0]
            panel.click(position={"x": 5, "y": 5})
            assert "and the highlight moves to the next one" in panel.locator(".fabnb-help").text_content()
            for key in "45":
                page.keyboard.press(key)
                page.wait_for_timeout(150)  # each key is one save; let the panel redraw
            # Two of four scored: said as such, never a bare "0 rated" (issue 54 item 9).
            page.wait_for_function("document.querySelector('.fabnb-rating .fabnb-progress')"
                                   ".textContent.includes('0 rated in full · this item: 2 of 4 scored')",
                                   timeout=30_000)
            for key in "23":
                page.keyboard.press(key)
                page.wait_for_timeout(150)
            page.wait_for_function("document.querySelector('.fabnb-rating .fabnb-progress')"
                                   ".textContent.includes('1 rated')", timeout=30_000)
            assert panel.locator(".fabnb-saved").text_content().startswith(f"saved {first}")
            page.keyboard.press("n")
            page.wait_for_function(f"!document.querySelector('.fabnb-rating .fabnb-id').textContent"
                                   f".startsWith('{first}')", timeout=30_000)

            # Mouse: click a score per dimension on the second item.
            second = panel.locator(".fabnb-id").text_content().split(" · ")[0]
            for dim, value in (("accuracy", 1), ("relevance", 2), ("difficulty", 5), ("diversity", 4)):
                panel.locator(f".fabnb-dim[data-dimension='{dim}'] .fabnb-score[data-value='{value}']").click()
                page.wait_for_selector(f".fabnb-rating .fabnb-dim[data-dimension='{dim}'] "
                                       f".fabnb-score.fabnb-chosen[data-value='{value}']", timeout=30_000)
            page.wait_for_function("document.querySelector('.fabnb-rating .fabnb-progress')"
                                   ".textContent.includes('2 rated')", timeout=30_000)

            # The download button hands over this rater's ratings as CSV.
            with page.expect_download(timeout=30_000) as info:
                panel.locator("button.fabnb-download").click()
            filename = info.value.suggested_filename
            saved = Path(lab["downloads"]) / filename
            info.value.save_as(saved)
            downloaded = saved.read_text()

            # The notebook's last cell: a download link for the ratings folder (once a 404: the href was the
            # zip's absolute path on disk). JupyterLab resolves it to its files route, and the zip comes back.
            # Run-all stopped at the assignment cell (three items cannot give four raters each a shared item),
            # so run the last cell itself; JupyterLab 4 renders only the cells in view: bring it into view.
            page.evaluate("() => { const nb = window.jupyterapp.shell.currentWidget.content;"
                          " nb.activeCellIndex = nb.widgets.length - 1;"
                          " return nb.scrollToItem(nb.widgets.length - 1); }")
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
            link = page.locator(".jp-OutputArea-output a", has_text="ratings.zip").last
            link.wait_for(timeout=60_000)
            page.wait_for_function("document.querySelector('.jp-OutputArea-output a[href*=\"ratings.zip\"]')"
                                   ".href.includes('/files/')", timeout=30_000)
            reply = page.request.get(link.evaluate("a => a.href"))
            archive = reply.body()
        finally:
            browser.close()
    assert reply.status == 200 and archive[:2] == b"PK", (reply.status, archive[:200])

    assert filename == "ratings-browser.csv"
    assert downloaded.count("\n") == 9  # header + 2 items x 4 dimensions

    # The store on disk holds exactly what was rated, one fsynced record per score given.
    store = RatingStore(lab["store"])
    records, problems = store.records()
    assert problems.empty and len(records) == 8
    ratings = store.ratings().pivot_table(index="item_id", columns="dimension", values="score")
    assert ratings.loc[first].to_dict() == {"accuracy": 4, "relevance": 5, "difficulty": 2, "diversity": 3}
    assert ratings.loc[second].to_dict() == {"accuracy": 1, "relevance": 2, "difficulty": 5, "diversity": 4}


VERDICT_NOTEBOOK = """\
import pandas as pd
from fabnb.qa.rating import RatingSession, RatingStore
from fabnb.tester.study import verdict_items
from fabnb.views.widgets import RatingPanel

verdicts = pd.DataFrame({"system": "s", "model": "m", "context_k": 1.0, "mode": "A", "status": "ok",
                         "test_id": ["t1", "t2"], "generator": ["random", "coverage"], "failed": [True, False]})
tests = pd.DataFrame({"test_id": ["t1", "t2"], "question": ["What etches silicon?", "What is the bake time?"],
                      "expected_answer": ["Fluorine radicals", "60 s"], "evidence": ["e1", "e2"]})
results = verdicts[["system", "model", "context_k", "mode", "test_id"]].assign(
    answer=["Chlorine.", "60 s."], sources=[[{"text": "retrieved one"}], [{"text": "retrieved two"}]])
items = verdict_items(verdicts, tests, results, n=2)
RatingPanel(RatingSession(items, "browser", RatingStore("labels"), kind="verdict"))
"""


def test_verdict_labelling_in_a_real_browser(tmp_path):
    """Objection 2's human labels: the rating panel in verdict mode, keys 1 (fails) and 0 (passes)."""
    from playwright.sync_api import sync_playwright

    work = tmp_path / "lab"
    _one_cell_notebook(work, "label.ipynb", VERDICT_NOTEBOOK)
    with _jupyterlab(work, {}, tmp_path / "lab.log") as (base, token), sync_playwright() as pw:
        browser = _chromium(pw)
        try:
            page = browser.new_page()
            _open_and_run(page, f"{base}/lab/tree/label.ipynb?token={token}")
            panel = page.locator(".fabnb-rating")
            panel.wait_for(state="visible", timeout=120_000)
            assert "Keys: 0-1" in panel.locator(".fabnb-help").text_content()
            assert "oracle" not in panel.text_content()  # the oracle's verdict is hidden from the rater
            labels = {}
            for key in "10":
                item = panel.locator(".fabnb-id").text_content().split(" · ")[0]
                panel.click(position={"x": 5, "y": 5})
                page.keyboard.press(key)
                page.wait_for_function(f"document.querySelector('.fabnb-rating .fabnb-saved')"
                                       f".textContent.startsWith('saved {item}')", timeout=30_000)
                labels[item] = int(key)
                page.keyboard.press("n")
                page.wait_for_timeout(300)
            page.wait_for_function("document.querySelector('.fabnb-rating .fabnb-progress')"
                                   ".textContent.includes('2 rated')", timeout=30_000)
        finally:
            browser.close()
    stored = RatingStore(work / "labels").ratings(kind="verdict")
    assert dict(zip(stored.item_id, stored.score)) == labels and set(labels) == {"s|1K|A|t1", "s|1K|A|t2"}


EXPLORER_NOTEBOOK = """\
import pandas as pd
from fabnb.views.explorer import Explorer
from fabnb.views.widgets import ResultsExplorer

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'
keys = [dict(system="ref", model="m", context_k=k, mode="A", test_id=t) for k in (4.0, 8.0) for t in ("Q1", "Q2")]
answers = pd.DataFrame([{**k, "status": "ok", "gold_retrieved": True,
                         "answer": HOSTILE + " etch answer" if k["test_id"] == "Q2" else "plain answer",
                         "sources": [{"id": "c1", "doc_id": "D1", "text": HOSTILE + " passage", "score": 0.8}]}
                        for k in keys])
scores = pd.DataFrame([{**k, "metric": m, "replicate": 0, "status": "ok", "score": 0.6, "raw_score": 6,
                        "scoring": "integer", "reason": HOSTILE + " reason"} for k in keys
                       for m in ("factuality", "depth")])
questions = pd.DataFrame({"test_id": ["Q1", "Q2"], "question": ["What is deposited?", "Which etch step?"],
                          "ground_truth_answer": ["oxide", "the second"], "gold_doc_ids": [("D1",), ("D1",)],
                          "test_type": ["robustness", "multi_hop"], "question_format": ["SUBJECTIVE", "SUBJECTIVE"]})
ResultsExplorer(Explorer(answers, scores, questions))
"""


def test_results_explorer_in_a_real_browser(tmp_path):
    """Filter with the keyboard, open a cell whose answer, passages and reasons hold hostile HTML: all text."""
    from playwright.sync_api import sync_playwright

    work = tmp_path / "lab"
    _one_cell_notebook(work, "explore.ipynb", EXPLORER_NOTEBOOK)
    with _jupyterlab(work, {}, tmp_path / "lab.log") as (base, token), sync_playwright() as pw:
        browser = _chromium(pw)
        try:
            page = browser.new_page()
            _open_and_run(page, f"{base}/lab/tree/explore.ipynb?token={token}")
            view = page.locator(".fabnb-results")  # the one renderer, its data from the kernel
            view.locator("tr.fabnb-row").first.wait_for(state="visible", timeout=120_000)
            assert view.locator("tr.fabnb-row").count() == 4
            view.click(position={"x": 5, "y": 5})
            page.keyboard.press("/")
            page.keyboard.type("etch")
            page.keyboard.press("Enter")
            view.locator(".count", has_text="2 of 4 cells").wait_for(timeout=30_000)
            assert view.locator("tr.fabnb-row").count() == 2
            page.keyboard.press("j")
            page.keyboard.press("Enter")
            answer = view.locator(".answer")
            answer.wait_for(state="visible", timeout=30_000)  # its part asked of the kernel
            assert answer.text_content().startswith("<img src=x onerror")
            assert view.locator(".source").first.text_content().count("<script>") == 1
            assert "holds the gold evidence" in view.locator(".source.gold").first.text_content()
            assert view.locator("table.scores td").filter(has_text="<script>").count() == 2
            assert view.locator(".gold-evidence").count() == 1
            assert view.locator("img, script").count() == 0 and page.evaluate("window.pwned") is None
            assert "8K" in view.locator(".key").text_content() and "Q2" in view.locator(".key").text_content()
            page.keyboard.press("Escape")
            view.locator("[data-part=detail]").wait_for(state="hidden", timeout=30_000)
        finally:
            browser.close()


def _rate_in_app(page, url: str, rater: str, keys: list[str]) -> list[str]:
    """Open the rating app, give the name with the keyboard, rate one item per key string; the items rated."""
    page.goto(url)
    name = page.locator(".fabnb-rater-name input")
    name.wait_for(state="visible", timeout=120_000)
    # The page holds no code: no input area, no editor, not the app's own cell.
    assert page.locator(".jp-InputArea, .jp-CodeMirrorEditor, .cm-editor, .jp-InputPrompt").count() == 0
    assert "rating_app" not in page.locator("body").inner_text()
    name.click()
    page.keyboard.type(rater)
    page.keyboard.press("Enter")
    panel = page.locator(".fabnb-rating")
    panel.wait_for(state="visible", timeout=60_000)
    assert page.locator(".fabnb-rater-name").count() == 0  # the prompt gave way to the panel
    assert panel.locator(".fabnb-question").first.text_content().startswith("<img src=x")
    assert panel.locator("img, script").count() == 0 and page.evaluate("window.pwned") is None
    rated = []
    for n, digits in enumerate(keys, start=1):
        item = panel.locator(".fabnb-id").text_content().split(" · ")[0]
        panel.click(position={"x": 5, "y": 5})
        for key in digits:
            page.keyboard.press(key)
            page.wait_for_timeout(150)  # each key is one save; let the panel redraw
        page.wait_for_function("document.querySelector('.fabnb-rating .fabnb-progress')"
                               f".textContent.includes('{n} rated')", timeout=30_000)
        rated.append(item)
        page.keyboard.press("n")
        page.wait_for_function(f"!document.querySelector('.fabnb-rating .fabnb-id').textContent"
                               f".startsWith('{item}')", timeout=30_000)
    return rated


def _scores_on_disk(folder: Path, rater: str) -> dict:
    frame = RatingStore(folder).ratings()
    frame = frame[frame["rater"] == rater]
    return {item: "".join(str(int(g.set_index("dimension").score[d]))
                          for d in ("accuracy", "relevance", "difficulty", "diversity"))
            for item, g in frame.groupby("item_id")}


@contextlib.contextmanager
def _fabnb_rate_serve(tmp_path: Path, *args: str, command=("rate", "--serve"), ready="Rating app"):
    """``fabnb rate --serve ARGS`` (or another serving command) as a real process; yields the line it printed
    once the page answered."""
    out = tmp_path / "serve.log"
    with open(out, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fabnb.cli", *command, *args], stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while ready not in out.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        yield next(line for line in out.read_text(errors="replace").splitlines() if ready in line)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the command stops Voilà and its kernels
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _click_score(page, dimension: str, value: int) -> None:
    """Click one score button and wait until the panel shows it saved (chosen)."""
    row = page.locator(f".fabnb-rating .fabnb-dim[data-dimension='{dimension}']")
    row.locator(".fabnb-score", has_text=str(value)).click()
    row.locator(".fabnb-score.fabnb-chosen", has_text=str(value)).wait_for(timeout=30_000)


def test_two_tabs_of_one_rater_keep_every_saved_field_in_a_real_browser(tmp_path, fab_bench_dir):
    """Tab A rates accuracy, tab B relevance, tab A difficulty: all three are the rating (B's was once lost).

    Tab B is a phone (400 px wide): the scale's ends are on screen, nothing scrolls sideways, each dimension's
    buttons stay on one line, and it finishes rating the item."""
    from playwright.sync_api import sync_playwright

    qa = _hostile_qa(fab_bench_dir, tmp_path / "qa")
    with _fabnb_rate_serve(tmp_path, "--qa", str(qa), "--ratings", str(tmp_path / "ratings")) as line:
        url = line.split("Rating app: ", 1)[1].split()[0]
        with sync_playwright() as pw:
            browser = _chromium(pw)
            try:
                tabs = [browser.new_page(), browser.new_page(viewport={"width": 400, "height": 800})]
                for tab in tabs:
                    tab.goto(url)
                    name = tab.locator(".fabnb-rater-name input")
                    name.wait_for(state="visible", timeout=120_000)
                    name.fill("ana")
                    name.press("Enter")
                    tab.locator(".fabnb-rating").wait_for(state="visible", timeout=60_000)
                ids = [t.locator(".fabnb-id").text_content().split(" · ")[0] for t in tabs]
                assert ids[0] == ids[1]  # one rater, one order: the same item in both tabs
                _click_score(tabs[0], "accuracy", 4)
                _click_score(tabs[1], "relevance", 2)
                _click_score(tabs[0], "difficulty", 5)
                phone = tabs[1]
                assert "1 = the answer is wrong" in phone.locator(".fabnb-dim[data-dimension='accuracy']").inner_text()
                assert "fabnb's words" in phone.locator(".fabnb-anchors-source").inner_text()
                assert phone.evaluate("document.documentElement.scrollWidth") <= 400
                for dim in ("accuracy", "relevance", "difficulty", "diversity"):
                    tops = phone.locator(f".fabnb-dim[data-dimension='{dim}'] .fabnb-score").evaluate_all(
                        "bs => bs.map(b => Math.round(b.getBoundingClientRect().top))")
                    assert len(tops) == 5 and len(set(tops)) == 1, (dim, tops)  # one line of five buttons
                _click_score(phone, "diversity", 3)
                phone.wait_for_function("document.querySelector('.fabnb-rating .fabnb-progress')"
                                        ".textContent.includes('1 rated')", timeout=30_000)
            finally:
                browser.close()
    ratings = RatingStore(tmp_path / "ratings").ratings()
    assert ratings.set_index("dimension")["score"].to_dict() == {"accuracy": 4, "relevance": 2, "difficulty": 5,
                                                                 "diversity": 3}
    assert set(ratings["item_id"]) == {ids[0]}


def _status(url: str) -> int:
    """The HTTP status of a GET, redirects not followed."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        return conn.getresponse().status
    finally:
        conn.close()


def test_rating_app_beyond_loopback_opens_only_with_each_raters_token(tmp_path, fab_bench_dir):
    """Served on 127.0.0.2 (loopback range, so nothing leaves the machine): a link per rater, all else refused."""
    from urllib.parse import parse_qs

    from playwright.sync_api import sync_playwright

    from fabnb.qa.access import read_links

    qa = _hostile_qa(fab_bench_dir, tmp_path / "qa")
    ratings = tmp_path / "ratings"
    with _fabnb_rate_serve(tmp_path, "--qa", str(qa), "--ratings", str(ratings), "--host", "127.0.0.2",
                           "--raters", "ana,ben") as line:
        links = dict(read_links(ratings / "access" / "links.tsv"))
        assert set(links) == {"ana", "ben"} and (ratings / "access" / "links.tsv").stat().st_mode & 0o077 == 0
        tokens = {r: parse_qs(u.split("?", 1)[1])["token"][0] for r, u in links.items()}
        assert all(t not in line for t in tokens.values())  # the terminal never shows a token
        base = links["ana"].split("?", 1)[0]
        assert base.startswith("http://127.0.0.2:")
        assert _status(links["ana"]) == 200
        for refused in (base, f"{base}?rater=ana", f"{base}?rater=ana&token={tokens['ben']}",
                        f"{base}?token=not-a-token", f"{base}api/kernels"):
            assert _status(refused) in (302, 403), refused
        with sync_playwright() as pw:
            browser = _chromium(pw)
            try:
                context = browser.new_context()  # one browser profile: ana's cookie is in it
                page = context.new_page()
                page.goto(links["ana"])
                page.locator(".fabnb-rating").wait_for(state="visible", timeout=120_000)
                assert page.locator(".fabnb-rater-name").count() == 0  # no name prompt: the link says who
                _click_score(page, "accuracy", 3)
                # The same browser (ana's cookie) asking for ben's page without ben's token: the kernel refuses.
                other = context.new_page()
                other.goto(f"{base}?rater=ben")
                other.locator(".fabnb-app-message").wait_for(timeout=120_000)
                assert "personal rating link" in other.locator("body").inner_text()
                assert other.locator(".fabnb-rating").count() == 0
                stranger = browser.new_page()  # no cookie, no token: the server's refusal, said in the page
                stranger.goto(base)
                assert "needs your personal rating link" in stranger.locator("body").inner_text()
            finally:
                browser.close()
        # Issue 46 item 6: a rater's new page replaces her older page's kernel; the server keeps one per rater.
        # The pages above left two kernels: ana's, and the one her cookie opened for ben's link (it refused her).
        voila = _voila_process(base)
        assert _kernels(voila) == 2
        for _ in range(3):
            assert _status(links["ana"]) == 200
        assert _kernels(voila) == 2, "one rater's page loads each left a kernel"
        assert _status(links["ben"]) == 200
        assert _kernels(voila) == 2
    frame = RatingStore(ratings).ratings()
    assert frame["rater"].tolist() == ["ana"] and frame["score"].tolist() == [3]
    # Issue 46 item 3: no token reaches the log, refused requests included (standalone Voilà printed
    # "403 GET /?rater=ana&token=..." in full); jupyter_server's request logger writes token=[secret].
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert "token=[secret]" in log, log[-3000:]
    leaked = [t for t in tokens.values() if t in log]
    assert not leaked, "a rating token reached the server's log"


def _voila_process(base: str):
    """The Voilà process serving ``base`` (the child of ``fabnb rate --serve`` that runs fabnb.core.voila on its
    port)."""
    from urllib.parse import urlsplit

    import psutil

    port = f"--port={urlsplit(base).port}"
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if ("fabnb.core.voila" in cmd or "voila" in cmd) and port in cmd:
            return proc
    raise AssertionError(f"no fabnb.core.voila process serves {base}")


def _kernels(voila) -> int:
    """How many kernels Voilà runs now: its children that run ipykernel (a kernel being shut down is given a few
    seconds to end)."""
    def count():
        n = 0
        for c in voila.children(recursive=True):
            try:
                n += "ipykernel_launcher" in " ".join(c.cmdline()) and c.status() != "zombie"
            except Exception:  # noqa: BLE001 - a child that ended while we looked
                pass
        return n

    deadline, n = time.monotonic() + 10, count()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if (now := count()) == n:
            return n
        n = now
    return n


def test_rating_app_served_by_fabnb_rate_in_a_real_browser(tmp_path, fab_bench_dir):
    """``fabnb rate --serve``: a name prompt, two items rated with the keyboard, the scores read back from disk."""
    from playwright.sync_api import sync_playwright

    qa = _hostile_qa(fab_bench_dir, tmp_path / "qa")
    with _fabnb_rate_serve(tmp_path, "--qa", str(qa), "--ratings", str(tmp_path / "ratings")) as line:
        url = line.split("Rating app: ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        with sync_playwright() as pw:
            browser = _chromium(pw)
            try:
                rated = _rate_in_app(browser.new_page(), url, "expert", ["4523", "1254"])
            finally:
                browser.close()
    assert _scores_on_disk(tmp_path / "ratings", "expert") == {rated[0]: "4523", rated[1]: "1254"}


def test_rating_app_through_voila_inside_jupyterlab(tmp_path, fab_bench_dir):
    """The Binder link's case: Voilà as JupyterLab's server extension (voila/render/apps/rate.ipynb)."""
    from playwright.sync_api import sync_playwright

    qa = _hostile_qa(fab_bench_dir, tmp_path / "qa")
    work = tmp_path / "lab"
    (work / "apps").mkdir(parents=True)
    shutil.copy(ROOT / "apps" / "rate.ipynb", work / "apps")
    env = {"FABNB_QA_DIR": str(qa), "FABNB_RATINGS_DIR": str(tmp_path / "ratings")}
    with _jupyterlab(work, env, tmp_path / "lab.log") as (base, token), sync_playwright() as pw:
        browser = _chromium(pw)
        try:
            rated = _rate_in_app(browser.new_page(), f"{base}/voila/render/apps/rate.ipynb?token={token}",
                                 "binder-rater", ["3342"])
        finally:
            browser.close()
    assert _scores_on_disk(tmp_path / "ratings", "binder-rater") == {rated[0]: "3342"}


def test_fabnb_explore_serves_a_run_folder_as_a_page_of_its_own(tmp_path, monkeypatch):
    """``fabnb explore DIR``: the results explorer without JupyterLab, over a folder ``fabnb run`` wrote."""
    from playwright.sync_api import sync_playwright

    from test_experiment import run_on_stub

    run = run_on_stub(tmp_path, monkeypatch, sample=2)
    with _fabnb_rate_serve(tmp_path, str(run.output), command=("explore",), ready="Results explorer") as line:
        url = line.split("Results explorer: ", 1)[1].split()[0]
        assert "8 cells" in line
        with sync_playwright() as pw:
            browser = _chromium(pw)
            try:
                page = browser.new_page()
                page.goto(url)
                page.wait_for_selector(".fabnb-results[data-ready]", timeout=120_000)
                assert page.locator("tr.fabnb-row").count() == 8  # the static page's renderer, served
                assert page.locator(".jp-InputArea, .cm-editor").count() == 0  # a page, not a notebook
                assert page.request.get(url + "data/").status == 404  # its files, no listing
                # The summary's window sections (report/windows.json), each table under its heading.
                sections = page.locator("[data-part=sections]")
                assert "Effective window (85% of the reference score" in sections.locator("h3").all_inner_texts()[2]
                assert sections.locator("td", has_text="beyond the sweep").count() == 2  # modes A and B
                # What the run writes next shows on a reload: the page is made again from the stores.
                answers = Path(run.output) / "answers.jsonl"
                row = json.loads(answers.read_text().splitlines()[0])
                with answers.open("a") as fh:
                    fh.write(json.dumps({**row, "test_id": "Q-late", "answer": "late"}) + "\n")
                page.reload()
                page.wait_for_selector(".fabnb-results[data-ready]", timeout=120_000)
                assert page.locator(".count").inner_text().startswith("9 of 9 cells")
            finally:
                browser.close()
    bad = subprocess.run([sys.executable, "-m", "fabnb.cli", "explore", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "neither answers.jsonl nor scores.jsonl" in bad.stderr
