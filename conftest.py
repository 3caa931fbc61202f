"""Session set-up shared by tests/ and notebooks/ (nbmake): environment only, no fixtures.

- third-party telemetry and .env loading off, before anything imports deepeval;
- the FAB-Bench release read in place from ../shared/data/fab-bench when it is there
  (CI lays it beside the clone); elsewhere the kit downloads and verifies it;
- a cache of the suite's own, so nothing writes to the user's real ~/.cache/fabnb.
Its hooks mark notebook items, and run the notebooks that share an output folder one at a time.
Notebook kernels started by nbmake inherit this environment.
"""

import contextlib
import os
from pathlib import Path

import pytest

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
MODEL_DOCTESTS = {"fabnb.models.local", "fabnb.rag.system.ReferenceRAG", "fabnb.judge.geval.score_one",
                  "fabnb.rag.retrievers.minilm_embedder", "fabnb.models.local.default_llm",
                  "fabnb.models.local.stop_shared_servers", "fabnb.tester.study.generator_llms"}


def pytest_collection_modifyitems(config, items):
    """nbmake's notebook items get the ``notebook`` marker, and the examples that start a model the ``model``
    marker, so the fast lane can leave them out."""
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)
        elif type(item).__name__ == "DoctestItem" and item.name in MODEL_DOCTESTS:
            item.add_marker(pytest.mark.model)


#: The markers the suite's lanes are cut by; benchmarks/bench_ci.py sums the durations by them.
LANE_MARKERS = ("model", "notebook", "browser", "binder")


_CONFIG: list = []  # the session's config (a report hook is not given it)


def pytest_configure(config):
    # Taken out of the environment by the process that writes the file: a pytest a test starts (test_properties
    # runs one) or a worker must not add its own lines to it.
    config._fabnb_durations = None if hasattr(config, "workerinput") else os.environ.pop("FABNB_DURATIONS", None)
    _CONFIG[:] = [config]


def pytest_runtest_logreport(report):
    """With ``FABNB_DURATIONS`` set (``.ci/run`` sets it), one JSON line per test phase: its node id, phase, seconds
    and lane markers, written by the controlling process only (under ``-n`` it gets every worker's reports)."""
    path = getattr(_CONFIG[0], "_fabnb_durations", None) if _CONFIG else None
    if not path:
        return
    import json

    markers = [m for m in LANE_MARKERS if m in report.keywords]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"test": report.nodeid, "when": report.when, "seconds": round(report.duration, 3),
                             "outcome": report.outcome, "markers": markers}) + "\n")


def _shared_folders(notebook: Path) -> list[Path]:
    """The ``outputs/NN_name`` folders a notebook names (its own, and another's it reads or resumes)."""
    import re

    names = sorted(set(re.findall(r"outputs/(\d\d_[a-z_]+)", notebook.read_text(encoding="utf-8"))))
    return [notebook.parent / "outputs" / name for name in names]


@contextlib.contextmanager
def notebook_turn(notebook: Path):
    """Hold the notebook's turn: one lock file per output folder it names, taken in name order, released on exit.

    Notebooks that name the same folder (07 resumes 06's answers, 04 reads 03's pairs) run one at a time under
    ``-n``: run at once on two workers, the second's store is refused as in use (seen: 06 and 07 from empty folders,
    a ``HeldError`` in 2 of 3 runs). A test that makes a notebook's own model calls (tests/gen_helpers.py,
    ``notebook_parameters``) takes the same turn, so the two never ask the model at once: whichever runs second
    replays the other's replies from the suite's response cache (at once, notebook 08 and the RAG-TESTER study
    each asked the model: 317 s more test time in the CI of 27ae300)."""
    import fcntl

    with contextlib.ExitStack() as stack:
        for folder in _shared_folders(notebook):
            folder.parent.mkdir(parents=True, exist_ok=True)
            lock = stack.enter_context(open(folder.parent / f".{folder.name}.suite-lock", "w"))
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Each notebook runs in its turn (:func:`notebook_turn`)."""
    if not str(item.fspath).endswith(".ipynb"):
        return (yield)
    with notebook_turn(Path(str(item.fspath))):
        return (yield)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The last hook of each pytest process (the controller and every ``-n`` worker): the interpreter's final
    garbage collections skip what is alive now (``gc.freeze``), since the process is about to end. With DeepEval,
    Haystack and PyTorch imported, a worker took 1.6 s to exit (0.3 s frozen), and the controller waits for both."""
    import gc

    gc.freeze()
