"""fabnb: a notebook-first research kit for adaptive RAG benchmarking.

The package follows the FAB-Bench pipeline (arXiv 2605.26476), one module per stage:

- :mod:`fabnb.schema`: the shared names (FAB-Bench fields, the six metrics);
- :mod:`fabnb.published`: the paper's published tables as data;
- :mod:`fabnb.datasets`: the 200 FAB-Bench QA pairs and their evidence corpus;
- :mod:`fabnb.corpus`: load documents and cut them into token chunks;
- :mod:`fabnb.terms`: the weighted knowledge base, technical density, precision;
- :mod:`fabnb.vectors`: TF-IDF vectors and cosine neighbours;
- :mod:`fabnb.synthesis`: the three context-synthesis strategies;
- :mod:`fabnb.passages`: readability, complexity and coverage (RAG-TESTER);
- :mod:`fabnb.llm`: one client for any OpenAI-compatible endpoint (cache, retries, concurrency);
- :mod:`fabnb.local`: the embedded Gemma 3 270M on llama.cpp's server, on loopback;
- :mod:`fabnb.doctor`: what works on this machine (``fabnb doctor``);
- :mod:`fabnb.errors`: the error family (:class:`FabnbError`) and the documented failure causes;
- :mod:`fabnb.generation`: adaptive QA generation (Algorithm 1, Eqs. 4-14, Appendix C);
- :mod:`fabnb.testcases`: RAG-TESTER's test generators and baselines;
- :mod:`fabnb.documents`: RAG-TESTER's LLM-written retrieval documents, as text and PDF;
- :mod:`fabnb.curation`: candidates to benchmark: keep / drop / edit, near-duplicates, targets;
- :mod:`fabnb.rating`: the expert-rating store, rating sessions and agreement statistics;
- :mod:`fabnb.rag`: the reference RAG system, framework adapters, context sweeps, dual mode;
- :mod:`fabnb.judge`: six G-Eval metrics via DeepEval, the RAG-TESTER oracle, reliability statistics;
- :mod:`fabnb.study`: RAG-TESTER end to end, with the reviewer's objections answered;
- :mod:`fabnb.records`: append-only JSONL files that survive a crash (the stores' storage);
- :mod:`fabnb.widgets`: Jupyter views (anywidget) over the corpus, curation and rating sessions;
- :mod:`fabnb.scores`: score frames: read, check, reshape;
- :mod:`fabnb.analysis`: scaling curves, operating points, correlations, dilution;
- :mod:`fabnb.plots`: one function per figure kind;
- :mod:`fabnb.claims`: the paper's numeric claims, recomputed;
- :mod:`fabnb.report`: ``fabnb reproduce``: every figure, table and claim.

``import fabnb`` is light: submodules and their heavy dependencies (statsmodels,
matplotlib, deepeval, openai) load when used.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = ("schema", "published", "datasets", "corpus", "terms", "vectors", "synthesis", "passages",
               "llm", "local", "generation", "testcases", "documents", "curation", "rating", "rag", "judge", "study",
               "records", "widgets", "scores", "analysis", "plots", "claims", "report", "cli", "doctor", "errors")


from .errors import CausedError, FabnbError  # noqa: E402 - light: no third-party import

__all__ = ["CausedError", "FabnbError", "__version__", *_SUBMODULES]


def __getattr__(name: str):
    # Lazy submodules: `fabnb.analysis` works after a bare `import fabnb` without paying for it up front.
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'fabnb' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
