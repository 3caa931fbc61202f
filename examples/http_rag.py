"""A RAG system of one's own behind HTTP, for RAG-TESTER's walk (notebook 14, docs/experiment.md).

It stands for any service you would test: it answers ``POST /ask`` with ``{"question": "..."}`` by retrieving
(BM25) from the FAB-Bench evidence corpus, or from a folder of documents, and answering on the embedded model
(Gemma 3 270M), and returns ``{"answer": ..., "sources": [{"id", "doc_id", "text", "score"}, ...]}``. An
experiment file tests it as a ``kind = "http"`` system::

    [[systems]]
    name = "my-http-rag"
    kind = "http"
    base_url_env = "MY_RAG_URL"        # http://127.0.0.1:PORT/ask
    settings = {request = {question = "{question}"}, answer_path = "answer", sources_path = "sources"}

Run it with ``python examples/http_rag.py --port 8765 [--corpus FOLDER]``; it serves on loopback until stopped.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def build(corpus_folder: str | None):
    from fabnb.corpus.collection import chunk_corpus, load_corpus
    from fabnb.data.datasets import evidence_corpus, load_fab_bench
    from fabnb.models.local import default_llm
    from fabnb.rag import RAGConfig, ReferenceRAG

    corpus = load_corpus(corpus_folder) if corpus_folder else evidence_corpus(list(load_fab_bench()))
    chunks = chunk_corpus(corpus, size=128, overlap=32)
    return ReferenceRAG(chunks, default_llm(), retriever="bm25", name="http-rag"), RAGConfig(1, output_k=0.125)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--corpus", default=None, help="a folder of documents (default: the FAB-Bench evidence)")
    args = parser.parse_args(argv)
    system, config = build(args.corpus)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                question = str(body["question"])
            except (ValueError, KeyError, TypeError):
                return self._send(400, {"error": 'send JSON {"question": "..."}'})
            try:
                answer = system.ask(question, config)
            except Exception as exc:  # noqa: BLE001 - a service says why it failed; the test records the cause
                return self._send(500, {"error": f"{type(exc).__name__}: {exc}"[:500]})
            self._send(200, {"answer": answer.answer, "sources": answer.sources or []})

        def _send(self, status: int, data: dict) -> None:
            raw = json.dumps(data, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):  # quiet: the notebook's output is the tests', not the server's
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"serving http://127.0.0.1:{args.port}/ask", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
