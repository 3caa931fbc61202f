"""RAG-TESTER's test generators: tests aimed where RAG systems fail.

Each generator asks an LLM (:class:`fabnb.models.llm.LLM`) to write test cases (a question,
the expected answer, and keywords a correct answer must contain) from passages it
picks by its own strategy:

- :func:`complex_passage_tests` (``LOW_FLESCH``): the least readable chunks first;
- :func:`negative_rejection_tests`: questions whose answer the corpus does not hold;
  the expected answer is :data:`REFUSAL`, and absence is checked by retrieval before a
  test is kept;
- :func:`coverage_tests`: chunks no earlier test touched first
  (:class:`fabnb.corpus.passages.CoverageTracker`);
- :func:`random_tests`: the strategy-free baseline, chunks at random;
- :func:`fair_baseline_tests`: the reviewer's fairer baseline (objection 1): random
  positive tests plus negative-rejection tests in the same proportion as the suite
  it is compared with.

Every generator returns a :class:`TestSuite`: the kept tests and the candidates it
rejected, with the reason. Each attempt is told as it happens, one line to ``logging``
(``fabnb.qa.testcases``, INFO: the generator, the passage, asking / kept / rejected and why),
which a run's progress bar shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.text import QUOTE_SHARE, quoted_share, word_tokens
from ..corpus.passages import CoverageTracker, rank_by_complexity
from ..models.llm import LLM, LLMError, parse_json

__all__ = ['ANSWER_SUPPORT', 'DIFFICULTIES', 'REFUSAL', 'TEST_REJECT_COLUMNS', 'TEST_COLUMNS', 'TestSuite',
           'absence_share', 'answer_support', 'complex_passage_tests', 'coverage_tests', 'fair_baseline_tests',
           'negative_rejection_tests', 'random_tests', 'source_location', 'write_positive_test']

#: The expected answer of a negative-rejection test.
REFUSAL = "Insufficient information to answer this question"

TEST_COLUMNS = ["test_id", "generator", "kind", "question", "expected_answer", "keywords", "source_chunk",
                "source_doc", "evidence", "absence_max_share", "model", "difficulty", "reasoning", "source_location",
                "span_start", "span_end"]
#: The difficulty levels Appendix D's generation prompt asks for.
DIFFICULTIES = ("easy", "medium", "hard")
TEST_REJECT_COLUMNS = ["generator", "source_chunk", "reason"]

_POSITIVE_SCHEMA = {
    "type": "object",
    "properties": {"evidence": {"type": "string", "maxLength": 400},
                   "question": {"type": "string", "minLength": 15, "maxLength": 300},
                   "answer": {"type": "string", "minLength": 1, "maxLength": 400},
                   "keywords": {"type": "array", "items": {"type": "string", "maxLength": 40},
                                "minItems": 1, "maxItems": 4},
                   "difficulty": {"type": "string", "enum": list(DIFFICULTIES)},
                   "reasoning": {"type": "string", "maxLength": 120}},
    "required": ["evidence", "question", "answer", "keywords"],
}
_NEGATIVE_SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string", "minLength": 15, "maxLength": 300},
                   "missing_detail": {"type": "string", "minLength": 3, "maxLength": 120}},
    "required": ["question", "missing_detail"],
}
_STOP = frozenset("a an and are as at be by for from how in is it of on or that the this to was what when where "
                  "which who why with does do did its their there these those than then into about".split())
#: Share of an expected answer's content words its own source passage must hold for the test to be kept.
ANSWER_SUPPORT = 0.5
_BOOLEAN = frozenset("yes no true false".split())


@dataclass
class TestSuite:
    """Test cases from one generator.

    Attributes
    ----------
    tests : DataFrame
        test_id, generator, kind (``positive`` / ``negative``), question,
        expected_answer, keywords (tuple), source_chunk, source_doc, evidence,
        absence_max_share (negative tests: the largest share of the missing
        detail's words found in any retrieved chunk), model, and Appendix D's
        fields: difficulty (easy / medium / hard, as the tester rated it; empty
        when it gave none), reasoning (the reasoning required, in its words),
        source_location (:func:`source_location`; ``unknown`` for a negative
        test), span_start and span_end (character offsets of the evidence in
        its document; NaN when it cannot be placed).
    rejected : DataFrame
        generator, source_chunk, reason.
    """

    __test__ = False  # not a pytest test class, despite the name

    tests: pd.DataFrame
    rejected: pd.DataFrame

    def __len__(self) -> int:
        return len(self.tests)

    @staticmethod
    def from_records(tests: list[dict], rejected: list[dict]) -> "TestSuite":
        """A suite from stored records (JSON): keywords back to tuples, the columns in order.

        >>> TestSuite.from_records([{"test_id": "t", "keywords": ["etch"]}], []).tests["keywords"].tolist()
        [('etch',)]
        """
        frame = pd.DataFrame(tests, columns=TEST_COLUMNS)
        frame["keywords"] = frame["keywords"].map(lambda k: tuple(k) if isinstance(k, (list, tuple)) else ())
        return TestSuite(frame, pd.DataFrame(rejected, columns=[*TEST_REJECT_COLUMNS, "source_doc"]))

    @staticmethod
    def concat(parts) -> "TestSuite":
        parts = list(parts)
        return TestSuite(pd.concat([p.tests for p in parts], ignore_index=True),
                         pd.concat([p.rejected for p in parts], ignore_index=True))


_LOG = logging.getLogger(__name__)


class _Collector:
    def __init__(self, generator: str, llm: LLM):
        self.generator, self.llm = generator, llm
        self.tests, self.rejected = [], []

    def tell(self, chunk_id, outcome: str) -> None:
        """One attempt's line: slow is told from stuck (a small model takes seconds per test)."""
        _LOG.info("%s %s: %s", self.generator, chunk_id, outcome)

    def reject(self, chunk_id, reason: str) -> None:
        self.rejected.append({"generator": self.generator, "source_chunk": chunk_id, "reason": reason})
        self.tell(chunk_id, f"rejected ({reason[:80]})")

    def keep(self, **fields) -> None:
        self.tell(fields.get("source_chunk"), "kept")
        n = len(self.tests) + 1
        self.tests.append({"test_id": f"{self.generator}-{n:03d}", "generator": self.generator,
                           "absence_max_share": np.nan, "model": self.llm.model, "difficulty": "", "reasoning": "",
                           "source_location": "unknown", "span_start": np.nan, "span_end": np.nan, **fields})

    def suite(self) -> TestSuite:
        return TestSuite(pd.DataFrame(self.tests, columns=TEST_COLUMNS),
                         pd.DataFrame(self.rejected, columns=TEST_REJECT_COLUMNS))


def _ask(llm: LLM, prompt: str, schema: dict, max_tokens: int, seed: int):
    done = llm.complete([{"role": "user", "content": prompt}], temperature=0.7, max_tokens=max_tokens, seed=seed,
                        response_format={"type": "json_object", "schema": schema})
    return parse_json(done.text)


def write_positive_test(llm: LLM, chunk: pd.Series, collector: _Collector, max_tokens: int = 384,
                        seed: int = 0) -> bool:
    """Ask for one answerable test from a chunk; keep it if its evidence is quoted from the chunk."""
    prompt = ("Write one test question for a question-answering system. Its answer must be in the PASSAGE. "
              "Reply with JSON: evidence (a sentence copied from the PASSAGE), question, answer, and 1-4 keywords "
              f"a correct answer must contain.\n\nPASSAGE:\n{chunk['text']}\n\nJSON:")
    collector.tell(chunk["chunk_id"], "asking")
    try:
        data = _ask(llm, prompt, _POSITIVE_SCHEMA, max_tokens, seed)
    except (LLMError, ValueError) as exc:
        collector.reject(chunk["chunk_id"], f"{type(exc).__name__}: {str(exc)[:120]}")
        return False
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("evidence", "question", "answer")):
        collector.reject(chunk["chunk_id"], "missing or mistyped fields")
        return False
    share = quoted_share(data["evidence"], chunk["text"])
    if share < QUOTE_SHARE:
        collector.reject(chunk["chunk_id"], f"evidence not in the passage ({share:.0%} of its words in one run)")
        return False
    support = answer_support(data["answer"], chunk["text"])
    if support < ANSWER_SUPPORT:
        collector.reject(chunk["chunk_id"], f"expected answer absent from its source passage ({support:.0%} of its "
                                            "content words are there)")
        return False
    keywords = tuple(k for k in data.get("keywords") or [] if isinstance(k, str) and k.strip())
    difficulty = data.get("difficulty") if data.get("difficulty") in DIFFICULTIES else ""
    reasoning = data.get("reasoning").strip() if isinstance(data.get("reasoning"), str) else ""
    start, end = _span(data["evidence"], chunk)
    collector.keep(kind="positive", question=data["question"].strip(), expected_answer=data["answer"].strip(),
                   keywords=keywords, source_chunk=chunk["chunk_id"], source_doc=chunk["doc_id"],
                   evidence=data["evidence"], difficulty=difficulty, reasoning=reasoning,
                   source_location=source_location(chunk), span_start=start, span_end=end)
    return True


