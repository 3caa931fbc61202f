"""A run's live state (fabnb.experiment.progress): the progress file at a bounded rate, the marker, a run's status.

Checked by breaking it once: with ``run_status`` reading the manifest's ``running`` as running (no lock asked),
``test_a_killed_run_reads_interrupted_and_a_held_one_running`` failed; with ``ProgressFile.update`` writing on
every call, ``test_the_progress_file_is_rewritten_at_a_bounded_rate`` failed; with ``hold`` trying its lock once,
``test_a_status_probe_never_makes_a_second_run_fail`` failed.
"""

from __future__ import annotations

import json
import subprocess
import sys

from fabnb.experiment import Experiment, run_experiment
from fabnb.experiment.progress import MARKER, ProgressFile, find_runs, read_progress, run_status, write_marker

from stub_openai import StubServer
from test_experiment import judge_or_echo, one_question_run, quiet, write_file


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_progress_file_is_rewritten_at_a_bounded_rate(tmp_path, monkeypatch):
    clock, writes = Clock(), []
    import fabnb.experiment.progress as progress

    real = progress.write_json
    monkeypatch.setattr(progress, "write_json", lambda path, data: (writes.append(data), real(path, data)))
    bar = ProgressFile(tmp_path, total=100, desc="answers", every=1.0, clock=clock)
    for _ in range(50):  # 50 calls in 0.5 s: no write between the first and the next second
        clock.t += 0.01
        bar.update(1)
    assert len(writes) == 1
    clock.t = 1.5
    bar.update(1)
    assert len(writes) == 2 and writes[-1]["done"] == 51
    assert writes[-1]["rate_per_s"] == round(51 / 1.5, 3) and writes[-1]["eta_s"] == round(49 / (51 / 1.5), 1)
    bar.set_description("judge")  # a new stage writes at once and restarts the rate
    assert read_progress(tmp_path)["stage"] == "judge" and read_progress(tmp_path)["rate_per_s"] is None
    bar.close("finished")
    assert read_progress(tmp_path)["state"] == "finished"


def test_a_run_writes_its_marker_and_its_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("FABNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FABNB_TEST_KEY", "sk-test")
    with StubServer(judge_or_echo) as server:
        monkeypatch.setenv("FABNB_TEST_URL", server.base_url)
        path = write_file(tmp_path, sample=2, windows="[1]", modes='["A"]')
        run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    out = tmp_path / "out"
    marker = json.loads((out / MARKER).read_text())
    assert marker["name"] == "stub-study" and marker["experiment_file"] == str(path)
    # The bar counts a stage at a time, as the plan does: the last stage, judge, ended at 4 of its 4 calls.
    assert read_progress(out)["state"] == "reporting" and read_progress(out)["stage"] == "judge"
    assert (read_progress(out)["done"], read_progress(out)["total"]) == (4, 4)
    status = run_status(out, tmp_path)
    assert status["state"] == "finished" and status["path"] == "out"
    assert [(s["stage"], s["ok"], s["planned"], s["state"]) for s in status["stages"]] == \
        [("answers", 2, 2, "done"), ("judge", 4, 4, "done")]
    assert find_runs(tmp_path) == [out]


HOLD = ("import sys, time\nfrom fabnb.core.records import hold\nwith hold(sys.argv[1], 'a test run'):\n"
        "    print('held', flush=True)\n    time.sleep(60)\n")


