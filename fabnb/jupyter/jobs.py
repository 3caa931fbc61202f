"""Experiment runs started by the Jupyter server: a ``fabnb run`` process each, owned by the server, not a tab.

A run started from JupyterLab outlives a closed tab or a reloaded page. It reads its endpoint variables from
the server's environment. A second run on a folder that a run holds is refused, naming the holder (the lock
of :func:`fabnb.core.records.hold`, so a run started from a terminal counts too). *Stop* sends SIGINT, the stop a
rerun resumes; when the server itself ends, its runs get SIGTERM (Linux), which ``fabnb run`` takes as the
same clean stop. Each run writes its output to ``run.log`` in its folder.
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
from pathlib import Path

from .api import ApiError, confine, plan_file

__all__ = ["Jobs"]


class Jobs:
    """The runs this server started: start, stop, and which folders they hold.

    Parameters
    ----------
    root : Path
        The server's root: experiment files and run folders must be inside it.
    env : dict, optional
        The runs' environment (the server's own by default).
    """

    def __init__(self, root: str | Path, env: dict | None = None):
        self.root, self.env = Path(root).resolve(), env
        self._procs: dict[str, dict] = {}
        self._asked: set[str] = set()  # folders a stop was asked for (a terminal's run too)
        self._lock = threading.Lock()

    def folders(self) -> set[str]:
        """The folders of this server's runs that are still running."""
        return {folder for folder, job in self._procs.items() if job["proc"].poll() is None}

    def stops_asked(self) -> set[str]:
        """The folders whose run was asked to stop and whose lock is still held: the sidebar says "stopping…"
        from the click, before the run's own progress file does."""
        from ..core.records import held_by

        self._asked = {folder for folder in self._asked if held_by(Path(folder))}
        return set(self._asked)

    def start(self, rel: str, yes: bool = False, confirm_usd: float | None = None) -> dict:
        """Start ``fabnb run`` on the experiment file ``rel``; returns output (relative to the root) and pid.

        Refused (:class:`ApiError`): a file with an error (the plan's message), variables the server's
        environment lacks, an output folder outside the root, a folder a run holds, a plan above the
        confirmation threshold without ``yes`` (409; JupyterLab's Run asks and sends it again with yes).
        ``confirm_usd`` (JupyterLab's setting) replaces the file's cost threshold; the run it lets through is
        started with ``--yes``, since the server has asked what the setting asks.
        """
        from ..core.errors import FabnbError
        from ..core.records import held_by
        from ..experiment import Experiment

        path = confine(self.root, rel)
        with self._lock:  # two Run presses at once: the second sees the first's process
            try:
                exp = Experiment.from_file(path)
                out = exp.output.resolve()
            except FabnbError as exc:
                raise ApiError(str(exc), 422) from None
            job = self._procs.get(str(out))
            if job is not None and job["proc"].poll() is None:
                raise ApiError(f"{out} is running already (process {job['proc'].pid}, started from JupyterLab); wait "
                               "for it to end or stop it first.", 409)
            holder = held_by(out) if out.is_dir() else None
            if holder:
                raise ApiError(f"{out} is in use by {holder}; wait for it to end or stop it first.", 409)
            p = plan_file(self.root, rel, confirm_usd=confirm_usd)
            if not p["ok"]:
                raise ApiError(p["error"], 422)
            if p.get("confirm") and not yes:  # the one threshold: JupyterLab's Run asks, then sends yes
                raise ApiError(f"{rel}: {p['confirm']}", 409, confirm=True)
            yes = yes or confirm_usd is not None
            if p["output"] is None:
                raise ApiError(f"{rel}: its output folder is outside the server's root; name one inside it to run "
                               "it from JupyterLab.", 422)
            return self._spawn(path, out, rel, p["output"], exp.name, yes)

    def _spawn(self, path: Path, out: Path, rel: str, out_rel: str, name: str, yes: bool = False) -> dict:
        from ..core.process import start_process
        from ..experiment.progress import write_marker

        out.mkdir(parents=True, exist_ok=True)
        write_marker(out, name, str(path))  # the sidebar shows the run while it starts (its model, its corpus)
        log = open(out / "run.log", "ab")
        try:
            proc = start_process([sys.executable, "-m", "fabnb.cli", "run", str(path), "--no-progress",
                                  *(["--yes"] if yes else [])],
                                 env=self.env, cwd=path.parent, stdout=log)
        finally:
            log.close()
        self._procs[str(out)] = {"proc": proc, "file": rel, "started": time.time()}
        return {"output": out_rel, "pid": proc.pid}

    def stop(self, rel: str) -> dict:
        """Stop the run that holds folder ``rel`` with SIGINT (started here or from a terminal by this user).

        The run stores the answers in flight before it ends; a second stop abandons them (the same as a second
        Ctrl-C)."""
        from ..core.records import held_by

        folder = confine(self.root, rel)
        folder = folder.parent if folder.is_file() else folder
        job = self._procs.get(str(folder))
        if job is not None and job["proc"].poll() is None:
            job["proc"].send_signal(signal.SIGINT)
            self._asked.add(str(folder))
            return {"stopped": job["proc"].pid}
        holder = held_by(folder)
        pid = re.match(r"process (\d+)", holder or "")
        if pid is None:
            raise ApiError(f"{rel} is not running; nothing to stop.", 409)
        import os

        try:
            os.kill(int(pid.group(1)), signal.SIGINT)
        except OSError as exc:
            raise ApiError(f"the run in {rel} (process {pid.group(1)}) cannot be stopped from here: {exc}.", 409) \
                from None
        self._asked.add(str(folder))
        return {"stopped": int(pid.group(1))}

    def reap(self) -> None:
        """Forget finished runs (their exit statuses collected: no zombie)."""
        for folder, job in list(self._procs.items()):
            if job["proc"].poll() is not None:
                del self._procs[folder]

    def shutdown(self) -> None:
        """Stop every run still going (the server is ending): SIGTERM, the same clean stop as *Stop*."""
        from ..core.process import stop_process

        for job in self._procs.values():
            stop_process(job["proc"], grace=30)
