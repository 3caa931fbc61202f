"""llama-cpp-python's OpenAI-compatible server, with log-probabilities computed row by row when read.

llama-cpp-python 0.3.x answers a request for logprobs by turning the logits of *every*
evaluated token into log-probabilities in one call (``Llama.logits_to_logprobs(self._scores)``),
then keeps only the rows of the generated tokens. That call makes four temporary arrays of the
whole ``tokens x vocabulary`` matrix: with Gemma's 262,144-token vocabulary, about 4 MB per
prompt token on top of the 1 MB the logits take. A 430-token judge prompt took the server to
2.6 GB (measured), more than a Binder session has. Here a 2-D call returns the rows lazily: each
row is computed by the same function when the caller reads it, and only the generated tokens'
rows are read. One-dimensional calls (the streaming paths) are unchanged.

And it keeps only the logits it reads. With ``logits_all``, ``Llama.eval`` asks llama.cpp for the logits of
every prompt token and copies them into its ``tokens x vocabulary`` score matrix: 1 MB per prompt token,
of which a completion's log-probabilities read only the rows from the prompt's last token on (without
``echo``, which fabnb never asks for). Here each ``eval`` call asks for, and stores, the logits of its last
token only: the same row values, bit for bit (tested), and a 414-token judge prompt no longer costs 414 MB.

Started by :class:`fabnb.models.local.LocalServer` as ``python -m fabnb.models._llama_server`` with
llama-cpp-python's own flags.
"""

from __future__ import annotations

import numpy as np
from llama_cpp import llama as _llama

_original = _llama.Llama.logits_to_logprobs


class RowLogprobs:
    """Rows of log-probabilities of a logits matrix, each computed when it is read (slice, index, iterate)."""

    def __init__(self, logits: np.ndarray, rows: range | None = None):
        self.logits = logits
        self.rows = range(len(logits)) if rows is None else rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return RowLogprobs(self.logits, self.rows[key])
        return _original(self.logits[self.rows[key]])

    def __iter__(self):
        return (_original(self.logits[i]) for i in self.rows)


def logits_to_logprobs_by_row(logits, axis: int = -1):
    """:meth:`llama_cpp.Llama.logits_to_logprobs`; for a 2-D matrix, its rows computed when read."""
    array = np.asarray(logits)
    if array.ndim == 2 and axis in (-1, 1):
        return RowLogprobs(array)
    return _original(logits, axis=axis)


_original_eval = _llama.Llama.eval


def eval_keeping_last_rows(self, tokens) -> None:
    """:meth:`llama_cpp.Llama.eval`; with ``logits_all``, only each call's last token's logits are computed and stored.

    Prompt rows before the last are never read by a completion without ``echo``: a prompt is one call, each
    generated token another, so every row a completion's log-probabilities read is a call's last row.
    """
    if not self._logits_all:
        return _original_eval(self, tokens)
    self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
    for i in range(0, len(tokens), self.n_batch):
        batch = tokens[i:min(len(tokens), i + self.n_batch)]
        n_past, n_tokens = self.n_tokens, len(batch)
        self._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)  # logits for the batch's last token
        self._ctx.decode(self._batch)
        self.input_ids[n_past:n_past + n_tokens] = batch
        if i + n_tokens == len(tokens):
            self.scores[n_past + n_tokens - 1, :] = np.ctypeslib.as_array(self._ctx.get_logits(),
                                                                           shape=(self._n_vocab,))
        self.n_tokens += n_tokens
        self._requires_eval = False


_llama.Llama.logits_to_logprobs = staticmethod(logits_to_logprobs_by_row)
_llama.Llama.eval = eval_keeping_last_rows

if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    main()
