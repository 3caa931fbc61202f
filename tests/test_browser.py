"""A real browser (Debian's chromium, driven by Playwright) rates items in a real JupyterLab.

The test starts JupyterLab on 127.0.0.1, opens the rating notebook (05_rate_pairs),
runs it, rates one item with the keyboard and one with the mouse, downloads the
ratings, and then reads the store on disk. The QA items carry hostile HTML in their
questions: it must show as text and never run. ``.ci/run`` installs chromium from the
OS packages; without it this test fails (it is not skipped).
"""

from __future__ import annotations

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

from conftest import ROOT
from fabnb.rating import RatingStore

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script> '
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path, fab_bench_dir):
    """JupyterLab on loopback over a folder with the rating notebook and three hostile QA files."""
    qa = tmp_path / "qa"
    qa.mkdir()
    for path in sorted((fab_bench_dir / "QAs").rglob("ROB_00*.json"))[:3]:
        record = json.loads(path.read_text())
        record["question"] = HOSTILE + record["question"]
        (qa / path.name).write_text(json.dumps(record))
    work = tmp_path / "lab"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "05_rate_pairs.ipynb", work)
    port, token = _free_port(), "fabnb-browser-test"
    env = {**os.environ, "FABNB_QA_DIR": str(qa), "FABNB_RATINGS_DIR": str(tmp_path / "ratings"),
           "FABNB_RATER": "browser", "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime")}
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", f"--ServerApp.root_dir={work}",
         "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.close()
                raise RuntimeError("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
    yield {"url": f"{base}/lab/tree/05_rate_pairs.ipynb?token={token}", "store": tmp_path / "ratings",
           "log": tmp_path / "lab.log", "downloads": tmp_path / "downloads"}
    os.killpg(proc.pid, signal.SIGTERM)  # the server and its kernels
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def test_rating_notebook_in_a_real_browser(lab):
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH: .ci/run installs Debian's chromium (apt-get install chromium)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(lab["url"])
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext", timeout=90_000)
            page.wait_for_function("window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                                   ".connectionStatus === 'connected'", timeout=90_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
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
            for key in "4523":
                page.keyboard.press(key)
                page.wait_for_timeout(150)  # each key is one save; let the panel redraw
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
        finally:
            browser.close()

    assert filename == "ratings-browser.csv"
    assert downloaded.count("\n") == 9  # header + 2 items x 4 dimensions

    # The store on disk holds exactly what was rated, one fsynced record per score given.
    store = RatingStore(lab["store"])
    records, problems = store.records()
    assert problems.empty and len(records) == 8
    ratings = store.ratings().pivot_table(index="item_id", columns="dimension", values="score")
    assert ratings.loc[first].to_dict() == {"accuracy": 4, "relevance": 5, "difficulty": 2, "diversity": 3}
    assert ratings.loc[second].to_dict() == {"accuracy": 1, "relevance": 2, "difficulty": 5, "diversity": 4}
