"""One's own questions in a plain file: CSV or JSON Lines, one question a row, read into FAB-Bench QA records.

``[questions] source = "my-questions.csv"`` (or ``.jsonl``), and every place that reads QA files
(:func:`fabnb.data.datasets.read_qa_files`), take such a file beside a folder of FAB-Bench JSON files. The fields
are :data:`PLAIN_FIELDS`; only ``question`` and ``answer`` are required. A bad row is refused naming the file, the
row (its line) and the field, with what was expected.

Examples
--------
>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "mine.csv"
>>> _ = path.write_text("id,question,answer,gold_doc_ids\\nq1,What sets the oxide?,The anneal.,D1;D2\\n")
>>> [(where, r["test_id"], [s["doc_id"] for s in r["gold_context_sources"]]) for where, r in plain_records(path)]
[('mine.csv, line 2', 'q1', ['D1', 'D2'])]
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..core.files import MAX_FILE_BYTES, FileRefused, json_lines, read_text
from ..core.schema import METRICS, QUESTION_FORMATS, TEST_TYPES

__all__ = ["PLAIN_FIELDS", "PLAIN_SUFFIXES", "PlainError", "plain_records", "plain_schema"]

#: The file kinds read as plain questions.
PLAIN_SUFFIXES = (".csv", ".jsonl")

#: Each field of a plain question: whether it is required, and what it holds. The docs' table is made from this.
PLAIN_FIELDS: dict[str, tuple[bool, str]] = {
    "question": (True, "the question, as asked of the RAG system"),
    "answer": (True, "the expected answer the judge compares with (also read as `ground_truth_answer`)"),
    "id": (False, "a unique id (default: the file's name and the row, `mine-0001`)"),
    "test_type": (False, f"one of {', '.join(TEST_TYPES)} (default `generation_quality`)"),
    "question_format": (False, f"{' or '.join(QUESTION_FORMATS)} (default `SUBJECTIVE`)"),
    "gold_evidence": (False, "the passage that holds the answer: mode B gives it to the system; without it mode B "
                             "has nothing to give"),
    "gold_doc_ids": (False, "the documents that hold the answer (CSV: separated by `;`; JSONL: a list): the "
                            "retrieval-miss measure and the viewer's gold passages read them"),
    "primary_metric": (False, f"one of the six metrics (default `factuality`): {', '.join(METRICS)}"),
}

_ALIASES = {"ground_truth_answer": "answer", "test_id": "id"}


class PlainError(ValueError):
    """A plain question file that cannot be read; the message names the file, the line and the field."""


def _rows(path: Path, text: str):
    """(line, dict) of each row: the CSV's header names the fields; a JSONL line is one object."""
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames:
            raise PlainError(f"{path.name}: no header row; the first line names the fields (question,answer,...).")
        for row in reader:
            if None in row:  # more cells than the header names
                raise PlainError(f"{path.name}, line {reader.line_num}: {len(row[None])} cell(s) more than the "
                                 f"header's {len(reader.fieldnames)}; quote a cell that holds a comma.")
            yield reader.line_num, row
        return
    for number, row, why in json_lines(text):
        if why:
            raise PlainError(f"{path.name}, line {number}: {why}; a JSON Lines file holds one object a line.")
        yield number, row


def _text(where: str, row: dict, name: str, required: bool) -> str:
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise PlainError(f"{where}: field {name!r} is missing or empty; every row needs question and answer.")
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise PlainError(f"{where}: field {name!r} should be text, got {type(value).__name__}.")
    return str(value).strip()


def _doc_ids(where: str, value) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [d.strip() for d in value.split(";") if d.strip()]
    if isinstance(value, list) and all(isinstance(d, (str, int)) for d in value):
        return [str(d) for d in value]
    raise PlainError(f"{where}: field 'gold_doc_ids' should be a list of ids or a ';'-separated text.")


def _record(where: str, row: dict, default_id: str) -> dict:
    row = {_ALIASES.get(k.strip() if isinstance(k, str) else k, k.strip() if isinstance(k, str) else k): v
           for k, v in row.items()}
    unknown = sorted(str(k) for k in row if k not in PLAIN_FIELDS)
    if unknown:
        raise PlainError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; the fields are "
                         f"{', '.join(PLAIN_FIELDS)} (question and answer required).")
    evidence = _text(where, row, "gold_evidence", False)
    docs = _doc_ids(where, row.get("gold_doc_ids"))
    sources = [{"doc_id": d, "section_title": "", "evidence": evidence if i == 0 else ""} for i, d in enumerate(docs)]
    if evidence and not docs:
        sources = [{"doc_id": "", "section_title": "", "evidence": evidence}]
    return {"test_id": _text(where, row, "id", False) or default_id,
            "test_type": _text(where, row, "test_type", False) or "generation_quality",
            "question_format": _text(where, row, "question_format", False) or "SUBJECTIVE",
            "question": _text(where, row, "question", True),
            "gold_context_sources": sources,
            "ground_truth_answer": _text(where, row, "answer", True),
            "primary_metric": _text(where, row, "primary_metric", False) or "factuality",
            "secondary_metrics": []}


def plain_records(path: str | Path) -> list[tuple[str, dict]]:
    """Each row of a plain question file as (where, FAB-Bench QA record): ``where`` names the file and the line.

    The records still go through :func:`fabnb.data.datasets.parse_qa`, which checks their values (a test_type
    outside :data:`fabnb.core.schema.TEST_TYPES`, say) and names ``where``.

    Raises
    ------
    PlainError
        A file that is not UTF-8 or too large, a row that is not an object, an unknown or missing field: naming the
        file, the line and the field.
    """
    path = Path(path)
    try:
        text = read_text(path, setting="[questions] source", max_bytes=MAX_FILE_BYTES["manifest"])
    except FileRefused as exc:
        raise PlainError(f"{path.name}: {exc.reason}") from None
    stem = path.stem
    return [(f"{path.name}, line {line}", _record(f"{path.name}, line {line}", row, f"{stem}-{i + 1:04d}"))
            for i, (line, row) in enumerate(_rows(path, text.lstrip("\ufeff")))]


def plain_schema() -> dict:
    """The JSON Schema (draft 2020-12) of one row of a JSON Lines question file, made from :data:`PLAIN_FIELDS`
    (``docs/questions.schema.json`` is this; an editor that knows JSON Schema checks a file as it is written).
    It names the fields as documented; the reader also takes ``ground_truth_answer`` and ``test_id``.

    Examples
    --------
    >>> schema = plain_schema()
    >>> schema["required"], "multi_hop" in schema["properties"]["test_type"]["enum"]
    (['question', 'answer'], True)
    """
    text = {"type": "string", "minLength": 1}
    kinds = {"test_type": {"type": "string", "enum": list(TEST_TYPES)},
             "question_format": {"type": "string", "enum": list(QUESTION_FORMATS)},
             "primary_metric": {"type": "string", "enum": list(METRICS)},
             "gold_doc_ids": {"oneOf": [{"type": "array", "items": {"type": ["string", "integer"]}},
                                        {"type": "string"}]},
             "id": {"type": ["string", "integer"]}}
    properties = {name: {**kinds.get(name, text), "description": about.replace("`", "")}
                  for name, (_, about) in PLAIN_FIELDS.items()}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "fabnb: one question of a JSON Lines question file ([questions] source)",
            "type": "object", "properties": properties, "additionalProperties": False,
            "required": [name for name, (needed, _) in PLAIN_FIELDS.items() if needed]}
