"""Two runs compared question by question (``fabnb compare BASE CANDIDATE``): what differs between them, the paired
difference of every metric and window with its interval, the items that got worse and better, and a regression
gate that fails only on evidence.

A run is an output folder of ``fabnb run`` (its ``manifest.json`` and ``scores.jsonl``). Cells pair by system (or a
mapping between system names), window, mode, question and metric; a question both runs asked is the unit of every
interval, as in the report. What cannot be paired is refused, naming the difference: other questions (their ids or
their texts, ``questions_sha256``) or another judge (its model, rubric version, rubric text, logprobs, limits).
``allow=("questions",)`` pairs the questions both asked; ``allow=("judge",)`` compares scores of two judges, and the
report says so. Other differences (package versions, systems' settings, corpus, retrieval knobs) are what a
comparison is usually for: they are listed, not refused.

The gate (:meth:`Comparison.verdict`) reads one declared primary metric (``average`` by default: the mean of the
judged metrics), pooled over the windows and modes both runs have: each question's mean candidate - base
difference, one value per question, and its interval from :func:`fabnb.core.stats.paired_differences` (Student's t
below 100 questions, the bootstrap from there; several systems are one family, at the Bonferroni level). It says
``regression`` only when the interval lies wholly below ``-margin``; ``no regression`` when it lies wholly above;
otherwise ``inconclusive``, with about how many questions would settle it. Every other row is information, shown
under the kit's multiple-comparison policy (one family, Holm; :data:`fabnb.core.stats.FAMILY_METHOD`).

Examples
--------
>>> import numpy as np, pandas as pd
>>> rng = np.random.default_rng(0)
>>> q = [f"q{i}" for i in range(50)]
>>> base = pd.DataFrame({"system": "s", "context_k": 4.0, "mode": "A", "test_id": q, "metric": "average",
...                      "score": rng.uniform(0.4, 0.8, 50)})
>>> worse = base.assign(score=base["score"] - 0.1 + rng.normal(0, 0.05, 50))
>>> c = compare_scores(base, worse)
>>> c.verdict(), c.exit_code(fail_on_regression=True)
('regression', 1)
>>> compare_scores(base, base).verdict()
'no regression'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.exits import EXIT
from ..core.schema import AVERAGE
from .fields import ExperimentError

__all__ = ["ALLOWABLE", "Comparison", "ComparisonError", "compare_runs", "compare_scores", "read_run",
           "run_differences"]

#: What ``allow=`` can let through: a comparison of other questions (only those both runs asked are paired) or of
#: another judge's scores.
ALLOWABLE = ("questions", "judge")

#: The columns a cell pairs on, besides the metric.
CELL = ["system", "context_k", "mode", "test_id"]


class ComparisonError(ExperimentError):
    """Two runs that cannot be compared as asked (a folder that is not a run, or runs that cannot be paired)."""


def read_run(folder: str | Path) -> tuple[dict, pd.DataFrame]:
    """A run folder's manifest and its judge scores per question.

    Returns
    -------
    (dict, DataFrame)
        The manifest, and system, model, context_k, mode, test_id, metric, score (the ok scores, replicates
        averaged, with an ``average`` row per cell: the mean of the metrics judged), flagged where judge sanity
        flags were raised.
    """
    from ..core.scores import with_average
    from .output import read_manifest, stores
    from .report import scores_by_question

    folder = Path(folder)
    if not folder.is_dir():
        raise ComparisonError(f"{folder} is not a folder; name the output folder of a fabnb run.")
    try:
        manifest = read_manifest(folder)
    except ExperimentError as exc:
        raise ComparisonError(str(exc)) from None
    if manifest is None:
        raise ComparisonError(f"{folder} holds no manifest.json: it is not the output folder of fabnb run; name the "
                              "folder a run wrote (the experiment file's output).")
    if manifest.get("kind") == "tests":
        raise ComparisonError(f"{folder} is a RAG-TESTER run ([tests]): its verdicts are failures of tests it wrote "
                              "itself, not judge scores of shared questions, so fabnb compare cannot pair it. Read "
                              "its report/tests/ tables side by side (failures_by_configuration.csv has each "
                              "configuration's failure rate with its interval), or put both systems in one [tests] "
                              "file: the same tests then go to both, and configuration_pairs.csv compares them on "
                              "matched tests.")
    frame = stores(folder)[1].frame()
    if not len(frame) or not (frame["status"] == "ok").any():
        raise ComparisonError(f"{folder} holds no judge scores yet (scores.jsonl is empty or every score failed); "
                              "run it to the end (fabnb run FILE resumes) and compare again.")
    per = scores_by_question(frame)
    return manifest, with_average(per[per["metric"] != AVERAGE])


def _judge(manifest: dict) -> dict:
    """What makes a run's scores what they are: the judge's model, settings and prompt text."""
    sig = dict(manifest.get("signatures", {}).get("judge", {}))
    endpoint = str(sig.pop("endpoint", ""))
    # The address of the judge's server is not what scores a cell (a rerun on a new port is the same judge): the
    # model is. An endpoint identity is "embedded" or "<url> <model>".
    sig["model"] = manifest.get("endpoints", {}).get("judge", {}).get("model") or _model_of(endpoint)
    if endpoint == "embedded":
        sig["model"] = "embedded"
    sig["rubric_sha256"] = manifest.get("rubric_sha256")
    return sig


def _model_of(endpoint) -> str | None:
    """The model of an endpoint identity ("embedded", "<url> <model>", or an adapter's "<name> (<kind>)")."""
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        return endpoint
    return endpoint.split(" ", 1)[1] if " " in endpoint else ""


def _system_differences(base: dict, candidate: dict, systems: dict, add) -> None:
    """The systems' settings that differ (their model, retriever, chunking, settings), and the systems only one run
    has; ``systems`` maps base names to candidate names."""
    sys_a, sys_b = base.get("signatures", {}).get("systems", {}), candidate.get("signatures", {}).get("systems", {})
    for name, sig in sys_a.items():
        other = sys_b.get(systems.get(name, name))
        if other is None:
            add(f"system {name}", "present", "absent (not paired)")
            continue
        if systems.get(name, name) != name:
            add("system name", name, systems[name])
        for key in sorted(set(sig) | set(other)):
            a, b = sig.get(key), other.get(key)
            if key == "endpoint":  # its model, not the address its server had that day
                key, a, b = "model", _model_of(a), _model_of(b)
            add(f"system {name} {key}", a, b)
    for name in set(sys_b) - {systems.get(n, n) for n in sys_a}:
        add(f"system {name}", "absent (not paired)", "present")


def run_differences(base: dict, candidate: dict, systems: dict | None = None) -> pd.DataFrame:
    """What differs between two runs' manifests, and whether it blocks pairing.

    Returns
    -------
    DataFrame
        what, base, candidate, kind: ``questions`` or ``judge`` (pairing is refused unless allowed), or ``noted``.
        ``not recorded`` stands for a value an older run's manifest lacks.
    """
    systems = systems or {}
    rows = []

    def add(what, a, b, kind="noted"):
        if a != b:
            rows.append([what, "not recorded" if a is None else a, "not recorded" if b is None else b, kind])

    ids_a, ids_b = set(base.get("question_ids", [])), set(candidate.get("question_ids", []))
    if ids_a != ids_b:
        add("question ids", f"{len(ids_a)} questions, {len(ids_a - ids_b)} not in candidate",
            f"{len(ids_b)} questions, {len(ids_b - ids_a)} not in base", "questions")
    elif base.get("questions_sha256") and candidate.get("questions_sha256"):
        add("question texts (questions_sha256)", base["questions_sha256"][:12], candidate["questions_sha256"][:12],
            "questions")
    add("questions source", base.get("questions_source"), candidate.get("questions_source"))
    ja, jb = _judge(base), _judge(candidate)
    for key in sorted(set(ja) | set(jb)):
        a, b = ja.get(key), jb.get(key)
        if a is None or b is None:
            add(f"judge {key}", a, b)  # not recorded by an older fabnb: said, not refused
        else:
            add(f"judge {key}", a, b, "judge")
    add("fabnb version", base.get("fabnb"), candidate.get("fabnb"))
    for dist in sorted(set(base.get("versions", {})) | set(candidate.get("versions", {})) - {"fabnb"}):
        add(f"{dist} version", base.get("versions", {}).get(dist), candidate.get("versions", {}).get(dist))
    add("retrieval knobs", base.get("signatures", {}).get("retrieval"),
        candidate.get("signatures", {}).get("retrieval"))
    _system_differences(base, candidate, systems, add)
    return pd.DataFrame(rows, columns=["what", "base", "candidate", "kind"])


def _pair(base: pd.DataFrame, candidate: pd.DataFrame, systems: dict) -> pd.DataFrame:
    """Cells both runs scored, with base, candidate and d = candidate - base."""
    keys = [*CELL, "metric"]
    a = base.assign(system=base["system"].map(lambda s: systems.get(s, s)))[[*keys, "score"]]
    b = candidate[[*keys, "score"]]
    for frame in (a, b):
        frame["context_k"] = frame["context_k"].astype(float)
    paired = a.rename(columns={"score": "base"}).merge(b.rename(columns={"score": "candidate"}), on=keys)
    return paired.assign(d=paired["candidate"] - paired["base"])


def _p(p) -> str:
    """A p-value as a table shows it: two significant digits, ``< 0.0001`` below that, ``-`` where no test ran."""
    if p is None or not np.isfinite(p):
        return "-"
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def _needed(row, margin: float) -> int | None:
    """About how many questions would put the interval wholly on one side of ``-margin``: the half-width shrinks as
    1 / sqrt(n). None where nothing settles it (the estimate sits on the margin) or no interval could be drawn."""
    half = (row["ci_high"] - row["ci_low"]) / 2
    gap = abs(row["mean"] + margin)
    if not np.isfinite(half) or gap < 1e-12:
        return None
    return max(int(row["n"]) + 1, math.ceil(row["n"] * (half / gap) ** 2))


def _gate(primary: pd.DataFrame, margin: float, ci: float) -> pd.DataFrame:
    """Each system's verdict on the primary metric: interval wholly below -margin, wholly at or above it, or not."""
    verdicts, needed = [], []
    for _, row in primary.iterrows():
        lo, hi, n = row["ci_low"], row["ci_high"], int(row["n"])
        if row["method"] == "no spread":
            # Every question moved by the same amount: no interval, but a sign test has its say (all n the same
            # sign is two-sided p = 2 / 2**n).
            if row["mean"] >= -margin:
                verdicts.append("no regression")
            else:
                verdicts.append("regression" if 2.0 ** (1 - n) < 1 - ci else "inconclusive")
            # A sign test can be decisive from 1 + log2(1 / (1 - ci)) questions all of one sign (6 at 95%).
            settles = max(n + 1, 1 + math.ceil(math.log2(1 / (1 - ci))))
            needed.append(settles if verdicts[-1] == "inconclusive" else None)
            continue
        if not np.isfinite(lo):
            verdicts.append("inconclusive")
            needed.append(None)
        elif hi < -margin:
            verdicts.append("regression")
            needed.append(None)
        elif lo >= -margin:
            verdicts.append("no regression")
            needed.append(None)
        else:
            verdicts.append("inconclusive")
            needed.append(_needed(row, margin))
    return primary.assign(verdict=verdicts, questions_needed=needed)


@dataclass
class Comparison:
    """Two runs compared: :func:`compare_runs` (folders) or :func:`compare_scores` (score frames).

    Attributes
    ----------
    table : DataFrame
        system, metric, context_k, mode, base_mean, candidate_mean, mean (candidate - base), ci_low, ci_high,
        n (questions), method, p_value, p_holm, ci_level, claimed; with a pass threshold also pass_base,
        pass_candidate, mcnemar_p.
    primary : DataFrame
        Per system, the primary metric pooled over windows and modes: mean, ci_low, ci_high, n, method, ci_level,
        verdict, questions_needed.
    items : DataFrame
        Per system, window, mode and question, the primary metric's base, candidate and d, most worsened first.
    differences : DataFrame
        :func:`run_differences` (empty for score frames).
    """

    table: pd.DataFrame
    primary: pd.DataFrame
    items: pd.DataFrame
    differences: pd.DataFrame
    metric: str = AVERAGE
    margin: float = 0.02
    ci: float = 0.95
    base: str = "base"
    candidate: str = "candidate"
    notices: list = field(default_factory=list)

    def verdict(self) -> str:
        """``regression`` when any system's primary interval lies wholly below ``-margin``; else ``inconclusive``
        when any cannot tell; else ``no regression``."""
        verdicts = set(self.primary["verdict"])
        for v in ("regression", "inconclusive"):
            if v in verdicts or (v == "inconclusive" and not verdicts):
                return v
        return "no regression"

    def exit_code(self, fail_on_regression: bool = False, fail_on_inconclusive: bool = False) -> int:
        """The status ``fabnb compare`` exits with (:data:`fabnb.core.exits.EXIT`)."""
        verdict = self.verdict()
        if verdict == "regression" and fail_on_regression:
            return EXIT["check_failed"]
        if verdict == "inconclusive" and fail_on_inconclusive:
            return EXIT["inconclusive"]
        return EXIT["ok"]

    def summary(self) -> str:
        """The gate's verdict in a sentence per system, as the terminal, ``compare.md`` and a CI log print it."""
        from ..core.stats import shown_interval

        lines = []
        for _, r in self.primary.iterrows():
            shown = shown_interval(r["mean"], r["ci_low"], r["ci_high"], r["n"], r["method"])
            over = "" if pd.isna(r["ci_low"]) else f" over {int(r['n'])} questions"
            line = (f"{r['system']}: {self.metric} candidate - base = {shown}{over} ({r['ci_level']:.1%} interval, "
                    f"margin {self.margin:g}): {r['verdict']}")
            if r["verdict"] == "inconclusive":
                needed = r["questions_needed"]
                line += (f"; about {int(needed)} paired questions would settle it" if pd.notna(needed) else
                         "; the estimate sits on the margin or has no interval: more questions alone may not settle "
                         "it")
            lines.append(line)
        return "\n".join(lines) if lines else "no cells are paired: nothing to gate on"

    def terminal(self) -> str:
        """Every metric and window as the terminal prints it: one line each, the difference with its interval."""
        from ..core.stats import shown_interval

        if not len(self.table):
            return "no cells are paired"
        t = self.table.assign(difference=[shown_interval(*v) for v in self.table[
            ["mean", "ci_low", "ci_high", "n", "method"]].itertuples(index=False)],
            claimed=self.table["claimed"].map({True: "yes", False: ""}))
        columns = ["system", "metric", "context_k", "mode", "base_mean", "candidate_mean", "difference", "claimed"]
        return t[columns].round(3).to_string(index=False)

    def markdown(self, rows: int = 10) -> str:
        """``compare.md``: the verdict, what differs, the per-metric table and the items that moved most; fits a
        GitHub job summary or a pull-request comment."""
        from ..core.stats import shown_interval

        out = [f"# fabnb compare: {self.verdict()}", "", f"Base `{self.base}`, candidate `{self.candidate}`.", "",
               "## Gate", "", *[f"- {line}" for line in self.summary().splitlines()], ""]
        out += [f"> {n}" for n in self.notices] + ([""] if self.notices else [])
        if len(self.differences):
            out += ["## What differs", "", self.differences.to_markdown(index=False), ""]
        t = self.table.assign(difference=[shown_interval(*v) for v in self.table[
            ["mean", "ci_low", "ci_high", "n", "method"]].itertuples(index=False)],
            p_holm=[_p(p) for p in self.table["p_holm"]], claimed=self.table["claimed"].map({True: "yes", False: ""}))
        columns = ["system", "metric", "context_k", "mode", "base_mean", "candidate_mean", "difference", "n",
                   "p_holm", "claimed"] + [c for c in ("pass_base", "pass_candidate", "mcnemar_p") if c in t.columns]
        level = f"{t['ci_level'].iloc[0]:.2%}" if len(t) else "-"
        out += ["## Every metric and window (information)", "",
                f"Paired over questions; intervals at {level} (Bonferroni over the {len(t)} rows), claims by Holm's "
                "p < 0.05.", "", t[columns].round(4).to_markdown(index=False), ""]
        for title, part in (("got worse", self.items[self.items["d"] < 0].head(rows)),
                            ("got better", self.items[self.items["d"] > 0].sort_values("d", ascending=False)
                             .head(rows))):
            out += [f"## Items that {title} ({self.metric})", "",
                    part.round(4).to_markdown(index=False) if len(part) else "none", ""]
        return "\n".join(out)

    def to_json(self) -> dict:
        """``compare.json``: every table as records (NaN as null) and the verdict."""
        from .output import json_records

        return {"base": self.base, "candidate": self.candidate, "metric": self.metric, "margin": self.margin,
                "ci": self.ci, "verdict": self.verdict(), "notices": list(self.notices),
                "primary": json_records(self.primary), "table": json_records(self.table),
                "items": json_records(self.items), "differences": json_records(self.differences)}

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``compare.md`` and ``compare.json`` into ``folder`` (made if missing), each whole or not at all."""
        from ..core.files import write_whole
        from .output import write_json

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        md = write_whole(folder / "compare.md", self.markdown())
        write_json(folder / "compare.json", self.to_json(), indent=1)
        return md, folder / "compare.json"


def compare_scores(base: pd.DataFrame, candidate: pd.DataFrame, *, systems: dict | None = None,
                   metric: str = AVERAGE, margin: float = 0.02, ci: float = 0.95, pass_threshold: float | None = None,
                   differences: pd.DataFrame | None = None) -> Comparison:
    """Two per-question score frames compared (the work of :func:`compare_runs`, for frames in memory).

    Parameters
    ----------
    base, candidate : DataFrame
        system, context_k, mode, test_id, metric, score (0-1); one row per cell and metric.
    systems : dict, optional
        Base system name -> candidate system name, for a system renamed between the runs.
    metric : str
        The primary metric the gate reads.
    margin : float
        A regression is a primary difference whose interval lies wholly below ``-margin``.
    pass_threshold : float, optional
        Where set, each row also gets McNemar's exact test of pass (score >= threshold) in base against candidate.

    Returns
    -------
    Comparison
    """
    from ..core.stats import mcnemar_paired, paired_differences

    if not margin >= 0:
        raise ComparisonError(f"margin must be 0 or more (a score difference, 0-1), not {margin!r}.")
    paired = _pair(base, candidate, systems or {})
    by = ["system", "metric", "context_k", "mode"]
    table = paired_differences(paired, by, ci=ci)
    means = paired.groupby(by, dropna=False)[["base", "candidate"]].mean().add_suffix("_mean").reset_index()
    table = means.merge(table, on=by, how="right") if len(table) else means.iloc[:0].reindex(
        columns=[*means.columns, *table.columns.drop(by)])
    if pass_threshold is not None and len(table):
        tests = {k: mcnemar_paired(g["base"] >= pass_threshold, g["candidate"] >= pass_threshold)
                 for k, g in paired.groupby(by, dropna=False)}
        table["pass_base"] = [tests[k]["rate_a"] for k in table[by].itertuples(index=False, name=None)]
        table["pass_candidate"] = [tests[k]["rate_b"] for k in table[by].itertuples(index=False, name=None)]
        table["mcnemar_p"] = [tests[k]["p_value"] for k in table[by].itertuples(index=False, name=None)]
    chosen = paired[paired["metric"] == metric]
    pooled = chosen.groupby(["system", "test_id"], as_index=False)["d"].mean()
    primary = paired_differences(pooled, ["system"], ci=ci).assign(metric=metric)
    primary = _gate(primary[["system", "metric", "mean", "ci_low", "ci_high", "n", "method", "ci_level"]], margin,
                    ci)
    items = chosen[[*CELL, "base", "candidate", "d"]].assign(d=lambda f: f["d"].round(9))  # 0.6 - 0.8 ties 0.4 - 0.6
    items = items.sort_values(["d", *CELL], kind="stable", ignore_index=True)
    notices = []
    if not len(chosen):
        notices.append(f"no paired cell has the metric {metric!r}: the gate has nothing to read; metrics paired: "
                       f"{', '.join(sorted(set(paired['metric']))) or 'none'}.")
    return Comparison(table, primary, items, differences if differences is not None else
                      pd.DataFrame(columns=["what", "base", "candidate", "kind"]), metric, margin, ci,
                      notices=notices)


def _calibration_notices(base, candidate, required: bool) -> list[str]:
    """What the comparison says of the runs' judges against experts (:mod:`fabnb.judge.calibration`); with
    ``required``, a judge not calibrated, or calibrated and outside the gate, is refused."""
    from ..judge.calibration import read_calibration

    states = {name: read_calibration(folder) for name, folder in (("base", base), ("candidate", candidate))}
    missing = [name for name, c in states.items() if c is None]
    failing = [name for name, c in states.items() if c is not None and not c.get("usable_alone")]
    if required and (missing or failing):
        said = (f"the judge of the {' and the '.join(missing)} run has no calibration against expert ratings "
                "(calibration/calibration.json)" if missing else
                f"the judge of the {' and the '.join(failing)} run was calibrated and does not agree with the "
                "experts well enough to be used alone (calibration/calibration.json's verdicts)")
        raise ComparisonError(f"--require-calibrated-judge: {said}; calibrate it (fabnb rate --from RUN_DIR "
                              "--sample N --raters A,B, then the experts' scores), or drop the flag to compare the "
                              "judge's scores as they are.")
    notices = []
    if missing:
        notices.append(f"the judge of the {' and the '.join(missing)} run is not calibrated against experts: "
                       "these are differences in the judge's scores, which no expert rating has checked.")
    if failing:
        notices.append(f"the judge of the {' and the '.join(failing)} run was calibrated and is outside the gate "
                       "(calibration/calibration.json): read its differences beside the experts' corrected means.")
    return notices


def compare_runs(base: str | Path, candidate: str | Path, *, systems: dict | None = None, allow=(),
                 metric: str = AVERAGE, margin: float = 0.02, ci: float = 0.95, pass_threshold: float | None = None,
                 require_calibrated_judge: bool = False) -> Comparison:
    """Two run folders compared cell by cell: :func:`compare_scores` after :func:`run_differences` has checked
    they can be paired.

    Parameters
    ----------
    base, candidate : path
        Output folders of ``fabnb run``.
    systems : dict, optional
        Base system name -> candidate system name (``fabnb compare --map old=new``).
    allow : iterable of str
        Of :data:`ALLOWABLE`: pair runs that differ in their questions (the shared ones are paired) or their judge.
    require_calibrated_judge : bool
        Refuse unless both runs' judges were calibrated against expert ratings and passed the gate
        (``calibration/calibration.json``, :func:`fabnb.judge.calibration.calibrate`); without it the comparison says
        so.

    Raises
    ------
    ComparisonError
        A folder that is not a run, runs that cannot be paired (naming what differs and the flag that allows it),
        or a system map that names no system.

    Examples
    --------
    Two output folders of ``fabnb run`` compare as ``compare_runs("runs/main", "runs/pr").verdict()``; a folder
    that is not a run's is refused by name:

    >>> import tempfile
    >>> compare_runs(tempfile.mkdtemp(), tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.experiment.comparison.ComparisonError: /... holds no manifest.json: it is not the output folder of ...
    """
    unknown = set(allow) - set(ALLOWABLE)
    if unknown:
        raise ComparisonError(f"allow: {sorted(unknown)} cannot be allowed; choose from {', '.join(ALLOWABLE)}.")
    (ma, a), (mb, b) = read_run(base), read_run(candidate)
    systems = dict(systems or {})
    missing = [f"{k!r} (base)" for k in systems if k not in set(a["system"])]
    missing += [f"{v!r} (candidate)" for v in systems.values() if v not in set(b["system"])]
    if missing:
        raise ComparisonError(f"the system map names {', '.join(missing)}, which that run does not hold; base "
                              f"systems: {', '.join(sorted(set(a['system'])))}; candidate systems: "
                              f"{', '.join(sorted(set(b['system'])))}.")
    shared = {systems.get(s, s) for s in set(a["system"])} & set(b["system"])
    if not shared:
        only_a, only_b = sorted(set(a["system"])), sorted(set(b["system"]))
        hint = (f" If {only_a[0]!r} was renamed, map it: --map {only_a[0]}={only_b[0]}"
                f" (Python: systems={{{only_a[0]!r}: {only_b[0]!r}}})." if len(only_a) == len(only_b) == 1 else
                " Map each renamed system: --map OLD=NEW.")
        raise ComparisonError(f"{base} and {candidate} share no system: base {', '.join(only_a)}; candidate "
                              f"{', '.join(only_b)}.{hint}")
    diffs = run_differences(ma, mb, systems)
    blocking = diffs[diffs["kind"].isin(ALLOWABLE) & ~diffs["kind"].isin(list(allow))]
    if len(blocking):
        said = "; ".join(f"{r.what}: {r.base} -> {r.candidate}" for r in blocking.itertuples())
        flags = " ".join(f"--allow {k}" for k in dict.fromkeys(blocking["kind"]))
        raise ComparisonError(f"{base} and {candidate} cannot be paired: {said}. Scores of other questions or of "
                              f"another judge are not the same measurement; rerun one of them to match, or compare "
                              f"anyway with {flags} (the report says so).")
    notices = [f"allowed: {what} differs ({b_} -> {c_}); the comparison pairs what both runs share."
               for what, b_, c_ in diffs[diffs["kind"].isin(list(allow))][["what", "base", "candidate"]]
               .itertuples(index=False)]
    notices += _calibration_notices(base, candidate, require_calibrated_judge)
    judged_a, judged_b = set(a["metric"]) - {AVERAGE}, set(b["metric"]) - {AVERAGE}
    if judged_a != judged_b:
        # An average of other metrics is another measurement: both averages are taken over the shared metrics.
        from ..core.scores import with_average

        shared_metrics = judged_a & judged_b
        a = with_average(a[a["metric"].isin(shared_metrics)])
        b = with_average(b[b["metric"].isin(shared_metrics)])
        notices.append(f"the runs judged other metrics (base: {', '.join(sorted(judged_a))}; candidate: "
                       f"{', '.join(sorted(judged_b))}); only the shared ones are compared, and the average is "
                       f"theirs ({', '.join(sorted(shared_metrics)) or 'none'}).")
    comparison = compare_scores(a, b, systems=systems, metric=metric, margin=margin, ci=ci,
                                pass_threshold=pass_threshold, differences=diffs)
    comparison.base, comparison.candidate = str(base), str(candidate)
    mapped = a[a["metric"] == metric].assign(system=lambda f: f["system"].map(lambda s: systems.get(s, s)))
    unpaired = len(mapped) - len(comparison.items)
    if unpaired > 0:
        notices.append(f"{unpaired} of the base's cells have no partner in the candidate (another window, mode, "
                       "question or system, or a cell not scored) and are left out.")
    comparison.notices = notices + comparison.notices
    return comparison

