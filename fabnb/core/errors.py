"""One error family for the kit, and the one list of failure causes.

Every error fabnb raises on purpose derives from :class:`FabnbError`, so a user can
write ``except fabnb.FabnbError``. Errors of calls that can fail for a reason worth
recording (an LLM call, a RAG answer, a judge score) derive from :class:`CausedError`
and carry ``cause``: a short label from :data:`CAUSES`, the same label the stores write
in their ``cause`` column. Errors about bad input keep ``ValueError`` as a second base,
so code that catches ``ValueError`` still works.

Examples
--------
>>> from fabnb.core.errors import CausedError, FabnbError
>>> err = CausedError("the server answered 503", "http-503")
>>> isinstance(err, FabnbError), err.cause
(True, 'http-503')
>>> describe_cause("http-503")
'the server answered with this HTTP status (after its retries for 429 and 5xx)'
"""

from __future__ import annotations

__all__ = ["CAUSES", "CausedError", "FabnbError", "describe_cause"]


class FabnbError(Exception):
    """The base of every error fabnb raises on purpose."""


class CausedError(FabnbError):
    """An error with a machine-readable ``cause`` (one of :data:`CAUSES`).

    Parameters
    ----------
    message : str
        What went wrong, what was expected and how to fix it; never a secret.
    cause : str
        A label from :data:`CAUSES`.
    """

    def __init__(self, message: str, cause: str = "error"):
        super().__init__(message)
        self.cause = cause

    @property
    def _render_traceback_(self):
        # IPython's hook: in a notebook a missing or wrong setting is one line that names it and the
        # fix (the embedded model not installed on a Binder image, say), not a screen of frames.
        # For any other cause the attribute does not exist, so IPython shows the usual traceback.
        if self.cause != "config":
            raise AttributeError("_render_traceback_")
        return lambda: [f"{type(self).__name__}: {self}"]


#: Every cause a failed cell can carry in a store's ``cause`` column, and what it means.
#: ``http-NNN`` stands for any HTTP status, for example ``http-401``.
CAUSES: dict[str, str] = {
    # transport and server (fabnb.models.llm, the RAG adapters)
    "connection": "the server could not be reached, or it closed the connection before the reply was complete",
    "timeout": "the server accepted the request but did not answer within the timeout",
    "rate-limit": "the server answered 429 Too Many Requests on every attempt (Retry-After is honoured)",
    "http-NNN": "the server answered with this HTTP status (after its retries for 429 and 5xx)",
    "bad-body": "the server answered 200 with a body that is not JSON (an HTML page, a truncated or plain-text body)",
    "bad-response": "the server answered 200 with JSON that is not a chat completion (no choices, no message)",
    "error-body": "the server answered 200 with an error object instead of a completion",
    "server-died": "the embedded llama.cpp server process exited (its exit code or signal is in the message)",
    "server": "the embedded llama.cpp server could not be started",
    "config": "a setting is missing or wrong (an endpoint, a model name, an extra that is not installed)",
    # answers (fabnb.rag)
    "empty-answer": "the system answered with no text",
    "over-budget": "the question alone does not fit the context window's input budget",
    "no-gold-context": "mode B needs gold evidence, and the question has none",
    "no-position-sweep": "the system builds its own context: the position sweep cannot place the gold passage in it",
    "captured": "a batch run's collecting pass: the request was recorded for the batch, not sent (never stored)",
    "missing-embedding-model": "the dense retriever's model is not installed (the 'dense' extra)",
    # judge scores and oracle verdicts (fabnb.judge)
    "not-json": "the judge's output is not the JSON asked for",
    "missing-field": "the judge's JSON lacks the reason or the score",
    "out-of-range": "the judge's score is outside the rubric's scale",
    "copied-example": "the judge copied the prompt's example instead of judging",
}


def describe_cause(cause: str) -> str:
    """What a cause label means (``http-503`` reads as ``http-NNN``); unknown labels say so."""
    if cause.startswith("http-") and cause[5:].isdigit():
        cause = "http-NNN"
    return CAUSES.get(cause, f"not a documented cause: {cause!r} (an unexpected error; the message says more)")
