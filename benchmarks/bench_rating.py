"""Rating and curation: time to open 1,300 candidates, per-save latency, moving between items.

Every save is a real append + fsync to disk (the store's durability). Goals: under 1 s to
open, under 20 ms per save. Prints:

- the rating store: p50/p95/max save latency over 300 ratings; opening a session over
  1,300 items with 300 ratings stored and finding where to resume;
- the rating panel (the widget's Python side, no browser): latency of a score given
  through the panel (save + progress) and of moving to the next item;
- curation: reading 1,300 candidate QA files (variants of the released 200 pairs, so
  that near-duplicate groups exist) into a session with its Eq. 13 near-duplicate
  groups, with and without the knowledge-base term part; opening the curator widget;
  keep/drop latency through the widget; moving to the next candidate.

Usage: FABNB_FAB_BENCH_DIR=../shared/data/fab-bench python benchmarks/bench_rating.py [--smoke]
"""

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fabnb.corpus.terms import KnowledgeBase
from fabnb.data.datasets import fab_bench_dir
from fabnb.qa.curation import CurationSession
from fabnb.qa.rating import RatingSession, RatingStore
from fabnb.views.widgets import QACurator, RatingPanel


def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def line(label, ms):
    p50, p95 = np.percentile(ms, [50, 95])
    print(f"{label}: p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {max(ms):.2f} ms (n={len(ms)})")


def candidates(folder: Path, n: int = 1300) -> None:
    """n candidate files: the released pairs, then reworded variants of them."""
    released = sorted(p for p in (fab_bench_dir() / "QAs").rglob("*.json") if not p.name.startswith("_"))
    words = ["Briefly,", "In detail,", "Precisely,", "Concisely,", "Explain:", "Describe:"]
    for i in range(n):
        record = json.loads(released[i % len(released)].read_text())
        if i >= len(released):
            record["test_id"] = f"{record['test_id']}_v{i // len(released)}"
            record["question"] = f"{words[i % len(words)]} {record['question']}"
        (folder / f"{record['test_id']}.json").write_text(json.dumps(record))


SMOKE = "--smoke" in sys.argv  # the same path at tiny sizes (benchmarks/common.py)
N_ITEMS, N_SAVES, N_ACTIONS = (40, 10, 10) if SMOKE else (1300, 300, 200)


def main() -> None:
    if SMOKE:
        print("smoke mode: tiny sizes, the figures mean nothing", flush=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    items = pd.DataFrame({"item_id": [f"Q{i:04d}" for i in range(N_ITEMS)], "question": "x" * 300,
                          "ground_truth_answer": "y" * 600, "generation_metadata": [{"t": 0.5}] * N_ITEMS})
    with tempfile.TemporaryDirectory() as tmp:
        store = RatingStore(Path(tmp) / "ratings")
        session = RatingSession(items, "ana", store, seed=1)
        order = iter(session.order)
        line("store save (append + fsync)",
             timed(lambda: session.rate(next(order), accuracy=4, relevance=5, difficulty=3, diversity=2), N_SAVES))
        opens = []
        for _ in range(5):
            t = time.perf_counter()
            resumed = RatingSession(items, "ana", RatingStore(store.folder), seed=1)
            resumed.next_unrated()
            resumed.progress()
            opens.append(time.perf_counter() - t)
        print(f"open a rating session over 1,300 items with 300 rated, and resume: "
              f"median {statistics.median(opens) * 1000:.0f} ms over 5")
        t = time.perf_counter()
        panel = RatingPanel(RatingSession(items, "bo", store, seed=2))
        print(f"open the rating panel over 1,300 items: {(time.perf_counter() - t) * 1000:.0f} ms")
        scores = iter([1, 2, 3, 4, 5] * 100)
        line("panel: one score given (save + progress)",
             timed(lambda: panel.handle({"action": "rate", "dimension": "accuracy", "value": next(scores)}), N_ACTIONS))
        line("panel: next item", timed(lambda: panel.handle({"action": "next"}), N_ACTIONS))

        folder = Path(tmp) / "candidates"
        folder.mkdir()
        candidates(folder, N_ITEMS)
        kb = KnowledgeBase.default()
        CurationSession(folder, Path(tmp) / "warm", "warm")  # imports (sklearn, scipy) paid once, not timed
        for label, kwargs in (("without", {}), ("with", {"kb": kb})):
            loads = []
            for r in range(3):
                t = time.perf_counter()
                cur = CurationSession(folder, Path(tmp) / f"cur-{label}-{r}", "cur", **kwargs)
                loads.append(time.perf_counter() - t)
            print(f"open 1,300 candidate files with near-duplicate groups, {label} KB terms: "
                  f"median {statistics.median(loads) * 1000:.0f} ms over 3 "
                  f"({(cur.candidates.dup_size > 1).sum()} candidates in "
                  f"{cur.candidates.query('dup_size > 1').dup_group.nunique()} groups)")
        t = time.perf_counter()
        view = QACurator(cur, export_to=Path(tmp) / "export")
        print(f"open the curator widget over 1,300 candidates: {(time.perf_counter() - t) * 1000:.0f} ms")
        actions = iter(["keep", "drop"] * 100)
        line("curator: keep / drop through the widget (save + progress + next)",
             timed(lambda: view.handle({"action": next(actions)}), N_ACTIONS))
        line("curator: next candidate", timed(lambda: view.handle({"action": "next"}), N_ACTIONS))


if __name__ == "__main__":
    main()
