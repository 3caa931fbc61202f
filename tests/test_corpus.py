"""Loading every format, per-file problems, and chunking with offsets."""

import json
import warnings

import pandas as pd
import pytest

from fabnb.corpus.collection import CorpusError, CorpusWarning, chunk_corpus, corpus_from_frame, load_corpus, tokenizer


def _pdf(path, pages):
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Etch report")
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "notes.txt").write_text("Plasma etching\nRIE removes silicon anisotropically.")
    (tmp_path / "guide.md").write_text("# CMP guide\nIntro.\n## Slurry\nSilica slurry.\n## Pads\nPolyurethane.")
    (tmp_path / "records.jsonl").write_text(
        json.dumps({"id": "r1", "title": "ALD", "text": "ALD of HfO2."}) + "\n{broken\n"
        + json.dumps({"id": "r2", "body": "no text field"}) + "\n")
    (tmp_path / "list.json").write_text(json.dumps([{"doc_id": "j1", "text": "EUV at 13.5nm."}]))
    _pdf(tmp_path / "report.pdf", ["Page one: copper damascene.", "Page two: via resistance."])
    _pdf(tmp_path / "scan.pdf", [""])
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blob.txt").write_bytes(b"\x89PNG\x00\x00\x01binary")
    (tmp_path / "latin.txt").write_bytes("r\xe9sum\xe9 of etch".encode("latin-1"))
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "notes.txt").write_text("A second notes file in a subfolder.")
    return tmp_path


def test_folder_loads_good_files_and_lists_the_rest(folder):
    with pytest.warns(CorpusWarning):
        c = load_corpus(folder)
    docs = c.documents.set_index("doc_id")
    assert sorted(docs.index) == ["guide", "j1", "notes", "r1", "report", "sub/notes"]
    assert docs.loc["guide", "title"] == "CMP guide" and docs.loc["r1", "title"] == "ALD"
    assert docs.loc["report", "title"] == "Etch report" and docs.loc["report", "format"] == "pdf"
    kinds = c.problems.set_index(c.problems.path.str.rsplit("/", n=1).str[-1]).kind.to_dict()
    assert kinds == {"records.jsonl": "bad-record", "scan.pdf": "no-text-layer", "empty.txt": "empty",
                     "blob.txt": "binary", "latin.txt": "encoding", "image.png": "unsupported"}
    jsonl = c.problems[c.problems.path.str.endswith("records.jsonl")].message.tolist()
    assert any("line 2 is not JSON" in m for m in jsonl)
    assert any("line 3 has no string field 'text'" in m for m in jsonl)
    assert "byte 0xe9 at offset 1" in c.problems.set_index("kind").loc["encoding", "message"]


