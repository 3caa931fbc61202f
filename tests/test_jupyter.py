"""fabnb inside Jupyter: the server extension's routes (pytest-jupyter, a real Jupyter server), the runs it
starts and stops, the ``%fabnb`` magics in a real IPython kernel, and the JupyterLab extension's build record.

Checked by breaking it once: with ``confine`` comparing paths as text (no ``resolve``), the symbolic-link case
of ``test_every_path_is_confined_to_the_root`` failed; with ``@web.authenticated`` taken off ``RunsHandler``,
``test_routes_refuse_requests_without_authentication`` failed; with ``Jobs.start`` not asking ``held_by``,
``test_a_second_run_on_a_held_folder_is_refused_naming_the_holder`` failed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pytest_jupyter.jupyter_core import *  # noqa: F401,F403 - the fixtures, for this module alone
from pytest_jupyter.jupyter_server import *  # noqa: F401,F403
from pytest_jupyter.pytest_tornasync import *  # noqa: F401,F403
from tornado.httpclient import HTTPClientError

from fabnb.experiment import Experiment, run_experiment, run_status
from fabnb.jupyter.api import ApiError, Results, confine, new_experiment, plan_file

from conftest import ROOT
from stub_openai import StubServer
from test_experiment import judge_or_echo, quiet, write_file

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'


# ------------------------------------------------------------------ the extension's build record
def sources_hash(folder: Path) -> str:
    """labextension/hash-sources.mjs's digest: each source's path (sorted), a NUL, its bytes, a NUL."""
    files = ["package.json", "tsconfig.json"] + [f"{d}/{p.name}" for d in ("schema", "src", "style")
                                                 for p in (folder / d).iterdir() if p.is_file()]
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.encode() + b"\0" + (folder / f).read_bytes() + b"\0")
    return h.hexdigest()


def test_the_extensions_conventions_are_declared_and_its_words_go_through_the_translator():
    """A settings schema in the built extension (the Settings Editor's "FAB-Bench"), shortcuts for Plan, Run and
    Stop, and every command's label and caption through JupyterLab's translator (``trans.__``)."""
    import re

    schema = json.loads((ROOT / "fabnb" / "jupyter" / "labextension" / "schemas" / "fabnb-jupyterlab" /
                         "plugin.json").read_text())
    assert {"runsFolder", "pollSeconds", "pageRows", "confirmUsd"} <= set(schema["properties"])
    assert {s["command"] for s in schema["jupyter.lab.shortcuts"]} == {"fabnb:plan", "fabnb:run", "fabnb:stop"}
    source = (ROOT / "labextension" / "src" / "index.ts").read_text()
    plain = re.findall(r"\b(?:label|caption|title): '", source)
    assert not plain, f"{len(plain)} label(s) in index.ts bypass the translator: wrap them in trans.__()"
    assert source.count("trans.__(") >= 20
    for panel in ("index.ts", "runs.ts", "viewer.ts", "status.ts"):  # every panel's words: api.ts's __(), one bundle
        text = (ROOT / "labextension" / "src" / panel).read_text()
        plain = re.findall(r"el\('[a-z0-9]+', '[^']+'|\.(?:title|caption) = '[^']+'", text)
        assert not plain, f"{panel}: {plain[:3]} bypass the translator: wrap them in __()"


def test_the_built_extension_matches_its_sources():
    """Sources changed without a rebuild (``cd labextension && npm ci && npm run build``) fail here."""
    recorded = (ROOT / "fabnb" / "jupyter" / "labextension" / "sources.sha256").read_text().strip()
    assert sources_hash(ROOT / "labextension") == recorded, (
        "labextension/ changed since fabnb/jupyter/labextension was built: run `cd labextension && npm ci && "
        "npm run build` and commit fabnb/jupyter/labextension")
    built = json.loads((ROOT / "fabnb" / "jupyter" / "labextension" / "package.json").read_text())
    assert built["name"] == "fabnb-jupyterlab" and (ROOT / "fabnb" / "jupyter" / "labextension" /
                                                    built["jupyterlab"]["_build"]["load"]).is_file()


def test_the_installed_package_carries_both_extensions():
    """What ``pip install`` put in place: the labextension and the server extension's switch (the list commands
    read these, checked in .ci/run)."""
    share = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "fabnb-jupyterlab"
    assert (share / "package.json").is_file() and (share / "install.json").is_file()
    switch = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "fabnb.json"
    assert json.loads(switch.read_text()) == {"ServerApp": {"jpserver_extensions": {"fabnb": True}}}
    import fabnb

    points = fabnb._jupyter_server_extension_points()
    assert points[0]["app"].name == "fabnb"


# ------------------------------------------------------------------ plain functions (fabnb.jupyter.api)
def test_every_path_is_confined_to_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "a" / "link").symlink_to(outside)
    assert confine(root, "a") == (root / "a").resolve()
    assert confine(root, str(root / "a")) == (root / "a").resolve()  # an absolute path inside is fine
    for bad in ("../outside", "a/../../outside", str(outside), "a/link", "/etc"):
        with pytest.raises(ApiError, match="outside the server's root") as info:
            confine(root, bad)
        assert info.value.status == 403
    with pytest.raises(ApiError, match="does not exist") as info:
        confine(root, "a/missing")
    assert info.value.status == 404


def test_the_plan_of_a_file_with_an_error_names_its_line_and_key(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "x"\noutput = "o"\n[contexts]\nwindowz = [1]\n')
    answer = plan_file(tmp_path, "bad.toml")
    assert not answer["ok"] and "line 4" in answer["error"] and "windowz" in answer["error"]
    assert "allowed:" in answer["error"]


def test_the_plan_names_variables_the_server_lacks(tmp_path, monkeypatch):
    monkeypatch.delenv("FABNB_TEST_URL", raising=False)
    monkeypatch.delenv("FABNB_TEST_KEY", raising=False)
    write_file(tmp_path)
    answer = plan_file(tmp_path, "experiment.toml")
    assert not answer["ok"] and answer["missing_env"] == ["FABNB_TEST_KEY", "FABNB_TEST_URL"]
    assert "environment JupyterLab was started in" in answer["error"] and answer["output"] == "out"


def test_the_plan_has_its_time_from_kept_probes_or_a_probe_on_demand(tmp_path, monkeypatch):
    """Seen: Plan in JupyterLab gave no time ("not probed"). Now the probes a run kept give it without a call, and
    *Measure the time* probes in a child process."""
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        path = write_file(tmp_path, sample=2, windows="[1]", modes='["A"]', metrics='["relevance"]')
        plain = plan_file(tmp_path, "experiment.toml")
        assert plain["ok"] and "not probed" in plain["text"] and len(server.requests) == 0
        probed = plan_file(tmp_path, "experiment.toml", probe=True)
        assert probed["ok"] and "not probed" not in probed["text"] and "probes: " in probed["text"]
        assert all(r["seconds"] is not None for r in probed["rows"]) and len(server.requests) > 0
        assert not (tmp_path / "out").exists()  # a plan writes nothing
        run_experiment(Experiment.from_file(path), progress=False, echo=quiet)  # keeps its probes
        path.write_text(path.read_text().replace("sample = 2", "sample = 3"), encoding="utf-8")
        asked = len(server.requests)
        kept = plan_file(tmp_path, "experiment.toml")
    assert kept["ok"] and "kept from" in kept["text"] and "not probed" not in kept["text"]
    assert len(server.requests) == asked  # no call: the kept probes' time


def test_a_new_experiment_is_the_commented_offline_example_and_never_overwrites(tmp_path):
    first = new_experiment(tmp_path, ".")
    second = new_experiment(tmp_path, ".")
    assert (first, second) == ("experiment.toml", "experiment-1.toml")
    text = (tmp_path / first).read_text()
    assert 'output = "fabnb-runs/experiment"' in text and "# " in text and "[judge]" in text
    exp = Experiment.from_file(tmp_path / first)
    assert exp.output == (tmp_path / "fabnb-runs" / "experiment").resolve()
    # Seen: two runs made from New experiment were both named "offline-demo" in the sidebar.
    assert (exp.name, Experiment.from_file(tmp_path / second).name) == ("experiment", "experiment-1")
    named = new_experiment(tmp_path, ".", "euv-study.toml")
    assert Experiment.from_file(tmp_path / named).name == "euv-study"
    with pytest.raises(ApiError, match="letters, digits"):
        new_experiment(tmp_path, ".", 'x" injected = "y.toml')


def test_the_runs_list_puts_live_runs_first_then_the_newest(tmp_path):
    """Seen: the run cards swapped order between polls (the oldest first, equal times in any order)."""
    from fabnb.experiment.progress import write_marker
    from fabnb.jupyter.api import runs

    for name, started in (("old", "2026-01-01T10:00:00"), ("new", "2026-03-01T10:00:00"),
                          ("mid", "2026-02-01T10:00:00")):
        out = tmp_path / name
        out.mkdir()
        write_marker(out, "same-name", "x.toml")
        (out / "manifest.json").write_text(json.dumps({"runs": [{"started": started, "status": "finished"}]}))
    listed = runs(tmp_path)
    assert [r["path"] for r in listed] == ["new", "mid", "old"]
    assert {r["label"] for r in listed} == {"finished"}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run on the scripted server whose answers and reasons hold hostile HTML: (root, folder)."""
    root = tmp_path_factory.mktemp("root")
    saved = dict(os.environ)

    def hostile(request, n):
        status, body, headers = judge_or_echo(request, n)
        if not request.get("response_format"):
            body["choices"][0]["message"]["content"] = HOSTILE + " " + body["choices"][0]["message"]["content"]
        return status, body, headers

    try:
        os.environ.update(FABNB_CACHE_DIR=str(root / "cache"), FABNB_TEST_KEY="sk-test")
        with StubServer(hostile) as server:
            os.environ["FABNB_TEST_URL"] = server.base_url
            (root / "study").mkdir()
            run_experiment(Experiment.from_file(write_file(root / "study")), progress=False, probe=False, echo=quiet)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return root, root / "study" / "out"


