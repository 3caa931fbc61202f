"""The RAG protocol (:class:`RAGSystem`, :class:`Answer`) and the reference system, :class:`ReferenceRAG`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pandas as pd

from ..core.tokens import count_tokens, truncate_tokens
from ..models.llm import LLMError
from .config import PROMPT_OVERHEAD, SYSTEM_PROMPT, RAGConfig, RAGError
from .kinds import SystemKind, add_kind
from .retrievers import Retriever, make_retriever, pick_context

__all__ = ['Answer', 'RAGSystem', 'ReferenceRAG', 'answer_from_context', 'check_answer', 'check_budget',
           'context_prompt', 'count_context', 'prepare_system']

# ------------------------------------------------------------------ answers and the protocol


@dataclass
class Answer:
    """What a system said, and what it read.

    Attributes
    ----------
    answer : str
    sources : list of dict or None
        ``{"id", "doc_id", "text", "score"}`` per source; None when the system exposes none.
    latency_s : float
    prompt_tokens, completion_tokens : int
        As the system reports them (0 when it does not).
    context_tokens : int
        Tokens of context the system was given (reference system and mode B), else 0.
    context_signal : float or None
        Appendix F's heuristic evidence of context use, for systems without sources.
    source_tokens : list of int or None
        Tokens of each source as the prompt holds them, in its order, where the kit built the context (the
        reference system): what places the gold evidence in the window (:func:`fabnb.rag.grid.evidence_position`).
    batch : bool
        The reply came through the endpoint's batch routes (billed at the batch price).
    """

    answer: str
    sources: list | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    context_tokens: int = 0
    context_signal: float | None = None
    source_tokens: list | None = None
    batch: bool = False


@runtime_checkable
class RAGSystem(Protocol):
    """The adapter protocol: a name, a model label, whether sources are exposed, and ``ask``."""

    name: str
    model: str
    sources_exposed: bool

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:
        """Answer through the system's own retrieval (mode A), or from ``gold_context`` (mode B)."""


def prepare_system(system, configs: list) -> None:
    """Let a system get ready for the windows it will answer in before any question is asked: a system with a
    ``prepare(configs)`` method (an in-process framework builds and checks its pipelines there) has it called;
    one without needs nothing. A refusal raises the system's own error.

    >>> prepare_system(object(), [RAGConfig(4)])  # a system without prepare: nothing to do
    """
    prepare = getattr(system, "prepare", None)  # optional: the protocol's systems only need ask
    if prepare is not None:
        prepare(configs)


def count_context(texts) -> int:
    """Tokens of retrieved context as fabnb counts them: the texts joined by blank lines, as a prompt holds them
    (0 for none), what a system that fills its own window records as ``context_tokens``.

    >>> count_context([]), count_context(["two words"]) > 0
    (0, True)
    """
    texts = list(texts)
    return count_tokens("\n\n".join(texts)) if texts else 0


def context_prompt(question: str, context: str) -> list[dict]:
    """The chat messages for a question with its context (reference system and mode B)."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {question}\n\nAnswer:"}]


def check_answer(done) -> None:
    """The grid's answer check, run on a reply before it is cached: :class:`RAGError` ``empty-answer``."""
    if not done.text.strip():
        raise RAGError(f"{done.model} returned an empty answer (finish_reason={done.finish_reason}).",
                       "empty-answer")


def check_budget(question: str, config: RAGConfig) -> int:
    q = count_tokens(question)
    if q + PROMPT_OVERHEAD > config.input_budget:
        raise RAGError(f"the question has {q} tokens, more than the {config.input_budget}-token input budget of a "
                       f"{config.context_k}K context with {config.max_output_tokens} output tokens; raise context_k "
                       "or lower output_k.", "over-budget")
    return q


