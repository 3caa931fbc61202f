"""A run's results as one page, drawn by fabnb's one renderer (``widgets/results.js``, ``renderResults``): the
static page anyone can open (``fabnb export RUN_DIR --html OUT``: no server, no request to another host, usable from
``file://`` and from any static host), the same page kept fresh in fabnb's cache (:func:`fresh_page`) and served on
loopback (``fabnb explore``, :func:`serve_results`) or by the Jupyter server extension (JupyterLab's results viewer
shows it in a frame), and the notebook widget (:class:`fabnb.views.widgets.ResultsExplorer`, its data from
:func:`page_data` through the kernel).

The page is ``index.html`` (a shell), ``results.js`` and ``results.css`` (the renderer), and ``data/``, script
files that register themselves with the page (``FABNB.add(name, value)``; browsers refuse ``fetch`` of
``file://`` data, but load a ``<script src>``):

- ``data/summary.js``: the run's name, versions and judge; the report's means with their intervals and coverage
  (``coverage.csv``, the table of ``summary.md``); its caveats; the figures of ``report/figures`` (copied to
  ``figures/``); the tables of the summary's window sections (``report/windows.json``); and, where
  ``fabnb compare`` wrote ``compare.json`` into the folder, the comparison;
- ``data/cells.js``: one compact row per cell (system, window, mode, question, state, flags, each metric's score,
  the average), all the page filters on, and the questions' texts;
- ``data/questions.js``: each question's expected answer, gold evidence and gold documents (the detail marks the
  retrieved passages that hold it), read when a first cell is opened;
- ``data/detail-NNNN.js``: the heavy texts (the answer, each metric's judge reason, the sources' documents and
  openings), :data:`PAGE_CELLS` cells a file, loaded when a row is opened: the paper's scale (8,800 cells, 52,800
  scores) opens without reading them all.

Every text reaches the page as data and is shown with ``textContent``: an answer holding HTML shows it as text.
The cells come from :class:`fabnb.views.explorer.Explorer`, the model the widgets view.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["PAGE_CELLS", "PageData", "detail_file", "export_page", "fresh_page", "page_data", "page_folder",
           "serve_results", "write_part"]

#: Cells per detail file: about 0.5-1 MB of text each at the paper's scale.
PAGE_CELLS = 500

#: Characters of each source's opening the page keeps (the whole passage stays in the run's answers.jsonl).
SOURCE_CHARS = 400

TEMPLATE = Path(__file__).with_name("page.html")


def _script(name: str, value) -> str:
    """A data file's text: one call that registers ``value`` under ``name``. JSON is valid JavaScript here
    (ECMAScript 2019 allows U+2028 and U+2029 in strings), and no ``</script>`` can matter in a file of its own."""
    return f"FABNB.add({json.dumps(name)}, {json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)});\n"


def _caveats(folder: Path) -> list[str]:
    """The bullets of ``summary.md``'s Caveats section."""
    path = folder / "summary.md"
    if not path.exists():
        return []
    lines, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Caveats"
        elif inside and line.startswith("- "):
            lines.append(line[2:])
        elif inside and line.startswith("  ") and lines:
            lines[-1] += " " + line.strip()
    return lines


def _sections(folder: Path | None) -> list[dict]:
    """The tables of the summary's window sections (``report/windows.json``, written with ``summary.md`` by
    :func:`fabnb.experiment.windows.window_sections`): each ``{"title", "columns", "rows"}``; none before a report."""
    path = folder / "report" / "windows.json" if folder is not None else None
    if path is None or not path.exists():
        return []
    return json.loads(path.read_text(encoding="utf-8")).get("sections", [])


