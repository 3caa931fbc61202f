"""Servers fabnb starts: stopped the same way on Ctrl-C, SIGTERM and SIGHUP, children included."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from fabnb.core.process import answers_tcp, start_process


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_fabnb_rate_serve_stops_voila_and_its_kernels_on_a_signal(tmp_path, fab_bench_dir, sig):
    """Once, Voilà kept serving (curl answered 200) after ``fabnb rate --serve`` got SIGTERM; Ctrl-C worked."""
    from conftest import qa_folder

    qa = qa_folder(fab_bench_dir, tmp_path / "qa", 2)
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fabnb.cli", "rate", "--serve", "--qa", str(qa),
                                 "--ratings", str(tmp_path / "ratings")], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "Rating app: " not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        port = int(log.read_text().split("Rating app: http://127.0.0.1:", 1)[1].split("/", 1)[0])
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children and answers_tcp("127.0.0.1", port)
        os.kill(proc.pid, sig)  # the command alone, as a service manager sends it (not its process group)
        assert proc.wait(timeout=40) == 0
        gone, alive = psutil.wait_procs(children, timeout=20)
        assert not alive, [p.cmdline()[:3] for p in alive]
        assert not answers_tcp("127.0.0.1", port)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_child_takes_sigint_even_when_its_parent_ignores_it(tmp_path):
    """JupyterLab started in the background by a script (``jupyter lab &``) ignores SIGINT, and so did every run it
    started: *Stop* (SIGINT) left the run going to its end (seen when the suite ran from a backgrounded script)."""
    script = "import signal, time; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)" \
             "; time.sleep(30)"
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # this process as `jupyter lab &` leaves it
    try:
        proc = start_process([sys.executable, "-c", script], stdout=subprocess.PIPE)
    finally:
        signal.signal(signal.SIGINT, ignored)
    try:
        assert proc.stdout.readline().strip() == b"True"
        proc.send_signal(signal.SIGINT)  # what Stop sends
        assert proc.wait(timeout=20) != 0  # a KeyboardInterrupt ended it, not the sleep
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