def test_results_come_in_pages_through_the_explorer(finished_run):
    root, folder = finished_run
    results = Results(root, page_size=5)
    summary = results.summary("study/out/run.fabnb")  # the marker file, as a double-click sends it
    assert summary["name"] == "stub-study" and summary["cells"] == 16 and summary["status"]["state"] == "finished"
    assert summary["notes"] == [  # the viewer says what the scores are worth, and how to check the judge
        "The judge is not calibrated against experts: every score here is the judge's alone. Rate a sample of this "
        "run: fabnb rate --from study/out --sample 60 --raters A,B (docs/experiment.md, \"The judge against "
        "experts\")."]
    # The run's results page (the one renderer): made on the first open, kept while the run stays the same.
    index = results.page_file("study/out/run.fabnb", "index.html")
    made = index.stat().st_mtime_ns
    shown = _registered(results.page_file("study/out", "data/summary.js"))
    assert shown["means"] and all("n = 4 / 4" in row["shown"] for row in shown["means"])
    cells = _registered(results.page_file("study/out", "data/cells.js"))
    assert len(cells["rows"]) == 16 and set(cells["metrics"]) == {"relevance", "depth"}
    assert not (index.parent / "data" / "detail-0000.js").exists()  # written when a cell first asks for it
    first = _registered(results.page_file("study/out", "data/detail-0000.js"))[0]
    assert first["answer"].startswith(HOSTILE)  # sent as text: the renderer sets it with textContent
    assert results.page_file("study/out", "index.html").stat().st_mtime_ns == made
    for name in ("../../manifest.json", "data/../../../etc/passwd", "made-from.txt", ".fabnb.lock", "data/x.js"):
        with pytest.raises(ApiError) as info:
            results.page_file("study/out", name)
        assert info.value.status == 404, name
    runs = results.compare_runs("study/out/run.fabnb", "study/out")  # "Compare with..." in the viewer
    assert runs["verdict"] == "no regression" and runs["base"] == runs["candidate"] == "study/out"
    assert runs["summary"][0].startswith("ref: average candidate - base = 0.000")
    with pytest.raises(ApiError, match=r"^study holds no manifest.json"):  # named from the root, not the disk
        results.compare_runs("study", "study/out")
    with pytest.raises(ApiError, match="margin='wide' is not a number"):
        results.compare_runs("study/out", "study/out", margin="wide")
    with pytest.raises(ApiError, match="two or more raters"):
        results.rate_sample("study/out", 4, ["solo"])
    with pytest.raises(ApiError, match="n='many' is not a whole number"):
        results.rate_sample("study/out", "many", ["a", "b"])
    drawn = results.rate_sample("study/out/run.fabnb", 4, ["a", "b"])  # "Rate a sample of this run"
    assert drawn == {"file": "study/out/calibration/rate.ipynb", "n": 4, "raters": ["a", "b"]}
    assert json.loads((root / drawn["file"]).read_text())["cells"][0]["source"][-1].endswith('rating_app(study="..")')
    assert results.summary("study/out")["calibration"] is None
    (index.parent / "data" / "detail-0000.js").unlink()  # the run went on (the study was drawn into it) since
    again = _registered(results.page_file("study/out", "data/detail-0000.js"))[0]
    assert again["answer"] == first["answer"]  # the page's own cells, by their keys: never another cell's text
    with pytest.raises(ApiError, match="is no part of this page") as info:
        results.page_file("study/out", "data/detail-0001.js")
    assert info.value.status == 404
    calibrated = _registered(results.page_file("study/out", "data/summary.js"))  # the study drawn: page made again
    assert calibrated["calibration"] is None and calibrated["name"] == "stub-study"