def _summary(folder: Path | None, manifest: dict, figures: list[dict]) -> dict:
    from ..judge.calibration import read_calibration
    from .explorer import plain_rows

    has = folder is not None
    coverage = pd.read_csv(folder / "coverage.csv") if has and (folder / "coverage.csv").exists() else pd.DataFrame()
    keep = [c for c in ("system", "context_k", "mode", "metric", "score", "ci_low", "ci_high", "n", "planned",
                        "shown") if c in coverage.columns]
    compare = folder / "compare.json" if has else None
    return {"name": manifest.get("name", folder.name if has else "results"), "fabnb": manifest.get("fabnb"),
            "judge": manifest.get("endpoints", {}).get("judge", {}).get("model"),
            "rubric_version": manifest.get("rubric_version"), "runs": manifest.get("runs", [])[-1:],
            "statistics": manifest.get("statistics", {}).get("interval"),
            "means": plain_rows(coverage[keep]),
            "caveats": _caveats(folder) if has else [], "figures": figures, "sections": _sections(folder),
            "comparison": json.loads(compare.read_text(encoding="utf-8")) if has and compare.exists() else None,
            "calibration": read_calibration(folder) if has else None}


def _call(a, model: str, prices: dict) -> dict:
    """What a cell's answer cost: latency_s, prompt_tokens, completion_tokens and cost_usd (None: not recorded, or
    no known price for the model; the run's manifest keeps the prices it ran with)."""
    from ..experiment.prices import cost_of
    from .explorer import plain_value

    out = {k: plain_value(a.get(k)) if a is not None and k in a.index else None
           for k in ("latency_s", "prompt_tokens", "completion_tokens")}
    pt, ct = out["prompt_tokens"], out["completion_tokens"]
    out["cost_usd"] = (cost_of(str(model), prices, pt, ct) if isinstance(pt, (int, float))
                       and isinstance(ct, (int, float)) else None)
    return out


def _details(explorer, cells: pd.DataFrame, prices: dict | None = None) -> list[dict]:
    """Each cell's texts, in the order of ``cells``: the answer (or its error), each metric's reason, sources, and
    the answer's call (latency, tokens, cost)."""
    from ..core.schema import RESULT_KEYS
    from .explorer import plain_value

    keys = list(RESULT_KEYS)
    answers = explorer.answers.copy()
    answers["context_k"] = answers["context_k"].astype(float)
    answers = answers.drop_duplicates(keys, keep="last").set_index(keys)
    scores = explorer.scores
    reasons = {}
    if len(scores):
        ok = scores.drop_duplicates([*keys, "metric"], keep="last")
        for row in ok[[*keys, "metric", "reason", "status"]].itertuples(index=False):
            reasons.setdefault(tuple(row[:len(keys)]), {})[row.metric] = (
                row.reason if isinstance(row.reason, str) else "" if row.status == "ok" else f"({row.status})")
    out = []
    for key in cells[keys].itertuples(index=False, name=None):
        a = answers.loc[key] if key in answers.index else None
        sources = a.get("sources") if a is not None and "sources" in a.index else None
        out.append({
            "answer": "" if a is None else str(a.get("answer") or ""),
            "error": "" if a is None else str(a.get("error") or ""),
            "reasons": reasons.get(key, {}),
            "sources": [{"doc_id": str(s.get("doc_id", "")), "text": str(s.get("text", ""))[:SOURCE_CHARS],
                         "score": plain_value(s.get("score"))} for s in sources] if isinstance(sources, list) else [],
            "call": _call(a, key[keys.index("model")], prices or {}),
        })
    return out


def _questions(explorer) -> dict:
    """What a cell's detail shows of its question: the expected answer, the gold evidence, the gold documents."""
    q = explorer.questions
    text = {c: q[c] if c in q.columns else pd.Series("", index=q.index)
            for c in ("ground_truth_answer", "gold_context", "gold_doc_ids")}
    return {t: {"expected": "" if pd.isna(text["ground_truth_answer"][t]) else str(text["ground_truth_answer"][t]),
                "gold_evidence": "" if pd.isna(text["gold_context"][t]) else str(text["gold_context"][t]),
                "gold_doc_ids": [str(d) for d in text["gold_doc_ids"][t]]
                if isinstance(text["gold_doc_ids"][t], (list, tuple, np.ndarray)) else []}
            for t in q.index}


