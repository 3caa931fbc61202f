"""Session set-up shared by tests/ and notebooks/ (nbmake): environment only, no fixtures.

- third-party telemetry and .env loading off, before anything imports deepeval;
- the FAB-Bench release read in place from ../shared/data/fab-bench when it is there
  (CI lays it beside the clone); elsewhere the kit downloads and verifies it;
- a cache of the suite's own, so nothing writes to the user's real ~/.cache/fabnb.
Notebook kernels started by nbmake inherit this environment.
"""

import os
from pathlib import Path

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # else Haystack looks up a telemetry host
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

ROOT = Path(__file__).resolve().parent
FAB_BENCH = Path(os.environ.get("FABNB_FAB_BENCH_DIR") or ROOT.parent / "shared" / "data" / "fab-bench")
if (FAB_BENCH / "QAs").is_dir():
    os.environ.setdefault("FABNB_FAB_BENCH_DIR", str(FAB_BENCH))
os.environ.setdefault("FABNB_CACHE_DIR", str(ROOT / ".pytest_cache" / "fabnb-cache"))


#: Docstring examples that start a model (the embedded llama.cpp server, or MiniLM): the ``model`` marker
#: keeps them out of the fast lane; the whole suite (CI) runs them.
MODEL_DOCTESTS = {"fabnb.local", "fabnb.rag.system.ReferenceRAG", "fabnb.judge.geval.score_one",
                  "fabnb.rag.retrievers.minilm_embedder"}


def pytest_collection_modifyitems(config, items):
    """nbmake's notebook items get the ``notebook`` marker, and the examples that start a model the ``model``
    marker, so the fast lane can leave them out."""
    import pytest

    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)
        elif type(item).__name__ == "DoctestItem" and item.name in MODEL_DOCTESTS:
            item.add_marker(pytest.mark.model)