class ReferenceRAG:
    """A reference RAG system: a retriever over the chunked corpus and a chat model.

    Parameters
    ----------
    chunks : DataFrame
        From :func:`fabnb.corpus.collection.chunk_corpus`.
    llm : fabnb.models.llm.LLM
    retriever : str or Retriever
        ``"bm25"`` (default), ``"tfidf"``, ``"hybrid"``, or a :class:`Retriever`.
    name : str

    Examples
    --------
    It starts the embedded model's server (the suite runs it with the ``model`` tests).

    >>> import pandas as pd
    >>> from fabnb.models.local import default_llm
    >>> from fabnb.rag import ANYTHINGLLM_DEFAULTS
    >>> chunks = pd.DataFrame({"chunk_id": ["c1", "c2"], "doc_id": ["d1", "d2"],
    ...                        "text": ["EUV resists trade sensitivity against line-edge roughness.",
    ...                                 "Wafers are sliced from a silicon ingot."]})
    >>> rag = ReferenceRAG(chunks, default_llm())
    >>> answer = rag.ask("What limits EUV resist sensitivity?", RAGConfig(1, **ANYTHINGLLM_DEFAULTS))
    >>> answer.sources[0]["doc_id"], answer.context_tokens > 0
    ('d1', True)
    """

    sources_exposed = True

    def __init__(self, chunks: pd.DataFrame, llm, retriever="bm25", name: str | None = None):
        self.retriever = retriever if isinstance(retriever, Retriever) else make_retriever(chunks, retriever)
        self.llm = llm
        self.name = name or f"reference-{self.retriever.name}"
        self.model = llm.model
        self._hits: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ReferenceRAG(name={self.name!r}, model={self.model!r}, {len(self.retriever.chunks)} chunks)"

    def _ranked(self, question: str) -> tuple[pd.DataFrame, list[dict]]:
        # The retriever's hits, kept for the next call (as a frame and as records): a grid asks each
        # question at every window, and the ranking does not depend on the window.
        with self._lock:
            found = self._hits.get(question)
        if found is None:
            hits = self.retriever.search(question)
            found = (hits, hits.to_dict("records"))
            with self._lock:
                if len(self._hits) >= 1024:
                    self._hits.pop(next(iter(self._hits)))
                self._hits[question] = found
        return found

    def _pick(self, question: str, config: RAGConfig) -> tuple[pd.DataFrame, list[dict], list[int]]:
        q = check_budget(question, config)
        hits, records = self._ranked(question)
        used = pick_context([r["score"] for r in records], [r["n_tokens"] for r in records],
                            config.input_budget - q - PROMPT_OVERHEAD, config.n_snippets, config.threshold)
        return hits, records, used

    def retrieve(self, question: str, config: RAGConfig) -> pd.DataFrame:
        """The chunks that would go into the prompt for this question and configuration.

        Returns
        -------
        DataFrame
            rank, chunk_id, doc_id, score, n_tokens, text (:func:`select_context`).
        """
        hits, _, used = self._pick(question, config)
        return hits.iloc[used].reset_index(drop=True)

    def ask(self, question: str, config: RAGConfig, gold_context: str | None = None) -> Answer:

        if gold_context is None:
            _, records, used = self._pick(question, config)
            chosen = [records[i] for i in used]
            context = "\n\n".join(r["text"] for r in chosen)
            # From the chunks' own counts and one token per separator: within 0.2% of counting the
            # joined text (tested), without tokenizing up to 128K tokens again for every cell.
            context_tokens = sum(r["n_tokens"] for r in chosen) + max(0, len(chosen) - 1)
            sources = [{"id": r["chunk_id"], "doc_id": r["doc_id"], "text": r["text"], "score": float(r["score"])}
                       for r in chosen]
        else:
            return answer_from_context(self.llm, question, gold_context, config)
        answer = _complete(self.llm, question, context, config, sources, context_tokens)
        answer.source_tokens = [int(r["n_tokens"]) for r in chosen]
        return answer


    def ask_at(self, question: str, config: RAGConfig, gold_context: str, depth: float,
               gold_doc_ids=()) -> Answer:
        """Answer with the gold passage placed at ``depth`` (0 = first, 1 = last) among the window's other chunks:
        the position sweep's cell (mode ``P<percent>``, :func:`fabnb.rag.grid.position_mode`).

        The other chunks are the retriever's best for the question from documents other than the gold ones (hard
        distractors, as a real retrieval brings them), filling the window's budget left after the gold passage
        (itself cut to the budget) under the configuration's ``n_snippets`` and ``threshold``: with few of them
        the depths are coarse, and the cell's ``evidence_depth`` says where the passage really sat. The gold
        passage's source is ``{"id": "gold", "doc_id": "gold"}``.

        Examples
        --------
        It starts the embedded model's server (the suite runs it with the ``model`` tests).

        >>> import pandas as pd
        >>> from fabnb.models.local import default_llm
        >>> chunks = pd.DataFrame({"chunk_id": ["c1", "c2", "c3"], "doc_id": ["d1", "d2", "d3"],
        ...                        "text": ["Etch rates rise with power.", "Etch masks use hard oxide.",
        ...                                 "Etch selectivity is a ratio."]})
        >>> rag = ReferenceRAG(chunks, default_llm())
        >>> a = rag.ask_at("How do etch rates change?", RAGConfig(1), "Etch rates rise with RF power.", 1.0,
        ...                gold_doc_ids=["d1"])
        >>> [s["doc_id"] for s in a.sources], a.source_tokens[-1] > 0
        (['d2', 'd3', 'gold'], True)
        """
        if not 0.0 <= depth <= 1.0:
            raise ValueError(f"depth is a share of the window, 0 (first) to 1 (last); got {depth!r}.")
        q = check_budget(question, config)
        budget = config.input_budget - q - PROMPT_OVERHEAD
        gold, _ = truncate_tokens(gold_context, budget)
        gold_tokens = count_tokens(gold)
        _, records = self._ranked(question)
        skip = set(gold_doc_ids or ())
        others = [r for r in records if r["doc_id"] not in skip]
        used = pick_context([r["score"] for r in others], [r["n_tokens"] for r in others], budget - gold_tokens - 4,
                            config.n_snippets, config.threshold)
        chosen = [{"id": r["chunk_id"], "doc_id": r["doc_id"], "text": r["text"], "score": float(r["score"]),
                   "n_tokens": int(r["n_tokens"])} for r in (others[i] for i in used)]
        chosen.insert(int(depth * len(chosen) + 0.5),  # half up, not to even
                       {"id": "gold", "doc_id": "gold", "text": gold, "score": 1.0,
                                                   "n_tokens": gold_tokens})
        context = "\n\n".join(c["text"] for c in chosen)
        tokens = [c.pop("n_tokens") for c in chosen]
        answer = _complete(self.llm, question, context, config, chosen, sum(tokens) + len(tokens) - 1)
        answer.source_tokens = tokens
        return answer


