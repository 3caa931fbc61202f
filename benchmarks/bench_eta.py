"""The plan's time estimate against the run it estimates: ``examples/offline.toml`` on the embedded model.

The plan (with its probes) gives an ETA per stage; then the same experiment runs into a fresh
output folder with a fresh response cache, so nothing is replayed from an earlier run (a call
whose prompt an earlier call of the same run sent, such as a judge prompt of two windows that
retrieved the same text, is answered from the run's own cache, as in any run). Figures printed,
with the machine: the plan's ETA, the run's wall time per stage and in all, and their ratios (the
target: within 35% on an idle machine), and each stage's calls made and answered from the cache.
Run it on an idle machine: a loaded one slows the run, not the probes.

Usage: python benchmarks/bench_eta.py [--file examples/offline.toml]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from common import add_smoke, apply_smoke  # benchmarks/common.py

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(ROOT / "examples" / "offline.toml"))
    add_smoke(parser)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="fabnb-eta-"))
    if args.smoke:  # the offline example cut to one question, one window and one metric
        text = Path(args.file).read_text().replace("sample = 3 ", "sample = 1 ").replace(
            "windows = [0.5, 1, 2] ", "windows = [0.5] ").replace('metrics = "all" ', 'metrics = ["relevance"] ')
        (scratch / "smoke.toml").write_text(text)
        apply_smoke(args, file=str(scratch / "smoke.toml"))
    os.environ["FABNB_CACHE_DIR"] = str(scratch / "cache")  # every call made, none replayed

    import numpy as np

    import fabnb.models.llm
    from fabnb.experiment import Experiment, run, run_experiment

    exp = Experiment.from_file(args.file, output=scratch / "out")
    stages: dict[str, float] = {}
    took: dict[str, float] = {}
    calls: list[dict] = []
    said: list[str] = []

    current = ["plan"]  # the stage each LLM call belongs to; the plan's probes come first

    def timed(stage, fn):
        def wrapper(*a, **k):
            current[0], t = stage, time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                took[stage] = time.perf_counter() - t
        return wrapper

    add = fabnb.models.llm._Usage.add
    fabnb.models.llm._Usage.add = lambda self, **r: (calls.append({**r, "stage": current[0]}), add(self, **r))[1]
    run._answer_stage, run._judge_stage = timed("answers", run._answer_stage), timed("judge", run._judge_stage)
    start = time.perf_counter()
    result = run_experiment(exp, progress=False, echo=said.append)
    total = time.perf_counter() - start
    table = result.plan.table
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
    print("the run per stage: " + ", ".join(f"{s} {t / 60:.1f} min (ETA / run {stages.get(s, float('nan')) / t:.2f})"
                                         for s, t in took.items()))
    if len(result.plan.probes):
        p = result.plan.probes.iloc[-1]  # the judge's endpoint is probed last
        print(f"the judge's probe: {p['s_per_prompt_token'] * 1000:.2f} ms per prompt token, "
              f"{p['s_per_completion_token'] * 1000:.1f} ms per completion token")
    # Calls answered within the run from its own fresh cache (identical prompts) take no time.
    for stage in ["plan", *took]:
        made = [c for c in calls if c["stage"] == stage]
        fresh = [c["latency_s"] for c in made if not c["cached"]]
        print(f"{stage}: {len(made)} calls, {len(made) - len(fresh)} from the run's own cache; the others "
              f"{np.mean(fresh) if fresh else float('nan'):.2f} s each on average")
    print(said[-1])


if __name__ == "__main__":
    main()