def source_location(chunk) -> str:
    """Where a chunk sits, page level as Appendix D asks: ``doc_id p. N`` for a PDF page, else the characters.

    >>> source_location({"doc_id": "etch.pdf", "page": 3.0, "char_start": 900, "char_end": 1400})
    'etch.pdf p. 3'
    >>> source_location({"doc_id": "notes", "page": float("nan"), "char_start": 0, "char_end": 80})
    'notes chars 0-80'
    """
    page = chunk.get("page") if hasattr(chunk, "get") else None
    if page is not None and not pd.isna(page):
        return f"{chunk['doc_id']} p. {int(page)}"
    return f"{chunk['doc_id']} chars {int(chunk['char_start'])}-{int(chunk['char_end'])}"


def _span(evidence: str, chunk) -> tuple[float, float]:
    """The evidence's character offsets in its document (its chunk's offset plus its place in the chunk); NaN
    when it is not found verbatim (case and spacing aside)."""
    text = " ".join(str(chunk["text"]).split()).lower()
    quote = " ".join(evidence.split()).lower().strip(" .")
    at = text.find(quote) if quote else -1
    if at < 0:
        return np.nan, np.nan
    # offsets in the squeezed text are close to the original's: a chunk's own spacing is rarely more than single
    start = int(chunk["char_start"]) + at
    return float(start), float(start + len(quote))


