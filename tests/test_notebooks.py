"""Notebook hygiene: numbered names, parameters cells, calls not logic, outputs stripped.

Executing them is the job of nbmake (`--nbmake` in pyproject's addopts): every
notebook under notebooks/ runs headless as part of the suite.
"""

import ast
import re

import nbformat
import pytest

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks_and_they_are_numbered():
    assert {p.stem for p in NOTEBOOKS} >= {"00_start_here"}
    for path in NOTEBOOKS:
        assert re.fullmatch(r"\d\d_[a-z]+_[a-z_]+", path.stem), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean(path):
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    code = [c for c in book.cells if c.cell_type == "code"]
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not stripped"
        tree = ast.parse(cell.source)
        defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.For, ast.While))]
        assert not defs, f"{path.name}: logic belongs in fabnb, not in a notebook cell:\n{cell.source}"
    assert any("parameters" in c.metadata.get("tags", []) for c in code), f"{path.name}: no parameters cell"
    assert book.cells[0].cell_type == "markdown" and book.cells[0].source.startswith("# ")


def test_notebooks_are_as_nbstripout_writes_them():
    """What the git filter would commit: no outputs, no execution counts, normalized cell ids."""
    import subprocess
    import sys

    apps = sorted((ROOT / "apps").glob("*.ipynb"))  # the rating app's page (Voilà) too
    done = subprocess.run([sys.executable, "-m", "nbstripout", "--verify", *map(str, NOTEBOOKS + apps)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"run nbstripout on the notebooks:\n{done.stdout}{done.stderr}"


@pytest.mark.notebook
def test_notebook_00_draws_its_two_figures_inline(tmp_path, monkeypatch):
    """Once the section "Two figures, drawn in the notebook" showed nothing: reproduce() had switched the live
    notebook's inline backend to Agg. Executed here as a user's kernel runs it (no MPLBACKEND from CI)."""
    from nbclient import NotebookClient

    book = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
    params = next(c for c in book.cells if "parameters" in c.metadata.get("tags", []))
    params.source = f'OUT_DIR = "{tmp_path / "out"}"\nCHECK_MODEL = False'
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own default: inline
    NotebookClient(book, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    start = next(i for i, c in enumerate(book.cells) if c.source.startswith("## Two figures"))
    end = next(i for i, c in enumerate(book.cells) if i > start and c.cell_type == "markdown" and
               c.source.startswith("## "))
    drawn = [c for c in book.cells[start:end] if c.cell_type == "code"]
    assert len(drawn) == 2
    for cell in drawn:
        assert any("image/png" in out.get("data", {}) for out in cell.outputs), cell.source
    assert (tmp_path / "out" / "figures" / "fig3_scaling_panels.png").exists()
    # Issue 54 item 8: the doctor's lines whole (a table cut its fix command to "...with a portable bui..."), the
    # claims with their sentences, and reproduce() as what it wrote with the report's link, not a bare path.
    def said(start: str) -> str:
        cell = next(c for c in book.cells if c.cell_type == "code" and c.source.startswith(start))
        return "\n".join(o.get("text", "") + "".join(str(v) for v in o.get("data", {}).values())
                         for o in cell.outputs)

    doctor = said("from fabnb.views.doctor")
    assert "..." not in doctor and "…" not in doctor and "ok" in doctor
    reproduced = said("from fabnb.analysis.reproduction")
    assert "report.html](" in reproduced and "table(s)" in reproduced
    claims = said("claims[claims.verdict")
    assert "claim_id" in claims and "claim</th>" in claims


def test_a_test_that_makes_a_notebooks_calls_holds_the_lock_the_notebooks_run_takes(tmp_path):
    """Issue 48: test_study's whole study and notebook 08 (test_local's generation and notebook 03) never ask the
    model at once; whichever runs second replays. Another process cannot take the notebook's lock meanwhile.

    On a copy of notebook 08 in its own folder: on the suite's own folder this test waited for the study (234 s of
    a worker in the CI of 7d32d74)."""
    import shutil
    import subprocess
    import sys

    from gen_helpers import notebook_turn

    shutil.copy(ROOT / "notebooks" / "08_test_rag.ipynb", tmp_path)
    lock = tmp_path / "outputs" / ".08_test_rag.suite-lock"
    probe = ("import fcntl, sys\nf = open(sys.argv[1], 'w')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except OSError:\n    sys.exit(3)\n")
    with notebook_turn("08_test_rag.ipynb", tmp_path):
        held = subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=30)
    free = subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=30)
    assert (held.returncode, free.returncode) == (3, 0)
