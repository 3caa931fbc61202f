"""Judge sanity flags: scores a reader should not take at face value, found without an LLM.

A small judge model can give 10/10 to an answer that repeats one phrase seven times, with the
reason "The reason is the same as the score". :func:`judge_flags` marks such scores from the
answer, the reason and the other scores of the same answer or question. The flags are computed
when scores are read, never stored, so stores written by any version get them.

:data:`FLAGS` lists each flag with what it means; the report counts them, the explorer filters
on them and the summary gives each mean with the flagged scores left out beside it. The
thresholds were set on the 200 released FAB-Bench gold answers taken as answers
(``docs/statistics.md`` gives the false-positive rate measured there: 0 of 200 for each flag
that reads only the answer).

Examples
--------
>>> round(repetition_share("1200 cm2/V·s " * 7), 2), repetition_share("Mobility rises with strain.")
(0.85, 0.0)
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..core.schema import RESULT_KEYS
from ..core.text import repetition_share, word_measures

__all__ = ["FLAGS", "HIGH_SCORE", "MIN_REASON_WORDS", "NEAR_EMPTY_WORDS", "REPETITION_SHARE", "answer_languages",
           "answer_measures", "judge_flags", "repetition_share"]

#: Share of an answer's word trigrams that repeat an earlier one, above which the answer is "repetitive". The 200
#: released gold answers range 0 to 0.25 (median 0.02, 99th percentile 0.16); an answer that says one phrase seven
#: times is at 0.85.
REPETITION_SHARE = 0.4
#: An answer with fewer words than this is near-empty (the shortest gold answer has 41).
NEAR_EMPTY_WORDS = 3
#: The score (0-1) from which a near-empty answer's score is suspect.
HIGH_SCORE = 0.8
#: A reason with fewer content words (not the score, not "score", "reason", "same" or a stop word) says nothing.
MIN_REASON_WORDS = 3

#: Each flag and what it means (the report's and the explorer's wording).
FLAGS: dict[str, str] = {
    "repetitive": f"the answer is mostly repetition (over {REPETITION_SHARE:.0%} of its word trigrams repeat)",
    "empty_high": f"a near-empty answer (under {NEAR_EMPTY_WORDS} words) scored {HIGH_SCORE:g} or more",
    "empty_reason": f"the reason does not justify the score (under {MIN_REASON_WORDS} content words, or it "
                    "restates the score)",
    "all_max": "every judged metric of this answer is at the maximum",
    "tied_weighted": "another answer of the same question got the identical probability-weighted score",
    "language": "the answer is in another language than the questions (py3langid: fabnb.core.language)",
}

_EMPTY_WORDS = frozenset(
    "a an and are as be because been being but by for from gave give given has have i in is it its my of on or "
    "out rate rated rating reason reasons same score scored scores so that the this to was were which with".split())


def _says_nothing(reason) -> bool:
    if not isinstance(reason, str):
        return False  # no reason stored (an older store, or a frame read without it): nothing to judge
    content = [w for w in re.findall(r"[a-z]+", reason.lower()) if w not in _EMPTY_WORDS and len(w) > 1]
    return len(content) < MIN_REASON_WORDS


def answer_measures(answers: pd.DataFrame) -> pd.DataFrame:
    """Each answer's word count and word-trigram repetition share: answer_words, answer_repetition (NaN where
    there is no answer text), indexed as ``answers`` (which needs an ``answer`` column).

    The grid stores both with each answer (tokenizing 8,800 answers was a third of the results viewer's cold
    open); an answer stored without them (an older store, a file of the user's) gets them here, from the same
    :func:`fabnb.core.text.word_measures`.

    >>> answer_measures(pd.DataFrame({"answer": ["a b c a b c", None]})).to_dict("list")
    {'answer_words': [6.0, nan], 'answer_repetition': [0.25, nan]}
    """
    def stored(column: str) -> np.ndarray:
        if column not in answers.columns:
            return np.full(len(answers), np.nan)
        return pd.to_numeric(answers[column], errors="coerce").to_numpy(float, copy=True)

    words, repetition = stored("answer_words"), stored("answer_repetition")
    is_text = answers["answer"].map(lambda t: isinstance(t, str)).to_numpy(bool)
    for i in np.flatnonzero(is_text & (np.isnan(words) | np.isnan(repetition))):
        words[i], repetition[i] = word_measures(answers["answer"].iat[i])
    words[~is_text] = repetition[~is_text] = np.nan
    return pd.DataFrame({"answer_words": words, "answer_repetition": repetition}, index=answers.index)


def answer_languages(answers: pd.DataFrame) -> pd.Series:
    """Each answer's sure language (:func:`fabnb.core.language.sure_language`, "" when unsure), indexed as
    ``answers``: the grid stores it (``answer_language``); an answer stored without it (an older store, a file of
    the user's) gets it here, each distinct text read once.

    >>> answer_languages(pd.DataFrame({"answer": ["Strain.", "x"], "answer_language": [None, "fr"]})).tolist()
    ['', 'fr']
    """
    stored = (answers["answer_language"] if "answer_language" in answers.columns
              else pd.Series(None, index=answers.index, dtype=object))
    out = stored.astype(object).copy()
    missing = ~stored.map(lambda v: isinstance(v, str)).to_numpy(bool)
    if missing.any():
        from ..core.language import sure_language

        texts = answers["answer"][missing]
        seen = {t: sure_language(t) for t in pd.unique(texts.dropna())}
        out[missing] = texts.map(seen).fillna("").to_numpy(object)
    return out


def _language_flags(lang: np.ndarray, text: pd.Series, ok: np.ndarray, questions) -> np.ndarray:
    """Scores of answers surely in another language (``lang``, each score's answer's) than the questions (or,
    without them, than the answers' common language)."""
    from ..core.language import common_language

    sample = questions["question"] if questions is not None and "question" in questions.columns else text
    expected = common_language(sample)
    if expected is None:
        return np.zeros(len(lang), dtype=bool)
    return ok & (lang != "") & (lang != expected)


def judge_flags(scores: pd.DataFrame, answers: pd.DataFrame | None = None,
                questions: pd.DataFrame | None = None) -> pd.DataFrame:
    """The scores with a ``flags`` column: the :data:`FLAGS` each score raises, comma-separated ("" for none).

    Parameters
    ----------
    scores : DataFrame
        A score store's frame: the :data:`fabnb.core.schema.RESULT_KEYS`, metric, replicate, status, score (0-1),
        and where present weighted_score, reason. Only ``ok`` scores are flagged.
    answers : DataFrame, optional
        A results store's frame (the keys and answer): the answer flags need it.
    questions : DataFrame, optional
        The questions (a ``question`` column): ``language`` compares each answer's language with theirs; without
        them, with the answers' common language.

    Returns
    -------
    DataFrame
        A copy of ``scores`` with ``flags`` (str). The input is not changed.

    Examples
    --------
    >>> keys = {"system": "s", "model": "m", "context_k": 1.0, "mode": "A", "test_id": "q1"}
    >>> scores = pd.DataFrame([{**keys, "metric": m, "replicate": 0, "status": "ok", "score": 1.0,
    ...                         "reason": "The reason is the same as the score."} for m in ("depth", "relevance")])
    >>> answers = pd.DataFrame([{**keys, "answer": "1200 cm2/V·s " * 7}])
    >>> judge_flags(scores, answers)["flags"].tolist()
    ['repetitive,empty_reason,all_max', 'repetitive,empty_reason,all_max']
    """
    out = scores.copy()
    n = len(out)
    raised = {name: np.zeros(n, dtype=bool) for name in FLAGS}
    if n:
        ok = (out["status"] == "ok").to_numpy()
        score = pd.to_numeric(out["score"], errors="coerce").to_numpy(float)
        keys = [k for k in RESULT_KEYS if k in out.columns]
        text = pd.Series("", index=out.index, dtype=object)
        if answers is not None and len(answers) and "answer" in answers.columns:
            by_key = answers.drop_duplicates(keys, keep="last").set_index(keys)
            measures = answer_measures(by_key)  # once per answer, not once per score
            n_words, repetitive = measures["answer_words"], measures["answer_repetition"] > REPETITION_SHARE
            # One left merge puts each answer's values beside its scores (in their order): a MultiIndex.map per
            # column took 1 s of the explorer's start at the paper's scale.
            per = pd.DataFrame({"_text": by_key["answer"], "_words": n_words, "_rep": repetitive,
                                "_lang": answer_languages(by_key)}).reset_index()
            joined = out[keys].reset_index(drop=True).merge(per, on=keys, how="left")
            text = pd.Series(joined["_text"].to_numpy(), index=out.index)
            words = joined["_words"].to_numpy(float)
            raised["repetitive"] = ok & joined["_rep"].fillna(False).to_numpy(bool)
            raised["empty_high"] = ok & (words < NEAR_EMPTY_WORDS) & (score >= HIGH_SCORE)
            raised["language"] = _language_flags(joined["_lang"].fillna("").to_numpy(object), text, ok, questions)
        if "reason" in out.columns:
            verdict = {r: _says_nothing(r) for r in pd.unique(out["reason"])}  # a judge repeats its reasons
            raised["empty_reason"] = ok & out["reason"].map(verdict).fillna(False).to_numpy(bool)
        answer_key = keys + (["replicate"] if "replicate" in out.columns else [])
        judged = pd.DataFrame({"top": ok & (score >= 1.0), "ok": ok}, index=out.index)
        groups = judged.groupby([out[k] for k in answer_key], dropna=False)
        raised["all_max"] = ok & (groups["ok"].transform("sum") >= 2).to_numpy() & \
            (groups["top"].transform("sum") == groups["ok"].transform("sum")).to_numpy()
        if "weighted_score" in out.columns:
            weighted = pd.to_numeric(out["weighted_score"], errors="coerce").round(6)
            have = ok & weighted.notna().to_numpy()
            if have.any():
                tied = pd.DataFrame({"w": weighted, "text": text.fillna("").astype(str)})[have]
                same = [out.loc[have, c] for c in ("test_id", "metric")] + [tied["w"]]
                texts = tied.groupby(same, dropna=False)["text"].transform("nunique")
                raised["tied_weighted"][np.flatnonzero(have)] = (texts >= 2).to_numpy()
    names = np.array(list(FLAGS))
    table = np.column_stack([raised[name] for name in FLAGS]) if n else np.zeros((0, len(FLAGS)), bool)
    out["flags"] = [",".join(names[row]) for row in table]
    return out
