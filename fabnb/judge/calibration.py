"""The judge answers to the experts: a sample of a run's judged answers, scored by experts on the judge's own scale,
then the judge's agreement with them, prediction-powered means, and a gate on whether the judge may be used alone.

FAB-Bench names this as its first item of future work (Section 8.3): human correlation studies of the LLM judge
with inter-annotator agreement. The loop, on a run folder of ``fabnb run``:

1. :func:`draw_sample`: the cells to rate. ``design="uniform"``: a seeded uniform sample of the judged cells, the
   sample prediction-powered inference needs (it corrects the mean of the cells the sample was drawn from);
   ``design="stratified"``: equal numbers per stratum (system, window, mode, test type and the judge's score band),
   for agreement across the range, each cell with its inverse-inclusion weight.
2. :func:`write_study`: ``calibration/`` in the run folder: the sample, the population it was drawn from, the
   settings, the items the raters see (:func:`answer_items`: the question, the reference answer, the context the
   system saw, the answer, the rubric of each chosen metric for the question's type; never the system's name or
   the judge's scores) and one assignment per rater, with overlap (:func:`fabnb.qa.rating.assign`).
3. Experts score in the rating app (kind ``"answer"``: the six metrics on 0-10, :data:`fabnb.qa.rating.SCHEMES`).
4. :func:`calibrate`: per metric, the experts' agreement among themselves (Krippendorff's alpha and ICC, bootstrap
   over items), the judge against the experts' consensus (Spearman with a Fisher-z interval, quadratic-weighted
   kappa on the 0-10 scale, the mean bias judge - experts with the kit's interval), the prediction-powered mean
   (:func:`fabnb.core.stats.ppi_mean`) beside the judge's own, and the gate (:data:`GATE`). It writes
   ``calibration/calibration.json``, which ``fabnb compare`` reads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import FabnbError
from ..core.schema import RESULT_KEYS

__all__ = ["CALIBRATION_DIR", "CalibrationError", "GATE", "answer_items", "calibrate", "cell_item_id",
           "corrected_means", "draw_sample", "draw_study", "judge_agreement", "judged_by_itself", "judged_cells",
           "markdown", "notes", "rated", "read_calibration", "self_preference", "verbosity", "write_study"]

#: The folder of a run that holds its calibration study.
CALIBRATION_DIR = "calibration"

#: When the judge may be used alone, per metric: the lower end of the Spearman interval against the experts'
#: consensus at least ``min_spearman``, and the mean bias's interval inside ±``max_abs_bias`` (on the 0-1 scale the
#: report shows). Settable per call (``calibrate(gate=...)``); the summary states the values used.
GATE = {"min_spearman": 0.5, "max_abs_bias": 0.1}

#: The judge's score bands a stratified sample balances (on 0-1).
BANDS = ((0.0, 0.4, "low"), (0.4, 0.7, "middle"), (0.7, 1.01, "high"))

SAMPLE_COLUMNS = ["item_id", *RESULT_KEYS, "design", "stratum", "weight"]


class CalibrationError(FabnbError, ValueError):
    """A calibration study that cannot be drawn or computed as asked (the message names why and the fix)."""


def cell_item_id(key) -> str:
    """A cell's id as raters see it: ``C`` and 10 hex digits of a hash of its key, so that the id does not name the
    system (raters are blind to it) and is the same wherever the key is.

    >>> cell_item_id(("s", "m", 4.0, "A", "Q1")) == cell_item_id(["s", "m", 4, "A", "Q1"])
    True
    """
    system, model, context_k, mode, test_id = key
    text = json.dumps([str(system), str(model), float(context_k), str(mode), str(test_id)])
    return "C" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def _item_ids(frame: pd.DataFrame) -> list[str]:
    """Each row's :func:`cell_item_id`, from its :data:`fabnb.core.schema.RESULT_KEYS` columns."""
    return [cell_item_id(k) for k in frame[list(RESULT_KEYS)].itertuples(index=False, name=None)]


def _ok_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """A score store's ok rows, score and window as floats."""
    return scores[scores["status"] == "ok"].assign(score=lambda f: f["score"].astype(float),
                                                   context_k=lambda f: f["context_k"].astype(float))


