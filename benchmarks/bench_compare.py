"""``fabnb compare`` at the paper's scale: two runs of 8,800 cells and 52,800 scores each, paired.

The stores of ``bench_explorer.py`` (200 questions x 4 systems x 11 windows, six metrics) twice: the base, and a
candidate whose scores are the base's minus 0.02 plus noise. Figures: the time to read both runs, pair them and
judge every metric and window (308 rows, the bootstrap over 200 questions each) and the gate; the time to write
``compare.md`` and ``compare.json`` and their sizes; and the verdict, which must be a regression for a drop of
0.02 at margin 0 and no regression at margin 0.05.

Usage: python benchmarks/bench_compare.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_explorer import PAPER_CONTEXTS, write_stores  # noqa: E402  (benchmarks/bench_explorer.py)

from common import add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)


def candidate_of(base: Path, out: Path, drop: float, seed: int = 1) -> None:
    """A copy of ``base`` whose ok scores are ``drop`` lower plus N(0, 0.05) noise, clipped to 0-1."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True)
    (out / "answers.jsonl").write_bytes((base / "answers.jsonl").read_bytes())
    (out / "manifest.json").write_bytes((base / "manifest.json").read_bytes())
    with open(base / "scores.jsonl") as src, open(out / "scores.jsonl", "w") as dst:
        for line in src:
            r = json.loads(line)
            if r["score"] is not None:
                r["score"] = float(np.clip(r["score"] - drop + rng.normal(0, 0.05), 0, 1))
            dst.write(json.dumps(r) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    add_smoke(parser)
    args = apply_smoke(parser.parse_args())
    from fabnb.experiment.comparison import compare_runs

    work = Path(tempfile.mkdtemp(prefix="fabnb-bench-compare-"))
    questions, contexts = (4, (4, 8)) if args.smoke else (200, PAPER_CONTEXTS)
    write_stores(work / "base", questions=questions, contexts=contexts)
    candidate_of(work / "base", work / "candidate", drop=0.02)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; two runs of "
          f"{4 * len(contexts) * questions:,} cells and {24 * len(contexts) * questions:,} scores")
    start = time.perf_counter()
    c = compare_runs(work / "base", work / "candidate", margin=0.0)
    compared = time.perf_counter() - start
    start = time.perf_counter()
    md, js = c.write(work / "out")
    written = time.perf_counter() - start
    loose = compare_runs(work / "base", work / "candidate", margin=0.05).verdict()
    print("| what | figure |\n|---|---|")
    print(f"| read, pair and judge {len(c.table)} rows and the gate | {compared:.1f} s |")
    print(f"| write compare.md and compare.json | {written:.2f} s ({md.stat().st_size / 1e3:.0f} kB and "
          f"{js.stat().st_size / 1e6:.1f} MB) |")
    print(f"| verdict for a drop of 0.02: at margin 0 / at margin 0.05 | {c.verdict()} / {loose} |")


if __name__ == "__main__":
    main()
