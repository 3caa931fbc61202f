"""binder/ opens the kit on Binder: Python 3.11, pins that agree with pyproject.toml, quiet libraries."""

import tomllib

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
