"""A small technical corpus and a scripted QA-writing reply, shared by generation tests."""

import re
import warnings
from pathlib import Path

import pandas as pd

from stub_openai import completion

PARAGRAPHS = [
    "Atomic layer etching of ruthenium used pulsed argon bias at 900 V with a 10% duty cycle. "
    "The optimal window was between 600 V and 1200 V. Etch per cycle reached 5 angstrom.",
    "Chemical mechanical planarization of copper produced dishing of 40 nm on 100 um lines. "
    "Slurry with silica abrasive at pH 4 reduced erosion to 12 nm.",
    "The FinFET threshold voltage shifted by 35 mV after 1000 hours of NBTI stress at 125 C. "
    "Hafnium oxide gate dielectric of 1.8 nm kept leakage current below 1 nA.",
    "EUV lithography at 13.5 nm printed 24 nm pitch lines with a dose of 60 mJ/cm2. "
    "Line edge roughness was 2.1 nm after resist trim.",
    "Through silicon vias of 5 um diameter and 50 um depth were filled by copper electroplating. "
    "Contact resistance measured 20 mOhm per via.",
    "Gallium nitride HEMT devices reached a cutoff frequency of 150 GHz. "
    "The two-dimensional electron gas density was 1e13 per cm2 at 300 K.",
]


def small_contexts(n_distractors=1):
    from fabnb.corpus.collection import chunk_corpus, corpus_from_frame
    from fabnb.corpus.synthesis import needle_in_haystack
    from fabnb.corpus.vectors import vectorize

    corpus = corpus_from_frame(pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(PARAGRAPHS))],
                                             "text": PARAGRAPHS}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = chunk_corpus(corpus)
    vectors = vectorize(chunks)
    return chunks, needle_in_haystack(chunks, vectors, n=len(PARAGRAPHS), n_distractors=n_distractors,
                                      anchors=list(chunks.chunk_id))


def qa_reply(broken_first=0):
    """Write a valid QA pair quoting the prompt's context; the first ``broken_first`` replies are not JSON."""

    def reply(request, n):
        if n <= broken_first:
            return 200, completion("Sure! Here is a great question about etching."), {}
        prompt = request["messages"][-1]["content"]
        prefix = re.search(r"start(?:s|ing) with (\[\w+\])", prompt)
        sections = re.findall(r"\[Section \d+\]\n(.+?)(?:\n\n|\nTASK)", prompt, re.S)
        target = sections[0]
        first = target.split(". ")[0]
        # Each context's own words, so questions of different contexts are not near-duplicates.
        words = [w for s in sections for w in re.findall(r"[a-z]{4,}", s.lower())[:5]]
        question = f"{prefix.group(1) + ' ' if prefix else ''}{' '.join(words)}?"
        answer = first
        return 200, completion('{"question": "%s", "answer": "%s", "evidence": ["%s"]}' % (question, answer, first)), {}

    return reply


def notebook_turn(name: str, notebooks: Path | None = None):
    """The turn of notebook ``name`` in ``notebooks`` (default the suite's; the root conftest's ``notebook_turn``:
    the locks its run takes), for a test that makes the notebook's own model calls: the two never ask the model at
    once, and the second replays."""
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("fabnb_suite_conftest", ROOT / "conftest.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    return suite.notebook_turn((notebooks or ROOT / "notebooks") / name)


def notebook_parameters(name: str) -> dict:
    """The values a numbered notebook's parameters cells set (its code cells before the first that uses
    fabnb), as the notebook runs in the suite: a test that makes the notebook's own calls fills the suite's
    response cache, and the notebook, run later, replays those replies instead of asking the model again."""
    import nbformat

    from conftest import ROOT

    book = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    values: dict = {}
    for cell in (c for c in book.cells if c.cell_type == "code"):
        if "fabnb" in cell.source:
            break
        exec(cell.source, values)
    return values
