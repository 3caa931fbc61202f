"""fabnb.core.voila: the Voilà that serves fabnb's pages logs no token (issue 46 item 3)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from fabnb.core.pages import one_cell_notebook
from fabnb.core.voila import SecretFilter, rater_of_env


def test_the_filter_scrubs_tokens_from_any_record():
    record = logging.LogRecord("tornado.general", logging.WARNING, __file__, 1, "%d %s: File not allowlisted",
                               (403, "GET /voila/files/x?rater=ana&token=abc123&_xsrf=def (127.0.0.1)"), None)
    SecretFilter().filter(record)
    assert record.getMessage() == "403 GET /voila/files/x?rater=ana&token=[secret]&_xsrf=[secret] (127.0.0.1): " \
                                  "File not allowlisted"


def test_a_page_load_names_its_rater_from_the_query():
    assert rater_of_env({"QUERY_STRING": "rater=ana%20b&token=x"}) == "ana b"
    assert rater_of_env({"QUERY_STRING": ""}) is None and rater_of_env(None) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_and_accepted_requests_leave_no_token_in_the_log(tmp_path):
    """A real ``python -m fabnb.core.voila`` behind a token: refused requests that carry a token are logged with
    ``token=[secret]`` (standalone Voilà logged ``403 GET /voila/files/x?token=...`` twice, in full)."""
    notebook = one_cell_notebook(tmp_path / "page.ipynb", "print('page')")
    port, secret = _free_port(), "fabnb-canary-token-5b1e"
    log_path = tmp_path / "voila.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fabnb.core.voila", str(notebook), "--no-browser",
                                 f"--port={port}", "--Voila.ip=127.0.0.1", f"--Voila.token={secret}",
                                 "--Voila.port_retries=0"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while "is running at" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.3)
        statuses = []
        for url in (f"{base}/voila/files/x?token={secret}", f"{base}/?token=wrong-{secret}",
                    f"{base}/api/kernels?token=wrong-{secret}", f"{base}/?token={secret}"):
            try:
                statuses.append(urllib.request.urlopen(url, timeout=60).status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
        assert statuses[0] == 403 and statuses[-1] == 200, statuses
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    log = log_path.read_text(errors="replace")
    assert secret not in log, log
    assert log.count("token=[secret]") >= 4, log


def test_one_kernel_per_rater_and_a_cap_for_the_server(tmp_path, monkeypatch):
    """Item 6: every page load started a kernel that stayed (12 loads: 10 to 22 kernels, 2.4 GB). A rater's new
    page replaces her old page's kernel; past the cap the next page is refused with 503 and a message."""
    import asyncio

    import pytest
    from tornado import web

    from fabnb.core.voila import RaterKernels

    monkeypatch.setenv("FABNB_MAX_KERNELS", "2")

    async def walk():
        km = RaterKernels(connection_dir=str(tmp_path))
        page = {**os.environ, "QUERY_STRING": "rater=ana&token=x"}
        try:
            first = await km.start_kernel(kernel_name="python3", env=page)
            second = await km.start_kernel(kernel_name="python3", env=page)
            assert km.list_kernel_ids() == [second] and first != second
            await km.start_kernel(kernel_name="python3", env={**os.environ, "QUERY_STRING": ""})
            with pytest.raises(web.HTTPError) as info:
                await km.start_kernel(kernel_name="python3", env={**os.environ, "QUERY_STRING": "rater=ben"})
            assert info.value.status_code == 503 and "at once" in info.value.log_message
            assert len(km.list_kernel_ids()) == 2
        finally:
            await km.shutdown_all(now=True)

    asyncio.run(walk())
