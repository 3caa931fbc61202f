"""Every benchmark under benchmarks/ runs in its smoke mode: the same code path at tiny sizes, so a benchmark that
breaks fails the suite (``bench_jupyter.py`` once failed at once for months: ``write_stores`` rebound ``words``).

The figures a smoke run prints mean nothing; the full runs print the figures the docs quote. The two that start the
embedded model carry the ``model`` marker and ``bench_jupyter.py`` (chromium) the ``browser`` marker.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
MARKS = {"bench_eta.py": pytest.mark.model, "bench_local_build.py": pytest.mark.model,
         "bench_jupyter.py": pytest.mark.browser, "bench_page.py": pytest.mark.browser}
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))


@pytest.mark.parametrize("script", [pytest.param(s, marks=MARKS.get(s, ())) for s in SCRIPTS])
def test_every_benchmark_runs_in_its_smoke_mode(script, tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, f"{script} --smoke failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "smoke mode: tiny sizes" in done.stdout, done.stdout[-1000:]
    assert len(done.stdout.strip().splitlines()) >= 2, f"{script} printed no figures:\n{done.stdout}"


def test_every_benchmark_says_how_to_run_its_smoke_mode():
    """A new benchmark without a smoke mode fails here, before it can rot."""
    lacking = [s for s in SCRIPTS if "--smoke" not in (BENCHMARKS / s).read_text()
               and "add_smoke" not in (BENCHMARKS / s).read_text()]
    assert not lacking, f"benchmarks without a --smoke mode: {lacking}"
