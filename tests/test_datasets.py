"""FAB-Bench as a dataset: counts, schema errors, the evidence corpus, safe download."""

import hashlib
import http.server
import io
import json
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from fabnb.data import datasets as D


def test_upstream_counts(fab_bench):
    f = D.qa_frame(fab_bench)
    assert len(f) == 200
    assert f.test_type.value_counts().to_dict() == {"multi_hop": 90, "robustness": 59, "generation_quality": 51}
    assert f.question_format.value_counts().to_dict() == {"OBJECTIVE": 118, "SUBJECTIVE": 82}
    by = f.groupby(["test_type", "question_format"]).size().to_dict()
    assert by[("robustness", "OBJECTIVE")] == 33 and by[("multi_hop", "SUBJECTIVE")] == 41
    assert f.objective_subtype.value_counts().to_dict() == {"Fill": 59, "Judge": 26, "Calculation": 20, "Choice": 13}


def test_evidence_corpus_counts(fab_bench):
    c = D.evidence_corpus(fab_bench)
    assert len(c.documents) == 127 and len(c.sections) == 341
    ev = D.evidence_frame(fab_bench)
    assert len(ev) == 342  # one passage is cited by two pairs
    doc = c.document("patent_6").text
    assert "The optimal window achieved is between 600 V and 1200 V." in doc


def test_record_errors_name_file_and_field(tmp_path, fab_bench_dir):
    good = json.loads((fab_bench_dir / "QAs/1_retrieval_robustness/ROB_001.json").read_text())
    cases = {
        "missing.json": ({k: v for k, v in good.items() if k != "question"}, "missing field 'question'"),
        "type.json": ({**good, "test_id": "X1", "gold_context_sources": "text"},
                      "field 'gold_context_sources' should be list"),
        "enum.json": ({**good, "test_id": "X2", "test_type": "speed"}, "field 'test_type' is 'speed'"),
    }
    for name, (record, _) in cases.items():
        (tmp_path / name).write_text(json.dumps(record))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "ok.json").write_text(json.dumps(good))
    (tmp_path / "dup.json").write_text(json.dumps(good))
    qa = D.read_qa_files(tmp_path)
    assert [p.test_id for p in qa] == ["ROB_001"]
    problems = dict(zip(qa.problems.path.map(lambda p: Path(p).name), qa.problems.message))
    for name, (_, message) in cases.items():
        assert message in problems[name]
    assert "not valid JSON" in problems["broken.json"]
    assert "already read" in problems["ok.json"] or "already read" in problems["dup.json"]
    with pytest.raises(D.DatasetError, match="missing field 'question'"):
        D.read_qa_files([tmp_path / "missing.json"], on_error="raise")


