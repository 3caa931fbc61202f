"""Why a score is what it is: one row per answered cell, its six scores, and everything behind them.

:class:`Explorer` joins an answer store (:func:`fabnb.rag.run_grid`), a score store
(:func:`fabnb.judge.judge_results`) and the questions. It filters and sorts the cells, shows
one cell in full (question, expected answer, gold evidence, the retrieved passages in rank
order with the gold ones marked, the answer, each metric's score and the judge's reason, the
reference check), compares two configurations question by question (sorted by the largest
drop: Figure 6 in actual answers), and exports what is shown. A cell judged but missing from
the answers is kept as "answer missing", an answer not judged as "not judged": nothing is
dropped. The results page (:mod:`fabnb.views.page`, drawn by ``widgets/results.js``: the static page,
``fabnb explore``, JupyterLab's viewer, and :class:`fabnb.views.widgets.ResultsExplorer` in a notebook) is its
view.

Examples
--------
>>> import pandas as pd
>>> answers = pd.DataFrame({"system": ["s", "s"], "model": ["m", "m"], "context_k": [4.0, 8.0],
...                         "mode": ["A", "A"], "test_id": ["Q1", "Q1"], "status": ["ok", "ok"],
...                         "answer": ["short", "longer"], "gold_retrieved": [False, True]})
>>> scores = pd.DataFrame({"system": "s", "model": "m", "context_k": [4.0, 8.0], "mode": "A", "test_id": "Q1",
...                        "metric": "depth", "replicate": 0, "status": "ok", "score": [0.4, 0.7]})
>>> questions = pd.DataFrame({"test_id": ["Q1"], "test_type": ["robustness"], "question_format": ["SUBJECTIVE"],
...                           "question": ["Why?"], "ground_truth_answer": ["Because."]})
>>> ex = Explorer(answers, scores, questions)
>>> ex.filter(retrieval_miss=True).view()[["context_k", "depth"]].to_dict("records")
[{'context_k': 4.0, 'depth': 0.4}]
>>> ex.compare({"context_k": 4.0}, {"context_k": 8.0})[["test_id", "average_a", "average_b", "drop"]]
  test_id  average_a  average_b  drop
0      Q1        0.4        0.7  -0.3
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.schema import METRICS, RESULT_KEYS

__all__ = ["CELL_COLUMNS", "Explorer", "plain_rows", "plain_value"]

#: The columns of :meth:`Explorer.view`, before the metric columns.
CELL_COLUMNS = [*RESULT_KEYS, "test_type", "question_format", "state", "gold_retrieved", "judge_failures", "flags",
                "average"]
FILTERS = ("system", "model", "context_k", "mode", "test_type", "question_format", "metric", "score_min",
           "score_max", "judge_failures", "retrieval_miss", "flagged", "state", "text")


def _experiment_pairs(manifest: dict, root: str | Path | None = None) -> list:
    """The QA pairs an experiment asked: its ``[questions] source`` as the manifest records it (or, in a folder of
    an earlier release, as its experiment file says), the FAB-Bench release otherwise.

    ``root``: a server's root. A manifest is a file anyone who can write the folder can edit, so every path it
    records is read only when it lies inside the root; one outside is not opened (a warning says so, and the
    explorer shows the cells without their questions' texts)."""
    import warnings

    from ..core.files import MAX_FILE_BYTES, FileRefused, inside, read_text
    from ..data.datasets import load_fab_bench, read_qa_files

    def allowed(path: str, key: str) -> bool:
        if root is None or inside(path, root):
            return True
        warnings.warn(f"manifest.json's {key} ({path}) is outside the server's root and was not read: the "
                      "questions' texts are not shown. Run the experiment from inside the root to see them.",
                      stacklevel=3)
        return False

    source = manifest.get("questions_source")
    experiment_file = manifest.get("experiment_file")
    if source is None and isinstance(experiment_file, str) and allowed(experiment_file, "experiment_file"):
        import tomllib

        try:
            text = read_text(experiment_file, setting="manifest.json's experiment_file",
                             max_bytes=MAX_FILE_BYTES["experiment"])
            raw = tomllib.loads(text).get("questions", {}).get("source", "fab-bench")
            source = raw if raw == "fab-bench" or Path(raw).is_absolute() else str(Path(experiment_file).parent / raw)
        except (FileRefused, tomllib.TOMLDecodeError, AttributeError):
            source = None
    if isinstance(source, str) and source != "fab-bench":
        if not allowed(source, "questions_source"):
            return []
        if Path(source).is_dir():
            return list(read_qa_files(source))
    return list(load_fab_bench())


class Explorer:
    """Answered cells with their scores, filtered, sorted, opened one at a time, compared, exported.

    Parameters
    ----------
    answers : DataFrame
        A results store's frame (``ResultsStore.frame()``): the :data:`fabnb.core.schema.RESULT_KEYS`,
        status, answer, and where present sources, gold_retrieved, error.
    scores : DataFrame
        A score store's frame: the keys, metric, replicate, status, score, raw_score,
        weighted_score, scoring, reason, cause, error.
    questions : DataFrame
        test_id, question, ground_truth_answer, and where present test_type, question_format,
        gold_context, gold_doc_ids.
    reference : DataFrame, optional
        :func:`fabnb.judge.reference_scores` (the check of objective answers).
    page_size : int
    metrics : tuple of str
        The score columns, in order: FAB-Bench's six (default), or a ``[tests]`` run's ``oracle_pass`` and
        ``oracle_mean``.
    """

    def __init__(self, answers: pd.DataFrame, scores: pd.DataFrame, questions: pd.DataFrame,
                 reference: pd.DataFrame | None = None, page_size: int = 50, metrics: tuple = METRICS):
        keys = list(RESULT_KEYS)
        self._metric_names = tuple(metrics)
        self.page_size = page_size
        self.questions = questions.drop_duplicates("test_id").set_index("test_id", drop=False)
        self.answers = answers.copy() if len(answers) else pd.DataFrame(columns=[*keys, "status", "answer"])
        self.scores = scores.copy() if len(scores) else pd.DataFrame(columns=[*keys, "metric", "status", "score"])
        for frame in (self.answers, self.scores):
            frame["context_k"] = frame["context_k"].astype(float)
        from ..judge.sanity import judge_flags

        self.scores = judge_flags(self.scores, self.answers, questions)  # on reading: stores of any version get them
        self.reference = reference
        self.cells = self._cells(keys)
        self.filters: dict = {}
        self.sort_by: tuple[str, bool] = ("test_id", False)

    @classmethod
    def from_folder(cls, folder: str | Path, questions: pd.DataFrame | None = None, root: str | Path | None = None,
                    **kwargs) -> "Explorer":
        """An explorer over an experiment's output folder (``fabnb run``): its stores and its questions.

        ``root``: when a server opens the folder, its root; the paths the manifest records are read only inside
        it (:func:`_experiment_pairs`)."""
        import json

        from ..core.records import ResultsStore
        from ..judge import score_store

        folder = Path(folder)
        if (folder / "verdicts.jsonl").exists() and (folder / "tests.jsonl").exists():
            return cls._from_tests_folder(folder, **kwargs)
        if not (folder / "answers.jsonl").exists() and not (folder / "scores.jsonl").exists():
            raise FileNotFoundError(f"{folder} holds neither answers.jsonl nor scores.jsonl; point at the output "
                                    "folder of fabnb run (or pass the stores' frames to Explorer).")
        answers = ResultsStore(folder / "answers.jsonl").frame()
        scores = score_store(folder / "scores.jsonl").frame()
        if questions is None:
            from ..rag import questions_frame

            manifest = folder / "manifest.json"
            manifest = json.loads(manifest.read_text(encoding="utf-8")) if manifest.exists() else {}
            pairs = _experiment_pairs(manifest, root)
            ids = set(manifest.get("question_ids", []))
            pairs = [p for p in pairs if p.test_id in ids] or pairs
            questions = questions_frame(pairs)
        reference = pd.read_csv(folder / "reference.csv") if (folder / "reference.csv").exists() else None
        return cls(answers, scores, questions, reference=reference, **kwargs)

    @classmethod
    def _from_tests_folder(cls, folder: Path, **kwargs) -> "Explorer":
        """A ``[tests]`` run (RAG-TESTER): its tests are the questions and the oracle's verdicts the scores
        (:func:`fabnb.judge.oracle.verdict_scores`: ``oracle_pass``, ``oracle_mean``)."""
        from ..core.records import ResultsStore
        from ..experiment.testing import VERDICTS_STORE, stored_tests
        from ..judge import tests_as_questions, verdict_scores, verdict_store
        from ..tester.attribution import attribution

        tests = stored_tests(folder).tests
        questions = tests_as_questions(tests).assign(test_type=tests["generator"].to_numpy(),
                                                     question_format=tests["kind"].to_numpy())
        verdicts = verdict_store(folder / VERDICTS_STORE).frame()
        if len(verdicts):  # a failed mode-A cell says whose failure it is (retrieval or generation)
            labels = attribution(verdicts).set_index(["system", "context_k", "test_id"])["attribution"]
            keys = list(zip(verdicts["system"], verdicts["context_k"], verdicts["test_id"]))
            whose = [labels.get(k, "") if m == "A" and f else "" for k, m, f in
                     zip(keys, verdicts["mode"], verdicts["failed"].fillna(False).astype(bool))]
            verdicts["reason"] = [f"{w}'s failure; {r}" if w in ("retrieval", "generation") else r
                                  for w, r in zip(whose, verdicts["reason"].fillna(""))]
        return cls(ResultsStore(folder / "answers.jsonl").frame(), verdict_scores(verdicts), questions,
                   metrics=("oracle_pass", "oracle_mean"), **kwargs)

    def __repr__(self) -> str:
        return f"Explorer({len(self.cells)} cells, {len(self.view())} shown, filters={self.filters})"

    # ------------------------------------------------------------ the table
    def _cells(self, keys: list[str]) -> pd.DataFrame:
        none = pd.MultiIndex.from_tuples([], names=keys)
        ok = self.scores[self.scores["status"] == "ok"] if len(self.scores) else self.scores
        wide = (ok.assign(score=ok["score"].astype(float)).pivot_table(index=keys, columns="metric", values="score",
                                                                        aggfunc="mean")
                if len(ok) else pd.DataFrame(index=none))
        bad = self.scores[self.scores["status"] != "ok"] if len(self.scores) else self.scores
        failures = (bad.groupby(keys).size().rename("judge_failures") if len(bad)
                    else pd.Series(index=none, dtype=int, name="judge_failures"))
        raised = ok[ok["flags"] != ""] if len(ok) else ok
        flags = (raised.groupby(keys)["flags"].agg(lambda f: ",".join(sorted({x for v in f for x in v.split(",")})))
                 if len(raised) else pd.Series(index=none, dtype=object, name="flags"))
        answered = self.answers.set_index(keys)
        index = answered.index.union(wide.index).union(failures.index)
        cells = pd.DataFrame(index=index)
        cells = cells.join(answered[[c for c in ("status", "gold_retrieved") if c in answered.columns]])
        cells = cells.join(wide.reindex(columns=[m for m in self._metric_names if m in wide.columns]))
        cells = cells.join(failures).join(flags.rename("flags")).reset_index()
        cells["judge_failures"] = cells["judge_failures"].fillna(0).astype(int)
        cells["flags"] = cells["flags"].fillna("")
        metrics = [m for m in self._metric_names if m in cells.columns]
        cells["average"] = cells[metrics].mean(axis=1) if metrics else np.nan
        judged = cells[metrics].notna().any(axis=1) if metrics else pd.Series(False, index=cells.index)
        status = cells["status"] if "status" in cells else pd.Series(np.nan, index=cells.index)
        cells["state"] = np.select([status.isna(), status.ne("ok"), ~judged & cells["judge_failures"].eq(0)],
                                   ["answer missing", "answer failed", "not judged"], "judged")
        q = self.questions
        for col in ("test_type", "question_format"):
            cells[col] = cells["test_id"].map(q[col]) if col in q.columns else ""
        if "gold_retrieved" not in cells:
            cells["gold_retrieved"] = np.nan
        return cells[[*CELL_COLUMNS, *metrics]]

    @property
    def metrics(self) -> list[str]:
        return [m for m in self._metric_names if m in self.cells.columns]

    def filter(self, **criteria) -> "Explorer":
        """Set filters (None removes one); returns the explorer, so calls chain.

        Keys: system, model, context_k, mode, test_type, question_format (a value or a list);
        metric with score_min / score_max (the average without a metric); judge_failures and
        retrieval_miss (True: only those); flagged (True: cells with a judge sanity flag, or the name of one of
        :data:`fabnb.judge.sanity.FLAGS`: cells that raise it); state (``judged``, ``not judged``, ``answer missing``,
        ``answer failed``); text (in the question or the answer, case-insensitive).
        """
        unknown = set(criteria) - set(FILTERS)
        if unknown:
            raise ValueError(f"unknown filter(s) {sorted(unknown)}; filters: {', '.join(FILTERS)}")
        from ..judge.sanity import FLAGS

        if criteria.get("flagged") not in (None, "", False, True, *FLAGS):
            raise ValueError(f"flagged must be True or one of {', '.join(FLAGS)}, not {criteria['flagged']!r}")
        if criteria.get("metric") not in (None, "", *self.metrics, "average"):
            raise ValueError(f"metric {criteria['metric']!r} is not scored here; scored: {self.metrics}")
        for key, value in criteria.items():
            if value is None or value == "" or value == []:
                self.filters.pop(key, None)
            else:
                self.filters[key] = value
        return self

    def sort(self, column: str, descending: bool = False) -> "Explorer":
        if column not in self.cells.columns:
            raise ValueError(f"cannot sort by {column!r}; columns: {list(self.cells.columns)}")
        self.sort_by = (column, bool(descending))
        return self

    def view(self) -> pd.DataFrame:
        """The cells that pass the filters, sorted: :data:`CELL_COLUMNS` and one column per metric."""
        c, f = self.cells, self.filters
        mask = pd.Series(True, index=c.index)
        for col in ("system", "model", "context_k", "mode", "test_type", "question_format", "state"):
            if col in f:
                values = f[col] if isinstance(f[col], (list, tuple, set)) else [f[col]]
                values = [float(v) for v in values] if col == "context_k" else list(values)
                mask &= c[col].isin(values)
        score = c[f.get("metric") or "average"]
        if "score_min" in f:
            mask &= score >= float(f["score_min"])
        if "score_max" in f:
            mask &= score <= float(f["score_max"])
        if f.get("judge_failures"):
            mask &= c["judge_failures"] > 0
        if f.get("retrieval_miss"):
            mask &= c["gold_retrieved"].eq(False)
        if f.get("flagged"):
            wanted = f["flagged"]
            mask &= (c["flags"] != "") if wanted is True else c["flags"].str.split(",").map(lambda v: wanted in v)
        if f.get("text"):
            needle = str(f["text"]).lower()
            questions = c["test_id"].map(self.questions["question"]).fillna("").str.lower()
            answers = self._answer_text(c).str.lower()
            mask &= questions.str.contains(needle, regex=False) | answers.str.contains(needle, regex=False)
        column, descending = self.sort_by
        return c[mask].sort_values([column, "test_id"], ascending=[not descending, True], na_position="last",
                                   kind="stable").reset_index(drop=True)

    def _answer_text(self, cells: pd.DataFrame) -> pd.Series:
        if "answer" not in self.answers.columns or cells.empty:
            return pd.Series("", index=cells.index)
        keys = list(RESULT_KEYS)
        text = self.answers.set_index(keys)["answer"]
        return pd.Series(cells.set_index(keys).index.map(text.to_dict()), index=cells.index).fillna("").astype(str)

    def page(self, number: int = 0) -> list[dict]:
        """One page of the view as plain records (what goes to a browser): only these rows."""
        rows = self.view().iloc[number * self.page_size:(number + 1) * self.page_size]
        return plain_rows(rows)

    def export(self, path: str | Path) -> Path:
        """Write the view (what the filters show, in its order) as CSV."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.view().to_csv(path, index=False)
        return path

    # ------------------------------------------------------------ one cell
    def detail(self, cell: dict) -> dict:
        """Everything behind one cell's scores (``cell``: its system, model, context_k, mode, test_id).

        Returns
        -------
        dict
            key, state, question, expected, gold_evidence, sources (rank, doc_id, score, text,
            gold), answer, error, scores (metric, score, raw_score, weighted_score, scoring,
            reason, status, error), reference (the objective check or None).
        """
        key = {k: (float(cell[k]) if k == "context_k" else str(cell[k])) for k in RESULT_KEYS}
        q = self.questions.loc[key["test_id"]] if key["test_id"] in self.questions.index else {}
        a = self.answers
        match = a[np.logical_and.reduce([a[k] == v for k, v in key.items()])] if len(a) else a
        ans = match.iloc[-1].to_dict() if len(match) else {}
        gold_docs = set(q.get("gold_doc_ids", ()) or ()) if len(q) else set()
        sources = ans.get("sources")
        sources = sources if isinstance(sources, list) else []
        s = self.scores
        mine = s[np.logical_and.reduce([s[k] == v for k, v in key.items()])] if len(s) else s
        score_cols = ["metric", "status", "score", "raw_score", "weighted_score", "scoring", "reason", "error"]
        rows = mine.reindex(columns=score_cols).sort_values("metric", key=lambda m: m.map(
            {name: i for i, name in enumerate(self._metric_names)})) if len(mine) else pd.DataFrame(columns=score_cols)
        reference = None
        if self.reference is not None and len(self.reference):
            r = self.reference
            hit = r[np.logical_and.reduce([r[k].astype(type(v)) == v for k, v in key.items() if k in r.columns])]
            reference = {k: plain_value(v) for k, v in hit.iloc[0].to_dict().items()} if len(hit) else None
        state = self.cells[np.logical_and.reduce([self.cells[k] == v for k, v in key.items()])]["state"]
        return {"key": key, "state": state.iloc[0] if len(state) else "unknown",
                "question": str(q.get("question", "")) if len(q) else "",
                "expected": str(q.get("ground_truth_answer", "")) if len(q) else "",
                "gold_evidence": str(q.get("gold_context", "")) if len(q) else "",
                "sources": [{"rank": i + 1, "doc_id": str(x.get("doc_id", "")), "score": plain_value(x.get("score")),
                             "text": str(x.get("text", "")), "gold": str(x.get("doc_id", "")) in gold_docs}
                            for i, x in enumerate(sources)],
                "answer": "" if pd.isna(ans.get("answer", np.nan)) else str(ans.get("answer")),
                "error": "" if pd.isna(ans.get("error", np.nan)) else str(ans.get("error") or ""),
                "scores": plain_rows(rows),
                "reference": reference}

    # ------------------------------------------------------------ two configurations
    def compare(self, a: dict, b: dict, metric: str | None = None) -> pd.DataFrame:
        """The same questions under two configurations, side by side, sorted by the largest drop from a to b.

        ``a`` and ``b`` fix some of system, model, context_k and mode (for example two windows,
        two systems, or modes A and B); the other keys must then name one configuration.

        Returns
        -------
        DataFrame
            test_id, then for each metric (and the average) ``<metric>_a``, ``<metric>_b`` and
            ``<metric>_diff`` (b - a), and ``drop`` (a - b of ``metric`` or the average), largest first.
        """
        if metric is not None and metric not in [*self.metrics, "average"]:
            raise ValueError(f"metric {metric!r} is not scored in this run; metrics: {', '.join(self.metrics)}, "
                             "or average")
        sides = []
        for side in (a, b):
            unknown = set(side) - {"system", "model", "context_k", "mode"}
            if unknown:
                raise ValueError("a configuration is fixed by system, model, context_k and mode, not "
                                 f"{sorted(unknown)}")
            c = self.cells
            mask = np.ones(len(c), bool)
            for k, v in side.items():
                if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                    raise ValueError(f"{k} = {str(v)[:80]!r} must be one value (a string or a number)")
                try:
                    mask &= (c[k] == (float(v) if k == "context_k" else v)).to_numpy()
                except ValueError:
                    raise ValueError(f"context_k = {str(v)[:80]!r} is not a number of K tokens") from None
            chosen = c[mask]
            if not len(chosen):
                offered = {k: sorted(map(str, c[k].unique())) for k in side}
                raise ValueError(f"{ {k: str(v)[:80] for k, v in side.items()} } names no configuration of this run; "
                                 "it has " + "; ".join(f"{k}: {', '.join(v)}" for k, v in offered.items()))
            if chosen.duplicated("test_id").any():
                raise ValueError(f"{side} names several configurations per question; fix more of system, model, "
                                 "context_k and mode.")
            sides.append(chosen.set_index("test_id")[[*self.metrics, "average"]])
        out = sides[0].add_suffix("_a").join(sides[1].add_suffix("_b"), how="inner")
        for m in [*self.metrics, "average"]:
            out[f"{m}_diff"] = out[f"{m}_b"] - out[f"{m}_a"]
        col = metric or "average"
        out["drop"] = out[f"{col}_a"] - out[f"{col}_b"]
        return out.sort_values("drop", ascending=False, na_position="last").reset_index()


def plain_rows(frame: pd.DataFrame) -> list[dict]:
    """A frame's rows as JSON-ready dicts (each value through :func:`plain_value`), for a browser."""
    return [{k: plain_value(v) for k, v in r.items()} for r in frame.to_dict("records")]


def plain_value(value):
    """JSON-ready scalars: NaN to None, numpy numbers to Python ones."""
    if isinstance(value, (list, tuple, dict)):
        return value
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()  # a float32 NaN is no float until here
        return None if isinstance(value, float) and np.isnan(value) else value
    return value