def _registered(path):
    """The value a page's data script registers (``FABNB.add(name, value);``)."""
    text = path.read_text(encoding="utf-8")
    return json.loads(text[text.index(", ") + 2:text.rindex(");")])


def test_a_cut_store_line_and_a_broken_manifest_are_named_not_a_blank_view(finished_run, tmp_path):
    import shutil

    root, folder = finished_run
    copy = tmp_path / "root" / "copy"
    shutil.copytree(folder, copy)
    with open(copy / "scores.jsonl", "a") as fh:
        fh.write('{"system": "ref", "cut')
    summary = Results(tmp_path / "root").summary("copy")
    assert summary["cells"] == 16 and any("scores.jsonl, line 33" in n for n in summary["notes"])
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(ApiError, match=r"manifest.json") as info:
        Results(tmp_path / "root").summary("copy")
    assert info.value.status == 422 and "restore it or choose a new output folder" in str(info.value)
    (tmp_path / "root" / "empty").mkdir()
    with pytest.raises(ApiError, match="holds neither answers.jsonl nor scores.jsonl"):
        Results(tmp_path / "root").summary("empty")


def test_the_paths_a_manifest_records_are_read_only_inside_the_root(finished_run, tmp_path, monkeypatch):
    """Issue 46 item 2: a run folder inside the root whose manifest points outside it. Neither the questions'
    folder nor the experiment file it names is read (one pointed at /usr made the server walk /usr)."""
    import shutil

    import fabnb.data.datasets

    from conftest import FAB_BENCH, qa_folder

    root, folder = finished_run
    outside = tmp_path / "outside"
    secret = qa_folder(FAB_BENCH, outside / "secret-qa", 1000, "[!_]*.json", prefix="SECRET ")
    (outside / "exp.toml").write_text(f'[questions]\nsource = "{secret}"\n')
    inner = tmp_path / "root" / "copy"
    shutil.copytree(folder, inner)
    manifest = json.loads((inner / "manifest.json").read_text())
    read = []
    real = fabnb.data.datasets.read_qa_files
    monkeypatch.setattr(fabnb.data.datasets, "read_qa_files", lambda source, *a, **k: read.append(str(source)) or
                        real(source, *a, **k))
    for hostile in ({"questions_source": "/usr"}, {"questions_source": str(secret)},
                    {"questions_source": None, "experiment_file": str(outside / "exp.toml")}):
        (inner / "manifest.json").write_text(json.dumps({**manifest, **hostile}))
        results = Results(tmp_path / "root")
        summary = results.summary("copy")
        assert summary["cells"] == 16 and not [r for r in read if r.startswith(("/usr", str(outside)))], hostile
        assert any("outside the server's root" in n for n in summary["notes"]), summary["notes"]
        page = results.page_file("copy", "index.html").parent
        assert "SECRET" not in "".join(p.read_text() for p in (page / "data").iterdir())
    inside = tmp_path / "root" / "qa"
    shutil.copytree(secret, inside)
    (inner / "manifest.json").write_text(json.dumps({**manifest, "questions_source": str(inside)}))
    results = Results(tmp_path / "root")
    assert results.summary("copy")["cells"] == 16 and str(inside) in read
    page = results.page_file("copy", "index.html").parent
    assert "SECRET" in (page / "data" / "questions.js").read_text() + (page / "data" / "cells.js").read_text()


