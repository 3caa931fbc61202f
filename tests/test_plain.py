"""One's own questions in a plain CSV or JSON Lines file (fabnb.data.plain; issue 54 item 7)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fabnb.data.datasets import DatasetError, qa_frame, read_qa_files
from fabnb.data.plain import PLAIN_FIELDS, PlainError, plain_records
from fabnb.experiment import Experiment, run_experiment
from fabnb.views.explorer import Explorer

from test_experiment import quiet, stub, write_file  # noqa: F401  (stub: the scripted server, a fixture)

ROWS = [("etch-1", "Which gas etches the oxide, and at what rate?", "CHF3, at about 50 nm/min.",
         "The oxide is etched in CHF3 plasma at roughly 50 nm per minute, selective to silicon.", "D-etch"),
        ("anneal-1", "What sets the grain size of the copper lines?", "The anneal temperature, 400 C.",
         "Grain size is set by the post-plating anneal, run at 400 C for 30 minutes.", "D-anneal"),
        ("litho-1", "Which wavelength exposes the gate layer, and why that one?", "193 nm, for its resolution.",
         "The gate layer is exposed at 193 nm, whose resolution the 90 nm gate needs.", "D-litho")]


def write_csv(path):
    lines = ["id,question,answer,gold_evidence,gold_doc_ids,test_type"]
    for tid, q, a, ev, doc in ROWS:
        lines.append(f'{tid},"{q}","{a}","{ev}",{doc};D-extra,multi_hop')
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")  # a BOM, as spreadsheets write
    return path


def write_jsonl(path):
    path.write_text("\n".join(json.dumps({"question": q, "answer": a, "gold_evidence": ev, "gold_doc_ids": [doc]})
                              for _, q, a, ev, doc in ROWS) + "\n\n", encoding="utf-8")
    return path


def test_a_csv_and_a_jsonl_file_read_as_qa_pairs(tmp_path):
    csv = read_qa_files(write_csv(tmp_path / "mine.csv"), on_error="raise")
    assert [p.test_id for p in csv] == ["anneal-1", "etch-1", "litho-1"]  # sorted by id, as every QA set
    etch = next(p for p in csv if p.test_id == "etch-1")
    assert etch.question == ROWS[0][1] and etch.ground_truth_answer == ROWS[0][2] and etch.test_type == "multi_hop"
    assert [(s.doc_id, s.evidence) for s in etch.gold_context_sources] == [("D-etch", ROWS[0][3]), ("D-extra", "")]
    frame = qa_frame(list(csv))
    assert frame["doc_ids"].iloc[0] and set(frame["question_format"]) == {"SUBJECTIVE"}
    jsonl = read_qa_files(write_jsonl(tmp_path / "mine.jsonl"), on_error="raise")
    assert [p.test_id for p in jsonl] == ["mine-0001", "mine-0002", "mine-0003"]  # ids from the file and the row
    assert {p.test_type for p in jsonl} == {"generation_quality"} and jsonl.pairs[0].primary_metric == "factuality"


@pytest.mark.parametrize("text, said", [
    ("question,answer\nWhat?,\n", "mine.csv: line 2: field 'answer' is missing or empty"),
    ("questoin,answer\nWhat?,This.\n", "unknown field(s) 'questoin'; the fields are question, answer, id"),
    ("question,answer,test_type\nWhat?,This.,trivia\n", "mine.csv: line 2: field 'test_type' is 'trivia'; expected "
                                                        "one of ['generation_quality', 'multi_hop', 'robustness']"),
    ("question,answer\nWhat, then?,This.\n", "line 2: 1 cell(s) more than the header's 2; quote a cell"),
    ("id,question,answer\nq,What?,This.\nq,Why?,That.\n", "line 3: test_id 'q' already read from mine.csv, line 2"),
])
def test_a_bad_row_is_refused_naming_the_file_the_line_and_the_field(tmp_path, text, said):
    path = tmp_path / "mine.csv"
    path.write_text(text)
    with pytest.raises(DatasetError) as info:
        read_qa_files(path, on_error="raise")
    assert said in str(info.value) and str(path) in str(info.value)


def test_a_jsonl_line_that_is_not_an_object_is_named(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "What?", "answer": "This."}\n[1, 2]\n')
    with pytest.raises(PlainError, match=r"mine.jsonl, line 2: a list, not a JSON object"):
        plain_records(path)
    path.write_text('{"question": "What?", "answer": "This."}\n{"question": "What?",\n')
    read = read_qa_files(path)  # "warn": the file is listed as a problem, nothing half-read
    assert not len(read) and "line 2: not JSON (" in read.problems["message"].iloc[0]
    assert set(PLAIN_FIELDS) >= {"question", "answer", "id", "gold_evidence", "gold_doc_ids"}


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_plain_question_file_runs_end_to_end(tmp_path, stub, kind):  # noqa: F811
    """A CSV and a JSON Lines file of one's own questions as the experiment's [questions] source: answered over
    a corpus of their own evidence, judged, shown with their ids, and the gold documents read."""
    source = write_csv(tmp_path / "mine.csv") if kind == "csv" else write_jsonl(tmp_path / "mine.jsonl")
    path = write_file(tmp_path, sample=3, modes='["A"]', windows="[1]", questions=f'source = "{source.name}"')
    run = run_experiment(Experiment.from_file(path), progress=False, probe=False, echo=quiet)
    assert run.status == "finished"
    view = Explorer.from_folder(tmp_path / "out").view()
    ids = sorted(r[0] for r in ROWS) if kind == "csv" else ["mine-0001", "mine-0002", "mine-0003"]
    assert sorted(view["test_id"]) == ids and view["state"].eq("judged").all()
    answers = pd.read_json(tmp_path / "out" / "answers.jsonl", lines=True)
    assert answers["gold_retrieved"].notna().all()  # the rows' gold documents were read


def test_the_docs_table_is_the_fields_the_reader_takes():
    from conftest import ROOT

    doc = (ROOT / "docs" / "experiment.md").read_text()
    table = doc[doc.index("<!-- plain-fields -->"):doc.index("<!-- /plain-fields -->")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert rows == [f"| `{k}` | {'yes' if required else 'no'} | {what} |" for k, (required, what)
                    in PLAIN_FIELDS.items()]


def test_the_documented_json_schema_is_the_readers_and_agrees_with_it():
    """docs/questions.schema.json is plain_schema(); rows the reader takes pass it, rows it refuses fail it."""
    import jsonschema

    from fabnb.data.plain import plain_schema

    from conftest import ROOT

    schema = plain_schema()
    assert json.loads((ROOT / "docs" / "questions.schema.json").read_text()) == schema
    good = [{"question": "What?", "answer": "This."},
            {"id": "q1", "question": "What?", "answer": "This.", "test_type": "multi_hop",
             "gold_evidence": "The passage.", "gold_doc_ids": ["D1", "D2"], "primary_metric": "depth"}]
    bad = [{"question": "What?"}, {"question": "What?", "answer": "This.", "questoin": "typo"},
           {"question": "What?", "answer": "This.", "test_type": "trivia"}, {"question": "", "answer": "This."}]
    for row in good:
        jsonschema.validate(row, schema)
    for row in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(row, schema)
