"""What the server extension's routes answer, as plain functions over the server's root: every decision is here.

The routes of :mod:`fabnb.jupyter.server` only parse a request and call these. Each takes the server's root
and paths relative to it, confines them there (:func:`confine`), and returns JSON-ready data; a problem is an
:class:`ApiError` with the HTTP status and a message that names the file and what to do. The results views
read through :class:`Results`, which keeps one :class:`fabnb.views.explorer.Explorer` per run folder (made again
when a store grows) and answers in pages.

Examples
--------
>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> confine(root, "../etc/passwd", must_exist=False)
Traceback (most recent call last):
...
fabnb.jupyter.api.ApiError: '../etc/passwd' is outside the server's root; name a path inside it.
>>> runs(root)
[]
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from pathlib import Path

from ..core.errors import FabnbError

__all__ = ["MAX_BODY_BYTES", "MAX_DEPTH", "ApiError", "Results", "confine", "doctor_table", "kind_table", "loads",
           "new_experiment", "plan_file", "rate_page", "runs", "text_field"]

#: The longest path or name a request may send (a value over it is never repeated whole in a message or a log).
MAX_PATH_CHARS = 4096

#: The files of a results page (fabnb.views.page): what ``Results.page_file`` may serve, nothing else.
_PAGE_FILE = re.compile(r"index\.html|results\.(js|css)|data/(summary|cells|questions|detail-\d{4})\.js|"
                        r"figures/[A-Za-z0-9_.-]+\.png")


class ApiError(FabnbError):
    """A request the server refuses: ``status`` is the HTTP status, the message says why and what to do."""

    def __init__(self, message: str, status: int = 400, **extra):
        super().__init__(message)
        self.status, self.extra = status, extra  # extra: more fields of the answer (confirm=True, say)


def confine(root: str | Path, rel: str, must_exist: bool = True) -> Path:
    """``rel`` resolved inside ``root`` (symbolic links followed); :class:`ApiError` outside it or missing."""
    root = Path(root).resolve()
    if not isinstance(rel, str) or "\x00" in rel or len(rel) > MAX_PATH_CHARS:
        raise ApiError(f"{str(rel)[:80]!r} is not a path; name a path inside the server's root.")
    path = (root / rel.lstrip("/") if not os.path.isabs(rel) else Path(rel)).resolve()
    if path != root and root not in path.parents:
        raise ApiError(f"{rel!r} is outside the server's root; name a path inside it.", 403)
    if must_exist and not path.exists():
        raise ApiError(f"{rel!r} does not exist under the server's root.", 404)
    return path


def _rel(root: Path, path: Path) -> str:
    return os.path.relpath(path, Path(root).resolve())


def runs(root: str | Path, jobs=None) -> list[dict]:
    """Every run under the root (:func:`fabnb.experiment.progress.find_runs`) with its status: the running ones
    first, then by the time their last run started.

    Reads each run's marker, manifest and progress file, never a store. ``jobs`` (the server's
    :class:`fabnb.jupyter.jobs.Jobs`) adds ``started_here`` to the runs this server started.
    """
    from ..experiment.progress import STATE_LABELS, find_runs, run_status

    root = Path(root).resolve()
    out = [run_status(folder, root) for folder in find_runs(root)]
    mine = jobs.folders() if jobs is not None else set()
    asked = jobs.stops_asked() if jobs is not None else set()
    for r in out:
        where = str((root / r["path"]).resolve())
        r["started_here"] = where in mine
        if r["started_here"] and r["state"] == "new":
            r["state"] = "starting"  # its process is up and has not taken its folder yet
        elif r["state"] == "running" and where in asked:
            r["state"] = "stopping"  # from the click on, before the run's progress file says so
        elif r["started_here"] and r["state"] not in ("running", "stopping"):
            # Its process let the folder go and is still up (stopping the embedded model's server): a Resume
            # now would be refused, so the sidebar offers none until it has ended.
            r["state"] = "ending"
        if r["state"] != "running" or not r["label"]:
            r["label"] = STATE_LABELS.get(r["state"], r["state"])
    # Live runs first, the newest first; then the others, the newest first. The sidebar keeps the order it has
    # shown while it is open (a run that ends stays where it was) and puts a new run on top.
    return sorted(out, key=lambda r: (r["state"] not in _LIVE, _negated(str(r.get("started") or ""))))


_LIVE = ("starting", "running", "stopping", "ending")


def _negated(text: str) -> tuple:
    """A sort key that orders ISO times newest first (an unknown time last)."""
    return (not text, tuple(-ord(c) for c in text))


#: The longest a plan with probes may take (starting the embedded model and three short calls per endpoint).
PROBE_TIMEOUT_S = 600


def plan_file(root: str | Path, rel: str, probe: bool = False, confirm_usd: float | None = None) -> dict:
    """The plan of an experiment TOML (what ``fabnb run FILE --dry-run`` prints).

    Without ``probe`` no call is made: the time comes from the probes a run of the folder kept, else it is "not
    probed". With ``probe`` the plan is made in a child process (``fabnb run FILE --dry-run`` does the same): it
    starts the embedded model if the file names it, measures each endpoint with three short calls, and ends,
    taking the model's server with it; the server's own process starts nothing.

    Returns
    -------
    dict
        ok (False: ``error`` is the file/line/key message), text (the plan as the CLI prints it), rows (its
        table), output (the run's folder, relative to the root, or None when it is outside), missing_env (the
        environment variables this server lacks, which a run started from here needs), running (the holder
        of the output folder when a run holds it), confirm (why the run must be confirmed before it starts,
        :meth:`fabnb.experiment.Plan.confirmation`, with ``confirm_usd`` (JupyterLab's setting) over the file's
        threshold; or None).
    """
    path = confine(root, rel)
    if confirm_usd is not None and (isinstance(confirm_usd, bool) or not isinstance(confirm_usd, (int, float))
                                    or not 0 <= confirm_usd < 1e9):
        raise ApiError(f"confirm_usd = {str(confirm_usd)[:40]!r} is not a number of dollars (0 or more); fix it in "
                       "the FAB-Bench settings, or clear it to use the file's.")
    if probe:
        return _plan_in_child(root, rel)
    return _plan(root, path, probe=False, confirm_usd=confirm_usd)


def _plan_in_child(root: str | Path, rel: str) -> dict:
    """:func:`plan_file` with probes, made by a child process (so the embedded model's server ends with it)."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-m", "fabnb.jupyter.api", str(root), rel], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, cwd=str(confine(root, rel).parent))
    except subprocess.TimeoutExpired:
        raise ApiError(f"{rel}: the probes took over {PROBE_TIMEOUT_S} s; is the endpoint up? Plan without "
                       "probes, or run `fabnb run FILE --dry-run` in a terminal to see where it waits.", 504) from None
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ApiError(f"{rel}: the plan with probes failed: {said[-1][:300] if said else 'no output'}; run "
                       "`fabnb run FILE --dry-run` in a terminal for the whole message.", 500) from None


def _plan(root: str | Path, path: Path, probe: bool, confirm_usd: float | None = None) -> dict:
    from ..core.records import held_by
    from ..experiment import Experiment, run_experiment
    from ..experiment.output import json_records

    try:
        exp = Experiment.from_file(path)
    except FabnbError as exc:
        return {"ok": False, "error": str(exc)}
    missing = [v for _, v in exp.missing_env()]
    out_rel = _rel(root, exp.output) if Path(root).resolve() in exp.output.resolve().parents else None
    base = {"output": out_rel, "missing_env": sorted(set(missing)),
            "running": held_by(exp.output) if exp.output.is_dir() else None}
    if missing:
        return {"ok": False, **base, "error": f"{exp.source}: the server's environment lacks "
                + ", ".join(sorted(set(missing))) + ". A run started from JupyterLab reads its endpoint variables "
                "from the environment JupyterLab was started in (not a kernel's): export them there and restart "
                "JupyterLab, or run it from a terminal."}
    said: list[str] = []
    try:
        run = run_experiment(exp, dry_run=True, probe=probe, progress=False, echo=said.append)
    except FabnbError as exc:
        return {"ok": False, **base, "error": str(exc)}
    return {"ok": True, **base, "text": "\n".join(said), "rows": json_records(run.plan.table.drop(columns=["price"])),
            "confirm": run.plan.confirmation(exp, confirm_usd)}


def doctor_table() -> list[dict]:
    """``fabnb doctor``'s table (area, check, status, detail, fix), without starting the embedded model."""
    from ..experiment.output import json_records
    from ..views.doctor import check

    return json_records(check(model=False, endpoint=False))


def kind_table() -> list[dict]:
    """The system kinds an experiment file may name, with their settings (:func:`fabnb.rag.kinds.kinds_json`): what
    the extension's New-experiment dialog offers, read at each opening, so a new kind needs no rebuild."""
    from ..rag.kinds import kinds_json

    return kinds_json()


def new_experiment(root: str | Path, folder: str, name: str = "experiment.toml", kind: str = "",
                   runs_folder: str = "fabnb-runs") -> str:
    """Write a commented experiment TOML (the offline example's, its output beside it) into ``folder``; with a
    ``kind`` other than the reference system, a ``[[systems]]`` table of that kind to fill in is added beside the
    example's (:meth:`fabnb.rag.kinds.SystemKind.template`).

    Returns the new file's path relative to the root; an existing file is never overwritten (``-1``, ``-2`` ...
    are added to the name). The experiment's name and its output folder (``<runs_folder>/<name>``; JupyterLab's
    setting) are the file's.
    """
    from ..core.paths import shipped
    from ..rag.kinds import system_kinds

    where = confine(root, folder or ".")
    if not where.is_dir():
        raise ApiError(f"{folder!r} is not a folder under the server's root.")
    known = system_kinds()
    if kind and kind not in known:
        raise ApiError(f"kind {kind[:80]!r} is not a system kind; allowed: {', '.join(known)}.")
    stem, suffix = os.path.splitext(os.path.basename(name.strip()) or "experiment.toml")
    for what, value in (("name", stem), ("runs folder", runs_folder)):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}", value or ""):
            raise ApiError(f"{what} {str(value)[:80]!r} cannot name a file or folder; use letters, digits, '.', '_' "
                           "and '-' (up to 80), starting with a letter or digit.")
    target, n = where / f"{stem}{suffix or '.toml'}", 0
    while target.exists():
        n += 1
        target = where / f"{stem}-{n}{suffix or '.toml'}"
    text = shipped("examples", "offline.toml")
    # The experiment is named as its file: two runs made from *New experiment* never share a name or a folder.
    text = text.replace("examples/offline.toml", target.name).replace(
        'output = "../fabnb-experiments/offline-demo"', f'output = "{runs_folder}/{target.stem}"').replace(
        'name = "offline-demo"', f'name = {json.dumps(target.stem)}', 1)
    if kind and not known[kind].reference:
        text = text.replace("\n[judge]", f"\n{known[kind].template()}\n[judge]", 1)
    target.write_text(text, encoding="utf-8")
    return _rel(root, target)


def rate_page(root: str | Path, folder: str) -> str:
    """Write ``rate.ipynb`` (the rating app's one cell, which Voilà renders) into ``folder``; its path."""
    from ..core.pages import one_cell_notebook

    where = confine(root, folder or ".")
    if not where.is_dir():
        raise ApiError(f"{folder!r} is not a folder under the server's root.")
    page = where / "rate.ipynb"
    if not page.exists():
        one_cell_notebook(page, "from fabnb.views.widgets import rating_app\n\nrating_app()")
    return _rel(root, page)


class Results:
    """The results views' data: one :class:`fabnb.views.explorer.Explorer` per run folder, kept while its stores
    stay the same size, answered in pages of ``page_size`` rows."""

    def __init__(self, root: str | Path, page_size: int = 50):
        self.root, self.page_size = Path(root).resolve(), page_size
        self._cache: dict[Path, tuple[tuple, object, list[str]]] = {}
        self._warming: threading.Thread | None = None

    def warm(self) -> threading.Thread | None:
        """Import what a first open needs (pandas, the explorer, the judge, the question tables: ~0.6 s of a cold
        open at the paper's scale) in a thread of its own, once; that thread, or None when it was started before.
        The runs sidebar's first listing calls it, so a double-click then waits for the stores, not for imports,
        and the server's start is not made longer by them."""
        if self._warming is not None:
            return None

        def imports():
            from .. import judge, rag  # noqa: F401
            from ..views import explorer  # noqa: F401

        self._warming = threading.Thread(target=imports, name="fabnb-warm", daemon=True)
        self._warming.start()
        return self._warming

    def _folder(self, rel: str) -> Path:
        path = confine(self.root, rel)
        from ..experiment.progress import MARKER

        return path.parent if path.name == MARKER or path.is_file() else path

    def explorer(self, rel: str):
        """The folder's explorer and the notes about what it skipped (cut lines); :class:`ApiError` when the
        folder cannot be read, naming the file."""
        from ..views.explorer import Explorer

        folder = self._folder(rel)
        stamp = tuple((p.stat().st_size, p.stat().st_mtime_ns) if p.exists() else None
                      for p in (folder / "answers.jsonl", folder / "scores.jsonl", folder / "manifest.json"))
        hit = self._cache.get(folder)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        from ..experiment.output import read_manifest

        try:
            read_manifest(folder)  # one that is not JSON: its name and what to do
        except FabnbError as exc:
            raise ApiError(f"{exc} The results cannot be shown until then.", 422) from None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ex = Explorer.from_folder(folder, page_size=self.page_size, root=self.root)
            except FileNotFoundError as exc:
                raise ApiError(str(exc), 404) from None
            except ValueError as exc:  # a manifest that is not JSON, a store of another format
                raise ApiError(f"{folder}: {exc}. Restore the file from a copy, or run the experiment again into "
                               "a new folder.", 422) from None
            except (KeyError, FabnbError) as exc:
                raise ApiError(f"{folder} was written by another fabnb release and cannot be read here ({exc}); "
                               "run the experiment again with this release into a new folder.", 422) from None
        notes = [str(w.message) for w in caught if "cut or unreadable" in str(w.message)
                 or "outside the server's root" in str(w.message)]
        self._cache[folder] = (stamp, ex, notes)
        return ex, notes

    def summary(self, rel: str) -> dict:
        """What the viewer shows around the run's page: name, path, status
        (:func:`fabnb.experiment.progress.run_status`), cells (how many), notes (cut records, paths outside the
        root, what the scores are worth) and calibration (``calibration/calibration.json``, or None). The page
        (:meth:`page_file`) holds the rest: means, coverage, figures, cells."""
        from ..experiment.progress import run_status

        folder = self._folder(rel)
        status = run_status(folder, self.root)
        ex, notes = self.explorer(rel)
        calibration = None
        if len(ex.scores):  # what the scores are worth: the judge's calibration against experts, or that there is none
            from ..judge.calibration import CalibrationError, read_calibration
            from ..judge.calibration import notes as calibration_notes

            try:
                calibration = read_calibration(folder)
                notes = notes + calibration_notes(calibration, _rel(self.root, folder))
            except CalibrationError as exc:
                notes = notes + [str(exc)]
        return {"name": status["name"], "path": _rel(self.root, folder), "status": status,
                "cells": int(len(ex.cells)), "notes": notes, "calibration": calibration}

    def page_file(self, rel: str, name: str) -> Path:
        """A file of the run's results page (:func:`fabnb.views.page.fresh_page`, the one renderer): ``index.html``
        made again when the run changed, then its ``results.js``, ``results.css``, ``data/*.js`` and ``figures/``.
        Anything else, or a name that leaves the page's folder, is refused (404)."""
        from ..core.records import HeldError
        from ..views.page import detail_file, fresh_page, page_folder

        folder = self._folder(rel)
        if not isinstance(name, str) or not _PAGE_FILE.fullmatch(name):
            raise ApiError(f"{str(name)[:80]!r} is no file of a results page.", 404)
        if name == "index.html":
            ex, _ = self.explorer(rel)  # a folder that cannot be shown says why, naming the file
            try:  # the kept explorer (not read twice); each detail file when a cell asks for it
                fresh_page(folder, root=self.root, details=False, explorer=ex)
            except HeldError as exc:
                raise ApiError(f"{exc} Reload the viewer in a moment.", 409) from None
        path = page_folder(folder) / name
        if name.startswith("data/detail-") and not path.exists():
            try:
                path = detail_file(folder, name[len("data/"):-len(".js")], self.explorer(rel)[0])
            except ValueError as exc:  # no such part, or the page is gone from the cache
                raise ApiError(str(exc), 404) from None
        if not path.is_file():
            raise ApiError(f"{name} is not in this run's page; reload the viewer to make it again.", 404)
        return path

    def rate_sample(self, rel: str, n, raters) -> dict:
        """"Rate a sample of this run": draw a judge-calibration study of the run (:func:`fabnb.judge.calibration.
        draw_study`; a study experts have begun is kept, not drawn again) and write the rating app's page for it,
        ``calibration/rate.ipynb``, which Voilà renders. Returns file (the page, from the root), n, raters."""
        from ..core.pages import one_cell_notebook
        from ..judge.calibration import draw_study, rated

        folder = self._folder(rel)
        if not isinstance(raters, list) or not all(isinstance(r, str) for r in raters):
            raise ApiError("raters must be a list of names.")
        try:
            count = int(n)
        except (TypeError, ValueError):
            raise ApiError(f"n={n!r} is not a whole number of answers to draw.") from None
        if not rated(folder):
            ex, _ = self.explorer(rel)
            try:
                draw_study(folder, count, [r.strip() for r in raters if r.strip()], ex.questions)
            except FabnbError as exc:  # too many answers, one rater, a name that cannot be a file
                raise ApiError(str(exc).replace(str(Path(self.root).resolve()) + os.sep, "")) from None
        page = folder / "calibration" / "rate.ipynb"
        if not page.exists():
            one_cell_notebook(page, 'from fabnb.views.widgets import rating_app\n\nrating_app(study="..")')
        settings = json.loads((folder / "calibration" / "settings.json").read_text(encoding="utf-8"))
        return {"file": _rel(self.root, page), "n": settings["n"], "raters": settings["raters"]}

    def compare_runs(self, base: str, candidate: str, allow: str = "", margin: str = "0.02") -> dict:
        """``fabnb compare BASE CANDIDATE`` of two run folders under the root (:func:`fabnb.experiment.compare_runs`):
        compare.json's fields, the gate's sentences and the refusal (naming what differs) as a 400. Nothing is
        written: the CLI writes compare.md and compare.json."""
        from ..experiment.comparison import ComparisonError, compare_runs

        try:
            value = float(margin)
        except ValueError:
            raise ApiError(f"margin={margin!r} is not a number (a score difference, 0-1).") from None
        allowed = [a for a in allow.split(",") if a]
        try:
            c = compare_runs(self._folder(base), self._folder(candidate), allow=allowed, margin=value)
        except ComparisonError as exc:
            raise ApiError(str(exc).replace(str(Path(self.root).resolve()) + os.sep, "")) from None
        data = c.to_json()
        data.update(base=_rel(self.root, self._folder(base)), candidate=_rel(self.root, self._folder(candidate)),
                    summary=c.summary().splitlines())
        return data


#: The largest request body or JSON argument the routes read, and the deepest nesting of one (a real request is
#: a few hundred bytes, two levels deep).
MAX_BODY_BYTES = 1024 * 1024
MAX_DEPTH = 64


def _depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (outside strings), read without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads(text: str | None, what: str) -> dict:
    """A request's JSON object argument; :class:`ApiError` naming it when it is not one, is larger than
    :data:`MAX_BODY_BYTES` or nests deeper than :data:`MAX_DEPTH`."""
    text = text or "{}"
    if len(text) > MAX_BODY_BYTES:
        raise ApiError(f"{what} holds {len(text):,} characters, over the {MAX_BODY_BYTES:,} a request may send.", 413)
    if _depth(text) > MAX_DEPTH:
        raise ApiError(f"{what} nests deeper than {MAX_DEPTH} levels; send a flat JSON object.")
    try:
        value = json.loads(text)
    except ValueError:
        raise ApiError(f"{what} is not JSON; send a JSON object.") from None
    if not isinstance(value, dict):
        raise ApiError(f"{what} must be a JSON object, not {type(value).__name__}.")
    return value


def text_field(body: dict, key: str, what: str, default: str = "") -> str:
    """A string field of a request's JSON body; :class:`ApiError` naming it when it is another type or longer than
    4,096 characters (a path or a name: the value is never repeated whole in a message or a log)."""
    value = body.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str):
        raise ApiError(f"{what}: {key} must be a string, not {type(value).__name__}.")
    if len(value) > MAX_PATH_CHARS:
        raise ApiError(f"{what}: {key} holds {len(value):,} characters; a path or name has at most "
                       f"{MAX_PATH_CHARS:,}.")
    return value


if __name__ == "__main__":  # the child of plan_file(probe=True): ROOT FILE -> the plan with probes, as JSON
    import sys

    print(json.dumps(_plan(sys.argv[1], confine(sys.argv[1], sys.argv[2]), probe=True), default=str))