# ------------------------------------------------------------------ the routes, on a real Jupyter server
@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"fabnb": True}}}


@pytest.fixture
def jp_root_dir(finished_run):
    return finished_run[0]


def _get(jp_fetch, loop, *parts, **kwargs):
    return loop.run_until_complete(jp_fetch("fabnb", "api", *parts, **kwargs))


def test_warming_imports_what_a_first_open_needs_once():
    code = ("import sys; from fabnb.jupyter.api import Results; r = Results('.'); "
            "assert 'pandas' not in sys.modules and 'fabnb.views.explorer' not in sys.modules; "
            "t = r.warm(); t.join(); assert {'pandas', 'fabnb.views.explorer', 'fabnb.rag'} <= set(sys.modules); "
            "assert r.warm() is None")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_routes_refuse_requests_without_authentication(jp_fetch, jp_asyncio_loop):
    for parts, method, body in [(("runs",), "GET", None), (("runs",), "POST", "{}"), (("doctor",), "GET", None),
                                (("results", "summary"), "GET", None), (("plan",), "GET", None)]:
        with pytest.raises(HTTPClientError) as info:
            _get(jp_fetch, jp_asyncio_loop, *parts, method=method, body=body, headers={"Authorization": "token no"},
                 params={"path": "study/out"})
        assert info.value.code == 403, parts
    key = base64.urlsafe_b64encode(b"study/out").decode().rstrip("=")
    with pytest.raises(HTTPClientError) as info:  # the results page: sent to the login page, never served
        jp_asyncio_loop.run_until_complete(jp_fetch("fabnb", "page", key, "data", "cells.js", follow_redirects=False,
                                                    headers={"Authorization": "token no"}))
    assert info.value.code in (302, 403) and b"FABNB.add" not in (info.value.response.body or b"")
    # Authenticated but from a page without the XSRF cookie: a POST by cookie alone is refused too.
    with pytest.raises(HTTPClientError) as info:
        _get(jp_fetch, jp_asyncio_loop, "new", method="POST", body="{}",
             headers={"Authorization": "", "Cookie": "username-127-0-0-1=forged"})
    assert info.value.code == 403