def _detail_number(name: str, pages: int) -> int:
    """The page number of a detail part's name (``detail-0003``: 3); a :class:`ValueError` for any other name."""
    number = name.removeprefix("detail-")
    if not (name.startswith("detail-") and number.isdigit() and int(number) < pages):
        raise ValueError(f"{name[:80]!r} is no part of this page: 'questions' or detail-0000 to "
                         f"detail-{pages - 1:04d}")
    return int(number)


@dataclass(frozen=True)
class PageData:
    """What the renderer (``widgets/results.js``) draws: :attr:`summary` and :attr:`cells` at once, the rest by
    :meth:`part` when a cell is opened. The static page writes them as script files; the notebook widget sends
    them from the kernel.

    Attributes
    ----------
    summary : dict
        name, fabnb, judge, rubric_version, runs, statistics, means (the coverage table's rows), caveats, figures
        (each ``{"name", "src"}``), sections (the window sections' tables, each ``{"title", "columns", "rows"}``),
        comparison (``compare.json``) and calibration, or empty where the folder has none.
    cells : dict
        columns (system, model, context_k, mode, test_id, state, flags, ..., each metric, average), metrics, rows
        (one list a cell, in ``frame``'s order), questions (test_id to its text), page_cells and pages.
    frame : DataFrame
        The cells (:attr:`fabnb.views.explorer.Explorer.cells`) in the page's order.
    """

    summary: dict
    cells: dict
    frame: pd.DataFrame
    explorer: object
    page_cells: int
    prices: dict = field(default_factory=dict)

    def part(self, name: str) -> dict | list:
        """``"questions"`` (test_id to expected, gold_evidence, gold_doc_ids) or ``"detail-NNNN"`` (that page's
        cells: answer, error, reasons, sources); a :class:`ValueError` for any other name."""
        if name == "questions":
            return _questions(self.explorer)
        p = _detail_number(name, self.cells["pages"])
        return _details(self.explorer, self.frame.iloc[p * self.page_cells:(p + 1) * self.page_cells], self.prices)


