"""A run's live state: the marker of a run's folder, the progress file the runner rewrites, and a run's status.

The manifest is written at the start and at the end of each stage; between them ``progress.json`` says where
a run is (its stage, done of total, the rate and the ETA), rewritten at most once a second by
:class:`ProgressFile`, which the runner's progress bar goes through. :data:`MARKER` (``run.fabnb``) marks a
folder as an experiment's run: JupyterLab's runs sidebar finds runs by it (:func:`find_runs`) and opens it,
by double-click, in the results viewer. :func:`run_status` reads the marker, the manifest and the progress
file (never a store) and says what a run is doing. "In flight" comes from the run's lock on its folder
(:func:`fabnb.core.records.held_by`): a killed run, whose manifest still says ``running``, reads ``interrupted``.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> bar = ProgressFile(out, total=4, desc="answers", clock=iter([0.0, 0.0, 2.0, 2.0]).__next__)
>>> bar.update(2)  # two calls in 2 s: a rate of 1 a second, two left
>>> read_progress(out)["eta_s"]
2.0
>>> run_status(out)["state"]  # no marker, no manifest: not a run's folder yet
'new'
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..core.bars import release_bar_lock
from ..core.records import held_by
from .output import now, write_json

__all__ = ["MARKER", "PROGRESS", "ProgressFile", "RUN_STATES", "STATE_LABELS", "find_runs", "progress_bar",
           "read_progress", "run_status", "write_marker"]

#: The file that marks a folder as an experiment's run (JSON: its name, experiment file and fabnb version).
MARKER = "run.fabnb"
#: The runner's progress file, rewritten at a bounded rate while a stage runs.
PROGRESS = "progress.json"
#: What :func:`run_status` can say of a run.
RUN_STATES = ("new", "running", "stopping", "interrupted", "finished", "stopped", "stopped-by-budget", "failed",
              "unreadable")
#: What the runs sidebar, the CLI and the magics call each state (one vocabulary; the states are the keys).
STATE_LABELS = {"new": "new", "running": "running", "stopping": "stopping…", "interrupted": "interrupted (killed)",
                "finished": "finished", "stopped": "stopped by you", "stopped-by-budget": "stopped by its budget",
                "failed": "failed", "unreadable": "unreadable", "starting": "starting",
                "ending": "ending (stopping its model)"}
_SKIP = {"node_modules", "site-packages", "__pycache__"}


def write_marker(out: Path, name: str, experiment_file: str) -> Path:
    """Write ``run.fabnb`` into a run's folder (again at every run: it names the experiment that last ran)."""
    from .. import __version__

    path = Path(out) / MARKER
    write_json(path, {"fabnb_run": 1, "name": name, "experiment_file": experiment_file, "fabnb": __version__})
    return path