def test_the_kinds_route_lists_the_registry_with_a_kind_added_in_one_module(jp_fetch, jp_asyncio_loop, toy_kind):
    kinds = {k["name"]: k for k in json.loads(_get(jp_fetch, jp_asyncio_loop, "kinds").body)}
    assert {"reference", "http", "llamaindex", "toyrag"} <= set(kinds)
    assert kinds["toyrag"]["doc"] == "a toy RAG product, for the test" and kinds["toyrag"]["needs_url"]
    assert [(s["name"], s["required"], s["types"]) for s in kinds["toyrag"]["settings"]] == [
        ("collection", True, "a string"), ("depth", False, "an integer")]
    made = json.loads(_get(jp_fetch, jp_asyncio_loop, "new", method="POST",
                           body=json.dumps({"folder": "", "kind": "toyrag"})).body)
    with pytest.raises(HTTPClientError) as info:
        _get(jp_fetch, jp_asyncio_loop, "new", method="POST", body=json.dumps({"folder": "", "kind": "nope"}))
    assert info.value.code == 400
    assert made["file"].endswith(".toml")


def test_routes_answer_the_runs_and_the_results(jp_fetch, jp_asyncio_loop, jp_serverapp):
    results = jp_serverapp.web_app.settings["fabnb_results"]
    assert results._warming is None
    runs = json.loads(_get(jp_fetch, jp_asyncio_loop, "runs").body)
    assert [(r["path"], r["state"]) for r in runs] == [("study/out", "finished")]
    assert results._warming is not None  # a run to open: the viewer's imports are being made
    summary = json.loads(_get(jp_fetch, jp_asyncio_loop, "results", "summary", params={"path": "study/out"}).body)
    assert summary["cells"] == 16 and set(summary) == {"name", "path", "status", "cells", "notes", "calibration"}
    key = base64.urlsafe_b64encode(b"study/out").decode().rstrip("=")
    index = jp_asyncio_loop.run_until_complete(jp_fetch("fabnb", "page", key, "index.html"))
    assert index.headers["Content-Type"].startswith("text/html") and b"renderResults(" in index.body
    script = jp_asyncio_loop.run_until_complete(jp_fetch("fabnb", "page", key, "data", "detail-0000.js"))
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert json.dumps(HOSTILE)[1:-1].encode() in script.body  # as data: the renderer shows it as text
    for bad_key, name in [(key, "made-from.txt"), (base64.urlsafe_b64encode(b"../..").decode().rstrip("="),
                                                   "index.html"), ("!!", "index.html")]:
        with pytest.raises(HTTPClientError) as info:
            jp_asyncio_loop.run_until_complete(jp_fetch("fabnb", "page", bad_key, name))
        assert info.value.code in (403, 404), (bad_key, name)
    runs_compared = json.loads(_get(jp_fetch, jp_asyncio_loop, "results", "compare-runs", params={
        "base": "study/out", "candidate": "study/out"}).body)
    assert runs_compared["verdict"] == "no regression"
    doctor = json.loads(_get(jp_fetch, jp_asyncio_loop, "doctor").body)
    assert {"area", "status"} <= set(doctor[0])


def test_routes_refuse_paths_outside_the_root_and_bad_arguments(jp_fetch, jp_asyncio_loop):
    for parts, params in [(("results", "summary"), {"path": "../../etc"}), (("results", "summary"), {"path": "/etc"}),
                          (("plan",), {"file": "../experiment.toml"}),
                          (("results", "compare-runs"), {"base": "study/out", "candidate": "../../etc"})]:
        with pytest.raises(HTTPClientError) as info:
            _get(jp_fetch, jp_asyncio_loop, *parts, params=params)
        assert info.value.code == 403 and "outside the server's root" in info.value.response.body.decode()
    with pytest.raises(HTTPClientError) as info:
        _get(jp_fetch, jp_asyncio_loop, "runs", method="POST", body="[1]")
    assert info.value.code == 400 and "must be a JSON object" in info.value.response.body.decode()
    with pytest.raises(HTTPClientError) as info:
        _get(jp_fetch, jp_asyncio_loop, "runs", method="POST", body=json.dumps({"file": "/etc/passwd"}))
    assert info.value.code == 403