def judged_cells(scores: pd.DataFrame, questions: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell with at least one ok judge score: item_id (:func:`cell_item_id`), its key, judge_mean
    (over metrics and replicates, 0-1), test_type: the population a sample is drawn from."""
    keys = list(RESULT_KEYS)
    cells = _ok_scores(scores).groupby(keys, as_index=False)["score"].mean().rename(columns={"score": "judge_mean"})
    if questions is not None and "test_type" in questions.columns:
        cells = cells.merge(questions[["test_id", "test_type"]].drop_duplicates("test_id"), on="test_id", how="left")
    else:
        cells["test_type"] = ""
    cells["item_id"] = _item_ids(cells)
    return cells.sort_values(keys, ignore_index=True)


def draw_sample(scores: pd.DataFrame, n: int, *, seed: int = 0, design: str = "uniform",
                questions: pd.DataFrame | None = None) -> pd.DataFrame:
    """Cells of a run to rate, drawn from those the judge scored.

    Parameters
    ----------
    scores : DataFrame
        A score store's frame: the :data:`fabnb.core.schema.RESULT_KEYS`, metric, status, score.
    n : int
        Cells to draw (each is rated on every chosen metric).
    design : {"uniform", "stratified"}
        Uniform: every judged cell equally likely (prediction-powered means need it). Stratified: ``n`` spread
        evenly over the strata (system, window, mode, test type, the judge's band of :data:`BANDS`), for agreement.
    questions : DataFrame, optional
        test_id, test_type: the strata's test types.

    Returns
    -------
    DataFrame
        item_id (:func:`cell_item_id`), the cell's keys, design, stratum, weight (cells of the population each drawn
        cell stands for: the inverse of its inclusion probability).

    Examples
    --------
    >>> scores = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A",
    ...                        "test_id": [f"Q{i}" for i in range(10)], "metric": "depth", "status": "ok",
    ...                        "score": [i / 10 for i in range(10)]})
    >>> sample = draw_sample(scores, 4, seed=1)
    >>> len(sample), float(sample["weight"].iloc[0]), bool(sample["item_id"].str.match(r"^C[0-9a-f]{10}$").all())
    (4, 2.5, True)
    >>> draw_sample(scores, 11)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.judge.calibration.CalibrationError: the run has 10 judged cells, fewer than the 11 asked; ...
    """
    if design not in ("uniform", "stratified"):
        raise CalibrationError(f"design must be 'uniform' (for corrected means) or 'stratified' (for agreement), "
                               f"not {design!r}.")
    cells = judged_cells(scores, questions)
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise CalibrationError(f"a sample needs 2 or more cells, not {n!r}.")
    if n > len(cells):
        raise CalibrationError(f"the run has {len(cells)} judged cells, fewer than the {n} asked; draw {len(cells)} "
                               "or fewer, or rate after the judge stage has scored more.")
    rng = np.random.default_rng(seed)
    if design == "uniform":
        chosen = cells.iloc[np.sort(rng.choice(len(cells), size=n, replace=False))]
        return chosen.assign(design=design, stratum="all", weight=len(cells) / n)[SAMPLE_COLUMNS].reset_index(
            drop=True)
    band = pd.cut(cells["judge_mean"], [b[0] for b in BANDS] + [BANDS[-1][1]], labels=[b[2] for b in BANDS],
                  right=False).astype(str)
    cells["stratum"] = (cells["system"].astype(str) + "|" + cells["context_k"].map("{:g}K".format) + "|"
                        + cells["mode"].astype(str) + "|" + cells["test_type"].fillna("").astype(str) + "|" + band)
    strata = sorted(cells["stratum"].unique())
    base, extra = divmod(n, len(strata))
    parts = []
    for i, name in enumerate(rng.permutation(strata)):
        pool = cells[cells["stratum"] == name]
        take = min(len(pool), base + (1 if i < extra else 0))
        if take:
            picked = pool.iloc[np.sort(rng.choice(len(pool), size=take, replace=False))]
            parts.append(picked.assign(weight=len(pool) / take))
    out = pd.concat(parts).assign(design=design)
    return out.sort_values(list(RESULT_KEYS), ignore_index=True)[SAMPLE_COLUMNS]


def _rubric_text(metrics, question_format: str, has_context: bool) -> str:
    """The rubric bands of each chosen metric for a question of this format (FAB-Bench Appendix E)."""
    from .rubrics import BANDS as SCORE_BANDS
    from .rubrics import RUBRICS, rubric_variant

    lines = []
    for metric in metrics:
        variant = rubric_variant(metric, question_format, has_context)
        bands = RUBRICS[metric].get(variant) or next(iter(RUBRICS[metric].values()))
        lines.append(f"{metric} ({variant}):")
        lines += [f"  {lo}-{hi}: {text}" if lo != hi else f"  {lo}: {text}" for (lo, hi), text in zip(SCORE_BANDS,
                                                                                                    bands)]
    return "\n".join(lines)


def answer_items(answers: pd.DataFrame, questions: pd.DataFrame, sample: pd.DataFrame, metrics) -> pd.DataFrame:
    """What a rater sees of each sampled cell: never the system's name nor the judge's scores.

    Returns
    -------
    DataFrame
        item_id, test_type, question_format, question, ground_truth_answer, context (the passages the system was
        given, in rank order; "gold context" in mode B), answer, rubric.
    """
    keys = list(RESULT_KEYS)
    a = answers.assign(context_k=answers["context_k"].astype(float)).drop_duplicates(keys, keep="last")
    merged = sample[["item_id", *keys]].merge(a, on=keys, how="left")
    q = questions.drop_duplicates("test_id").set_index("test_id")
    rows = []
    for r in merged.itertuples(index=False):
        sources = getattr(r, "sources", None)
        if isinstance(sources, list) and sources:
            context = "\n\n".join(f"[{i + 1}] {s.get('text', '')}" for i, s in enumerate(sources))
        elif r.mode == "B" and r.test_id in q.index and "gold_context" in q.columns:
            context = str(q.at[r.test_id, "gold_context"])
        else:
            context = ""
        fmt = str(q.at[r.test_id, "question_format"]) if "question_format" in q.columns and r.test_id in q.index \
            else "SUBJECTIVE"
        rows.append({"item_id": r.item_id, "test_type": q.at[r.test_id, "test_type"] if "test_type" in q.columns
                     and r.test_id in q.index else "", "question_format": fmt,
                     "question": str(q.at[r.test_id, "question"]) if r.test_id in q.index else "",
                     "ground_truth_answer": str(q.at[r.test_id, "ground_truth_answer"])
                     if "ground_truth_answer" in q.columns and r.test_id in q.index else "",
                     "context": context, "answer": str(getattr(r, "answer", "") or ""),
                     "rubric": _rubric_text(metrics, fmt, bool(context))})
    return pd.DataFrame(rows)


def write_study(folder: str | Path, sample: pd.DataFrame, items: pd.DataFrame, raters, metrics, *,
                per_item: int = 2, seed: int = 0, population: pd.DataFrame | None = None) -> Path:
    """Write the calibration study into ``folder/calibration``: ``sample.csv``, ``population.csv`` (the cells the
    sample was drawn from: a corrected mean covers those, not cells judged later), ``items.json`` (what raters see),
    ``settings.json`` (metrics, design, seed, raters) and ``manifests/`` (one assignment per rater). Refuses to
    replace a study that has ratings (they would no longer match its sample); returns the study's folder."""
    from ..core.records import hold
    from ..qa.rating import RatingStore, assign, write_manifests

    study = Path(folder) / CALIBRATION_DIR
    ratings = study / "ratings"
    if ratings.is_dir() and RatingStore(ratings).raters():
        raise CalibrationError(f"{study} already holds ratings by {', '.join(RatingStore(ratings).raters())}; a new "
                               "sample would orphan them. Finish that study (fabnb rate --serve) or move the folder "
                               "away first.")
    study.mkdir(parents=True, exist_ok=True)
    assignments = assign(sample["item_id"], list(raters), per_item=per_item, seed=seed)  # refused before writing
    with hold(study, "drawing a calibration study"):  # two draws at once would mix their files: the second is refused
        sample.to_csv(study / "sample.csv", index=False)
        if population is not None:
            population[["item_id", *RESULT_KEYS]].to_csv(study / "population.csv", index=False)
        (study / "items.json").write_text(items.to_json(orient="records", force_ascii=False), encoding="utf-8")
        settings = {"metrics": list(metrics), "design": str(sample["design"].iloc[0]), "seed": seed,
                    "n": len(sample), "raters": list(raters), "per_item": per_item}
        (study / "settings.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")
        write_manifests(assignments, study / "manifests")
    return study