def test_sections_and_pages(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = load_corpus(folder)
    assert c.sections[c.sections.doc_id == "guide"].title.tolist() == ["CMP guide", "Slurry", "Pads"]
    pages = c.pages[c.pages.doc_id == "report"]
    text = c.document("report").text
    assert pages.page.tolist() == [1, 2]
    assert "via resistance" in text[pages.char_start.iloc[1]:pages.char_end.iloc[1]]


def test_duplicate_ids_keep_the_first(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "x", "text": "first"}\n{"id": "x", "text": "second"}\n')
    with pytest.warns(CorpusWarning, match="doc_id 'x' is already used"):
        c = load_corpus(tmp_path)
    assert c.documents.text.tolist() == ["first"]
    with pytest.raises(CorpusError, match="already used"):
        load_corpus(tmp_path, on_error="raise")


def test_missing_path_is_a_problem_not_a_crash(tmp_path):
    with pytest.warns(CorpusWarning):
        c = load_corpus([tmp_path / "nope", tmp_path])
    assert c.problems.kind.tolist() == ["missing"] and c.documents.empty


def test_chunks_cover_text_with_overlap():
    text = " ".join(f"word{i} etch" for i in range(1500))
    corpus = corpus_from_frame(pd.DataFrame({"doc_id": ["d"], "text": [text]}))
    chunks = chunk_corpus(corpus, size=100, overlap=20)
    enc = tokenizer()
    ids = enc.encode_ordinary(text)
    assert chunks.n_tokens.iloc[:-1].eq(100).all()
    assert len(chunks) == -(-(len(ids) - 20) // 80)  # ceil((n - overlap) / step)
    assert chunks.n_tokens.sum() == len(ids) + 20 * (len(chunks) - 1)
    for r in chunks.itertuples():
        assert r.text == text[r.char_start:r.char_end]
        assert enc.encode_ordinary(r.text)[:3] == ids[r.position * 80:r.position * 80 + 3]
    assert chunks.chunk_id.iloc[1] == "d::1" and chunks.tokenizer.iloc[0] == "tiktoken/cl100k_base"


def test_multibyte_offsets_and_short_documents():
    text = "HfO₂ — 温度 " * 300
    corpus = corpus_from_frame(pd.DataFrame({"doc_id": ["u", "s"], "text": [text, "tiny"]}))
    with pytest.warns(CorpusWarning, match=r"shorter than one 512-token chunk.*\['s'\]"):
        chunks = chunk_corpus(corpus)
    u = chunks[chunks.doc_id == "u"]
    assert u.char_start.iloc[0] == 0 and u.char_end.iloc[-1] == len(text)
    assert chunks.set_index("doc_id").loc["s", "whole_document"]


def test_chunks_know_their_section(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = load_corpus(folder)
        chunks = chunk_corpus(c, size=8, overlap=2)
    g = chunks[chunks.doc_id == "guide"]
    assert g.section.iloc[0] == "CMP guide" and g.section.iloc[-1] == "Pads"
    assert chunks[chunks.doc_id == "report"].page.iloc[0] == 1


def test_bad_chunk_parameters():
    corpus = corpus_from_frame(pd.DataFrame({"doc_id": ["d"], "text": ["x"]}))
    with pytest.raises(ValueError, match="overlap must be in"):
        chunk_corpus(corpus, size=10, overlap=10)
    with pytest.raises(CorpusError, match="duplicated doc_id"):
        corpus_from_frame(pd.DataFrame({"doc_id": ["d", "d"], "text": ["x", "y"]}))


def test_batch_encoding_gives_the_chunks_of_one_document_at_a_time(fab_bench):
    """Chunks from tiktoken's threaded batch encoding equal those of encoding each document alone, byte for byte."""
    from fabnb.corpus.collection import _chunk_one, chunk_records
    from fabnb.data.datasets import evidence_corpus

    docs = evidence_corpus(fab_bench).documents
    records = list(zip(docs["doc_id"], docs["text"]))[:300]
    one_by_one = [row for doc_id, text in records for row in _chunk_one(doc_id, text, 64, 16, "cl100k_base")]
    assert chunk_records(records, 64, 16, "cl100k_base") == one_by_one and len(one_by_one) > len(records)
    # Batches cut by characters (long documents) give the same chunks too.
    from fabnb.corpus import collection as corpus_module

    corpus_module.ENCODE_BATCH_CHARS, saved = 5_000, corpus_module.ENCODE_BATCH_CHARS
    try:
        assert chunk_records(records, 64, 16, "cl100k_base") == one_by_one
    finally:
        corpus_module.ENCODE_BATCH_CHARS = saved


def test_a_corpus_that_cannot_fit_is_refused_before_the_work_naming_dask(monkeypatch):
    from fabnb.corpus import collection as corpus_module
    from fabnb.corpus.collection import MEMORY_PER_CHAR, memory_available

    corpus = corpus_from_frame(pd.DataFrame({"doc_id": ["a", "b"], "text": ["Plasma etching of silicon. " * 400] * 2}))
    n_chars = 2 * len("Plasma etching of silicon. " * 400)
    monkeypatch.setattr(corpus_module, "memory_available", lambda: int(MEMORY_PER_CHAR * n_chars) - 1)
    monkeypatch.setattr(corpus_module, "chunk_records", lambda *a: pytest.fail("the work started"))
    with pytest.raises(CorpusError, match=r'needs about .* GB .* is available.*scheduler="dask"'):
        chunk_corpus(corpus)
    monkeypatch.undo()
    monkeypatch.setattr(corpus_module, "memory_available", lambda: int(MEMORY_PER_CHAR * n_chars) + 1)
    assert len(chunk_corpus(corpus, size=64, overlap=16)) > 2  # just enough: it runs
    monkeypatch.setattr(corpus_module, "memory_available", lambda: 1)
    assert len(chunk_corpus(corpus, size=64, overlap=16, check=False)) > 2  # the estimate can be skipped
    monkeypatch.undo()
    available = memory_available()
    assert available is None or 0 < available < 2 ** 50  # this machine's, from cgroup or /proc/meminfo