def test_malformed_requests_are_a_400_naming_the_field_never_a_500(jp_fetch, jp_asyncio_loop, caplog):
    """Issue 46 item 8: these answered 500 with a traceback (TypeError, KeyError, RecursionError), and a 300 MB
    ``file`` value took 31 s and wrote a 314 MB line into the log."""
    import logging

    caplog.set_level(logging.DEBUG)
    cases = [
        ("GET", ("results", "compare-runs"), {"base": "study/out", "candidate": "study/out", "margin": "[1]"}, None,
         400, "margin='[1]' is not a number"),
        ("POST", ("runs",), None, '{"file": ' + "[" * 100_000 + "]" * 100_000 + "}", 400,
         "the request body nests deeper than 64"),
        ("POST", ("runs",), None, json.dumps({"file": ["a"]}), 400, "runs: file must be a string"),
        ("POST", ("new",), None, json.dumps({"folder": {"a": 1}}), 400, "new: folder must be a string"),
        ("POST", ("runs",), None, json.dumps({"file": "x" * 5000}), 400, "a path or name has at most 4,096"),
        ("POST", ("runs",), None, json.dumps({"file": "canary-" + "x" * (2 * 1024 * 1024)}), 413,
         "over the 1,048,576 a request may send"),
    ]
    for method, parts, params, body, status, words in cases:
        with pytest.raises(HTTPClientError) as info:
            _get(jp_fetch, jp_asyncio_loop, *parts, method=method, params=params, body=body)
        said = info.value.response.body.decode()
        assert info.value.code == status and words in said, (parts, info.value.code, said[:300])
        assert len(said) < 2000  # the value is never echoed whole
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert not [r.getMessage()[:200] for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert any(" 400 " in f" {m} " or m.startswith("400 ") for m in logged.splitlines())  # the log was captured
    assert "canary-" not in logged and len(logged) < 200_000


def test_a_run_started_from_the_server_finishes_and_a_second_is_refused(jp_fetch, jp_asyncio_loop, jp_root_dir,
                                                                        monkeypatch):
    root = jp_root_dir
    (root / "fresh").mkdir(exist_ok=True)
    with StubServer(judge_or_echo, delay=0.2) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)  # the server's own environment: its runs read it
        monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
        monkeypatch.setenv("FABNB_CACHE_DIR", str(root / "cache"))
        write_file(root / "fresh", sample=2, windows="[1]", modes='["A"]', name="fresh")
        started = json.loads(_get(jp_fetch, jp_asyncio_loop, "runs", method="POST",
                                  body=json.dumps({"file": "fresh/experiment.toml"})).body)
        assert started["output"] == "fresh/out"
        with pytest.raises(HTTPClientError) as info:
            _get(jp_fetch, jp_asyncio_loop, "runs", method="POST", body=json.dumps({"file": "fresh/experiment.toml"}))
        assert info.value.code == 409 and f"process {started['pid']}" in info.value.response.body.decode()
        deadline, states = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            run = next(r for r in json.loads(_get(jp_fetch, jp_asyncio_loop, "runs").body) if r["path"] == "fresh/out")
            states.append(run["state"])
            if run["state"] not in ("starting", "running", "ending"):
                break
            time.sleep(0.2)
    assert states[-1] == "finished", (states, (root / "fresh" / "out" / "run.log").read_text()[-2000:])
    assert {"starting", "running"} & set(states[:-1])  # seen while it ran, then done
    judged = [r for r in server.requests if r.get("response_format")]
    assert len(judged) == 4 and len((root / "fresh" / "out" / "answers.jsonl").read_text().splitlines()) == 2


def test_a_run_above_the_threshold_waits_for_yes_from_jupyterlab(jp_fetch, jp_asyncio_loop, jp_root_dir, monkeypatch):
    """Issue 46 item 5: JupyterLab's Run asks too. The route answers 409 with ``confirm`` (the extension shows a
    dialog with the reason); sent again with ``yes`` it starts, and its process has --yes."""
    root = jp_root_dir
    (root / "dear").mkdir(exist_ok=True)
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
        monkeypatch.setenv("FABNB_CACHE_DIR", str(root / "cache"))
        write_file(root / "dear", sample=1, windows="[1]", modes='["A"]', name="dear", budget="confirm_usd = 0")
        planned = json.loads(_get(jp_fetch, jp_asyncio_loop, "plan", params={"file": "dear/experiment.toml"}).body)
        assert "over the $0.00 that asks first" in planned["confirm"]
        with pytest.raises(HTTPClientError) as info:
            _get(jp_fetch, jp_asyncio_loop, "runs", method="POST", body=json.dumps({"file": "dear/experiment.toml"}))
        answer = json.loads(info.value.response.body)
        assert info.value.code == 409 and answer["confirm"] is True and "asks first" in answer["error"]
        assert not (root / "dear" / "out").exists() and not server.requests
        started = json.loads(_get(jp_fetch, jp_asyncio_loop, "runs", method="POST",
                                  body=json.dumps({"file": "dear/experiment.toml", "yes": True})).body)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = next(r for r in json.loads(_get(jp_fetch, jp_asyncio_loop, "runs").body) if r["path"] == "dear/out")
            if run["state"] not in ("starting", "running", "ending"):
                break
            time.sleep(0.2)
    assert started["output"] == "dear/out" and run["state"] == "finished", run


