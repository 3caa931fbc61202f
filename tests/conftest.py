"""Shared fixtures: small hand-made score frames with known answers."""

import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fabnb.core.schema import METRICS

ROOT = Path(__file__).resolve().parents[1]
#: Set up by the root conftest.py (CI's copy beside the clone, or the kit's own download).
FAB_BENCH = Path(os.environ.get("FABNB_FAB_BENCH_DIR") or ROOT.parent / "shared" / "data" / "fab-bench")


def qa_folder(fab_bench_dir: Path, folder: Path, n: int, pattern: str = "*.json", prefix: str = "") -> Path:
    """The first ``n`` released QA files matching ``pattern`` copied to ``folder`` (created), with
    ``prefix`` put before each question (hostile HTML, say)."""
    import json

    folder.mkdir(parents=True)
    for path in sorted((fab_bench_dir / "QAs").rglob(pattern))[:n]:
        record = json.loads(path.read_text())
        record["question"] = prefix + record["question"]
        (folder / path.name).write_text(json.dumps(record))
    return folder


def long_frame(curves: dict, metric: str = "average") -> pd.DataFrame:
    """{model: {context_k: score}} -> a score frame of one metric."""
    rows = [{"model": m, "context_k": float(k), "metric": metric, "score": float(v)}
            for m, c in curves.items() for k, v in c.items()]
    return pd.DataFrame(rows)


def six_metric_frame(models=("a", "b"), contexts=(4, 8, 16, 32), seed=0) -> pd.DataFrame:
    """All six metrics for each model and context, random but reproducible."""
    rng = np.random.default_rng(seed)
    rows = [{"system": "S", "model": m, "context_k": float(k), "output_k": 1.0, "metric": metric,
             "score": float(rng.uniform(0.3, 0.9))}
            for m in models for k in contexts for metric in METRICS]
    return pd.DataFrame(rows)


def per_question(seed=0, contexts=(4, 8, 16), n=12, modes=("A", "B")):
    """Per-question scores of one system: windows 4-16K, 12 questions, mode B 0.2 above mode A, noise sd 0.1."""
    rng = np.random.default_rng(seed)
    rows = []
    for mode in modes:
        for k in contexts:
            for q in range(n):
                for m in METRICS:
                    base = 0.4 + 0.05 * np.log2(k / 4) + (0.2 if mode == "B" else 0.0)
                    rows.append({"system": "s", "model": "s", "context_k": float(k), "mode": mode, "test_id": f"q{q}",
                                 "metric": m, "score": float(np.clip(base + rng.normal(0, 0.1), 0, 1))})
    return pd.DataFrame(rows)


@pytest.fixture
def six():
    return six_metric_frame()


@pytest.fixture(scope="session")
def fab_bench_dir():
    from fabnb.data.datasets import DatasetError, fab_bench_dir

    if (FAB_BENCH / "QAs").is_dir():
        return FAB_BENCH
    try:
        return fab_bench_dir()  # the kit's own verified download into FABNB_CACHE_DIR
    except DatasetError as exc:
        pytest.fail(f"no FAB-Bench release at {FAB_BENCH} and no download ({exc}); "
                    "set FABNB_FAB_BENCH_DIR to a copy of the release.")


@pytest.fixture(scope="session")
def fab_bench(fab_bench_dir):
    from fabnb.data.datasets import load_fab_bench

    return load_fab_bench(fab_bench_dir)


@pytest.fixture(scope="session")
def evidence_chunks(fab_bench):
    """The FAB-Bench evidence corpus in 128-token chunks (its documents are short), and their vectors."""
    import warnings

    from fabnb.corpus.collection import chunk_corpus
    from fabnb.corpus.vectors import vectorize
    from fabnb.data.datasets import evidence_corpus

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = chunk_corpus(evidence_corpus(fab_bench), size=128, overlap=32)
    return chunks, vectorize(chunks)


@pytest.fixture(scope="session")
def readme_reproduction(tmp_path_factory):
    """The README's main job (``fabnb reproduce --out DIR``) run once through the console script, as typed:
    the finished process and its folder, for the README's test and the report's tests alike.

    Once per test session, not per worker: under ``pytest -n`` the first worker to get here runs it (holding a
    lock in the session's shared temporary folder) and the others read what it left."""
    import fcntl
    import json
    import re
    import shutil
    import subprocess

    root = Path(__file__).resolve().parent.parent
    main_job = re.findall(r"```bash\n(.*?)\n```", (root / "README.md").read_text(), re.S)[0]
    command = main_job.split("&&", 1)[1].split()
    exe = shutil.which("fabnb")
    assert exe and command[0] == "fabnb" and command[-2] == "--out", (exe, command)
    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared
    out, done_file = shared / "readme-main-job" / "repro", shared / "readme-main-job.json"
    with open(shared / "readme-main-job.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done_file.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            run = subprocess.run([exe, *command[1:-1], str(out)], capture_output=True, text=True, timeout=300)
            done_file.write_text(json.dumps([run.args, run.returncode, run.stdout, run.stderr]))
        args, code, stdout, stderr = json.loads(done_file.read_text())
    return subprocess.CompletedProcess(args, code, stdout, stderr), out


def pytest_terminal_summary(terminalreporter):
    """The fault-injection table (tests/test_faults.py), when its cases ran."""
    import json
    import sys

    faults = sys.modules.get("test_faults")
    rows = list(faults.TABLE) if faults is not None else []
    shared = terminalreporter.config._tmp_path_factory.getbasetemp() / "fault-table.jsonl"  # pytest -n: workers'
    if shared.exists():
        rows += [json.loads(line) for line in shared.read_text().splitlines()]
    if rows:
        terminalreporter.section("fault injection: cause recorded, requests on the rerun, cells healed")
        terminalreporter.write_line(pd.DataFrame(rows).to_markdown(index=False))


TOY_KIND = '''
from fabnb.rag import HTTPAdapter
from fabnb.rag.kinds import system_kind


@system_kind("toyrag", "a toy RAG product, for the test", {"collection": "the toy's collection",
                                                          "depth": "how deep it digs"}, ranges={"depth": (1, 9)})
class ToyRAG(HTTPAdapter):
    FIXED = ("request", "answer_path", "sources_path", "source_text", "source_id", "headers", "model")

    def __init__(self, base_url: str, collection: str, depth: int = 3, api_key: str | None = None, **kwargs):
        super().__init__("toyrag", base_url + "/ask", {"q": "{question}", "c": collection}, "answer",
                         api_key=api_key, **kwargs)
'''


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    """A system kind added by one new module, as a user's package would (then taken out again)."""
    from fabnb.rag.kinds import SYSTEM_KINDS, system_kinds

    system_kinds()
    (tmp_path / "toy_kind_module.py").write_text(TOY_KIND)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("toy_kind_module")
    yield SYSTEM_KINDS["toyrag"]
    SYSTEM_KINDS.pop("toyrag", None)
    sys.modules.pop("toy_kind_module", None)
