"""Judging across processes: past a few hundred calls in flight one core is the limit, so the calls go to workers.

:func:`judge_results` with ``workers=N`` deals the cells still to score out to N shards before any
is asked: this process scores the first on its own event loop, and N - 1 worker processes
(``python -m fabnb.judge.workers SPEC``) score the others, each on an event loop of its own with
``concurrency / N`` calls in flight. Every worker appends to the one score store, which this
process holds (``records.hold``) for the whole stage: no cell is asked twice and a budget's
``limit`` counts every cell. The judge's key reaches a worker in its environment, never in a file
or an argument; the rest of the worker's client is :meth:`fabnb.models.llm.LLM.settings`. A worker dies
with this process (``process.start_process``), so a killed run leaves no worker asking.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

__all__ = ["judge_in_workers", "shards"]

_KEY_VARIABLE = "FABNB_WORKER_API_KEY"


def shards(cells: list, n: int) -> list[list]:
    """``cells`` dealt round-robin into ``n`` shards (each metric and window spread over every worker).

    >>> shards(list(range(7)), 3)
    [[0, 3, 6], [1, 4], [2, 5]]
    """
    return [cells[i::n] for i in range(n)]


def judge_in_workers(cells: list[tuple], questions: dict, llm, store, settings: dict, workers: int, bar=None, *,
                     here, entry: str, extra: dict | None = None) -> list[dict]:
    """Score ``cells`` over ``workers`` processes (this one included) into ``store``; the failed records.

    ``here(cells, questions, llm, store, settings, bar)`` scores this process's shard; a worker calls ``entry``
    (``"module:function"``, called with the worker's spec and its LLM) on its own. Named, not imported: this module
    sits below the stage that uses it. ``extra`` goes into every worker's spec."""
    from ..core.process import start_process, stop_process
    from ..models.llm import LLM

    if type(llm) is not LLM:
        raise ValueError(f"workers > 1 needs a plain fabnb.models.llm.LLM judge, not a {type(llm).__name__} (the "
                         "embedded model serves one call at a time: more processes would only queue at its server).")
    parts = shards(cells, workers)
    share = max(1, llm.concurrency // workers)
    spec = {"llm": {**llm.settings(), "concurrency": share}, "store": str(store.path), "settings": settings,
            "entry": entry, **(extra or {})}
    # This fabnb first (an empty entry would add the working folder).
    path = [str(Path(__file__).resolve().parents[2]), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    if llm._secret() is not None:
        env[_KEY_VARIABLE] = llm._secret()
    procs, files, outs = [], [], []
    try:
        for part in parts[1:]:
            fd, path = tempfile.mkstemp(prefix="fabnb-judge-worker-", suffix=".json")
            used = {c[0]["test_id"] for c in part}
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({**spec, "cells": part, "questions": {k: v for k, v in questions.items() if k in used}},
                          fh, default=str)
            files.append(path)
            outs.append(open(path + ".out", "w", encoding="utf-8"))
            procs.append(start_process([sys.executable, "-m", "fabnb.judge.workers", path], env=env, stdout=outs[-1]))
        mine = llm.with_defaults()
        mine.concurrency = share
        failures = here(parts[0], questions, mine, store, settings, bar)
        for proc, part, path in zip(procs, parts[1:], files):
            proc.wait()
            if bar is not None:
                bar.update(len(part))
            out = Path(path + ".out").read_text(encoding="utf-8")
            last = out.strip().splitlines()[-1] if out.strip() else ""
            if proc.returncode != 0 or not last.startswith("{"):
                raise RuntimeError(f"a judge worker ended with exit code {proc.returncode}; its output ends: "
                                   f"{out.strip()[-600:]}. The scores it stored are kept; a rerun asks the rest.")
            failures += json.loads(last)["failures"]
        return failures
    finally:
        for proc in procs:
            stop_process(proc, grace=5)
        for out in outs:
            out.close()
        for path in files:
            for p in (path, path + ".out"):
                Path(p).unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    """A worker: call the spec's ``entry`` on the cells of the spec file ``argv[0]``; print ``{"failures": [...]}``
    as its last line."""
    import importlib

    from ..models.llm import LLM

    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    llm = LLM(api_key=os.environ.get(_KEY_VARIABLE), **spec["llm"])
    module, function = spec["entry"].split(":")
    failures = getattr(importlib.import_module(module), function)(spec, llm)
    print(json.dumps({"failures": failures}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    import gc

    code = main(sys.argv[1:])
    gc.freeze()  # its scores are on disk (appended to survive a SIGKILL); the run waits for this process to end
    sys.exit(code)
