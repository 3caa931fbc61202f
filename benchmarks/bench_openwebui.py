"""Open WebUI as a system, live: a real server on loopback, a knowledge collection, the embedded model.

Open WebUI is never in the test extra (open-webui 0.12.4 installs 7.4 GB with CUDA PyTorch), so this is run by
hand, with Open WebUI in a virtual environment of its own::

    python -m venv ~/owui && ~/owui/bin/pip install "open-webui==0.12.4"
    python benchmarks/bench_openwebui.py --webui ~/owui/bin/open-webui

It starts the embedded model (fabnb's llama.cpp server) and ``open-webui serve`` offline on loopback
(``WEBUI_AUTH=False``; embeddings by the kit's offline MiniLM through Open WebUI's own sentence-transformers;
query rewriting, titles, tags and follow-ups off), uploads part of the FAB-Bench corpus (the sampled questions'
gold documents and the first OTHERS documents, one file per document, ``{doc_id}.txt``) into one knowledge
collection, and asks the questions at two windows through a ``kind = "openwebui"`` system run by ``run_grid``,
as an experiment file would. Then it checks every stored source against Open WebUI's own copy of the file: a
source's id is ``{file_id}#{digest}``, the file Open WebUI keeps must hold the source's text, and the digest must
be that text's.

Printed, with the machine: the server's start, the upload and indexing, the answers per window (wall time,
sources, context tokens), the share of source ids verified, and the share of gold documents among the sources.
``--dump FILE`` writes one raw response body (the contract test's shape).

Usage: python benchmarks/bench_openwebui.py --webui PATH [--questions 3] [--others 16] [--top-k 8] [--dump FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pandas as pd

from fabnb.core.process import answers_http, free_port, start_process, stop_process, wait_ready
from fabnb.experiment import Endpoint, Experiment
from fabnb.rag import ResultsStore, minilm_path, run_grid

from common import TESTS, add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)

sys.path.insert(0, str(TESTS))
import test_frameworks as live  # noqa: E402  (the live tests' experiment and corpus part: _live_part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--webui", default=shutil.which("open-webui"), help="the open-webui executable")
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--others", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=8, help="Open WebUI's RAG_TOP_K")
    parser.add_argument("--chunk-size", type=int, default=800, help="Open WebUI's CHUNK_SIZE, in characters")
    parser.add_argument("--dump", type=Path, help="write one raw /api/chat/completions body here")
    add_smoke(parser)
    args = apply_smoke(parser.parse_args(), questions=1, others=2)
    if args.smoke and not (args.webui and Path(args.webui).exists()):
        # Open WebUI is never installed by the kit (7.4 GB): the smoke mode runs the part before its server (the
        # imports, the corpus part and the questions) and says what it did not run.
        exp, questions, documents = live._live_part(Path(tempfile.mkdtemp(prefix="fabnb-openwebui-")),
                                                    '[[systems]]\nname = "local"\nkind = "reference"\n'
                                                    'model = "embedded"\n', args.others, (1, 2), args.questions)
        print(f"smoke: {len(questions)} question(s), {len(documents)} documents to upload; open-webui is not "
              "installed, so its server, the upload and the answers were not run")
        return
    if not args.webui or not Path(args.webui).exists():
        raise SystemExit("open-webui is not installed: python -m venv ~/owui && ~/owui/bin/pip install "
                         "'open-webui==0.12.4', then --webui ~/owui/bin/open-webui")
    version = os.popen(f"{Path(args.webui).with_name('pip')} show open-webui 2>/dev/null").read()
    version = next((line.split()[-1] for line in version.splitlines() if line.startswith("Version")), "?")
    print(f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs; open-webui "
          f"{version}; RAG_TOP_K {args.top_k}, CHUNK_SIZE {args.chunk_size} characters")
    tmp = Path(tempfile.mkdtemp(prefix="fabnb-openwebui-"))
    exp, questions, documents = live._live_part(tmp, '[[systems]]\nname = "local"\nkind = "reference"\n'
                                                     'model = "embedded"\n', args.others, (1, 2), args.questions)
    gold = {d for ids in questions["gold_doc_ids"] for d in ids}
    llm = Endpoint("embedded").llm()
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DATA_DIR": str(tmp / "data"), "WEBUI_AUTH": "False",
           "WEBUI_SECRET_KEY": secrets.token_hex(16),
           "ENABLE_OLLAMA_API": "False", "ENABLE_OPENAI_API": "True", "OPENAI_API_BASE_URL": llm.base_url,
           "OPENAI_API_KEY": "none", "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "RAG_EMBEDDING_ENGINE": "", "RAG_EMBEDDING_MODEL": str(minilm_path()), "RAG_TOP_K": str(args.top_k),
           "CHUNK_SIZE": str(args.chunk_size), "CHUNK_OVERLAP": str(args.chunk_size // 8),
           "ENABLE_RETRIEVAL_QUERY_GENERATION": "false", "ENABLE_TITLE_GENERATION": "false",
           "ENABLE_TAGS_GENERATION": "false", "ENABLE_FOLLOW_UP_GENERATION": "false",
           "ENABLE_AUTOCOMPLETE_GENERATION": "false", "ENABLE_WEB_SEARCH": "false", "ENABLE_RAG_HYBRID_SEARCH": "false",
           "SCARF_NO_ANALYTICS": "true", "DO_NOT_TRACK": "true", "ANONYMIZED_TELEMETRY": "false"}
    log_path = tmp / "open-webui.log"
    log = open(log_path, "wb")
    start = time.perf_counter()
    proc = start_process([args.webui, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=tmp,
                         stdout=log)
    figures = {}
    try:
        state = wait_ready(proc, lambda: answers_http(f"{server}/health"), timeout=600)
        if state != "ready":
            raise SystemExit(f"open-webui did not start ({state}):\n{log_path.read_text()[-3000:]}")
        figures["start_s"] = time.perf_counter() - start
        with httpx.Client(base_url=server, timeout=600) as http:
            # WEBUI_AUTH=False: Open WebUI signs everyone in as its one admin, admin@localhost
            token = http.post("/api/v1/auths/signin", json={"email": "admin@localhost", "password": "admin"}
                              ).raise_for_status().json()
            headers = {"Authorization": f"Bearer {token['token']}"}
            start = time.perf_counter()
            collection = http.post("/api/v1/knowledge/create", headers=headers,
                                   json={"name": "fab-bench", "description": "FAB-Bench corpus part"}
                                   ).raise_for_status().json()["id"]
            for row in documents[["doc_id", "text"]].to_dict("records"):
                file_id = http.post("/api/v1/files/", headers=headers,
                                    params={"process": "true", "process_in_background": "false"},
                                    files={"file": (f"{row['doc_id']}.txt", row["text"].encode(), "text/plain")}
                                    ).raise_for_status().json()["id"]
                http.post(f"/api/v1/knowledge/{collection}/file/add", headers=headers,
                          json={"file_id": file_id}).raise_for_status()
            figures["insert_s"] = time.perf_counter() - start
            if args.dump:
                body = {"model": llm.model, "stream": False, "max_tokens": 64,
                        "messages": [{"role": "user", "content": questions["question"].iloc[0]}],
                        "files": [{"type": "collection", "id": collection}]}
                args.dump.write_text(json.dumps(http.post("/api/chat/completions", headers=headers, json=body)
                                                .raise_for_status().json(), indent=1))
            os.environ["FABNB_OPENWEBUI_TOKEN"] = token["token"]
            spec = {"name": "open-webui", "kind": "openwebui", "base_url": server, "model": llm.model,
                    "api_key_env": "FABNB_OPENWEBUI_TOKEN", "settings": {"collection": collection}}
            system = Experiment.from_dict({"name": "x", "output": "o", "systems": [spec]}).systems[0].build(None)
            start = time.perf_counter()
            run = run_grid([system], questions, exp.configs(), tmp / "answers.jsonl", progress=False, concurrency=1)
            figures["answer_s"] = time.perf_counter() - start
            frame = ResultsStore(tmp / "answers.jsonl").frame()
            content = {}
            checked = verified = 0
            for sources in frame["sources"]:
                for s in sources or []:
                    file_id, _, digest = s["id"].partition("#")
                    if file_id not in content:
                        content[file_id] = http.get(f"/api/v1/files/{file_id}/data/content",
                                                    headers=headers).raise_for_status().json()["content"]
                    checked += 1
                    verified += (digest == hashlib.sha256(s["text"].encode()).hexdigest()[:16]
                                 and s["text"] in content[file_id])
    finally:
        stop_process(proc)
        log.close()
    rows = []
    for k, part in frame.groupby("context_k"):
        hits = [s["doc_id"] in gold for sources in part["sources"] for s in sources or []]
        rows.append({"window (K tokens)": k, "cells": len(part), "ok": int((part["status"] == "ok").sum()),
                     "sources / answer": round(part["sources"].map(lambda s: len(s or [])).mean(), 1),
                     "context tokens": round(part["context_tokens"].mean()),
                     "gold share of sources": round(sum(hits) / max(len(hits), 1), 2),
                     "s / answer": round(part["latency_s"].mean(), 1)})
    print(f"start {figures['start_s']:.0f} s; {len(documents)} documents uploaded and indexed in "
          f"{figures['insert_s']:.0f} s; {len(frame)} answers in {figures['answer_s']:.0f} s ({run.failed} failed); "
          f"source ids verified against Open WebUI's files: {verified}/{checked}")
    print()
    print(pd.DataFrame(rows).to_markdown(index=False))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
