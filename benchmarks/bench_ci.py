"""The suite's time by lane: each test's duration summed by its marker (model, notebook, browser, binder, none),
with the machine, so an issue can state its CI delta measured on the same machine as its baseline.

Two ways in:

- ``python benchmarks/bench_ci.py [PYTEST ARGS ...]`` runs ``python -m pytest`` with those arguments (default: the
  whole suite) and ``FABNB_DURATIONS`` set, then prints the sums;
- ``python benchmarks/bench_ci.py --from FILE`` prints the sums of a file written earlier: ``.ci/run`` sets
  ``FABNB_DURATIONS`` for the README's test command and prints this table at its end.

A test's duration is its setup, call and teardown; with ``-n`` the lanes' sums are CPU-side seconds spent in tests
(summed over the workers), not wall time. ``--smoke`` runs one small test module (the suite runs this).

Usage: python benchmarks/bench_ci.py [--from FILE | --smoke | PYTEST ARGS ...]
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANES = ("model", "notebook", "browser", "binder")


def read(path: Path) -> dict[str, dict]:
    """test -> {"seconds": summed phases, "lane": its first lane marker or "none", "outcome": the call's}."""
    tests: dict[str, dict] = defaultdict(lambda: {"seconds": 0.0, "lane": "none", "outcome": ""})
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        t = tests[r["test"]]
        t["seconds"] += r["seconds"]
        t["lane"] = next((m for m in LANES if m in r["markers"]), "none")
        if r["when"] == "call" or r["outcome"] != "passed":
            t["outcome"] = t["outcome"] if t["outcome"] in ("failed", "skipped") else r["outcome"]
    return dict(tests)


def table(tests: dict[str, dict], top: int = 15) -> str:
    """The sums by lane, then the ``top`` longest tests, as Markdown."""
    lanes: dict[str, list] = defaultdict(list)
    for t in tests.values():
        lanes[t["lane"]].append(t["seconds"])
    total = sum(sum(v) for v in lanes.values())
    rows = ["| lane | tests | seconds | share |", "|---|---:|---:|---:|"]
    for lane in (*LANES, "none"):
        if lanes.get(lane):
            rows.append(f"| {lane} | {len(lanes[lane])} | {sum(lanes[lane]):,.0f} | "
                        f"{sum(lanes[lane]) / total:.0%} |")
    rows.append(f"| all | {len(tests)} | {total:,.0f} | 100% |")
    longest = sorted(tests.items(), key=lambda kv: -kv[1]["seconds"])[:top]
    rows += ["", "| longest tests | lane | seconds |", "|---|---|---:|"]
    rows += [f"| `{name}` | {t['lane']} | {t['seconds']:,.1f} |" for name, t in longest]
    return "\n".join(rows)


def main() -> None:
    args = sys.argv[1:]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.2f}")
    if args[:1] == ["--from"]:
        path = Path(args[1])
    else:
        if args[:1] == ["--smoke"]:
            print("smoke mode: tiny sizes, the figures mean nothing", flush=True)
            args = ["tests/test_stats.py", "-q", "-p", "no:cacheprovider", "-n", "0"]
        path = Path(tempfile.mkdtemp(prefix="fabnb-bench-ci-")) / "durations.jsonl"
        done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT,
                              env={**os.environ, "FABNB_DURATIONS": str(path)})
        if done.returncode not in (0, 1):  # 1: some tests failed, their time still counts
            raise SystemExit(f"pytest exited {done.returncode}; no durations to sum")
    if not path.is_file():
        raise SystemExit(f"{path}: no durations file; run pytest with FABNB_DURATIONS={path} first")
    print(table(read(path)))


if __name__ == "__main__":
    main()
