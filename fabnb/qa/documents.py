"""Generated retrieval documents (RAG-TESTER): an LLM writes documents on given topics, saved as text and PDF.

RAG-TESTER builds part of its corpus by asking an LLM for documents with chosen
knobs: length, level of detail, tone, a table of contents, citations. Here each
request is a :class:`DocumentSpec`; :func:`write_documents` asks the model, checks the
result, and saves it as ``<doc_id>.txt`` and ``<doc_id>.pdf`` (a real text layer, read
back with the kit's own PDF loader before it is kept), with a ``manifest.csv`` of every
document's generation parameters. A document that is empty, off topic, or whose PDF
does not render or read back is excluded, with the reason, in ``rejected``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from ..core.text import word_tokens
from ..corpus.collection import load_corpus
from ..models.llm import LLMError

__all__ = ['DETAIL_LEVELS', 'DocumentSpec', 'GeneratedDocuments', 'TONES', 'TOPIC_SHARE', 'document_prompt',
           'render_pdf', 'topic_share', 'write_documents']

DETAIL_LEVELS = ("overview", "technical", "expert")
TONES = ("neutral", "formal", "tutorial")
#: Share of the topic's content words an on-topic document must contain.
TOPIC_SHARE = 0.5
_STOP = frozenset("a an and the of in on for to with by from at as or is are how what why its".split())


@dataclass(frozen=True)
class DocumentSpec:
    """What to write.

    Parameters
    ----------
    topic : str
    words : int
        Target length in words.
    detail : {"overview", "technical", "expert"}
    tone : {"neutral", "formal", "tutorial"}
    toc : bool
        Start with a table of contents.
    citations : bool
        Cite sources in the text, with a reference list at the end.
    """

    topic: str
    words: int = 300
    detail: str = "technical"
    tone: str = "neutral"
    toc: bool = False
    citations: bool = False

    def __post_init__(self):
        if not self.topic.strip():
            raise ValueError("a document needs a topic.")
        if self.detail not in DETAIL_LEVELS or self.tone not in TONES:
            raise ValueError(f"detail must be one of {DETAIL_LEVELS} and tone one of {TONES}; "
                             f"got {self.detail!r}, {self.tone!r}.")
        if not 50 <= self.words <= 5000:
            raise ValueError(f"words must be from 50 to 5000, got {self.words}.")


def document_prompt(spec: DocumentSpec) -> str:
    """The instruction for one document."""
    parts = [f"Write a {spec.detail}-level document of about {spec.words} words on: {spec.topic}.",
             f"Use a {spec.tone} tone. Give concrete values, materials and process conditions."]
    if spec.toc:
        parts.append("Start with a short table of contents listing the section headings.")
    if spec.citations:
        parts.append("Cite sources in the text as [1], [2], ... and end with a list of references.")
    parts.append("Write plain text with section headings on their own lines.\n\nDocument:")
    return "\n".join(parts)


def topic_share(topic: str, text: str) -> float:
    """Share of the topic's content words that appear in the text.

    >>> topic_share("copper electroplating additives", "Additives steer copper electroplating fill.")
    1.0
    """
    wanted = {w for w in word_tokens(topic) if w not in _STOP and len(w) > 2}
    have = set(word_tokens(text))
    return len(wanted & have) / len(wanted) if wanted else 1.0


def _latin1(text: str) -> str:
    # The PDF core fonts cover Latin-1; other characters become '?' in the PDF (the .txt keeps them).
    return text.encode("latin-1", errors="replace").decode("latin-1")


def render_pdf(text: str, path: Path, title: str) -> None:
    """Write text to a PDF with a real text layer (fpdf2, core font)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title(_latin1(title))
    pdf.set_auto_page_break(True, margin=15)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    for para in text.split("\n"):
        pdf.multi_cell(0, 6, _latin1(para) or " ", new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))


@dataclass
class GeneratedDocuments:
    """Documents kept (with their files and parameters) and requests rejected (with the reason).

    Attributes
    ----------
    documents : DataFrame
        doc_id, topic, words, detail, tone, toc, citations, model, seed, n_words, topic_share,
        txt_path, pdf_path, pdf_recovered (share of the text's words read back from the PDF).
    rejected : DataFrame
        doc_id, topic, reason.
    """

    documents: pd.DataFrame
    rejected: pd.DataFrame