class ProgressFile:
    """A progress bar's stand-in that also rewrites ``progress.json``, at most once every ``every`` seconds.

    It takes tqdm's calls (``update``, ``set_description``, ``total``, ``n``, ``refresh``, ``close``), passes
    them on to ``bar`` when there is one, and writes the stage, done, total, the rate since the stage began
    and the ETA. A new description (the judge stage after the answers) restarts the rate.

    Parameters
    ----------
    out : Path
        The run's folder.
    bar : tqdm, optional
        The bar shown to the user (``fabnb run``'s), or None.
    total : int
    desc : str
        The stage: ``answers`` or ``judge``.
    every : float
        Seconds between two writes (a stage's start, its end and ``close`` always write).
    clock : callable
        Seconds, monotonic (a test passes its own).
    """

    def __init__(self, out: Path, bar=None, total: int = 0, desc: str = "answers", every: float = 1.0,
                 clock=time.monotonic):
        self.path = Path(out) / PROGRESS
        self.bar, self.every, self.clock = bar, every, clock
        self._n, self._total, self.desc = 0, int(total), desc
        self._start = self._last = self.clock()
        self._n0 = 0
        self._in_flight: int | None = None
        self._batch: dict | None = None  # a batch stage's state (fabnb.experiment.batching)
        self._write()

    @property
    def n(self) -> int:
        return self.bar.n if self.bar is not None else self._n

    @property
    def total(self) -> int:
        return self.bar.total if self.bar is not None else self._total

    @total.setter
    def total(self, value: int) -> None:
        self._total = int(value)
        if self.bar is not None:
            self.bar.total = value

    def update(self, n: int = 1) -> None:
        self._n += n
        if self.bar is not None:
            self.bar.update(n)
        if self.clock() - self._last >= self.every:
            self._write()

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._start, self._n0 = self.clock(), self.n
        if self.bar is not None:
            self.bar.set_description(desc)
        self._write()

    def start_stage(self, desc: str, done: int, total: int) -> None:
        """A stage begins with ``done`` of its ``total`` calls already stored (the plan's numbers): the bar counts
        that stage alone, from there, so the CLI, the sidebar and the magics all say "judge 3/20"."""
        self._n, self._total = int(done), int(total)
        self._batch = None
        if self.bar is not None:
            self.bar.reset(total=total)
            self.bar.initial = self.bar.n = int(done)  # tqdm's rate counts from ``initial``: this run's calls only
        self.set_description(desc)

    def batch_state(self, stage: str, batch_id: str, status: str, completed: int, total: int) -> None:
        """A batch of ``stage`` changed state: the bar, the sidebar and the magics say "judge (batch in progress)
        120/960" (validating, in progress, finalizing, completed), and ``progress.json`` keeps the batch's id."""
        self._batch = {"id": batch_id, "status": status, "completed": int(completed), "total": int(total)}
        self._n, self._total = int(completed), int(total)
        self.desc = f"{stage} (batch {status.replace('_', ' ')})"
        if self.bar is not None:
            self.bar.reset(total=total)
            self.bar.n = int(completed)
            self.bar.set_description(self.desc)
        self._write()

    def stopping(self, in_flight: int) -> None:
        """A stop was asked: say so at once, with the calls still in flight (written on every change: a
        watcher counts them down)."""
        self._in_flight = int(in_flight)
        if self.bar is not None:
            self.bar.set_postfix_str(f"stopping: {in_flight} call(s) in flight; stop again to abandon them")
        self._write("stopping")

    def refresh(self) -> None:
        if self.bar is not None:
            self.bar.refresh()
        self._write()

    def close(self, state: str = "closed") -> None:
        if self.bar is not None:
            self.bar.close()
        self._write(state)

    def _write(self, state: str | None = None) -> None:
        state = state or ("running" if self._in_flight is None else "stopping")
        t = self.clock()
        self._last = t
        done, total = int(self.n), int(self.total or 0)
        elapsed = t - self._start
        rate = (done - self._n0) / elapsed if elapsed > 0 and done > self._n0 else None
        eta = round((total - done) / rate, 1) if rate and total >= done else None
        try:
            write_json(self.path, {"state": state, "stage": self.desc, "done": done, "total": total,
                                    "rate_per_s": None if rate is None else round(rate, 3), "eta_s": eta,
                                    "in_flight": self._in_flight, "batch": self._batch, "updated": now()})
        except OSError:
            pass  # a full disk: the stores say so when they fail; the progress file is only for watchers


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    """A JSON file's object, or None with the problem (None, None when it does not exist)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path} is not readable JSON ({exc})"
    if not isinstance(data, dict):
        return None, f"{path} holds {type(data).__name__}, not a JSON object"
    return data, None


def read_progress(out: Path) -> dict | None:
    """The folder's ``progress.json`` (None when there is none or it cannot be read)."""
    return _read_json(Path(out) / PROGRESS)[0]


def _stage_rows(manifest: dict, progress: dict | None, in_flight: bool) -> list[dict]:
    """One row per stage (answers, judge): planned, ok, failed, and its state (planned, done, failed, in flight).

    "Planned" is the plan's number of calls (the manifest's ``planned``, the same the CLI printed and the bar
    counts to), not the stores' count: once answers fail, the judge has fewer answers to score than planned, and
    the row says so. The stage in flight counts its calls from the progress file."""
    stages: dict[str, dict] = {}

    def stage(name) -> dict:
        return stages.setdefault(str(name), {"stage": str(name), "planned": 0, "ok": 0, "failed": 0, "cost_usd": 0.0})

    plan_rows = manifest.get("planned") or []
    for row in plan_rows:
        s = stage(row.get("stage"))
        s["planned"] += int(row.get("calls") or 0)
    tallied = manifest.get("stages") or []
    for row in tallied:
        s = stage(row.get("stage"))
        s["ok"] += int(row.get("ok") or 0)
        s["failed"] += int(row.get("failed") or 0)
        s["cost_usd"] += float(row.get("cost_usd") or 0.0)
        if not plan_rows:  # a manifest from before plans were kept: the stores' count
            s["planned"] += int(row.get("planned") or 0)
    if not tallied:  # a run's first stage: what the plan found stored
        for row in plan_rows:
            stage(row.get("stage"))["ok"] += int(row.get("done") or 0)
    live = progress.get("stage") if in_flight and progress else None
    for s in stages.values():
        if s["stage"] == live:
            s["state"] = "in flight"
            s["ok"] = max(s["ok"], int(progress.get("done") or 0))
            s["eta_s"] = progress.get("eta_s")
        elif s["planned"] and s["ok"] >= s["planned"]:
            s["state"] = "done"
        elif s["failed"]:
            s["state"] = "failed"
        else:
            s["state"] = "planned"
        s["cost_usd"] = round(s["cost_usd"], 6)
    order = {"tests": 0, "answers": 1, "judge": 2, "oracle": 2}  # a [tests] run writes its tests first
    return [stages[k] for k in sorted(stages, key=lambda k: (order.get(k, 3), k))]


