"""fabnb inside JupyterLab, measured in chromium against the real server extension.

Figures (median of 5 unless said):

- the results viewer opening the paper-scale run (bench_explorer's stores: 8,800 answers with their sources,
  52,800 scores): from the double-click's command to the first page of rows drawn, cold (the open builds the
  server's explorer: the first, whose imports were made when the sidebar first listed the runs as the page's load
  does, and two more after a store's change made the server read it again) and warm (the explorer kept; median
  of 5); and the summary route's work in a fresh process with nothing warmed (median of 3);
- a filter's round trip (a select changed in the viewer, the request, the server's explorer, the rows drawn);
- the runs sidebar's status call (``GET /fabnb/api/runs``) with 20 runs under the root, over HTTP: the first
  listing that finds a run starts the viewer's imports in a thread (``Results.warm``), so the 20 calls right after
  it are given apart from 20 taken once that is done;
- what the server extension adds to a Jupyter server's start (to its first answer of ``/api/status``): 15 pairs of
  starts, with fabnb enabled and without (which goes first alternates), each server stopped before the next;
  the median and quartiles of the pairs' differences.

Usage: python benchmarks/bench_jupyter.py [--smoke]
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_explorer import write_stores  # noqa: E402

from fabnb.experiment.progress import write_marker  # noqa: E402

SMOKE = "--smoke" in sys.argv  # the same path at tiny sizes (benchmarks/common.py)
STARTS = 1 if SMOKE else 15  # pairs of Jupyter server starts, with and without fabnb

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, app: str = "lab", fabnb: bool = True) -> tuple[subprocess.Popen, str, float]:
    """A Jupyter server over ``root``: the process, its base URL, and seconds to its first /api/status."""
    port, token = free_port(), "bench"
    args = [sys.executable, "-m", "jupyter", app, "--no-browser", "--allow-root", f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}"]
    if app == "lab":
        args += ["--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None"]
    if not fabnb:
        args.append("--ServerApp.jpserver_extensions=fabnb=False")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": tempfile.mkdtemp()}
    start = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
            return proc, f"http://127.0.0.1:{port}", time.perf_counter() - start
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the Jupyter server did not start") from None
            time.sleep(0.02)


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)


def twenty_runs(root: Path) -> None:
    for i in range(20):
        out = root / "runs" / f"run{i:02d}"
        out.mkdir(parents=True)
        write_marker(out, f"run{i}", "experiment.toml")
        (out / "manifest.json").write_text(json.dumps({"name": f"run{i}", "runs": [{"status": "finished"}],
                                                       "stages": [{"stage": "answers", "planned": 8800,
                                                                   "ok": 8800, "failed": 0}]}))


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="fabnb-bench-jupyter-"))
    paper = root / "paper"
    if SMOKE:
        print("smoke mode: tiny sizes, the figures mean nothing", flush=True)
    write_stores(paper, questions=8, contexts=(4, 8)) if SMOKE else write_stores(paper)  # 64 answers: a full page
    write_marker(paper, "paper-scale", "paper.toml")
    twenty_runs(root)
    size = sum(p.stat().st_size for p in paper.glob("*.jsonl")) / 1e6
    # The summary route's work in a fresh process, nothing warmed: what a double-click costs the server when no
    # listing came first (imports, the stores read, the explorer built).
    unwarmed = statistics.median(float(subprocess.run(
        [sys.executable, "-c", "import time; t = time.perf_counter(); from fabnb.jupyter.api import Results; "
         f"Results({str(root)!r}).summary('paper'); print(time.perf_counter() - t)"],
        check=True, capture_output=True, text=True).stdout) for _ in range(1 if SMOKE else 3))

    # Starts in pairs, with fabnb and without, each server stopped before the next starts: a drift of the machine
    # over the minute this takes falls on both sides alike, and the pairs' differences are what is reported.
    starts = {True: [], False: []}
    for i in range(STARTS):
        for enabled in ((True, False) if i % 2 == 0 else (False, True)):  # the order alternates: no side goes first
            proc, _, seconds = start_server(root, "server", fabnb=enabled)
            stop(proc)
            starts[enabled].append(seconds)
    start_with, start_without = statistics.median(starts[True]), statistics.median(starts[False])
    added = sorted(w - o for w, o in zip(starts[True], starts[False]))
    quartiles = statistics.quantiles(added, n=4) if len(added) > 1 else [added[0]] * 3

    from playwright.sync_api import sync_playwright

    proc, base, _ = start_server(root)
    try:
        def listing() -> float:
            t = time.perf_counter()
            body = urllib.request.urlopen(urllib.request.Request(f"{base}/fabnb/api/runs",
                                                                 headers={"Authorization": "token bench"})).read()
            assert len(json.loads(body)) == 21
            return time.perf_counter() - t

        listing()  # the first listing: it starts the viewer's imports in a thread (Results.warm)
        warming = [listing() for _ in range(20)]  # these share the processor with those imports
        time.sleep(3)
        status = [listing() for _ in range(20)]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/lab?reset&token=bench")
            page.wait_for_selector(".jp-Launcher", timeout=120_000)
            opens, colds = [], []
            for i in range(2 if SMOKE else 8):  # 0, 3, 6 build the server's explorer (cold); the others reuse it (warm)
                if i % 3 == 0 and i:  # a store that changed is read again: the next open builds the explorer anew
                    os.utime(paper / "scores.jsonl")
                page.evaluate("() => window.jupyterapp.commands.execute('application:close-all')")
                page.wait_for_function("!document.querySelector('.fabnb-viewer')", timeout=30_000)
                t = time.perf_counter()
                page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:open', {path: "
                              "'paper/run.fabnb', factory: 'FAB-Bench results'}); }")
                page.frame_locator(".fabnb-viewer iframe.fabnb-results-frame").locator(
                    ".fabnb-results[data-ready]").wait_for(state="attached", timeout=120_000)
                (colds if i % 3 == 0 else opens).append(time.perf_counter() - t)
            results = page.frame_locator(".fabnb-viewer iframe.fabnb-results-frame").first
            trips = []  # the page filters in the browser: no round trip to the server
            for i, system in enumerate(["system-1", "system-2", "system-3", "system-0", "system-1", "system-2"]):
                t = time.perf_counter()
                results.locator("select[data-filter='system']").select_option(system)
                results.locator("tr.fabnb-row td", has_text=system).first.wait_for(timeout=60_000)
                trips.append(time.perf_counter() - t)
            browser.close()
    finally:
        stop(proc)

    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}")
    print(f"paper-scale run: {size:.0f} MB of stores (8,800 answers with sources, 52,800 scores)")
    print(f"results viewer opens it (double-click to its page ready, 100 rows drawn): cold "
          f"{' / '.join(f'{c:.2f}' for c in colds)} s (the first with its imports warmed, then after a store changed), "
          f"warm median {statistics.median(opens) * 1000:.0f} ms; the summary route alone in a fresh process "
          f"with nothing warmed: {unwarmed:.2f} s (median of 3)")
    print(f"a filter in the page (select to rows drawn, as Playwright sees it): median "
          f"{statistics.median(trips[1:]) * 1000:.0f} ms, "
          f"worst {max(trips[1:]) * 1000:.0f} ms")
    print(f"runs sidebar status call, 21 runs under the root: median {statistics.median(status) * 1000:.1f} ms, "
          f"worst {max(status) * 1000:.1f} ms; the 20 right after the first, while the viewer's imports warm: "
          f"median {statistics.median(warming) * 1000:.1f} ms, worst {max(warming) * 1000:.1f} ms")
    print(f"Jupyter server start to /api/status, {STARTS} pairs: median {start_with:.2f} s with fabnb, "
          f"{start_without:.2f} s without; added per pair: median {statistics.median(added) * 1000:+.0f} ms, "
          f"quartiles {quartiles[0] * 1000:+.0f} / {quartiles[2] * 1000:+.0f} ms")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
