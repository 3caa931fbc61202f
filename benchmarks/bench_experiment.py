"""A paper-scale ``fabnb run`` against a scripted server: throughput per stage, memory, kill and resume.

The experiment: all 200 FAB-Bench questions x 4 models (reference systems on one scripted
endpoint) x the paper's 11 context windows x mode A = 8,800 answers, then the six G-Eval
metrics = 52,800 judge calls (with logprobs). The server, in its own process, answers every
call after DELAY seconds and logs a hash of every request it finished.

Figures printed:
- the dry-run plan's time;
- each stage's calls per second, beside a plain async openai client with a semaphore making
  the same number of calls against the same server in the same run (its ratio), and the
  bound calls x delay / concurrency;
- the client's peak RSS (``ru_maxrss`` of this process, which runs the experiment in-process);
- a ``fabnb run`` subprocess killed with SIGKILL at about half of the judge stage, then run
  again: requests the server had finished that were asked again (should be 0), and the final
  store counts (should be exactly 8,800 and 52,800).

- recording where the gold evidence sat (issue 52): the answer stage of the same 8,800 cells run twice more on
  fresh stores, once as shipped and once with :func:`fabnb.rag.grid.evidence_position` switched off, wall and CPU
  seconds side by side, and the time spent inside the recording itself.

Usage: python benchmarks/bench_experiment.py [--delay 0.25] [--concurrency 32] [--questions all] [--no-kill]
       [--no-position]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("DEEPEVAL_NO_INSPECT_PROMPT", "1")

from common import add_smoke, apply_smoke, server_process  # noqa: E402  (benchmarks/common.py)

SERVER = """
import sys, json, math, hashlib, threading, os
sys.path.insert(0, sys.argv[1])
from stub_openai import StubServer, completion
log = open(os.environ["BENCH_REQUEST_LOG"], "a", buffering=1)
lock = threading.Lock()
def lp(tok, alts):
    return {"token": tok, "logprob": math.log(dict(alts)[tok]), "bytes": None,
            "top_logprobs": [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in alts]}
def reply(req, n):
    if "messages" not in req:  # a request cut off by the kill
        return 400, {"error": {"message": "no messages"}}, {}
    digest = hashlib.sha1(json.dumps(req, sort_keys=True).encode()).hexdigest()
    if req.get("response_format"):
        toks = [lp("7", [("7", .6), ("8", .3), ("6", .1)])] if req.get("logprobs") else None
        out = completion(json.dumps({"reason": "specific and grounded", "score": 7}), model=req["model"],
                         logprobs=toks, prompt_tokens=900, completion_tokens=20)
    else:
        content = req["messages"][-1]["content"]
        # Unique per cell (the digest): no two judge prompts coincide, so no judge call is a cache hit.
        out = completion(f"{req['model']} answered {digest[:12]} after reading {len(content)} characters.",
                         model=req["model"],
                         prompt_tokens=len(content) // 4, completion_tokens=12)
    last = req["messages"][-1]["content"]
    kind = "probe" if last == "Say 1." else ("judge" if req.get("response_format") else "answer")
    with lock:
        log.write(f"{digest}\\t{req['model']}:{kind}\\n")
    return 200, out, {}
with StubServer(reply, delay=float(sys.argv[2])) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""

EXPERIMENT = """
name = "bench-paper-scale"
output = "{output}"
concurrency = {concurrency}

[questions]
sample = {questions}

[corpus]
chunk_size = 512
chunk_overlap = 128

[contexts]
windows = {windows}   # no snippet limit: each window fills with context, so no two cells send the same prompt
modes = ["A"]
{systems}
[judge]
model = "judge"
base_url_env = "BENCH_URL"
metrics = "all"
logprobs = true
concurrency = {concurrency}
"""

SYSTEM = """
[[systems]]
name = "system-{i}"
model = "model-{i}"
base_url_env = "BENCH_URL"
"""


def plain_client(base_url: str, calls: int, concurrency: int, judge: bool) -> float:
    """Seconds for ``calls`` requests through openai.AsyncOpenAI with a semaphore (the reference)."""
    import openai

    async def main():
        client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)
        sem = asyncio.Semaphore(concurrency)

        async def one(i):
            async with sem:
                extra = {"response_format": {"type": "json_object"}, "logprobs": True, "top_logprobs": 20} \
                    if judge else {}
                await client.chat.completions.create(model="plain", max_tokens=400,
                                                     messages=[{"role": "user", "content": f"plain call {i}"}],
                                                     **extra)

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(calls)))
        seconds = time.perf_counter() - start
        await client.close()
        return seconds

    return asyncio.run(main())