def _content_words(text: str) -> set[str]:
    return {w for w in word_tokens(text) if w not in _STOP and len(w) > 2}


def answer_support(answer: str, passage: str) -> float:
    """Share of an expected answer's content words (numbers included) that its source passage holds.

    A test whose expected answer is not in its own passage cannot be judged fairly, so
    generators reject it below :data:`ANSWER_SUPPORT`. A yes/no or true/false answer has
    nothing to look up and counts as supported.

    >>> answer_support("about 5 nm per cycle", "The etch removes 5 nm per cycle at 300 C.")
    1.0
    >>> answer_support("Argon plasma", "The etch removes 5 nm per cycle at 300 C.")
    0.0
    """
    words = {w for w in word_tokens(answer) if w not in _STOP and w not in _BOOLEAN
             and (len(w) > 2 or any(ch.isdigit() for ch in w))} - {"about", "approximately"}
    if not words:
        return 1.0
    return len(words & set(word_tokens(passage))) / len(words)


def absence_share(detail: str, question: str, vectors, chunks: pd.DataFrame, k: int = 5) -> float:
    """How present a missing detail is in the corpus: the largest share of its content words
    found in any of the ``k`` chunks retrieved (TF-IDF) for the question."""
    words = _content_words(detail)
    if not words:
        return 1.0  # nothing to look for: cannot show absence
    q = vectors.transform([question])
    sims = (q @ vectors.matrix.T).toarray()[0]
    top = np.argsort(-sims)[:k]
    return max(len(words & _content_words(chunks["text"].iloc[i])) / len(words) for i in top)