def draw_study(run: str | Path, n: int, raters, questions: pd.DataFrame, *, metrics=None, design: str = "uniform",
               per_item: int = 2, seed: int = 0) -> Path:
    """Draw a calibration study of a run folder and write it (``fabnb rate --from RUN_DIR --sample N``):
    :func:`draw_sample`, :func:`answer_items` and :func:`write_study` in one call.

    Parameters
    ----------
    questions : DataFrame
        The run's questions (test_id, question, ground_truth_answer, test_type, question_format):
        ``Experiment.questions()``, or ``Explorer.from_folder(run).questions``.
    metrics : list of str, optional
        The metrics experts score (default: every metric the run judged).

    Returns
    -------
    Path
        The study's folder, ``RUN/calibration``.
    """
    from ..core.records import ResultsStore
    from .geval import score_store

    run = Path(run)
    scores = score_store(run / "scores.jsonl").frame()
    judged = sorted(set(scores.loc[scores["status"] == "ok", "metric"])) if len(scores) else []
    metrics = list(metrics) if metrics else judged
    unknown = sorted(set(metrics) - set(judged))
    if unknown:
        raise CalibrationError(f"metrics {unknown} were not judged in {run}; judged: {', '.join(judged) or 'none'}.")
    raters = list(raters or [])
    if len(raters) < 2:
        raise CalibrationError(f"name two or more raters (got {raters}): agreement needs answers two raters score.")
    questions = questions.reset_index(drop=True)
    sample = draw_sample(scores, n, seed=seed, design=design, questions=questions)
    items = answer_items(ResultsStore(run / "answers.jsonl").frame(), questions, sample, metrics)
    return write_study(run, sample, items, raters, metrics, per_item=per_item, seed=seed,
                       population=judged_cells(scores, questions))