def write_experiment(folder: Path, output: Path, args) -> Path:
    systems = "".join(SYSTEM.format(i=i) for i in range(1, 5))
    path = folder / "bench.toml"
    path.write_text(EXPERIMENT.format(output=output, concurrency=args.concurrency, questions=args.questions,
                                      systems=systems, windows='[4, 8]' if args.smoke else '"paper"'))
    return path


def position_cost(exp, base_url: str, work: Path, concurrency: int) -> None:
    """The answer stage with and without the evidence-position record, on fresh stores (the same cells)."""
    import fabnb.rag.grid as grid
    from fabnb.models.llm import LLM
    from fabnb.rag import ReferenceRAG, run_grid

    questions, chunks = exp.questions(), exp.chunks()
    recorded = grid.evidence_position
    spent = [0.0]

    def timed(*a):
        start = time.perf_counter()
        try:
            return recorded(*a)
        finally:
            spent[0] += time.perf_counter() - start

    rows = []
    for label, record in (("recorded", timed), ("not recorded", lambda *a: (None, None))):
        grid.evidence_position = record
        systems = [ReferenceRAG(chunks, LLM(s.model, base_url, cache=False, max_retries=0), retriever=s.retriever,
                                name=s.name) for s in exp.systems]
        start, cpu = time.perf_counter(), time.process_time()
        done = run_grid(systems, questions, exp.configs(), work / f"position-{label}.jsonl", modes=("A",),
                        concurrency=concurrency, progress=False)
        rows.append({"answer stage": label, "cells": done.asked, "wall_s": round(time.perf_counter() - start, 1),
                     "cpu_s": round(time.process_time() - cpu, 1)})
    grid.evidence_position = recorded
    import pandas as pd

    table = pd.DataFrame(rows)
    wall = table["wall_s"].tolist()
    print(table.to_markdown(index=False))
    print(f"evidence position: {spent[0]:.2f} s inside the recording over {rows[0]['cells']:,} cells "
          f"({100 * spent[0] / max(wall[0], 1e-9):.2f}% of the recorded stage's wall time); the stage with it "
          f"{100 * (wall[0] - wall[1]) / max(wall[1], 1e-9):+.1f}% against without (wall, noise included).",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--questions", default="all", help='"all" (200) or a number')
    parser.add_argument("--reuse", help="the in-process folder of an earlier run: take its stage times, skip the run")
    parser.add_argument("--no-kill", action="store_true", help="skip the kill-and-resume part")
    parser.add_argument("--no-position", action="store_true", help="skip the evidence-position cost part")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, delay=0.01, concurrency=16, questions="2")
    if args.questions != "all":
        args.questions = int(args.questions)
    else:
        args.questions = '"all"'
    import pandas as pd

    from fabnb.core.records import ResultsStore
    from fabnb.experiment import Experiment, plan, run_experiment
    from fabnb.judge import score_store

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"delay {args.delay} s per call in a server process of its own; concurrency {args.concurrency}")
    work = Path(tempfile.mkdtemp(prefix="fabnb-bench-exp-"))
    os.environ["FABNB_CACHE_DIR"] = str(work / "cache")
    os.environ["BENCH_REQUEST_LOG"] = str(work / "requests.log")
    rows = []
    with server_process(SERVER, args.delay) as base_url:
        os.environ["BENCH_URL"] = base_url
        path = write_experiment(work, work / "in-process", args)
        exp = Experiment.from_file(path)

        start = time.perf_counter()
        p = plan(exp)
        plan_s = time.perf_counter() - start
        n_answers = int(p.table.loc[p.table["stage"] == "answers", "calls"].sum())
        n_judge = int(p.table.loc[p.table["stage"] == "judge", "calls"].sum())
        print(f"dry-run plan: {n_answers:,} answers and {n_judge:,} judge calls planned in {plan_s:.1f} s")

        # ---- the whole run in this process, stage by stage (timed from the stores' timestamps)
        if args.reuse:
            exp = Experiment.from_file(path, output=args.reuse)
            print(f"in-process run: reused from {args.reuse}")
        else:
            start = time.perf_counter()
            run = run_experiment(exp, progress=False, probe=False, echo=lambda *a: None)
            total_s = time.perf_counter() - start
            rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
            print(f"in-process run: {total_s:.0f} s in all ({run.status}); peak RSS {rss_gb:.2f} GB", flush=True)
        answers = ResultsStore(exp.output / "answers.jsonl").frame(drop=("sources", "answer"))
        scores = score_store(exp.output / "scores.jsonl").frame(drop=("reason",))
        a_s = answers["ts"].max() - answers["ts"].min()
        j_s = scores["ts"].max() - answers["ts"].max()

        # ---- the plain client, same server, same run
        # Its rate, from as many calls as the answer stage makes (the judge's 52,800 would add minutes, not news).
        plain_answers = plain_client(base_url, n_answers, args.concurrency, judge=False)
        plain_judge = plain_client(base_url, n_answers, args.concurrency, judge=True)
        plain_judge_rate = n_answers / plain_judge
        for stage, calls, seconds, plain_rate in (("answers", n_answers, a_s, n_answers / plain_answers),
                                                  ("judge", n_judge, j_s, plain_judge_rate)):
            bound = calls * args.delay / args.concurrency
            rows.append({"stage": stage, "calls": calls, "seconds": round(seconds, 1),
                         "calls_per_s": round(calls / seconds, 1), "plain_client_calls_per_s": round(plain_rate, 1),
                         "ratio_to_plain": round(calls / seconds / plain_rate, 3),
                         "share_of_bound": round(bound / seconds, 3)})
        print(pd.DataFrame(rows).to_markdown(index=False), flush=True)
        if not args.no_position:
            position_cost(exp, base_url, work, args.concurrency)

        if args.no_kill:
            return
        # ---- kill at about half of the judge stage, then run again
        log = Path(os.environ["BENCH_REQUEST_LOG"])
        log.write_text("")
        out = work / "killed"
        path = write_experiment(work, out, args)
        # A cache of its own: the in-process run's cache holds every one of these requests already.
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
               "FABNB_CACHE_DIR": str(work / "cache-killed")}
        proc = subprocess.Popen([sys.executable, "-m", "fabnb.cli", "run", str(path), "--no-probe", "--no-progress"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scores_path = out / "scores.jsonl"
        while proc.poll() is None:
            if scores_path.exists() and scores_path.stat().st_size and \
                    sum(1 for _ in open(scores_path, "rb")) >= n_judge // 2:
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # The server logs a request when it replies, one delay after it came in: let the calls the killed
        # process left in flight be logged before the log is read, or they would count as the rerun's.
        time.sleep(2 * args.delay + 0.5)
        at_kill = sum(1 for _ in open(scores_path, "rb"))
        stored_at_kill = len(ResultsStore(out / "answers.jsonl").done()) + len(score_store(scores_path).done())
        served_before = Counter(log.read_text().splitlines())
        start = time.perf_counter()
        rerun = subprocess.run([sys.executable, "-m", "fabnb.cli", "run", str(path), "--no-probe", "--no-progress"],
                               env=env, capture_output=True, text=True)
        rerun_s = time.perf_counter() - start
        served_all = Counter(log.read_text().splitlines())
    cells = {line: n for line, n in served_all.items() if line and not line.endswith(":probe")}
    repeated = sum(n - 1 for n in cells.values() if n > 1)
    kinds = Counter(line.split("\t", 1)[-1] for line, n in cells.items() if n > 1)
    if kinds:
        print("repeated bodies by model and kind:", dict(kinds.most_common(6)))
    repeated_finished = sum(min(served_before[h], served_all[h] - served_before[h]) for h in served_before
                            if not h.endswith(":probe"))
    final_answers = len(ResultsStore(out / "answers.jsonl").frame())
    final_scores = len(score_store(out / "scores.jsonl").frame())
    probes = sum(n for line, n in served_all.items() if line.endswith(":probe")) - \
        sum(n for line, n in served_before.items() if line.endswith(":probe"))
    asked_on_rerun = sum(served_all.values()) - sum(served_before.values()) - probes
    unstored = n_answers + n_judge - stored_at_kill
    print(f"kill (SIGKILL) at {at_kill:,} of {n_judge:,} scores; {stored_at_kill:,} answers and scores stored. "
          f"Rerun in {rerun_s:.0f} s (exit {rerun.returncode}): {asked_on_rerun:,} requests (and {probes} logprobs "
          f"probe) for the {unstored:,} cells "
          f"not stored, so {max(0, asked_on_rerun - unstored)} stored cells asked again; {repeated_finished} requests "
          f"the server had answered were asked again (calls in flight at the kill whose reply had not reached the "
          f"store; {repeated} repeated bodies in all). Final stores: {final_answers:,} answers, {final_scores:,} "
          "scores.")


if __name__ == "__main__":
    main()
