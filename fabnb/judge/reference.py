"""A judge-free check of objective answers ([Choice], [Judge], [Fill], [Calculation]) against the reference."""

from __future__ import annotations

import math
import re

import pandas as pd

from .rubrics import injection_flags

__all__ = ['answer_key', 'reference_check', 'reference_scores']

# ------------------------------------------------------------------ the reference scorer (no LLM)


_NUMBER = r"[-+]?\d+(?:[.,]\d+)?(?:\s*[x×]\s*10\^?\s*[-+]?\d+|[eE][-+]?\d+)?"
_UNIT_ALIASES = {"um": "µm", "μm": "µm", "micron": "µm", "microns": "µm", "°c": "c", "degc": "c", "℃": "c",
                 "ohm": "ω", "ohms": "ω", "Ω": "ω", "angstrom": "å", "angstroms": "å", "a": "å"}


def answer_key(reference: str) -> str:
    """The part of a FAB-Bench reference answer that states the answer.

    >>> answer_key("The correct answer is 4.41 V. Reasoning: the field times the thickness")
    '4.41 V'
    """
    m = re.search(r"correct answer(?:\s+is)?\s*:?\s*(.+?)(?:\.?\s*\*{0,2}Reasoning\b|\n\n|$)", reference,
                  flags=re.IGNORECASE | re.DOTALL)
    key = (m.group(1) if m else reference.split(".")[0]).strip()
    return key.rstrip(".").strip()


def _numbers(text: str) -> list[tuple[float, str]]:
    out = []
    for m in re.finditer(rf"({_NUMBER})\s*([a-zA-Zµμ°℃Ω/%²³·\-]*)", text):
        raw = m.group(1).replace(",", ".").replace("×", "x").replace(" ", "")
        try:
            if "x10" in raw:
                base, exp = raw.split("x10")
                value = float(base) * 10 ** float(exp.lstrip("^"))
            else:
                value = float(raw)
        except ValueError:
            continue
        unit = m.group(2).strip().lower().rstrip(".")
        out.append((value, _UNIT_ALIASES.get(unit, unit)))
    return out


def _close(a: float, b: float, rtol: float) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-12)


def _truth_values(text: str) -> list[bool]:
    # "The correct answer is False": the template's "correct" is not a verdict.
    text = re.sub(r"\b(?:the\s+)?correct\s+(?:answer|option|choice)\b", " ", text.lower())
    words = re.findall(r"\b(true|false|correct|incorrect|yes|no|wrong|right)\b", text)
    return [w in ("true", "correct", "yes", "right") for w in words]


def reference_check(question: str, answer: str, reference: str, rtol: float = 0.02) -> dict:
    """A judge-free check of an objective answer against the reference (no LLM; not G-Eval).

    By the question's prefix: ``[Choice]`` the option letter; ``[Judge]`` the true/false
    value(s) in order; ``[Fill]`` every blank's value (numbers within ``rtol`` with the same
    unit where one is given, words as whole words); ``[Calculation]`` the reference's
    number within ``rtol`` (its unit, if any, must match).

    Returns
    -------
    dict
        subtype, correct (bool, or None when the reference gives nothing checkable or the
        question is not objective), share (share of required items found), expected, found, note.

    Examples
    --------
    >>> reference_check("[Choice] Which ...? A) x B) y", "The answer is B.",
    ...                 "The correct answer is B. Reasoning: ...")["correct"]
    True
    >>> reference_check("[Calculation] ...", "About 4.7 V.", "The correct answer is 4.41 V. Reasoning: ...")["correct"]
    False
    """
    prefix = re.match(r"\s*\[(Choice|Judge|Fill|Calculation)\]", question)
    out = {"subtype": prefix.group(1) if prefix else None, "correct": None, "share": None, "expected": "",
           "found": "", "note": ""}
    if not prefix:
        out["note"] = "not an objective question: use the G-Eval metrics"
        return out
    key = answer_key(reference)
    out["expected"] = key
    out.update(_CHECKS[out["subtype"]](key, answer.strip(), rtol))
    return out


def _check_choice(key: str, text: str, rtol: float) -> dict:
    """The first option letter the answer gives against the reference's."""
    want = re.findall(r"\b([A-F])\b", key)
    got = re.findall(r"(?:answer is|option|choice)\s*\(?([A-F])\b|^\s*\(?([A-F])[).:\s]|\(([A-F])\)", text,
                     flags=re.IGNORECASE | re.MULTILINE)
    letters = [next(g for g in m if g).upper() for m in got] or re.findall(r"\b([A-F])\b", text)
    out = {"found": letters[0] if letters else ""}
    if not want:
        return {**out, "note": "the reference names no option letter"}
    correct = bool(letters) and letters[0] == want[0]
    return {**out, "correct": correct, "share": float(correct)}


