"""In-process RAG frameworks through fabnb against the same pipelines called directly, at a fixed server delay.

A scripted chat server in its own process answers every call after DELAY seconds. For each framework installed
(LangChain, LlamaIndex, Haystack) one pipeline of a user's kind is built by the factories of
``tests/test_frameworks.py`` (a small retriever over two documents and the framework's own OpenAI-compatible chat
model, pointed at the server), and asked N = c x ROUNDS distinct questions at concurrency c, two ways, one after
the other in this process:

- ``direct``: the framework's own API in a loop of the same concurrency: LangChain's ``ainvoke`` and LlamaIndex's
  ``aquery`` under an asyncio semaphore (their async APIs), Haystack's ``Pipeline.run`` in a pool of c threads;
- ``fabnb``: ``run_grid`` with a :class:`fabnb.rag.FrameworkRAG` made from the same factory (``concurrency=c``),
  every answer and its contexts written to a results store as the runs do.

Printed per framework and level: wall time of each, the bound ROUNDS x DELAY, and fabnb's throughput as a share
of the direct loop's (issue 30's target: at least 0.9), with the machine.

Usage: python benchmarks/bench_frameworks.py [--delay 0.2] [--rounds 8] [--levels 4,16,32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import pandas as pd  # noqa: E402

from fabnb.models.llm import LLM  # noqa: E402
from fabnb.rag import FRAMEWORKS, FrameworkRAG, FrameworkSetup, RAGConfig, run_grid  # noqa: E402

from common import TESTS, add_smoke, apply_smoke, server_process  # noqa: E402  (benchmarks/common.py)

sys.path.insert(0, str(TESTS))
import test_frameworks as factories  # noqa: E402  (the unit tests' pipelines of a user's kind)

#: A chat server for :func:`server_process`: every call answered after the delay.
CHAT_SERVER = """
import sys
sys.path.insert(0, sys.argv[1])
from stub_openai import StubServer, completion
with StubServer(lambda req, n: (200, completion("Resists trade sensitivity against roughness."), {}),
                delay=float(sys.argv[2])) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""

FACTORIES = {"langchain": factories.langchain_factory, "llamaindex": factories.llamaindex_factory,
             "haystack": factories.haystack_factory}


def _questions(n: int) -> list[str]:
    return [f"What limits EUV resist sensitivity, case {i}?" for i in range(n)]


#: One event loop for every direct async call: the frameworks' OpenAI clients keep their connections on the loop
#: that first used them, so a second ``asyncio.run`` would meet a closed loop.
_LOOP = asyncio.new_event_loop()


def _direct(kind: str, pipeline, questions: list[str], c: int) -> float:
    start = time.perf_counter()
    if kind in ("langchain", "llamaindex"):
        async def loop():
            gate = asyncio.Semaphore(c)

            async def one(q):
                async with gate:
                    return await (pipeline.ainvoke(q) if kind == "langchain" else pipeline.aquery(q))

            await asyncio.gather(*(one(q) for q in questions))

        _LOOP.run_until_complete(loop())
    else:
        with ThreadPoolExecutor(c) as pool:
            list(pool.map(lambda q: FRAMEWORKS[kind].read(pipeline, q), questions))
    return time.perf_counter() - start


def _fabnb(system, questions: list[str], config: RAGConfig, c: int, folder: Path) -> float:
    frame = pd.DataFrame({"test_id": [f"q{i}" for i in range(len(questions))], "question": questions})
    start = time.perf_counter()
    run = run_grid([system], frame, [config], folder / f"{system.name}-{c}.jsonl", progress=False, concurrency=c)
    took = time.perf_counter() - start
    assert run.failed == 0, f"{run.failed} cells failed"
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--levels", default="4,16,32")
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, delay=0.01, rounds=1, levels="2")
    levels = [int(x) for x in args.levels.split(",")]
    kinds = [k for k in FACTORIES if not FRAMEWORKS[k].missing()]
    print(f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs; delay "
          f"{args.delay} s, {args.rounds} rounds; frameworks installed: {', '.join(kinds) or 'none'}")
    config = RAGConfig(2, output_k=0.25)
    rows = []
    with server_process(CHAT_SERVER, args.delay) as base_url, tempfile.TemporaryDirectory() as tmp:
        documents = pd.DataFrame({"doc_id": list(factories.DOCS), "text": list(factories.DOCS.values())})
        for kind in kinds:
            setup = FrameworkSetup(documents, base_url, "stub", "x")
            system = FrameworkRAG(kind, setup, LLM("stub", base_url, api_key="x", cache=False), factory=FACTORIES[kind],
                                  name=kind)
            pipeline = system.pipeline(config)  # one pipeline object for both paths
            _direct(kind, pipeline, _questions(2), 2)  # warm: imports, connection pools
            for c in levels:
                questions = _questions(c * args.rounds)
                direct = _direct(kind, pipeline, questions, c)
                through = _fabnb(system, questions, config, c, Path(tmp))
                rows.append({"framework": kind, "concurrency": c, "calls": len(questions),
                             "bound_s": round(args.rounds * args.delay, 2), "direct_s": round(direct, 2),
                             "fabnb_s": round(through, 2), "fabnb / direct throughput": round(direct / through, 2)})
                print(rows[-1], flush=True)
    print()
    print(pd.DataFrame(rows).to_markdown(index=False))


if __name__ == "__main__":
    main()
