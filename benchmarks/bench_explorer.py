"""The results explorer at the paper's scale: time to a first page, and to a filter change.

Stores of the shape ``run_grid`` and ``judge_results`` write: 200 questions x 4 models x the paper's
11 windows (4K-32K) x mode A = 8,800 answers, each with four retrieved sources of 512 tokens of
text, and six metrics = 52,800 scores (1% of them judge failures). From an experiment's output
folder (``--folder``) or generated. Figures: the stores' size on disk, the time from the folder to
the notebook widget's data (every cell's compact row, which the one renderer filters in the browser:
``bench_page.py`` times that), a part of the cells' texts as the page asks for it, and the Python
model's filters; median of 5 runs each.

Usage: python benchmarks/bench_explorer.py [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from fabnb.core.language import sure_language  # what the grid stores with each answer for the sanity flags
from fabnb.core.schema import METRICS
from fabnb.core.text import word_measures

from common import add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)

PAPER_CONTEXTS = (4, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32)


def write_stores(folder: Path, seed: int = 0, questions: int = 200, contexts=PAPER_CONTEXTS) -> None:
    """8,800 answers with sources and 52,800 scores (by default), written as the stores write them (one JSON line
    each)."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"word{i}" for i in range(3000)]
    passage = lambda: " ".join(rng.choice(vocabulary, 380))  # noqa: E731 - about 512 tokens
    folder.mkdir(parents=True, exist_ok=True)
    ids = [f"Q{i:03d}" for i in range(questions)]
    # Every answer here is the same kind of text: the detector's verdict on one stands for all (the grid stores
    # each answer's; 8,800 verdicts would take 9 s of writing what the benchmarks time reading).
    language = sure_language(passage()[:1500])
    with open(folder / "answers.jsonl", "w") as a, open(folder / "scores.jsonl", "w") as s:
        for m in range(4):
            for k in contexts:
                for tid in ids:
                    key = {"system": f"system-{m}", "model": f"model-{m}", "context_k": float(k), "mode": "A",
                           "test_id": tid}
                    sources = [{"id": f"c{j}", "doc_id": f"D{rng.integers(300)}", "text": passage(),
                                "score": float(1 - j / 10)} for j in range(4)]
                    answer = passage()[:1500]
                    n_words, repetition = word_measures(answer)
                    a.write(json.dumps({**key, "output_tokens": 1024, "status": "ok", "cause": "", "error": "",
                                        "answer": answer, "answer_words": n_words, "answer_repetition": repetition,
                                        "answer_language": language,
                                        "n_sources": 4, "sources_exposed": True,
                                        "sources": sources, "gold_retrieved": bool(rng.random() < 0.7),
                                        "ts": time.time()}) + "\n")
                    for metric in METRICS:
                        failed = rng.random() < 0.01
                        s.write(json.dumps({**key, "metric": metric, "replicate": 0,
                                            "status": "error" if failed else "ok",
                                            "score": None if failed else float(rng.uniform(0.3, 0.95)),
                                            "raw_score": int(rng.integers(3, 10)), "scoring": "weighted",
                                            "reason": "The answer is specific and grounded in the retrieved text.",
                                            "cause": "not-json" if failed else "", "ts": time.time()}) + "\n")
    (folder / "manifest.json").write_text(json.dumps({"name": "bench", "question_ids": ids}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", help="an experiment output folder (default: generated stores)")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, runs=1)
    import pandas as pd

    from fabnb.views.explorer import Explorer
    from fabnb.views.widgets import ResultsExplorer

    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="fabnb-bench-explorer-")) / "run"
    if not args.folder:
        write_stores(folder, questions=4 if args.smoke else 200, contexts=(4, 8) if args.smoke else PAPER_CONTEXTS)
    ids = json.loads((folder / "manifest.json").read_text())["question_ids"]
    questions = pd.DataFrame({"test_id": ids, "question": [f"question {t}" for t in ids],
                              "ground_truth_answer": "x", "test_type": ["robustness", "multi_hop"] * (len(ids) // 2),
                              "question_format": "SUBJECTIVE", "gold_doc_ids": [("D1",)] * len(ids)})
    size = sum(p.stat().st_size for p in folder.glob("*.jsonl")) / 1e6
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"stores: {sum(1 for _ in open(folder / 'answers.jsonl')):,} answers and "
          f"{sum(1 for _ in open(folder / 'scores.jsonl')):,} scores, {size:.0f} MB on disk")
    ready, parts, filters = [], [], []
    for _ in range(getattr(args, "runs", 5)):
        start = time.perf_counter()
        ex = Explorer.from_folder(folder, questions=questions)
        widget = ResultsExplorer(ex)  # every cell's compact row, for the renderer
        ready.append(time.perf_counter() - start)
        widget.send = lambda message: None  # no front end here
        start = time.perf_counter()
        widget.handle({"action": "load", "name": "detail-0000"})
        parts.append(time.perf_counter() - start)
        assert widget.error == "", widget.error
        for change in ({"system": "system-2"}, {"context_k": 28.0}, {"metric": "depth", "score_max": 0.5},
                       {"retrieval_miss": True}, {"text": "word17"}):
            start = time.perf_counter()
            ex.filter(**change).view()  # the Python model's filter (the renderer filters in the browser: bench_page)
            filters.append(time.perf_counter() - start)
            ex.filters = {}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| what | figure |\n|---|---|")
    print(f"| folder to the notebook widget's data ({len(widget.cells['rows']):,} compact rows) | median "
          f"{statistics.median(ready):.2f} s (min {min(ready):.2f}) |")
    print(f"| a part asked by the page (500 cells' answers, reasons and sources) | median "
          f"{statistics.median(parts) * 1000:.0f} ms |")
    print(f"| a filter of the Python model (Explorer.filter, then view) | median "
          f"{statistics.median(filters) * 1000:.0f} ms, worst {max(filters) * 1000:.0f} ms over {len(filters)} |")
    print(f"| peak RSS | {rss:.0f} MB |")


if __name__ == "__main__":
    main()