def _check_judge(key: str, text: str, rtol: float) -> dict:
    """The true/false values in order."""
    want, got = _truth_values(key), _truth_values(text)
    out = {"found": ", ".join(map(str, got[:len(want)]))}
    if not want:
        return {**out, "note": "the reference states no true/false value"}
    return {**out, "correct": got[:len(want)] == want, "share": sum(a == b for a, b in zip(got, want)) / len(want)}


def _check_calculation(key: str, text: str, rtol: float) -> dict:
    """The reference's number within ``rtol``, its unit (if any) matching."""
    want = _numbers(key)
    if not want:
        return {"note": "the reference gives no number to check"}
    value, unit = want[0]
    got = _numbers(text)
    hit = [g for g in got if _close(g[0], value, rtol) and (not unit or not g[1] or g[1] == unit)]
    best = hit[0] if hit else got[0] if got else None
    return {"found": f"{best[0]:g} {best[1]}".strip() if best else "", "correct": bool(hit),
            "share": float(bool(hit))}


def _fill_items(key: str) -> list[str]:
    """The blanks' values of a Fill reference: quoted or bracketed items, else the key split at ; , and "and"."""
    items = [next(x for x in m if x) for m in re.findall(r'"([^"]+)"|“([^”]+)”|\[([^\]]+)\]', key)]
    if items and len(items) == 1 and re.search(r"[;,]", items[0]):
        items = [s for s in re.split(r"[;,]", items[0]) if s.strip()]
    return items or [s for s in re.split(r"\s*(?:;|,| and )\s*", key) if s.strip()] or [key]


def _found(item: str, text: str, rtol: float) -> bool:
    """One blank's value in the answer: a number within ``rtol`` (same unit where given), else every word whole."""
    nums = _numbers(item)
    if nums and re.fullmatch(rf"\s*{_NUMBER}\s*\S*\s*", item):
        return any(_close(g[0], nums[0][0], rtol) and (not nums[0][1] or not g[1] or g[1] == nums[0][1])
                   for g in _numbers(text))
    words = re.findall(r"[\w\-\[\]]+", item.lower())
    return bool(words) and all(re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text.lower()) for w in words)


def _check_fill(key: str, text: str, rtol: float) -> dict:
    """Every blank's value."""
    items = _fill_items(key)
    found = [_found(item, text, rtol) for item in items]
    return {"share": sum(found) / len(found), "correct": all(found),
            "found": "; ".join(i for i, ok in zip(items, found) if ok), "expected": "; ".join(items)}


_CHECKS = {"Choice": _check_choice, "Judge": _check_judge, "Calculation": _check_calculation, "Fill": _check_fill}


def reference_scores(results: pd.DataFrame, questions: pd.DataFrame) -> pd.DataFrame:
    """:func:`reference_check` for every answered cell on an objective question.

    Returns
    -------
    DataFrame
        system, model, context_k, mode, test_id, subtype, correct, share, expected, found,
        note, injection_flag. Named ``reference_check`` in every output: it is not G-Eval.

    Examples
    --------
    >>> results = pd.DataFrame({"system": "s", "model": "m", "context_k": 4.0, "mode": "A", "test_id": ["q1", "q2"],
    ...                         "status": "ok", "answer": ["The answer is B.", "About 4.7 V."]})
    >>> questions = pd.DataFrame({"test_id": ["q1", "q2"], "question_format": "OBJECTIVE",
    ...                           "question": ["[Choice] Which? A) x B) y", "[Calculation] What voltage?"],
    ...                           "ground_truth_answer": ["The correct answer is B.", "The correct answer is 4.41 V."]})
    >>> reference_scores(results, questions)[["test_id", "subtype", "correct"]].values.tolist()
    [['q1', 'Choice', True], ['q2', 'Calculation', False]]
    """
    qs = questions.set_index("test_id")
    rows = []
    for r in results[results["status"] == "ok"].to_dict("records"):
        q = qs.loc[r["test_id"]]
        check = reference_check(q["question"], str(r.get("answer") or ""), str(q.get("ground_truth_answer", "")))
        if check["subtype"] is None:
            continue
        rows.append({**{k: r[k] for k in ("system", "model", "context_k", "mode", "test_id")}, **check,
                     "injection_flag": "; ".join(injection_flags(str(r.get("answer") or "")))})
    return pd.DataFrame(rows, columns=["system", "model", "context_k", "mode", "test_id", "subtype", "correct",
                                       "share", "expected", "found", "note", "injection_flag"])
