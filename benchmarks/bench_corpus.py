"""Corpus-stage throughput and memory: chunking + TF-IDF + multi-hop link search on a generated corpus.

The corpus of each size is generated once to disk (a folder of text files, under ``--data``), and
every measurement runs in a fresh process that reads it with ``load_corpus``: the generator's
memory is not counted, and each run's peak is its own. Figures per size: the median of ``--runs``
runs for each stage's time, tokens per second, the peak RSS reached by the end of each stage,
and scikit-learn's raw ``TfidfVectorizer`` on the same chunks in the same process (the ratio).
With ``--dask SIZE`` that size also runs through the Dask path on a 2-worker LocalCluster.

The corpus: documents of 2K-40K tokens of Zipf-distributed words from a 60,000-word synthetic
vocabulary mixed with the knowledge base's terms and numbers with units, so TF-IDF sees a
realistic long-tailed vocabulary.

Usage: python benchmarks/bench_corpus.py [--sizes 1000000 10000000] [--runs 1] [--seeds 1000]
       [--data /tmp/fabnb-bench-corpus] [--dask SIZE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from common import add_smoke, apply_smoke  # noqa: E402  (benchmarks/common.py)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(n_tokens: int, folder: Path, seed: int = 0) -> dict:
    """Write a corpus of about ``n_tokens`` tokens to ``folder`` (one text file per document)."""
    import numpy as np

    from fabnb.corpus.collection import tokenizer
    from fabnb.corpus.terms import KnowledgeBase

    rng = np.random.default_rng(seed)
    syllables = ["ka", "to", "ri", "men", "sol", "var", "di", "tec", "lo", "pha", "ne", "gra", "stru", "quin",
                 "bel", "xo", "ur", "fa", "ion", "dep"]
    vocab = list(dict.fromkeys("".join(rng.choice(syllables, size=rng.integers(2, 5))) for _ in range(90000)))[:60000]
    vocab += KnowledgeBase.default().terms.term.tolist() + ["the", "of", "and", "a", "in", "to", "is", "with"] * 50
    words_of = np.array(vocab, dtype=object)
    capital = np.array([w.capitalize() for w in vocab], dtype=object)
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    weights /= weights.sum()
    enc = tokenizer()
    folder.mkdir(parents=True, exist_ok=True)
    total, i = 0, 0
    while total < n_tokens:
        n_words = int(rng.integers(1500, 30000))
        ids = rng.choice(len(vocab), size=n_words, p=weights)
        words = words_of[ids]
        # Sentences of 8-29 words: a capital first word, a full stop after the last, a unit now and then.
        ends = np.cumsum(rng.integers(8, 30, size=n_words // 8 + 1))
        ends = ends[ends < n_words]
        starts = np.concatenate([[0], ends])
        words[starts] = capital[ids[starts]]
        last = np.concatenate([ends - 1, [n_words - 1]])
        units = rng.random(len(last)) < 0.2
        words[last] = words[last] + np.where(units, [f" at {v} nm." for v in rng.integers(1, 900, len(last))], ".")
        text = " ".join(words.tolist())
        (folder / f"doc{i:05d}.txt").write_text(text, encoding="utf-8")
        total += len(enc.encode_ordinary(text))
        i += 1
    info = {"tokens": total, "documents": i, "bytes": sum(p.stat().st_size for p in folder.glob("*.txt"))}
    info_path(folder).write_text(json.dumps(info))
    return info


def info_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".json")  # beside the folder: load_corpus would read it as a document


def run_one(folder: Path, seeds: int, dask_workers: int = 0) -> dict:
    """One measurement in this (fresh) process: load, chunk, TF-IDF, links; peak RSS after each stage."""
    import numpy as np

    from fabnb.corpus.collection import chunk_corpus, load_corpus
    from fabnb.corpus.synthesis import THETA_LINK
    from fabnb.corpus.vectors import neighbours, vectorize

    warnings.simplefilter("ignore")
    # scikit-learn's text module imported before any clock starts: the TF-IDF ratio compares the work,
    # not which of the two calls pays the first import (0.5 s, most of a 1M-token run's TF-IDF).
    import sklearn.feature_extraction.text  # noqa: F401

    info = json.loads(info_path(folder).read_text())
    out = {"tokens": info["tokens"], "documents": info["documents"], "bytes": info["bytes"],
           "start_mb": _peak_mb()}
    scheduler, client = None, None
    if dask_workers:
        from dask.distributed import Client, LocalCluster

        client = Client(LocalCluster(n_workers=dask_workers, threads_per_worker=1, processes=True,
                                     dashboard_address=None))
        scheduler = "dask"
    t0 = time.perf_counter()
    corpus = load_corpus(folder, on_error="raise")
    t1 = time.perf_counter()
    out["load_peak_mb"] = _peak_mb()
    if scheduler is None:
        chunks = chunk_corpus(corpus)
        del corpus
        t2 = time.perf_counter()
        out["chunk_peak_mb"] = _peak_mb()
        vectors = vectorize(chunks)
    else:
        # The Dask way out: chunking and TF-IDF on the workers in one go; the texts stay there.
        from fabnb.corpus.vectors import vectorize_corpus

        chunks, vectors = vectorize_corpus(corpus, text=False)
        del corpus
        t2 = time.perf_counter()
        out["chunk_peak_mb"] = _peak_mb()
    t3 = time.perf_counter()
    out["tfidf_peak_mb"] = _peak_mb()
    rows = np.random.default_rng(1).choice(len(chunks), size=min(seeds, len(chunks)), replace=False)
    links = neighbours(vectors, rows, k=1, other_documents=True)
    t4 = time.perf_counter()
    out["links_peak_mb"] = _peak_mb()
    out.update({"chunks": len(chunks), "vocabulary": len(vectors.vocabulary), "nnz": int(vectors.matrix.nnz),
                "seeds": len(rows), "valid_links": int((links["cosine"] > THETA_LINK).sum()),
                "load_s": t1 - t0, "chunk_s": t2 - t1, "tfidf_s": t3 - t2, "links_s": t4 - t3,
                "stage_s": t4 - t1, "tokens_per_s": info["tokens"] / (t4 - t1), "peak_rss_mb": _peak_mb()})
    if client is not None:
        out["worker_peak_mb"] = sorted(client.run(_peak_mb).values())
        client.close()
    else:
        # Side by side: scikit-learn's TfidfVectorizer alone on the same chunks (what vectorize is built on).
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts = chunks["text"]
        del vectors
        t5 = time.perf_counter()
        TfidfVectorizer(stop_words="english", dtype=np.float32).fit_transform(texts)
        out["raw_tfidf_s"] = time.perf_counter() - t5
        out["tfidf_vs_raw"] = out["raw_tfidf_s"] / out["tfidf_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--runs", type=int, default=1, help="runs per size (the median is printed)")
    parser.add_argument("--seeds", type=int, default=1000, help="multi-hop seed chunks to link")
    parser.add_argument("--data", default="/tmp/fabnb-bench-corpus", help="where the generated corpora are kept")
    parser.add_argument("--dask", type=int, nargs="*", default=[], help="sizes that also run on 2 Dask workers")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--generate", type=int, help=argparse.SUPPRESS)
    add_smoke(parser)
    args = parser.parse_args()
    apply_smoke(args, sizes=[20_000], runs=1, seeds=10, data=tempfile.mkdtemp(prefix="fabnb-smoke-corpus-"))
    if args.generate:
        print(json.dumps(generate(args.generate, Path(args.one))))
        return
    if args.one:
        print(json.dumps(run_one(Path(args.one), args.seeds, args.workers)))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2 ** 30:.0f} GiB")
    results = {}
    for n in args.sizes:
        folder = Path(args.data) / f"tokens-{n}"
        if not info_path(folder).exists():
            start = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--generate", str(n), "--one", str(folder)], check=True,
                           capture_output=True)
            print(f"generated {folder} in {time.perf_counter() - start:.0f} s", flush=True)
        runs = []
        for _ in range(args.runs):
            done = subprocess.run([sys.executable, __file__, "--one", str(folder), "--seeds", str(args.seeds)],
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"{n:,} tokens: the run failed (exit {done.returncode}): {done.stderr[-2000:]}", flush=True)
                break
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if not runs:
            continue
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
        results[n] = med
        print(f"{med['tokens']:>12,.0f} tokens ({med['bytes'] / 2 ** 20:,.0f} MB on disk), {med['documents']:,.0f} "
              f"docs, {med['chunks']:,.0f} chunks, vocab {med['vocabulary']:,.0f}, median of {len(runs)}: "
              f"chunk {med['chunk_s']:.1f} s, TF-IDF {med['tfidf_s']:.1f} s (raw scikit-learn "
              f"{med['raw_tfidf_s']:.1f} s: {med['tfidf_vs_raw']:.2f} of its speed), {med['seeds']:.0f} links "
              f"{med['links_s']:.1f} s; stage {med['stage_s']:.1f} s ({med['tokens_per_s']:,.0f} tokens/s; "
              f"loading {med['load_s']:.1f} s more). Peak RSS after loading {med['load_peak_mb']:,.0f} MB, chunking "
              f"{med['chunk_peak_mb']:,.0f} MB, TF-IDF {med['tfidf_peak_mb']:,.0f} MB, links "
              f"{med['links_peak_mb']:,.0f} MB; runs: {[round(r['stage_s'], 1) for r in runs]} s", flush=True)
        if n in args.dask:
            done = subprocess.run([sys.executable, __file__, "--one", str(folder), "--seeds", str(args.seeds),
                                   "--workers", "2"], capture_output=True, text=True)
            if done.returncode:
                print(f"{n:,} tokens on Dask: failed (exit {done.returncode}): {done.stderr[-2000:]}", flush=True)
            else:
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"{n:>12,} tokens on Dask (2 workers, vectorize_corpus(text=False)): chunk + TF-IDF "
                      f"{r['chunk_s'] + r['tfidf_s']:.1f} s, "
                      f"links {r['links_s']:.1f} s; stage {r['stage_s']:.1f} s; client peak "
                      f"{r['peak_rss_mb']:,.0f} MB, worker peaks {[round(w) for w in r['worker_peak_mb']]} MB",
                      flush=True)
    if len(results) >= 2:
        sizes = sorted(results)
        for small, large in zip(sizes, sizes[1:]):
            ratio = results[large]["stage_s"] / results[small]["stage_s"]
            size = results[large]["tokens"] / results[small]["tokens"]
            print(f"time ratio {large:,} / {small:,}: {ratio:.2f} for {size:.2f}x the tokens")


if __name__ == "__main__":
    main()
