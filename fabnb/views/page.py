"""A run's results as a static page anyone can open (``fabnb export RUN_DIR --html OUT``): no server, no request to
another host, usable from ``file://`` and from any static host.

The page is ``index.html`` (the renderer: its CSS and script inline) and ``data/``, script files that register
themselves with the page (``FABNB.add(name, value)``; browsers refuse ``fetch`` of ``file://`` data, but load a
``<script src>``):

- ``data/summary.js``: the run's name, versions and judge; the report's means with their intervals and coverage
  (``coverage.csv``, the table of ``summary.md``); its caveats; the figures of ``report/figures`` (copied to
  ``figures/``); and, where ``fabnb compare`` wrote ``compare.json`` into the folder, the comparison;
- ``data/cells.js``: one compact row per cell (system, window, mode, question, state, flags, each metric's score,
  the average), all the page filters on, and the questions' texts;
- ``data/detail-NNNN.js``: the heavy texts (the answer, each metric's judge reason, the sources' documents and
  openings), :data:`PAGE_CELLS` cells a file, loaded when a row is opened: the paper's scale (8,800 cells, 52,800
  scores) opens without reading them all.

Every text reaches the page as data and is shown with ``textContent``: an answer holding HTML shows it as text.
The cells come from :class:`fabnb.views.explorer.Explorer`, the model the widgets view.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

__all__ = ["PAGE_CELLS", "export_page"]

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


def _summary(folder: Path, manifest: dict, figures: list[str]) -> dict:
    from ..judge.calibration import read_calibration
    from .explorer import plain_rows

    coverage = pd.read_csv(folder / "coverage.csv") if (folder / "coverage.csv").exists() else pd.DataFrame()
    keep = [c for c in ("system", "context_k", "mode", "metric", "score", "ci_low", "ci_high", "n", "planned",
                        "shown") if c in coverage.columns]
    compare = folder / "compare.json"
    return {"name": manifest.get("name", folder.name), "fabnb": manifest.get("fabnb"),
            "judge": manifest.get("endpoints", {}).get("judge", {}).get("model"),
            "rubric_version": manifest.get("rubric_version"), "runs": manifest.get("runs", [])[-1:],
            "statistics": manifest.get("statistics", {}).get("interval"),
            "means": plain_rows(coverage[keep]),
            "caveats": _caveats(folder), "figures": figures,
            "comparison": json.loads(compare.read_text(encoding="utf-8")) if compare.exists() else None,
            "calibration": read_calibration(folder)}


def _details(explorer, cells: pd.DataFrame) -> list[dict]:
    """Each cell's texts, in the order of ``cells``: the answer (or its error), each metric's reason, sources."""
    from ..core.schema import RESULT_KEYS

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
            "sources": [{"doc_id": str(s.get("doc_id", "")), "text": str(s.get("text", ""))[:SOURCE_CHARS]}
                        for s in sources] if isinstance(sources, list) else [],
        })
    return out


def export_page(folder: str | Path, out: str | Path, *, questions: pd.DataFrame | None = None,
                page_cells: int = PAGE_CELLS) -> Path:
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
    ['cells.js', 'detail-0000.js', 'summary.js']
    >>> export_page(run.parent, run.parent / "page")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: ... holds neither answers.jsonl nor scores.jsonl; ...
    """
    from ..core.records import hold
    from ..experiment.output import read_manifest
    from .explorer import Explorer

    folder, out = Path(folder), Path(out)
    explorer = Explorer.from_folder(folder, questions=questions)  # a folder that is not a run's says so here, naming it
    if out.resolve() == folder.resolve():
        raise ValueError(f"--html {out} is the run's own folder; name a new folder for the page.")
    manifest = read_manifest(folder) or {}
    out.mkdir(parents=True, exist_ok=True)
    with hold(out, "an export of a results page"):  # two exports into one folder would mix their pages: refused
        return _write(out, folder, explorer, manifest, page_cells)


def _write(out: Path, folder: Path, explorer, manifest: dict, page_cells: int) -> Path:
    """The page's files, into a folder this process holds."""
    from .explorer import plain_rows

    for own in ("data", "figures"):
        shutil.rmtree(out / own, ignore_errors=True)
    (out / "data").mkdir()
    cells = explorer.cells.sort_values(["system", "context_k", "mode", "test_id"], kind="stable",
                                       ignore_index=True)
    figures = []
    source = folder / "report" / "figures"
    if source.is_dir():
        (out / "figures").mkdir()
        for png in sorted(source.glob("*.png")):
            shutil.copy2(png, out / "figures" / png.name)
            figures.append(f"figures/{png.name}")
    metrics = explorer.metrics
    columns = ["system", "context_k", "mode", "test_id", "state", "flags", "test_type", *metrics, "average"]
    rows = [list(r.values()) for r in plain_rows(cells[columns])]
    q = explorer.questions
    questions = {t: str(q.at[t, "question"]) if "question" in q.columns else "" for t in q.index}
    n_pages = max(1, -(-len(cells) // page_cells))
    (out / "data" / "summary.js").write_text(_script("summary", _summary(folder, manifest, figures)), "utf-8")
    (out / "data" / "cells.js").write_text(_script("cells", {
        "columns": columns, "metrics": metrics, "rows": rows, "questions": questions, "page_cells": page_cells,
        "pages": n_pages}), "utf-8")
    details = _details(explorer, cells)
    for p in range(n_pages):
        part = details[p * page_cells:(p + 1) * page_cells]
        (out / "data" / f"detail-{p:04d}.js").write_text(_script(f"detail-{p:04d}", part), "utf-8")
    index = out / "index.html"
    index.write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    return index
