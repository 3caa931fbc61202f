"""The experiment file's keys: which each table allows, of what type and range, and :class:`ExperimentError`.

One table of keys (``_SCHEMA``) and one of ranges (:data:`RANGES`) that every spec's check reads, and the
checks that name the file, the line and the key in an error.

Examples
--------
>>> RANGES[("corpus", "chunk_size")][1]
'1 to 32,768 (tokens)'
>>> check_table({"chunk_size": 512}, "corpus", "e.toml", None)  # a key allowed, of its type and range: no error
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..core.errors import FabnbError
from ..core.values import is_of, line_of, type_names

__all__ = ["FIGURE_FORMATS", "MAX_WINDOWS", "RANGES", "ExperimentError", "check_range", "check_table", "no_duplicates",
           "resolve_path"]

_ENDPOINT_KEYS = {"model": str, "base_url": str, "base_url_env": str, "api_key_env": str, "max_retries": int}
_SCHEMA: dict[str, dict] = {
    "": {"name": str, "output": str, "seed": int, "concurrency": int, "budget_usd": (int, float),
         "confirm_usd": (int, float), "confirm_hours": (int, float),
         "questions": dict, "corpus": dict, "systems": list, "contexts": dict, "judge": dict, "prices": dict,
         "report": dict, "tests": dict},
    "questions": {"source": str, "sample": (int, str), "stratify": list, "test_types": list},
    "corpus": {"source": str, "chunk_size": int, "chunk_overlap": int, "distractors": int},
    "contexts": {"windows": (list, str), "modes": list, "output_k": (int, float, str), "n_snippets": int,
                 "threshold": (int, float), "temperature": (int, float), "positions": list, "position_sample": int},
    "systems": {"name": str, "kind": str, "retriever": str, "settings": dict, "timeout": (int, float), "mode": str,
                **_ENDPOINT_KEYS},
    "judge": {"metrics": (list, str), "replicates": int, "logprobs": bool, "reference_check": bool,
              "reason_chars": int, "max_answer_tokens": int, "concurrency": int, "temperature": (int, float),
              "n_ctx": int, "workers": int, "mode": str, "batch_retry": str, "batch_poll": (int, float),
              **_ENDPOINT_KEYS},
    "tests": {"n_complex": int, "n_negative": int, "n_coverage": int, "n_baseline": int, "documents": (int, str),
              "rounds": int, "threshold": (int, float), "ask_location": bool, "evidence": str, "llms": list,
              "retrievers": (list, str), "pairs": list, **_ENDPOINT_KEYS},
    "prices": {"input": (int, float), "output": (int, float), "batch_input": (int, float),
               "batch_output": (int, float), "date": str, "source": str},
    "report": {"compare_published": bool, "figures": list, "bootstrap": int, "seed": int},
}


class ExperimentError(FabnbError, ValueError):
    """A problem with an experiment file or its output folder, found before any call is made."""


FIGURE_FORMATS = ("png", "svg", "pdf")


_finite = math.isfinite

#: The most context windows one file may list (the paper runs 11).
MAX_WINDOWS = 64


#: The allowed range of every numeric key, per table: (test, what is allowed). The file check applies it with the
#: file, the line and the key; docs/experiment.md's "Ranges" table is this table (a test compares them).
#: Every key has an upper bound as well as a lower one: a typo of a few zeros (10,000 windows, a million
#: replicates, a 1e9 K window) would otherwise plan millions of calls or send a whole corpus in each prompt. The
#: bounds are generous: each is past any model, server or study of today (the longest context windows are 2M
#: tokens; the paper runs 11 windows, 1 replicate, 512-token chunks), and examples/paper.toml is inside them.
RANGES: dict[tuple[str, str], tuple] = {
    ("", "concurrency"): (lambda v: 1 <= v <= 256, "1 to 256 (calls in flight)"),
    ("", "budget_usd"): (lambda v: _finite(v) and 0 < v <= 1_000_000, "> 0, finite and at most 1,000,000 (dollars)"),
    ("", "seed"): (lambda v: 0 <= v < 2**32, "0 to 4,294,967,295 (numpy's seeds)"),
    ("", "confirm_usd"): (lambda v: _finite(v) and 0 <= v <= 1_000_000,
                          "0 to 1,000,000 (dollars; 0 asks before every run that costs anything)"),
    ("", "confirm_hours"): (lambda v: _finite(v) and 0 <= v <= 10_000,
                            "0 to 10,000 (hours; 0 asks before every run whose time is measured)"),
    ("questions", "sample"): (lambda v: 1 <= v <= 1_000_000, "\"all\" or 1 to 1,000,000 (questions)"),
    ("corpus", "chunk_size"): (lambda v: 1 <= v <= 32_768, "1 to 32,768 (tokens)"),
    ("corpus", "chunk_overlap"): (lambda v: 0 <= v < 32_768, ">= 0 and < chunk_size (tokens)"),
    ("corpus", "distractors"): (lambda v: 0 <= v <= 10_000_000,
                                "0 to 10,000,000 (documents besides the questions' gold documents)"),
    ("contexts", "windows"): (lambda v: _finite(v) and 0 < v <= 2048,
                              "> 0, finite and at most 2048 (K tokens, 2M: the longest model context of today), "
                              f"at most {MAX_WINDOWS} windows, no duplicates"),
    ("contexts", "output_k"): (lambda v: _finite(v) and 0 < v <= 128, "> 0, finite and at most 128 (K tokens), or "
                               "\"schedule\""),
    ("contexts", "n_snippets"): (lambda v: 1 <= v <= 10_000, "1 to 10,000"),
    ("contexts", "threshold"): (lambda v: _finite(v) and -1e6 <= v <= 1e6, "finite, -1e6 to 1e6"),
    ("contexts", "temperature"): (lambda v: _finite(v) and 0 <= v <= 2, "0 to 2"),
    ("contexts", "positions"): (lambda v: 0 <= v <= 100, "0 to 100 (percent of the window; 0 first, 100 last)"),
    ("contexts", "position_sample"): (lambda v: 1 <= v <= 1_000_000, "1 to 1,000,000 (questions)"),
    ("systems", "timeout"): (lambda v: _finite(v) and 0 < v <= 86_400, "> 0, finite and at most 86,400 (seconds)"),
    ("systems", "max_retries"): (lambda v: 0 <= v <= 20, "0 to 20"),
    ("judge", "replicates"): (lambda v: 1 <= v <= 20, "1 to 20"),
    ("judge", "reason_chars"): (lambda v: 1 <= v <= 100_000, "1 to 100,000 (characters)"),
    ("judge", "max_answer_tokens"): (lambda v: 1 <= v <= 1_000_000, "1 to 1,000,000 (tokens)"),
    ("judge", "concurrency"): (lambda v: 1 <= v <= 256, "1 to 256 (calls in flight)"),
    ("judge", "temperature"): (lambda v: _finite(v) and 0 <= v <= 2, "0 to 2"),
    ("judge", "n_ctx"): (lambda v: 512 <= v <= 2_097_152, "512 to 2,097,152 (tokens)"),
    ("judge", "max_retries"): (lambda v: 0 <= v <= 20, "0 to 20"),
    ("judge", "workers"): (lambda v: 1 <= v <= 64, "1 to 64 (processes)"),
    ("judge", "batch_poll"): (lambda v: _finite(v) and 0 < v <= 3600, "> 0 and at most 3,600 (seconds)"),
    ("tests", "n_complex"): (lambda v: 0 <= v <= 1000, "0 to 1,000 (tests per document)"),
    ("tests", "n_negative"): (lambda v: 0 <= v <= 1000, "0 to 1,000 (tests per document)"),
    ("tests", "n_coverage"): (lambda v: 0 <= v <= 1000, "0 to 1,000 (tests per document)"),
    ("tests", "n_baseline"): (lambda v: 0 <= v <= 1000, "0 to 1,000 (tests per document, each baseline)"),
    ("tests", "documents"): (lambda v: 1 <= v <= 1_000_000, "\"all\" or 1 to 1,000,000 (documents)"),
    ("tests", "rounds"): (lambda v: 0 <= v <= 20, "0 to 20 (coverage rounds fed by retrieval)"),
    ("tests", "threshold"): (lambda v: _finite(v) and 0 < v <= 1, "> 0 and at most 1 (the oracle's pass mark)"),
    ("tests", "max_retries"): (lambda v: 0 <= v <= 20, "0 to 20"),
    ("report", "bootstrap"): (lambda v: 100 <= v <= 100_000, "100 to 100,000 (bootstrap draws)"),
    ("report", "seed"): (lambda v: 0 <= v < 2**32, "0 to 4,294,967,295 (numpy's seeds)"),
    ("prices", "input"): (lambda v: _finite(v) and 0 <= v <= 10_000, "0 to 10,000 (dollars per million tokens)"),
    ("prices", "output"): (lambda v: _finite(v) and 0 <= v <= 10_000, "0 to 10,000 (dollars per million tokens)"),
    ("prices", "batch_input"): (lambda v: _finite(v) and 0 <= v <= 10_000, "0 to 10,000 (dollars per million tokens)"),
    ("prices", "batch_output"): (lambda v: _finite(v) and 0 <= v <= 10_000,
                                 "0 to 10,000 (dollars per million tokens)"),
}


def check_table(data: dict, section: str, where: str, text: str | None, label: str | None = None) -> None:
    allowed = _SCHEMA[section]
    label = label or (f"[{section}]" if section else "the top level")
    for key, value in data.items():
        if key not in allowed:
            hint = (" Keys are never written in the file: name the environment variable that holds it with "
                    "api_key_env." if key in ("api_key", "key", "token") else "")
            raise ExperimentError(f"{where}: unknown key {key!r} at {label}{line_of(text, key)}; allowed: "
                                  f"{', '.join(sorted(allowed))}.{hint}")
        if not is_of(value, allowed[key]):
            raise ExperimentError(f"{where}: {label} {key} = {value!r}{line_of(text, key)} must be "
                                  f"{type_names(allowed[key])}.")
        check_range(section, key, value, where, text, label)


def check_range(section: str, key: str, value, where: str, text: str | None, label: str) -> None:
    """Refuse a number outside :data:`RANGES` (each number of a list, for a list), naming the file, line and key."""
    if (section, key) not in RANGES:
        return
    test, allowed = RANGES[(section, key)]
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not test(v):
            raise ExperimentError(f"{where}: {label} {key} = {value!r}{line_of(text, key)} is out of range: it "
                                  f"must be {allowed}.")


def no_duplicates(values, key: str, label: str, where: str, text: str | None) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ExperimentError(f"{where}: {label} {key} = {list(values)!r}{line_of(text, key)} lists {seen[0]!r} "
                              "twice; each cell would be stored twice. List each value once.")


def resolve_path(value: str, base: Path) -> str:
    """A path of the file, relative to the file's folder."""
    return str(Path(value) if Path(value).is_absolute() else Path(os.path.normpath(base / value)))