def test_a_run_whose_process_outlives_its_folder_is_ending_until_the_process_ends(tmp_path):
    """Once Resume, clicked as the sidebar said "stopped", was refused (409): the stopped run's process was still
    stopping the embedded model's server. Until that process ends its state is "ending"."""
    from fabnb.experiment import write_manifest, write_marker
    from fabnb.jupyter.api import runs

    out = tmp_path / "out"
    out.mkdir()
    write_marker(out, "demo", str(tmp_path / "experiment.toml"))
    write_manifest(out, {"name": "demo", "runs": [{"status": "stopped", "started": "2026-12-03T12:00:00+00:00"}]})

    class Alive:  # a Jobs whose process of that folder is still up
        def folders(self):
            return {str(out.resolve())}

        def stops_asked(self):
            return set()

    assert [r["state"] for r in runs(tmp_path)] == ["stopped"]
    assert [(r["state"], r["started_here"]) for r in runs(tmp_path, Alive())] == [("ending", True)]


def test_a_second_run_on_a_held_folder_is_refused_naming_the_holder(jp_root_dir, monkeypatch):
    from fabnb.core.records import hold
    from fabnb.jupyter.jobs import Jobs

    monkeypatch.setenv("FABNB_TEST_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    held = jp_root_dir / "held"
    held.mkdir(exist_ok=True)
    write_file(held)
    (held / "out").mkdir(exist_ok=True)
    with hold(held / "out", "a terminal run"):
        with pytest.raises(ApiError, match=r"in use by process \d+ \(a terminal run\)") as info:
            Jobs(jp_root_dir).start("held/experiment.toml")
    assert info.value.status == 409


STOPPABLE = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, {tests!r})
    from stub_openai import StubServer
    from test_experiment import judge_or_echo
    with StubServer(judge_or_echo, delay=0.25) as s:
        print(s.base_url, flush=True)
        sys.stdin.readline()  # the test writes a line once the stop has landed: the rerun needs no slow server
        s.delay = 0
        time.sleep(600)
    """)


#: A scripted server whose answers take a minute each (its probes, of at most 48 tokens, are quick).
SLOW_ANSWERS = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, {tests!r})
    from stub_openai import StubServer
    from test_experiment import judge_or_echo
    def reply(request, n):
        if (request.get("max_tokens") or 0) > 64:
            time.sleep(60)
        return judge_or_echo(request, n)
    with StubServer(reply) as s:
        print(s.base_url, flush=True)
        time.sleep(600)
    """)


def slow_server(script: str = STOPPABLE) -> subprocess.Popen:
    """The scripted server of :data:`STOPPABLE` in its own process (its first line: the base URL); write a line to
    its standard input to make it fast."""
    return subprocess.Popen([sys.executable, "-c", script.format(tests=str(ROOT / "tests"))],
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)


def make_fast(server: subprocess.Popen) -> None:
    server.stdin.write("fast\n")
    server.stdin.flush()


def one_at_a_time(folder: Path) -> Path:
    """4 questions, one window, mode A, two metrics, one call at a time (12 calls)."""
    path = write_file(folder, sample=4, windows="[1]", modes='["A"]')
    path.write_text(path.read_text().replace("concurrency = 2", "concurrency = 1"))
    return path


def test_stop_is_a_clean_stop_that_a_rerun_resumes(tmp_path, monkeypatch):
    """Stop sends SIGINT: the manifest says stopped, every stored line is whole, Run again finishes the rest."""
    from fabnb.jupyter.jobs import Jobs

    server = slow_server()
    try:
        monkeypatch.setenv("FABNB_TEST_URL", server.stdout.readline().strip())
        monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
        monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
        one_at_a_time(tmp_path)
        jobs = Jobs(tmp_path)
        jobs.start("experiment.toml")
        answers = tmp_path / "out" / "answers.jsonl"
        deadline = time.monotonic() + 90
        while not (answers.exists() and answers.read_text().count("\n") >= 1) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert jobs.stop("out")["stopped"]
        proc = jobs._procs[str((tmp_path / "out").resolve())]["proc"]
        assert proc.wait(60) == 130
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert manifest["runs"][-1]["status"] == "stopped" and "KeyboardInterrupt" in manifest["runs"][-1]["cause"]
        kept = answers.read_text().splitlines()
        assert 1 <= len(kept) < 4 and all(json.loads(line) for line in kept)
        # The sidebar's counts after a stop are what is stored (once it said "answers: 0/2" over a stored answer).
        stage = next(s for s in run_status(tmp_path / "out")["stages"] if s["stage"] == "answers")
        assert stage["ok"] == sum(json.loads(line)["status"] == "ok" for line in kept) and stage["planned"] == 4
        make_fast(server)
        jobs.start("experiment.toml")
        proc = jobs._procs[str((tmp_path / "out").resolve())]["proc"]
        assert proc.wait(120) == 0, (tmp_path / "out" / "run.log").read_text()[-2000:]
    finally:
        server.kill()
        server.wait()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["runs"][-1]["status"] == "finished"
    assert len(answers.read_text().splitlines()) == 4  # the kept answers were not asked again