def run_status(folder: str | Path, root: str | Path | None = None) -> dict:
    """What a run's folder says of its run, from its marker, manifest, progress file and lock (never a store).

    Returns
    -------
    dict
        path (relative to ``root`` when given), name, state (one of :data:`RUN_STATES`), label (what to call
        it, :data:`STATE_LABELS`; "starting" before its manifest), holder (the lock's
        holder, or None), stages (stage, planned, ok, failed, cost_usd, state; eta_s in flight), progress (the
        progress file while in flight, else None), spent_usd, started, ended, cause (a failed run's, never a
        stop's), problem (a file that cannot be read, and what to do), experiment_file.
    """
    folder = Path(folder)
    marker, problem = _read_json(folder / MARKER)
    manifest, manifest_problem = _read_json(folder / "manifest.json")
    problem = problem or manifest_problem
    holder = held_by(folder) if folder.is_dir() else None
    rel = os.path.relpath(folder, root) if root is not None else str(folder)
    out = {"path": rel, "name": (marker or manifest or {}).get("name") or folder.name, "label": None, "holder": holder,
           "stages": [], "progress": None, "spent_usd": None, "started": None, "ended": None, "cause": None,
           "problem": None, "experiment_file": (marker or manifest or {}).get("experiment_file")}
    if problem:
        out.update(state="running" if holder else "unreadable", label="running" if holder else "unreadable",
                   problem=f"{problem}: restore it from a copy, or run the experiment again into a new folder.")
        return out
    if manifest is None:  # a run from its first second (its marker and lock come before the slow steps)
        out["state"] = "running" if holder else "new"
        out["label"] = "starting" if holder else "new"
        return out
    runs = manifest.get("runs") or [{}]
    last = runs[-1] if isinstance(runs[-1], dict) else {}
    status = str(last.get("status") or "new")
    if holder:
        state = "running"
    elif status in ("running", "reporting"):
        state = "interrupted"  # its manifest says running, yet nobody holds its folder: it was killed
    else:
        state = status if status in RUN_STATES else "failed"
    progress = read_progress(folder) if holder else None
    if holder and progress and progress.get("state") == "stopping":
        state = "stopping"  # a stop was asked; its calls in flight are finishing (progress: in_flight)
    # A stop the user asked for is no failure: its KeyboardInterrupt is not shown as a cause.
    cause = None if state in ("stopped", "stopping") else last.get("cause")
    out.update(state=state, label=STATE_LABELS.get(state, state),
               stages=_stage_rows(manifest, progress, bool(holder)), progress=progress,
               spent_usd=manifest.get("spent_usd"), started=last.get("started"), ended=last.get("ended"),
               cause=cause)
    return out


def find_runs(root: str | Path, depth: int = 4) -> list[Path]:
    """The folders under ``root`` (at most ``depth`` levels down) that :data:`MARKER` marks as runs, sorted.

    Hidden folders, virtual environments' site-packages and node_modules are not walked.
    """
    root = Path(root)
    found: list[Path] = []

    def walk(folder: Path, level: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        if any(e.name == MARKER and e.is_file() for e in entries):
            found.append(folder)
        if level < depth:
            for e in entries:
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and e.name not in _SKIP:
                    walk(Path(e.path), level + 1)

    walk(root, 0)
    return sorted(found)


def progress_bar(out: Path, answers: tuple[int, int], shown: bool) -> ProgressFile:
    """One bar, a stage at a time, through progress.json (JupyterLab's runs sidebar reads it while the stages run);
    ``answers`` is the first stage's done and planned."""
    release_bar_lock()  # a stop that landed inside tqdm in an earlier run of this kernel left its lock held
    bar = None
    if shown:
        from tqdm.auto import tqdm

        bar = tqdm(total=answers[1], desc="answers", unit="call")
    progress = ProgressFile(out, bar, total=answers[1], desc="answers")
    progress.start_stage("answers", *answers)
    return progress