def test_a_killed_run_reads_interrupted_and_a_held_one_running(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    write_marker(out, "demo", "demo.toml")
    manifest = {"name": "demo", "runs": [{"started": "t0", "ended": None, "status": "running"}],
                "planned": [{"stage": "answers", "calls": 4, "done": 1}, {"stage": "judge", "calls": 8, "done": 0}]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert run_status(out)["state"] == "interrupted"  # "running" in its manifest, yet nobody holds it
    (out / "progress.json").write_text(json.dumps({"stage": "answers", "done": 2, "total": 12, "eta_s": 20.0}))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        status = run_status(out)
        assert status["state"] == "running" and f"process {holder.pid}" in status["holder"]
        assert status["progress"]["eta_s"] == 20.0
        assert [(s["stage"], s["state"]) for s in status["stages"]] == [("answers", "in flight"),
                                                                       ("judge", "planned")]
        assert status["stages"][0]["eta_s"] == 20.0 and status["stages"][0]["ok"] == 2  # the live count
        # A stop was asked: "stopping", with the calls in flight, until the run lets its folder go.
        (out / "progress.json").write_text(json.dumps({"state": "stopping", "stage": "answers", "done": 2,
                                                       "total": 4, "in_flight": 2}))
        status = run_status(out)
        assert (status["state"], status["label"], status["progress"]["in_flight"]) == ("stopping", "stopping…", 2)
        from fabnb.core.records import HeldError, hold

        # The status probe took nothing from the holder: a second run is still refused, naming it.
        try:
            with hold(out, "a second run"):
                raise AssertionError("a second holder was let in")
        except HeldError as exc:
            assert f"process {holder.pid}" in str(exc)
    finally:
        holder.kill()
        holder.wait()
    assert run_status(out)["state"] == "interrupted"


def test_a_status_probe_never_makes_a_second_run_fail(tmp_path):
    """A status probe racing a run's start: the run takes its folder anyway (hold waits out a probe's instant)."""
    from fabnb.core.records import held_by, hold

    out = tmp_path / "run"
    out.mkdir()
    (out / ".fabnb.lock").write_text("")
    import fcntl
    import os
    import threading

    fd = os.open(out / ".fabnb.lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a probe that holds its shared lock for 30 ms, longer than any real one
    threading.Timer(0.03, lambda: os.close(fd)).start()
    with hold(out, "a run"):
        assert held_by(out) is not None


def test_unreadable_files_name_themselves_and_nothing_is_walked_that_should_not_be(tmp_path):
    out = tmp_path / "runs" / "a"
    out.mkdir(parents=True)
    write_marker(out, "a", "a.toml")
    (out / "manifest.json").write_text("{cut")
    status = run_status(out)
    assert status["state"] == "unreadable" and "manifest.json is not readable JSON" in status["problem"]
    assert "run the experiment again into a new folder" in status["problem"]
    hidden = tmp_path / ".venv" / "x"
    hidden.mkdir(parents=True)
    write_marker(hidden, "h", "h.toml")
    deep = tmp_path / "1" / "2" / "3" / "4" / "5"
    deep.mkdir(parents=True)
    write_marker(deep, "d", "d.toml")
    assert find_runs(tmp_path) == [out]
    assert run_status(tmp_path / "nothing-here")["state"] == "new"


def test_twenty_runs_are_listed_without_reading_a_store(tmp_path, monkeypatch):
    """Polling reads markers, manifests and progress files only: a store that cannot be opened changes nothing."""
    import builtins
    import io

    for i in range(20):
        out = tmp_path / f"run{i:02d}"
        out.mkdir()
        write_marker(out, f"r{i}", "x.toml")
        (out / "manifest.json").write_text(json.dumps({"name": f"r{i}", "runs": [{"status": "finished"}]}))
        (out / "answers.jsonl").write_text("{}\n")
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        assert not str(file).endswith(".jsonl"), f"a status poll read {file}"
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr(io, "open", guarded)  # pathlib's read_text opens through io.open
    statuses = [run_status(f, tmp_path) for f in find_runs(tmp_path)]
    assert len(statuses) == 20 and {s["state"] for s in statuses} == {"finished"}


def test_a_stopped_run_is_stopped_by_you_not_a_crash_and_counts_the_plans_calls(tmp_path):
    """Seen: a stopped run showed a red "KeyboardInterrupt:" like a crash, and "judge planned 8" (stored answers x
    metrics) where the plan said 20."""
    out = tmp_path / "run"
    out.mkdir()
    write_marker(out, "demo", "demo.toml")
    manifest = {"name": "demo", "runs": [{"started": "t0", "ended": "t1", "status": "stopped",
                                          "cause": "KeyboardInterrupt: "}],
                "planned": [{"stage": "answers", "calls": 10, "done": 0}, {"stage": "judge", "calls": 20, "done": 0}],
                "stages": [{"stage": "answers", "planned": 10, "ok": 4, "failed": 0},
                           {"stage": "judge", "planned": 8, "ok": 2, "failed": 0}]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    status = run_status(out)
    assert (status["state"], status["label"], status["cause"]) == ("stopped", "stopped by you", None)
    assert [(s["stage"], s["ok"], s["planned"], s["state"]) for s in status["stages"]] == \
        [("answers", 4, 10, "planned"), ("judge", 2, 20, "planned")]
    manifest["runs"][-1].update(status="failed", cause="OSError: disk full")
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert run_status(out)["cause"] == "OSError: disk full"  # a failure still says why


def test_a_stage_starts_from_the_plans_done_and_counts_its_own_calls(tmp_path):
    """Seen: one bar named "answers" counted answer and judge calls together ("answers: 1/63" beside "judge 0/54")."""
    clock = Clock()
    bar = ProgressFile(tmp_path, total=9, desc="answers", clock=clock)
    bar.start_stage("answers", 3, 9)
    bar.update(6)
    bar.start_stage("judge", 5, 54)
    clock.t = 2.0
    bar.update(2)
    bar.refresh()
    got = read_progress(tmp_path)
    assert (got["stage"], got["done"], got["total"], got["rate_per_s"]) == ("judge", 7, 54, 1.0)
    bar.stopping(2)
    assert (read_progress(tmp_path)["state"], read_progress(tmp_path)["in_flight"]) == ("stopping", 2)
    bar.update(1)  # an answer in flight landed: still stopping
    assert read_progress(tmp_path)["state"] == "stopping"


def test_a_run_is_listed_from_its_first_second(tmp_path, monkeypatch):
    """Seen: a new run was invisible for its first 10-20 s; the marker came after the questions, the chunking, the
    model's start and the plan."""
    import fabnb.experiment.run as run_module

    seen = []
    real = run_module._inputs

    def slow_inputs(exp, build):
        seen.append((find_runs(tmp_path), run_status(tmp_path / "out")["label"]))
        return real(exp, build)

    monkeypatch.setattr(run_module, "_inputs", slow_inputs)
    one_question_run(tmp_path, tmp_path / "cache", monkeypatch)
    assert seen == [([tmp_path / "out"], "starting")]
