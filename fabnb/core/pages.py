"""Pages with no code on screen: a one-cell notebook that Voilà runs and shows, served until stopped.

``fabnb rate --serve`` (the rating app) and ``fabnb explore DIR`` (the results explorer of
a run folder) are each one such page. :func:`one_cell_notebook` writes the notebook (as
nbstripout leaves it); :func:`serve_page` starts Voilà on it, waits until it answers,
prints the line a user needs, and stops it, its kernels included, on Ctrl-C, SIGTERM or
SIGHUP.

Examples
--------
>>> import tempfile, json, pathlib
>>> path = one_cell_notebook(pathlib.Path(tempfile.mkdtemp()) / "page.ipynb", "print('hi')")
>>> json.loads(path.read_text())["cells"][0]["source"]
["print('hi')"]
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import FabnbError

__all__ = ["PageError", "one_cell_notebook", "serve_page"]


class PageError(FabnbError):
    """Voilà could not serve the page."""


def one_cell_notebook(path: str | Path, source: str) -> Path:
    """Write a notebook of one code cell (``source``, no outputs) to ``path``."""
    path = Path(path)
    cell = {"cell_type": "code", "execution_count": None, "id": "0", "metadata": {}, "outputs": [],  # as nbstripout
            "source": source.splitlines(keepends=True)}
    nb = {"cells": [cell], "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                       "name": "python3"},
                                        "language_info": {"name": "python"},
                                        # fabnb's Voilà template: nothing fetched from another host (fabnb.core.voila)
                                        "voila": {"template": "fabnb"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    return path


def serve_page(source: str, env: dict, *, port: int, host: str = "127.0.0.1", voila_args=(), ready=None,
               echo=print, timeout: float = 60.0, name: str = "page") -> int:
    """Serve a one-cell notebook with Voilà on ``host:port`` until stopped; Voilà's exit status (0 when stopped).

    Parameters
    ----------
    source : str
        The cell (it reads its settings from ``env``, which the kernel inherits).
    env : dict
        The environment of Voilà and its kernels.
    voila_args : list of str
        More Voilà options (an identity provider, say).
    ready : str
        Printed through ``echo`` once the page answers.
    """
    import shutil
    import sys
    import tempfile

    from .process import answers_tcp, start_process, stop_on_signals, stop_process, wait_ready

    folder = Path(tempfile.mkdtemp(prefix=f"fabnb-{name}-"))
    notebook = one_cell_notebook(folder / f"{name}.ipynb", source)
    # fabnb's Voilà (fabnb.core.voila): jupyter_server's scrubbing access log, idle kernels culled, one per rater.
    cmd = [sys.executable, "-m", "fabnb.core.voila", str(notebook), "--no-browser", f"--port={port}",
           f"--Voila.ip={host}", "--Voila.port_retries=0", "--show_tracebacks=False", "--theme=light", *voila_args]
    proc = start_process(cmd, cwd=folder, env=env)
    try:
        with stop_on_signals():  # SIGTERM and SIGHUP stop Voilà and its kernels as Ctrl-C does
            state = wait_ready(proc, lambda: answers_tcp(host, port), timeout, interval=0.3)
            if state == "exited":
                raise PageError(f"Voilà stopped before serving (exit status {proc.returncode}); its messages are "
                                "above. Is voila installed (pip install fabnb)?")
            if state == "timeout":
                raise PageError(f"Voilà did not answer on port {port} within {timeout:.0f} s.")
            if ready:
                echo(ready)
            return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_process(proc)
        shutil.rmtree(folder, ignore_errors=True)  # the page's notebook; what it writes lives elsewhere
