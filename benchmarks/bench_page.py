"""The static results page (``fabnb export RUN_DIR --html OUT``) at the paper's scale, in chromium from ``file://``.

Stores of the paper's scale as ``bench_explorer.py`` writes them (200 questions x 4 systems x 11 windows = 8,800
answers with four sources each, 52,800 scores), then the export, then Debian's chromium (headless, through
Playwright) opening ``index.html`` from ``file://``. Figures: the export's time and the page's size on disk (its
largest file), the time from navigation to a page ready to filter (the page's summary, all 8,800 rows filterable,
the first 100 shown), the renderer's own open time, the median and worst filter change (the filter, then the rows
shown, as measured inside the page), and a cell opened (its detail file loaded by a ``<script src>``). Goals from
issue 53: open under 2 s, a filter under 150 ms. Median of 3 loads.

Usage: python benchmarks/bench_page.py [--folder DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_explorer import PAPER_CONTEXTS, write_stores  # noqa: E402  (benchmarks/bench_explorer.py)

from common import add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", help="an experiment output folder (default: generated stores)")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, loads=1)
    from playwright.sync_api import sync_playwright

    from fabnb.views.page import export_page

    work = Path(tempfile.mkdtemp(prefix="fabnb-bench-page-"))
    folder = Path(args.folder) if args.folder else work / "run"
    if not args.folder:
        write_stores(folder, questions=4 if args.smoke else 200, contexts=(4, 8) if args.smoke else PAPER_CONTEXTS)
    import json

    import pandas as pd

    ids = json.loads((folder / "manifest.json").read_text())["question_ids"]
    questions = pd.DataFrame({"test_id": ids, "question": [f"question {t}" for t in ids], "ground_truth_answer": "x",
                              "test_type": ["robustness", "multi_hop"] * (len(ids) // 2)})
    start = time.perf_counter()
    index = export_page(folder, work / "page", questions=questions)
    exported = time.perf_counter() - start
    files = [p for p in (work / "page").rglob("*") if p.is_file()]
    largest = max(files, key=lambda p: p.stat().st_size)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB (largest {largest.name}, "
          f"{largest.stat().st_size / 1e6:.1f} MB)")
    ready, own, changes, opened = [], [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS, headless=True)
        for _ in range(getattr(args, "loads", 3)):
            page = browser.new_context().new_page()
            start = time.perf_counter()
            page.goto(index.as_uri())
            page.wait_for_selector("body[data-ready]", timeout=60_000)
            ready.append(time.perf_counter() - start)
            own.append(page.evaluate("window.FABNB_TIMING.open_ms"))
            n = page.evaluate("window.FABNB.data.cells.rows.length")
            system = page.evaluate("window.FABNB.data.cells.rows[0][0]")
            for name, value in (("system", system), ("context_k", "8"), ("system", ""), ("state", "judged"),
                                ("context_k", "")):
                page.select_option(f"[data-filter={name}]", value)
                changes.append(page.evaluate("window.FABNB_TIMING.filter_ms"))
            for name, value in (("min", "0.5"), ("text", "Q01"), ("text", ""), ("min", "")):
                page.fill(f"[data-filter={name}]", value)
                changes.append(page.evaluate("window.FABNB_TIMING.filter_ms"))
            start = time.perf_counter()
            page.locator("tr.fabnb-row").last.click()
            page.wait_for_selector("[data-part=detail] .answer", timeout=30_000)
            opened.append(time.perf_counter() - start)
            page.context.close()
        browser.close()
    print("| what | figure |\n|---|---|")
    print(f"| export ({n:,} cells) | {exported:.1f} s |")
    print(f"| navigation to a page ready to filter (median of {len(ready)}) | {statistics.median(ready):.2f} s "
          f"(the renderer's own part {statistics.median(own):.0f} ms) |")
    print(f"| a filter change and the rows shown | median {statistics.median(changes):.1f} ms, worst "
          f"{max(changes):.1f} ms over {len(changes)} changes |")
    print(f"| open one cell (its detail file loaded) | median {statistics.median(opened) * 1000:.0f} ms |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
