"""README.md opens with the two commands a new user types, and they are true."""

import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)\n```", README, re.S)


def test_readme_opens_with_main_job_then_tests():
    assert len(BLOCKS) >= 2
    main_job, tests = BLOCKS[0].strip(), BLOCKS[1].strip()
    assert main_job.startswith("pip install ") and "fabnb reproduce --out" in main_job
    # llama.cpp built portably, and never from a wheel pip cached from a native build.
    assert tests.startswith('CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir -e ".[test]"')
    assert tests.endswith("python -m pytest")
    # Nothing but the title and one line of prose before the first command.
    assert README.index("```bash") < 200


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    marked = re.search(r"<!-- test-command -->\n```bash\n(.*?)\n```\n<!-- /test-command -->", README, re.S)
    assert marked and marked.group(1) == BLOCKS[1]
    assert "<!-- test-command -->" in ci and "set -euo pipefail" in ci


def test_main_job_command_runs(readme_reproduction):
    done, out = readme_reproduction
    assert done.returncode == 0, done.stderr
    assert "claims: 148 checked" in done.stdout
    assert (out / "report.html").exists()


def test_every_module_is_on_the_maps():
    """The lazy-module list, the README's stage table and docs/package.md name every module of the package."""
    import pkgutil

    import fabnb

    modules = {m.name for m in pkgutil.iter_modules(fabnb.__path__) if not m.name.startswith("_")}
    assert modules == set(fabnb._SUBMODULES), modules ^ set(fabnb._SUBMODULES)
    package_doc = (ROOT / "docs" / "package.md").read_text()
    table = README[README.index("## The package, by pipeline stage"):]
    for name in modules:
        assert f"`{name}" in table, f"{name} is missing from the README's table"
        assert f"`fabnb.{name}" in package_doc, f"{name} is missing from docs/package.md"
    for pkg in ("rag", "judge", "experiment"):
        sub = {m.name for m in pkgutil.iter_modules(getattr(fabnb, pkg).__path__)}
        for name in sub:
            assert f"`fabnb.{pkg}.{name}`" in package_doc and f"`{name}`" in table, (pkg, name)


def test_readme_stays_a_landing_page():
    assert len(README.encode()) < 10_000, "the reference belongs in docs/"


def test_the_offline_examples_time_is_the_benchmarks():
    """Seen: the offline example was "about 8 min" in the README and "3.6-4.0 min" in the docs, each from nowhere
    the other named. The README's range is the runs ``benchmarks/bench_eta.py`` recorded in the docs."""
    said = re.search(r"offline\.toml` runs on the embedded model.*? in ([\d.]+)-([\d.]+)\s+min", README, re.S)
    assert said, "the README gives the offline example's time as a range from the benchmark"
    perf = (ROOT / "docs" / "performance.md").read_text()
    section = perf[perf.index("## The plan's time estimate"):]
    section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
    for minutes in said.groups():
        assert f"{minutes} min" in section or f"-{minutes} min" in section, (minutes, "not a bench_eta figure")
    assert "plan" in README[said.end():said.end() + 200]  # and the plan's time is the one to trust
