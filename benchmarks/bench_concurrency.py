"""The LLM layer at high concurrency: fabnb against a plain openai client on both transports, CPU per call.

A loopback judge server in its own process answers every call after DELAY seconds with a
G-Eval reply (``{"reason", "score"}`` and top logprobs). At each concurrency c, N = c x ROUNDS
calls cannot finish before ROUNDS x DELAY. Four clients make the same number of calls, one
after the other, in this process:

- ``plain httpx``: ``openai.AsyncOpenAI`` (its default httpx transport) and a semaphore;
- ``plain aiohttp``: the same with ``http_client=openai.DefaultAioHttpClient()``;
- ``fabnb LLM.map``: the layer every stage calls (``fabnb.models.llm.LLM``, no cache), the answer
  stage's path without the retrieval;
- ``fabnb judge``: ``judge_results`` on N / 6 answers x six metrics (DeepEval's G-Eval with
  logprob weighting, the score store, no response cache).

and, with ``--workers N`` (default 2), ``judge_results(workers=N)``. For each: wall time, its share of the bound,
the ratio to the plain aiohttp client, and the client's CPU time per call (this process and its worker
processes, ``getrusage``; the server is another process).

Usage: python benchmarks/bench_concurrency.py [--delay 0.5] [--rounds 12] [--levels 32,128,256,512] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("DEEPEVAL_NO_INSPECT_PROMPT", "1")

import pandas as pd  # noqa: E402

from fabnb.core.schema import METRICS  # noqa: E402
from fabnb.judge import judge_results, logprobs_supported, score_store  # noqa: E402
from fabnb.models.llm import LLM  # noqa: E402

from common import JUDGE_SERVER, add_smoke, apply_smoke, server_process  # noqa: E402  (benchmarks/common.py)


async def _plain(base_url: str, n: int, c: int, aiohttp: bool) -> None:
    import openai

    client = openai.AsyncOpenAI(api_key="x", base_url=base_url, max_retries=0, timeout=120,
                                http_client=openai.DefaultAioHttpClient() if aiohttp else None)
    sem = asyncio.Semaphore(c)

    async def one(i: int) -> None:
        async with sem:
            r = await client.chat.completions.create(
                model="stub", messages=[{"role": "user", "content": f"question {i}"}], logprobs=True, top_logprobs=20)
            assert r.choices[0].message.content

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()


def _cpu() -> float:
    # This process and its finished children (the judge's worker processes), user and system time.
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def _judge_frames(n_answers: int, tag: str):
    questions = pd.DataFrame({"test_id": [f"Q{i:05d}" for i in range(n_answers)],
                              "question": [f"What is the etch rate of film {i} ({tag})?" for i in range(n_answers)],
                              "ground_truth_answer": "5 nm/min", "question_format": "SUBJECTIVE"})
    results = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": questions.test_id,
                            "status": "ok", "answer": [f"About {i % 9 + 1} nm/min." for i in range(n_answers)],
                            "sources": None})
    return questions, results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=12, help="calls per slot: N = concurrency x rounds")
    parser.add_argument("--levels", default="32,128,256,512")
    parser.add_argument("--workers", type=int, default=2, help="also the judge over this many processes (1: not)")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, delay=0.01, rounds=1, levels="6", workers=1)
    levels = [int(c) for c in args.levels.split(",")]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"judge server delay {args.delay} s in its own process; N = concurrency x {args.rounds}")
    rows = []
    with server_process(JUDGE_SERVER, args.delay) as base_url, tempfile.TemporaryDirectory() as tmp:
        warm = LLM("stub-judge", base_url, cache=False, concurrency=8)
        logprobs_supported(warm)
        q, r = _judge_frames(2, "warm")  # imports (DeepEval, tiktoken) and the judge class, outside the timings
        judge_results(r, q, warm, score_store(Path(tmp) / "warm.jsonl"), progress=False)
        for c in levels:
            n = c * args.rounds
            bound = args.rounds * args.delay
            runs = {
                "plain httpx": lambda: asyncio.run(_plain(base_url, n, c, False)),
                "plain aiohttp": lambda: asyncio.run(_plain(base_url, n, c, True)),
                "fabnb LLM.map": lambda: LLM("stub", base_url, cache=False, concurrency=c).map(
                    [{"messages": f"c{c} question {i}", "logprobs": True, "top_logprobs": 20} for i in range(n)]),
            }
            questions, results = _judge_frames(n // len(METRICS), f"c{c}")
            runs["fabnb judge"] = lambda: judge_results(
                results, questions, LLM("stub-judge", base_url, cache=False, concurrency=c),
                score_store(Path(tmp) / f"judge-{c}.jsonl"), progress=False)
            if args.workers > 1:
                runs[f"fabnb judge, {args.workers} workers"] = lambda: judge_results(
                    results, questions, LLM("stub-judge", base_url, cache=False, concurrency=c),
                    score_store(Path(tmp) / f"judge-{c}-w.jsonl"), progress=False, workers=args.workers)
            times = {name: _timed(fn) for name, fn in runs.items()}
            base = times["plain aiohttp"]
            for name, (wall, cpu) in times.items():
                calls = n if not name.startswith("fabnb judge") else len(results) * len(METRICS)
                rows.append({"in flight": c, "client": name, "calls": calls, "seconds": round(wall, 2),
                             "of bound": round(bound / wall, 2), "of plain aiohttp": round(base[0] / wall, 2),
                             "CPU ms per call": round(1000 * cpu / calls, 2),
                             "CPU vs plain aiohttp": round((cpu / calls) / (base[1] / n), 2)})
            print(pd.DataFrame(rows[-len(runs):]).to_string(index=False), flush=True)
    print()
    print(pd.DataFrame(rows).to_markdown(index=False))


if __name__ == "__main__":
    main()