def rated(run: str | Path) -> int:
    """How many sampled answers experts have scored in a run's study (0 without one).

    >>> import tempfile
    >>> rated(tempfile.mkdtemp())
    0
    """
    from ..qa.rating import RatingStore

    folder = Path(run) / CALIBRATION_DIR / "ratings"
    return int(RatingStore(folder).ratings(kind="answer")["item_id"].nunique()) if folder.is_dir() else 0


def _expert_frame(ratings: pd.DataFrame, metrics) -> pd.DataFrame:
    """The experts' latest scores: item_id, rater, metric, score (0-10)."""
    r = ratings[ratings["dimension"].isin(list(metrics))]
    return r.rename(columns={"dimension": "metric"})[["item_id", "rater", "metric", "score"]]


def _consensus(experts: pd.DataFrame, metric: str) -> pd.Series:
    """item_id -> the experts' mean score of one metric (0-10): the consensus the judge is held against."""
    return experts[experts["metric"] == metric].groupby("item_id")["score"].mean()


def judge_agreement(judged: pd.DataFrame, ratings: pd.DataFrame, metrics, *, n_boot: int = 1000,
                    seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Per metric: the experts among themselves, and the judge against their consensus.

    Parameters
    ----------
    judged : DataFrame
        item_id, metric, score (the judge's, 0-1; replicates averaged).
    ratings : DataFrame
        The experts' ratings of kind ``"answer"``: rater, item_id, dimension (the metric), score (0-10).

    Returns
    -------
    DataFrame
        metric, statistic (``alpha_ordinal``, ``ICC2`` among experts; ``spearman``, ``kappa_quadratic``,
        ``bias`` judge - experts on 0-1), value, ci_low, ci_high, n_items, n_raters.
    """
    from scipy.stats import spearmanr

    from ..core.stats import cell_means, fisher_z_interval, weighted_kappa
    from ..qa.agreement import agreement

    experts = _expert_frame(ratings, metrics)
    among = agreement(experts.rename(columns={"metric": "dimension"}), n_boot=n_boot, seed=seed, ci=ci,
                      dimensions=list(metrics), scale=(0, 10))
    rows = among.rename(columns={"dimension": "metric"}).to_dict("records")
    for metric in metrics:
        consensus = _consensus(experts, metric).rename("mean")
        both = judged[judged["metric"] == metric].set_index("item_id")[["score"]].join(consensus, how="inner")
        n, raters = len(both), int(experts.loc[experts["metric"] == metric, "rater"].nunique())
        if n < 2:
            continue
        rho = float(spearmanr(both["score"], both["mean"]).statistic) if both["score"].nunique() > 1 and \
            both["mean"].nunique() > 1 else float("nan")
        lo, hi = fisher_z_interval(rho, n, ci)
        rows.append({"metric": metric, "statistic": "spearman", "value": rho, "ci_low": lo, "ci_high": hi,
                     "n_items": n, "n_raters": raters})
        kappa = weighted_kappa(np.rint(both["score"] * 10).astype(int), np.rint(both["mean"]).astype(int),
                               scale=(0, 10))
        rows.append({"metric": metric, "statistic": "kappa_quadratic", "value": kappa, "ci_low": np.nan,
                     "ci_high": np.nan, "n_items": n, "n_raters": raters})
        diff = pd.DataFrame({"cell": metric, "test_id": both.index, "d": both["score"] - both["mean"] / 10})
        b = cell_means(diff, ["cell"], value="d", ci=ci, bounds=(-1.0, 1.0), seed=seed).iloc[0]
        rows.append({"metric": metric, "statistic": "bias", "value": float(b["mean"]), "ci_low": float(b["ci_low"]),
                     "ci_high": float(b["ci_high"]), "n_items": n, "n_raters": raters})
    return pd.DataFrame(rows, columns=["metric", "statistic", "value", "ci_low", "ci_high", "n_items", "n_raters"])


def corrected_means(judged_all: pd.DataFrame, judged_sample: pd.DataFrame, ratings: pd.DataFrame, metrics,
                    design: str = "uniform", ci: float = 0.95) -> pd.DataFrame:
    """Per metric, the prediction-powered mean of the population's cells beside the judge's own mean.

    The rectifier (experts' consensus - judge, on 0-1) is pooled over the sampled cells, per metric; the estimate
    is the judge's mean over every cell plus the rectifier's mean (Angelopoulos et al. 2023, *Science* 382:
    669-674; ARES's use). It holds only for a uniform sample of those cells: a stratified one is refused.

    Returns
    -------
    DataFrame
        metric, judge_mean, judge_ci_low, judge_ci_high (the judge's own, t or bootstrap over cells), estimate,
        ci_low, ci_high (prediction-powered), n_cells, n_rated.
    """
    from ..core.stats import cell_means, ppi_mean

    if design != "uniform":
        raise CalibrationError(f"corrected means need a uniform sample of the cells they correct; this study's "
                               f"sample is {design!r} (drawn for agreement). Draw a uniform one: fabnb rate --from "
                               "RUN_DIR --design uniform.")
    experts = _expert_frame(ratings, metrics)
    rows = []
    for metric in metrics:
        everything = judged_all[judged_all["metric"] == metric]
        consensus = _consensus(experts, metric) / 10
        labelled = judged_sample[judged_sample["metric"] == metric].set_index("item_id")["score"]
        labelled = labelled[labelled.index.isin(consensus.index)]
        if len(labelled) < 2 or len(everything) < 2:
            continue
        own = cell_means(everything.assign(cell=metric), ["cell"], value="score", cluster="item_id", ci=ci,
                         bounds=(0.0, 1.0)).iloc[0]
        ppi = ppi_mean(everything["score"], labelled, consensus[labelled.index], alpha=1 - ci)
        rows.append({"metric": metric, "judge_mean": float(own["mean"]), "judge_ci_low": float(own["ci_low"]),
                     "judge_ci_high": float(own["ci_high"]), "estimate": ppi["estimate"], "ci_low": ppi["ci_low"],
                     "ci_high": ppi["ci_high"], "n_cells": int(len(everything)), "n_rated": int(len(labelled))})
    return pd.DataFrame(rows, columns=["metric", "judge_mean", "judge_ci_low", "judge_ci_high", "estimate", "ci_low",
                                       "ci_high", "n_cells", "n_rated"])


def verbosity(judged: pd.DataFrame, ratings: pd.DataFrame, lengths: pd.Series, metrics,
              ci: float = 0.95) -> pd.DataFrame:
    """Does the judge favour long answers more than the experts do? Per metric, Spearman's rho of the judge's score
    against the answer's length in words beside the experts' consensus against the same lengths, on the rated
    answers, each with a Fisher-z interval (Zheng et al. 2023 name verbosity among LLM judges' biases).

    Parameters
    ----------
    lengths : Series
        item_id -> words in the answer.

    Returns
    -------
    DataFrame
        metric, scorer (``judge`` or ``experts``), rho, ci_low, ci_high, n_items.

    Examples
    --------
    >>> judged = pd.DataFrame({"item_id": list("abcdef"), "metric": "depth", "score": [.2, .3, .5, .6, .8, .9]})
    >>> ratings = pd.DataFrame({"rater": "ana", "item_id": list("abcdef"), "dimension": "depth",
    ...                         "score": [5, 3, 6, 4, 5, 4]})
    >>> v = verbosity(judged, ratings, pd.Series([10, 20, 30, 40, 50, 60], index=list("abcdef")), ["depth"])
    >>> v[["scorer", "rho"]].round(2).values.tolist()
    [['judge', 1.0], ['experts', -0.09]]
    """
    from scipy.stats import spearmanr

    from ..core.stats import fisher_z_interval

    experts = _expert_frame(ratings, metrics)
    rows = []
    for metric in metrics:
        consensus = _consensus(experts, metric)
        judge = judged[judged["metric"] == metric].set_index("item_id")["score"]
        items = consensus.index.intersection(judge.index).intersection(lengths.index)
        for scorer, values in (("judge", judge), ("experts", consensus)):
            x, y = lengths[items].astype(float), values[items].astype(float)
            rho = float(spearmanr(x, y).statistic) if len(items) > 2 and x.nunique() > 1 and y.nunique() > 1 \
                else float("nan")
            lo, hi = fisher_z_interval(rho, len(items), ci)
            rows.append({"metric": metric, "scorer": scorer, "rho": rho, "ci_low": lo, "ci_high": hi,
                         "n_items": len(items)})
    return pd.DataFrame(rows, columns=["metric", "scorer", "rho", "ci_low", "ci_high", "n_items"])


def judged_by_itself(manifest: dict) -> list[str]:
    """The systems of a run whose answering model is the judge's (from ``manifest.json``'s endpoints; the embedded
    model is one model wherever it serves). A model family beyond the same model is not known to the kit.

    >>> judged_by_itself({"endpoints": {"a": {"model": "gpt-4o"}, "b": {"model": "x"}, "judge": {"model": "GPT-4o"}}})
    ['a']
    """
    endpoints = manifest.get("endpoints", {})
    judge = str(endpoints.get("judge", {}).get("model") or "").strip().lower()
    return sorted(n for n, e in endpoints.items() if n != "judge" and judge
                  and str(e.get("model") or "").strip().lower() == judge)


def self_preference(judged: pd.DataFrame, ratings: pd.DataFrame, sample: pd.DataFrame, own: list, metrics,
                    ci: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Does the judge favour answers of its own model? Per metric, the bias judge - experts on the rated answers of
    the systems ``own`` names against the others', and the difference with a bootstrap interval (answers resampled
    within each group; Panickssery et al. 2024 measure LLM judges' self-preference).

    Returns
    -------
    DataFrame
        metric, n_own, n_other, bias_own, bias_other, difference (own - other), ci_low, ci_high.
    """
    from ..core.stats import bootstrap_group_diff

    experts = _expert_frame(ratings, metrics)
    whose = sample.set_index("item_id")["system"].isin(list(own))
    rows = []
    for metric in metrics:
        consensus = _consensus(experts, metric) / 10
        judge = judged[judged["metric"] == metric].set_index("item_id")["score"]
        items = consensus.index.intersection(judge.index).intersection(whose.index)
        frame = pd.DataFrame({"item_id": items, "d": (judge[items] - consensus[items]).to_numpy(),
                              "group": np.where(whose[items], "own", "other")})
        if frame["group"].nunique() < 2:
            continue
        r = bootstrap_group_diff(frame, "group", "own", "other", value="d", cluster="item_id", seed=seed, ci=ci)
        rows.append({"metric": metric, "n_own": r["n_a"], "n_other": r["n_b"], "bias_own": r["rate_a"],
                     "bias_other": r["rate_b"], "difference": r["diff"], "ci_low": r["ci_low"],
                     "ci_high": r["ci_high"]})
    return pd.DataFrame(rows, columns=["metric", "n_own", "n_other", "bias_own", "bias_other", "difference",
                                       "ci_low", "ci_high"])


def _gate(agree: pd.DataFrame, metrics, gate: dict) -> dict:
    """Per metric, whether the judge may be used alone, and why."""
    out = {}
    for metric in metrics:
        a = agree[agree["metric"] == metric].set_index("statistic")
        if "spearman" not in a.index or "bias" not in a.index or not np.isfinite(a.at["spearman", "ci_low"]):
            out[metric] = {"usable_alone": False, "why": "too few rated cells for an interval"}
            continue
        rho_lo = float(a.at["spearman", "ci_low"])
        b_lo, b_hi = float(a.at["bias", "ci_low"]), float(a.at["bias", "ci_high"])
        ok_rho = rho_lo >= gate["min_spearman"]
        ok_bias = np.isfinite(b_lo) and -gate["max_abs_bias"] <= b_lo and b_hi <= gate["max_abs_bias"]
        why = []
        if not ok_rho:
            why.append(f"Spearman's interval reaches down to {rho_lo:.2f} (gate {gate['min_spearman']})")
        if not ok_bias:
            why.append(f"the bias interval [{b_lo:.3f}, {b_hi:.3f}] leaves ±{gate['max_abs_bias']}")
        out[metric] = {"usable_alone": bool(ok_rho and ok_bias), "why": "; ".join(why) or "within the gate"}
    return out


def markdown(result: dict | None, run: str | Path = "RUN_DIR") -> list[str]:
    """The summary's section on the judge against experts: the gate's verdict per metric, the agreement and the
    corrected means as tables; or, without a calibration, that there is none and how to make one.

    >>> markdown(None, "runs/x")[2].startswith("Not calibrated:")
    True
    """
    title = "## The judge against experts"
    if result is None:
        return [title, "", "Not calibrated: no expert has checked this judge's scores, so every score above is the "
                f"judge's alone. Draw answers for experts to score: `fabnb rate --from {run} --sample 60 --raters "
                "A,B` (the loop: docs/experiment.md, \"The judge against experts\").", ""]
    gate = result["gate"]
    lines = [title, "", f"{result['n_rated']} of {result['n_sample']} sampled answers scored by "
             f"{', '.join(result['raters'])} ({result['design']} sample). The gate: Spearman's interval at or above "
             f"{gate['min_spearman']} and the bias interval inside ±{gate['max_abs_bias']}.", ""]
    lines += [f"- **{m}**: {'the judge may be used alone' if v['usable_alone'] else 'not to be used alone'} "
              f"({v['why']})." for m, v in result["verdicts"].items()]
    agree = pd.DataFrame(result["agreement"])
    if len(agree):
        lines += ["", agree.round(3).to_markdown(index=False)]
    if result.get("verbosity"):
        lines += ["", "Verbosity: Spearman's rho of each score against the answer's length in words (a judge that "
                  "favours long answers more than the experts do shows a higher rho):", "",
                  pd.DataFrame(result["verbosity"]).round(3).to_markdown(index=False)]
    if result.get("self_preference"):
        lines += ["", f"Self-preference: the bias on the answers of {', '.join(result['judged_by_itself'])} (the "
                  "judge's own model) against the others':", "",
                  pd.DataFrame(result["self_preference"]).round(3).to_markdown(index=False)]
    if result.get("corrected_means"):
        lines += ["", "Prediction-powered means beside the judge's own (95% intervals):", "",
                  pd.DataFrame(result["corrected_means"]).round(3).to_markdown(index=False)]
    if result.get("cells_judged_after_the_draw"):
        lines += ["", f"{result['cells_judged_after_the_draw']} cells judged after the draw are not in the corrected "
                  "means (draw a new sample to cover them)."]
    return lines + [""]


def notes(result: dict | None, run: str | Path = "RUN_DIR") -> list[str]:
    """The calibration in a line per metric, as a results view shows it beside the scores (JupyterLab's viewer).

    >>> notes(None, "runs/x")[0].startswith("The judge is not calibrated against experts")
    True
    """
    if result is None:
        return [f"The judge is not calibrated against experts: every score here is the judge's alone. Rate a sample "
                f"of this run: fabnb rate --from {run} --sample 60 --raters A,B (docs/experiment.md, \"The judge "
                "against experts\")."]
    return [f"The judge against experts on {m} ({result['n_rated']} answers, {', '.join(result['raters'])}): "
            f"{'may be used alone' if v['usable_alone'] else 'not to be used alone'} ({v['why']}); "
            f"calibration/calibration.md has the agreement and corrected means." for m, v in result["verdicts"].items()]


def read_calibration(folder: str | Path) -> dict | None:
    """A run's ``calibration/calibration.json`` (None when the judge has not been calibrated)."""
    path = Path(folder) / CALIBRATION_DIR / "calibration.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CalibrationError(f"{path} is not readable JSON ({exc}); run the calibration again (fabnb.judge."
                               "calibration.calibrate) to rewrite it.") from None


def calibrate(folder: str | Path, *, gate: dict | None = None, n_boot: int = 1000, seed: int = 0,
              ci: float = 0.95) -> dict:
    """The calibration of a run's judge from its study's ratings: agreement, corrected means, the gate; written to
    ``calibration/calibration.json`` and returned.

    The judge's scores are the run's as they are now, for the cells of ``population.csv`` (cells judged after the
    draw are left out of the corrected means, and counted). Every rating of kind ``"answer"`` in
    ``calibration/ratings`` counts, the latest per rater, item and metric.

    Examples
    --------
    ``tests/test_calibration.py`` drives the whole loop; a run folder without a study says how to draw one:

    >>> import tempfile
    >>> calibrate(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fabnb.judge.calibration.CalibrationError: ... has no calibration study (...sample.csv is missing); draw one ...
    """
    from ..qa.rating import RatingStore
    from .geval import score_store

    folder = Path(folder)
    study = folder / CALIBRATION_DIR
    if not (study / "sample.csv").exists():
        raise CalibrationError(f"{folder} has no calibration study ({study / 'sample.csv'} is missing); draw one "
                               "with fabnb rate --from RUN_DIR --sample N --raters A,B.")
    gate = {**GATE, **(gate or {})}
    settings = json.loads((study / "settings.json").read_text(encoding="utf-8"))
    metrics = settings["metrics"]
    sample = pd.read_csv(study / "sample.csv", dtype={"test_id": str, "system": str, "model": str, "mode": str})
    ratings = RatingStore(study / "ratings").ratings(kind="answer") if (study / "ratings").is_dir() else \
        pd.DataFrame(columns=["rater", "item_id", "dimension", "score"])
    if not len(ratings):
        raise CalibrationError(f"no expert has scored an answer of {study} yet; serve the app: fabnb rate --serve "
                               f"--from {folder}.")
    scores = score_store(folder / "scores.jsonl").frame()
    judged = _judged_by_item(scores)
    in_sample = judged[judged["item_id"].isin(set(sample["item_id"]))]
    population = pd.read_csv(study / "population.csv")["item_id"] if (study / "population.csv").exists() else None
    everything = judged[judged["item_id"].isin(set(population))] if population is not None else judged
    agree = judge_agreement(in_sample, ratings, metrics, n_boot=n_boot, seed=seed, ci=ci)
    corrected = (corrected_means(everything, in_sample, ratings, metrics, settings["design"], ci)
                 if settings["design"] == "uniform" else None)
    verdicts = _gate(agree, metrics, gate)
    lengths = _answer_lengths(folder, set(sample["item_id"]))
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8")) \
        if (folder / "manifest.json").exists() else {}
    own = judged_by_itself(manifest)
    preference = self_preference(in_sample, ratings, sample, own, metrics, ci=ci, seed=seed) if own else None
    result = {"metrics": metrics, "design": settings["design"], "n_sample": len(sample),
              "n_rated": int(ratings["item_id"].nunique()), "raters": sorted(ratings["rater"].unique()),
              "gate": gate, "verdicts": verdicts, "usable_alone": all(v["usable_alone"] for v in verdicts.values()),
              "cells_judged_after_the_draw": int(judged["item_id"].nunique() - everything["item_id"].nunique()),
              "agreement": json.loads(agree.to_json(orient="records")),
              "verbosity": json.loads(verbosity(in_sample, ratings, lengths, metrics, ci).to_json(orient="records")),
              "judged_by_itself": own,
              "self_preference": None if preference is None else json.loads(preference.to_json(orient="records")),
              "corrected_means": None if corrected is None else json.loads(corrected.to_json(orient="records"))}
    result = _strict(result)
    from ..core.files import write_whole

    write_whole(study / "calibration.json", json.dumps(result, indent=1, allow_nan=False))
    write_whole(study / "calibration.md", "\n".join(markdown(result, folder)))
    return result


def _answer_lengths(folder: Path, items: set) -> pd.Series:
    """item_id -> words of the sampled cells' answers (the answer store's own count where it kept one)."""
    from ..core.records import ResultsStore

    answers = ResultsStore(folder / "answers.jsonl").frame()
    if not len(answers):
        return pd.Series(dtype=float)
    answers = answers.assign(context_k=answers["context_k"].astype(float))
    answers["item_id"] = _item_ids(answers)
    answers = answers[answers["item_id"].isin(items)].drop_duplicates("item_id", keep="last")
    words = answers["answer"].fillna("").astype(str).str.split().str.len()
    return pd.Series(words.to_numpy(float), index=answers["item_id"])


def _strict(value):
    """``value`` as strict JSON holds it: NaN and infinities as None, numpy numbers as Python ones."""
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _judged_by_item(scores: pd.DataFrame) -> pd.DataFrame:
    """The judge's ok scores per cell and metric (replicates averaged): item_id, metric, score (0-1)."""
    per = _ok_scores(scores).groupby([*RESULT_KEYS, "metric"], as_index=False)["score"].mean()
    return per.assign(item_id=_item_ids(per))[["item_id", "metric", "score"]]

