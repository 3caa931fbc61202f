"""Generated retrieval documents: knobs in the prompt, text and PDF out, bad documents excluded with a reason."""

import pandas as pd
import pytest

from fabnb.corpus.collection import load_corpus
from fabnb.models.llm import LLM
from fabnb.qa.documents import DocumentSpec, document_prompt, write_documents

from stub_openai import StubServer, completion

GOOD = ("Copper electroplating fills damascene trenches.\n\nAdditives\nAccelerators such as SPS and suppressors such "
        "as PEG steer bottom-up fill at 10 mA/cm2. Levelers reduce overburden. The bath runs at 25 C with "
        "copper sulfate at 40 g/L. Résumé: void-free fill needs all three additives.")


def reply(request, n):
    prompt = request["messages"][-1]["content"]
    if "ruthenium" in prompt:
        return 200, completion(""), {}
    if "gallium" in prompt:
        return 200, completion("Bananas are yellow fruits that grow in warm climates and are rich in potassium "
                               "and fibre, eaten all over the world every day."), {}
    return 200, completion(GOOD), {}


def test_documents_are_written_checked_and_read_back(tmp_path):
    specs = [DocumentSpec("copper electroplating additives", words=120, detail="expert", tone="formal", toc=True,
                          citations=True),
             DocumentSpec("ruthenium atomic layer etching"), DocumentSpec("gallium nitride HEMT reliability")]
    with StubServer(reply) as server:
        out = write_documents(specs, LLM("writer", server.base_url, cache=False), tmp_path)
        prompt = server.requests[0]["messages"][-1]["content"]
    assert "expert-level" in prompt and "formal tone" in prompt and "table of contents" in prompt and "[1]" in prompt
    assert len(out.documents) == 1
    doc = out.documents.iloc[0]
    assert doc.pdf_recovered >= 0.9 and doc.detail == "expert" and doc.toc and doc.model == "writer"
    back = load_corpus(doc.pdf_path)
    assert "damascene" in back.documents.text.iloc[0] and back.problems.empty  # a real text layer
    assert "Résumé" in open(doc.txt_path, encoding="utf-8").read()
    reasons = dict(zip(out.rejected.topic, out.rejected.reason))
    assert reasons["ruthenium atomic layer etching"].startswith("empty")
    assert reasons["gallium nitride HEMT reliability"].startswith("not on topic")
    manifest = pd.read_csv(tmp_path / "manifest.csv")
    assert manifest.status.value_counts().to_dict() == {"rejected": 2, "kept": 1}


def test_a_rerun_reuses_kept_documents_and_asks_again_for_the_rest(tmp_path):
    specs = [DocumentSpec("copper electroplating additives", words=120), DocumentSpec("ruthenium atomic layer etching")]
    with StubServer(reply) as server:
        first = write_documents(specs, LLM("writer", server.base_url, cache=False), tmp_path)
        asked = len(server.requests)
        again = write_documents(specs, LLM("writer", server.base_url, cache=False), tmp_path)
        assert len(server.requests) == asked + 1  # only the rejected request is asked again
        write_documents(specs, LLM("writer", server.base_url, cache=False), tmp_path, seed=5)
        assert len(server.requests) == asked + 3  # another seed is another request: nothing reused
    pd.testing.assert_frame_equal(first.documents, again.documents)
    assert len(again.rejected) == 1


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="detail must be"):
        DocumentSpec("x topic", detail="deep")
    with pytest.raises(ValueError, match="topic"):
        DocumentSpec("  ")
    assert "about 300 words" in document_prompt(DocumentSpec("EUV masks"))
