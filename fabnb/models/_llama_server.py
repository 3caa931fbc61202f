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

And a grammar (a JSON schema's ``response_format``) checks the token the sampler chain picked, not the whole
vocabulary: llama-cpp-python 0.3.x puts the grammar first in the chain, so every generated token matched all
262,144 of Gemma's tokens against the grammar (17.5 tokens/s against 67.5 without a grammar, measured on 2 cores).
Here, as llama.cpp's own server does (``common_sampler_sample``), the chain samples first; only a token the grammar
refuses makes it apply the grammar to every token and sample again. A greedy call gives the same tokens (tested);
at a temperature the token is drawn from the chain's candidates the grammar allows.

Started by :class:`fabnb.models.local.LocalServer` as ``python -m fabnb.models._llama_server`` with
llama-cpp-python's own flags.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
from llama_cpp import llama as _llama
from llama_cpp import llama_cpp as _c

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


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data
assert _TOKEN_DATA.itemsize == ctypes.sizeof(_c.llama_token_data)


class GrammarLastSampler:
    """A sampler chain and a grammar: the chain picks a token, the grammar checks that one token, and only a
    refused token makes the grammar filter every candidate before the chain picks again (llama.cpp's
    ``common_sampler_sample``). Used by :meth:`llama_cpp.Llama.sample` as its ``_sampler``."""

    def __init__(self, chain, grammar: int, n_vocab: int):
        self.chain, self.grammar, self.n_vocab = chain, grammar, n_vocab
        self.candidates = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self.ids = np.arange(n_vocab, dtype=np.int32)
        self.array = _c.llama_token_data_array(
            data=self.candidates.ctypes.data_as(_c.llama_token_data_p), size=n_vocab, selected=-1, sorted=False)
        self.one = np.zeros(1, dtype=_TOKEN_DATA)
        self.one_array = _c.llama_token_data_array(
            data=self.one.ctypes.data_as(_c.llama_token_data_p), size=1, selected=-1, sorted=False)

    def _pick(self, logits, grammar_first: bool) -> int:
        self.candidates["id"] = self.ids  # the chain sorts and cuts the array in place: refill it each time
        self.candidates["logit"] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        self.candidates["p"] = 0.0
        self.array.size, self.array.selected, self.array.sorted = self.n_vocab, -1, False
        if grammar_first:
            _c.llama_sampler_apply(self.grammar, ctypes.byref(self.array))
        _c.llama_sampler_apply(self.chain.sampler, ctypes.byref(self.array))
        if not 0 <= self.array.selected < self.array.size:  # llama_sampler_sample asserts the same
            raise RuntimeError(f"the sampler chain selected no token ({self.array.selected} of {self.array.size})")
        return int(self.candidates["id"][self.array.selected])

    def allows(self, token: int) -> bool:
        """Whether the grammar, in its present state, accepts ``token`` next."""
        self.one[0] = (token, 1.0, 0.0)
        self.one_array.size, self.one_array.selected, self.one_array.sorted = 1, -1, False
        _c.llama_sampler_apply(self.grammar, ctypes.byref(self.one_array))
        return not math.isinf(float(self.one["logit"][0]))

    def sample(self, ctx, idx: int) -> int:
        logits = _c.llama_get_logits_ith(ctx.ctx, idx)
        token = self._pick(logits, grammar_first=False)
        if not self.allows(token):
            token = self._pick(logits, grammar_first=True)
        _c.llama_sampler_accept(self.grammar, token)
        _c.llama_sampler_accept(self.chain.sampler, token)
        return token

    def __del__(self):
        if getattr(self, "grammar", None):
            _c.llama_sampler_free(self.grammar)
            self.grammar = None


_original_init_sampler = _llama.Llama._init_sampler


def init_sampler_grammar_last(self, *args, grammar=None, **kwargs):
    """:meth:`llama_cpp.Llama._init_sampler`; with a grammar, a :class:`GrammarLastSampler`."""
    chain = _original_init_sampler(self, *args, grammar=None, **kwargs)
    if grammar is None:
        return chain
    grmr = _c.llama_sampler_init_grammar(self._model.vocab, grammar._grammar.encode("utf-8"),
                                         grammar._root.encode("utf-8"))
    return GrammarLastSampler(chain, grmr, self._n_vocab)


_llama.Llama.logits_to_logprobs = staticmethod(logits_to_logprobs_by_row)
_llama.Llama.eval = eval_keeping_last_rows
_llama.Llama._init_sampler = init_sampler_grammar_last

if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    main()