def _kept_before(folder: Path) -> dict:
    """doc_id -> manifest record of documents an earlier run kept whose files are still there."""
    path = folder / "manifest.json"
    if not path.exists():
        return {}
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # an unreadable manifest: write the documents again
    return {r["doc_id"]: r for r in records if isinstance(r, dict) and r.get("status") == "kept"
            and Path(str(r.get("txt_path"))).exists() and Path(str(r.get("pdf_path"))).exists()}


def write_documents(specs, llm, folder: str | Path, *, seed: int = 0, temperature: float = 0.7,
                    min_recovered: float = 0.9) -> GeneratedDocuments:
    """Ask ``llm`` for one document per spec; keep those that pass, as .txt and .pdf, with a manifest.

    Parameters
    ----------
    specs : iterable of DocumentSpec
    llm : fabnb.models.llm.LLM
    folder : path
        Gets ``<doc_id>.txt``, ``<doc_id>.pdf`` and ``manifest.csv`` / ``manifest.json`` (kept
        and rejected). A document an earlier run kept there for the same request (spec,
        model, seed) is reused without asking the model again, so a rerun gives the same
        corpus; rejected requests are asked again.
    min_recovered : float
        Share of the document's words the PDF loader must read back for the PDF to count.

    Returns
    -------
    GeneratedDocuments
    """

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    earlier = _kept_before(folder)
    kept, rejected = [], []
    for i, spec in enumerate(specs):
        doc_id = f"gen-{i + 1:03d}-" + "-".join(word_tokens(spec.topic)[:4])
        meta = {"doc_id": doc_id, **asdict(spec), "model": llm.model, "seed": seed + i}
        again = earlier.get(doc_id)
        if again is not None and all(again.get(k) == v for k, v in meta.items()):
            kept.append(again)  # the same request was written and checked before: reuse it, ask nothing
            continue
        try:
            done = llm.complete(document_prompt(spec), max_tokens=int(spec.words * 2), temperature=temperature,
                                seed=seed + i)
        except LLMError as exc:
            rejected.append({**meta, "reason": f"the model failed: {exc.cause}"})
            continue
        text = re.sub(r"\n{3,}", "\n\n", done.text).strip()
        share = topic_share(spec.topic, text)
        if len(word_tokens(text)) < 20:
            rejected.append({**meta, "reason": f"empty or too short ({len(word_tokens(text))} words)"})
            continue
        if share < TOPIC_SHARE:
            rejected.append({**meta, "reason": f"not on topic: {share:.0%} of the topic's words appear"})
            continue
        txt, pdf = folder / f"{doc_id}.txt", folder / f"{doc_id}.pdf"
        try:
            render_pdf(text, pdf, spec.topic)
            back = load_corpus(pdf, on_error="raise")
            recovered = topic_share(" ".join(set(word_tokens(_latin1(text)))), back.documents.text.iloc[0])
        except Exception as exc:  # noqa: BLE001 - a PDF that fails is recorded, the others go on
            pdf.unlink(missing_ok=True)
            rejected.append({**meta, "reason": f"the PDF failed to render or read back: {type(exc).__name__}: "
                                                f"{str(exc)[:120]}"})
            continue
        if recovered < min_recovered:
            pdf.unlink(missing_ok=True)
            rejected.append({**meta, "reason": f"the PDF's text layer gives back {recovered:.0%} of the words"})
            continue
        txt.write_text(text, encoding="utf-8")
        kept.append({**meta, "n_words": len(word_tokens(text)), "topic_share": share, "txt_path": str(txt),
                     "pdf_path": str(pdf), "pdf_recovered": recovered})
    cols = ["doc_id", "topic", "words", "detail", "tone", "toc", "citations", "model", "seed"]
    documents = pd.DataFrame([{k: v for k, v in r.items() if k != "status"} for r in kept],
                             columns=[*cols, "n_words", "topic_share", "txt_path", "pdf_path", "pdf_recovered"])
    rejects = pd.DataFrame(rejected, columns=[*cols, "reason"])
    manifest = pd.concat([documents.assign(status="kept"), rejects.assign(status="rejected")], ignore_index=True)
    manifest.to_csv(folder / "manifest.csv", index=False)
    # Kept and rejected written apart, so a kept document's whole numbers stay whole (no NaN-widened columns).
    records = documents.assign(status="kept").to_dict("records") + rejects.assign(status="rejected").to_dict("records")
    (folder / "manifest.json").write_text(json.dumps(records, indent=1, default=str))
    return GeneratedDocuments(documents, rejects)
