"""binder/ opens the kit on Binder: Python 3.11, pins that agree with pyproject.toml, quiet libraries."""

import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

BINDER = ROOT / "binder"


def _pins():
    pins, other = {}, []
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        if "==" in line:
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = next(iter(req.specifier)).version
        else:
            other.append(line)
    return pins, other


def test_every_dependency_pinned_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins, _ = _pins()
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"binder/requirements.txt does not pin {req.name}"
        assert req.specifier.contains(pins[name]), f"{req.name}=={pins[name]} is outside pyproject's {req.specifier}"


def test_binder_installs_this_repository_last():
    _, other = _pins()
    assert other == ["."]


def test_runtime_and_start():
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"
    start = (BINDER / "start").read_text()
    assert "DEEPEVAL_TELEMETRY_OPT_OUT=1" in start and "DEEPEVAL_DISABLE_DOTENV=1" in start
    assert start.rstrip().endswith('exec "$@"')


def test_postbuild_builds_llama_cpp_portably():
    """llama.cpp is compiled in postBuild with GGML_NATIVE=OFF and no wheel cache, at a pin inside fabnb[local]."""
    import os
    import re

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable"
    text = post.read_text()
    assert text.startswith("#!/bin/bash\n") and "\nset -e\n" in text
    install = next(line for line in text.splitlines() if "pip install" in line)
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in install and "--no-cache-dir" in install
    pin = re.search(r'"llama-cpp-python\[server\]==([\d.]+)"', install).group(1)
    local = next(Requirement(r) for r in project["optional-dependencies"]["local"] if r.startswith("llama"))
    assert local.specifier.contains(pin), f"postBuild pins {pin}, outside fabnb[local]'s {local.specifier}"
    pins, _ = _pins()
    assert "llama-cpp-python" not in pins, "repo2docker would compile it natively from requirements.txt"


def test_readme_binder_links_name_files_that_exist():
    import re

    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"mybinder\.org/v2/gh/[^?\s`]+\?urlpath=(?:lab/tree|doc/tree|voila/render)/([^\s`]+)", readme)
    assert len(links) >= 2, "the README shows the start notebook and the rating app on Binder"
    assert "voila/render/apps/rate.ipynb" in readme, "the README links the code-free rating app"
    for path in links:
        assert (ROOT / path).is_file(), f"the README's Binder link names {path}, which does not exist"
    assert "binder/postBuild" in readme and "binder/rehearse" in readme


def test_postbuild_fetches_the_release_and_never_fails_the_build_on_it():
    text = (BINDER / "postBuild").read_text()
    assert "fab_bench_dir()" in text and "verify_fab_bench(root)" in text
    fetch = text[text.index("if python -c"):]
    assert "else" in fetch and "WARNING" in fetch  # a failed fetch is reported, the image still builds


def test_notebooks_that_write_results_warn_on_binder_and_offer_a_download():
    import nbformat

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        book = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in book.cells if c.cell_type == "code")
        if '"outputs/' not in code:
            continue
        assert "On Binder" in book.cells[0].source, f"{path.name}: the first cell must say Binder is temporary"
        assert "download_link(" in code, f"{path.name}: no download link for its results"


@pytest.mark.binder
def test_the_binder_rehearsal_builds_from_binder_alone_and_every_notebook_fits(tmp_path, fab_bench_dir):
    """binder/rehearse: a fresh environment from binder/ (this environment's portable llama.cpp build reused,
    not compiled again), the release fetched by postBuild from a loopback stand-in for GitHub, notebooks
    00, 05, 06 and 07 run under binder/start, each under 1,700 MB PSS for its whole process tree."""
    import subprocess
    import sys

    table = tmp_path / "binder.md"
    done = subprocess.run([sys.executable, str(BINDER / "rehearse"), "--release-dir", str(fab_bench_dir),
                           "--llama-from", sys.executable, "--venv", str(tmp_path / "venv"), "--table", str(table)],
                          capture_output=True, text=True, timeout=2400)
    print(done.stdout[-4000:], done.stderr[-4000:])  # the table and the build's log, shown on failure
    assert done.returncode == 0, done.stderr[-2000:]
    assert "postBuild: FAB-Bench release verified at" in done.stdout + done.stderr
    assert "reused the portable llama.cpp build" in done.stdout
    rows = [line.split("|")[1:-1] for line in table.read_text().splitlines()[2:]]
    assert [r[0].strip() for r in rows] == ["00_start_here", "05_rate_pairs", "06_run_rag", "07_judge_answers"]
    for name, _, peak, _ in rows:
        assert 50 < float(peak.replace(",", "")) <= 1700, f"{name}: peak {peak} MB"