def page_data(explorer, folder: str | Path | None = None, *, figures: str = "files",
              page_cells: int = PAGE_CELLS) -> PageData:
    """The renderer's data for an :class:`fabnb.views.explorer.Explorer`, and the run folder's summary.

    Parameters
    ----------
    explorer : Explorer
        The cells (its filters are not applied: the renderer filters).
    folder : path, optional
        The run's folder: its manifest, ``coverage.csv``, ``summary.md``'s caveats, ``report/figures``,
        ``compare.json`` and calibration. Without it the summary holds the cells only.
    figures : {"files", "inline"}
        ``"files"``: each figure's ``src`` is ``figures/<name>.png`` (the static page copies them there);
        ``"inline"``: a ``data:`` address (the notebook widget, which has no folder to serve).
    page_cells : int
        Cells per detail part.

    Returns
    -------
    PageData

    Examples
    --------
    >>> import pandas as pd
    >>> from fabnb.views.explorer import Explorer
    >>> key = {"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "Q1"}
    >>> answers = pd.DataFrame([{**key, "status": "ok", "answer": "42"}])
    >>> scores = pd.DataFrame([{**key, "metric": "depth", "replicate": 0, "status": "ok", "score": 0.7,
    ...                         "reason": "Specific."}])
    >>> data = page_data(Explorer(answers, scores, pd.DataFrame({"test_id": ["Q1"], "question": ["?"]})))
    >>> data.cells["rows"][0][:5], data.part("detail-0000")[0]["reasons"]
    (['s', 'm', 4.0, 'A', 'Q1'], {'depth': 'Specific.'})
    """
    import base64

    from ..experiment.output import read_manifest
    from .explorer import plain_rows

    folder = Path(folder) if folder is not None else None
    manifest = (read_manifest(folder) or {}) if folder is not None else {}
    shown = []
    source = folder / "report" / "figures" if folder is not None else None
    if source is not None and source.is_dir():
        for png in sorted(source.glob("*.png")):
            src = (f"figures/{png.name}" if figures == "files" else
                   "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii"))
            shown.append({"name": png.name, "src": src})
    cells = explorer.cells.sort_values(["system", "context_k", "mode", "test_id"], kind="stable", ignore_index=True)
    metrics = explorer.metrics
    columns = [c for c in ("system", "model", "context_k", "mode", "test_id", "state", "flags", "judge_failures",
                           "gold_retrieved", "test_type") if c in cells.columns] + [*metrics, "average"]
    q = explorer.questions
    return PageData(
        summary=_summary(folder, manifest, shown),
        cells={"columns": columns, "metrics": metrics, "rows": [list(r.values()) for r in plain_rows(cells[columns])],
               "questions": {t: str(q.at[t, "question"]) if "question" in q.columns else "" for t in q.index},
               "page_cells": page_cells, "pages": max(1, -(-len(cells) // page_cells))},
        frame=cells, explorer=explorer, page_cells=page_cells, prices=manifest.get("prices") or {})


def export_page(folder: str | Path, out: str | Path, *, questions: pd.DataFrame | None = None,
                page_cells: int = PAGE_CELLS, root: str | Path | None = None, details: bool = True,
                explorer=None) -> Path:
    """Write the static page of the run in ``folder`` into ``out``; returns ``out/index.html``.

    Parameters
    ----------
    folder : path
        An output folder of ``fabnb run`` (its stores, manifest, ``coverage.csv``, ``summary.md``, ``report/``
        and, if ``fabnb compare`` wrote it, ``compare.json``).
    out : path
        The page's folder (made if missing). What a former export left there is replaced, nothing else: the page's
        own ``index.html``, ``data/`` and ``figures/``.
    questions : DataFrame, optional
        The questions' texts (test_id, question, ...); by default those the manifest records
        (:meth:`fabnb.views.explorer.Explorer.from_folder`).
    page_cells : int
        Cells per detail file (:data:`PAGE_CELLS`).
    root : path, optional
        A folder the manifest's question files must lie in (the Jupyter server's root): one outside is not read.
    details : bool
        Write the detail files too (the default). A page served by fabnb writes each when it is first asked for
        (:func:`write_part`), so a large run opens without writing 35 MB first.
    explorer : Explorer, optional
        The folder's :class:`fabnb.views.explorer.Explorer` when the caller has it (the Jupyter server keeps one
        per run): not read again.

    Examples
    --------
    A run folder of one answered and judged cell:

    >>> import json, tempfile
    >>> run = Path(tempfile.mkdtemp()) / "run"
    >>> run.mkdir()
    >>> key = {"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "Q1"}
    >>> _ = (run / "answers.jsonl").write_text(json.dumps({**key, "status": "ok", "answer": "<b>42</b>"}) + "\\n")
    >>> _ = (run / "scores.jsonl").write_text(json.dumps({**key, "metric": "depth", "replicate": 0, "status": "ok",
    ...                                                   "score": 0.7, "reason": "Specific."}) + "\\n")
    >>> index = export_page(run, run.parent / "page", questions=pd.DataFrame({"test_id": ["Q1"], "question": ["?"]}))
    >>> sorted(p.name for p in (index.parent / "data").iterdir())
    ['cells.js', 'detail-0000.js', 'questions.js', 'summary.js']
    >>> export_page(run.parent, run.parent / "page")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: ... holds neither answers.jsonl nor scores.jsonl; ...
    """
    from ..core.records import hold
    from .explorer import Explorer

    folder, out = Path(folder), Path(out)
    if explorer is None:  # a folder that is not a run's says so here, naming it
        explorer = Explorer.from_folder(folder, questions=questions, root=root)
    if out.resolve() == folder.resolve():
        raise ValueError(f"--html {out} is the run's own folder; name a new folder for the page.")
    out.mkdir(parents=True, exist_ok=True)
    with hold(out, "an export of a results page"):  # two exports into one folder would mix their pages: refused
        return _write(out, folder, explorer, page_cells, details)


def _write(out: Path, folder: Path, explorer, page_cells: int, details: bool) -> Path:
    """The page's files, into a folder this process holds."""
    from ..core.paths import shipped

    for own in ("data", "figures"):
        shutil.rmtree(out / own, ignore_errors=True)
    (out / "data").mkdir()
    data = page_data(explorer, folder, page_cells=page_cells)
    if data.summary["figures"]:
        (out / "figures").mkdir()
        for figure in data.summary["figures"]:
            shutil.copy2(folder / "report" / "figures" / figure["name"], out / "figures" / figure["name"])
    (out / "data" / "summary.js").write_text(_script("summary", data.summary), "utf-8")
    (out / "data" / "cells.js").write_text(_script("cells", data.cells), "utf-8")
    (out / "data" / "questions.js").write_text(_script("questions", data.part("questions")), "utf-8")
    for p in range(data.cells["pages"] if details else 0):
        write_part(out, data, f"detail-{p:04d}")
    for name in ("results.js", "results.css"):
        (out / name).write_text(shipped("widgets", name), encoding="utf-8")
    index = out / "index.html"
    index.write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    return index


def _fingerprint(folder: Path) -> str:
    """What the page of ``folder`` is made from: each file's name, size and time under the folder, and the
    renderer's own files (a newer fabnb draws again)."""
    from ..core.paths import shipped

    parts = [shipped("widgets", n) for n in ("results.js", "results.css")] + [TEMPLATE.read_text(encoding="utf-8")]
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.endswith(".lock"):
            st = path.stat()
            parts.append(f"{path.relative_to(folder)}\t{st.st_size}\t{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def write_part(out: Path, data: PageData, name: str) -> Path:
    """Write one part of the page (:meth:`PageData.part`) as its data script, ``out/data/<name>.js``."""
    path = Path(out) / "data" / f"{name}.js"
    path.write_text(_script(name, data.part(name)), "utf-8")
    return path


def page_folder(folder: str | Path) -> Path:
    """Where :func:`fresh_page` keeps the page of the run in ``folder``: ``<cache>/pages/<hash of its path>``."""
    from ..core.paths import cache_dir

    return cache_dir() / "pages" / hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:16]


def fresh_page(folder: str | Path, root: str | Path | None = None, *, details: bool = True, explorer=None) -> Path:
    """The page of the run in ``folder``, kept in fabnb's cache (``<cache>/pages/``) and exported again only when
    the run changed since (a store grew, the report or ``compare.json`` was written) or fabnb's renderer did: what
    ``fabnb explore`` and JupyterLab's results viewer show. Returns its ``index.html``. ``details=False`` leaves
    the detail files to :func:`detail_file`, which writes each when it is first asked for.

    Examples
    --------
    >>> import json, os, tempfile
    >>> os.environ["FABNB_CACHE_DIR"] = tempfile.mkdtemp()
    >>> run = Path(tempfile.mkdtemp())
    >>> key = {"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": "Q1"}
    >>> _ = (run / "answers.jsonl").write_text(json.dumps({**key, "status": "ok", "answer": "42"}) + "\\n")
    >>> first = fresh_page(run)
    >>> made = first.stat().st_mtime_ns
    >>> fresh_page(run).stat().st_mtime_ns == made  # nothing changed: the same page
    True
    >>> del os.environ["FABNB_CACHE_DIR"]
    """
    from ..core.files import write_whole
    from ..core.records import hold

    folder = Path(folder).resolve()
    out = page_folder(folder)
    stamp = out / "made-from.txt"
    with _EXPORTS:  # one export at a time in this process (the folder lock refuses another process's)
        want = f"{_fingerprint(folder)} root={root}"  # the server's page (questions confined to its root) is its own
        if stamp.exists() and stamp.read_text(encoding="utf-8") == want and (out / "index.html").exists():
            return out / "index.html"
        index = export_page(folder, out, root=root, details=details, explorer=explorer)
        with hold(out, "an export of a results page"):
            write_whole(stamp, want)
        return index


_EXPORTS = threading.Lock()


def _read_script(path: Path):
    """The value a data script registers (what :func:`_script` wrote: ``FABNB.add(name, value);``)."""
    text = path.read_text(encoding="utf-8")
    return json.loads(text[text.index(", ") + 2:text.rindex(");")])


def detail_file(folder: str | Path, name: str, explorer) -> Path:
    """``data/<name>.js`` of the page :func:`fresh_page` keeps for ``folder``, written now if the page has none yet:
    the texts of the cells the page lists there (its ``cells.js`` names them by system, model, window, mode and
    question), read from ``explorer`` (the run's :class:`fabnb.views.explorer.Explorer`). A run that went on since
    the page was made gives those cells' texts as they are now, never another cell's. A :class:`ValueError` for a
    name that is no part of the page, or a page that is gone."""
    from ..core.schema import RESULT_KEYS
    from ..experiment.output import read_manifest

    out = page_folder(folder)
    path = out / "data" / f"{name}.js"
    with _EXPORTS:
        if path.exists():
            return path
        if not (out / "data" / "cells.js").exists():
            raise ValueError(f"the page of {folder} is gone from the cache: reload the page to make it again.")
        cells = _read_script(out / "data" / "cells.js")
        p, at = _detail_number(name, cells["pages"]), [cells["columns"].index(k) for k in RESULT_KEYS]
        rows = cells["rows"][p * cells["page_cells"]:(p + 1) * cells["page_cells"]]
        keys = pd.DataFrame([[r[i] for i in at] for r in rows], columns=list(RESULT_KEYS))
        prices = (read_manifest(Path(folder)) or {}).get("prices") or {}  # as page_data's: a cell's cost
        path.write_text(_script(name, _details(explorer, keys, prices)), "utf-8")
        return path


def serve_results(folder: str | Path, port: int | None = None, echo=print) -> int:
    """Serve the page of the run in ``folder`` on 127.0.0.1 until stopped (``fabnb explore DIR``): for people who do
    not use JupyterLab. A reload shows what the run wrote since (:func:`fresh_page`). Loopback only: the results are
    not for other machines. The folder is checked first: one that is not a run's is refused, naming it.

    Returns
    -------
    int
        0 after Ctrl-C, SIGTERM or SIGHUP.
    """
    import signal
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from ..core.process import free_port

    folder = Path(folder).resolve()
    index = fresh_page(folder)
    cells = _read_script(index.parent / "data" / "cells.js")

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's name)
            if self.path.split("?")[0] in ("/", "/index.html"):
                try:
                    fresh_page(folder)  # a reload shows what the run wrote since
                except Exception as exc:  # noqa: BLE001  (the last page stays; the reason is said here)
                    echo(f"fabnb explore: the page was not made again: {exc}")
            return super().do_GET()

        def end_headers(self):
            self.send_header("Cache-Control", "no-store")
            super().end_headers()

        def list_directory(self, path):  # noqa: ARG002  (the page's files only, no listing)
            self.send_error(404, "not a file of the page")

        def log_message(self, *args):  # requests are not the user's business here
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port or free_port()), partial(Handler, directory=str(index.parent)))
    stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()  # noqa: E731
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    echo(f"Results explorer: http://127.0.0.1:{server.server_port}/  ({len(cells['rows'])} cells of {folder}; "
         "Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