def negative_rejection_tests(chunks: pd.DataFrame, vectors, llm: LLM, n: int, *, max_share: float = 0.5,
                             seed: int = 0, max_tokens: int = 256, attempts: int | None = None,
                             pool=None, tracker: CoverageTracker | None = None) -> TestSuite:
    """Questions about details the corpus does not hold; expected answer :data:`REFUSAL`.

    For a random chunk, the LLM writes a question on the chunk's topic asking for a
    specific detail the chunk does not give, and names that detail. The test is kept
    only if retrieval agrees it is absent: among the 5 chunks TF-IDF retrieves for the
    question from the whole corpus (``chunks``, ``vectors``), none holds ``max_share``
    or more of the detail's content words.

    Parameters
    ----------
    pool : iterable of chunk_id, optional
        Draw passages only from these (e.g. one document's chunks); absence is still
        checked against the whole corpus.
    tracker : CoverageTracker, optional
        The corpus's tracker: each kept test's passage is marked in it.
    """
    c = _Collector("negative_rejection", llm)
    rng = np.random.default_rng(seed)
    rows = np.arange(len(chunks)) if pool is None else np.flatnonzero(chunks["chunk_id"].isin(set(pool)).to_numpy())
    for i, row in enumerate(rows[rng.permutation(len(rows))][: attempts or 3 * n]):
        if len(c.tests) >= n:
            break
        chunk = chunks.iloc[row]
        prompt = ("Write one question on the same topic as the PASSAGE that asks for a specific detail the "
                  "PASSAGE does not give (a value, a name, a date). Reply with JSON: question, and missing_detail "
                  f"(the detail asked for, in a few words).\n\nPASSAGE:\n{chunk['text']}\n\nJSON:")
        c.tell(chunk["chunk_id"], "asking")
        try:
            data = _ask(llm, prompt, _NEGATIVE_SCHEMA, max_tokens, seed + i)
        except (LLMError, ValueError) as exc:
            c.reject(chunk["chunk_id"], f"{type(exc).__name__}: {str(exc)[:120]}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("question"), str) \
                or not isinstance(data.get("missing_detail"), str):
            c.reject(chunk["chunk_id"], "missing or mistyped fields")
            continue
        share = absence_share(data["missing_detail"], data["question"], vectors, chunks)
        if share >= max_share:
            c.reject(chunk["chunk_id"], f"not absent: {share:.0%} of the missing detail's words are in a retrieved "
                                        "chunk")
            continue
        c.keep(kind="negative", question=data["question"].strip(), expected_answer=REFUSAL,
               keywords=(), source_chunk=chunk["chunk_id"], source_doc=chunk["doc_id"], evidence="")
        c.tests[-1]["absence_max_share"] = share
        if tracker is not None:
            tracker.mark([chunk["chunk_id"]])
    return c.suite()


def _positive_from(rows, chunks: pd.DataFrame, llm: LLM, n: int, generator: str, seed: int,
                   tracker: CoverageTracker | None = None) -> TestSuite:
    """Tests from the chunks ``rows`` names, in order, until ``n`` are kept; each kept test's chunk is marked in
    ``tracker`` (the one tracker every generator of a corpus shares)."""
    c = _Collector(generator, llm)
    by_id = chunks.set_index("chunk_id", drop=False)
    for i, chunk_id in enumerate(rows):
        if len(c.tests) >= n:
            break
        if write_positive_test(llm, by_id.loc[chunk_id], c, seed=seed + i) and tracker is not None:
            tracker.mark([chunk_id])
    return c.suite()


def _untouched_first(tracker: CoverageTracker, pool: set, tried: set) -> str | None:
    """The next chunk of ``pool`` to try: untouched before touched, least touched first, never one tried."""
    return next((ch for ch in tracker.next(len(tracker.order)) if ch in pool and ch not in tried), None)


def complex_passage_tests(chunks: pd.DataFrame, llm: LLM, n: int, *, seed: int = 0, min_words: int = 20,
                          tracker: CoverageTracker | None = None) -> TestSuite:
    """Tests from the least readable chunks first (RAG-TESTER's LOW_FLESCH); each kept test's chunk is marked in
    ``tracker`` when one is given."""
    ranked = rank_by_complexity(chunks, min_words=min_words)
    return _positive_from(ranked["chunk_id"].tolist()[: 3 * n], chunks, llm, n, "complex_passage", seed, tracker)


def coverage_tests(chunks: pd.DataFrame, llm: LLM, n: int, tracker: CoverageTracker, *, seed: int = 0,
                   attempts: int | None = None) -> TestSuite:
    """Tests from chunks no earlier test touched while any remain; marks each kept test's chunk in ``tracker``.

    ``chunks`` is the pool to draw from (one document's chunks, or the corpus); ``tracker`` is the
    corpus's one tracker, shared with the other generators and with retrieval feedback
    (:func:`fabnb.rag.sources.mark_returned`): a chunk an earlier test used, or that the system's
    retrieval returned, is drawn only once no untouched chunk of the pool is left. Each attempt
    asks the tracker afresh, so a chunk marked mid-way is skipped too. At most ``attempts``
    (default ``3 * n``) chunks are tried.
    """
    c = _Collector("coverage", llm)
    by_id = chunks.set_index("chunk_id", drop=False)
    pool, tried = set(chunks["chunk_id"]), set()
    for i in range(attempts or 3 * n):
        if len(c.tests) >= n:
            break
        chunk_id = _untouched_first(tracker, pool, tried)
        if chunk_id is None:
            break
        tried.add(chunk_id)
        if write_positive_test(llm, by_id.loc[chunk_id], c, seed=seed + i):
            tracker.mark([chunk_id])
    return c.suite()


def random_tests(chunks: pd.DataFrame, llm: LLM, n: int, *, seed: int = 0,
                 tracker: CoverageTracker | None = None) -> TestSuite:
    """The strategy-free baseline: positive tests from chunks drawn at random (marked in ``tracker`` if given)."""
    rng = np.random.default_rng(seed)
    rows = chunks["chunk_id"].to_numpy()[rng.permutation(len(chunks))[: 3 * n]]
    return _positive_from(list(rows), chunks, llm, n, "random", seed, tracker)


def fair_baseline_tests(chunks: pd.DataFrame, vectors, llm: LLM, n: int, negative_share: float, *,
                        seed: int = 0, pool=None) -> TestSuite:
    """The reviewer's fairer baseline: random tests plus negative-rejection tests in the same proportion.

    Parameters
    ----------
    negative_share : float
        Share of negative-rejection tests in the suite this baseline is compared with
        (e.g. ``(suite.tests.kind == "negative").mean()``).
    pool : iterable of chunk_id, optional
        Draw passages only from these (one document's chunks); see :func:`negative_rejection_tests`.
    """
    if not 0 <= negative_share <= 1:  # NaN too: the suite compared with has no tests
        raise ValueError(f"negative_share must be a share from 0 to 1, got {negative_share!r}; is the suite it is "
                         "compared with empty?")
    n_negative = int(round(n * negative_share))
    own = chunks if pool is None else chunks[chunks["chunk_id"].isin(set(pool))]
    positive = random_tests(own, llm, n - n_negative, seed=seed)
    negative = negative_rejection_tests(chunks, vectors, llm, n_negative, seed=seed + 1000, pool=pool)
    suite = TestSuite.concat([positive, negative])
    suite.tests["generator"] = "fair_baseline"
    suite.rejected["generator"] = "fair_baseline"
    suite.tests["test_id"] = [f"fair_baseline-{i + 1:03d}" for i in range(len(suite.tests))]
    return suite
