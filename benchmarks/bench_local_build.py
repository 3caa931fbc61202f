"""Tokens per second of the embedded model for the llama.cpp build that is installed.

Run it once per build (the portable one the kit installs, and a native one on a machine
where both run) and compare:

    python benchmarks/bench_local_build.py                       # the installed build
    PYTHONPATH=/path/to/native/site python benchmarks/bench_local_build.py

It reports the build (portable or native, from ``objdump``), prompt processing (a
~1,000-token prompt, one output token), generation (64 output tokens) and generation held
to a JSON schema (64 tokens of a string of at least 300 characters; the grammar checks the
sampler's pick, fabnb.models._llama_server), each the median of 3 runs on a fresh server with no cache.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from fabnb.models.llm import LLM
from fabnb.models.local import MODEL_ALIAS, LocalServer, build_report, cpu_name

#: A JSON object with one free-text field, at least 300 characters long so that every run writes its 64 tokens.
ESSAY = {"type": "json_object", "schema": {"type": "object", "required": ["essay"],
                                           "properties": {"essay": {"type": "string", "minLength": 300}}}}
PROMPT = " ".join(["Plasma etching of silicon nitride uses fluorocarbon chemistry at low pressure."] * 80)


SMOKE = "--smoke" in sys.argv  # the same path at tiny sizes (benchmarks/common.py)
RUNS, TOKENS = (1, 4) if SMOKE else (3, 64)


def main() -> None:
    if SMOKE:
        print("smoke mode: tiny sizes, the figures mean nothing", flush=True)
    report = build_report()
    kind = "portable" if report["portable"] else f"native ({report['native_instructions']} AVX-512/AMX instructions)"
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, "
          f"llama-cpp-python {report['version']}, build: {kind}")
    prompt_rates, gen_rates, json_rates, prompt_tokens = [], [], [], 0
    with LocalServer(n_ctx=2048) as server:
        llm = LLM(MODEL_ALIAS, server.base_url, cache=False, schema_style="llama.cpp")
        for i in range(RUNS):
            began = time.perf_counter()
            done = llm.complete(f"{i} {PROMPT}", max_tokens=1, temperature=0.0)
            prompt_rates.append(done.prompt_tokens / (time.perf_counter() - began))
            prompt_tokens = done.prompt_tokens
            began = time.perf_counter()
            done = llm.complete(f"Run {i}. Write a long essay about wafer cleaning.", max_tokens=TOKENS,
                                temperature=0.0, extra_body={"ignore_eos": True})
            gen_rates.append(done.completion_tokens / (time.perf_counter() - began))
            began = time.perf_counter()
            done = llm.complete(f"Run {i}. Reply with JSON: a long essay about wafer cleaning.", max_tokens=TOKENS,
                                temperature=0.0, response_format=ESSAY)
            json_rates.append(done.completion_tokens / (time.perf_counter() - began))
    print(f"prompt processing: {statistics.median(prompt_rates):.0f} tokens/s "
          f"(median of {RUNS}, {prompt_tokens}-token prompt)")
    print(f"generation: {statistics.median(gen_rates):.1f} tokens/s (median of {RUNS}, {TOKENS} tokens)")
    print(f"generation held to a JSON schema: {statistics.median(json_rates):.1f} tokens/s (median of {RUNS})")


if __name__ == "__main__":
    main()
