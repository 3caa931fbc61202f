"""RAG configuration: the context budget, snippets, threshold and output schedule (FAB-Bench §4.1), and RAGError."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import CausedError
from ..core.tokens import count_tokens, truncate_tokens

__all__ = ['ANYTHINGLLM_DEFAULTS', 'CONTEXT_INDICATORS', 'OUTPUT_SCHEDULE', 'PAPER_CONTEXTS', 'PROMPT_OVERHEAD',
           'QUESTION_TOKENS', 'RAGConfig', 'RAGError', 'SYSTEM_PROMPT', 'count_tokens', 'output_tokens', 'sweep',
           'truncate_tokens']

ANYTHINGLLM_DEFAULTS: dict = {"n_snippets": 4, "threshold": 0.25}
#: §4.1: output tokens by context window (K tokens): 1K at 4K, 2K at 8-10K, 4K from 12K.
OUTPUT_SCHEDULE: tuple[tuple[float, int], ...] = ((12, 4096), (8, 2048), (4, 1024))
#: The paper's eleven context configurations (K tokens) for the primary models.
PAPER_CONTEXTS: tuple[int, ...] = (4, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32)
#: Tokens kept for the prompt's own words (instructions, headings) when a budget is filled.
PROMPT_OVERHEAD = 64
#: Tokens a window keeps for the question when one pipeline serves every question (a framework's, a server's).
QUESTION_TOKENS = 256
#: Appendix F: phrases that betray use of a source when a system exposes none.
CONTEXT_INDICATORS: tuple[str, ...] = (
    "according to", "standard specifies", "the standard", "specified in", "as stated", "as described in",
    "the document", "the context", "the source", "referenced", "per the", "semi ", "semi-", "jedec", "iso ",
    "iec ", "astm", "table ", "section ")

SYSTEM_PROMPT = ("You are a technical assistant. Answer the question using the provided context. "
                 "If the context does not contain the answer, say that it does not.")


class RAGError(CausedError, RuntimeError):
    """A question a system could not answer; ``cause`` is a short machine-readable label.

    Causes: ``connection``, ``timeout``, ``http-<status>``, ``bad-response`` (fields
    missing), ``empty-answer``, ``over-budget`` (the question alone exceeds the budget).
    """


# ------------------------------------------------------------------ configuration


def output_tokens(context_k: float) -> int:
    """§4.1's output-token schedule: 1K at 4K, 2K at 8-10K, 4K from 12K.

    Budgets below 4K (small laptop sweeps on the embedded model) get a quarter of the window.

    Examples
    --------
    >>> [output_tokens(k) for k in (4, 8, 10, 12, 32, 128, 2)]
    [1024, 2048, 2048, 4096, 4096, 4096, 512]
    """
    for floor, tokens in OUTPUT_SCHEDULE:
        if context_k >= floor:
            return tokens
    return max(16, int(context_k * 1024 / 4))


@dataclass(frozen=True)
class RAGConfig:
    """One context configuration.

    Parameters
    ----------
    context_k : float
        Context window in K tokens (1K = 1,024). Retrieved text, question, prompt and
        the answer's output budget must fit in it.
    n_snippets : int, optional
        At most this many retrieved chunks (None: as many as fit).
    threshold : float
        Minimum retriever similarity (0-1) for a chunk to be used.
    output_k : float, optional
        Output budget in K tokens; default :func:`output_tokens`.
    temperature : float

    Examples
    --------
    >>> RAGConfig(4, **ANYTHINGLLM_DEFAULTS).max_output_tokens
    1024
    """

    context_k: float
    n_snippets: int | None = None
    threshold: float = 0.0
    output_k: float | None = None
    temperature: float = 0.0

    @property
    def max_output_tokens(self) -> int:
        return int(self.output_k * 1024) if self.output_k else output_tokens(self.context_k)

    @property
    def input_budget(self) -> int:
        """Tokens left for question, context and prompt once the answer's budget is set aside."""
        return int(self.context_k * 1024) - self.max_output_tokens

    @property
    def context_tokens(self) -> int:
        """Tokens of retrieved context a pipeline that serves every question may send: the input budget less the
        prompt's overhead and :data:`QUESTION_TOKENS` (what a framework's factory and a framework server are
        given)."""
        return max(0, self.input_budget - PROMPT_OVERHEAD - QUESTION_TOKENS)


def sweep(contexts=PAPER_CONTEXTS, **knobs) -> list[RAGConfig]:
    """One :class:`RAGConfig` per context size, the other knobs shared.

    Examples
    --------
    >>> [c.context_k for c in sweep((4, 8), **ANYTHINGLLM_DEFAULTS)]
    [4, 8]
    """
    return [RAGConfig(k, **knobs) for k in contexts]