add_kind(SystemKind("reference", "fabnb's reference RAG: a retriever (the table's retriever key) over the chunked "
                    "corpus and the file's model", reference=True, module=__name__))


def _complete(llm, question: str, context: str, config: RAGConfig, sources: list, context_tokens: int) -> Answer:
    start = time.perf_counter()
    try:
        # The answer check runs before the cache stores the reply: an empty answer is asked again on a rerun.
        done = llm.complete(context_prompt(question, context), max_tokens=config.max_output_tokens,
                            temperature=config.temperature, validate=check_answer)
    except LLMError as exc:
        raise RAGError(str(exc), exc.cause) from None
    return Answer(done.text, sources, done.latency_s or time.perf_counter() - start, done.prompt_tokens,
                  done.completion_tokens, context_tokens, batch=done.batch)


def answer_from_context(llm, question: str, gold_context: str, config: RAGConfig) -> Answer:
    """Mode B: ``llm`` answers from the gold context, cut to the window's budget, with the reference prompt.

    The one source is ``{"id": "gold", "doc_id": "gold"}``; every system kind that has an OpenAI-compatible
    endpoint (the reference system, the in-process frameworks) answers mode B through this.
    """
    q = check_budget(question, config)
    context, _ = truncate_tokens(gold_context, config.input_budget - q - PROMPT_OVERHEAD)
    sources = [{"id": "gold", "doc_id": "gold", "text": context, "score": 1.0}]
    return _complete(llm, question, context, config, sources, count_tokens(context))
