"""Judging throughput: fabnb's judge_results against DeepEval's own evaluate(), same cases, same server.

A loopback judge server in its own process answers every call after DELAY seconds with
a G-Eval reply (``{"reason", "score"}`` and top logprobs). N cases on one metric at
concurrency c cannot finish before N x DELAY / c. Both runs use the same G-Eval
metric, prompts and judge model class (fabnb.judge.judge_model); DeepEval's run
goes through ``deepeval.evaluate`` with ``AsyncConfig(max_concurrent=c)``, fabnb's
through ``judge_results`` with the LLM layer's concurrency c. Neither uses a cache.
Reports both times, their ratio, and the share of the bound's throughput each reaches.

Usage: python benchmarks/bench_judge.py [--delay 0.25] [--cases 160] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("DEEPEVAL_NO_INSPECT_PROMPT", "1")

import pandas as pd  # noqa: E402

from fabnb.judge import geval_metric, judge_model, judge_results, logprobs_supported, score_store  # noqa: E402
from fabnb.models.llm import LLM  # noqa: E402

from common import JUDGE_SERVER, add_smoke, apply_smoke, server_process  # noqa: E402  (benchmarks/common.py)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--cases", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=16)
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, delay=0.01, cases=6, concurrency=2)
    c, n = args.concurrency, args.cases
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"judge delay {args.delay} s in its own process; {n} cases x 1 metric at concurrency {c}")
    bound = n * args.delay / c
    with server_process(JUDGE_SERVER, args.delay) as base_url:
        llm = LLM("stub-judge", base_url, cache=False, concurrency=c)
        logprobs_supported(llm)  # the one probe, outside both timings
        questions = pd.DataFrame({"test_id": [f"Q{i:04d}" for i in range(n)],
                                  "question": [f"What is the etch rate of film {i}?" for i in range(n)],
                                  "ground_truth_answer": "5 nm/min", "question_format": "SUBJECTIVE"})
        results = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A",
                                "test_id": questions.test_id, "status": "ok",
                                "answer": [f"About {i % 9 + 1} nm/min." for i in range(n)], "sources": None})
        with tempfile.TemporaryDirectory() as tmp:
            # Warm-up outside the timings: imports (DeepEval, tiktoken), the judge class, the first connection.
            judge_results(results.head(2), questions, llm, score_store(Path(tmp) / "warm.jsonl"),
                          metrics=["relevance"], progress=False)
            start = time.perf_counter()
            run = judge_results(results, questions, llm, score_store(Path(tmp) / "s.jsonl"), metrics=["relevance"],
                                progress=False)
            ours = time.perf_counter() - start
            start = time.perf_counter()
            again = judge_results(results, questions, llm, score_store(Path(tmp) / "s.jsonl"), metrics=["relevance"],
                                  progress=False)
            resumed = time.perf_counter() - start
        from deepeval import evaluate
        from deepeval.evaluate.configs import AsyncConfig, CacheConfig, DisplayConfig
        from deepeval.test_case import LLMTestCase

        cases = [LLMTestCase(input=q, actual_output=a) for q, a in zip(questions.question, results.answer)]
        metric = geval_metric("relevance", "subjective", judge_model(llm))
        start = time.perf_counter()
        evaluate(cases, [metric], async_config=AsyncConfig(max_concurrent=c),
                 display_config=DisplayConfig(show_indicator=False, print_results=False, inspect_after_run=False),
                 cache_config=CacheConfig(write_cache=False, use_cache=False))
        theirs = time.perf_counter() - start
    print(f"fabnb judge_results:  {ours:.2f} s, {bound / ours:.0%} of the bound ({bound:.2f} s), "
          f"{run.scored} scored, {run.failed} failed; resumed run: {again.scored} scored in {resumed:.2f} s")
    print(f"deepeval.evaluate():  {theirs:.2f} s, {bound / theirs:.0%} of the bound")
    print(f"ratio (DeepEval time / fabnb time): {theirs / ours:.2f}")


if __name__ == "__main__":
    main()