def test_stop_says_stopping_at_once_and_a_second_stop_abandons_the_calls_in_flight(tmp_path, monkeypatch):
    """Seen: after Stop a card still said "running", with its Stop button, for about 3 minutes while the calls in
    flight finished. Now "stopping" from the click, the calls in flight counted, and a second Stop leaves at once."""
    from fabnb.experiment.progress import read_progress
    from fabnb.jupyter.api import runs
    from fabnb.jupyter.jobs import Jobs

    server = slow_server(SLOW_ANSWERS)  # each answer takes a minute: both calls are in flight when Stop comes
    try:
        monkeypatch.setenv("FABNB_TEST_URL", server.stdout.readline().strip())
        monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
        monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
        write_file(tmp_path, sample=4, windows="[1]", modes='["A"]', metrics='["relevance"]')
        jobs = Jobs(tmp_path)
        jobs.start("experiment.toml")
        out = tmp_path / "out"
        _wait_for(lambda: (read_progress(out) or {}).get("stage") == "answers" and (out / "manifest.json").exists())
        time.sleep(1.0)  # the two calls are sent
        jobs.stop("out")
        listed = runs(tmp_path, jobs)[0]
        assert (listed["state"], listed["label"]) == ("stopping", "stopping…")
        _wait_for(lambda: (read_progress(out) or {}).get("state") == "stopping")
        assert read_progress(out)["in_flight"] == 2 and run_status(out)["state"] == "stopping"
        proc = jobs._procs[str(out.resolve())]["proc"]
        start = time.monotonic()
        jobs.stop("out")  # the second stop: the calls in flight are abandoned
        assert proc.wait(30) == 130 and time.monotonic() - start < 30
    finally:
        server.kill()
        server.wait()
    status = run_status(out)
    assert (status["state"], status["label"], status["cause"]) == ("stopped", "stopped by you", None)
    assert "stopped" in (out / "run.log").read_text()


def _wait_for(test, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not test():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.1)


# ------------------------------------------------------------------ the magics, in a real IPython kernel
class Kernel:
    """A real IPython kernel (jupyter_client) in ``cwd``; ``run(code)`` returns what it printed and its status."""

    def __init__(self, cwd: Path, env: dict):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env)

    def run(self, code: str, timeout: float = 180, during=None) -> tuple[str, str]:
        msg_id = self.kc.execute(code)
        out, status, deadline = [], None, time.monotonic() + timeout
        while status is None:
            if during is not None and during():
                during = None
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                assert time.monotonic() < deadline, f"the kernel did not finish {code[:60]!r}: {''.join(out)}"
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                out.append("\n".join(content["traceback"]))
            elif kind in ("execute_result", "display_data"):
                out.append(content["data"].get("text/plain", ""))
            elif kind == "status" and content["execution_state"] == "idle":
                status = self.kc.get_shell_msg(timeout=30)["content"]["status"]
        return "".join(out), status

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def test_the_magics_in_a_real_kernel_run_plan_stop_and_resume(tmp_path):
    server = slow_server()
    kernel = None
    try:
        url = server.stdout.readline().strip()
        env = {**os.environ, "FABNB_TEST_URL": url, "FABNB_TEST_KEY": "sk-test",
               "FABNB_CACHE_DIR": str(tmp_path / "cache")}
        kernel = Kernel(tmp_path, env)
        assert kernel.run("%load_ext fabnb")[1] == "ok"
        said, _ = kernel.run("%fabnb frobnicate")
        assert "invalid choice: 'frobnicate'" in said and "Usage: %fabnb doctor" in said
        toml = one_at_a_time(tmp_path).read_text()
        said, status = kernel.run("%%fabnb run --dry-run --no-probe\n" + toml)
        assert status == "ok" and "4 questions; 12 calls planned, 0 done, 12 to do" in said
        assert not (tmp_path / "out").exists()  # the plan asks nothing and writes nothing
        said, _ = kernel.run("%%fabnb run\nname = 'x'\noutput = 'o'\n[contexts]\nwindowz = [1]\n")
        assert "the %%fabnb cell" in said and "windowz" in said and "line 4" in said

        answers = tmp_path / "out" / "answers.jsonl"

        def interrupt_after_an_answer():
            if answers.exists() and answers.read_text().count("\n") >= 1:
                kernel.km.interrupt_kernel()  # the kernel's stop button
                return True
            return False

        said, status = kernel.run("%%fabnb run --no-probe\n" + toml, during=interrupt_after_an_answer)
        assert "stopped; what was answered is kept: run this cell again to resume" in said, said[-2000:]
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert manifest["runs"][-1]["status"] == "stopped"
        kept = len(answers.read_text().splitlines())
        assert 1 <= kept < 4
        make_fast(server)
        said, status = kernel.run("%%fabnb run --no-probe\n" + toml)
        assert status == "ok" and "finished: ref answers 4/4 ok" in said, said[-2000:]
        said, _ = kernel.run("%fabnb results out")
        assert "ResultsExplorer" in said
    finally:
        if kernel is not None:
            kernel.close()
        server.kill()
        server.wait()
