"""Corpus-stage throughput: chunking + TF-IDF + multi-hop link search on a generated corpus.

Each size runs in a fresh process (so peak memory is that size's own) and prints
its figures; the parent prints the 10M / 1M time ratio (the goal: at most 12,
near-linear) and peak memory (the goal: under 4 GB at 10M tokens).

The corpus is generated: documents of 2K-40K tokens of Zipf-distributed words from
a 60,000-word synthetic vocabulary mixed with the knowledge base's terms and
numbers with units, so TF-IDF sees a realistic long-tailed vocabulary.

Usage: python benchmarks/bench_corpus.py [--sizes 1000000 10000000] [--seeds 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings


def generate(n_tokens: int, seed: int = 0):
    import numpy as np
    import pandas as pd

    from fabnb.corpus import corpus_from_frame, tokenizer
    from fabnb.terms import KnowledgeBase

    rng = np.random.default_rng(seed)
    syllables = ["ka", "to", "ri", "men", "sol", "var", "di", "tec", "lo", "pha", "ne", "gra", "stru", "quin",
                 "bel", "xo", "ur", "fa", "ion", "dep"]
    vocab = list(dict.fromkeys("".join(rng.choice(syllables, size=rng.integers(2, 5))) for _ in range(90000)))[:60000]
    vocab += KnowledgeBase.default().terms.term.tolist() + ["the", "of", "and", "a", "in", "to", "is", "with"] * 50
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    weights /= weights.sum()
    enc = tokenizer()
    docs, total, i = [], 0, 0
    while total < n_tokens:
        n_words = int(rng.integers(1500, 30000))
        words = rng.choice(len(vocab), size=n_words, p=weights)
        sentences, pos = [], 0
        while pos < n_words:
            k = int(rng.integers(8, 30))
            sentence = " ".join(vocab[w] for w in words[pos:pos + k])
            if rng.random() < 0.2:
                sentence += f" at {rng.integers(1, 900)} nm"
            sentences.append(sentence.capitalize() + ".")
            pos += k
        text = " ".join(sentences)
        docs.append({"doc_id": f"doc{i:05d}", "text": text})
        total += len(enc.encode_ordinary(text))
        i += 1
    return corpus_from_frame(pd.DataFrame(docs)), total


def run_one(n_tokens: int, seeds: int) -> dict:
    import numpy as np

    from fabnb.corpus import chunk_corpus
    from fabnb.synthesis import THETA_LINK
    from fabnb.vectors import neighbours, vectorize

    corpus, tokens = generate(n_tokens)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    chunks = chunk_corpus(corpus)
    t1 = time.perf_counter()
    vectors = vectorize(chunks)
    t2 = time.perf_counter()
    rows = np.random.default_rng(1).choice(len(chunks), size=min(seeds, len(chunks)), replace=False)
    links = neighbours(vectors, rows, k=1, other_documents=True)
    valid = int((links["cosine"] > THETA_LINK).sum())
    t3 = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # Side by side: scikit-learn's TfidfVectorizer alone on the same chunks (the library vectorize is built on).
    from sklearn.feature_extraction.text import TfidfVectorizer

    t4 = time.perf_counter()
    TfidfVectorizer(stop_words="english", dtype=np.float32).fit_transform(chunks["text"])
    raw_s = time.perf_counter() - t4
    return {"raw_tfidf_s": raw_s, "tfidf_vs_raw": raw_s / (t2 - t1),
            "tokens": tokens, "documents": len(corpus.documents), "chunks": len(chunks),
            "vocabulary": len(vectors.vocabulary), "nnz": int(vectors.matrix.nnz), "seeds": len(rows),
            "valid_links": valid, "chunk_s": t1 - t0, "tfidf_s": t2 - t1, "links_s": t3 - t2,
            "total_s": t3 - t0, "tokens_per_s": tokens / (t3 - t0), "peak_rss_mb": peak_mb}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--seeds", type=int, default=1000, help="multi-hop seed chunks to link")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.seeds)))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    results = {}
    for n in args.sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--seeds", str(args.seeds)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[n] = r
        print(f"{r['tokens']:>11,} tokens, {r['documents']:>5} docs, {r['chunks']:>6} chunks, "
              f"vocab {r['vocabulary']:,}: "
              f"chunk {r['chunk_s']:.1f} s, TF-IDF {r['tfidf_s']:.1f} s, {r['seeds']} multi-hop links "
              f"{r['links_s']:.1f} s ({r['valid_links']} > theta_link); total {r['total_s']:.1f} s, "
              f"{r['tokens_per_s']:,.0f} tokens/s, peak RSS {r['peak_rss_mb']:,.0f} MB; raw scikit-learn TF-IDF "
              f"{r['raw_tfidf_s']:.1f} s (fabnb at {r['tfidf_vs_raw']:.2f} of its speed)")
    if len(results) >= 2:
        small, large = min(results), max(results)
        ratio = results[large]["total_s"] / results[small]["total_s"]
        size = results[large]["tokens"] / results[small]["tokens"]
        print(f"time ratio {large:,} / {small:,}: {ratio:.2f} for {size:.1f}x the tokens (goal: <= 12)")


if __name__ == "__main__":
    main()
