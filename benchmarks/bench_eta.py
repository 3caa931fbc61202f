"""The plan's time estimate against the run it estimates: ``examples/offline.toml`` on the embedded model.

The plan (with its probes) gives an ETA per stage; then the same experiment runs into a fresh
output folder with a fresh response cache, so every call is really made. Figures printed, with
the machine: the plan's ETA, the run's wall time per stage and in all, and their ratio (the
target: within 35% on an idle machine). Run it on an idle machine: a loaded one slows the run,
not the probes.

Usage: python benchmarks/bench_eta.py [--file examples/offline.toml]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(ROOT / "examples" / "offline.toml"))
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="fabnb-eta-"))
    os.environ["FABNB_CACHE_DIR"] = str(scratch / "cache")  # every call made, none replayed

    from fabnb.experiment import Experiment, run_experiment

    exp = Experiment.from_file(args.file, output=scratch / "out")
    stages: dict[str, float] = {}
    said: list[str] = []
    start = time.perf_counter()
    run = run_experiment(exp, progress=False, echo=said.append)
    total = time.perf_counter() - start
    table = run.plan.table
    eta = float(table["seconds"].sum()) if "seconds" in table else float("nan")
    for stage, group in table.groupby("stage"):
        stages[stage] = float(group["seconds"].sum())
    load = os.getloadavg()[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load:.2f} when the run ended; Python {platform.python_version()}")
    print(f"experiment: {args.file} ({int(table['calls'].sum())} calls planned)")
    print("plan ETA per stage: " + ", ".join(f"{s} {t / 60:.1f} min" for s, t in stages.items()))
    print(f"plan ETA {eta / 60:.1f} min; the run took {total / 60:.1f} min (plan included); "
          f"ratio run / ETA = {total / eta:.2f}")
    print(said[-1])


if __name__ == "__main__":
    main()