def test_env_var_points_at_a_local_copy(fab_bench_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("FABNB_FAB_BENCH_DIR", str(fab_bench_dir))
    assert D.fab_bench_dir() == fab_bench_dir
    monkeypatch.setenv("FABNB_FAB_BENCH_DIR", str(tmp_path))
    with pytest.raises(D.DatasetError, match="has no QAs/ folder"):
        D.fab_bench_dir()


def test_verify_detects_an_altered_file(fab_bench_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(fab_bench_dir / "QAs", copy / "QAs")
    D.verify_fab_bench(copy)
    target = copy / "QAs/3_generation_quality/GEN_001.json"
    target.write_text(target.read_text().replace("a", "b", 1))
    with pytest.raises(D.DatasetError, match="GEN_001.json: SHA-256"):
        D.verify_fab_bench(copy)


def _archive(fab_bench_dir, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        top = f"FAB-Bench-{D.FAB_BENCH_COMMIT}/"
        zf.writestr(top, "")
        for p in sorted((fab_bench_dir / "QAs").rglob("*.json")):
            zf.write(p, top + p.relative_to(fab_bench_dir).as_posix())
        zf.writestr(top + "README.md", "ignored")
        for name, data in extra:
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def server():
    """A loopback HTTP server whose one archive the test sets."""
    state = {"body": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(state["body"])))
            self.end_headers()
            self.wfile.write(state["body"])

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}/release.zip"
    httpd.shutdown()


def test_download_verifies_and_caches(fab_bench_dir, server, tmp_path, monkeypatch):
    state, url = server
    state["body"] = _archive(fab_bench_dir)
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FABNB_FAB_BENCH_DIR", raising=False)
    monkeypatch.setenv("FABNB_FAB_BENCH_URL", url)
    qa = D.load_fab_bench()
    assert len(qa) == 200
    cached = tmp_path / "cache" / "fab-bench" / D.FAB_BENCH_COMMIT
    assert (cached / "QAs/_benchmark_summary.json").exists() and not (cached / "README.md").exists()
    state["body"] = b"gone"  # a second load reads the cache, not the network
    assert len(D.load_fab_bench()) == 200


@pytest.mark.parametrize("name", ["../evil.txt", "/tmp/evil.txt", "FAB-Bench-x/../../evil.txt", "C:\\evil.txt"])
def test_hostile_archive_is_refused_and_nothing_escapes(fab_bench_dir, server, tmp_path, name):
    state, url = server
    state["body"] = _archive(fab_bench_dir, extra=[(name, "owned")])
    target = tmp_path / "cache" / "fab-bench" / "x"
    with pytest.raises(D.DatasetError, match="escape the cache"):
        D.download_fab_bench(target, url=url)
    assert not target.exists()
    assert not list(tmp_path.rglob("evil.txt")) and not Path("/tmp/evil.txt").exists()
    assert not [p for p in (tmp_path / "cache" / "fab-bench").iterdir()]  # staging cleaned up


def test_symlink_member_and_tampered_file_are_refused(fab_bench_dir, server, tmp_path):
    state, url = server
    buf = io.BytesIO(_archive(fab_bench_dir))
    with zipfile.ZipFile(buf, "a") as zf:
        info = zipfile.ZipInfo(f"FAB-Bench-{D.FAB_BENCH_COMMIT}/QAs/link.json")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    state["body"] = buf.getvalue()
    with pytest.raises(D.DatasetError, match="escape the cache"):
        D.download_fab_bench(tmp_path / "t1", url=url)
    state["body"] = _archive(fab_bench_dir).replace(b'"ROB_001"', b'"ROB_999"', 1)  # bytes changed, CRC not
    with pytest.raises(D.DatasetError, match="archive is corrupt"):
        D.download_fab_bench(tmp_path / "t2", url=url)
    altered = tmp_path / "altered"
    shutil.copytree(fab_bench_dir / "QAs", altered / "QAs")
    rob = altered / "QAs/1_retrieval_robustness/ROB_001.json"
    rob.write_text(rob.read_text().replace("ROB_001", "ROB_999"))
    state["body"] = _archive(altered)  # a well-formed archive with one altered file
    with pytest.raises(D.DatasetError, match="ROB_001.json: SHA-256"):
        D.download_fab_bench(tmp_path / "t3", url=url)
    assert not (tmp_path / "t2").exists() and not (tmp_path / "t3").exists()


def test_unreachable_download_says_what_to_do(tmp_path):
    with pytest.raises(D.DatasetError, match="point FABNB_FAB_BENCH_DIR at a local copy"):
        D.download_fab_bench(tmp_path / "t", url="http://127.0.0.1:9/none.zip", timeout=2)


def test_manifest_pins_every_file(fab_bench_dir):
    rows = D._manifest()
    assert len(rows) == 201
    one = rows.iloc[0]
    assert hashlib.sha256((fab_bench_dir / one.path).read_bytes()).hexdigest() == one.sha256


def test_verify_means_exactly_the_release(fab_bench_dir, tmp_path):
    """An extra QA file is not part of the release; every bad file is named at once."""
    copy = tmp_path / "copy"
    shutil.copytree(fab_bench_dir / "QAs", copy / "QAs")
    extra = copy / "QAs/1_retrieval_robustness/ROB_999.json"
    shutil.copy(copy / "QAs/1_retrieval_robustness/ROB_001.json", extra)
    altered = copy / "QAs/3_generation_quality/GEN_002.json"
    altered.write_text(altered.read_text() + " ")
    (copy / "QAs/2_retrieval_multihop/MULTI_003.json").unlink()
    with pytest.raises(D.DatasetError) as info:
        D.load_fab_bench(copy, verify=True)
    text = str(info.value)
    assert "ROB_999.json: not part of the release" in text
    assert "GEN_002.json: SHA-256" in text and "MULTI_003.json: missing" in text


def test_strict_loader_names_every_broken_file_and_each_path_once(fab_bench_dir, tmp_path):
    copy = tmp_path / "QAs"
    shutil.copytree(fab_bench_dir / "QAs", copy)
    first, second = copy / "1_retrieval_robustness/ROB_001.json", copy / "3_generation_quality/GEN_001.json"
    first.write_text('{"test_id": "ROB_001", "question": "unterminated')
    second.write_text("[]")
    with pytest.raises(D.DatasetError) as info:
        D.read_qa_files(copy, on_error="raise")
    text = str(info.value)
    assert "2 QA file(s) could not be read" in text and "ROB_001.json" in text and "GEN_001.json" in text
    assert "at at" not in text and "starting at: line 1" in text
    loose = D.read_qa_files(copy)  # the non-strict path keeps the rest
    assert len(loose.pairs) == 198 and len(loose.problems) == 2
    for p in loose.problems.itertuples():
        assert p.path not in p.message, p.message  # the path is its own column: said once
